/* qorder.c -- delayed items and priority runs of a queue (qo_ prefix; the
 * layout is in qorder.h).  queue.c calls in only where a queue holds such
 * items (its qo_state says so), so a plain queue reads nothing here. */
#include "qorder.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_PRIO 'r'
#define KEY_DELAY 'd'

uint32_t qo_prefix(uint8_t kind, const uint8_t *qkey, uint32_t qklen, uint8_t *out)
{
    uint32_t nlen = qklen - 1;
    out[0] = kind;
    out[1] = (uint8_t)(nlen >> 8);
    out[2] = (uint8_t)nlen;
    memcpy(out + 3, qkey + 1, nlen);
    return nlen + 3;
}

uint32_t qo_run_key(const uint8_t *qkey, uint32_t qklen, int run, uint8_t *out)
{
    if (run == QO_MAIN) {
        memcpy(out, qkey, qklen);
        return qklen;
    }
    uint32_t n = qo_prefix(KEY_PRIO, qkey, qklen, out);
    out[n] = (uint8_t)run;
    return n + 1;
}

uint32_t qo_delay_key(const uint8_t *qkey, uint32_t qklen, uint64_t due_ns, int run, uint8_t *out)
{
    uint32_t n = qo_prefix(KEY_DELAY, qkey, qklen, out);
    qo_be64_put(out + n, due_ns);
    out[n + 8] = (uint8_t)run;
    return n + 9;
}

/* Records whose key starts with the n bytes of p (all of them one
 * queue's: see qorder.h). */
static int count_prefixed(bt_ctx *bt, uint8_t *p, uint32_t n, uint64_t *out)
{
    bt_key lo = {p, n, 0}, hi = {p, n + 1, UINT64_MAX};
    uint64_t a, b;
    p[n] = 0xff;        /* every key of ours has a byte below it there */
    int rc = bt_rank(bt, &lo, &a);
    if (rc == 0 && (rc = bt_rank(bt, &hi, &b)) == 0)
        *out = b - a;
    return rc;
}

int qo_count(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t *extra)
{
    uint8_t p[QO_KEY_MAX];
    qo_state n = {0};
    int rc = count_prefixed(bt, p, qo_prefix(KEY_PRIO, qkey, qklen, p), &n.cprio);
    if (rc == 0)
        rc = count_prefixed(bt, p, qo_prefix(KEY_DELAY, qkey, qklen, p), &n.cdelay);
    if (rc)
        return rc;
    *s = n;
    *extra = n.cprio + n.cdelay;
    return 0;
}

void qo_txn_end(qo_state *s, int committed)
{
    if (committed) {
        s->cprio = (uint64_t)((int64_t)s->cprio + s->dprio);
        s->cdelay = (uint64_t)((int64_t)s->cdelay + s->ddelay);
    }
    s->dprio = s->ddelay = 0;
}

/* The record at path: key into k, value into v (when not NULL), seq. */
static int read_rec(bt_ctx *bt, const bt_path *path, bt_buf *k, bt_buf *v, uint64_t *seq)
{
    k->len = 0;
    if (v)
        v->len = 0;
    return bt_read(bt, path, k, v, 0, seq);
}

/* r on the first priority run at run index `from` or after that holds
 * items, else on the plain run. */
static int find_run(bt_ctx *bt, qo_run *r, int from)
{
    uint32_t n = qo_prefix(KEY_PRIO, r->qkey, r->qklen, r->buf);
    r->buf[n] = (uint8_t)from;
    bt_key pk = {r->buf, n + 1, 0};
    bt_path path;
    bt_buf k = {0};
    int rc = from < QO_MAIN ? bt_seek_ge(bt, &pk, &path) : QS_NOTFOUND;
    if (rc == 0)
        rc = read_rec(bt, &path, &k, NULL, NULL);
    r->run = QO_MAIN;
    if (rc == 0 && k.len == n + 1 && memcmp(k.data, r->buf, n) == 0 && k.data[n] < QO_MAIN)
        r->run = k.data[n];
    free(k.data);
    if (rc && rc != QS_NOTFOUND)
        return rc;
    r->klen = qo_run_key(r->qkey, r->qklen, r->run, r->buf);
    r->key = r->run == QO_MAIN ? r->qkey : r->buf;
    return 0;
}

int qo_run_first(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *s, qo_run *r)
{
    r->qkey = qkey;
    r->qklen = qklen;
    if (!qo_has_prio(s)) {
        r->run = QO_MAIN;
        r->key = qkey;
        r->klen = qklen;
        return 0;
    }
    return find_run(bt, r, 0);
}

int qo_run_next(bt_ctx *bt, qo_run *r)
{
    return r->run == QO_MAIN ? QS_NOTFOUND : find_run(bt, r, r->run + 1);
}

int qo_insert_at(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t id, const bt_buf *v)
{
    bt_key pk = {key, klen, id};
    bt_path path;
    int rc = bt_seek(bt, &pk, &path);
    if (rc && rc != QS_NOTFOUND)
        return rc;
    return bt_insert(bt, &path, &pk, v->data, v->len);
}

int qo_promote(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t now_ns,
               size_t *moved, uint64_t *next_due)
{
    uint8_t p[QO_KEY_MAX], rk[QO_KEY_MAX];
    uint32_t n = qo_prefix(KEY_DELAY, qkey, qklen, p);
    bt_key pk = {p, n, 0};
    bt_buf k = {0}, v = {0};
    bt_path path;
    uint64_t id;
    int rc;
    *moved = 0;
    *next_due = UINT64_MAX;
    while ((rc = bt_seek_ge(bt, &pk, &path)) == 0 &&
           (rc = read_rec(bt, &path, &k, &v, &id)) == 0) {
        if (k.len != n + 9 || memcmp(k.data, p, n) != 0)
            break;      /* past this queue's delayed items */
        uint64_t due = qo_be64_get(k.data + n);
        int run = k.data[n + 8];
        if (due > now_ns) {
            *next_due = due;
            break;
        }
        if (run > QO_MAIN) {
            rc = QS_CORRUPT;
            break;
        }
        uint32_t rkl = qo_run_key(qkey, qklen, run, rk);
        if ((rc = bt_delete(bt, &path)) != 0 || (rc = qo_insert_at(bt, rk, rkl, id, &v)) != 0)
            break;
        s->ddelay--;
        if (run != QO_MAIN)
            s->dprio++;
        ++*moved;
    }
    free(k.data);
    free(v.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}

int qo_seek_at(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t id, bt_path *path,
                     int *found)
{
    bt_key pk = {key, klen, id};
    uint64_t got = 0;
    int eq = 0, rc = bt_seek_ge(bt, &pk, path);
    if (rc == 0)
        rc = bt_item(bt, path, key, klen, &eq, &got, NULL);
    *found = rc == 0 && eq && got == id;
    return rc == QS_NOTFOUND ? 0 : rc;
}

int qo_seek_item(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *s, uint64_t id,
                 bt_path *path, int *run)
{
    uint8_t rk[QO_KEY_MAX];
    int found = 0, rc = qo_seek_at(bt, qkey, qklen, id, path, &found);
    *run = QO_MAIN;
    for (int r = 0; rc == 0 && !found && r < QO_MAIN && qo_has_prio(s); r++) {
        uint32_t rkl = qo_run_key(qkey, qklen, r, rk);
        if ((rc = qo_seek_at(bt, rk, rkl, id, path, &found)) == 0 && found)
            *run = r;
    }
    return rc ? rc : found ? 0 : QS_CORRUPT;
}

int qo_seek_delayed(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, uint64_t id, bt_path *path)
{
    uint8_t p[QO_KEY_MAX];
    uint32_t n = qo_prefix(KEY_DELAY, qkey, qklen, p);
    bt_key pk = {p, n, 0};
    bt_buf k = {0};
    uint64_t seq = 0;
    int rc = bt_seek_ge(bt, &pk, path);
    while (rc == 0 && (rc = read_rec(bt, path, &k, NULL, &seq)) == 0) {
        if (k.len != n + 9 || memcmp(k.data, p, n) != 0)
            rc = QS_NOTFOUND;   /* past this queue's delayed items */
        else if (seq != id)
            rc = bt_next(bt, path);
        else
            break;
    }
    free(k.data);
    return rc;
}

int qo_delay_item(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t id,
                  uint64_t due_ns)
{
    uint8_t dk[QO_KEY_MAX];
    bt_path path;
    bt_buf v = {0};
    int run, rc = qo_seek_item(bt, qkey, qklen, s, id, &path, &run);
    if (rc == 0 && (rc = bt_read(bt, &path, NULL, &v, 0, NULL)) == 0 &&
        (rc = bt_delete(bt, &path)) == 0)
        rc = qo_insert_at(bt, dk, qo_delay_key(qkey, qklen, due_ns, run, dk), id, &v);
    free(v.data);
    if (rc)
        return rc;
    s->ddelay++;
    if (run != QO_MAIN)
        s->dprio--;
    return 0;
}

/* ---- the clock --------------------------------------------------------- */

/* qs_queue_test_clock's time in ns, 0: the real clock. */
static _Atomic uint64_t test_now;

void qs_queue_test_clock(double now)
{
    atomic_store(&test_now, now > 0 ? (uint64_t)(now * 1e9) : 0);
}

uint64_t qo_now_ns(void)
{
    uint64_t t = atomic_load_explicit(&test_now, memory_order_relaxed);
    if (t)
        return t;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t qo_due(uint64_t now_ns, double delay)
{
    /* below 2^63: a due time's first byte stays under count_prefixed's
     * 0xff bound */
    const uint64_t last = (uint64_t)INT64_MAX;
    double ns = delay * 1e9;
    if (now_ns >= last || ns >= (double)(last - now_ns))
        return last;
    return now_ns + (uint64_t)ns;
}

/* ---- names ------------------------------------------------------------- */

/* the order of queue.c's "q" + name keys */
int qo_name_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int d = memcmp(a, b, al < bl ? al : bl);
    return d ? d : (al > bl) - (al < bl);
}

/* Adds name to the sorted, distinct list unless it is there. */
static int names_add(qo_names *l, const uint8_t *name, uint32_t nlen)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int d = qo_name_cmp(l->at[mid].p, l->at[mid].len, name, nlen);
        if (d == 0)
            return 0;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 8;
        qo_name *na = realloc(l->at, ncap * sizeof *na);
        if (!na)
            return QS_NOMEM;
        l->at = na;
        l->cap = ncap;
    }
    uint8_t *copy = malloc(nlen ? nlen : 1);
    if (!copy)
        return QS_NOMEM;
    memcpy(copy, name, nlen);
    memmove(l->at + lo + 1, l->at + lo, (l->n - lo) * sizeof *l->at);
    l->at[lo] = (qo_name){copy, nlen};
    l->n++;
    return 0;
}

/* Every name with records of one kind, each once: a seek per name. */
static int names_of_kind(bt_ctx *bt, uint8_t kind, qo_names *l)
{
    uint8_t probe[QO_KEY_MAX];
    bt_key pk = {probe, 1, 0};
    bt_buf k = {0};
    bt_path path;
    int rc;
    probe[0] = kind;
    while ((rc = bt_seek_onward(bt, &pk, &path)) == 0 &&
           (rc = read_rec(bt, &path, &k, NULL, NULL)) == 0) {
        if (k.len < 4 || k.data[0] != kind)
            break;
        uint32_t nlen = (uint32_t)k.data[1] << 8 | k.data[2];
        /* The seek below skips a name's records with the probe prefix+0xff,
         * so a record with 0xff after the name (no key of ours has: runs and
         * due times are below it) would be found again, forever. */
        if (nlen == 0 || k.len < 3 + nlen || nlen > QS_MAX_QUEUE_NAME ||
            (k.len > 3 + nlen && k.data[3 + nlen] == 0xff)) {
            rc = QS_CORRUPT;
            break;
        }
        if ((rc = names_add(l, k.data + 3, nlen)) != 0)
            break;
        /* past every record of this name: its prefix, then 0xff */
        memcpy(probe, k.data, 3 + nlen);
        probe[3 + nlen] = 0xff;
        pk = (bt_key){probe, 4 + nlen, UINT64_MAX};
    }
    free(k.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}

int qo_names_get(bt_ctx *bt, qo_names *l)
{
    memset(l, 0, sizeof *l);
    int rc = names_of_kind(bt, KEY_PRIO, l);
    if (rc == 0)
        rc = names_of_kind(bt, KEY_DELAY, l);
    if (rc)
        qo_names_free(l);
    return rc;
}

void qo_names_free(qo_names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->at[i].p);
    free(l->at);
    memset(l, 0, sizeof *l);
}

/* ---- scans in id order --------------------------------------------------- */

/* One run's position: its key and the record (id) the scan is at. */
typedef struct scan_run {
    uint8_t key[QO_KEY_MAX];
    uint32_t klen;
    int live;
    uint64_t id;
    bt_path path;
} scan_run;

typedef struct scan_delayed {
    uint64_t id, due;
    uint8_t run;
} scan_delayed;

struct qo_scan {
    const uint8_t *qkey;
    uint32_t qklen;
    scan_run run[QO_MAIN + 1];
    scan_delayed *dl;
    size_t ndl, di;
};

/* r's record at its path, if it is one of r's: live and its id. */
static int run_head(bt_ctx *bt, scan_run *r, int rc)
{
    int eq = 0;
    if (rc == 0)
        rc = bt_item(bt, &r->path, r->key, r->klen, &eq, &r->id, NULL);
    r->live = rc == 0 && eq;
    return rc == QS_NOTFOUND ? 0 : rc;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = ((const scan_delayed *)a)->id, y = ((const scan_delayed *)b)->id;
    return (x > y) - (x < y);
}

/* The delayed items of the queue with ids above after, sorted by id: the
 * index is in due order, so all of it is read. */
static int scan_collect_delayed(bt_ctx *bt, qo_scan *s, uint64_t after)
{
    uint8_t p[QO_KEY_MAX];
    uint32_t n = qo_prefix(KEY_DELAY, s->qkey, s->qklen, p);
    bt_key pk = {p, n, 0};
    bt_buf k = {0};
    bt_path path;
    size_t cap = 0;
    uint64_t id;
    int rc = bt_seek_ge(bt, &pk, &path);
    while (rc == 0 && (rc = read_rec(bt, &path, &k, NULL, &id)) == 0) {
        if (k.len != n + 9 || memcmp(k.data, p, n) != 0)
            break;
        if (id > after) {
            if (s->ndl == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                scan_delayed *nd = realloc(s->dl, ncap * sizeof *nd);
                if (!nd) {
                    rc = QS_NOMEM;
                    break;
                }
                s->dl = nd;
                cap = ncap;
            }
            s->dl[s->ndl++] = (scan_delayed){id, qo_be64_get(k.data + n), k.data[n + 8]};
        }
        rc = bt_next(bt, &path);
    }
    free(k.data);
    if ((rc == 0 || rc == QS_NOTFOUND) && s->ndl)  /* qsort takes no NULL */
        qsort(s->dl, s->ndl, sizeof *s->dl, by_id);
    return rc == QS_NOTFOUND ? 0 : rc;
}

int qo_scan_begin(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *st,
                  uint64_t after, qo_scan **out)
{
    qo_scan *s = calloc(1, sizeof *s);
    if (!s)
        return QS_NOMEM;
    s->qkey = qkey;
    s->qklen = qklen;
    int rc = 0;
    for (int r = 0; r <= QO_MAIN && rc == 0; r++) {
        scan_run *sr = &s->run[r];
        if (r != QO_MAIN && !st->cprio)
            continue;
        sr->klen = qo_run_key(qkey, qklen, r, sr->key);
        bt_key pk = {sr->key, sr->klen, after + 1};
        rc = run_head(bt, sr, bt_seek_ge(bt, &pk, &sr->path));
    }
    if (rc == 0 && st->cdelay)
        rc = scan_collect_delayed(bt, s, after);
    if (rc) {
        qo_scan_end(s);
        return rc;
    }
    *out = s;
    return 0;
}

int qo_scan_next(bt_ctx *bt, qo_scan *s, bt_path *path, uint64_t *id)
{
    int best = -1;
    for (int r = 0; r <= QO_MAIN; r++)
        if (s->run[r].live && (best < 0 || s->run[r].id < s->run[best].id))
            best = r;
    if (s->di < s->ndl && (best < 0 || s->dl[s->di].id < s->run[best].id)) {
        const scan_delayed *d = &s->dl[s->di++];
        uint8_t dk[QO_KEY_MAX];
        int found;
        int rc = qo_seek_at(bt, dk, qo_delay_key(s->qkey, s->qklen, d->due, d->run, dk), d->id,
                           path, &found);
        *id = d->id;
        return rc ? rc : found ? 0 : QS_CORRUPT;
    }
    if (best < 0)
        return QS_NOTFOUND;
    scan_run *sr = &s->run[best];
    *path = sr->path;
    *id = sr->id;
    return run_head(bt, sr, bt_next(bt, &sr->path));
}

void qo_scan_end(qo_scan *s)
{
    if (s) {
        free(s->dl);
        free(s);
    }
}
