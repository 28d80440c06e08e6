/* records.c -- the record API (rec_ inside; qs_put, qs_get ... in
 * qstore.h): put, putkeep, putdup, out, outlist, get, getdup, count over
 * the user namespace, and the putdups of an explicit transaction buffered
 * to be applied in key order.  Apart because it is the first layer above
 * the transaction layer: it builds operations and hands them to it. */
#include "batchsort.h"
#include "handle.h"
#include "group.h"
#include "records.h"
#include "txn.h"
#include <stdlib.h>
#include <string.h>

/* ---- records ------------------------------------------------------------ */

typedef struct rec_args {
    const uint8_t *key;
    size_t klen;
    const void *val;
    size_t vlen;
    uint64_t count;
    size_t n;
    const uint8_t *keys, *vals;
    const uint64_t *koff, *voff;
} rec_args;

int rec_check_kv(const void *key, size_t klen, const void *val, size_t vlen)
{
    if ((!key && klen) || (!val && vlen))
        return QS_INVAL;
    if (klen > QS_MAX_KEY || vlen > QS_MAX_VALUE)
        return QS_TOOBIG;
    return 0;
}

/* Removes every record of key; a->count gets how many. */
static int outlist_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    a->count = 0;
    for (;;) {
        bt_path path;
        int eq, rc = bt_seek_ge(bt, &pk, &path);
        if (rc == QS_NOTFOUND)
            return 0;
        if (rc || (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
            return rc;
        if (!eq)
            return 0;
        if ((rc = bt_delete(bt, &path)) != 0)
            return rc;
        a->count++;
    }
}

static int insert_first(bt_ctx *bt, rec_args *a)
{
    return bt_putdup(bt, a->key, (uint32_t)a->klen, a->val, a->vlen, NULL);
}

static int put_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    return bt_put_only(bt, a->key, (uint32_t)a->klen, a->val, a->vlen, &a->count);
}

static int putkeep_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    bt_path path;
    int eq = 0, rc = bt_seek_ge(bt, &pk, &path);
    if (rc == 0 && (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    if (rc && rc != QS_NOTFOUND)
        return rc;
    if (eq)
        return QS_KEYEXIST;
    return insert_first(bt, a);
}

static int putdup_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    return bt_putdup(bt, a->key, (uint32_t)a->klen, a->val, a->vlen, NULL);
}

/* A batch is applied in key order: putdups of different keys commute and a
 * stable sort keeps each key's values in their given order, so the result
 * is the same as applying them one by one -- but the tree is then walked
 * left to right, touching each leaf once while it is hot in the CPU cache
 * (and, for batches larger than the cache budget, spilling each page about
 * once instead of over and over). */
static int putdup_many_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    rec_args *a = arg;
    bs_ent *order = NULL;
    int rc = 0;
    if (a->n > 1 && (rc = bs_sort(a->n, a->keys, a->koff, &order)) != 0)
        return rc;
    for (size_t j = 0; j < a->n && rc == 0; j++) {
        size_t i = order ? order[j].idx : j;
        if (order && j + 16 < a->n) {
            /* Sorted order visits the caller's arrays at random: fetch
             * ahead, offsets first, then the bytes they point at. */
            __builtin_prefetch(&a->koff[order[j + 16].idx]);
            __builtin_prefetch(&a->voff[order[j + 16].idx]);
            size_t f = order[j + 8].idx;
            __builtin_prefetch(a->keys + a->koff[f]);
            __builtin_prefetch(a->vals + a->voff[f]);
        }
        rc = bt_putdup(bt, a->keys + a->koff[i], (uint32_t)(a->koff[i + 1] - a->koff[i]),
                       a->vals + a->voff[i], a->voff[i + 1] - a->voff[i], NULL);
        if (rc == 0 && (j & 1023) == 1023)
            rc = pg_trim(&c->pg, 1);
    }
    free(order);
    return rc;
}

static int out_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    bt_path path;
    int eq, rc = bt_seek_ge(bt, &pk, &path);
    if (rc || (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    return eq ? bt_delete(bt, &path) : QS_NOTFOUND;
}

static int do_put(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = rec_check_kv(key, klen, val, vlen);
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return rc ? rc : gc_write(c, put_fn, &a);
}

static int do_putkeep(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = rec_check_kv(key, klen, val, vlen);
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return rc ? rc : gc_write(c, putkeep_fn, &a);
}
static void rec_drop_pending(qs_casket *c)
{
    c->pend_n = 0;
    c->pend_keys.len = c->pend_vals.len = 0;
}

/* How much a transaction buffers before it applies the putdups: as many
 * bytes of keys and values as the page budget (cache_bytes), at least
 * 32 MiB and at most 1 GiB, and a record per 128 of those bytes (the
 * offsets and the sort's entries are 32 bytes a record).  Each application
 * walks the tree left to right once and dirties every leaf it touches; a
 * transaction larger than the cache then spills those leaves, and the next
 * application reads and spills them again.  So the larger the batch, the
 * fewer the walks: seed 000's 10^7 items in one transaction wrote 42 GB
 * for a 2.4 GiB casket with 256 Ki-record batches (the floor), 9.2 GB with
 * 2 Mi-record ones (the default cache's figure). */
#define PEND_MIN_BYTES (32ull << 20)
#define PEND_MAX_BYTES (1ull << 30)
#define PEND_BYTES_PER_RECORD 128u

static uint64_t pend_max_bytes(const qs_casket *c)
{
    uint64_t b = (uint64_t)c->pg.budget * PG_SIZE;
    return b < PEND_MIN_BYTES ? PEND_MIN_BYTES : b > PEND_MAX_BYTES ? PEND_MAX_BYTES : b;
}

/* Applies the buffered putdups of the caller's transaction, in key order. */
static int rec_flush_pending(qs_casket *c)
{
    if (c->pend_n == 0)
        return 0;
    rec_args a = {.n = c->pend_n, .keys = c->pend_keys.data, .vals = c->pend_vals.data,
                  .koff = c->pend_koff, .voff = c->pend_voff};
    int rc = tx_write_core(c, putdup_many_fn, &a, 1);
    rec_drop_pending(c);
    return rc;
}

/* Buffers a putdup of the caller's own transaction.  Nothing reads the
 * tree in that view without flushing first, so the deferral cannot be
 * observed; it lets a long run of putdups walk the tree in key order. */
static int pend_add(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    if (c->pend_n + 2 > c->pend_cap) {
        size_t ncap = c->pend_cap ? c->pend_cap * 2 : 1024;
        uint64_t *k = realloc(c->pend_koff, ncap * sizeof *k);
        if (!k)
            return QS_NOMEM;
        c->pend_koff = k;
        uint64_t *v = realloc(c->pend_voff, ncap * sizeof *v);
        if (!v)
            return QS_NOMEM;
        c->pend_voff = v;
        c->pend_cap = ncap;
    }
    if (bt_buf_reserve(&c->pend_keys, klen + 1) || bt_buf_reserve(&c->pend_vals, vlen + 1))
        return QS_NOMEM;
    if (c->pend_n == 0) {
        c->pend_koff[0] = c->pend_voff[0] = 0;
        cs_flush_due(c);
    }
    if (klen)
        memcpy(c->pend_keys.data + c->pend_keys.len, key, klen);
    if (vlen)
        memcpy(c->pend_vals.data + c->pend_vals.len, val, vlen);
    c->pend_keys.len += klen;
    c->pend_vals.len += vlen;
    c->pend_n++;
    c->pend_koff[c->pend_n] = c->pend_keys.len;
    c->pend_voff[c->pend_n] = c->pend_vals.len;
    uint64_t most = pend_max_bytes(c);
    if (c->pend_n >= most / PEND_BYTES_PER_RECORD || c->pend_keys.len + c->pend_vals.len >= most)
        return rec_flush_pending(c);
    return 0;
}

/* The records' layer (cs_layer): the transaction layer applies the
 * buffered putdups before anything reads or writes in the writer's view
 * and at commit, and forgets them when the transaction ends. */
static int pending_flush(qs_casket *c, void *state)
{
    (void)state;
    return rec_flush_pending(c);
}

static void pending_end(qs_casket *c, void *state, int committed)
{
    (void)state;
    (void)committed;
    rec_drop_pending(c);
}

static void pending_free(qs_casket *c, void *state)
{
    (void)state;
    free(c->pend_keys.data);
    free(c->pend_vals.data);
    free(c->pend_koff);
    free(c->pend_voff);
}

/* The record API's results that refuse without touching the tree. */
static int rec_refused(int rc)
{
    return rc == QS_TOOBIG || rc == QS_INVAL || rc == QS_KEYEXIST || rc == QS_NOTFOUND;
}

static const cs_layer rec_layer = {
    .flush = pending_flush,
    .txn_end = pending_end,
    .free = pending_free,
    .refused = rec_refused,
};

void rec_attach(qs_casket *c)
{
    cs_layer_add(c, &rec_layer, NULL);  /* the first layer: cannot fail */
}

int rec_putdup(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = rec_check_kv(key, klen, val, vlen);
    if (rc)
        return rc;
    if (!c->readonly && cs_owns(c) && c->explicit_txn) {
        if (c->txn_error)
            return c->txn_error;
        return pend_add(c, key, klen, val, vlen);
    }
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return gc_write(c, putdup_fn, &a);
}

static int do_putdup_many(qs_casket *c, size_t n, const void *keys, const uint64_t *koff,
                   const void *vals, const uint64_t *voff)
{
    if ((n && (!koff || !voff)) || n >= UINT32_MAX)
        return QS_INVAL;
    for (size_t i = 0; i < n; i++) {
        if (koff[i + 1] < koff[i] || voff[i + 1] < voff[i])
            return QS_INVAL;
        int rc = rec_check_kv(keys, koff[i + 1] - koff[i], vals, voff[i + 1] - voff[i]);
        if (rc)
            return rc;
    }
    if (n == 0)
        return c->readonly ? QS_READONLY : 0;
    rec_args a = {.n = n, .keys = keys, .vals = vals, .koff = koff, .voff = voff};
    return gc_write(c, putdup_many_fn, &a);
}

static int do_out(qs_casket *c, const void *key, size_t klen)
{
    int rc = rec_check_kv(key, klen, NULL, 0);
    rec_args a = {.key = key, .klen = klen};
    return rc ? rc : gc_write(c, out_fn, &a);
}

static int do_outlist(qs_casket *c, const void *key, size_t klen, uint64_t *removed)
{
    int rc = rec_check_kv(key, klen, NULL, 0);
    rec_args a = {.key = key, .klen = klen};
    if (rc == 0)
        rc = gc_write(c, outlist_fn, &a);
    if (removed)
        *removed = rc == 0 ? a.count : 0;
    return rc;
}

static int find_first(bt_ctx *bt, const void *key, size_t klen, bt_path *path)
{
    bt_key pk = {key, (uint32_t)klen, 0};
    int eq, rc = bt_seek_ge(bt, &pk, path);
    if (rc || (rc = bt_key_is(bt, path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    return eq ? 0 : QS_NOTFOUND;
}

static int do_get(qs_casket *c, const void *key, size_t klen, void **val, size_t *vlen)
{
    if (!val || !vlen)
        return QS_INVAL;
    *val = NULL;
    *vlen = 0;
    int rc = rec_check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_path path;
    bt_buf out = {0};
    READ_ENTER(c, &bt);
    rc = find_first(&bt, key, klen, &path);
    if (rc == 0)
        rc = bt_read(&bt, &path, NULL, &out, 0, NULL);
    cs_read_leave(c, &bt);
    if (rc) {
        free(out.data);
        return rc;
    }
    if (!out.data && !(out.data = malloc(1)))
        return QS_NOMEM;
    *val = out.data;
    *vlen = out.len;
    return 0;
}

static int do_get_into(qs_casket *c, const void *key, size_t klen, void *buf, size_t cap,
                       size_t *vlen, int wait)
{
    if (!vlen)
        return QS_INVAL;
    *vlen = 0;
    if (!buf && cap)
        return QS_INVAL;
    int rc = rec_check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_path path;
    size_t n = 0;
    if (wait)
        READ_ENTER(c, &bt);
    else if ((rc = cs_read_try_enter(c, &bt, NS_USER)) != 0)
        return rc;
    rc = find_first(&bt, key, klen, &path);
    if (rc == 0)
        rc = bt_read_into(&bt, &path, buf, cap, &n);
    cs_read_leave(c, &bt);
    if (rc == 0)
        *vlen = n;
    return rc;
}

static int do_getdup(qs_casket *c, const void *key, size_t klen, void **outp, size_t *outlen,
              uint64_t *count)
{
    if (!outp || !outlen || !count)
        return QS_INVAL;
    *outp = NULL;
    *outlen = 0;
    *count = 0;
    int rc = rec_check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_path path;
    bt_buf out = {0};
    uint64_t n = 0;
    READ_ENTER(c, &bt);
    rc = find_first(&bt, key, klen, &path);
    while (rc == 0) {
        int eq;
        if ((rc = bt_key_is(&bt, &path, key, (uint32_t)klen, &eq)) != 0 || !eq)
            break;
        if ((rc = bt_read(&bt, &path, NULL, &out, 1, NULL)) != 0)
            break;
        n++;
        rc = bt_next(&bt, &path);
    }
    cs_read_leave(c, &bt);
    if (rc && rc != QS_NOTFOUND) {
        free(out.data);
        return rc;
    }
    *outp = out.data;
    *outlen = out.len;
    *count = n;
    return 0;
}

static int do_count(qs_casket *c, const void *key, size_t klen, uint64_t *count)
{
    if (!count)
        return QS_INVAL;
    *count = 0;
    int rc = rec_check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    uint64_t lo, hi;
    bt_key a = {key, (uint32_t)klen, 0}, b = {key, (uint32_t)klen, UINT64_MAX};
    READ_ENTER(c, &bt);
    rc = bt_rank(&bt, &a, &lo);
    if (rc == 0)
        rc = bt_rank(&bt, &b, &hi);
    cs_read_leave(c, &bt);
    if (rc == 0)
        *count = hi - lo;
    return rc;
}

static int do_records(qs_casket *c, uint64_t *count)
{
    if (!count)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(c, &bt);
    int rc = bt_total(&bt, count);
    cs_read_leave(c, &bt);
    return rc;
}
/* ---- public entry points ---------------------------------------------------- */

int qs_put(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_put(c, key, klen, val, vlen));
}

int qs_put_held(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = cs_enter_call(c);
    if (rc)
        return rc;
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    rc = rec_check_kv(key, klen, val, vlen);
    return cs_return(c, rc ? rc : cs_write_held_commit(c, put_fn, &a));
}

int qs_putkeep(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_putkeep(c, key, klen, val, vlen));
}

int qs_putdup(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, rec_putdup(c, key, klen, val, vlen));
}

int qs_putdup_many(qs_casket *c, size_t n, const void *keys, const uint64_t *koff,
                   const void *vals, const uint64_t *voff)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_putdup_many(c, n, keys, koff, vals, voff));
}

int qs_out(qs_casket *c, const void *key, size_t klen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_out(c, key, klen));
}

int qs_outlist(qs_casket *c, const void *key, size_t klen, uint64_t *removed)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_outlist(c, key, klen, removed));
}

int qs_get(qs_casket *c, const void *key, size_t klen, void **val, size_t *vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_get(c, key, klen, val, vlen));
}

int qs_get_into(qs_casket *c, const void *key, size_t klen, void *buf, size_t cap,
                size_t *vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_get_into(c, key, klen, buf, cap, vlen, 1));
}

int qs_get_nowait(qs_casket *c, const void *key, size_t klen, void *buf, size_t cap,
                  size_t *vlen)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_get_into(c, key, klen, buf, cap, vlen, 0));
}

int qs_getdup(qs_casket *c, const void *key, size_t klen, void **outp, size_t *outlen,
              uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_getdup(c, key, klen, outp, outlen, count));
}

int qs_count(qs_casket *c, const void *key, size_t klen, uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_count(c, key, klen, count));
}

int qs_records(qs_casket *c, uint64_t *count)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_records(c, count));
}
