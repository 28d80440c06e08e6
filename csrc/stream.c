/* stream.c -- append-only streams with consumer groups (st_ prefix inside,
 * qs_stream_* in qstore.h): Redis Streams' XADD / XREADGROUP / XACK /
 * XPENDING / XAUTOCLAIM, on the casket's B+tree.
 *
 * Layout, in namespace NS_QUEUE (see docs/DESIGN.md).  S is the stream's
 * name and G a group's, each written as u32 length + bytes so that no name
 * is a prefix of another's key:
 *   ('s' S, id)   one item: f64 append time (the caller's clock), payload
 *   ('t' S, 0)    the stream's settings and state: u64 maxlen (0: none),
 *                 f64 max_age (0: none), u64 the last id appended, u64
 *                 first_kept (every id below it that was the stream's is
 *                 removed by retention)
 *   ('g' S G, 0)  a group: u64 the last id it was handed
 *   ('e' S G, id) one of its pending entries: f64 delivered at, u32
 *                 deliveries, the consumer's name
 * A group's records follow its stream's name, so the groups of one stream
 * are one contiguous run of 'g' keys, and the pending entries of one group
 * one run of 'e' records in id order (the first is the group's oldest).
 *
 * Nothing is kept in memory between calls but the streams a transaction
 * touched, whose readers are woken when it ends: every call reads the
 * tree, so every handle and process sees one state and a commit carries
 * all of it.  Retention runs in the transaction that makes an item
 * removable (append for maxlen and max_age, ack, claim and group creation
 * for the groups' horizon). */
#include "queue.h"
#include "qres.h"
#include "qkit.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_ITEM 's'
#define KEY_META 't'
#define KEY_GROUP 'g'
#define KEY_PENDING 'e'
#define STAMP 8u                /* an item value's leading f64 */
#define META_LEN 32u
#define PEND_HDR 12u            /* f64 delivered at, u32 deliveries */
#define STREAM_CHUNK 1024       /* items between spill checks */

/* ---- the layer: wake-ups at the end of a transaction ------------------------ */

typedef struct st_state {
    uint64_t *wake;             /* hashes of the streams touched */
    size_t n, cap;
} st_state;

static void st_txn_end(qs_casket *c, void *state, int committed)
{
    (void)committed;    /* an abort gives read items back to the group */
    st_state *s = state;
    for (size_t i = 0; i < s->n; i++)
        qr_wake(cs_region(c), s->wake[i]);
    s->n = 0;
}

static void st_wake_all(qs_casket *c, void *state)
{
    (void)state;
    if (cs_shared(c))
        qr_wake_all(cs_region(c));
}

static void st_free(qs_casket *c, void *state)
{
    (void)c;
    st_state *s = state;
    free(s->wake);
    free(s);
}

static int st_refused(int rc)
{
    return rc == QS_STREAM_NOGROUP || rc == QS_STREAM_NOTPENDING || rc == QS_STREAM_TRIMMED ||
           rc == QS_INVAL || rc == QS_TOOBIG || rc == QS_NOTFOUND;
}

static const cs_layer st_layer = {
    .txn_end = st_txn_end,
    .wake = st_wake_all,
    .free = st_free,
    .refused = st_refused,
};

/* The layer's state, registered on the handle if it is not yet (mu held).
 * Every writing call starts here, so that the transaction layer knows the
 * stream refusals (st_refused) before the first one comes back: a
 * refusal of a handle's first stream call spoiled its transaction. */
static int st_state_get(qs_casket *c, st_state **out)
{
    st_state *s = cs_layer_state(c, &st_layer);
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return QS_NOMEM;
        int rc = cs_layer_add(c, &st_layer, s);
        if (rc) {
            free(s);
            return rc;
        }
    }
    *out = s;
    return 0;
}

/* Remembers that the open transaction changed the stream whose wake-up
 * hash is h (mu held). */
static int st_touch(qs_casket *c, uint64_t h)
{
    st_state *s;
    int rc = st_state_get(c, &s);
    if (rc)
        return rc;
    for (size_t i = 0; i < s->n; i++)
        if (s->wake[i] == h)
            return 0;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 4;
        uint64_t *nw = realloc(s->wake, ncap * sizeof *nw);
        if (!nw)
            return QS_NOMEM;
        s->wake = nw;
        s->cap = ncap;
    }
    s->wake[s->n++] = h;
    return 0;
}

/* cs_write of a stream call: the layer registered first (see
 * st_state_get). */
typedef struct st_call {
    cs_write_fn fn;
    void *arg;
} st_call;

static int st_call_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_call *call = arg;
    st_state *s;
    int rc = st_state_get(c, &s);
    if (rc)
        return rc;
    /* the stream's records share the queues' tree: a queue's remembered
     * put position would point into a page these writes reshaped */
    qq_tree_changed(c);
    return call->fn(c, ubt, call->arg);
}

static int st_write(qs_casket *c, cs_write_fn fn, void *arg)
{
    st_call call = {fn, arg};
    return cs_write(c, st_call_fn, &call);
}

/* ---- names and keys --------------------------------------------------------- */

#define NAME_FIELD (4 + QS_MAX_QUEUE_NAME)

/* The keys of one stream and, when a group is named, of that group. */
typedef struct st_keys {
    uint8_t item[1 + NAME_FIELD], meta[1 + NAME_FIELD];
    uint8_t group[1 + 2 * NAME_FIELD], pend[1 + 2 * NAME_FIELD];
    uint32_t slen, glen;        /* lengths of item/meta and of group/pend */
    uint64_t hash;              /* the stream's wake-up word */
} st_keys;

static int name_ok(const void *name, size_t len)
{
    return name && len > 0 && len <= QS_MAX_QUEUE_NAME;
}

static size_t put_name(uint8_t *at, const void *name, size_t len)
{
    wr32(at, (uint32_t)len);
    memcpy(at + 4, name, len);
    return 4 + len;
}

static int make_keys(st_keys *k, const void *name, size_t nlen, const void *group, size_t glen)
{
    if (!name_ok(name, nlen) || (group && !name_ok(group, glen)))
        return QS_INVAL;
    k->item[0] = KEY_ITEM;
    k->slen = 1 + (uint32_t)put_name(k->item + 1, name, nlen);
    memcpy(k->meta, k->item, k->slen);
    k->meta[0] = KEY_META;
    k->hash = hash_bytes(k->item, k->slen);
    if (group) {
        k->group[0] = KEY_GROUP;
        memcpy(k->group + 1, k->item + 1, k->slen - 1);
        k->glen = k->slen + (uint32_t)put_name(k->group + k->slen, group, glen);
        memcpy(k->pend, k->group, k->glen);
        k->pend[0] = KEY_PENDING;
    }
    return 0;
}

static bt_ctx stream_ctx(const bt_ctx *ubt)
{
    bt_ctx s = {ubt->p, ubt->wview, NS_QUEUE};
    return s;
}

/* ---- records ---------------------------------------------------------------- */

/* The first record of key at or after seq: *id its seq and its value
 * appended to v (if not NULL); QS_NOTFOUND when key has none there. */
static int first_of(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t seq, bt_path *path,
                    uint64_t *id, bt_buf *v)
{
    bt_key pk = {key, klen, seq};
    int eq, rc = bt_seek_ge(bt, &pk, path);
    if (rc == 0 && (rc = bt_item(bt, path, key, klen, &eq, id, v)) == 0 && !eq)
        rc = QS_NOTFOUND;
    return rc;
}

/* The value of record (key, seq) into v (replacing what v held);
 * QS_NOTFOUND when there is none. */
static int get_exact(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t seq, bt_buf *v)
{
    bt_path path;
    uint64_t got;
    if (v)
        v->len = 0;
    int rc = first_of(bt, key, klen, seq, &path, &got, v);
    return rc == 0 && got != seq ? QS_NOTFOUND : rc;
}

/* Removes record (key, seq) if it is there. */
static int del_exact(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t seq)
{
    bt_path path;
    uint64_t got;
    int rc = first_of(bt, key, klen, seq, &path, &got, NULL);
    if (rc == QS_NOTFOUND || (rc == 0 && got != seq))
        return 0;
    return rc ? rc : bt_delete(bt, &path);
}

/* Writes record (key, seq) -> val, replacing the one there. */
static int put_exact(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t seq, const void *val,
                     size_t vlen)
{
    int rc = del_exact(bt, key, klen, seq);
    bt_key pk = {key, klen, seq};
    bt_path path;
    if (rc == 0 && ((rc = bt_seek(bt, &pk, &path)) == 0 || rc == QS_NOTFOUND))
        rc = bt_insert(bt, &path, &pk, val, vlen);
    return rc;
}

static double rdf64(const uint8_t *p)
{
    double d;
    memcpy(&d, p, 8);
    return d;
}

static void wrf64(uint8_t *p, double d) { memcpy(p, &d, 8); }

typedef struct st_meta {
    uint64_t maxlen;
    double max_age;
    uint64_t last_id, first_kept;
} st_meta;

/* The stream's settings and state; all zero for a stream never written. */
static int meta_get(bt_ctx *bt, const st_keys *k, st_meta *m)
{
    bt_buf v = {0};
    int rc = get_exact(bt, k->meta, k->slen, 0, &v);
    memset(m, 0, sizeof *m);
    if (rc == 0 && v.len != META_LEN)
        rc = QS_CORRUPT;
    if (rc == 0)
        *m = (st_meta){rd64(v.data), rdf64(v.data + 8), rd64(v.data + 16), rd64(v.data + 24)};
    free(v.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}

static int meta_put(bt_ctx *bt, const st_keys *k, const st_meta *m)
{
    uint8_t v[META_LEN];
    wr64(v, m->maxlen);
    wrf64(v + 8, m->max_age);
    wr64(v + 16, m->last_id);
    wr64(v + 24, m->first_kept);
    return put_exact(bt, k->meta, k->slen, 0, v, sizeof v);
}

/* The group's last id handed out; QS_STREAM_NOGROUP when it does not
 * exist. */
static int group_get(bt_ctx *bt, const st_keys *k, uint64_t *last)
{
    bt_buf v = {0};
    int rc = get_exact(bt, k->group, k->glen, 0, &v);
    if (rc == 0 && v.len != 8)
        rc = QS_CORRUPT;
    if (rc == 0)
        *last = rd64(v.data);
    free(v.data);
    return rc == QS_NOTFOUND ? QS_STREAM_NOGROUP : rc;
}

static int group_put(bt_ctx *bt, const st_keys *k, uint64_t last)
{
    uint8_t v[8];
    wr64(v, last);
    return put_exact(bt, k->group, k->glen, 0, v, sizeof v);
}

static int pend_put(bt_ctx *bt, const st_keys *k, uint64_t id, double at, uint32_t deliveries,
                    const void *consumer, size_t clen)
{
    uint8_t v[PEND_HDR + QS_MAX_QUEUE_NAME];
    wrf64(v, at);
    wr32(v + 8, deliveries);
    memcpy(v + PEND_HDR, consumer, clen);
    return put_exact(bt, k->pend, k->glen, id, v, PEND_HDR + clen);
}

/* Items the stream holds, into *n. */
static int item_count(bt_ctx *bt, const st_keys *k, uint64_t *n)
{
    bt_key lo = {k->item, k->slen, 0}, hi = {k->item, k->slen, UINT64_MAX};
    uint64_t a, b;
    int rc = bt_rank(bt, &lo, &a);
    if (rc == 0 && (rc = bt_rank(bt, &hi, &b)) == 0)
        *n = b - a;
    return rc;
}

/* ---- retention ----------------------------------------------------------------- */

/* The highest id every group of the stream has acknowledged (its oldest
 * pending entry's id - 1, or the last id it was handed when none is
 * pending), minimum over the groups; *any 0 when the stream has none. */
static int acked_horizon(bt_ctx *bt, const st_keys *k, int *any, uint64_t *horizon)
{
    uint8_t gk[1 + NAME_FIELD];
    uint8_t pk[1 + 2 * NAME_FIELD];
    gk[0] = KEY_GROUP;
    memcpy(gk + 1, k->item + 1, k->slen - 1);
    bt_key probe = {gk, k->slen, 0};
    bt_path path;
    bt_buf key = {0}, val = {0};
    *any = 0;
    *horizon = UINT64_MAX;
    int rc;
    while ((rc = bt_seek_onward(bt, &probe, &path)) == 0) {
        key.len = val.len = 0;
        if ((rc = bt_read(bt, &path, &key, &val, 0, NULL)) != 0)
            break;
        if (key.len <= k->slen || memcmp(key.data, gk, k->slen) != 0)
            break;      /* past this stream's groups */
        if (key.len > sizeof pk || val.len != 8) {
            rc = QS_CORRUPT;
            break;
        }
        uint64_t h = rd64(val.data), first;
        memcpy(pk, key.data, key.len);
        pk[0] = KEY_PENDING;
        bt_path pp;
        rc = first_of(bt, pk, (uint32_t)key.len, 0, &pp, &first, NULL);
        if (rc == 0 && first - 1 < h)
            h = first - 1;
        else if (rc != QS_NOTFOUND && rc != 0)
            break;
        *any = 1;
        if (h < *horizon)
            *horizon = h;
        /* the next group: after every record of this one's key */
        memcpy(pk, key.data, key.len);
        probe = (bt_key){pk, (uint32_t)key.len, UINT64_MAX};
    }
    free(key.data);
    free(val.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}

/* Removes the items retention no longer keeps, oldest first: beyond
 * maxlen, older than max_age at time now (now < 0: no age check), and
 * those at or below every group's acknowledged horizon. */
static int trim(bt_ctx *bt, const st_keys *k, st_meta *m, double now)
{
    int any, rc;
    uint64_t horizon, n = 0;
    if ((rc = acked_horizon(bt, k, &any, &horizon)) != 0)
        return rc;
    if (m->maxlen && (rc = item_count(bt, k, &n)) != 0)
        return rc;
    double oldest = now >= 0 && m->max_age > 0 ? now - m->max_age : -INFINITY;
    bt_buf v = {0};
    bt_path path;
    uint64_t id, removed = 0;
    for (;;) {
        v.len = 0;
        if ((rc = first_of(bt, k->item, k->slen, 0, &path, &id, &v)) != 0)
            break;
        if (v.len < STAMP) {
            rc = QS_CORRUPT;
            break;
        }
        int keep = !(m->maxlen && n > m->maxlen) && !(rdf64(v.data) < oldest) &&
                   !(any && id <= horizon);
        if (keep)
            break;
        if ((rc = bt_delete(bt, &path)) != 0)
            break;
        removed = id;
        if (n)
            n--;
    }
    free(v.data);
    if (rc == QS_NOTFOUND)
        rc = 0;
    if (rc == 0 && removed && removed + 1 > m->first_kept) {
        m->first_kept = removed + 1;
        rc = meta_put(bt, k, m);
    }
    return rc;
}

/* The end of a change to the stream: its new state *m stored (m NULL:
 * unchanged), retention (by age at now, now < 0: not by age), and its
 * readers woken when the transaction ends. */
static int changed(qs_casket *c, bt_ctx *bt, const st_keys *k, st_meta *m, double now)
{
    st_meta kept;
    int rc = m ? meta_put(bt, k, m) : meta_get(bt, k, m = &kept);
    if (rc == 0 && (rc = trim(bt, k, m, now)) == 0)
        rc = st_touch(c, k->hash);
    return rc;
}

/* An id retention took from the stream: a read from there would silently
 * skip what was removed. */
static int trimmed(const st_meta *m, uint64_t id)
{
    return id > 0 && id < m->first_kept;
}

/* ---- settings, append ------------------------------------------------------- */

typedef struct st_args {
    st_keys k;
    /* configure */
    uint64_t maxlen;
    double max_age;
    /* append */
    size_t n;
    bt_vals vals;
    double now;
    uint64_t first_id;
    /* group creation */
    int start;
    uint64_t start_id;
    /* group read, claim */
    const void *consumer;
    size_t clen;
    size_t max;
    double min_idle;
    outbuf out;
    uint32_t word;
    /* ack */
    const uint64_t *ids;
    uint64_t bad_id;
} st_args;

static int configure_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    st_meta m;
    int rc = meta_get(&bt, &a->k, &m);
    if (rc)
        return rc;
    m.maxlen = a->maxlen;
    m.max_age = a->max_age;
    return changed(c, &bt, &a->k, &m, a->now);
}

static int append_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    st_meta m;
    int rc = meta_get(&bt, &a->k, &m);
    if (rc)
        return rc;
    uint64_t id = pg_alloc_ids(bt.p, a->n);
    /* Item by item rather than bt_append_run: a second caller of that with
     * another prefix cost the queue's put path its specialized copy
     * (callgrind queue_put_txn +10 Ir per item). */
    bt_vals v = a->vals;
    bt_buf val = {0};
    bt_path path;
    int kept = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++, bt_vals_next(&v)) {
        uint32_t len = bt_vals_len(&v);
        bt_key pk = {a->k.item, a->k.slen, id + i};
        val.len = 0;
        if ((rc = bt_buf_reserve(&val, STAMP + (size_t)len)) != 0)
            break;
        wrf64(val.data, a->now);
        memcpy(val.data + STAMP, bt_vals_data(&v), len);
        if (!kept && (rc = bt_seek(&bt, &pk, &path)) == QS_NOTFOUND)
            rc = 0;
        if (rc == 0)
            rc = bt_insert_next(&bt, &path, &pk, val.data, STAMP + (size_t)len, &kept);
        if (rc == 0 && (i + 1) % STREAM_CHUNK == 0) {
            rc = pg_trim(bt.p, 1);
            kept = 0;
        }
    }
    free(val.data);
    a->first_id = id;
    m.last_id = id + a->n - 1;
    return rc ? rc : changed(c, &bt, &a->k, &m, a->now);
}

static int check_now(double now)
{
    return isfinite(now) && now >= 0 ? 0 : QS_INVAL;
}

static int do_configure(qs_casket *c, const void *name, size_t nlen, uint64_t maxlen,
                        double max_age, double now)
{
    st_args a = {.maxlen = maxlen, .max_age = max_age, .now = now};
    int rc = make_keys(&a.k, name, nlen, NULL, 0);
    if (rc == 0 && (!(max_age >= 0) || isinf(max_age) || check_now(now)))
        rc = QS_INVAL;
    return rc ? rc : st_write(c, configure_fn, &a);
}

static int do_append(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                     size_t vals_len, const uint32_t *lens, double now, uint64_t *first_id)
{
    if (first_id)
        *first_id = 0;
    st_args a = {.n = n, .vals = {vals, lens, 0}, .now = now};
    int rc = make_keys(&a.k, name, nlen, NULL, 0);
    if (rc == 0 && (n == 0 || check_now(now)))
        rc = QS_INVAL;
    if (rc == 0) {
        rc = check_vals(n, vals, vals_len, lens);
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (lens[i] > (uint64_t)QS_MAX_VALUE - STAMP)
                rc = QS_TOOBIG;
    }
    if (rc == 0)
        rc = st_write(c, append_fn, &a);
    if (rc == 0 && first_id)
        *first_id = a.first_id;
    return rc;
}

/* ---- reads ------------------------------------------------------------------ */

/* Appends the item at path (its value read into v) to o as (id, payload). */
static int out_item(outbuf *o, uint64_t id, const bt_buf *v)
{
    if (v->len < STAMP)
        return QS_CORRUPT;
    int rc = out_begin(o);
    if (rc == 0 && (rc = bt_buf_reserve(&o->data, v->len - STAMP)) == 0) {
        memcpy(o->data.data + o->data.len, v->data + STAMP, v->len - STAMP);
        o->data.len += v->len - STAMP;
        out_end(o, id);
    }
    return rc;
}

/* Up to max items of the stream from id `from` on into o (ids in *ids as
 * well, for the caller to act on). */
static int collect(bt_ctx *bt, const st_keys *k, uint64_t from, size_t max, outbuf *o)
{
    bt_buf v = {0};
    bt_path path;
    uint64_t id;
    int rc = first_of(bt, k->item, k->slen, from, &path, &id, &v);
    while (rc == 0 && o->n < max) {
        int eq;
        if ((rc = out_item(o, id, &v)) != 0 || o->n == max || (rc = bt_next(bt, &path)) != 0)
            break;
        v.len = 0;
        if ((rc = bt_item(bt, &path, k->item, k->slen, &eq, &id, &v)) == 0 && !eq)
            rc = QS_NOTFOUND;
    }
    free(v.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}

static int do_read(qs_casket *c, const void *name, size_t nlen, uint64_t start_id, size_t max,
                   qs_items **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    st_keys k;
    int rc = make_keys(&k, name, nlen, NULL, 0);
    if (rc == 0 && max == 0)
        rc = QS_INVAL;
    if (rc)
        return rc;
    bt_ctx ubt;
    if ((rc = cs_read_enter(c, &ubt, NS_QUEUE)) != 0)
        return rc;
    bt_ctx bt = stream_ctx(&ubt);
    outbuf o = {0};
    st_meta m;
    if ((rc = meta_get(&bt, &k, &m)) == 0 && trimmed(&m, start_id))
        rc = QS_STREAM_TRIMMED;
    if (rc == 0)
        rc = collect(&bt, &k, start_id, max, &o);
    cs_read_leave(c, &ubt);
    return out_read(&o, rc, out);
}

static int do_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len)
{
    if (!len)
        return QS_INVAL;
    *len = 0;
    st_keys k;
    int rc = make_keys(&k, name, nlen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    if ((rc = cs_read_enter(c, &bt, NS_QUEUE)) != 0)
        return rc;
    rc = item_count(&bt, &k, len);
    cs_read_leave(c, &bt);
    return rc;
}

/* ---- groups ----------------------------------------------------------------- */

static int group_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    uint64_t last;
    int rc = group_get(&bt, &a->k, &last);
    if (rc != QS_STREAM_NOGROUP)
        return rc;      /* it exists (0): its position is its own */
    st_meta m;
    if ((rc = meta_get(&bt, &a->k, &m)) != 0)
        return rc;
    if (a->start == QS_STREAM_FIRST)
        last = m.first_kept ? m.first_kept - 1 : 0;
    else if (a->start == QS_STREAM_LAST)
        last = m.last_id;
    else if (trimmed(&m, a->start_id))
        return QS_STREAM_TRIMMED;
    else
        last = a->start_id - 1;
    rc = group_put(&bt, &a->k, last);
    return rc ? rc : changed(c, &bt, &a->k, NULL, -1);
}

static int do_group(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    int start, uint64_t start_id)
{
    st_args a = {.start = start, .start_id = start_id};
    int rc = make_keys(&a.k, name, nlen, group, glen);
    if (rc == 0 && start != QS_STREAM_FIRST && start != QS_STREAM_LAST &&
        !(start == QS_STREAM_AT && start_id >= 1))
        rc = QS_INVAL;
    return rc ? rc : st_write(c, group_fn, &a);
}

static int read_group_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    /* Read first: a commit after this point changes it, so a waiter
     * cannot miss the items that commit brings. */
    a->word = qr_wait_word(cs_region(c), a->k.hash);
    uint64_t last;
    int rc = group_get(&bt, &a->k, &last);
    a->out.data.len = 0;
    a->out.n = 0;
    if (rc == 0 && last < UINT64_MAX)
        rc = collect(&bt, &a->k, last + 1, a->max, &a->out);
    if (rc == 0 && a->out.n == 0)
        rc = QS_NOTFOUND;
    for (size_t i = 0; rc == 0 && i < a->out.n; i++)
        rc = pend_put(&bt, &a->k, a->out.ids[i], a->now, 1, a->consumer, a->clen);
    if (rc == 0 && (rc = group_put(&bt, &a->k, a->out.ids[a->out.n - 1])) == 0)
        rc = st_touch(c, a->k.hash);
    return rc;
}

/* The wait of qs_stream_read_group: asleep on the stream's wake-up word,
 * which every append (any process's) changes at its commit. */
static int read_group_wait(qs_casket *c, st_args *a, double timeout)
{
    int nowait = timeout == 0 || cs_in_txn(c);
    double deadline = timeout < 0 ? INFINITY : nowait ? 0 : cs_now() + timeout;
    qr_wait_begin();
    for (;;) {
        int rc = st_write(c, read_group_fn, a);
        if (rc != QS_NOTFOUND || nowait)
            return rc;
        double now = cs_now();
        if (now >= deadline)
            return QS_NOTFOUND;
        /* A signal ends the wait with nothing read, so that the caller's
         * handler runs (the caller calls again with the time left). */
        if (qr_wait(cs_region(c), a->k.hash, a->word, isinf(deadline) ? -1.0 : deadline - now) ==
            EINTR)
            return QS_INTR;
        if (cs_closing(c))
            return QS_CLOSED;
    }
}

static int check_consumer(const void *consumer, size_t clen)
{
    return name_ok(consumer, clen) ? 0 : QS_INVAL;
}

static int do_read_group(qs_casket *c, const void *name, size_t nlen, const void *group,
                         size_t glen, const void *consumer, size_t clen, size_t max,
                         double timeout, double now, qs_items **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    st_args a = {.consumer = consumer, .clen = clen, .max = max, .now = now};
    int rc = make_keys(&a.k, name, nlen, group, glen);
    if (rc == 0 && (check_consumer(consumer, clen) || max == 0 || isnan(timeout) ||
                    check_now(now)))
        rc = QS_INVAL;
    if (rc == 0)
        rc = read_group_wait(c, &a, timeout);
    return out_read(&a.out, rc, out);
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int ack_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    uint64_t last;
    int rc = group_get(&bt, &a->k, &last);
    /* every id is checked before any entry goes: a refusal changes nothing */
    for (size_t i = 0; rc == 0 && i < a->n; i++)
        if ((rc = get_exact(&bt, a->k.pend, a->k.glen, a->ids[i], NULL)) == QS_NOTFOUND) {
            a->bad_id = a->ids[i];
            rc = QS_STREAM_NOTPENDING;
        }
    for (size_t i = 0; rc == 0 && i < a->n; i++)
        rc = del_exact(&bt, a->k.pend, a->k.glen, a->ids[i]);
    return rc ? rc : changed(c, &bt, &a->k, NULL, -1);
}

static int do_ack(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                  size_t n, const uint64_t *ids, uint64_t *bad_id)
{
    if (bad_id)
        *bad_id = 0;
    st_args a = {.n = n};
    int rc = make_keys(&a.k, name, nlen, group, glen);
    if (rc == 0 && (n == 0 || !ids))
        rc = QS_INVAL;
    if (rc)
        return rc;
    /* sorted, without repeats: an id given twice is acknowledged once */
    uint64_t *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return QS_NOMEM;
    memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || sorted[i] != sorted[w - 1])
            sorted[w++] = sorted[i];
    a.n = w;
    a.ids = sorted;
    rc = st_write(c, ack_fn, &a);
    free(sorted);
    if (rc == QS_STREAM_NOTPENDING && bad_id)
        *bad_id = a.bad_id;
    return rc;
}

/* The pending entry at path (value in v) to o: id, then the entry's value
 * as qs_stream_pending lays it out (its record's layout). */
static int out_entry(outbuf *o, uint64_t id, const bt_buf *v)
{
    if (v->len < PEND_HDR)
        return QS_CORRUPT;
    int rc = out_begin(o);
    if (rc == 0 && (rc = bt_buf_reserve(&o->data, v->len)) == 0) {
        memcpy(o->data.data + o->data.len, v->data, v->len);
        o->data.len += v->len;
        out_end(o, id);
    }
    return rc;
}

static int do_pending(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                      qs_items **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    st_keys k;
    int rc = make_keys(&k, name, nlen, group, glen);
    if (rc)
        return rc;
    bt_ctx ubt;
    if ((rc = cs_read_enter(c, &ubt, NS_QUEUE)) != 0)
        return rc;
    bt_ctx bt = stream_ctx(&ubt);
    outbuf o = {0};
    bt_buf v = {0};
    bt_path path;
    uint64_t id, last;
    if ((rc = group_get(&bt, &k, &last)) == 0)
        rc = first_of(&bt, k.pend, k.glen, 0, &path, &id, &v);
    while (rc == 0) {
        int eq;
        if ((rc = out_entry(&o, id, &v)) != 0 || (rc = bt_next(&bt, &path)) != 0)
            break;
        v.len = 0;
        if ((rc = bt_item(&bt, &path, k.pend, k.glen, &eq, &id, &v)) == 0 && !eq)
            rc = QS_NOTFOUND;
    }
    free(v.data);
    cs_read_leave(c, &ubt);
    return out_read(&o, rc == QS_NOTFOUND ? 0 : rc, out);
}

/* Hands the group's entries idle at least min_idle to the consumer: each
 * counts one more delivery and is delivered now.  An entry whose item
 * retention removed (maxlen, max_age) is dropped, not handed out. */
static int claim_fn(qs_casket *c, bt_ctx *ubt, void *arg)
{
    st_args *a = arg;
    bt_ctx bt = stream_ctx(ubt);
    uint64_t last, id = 0;
    int rc = group_get(&bt, &a->k, &last);
    bt_buf v = {0}, item = {0};
    a->out.data.len = 0;
    a->out.n = 0;
    while (rc == 0 && a->out.n < a->max) {
        bt_path path;
        v.len = 0;
        if ((rc = first_of(&bt, a->k.pend, a->k.glen, id + 1, &path, &id, &v)) != 0)
            break;
        if (v.len < PEND_HDR) {
            rc = QS_CORRUPT;
            break;
        }
        if (a->now - rdf64(v.data) < a->min_idle)
            continue;
        rc = get_exact(&bt, a->k.item, a->k.slen, id, &item);
        if (rc == QS_NOTFOUND)
            rc = del_exact(&bt, a->k.pend, a->k.glen, id);
        else if (rc == 0 && (rc = out_item(&a->out, id, &item)) == 0)
            rc = pend_put(&bt, &a->k, id, a->now, rd32(v.data + 8) + 1, a->consumer, a->clen);
    }
    free(v.data);
    free(item.data);
    if (rc == QS_NOTFOUND)
        rc = 0;
    return rc ? rc : changed(c, &bt, &a->k, NULL, -1);
}

static int do_claim(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    const void *consumer, size_t clen, double min_idle, size_t max, double now,
                    qs_items **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    st_args a = {.consumer = consumer, .clen = clen, .max = max, .now = now, .min_idle = min_idle};
    int rc = make_keys(&a.k, name, nlen, group, glen);
    if (rc == 0 && (check_consumer(consumer, clen) || max == 0 || !(min_idle >= 0) ||
                    isinf(min_idle) || check_now(now)))
        rc = QS_INVAL;
    if (rc == 0)
        rc = st_write(c, claim_fn, &a);
    return out_read(&a.out, rc, out);
}

/* ---- public entry points ---------------------------------------------------- */

int qs_stream_configure(qs_casket *c, const void *name, size_t nlen, uint64_t maxlen,
                        double max_age, double now)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_configure(c, name, nlen, maxlen, max_age, now));
}

int qs_stream_append(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                     size_t vals_len, const uint32_t *lens, double now, uint64_t *first_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc
              : cs_return(c, do_append(c, name, nlen, n, vals, vals_len, lens, now, first_id));
}

int qs_stream_read(qs_casket *c, const void *name, size_t nlen, uint64_t start_id, size_t max,
                   qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_read(c, name, nlen, start_id, max, out));
}

int qs_stream_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_len(c, name, nlen, len));
}

int qs_stream_group(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    int start, uint64_t start_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_group(c, name, nlen, group, glen, start, start_id));
}

int qs_stream_read_group(qs_casket *c, const void *name, size_t nlen, const void *group,
                         size_t glen, const void *consumer, size_t clen, size_t max,
                         double timeout, double now, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc
              : cs_return(c, do_read_group(c, name, nlen, group, glen, consumer, clen, max,
                                           timeout, now, out));
}

int qs_stream_ack(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                  size_t n, const uint64_t *ids, uint64_t *bad_id)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_ack(c, name, nlen, group, glen, n, ids, bad_id));
}

int qs_stream_pending(qs_casket *c, const void *name, size_t nlen, const void *group,
                      size_t glen, qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_pending(c, name, nlen, group, glen, out));
}

int qs_stream_claim(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    const void *consumer, size_t clen, double min_idle, size_t max, double now,
                    qs_items **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc
              : cs_return(c, do_claim(c, name, nlen, group, glen, consumer, clen, min_idle, max,
                                      now, out));
}
