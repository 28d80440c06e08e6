/*
 * test_alloc.c -- allocation failures, injected as SQLite does: for N = 1,
 * 2, ... the Nth allocation the library makes fails -- mode "once": only
 * that one; mode "sticky": that one and every later one -- until a workload
 * runs through without reaching N.
 *
 * This program links against a copy of the library compiled with
 * `-include fi_alloc.h` (see the Makefile: $(BUILD)/fi/), which renames
 * the library's malloc, calloc, realloc, strdup and strndup to the counting
 * wrappers qs_fi_*() below.  Allocations made here, in the test, are not
 * counted.  free is libc's.
 *
 * What each injected failure must leave (qstore.h: "Unless a function says
 * otherwise, a failed call changed nothing"):
 *   - the call returns an error code (never a crash, a hang, or success
 *     with a wrong result), and a failed qs_open leaves *out NULL;
 *   - once the injector is disarmed, the same handle shows exactly the last
 *     committed state (a reference model kept here: records in key order
 *     with duplicates in insertion order, queues with their item ids and
 *     payloads, this handle's reservations), still takes writes, passes
 *     qs_check and closes cleanly.  A failure inside an explicit
 *     transaction may spoil it ("every later write in it returns that
 *     error and qs_commit aborts it"): qs_commit then either fails and the
 *     state is the one before qs_begin, or succeeds and holds every change
 *     made before the failed call and nothing of that call;
 *   - after close and reopen the casket holds that same state (all
 *     reservations gone) and passes qs_check;
 *   - nothing leaks (make valgrind T=alloc / make asan T=alloc).
 * In sticky mode, every other N also closes the handle while every
 * allocation still fails (qs_close must still free everything) and then
 * reopens.
 *
 * The workloads: open (with log recovery) / close / reopen; creating a
 * casket; the record calls; cursors; a transaction that spills (a small
 * cache) and whose commit checkpoints (a small checkpoint_bytes); qs_sync,
 * qs_check, qs_compact; the queue calls.  Durability is not under test
 * here: fdatasync and fsync are replaced by no-ops (as test_faults.c's
 * f_fake_sync does) so that thousands of opens do not wait on the disk.
 *
 * The library is used from one thread only, so the injector's bookkeeping
 * needs no locks.
 */
#define QS_FI_DECLARE_ONLY
#include "fi_alloc.h"
#include "test_common.h"
#include <execinfo.h>

/* ------------------------------------------------------------------ */
/* the injector                                                        */

typedef struct fi_site {
    const char *file;
    int line;
    long calls;         /* calls made while armed */
    long fails;         /* failures injected */
    long unarmed;       /* calls made while disarmed */
} fi_site;

enum { FI_MAX_SITES = 256 };
static fi_site fi_sites[FI_MAX_SITES];
static int fi_nsites;

static int fi_armed;
static long fi_nth;             /* the call that fails */
static int fi_sticky;           /* ... and every later one */
static long fi_calls;           /* allocations since arming */
static long fi_hits;            /* failures injected since arming */
static const char *fi_hit_file; /* where the first one was */
static int fi_hit_line;

static fi_site *fi_site_of(const char *file, int line)
{
    for (int i = 0; i < fi_nsites; i++)
        if (fi_sites[i].line == line &&
            (fi_sites[i].file == file || strcmp(fi_sites[i].file, file) == 0))
            return &fi_sites[i];
    if (fi_nsites == FI_MAX_SITES)
        return NULL;
    fi_site *s = &fi_sites[fi_nsites++];
    s->file = file;
    s->line = line;
    return s;
}

/* QS_ALLOC_TRACE=1: a backtrace at each of the first injected failures
 * of a run (for QS_ALLOC_ONLY; a debugger can break on fi_trap). */
static int fi_trace;

__attribute__((noinline)) static void fi_trap(const char *file, int line)
{
    if (!fi_trace)
        return;
    void *frames[32];
    int n = backtrace(frames, 32);
    printf("    injected failure at %s:%d\n", file, line);
    fflush(stdout);
    backtrace_symbols_fd(frames, n, 1);
}

static int fi_fail(const char *file, int line)
{
    fi_site *s = fi_site_of(file, line);
    if (!fi_armed) {
        if (s)
            s->unarmed++;
        return 0;
    }
    long n = ++fi_calls;
    int fail = n == fi_nth || (fi_sticky && n > fi_nth);
    if (s) {
        s->calls++;
        s->fails += fail;
    }
    if (fail) {
        if (fi_hits++ == 0) {
            fi_hit_file = file;
            fi_hit_line = line;
        }
        if (fi_hits <= 3)
            fi_trap(file, line);
        errno = ENOMEM;
    }
    return fail;
}

static void fi_arm(long nth, int sticky)
{
    fi_nth = nth;
    fi_sticky = sticky;
    fi_calls = fi_hits = 0;
    fi_hit_file = NULL;
    fi_hit_line = 0;
    fi_armed = 1;
}

static void fi_disarm(void) { fi_armed = 0; }

void *qs_fi_malloc(size_t n, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : malloc(n);
}

void *qs_fi_calloc(size_t n, size_t size, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : calloc(n, size);
}

void *qs_fi_realloc(void *p, size_t n, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : realloc(p, n);
}

void *qs_fi_reallocarray(void *p, size_t n, size_t size, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : reallocarray(p, n, size);
}

char *qs_fi_strdup(const char *s, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : strdup(s);
}

char *qs_fi_strndup(const char *s, size_t n, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : strndup(s, n);
}

int qs_fi_posix_memalign(void **p, size_t align, size_t n, const char *file, int line)
{
    return fi_fail(file, line) ? ENOMEM : posix_memalign(p, align, n);
}

void *qs_fi_aligned_alloc(size_t align, size_t n, const char *file, int line)
{
    return fi_fail(file, line) ? NULL : aligned_alloc(align, n);
}

/* Durability is test_faults.c's business: syncs are no-ops here (the
 * library is linked into this program, so its calls land here). */
int fdatasync(int fd) { return fcntl(fd, F_GETFD) < 0 ? -1 : 0; }
int fsync(int fd) { return fcntl(fd, F_GETFD) < 0 ? -1 : 0; }

/* ------------------------------------------------------------------ */
/* the reference model                                                 */

typedef struct mrec {
    uint8_t *k, *v;
    size_t kl, vl;
} mrec;

typedef struct mitem {
    uint64_t id;
    uint64_t token;     /* this handle's reservation, 0: none */
    uint8_t *v;
    size_t vl;
} mitem;

typedef struct mqueue {
    uint8_t *name;
    size_t nl;
    mitem *it;          /* in id order */
    size_t n, cap;
} mqueue;

typedef struct model {
    mrec *r;            /* in key order, a key's values in insertion order */
    size_t nr, cr;
    mqueue *q;          /* in name order */
    size_t nq, cq;
} model;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("test_alloc: out of memory in the test itself\n");
        exit(2);
    }
    return p;
}

static void *xmemdup(const void *p, size_t n)
{
    void *d = xmalloc(n);
    if (n)
        memcpy(d, p, n);
    return d;
}

static void *xgrow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    p = realloc(p, nc * elem);
    if (!p) {
        printf("test_alloc: out of memory in the test itself\n");
        exit(2);
    }
    *cap = nc;
    return p;
}

static int keycmp(const void *a, size_t al, const void *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int r = n ? memcmp(a, b, n) : 0;
    if (r)
        return r;
    return al < bl ? -1 : al > bl;
}

static void m_free(model *m)
{
    for (size_t i = 0; i < m->nr; i++) {
        free(m->r[i].k);
        free(m->r[i].v);
    }
    for (size_t i = 0; i < m->nq; i++) {
        for (size_t j = 0; j < m->q[i].n; j++)
            free(m->q[i].it[j].v);
        free(m->q[i].it);
        free(m->q[i].name);
    }
    free(m->r);
    free(m->q);
    memset(m, 0, sizeof *m);
}

static void m_copy(model *d, const model *s)
{
    memset(d, 0, sizeof *d);
    d->r = xgrow(NULL, &d->cr, s->nr, sizeof *d->r);
    for (size_t i = 0; i < s->nr; i++) {
        d->r[i].k = xmemdup(s->r[i].k, s->r[i].kl);
        d->r[i].kl = s->r[i].kl;
        d->r[i].v = xmemdup(s->r[i].v, s->r[i].vl);
        d->r[i].vl = s->r[i].vl;
    }
    d->nr = s->nr;
    d->q = xgrow(NULL, &d->cq, s->nq, sizeof *d->q);
    for (size_t i = 0; i < s->nq; i++) {
        mqueue *dq = &d->q[i];
        const mqueue *sq = &s->q[i];
        memset(dq, 0, sizeof *dq);
        dq->name = xmemdup(sq->name, sq->nl);
        dq->nl = sq->nl;
        dq->it = xgrow(NULL, &dq->cap, sq->n, sizeof *dq->it);
        for (size_t j = 0; j < sq->n; j++) {
            dq->it[j] = sq->it[j];
            dq->it[j].v = xmemdup(sq->it[j].v, sq->it[j].vl);
        }
        dq->n = sq->n;
    }
    d->nq = s->nq;
}

/* first index whose key is >= k (upper: > k) */
static size_t m_lower(const model *m, const void *k, size_t kl)
{
    size_t lo = 0, hi = m->nr;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (keycmp(m->r[mid].k, m->r[mid].kl, k, kl) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t m_upper(const model *m, const void *k, size_t kl)
{
    size_t lo = 0, hi = m->nr;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (keycmp(m->r[mid].k, m->r[mid].kl, k, kl) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void m_remove_at(model *m, size_t i)
{
    free(m->r[i].k);
    free(m->r[i].v);
    memmove(m->r + i, m->r + i + 1, (m->nr - i - 1) * sizeof *m->r);
    m->nr--;
}

static void m_putdup(model *m, const void *k, size_t kl, const void *v, size_t vl)
{
    size_t i = m_upper(m, k, kl);
    m->r = xgrow(m->r, &m->cr, m->nr + 1, sizeof *m->r);
    memmove(m->r + i + 1, m->r + i, (m->nr - i) * sizeof *m->r);
    m->r[i] = (mrec){xmemdup(k, kl), xmemdup(v, vl), kl, vl};
    m->nr++;
}

static size_t m_count(const model *m, const void *k, size_t kl)
{
    return m_upper(m, k, kl) - m_lower(m, k, kl);
}

static size_t m_outlist(model *m, const void *k, size_t kl)
{
    size_t lo = m_lower(m, k, kl), n = m_count(m, k, kl);
    for (size_t j = 0; j < n; j++)
        m_remove_at(m, lo);
    return n;
}

static void m_put(model *m, const void *k, size_t kl, const void *v, size_t vl)
{
    m_outlist(m, k, kl);
    m_putdup(m, k, kl, v, vl);
}

static int m_out(model *m, const void *k, size_t kl)
{
    if (!m_count(m, k, kl))
        return 0;
    m_remove_at(m, m_lower(m, k, kl));
    return 1;
}

static const mrec *m_first(const model *m, const void *k, size_t kl)
{
    return m_count(m, k, kl) ? &m->r[m_lower(m, k, kl)] : NULL;
}

static mqueue *mq_get(model *m, const void *name, size_t nl)
{
    size_t i = 0;
    while (i < m->nq && keycmp(m->q[i].name, m->q[i].nl, name, nl) < 0)
        i++;
    if (i < m->nq && keycmp(m->q[i].name, m->q[i].nl, name, nl) == 0)
        return &m->q[i];
    m->q = xgrow(m->q, &m->cq, m->nq + 1, sizeof *m->q);
    memmove(m->q + i + 1, m->q + i, (m->nq - i) * sizeof *m->q);
    memset(&m->q[i], 0, sizeof m->q[i]);
    m->q[i].name = xmemdup(name, nl);
    m->q[i].nl = nl;
    m->nq++;
    return &m->q[i];
}

static void mq_add(model *m, const char *name, uint64_t id, const void *v, size_t vl)
{
    mqueue *q = mq_get(m, name, strlen(name));
    q->it = xgrow(q->it, &q->cap, q->n + 1, sizeof *q->it);
    q->it[q->n++] = (mitem){id, 0, xmemdup(v, vl), vl};
}

static size_t mq_avail(const mqueue *q)
{
    size_t n = 0;
    for (size_t j = 0; j < q->n; j++)
        n += q->it[j].token == 0;
    return n;
}

static void mq_remove(mqueue *q, uint64_t id)
{
    for (size_t j = 0; j < q->n; j++)
        if (q->it[j].id == id) {
            free(q->it[j].v);
            memmove(q->it + j, q->it + j + 1, (q->n - j - 1) * sizeof *q->it);
            q->n--;
            return;
        }
}

static mitem *mq_find(mqueue *q, uint64_t id)
{
    for (size_t j = 0; j < q->n; j++)
        if (q->it[j].id == id)
            return &q->it[j];
    return NULL;
}

static void m_drop_reservations(model *m)
{
    for (size_t i = 0; i < m->nq; i++)
        for (size_t j = 0; j < m->q[i].n; j++)
            m->q[i].it[j].token = 0;
}

/* ------------------------------------------------------------------ */
/* comparing a casket with the model                                   */

static char ctx[512];           /* the workload, mode, N and failed call */
static int reports_left;        /* detailed reports left for this drive */

#define MISMATCH(...)                                                        \
    do {                                                                     \
        if (reports_left > 0) {                                              \
            printf("  [%s] ", ctx);                                          \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
        }                                                                    \
        return 1;                                                            \
    } while (0)

static void show(char *out, size_t cap, const uint8_t *p, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        if (i == 24 && n > 28) {
            o += (size_t)snprintf(out + o, cap - o, "...(%zu bytes)", n);
            break;
        }
        o += (size_t)snprintf(out + o, cap - o, p[i] >= 32 && p[i] < 127 ? "%c" : "\\x%02x",
                              p[i]);
    }
    out[o < cap ? o : cap - 1] = 0;
}

static int same(const void *a, size_t al, const void *b, size_t bl)
{
    return al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

static int verify_records(qs_casket *c, const model *m, const char *where)
{
    uint64_t n = 0;
    int rc = qs_records(c, &n);
    if (rc || n != m->nr)
        MISMATCH("%s: qs_records rc %d, %" PRIu64 " records, model has %zu", where, rc, n,
                 m->nr);
    qs_cursor *cur = NULL;
    if ((rc = qs_cursor_open(c, &cur)) != 0)
        MISMATCH("%s: qs_cursor_open rc %d", where, rc);
    size_t i = 0;
    rc = qs_cursor_first(cur);
    while (rc == 0) {
        void *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        if ((rc = qs_cursor_get(cur, &k, &kl, &v, &vl)) != 0)
            break;
        int ok = i < m->nr && same(k, kl, m->r[i].k, m->r[i].kl) &&
                 same(v, vl, m->r[i].v, m->r[i].vl);
        if (!ok) {
            char a[128], b[128] = "(none)";
            show(a, sizeof a, k, kl);
            if (i < m->nr)
                show(b, sizeof b, m->r[i].k, m->r[i].kl);
            qs_free(k);
            qs_free(v);
            qs_cursor_close(cur);
            MISMATCH("%s: record %zu is key '%s' (value %zu bytes), model: key '%s' "
                     "(value %zu bytes)", where, i, a, vl, b, i < m->nr ? m->r[i].vl : 0);
        }
        qs_free(k);
        qs_free(v);
        i++;
        rc = qs_cursor_next(cur);
    }
    qs_cursor_close(cur);
    if (rc != QS_NOTFOUND || i != m->nr)
        MISMATCH("%s: cursor walk ended with rc %d after %zu records, model has %zu", where,
                 rc, i, m->nr);
    return 0;
}

static int verify_queues(qs_casket *c, const model *m, const char *where)
{
    qs_items *l = NULL;
    int rc = qs_queue_list(c, &l);
    if (rc)
        MISMATCH("%s: qs_queue_list rc %d", where, rc);
    size_t j = 0;
    for (size_t i = 0; i < m->nq; i++) {
        const mqueue *q = &m->q[i];
        if (!q->n)
            continue;
        if (j >= l->count || !same(l->data + l->off[j], l->off[j + 1] - l->off[j], q->name,
                                   q->nl) || l->ids[j] != mq_avail(q)) {
            char got[96] = "(none)";
            uint64_t glen = 0;
            if (j < l->count) {
                show(got, sizeof got, l->data + l->off[j], l->off[j + 1] - l->off[j]);
                glen = l->ids[j];
            }
            qs_items_free(l);
            MISMATCH("%s: qs_queue_list entry %zu is queue '%s' with %" PRIu64 " available, "
                     "model: '%.*s' with %zu available (of %zu items)", where, j, got, glen,
                     (int)q->nl, (const char *)q->name, mq_avail(q), q->n);
        }
        j++;
    }
    if (j != l->count) {
        size_t cnt = l->count;
        qs_items_free(l);
        MISMATCH("%s: qs_queue_list has %zu queues, model %zu", where, cnt, j);
    }
    qs_items_free(l);
    for (size_t i = 0; i < m->nq; i++) {
        const mqueue *q = &m->q[i];
        uint64_t len = 0;
        size_t avail = mq_avail(q);
        if ((rc = qs_queue_len(c, q->name, q->nl, &len)) != 0 || len != avail)
            MISMATCH("%s: qs_queue_len('%.*s') rc %d len %" PRIu64 ", model %zu", where,
                     (int)q->nl, (const char *)q->name, rc, len, avail);
        qs_items *it = NULL;
        rc = qs_queue_peek(c, q->name, q->nl, q->n + 1, &it);
        if (avail == 0) {
            qs_items_free(it);
            if (rc != QS_NOTFOUND)
                MISMATCH("%s: qs_queue_peek('%.*s') rc %d, model has no available item",
                         where, (int)q->nl, (const char *)q->name, rc);
            continue;
        }
        if (rc || it->count != avail) {
            size_t cnt = it ? it->count : 0;
            qs_items_free(it);
            MISMATCH("%s: qs_queue_peek('%.*s') rc %d, %zu items, model %zu", where,
                     (int)q->nl, (const char *)q->name, rc, cnt, avail);
        }
        size_t k = 0;
        for (size_t x = 0; x < q->n; x++) {
            const mitem *mi = &q->it[x];
            if (mi->token)
                continue;
            if (it->ids[k] != mi->id ||
                !same(it->data + it->off[k], it->off[k + 1] - it->off[k], mi->v, mi->vl)) {
                uint64_t got = it->ids[k];
                qs_items_free(it);
                MISMATCH("%s: queue '%.*s' item %zu has id %" PRIu64 ", model id %" PRIu64
                         " (or the payloads differ)", where, (int)q->nl,
                         (const char *)q->name, k, got, mi->id);
            }
            k++;
        }
        qs_items_free(it);
    }
    return 0;
}

static int verify_state(qs_casket *c, const model *m, const char *where)
{
    return verify_records(c, m, where) || verify_queues(c, m, where);
}

/* ------------------------------------------------------------------ */
/* contents                                                            */

static long nrec;               /* records of the seed casket */

static size_t mkkey(char *b, const char *pre, long i)
{
    return (size_t)sprintf(b, "%s%05ld", pre, i);
}

/* A value of n bytes that depends on seed. */
static uint8_t *mkval(size_t n, uint32_t seed)
{
    uint8_t *v = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8) + (seed >> 3));
    if (n >= 4)
        memcpy(v, &seed, 4);
    return v;
}

static size_t seed_vlen(long i)
{
    if (i == 7)
        return 9000;    /* an overflow chain */
    if (i % 16 == 3)
        return 2500;
    return 20 + (size_t)(i * 37 % 400);
}

static char long_key[5100];
static size_t long_klen;

static qs_options opts(int mode)
{
    qs_options o;
    qs_options_init(&o);
    o.flag = mode;
    o.sync = 1;
    o.lock_timeout = 0;
    o.cache_bytes = 64 * 4096;          /* the smallest budget: evictions, spills */
    o.checkpoint_bytes = 128 * 1024;    /* commits that checkpoint */
    return o;
}

/* ------------------------------------------------------------------ */
/* one run of a workload                                               */

typedef struct run {
    tc_tmp t;
    qs_casket *c;
    qs_cursor *cur;
    model com;              /* the last committed state (+ reservations) */
    model txn;              /* the open transaction's view */
    int in_txn;
    int readonly;           /* r->c was opened QS_OPEN_READ */
    const char *op;         /* the call that failed */
    int op_rc;
    int bad;                /* a call succeeded with a wrong result */
    uint64_t spilled;       /* wl_txn: pages spilled by its transaction */
} run;

/* The model a write goes to. */
static model *cur_model(run *r) { return r->in_txn ? &r->txn : &r->com; }

/* Runs a call; a result other than want stops the workload. */
#define DO(r, name, call, want)                                              \
    do {                                                                     \
        (r)->op = (name);                                                    \
        int do_rc_ = (call);                                                 \
        if (do_rc_ != (want)) {                                              \
            (r)->op_rc = do_rc_;                                             \
            return 1;                                                        \
        }                                                                    \
    } while (0)

/* A call that succeeded must have given the model's answer. */
#define EXPECT(r, cond)                                                      \
    do {                                                                     \
        if (!(cond)) {                                                       \
            if (reports_left > 0)                                            \
                printf("  [%s] %s succeeded with a wrong result: %s "        \
                       "(test_alloc.c:%d)\n", ctx, (r)->op, #cond, __LINE__);\
            (r)->bad = 1;                                                    \
            return 1;                                                        \
        }                                                                    \
    } while (0)

static int do_open(run *r, int mode)
{
    qs_options o = opts(mode);
    qs_casket *c = (qs_casket *)0x1;
    int rc = qs_open(r->t.path, &o, &c);
    if (rc == 0) {
        r->c = c;
        r->readonly = mode == QS_OPEN_READ;
    }
    else if (c != NULL) {
        if (reports_left > 0)
            printf("  [%s] qs_open failed (%d) but *out is not NULL\n", ctx, rc);
        r->bad = 1;
    }
    return rc;
}

static int do_close(run *r)
{
    qs_casket *c = r->c;
    r->c = NULL;            /* gone whatever qs_close returns */
    return qs_close(c);
}

static int do_begin(run *r)
{
    int rc = qs_begin(r->c);
    if (rc == 0) {
        m_copy(&r->txn, &r->com);
        r->in_txn = 1;
    }
    return rc;
}

/* qs_commit: the transaction is over whatever it returns. */
static int do_commit(run *r)
{
    int rc = qs_commit(r->c);
    if (rc == 0) {
        m_free(&r->com);
        r->com = r->txn;
        memset(&r->txn, 0, sizeof r->txn);
    } else
        m_free(&r->txn);
    r->in_txn = 0;
    return rc;
}

/* Helpers that call and, on success, apply the change to the model. */
static int w_put(run *r, const void *k, size_t kl, const void *v, size_t vl)
{
    int rc = qs_put(r->c, k, kl, v, vl);
    if (rc == 0)
        m_put(cur_model(r), k, kl, v, vl);
    return rc;
}

static int w_putdup(run *r, const void *k, size_t kl, const void *v, size_t vl)
{
    int rc = qs_putdup(r->c, k, kl, v, vl);
    if (rc == 0)
        m_putdup(cur_model(r), k, kl, v, vl);
    return rc;
}

static int w_put_seed(run *r, const char *pre, long i, size_t vl, uint32_t seed, int dup)
{
    char k[32];
    size_t kl = mkkey(k, pre, i);
    uint8_t *v = mkval(vl, seed);
    int rc = dup ? w_putdup(r, k, kl, v, vl) : w_put(r, k, kl, v, vl);
    free(v);
    return rc;
}

static int w_out(run *r, const char *k)
{
    int rc = qs_out(r->c, k, strlen(k));
    if (rc == 0 && !m_out(cur_model(r), k, strlen(k)))
        rc = -1;    /* removed a record the model does not have */
    return rc;
}

/* qs_putdup_many of n records "<pre>%05d", keys in a scrambled order with
 * repeats, applied to the model on success. */
static int w_putdup_many(run *r, const char *pre, size_t n, uint32_t seed)
{
    uint8_t *keys = xmalloc(n * 16), *vals = NULL;
    uint64_t *koff = xmalloc((n + 1) * sizeof *koff), *voff = xmalloc((n + 1) * sizeof *voff);
    size_t vtot = 0;
    for (size_t i = 0; i < n; i++)
        vtot += 10 + (i * 53) % 700;
    vals = xmalloc(vtot);
    koff[0] = voff[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char k[32];
        size_t kl = mkkey(k, pre, (long)((n - i) * 7 % (n / 2 + 1)));
        memcpy(keys + koff[i], k, kl);
        koff[i + 1] = koff[i] + kl;
        size_t vl = 10 + (i * 53) % 700;
        uint8_t *v = mkval(vl, seed + (uint32_t)i);
        memcpy(vals + voff[i], v, vl);
        free(v);
        voff[i + 1] = voff[i] + vl;
    }
    int rc = qs_putdup_many(r->c, n, keys, koff, vals, voff);
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            m_putdup(cur_model(r), keys + koff[i], koff[i + 1] - koff[i], vals + voff[i],
                     voff[i + 1] - voff[i]);
    free(keys);
    free(vals);
    free(koff);
    free(voff);
    return rc;
}

/* qs_get of k, compared with the model. */
#define GET_CHECK(r, k, kl)                                                  \
    do {                                                                     \
        void *v_ = NULL;                                                     \
        size_t vl_ = 0;                                                      \
        const mrec *e_ = m_first(cur_model(r), (k), (kl));                   \
        DO(r, "qs_get", qs_get((r)->c, (k), (kl), &v_, &vl_),                \
           e_ ? 0 : QS_NOTFOUND);                                            \
        int ok_ = e_ ? same(v_, vl_, e_->v, e_->vl) : v_ == NULL;            \
        qs_free(v_);                                                         \
        EXPECT(r, ok_);                                                      \
    } while (0)

static int w_qput(run *r, const char *name, const void *v, size_t vl)
{
    uint64_t id = 0;
    int rc = qs_queue_put(r->c, name, strlen(name), v, vl, &id);
    if (rc == 0)
        mq_add(cur_model(r), name, id, v, vl);
    return rc;
}

/* qs_queue_put_many of n items, sizes varying (item 5 is 5000 bytes). */
static int w_qput_many(run *r, const char *name, size_t n, uint32_t seed)
{
    uint32_t *lens = xmalloc(n * sizeof *lens);
    size_t tot = 0;
    for (size_t i = 0; i < n; i++)
        tot += lens[i] = i == 5 ? 5000 : (uint32_t)(i * 29 % 300);
    uint8_t *vals = xmalloc(tot), *p = vals;
    for (size_t i = 0; i < n; i++) {
        uint8_t *v = mkval(lens[i], seed + (uint32_t)i);
        memcpy(p, v, lens[i]);
        free(v);
        p += lens[i];
    }
    uint64_t first = 0;
    int rc = qs_queue_put_many(r->c, name, strlen(name), n, vals, tot, lens, &first);
    if (rc == 0) {
        p = vals;
        for (size_t i = 0; i < n; i++) {
            mq_add(cur_model(r), name, first + i, p, lens[i]);
            p += lens[i];
        }
    }
    free(vals);
    free(lens);
    return rc;
}

/* qs_queue_publish of one payload to the names (NULL-terminated list). */
static int w_publish(run *r, const char *const *names, size_t vl, uint32_t seed)
{
    uint8_t buf[256];
    uint64_t noff[9];
    size_t n = 0;
    noff[0] = 0;
    for (; names[n]; n++) {
        memcpy(buf + noff[n], names[n], strlen(names[n]));
        noff[n + 1] = noff[n] + strlen(names[n]);
    }
    uint8_t *v = mkval(vl, seed);
    uint64_t id = 0;
    int rc = qs_queue_publish(r->c, n, buf, noff, v, vl, &id);
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            mq_add(cur_model(r), names[i], id, v, vl);
    free(v);
    return rc;
}

/* Do the items match the first `count` free items of the model queue?
 * (for get, peek and reserve) */
static int items_match(mqueue *q, const qs_items *it, size_t want)
{
    if (!it || it->count != want)
        return 0;
    size_t k = 0;
    for (size_t j = 0; j < q->n && k < want; j++) {
        mitem *mi = &q->it[j];
        if (mi->token)
            continue;
        if (it->ids[k] != mi->id ||
            !same(it->data + it->off[k], it->off[k + 1] - it->off[k], mi->v, mi->vl))
            return 0;
        k++;
    }
    return k == want;
}

/* qs_queue_get of up to max items, checked and applied to the model. */
#define QGET(r, name, max)                                                   \
    do {                                                                     \
        mqueue *q_ = mq_get(cur_model(r), (name), strlen(name));             \
        size_t av_ = mq_avail(q_), want_ = av_ < (max) ? av_ : (max);        \
        qs_items *it_ = NULL;                                                \
        DO(r, "qs_queue_get", qs_queue_get((r)->c, (name), strlen(name),     \
                                           (max), 0, &it_),                  \
           want_ ? 0 : QS_NOTFOUND);                                         \
        int ok_ = want_ ? items_match(q_, it_, want_) : it_ == NULL;         \
        if (ok_)                                                             \
            for (size_t i_ = 0; i_ < want_; i_++)                            \
                mq_remove(q_, it_->ids[i_]);                                 \
        qs_items_free(it_);                                                  \
        EXPECT(r, ok_);                                                      \
    } while (0)

#define QPEEK(r, name, max)                                                  \
    do {                                                                     \
        mqueue *q_ = mq_get(cur_model(r), (name), strlen(name));             \
        size_t av_ = mq_avail(q_), want_ = av_ < (max) ? av_ : (max);        \
        qs_items *it_ = NULL;                                                \
        DO(r, "qs_queue_peek", qs_queue_peek((r)->c, (name), strlen(name),   \
                                             (max), &it_),                   \
           want_ ? 0 : QS_NOTFOUND);                                         \
        int ok_ = want_ ? items_match(q_, it_, want_) : it_ == NULL;         \
        qs_items_free(it_);                                                  \
        EXPECT(r, ok_);                                                      \
    } while (0)

/* qs_queue_reserve (no lease): *id and *token get the reservation. */
#define QRESERVE(r, name, idp, tokp)                                         \
    do {                                                                     \
        mqueue *q_ = mq_get(cur_model(r), (name), strlen(name));             \
        qs_items *it_ = NULL;                                                \
        DO(r, "qs_queue_reserve", qs_queue_reserve((r)->c, (name),           \
                                                   strlen(name), 0, 0, &it_),\
           0);                                                               \
        int ok_ = items_match(q_, it_, 1) && it_->token != 0;                \
        if (ok_) {                                                           \
            *(idp) = it_->ids[0];                                            \
            *(tokp) = it_->token;                                            \
            mq_find(q_, *(idp))->token = it_->token;                         \
        }                                                                    \
        qs_items_free(it_);                                                  \
        EXPECT(r, ok_);                                                      \
    } while (0)

#define QLEN(r, name)                                                        \
    do {                                                                     \
        uint64_t len_ = 0;                                                   \
        mqueue *q_ = mq_get(cur_model(r), (name), strlen(name));             \
        DO(r, "qs_queue_len", qs_queue_len((r)->c, (name), strlen(name),     \
                                           &len_), 0);                       \
        EXPECT(r, len_ == mq_avail(q_));                                     \
    } while (0)

/* ------------------------------------------------------------------ */
/* the seed casket                                                     */

static tc_tmp seed_dir;         /* holds "seed" and "seed-log" */
static model seed_model;
static char seed_path[700], seed_log[720];

/* Builds the seed casket: records (duplicates, overflow values, a key with
 * an overflow part) and queues (an overflow payload, a published one),
 * partly checkpointed into the main file and partly in the log only: the
 * files are copied while the handle is still open, as after a crash, so
 * every open of a copy recovers from the log. */
static int build_seed(void)
{
    if (tc_tmp_make(&seed_dir) != 0)
        return -1;
    tc_tmp_keep(&seed_dir);     /* shared by the cases; main removes it */
    run r;
    memset(&r, 0, sizeof r);
    r.t = seed_dir;
    int rc = do_open(&r, QS_OPEN_NEW);
    if (rc)
        return rc;
    memset(long_key, 'L', sizeof long_key);
    memcpy(long_key, "k00100", 6);
    long_klen = 5000;
    if ((rc = do_begin(&r)) != 0)
        return rc;
    for (long i = 0; i < nrec && rc == 0; i++)
        rc = w_put_seed(&r, "k", 2 * i, seed_vlen(i), (uint32_t)i, 0);
    for (int j = 0; j < 2 && rc == 0; j++)
        rc = w_put_seed(&r, "k", 10, 100 + 10 * (size_t)j, 1000u + (uint32_t)j, 1);
    if (rc == 0)
        rc = w_put_seed(&r, "k", 20, 300, 1002, 1);
    uint8_t *v = mkval(50, 77);
    if (rc == 0)
        rc = w_put(&r, long_key, long_klen, v, 50);
    free(v);
    if (rc == 0)
        rc = w_put(&r, "", 0, "", 0);     /* the empty key, an empty value */
    for (int i = 0; i < 8 && rc == 0; i++) {
        size_t vl = i == 3 ? 5000 : 40 + 13 * (size_t)i;
        uint8_t *qv = mkval(vl, 2000u + (uint32_t)i);
        rc = w_qput(&r, "qa", qv, vl);
        free(qv);
    }
    if (rc == 0)
        rc = w_qput_many(&r, "qb", 4, 3000);
    static const char *const pub[] = {"qa", "qc", NULL};
    if (rc == 0)
        rc = w_publish(&r, pub, 100, 4000);
    if (rc == 0)
        rc = do_commit(&r);
    if (rc == 0)
        rc = qs_sync(r.c);
    /* the rest stays in the log */
    for (long i = 0; i < 20 && rc == 0; i++)
        rc = w_put_seed(&r, "k", 2 * i + 1, 60 + (size_t)i, 5000u + (uint32_t)i, 0);
    if (rc == 0)
        rc = w_qput(&r, "qb", "late", 4);
    snprintf(seed_path, sizeof seed_path, "%s/seed", seed_dir.dir);
    snprintf(seed_log, sizeof seed_log, "%s/seed-log", seed_dir.dir);
    if (rc == 0 && (tc_copy_file(r.t.path, seed_path) != 0 ||
                    tc_copy_file(r.t.log, seed_log) != 0))
        rc = -1;
    if (rc == 0 && (rc = check_ok(r.c)) == 0)
        rc = verify_state(r.c, &r.com, "seed");
    int crc = do_close(&r);
    if (rc == 0)
        rc = crc;
    seed_model = r.com;
    return rc;
}

/* ------------------------------------------------------------------ */
/* the workloads                                                       */

/* Open with recovery, use, close, reopen, use, close. */
static int wl_open(run *r)
{
    DO(r, "qs_open", do_open(r, QS_OPEN_WRITE), 0);
    GET_CHECK(r, "k00014", 6);
    QLEN(r, "qa");
    uint8_t *v = mkval(30, 1);
    int rc = w_put(r, "opened", 6, v, 30);
    free(v);
    DO(r, "qs_put", rc, 0);
    DO(r, "qs_close", do_close(r), 0);
    DO(r, "qs_open", do_open(r, QS_OPEN_WRITE), 0);
    GET_CHECK(r, "opened", 6);
    GET_CHECK(r, long_key, long_klen);
    DO(r, "qs_close", do_close(r), 0);
    DO(r, "qs_open", do_open(r, QS_OPEN_READ), 0);
    GET_CHECK(r, "k00014", 6);
    QPEEK(r, "qb", 3);
    DO(r, "qs_close", do_close(r), 0);
    return 0;
}

/* Create a casket, fill it, close, reopen. */
static int wl_create(run *r)
{
    DO(r, "qs_open", do_open(r, QS_OPEN_NEW), 0);
    {
        qs_items *l = NULL;
        DO(r, "qs_queue_list", qs_queue_list(r->c, &l), 0);
        int ok = l && l->count == 0;
        qs_items_free(l);
        EXPECT(r, ok);
    }
    DO(r, "qs_put", w_put_seed(r, "n", 1, 40, 1, 0), 0);
    /* the first commit alone, then closed: nothing later rewrites its page */
    DO(r, "qs_close", do_close(r), 0);
    DO(r, "qs_open", do_open(r, QS_OPEN_WRITE), 0);
    GET_CHECK(r, "n00001", 6);
    DO(r, "qs_putdup", w_put_seed(r, "n", 1, 3000, 2, 1), 0);
    DO(r, "qs_put", w_put_seed(r, "n", 2, 9000, 3, 0), 0);
    DO(r, "qs_queue_put", w_qput(r, "nq", "first", 5), 0);
    DO(r, "qs_close", do_close(r), 0);
    DO(r, "qs_open", do_open(r, QS_OPEN_WRITE), 0);
    GET_CHECK(r, "n00002", 6);
    QPEEK(r, "nq", 2);
    DO(r, "qs_close", do_close(r), 0);
    return 0;
}

/* The record calls, each its own transaction. */
static int wl_records(run *r)
{
    DO(r, "qs_put", w_put_seed(r, "k", 3, 100, 11, 0), 0);
    DO(r, "qs_put", w_put_seed(r, "k", 10, 120, 12, 0), 0);     /* had 3 values */
    DO(r, "qs_putdup", w_put_seed(r, "k", 20, 300, 13, 1), 0);
    DO(r, "qs_putdup", w_put_seed(r, "k", 40, 6000, 14, 1), 0); /* overflow */
    {
        uint8_t *v = mkval(70, 15);
        r->op = "qs_putkeep";
        int rc = qs_putkeep(r->c, "j00005", 6, v, 70);
        if (rc == 0)
            m_putdup(&r->com, "j00005", 6, v, 70);
        free(v);
        DO(r, "qs_putkeep", rc, 0);
        DO(r, "qs_putkeep", qs_putkeep(r->c, "k00000", 6, "x", 1), QS_KEYEXIST);
    }
    DO(r, "qs_putdup_many", w_putdup_many(r, "m", 40, 100), 0);
    GET_CHECK(r, "k00002", 6);
    GET_CHECK(r, "k00014", 6);          /* the 9000-byte value */
    {
        void *out = NULL;
        size_t outlen = 0;
        uint64_t cnt = 0;
        DO(r, "qs_getdup", qs_getdup(r->c, "k00020", 6, &out, &outlen, &cnt), 0);
        size_t lo = m_lower(&r->com, "k00020", 6), n = m_count(&r->com, "k00020", 6), at = 0;
        int ok = cnt == n;
        for (size_t i = 0; ok && i < n; i++) {
            const mrec *e = &r->com.r[lo + i];
            ok = at + 4 + e->vl <= outlen && tc_le32((uint8_t *)out + at) == e->vl &&
                 same((uint8_t *)out + at + 4, e->vl, e->v, e->vl);
            at += 4 + e->vl;
        }
        qs_free(out);
        EXPECT(r, ok && at == outlen);
    }
    {
        uint64_t cnt = 0;
        DO(r, "qs_count", qs_count(r->c, "m00003", 6, &cnt), 0);
        EXPECT(r, cnt == m_count(&r->com, "m00003", 6));
    }
    DO(r, "qs_out", w_out(r, "k00002"), 0);
    {
        uint64_t removed = 0;
        DO(r, "qs_outlist", qs_outlist(r->c, "k00020", 6, &removed), 0);
        EXPECT(r, removed == m_outlist(&r->com, "k00020", 6));
    }
    {
        uint64_t n = 0;
        DO(r, "qs_records", qs_records(r->c, &n), 0);
        EXPECT(r, n == r->com.nr);
    }
    {
        uint8_t *v = mkval(200, 16);
        int rc = w_put(r, long_key, long_klen, v, 200);
        free(v);
        DO(r, "qs_put", rc, 0);
    }
    GET_CHECK(r, long_key, long_klen);
    DO(r, "qs_out", qs_out(r->c, "nokey", 5), QS_NOTFOUND);
    GET_CHECK(r, "", 0);                        /* an empty value */
    DO(r, "qs_put", w_put(r, "e-empty", 7, "", 0), 0);
    GET_CHECK(r, "e-empty", 7);
    /* keys with an overflow part, enough to split leaves on them */
    for (int i = 0; i < 12; i++) {
        char k[2100];
        memset(k, 'x', sizeof k);
        snprintf(k, 16, "LK%03d", i);
        k[strlen(k)] = 'x';
        uint8_t *v = mkval(20, 30u + (uint32_t)i);
        int rc = w_put(r, k, sizeof k, v, 20);
        free(v);
        DO(r, "qs_put", rc, 0);
    }
    return 0;
}

/* qs_cursor_get compared with model record i. */
#define CUR_CHECK(r, i)                                                      \
    do {                                                                     \
        void *k_ = NULL, *v_ = NULL;                                         \
        size_t kl_ = 0, vl_ = 0, i_ = (i);                                   \
        DO(r, "qs_cursor_get", qs_cursor_get((r)->cur, &k_, &kl_, &v_, &vl_),\
           0);                                                               \
        int ok_ = i_ < (r)->com.nr &&                                        \
                  same(k_, kl_, (r)->com.r[i_].k, (r)->com.r[i_].kl) &&      \
                  same(v_, vl_, (r)->com.r[i_].v, (r)->com.r[i_].vl);        \
        qs_free(k_);                                                         \
        qs_free(v_);                                                         \
        EXPECT(r, ok_);                                                      \
    } while (0)

/* qs_cursor_read of max records from model position *pos onward. */
static int cur_read(run *r, size_t *pos, size_t max, int reverse)
{
    void *out = NULL;
    size_t outlen = 0, at = 0;
    uint64_t cnt = 0;
    DO(r, "qs_cursor_read", qs_cursor_read(r->cur, max, reverse, &out, &outlen, &cnt), 0);
    int ok = cnt == max;
    for (size_t j = 0; ok && j < max; j++) {
        const mrec *e = &r->com.r[reverse ? *pos - j : *pos + j];
        const uint8_t *p = (const uint8_t *)out + at;
        ok = at + 8 + e->kl + e->vl <= outlen && tc_le32(p) == e->kl &&
             same(p + 4, e->kl, e->k, e->kl) && tc_le32(p + 4 + e->kl) == e->vl &&
             same(p + 8 + e->kl, e->vl, e->v, e->vl);
        at += 8 + e->kl + e->vl;
    }
    qs_free(out);
    EXPECT(r, ok && at == outlen);
    *pos = reverse ? *pos - max : *pos + max;
    return 0;
}

static int wl_cursor(run *r)
{
    size_t pos = 0;
    DO(r, "qs_cursor_open", qs_cursor_open(r->c, &r->cur), 0);
    DO(r, "qs_cursor_first", qs_cursor_first(r->cur), 0);
    CUR_CHECK(r, 0);
    for (int i = 0; i < 3; i++)
        DO(r, "qs_cursor_next", qs_cursor_next(r->cur), 0);
    pos = 3;
    CUR_CHECK(r, pos);
    if (cur_read(r, &pos, 20, 0))
        return 1;
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_jump", qs_cursor_jump(r->cur, "k00100", 6), 0);
    pos = m_lower(&r->com, "k00100", 6);
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_next", qs_cursor_next(r->cur), 0);     /* the long key */
    pos++;
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_prev", qs_cursor_prev(r->cur), 0);
    pos--;
    CUR_CHECK(r, pos);
    /* a commit in between: the cursor finds its place again by key */
    DO(r, "qs_put", w_put_seed(r, "a", 1, 30, 21, 0), 0);
    pos++;
    DO(r, "qs_cursor_next", qs_cursor_next(r->cur), 0);
    pos++;
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_last", qs_cursor_last(r->cur), 0);
    pos = r->com.nr - 1;
    CUR_CHECK(r, pos);
    if (cur_read(r, &pos, 10, 1))
        return 1;
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_jump", qs_cursor_jump(r->cur, "k00050", 6), 0);
    pos = m_lower(&r->com, "k00050", 6);
    DO(r, "qs_cursor_out", qs_cursor_out(r->cur), 0);
    m_remove_at(&r->com, pos);
    CUR_CHECK(r, pos);
    DO(r, "qs_cursor_out", qs_cursor_out(r->cur), 0);
    m_remove_at(&r->com, pos);
    CUR_CHECK(r, pos);
    qs_cursor_close(r->cur);
    r->cur = NULL;
    return 0;
}

static long txn_big;            /* wl_txn: 2600-byte records, enough to spill */

/* One transaction: enough pages to spill, buffered putdups, reads inside
 * it, queue calls; its commit checkpoints. */
static int wl_txn(run *r)
{
    DO(r, "qs_begin", do_begin(r), 0);
    for (long i = 0; i < txn_big; i++)
        DO(r, "qs_put", w_put_seed(r, "t", i, 2600, 300u + (uint32_t)i, 0), 0);
    for (long i = 0; i < 40; i++)
        DO(r, "qs_putdup", w_put_seed(r, "d", i % 10, 50 + (size_t)i, 400u + (uint32_t)i, 1), 0);
    GET_CHECK(r, "d00005", 6);          /* applies the buffered putdups */
    GET_CHECK(r, "t00003", 6);          /* maybe spilled */
    DO(r, "qs_queue_put", w_qput(r, "qt", "in-txn", 6), 0);
    QGET(r, "qa", 2);
    DO(r, "qs_out", w_out(r, "k00004"), 0);
    DO(r, "qs_putdup_many", w_putdup_many(r, "e", 30, 500), 0);
    for (long i = 0; i < txn_big / 2; i++)
        DO(r, "qs_put", w_put_seed(r, "t", i, 100, 600u + (uint32_t)i, 0), 0);
    DO(r, "qs_commit", do_commit(r), 0);
    qs_stat st;
    DO(r, "qs_stat_get", qs_stat_get(r->c, &st), 0);
    r->spilled = st.spilled_pages;
    GET_CHECK(r, "t00001", 6);
    return 0;
}

/* Checkpoint, check, compact. */
static int wl_maint(run *r)
{
    for (long i = 0; i < 5; i++)
        DO(r, "qs_put", w_put_seed(r, "s", i, 900, 700u + (uint32_t)i, 0), 0);
    DO(r, "qs_sync", qs_sync(r->c), 0);
    for (long i = 5; i < 10; i++)
        DO(r, "qs_put", w_put_seed(r, "s", i, 900, 700u + (uint32_t)i, 0), 0);
    DO(r, "qs_out", w_out(r, "k00006"), 0);
    DO(r, "qs_out", w_out(r, "k00014"), 0);     /* frees an overflow chain */
    {
        char msg[256];
        DO(r, "qs_check", qs_check(r->c, msg, sizeof msg), 0);
    }
    DO(r, "qs_compact", qs_compact(r->c), 0);
    GET_CHECK(r, "s00003", 6);
    GET_CHECK(r, long_key, long_klen);
    QPEEK(r, "qa", 3);
    DO(r, "qs_put", w_put_seed(r, "s", 11, 50, 711, 0), 0);
    {
        qs_stat st;
        DO(r, "qs_stat_get", qs_stat_get(r->c, &st), 0);
    }
    DO(r, "qs_sync", qs_sync(r->c), 0);
    return 0;
}

static int wl_queue(run *r)
{
    uint64_t id1 = 0, tok1 = 0, id2 = 0, tok2 = 0, id3 = 0, tok3 = 0;
    DO(r, "qs_queue_put", w_qput(r, "qa", "one more", 8), 0);
    DO(r, "qs_queue_put_many", w_qput_many(r, "qb", 20, 800), 0);
    static const char *const pub[] = {"qa", "qc", "qd", NULL};
    DO(r, "qs_queue_publish", w_publish(r, pub, 3000, 900), 0);
    QPEEK(r, "qa", 5);
    QLEN(r, "qb");
    QGET(r, "qa", 3);
    QRESERVE(r, "qb", &id1, &tok1);
    QRESERVE(r, "qb", &id2, &tok2);
    DO(r, "qs_queue_ack", qs_queue_ack(r->c, "qb", 2, id1, tok1), 0);
    mq_remove(mq_get(&r->com, "qb", 2), id1);
    DO(r, "qs_queue_release", qs_queue_release(r->c, "qb", 2, id2, tok2), 0);
    mq_find(mq_get(&r->com, "qb", 2), id2)->token = 0;
    {
        qs_items *l = NULL;
        DO(r, "qs_queue_list", qs_queue_list(r->c, &l), 0);
        size_t want = 0;
        for (size_t i = 0; i < r->com.nq; i++)
            want += r->com.q[i].n > 0;
        int ok = l->count == want;
        qs_items_free(l);
        EXPECT(r, ok);
    }
    QGET(r, "qc", 10);                  /* takes a shared reference */
    {
        uint64_t removed = 0;
        size_t want = mq_avail(mq_get(&r->com, "qd", 2));
        DO(r, "qs_queue_clear", qs_queue_clear(r->c, "qd", 2, &removed), 0);
        EXPECT(r, removed == want);
        mqueue *q = mq_get(&r->com, "qd", 2);
        while (q->n)
            mq_remove(q, q->it[0].id);
    }
    /* reserve and acknowledge the rest of qa (the last one is shared) */
    while (mq_avail(mq_get(&r->com, "qa", 2))) {
        QRESERVE(r, "qa", &id3, &tok3);
        DO(r, "qs_queue_ack", qs_queue_ack(r->c, "qa", 2, id3, tok3), 0);
        mq_remove(mq_get(&r->com, "qa", 2), id3);
    }
    QRESERVE(r, "qb", &id1, &tok1);     /* kept: reservations outlive calls */
    QGET(r, "qb", 2);
    {
        uint64_t n = 0;
        DO(r, "qs_queue_records", qs_queue_records(r->c, &n), 0);
    }
    return 0;
}

/* qs_queue_fail of the item reserved once (id, tok) of queue name with
 * reason `why`, then its count (1) and reason read back. */
static int w_fail_once(run *r, const char *name, uint64_t id, uint64_t tok, const char *why)
{
    size_t nl = strlen(name), wl = strlen(why), got_len = 0;
    DO(r, "qs_queue_fail", qs_queue_fail(r->c, name, nl, id, tok, why, wl), 0);
    mq_find(mq_get(&r->com, name, nl), id)->token = 0;
    uint32_t d = 0;
    void *got = NULL;
    DO(r, "qs_queue_item_info", qs_queue_item_info(r->c, name, nl, id, &d, &got, &got_len), 0);
    int ok = d == 1 && got_len == wl && memcmp(got, why, wl) == 0;
    qs_free(got);
    EXPECT(r, ok);
    return 0;
}

/* The queue policy: a config set and read, a reserve that counts (the
 * item's record rewritten), a fail with a reason, and the take that moves
 * the spent item to the dead-letter queue in the same commit. */
static int wl_policy(run *r)
{
    uint64_t id = 0, tok = 0, first = 0;
    qs_queue_config cfg = {50, 1, 0, "pd", 2};
    DO(r, "qs_queue_config_set", qs_queue_config_set(r->c, "pj", 2, &cfg), 0);
    {
        qs_queue_config got;
        DO(r, "qs_queue_config_get", qs_queue_config_get(r->c, "pj", 2, &got), 0);
        int ok = got.maxsize == 50 && got.max_deliveries == 1 && got.dead_letter_len == 2 &&
                 memcmp(got.dead_letter, "pd", 2) == 0;
        qs_free((void *)got.dead_letter);
        EXPECT(r, ok);
    }
    DO(r, "qs_queue_put", w_qput(r, "pj", "first", 5), 0);
    DO(r, "qs_queue_put_many", w_qput_many(r, "pj", 8, 300), 0);
    QRESERVE(r, "pj", &id, &tok);
    first = id;
    if (w_fail_once(r, "pj", id, tok, "why"))
        return 1;
    {
        /* the next reserve moves "first" and hands out the item after it */
        qs_items *it = NULL;
        DO(r, "qs_queue_reserve", qs_queue_reserve(r->c, "pj", 2, 0, 0, &it), 0);
        mqueue *q = mq_get(&r->com, "pj", 2);
        mitem *f = mq_find(q, first);
        mq_add(&r->com, "pd", first, f->v, f->vl);
        mq_remove(mq_get(&r->com, "pj", 2), first);
        q = mq_get(&r->com, "pj", 2);
        int ok = items_match(q, it, 1) && it->token != 0;
        if (ok)
            mq_find(q, it->ids[0])->token = it->token;
        qs_items_free(it);
        EXPECT(r, ok);
    }
    QGET(r, "pd", 1);
    QGET(r, "pj", 3);
    return 0;
}

/* Issue 13's other records: priority runs (all items of "po" at one
 * priority, so the model's id order is the queue's), a reserve, a fail and
 * the item's count read back from its run; stream "ps" with a group: its
 * creation, appends, a group read, the pending list, a claim, an ack whose
 * retention removes items, a replay, and the retention settings.  Streams
 * are not queues (qs_queue_list does not list them) and the model does not
 * follow them: a failure must return an error and leave nothing leaked,
 * and what succeeds must give the right answer. */
static int wl_semantics(run *r)
{
    uint64_t id = 0, tok = 0, first = 0;
    {
        static const char vals[] = "p1p2p3";
        static const uint32_t lens[3] = {2, 2, 2};
        DO(r, "qs_queue_put_order",
           qs_queue_put_order(r->c, "po", 2, 3, vals, 6, lens, 0, 5, &first), 0);
        for (uint64_t i = 0; i < 3; i++)
            mq_add(cur_model(r), "po", first + i, vals + 2 * i, 2);
    }
    QRESERVE(r, "po", &id, &tok);
    if (w_fail_once(r, "po", id, tok, "late"))
        return 1;
    QGET(r, "po", 2);
    DO(r, "qs_stream_group", qs_stream_group(r->c, "ps", 2, "g", 1, QS_STREAM_FIRST, 0), 0);
    {
        static const char vals[] = "s1s2s3s4";
        static const uint32_t lens[4] = {2, 2, 2, 2};
        DO(r, "qs_stream_append",
           qs_stream_append(r->c, "ps", 2, 4, vals, 8, lens, 10.0, &first), 0);
    }
    {
        qs_items *it = NULL;
        DO(r, "qs_stream_read_group",
           qs_stream_read_group(r->c, "ps", 2, "g", 1, "c", 1, 3, 0, 11.0, &it), 0);
        int ok = it->count == 3 && it->ids[0] == first;
        qs_items_free(it);
        EXPECT(r, ok);
    }
    {
        qs_items *it = NULL;
        DO(r, "qs_stream_pending", qs_stream_pending(r->c, "ps", 2, "g", 1, &it), 0);
        int ok = it->count == 3;
        qs_items_free(it);
        EXPECT(r, ok);
    }
    {
        qs_items *it = NULL;
        DO(r, "qs_stream_claim",
           qs_stream_claim(r->c, "ps", 2, "g", 1, "d", 1, 0, 2, 12.0, &it), 0);
        int ok = it->count == 2 && it->ids[0] == first;
        qs_items_free(it);
        EXPECT(r, ok);
    }
    {
        uint64_t ids[2] = {first, first + 1}, bad = 0;
        DO(r, "qs_stream_ack", qs_stream_ack(r->c, "ps", 2, "g", 1, 2, ids, &bad), 0);
    }
    {
        qs_items *it = NULL;
        uint64_t len = 0;
        DO(r, "qs_stream_read", qs_stream_read(r->c, "ps", 2, 0, 10, &it), 0);
        int ok = it->count == 2 && it->ids[0] == first + 2;
        qs_items_free(it);
        EXPECT(r, ok);
        DO(r, "qs_stream_configure", qs_stream_configure(r->c, "ps", 2, 1, 0, 13.0), 0);
        DO(r, "qs_stream_len", qs_stream_len(r->c, "ps", 2, &len), 0);
        EXPECT(r, len == 1);
    }
    return 0;
}

/* qs_queue_put_keyed of n one-byte items v[i] under keys k[i] (NULL:
 * none), the items it stored added to the model; its ids into ids. */
static int w_kput(run *r, const char *name, size_t n, const char *v, const char *const *k,
                  uint64_t *ids, size_t *stored)
{
    uint32_t lens[8], kl[8];
    char keys[64];
    size_t kt = 0;
    for (size_t i = 0; i < n; i++) {
        lens[i] = 1;
        kl[i] = k[i] ? (uint32_t)strlen(k[i]) : QS_NO_KEY;
        if (k[i]) {
            memcpy(keys + kt, k[i], kl[i]);
            kt += kl[i];
        }
    }
    int rc = qs_queue_put_keyed(r->c, name, strlen(name), n, v, n, lens, keys, kt, kl, 0, 0, ids,
                                stored);
    /* the stored items are the first occurrences of the *stored largest
     * ids: fresh ids are above every earlier one */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t above = 0, seen = 0;
        for (size_t j = 0; j < n; j++) {
            int distinct = 1;
            for (size_t m = 0; m < j; m++)
                distinct &= ids[m] != ids[j];
            above += distinct && ids[j] > ids[i];
            seen |= j < i && ids[j] == ids[i];
        }
        if (!seen && above < *stored)
            mq_add(cur_model(r), name, ids[i], v + i, 1);
    }
    return rc;
}

/* Dedup keys: a keyed put, its duplicate, a batch with a repeat, the takes
 * that start the keys' expiry, a duplicate within the window, and the
 * prune of a keyed put. */
static int wl_dedup(run *r)
{
    qs_queue_config cfg = {0, 0, 3600, NULL, 0};
    DO(r, "qs_queue_config_set", qs_queue_config_set(r->c, "kd", 2, &cfg), 0);
    uint64_t ids[8] = {0}, first = 0;
    size_t stored = 0;
    static const char *const one[] = {"k1"};
    DO(r, "qs_queue_put_keyed", w_kput(r, "kd", 1, "a", one, ids, &stored), 0);
    first = ids[0];
    EXPECT(r, stored == 1);
    DO(r, "qs_queue_put_keyed", w_kput(r, "kd", 1, "b", one, ids, &stored), 0);
    EXPECT(r, stored == 0 && ids[0] == first);
    static const char *const batch[] = {"k2", "k2", NULL, "k1", "k3"};
    DO(r, "qs_queue_put_keyed", w_kput(r, "kd", 5, "cdefg", batch, ids, &stored), 0);
    EXPECT(r, stored == 3 && ids[1] == ids[0] && ids[3] == first);
    QGET(r, "kd", 3);
    DO(r, "qs_queue_put_keyed", w_kput(r, "kd", 1, "h", one, ids, &stored), 0);
    EXPECT(r, stored == 0 && ids[0] == first);
    cfg.dedup_window = 0;
    DO(r, "qs_queue_config_set", qs_queue_config_set(r->c, "kd", 2, &cfg), 0);
    QGET(r, "kd", 5);
    static const char *const two[] = {"k9", "k3"};
    DO(r, "qs_queue_put_keyed", w_kput(r, "kd", 2, "ij", two, ids, &stored), 0);
    EXPECT(r, stored == 2);
    return 0;
}

/* ------------------------------------------------------------------ */
/* the driver                                                          */

static const char *only_wl;    /* QS_ALLOC_ONLY, see drive() */

typedef struct workload {
    const char *name;
    int (*fn)(run *r);
    int seeded;         /* starts from a copy of the seed casket */
    int opened;         /* ... with a handle open on it */
} workload;

typedef struct drive_stats {
    long allocs;            /* allocations of a whole run (the largest N tried - 1) */
    long stopped_nomem;     /* runs stopped by a call returning QS_NOMEM */
    long stopped_other;     /* ... by another error code */
    long absorbed;          /* runs that went through despite the failure */
    long failures;          /* runs that broke a rule */
    double secs;
} drive_stats;

static int setup(run *r, const workload *w)
{
    memset(r, 0, sizeof *r);
    if (tc_tmp_make(&r->t) != 0)
        return -1;
    if (w->seeded) {
        if (tc_copy_file(seed_path, r->t.path) != 0 || tc_copy_file(seed_log, r->t.log) != 0)
            return -1;
        m_copy(&r->com, &seed_model);
    }
    if (w->opened) {
        int rc = do_open(r, QS_OPEN_WRITE);
        if (rc) {
            printf("  [%s] setup: qs_open: %s\n", ctx, qs_strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* After the workload stopped (or went through): the rules of the header.
 * Returns nonzero when one was broken. */
static long defunct_runs;       /* handles left refusing writes by qs_compact */

static int check_after(run *r, const workload *w, int stopped, int close_armed)
{
    int bad = 0;
    char msg[512];
    if (r->cur) {
        qs_cursor_close(r->cur);
        r->cur = NULL;
    }
    if (close_armed && r->c) {
        /* every allocation still fails: closing must work all the same */
        qs_close(r->c);
        r->c = NULL;
        if (r->in_txn) {
            m_free(&r->txn);
            r->in_txn = 0;
        }
    }
    fi_disarm();
    if (r->c) {
        if (r->in_txn) {
            /* the transaction, perhaps spoiled, is committed: it holds
             * everything before the failed call, or nothing */
            int rc = do_commit(r);
            (void)rc;
        }
        if (qs_in_transaction(r->c)) {
            printf("  [%s] the handle still has a transaction open\n", ctx);
            qs_abort(r->c);
            bad = 1;
        }
        if (verify_state(r->c, &r->com, "same handle"))
            bad = 1;
        /* the handle takes writes */
        uint8_t *v = mkval(33, 999);
        int rc = qs_put(r->c, "zz-marker", 9, v, 33);
        if (r->readonly)
            rc = rc == QS_READONLY ? 0 : rc ? rc : -1;
        else if (rc == 0) {
            void *got = NULL;
            size_t gl = 0;
            rc = qs_get(r->c, "zz-marker", 9, &got, &gl);
            if (rc == 0 && !same(got, gl, v, 33))
                rc = -1;
            qs_free(got);
            if (rc == 0)
                rc = qs_out(r->c, "zz-marker", 9);
        }
        free(v);
        if (rc != 0 && stopped && strcmp(r->op, "qs_compact") == 0) {
            /* compaction replaced the file but could not reopen it: the
             * handle refuses writes until reopened ("reopenable") */
            defunct_runs++;
            rc = 0;
        }
        if (rc != 0) {
            if (reports_left > 0)
                printf("  [%s] the handle refuses a write once the failures stopped: %d (%s)\n",
                       ctx, rc, qs_strerror(rc));
            bad = 1;
        }
        if ((rc = qs_check(r->c, msg, sizeof msg)) != 0) {
            if (reports_left > 0)
                printf("  [%s] qs_check on the same handle: %d (%s): %s\n", ctx, rc,
                       qs_strerror(rc), msg);
            bad = 1;
        }
        if ((rc = do_close(r)) != 0) {
            if (reports_left > 0)
                printf("  [%s] qs_close: %d (%s)\n", ctx, rc, qs_strerror(rc));
            bad = 1;
        }
    }
    (void)w;
    /* the files hold the last committed state */
    int rc = do_open(r, QS_OPEN_CREATE);
    if (rc) {
        if (reports_left > 0)
            printf("  [%s] reopen: %d (%s)\n", ctx, rc, qs_strerror(rc));
        return 1;
    }
    m_drop_reservations(&r->com);
    if (verify_state(r->c, &r->com, "reopened"))
        bad = 1;
    if ((rc = qs_check(r->c, msg, sizeof msg)) != 0) {
        if (reports_left > 0)
            printf("  [%s] qs_check after reopen: %d (%s): %s\n", ctx, rc, qs_strerror(rc),
                   msg);
        bad = 1;
    }
    if ((rc = do_close(r)) != 0) {
        if (reports_left > 0)
            printf("  [%s] qs_close after reopen: %d (%s)\n", ctx, rc, qs_strerror(rc));
        bad = 1;
    }
    return bad;
}

static void teardown(run *r)
{
    if (r->cur)
        qs_cursor_close(r->cur);
    if (r->c)
        qs_close(r->c);
    m_free(&r->com);
    m_free(&r->txn);
    tc_tmp_remove(&r->t);
}

enum { MAX_N = 200000 };

/* Broken runs of a drive, grouped by the failed call and the site of the
 * first injected failure. */
typedef struct broken_kind {
    char op[48];
    const char *file;
    int line;
    long first_n, count;
} broken_kind;

static broken_kind kinds[64];
static int nkinds;

static void note_broken(const char *op, long n)
{
    for (int i = 0; i < nkinds; i++)
        if (strcmp(kinds[i].op, op) == 0 && kinds[i].line == fi_hit_line &&
            kinds[i].file && fi_hit_file && strcmp(kinds[i].file, fi_hit_file) == 0) {
            kinds[i].count++;
            return;
        }
    if (nkinds == 64)
        return;
    broken_kind *k = &kinds[nkinds++];
    snprintf(k->op, sizeof k->op, "%s", op);
    k->file = fi_hit_file;
    k->line = fi_hit_line;
    k->first_n = n;
    k->count = 1;
}

/* QS_ALLOC_ONLY=workload:mode:N (e.g. queue:once:47) runs that one case. */
static const char *only_mode;
static long only_n;

static void drive(const workload *w, int sticky, drive_stats *st)
{
    const char *mode = sticky ? "sticky" : "once";
    double t0 = tc_now();
    memset(st, 0, sizeof *st);
    reports_left = 5;
    long n0 = 1, n1 = MAX_N;
    nkinds = 0;
    defunct_runs = 0;
    if (only_wl) {
        if (strcmp(only_wl, w->name) != 0 || strcmp(only_mode, mode) != 0)
            return;
        n0 = n1 = only_n;
    }
    for (long n = n0; n <= n1; n++) {
        run r;
        snprintf(ctx, sizeof ctx, "%s %s N=%ld setup", w->name, mode, n);
        if (setup(&r, w) != 0) {
            CHECK(!"setup failed");
            teardown(&r);
            return;
        }
        fi_arm(n, sticky);
        int stopped = w->fn(&r);
        long hits = fi_hits;
        if (!stopped && hits == 0) {
            /* the whole workload ran without reaching N: done */
            fi_disarm();
            st->allocs = fi_calls;
            snprintf(ctx, sizeof ctx, "%s %s N=%ld (no failure)", w->name, mode, n);
            if (r.bad || check_after(&r, w, 0, 0)) {
                st->failures++;
                CHECK(!"the workload without an injected failure");
            }
            if (strcmp(w->name, "txn") == 0 && r.spilled == 0) {
                printf("  the transaction of wl_txn did not spill\n");
                CHECK(r.spilled > 0);
            }
            teardown(&r);
            break;
        }
        snprintf(ctx, sizeof ctx, "%s %s N=%ld: %s returned %d (%s); first failed allocation "
                 "%s:%d", w->name, mode, n, stopped ? r.op : "(nothing)", stopped ? r.op_rc : 0,
                 stopped ? qs_strerror(r.op_rc) : "all calls succeeded",
                 fi_hit_file ? fi_hit_file : "?", fi_hit_line);
        int bad = r.bad;
        const char *op = stopped ? r.op : "(none failed)";
        if (stopped && hits == 0) {
            /* a broken workload (or library): N will not be reached */
            printf("  [%s] failed with no allocation failure injected\n", ctx);
            CHECK(!"a call failed with no allocation failure injected");
            fi_disarm();
            teardown(&r);
            break;
        }
        if (!stopped)
            st->absorbed++;
        else if (r.op_rc == QS_NOMEM)
            st->stopped_nomem++;
        else {
            st->stopped_other++;
            if (reports_left > 0)
                printf("  note [%s]: an error other than QS_NOMEM\n", ctx);
        }
        if (check_after(&r, w, stopped, sticky && (n & 1)))
            bad = 1;
        teardown(&r);
        if (bad) {
            note_broken(op, n);
            st->failures++;
            tc_cur_failed = 1;
            if (--reports_left == 0)
                printf("  [%s %s] further failures not shown\n", w->name, mode);
        }
    }
    st->secs = tc_now() - t0;
    printf("  %-8s %-6s: N = 1..%ld (%ld allocations in a full run): stopped with QS_NOMEM "
           "%ld, other error %ld, went through %ld; broken runs %ld (%.1fs)\n",
           w->name, mode, st->allocs + 1, st->allocs, st->stopped_nomem, st->stopped_other,
           st->absorbed, st->failures, st->secs);
    if (defunct_runs)
        printf("    note: %ld failed qs_compact left the handle refusing writes until "
               "reopened\n", defunct_runs);
    for (int i = 0; i < nkinds; i++)
        printf("    broken: %ld run(s) from N=%ld: call %s, first failed allocation %s:%d\n",
               kinds[i].count, kinds[i].first_n, kinds[i].op,
               kinds[i].file ? kinds[i].file : "?", kinds[i].line);
    fflush(stdout);
}

static const workload W_OPEN = {"open", wl_open, 1, 0};
static const workload W_CREATE = {"create", wl_create, 0, 0};
static const workload W_RECORDS = {"records", wl_records, 1, 1};
static const workload W_CURSOR = {"cursor", wl_cursor, 1, 1};
static const workload W_TXN = {"txn", wl_txn, 1, 1};
static const workload W_MAINT = {"maint", wl_maint, 1, 1};
static const workload W_QUEUE = {"queue", wl_queue, 1, 1};
static const workload W_POLICY = {"policy", wl_policy, 1, 1};
static const workload W_SEMANTICS = {"semantics", wl_semantics, 1, 1};
static const workload W_DEDUP = {"dedup", wl_dedup, 1, 1};

static void run_both(const workload *w)
{
    drive_stats a, b;
    drive(w, 0, &a);
    drive(w, 1, &b);
}

static void alloc_open(void) { run_both(&W_OPEN); }
static void alloc_create(void) { run_both(&W_CREATE); }
static void alloc_records(void) { run_both(&W_RECORDS); }
static void alloc_cursor(void) { run_both(&W_CURSOR); }
static void alloc_txn(void) { run_both(&W_TXN); }
static void alloc_maint(void) { run_both(&W_MAINT); }
static void alloc_queue(void) { run_both(&W_QUEUE); }
static void alloc_policy(void) { run_both(&W_POLICY); }
static void alloc_semantics(void) { run_both(&W_SEMANTICS); }
static void alloc_dedup(void) { run_both(&W_DEDUP); }

/* Every allocation site the library reached while armed was made to fail
 * at least once; list those only reached unarmed (setup, checks). */
static void alloc_sites(void)
{
    if (only_wl)
        return;
    int armed = 0, never = 0;
    for (int i = 0; i < fi_nsites; i++) {
        if (fi_sites[i].fails)
            armed++;
        else
            never++;
    }
    printf("  %d allocation sites reached, %d of them made to fail:", fi_nsites, armed);
    for (int i = 0; i < fi_nsites; i++)
        printf("%s %s:%d", i % 8 ? "" : "\n   ", fi_sites[i].file, fi_sites[i].line);
    printf("\n");
    for (int i = 0; i < fi_nsites; i++)
        if (!fi_sites[i].fails)
            printf("    never failed: %s:%d (%ld calls unarmed)\n", fi_sites[i].file,
                   fi_sites[i].line, fi_sites[i].unarmed);
    if (!only_wl)
        CHECK(armed > 0);
}

int main(void)
{
    (void)tc_open;      /* test_common.h's; this test opens through do_open */
    setvbuf(stdout, NULL, _IOLBF, 0);
    static char only[64];
    const char *o = getenv("QS_ALLOC_ONLY");
    if (o && *o) {
        snprintf(only, sizeof only, "%s", o);
        char *a = strchr(only, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b) {
            printf("QS_ALLOC_ONLY wants workload:mode:N\n");
            return 2;
        }
        *a = *b = 0;
        only_wl = only;
        only_mode = a + 1;
        only_n = atol(b + 1);
    }
    fi_trace = getenv("QS_ALLOC_TRACE") && *getenv("QS_ALLOC_TRACE");
    nrec = tc_small() ? 60 : 150;
    txn_big = tc_small() ? 90 : 400;
    snprintf(ctx, sizeof ctx, "seed");
    reports_left = 5;
    int rc = build_seed();
    if (rc) {
        printf("building the seed casket failed: %d (%s)\n", rc, qs_strerror(rc));
        return 1;
    }
    RUN(alloc_open);
    RUN(alloc_create);
    RUN(alloc_records);
    RUN(alloc_cursor);
    RUN(alloc_txn);
    RUN(alloc_maint);
    RUN(alloc_queue);
    RUN(alloc_policy);
    RUN(alloc_semantics);
    RUN(alloc_dedup);
    RUN(alloc_sites);
    m_free(&seed_model);
    tc_tmp_remove(&seed_dir);
    return tc_summary();
}
