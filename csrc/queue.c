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
#include "qaio.h"
#include "qres.h"
#include "qorder.h"
#include "qconf.h"
#include "qdeliv.h"
#include "qdedup.h"
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
#define DUE_SLACK 1e-4

#define M_NEW 1u        /* reserved in the open transaction (not yet shared) */
#define M_ACKED 2u      /* acknowledged in the open transaction (the shared
                           entry goes at commit) */
#define M_CLAIMED 4u    /* claimed in the open transaction from the holder
                           of its shared entry, which becomes ours at
                           commit (counted like a shared reservation) */
#define M_EARLY 8u      /* with M_NEW: its shared entry, carrying the count
                           the open transaction wrote, is there already
                           (qr_add_due); commit replaces it */

/* A delivery count the open transaction wrote that must outlive it: its
 * item has an entry with count_due in the shared region (qr_add_due). */
typedef struct qq_due {
    uint64_t id;
    uint32_t count;
} qq_due;

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
    int txn_conf;               /* the open transaction set its config */
    qc_conf conf;               /* its stored config, read with clen */
    uint8_t *key;               /* "q" + name */
    uint32_t klen;
    uint64_t hash;
    uint64_t clen;              /* items in the committed tree (priority
                                   and delayed ones included) */
    qo_state order;             /* its priority and delayed items */
    qk_state keys;              /* its items with dedup keys */
    int64_t dlen;               /* the open transaction's change to it */
    uint32_t nacked;            /* marks flagged M_ACKED */
    uint32_t nearly;            /* marks flagged M_EARLY, not M_ACKED */
    qq_due *due;                /* counts to make durable, sorted by id */
    size_t ndue, duecap;
    struct qq_queue *rnext;     /* in the registry's recount list */
    int recount;
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
    qq_queue *recount;          /* queues whose counts an abort undid: the
                                   follow-up writes them again */
    uint64_t next_token;
    uint64_t mods;              /* bumped by every change to the queue tree */
    uint64_t epoch;             /* bumped when other handles committed */
    size_t sweep_at;            /* entries that trigger dropping idle ones */
} qq_registry;

/* ---- the registry ---------------------------------------------------------- */

static const cs_layer qq_layer;

static void queue_free(qq_queue *q)
{
    qc_clear(&q->conf);
    free(q->key);
    free(q->m);
    free(q->due);
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
    return !q->nm && !q->touched && !q->clen && !q->dlen && !q->ndue;
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

/* Records of key in the committed tree, and the queue's config there
 * (read together: both change only by commits, ours or others'). */
static int committed_count(qs_casket *c, const uint8_t *key, uint32_t klen, uint64_t *n,
                           qc_conf *conf)
{
    bt_ctx bt = {cs_pager(c), 0, NS_QUEUE};
    bt_key lo = {key, klen, 0}, hi = {key, klen, UINT64_MAX};
    uint64_t a, b;
    int rc = bt_rank(&bt, &lo, &a);
    if (rc == 0 && (rc = bt_rank(&bt, &hi, &b)) == 0)
        *n = b - a;
    if (rc == 0) {
        qc_clear(conf);
        rc = qc_read(&bt, key + 1, klen - 1, conf);
    }
    return rc;
}

/* q's committed length: its plain run, priority and delayed items. */
static int count_queue(qs_casket *c, qq_queue *q)
{
    bt_ctx bt = {cs_pager(c), 0, NS_QUEUE};
    uint64_t extra;
    int rc = committed_count(c, q->key, q->klen, &q->clen, &q->conf);
    if (rc == 0 && (rc = qo_count(&bt, q->key, q->klen, &q->order, &extra)) == 0)
        q->clen += extra;
    if (rc == 0)
        rc = qk_count(&bt, q->key, q->klen, &q->keys);
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
                    int rc = count_queue(c, q);
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
    int rc = count_queue(c, q);
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

static int expire(qs_casket *c, qq_queue *q);

/* lookup, then end the reservations whose lease ran out (and, holding the
 * write lock, the shared ones whose lease ran out or whose holder is
 * gone, taking over the delivery counts a dead holder's transaction did
 * not commit). */
static int lookup_live(qs_casket *c, const uint8_t *key, uint32_t klen, qq_queue **out)
{
    int rc = lookup(c, key, klen, out);
    if (rc == 0)
        rc = expire(c, *out);
    return rc;
}

void qq_tree_changed(qs_casket *c)
{
    qq_registry *r = cs_layer_state(c, &qq_layer);
    if (r)
        r->mods++;
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

/* Items of q may have become available: wake its readers everywhere, and
 * tell this process's asynchronous waiters at once rather than through
 * its watcher thread (qaio.c; first, so the watcher finds them told).
 * With nobody waiting that is one untaken branch. */
static void wake(qs_casket *c, qq_queue *q)
{
    if (qr_wake(cs_region(c), q->hash)) {
        qa_notify_local();
        qr_aio_kick(cs_region(c));
    }
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
    q->nearly += (flags & M_EARLY) != 0;
    if (deadline < q->min_deadline)
        q->min_deadline = deadline;
    return 0;
}

static void mark_remove(qq_queue *q, size_t i)
{
    if (q->m[i].flags & M_ACKED)
        q->nacked--;
    else if (q->m[i].flags & M_EARLY)
        q->nearly--;
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

static int adopt(qs_casket *c, qq_queue *q, const qr_res *due, size_t n);

/* Ends reservations whose lease ran out (not those acknowledged in the open
 * transaction: their item is already gone in the writer's view). */
static int expire(qs_casket *c, qq_queue *q)
{
    if (cs_owns(c)) {
        qr_res due[16];
        size_t ndue;
        if (qr_expire_due(cs_region(c), q->hash, 0, due, 16, &ndue))
            wake(c, q);
        int rc = ndue ? adopt(c, q, due, ndue) : 0;
        if (rc)
            return rc;
    }
    if (isinf(q->min_deadline))
        return 0;   /* no lease of ours runs (the usual case: skip the clock) */
    double now = cs_now();
    if (q->min_deadline > now)
        return 0;
    size_t w = 0;
    for (size_t i = 0; i < q->nm; i++)
        if ((q->m[i].flags & M_ACKED) || q->m[i].deadline > now)
            q->m[w++] = q->m[i];
        else if (q->m[i].flags & M_EARLY)
            q->nearly--;
    q->nm = w;
    recompute_deadline(q);
    wake(c, q);
    return 0;
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
        n += q->nm - q->nacked - q->nearly;
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
    /* (an entry with a count due is the open transaction's: its marks
     * tell whether it is still reserved) */
    if (!e || !qr_mine(sh, e) || e->token != token || e->qhash != (q->hash ? q->hash : 1) ||
        e->count_due)
        return QS_NOTRESERVED;
    size_t i = mark_lower(q, id);
    if (i < q->nm && q->m[i].id == id)
        return QS_NOTRESERVED;  /* acknowledged already */
    return 0;
}

/* How many ids ahead a walk over a queue's ids asks for the reservation
 * table's slot (qr_prefetch): enough misses in flight to hide most of
 * their latency, few enough that the walk's end wastes little. */
#define PREFETCH_AHEAD 8

/* Whether id is hidden from takers: reserved by anyone (committed), or by
 * the open transaction.  An entry of ours with a count due hides the item
 * from everyone else; from us, only while a mark says it is reserved. */
static int hidden(const sh_region *sh, const qq_queue *q, uint64_t id)
{
    if (q->nm) {
        size_t i = mark_lower(q, id);
        if (i < q->nm && q->m[i].id == id)
            return 1;
    }
    const qr_res *e = qr_find(sh, q->hash, id);
    return e && !(e->count_due && qr_mine(sh, e));
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
        /* entries with a count due are the transaction's, counted by
         * shared: their marks say what they are */
        n += q->dlen + acked_shared - made + (int64_t)q->ndue;
    }
    return n > 0 ? (uint64_t)n : 0;
}

/* Drops the due entries of q from the shared table (those a commit did not
 * turn into plain reservations) and forgets them. */
static void due_drop(qs_casket *c, qq_queue *q)
{
    sh_region *sh = cs_region(c);
    for (size_t i = 0; i < q->ndue; i++) {
        const qr_res *e = qr_find(sh, q->hash, q->due[i].id);
        if (e && e->count_due && qr_mine(sh, e))
            qr_del(sh, q->hash, q->due[i].id);
    }
    q->ndue = 0;
}

/* The end of the transaction that holds q's due counts: committed, they
 * are durable; aborted, they go to the follow-up (run_followup, txn.c),
 * which writes them again in a transaction of its own before the write
 * lock goes -- unless this is the follow-up's own abort (an I/O error:
 * the counts are lost with it, as the rest of a failed commit is). */
static void due_end(qs_casket *c, qq_queue *q, int committed)
{
    if (!committed && cs_followup_due(c)) {
        if (!q->recount) {
            q->recount = 1;
            q->rnext = q->reg->recount;
            q->reg->recount = q;
        }
        return;
    }
    due_drop(c, q);
    wake(c, q);     /* the items are free for everyone now */
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
            if (committed && i + PREFETCH_AHEAD < q->nm)
                qr_prefetch(cs_region(c), q->hash, q->m[i + PREFETCH_AHEAD].id);
            if (committed && ((m->flags & ~M_EARLY) == M_NEW || m->flags == M_CLAIMED)) {
                /* room was checked when it was made (see take_fn); a
                 * claimed entry is taken over in place */
                uint64_t dl = isinf(m->deadline) ? 0 : (uint64_t)(m->deadline * 1e9);
                qr_add(cs_region(c), m->id, q->hash, m->token, dl ? dl : 0);
            } else if (committed && (m->flags & M_ACKED) && !(m->flags & M_NEW))
                qr_del(cs_region(c), q->hash, m->id);
            else if (!committed && (m->flags & M_NEW))
                back = 1;
        }
        q->nm = 0;
        q->nacked = 0;
        q->nearly = 0;
        if (q->ndue)
            due_end(c, q, committed);
        if (committed)
            q->clen = (uint64_t)((int64_t)q->clen + q->dlen);
        qo_txn_end(&q->order, committed);
        qk_txn_end(&q->keys, committed);
        recompute_deadline(q);
        /* A bounded queue's producers wait on the same word for room, and
         * qs_queue_join's callers for an empty queue. */
        if ((committed && (q->txn_put || (q->txn_took && (q->conf.maxsize || !q->clen)))) ||
            (!committed && (q->txn_took || back)))
            wake(c, q);
        if (!committed && q->txn_conf)
            q->epoch = r->epoch - 1;    /* reread the config it had */
        q->txn_conf = 0;
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
           rc == QS_NOTFOUND || rc == QS_QFULL || rc == QS_QBOUND;
}

static int qq_followup(qs_casket *c, bt_ctx *ubt, void *state);

static const cs_layer qq_layer = {
    .txn_end = qq_txn_end,
    .followup = qq_followup,
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
    if (tag == QD_TAG) {
        /* an item reserved before: its plain value follows the header */
        qd_info d;
        if ((rc = qd_parse(o->data.data + at, o->data.len - at, &d)) != 0)
            return rc;
        memmove(o->data.data + at, o->data.data + at + d.hdr, o->data.len - at - d.hdr);
        o->data.len -= d.hdr;
        tag = o->data.data[at];
    }
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

/* Whether an item value (any tag) refers to a shared payload. */
static int value_shared(const uint8_t *v, size_t len)
{
    qd_info d;
    return qd_parse(v, len, &d) == 0 && len == d.hdr + 1 && v[d.hdr] == TAG_SHARED;
}

/* Replaces the value of item id of the run keyed rkey (the plain run or a
 * priority run, qorder.h), at path, with v.  *past (may be NULL) 1: path is
 * left just past the item, on the record after it, as a take walking the
 * queue wants it; 0: path is not valid afterwards. */
static int rewrite_item(bt_ctx *bt, const uint8_t *rkey, uint32_t rklen, bt_path *path,
                        uint64_t id, const bt_buf *v, int *past)
{
    /* Mostly the cell grows by a delivery header at most, and its leaf
     * holds that: rewritten where it lies, no count above it touched (a
     * delete and an insert were two fifths of a reserve's instructions). */
    int kept, after = 0;
    int rc = bt_replace(bt, path, v->data, v->len, &kept);
    if (rc || kept) {
        if (past && (*past = rc == 0))
            path->idx[path->depth - 1]++;
        return rc;
    }
    /* When the leaf kept the successor, path is where a seek for id would
     * put it (the first record after it): no second descent. */
    rc = bt_delete_next(bt, path, &kept);
    bt_key pk = {rkey, rklen, id};
    if (rc == 0 && !kept && (rc = bt_seek(bt, &pk, path)) == QS_NOTFOUND)
        rc = 0;
    if (rc == 0)
        rc = bt_insert_next(bt, path, &pk, v->data, v->len, &after);
    if (past)
        *past = rc == 0 && after;
    return rc;
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

/* Whether a taker stepping up q's ids must pass over id.  Reserved ids
 * often come in a run (qr_run_end): one that starts a long enough stretch
 * of it sets *seek to the id after the stretch, worth one seek instead of
 * a step and a check per item (else *seek is 0); a shorter stretch is
 * stepped over, a seek costing several steps, and *known keeps it, so its
 * other ids are passed with no lookup at all.  *known starts empty ({0, 0})
 * for each scan; it is a range, not a bound, because a later priority run
 * holds lower ids. */
#define SKIP_MIN 8
typedef struct id_range {
    uint64_t lo, hi;
} id_range;

static int passed_over(const sh_region *sh, const qq_queue *q, uint64_t id, id_range *known,
                       uint64_t *seek)
{
    *seek = 0;
    if (known->lo && id >= known->lo && id <= known->hi)
        return 1;
    if (!hidden(sh, q, id))
        return 0;
    uint64_t end;
    if (qr_run_end(sh, q->hash, id, &end)) {
        if (end - id >= SKIP_MIN)
            *seek = end + 1;
        else
            *known = (id_range){id, end};
    }
    return 1;
}

/* Positions path on the first item of q's run r at or after id `from`
 * that no reservation hides; *id gets its id.  QS_NOTFOUND: none. */
static int first_free(const sh_region *sh, bt_ctx *bt, qq_queue *q, const qo_run *r,
                      uint64_t from, bt_path *path, uint64_t *id)
{
    bt_key pk = {r->key, r->klen, from};
    int rc = bt_seek_ge(bt, &pk, path);
    int any = q->nm || qr_count(sh, q->hash, NULL);
    id_range known = {0, 0};
    uint64_t seek;
    while (rc == 0) {
        int eq;
        if ((rc = bt_key_is(bt, path, r->key, r->klen, &eq)) != 0)
            return rc;
        if (!eq)
            return QS_NOTFOUND;
        if ((rc = bt_read(bt, path, NULL, NULL, 0, id)) != 0)
            return rc;
        if (!any || !passed_over(sh, q, *id, &known, &seek))
            return 0;
        if (seek) {
            pk.seq = seek;
            rc = bt_seek_onward(bt, &pk, path);
            continue;
        }
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
    int priority;           /* 0..QO_MAX_PRIORITY */
    double delay;           /* seconds, 0: none */
} put_args;

#define PUT_CHUNK 1024          /* items between spill checks */

/* Whether a bounded queue holds room for n more items: its maxsize counts
 * every item of the tree in the writer's view, reserved ones included. */
static int has_room(const qq_queue *q, uint64_t n)
{
    uint64_t held = (uint64_t)((int64_t)q->clen + q->dlen);
    return held <= q->conf.maxsize && n <= q->conf.maxsize - held;
}

static int put_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    put_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    int rc = lookup(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    if (q->conf.maxsize && !has_room(q, a->n))
        return QS_QFULL;
    uint64_t id = pg_alloc_ids(bt.p, a->n);
    a->first_id = id;
    bt_vals v = a->vals;
    int valid = q->tail_ok && q->tail_mods == q->reg->mods;
    /* a priority or delayed item goes to its own run (qorder.h) */
    const uint8_t *key = a->key;
    uint32_t klen = a->klen;
    uint8_t okey[QO_KEY_MAX];
    bt_path opath, *path = &q->tail;
    if (a->priority || a->delay > 0) {
        key = okey;
        klen = a->delay > 0 ? qo_delay_key(a->key, a->klen, qo_due(qo_now_ns(), a->delay),
                                           qo_run_of(a->priority), okey)
                            : qo_run_key(a->key, a->klen, qo_run_of(a->priority), okey);
        path = &opath;
        valid = 0;
    }
    for (size_t i = 0; i < a->n && rc == 0; i += PUT_CHUNK) {
        size_t k = a->n - i < PUT_CHUNK ? a->n - i : PUT_CHUNK;
        rc = bt_append_run(&bt, path, &valid, key, klen, id + i, k, INLINE_PREFIX,
                           sizeof INLINE_PREFIX, &v);
        if (rc == 0 && k == PUT_CHUNK)
            rc = pg_trim(bt.p, 1);
    }
    touch(c, q);
    q->tail_ok = rc == 0 && valid && path == &q->tail;
    q->tail_mods = q->reg->mods;
    if (rc)
        return rc;
    if (a->delay > 0)
        q->order.ddelay += (int64_t)a->n;
    else if (a->priority)
        q->order.dprio += (int64_t)a->n;
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
    put_args a = {key, klen, n, vals, 0, 0, 0};
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

/* A delay (seconds) and a priority a put or release may be given. */
static int check_order(double delay, int priority)
{
    if (!(delay >= 0) || isinf(delay) || priority < 0 || priority > QO_MAX_PRIORITY)
        return QS_INVAL;
    return 0;
}

static int do_put_order(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                        size_t vals_len, const uint32_t *lens, double delay, int priority,
                        uint64_t *first_id)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        rc = check_vals(n, vals, vals_len, lens);
    if (rc == 0)
        rc = check_order(delay, priority);
    if (rc || n == 0) {
        if (rc == 0 && first_id)
            *first_id = 0;
        return rc;
    }
    put_args a = {key, (uint32_t)nlen + 1, n, {vals, lens, 0}, 0, priority, delay};
    rc = cs_write(c, put_fn, &a);
    if (rc == 0 && first_id)
        *first_id = a.first_id;
    return rc;
}

/* ---- keyed puts (dedup keys, qdedup.h) ------------------------------------ */

typedef struct keyed_args {
    const uint8_t *key;
    uint32_t klen;
    size_t n;
    bt_vals vals;
    const uint8_t *const *dk;   /* item i's dedup key, NULL: none */
    const uint32_t *dklen;
    const size_t *first;        /* index of the batch's first item with i's key */
    uint64_t *ids;
    size_t stored;
    int priority;
    double delay;
} keyed_args;

/* Two passes so that a refusal (QS_QFULL) changes nothing: the first
 * finds the duplicates, the second stores the rest with their keys. */
static int keyed_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    keyed_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    int rc = lookup(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    uint64_t now = qo_now_ns();
    size_t fresh = 0;
    for (size_t i = 0; i < a->n; i++) {
        int dup = 0;
        uint64_t had = 0;
        if (a->dk[i] && a->first[i] == i &&
            (rc = qk_find(&bt, a->key, a->klen, a->dk[i], a->dklen[i], now, q->conf.dedup_window,
                          &had, &dup)) != 0)
            return rc;
        a->ids[i] = dup ? had : 0;  /* 0: stored by the pass below */
        fresh += !dup && (!a->dk[i] || a->first[i] == i);
    }
    if (q->conf.maxsize && !has_room(q, fresh))
        return QS_QFULL;
    uint8_t okey[QO_KEY_MAX];
    const uint8_t *rkey = a->key;
    uint32_t rklen = a->klen;
    if (a->delay > 0 || a->priority) {
        rkey = okey;
        rklen = a->delay > 0 ? qo_delay_key(a->key, a->klen, qo_due(now, a->delay),
                                            qo_run_of(a->priority), okey)
                             : qo_run_key(a->key, a->klen, qo_run_of(a->priority), okey);
    }
    uint64_t id = fresh ? pg_alloc_ids(bt.p, fresh) : 0;
    bt_vals v = a->vals;
    /* one insert per item, not bt_append_run: a second caller would stop
     * LTO inlining it into put_fn, which costs the plain put 2% */
    bt_buf item = {0};
    for (size_t i = 0; i < a->n && rc == 0; i++, bt_vals_next(&v)) {
        if (a->ids[i] || (a->dk[i] && a->first[i] != i))
            continue;   /* a duplicate: nothing stored */
        a->ids[i] = id;
        uint32_t vlen = bt_vals_len(&v);
        item.len = 0;
        if ((rc = bt_buf_reserve(&item, 1 + (size_t)vlen)) != 0)
            break;
        item.data[0] = TAG_INLINE;
        if (vlen)
            memcpy(item.data + 1, bt_vals_data(&v), vlen);
        item.len = 1 + (size_t)vlen;
        rc = qo_insert_at(&bt, rkey, rklen, id, &item);
        if (rc == 0 && a->dk[i])
            rc = qk_add(&bt, a->key, a->klen, &q->keys, a->dk[i], a->dklen[i], id, now);
        id++;
        a->stored++;
    }
    free(item.data);
    for (size_t i = 0; i < a->n; i++)
        if (a->dk[i] && a->first[i] != i)
            a->ids[i] = a->ids[a->first[i]];
    /* two expired keys dropped per key added: the index cannot outgrow
     * the keys that are due */
    if (rc == 0)
        rc = qk_prune(&bt, a->key, a->klen, now, 2 * a->stored + 2);
    touch(c, q);
    if (rc)
        return rc;
    if (a->delay > 0)
        q->order.ddelay += (int64_t)a->stored;
    else if (a->priority)
        q->order.dprio += (int64_t)a->stored;
    q->dlen += (int64_t)a->stored;
    if (a->stored)
        q->txn_put = 1;     /* not reset: an earlier put of the transaction set it */
    return 0;
}

/* Order of the batch's keys (bytes, then position), to find repeats. */
typedef struct key_ref {
    const uint8_t *p;
    uint32_t len;
    size_t i;
} key_ref;

static int key_ref_cmp(const void *x, const void *y)
{
    const key_ref *a = x, *b = y;
    int d = qo_name_cmp(a->p, a->len, b->p, b->len);
    return d ? d : (a->i > b->i) - (a->i < b->i);
}

/* The batch's keys split out of keys (checked) into dk/dklen, and each
 * item's first item with the same key into first. */
static int split_keys(size_t n, const uint8_t *keys, size_t keys_len, const uint32_t *klens,
                      const uint8_t **dk, size_t *first, key_ref *refs)
{
    size_t at = 0, nk = 0;
    for (size_t i = 0; i < n; i++) {
        first[i] = i;
        dk[i] = NULL;
        if (klens[i] == QS_NO_KEY)
            continue;
        if (klens[i] == 0 || klens[i] > QS_MAX_DEDUP_KEY || klens[i] > keys_len - at)
            return QS_INVAL;
        dk[i] = keys + at;
        refs[nk++] = (key_ref){keys + at, klens[i], i};
        at += klens[i];
    }
    if (at != keys_len)
        return QS_INVAL;
    if (nk > 1)
        qsort(refs, nk, sizeof *refs, key_ref_cmp);
    for (size_t j = 1; j < nk; j++)
        if (qo_name_cmp(refs[j].p, refs[j].len, refs[j - 1].p, refs[j - 1].len) == 0)
            first[refs[j].i] = first[refs[j - 1].i];
    return 0;
}

static int do_put_keyed(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                        size_t vals_len, const uint32_t *lens, const void *keys, size_t keys_len,
                        const uint32_t *klens, double delay, int priority, uint64_t *ids,
                        size_t *stored)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        rc = check_vals(n, vals, vals_len, lens);
    if (rc == 0)
        rc = check_order(delay, priority);
    if (rc == 0 && ((n && !klens) || (!keys && keys_len)))
        rc = QS_INVAL;
    if (rc || n == 0) {
        if (rc == 0 && stored)
            *stored = 0;
        return rc;
    }
    if (n > SIZE_MAX / (sizeof(uint64_t) + 2 * sizeof(void *) + sizeof(size_t) + sizeof(key_ref)))
        return QS_NOMEM;
    uint64_t *out = malloc(n * sizeof *out);
    const uint8_t **dk = malloc(n * sizeof *dk);
    size_t *first = malloc(n * sizeof *first);
    key_ref *refs = malloc(n * sizeof *refs);
    if (!out || !dk || !first || !refs)
        rc = QS_NOMEM;
    if (rc == 0)
        rc = split_keys(n, keys, keys_len, klens, dk, first, refs);
    free(refs);
    keyed_args a = {key, (uint32_t)nlen + 1, n, {vals, lens, 0}, dk, klens, first, out, 0,
                    priority, delay};
    if (rc == 0)
        rc = cs_write(c, keyed_fn, &a);
    if (rc == 0) {
        if (ids)
            memcpy(ids, out, n * sizeof *out);
        if (stored)
            *stored = a.stored;
    }
    free(out);
    free(dk);
    free(first);
    return rc;
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

/* What was left of the timeout of this thread's last wait that a signal
 * ended (qs_queue_wait_left). */
static _Thread_local double wait_left;

/* The put of qs_queue_put_wait: waits for room in a bounded queue asleep
 * on its wake-up word, which a commit that consumed items of a bounded
 * queue moves (take_wait's scheme, turned around). */
static int put_wait(qs_casket *c, put_args *a, double timeout, uint64_t *id)
{
    int nowait = timeout == 0 || cs_in_txn(c);
    double deadline = timeout < 0 ? INFINITY : nowait ? 0 : cs_now() + timeout;
    uint64_t hash = hash_bytes(a->key, a->klen);
    qr_wait_begin();
    for (;;) {
        /* read before the look: a commit after it moves the word */
        uint32_t word = qr_wait_word(cs_region(c), hash);
        int rc = cs_write(c, put_fn, a);
        if (rc == 0)
            *id = a->first_id;
        if (rc != QS_QFULL || nowait)
            return rc;
        double now = cs_now();
        if (now >= deadline)
            return QS_QFULL;
        if (qr_wait(cs_region(c), hash, word, isinf(deadline) ? -1.0 : deadline - now) == EINTR) {
            double left = deadline - cs_now();
            wait_left = isinf(deadline) ? -1.0 : left > 0 ? left : 0.0;
            return QS_INTR;
        }
        if (cs_closing(c))
            return QS_CLOSED;
    }
}

/* One put on q, as qs_queue_put_id returns it; wait: qs_queue_put_wait's
 * waiting for room (a branch, so the plain put pays nothing for it), with
 * the priority and delay of qs_queue_put_order_wait (checked by it). */
/* How put_one puts: at once (put_key, autocommit or in a transaction), or
 * waiting for room in a bounded queue, or held (cs_write_held_commit: in
 * the caller's transaction, or committed alone where that waits for
 * nobody; QS_WOULDBLOCK instead of any wait). */
enum put_mode { PUT_NOW, PUT_WAIT, PUT_HELD };

static inline int64_t put_one(qs_queue *q, const void *val, size_t vlen, enum put_mode mode,
                              double timeout, double delay, int priority)
{
    if (!q || (!val && vlen) || isnan(timeout))
        return QS_INVAL;
    if (vlen > (size_t)QS_MAX_VALUE - 1)
        return QS_TOOBIG;
    int rc = cs_enter_call(q->c);
    if (rc == 0) {
        uint32_t len = (uint32_t)vlen;
        bt_vals v = {val, &len, 0};
        uint64_t id = 0;
        if (mode == PUT_NOW)
            rc = put_key(q->c, q->key, q->klen, 1, v, &id);
        else {
            put_args a = {q->key, q->klen, 1, v, 0, priority, delay};
            if (mode == PUT_WAIT)
                rc = put_wait(q->c, &a, timeout, &id);
            else if ((rc = cs_write_held_commit(q->c, put_fn, &a)) == 0)
                id = a.first_id;
        }
        cs_leave_call(q->c);
        if (rc == 0)
            return (int64_t)id;
    }
    return rc < 0 ? rc : -(int64_t)rc;
}

int qq_queue_hash(const void *name, size_t nlen, uint64_t *hash)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        *hash = hash_bytes(key, (uint32_t)nlen + 1);
    return rc;
}

int64_t qs_queue_put_id(qs_queue *q, const void *val, size_t vlen)
{
    return put_one(q, val, vlen, PUT_NOW, 0, 0, 0);
}

int64_t qs_queue_put_held(qs_queue *q, const void *val, size_t vlen)
{
    return put_one(q, val, vlen, PUT_HELD, 0, 0, 0);
}

int64_t qs_queue_put_wait(qs_queue *q, const void *val, size_t vlen, double timeout)
{
    return put_one(q, val, vlen, PUT_WAIT, timeout, 0, 0);
}

int64_t qs_queue_put_order_wait(qs_queue *q, const void *val, size_t vlen, double delay,
                                int priority, double timeout)
{
    if (check_order(delay, priority))
        return QS_INVAL;
    return put_one(q, val, vlen, PUT_WAIT, timeout, delay, priority);
}

/* ---- config ---------------------------------------------------------------- */

typedef struct conf_args {
    const uint8_t *key;
    uint32_t klen;
    const qs_queue_config *cfg;
} conf_args;

static int conf_set_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    conf_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    int rc = lookup(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    if (a->cfg->maxsize && (uint64_t)((int64_t)q->clen + q->dlen) > a->cfg->maxsize)
        return QS_QBOUND;
    qc_conf fresh = {a->cfg->maxsize, a->cfg->max_deliveries, a->cfg->dedup_window, NULL,
                     (uint32_t)a->cfg->dead_letter_len};
    if (fresh.dllen && !(fresh.dl = malloc(fresh.dllen)))
        return QS_NOMEM;
    if (fresh.dllen)
        memcpy(fresh.dl, a->cfg->dead_letter, fresh.dllen);
    if ((rc = qc_write(&bt, a->key + 1, a->klen - 1, a->cfg)) != 0) {
        qc_clear(&fresh);
        q->txn_conf = 1;    /* the record may be half changed: reread at abort */
        touch(c, q);
        return rc;
    }
    qc_clear(&q->conf);
    q->conf = fresh;
    q->txn_conf = 1;
    touch(c, q);
    /* a wider bound may let waiting producers in */
    q->txn_took = 1;
    return 0;
}

static int do_config_set(qs_casket *c, const void *name, size_t nlen, const qs_queue_config *cfg)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0 && !cfg)
        rc = QS_INVAL;
    if (rc == 0)
        rc = qc_check(key + 1, nlen, cfg);
    if (rc)
        return rc;
    conf_args a = {key, (uint32_t)nlen + 1, cfg};
    return cs_write(c, conf_set_fn, &a);
}

static int do_config_get(qs_casket *c, const void *name, size_t nlen, qs_queue_config *cfg)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!cfg)
        return QS_INVAL;
    memset(cfg, 0, sizeof *cfg);
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    qc_conf got;
    rc = qc_read(&bt, key + 1, nlen, &got);
    cs_read_leave(c, &bt);
    if (rc)
        return rc;
    cfg->maxsize = got.maxsize;
    cfg->max_deliveries = got.max_deliveries;
    cfg->dedup_window = got.dedup_window;
    cfg->dead_letter = got.dl;      /* the caller's now */
    cfg->dead_letter_len = got.dllen;
    return 0;
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
    uint8_t key[QS_MAX_QUEUE_NAME + 1], ref = TAG_SHARED, cnt[8];
    int rc = 0;
    /* A full bounded queue refuses the whole fan-out before any change. */
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        size_t nlen = a->noff[i + 1] - a->noff[i];
        qq_queue *q;
        make_key(a->names + a->noff[i], nlen, key);
        if ((rc = lookup(c, key, (uint32_t)nlen + 1, &q)) == 0 && q->conf.maxsize &&
            !has_room(q, 1))
            rc = QS_QFULL;
    }
    if (rc)
        return rc;
    uint64_t id = pg_alloc_ids(bt.p, 1);
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
    int uncounted;          /* a reserve that counts no delivery */
    double lease;
    outbuf out;
    uint64_t token;
    uint64_t hash;          /* of key: the queue's wake-up word */
    uint32_t word;          /* the word before the take looked */
    uint64_t next_due;      /* the first delayed item left falls due then
                               (qo_now_ns's clock), 0: none */
    int moved;              /* items it moved to a dead-letter queue */
} take_args;

/* Moves q's delayed items that fell due into their runs; *next_due gets
 * when the next one does (0: none is left). */
static int promote(qs_casket *c, bt_ctx *bt, qq_queue *q, uint64_t now_ns, uint64_t *next_due)
{
    size_t moved;
    int rc = qo_promote(bt, q->key, q->klen, &q->order, now_ns, &moved, next_due);
    if (*next_due == UINT64_MAX)
        *next_due = 0;
    if (moved) {
        touch(c, q);
        q->txn_put = 1;     /* others' takers may want them too */
    }
    return rc;
}

/* Item id of q left it: its dedup key, if it has one, starts to expire
 * (qdedup.h).  Only a queue that holds keyed items reads anything. */
static inline int forget_key(bt_ctx *bt, qq_queue *q, uint64_t id, int *kept)
{
    if (!qk_any(&q->keys))
        return 0;
    *kept = 0;
    return qk_gone(bt, q->key, q->klen, &q->keys, id, q->conf.dedup_window, qo_now_ns());
}

/* Removes item id of q, its record at path (and its share of a shared
 * payload, and its dedup key's hold). */
static int remove_item(bt_ctx *bt, qq_queue *q, bt_path *path, uint64_t id, int shared, int *kept)
{
    int rc = bt_delete_next(bt, path, kept);
    if (rc == 0 && shared) {
        *kept = 0;
        rc = unref(bt, id);
    }
    return rc ? rc : forget_key(bt, q, id, kept);
}

/* Moves item (q, id), at path in q's run `run`, whose value v is, to q's
 * dead-letter queue's plain run, keeping its id and its value (delivery
 * count and reason; not its priority).  QS_QFULL, with nothing changed,
 * when the dead-letter queue is bounded and full: the item then stays
 * where it is, undelivered, until a take finds room there. */
static int dead_letter(qs_casket *c, bt_ctx *bt, qq_queue *q, int run, bt_path *path,
                       uint64_t id, const uint8_t *v, size_t len)
{
    uint8_t dkey[QS_MAX_QUEUE_NAME + 1];
    qq_queue *d = NULL;
    int rc = make_key(q->conf.dl, q->conf.dllen, dkey);
    if (rc == 0)
        rc = lookup(c, dkey, q->conf.dllen + 1, &d);
    if (rc == 0 && d->conf.maxsize && !has_room(d, 1))
        return QS_QFULL;
    if (rc == 0)
        rc = bt_delete(bt, path);
    if (rc)
        return rc;      /* d is not set when the lookup failed */
    bt_key pk = {d->key, d->klen, id};
    if (rc == 0 && (rc = bt_seek(bt, &pk, path)) == QS_NOTFOUND)
        rc = 0;
    if (rc == 0)
        rc = bt_insert(bt, path, &pk, v, len);
    /* the key stays with this queue, as for an ack; the dead-letter
     * queue's copy has none */
    int kept;
    if (rc == 0)
        rc = forget_key(bt, q, id, &kept);
    if (rc)
        return rc;
    q->dlen--;
    if (run != QO_MAIN)
        q->order.dprio--;
    q->txn_took = 1;
    d->dlen++;
    d->txn_put = 1;
    touch(c, q);
    touch(c, d);
    return 0;
}

/* The delivery an item's take is: an item reserved max_deliveries times
 * goes to the dead-letter queue instead (*moved 1), or stays where it is,
 * not handed out, while that queue is full (*moved 2); a reserve counts one
 * more delivery in the item's record (the path is then just past the item
 * when *past is 1, not valid when 0).  With reserve 0 and *moved 0 the path
 * is still on the item.  v is the item's value as read. */
static int deliver(qs_casket *c, bt_ctx *bt, qq_queue *q, const qo_run *run, bt_path *path,
                   uint64_t id, int reserve, const uint8_t *v, size_t len, int *moved,
                   uint32_t *count, int *past)
{
    qd_info d;
    int rc = qd_parse(v, len, &d);
    *moved = 0;
    *past = 0;
    *count = d.count;
    if (rc)
        return rc;
    if (q->conf.max_deliveries && d.count >= q->conf.max_deliveries) {
        rc = dead_letter(c, bt, q, run->run, path, id, v, len);
        *moved = rc == QS_QFULL ? 2 : 1;
        return rc == QS_QFULL ? 0 : rc;
    }
    if (!reserve)
        return 0;
    bt_buf nv = {0};
    *count = d.count == UINT32_MAX ? d.count : d.count + 1;
    if ((rc = qd_build(&nv, v, len, *count, NULL, 0)) == 0)
        rc = rewrite_item(bt, run->key, run->klen, path, id, &nv, past);
    free(nv.data);
    return rc;
}

/* Remembers, in q's due list and in the shared table, that the open
 * transaction wrote count for item id, reserved under token (or, token 0,
 * taken over from a dead holder). */
static int due_note(qs_casket *c, qq_queue *q, uint64_t id, uint64_t token, uint32_t count)
{
    size_t lo = 0, hi = q->ndue;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (q->due[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    int there = lo < q->ndue && q->due[lo].id == id;
    if (!there && q->ndue == q->duecap) {
        size_t ncap = q->duecap ? q->duecap * 2 : 8;
        qq_due *nd = realloc(q->due, ncap * sizeof *nd);
        if (!nd)
            return QS_NOMEM;
        q->due = nd;
        q->duecap = ncap;
    }
    if (token) {
        int rc = qr_add_due(cs_region(c), id, q->hash, token, count);
        if (rc)
            return rc;
    }
    if (!there) {
        memmove(q->due + lo + 1, q->due + lo, (q->ndue - lo) * sizeof *q->due);
        q->ndue++;
    }
    q->due[lo] = (qq_due){id, count};
    touch(c, q);
    return 0;
}

/* Positions path on item id of q, whatever run holds it, and reads its
 * value into v; *run, *rkey and *rklen get the run.  QS_CORRUPT when no
 * run holds it. */
static int seek_value(bt_ctx *bt, qq_queue *q, uint64_t id, bt_path *path, bt_buf *v,
                      uint8_t *rkey, uint32_t *rklen)
{
    int run = QO_MAIN;
    int rc = qo_has_prio(&q->order) ? qo_seek_item(bt, q->key, q->klen, &q->order, id, path, &run)
                                    : seek_exact(bt, q->key, q->klen, id, path);
    *rklen = qo_run_key(q->key, q->klen, run, rkey);
    return rc ? rc : bt_read(bt, path, NULL, v, 0, NULL);
}

/* Raises item id's delivery count to count in the writer's view (a count
 * already there or above is left: the transaction that wrote it may have
 * committed after all).  An item that is gone (acknowledged by a holder
 * whose commit did land, or put by the aborted transaction) has nothing to
 * count; nor, not yet, one the abort put back in the delayed index (its
 * transaction moved it out when it fell due): finding it there takes a
 * scan, and moving due items here would be a change nobody asked for. */
static int recount(qs_casket *c, bt_ctx *bt, qq_queue *q, uint64_t id, uint32_t count)
{
    (void)c;
    int rc = 0;
    bt_path path;
    bt_buf v = {0}, nv = {0};
    uint8_t rkey[QO_KEY_MAX];
    uint32_t rklen;
    if (rc == 0 && (rc = seek_value(bt, q, id, &path, &v, rkey, &rklen)) == QS_CORRUPT) {
        free(v.data);
        return 0;
    }
    qd_info d;
    if (rc == 0 && (rc = qd_parse(v.data, v.len, &d)) == 0 && d.count < count &&
        (rc = qd_build(&nv, v.data, v.len, count, NULL, 0)) == 0)
        rc = rewrite_item(bt, rkey, rklen, &path, id, &nv, NULL);
    free(v.data);
    free(nv.data);
    return rc;
}

/* The entries with a count due that a dead holder left (qr_expire_due made
 * them ours): their counts are written in the open transaction and kept
 * due until it ends, as if it had made those reserves. */
static int adopt(qs_casket *c, qq_queue *q, const qr_res *due, size_t n)
{
    bt_ctx bt = {cs_pager(c), 1, NS_QUEUE};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if ((rc = recount(c, &bt, q, due[i].id, due[i].count_due)) == 0)
            rc = due_note(c, q, due[i].id, 0, due[i].count_due);
    return rc;
}

/* The queue layer's follow-up of an abort (cs_layer.followup): the counts
 * the aborted transaction held are written again, in this transaction,
 * whose commit makes them durable (and ends their entries, qq_txn_end). */
static int qq_followup(qs_casket *c, bt_ctx *ubt, void *state)
{
    qq_registry *r = state;
    bt_ctx bt = queue_ctx(ubt);
    int rc = 0;
    for (qq_queue *q = r->recount, *nx; q; q = nx) {
        nx = q->rnext;
        q->rnext = NULL;
        q->recount = 0;
        touch(c, q);
        for (size_t i = 0; i < q->ndue && rc == 0; i++)
            rc = recount(c, &bt, q, q->due[i].id, q->due[i].count);
    }
    r->recount = NULL;
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
    a->next_due = 0;
    if (qo_has_delayed(&q->order) && (rc = promote(c, &bt, q, qo_now_ns(), &a->next_due)) != 0)
        return rc;
    qo_run run;
    if ((rc = qo_run_first(&bt, q->key, q->klen, &q->order, &run)) != 0)
        return rc;
    bt_path path;
    uint64_t id, from = 1, seek;
    id_range known = {0, 0};
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
            bt_key pk = {run.key, run.klen, from};
            rc = bt_seek_ge(&bt, &pk, &path);
        }
        int eq = 0, shared;
        if (rc == 0 && (rc = out_begin(&a->out)) != 0)
            break;
        size_t at = a->out.data.len;
        /* with reservations about, the payload is copied only once the id
         * is known not to be hidden: a get behind 5,000 reserved 10 KB
         * items copied 50 MB to throw away */
        if (rc == 0)
            rc = bt_item(&bt, &path, run.key, run.klen, &eq, &id, any ? NULL : &a->out.data);
        if (rc == QS_NOTFOUND && !sought) {
            kept = 0;       /* at the end of a leaf: seek the next one */
            continue;
        }
        if (rc == 0 && !eq)
            rc = QS_NOTFOUND;
        /* every pass sets `from` past the id it handled, so a candidate
         * below it is a record out of order (damage), which would be
         * handled again for ever */
        if (rc == 0 && id < from)
            rc = QS_CORRUPT;
        if (rc == QS_NOTFOUND && (rc = qo_run_next(&bt, &run)) == 0) {
            from = 1;       /* this run is done: the next priority's */
            kept = 0;
            continue;
        }
        if (rc)
            break;
        if (any)
            qr_prefetch(sh, q->hash, id + PREFETCH_AHEAD);
        if (any && passed_over(sh, q, id, &known, &seek)) {
            if (seek) {
                from = seek;
                kept = 0;
                continue;
            }
            from = id + 1;
            if ((rc = bt_next(&bt, &path)) == QS_NOTFOUND) {
                rc = 0;     /* the tree's end: seek, finding this run done */
                kept = 0;
                continue;
            }
            if (rc)
                break;
            kept = 1;
            continue;
        }
        if (any && (rc = bt_item(&bt, &path, run.key, run.klen, &eq, &id, &a->out.data)) != 0)
            break;
        uint32_t count = 0;
        int counted = a->reserve && !a->uncounted, past = 0;
        if (a->reserve || q->conf.max_deliveries) {
            int moved;
            if ((rc = deliver(c, &bt, q, &run, &path, id, counted, a->out.data.data + at,
                              a->out.data.len - at, &moved, &count, &past)) != 0)
                break;
            if (moved) {
                a->moved += moved == 1;
                a->out.data.len = at;
                from = id + 1;
                kept = 0;
                continue;
            }
        }
        if ((rc = item_payload(&bt, id, &a->out, at, &shared)) != 0)
            break;
        out_end(&a->out, id);
        from = id + 1;
        if (a->reserve) {
            if (!a->token)
                a->token = ++q->reg->next_token;
            double deadline = a->lease > 0 ? cs_now() + a->lease : INFINITY;
            /* Inside the caller's transaction the count it wrote must
             * outlive an abort and the caller's death: its entry goes to
             * the shared table now, with the count (qr_add_due). */
            int early = !a->uncounted && cs_in_txn(c);
            if (early && (rc = due_note(c, q, id, a->token, count)) != 0)
                break;
            if ((rc = mark_add(q, id, a->token, deadline, early ? M_NEW | M_EARLY : M_NEW)) != 0)
                break;
            /* the next candidate is the record after this one: where the
             * count's rewrite left path, or one step on from the item */
            kept = past;
            if (!counted) {
                if ((rc = bt_next(&bt, &path)) != 0 && rc != QS_NOTFOUND)
                    break;
                kept = rc == 0;
                rc = 0;
            }
            any = 1;
        } else {
            if ((rc = remove_item(&bt, q, &path, id, shared, &kept)) != 0)
                break;
            q->dlen--;
            if (run.run != QO_MAIN)
                q->order.dprio--;
            q->txn_took = 1;
        }
        touch(c, q);
        if (((a->out.n) & 1023) == 0 && (rc = pg_trim(bt.p, 1)) != 0)
            break;
    }
    /* moves to a dead-letter queue are committed even when nothing is
     * left to hand out (take_wait then reports an empty queue) */
    if (rc == QS_NOTFOUND && (a->out.n > 0 || a->moved))
        rc = 0;
    return rc;
}


double qs_queue_wait_left(void) { return wait_left; }

void qs_set_wait_slice(double seconds) { qr_set_wait_slice(seconds > 0 ? seconds : 0.0); }

/* Runs a take, waiting for items as the header describes: asleep on the
 * queue's wake-up word in the shared region, which any process's commit
 * of items (or release, abort, lease end) changes. */
static int take_wait(qs_casket *c, take_args *a, double timeout)
{
    int nowait = timeout == 0 || cs_in_txn(c);
    double deadline = timeout < 0 ? INFINITY : nowait ? 0 : cs_now() + timeout;
    a->hash = hash_bytes(a->key, a->klen);
    qr_wait_begin();
    for (;;) {
        a->moved = 0;
        int rc = cs_write(c, take_fn, a);
        if (rc == 0 && a->out.n == 0)
            rc = QS_NOTFOUND;   /* it only dead-lettered items */
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
        if (a->next_due) {
            /* a delayed item falls due: look again then (the slack keeps
             * a wake-up a hair early from finding it not yet due) */
            double due_in = ((double)a->next_due - (double)qo_now_ns()) * 1e-9 + DUE_SLACK;
            if (now + due_in < until)
                until = now + (due_in > 0 ? due_in : 0);
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

/* One look at the queue through cs_write_held_commit: QS_WOULDBLOCK
 * (nothing taken) where the take would wait for anyone, QS_NOTFOUND
 * where it found nothing to hand out. */
static int take_held(qs_casket *c, take_args *a)
{
    a->hash = hash_bytes(a->key, a->klen);
    int rc = cs_write_held_commit(c, take_fn, a);
    return rc == 0 && a->out.n == 0 ? QS_NOTFOUND : rc;    /* it only dead-lettered */
}

/* held: qs_queue_get_held's take (timeout unused), else take_wait's. */
static int do_get(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                  int held, qs_items **out)
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
    rc = held ? take_held(c, &a) : take_wait(c, &a, timeout);
    if (rc) {
        free(it);
        out_drop(&a.out);
        return rc;
    }
    return out_finish(&a.out, 0, it, out);
}

static int do_reserve(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                      double lease, int uncounted, qs_items **out)
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
    take_args a = {.key = key, .klen = (uint32_t)nlen + 1, .max = max, .reserve = 1,
                   .uncounted = uncounted, .lease = lease};
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
    double delay;           /* release: seconds until it is back, 0: now */
    /* ack_many's cursor (NULL for one ack): when at_next, it is on the
     * record after the item acked last, which is often the next to ack
     * (a batch is a run of ids), so that one needs no seek */
    bt_path *cursor;
    int at_next;
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
        ack_args a = {key, klen, 0, 0, 0, 0, NULL, 0};
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
    qo_run run;
    if ((rc = lookup_live(c, key, (uint32_t)nlen + 1, &q)) == 0 &&
        (rc = qo_run_first(&bt, q->key, q->klen, &q->order, &run)) == 0) {
        while (o.n < max) {
            int shared;
            rc = first_free(sh, &bt, q, &run, from, &path, &id);
            if (rc == QS_NOTFOUND && (rc = qo_run_next(&bt, &run)) == 0) {
                from = 1;   /* the next priority's run */
                continue;
            }
            if (rc || (rc = out_begin(&o)) != 0 ||
                (rc = read_item(&bt, &path, id, &o, &shared)) != 0)
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

/* do_scan's read of a queue that has priority or delayed items: every
 * run merged in id order (qorder.c). */
static int scan_ordered(bt_ctx *bt, const uint8_t *key, uint32_t klen, const qo_state *st,
                        uint64_t after, size_t max, size_t max_bytes, outbuf *o)
{
    qo_scan *sc;
    bt_path path;
    uint64_t id;
    int shared, rc = qo_scan_begin(bt, key, klen, st, after, &sc);
    if (rc)
        return rc;
    while (o->n < max && (o->n == 0 || o->data.len < max_bytes) &&
           (rc = qo_scan_next(bt, sc, &path, &id)) == 0) {
        if ((rc = out_begin(o)) != 0 || (rc = read_item(bt, &path, id, o, &shared)) != 0)
            break;
        out_end(o, id);
    }
    qo_scan_end(sc);
    return rc == QS_NOTFOUND ? 0 : rc;
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
    qo_state st;
    uint64_t extra;
    if ((rc = qo_count(&bt, key, klen, &st, &extra)) == 0 && extra) {
        rc = scan_ordered(&bt, key, klen, &st, after, max, max_bytes, &o);
        cs_read_leave(c, &bt);
        return out_read(&o, rc, out);
    }
    bt_path path;
    bt_key pk = {key, klen, after + 1};
    if (rc == 0)
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
    bt_path own, *path = a->cursor ? a->cursor : &own;
    outbuf tag = {0};
    int shared, kept = 0, run = QO_MAIN, found = 0;
    if (a->cursor && a->at_next && !qo_has_prio(&q->order)) {
        /* the value's tag says whether a shared payload loses a reference */
        int eq;
        uint64_t seq;
        rc = bt_item(&bt, path, a->key, a->klen, &eq, &seq, &tag.data);
        found = rc == 0 && eq && seq == a->id;
        if (rc == QS_NOTFOUND || (rc == 0 && !found)) {
            rc = 0;             /* the end of a leaf, or not the next one */
            tag.data.len = 0;
        }
    }
    if (rc == 0 && !found) {
        rc = qo_has_prio(&q->order)
                 ? qo_seek_item(&bt, q->key, q->klen, &q->order, a->id, path, &run)
                 : seek_exact(&bt, a->key, a->klen, a->id, path);
        if (rc == 0)
            rc = bt_read(&bt, path, NULL, &tag.data, 0, NULL);
    }
    if (rc == 0) {
        shared = value_shared(tag.data.data, tag.data.len);
        rc = remove_item(&bt, q, path, a->id, shared, &kept);
    }
    if (a->cursor)
        a->at_next = rc == 0 && kept;
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
    if (run != QO_MAIN)
        q->order.dprio--;
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
    ack_args a = {key, (uint32_t)nlen + 1, id, token, 0, 0, NULL, 0};
    return cs_write(c, ack_fn, &a);
}

typedef struct ack_many_args {
    ack_args one;
    size_t n;
    const uint64_t *ids;
    cs_write_fn each;       /* ack_fn or release_fn */
} ack_many_args;

/* Every id is checked before any is acknowledged (or released), so a
 * refusal leaves the caller's transaction as it was (ack_fn's and
 * release_fn's own refusals come only after their checks, which these
 * repeat). */
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
        if (i + PREFETCH_AHEAD < a->n)
            qr_prefetch(cs_region(c), q->hash, a->ids[i + PREFETCH_AHEAD]);
        if (find_mark(q, a->ids[i], a->one.token, &mi) != 0 &&
            (rc = find_shared(c, q, a->ids[i], a->one.token)) != 0)
            return rc;
    }
    bt_path cursor;
    if (a->each == ack_fn) {
        a->one.cursor = &cursor;
        a->one.at_next = 0;
    }
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        a->one.id = a->ids[i];
        rc = a->each(c, ubt, &a->one);
    }
    a->one.cursor = NULL;
    return rc;
}

static int release_fn(qs_casket *c, bt_ctx *ubt, void *arg);

static int do_ack_many(qs_casket *c, const void *name, size_t nlen, size_t n, const uint64_t *ids,
                       uint64_t token, cs_write_fn each)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (n == 0 || !ids))
        rc = QS_INVAL;
    if (rc)
        return rc;
    ack_many_args a = {{key, (uint32_t)nlen + 1, 0, token, 0, 0, NULL, 0}, n, ids, each};
    return cs_write(c, ack_many_fn, &a);
}

/* Ends a reservation at once (also inside a transaction): one made by the
 * open transaction, or a committed one.  Under the write lock, like every
 * change to the shared reservations. */
static int release_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    bt_ctx bt = queue_ctx(ubt);
    ack_args *a = arg;
    qq_queue *q;
    size_t mi;
    int rc = lookup_live(c, a->key, a->klen, &q);
    if (rc)
        return rc;
    if (find_mark(q, a->id, a->token, &mi) == 0) {
        if (q->m[mi].flags & M_CLAIMED)    /* the holder's entry ends too */
            qr_del(cs_region(c), q->hash, a->id);
        mark_remove(q, mi);
        recompute_deadline(q);
    } else if ((rc = find_shared(c, q, a->id, a->token)) == 0)
        qr_del(cs_region(c), q->hash, a->id);
    else
        return rc;
    if (a->delay > 0) {
        touch(c, q);
        q->txn_put = 1;     /* waiters learn when it falls due */
        return qo_delay_item(&bt, q->key, q->klen, &q->order, a->id,
                             qo_due(qo_now_ns(), a->delay));
    }
    wake(c, q);
    return 0;
}

static int do_release(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    ack_args a = {key, (uint32_t)nlen + 1, id, token, 0, 0, NULL, 0};
    return cs_write(c, release_fn, &a);
}

static int do_release_delay(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                            uint64_t token, double delay)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        rc = check_order(delay, 0);
    if (rc)
        return rc;
    ack_args a = {key, (uint32_t)nlen + 1, id, token, 0, delay, NULL, 0};
    return cs_write(c, release_fn, &a);
}

/* ---- deliveries ---------------------------------------------------------- */

typedef struct fail_args {
    ack_args rel;
    const uint8_t *reason;
    uint32_t rlen;
    int count;              /* counts one delivery too */
} fail_args;

/* A release that records the holder's reason in the item's delivery
 * header (the release itself takes effect at once, as release_fn's).  The
 * reservation is checked and the record rewritten before the release,
 * which then cannot fail: a failed rewrite releases nothing. */
static int fail_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    fail_args *a = arg;
    bt_ctx bt = queue_ctx(ubt);
    qq_queue *q;
    size_t mi;
    int rc = lookup_live(c, a->rel.key, a->rel.klen, &q);
    if (rc)
        return rc;
    if (find_mark(q, a->rel.id, a->rel.token, &mi) != 0 &&
        (rc = find_shared(c, q, a->rel.id, a->rel.token)) != 0)
        return rc;
    bt_path path;
    bt_buf v = {0}, nv = {0};
    uint8_t rkey[QO_KEY_MAX];
    uint32_t rklen, due = 0;
    if ((rc = seek_value(&bt, q, a->rel.id, &path, &v, rkey, &rklen)) == 0) {
        qd_info d;
        uint32_t n = 0;
        if ((rc = qd_parse(v.data, v.len, &d)) == 0) {
            n = a->count && d.count < UINT32_MAX ? d.count + 1 : d.count;
            rc = qd_build(&nv, v.data, v.len, n, a->reason ? a->reason : (const uint8_t *)"",
                          a->rlen);
        }
        if (rc == 0)
            rc = rewrite_item(&bt, rkey, rklen, &path, a->rel.id, &nv, NULL);
        touch(c, q);
        if (rc == 0 && a->count)
            due = n;
    }
    free(v.data);
    free(nv.data);
    if (rc == 0)
        rc = release_fn(c, ubt, &a->rel);
    /* a count inside a transaction outlives it, as a reserve's does (the
     * item's entry, if it had one, went with the release) */
    if (rc == 0 && due && cs_in_txn(c))
        rc = due_note(c, q, a->rel.id, a->rel.token, due);
    return rc;
}

static int do_fail(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token,
                   const void *reason, size_t rlen, int count)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0 && ((!reason && rlen) || rlen > QD_MAX_REASON))
        rc = QS_INVAL;
    if (rc)
        return rc;
    fail_args a = {{key, (uint32_t)nlen + 1, id, token, 0, 0, NULL, 0}, reason, (uint32_t)rlen, count};
    return cs_write(c, fail_fn, &a);
}

static int do_item_info(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                        uint32_t *deliveries, void **reason, size_t *rlen)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!deliveries || (reason && !rlen))
        return QS_INVAL;
    *deliveries = 0;
    if (reason) {
        *reason = NULL;
        *rlen = 0;
    }
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    bt_key pk = {key, (uint32_t)nlen + 1, id};
    bt_path path;
    bt_buf v = {0};
    uint64_t got = 0;
    int eq = 0;
    if ((rc = bt_seek_ge(&bt, &pk, &path)) == 0 &&
        (rc = bt_item(&bt, &path, key, (uint32_t)nlen + 1, &eq, &got, &v)) == 0 &&
        (!eq || got != id))
        rc = QS_NOTFOUND;
    if (rc == QS_NOTFOUND) {
        /* not in the plain run: an item put with a priority is in its
         * priority run, a delayed one in the delayed index (qorder.c);
         * this read looks through them without the queue's counts (only
         * a miss pays for it) */
        qo_state any_prio = {.cprio = 1};
        int run;
        free(v.data);
        v = (bt_buf){0};
        rc = qo_seek_item(&bt, key, (uint32_t)nlen + 1, &any_prio, id, &path, &run);
        if (rc == QS_CORRUPT)   /* nor a delayed one, in the delayed index */
            rc = qo_seek_delayed(&bt, key, (uint32_t)nlen + 1, id, &path);
        if (rc == 0)
            rc = bt_read(&bt, &path, NULL, &v, 0, NULL);
    }
    cs_read_leave(c, &bt);
    qd_info d;
    if (rc == 0 && (rc = qd_parse(v.data, v.len, &d)) == 0) {
        *deliveries = d.count;
        if (reason && d.reason) {
            if (!(*reason = malloc(d.reason_len)))
                rc = QS_NOMEM;
            else {
                memcpy(*reason, d.reason, d.reason_len);
                *rlen = d.reason_len;
            }
        }
    }
    free(v.data);
    if (rc)
        *deliveries = 0;
    return rc;
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
    uint64_t from = 1, id, next_due;
    a->removed = 0;
    bt_path path;
    outbuf tag = {0};
    qo_run run;
    /* delayed items go too: first into their runs */
    if (qo_has_delayed(&q->order) && (rc = promote(c, &bt, q, UINT64_MAX, &next_due)) != 0)
        return rc;
    if ((rc = qo_run_first(&bt, q->key, q->klen, &q->order, &run)) != 0)
        return rc;
    for (;;) {
        int kept;
        rc = first_free(sh, &bt, q, &run, from, &path, &id);
        if (rc == QS_NOTFOUND && (rc = qo_run_next(&bt, &run)) == 0) {
            from = 1;
            continue;
        }
        if (rc)
            break;
        tag.data.len = 0;
        if ((rc = bt_read(&bt, &path, NULL, &tag.data, 0, NULL)) != 0)
            break;
        int shared = value_shared(tag.data.data, tag.data.len);
        if ((rc = remove_item(&bt, q, &path, id, shared, &kept)) != 0)
            break;
        from = id + 1;
        a->removed++;
        q->dlen--;
        if (run.run != QO_MAIN)
            q->order.dprio--;
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
    ack_args a = {key, (uint32_t)nlen + 1, 0, 0, 0, 0, NULL, 0};
    rc = cs_write(c, clear_fn, &a);
    if (rc == 0 && removed)
        *removed = a.removed;
    return rc;
}

/* ---- pending list and claims ---------------------------------------------
 * Both read the region's entries of one queue (qr_list): the pending list
 * without the write lock, a claim holding it. */

static int res_by_id(const void *x, const void *y)
{
    uint64_t a = ((const qr_res *)x)->id, b = ((const qr_res *)y)->id;
    return a < b ? -1 : a > b;
}

/* The queue's entries, sorted by id, one per id, in a new array *out (the
 * caller frees it); exact when the caller holds the write lock, and then
 * *torn is 0. */
static int list_entries(const sh_region *sh, uint64_t qhash, qr_res **out, size_t *n, int *torn)
{
    uint64_t held = qr_count(sh, qhash, NULL);
    *torn = 0;
    if (held == 0) {
        /* the listing below reads the whole table (65,536 entries, 125 us):
         * a queue with none, the usual case, answers at once, as a copy
         * read a moment earlier would */
        *out = NULL;
        *n = 0;
        return 0;
    }
    size_t cap = (size_t)held + 16;
    for (;;) {
        qr_res *e = malloc(cap * sizeof *e);
        if (!e)
            return QS_NOMEM;
        size_t got = qr_list(sh, qhash, e, cap, torn);
        if (got > cap) {        /* grew meanwhile: again, with room */
            free(e);
            cap = got + 16;
            continue;
        }
        qsort(e, got, sizeof *e, res_by_id);
        /* A torn copy may hold an entry twice.  An entry with a count due
         * is an open (or dead) transaction's reserve, not a committed
         * reservation: neither listed nor claimed. */
        size_t w = 0;
        for (size_t i = 0; i < got; i++)
            if (!e[i].count_due && (w == 0 || e[w - 1].id != e[i].id))
                e[w++] = e[i];
        *out = e;
        *n = w;
        return 0;
    }
}

typedef struct claim_args {
    take_args t;
    double min_idle;
} claim_args;

static int claim_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    claim_args *a = arg;
    take_args *t = &a->t;
    bt_ctx bt = queue_ctx(ubt);
    sh_region *sh = cs_region(c);
    qq_queue *q;
    int rc = lookup_live(c, t->key, t->klen, &q);
    if (rc)
        return rc;
    qr_res *e = NULL;
    size_t n = 0;
    int torn;
    if ((rc = list_entries(sh, q->hash, &e, &n, &torn)) != 0)
        return rc;
    uint64_t now = sh_now_ns();
    for (size_t i = 0; i < n && t->out.n < t->max && rc == 0; i++) {
        size_t mi;
        double idle = e[i].reserved_ns < now ? (double)(now - e[i].reserved_ns) * 1e-9 : 0;
        if (idle < a->min_idle ||
            find_mark_any(q, e[i].id, &mi) == 0)
            continue;   /* not idle long enough, or the open transaction's */
        if (!qr_room(sh, txn_new_marks(q->reg) + 1)) {
            if (t->out.n == 0)
                rc = QS_RESFULL;
            break;
        }
        bt_path path;
        int shared, run;
        /* a claimed item may sit in a priority run (qorder.c), as in ack */
        rc = qo_has_prio(&q->order)
                 ? qo_seek_item(&bt, q->key, q->klen, &q->order, e[i].id, &path, &run)
                 : seek_exact(&bt, t->key, t->klen, e[i].id, &path);
        if (rc != 0 ||
            (rc = out_begin(&t->out)) != 0 ||
            (rc = read_item(&bt, &path, e[i].id, &t->out, &shared)) != 0)
            break;
        out_end(&t->out, e[i].id);
        if (!t->token)
            t->token = ++q->reg->next_token;
        double deadline = t->lease > 0 ? cs_now() + t->lease : INFINITY;
        if ((rc = mark_add(q, e[i].id, t->token, deadline, M_CLAIMED)) != 0)
            break;
        touch(c, q);
    }
    free(e);
    if (rc == 0 && t->out.n == 0)
        rc = QS_NOTFOUND;
    return rc;
}

static int do_claim(qs_casket *c, const void *name, size_t nlen, size_t max, double min_idle,
                    double lease, qs_items **out)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out)
        return QS_INVAL;
    *out = NULL;
    int rc = make_key(name, nlen, key);
    if (rc == 0 && (max == 0 || !(min_idle >= 0) || !(lease >= 0)))
        rc = QS_INVAL;
    if (rc)
        return rc;
    qs_items *it = calloc(1, sizeof *it);
    if (!it)
        return QS_NOMEM;
    claim_args a = {{.key = key, .klen = (uint32_t)nlen + 1, .max = max, .reserve = 1,
                     .lease = lease},
                    min_idle};
    rc = cs_write(c, claim_fn, &a);
    if (rc) {
        free(it);
        out_drop(&a.t.out);
        return rc;
    }
    return out_finish(&a.t.out, a.t.token, it, out);
}

typedef struct pending_args {
    uint64_t hash;
    qr_res *e;
    size_t n;
} pending_args;

/* The listing again, holding the write lock: exact. */
static int pending_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    (void)ubt;
    pending_args *a = arg;
    int torn;
    free(a->e);
    a->e = NULL;
    return list_entries(cs_region(c), a->hash, &a->e, &a->n, &torn);
}

static int do_pending(qs_casket *c, const void *name, size_t nlen, qs_pending **out,
                      size_t *count)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!out || !count)
        return QS_INVAL;
    *out = NULL;
    *count = 0;
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    uint32_t klen = (uint32_t)nlen + 1;
    settle(c, key, klen);   /* ended leases and dead holders' items go first */
    sh_region *sh = cs_region(c);
    pending_args a = {hash_bytes(key, klen), NULL, 0};
    int torn;
    if ((rc = list_entries(sh, a.hash, &a.e, &a.n, &torn)) != 0)
        return rc;
    /* Changes kept overlapping the copy: take it exactly under the lock if
     * it is free, else keep the copy (no entry twice; one that moved
     * during it may be missing). */
    if (torn && !cs_readonly(c) && (rc = cs_write_try(c, pending_fn, &a)) != 0 &&
        rc != QS_LOCKED) {
        free(a.e);
        return rc;
    }
    qs_pending *p = malloc((a.n ? a.n : 1) * sizeof *p);
    if (!p) {
        free(a.e);
        return QS_NOMEM;
    }
    for (size_t i = 0; i < a.n; i++)
        p[i] = (qs_pending){.id = a.e[i].id,
                            .handle = (uint64_t)a.e[i].gen << 32 | a.e[i].slot,
                            .reserved_ns = a.e[i].reserved_ns,
                            .lease_end_ns = a.e[i].deadline_ns,
                            .pid = a.e[i].pid,
                            .mine = (uint32_t)qr_mine(sh, &a.e[i])};
    free(a.e);
    *out = p;
    *count = a.n;
    return 0;
}

/* ---- lengths and listing ------------------------------------------------- */


/* Waits until queue key holds no item (n 0: none available, none
 * reserved) or has room for n more (n >= 1: put_fn's test, has_room) in
 * the caller's view, asleep on its wake-up word, which a commit that
 * empties a queue, or removes items of a bounded one, or widens its bound
 * moves. */
static int wait_held(qs_casket *c, const void *name, size_t nlen, uint64_t n, double timeout)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    int rc = make_key(name, nlen, key);
    if (rc == 0 && check_timeout(timeout))
        rc = QS_INVAL;
    if (rc)
        return rc;
    uint32_t klen = (uint32_t)nlen + 1;
    uint64_t hash = hash_bytes(key, klen);
    int nowait = timeout == 0 || cs_in_txn(c);
    double deadline = timeout < 0 ? INFINITY : nowait ? 0 : cs_now() + timeout;
    qr_wait_begin();
    for (;;) {
        uint32_t word = qr_wait_word(cs_region(c), hash);
        bt_ctx bt;
        if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
            return rc;
        qq_queue *q;
        int done = 0;
        if ((rc = lookup(c, key, klen, &q)) == 0) {
            int64_t held = (int64_t)q->clen + (bt.wview ? q->dlen : 0);
            uint64_t max = q->conf.maxsize, h = held > 0 ? (uint64_t)held : 0;
            if (n == 0)
                done = held <= 0;
            else if (max && n > max)
                rc = QS_INVAL;      /* no room will ever hold them */
            else
                done = !max || h + n <= max;
        }
        cs_read_leave(c, &bt);
        if (rc || done)
            return rc;
        double now = cs_now();
        if (nowait || now >= deadline)
            return QS_TIMEDOUT;
        if (qr_wait(cs_region(c), hash, word, isinf(deadline) ? -1.0 : deadline - now) == EINTR) {
            double left = deadline - cs_now();
            wait_left = isinf(deadline) ? -1.0 : left > 0 ? left : 0.0;
            return QS_INTR;
        }
        if (cs_closing(c))
            return QS_CLOSED;
    }
}

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

static int do_delayed(qs_casket *c, const void *name, size_t nlen, uint64_t *count)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    if (!count)
        return QS_INVAL;
    *count = 0;
    int rc = make_key(name, nlen, key);
    if (rc)
        return rc;
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    qq_queue *q;
    if ((rc = lookup(c, key, (uint32_t)nlen + 1, &q)) == 0) {
        int64_t n = (int64_t)q->order.cdelay + (bt.wview ? q->order.ddelay : 0);
        *count = n > 0 ? (uint64_t)n : 0;
    }
    cs_read_leave(c, &bt);
    return rc;
}

/* Appends queue name's entry to a listing: its name and length; *qout
 * (may be NULL) gets its registry entry. */
static int list_one(qs_casket *c, outbuf *o, const uint8_t *name, uint32_t nlen, int wview,
                    qq_queue **qout)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    qq_queue *q;
    int rc = make_key(name, nlen, key);
    if (rc == 0)
        rc = lookup_live(c, key, nlen + 1, &q);
    if (rc || (rc = out_begin(o)) != 0 || (rc = bt_buf_reserve(&o->data, nlen)) != 0)
        return rc;
    memcpy(o->data.data + o->data.len, name, nlen);
    o->data.len += nlen;
    out_end(o, available(c, q, wview));
    if (qout)
        *qout = q;
    return 0;
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
    /* queues holding only priority or delayed items have no "q" run:
     * their names are merged in, in order */
    qo_names extra;
    size_t ei = 0;
    if ((rc = qo_names_get(&bt, &extra)) == 0)
        rc = bt_seek_ge(&bt, &pk, &path);
    while (rc == 0 || (rc == QS_NOTFOUND && ei < extra.n)) {
        k.len = 0;
        if (rc == 0 && (rc = bt_read(&bt, &path, &k, NULL, 0, NULL)) != 0)
            break;
        int more = rc == 0 && k.len >= 2 && k.data[0] == KEY_QUEUE;
        if (!more && ei == extra.n)
            break;
        if (!more || (ei < extra.n && qo_name_cmp(extra.at[ei].p, extra.at[ei].len, k.data + 1,
                                                  k.len - 1) < 0)) {
            rc = list_one(c, &o, extra.at[ei].p, extra.at[ei].len, bt.wview, NULL);
            ei++;
            if (rc == 0)
                rc = bt_seek_ge(&bt, &pk, &path);
            continue;
        }
        if (ei < extra.n &&
            qo_name_cmp(extra.at[ei].p, extra.at[ei].len, k.data + 1, k.len - 1) == 0)
            ei++;
        qq_queue *q;
        if ((rc = list_one(c, &o, k.data + 1, (uint32_t)k.len - 1, bt.wview, &q)) != 0)
            break;
        /* the next queue: the first record after every one of this key */
        pk = (bt_key){q->key, q->klen, UINT64_MAX};
        rc = bt_seek_onward(&bt, &pk, &path);
    }
    qo_names_free(&extra);
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

/* cs_enter_call for the calls that hand out items: *out is NULL on every
 * failure, including a handle refused before the call looks at anything
 * (the header promises it; a caller may free *out unconditionally). */
static int enter_for_items(qs_casket *c, qs_items **out)
{
    if (out)
        *out = NULL;
    return cs_enter_call(c);
}

int qs_queue_get(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                 qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_get(c, name, nlen, max, timeout, 0, out));
}

int qs_queue_get_held(qs_casket *c, const void *name, size_t nlen, size_t max,
                      qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_get(c, name, nlen, max, 0, 1, out));
}

int qs_queue_scan(qs_casket *c, const void *name, size_t nlen, uint64_t after, size_t max,
                  size_t max_bytes, qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_scan(c, name, nlen, after, max, max_bytes, out));
}

int qs_queue_peek(qs_casket *c, const void *name, size_t nlen, size_t max, qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_peek(c, name, nlen, max, out));
}

int qs_queue_reserve(qs_casket *c, const void *name, size_t nlen, double timeout, double lease,
                     qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_reserve(c, name, nlen, 1, timeout, lease, 0, out));
}

int qs_queue_reserve_many(qs_casket *c, const void *name, size_t nlen, size_t max, double timeout,
                          double lease, qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_reserve(c, name, nlen, max, timeout, lease, 0, out));
}

int qs_queue_reserve_uncounted(qs_casket *c, const void *name, size_t nlen, size_t max,
                               double timeout, qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_reserve(c, name, nlen, max, timeout, 0, 1, out));
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
    return rc ? rc : cs_return(c, do_ack_many(c, name, nlen, n, ids, token, ack_fn));
}

int qs_queue_release(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_release(c, name, nlen, id, token));
}

int qs_queue_release_many(qs_casket *c, const void *name, size_t nlen, size_t n,
                          const uint64_t *ids, uint64_t token)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_ack_many(c, name, nlen, n, ids, token, release_fn));
}

int qs_queue_claim(qs_casket *c, const void *name, size_t nlen, size_t max, double min_idle,
                   double lease, qs_items **out)
{
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_claim(c, name, nlen, max, min_idle, lease, out));
}

int qs_queue_pending(qs_casket *c, const void *name, size_t nlen, qs_pending **out,
                     size_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_pending(c, name, nlen, out, count));
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
    int rc = enter_for_items(c, out);
    return rc ? rc : cs_return(c, do_list(c, out));
}

int qs_queue_join(qs_casket *c, const void *name, size_t nlen, double timeout)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, wait_held(c, name, nlen, 0, timeout));
}

int qs_queue_wait_room(qs_casket *c, const void *name, size_t nlen, uint64_t n, double timeout)
{
    if (n == 0)
        return QS_INVAL;    /* 0 would be a join */
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, wait_held(c, name, nlen, n, timeout));
}

int qs_queue_fail(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token,
                  const void *reason, size_t rlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_fail(c, name, nlen, id, token, reason, rlen, 0));
}

int qs_queue_fail_counted(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                          uint64_t token, const void *reason, size_t rlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_fail(c, name, nlen, id, token, reason, rlen, 1));
}

int qs_queue_item_info(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                       uint32_t *deliveries, void **reason, size_t *rlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_item_info(c, name, nlen, id, deliveries, reason, rlen));
}

int qs_queue_config_set(qs_casket *c, const void *name, size_t nlen,
                        const qs_queue_config *cfg)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_config_set(c, name, nlen, cfg));
}

int qs_queue_config_get(qs_casket *c, const void *name, size_t nlen, qs_queue_config *cfg)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_config_get(c, name, nlen, cfg));
}

int qs_queue_records(qs_casket *c, uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_records(c, count));
}

int qs_queue_put_order(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                       size_t vals_len, const uint32_t *lens, double delay, int priority,
                       uint64_t *first_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc
              : cs_return(c, do_put_order(c, name, nlen, n, vals, vals_len, lens, delay, priority,
                                          first_id));
}

int qs_queue_put_keyed(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                       size_t vals_len, const uint32_t *lens, const void *keys, size_t keys_len,
                       const uint32_t *klens, double delay, int priority, uint64_t *ids,
                       size_t *stored)
{
    int rc = cs_enter_call(c);
    return rc ? rc
              : cs_return(c, do_put_keyed(c, name, nlen, n, vals, vals_len, lens, keys, keys_len,
                                          klens, delay, priority, ids, stored));
}

int qs_queue_release_delay(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                           uint64_t token, double delay)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_release_delay(c, name, nlen, id, token, delay));
}

int qs_queue_delayed(qs_casket *c, const void *name, size_t nlen, uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_delayed(c, name, nlen, count));
}
