/* qkit.h -- what the queue module's files (queue.c, stream.c) share: the
 * name hash that picks a wake-up word, the builder of the qs_items a call
 * hands out, an exact seek, and the check of a run of values.  Static
 * inline, so the queue's hot paths call them as before they moved. */
#ifndef QS_QKIT_H
#define QS_QKIT_H
#include "casket.h"
#include <stdlib.h>
#include <string.h>

static inline uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* An output under construction: payloads, ids, offsets. */
typedef struct outbuf {
    bt_buf data;
    uint64_t *ids, *off;
    size_t n, cap;
    uint64_t same;          /* the common length so far, UINT64_MAX: none */
} outbuf;

static inline int out_begin(outbuf *o)
{
    if (o->n + 2 > o->cap) {
        size_t ncap = o->cap ? o->cap * 2 : 16;
        uint64_t *a = realloc(o->ids, ncap * sizeof *a);
        if (!a)
            return QS_NOMEM;
        o->ids = a;
        uint64_t *b = realloc(o->off, ncap * sizeof *b);
        if (!b)
            return QS_NOMEM;
        o->off = b;
        o->cap = ncap;
    }
    if (o->n == 0)
        o->off[0] = o->data.len;
    return 0;
}

static inline void out_end(outbuf *o, uint64_t id)
{
    o->ids[o->n++] = id;
    o->off[o->n] = o->data.len;
    uint64_t len = o->off[o->n] - o->off[o->n - 1];
    if (o->n == 1)
        o->same = len;
    else if (o->same != len)
        o->same = UINT64_MAX;
}

static inline void out_drop(outbuf *o)
{
    free(o->data.data);
    free(o->ids);
    free(o->off);
    memset(o, 0, sizeof *o);
}

/* Hands the output over in *it, allocated by the caller BEFORE the
 * operation: once a get has committed, nothing may fail. */
static inline int out_finish(outbuf *o, uint64_t token, qs_items *it, qs_items **out)
{
    if (!o->off && !(o->off = calloc(1, sizeof *o->off))) {
        /* only an empty list gets here: nothing was consumed */
        free(it);
        out_drop(o);
        return QS_NOMEM;
    }
    it->count = o->n;
    it->ids = o->ids;
    it->off = o->off;
    it->data = o->data.data;
    it->token = token;
    it->same_size = o->n ? o->same : 0;
    *out = it;
    return 0;
}

/* Hands over what a read (nothing consumed) collected, rc its outcome. */
static inline int out_read(outbuf *o, int rc, qs_items **out)
{
    qs_items *it = rc ? NULL : calloc(1, sizeof *it);
    if (rc == 0 && !it)
        rc = QS_NOMEM;
    if (rc) {
        out_drop(o);
        return rc;
    }
    return out_finish(o, 0, it, out);
}

/* Seeks the record (key, seq) exactly. */
static inline int seek_exact(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t seq, bt_path *path)
{
    bt_key pk = {key, klen, seq};
    uint64_t got;
    int eq, rc = bt_seek_ge(bt, &pk, path);
    if (rc == QS_NOTFOUND)
        return QS_CORRUPT;
    if (rc || (rc = bt_key_is(bt, path, key, klen, &eq)) != 0 ||
        (rc = bt_read(bt, path, NULL, NULL, 0, &got)) != 0)
        return rc;
    return eq && got == seq ? 0 : QS_CORRUPT;
}

static inline int check_vals(size_t n, const void *vals, size_t vals_len, const uint32_t *lens)
{
    if (n && !lens)
        return QS_INVAL;
    if (!vals && vals_len)
        return QS_INVAL;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] > (uint64_t)QS_MAX_VALUE - 1)
            return QS_TOOBIG;
        total += lens[i];
    }
    return total == vals_len ? 0 : QS_INVAL;
}

#endif
