/* queue.c -- named FIFO queues on the casket's B+tree (qq_ prefix inside,
 * qs_queue_* in qstore.h).
 *
 * Layout, in namespace NS_QUEUE (see docs/DESIGN.md):
 *   ("q" + name, id)  one item: value [0][payload], or [1] for a reference
 *                     to a shared (published) payload
 *   ("p", id)         a shared payload
 *   ("c", id)         its reference count, u64
 * Records are ordered by (key, seq) and an item's seq is its id, so a
 * queue's items are contiguous and in id order, and since ids only grow a
 * put lands at the end of its queue's run.  This is the seed's layout --
 * the queue name a duplicate key, the item ids its values -- with small
 * payloads kept inline.
 *
 * In memory, per handle, a registry of the queues used: each one's exact
 * length (so qs_queue_len is O(1)) and the open transaction's reservation
 * changes (sorted by id).  Committed reservations of every handle, in every
 * process, live in the shared region (qres.c): so a reserved item is hidden
 * from all consumers, and lengths count them everywhere.  Blocked readers
 * sleep on the region's wake-up word of their queue.  Everything here is
 * guarded by the casket's operation mutex; the region's reservations
 * change only under the write lock. */
#include "queue.h"
#include "qres.h"
#include "qkit.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_INLINE 0
#define TAG_SHARED 1
static const uint8_t INLINE_PREFIX[1] = {TAG_INLINE};
/* qs_queue_put_framed's frame, Python marshal's layout of a bytes object
 * (format 2): the byte QS_FRAME_BYTES, then the length as 4 bytes
 * little-endian, then the payload. */
#define FRAME_HDR 5u
#define KEY_QUEUE 'q'
/* How often a reader blocked on a queue whose items others reserved looks
 * for holders that died, seconds. */
#define DEAD_CHECK 0.25

#define M_NEW 1u        /* reserved in the open transaction (not yet shared) */
#define M_ACKED 2u      /* acknowledged in the open transaction (the shared
                           entry goes at commit) */

typedef struct qq_mark {
    uint64_t id, token;
    double deadline;    /* INFINITY: no lease */
    unsigned flags;
} qq_mark;

typedef struct qq_queue {
    struct qq_registry *reg;    /* the registry it is in */
    struct qq_queue *hnext;     /* hash chain */
    struct qq_queue *tnext;     /* touched by the open transaction */
    int touched, txn_put, txn_took;
    uint8_t *key;               /* "q" + name */
    uint32_t klen;
    uint64_t hash;
    uint64_t clen;              /* items in the committed tree */
    int64_t dlen;               /* the open transaction's change to it */
    uint32_t nacked;            /* marks flagged M_ACKED */
    qq_mark *m;                 /* reservations, sorted by id */
    size_t nm, mcap;
    double min_deadline;        /* earliest lease end, INFINITY if none */
    uint64_t epoch;             /* registry epoch clen was counted in */
    /* Where the next put goes: valid while tail_mods == registry mods,
     * i.e. no other change to the queue tree since (saves a seek). */
    bt_path tail;
    uint64_t tail_mods;
    int tail_ok;
} qq_queue;

typedef struct qq_registry {
    qq_queue **tab;
    size_t cap, n;
    qq_queue *touched;
    uint64_t next_token;
    uint64_t mods;              /* bumped by every change to the queue tree */
    uint64_t epoch;             /* bumped when other handles committed */
    size_t sweep_at;            /* entries that trigger dropping idle ones */
} qq_registry;

/* ---- the registry ---------------------------------------------------------- */

static const cs_layer qq_layer;

static void queue_free(qq_queue *q)
{
    free(q->key);
    free(q->m);
    free(q);
}

/* The queue layer's callbacks (cs_layer, qq_layer below), with the
 * registry as their state. */
static void qq_free(qs_casket *c, void *state)
{
    (void)c;
    qq_registry *r = state;
    for (size_t i = 0; i < r->cap; i++)
        for (qq_queue *q = r->tab[i], *nx; q; q = nx) {
            nx = q->hnext;
            queue_free(q);
        }
    free(r->tab);
    free(r);
}

static void qq_wake_all(qs_casket *c, void *state)
{
    (void)state;
    if (cs_shared(c))
        qr_wake_all(cs_region(c));
}

static void qq_refresh(qs_casket *c, void *state)
{
    (void)c;
    qq_registry *r = state;
    r->mods++;
    r->epoch++;
}

static void qq_close(qs_casket *c, void *state)
{
    (void)state;
    qr_drop_mine(cs_region(c));
}

static int registry_grow(qq_registry *r)
{
    size_t ncap = r->cap ? r->cap * 2 : 16;
    qq_queue **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return QS_NOMEM;
    for (size_t i = 0; i < r->cap; i++)
        for (qq_queue *q = r->tab[i], *nx; q; q = nx) {
            nx = q->hnext;
            q->hnext = nt[q->hash & (ncap - 1)];
            nt[q->hash & (ncap - 1)] = q;
        }
    free(r->tab);
    r->tab = nt;
    r->cap = ncap;
    return 0;
}

/* An entry that holds nothing a fresh lookup would not rebuild: no items
 * in either view, no reservations, no waiter, untouched by the open
 * transaction. */
static int idle(const qq_queue *q)
{
    return !q->nm && !q->touched && !q->clen && !q->dlen;
}

/* Drops idle entries, so a handle that asks about many short-lived names
 * (reply queues, typos) does not grow without bound. */
static void sweep_idle(qq_registry *r)
{
    for (size_t i = 0; i < r->cap; i++)
        for (qq_queue **pp = &r->tab[i]; *pp;) {
            qq_queue *q = *pp;
            if (idle(q)) {
                *pp = q->hnext;
                queue_free(q);
                r->n--;
            } else
                pp = &q->hnext;
        }
}

/* Records of key in the committed tree. */
static int committed_count(qs_casket *c, const uint8_t *key, uint32_t klen, uint64_t *n)
{
    bt_ctx bt = {cs_pager(c), 0, NS_QUEUE};
    bt_key lo = {key, klen, 0}, hi = {key, klen, UINT64_MAX};
    uint64_t a, b;
    int rc = bt_rank(&bt, &lo, &a);
    if (rc == 0 && (rc = bt_rank(&bt, &hi, &b)) == 0)
        *n = b - a;
    return rc;
}

/* The registry entry of queue key ("q" + name), created on first use.  No
 * transaction can have changed a queue before its entry exists (every
 * change goes through here), so the committed count is its length. */
static int lookup(qs_casket *c, const uint8_t *key, uint32_t klen, qq_queue **out)
{
    qq_registry *r = cs_layer_state(c, &qq_layer);
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return QS_NOMEM;
        r->sweep_at = 256;
        int rc = cs_layer_add(c, &qq_layer, r);
        if (rc) {
            free(r);
            return rc;
        }
    }
    uint64_t h = hash_bytes(key, klen);
    if (r->cap)
        for (qq_queue *q = r->tab[h & (r->cap - 1)]; q; q = q->hnext)
            if (q->hash == h && q->klen == klen && memcmp(q->key, key, klen) == 0) {
                /* Others committed since it was counted (never while our
                 * transaction is open: we would hold the write lock). */
                if (q->epoch != r->epoch && !q->touched) {
                    int rc = committed_count(c, key, klen, &q->clen);
                    if (rc)
                        return rc;
                    q->epoch = r->epoch;
                }
                *out = q;
                return 0;
            }
    if (r->n >= r->sweep_at) {
        sweep_idle(r);
        r->sweep_at = r->n * 2 > 256 ? r->n * 2 : 256;
    }
    if (r->n + 1 > r->cap * 3 / 4 && registry_grow(r) != 0)
        return QS_NOMEM;
    qq_queue *q = calloc(1, sizeof *q);
    if (!q || !(q->key = malloc(klen))) {
        free(q);
        return QS_NOMEM;
    }
    memcpy(q->key, key, klen);
    q->reg = r;
    q->klen = klen;
    q->hash = h;
    q->min_deadline = INFINITY;
    q->epoch = r->epoch;
    int rc = committed_count(c, key, klen, &q->clen);
    if (rc) {
        free(q->key);
        free(q);
        return rc;
    }
    q->hnext = r->tab[h & (r->cap - 1)];
    r->tab[h & (r->cap - 1)] = q;
    r->n++;
    *out = q;
    return 0;
}

static void expire(qs_casket *c, qq_queue *q);

/* lookup, then end the reservations whose lease ran out (and, holding the
 * write lock, the shared ones whose lease ran out or whose holder is
 * gone). */
static int lookup_live(qs_casket *c, const uint8_t *key, uint32_t klen, qq_queue **out)
{
    int rc = lookup(c, key, klen, out);
    if (rc == 0)
        expire(c, *out);
    return rc;
}

/* The queue tree changed wholesale (compaction): every remembered put
 * position is stale. */
static void qq_invalidate(qs_casket *c, void *state)
{
    (void)c;
    ((qq_registry *)state)->mods++;
}

static void touch(qs_casket *c, qq_queue *q)
{
    (void)c;
    q->reg->mods++;     /* every remembered put position is stale */
    if (!q->touched) {
        q->touched = 1;
        q->tnext = q->reg->touched;
        q->reg->touched = q;
    }
}

/* Items of q may have become available: wake its readers everywhere. */
static void wake(qs_casket *c, qq_queue *q)
{
    qr_wake(cs_region(c), q->hash);
}

/* ---- reservations ------------------------------------------------------------ */

/* Index of the first mark with id >= id. */
static size_t mark_lower(const qq_queue *q, uint64_t id)
{
    size_t lo = 0, hi = q->nm;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (q->m[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int mark_add(qq_queue *q, uint64_t id, uint64_t token, double deadline, unsigned flags)
{
    if (q->nm == q->mcap) {
        size_t ncap = q->mcap ? q->mcap * 2 : 8;
        qq_mark *nm = realloc(q->m, ncap * sizeof *nm);
        if (!nm)
            return QS_NOMEM;
        q->m = nm;
        q->mcap = ncap;
    }
    size_t i = mark_lower(q, id);
    memmove(q->m + i + 1, q->m + i, (q->nm - i) * sizeof *q->m);
    q->m[i] = (qq_mark){id, token, deadline, flags};
    q->nm++;
    if (deadline < q->min_deadline)
        q->min_deadline = deadline;
    return 0;
}

static void mark_remove(qq_queue *q, size_t i)
{
    if (q->m[i].flags & M_ACKED)
        q->nacked--;
    memmove(q->m + i, q->m + i + 1, (q->nm - i - 1) * sizeof *q->m);
    q->nm--;
}

static void recompute_deadline(qq_queue *q)
{
    q->min_deadline = INFINITY;
    for (size_t i = 0; i < q->nm; i++)
        if (!(q->m[i].flags & M_ACKED) && q->m[i].deadline < q->min_deadline)
            q->min_deadline = q->m[i].deadline;
}

/* Ends reservations whose lease ran out (not those acknowledged in the open
 * transaction: their item is already gone in the writer's view). */
static void expire(qs_casket *c, qq_queue *q)
{
    if (cs_owns(c) && qr_expire(cs_region(c), q->hash, 0))
        wake(c, q);
    if (isinf(q->min_deadline))
        return;     /* no lease of ours runs (the usual case: skip the clock) */
    double now = cs_now();
    if (q->min_deadline > now)
        return;
    size_t w = 0;
    for (size_t i = 0; i < q->nm; i++)
        if ((q->m[i].flags & M_ACKED) || q->m[i].deadline > now)
            q->m[w++] = q->m[i];
    q->nm = w;
    recompute_deadline(q);
    wake(c, q);
}

/* Reservations the open transaction will add to the shared table at
 * commit, over every queue it touched: its marks not acknowledged (a mark
 * without M_ACKED is one it made).  Counting one queue's alone let a
 * transaction reserving in several claim the same room twice, and the
 * entries that did not fit were dropped at commit. */
static size_t txn_new_marks(const qq_registry *r)
{
    size_t n = 0;
    for (const qq_queue *q = r->touched; q; q = q->tnext)
        n += q->nm - q->nacked;
    return n;
}

/* The open transaction's reservation change of id, whoever made it. */
static int find_mark_any(const qq_queue *q, uint64_t id, size_t *at)
{
    size_t i = mark_lower(q, id);
    if (i >= q->nm || q->m[i].id != id)
        return QS_NOTFOUND;
    *at = i;
    return 0;
}

/* The open transaction's reservation of id under token, not yet acked. */
static int find_mark(const qq_queue *q, uint64_t id, uint64_t token, size_t *at)
{
    size_t i;
    if (find_mark_any(q, id, &i) != 0 || q->m[i].token != token || (q->m[i].flags & M_ACKED))
        return QS_NOTRESERVED;
    *at = i;
    return 0;
}

/* A committed reservation of id that this handle holds under token and
 * has not acknowledged in the open transaction. */
static int find_shared(qs_casket *c, const qq_queue *q, uint64_t id, uint64_t token)
{
    const sh_region *sh = cs_region(c);
    const qr_res *e = qr_find(sh, q->hash, id);
    if (!e || !qr_mine(sh, e) || e->token != token || e->qhash != (q->hash ? q->hash : 1))
        return QS_NOTRESERVED;
    size_t i = mark_lower(q, id);
    if (i < q->nm && q->m[i].id == id)
        return QS_NOTRESERVED;  /* acknowledged already */
    return 0;
}

/* Whether id is hidden from takers: reserved by anyone (committed), or by
 * the open transaction. */
static int hidden(const sh_region *sh, const qq_queue *q, uint64_t id)
{
    if (q->nm) {
        size_t i = mark_lower(q, id);
        if (i < q->nm && q->m[i].id == id)
            return 1;
    }
    return qr_find(sh, q->hash, id) != NULL;
}

/* Items available to get in a view: the tree's items minus the committed
 * reservations (all handles) and, in the writer's view, those the open
 * transaction made; items it acknowledged are already gone from the
 * writer's view while their shared entries remain until commit. */
static uint64_t available(qs_casket *c, const qq_queue *q, int wview)
{
    int64_t shared = (int64_t)qr_count(cs_region(c), q->hash ? q->hash : 1, NULL);
    int64_t n = (int64_t)q->clen - shared;
    if (wview) {
        int64_t made = 0, acked_shared = 0;
        for (size_t i = 0; i < q->nm; i++) {
            unsigned f = q->m[i].flags;
            made += (f & M_NEW) && !(f & M_ACKED);
            acked_shared += (f & M_ACKED) && !(f & M_NEW);
        }
        n += q->dlen + acked_shared - made;
    }
    return n > 0 ? (uint64_t)n : 0;
}

static void qq_txn_end(qs_casket *c, void *state, int committed)
{
    qq_registry *r = state;
    if (!committed)
        r->mods++;
    for (qq_queue *q = r->touched, *nx; q; q = nx) {
        nx = q->tnext;
        int back = 0;
        for (size_t i = 0; i < q->nm; i++) {
            qq_mark *m = &q->m[i];
            if (committed && m->flags == M_NEW) {
                /* room was checked when it was made (see take_fn) */
                uint64_t dl = isinf(m->deadline) ? 0 : (uint64_t)(m->deadline * 1e9);
                qr_add(cs_region(c), m->id, q->hash, m->token, dl ? dl : 0);
            } else if (committed && m->flags == M_ACKED)
                qr_del(cs_region(c), q->hash, m->id);
            else if (!committed && (m->flags & M_NEW))
                back = 1;
        }
        q->nm = 0;
        q->nacked = 0;
        if (committed)
            q->clen = (uint64_t)((int64_t)q->clen + q->dlen);
        recompute_deadline(q);
        if ((committed && q->txn_put) || (!committed && (q->txn_took || back)))
            wake(c, q);
        q->dlen = 0;
        q->touched = q->txn_put = q->txn_took = 0;
        q->tnext = NULL;
    }
    r->touched = NULL;
}

/* Results of the queue calls that refuse without touching anything. */
static int qq_refused(int rc)
{
    return rc == QS_NOTRESERVED || rc == QS_RESFULL || rc == QS_TOOBIG || rc == QS_INVAL ||
           rc == QS_NOTFOUND;
}

static const cs_layer qq_layer = {
    .txn_end = qq_txn_end,
    .refresh = qq_refresh,
    .invalidate = qq_invalidate,
    .close = qq_close,
    .wake = qq_wake_all,
    .free = qq_free,
    .refused = qq_refused,
};

/* ---- arguments and names -------------------------------------------------- */

static int make_key(const void *name, size_t nlen, uint8_t *key)
{
    if (!name || nlen == 0 || nlen > QS_MAX_QUEUE_NAME)
        return QS_INVAL;
    key[0] = KEY_QUEUE;
    memcpy(key + 1, name, nlen);
    return 0;
}

void qs_items_free(qs_items *it)
{
    if (!it)
        return;
    free(it->ids);
    free(it->off);
    free(it->data);
    free(it);
}

/* ---- tree access ----------------------------------------------------------- */

static const uint8_t KEY_PAYLOAD[1] = {'p'};
static const uint8_t KEY_COUNT[1] = {'c'};

static int item_payload(bt_ctx *bt, uint64_t id, outbuf *o, size_t at, int *shared);

/* Appends the payload of the item record at path (tag byte stripped,
 * shared payloads fetched) to o->data; *shared tells which it was. */
static int read_item(bt_ctx *bt, bt_path *path, uint64_t id, outbuf *o, int *shared)
{
    size_t at = o->data.len;
    int rc = bt_read(bt, path, NULL, &o->data, 0, NULL);
    return rc ? rc : item_payload(bt, id, o, at, shared);
}

/* The item's value was appended to o->data from offset at: strips its tag
 * or replaces it with the shared payload it names. */
static int item_payload(bt_ctx *bt, uint64_t id, outbuf *o, size_t at, int *shared)
{
    int rc;
    if (o->data.len == at)
        return QS_CORRUPT;
    uint8_t tag = o->data.data[at];
    *shared = tag == TAG_SHARED;
    if (tag == TAG_INLINE) {
        memmove(o->data.data + at, o->data.data + at + 1, o->data.len - at - 1);
        o->data.len--;
        return 0;
    }
    if (tag != TAG_SHARED || o->data.len != at + 1)
        return QS_CORRUPT;
    o->data.len = at;
    bt_path pp;
    if ((rc = seek_exact(bt, KEY_PAYLOAD, 1, id, &pp)) != 0)
        return rc;
    return bt_read(bt, &pp, NULL, &o->data, 0, NULL);
}

/* One queue consumed its reference to shared payload id. */
static int unref(bt_ctx *bt, uint64_t id)
{
    bt_path path;
    bt_buf v = {0};
    int rc = seek_exact(bt, KEY_COUNT, 1, id, &path);
    if (rc == 0)
        rc = bt_read(bt, &path, NULL, &v, 0, NULL);
    if (rc == 0 && v.len != 8)
        rc = QS_CORRUPT;
    uint64_t refs = rc == 0 ? rd64(v.data) : 0;
    free(v.data);
    if (rc)
        return rc;
    if ((rc = bt_delete(bt, &path)) != 0)
        return rc;
    if (refs > 1) {
        uint8_t nb[8];
        wr64(nb, refs - 1);
        bt_key pk = {KEY_COUNT, 1, id};
        if ((rc = bt_seek(bt, &pk, &path)) != 0 && rc != QS_NOTFOUND)
            return rc;
        return bt_insert(bt, &path, &pk, nb, 8);
    }
    if ((rc = seek_exact(bt, KEY_PAYLOAD, 1, id, &path)) != 0)
        return rc;
    return bt_delete(bt, &path);
}

/* Positions path on the first item of q at or after id `from` that no
 * reservation hides; *id gets its id.  QS_NOTFOUND: none. */
static int first_free(const sh_region *sh, bt_ctx *bt, qq_queue *q, uint64_t from,
                      bt_path *path, uint64_t *id)
{
    bt_key pk = {q->key, q->klen, from};
    int rc = bt_seek_ge(bt, &pk, path);
    int any = q->nm || qr_count(sh, q->hash, NULL);
    while (rc == 0) {
        int eq;
        if ((rc = bt_key_is(bt, path, q->key, q->klen, &eq)) != 0)
            return rc;
        if (!eq)
            return QS_NOTFOUND;
        if ((rc = bt_read(bt, path, NULL, NULL, 0, id)) != 0)
            return rc;
        if (!any || !hidden(sh, q, *id))
            return 0;
        rc = bt_next(bt, path);
    }
    return rc;
}

static bt_ctx queue_ctx(bt_ctx *bt)
{
    bt_ctx q = {bt->p, bt->wview, NS_QUEUE};
    return q;
}

/* ---- put ------------------------------------------------------------------- */

typedef struct put_args {
    const uint8_t *key;
    uint32_t klen;
    size_t n;
    bt_vals vals;
    uint64_t first_id;
} put_args;

#define PUT_CHUNK 1024          /* items between spill checks */

static int put_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    put_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    int rc = lookup(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    uint64_t id = pg_alloc_ids(bt.p, a->n);
    a->first_id = id;
    bt_vals v = a->vals;
    int valid = q->tail_ok && q->tail_mods == q->reg->mods;
    for (size_t i = 0; i < a->n && rc == 0; i += PUT_CHUNK) {
        size_t k = a->n - i < PUT_CHUNK ? a->n - i : PUT_CHUNK;
        rc = bt_append_run(&bt, &q->tail, &valid, a->key, a->klen, id + i, k, INLINE_PREFIX,
                           sizeof INLINE_PREFIX, &v);
        if (rc == 0 && k == PUT_CHUNK)
            rc = pg_trim(bt.p, 1);
    }
    touch(c, q);
    q->tail_ok = rc == 0 && valid;
    q->tail_mods = q->reg->mods;
    if (rc)
        return rc;
    q->dlen += (int64_t)a->n;
    q->txn_put = 1;
    return 0;
}

/* Appends n checked values to the queue whose key is given. */
static int put_key(qs_casket *c, const uint8_t *key, uint32_t klen, size_t n, bt_vals vals,
                   uint64_t *first_id)
{
    if (n == 0) {
        if (first_id)
            *first_id = 0;
        return 0;
    }
    put_args a = {key, klen, n, vals, 0};
    int rc = cs_write(c, put_fn, &a);
    if (rc == 0 && first_id)
        *first_id = a.first_id;
    return rc;
}

/* Appends n values whose check returned `checked` (a bad name is reported
 * first, then a bad value). */
static int put_values(qs_casket *c, const void *name, size_t nlen, size_t n, bt_vals vals,
                      int checked, uint64_t *first_id)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        rc = checked;
    return rc ? rc : put_key(c, key, (uint32_t)nlen + 1, n, vals, first_id);
}

static int do_put_many(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                       size_t vals_len, const uint32_t *lens, uint64_t *first_id)
{
    bt_vals v = {vals, lens, 0};
    return put_values(c, name, nlen, n, v, check_vals(n, vals, vals_len, lens), first_id);
}

/* n frames, each led by QS_FRAME_BYTES, exactly filling len bytes; none
 * too big. */
static int check_frames(size_t n, const uint8_t *frames, size_t len)
{
    if (!frames && len)
        return QS_INVAL;
    bt_vals v = {frames, NULL, FRAME_HDR};
    size_t left = len;
    for (size_t i = 0; i < n; i++) {
        if (left < FRAME_HDR || v.p[0] != QS_FRAME_BYTES)
            return QS_INVAL;
        uint32_t vlen = bt_vals_len(&v);
        if (vlen > left - FRAME_HDR)
            return QS_INVAL;
        if (vlen > (uint64_t)QS_MAX_VALUE - 1)
            return QS_TOOBIG;
        left -= FRAME_HDR + vlen;
        bt_vals_next(&v);
    }
    return left == 0 ? 0 : QS_INVAL;
}

static int do_put_framed(qs_casket *c, const void *name, size_t nlen, size_t n,
                         const void *frames, size_t frames_len, uint64_t *first_id)
{
    bt_vals v = {frames, NULL, FRAME_HDR};
    return put_values(c, name, nlen, n, v, check_frames(n, frames, frames_len), first_id);
}

static int do_put(qs_casket *c, const void *name, size_t nlen, const void *val, size_t vlen,
                  uint64_t *id)
{
    if (vlen > (size_t)QS_MAX_VALUE - 1)
        return QS_TOOBIG;
    uint32_t len = (uint32_t)vlen;
    return do_put_many(c, name, nlen, 1, val, vlen, &len, id);
}

/* ---- a queue named once ---------------------------------------------------- */

struct qs_queue {
    qs_casket *c;
    uint32_t klen;
    uint8_t key[];          /* KEY_QUEUE + name */
};

int qs_queue_new(qs_casket *c, const void *name, size_t nlen, qs_queue **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    if (!c || nlen > QS_MAX_QUEUE_NAME)
        return QS_INVAL;
    qs_queue *q = malloc(sizeof *q + nlen + 1);
    if (!q)
        return QS_NOMEM;
    int rc = make_key(name, nlen, q->key);
    if (rc) {
        free(q);
        return rc;
    }
    q->c = c;
    q->klen = (uint32_t)nlen + 1;
    *out = q;
    return 0;
}

void qs_queue_free(qs_queue *q) { free(q); }

int64_t qs_queue_put_id(qs_queue *q, const void *val, size_t vlen)
{
    if (!q || (!val && vlen))
        return QS_INVAL;
    if (vlen > (size_t)QS_MAX_VALUE - 1)
        return QS_TOOBIG;
    int rc = cs_enter_call(q->c);
    if (rc == 0) {
        uint32_t len = (uint32_t)vlen;
        bt_vals v = {val, &len, 0};
        uint64_t id = 0;
        rc = put_key(q->c, q->key, q->klen, 1, v, &id);
        cs_leave_call(q->c);
        if (rc == 0)
            return (int64_t)id;
    }
    return rc < 0 ? rc : -(int64_t)rc;
}

/* ---- publish ------------------------------------------------------------- */

typedef struct pub_args {
    size_t n;
    const uint8_t *names;
    const uint64_t *noff;
    const uint8_t *val;
    size_t vlen;
    uint64_t id;
} pub_args;

static int publish_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    pub_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    uint64_t id = pg_alloc_ids(bt.p, 1);
    uint8_t key[QS_MAX_QUEUE_NAME + 1], ref = TAG_SHARED, cnt[8];
    int rc = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        size_t nlen = a->noff[i + 1] - a->noff[i];
        qq_queue *q;
        make_key(a->names + a->noff[i], nlen, key);
        if ((rc = lookup(c, key, (uint32_t)nlen + 1, &q)) != 0)
            break;
        bt_key pk = {key, (uint32_t)nlen + 1, id};
        bt_path path;
        if ((rc = bt_seek(&bt, &pk, &path)) != 0 && rc != QS_NOTFOUND)
            break;
        if ((rc = bt_insert(&bt, &path, &pk, &ref, 1)) != 0)
            break;
        q->dlen++;
        q->txn_put = 1;
        touch(c, q);
    }
    wr64(cnt, a->n);
    bt_key pp = {KEY_PAYLOAD, 1, id}, pc = {KEY_COUNT, 1, id};
    bt_path path;
    if (rc == 0 && ((rc = bt_seek(&bt, &pp, &path)) == 0 || rc == QS_NOTFOUND))
        rc = bt_insert(&bt, &path, &pp, a->val, a->vlen);
    if (rc == 0 && ((rc = bt_seek(&bt, &pc, &path)) == 0 || rc == QS_NOTFOUND))
        rc = bt_insert(&bt, &path, &pc, cnt, 8);
    a->id = id;
    return rc;
}

static int name_cmp(const uint8_t *names, const uint64_t *noff, size_t i, size_t j)
{
    size_t li = noff[i + 1] - noff[i], lj = noff[j + 1] - noff[j];
    return li == lj && memcmp(names + noff[i], names + noff[j], li) == 0;
}

static int do_publish(qs_casket *c, size_t n, const void *names, const uint64_t *noff,
                      const void *val, size_t vlen, uint64_t *id)
{
    if (n == 0 || !names || !noff || (!val && vlen))
        return QS_INVAL;
    if (vlen > QS_MAX_VALUE)
        return QS_TOOBIG;
    for (size_t i = 0; i < n; i++) {
        if (noff[i + 1] <= noff[i] || noff[i + 1] - noff[i] > QS_MAX_QUEUE_NAME)
            return QS_INVAL;
        /* Quadratic, but fan-out lists are short and a repeated name would
         * need two records with one (key, id). */
        for (size_t j = 0; j < i; j++)
            if (name_cmp(names, noff, i, j))
                return QS_INVAL;
    }
    pub_args a = {n, names, noff, val, vlen, 0};
    int rc = cs_write(c, publish_fn, &a);
    if (rc == 0 && id)
        *id = a.id;
    return rc;
}

/* ---- get, reserve, peek ---------------------------------------------------- */

typedef struct take_args {
    const uint8_t *key;
    uint32_t klen;
    size_t max;
    int reserve;            /* reserve instead of removing */
    double lease;
    outbuf out;
    uint64_t token;
    uint64_t hash;          /* of key: the queue's wake-up word */
    uint32_t word;          /* the word before the take looked */
} take_args;

/* Removes the item record at path (and its share of a shared payload). */
static int remove_item(bt_ctx *bt, bt_path *path, uint64_t id, int shared, int *kept)
{
    int rc = bt_delete_next(bt, path, kept);
    if (rc == 0 && shared) {
        *kept = 0;
        rc = unref(bt, id);
    }
    return rc;
}

static int take_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    take_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    sh_region *sh = cs_region(c);
    qq_queue *q;
    /* Read first: a commit after this point changes it, so a waiter
     * cannot miss the items that commit brings. */
    a->word = qr_wait_word(sh, a->hash);
    int rc = lookup_live(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    /* A reservation is shared at commit; the room for it is claimed now. */
    if (a->reserve && !qr_room(sh, txn_new_marks(q->reg) + 1))
        return QS_RESFULL;
    bt_path path;
    uint64_t id, from = 1;
    int kept = 0, any = q->nm || qr_count(sh, q->hash, NULL);
    while (a->out.n < a->max) {
        /* A batch of reservations stops where the room ends (the first
         * item's room was checked above, so a batch holds at least one). */
        if (a->reserve && a->out.n && !qr_room(sh, txn_new_marks(q->reg) + 1))
            break;
        /* path is on the candidate: the record after the one just taken
         * (kept), or the first at or after `from` */
        int sought = !kept;
        if (sought) {
            bt_key pk = {q->key, q->klen, from};
            if ((rc = bt_seek_ge(&bt, &pk, &path)) != 0)
                break;
        }
        int eq, shared;
        if ((rc = out_begin(&a->out)) != 0)
            break;
        size_t at = a->out.data.len;
        rc = bt_item(&bt, &path, q->key, q->klen, &eq, &id, &a->out.data);
        if (rc == QS_NOTFOUND && !sought) {
            kept = 0;       /* at the end of a leaf: seek the next one */
            continue;
        }
        if (rc == 0 && !eq)
            rc = QS_NOTFOUND;
        if (rc)
            break;
        if (any && hidden(sh, q, id)) {
            a->out.data.len = at;
            from = id + 1;
            if ((rc = bt_next(&bt, &path)) != 0)
                break;
            kept = 1;
            continue;
        }
        if ((rc = item_payload(&bt, id, &a->out, at, &shared)) != 0)
            break;
        out_end(&a->out, id);
        from = id + 1;
        if (a->reserve) {
            if (!a->token)
                a->token = ++q->reg->next_token;
            double deadline = a->lease > 0 ? cs_now() + a->lease : INFINITY;
            if ((rc = mark_add(q, id, a->token, deadline, M_NEW)) != 0)
                break;
            kept = 0;
            any = 1;
        } else {
            if ((rc = remove_item(&bt, &path, id, shared, &kept)) != 0)
                break;
            q->dlen--;
            q->txn_took = 1;
        }
        touch(c, q);
        if (((a->out.n) & 1023) == 0 && (rc = pg_trim(bt.p, 1)) != 0)
            break;
    }
    if (rc == QS_NOTFOUND && a->out.n > 0)
        rc = 0;
    return rc;
}

/* What was left of the timeout of this thread's last wait that a signal
 * ended (qs_queue_wait_left). */
static _Thread_local double wait_left;

double qs_queue_wait_left(void) { return wait_left; }

/* Runs a take, waiting for items as the header describes: asleep on the
 * queue's wake-up word in the shared region, which any process's commit
 * of items (or release, abort, lease end) changes. */
static int take_wait(qs_casket *c, take_args *a, double timeout)
{
    int nowait = timeout == 0 || cs_in_txn(c);
    double deadline = timeout < 0 ? INFINITY : nowait ? 0 : cs_now() + timeout;
    a->hash = hash_bytes(a->key, a->klen);
    for (;;) {
        int rc = cs_write(c, take_fn, a);
        if (rc != QS_NOTFOUND || nowait)
            return rc;
        double now = cs_now();
        if (now >= deadline)
            return QS_NOTFOUND;
        double until = deadline;
        uint64_t lease_ns = 0;
        if (qr_count(cs_region(c), a->hash, &lease_ns)) {
            /* Items are reserved: wake when the first lease ends, and now
             * and then to notice a holder that died. */
            double lease_end = lease_ns ? (double)lease_ns * 1e-9 : INFINITY;
            if (lease_end < until)
                until = lease_end;
            if (now + DEAD_CHECK < until)
                until = now + DEAD_CHECK;
        }
        /* A signal ends the wait with nothing taken: a handler the caller
         * installed (Python's for Ctrl-C) must get to run, and the caller
         * calls again with the time left if it wants to go on. */
        if (qr_wait(cs_region(c), a->hash, a->word, isinf(until) ? -1.0 : until - now) == EINTR) {
            double left = deadline - cs_now();
            wait_left = isinf(deadline) ? -1.0 : left > 0 ? left : 0.0;
            return QS_INTR;
        }
        if (cs_closing(c))
            return QS_CLOSED;
    }
}

static int check_timeout(double t)
{
    return isnan(t) ? QS_INVAL : 0;
}

static int do_get(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                  qs_items **out)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out)
        return QS_INVAL;
    *out = NULL;
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (max == 0 || check_timeout(timeout)))
        rc = QS_INVAL;
    if (rc)
        return rc;
    qs_items *it = calloc(1, sizeof *it);
    if (!it)
        return QS_NOMEM;
    take_args a = {.key = key, .klen = (uint32_t)nlen + 1, .max = max};
    rc = take_wait(c, &a, timeout);
    if (rc) {
        free(it);
        out_drop(&a.out);
        return rc;
    }
    return out_finish(&a.out, 0, it, out);
}

static int do_reserve(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                      double lease, qs_items **out)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out)
        return QS_INVAL;
    *out = NULL;
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (max == 0 || check_timeout(timeout) || !(lease >= 0)))
        rc = QS_INVAL;
    if (rc)
        return rc;
    qs_items *it = calloc(1, sizeof *it);
    if (!it)
        return QS_NOMEM;
    take_args a = {.key = key, .klen = (uint32_t)nlen + 1, .max = max, .reserve = 1, .lease = lease};
    rc = take_wait(c, &a, timeout);
    if (rc) {
        free(it);
        out_drop(&a.out);
        return rc;
    }
    return out_finish(&a.out, a.token, it, out);
}

typedef struct ack_args {
    const uint8_t *key;
    uint32_t klen;
    uint64_t id, token;
    uint64_t removed;
} ack_args;

static int expire_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    (void)ubt;
    ack_args *a = arg;
    qq_queue *q;
    return lookup_live(c, a->key, a->klen, &q);
}

/* Before a look at a queue without taking (len, peek): when a lease of
 * its items ended, or a holder may have died, returns those items -- if
 * the write lock is free now (a reader never waits for a writer). */
static void settle(qs_casket *c, const uint8_t *key, uint32_t klen)
{
    uint64_t lease_ns = 0;
    if (cs_readonly(c) || !qr_count(cs_region(c), hash_bytes(key, klen), &lease_ns))
        return;
    if ((lease_ns && lease_ns <= sh_now_ns()) || qr_sweep_due(cs_region(c))) {
        ack_args a = {key, klen, 0, 0, 0};
        cs_write_try(c, expire_fn, &a);
    }
}

static int do_peek(qs_casket *c, const void *name, size_t nlen, size_t max, qs_items **out)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out)
        return QS_INVAL;
    *out = NULL;
    int rc = make_key(name, nlen, key);
    if (rc == 0 && max == 0)
        rc = QS_INVAL;
    if (rc)
        return rc;
    settle(c, key, (uint32_t)nlen + 1);
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    qq_queue *q;
    const sh_region *sh = cs_region(c);
    outbuf o = {0};
    bt_path path;
    uint64_t id, from = 1;
    if ((rc = lookup_live(c, key, (uint32_t)nlen + 1, &q)) == 0) {
        while (o.n < max && (rc = first_free(sh, &bt, q, from, &path, &id)) == 0) {
            int shared;
            if ((rc = out_begin(&o)) != 0 || (rc = read_item(&bt, &path, id, &o, &shared)) != 0)
                break;
            out_end(&o, id);
            from = id + 1;
        }
        if (rc == QS_NOTFOUND && o.n)
            rc = 0;
    }
    cs_read_leave(c, &bt);
    return out_read(&o, rc, out);
}

/* Items of the queue after id `after`, reserved or not, up to max items and
 * (after the first) about max_bytes of payload: an iteration that does not
 * consume and needs no registry (a snapshot's view does not move, other
 * views move between calls and the next call goes on after the last id). */
static int do_scan(qs_casket *c, const void *name, size_t nlen, uint64_t after, size_t max,
                   size_t max_bytes, qs_items **out)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out)
        return QS_INVAL;
    *out = NULL;
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (max == 0 || after == UINT64_MAX))
        rc = QS_INVAL;
    if (rc)
        return rc;
    uint32_t klen = (uint32_t)nlen + 1;
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    outbuf o = {0};
    bt_path path;
    bt_key pk = {key, klen, after + 1};
    rc = bt_seek_ge(&bt, &pk, &path);
    while (rc == 0 && o.n < max && (o.n == 0 || o.data.len < max_bytes)) {
        int eq, shared;
        uint64_t id;
        if ((rc = bt_key_is(&bt, &path, key, klen, &eq)) != 0)
            break;
        if (!eq) {
            rc = QS_NOTFOUND;
            break;
        }
        if ((rc = out_begin(&o)) != 0 || (rc = bt_read(&bt, &path, NULL, NULL, 0, &id)) != 0 ||
            (rc = read_item(&bt, &path, id, &o, &shared)) != 0)
            break;
        out_end(&o, id);
        rc = bt_next(&bt, &path);
    }
    if (rc == QS_NOTFOUND)
        rc = 0;
    cs_read_leave(c, &bt);
    return out_read(&o, rc, out);
}

/* ---- ack, release, clear ------------------------------------------------- */

static int ack_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    ack_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    size_t mi;
    int rc = lookup_live(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    int made_here = find_mark(q, a->id, a->token, &mi) == 0;
    if (!made_here) {
        /* a committed reservation: its shared entry goes at commit */
        if ((rc = find_shared(c, q, a->id, a->token)) != 0 ||
            (rc = mark_add(q, a->id, a->token, INFINITY, M_ACKED)) != 0)
            return rc;
        q->nacked++;
    }
    bt_path path;
    outbuf tag = {0};
    int shared, kept;
    /* the value's tag says whether a shared payload loses a reference */
    if ((rc = seek_exact(&bt, a->key, a->klen, a->id, &path)) == 0 &&
        (rc = bt_read(&bt, &path, NULL, &tag.data, 0, NULL)) == 0) {
        shared = tag.data.len == 1 && tag.data.data[0] == TAG_SHARED;
        rc = remove_item(&bt, &path, a->id, shared, &kept);
    }
    out_drop(&tag);
    if (rc) {
        if (!made_here && find_mark_any(q, a->id, &mi) == 0)
            mark_remove(q, mi);
        return rc;
    }
    if (made_here) {
        q->m[mi].flags |= M_ACKED;
        q->nacked++;
    }
    q->dlen--;
    q->txn_took = 1;
    touch(c, q);
    return 0;
}

static int do_ack(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    ack_args a = {key, (uint32_t)nlen + 1, id, token, 0};
    return cs_write(c, ack_fn, &a);
}

typedef struct ack_many_args {
    ack_args one;
    size_t n;
    const uint64_t *ids;
} ack_many_args;

/* Every id is checked before any is acknowledged, so a refusal leaves the
 * caller's transaction as it was (ack_fn's own refusals come only after
 * its checks, which these repeat). */
static int ack_many_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    ack_many_args *a = arg;
    qq_queue *q;
    size_t mi;
    int rc = lookup_live(c, a->one.key, a->one.klen, &q);
    if (rc)
        return rc;
    for (size_t i = 0; i < a->n; i++) {
        if (i && a->ids[i] <= a->ids[i - 1])
            return QS_INVAL;    /* a duplicate would pass the checks twice */
        if (find_mark(q, a->ids[i], a->one.token, &mi) != 0 &&
            (rc = find_shared(c, q, a->ids[i], a->one.token)) != 0)
            return rc;
    }
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        a->one.id = a->ids[i];
        rc = ack_fn(c, ubt, &a->one);
    }
    return rc;
}

static int do_ack_many(qs_casket *c, const void *name, size_t nlen, size_t n, const uint64_t *ids,
                       uint64_t token)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (n == 0 || !ids))
        rc = QS_INVAL;
    if (rc)
        return rc;
    ack_many_args a = {{key, (uint32_t)nlen + 1, 0, token, 0}, n, ids};
    return cs_write(c, ack_many_fn, &a);
}

/* Ends a reservation at once (also inside a transaction): one made by the
 * open transaction, or a committed one.  Under the write lock, like every
 * change to the shared reservations. */
static int release_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    (void)ubt;
    ack_args *a = arg;
    qq_queue *q;
    size_t mi;
    int rc = lookup_live(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    if (find_mark(q, a->id, a->token, &mi) == 0) {
        mark_remove(q, mi);
        recompute_deadline(q);
    } else if ((rc = find_shared(c, q, a->id, a->token)) == 0)
        qr_del(cs_region(c), q->hash, a->id);
    else
        return rc;
    wake(c, q);
    return 0;
}

static int do_release(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    ack_args a = {key, (uint32_t)nlen + 1, id, token, 0};
    return cs_write(c, release_fn, &a);
}

static int clear_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    ack_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    int rc = lookup_live(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    const sh_region *sh = cs_region(c);
    uint64_t from = 1, id;
    a->removed = 0;
    bt_path path;
    outbuf tag = {0};
    while ((rc = first_free(sh, &bt, q, from, &path, &id)) == 0) {
        int kept;
        tag.data.len = 0;
        if ((rc = bt_read(&bt, &path, NULL, &tag.data, 0, NULL)) != 0)
            break;
        int shared = tag.data.len == 1 && tag.data.data[0] == TAG_SHARED;
        if ((rc = remove_item(&bt, &path, id, shared, &kept)) != 0)
            break;
        from = id + 1;
        a->removed++;
        q->dlen--;
        q->txn_took = 1;
        touch(c, q);
        if ((a->removed & 1023) == 0 && (rc = pg_trim(bt.p, 1)) != 0)
            break;
    }
    out_drop(&tag);
    return rc == QS_NOTFOUND ? 0 : rc;
}

static int do_clear(qs_casket *c, const void *name, size_t nlen, uint64_t *removed)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (removed)
        *removed = 0;
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    ack_args a = {key, (uint32_t)nlen + 1, 0, 0, 0};
    rc = cs_write(c, clear_fn, &a);
    if (rc == 0 && removed)
        *removed = a.removed;
    return rc;
}

/* ---- lengths and listing ------------------------------------------------- */


static int do_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!len)
        return QS_INVAL;
    *len = 0;
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    settle(c, key, (uint32_t)nlen + 1);
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    qq_queue *q;
    if ((rc = lookup_live(c, key, (uint32_t)nlen + 1, &q)) == 0) {
        *len = available(c, q, bt.wview);
    }
    cs_read_leave(c, &bt);
    return rc;
}

static int do_list(qs_casket *c, qs_items **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    bt_ctx bt;
    int rc = cs_read_enter(c, &bt, NS_QUEUE);
    if (rc)
        return rc;
    outbuf o = {0};
    bt_buf k = {0};
    uint8_t first = KEY_QUEUE;
    bt_key pk = {&first, 1, 0};
    bt_path path;
    while ((rc = bt_seek_ge(&bt, &pk, &path)) == 0) {
        k.len = 0;
        if ((rc = bt_read(&bt, &path, &k, NULL, 0, NULL)) != 0)
            break;
        if (k.len < 2 || k.data[0] != KEY_QUEUE)
            break;
        qq_queue *q;
        if ((rc = lookup_live(c, k.data, (uint32_t)k.len, &q)) != 0)
            break;
        if ((rc = out_begin(&o)) != 0 || (rc = bt_buf_reserve(&o.data, k.len - 1)) != 0)
            break;
        memcpy(o.data.data + o.data.len, k.data + 1, k.len - 1);
        o.data.len += k.len - 1;
        out_end(&o, available(c, q, bt.wview));
        /* the next queue: the first record after every one of this key */
        pk = (bt_key){q->key, q->klen, UINT64_MAX};
    }
    free(k.data);
    cs_read_leave(c, &bt);
    if (rc == QS_NOTFOUND)
        rc = 0;
    qs_items *it = rc ? NULL : calloc(1, sizeof *it);
    if (rc == 0 && !it)
        rc = QS_NOMEM;
    if (rc) {
        out_drop(&o);
        return rc;
    }
    return out_finish(&o, 0, it, out);
}

static int do_records(qs_casket *c, uint64_t *count)
{
    if (!count)
        return QS_INVAL;
    bt_ctx bt;
    int rc = cs_read_enter(c, &bt, NS_QUEUE);
    if (rc)
        return rc;
    rc = bt_total(&bt, count);
    cs_read_leave(c, &bt);
    return rc;
}

int qs_queue_put(qs_casket *c, const void *name, size_t nlen, const void *val, size_t vlen,
                 uint64_t *id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_put(c, name, nlen, val, vlen, id));
}

int qs_queue_put_many(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                      size_t vals_len, const uint32_t *lens, uint64_t *first_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_put_many(c, name, nlen, n, vals, vals_len, lens, first_id));
}

int qs_queue_put_framed(qs_casket *c, const void *name, size_t nlen, size_t n, const void *frames,
                        size_t frames_len, uint64_t *first_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_put_framed(c, name, nlen, n, frames, frames_len, first_id));
}

int qs_queue_publish(qs_casket *c, size_t nnames, const void *names, const uint64_t *noff,
                     const void *val, size_t vlen, uint64_t *id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_publish(c, nnames, names, noff, val, vlen, id));
}

int qs_queue_get(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                 qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_get(c, name, nlen, max, timeout, out));
}

int qs_queue_scan(qs_casket *c, const void *name, size_t nlen, uint64_t after, size_t max,
                  size_t max_bytes, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_scan(c, name, nlen, after, max, max_bytes, out));
}

int qs_queue_peek(qs_casket *c, const void *name, size_t nlen, size_t max, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_peek(c, name, nlen, max, out));
}

int qs_queue_reserve(qs_casket *c, const void *name, size_t nlen, double timeout, double lease,
                     qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_reserve(c, name, nlen, 1, timeout, lease, out));
}

int qs_queue_reserve_many(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                          double lease, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_reserve(c, name, nlen, max, timeout, lease, out));
}

int qs_queue_ack(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_ack(c, name, nlen, id, token));
}

int qs_queue_ack_many(qs_casket *c, const void *name, size_t nlen, size_t n, const uint64_t *ids,
                      uint64_t token)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_ack_many(c, name, nlen, n, ids, token));
}

int qs_queue_release(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_release(c, name, nlen, id, token));
}

int qs_queue_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_len(c, name, nlen, len));
}

int qs_queue_clear(qs_casket *c, const void *name, size_t nlen, uint64_t *removed)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_clear(c, name, nlen, removed));
}

int qs_queue_list(qs_casket *c, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_list(c, out));
}

int qs_queue_records(qs_casket *c, uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_records(c, count));
}
