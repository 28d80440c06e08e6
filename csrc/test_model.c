/*
 * test_model.c -- randomized differential test of the engine against an
 * in-memory reference model.
 *
 * The model is a sorted array of keys, each with the list of its values in
 * insertion order.  Random operations are applied to both; every result is
 * compared, and every so often the whole content is walked with a cursor in
 * both directions and compared.  Transactions keep a deep copy of the model
 * taken at qs_begin and put it back on qs_abort.
 *
 * Variants: default options (sync on); a tiny cache (64 pages) so
 * transactions spill; a small checkpoint_bytes (64 KiB) so checkpoints are
 * frequent; both; persistent cursors that stay open while the casket
 * changes under them; three caskets driven at once from three threads.
 * On a failure the seed and the last 40 operations are printed.
 *
 *   QS_TEST_SEED=n     fix the seed (printed at the start of each variant)
 *   QS_TEST_OPS=n      operations per variant (default 6000, small: 800)
 *   QS_TEST_TRACE=1    print every operation
 *   QS_TEST_SCALE=small  fewer operations (for valgrind)
 */
#include <pthread.h>
#include <stdatomic.h>

#include "test_common.h"

/* ------------------------------------------------------------------ */
/* the reference model                                                 */

typedef struct {
    unsigned char *p;
    size_t n;
    uint64_t id;    /* values: unique, increasing in insertion order */
} mbuf;

static atomic_uint_fast64_t next_value_id = 1;
static long ops_count(void);

typedef struct {
    mbuf key;
    mbuf *v;
    size_t nv, cap;
} mentry;

typedef struct {
    mentry *e;
    size_t n, cap;
    uint64_t records;
} model;

static mbuf mb_dup(const void *p, size_t n)
{
    mbuf b;
    b.n = n;
    b.id = 0;
    b.p = malloc(n ? n : 1);
    if (n)
        memcpy(b.p, p, n);
    return b;
}

static int key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;
    if (c)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

/* first index whose key >= k */
static size_t m_lower(const model *m, const void *k, size_t kn)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(m->e[mid].key.p, m->e[mid].key.n, k, kn) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static mentry *m_find(const model *m, const void *k, size_t kn)
{
    size_t i = m_lower(m, k, kn);
    if (i < m->n && key_cmp(m->e[i].key.p, m->e[i].key.n, k, kn) == 0)
        return &m->e[i];
    return NULL;
}

static void m_entry_free(mentry *e)
{
    for (size_t j = 0; j < e->nv; j++)
        free(e->v[j].p);
    free(e->v);
    free(e->key.p);
}

static void m_remove_entry(model *m, size_t i)
{
    m->records -= m->e[i].nv;
    m_entry_free(&m->e[i]);
    memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof(mentry));
    m->n--;
}

static void m_putdup(model *m, const void *k, size_t kn, const void *v,
                     size_t vn)
{
    size_t i = m_lower(m, k, kn);
    if (!(i < m->n && key_cmp(m->e[i].key.p, m->e[i].key.n, k, kn) == 0)) {
        if (m->n == m->cap) {
            m->cap = m->cap ? m->cap * 2 : 64;
            m->e = realloc(m->e, m->cap * sizeof(mentry));
        }
        memmove(&m->e[i + 1], &m->e[i], (m->n - i) * sizeof(mentry));
        m->n++;
        memset(&m->e[i], 0, sizeof(mentry));
        m->e[i].key = mb_dup(k, kn);
    }
    mentry *e = &m->e[i];
    if (e->nv == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 4;
        e->v = realloc(e->v, e->cap * sizeof(mbuf));
    }
    e->v[e->nv] = mb_dup(v, vn);
    e->v[e->nv++].id = atomic_fetch_add(&next_value_id, 1);
    m->records++;
}

static void m_outlist(model *m, const void *k, size_t kn, uint64_t *removed)
{
    size_t i = m_lower(m, k, kn);
    *removed = 0;
    if (i < m->n && key_cmp(m->e[i].key.p, m->e[i].key.n, k, kn) == 0) {
        *removed = m->e[i].nv;
        m_remove_entry(m, i);
    }
}

/* removes value j of entry i; returns 1 when the entry went away */
static int m_remove_value(model *m, size_t i, size_t j)
{
    mentry *e = &m->e[i];
    free(e->v[j].p);
    memmove(&e->v[j], &e->v[j + 1], (e->nv - j - 1) * sizeof(mbuf));
    e->nv--;
    m->records--;
    if (e->nv == 0) {
        m_entry_free(e);
        memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof(mentry));
        m->n--;
        return 1;
    }
    return 0;
}

static void m_free(model *m)
{
    for (size_t i = 0; i < m->n; i++)
        m_entry_free(&m->e[i]);
    free(m->e);
    memset(m, 0, sizeof *m);
}

static void m_clone(model *dst, const model *src)
{
    dst->n = src->n;
    dst->cap = src->n ? src->n : 1;
    dst->records = src->records;
    dst->e = malloc(dst->cap * sizeof(mentry));
    for (size_t i = 0; i < src->n; i++) {
        const mentry *s = &src->e[i];
        mentry *d = &dst->e[i];
        d->key = mb_dup(s->key.p, s->key.n);
        d->nv = s->nv;
        d->cap = s->nv ? s->nv : 1;
        d->v = malloc(d->cap * sizeof(mbuf));
        for (size_t j = 0; j < s->nv; j++) {
            d->v[j] = mb_dup(s->v[j].p, s->v[j].n);
            d->v[j].id = s->v[j].id;
        }
    }
}

/* ------------------------------------------------------------------ */
/* test state                                                          */

typedef struct {
    const char *name;
    int sync;
    uint64_t cache_bytes;
    uint64_t checkpoint_bytes;
} variant;

#define NPOOL 160
#define TRACE_RING 40

typedef struct {
    tc_rng rng;
    uint64_t seed;
    tc_tmp tmp;
    const variant *var;
    qs_casket *c;
    model m, snap;
    int in_txn;
    long opno;
    mbuf pool[NPOOL];
    int trace;
    char ring[TRACE_RING][160];
    long ringpos;
    int failed;
    /* summed over handles: the stats reset on reopen */
    uint64_t spilled, checkpoints, commits;
    unsigned char *vbuf;    /* scratch for values */
} state;

static void note(state *s, const char *fmt, ...)
{
    char *line = s->ring[s->ringpos % TRACE_RING];
    int off = snprintf(line, 160, "#%ld ", s->opno);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + off, 160 - off, fmt, ap);
    va_end(ap);
    s->ringpos++;
    if (s->trace) {
        printf("  %s\n", line);
        fflush(stdout);
    }
}

static void dump_ring(state *s)
{
    printf("  seed %" PRIu64 " variant %s: failure at op %ld; last ops:\n",
           s->seed, s->var->name, s->opno);
    long start = s->ringpos > TRACE_RING ? s->ringpos - TRACE_RING : 0;
    for (long i = start; i < s->ringpos; i++)
        printf("    %s\n", s->ring[i % TRACE_RING]);
}

/* A failure ends the variant: print where and why, then the recent ops. */
#define MFAIL(s, ...)                                                        \
    do {                                                                     \
        printf("  %s:%d: [%s] ", __FILE__, __LINE__, tc_cur_name);           \
        printf(__VA_ARGS__);                                                 \
        printf("\n");                                                        \
        dump_ring(s);                                                        \
        tc_cur_failed = 1;                                                   \
        (s)->failed = 1;                                                     \
    } while (0)

#define MRC(s, expr, want)                                                   \
    do {                                                                     \
        int mrc_ = (expr), mwant_ = (want);                                  \
        if (mrc_ != mwant_) {                                                \
            MFAIL(s, "%s returned %d (%s), want %d (%s)", #expr, mrc_,       \
                  qs_strerror(mrc_), mwant_, qs_strerror(mwant_));           \
            return;                                                          \
        }                                                                    \
    } while (0)

static const char *khex(const mbuf *k, char *out, size_t cap)
{
    /* short printable description of a key: length and first bytes */
    int off = snprintf(out, cap, "[%zu:", k->n);
    for (size_t i = 0; i < k->n && i < 8 && off + 4 < (int)cap; i++)
        off += snprintf(out + off, cap - off, "%02x", k->p[i]);
    snprintf(out + off, cap - off, "%s]", k->n > 8 ? ".." : "");
    return out;
}

static void make_pool(state *s)
{
    static const unsigned char alpha[] = {'a', 'b', 'c', 0x00, 0xff};
    int i = 0;
    s->pool[i++] = mb_dup("", 0);
    unsigned char tmp[5000];
    while (i < NPOOL) {
        uint64_t r = tc_below(&s->rng, 100);
        size_t n;
        if (r < 20) {
            /* 7..17 bytes from an alphabet with high-bit and zero bytes,
             * many sharing the first bytes: word-at-a-time comparisons */
            static const unsigned char hb[] = {0x00, 0x01, 0x7f, 0x80, 0xfe,
                                               0xff, 'a'};
            n = 7 + tc_below(&s->rng, 11);
            for (size_t j = 0; j < n; j++)
                tmp[j] = j < 3 && tc_below(&s->rng, 2)
                             ? 'w'
                             : hb[tc_below(&s->rng, sizeof hb)];
        } else if (r < 78) {
            n = 1 + tc_below(&s->rng, 6);
            for (size_t j = 0; j < n; j++)
                tmp[j] = alpha[tc_below(&s->rng, sizeof alpha)];
        } else if (r < 90) {
            /* medium keys with a shared prefix */
            n = 20 + tc_below(&s->rng, 400);
            memset(tmp, 'm', n);
            tmp[n - 1] = alpha[tc_below(&s->rng, sizeof alpha)];
            tmp[n / 2] = alpha[tc_below(&s->rng, sizeof alpha)];
        } else {
            /* long keys (overflow): long common prefix, differing late */
            n = 1000 + tc_below(&s->rng, 4001);
            memset(tmp, 'L', n);
            tmp[n - 1] = alpha[tc_below(&s->rng, sizeof alpha)];
            tmp[n - 2 - tc_below(&s->rng, 3)] =
                alpha[tc_below(&s->rng, sizeof alpha)];
            if (tc_below(&s->rng, 2))
                n -= tc_below(&s->rng, 3); /* prefixes of each other */
        }
        s->pool[i++] = mb_dup(tmp, n);
    }
}

static const mbuf *pick_key(state *s)
{
    return &s->pool[tc_below(&s->rng, NPOOL)];
}

static size_t pick_vlen(state *s)
{
    uint64_t r = tc_below(&s->rng, 100);
    if (r < 10)
        return 0;
    if (r < 60)
        return 1 + tc_below(&s->rng, 40);
    if (r < 85)
        return 40 + tc_below(&s->rng, 1000);
    if (r < 94)
        return 1000 + tc_below(&s->rng, 4000);
    return 4000 + tc_below(&s->rng, 16 * 1024 + 1);
}

/* fills s->vbuf with a fresh value and returns its length */
static size_t make_val(state *s)
{
    size_t n = pick_vlen(s);
    tc_fill(&s->rng, s->vbuf, n);
    return n;
}

/* ------------------------------------------------------------------ */
/* open / close                                                        */

static int do_open(state *s, int mode)
{
    int rc;
    s->c = tc_open(s->tmp.path, mode, s->var->sync, s->var->cache_bytes,
                   s->var->checkpoint_bytes, &rc);
    return rc;
}

static void collect_stats(state *s)
{
    qs_stat st;
    if (qs_stat_get(s->c, &st) == 0) {
        s->spilled += st.spilled_pages;
        s->checkpoints += st.checkpoints;
        s->commits += st.commits;
    }
}

/* ------------------------------------------------------------------ */
/* full comparison                                                     */

static void compare_record(state *s, qs_cursor *cur, size_t i, size_t j,
                           const char *dir)
{
    void *k = NULL, *v = NULL;
    size_t kn = 0, vn = 0;
    int rc = qs_cursor_get(cur, &k, &kn, &v, &vn);
    if (rc != 0) {
        MFAIL(s, "%s walk: cursor_get at entry %zu dup %zu: %d (%s)", dir, i,
              j, rc, qs_strerror(rc));
        return;
    }
    const mentry *e = &s->m.e[i];
    char kb[64];
    if (kn != e->key.n || (kn && memcmp(k, e->key.p, kn) != 0))
        MFAIL(s, "%s walk: key mismatch at entry %zu: got len %zu, want %s",
              dir, i, kn, khex(&e->key, kb, sizeof kb));
    else if (vn != e->v[j].n || (vn && memcmp(v, e->v[j].p, vn) != 0))
        MFAIL(s, "%s walk: value mismatch at key %s dup %zu/%zu: got len "
              "%zu, want len %zu", dir, khex(&e->key, kb, sizeof kb), j,
              e->nv, vn, e->v[j].n);
    qs_free(k);
    qs_free(v);
}

static void full_compare(state *s)
{
    uint64_t recs = 0;
    MRC(s, qs_records(s->c, &recs), 0);
    if (recs != s->m.records) {
        MFAIL(s, "qs_records %" PRIu64 " != model %" PRIu64, recs,
              s->m.records);
        return;
    }
    qs_cursor *cur = NULL;
    MRC(s, qs_cursor_open(s->c, &cur), 0);

    /* forward */
    int rc = qs_cursor_first(cur);
    uint64_t seen = 0;
    for (size_t i = 0; i < s->m.n && !s->failed; i++) {
        for (size_t j = 0; j < s->m.e[i].nv && !s->failed; j++) {
            if (rc != 0) {
                MFAIL(s, "forward walk: cursor ended (%d %s) after %" PRIu64
                      " records, model has %" PRIu64, rc, qs_strerror(rc),
                      seen, s->m.records);
                break;
            }
            compare_record(s, cur, i, j, "forward");
            seen++;
            rc = qs_cursor_next(cur);
        }
    }
    if (!s->failed && rc != QS_NOTFOUND)
        MFAIL(s, "forward walk: cursor did not end (%d) after %" PRIu64
              " records", rc, seen);

    /* backward */
    rc = qs_cursor_last(cur);
    seen = 0;
    for (size_t i = s->m.n; i-- > 0 && !s->failed;) {
        for (size_t j = s->m.e[i].nv; j-- > 0 && !s->failed;) {
            if (rc != 0) {
                MFAIL(s, "backward walk: cursor ended (%d %s) after %" PRIu64
                      " records, model has %" PRIu64, rc, qs_strerror(rc),
                      seen, s->m.records);
                break;
            }
            compare_record(s, cur, i, j, "backward");
            seen++;
            rc = qs_cursor_prev(cur);
        }
    }
    if (!s->failed && rc != QS_NOTFOUND)
        MFAIL(s, "backward walk: cursor did not end (%d) after %" PRIu64
              " records", rc, seen);
    qs_cursor_close(cur);
}

/* compare with qs_cursor_read in chunks, forward or backward */
static void bulk_compare(state *s, int reverse)
{
    qs_cursor *cur = NULL;
    MRC(s, qs_cursor_open(s->c, &cur), 0);
    int rc = reverse ? qs_cursor_last(cur) : qs_cursor_first(cur);
    if (s->m.records == 0) {
        if (rc != QS_NOTFOUND)
            MFAIL(s, "bulk: first/last on empty casket gave %d", rc);
        qs_cursor_close(cur);
        return;
    }
    if (rc != 0) {
        MFAIL(s, "bulk: first/last gave %d (%s)", rc, qs_strerror(rc));
        qs_cursor_close(cur);
        return;
    }
    size_t i = reverse ? s->m.n - 1 : 0;
    size_t j = reverse ? s->m.e[i].nv - 1 : 0;
    uint64_t left = s->m.records;
    while (!s->failed) {
        size_t max = 1 + tc_below(&s->rng, 300);
        void *out = NULL;
        size_t outlen = 0;
        uint64_t count = 99;
        rc = qs_cursor_read(cur, max, reverse, &out, &outlen, &count);
        if (left == 0) {
            if (!((rc == 0 && count == 0) || rc == QS_NOTFOUND))
                MFAIL(s, "bulk: read at end gave rc %d count %" PRIu64, rc,
                      count);
            qs_free(out);
            break;
        }
        if (rc != 0) {
            MFAIL(s, "bulk: cursor_read gave %d (%s) with %" PRIu64
                  " records left", rc, qs_strerror(rc), left);
            qs_free(out);
            break;
        }
        uint64_t want = left < max ? left : max;
        if (count != want) {
            MFAIL(s, "bulk: cursor_read(max %zu) count %" PRIu64 " want %"
                  PRIu64, max, count, want);
            qs_free(out);
            break;
        }
        const unsigned char *p = out, *end = p + outlen;
        for (uint64_t r = 0; r < count && !s->failed; r++) {
            const mentry *e = &s->m.e[i];
            if (end - p < 4) { MFAIL(s, "bulk: short buffer"); break; }
            uint32_t kl = tc_le32(p);
            p += 4;
            if ((size_t)(end - p) < kl || kl != e->key.n ||
                (kl && memcmp(p, e->key.p, kl) != 0)) {
                MFAIL(s, "bulk(%s): key mismatch at record %" PRIu64,
                      reverse ? "reverse" : "forward", r);
                break;
            }
            p += kl;
            if (end - p < 4) { MFAIL(s, "bulk: short buffer"); break; }
            uint32_t vl = tc_le32(p);
            p += 4;
            if ((size_t)(end - p) < vl || vl != e->v[j].n ||
                (vl && memcmp(p, e->v[j].p, vl) != 0)) {
                MFAIL(s, "bulk(%s): value mismatch at record %" PRIu64
                      " (entry %zu dup %zu)", reverse ? "reverse" : "forward",
                      r, i, j);
                break;
            }
            p += vl;
            left--;
            if (!reverse) {
                if (++j == e->nv) { j = 0; i++; }
            } else {
                if (j-- == 0) {
                    if (i-- > 0)
                        j = s->m.e[i].nv - 1;
                }
            }
        }
        if (!s->failed && p != end)
            MFAIL(s, "bulk: %td trailing bytes in cursor_read output",
                  end - p);
        qs_free(out);
    }
    qs_cursor_close(cur);
}

/* ------------------------------------------------------------------ */
/* cursor sessions                                                     */

typedef struct {
    int valid;
    size_t i, j;
} mpos;

static void cur_expect_at(state *s, qs_cursor *cur, const mpos *p,
                          const char *what)
{
    void *k = NULL, *v = NULL;
    size_t kn = 0, vn = 0;
    int mode = (int)tc_below(&s->rng, 3); /* 0 both, 1 key only, 2 value */
    int rc = qs_cursor_get(cur, mode == 2 ? NULL : &k, mode == 2 ? NULL : &kn,
                           mode == 1 ? NULL : &v, mode == 1 ? NULL : &vn);
    if (!p->valid) {
        if (rc != QS_NOTFOUND)
            MFAIL(s, "after %s: cursor_get on unpositioned cursor gave %d",
                  what, rc);
        qs_free(k);
        qs_free(v);
        return;
    }
    if (rc != 0) {
        MFAIL(s, "after %s: cursor_get gave %d (%s), model at entry %zu dup "
              "%zu", what, rc, qs_strerror(rc), p->i, p->j);
        return;
    }
    const mentry *e = &s->m.e[p->i];
    char kb[64];
    if (mode != 2 && (kn != e->key.n || (kn && memcmp(k, e->key.p, kn))))
        MFAIL(s, "after %s: cursor key len %zu, model %s", what, kn,
              khex(&e->key, kb, sizeof kb));
    else if (mode != 1 && (vn != e->v[p->j].n ||
                           (vn && memcmp(v, e->v[p->j].p, vn))))
        MFAIL(s, "after %s: cursor value len %zu, model key %s dup %zu/%zu "
              "len %zu", what, vn, khex(&e->key, kb, sizeof kb), p->j, e->nv,
              e->v[p->j].n);
    qs_free(k);
    qs_free(v);
}

static void mpos_next(const model *m, mpos *p)
{
    if (++p->j < m->e[p->i].nv)
        return;
    p->j = 0;
    if (++p->i >= m->n)
        p->valid = 0;
}

static void mpos_prev(const model *m, mpos *p)
{
    if (p->j > 0) {
        p->j--;
        return;
    }
    if (p->i == 0) {
        p->valid = 0;
        return;
    }
    p->i--;
    p->j = m->e[p->i].nv - 1;
}

static void cursor_session(state *s, int bulk_delete)
{
    qs_cursor *cur = NULL;
    MRC(s, qs_cursor_open(s->c, &cur), 0);
    mpos p = {0, 0, 0};
    int steps = bulk_delete ? 1 + (int)tc_below(&s->rng, 120)
                            : 1 + (int)tc_below(&s->rng, 25);
    char kb[64];
    if (bulk_delete) {
        const mbuf *k = pick_key(s);
        note(s, "cursor bulk delete from %s x%d",
             khex(k, kb, sizeof kb), steps);
        size_t i = m_lower(&s->m, k->p, k->n);
        int rc = qs_cursor_jump(cur, k->p, k->n);
        if (i >= s->m.n) {
            if (rc != QS_NOTFOUND)
                MFAIL(s, "cursor_jump past the end gave %d", rc);
            qs_cursor_close(cur);
            return;
        }
        if (rc != 0) {
            MFAIL(s, "cursor_jump gave %d (%s)", rc, qs_strerror(rc));
            qs_cursor_close(cur);
            return;
        }
        p.valid = 1;
        p.i = i;
        p.j = 0;
        for (int n = 0; n < steps && p.valid && !s->failed; n++) {
            rc = qs_cursor_out(cur);
            if (m_remove_value(&s->m, p.i, p.j)) {
                p.j = 0;
            } else if (p.j >= s->m.e[p.i].nv) {
                p.j = 0;
                p.i++;
            }
            if (p.i >= s->m.n)
                p.valid = 0;
            int want = p.valid ? 0 : QS_NOTFOUND;
            if (rc != want) {
                MFAIL(s, "cursor_out #%d gave %d (%s), want %d", n, rc,
                      qs_strerror(rc), want);
                break;
            }
        }
        if (!s->failed)
            cur_expect_at(s, cur, &p, "bulk cursor_out");
        qs_cursor_close(cur);
        return;
    }

    note(s, "cursor session x%d", steps);
    for (int n = 0; n < steps && !s->failed; n++) {
        uint64_t r = tc_below(&s->rng, 100);
        int rc, want;
        const char *what;
        if (!p.valid && r >= 30)
            r = tc_below(&s->rng, 30); /* only positioning when unpositioned */
        if (r < 8) {
            what = "first";
            rc = qs_cursor_first(cur);
            p.valid = s->m.n > 0;
            p.i = p.j = 0;
        } else if (r < 16) {
            what = "last";
            rc = qs_cursor_last(cur);
            p.valid = s->m.n > 0;
            if (p.valid) {
                p.i = s->m.n - 1;
                p.j = s->m.e[p.i].nv - 1;
            }
        } else if (r < 30) {
            what = "jump";
            mbuf rk;
            unsigned char tmp[8];
            const mbuf *k;
            if (tc_below(&s->rng, 4) == 0) {
                /* a key probably not in the pool */
                rk.n = tc_below(&s->rng, 7);
                for (size_t q = 0; q < rk.n; q++)
                    tmp[q] = "abcLm\0\xff"[tc_below(&s->rng, 7)];
                rk.p = tmp;
                k = &rk;
            } else {
                k = pick_key(s);
            }
            note(s, "  jump %s", khex(k, kb, sizeof kb));
            rc = qs_cursor_jump(cur, k->p, k->n);
            p.i = m_lower(&s->m, k->p, k->n);
            p.j = 0;
            p.valid = p.i < s->m.n;
        } else if (r < 52) {
            what = "next";
            rc = qs_cursor_next(cur);
            mpos_next(&s->m, &p);
        } else if (r < 70) {
            what = "prev";
            rc = qs_cursor_prev(cur);
            mpos_prev(&s->m, &p);
        } else if (r < 80) {
            what = "get";
            cur_expect_at(s, cur, &p, "get");
            continue;
        } else if (r < 90) {
            /* cursor_read: compare and advance the model position */
            size_t max = 1 + tc_below(&s->rng, 20);
            int rev = (int)tc_below(&s->rng, 2);
            note(s, "  read max %zu %s", max, rev ? "reverse" : "forward");
            void *out = NULL;
            size_t outlen = 0;
            uint64_t count = 99;
            rc = qs_cursor_read(cur, max, rev, &out, &outlen, &count);
            if (rc != 0) {
                MFAIL(s, "cursor_read gave %d (%s)", rc, qs_strerror(rc));
                qs_free(out);
                break;
            }
            const unsigned char *q = out, *end = q + outlen;
            uint64_t got = 0;
            while (p.valid && got < max && !s->failed) {
                const mentry *e = &s->m.e[p.i];
                if (got >= count) {
                    MFAIL(s, "cursor_read returned %" PRIu64 " records, "
                          "model has more (max %zu)", count, max);
                    break;
                }
                uint32_t kl = end - q >= 4 ? tc_le32(q) : 0xffffffffu;
                q += 4;
                if (kl == 0xffffffffu || (size_t)(end - q) < kl ||
                    kl != e->key.n || (kl && memcmp(q, e->key.p, kl))) {
                    MFAIL(s, "cursor_read record %" PRIu64 ": key mismatch, "
                          "model %s", got, khex(&e->key, kb, sizeof kb));
                    break;
                }
                q += kl;
                uint32_t vl = end - q >= 4 ? tc_le32(q) : 0xffffffffu;
                q += 4;
                if (vl == 0xffffffffu || (size_t)(end - q) < vl ||
                    vl != e->v[p.j].n || (vl && memcmp(q, e->v[p.j].p, vl))) {
                    MFAIL(s, "cursor_read record %" PRIu64 ": value "
                          "mismatch", got);
                    break;
                }
                q += vl;
                got++;
                if (rev)
                    mpos_prev(&s->m, &p);
                else
                    mpos_next(&s->m, &p);
            }
            if (!s->failed && got != count)
                MFAIL(s, "cursor_read returned %" PRIu64 " records, model %"
                      PRIu64, count, got);
            if (!s->failed && q != end)
                MFAIL(s, "cursor_read: %td trailing bytes", end - q);
            qs_free(out);
            if (!s->failed)
                cur_expect_at(s, cur, &p, "read");
            continue;
        } else {
            what = "out";
            rc = qs_cursor_out(cur);
            if (m_remove_value(&s->m, p.i, p.j)) {
                p.j = 0;
            } else if (p.j >= s->m.e[p.i].nv) {
                p.j = 0;
                p.i++;
            }
            if (p.i >= s->m.n)
                p.valid = 0;
        }
        note(s, "  %s", what);
        want = p.valid ? 0 : QS_NOTFOUND;
        if (rc != want) {
            MFAIL(s, "cursor %s gave %d (%s), want %d", what, rc,
                  qs_strerror(rc), want);
            break;
        }
        if (tc_below(&s->rng, 2))
            cur_expect_at(s, cur, &p, what);
    }
    qs_cursor_close(cur);
}

/* ------------------------------------------------------------------ */
/* single operations                                                   */

static void op_get(state *s, const mbuf *k)
{
    void *v = (void *)0x1;
    size_t vn = 12345;
    int rc = qs_get(s->c, k->p, k->n, &v, &vn);
    mentry *e = m_find(&s->m, k->p, k->n);
    char kb[64];
    if (!e) {
        if (rc != QS_NOTFOUND)
            MFAIL(s, "qs_get(%s) gave %d, want NOTFOUND",
                  khex(k, kb, sizeof kb), rc);
        else if (v != NULL)
            MFAIL(s, "qs_get NOTFOUND left *val non-NULL");
        return;
    }
    if (rc != 0) {
        MFAIL(s, "qs_get(%s) gave %d (%s)", khex(k, kb, sizeof kb), rc,
              qs_strerror(rc));
        return;
    }
    if (vn != e->v[0].n || (vn && memcmp(v, e->v[0].p, vn)))
        MFAIL(s, "qs_get(%s): value len %zu, want len %zu",
              khex(k, kb, sizeof kb), vn, e->v[0].n);
    qs_free(v);
}

static void op_getdup(state *s, const mbuf *k)
{
    void *out = (void *)0x1;
    size_t outlen = 7;
    uint64_t count = 7;
    char kb[64];
    int rc = qs_getdup(s->c, k->p, k->n, &out, &outlen, &count);
    if (rc != 0) {
        MFAIL(s, "qs_getdup(%s) gave %d (%s)", khex(k, kb, sizeof kb), rc,
              qs_strerror(rc));
        return;
    }
    mentry *e = m_find(&s->m, k->p, k->n);
    if (!e) {
        if (count != 0 || out != NULL)
            MFAIL(s, "qs_getdup(%s) absent: count %" PRIu64 " out %p",
                  khex(k, kb, sizeof kb), count, out);
        else if (outlen != 0)
            MFAIL(s, "qs_getdup absent: outlen %zu", outlen);
        return;
    }
    if (count != e->nv) {
        MFAIL(s, "qs_getdup(%s): count %" PRIu64 " want %zu",
              khex(k, kb, sizeof kb), count, e->nv);
        qs_free(out);
        return;
    }
    const unsigned char *p = out, *end = p + outlen;
    for (size_t j = 0; j < e->nv; j++) {
        if (end - p < 4) { MFAIL(s, "qs_getdup: short buffer"); break; }
        uint32_t n = tc_le32(p);
        p += 4;
        if ((size_t)(end - p) < n || n != e->v[j].n ||
            (n && memcmp(p, e->v[j].p, n))) {
            MFAIL(s, "qs_getdup(%s): value %zu mismatch (len %u want %zu)",
                  khex(k, kb, sizeof kb), j, n, e->v[j].n);
            break;
        }
        p += n;
    }
    if (!s->failed && p != end)
        MFAIL(s, "qs_getdup: %td trailing bytes", end - p);
    qs_free(out);
}

static void op_putdup_many(state *s, int bad)
{
    size_t n = 1 + tc_below(&s->rng, 100);
    uint64_t *koff = malloc((n + 1) * sizeof *koff);
    uint64_t *voff = malloc((n + 1) * sizeof *voff);
    size_t kcap = 1024, vcap = 1024, kl = 0, vl = 0;
    unsigned char *keys = malloc(kcap), *vals = malloc(vcap);
    size_t badi = bad ? tc_below(&s->rng, n) : (size_t)-1;
    koff[0] = voff[0] = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char kb[QS_MAX_KEY + 1];
        size_t kn;
        if (i == badi) {
            kn = QS_MAX_KEY + 1;
            memset(kb, 'x', kn);
        } else if (tc_below(&s->rng, 3) == 0) {
            const mbuf *k = pick_key(s);
            kn = k->n;
            memcpy(kb, k->p, kn);
        } else {
            kn = (size_t)snprintf((char *)kb, sizeof kb, "n%05u",
                                  (unsigned)tc_below(&s->rng, 30000));
        }
        size_t vn = tc_below(&s->rng, 10) ? tc_below(&s->rng, 60)
                                         : pick_vlen(s);
        while (kl + kn > kcap) keys = realloc(keys, kcap *= 2);
        while (vl + vn > vcap) vals = realloc(vals, vcap *= 2);
        memcpy(keys + kl, kb, kn);
        tc_fill(&s->rng, vals + vl, vn);
        kl += kn;
        vl += vn;
        koff[i + 1] = kl;
        voff[i + 1] = vl;
    }
    note(s, "putdup_many n=%zu%s", n, bad ? " (one key too big)" : "");
    int rc = qs_putdup_many(s->c, n, keys, koff, vals, voff);
    if (bad) {
        if (rc != QS_TOOBIG)
            MFAIL(s, "putdup_many with a too-long key gave %d, want TOOBIG",
                  rc);
    } else if (rc != 0) {
        MFAIL(s, "putdup_many gave %d (%s)", rc, qs_strerror(rc));
    } else {
        for (size_t i = 0; i < n; i++)
            m_putdup(&s->m, keys + koff[i], koff[i + 1] - koff[i],
                     vals + voff[i], voff[i + 1] - voff[i]);
    }
    free(keys);
    free(vals);
    free(koff);
    free(voff);
}

static void do_reopen(state *s)
{
    collect_stats(s);
    int rc = qs_close(s->c);
    s->c = NULL;
    if (rc != 0) {
        MFAIL(s, "qs_close gave %d (%s)", rc, qs_strerror(rc));
        return;
    }
    rc = do_open(s, tc_below(&s->rng, 2) ? QS_OPEN_WRITE : QS_OPEN_CREATE);
    if (rc != 0) {
        MFAIL(s, "reopen gave %d (%s)", rc, qs_strerror(rc));
        return;
    }
    char msg[512] = "";
    rc = qs_check(s->c, msg, sizeof msg);
    if (rc != 0)
        MFAIL(s, "qs_check after reopen gave %d (%s): %s", rc,
              qs_strerror(rc), msg);
}

static void one_op(state *s)
{
    uint64_t r = tc_below(&s->rng, 1000);
    char kb[64];
    int rc;
    if (r < 110) {                                  /* put */
        const mbuf *k = pick_key(s);
        size_t vn = make_val(s);
        note(s, "put %s vlen %zu", khex(k, kb, sizeof kb), vn);
        MRC(s, qs_put(s->c, k->p, k->n, s->vbuf, vn), 0);
        uint64_t dummy;
        m_outlist(&s->m, k->p, k->n, &dummy);
        m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
    } else if (r < 160) {                           /* putkeep */
        const mbuf *k = pick_key(s);
        size_t vn = make_val(s);
        note(s, "putkeep %s vlen %zu", khex(k, kb, sizeof kb), vn);
        int want = m_find(&s->m, k->p, k->n) ? QS_KEYEXIST : 0;
        MRC(s, qs_putkeep(s->c, k->p, k->n, s->vbuf, vn), want);
        if (want == 0)
            m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
    } else if (r < 330) {                           /* putdup */
        const mbuf *k = pick_key(s);
        size_t vn = make_val(s);
        note(s, "putdup %s vlen %zu", khex(k, kb, sizeof kb), vn);
        MRC(s, qs_putdup(s->c, k->p, k->n, s->vbuf, vn), 0);
        m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
    } else if (r < 370) {                           /* putdup_many */
        op_putdup_many(s, tc_below(&s->rng, 15) == 0);
    } else if (r < 470) {                           /* get */
        const mbuf *k = pick_key(s);
        note(s, "get %s", khex(k, kb, sizeof kb));
        op_get(s, k);
    } else if (r < 520) {                           /* getdup */
        const mbuf *k = pick_key(s);
        note(s, "getdup %s", khex(k, kb, sizeof kb));
        op_getdup(s, k);
    } else if (r < 560) {                           /* count */
        const mbuf *k = pick_key(s);
        note(s, "count %s", khex(k, kb, sizeof kb));
        uint64_t cnt = 99;
        MRC(s, qs_count(s->c, k->p, k->n, &cnt), 0);
        mentry *e = m_find(&s->m, k->p, k->n);
        if (cnt != (e ? e->nv : 0))
            MFAIL(s, "qs_count(%s) %" PRIu64 " want %zu",
                  khex(k, kb, sizeof kb), cnt, e ? e->nv : 0);
    } else if (r < 580) {                           /* records + stat */
        note(s, "records");
        uint64_t n = 0;
        MRC(s, qs_records(s->c, &n), 0);
        if (n != s->m.records)
            MFAIL(s, "qs_records %" PRIu64 " want %" PRIu64, n,
                  s->m.records);
        qs_stat st;
        MRC(s, qs_stat_get(s->c, &st), 0);
        /* inside a transaction stat.records may be either view */
        if (!s->in_txn && st.records != s->m.records)
            MFAIL(s, "stat.records %" PRIu64 " want %" PRIu64, st.records,
                  s->m.records);
        if (!st.in_transaction != !s->in_txn)
            MFAIL(s, "stat.in_transaction %u, txn %d", st.in_transaction,
                  s->in_txn);
        if (st.page_size != QS_PAGE_SIZE)
            MFAIL(s, "stat.page_size %u", st.page_size);
    } else if (r < 660) {                           /* out */
        const mbuf *k = pick_key(s);
        note(s, "out %s", khex(k, kb, sizeof kb));
        size_t i = m_lower(&s->m, k->p, k->n);
        int have = i < s->m.n &&
                   key_cmp(s->m.e[i].key.p, s->m.e[i].key.n, k->p, k->n) == 0;
        MRC(s, qs_out(s->c, k->p, k->n), have ? 0 : QS_NOTFOUND);
        if (have)
            m_remove_value(&s->m, i, 0);
    } else if (r < 700) {                           /* outlist */
        const mbuf *k = pick_key(s);
        note(s, "outlist %s", khex(k, kb, sizeof kb));
        uint64_t removed = 99, want;
        m_outlist(&s->m, k->p, k->n, &want);
        rc = qs_outlist(s->c, k->p, k->n,
                        tc_below(&s->rng, 5) ? &removed : NULL);
        if (rc == QS_NOTFOUND && want == 0)
            ; /* an absent key: 0 or NOTFOUND are both reasonable */
        else if (rc != 0)
            MFAIL(s, "qs_outlist gave %d (%s)", rc, qs_strerror(rc));
        else if (removed != 99 && removed != want)
            MFAIL(s, "qs_outlist removed %" PRIu64 " want %" PRIu64,
                  removed, want);
    } else if (r < 800) {                           /* cursor session */
        cursor_session(s, 0);
    } else if (r < 830) {                           /* bulk delete */
        cursor_session(s, 1);
    } else if (r < 870) {                           /* begin */
        if (s->in_txn) {
            note(s, "begin (nested)");
            MRC(s, qs_begin(s->c), QS_TXN);
        } else {
            note(s, "begin");
            MRC(s, qs_begin(s->c), 0);
            s->in_txn = 1;
            m_clone(&s->snap, &s->m);
        }
        if (!qs_in_transaction(s->c))
            MFAIL(s, "qs_in_transaction is 0 inside a transaction");
    } else if (r < 905) {                           /* commit */
        if (!s->in_txn) {
            note(s, "commit (none)");
            MRC(s, qs_commit(s->c), QS_TXN);
        } else {
            note(s, "commit");
            MRC(s, qs_commit(s->c), 0);
            s->in_txn = 0;
            m_free(&s->snap);
        }
        if (qs_in_transaction(s->c))
            MFAIL(s, "qs_in_transaction nonzero after commit");
    } else if (r < 925) {                           /* abort */
        if (!s->in_txn) {
            note(s, "abort (none)");
            MRC(s, qs_abort(s->c), QS_TXN);
        } else {
            note(s, "abort");
            MRC(s, qs_abort(s->c), 0);
            s->in_txn = 0;
            m_free(&s->m);
            s->m = s->snap;
            memset(&s->snap, 0, sizeof s->snap);
        }
    } else if (r < 940) {                           /* failing writes */
        unsigned char big[QS_MAX_KEY + 1];
        memset(big, 'z', sizeof big);
        note(s, "put/putdup/putkeep with a too-long key");
        MRC(s, qs_put(s->c, big, sizeof big, "v", 1), QS_TOOBIG);
        MRC(s, qs_putdup(s->c, big, sizeof big, "v", 1), QS_TOOBIG);
        MRC(s, qs_putkeep(s->c, big, sizeof big, "v", 1), QS_TOOBIG);
    } else if (r < 950) {                           /* sync */
        note(s, "sync%s", s->in_txn ? " (in txn)" : "");
        MRC(s, qs_sync(s->c), s->in_txn ? QS_TXN : 0);
    } else if (r < 957) {                           /* reopen */
        if (s->in_txn)
            return;
        note(s, "reopen");
        do_reopen(s);
    } else if (r < 960) {                           /* compact */
        note(s, "compact%s", s->in_txn ? " (in txn)" : "");
        MRC(s, qs_compact(s->c), s->in_txn ? QS_TXN : 0);
    } else if (r < 964) {                           /* check */
        if (s->in_txn)
            return;
        note(s, "check");
        char msg[512] = "";
        rc = qs_check(s->c, msg, sizeof msg);
        if (rc != 0)
            MFAIL(s, "qs_check gave %d (%s): %s", rc, qs_strerror(rc), msg);
    } else if (r < 968) {                           /* bulk compare */
        int rev = (int)tc_below(&s->rng, 2);
        note(s, "bulk compare %s", rev ? "reverse" : "forward");
        bulk_compare(s, rev);
    } else if (r < 972) {                           /* a burst in a txn */
        if (!s->in_txn)
            return;
        /* ~360 KiB of values: more than the tiny cache, so it spills */
        note(s, "burst of 30 putdups of 12 KiB");
        for (int b = 0; b < 30 && !s->failed; b++) {
            const mbuf *k = pick_key(s);
            size_t vn = 12 * 1024;
            tc_fill(&s->rng, s->vbuf, vn);
            MRC(s, qs_putdup(s->c, k->p, k->n, s->vbuf, vn), 0);
            m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
        }
    } else {                                        /* more putdups */
        const mbuf *k = pick_key(s);
        size_t vn = tc_below(&s->rng, 30);
        tc_fill(&s->rng, s->vbuf, vn);
        note(s, "putdup(small) %s vlen %zu", khex(k, kb, sizeof kb), vn);
        MRC(s, qs_putdup(s->c, k->p, k->n, s->vbuf, vn), 0);
        m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
    }
}


static void run_variant(const variant *var)
{
    state *s = calloc(1, sizeof *s);
    s->seed = tc_seed();
    s->rng.s = s->seed;
    s->var = var;
    s->trace = getenv("QS_TEST_TRACE") != NULL;
    s->vbuf = malloc(32 * 1024);
    long nops = ops_count();
    long every = tc_small() ? 100 : 50;
    printf("  variant %s: seed %" PRIu64 " (QS_TEST_SEED=%" PRIu64 "), %ld "
           "ops\n", var->name, s->seed, s->seed, nops);
    fflush(stdout);
    make_pool(s);
    if (tc_tmp_make(&s->tmp) != 0) {
        tc_cur_failed = 1;
        goto out;
    }
    int rc = do_open(s, QS_OPEN_NEW);
    if (rc != 0) {
        MFAIL(s, "qs_open gave %d (%s)", rc, qs_strerror(rc));
        goto out;
    }
    for (s->opno = 0; s->opno < nops && !s->failed; s->opno++) {
        one_op(s);
        if (!s->failed && s->opno % every == every - 1) {
            note(s, "full compare (%" PRIu64 " records, %zu keys)",
                 s->m.records, s->m.n);
            full_compare(s);
        }
    }
    if (!s->failed && s->in_txn) {
        s->opno++;
        note(s, "final commit");
        rc = qs_commit(s->c);
        if (rc != 0)
            MFAIL(s, "final commit gave %d", rc);
        s->in_txn = 0;
        m_free(&s->snap);
    }
    if (!s->failed) {
        s->opno++;
        note(s, "final reopen");
        do_reopen(s);
    }
    if (!s->failed) {
        note(s, "final compare");
        full_compare(s);
    }
    if (!s->failed) {
        bulk_compare(s, 0);
        bulk_compare(s, 1);
    }
    if (s->c) {
        collect_stats(s);
        qs_stat st;
        qs_stat_get(s->c, &st);
        printf("  variant %s: %" PRIu64 " records, %zu keys, %" PRIu64
               " pages, %" PRIu64 " free, depth %u, commits %" PRIu64
               ", checkpoints %" PRIu64 ", spilled pages %" PRIu64 "\n",
               var->name, s->m.records, s->m.n, st.pages, st.free_pages,
               st.depth, s->commits, s->checkpoints, s->spilled);
        if (!s->failed && var->cache_bytes && var->cache_bytes < 1 << 20 &&
            !tc_small() && s->spilled == 0)
            MFAIL(s, "tiny cache but no page was ever spilled");
        if (!s->failed && var->checkpoint_bytes &&
            var->checkpoint_bytes < 1 << 20 && !tc_small() &&
            s->checkpoints < 5)
            MFAIL(s, "small checkpoint_bytes but only %" PRIu64
                  " checkpoints", s->checkpoints);
        if (s->in_txn)
            qs_abort(s->c);
        rc = qs_close(s->c);
        if (rc != 0)
            MFAIL(s, "qs_close gave %d", rc);
    }
    if (s->failed)
        printf("  reproduce with: QS_TEST_SEED=%" PRIu64 " (variant %s)\n",
               s->seed, var->name);
out:
    m_free(&s->m);
    m_free(&s->snap);
    for (int i = 0; i < NPOOL; i++)
        free(s->pool[i].p);
    free(s->vbuf);
    tc_tmp_remove(&s->tmp);
    free(s);
}


static long ops_count(void)
{
    const char *e = getenv("QS_TEST_OPS");
    if (e && *e)
        return atol(e);
    return tc_small() ? 800 : 6000;
}

/* ------------------------------------------------------------------ */
/* persistent cursors                                                  */
/*
 * Cursors that stay open while the casket changes under them.  The
 * contract: a cursor finds its place again after a change; a record is
 * identified by its key and its place among the key's values, so the model
 * tracks a cursor as (key, value id).  When its record is removed the cursor
 * is "in a gap": get gives QS_NOTFOUND, next the first record after the
 * removed one, prev the last before it.  To stay inside what the contract
 * pins down, no value is added to a key while a cursor sits in a gap there
 * (nor is qs_put used on a key a cursor is on), and after an abort or a
 * reopen the cursors are positioned afresh before use.
 */

#define NPC 3
enum { PC_UNKNOWN = 0, PC_ON = 1, PC_GAP = 2 };

typedef struct {
    qs_cursor *cur;
    int state;
    mbuf key;
    uint64_t id;
} pcur;

static void pc_clear_key(pcur *pc)
{
    free(pc->key.p);
    pc->key.p = NULL;
    pc->key.n = 0;
}

/* on record (i, j) of the model, or unknown when i is past the end */
static void pc_set(pcur *pc, const model *m, size_t i, size_t j)
{
    pc_clear_key(pc);
    if (i >= m->n) {
        pc->state = PC_UNKNOWN;
        return;
    }
    pc->state = PC_ON;
    pc->key = mb_dup(m->e[i].key.p, m->e[i].key.n);
    pc->id = m->e[i].v[j].id;
}

/* the model index of a cursor's key (m->n when absent) */
static size_t pc_key_index(const model *m, const pcur *pc)
{
    size_t i = m_lower(m, pc->key.p, pc->key.n);
    if (i < m->n &&
        key_cmp(m->e[i].key.p, m->e[i].key.n, pc->key.p, pc->key.n) == 0)
        return i;
    return m->n;
}

static int pc_locate(const model *m, const pcur *pc, size_t *ip, size_t *jp)
{
    size_t i = pc_key_index(m, pc);
    if (i == m->n)
        return 0;
    for (size_t j = 0; j < m->e[i].nv; j++)
        if (m->e[i].v[j].id == pc->id) {
            *ip = i;
            *jp = j;
            return 1;
        }
    return 0;
}

/* after a change: cursors whose record went away are in a gap */
static void pc_refresh(const model *m, pcur *pcs)
{
    for (int q = 0; q < NPC; q++) {
        size_t i, j;
        if (pcs[q].state == PC_ON && !pc_locate(m, &pcs[q], &i, &j))
            pcs[q].state = PC_GAP;
    }
}

/* 1 when adding a value to key k is off limits (see above) */
static int pc_blocks_add(const pcur *pcs, const void *k, size_t kn,
                         int replace)
{
    for (int q = 0; q < NPC; q++) {
        if (pcs[q].state == PC_GAP || (replace && pcs[q].state == PC_ON))
            if (key_cmp(pcs[q].key.p, pcs[q].key.n, k, kn) == 0)
                return 1;
    }
    return 0;
}

static void pc_expect_get(state *s, pcur *pc, const char *what)
{
    void *k = NULL, *v = NULL;
    size_t kn = 0, vn = 0;
    int rc = qs_cursor_get(pc->cur, &k, &kn, &v, &vn);
    size_t i, j;
    char kb[64];
    if (pc->state == PC_GAP) {
        if (rc != QS_NOTFOUND)
            MFAIL(s, "after %s: cursor_get on a removed record (key %s) gave "
                  "%d, want NOTFOUND", what, khex(&pc->key, kb, sizeof kb),
                  rc);
    } else if (!pc_locate(&s->m, pc, &i, &j)) {
        MFAIL(s, "test bug: cursor on a record the model lacks");
    } else if (rc != 0) {
        MFAIL(s, "after %s: cursor_get gave %d (%s), model on key %s dup "
              "%zu/%zu", what, rc, qs_strerror(rc),
              khex(&pc->key, kb, sizeof kb), j, s->m.e[i].nv);
    } else {
        const mentry *e = &s->m.e[i];
        if (kn != e->key.n || (kn && memcmp(k, e->key.p, kn)))
            MFAIL(s, "after %s: cursor key len %zu, model %s", what, kn,
                  khex(&e->key, kb, sizeof kb));
        else if (vn != e->v[j].n || (vn && memcmp(v, e->v[j].p, vn)))
            MFAIL(s, "after %s: cursor value len %zu, model key %s dup "
                  "%zu/%zu len %zu", what, vn, khex(&e->key, kb, sizeof kb),
                  j, e->nv, e->v[j].n);
    }
    qs_free(k);
    qs_free(v);
}

/* model of next/prev: the new position as (i, j), or i = m->n at an end */
static void pc_step_model(const model *m, const pcur *pc, int reverse,
                          size_t *ip, size_t *jp)
{
    size_t i, j;
    if (pc->state == PC_ON) {
        pc_locate(m, pc, &i, &j);
        if (!reverse) {
            if (j + 1 < m->e[i].nv) { *ip = i; *jp = j + 1; return; }
            *ip = i + 1; *jp = 0; return;
        }
        if (j > 0) { *ip = i; *jp = j - 1; return; }
        if (i == 0) { *ip = m->n; return; }
        *ip = i - 1; *jp = m->e[i - 1].nv - 1; return;
    }
    /* in a gap at (key, id) */
    i = m_lower(m, pc->key.p, pc->key.n);
    int have = i < m->n && key_cmp(m->e[i].key.p, m->e[i].key.n, pc->key.p,
                                   pc->key.n) == 0;
    if (!reverse) {
        if (have) {
            for (j = 0; j < m->e[i].nv; j++)
                if (m->e[i].v[j].id > pc->id) { *ip = i; *jp = j; return; }
            i++;
        }
        *ip = i; *jp = 0; return;
    }
    if (have) {
        for (j = m->e[i].nv; j-- > 0;)
            if (m->e[i].v[j].id < pc->id) { *ip = i; *jp = j; return; }
    }
    if (i == 0) { *ip = m->n; return; }
    *ip = i - 1; *jp = m->e[i - 1].nv - 1;
}

static _Thread_local long gap_steps;

static void pc_cursor_op(state *s, pcur *pcs, int q)
{
    pcur *pc = &pcs[q];
    uint64_t r = tc_below(&s->rng, 100);
    char kb[64];
    int rc;
    if (pc->state == PC_UNKNOWN && r >= 25)
        r = tc_below(&s->rng, 25);
    if (pc->state == PC_GAP && r >= 85)
        r = tc_below(&s->rng, 85);
    int was_gap = pc->state == PC_GAP;
    if (r < 8) {
        note(s, "pc%d first", q);
        rc = qs_cursor_first(pc->cur);
        pc_set(pc, &s->m, 0, 0);
    } else if (r < 16) {
        note(s, "pc%d last", q);
        rc = qs_cursor_last(pc->cur);
        if (s->m.n)
            pc_set(pc, &s->m, s->m.n - 1, s->m.e[s->m.n - 1].nv - 1);
        else
            pc_set(pc, &s->m, 0, 0);
    } else if (r < 25) {
        const mbuf *k = pick_key(s);
        note(s, "pc%d jump %s", q, khex(k, kb, sizeof kb));
        rc = qs_cursor_jump(pc->cur, k->p, k->n);
        pc_set(pc, &s->m, m_lower(&s->m, k->p, k->n), 0);
    } else if (r < 40) {
        note(s, "pc%d get (%s)", q, pc->state == PC_GAP ? "gap" : "on");
        pc_expect_get(s, pc, "get");
        return;
    } else if (r < 60 || r < 85) {
        int rev = r >= 60;
        note(s, "pc%d %s (%s %s)", q, rev ? "prev" : "next",
             pc->state == PC_GAP ? "gap at" : "on",
             khex(&pc->key, kb, sizeof kb));
        size_t i, j = 0;
        pc_step_model(&s->m, pc, rev, &i, &j);
        rc = rev ? qs_cursor_prev(pc->cur) : qs_cursor_next(pc->cur);
        pc_set(pc, &s->m, i, j);
    } else {
        /* cursor_read from a record */
        size_t max = 1 + tc_below(&s->rng, 8);
        int rev = (int)tc_below(&s->rng, 2);
        note(s, "pc%d read %zu %s", q, max, rev ? "reverse" : "forward");
        void *out = NULL;
        size_t outlen = 0;
        uint64_t count = 0;
        rc = qs_cursor_read(pc->cur, max, rev, &out, &outlen, &count);
        if (rc != 0) {
            MFAIL(s, "pc%d cursor_read gave %d (%s)", q, rc,
                  qs_strerror(rc));
            qs_free(out);
            return;
        }
        const unsigned char *p = out, *end = p + outlen;
        uint64_t got = 0;
        while (pc->state == PC_ON && got < max && !s->failed) {
            size_t i, j;
            pc_locate(&s->m, pc, &i, &j);
            const mentry *e = &s->m.e[i];
            if (got >= count) {
                MFAIL(s, "pc%d cursor_read gave %" PRIu64 " records, the "
                      "model has more", q, count);
                break;
            }
            uint32_t kl = end - p >= 4 ? tc_le32(p) : 0xffffffffu;
            p += 4;
            if (kl == 0xffffffffu || (size_t)(end - p) < kl ||
                kl != e->key.n || (kl && memcmp(p, e->key.p, kl))) {
                MFAIL(s, "pc%d cursor_read record %" PRIu64 ": key mismatch",
                      q, got);
                break;
            }
            p += kl;
            uint32_t vl = end - p >= 4 ? tc_le32(p) : 0xffffffffu;
            p += 4;
            if (vl == 0xffffffffu || (size_t)(end - p) < vl ||
                vl != e->v[j].n || (vl && memcmp(p, e->v[j].p, vl))) {
                MFAIL(s, "pc%d cursor_read record %" PRIu64 ": value "
                      "mismatch", q, got);
                break;
            }
            p += vl;
            got++;
            size_t ni, nj = 0;
            pc_step_model(&s->m, pc, rev, &ni, &nj);
            pc_set(pc, &s->m, ni, nj);
        }
        if (!s->failed && got != count)
            MFAIL(s, "pc%d cursor_read gave %" PRIu64 " records, model %"
                  PRIu64, q, count, got);
        qs_free(out);
        if (!s->failed && pc->state == PC_ON)
            pc_expect_get(s, pc, "read");
        return;
    }
    int want = pc->state == PC_ON ? 0 : QS_NOTFOUND;
    if (r >= 40 && r < 85 && was_gap)
        gap_steps++;
    if (rc != want) {
        MFAIL(s, "pc%d gave %d (%s), want %d", q, rc, qs_strerror(rc), want);
        return;
    }
    if (pc->state == PC_ON && tc_below(&s->rng, 2))
        pc_expect_get(s, pc, "step");
}

static void pc_close_all(pcur *pcs)
{
    for (int q = 0; q < NPC; q++) {
        qs_cursor_close(pcs[q].cur);
        pcs[q].cur = NULL;
        pc_clear_key(&pcs[q]);
        pcs[q].state = PC_UNKNOWN;
    }
}

static int pc_open_all(state *s, pcur *pcs)
{
    for (int q = 0; q < NPC; q++) {
        int rc = qs_cursor_open(s->c, &pcs[q].cur);
        if (rc) {
            MFAIL(s, "qs_cursor_open gave %d", rc);
            return rc;
        }
        pcs[q].state = PC_UNKNOWN;
    }
    return 0;
}

static void pc_mutation(state *s, pcur *pcs)
{
    uint64_t r = tc_below(&s->rng, 100);
    char kb[64];
    if (r < 45) {                   /* putdup / putkeep / put */
        const mbuf *k = pick_key(s);
        int kind = r < 30 ? 0 : r < 38 ? 1 : 2;
        if (pc_blocks_add(pcs, k->p, k->n, kind == 2))
            return;
        size_t vn = tc_below(&s->rng, 4) ? tc_below(&s->rng, 200)
                                         : make_val(s);
        tc_fill(&s->rng, s->vbuf, vn);
        if (kind == 0) {
            note(s, "putdup %s vlen %zu", khex(k, kb, sizeof kb), vn);
            MRC(s, qs_putdup(s->c, k->p, k->n, s->vbuf, vn), 0);
            m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
        } else if (kind == 1) {
            note(s, "putkeep %s vlen %zu", khex(k, kb, sizeof kb), vn);
            int want = m_find(&s->m, k->p, k->n) ? QS_KEYEXIST : 0;
            MRC(s, qs_putkeep(s->c, k->p, k->n, s->vbuf, vn), want);
            if (!want)
                m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
        } else {
            note(s, "put %s vlen %zu", khex(k, kb, sizeof kb), vn);
            MRC(s, qs_put(s->c, k->p, k->n, s->vbuf, vn), 0);
            uint64_t dummy;
            m_outlist(&s->m, k->p, k->n, &dummy);
            m_putdup(&s->m, k->p, k->n, s->vbuf, vn);
        }
    } else if (r < 55) {            /* a batch of numeric keys */
        size_t n = 1 + tc_below(&s->rng, 20);
        uint64_t koff[61], voff[61];
        char keys[61 * 8];
        unsigned char vals[61 * 40];
        koff[0] = voff[0] = 0;
        for (size_t i = 0; i < n; i++) {
            int kn = snprintf(keys + koff[i], 8, "n%04u",
                              (unsigned)tc_below(&s->rng, 3000));
            if (pc_blocks_add(pcs, keys + koff[i], (size_t)kn, 0))
                return;
            koff[i + 1] = koff[i] + (uint64_t)kn;
            size_t vn = tc_below(&s->rng, 40);
            tc_fill(&s->rng, vals + voff[i], vn);
            voff[i + 1] = voff[i] + vn;
        }
        note(s, "putdup_many n=%zu", n);
        MRC(s, qs_putdup_many(s->c, n, keys, koff, vals, voff), 0);
        for (size_t i = 0; i < n; i++)
            m_putdup(&s->m, keys + koff[i], koff[i + 1] - koff[i],
                     vals + voff[i], voff[i + 1] - voff[i]);
    } else if (r < 65) {            /* out: the first value */
        size_t i;
        const mbuf *k;
        if (s->m.n && tc_below(&s->rng, 2)) {
            i = tc_below(&s->rng, s->m.n);
            k = &s->m.e[i].key;
        } else {
            k = pick_key(s);
        }
        mbuf kc_ = mb_dup(k->p, k->n);
        note(s, "out %s", khex(&kc_, kb, sizeof kb));
        i = m_lower(&s->m, kc_.p, kc_.n);
        int have = i < s->m.n && key_cmp(s->m.e[i].key.p, s->m.e[i].key.n,
                                         kc_.p, kc_.n) == 0;
        int rc = qs_out(s->c, kc_.p, kc_.n);
        if (rc != (have ? 0 : QS_NOTFOUND))
            MFAIL(s, "qs_out gave %d, want %d", rc, have ? 0 : QS_NOTFOUND);
        else if (have)
            m_remove_value(&s->m, i, 0);
        free(kc_.p);
    } else if (r < 82) {            /* outlist */
        size_t i;
        const mbuf *k;
        if (s->m.n && tc_below(&s->rng, 2)) {
            i = tc_below(&s->rng, s->m.n);
            k = &s->m.e[i].key;
        } else {
            k = pick_key(s);
        }
        mbuf kc_ = mb_dup(k->p, k->n);
        note(s, "outlist %s", khex(&kc_, kb, sizeof kb));
        uint64_t want, removed = 99;
        m_outlist(&s->m, kc_.p, kc_.n, &want);
        int rc = qs_outlist(s->c, kc_.p, kc_.n, &removed);
        if (!(rc == 0 || (rc == QS_NOTFOUND && want == 0)))
            MFAIL(s, "qs_outlist gave %d", rc);
        else if (rc == 0 && removed != want)
            MFAIL(s, "qs_outlist removed %" PRIu64 " want %" PRIu64, removed,
                  want);
        free(kc_.p);
    } else {                        /* cursor_out through a cursor */
        int q = (int)tc_below(&s->rng, NPC);
        pcur *pc = &pcs[q];
        if (pc->state != PC_ON)
            return;
        size_t i, j, ni, nj = 0;
        pc_locate(&s->m, pc, &i, &j);
        note(s, "pc%d cursor_out (key %s dup %zu/%zu)", q,
             khex(&pc->key, kb, sizeof kb), j, s->m.e[i].nv);
        pc_step_model(&s->m, pc, 0, &ni, &nj);
        uint64_t next_id = ni < s->m.n ? s->m.e[ni].v[nj].id : 0;
        int rc = qs_cursor_out(pc->cur);
        m_remove_value(&s->m, i, j);
        if (next_id) {
            /* the same record, at its index in the changed model */
            size_t a = 0;
            int found = 0;
            for (a = 0; a < s->m.n && !found; a++)
                for (size_t b = 0; b < s->m.e[a].nv; b++)
                    if (s->m.e[a].v[b].id == next_id) {
                        pc_set(pc, &s->m, a, b);
                        found = 1;
                        break;
                    }
        } else {
            pc_clear_key(pc);
            pc->state = PC_UNKNOWN;
        }
        int want = next_id ? 0 : QS_NOTFOUND;
        if (rc != want) {
            MFAIL(s, "pc%d cursor_out gave %d (%s), want %d", q, rc,
                  qs_strerror(rc), want);
            return;
        }
        pc_refresh(&s->m, pcs);
        if (pc->state == PC_ON)
            pc_expect_get(s, pc, "cursor_out");
        return;
    }
    pc_refresh(&s->m, pcs);
}

static void run_persistent(void)
{
    state *s = calloc(1, sizeof *s);
    static const variant var = {"persistent-cursors", 0, 64 * 4096,
                                256 * 1024};
    s->seed = tc_seed();
    s->rng.s = s->seed;
    s->var = &var;
    s->trace = getenv("QS_TEST_TRACE") != NULL;
    s->vbuf = malloc(32 * 1024);
    long nops = ops_count() * 2;
    pcur pcs[NPC];
    memset(pcs, 0, sizeof pcs);
    printf("  variant %s: seed %" PRIu64 " (QS_TEST_SEED=%" PRIu64 "), %ld "
           "ops\n", var.name, s->seed, s->seed, nops);
    make_pool(s);
    if (tc_tmp_make(&s->tmp) != 0) {
        tc_cur_failed = 1;
        goto out;
    }
    int rc = do_open(s, QS_OPEN_NEW);
    if (rc != 0) {
        MFAIL(s, "qs_open gave %d (%s)", rc, qs_strerror(rc));
        goto out;
    }
    if (pc_open_all(s, pcs))
        goto out;
    for (s->opno = 0; s->opno < nops && !s->failed; s->opno++) {
        uint64_t r = tc_below(&s->rng, 1000);
        if (r < 450) {
            pc_mutation(s, pcs);
        } else if (r < 900) {
            pc_cursor_op(s, pcs, (int)tc_below(&s->rng, NPC));
        } else if (r < 935) {
            if (!s->in_txn) {
                note(s, "begin");
                MRC(s, qs_begin(s->c), 0);
                s->in_txn = 1;
                m_clone(&s->snap, &s->m);
            }
        } else if (r < 965) {
            if (s->in_txn) {
                note(s, "commit");
                MRC(s, qs_commit(s->c), 0);
                s->in_txn = 0;
                m_free(&s->snap);
            }
        } else if (r < 980) {
            if (s->in_txn) {
                note(s, "abort");
                MRC(s, qs_abort(s->c), 0);
                s->in_txn = 0;
                m_free(&s->m);
                s->m = s->snap;
                memset(&s->snap, 0, sizeof s->snap);
                for (int q = 0; q < NPC; q++) {
                    pc_clear_key(&pcs[q]);
                    pcs[q].state = PC_UNKNOWN;
                }
            }
        } else if (r < 990) {
            if (!s->in_txn) {
                /* the cursors stay open across both */
                int compact = tc_below(&s->rng, 4) == 0;
                note(s, compact ? "compact" : "sync");
                MRC(s, compact ? qs_compact(s->c) : qs_sync(s->c), 0);
            }
        } else if (r < 993) {
            if (!s->in_txn) {
                note(s, "reopen");
                pc_close_all(pcs);
                do_reopen(s);
                if (!s->failed && pc_open_all(s, pcs))
                    break;
            }
        } else {
            note(s, "full compare");
            full_compare(s);
        }
    }
    if (!s->failed)
        full_compare(s);
    pc_close_all(pcs);
    if (s->c) {
        if (s->in_txn)
            qs_abort(s->c);
        qs_close(s->c);
    }
    printf("  variant %s: %" PRIu64 " records, %zu keys at the end; %ld "
           "steps from a removed record\n", var.name, s->m.records, s->m.n,
           gap_steps);
    if (s->failed)
        printf("  reproduce with: QS_TEST_SEED=%" PRIu64 " (variant %s)\n",
               s->seed, var.name);
out:
    pc_close_all(pcs);
    m_free(&s->m);
    m_free(&s->snap);
    for (int i = 0; i < NPOOL; i++)
        free(s->pool[i].p);
    free(s->vbuf);
    tc_tmp_remove(&s->tmp);
    free(s);
}

static void model_persistent_cursors(void) { run_persistent(); }

/* Several caskets driven at once from different threads (each its own
 * model and file): the engine must keep no shared state between handles. */
static void *parallel_main(void *p)
{
    run_variant((const variant *)p);
    return NULL;
}

static void model_parallel_caskets(void)
{
    static const variant vs[3] = {
        {"parallel-a", 0, 64 * 4096, 0},
        {"parallel-b", 0, 0, 64 * 1024},
        {"parallel-c", 1, 64 * 4096, 64 * 1024},
    };
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, parallel_main, (void *)&vs[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
}


static const variant V_DEFAULT = {"default", 1, 0, 0};
static const variant V_TINYCACHE = {"tiny-cache", 0, 64 * 4096, 0};
static const variant V_CHECKPOINT = {"small-checkpoint", 0, 0, 64 * 1024};
static const variant V_BOTH = {"tiny-cache+checkpoint", 1, 64 * 4096,
                               64 * 1024};

static void model_default(void) { run_variant(&V_DEFAULT); }
static void model_tiny_cache(void) { run_variant(&V_TINYCACHE); }
static void model_small_checkpoint(void) { run_variant(&V_CHECKPOINT); }
static void model_tiny_cache_small_checkpoint(void) { run_variant(&V_BOTH); }

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(model_default);
    RUN(model_tiny_cache);
    RUN(model_small_checkpoint);
    RUN(model_tiny_cache_small_checkpoint);
    RUN(model_persistent_cursors);
    RUN(model_parallel_caskets);
    return tc_summary();
}
