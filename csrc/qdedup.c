/* qdedup.c -- a queue's dedup keys (qk_ prefix; the layout is in
 * qdedup.h).  queue.c calls in for keyed puts, and when an item leaves a
 * queue that holds keyed items (its qk_state says so), so a queue without
 * keys reads nothing here. */
#include "qdedup.h"
#include "qorder.h"
#include "pagefmt.h"
#include <stdlib.h>
#include <string.h>

#define KEY_DEDUP 'k'
#define KEY_WHEN 'w'
#define W_LIVE 0x00
#define W_GONE 0x01
#define QK_KEY_MAX (3 + QS_MAX_QUEUE_NAME + QS_MAX_DEDUP_KEY)

static uint32_t dedup_key(const uint8_t *qkey, uint32_t qklen, const uint8_t *key, uint32_t klen,
                          uint8_t *out)
{
    uint32_t n = qo_prefix(KEY_DEDUP, qkey, qklen, out);
    memcpy(out + n, key, klen);
    return n + klen;
}

/* The key record of key: *found, and its id and put time. */
static int read_key(bt_ctx *bt, const uint8_t *kk, uint32_t kkl, bt_path *path, int *found,
                    uint64_t *id, uint64_t *put_ns)
{
    int rc = qo_seek_at(bt, kk, kkl, 0, path, found);
    if (rc || !*found)
        return rc;
    bt_buf v = {0};
    if ((rc = bt_read(bt, path, NULL, &v, 0, NULL)) == 0 && v.len != 16)
        rc = QS_CORRUPT;
    if (rc == 0) {
        *id = rd64(v.data);
        *put_ns = rd64(v.data + 8);
    }
    free(v.data);
    return rc;
}

int qk_count(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s)
{
    uint8_t p[QK_KEY_MAX];
    uint32_t n = qo_prefix(KEY_WHEN, qkey, qklen, p);
    p[n] = W_LIVE;
    bt_key lo = {p, n + 1, 0}, hi = {p, n + 1, UINT64_MAX};
    uint64_t a, b;
    int rc = bt_rank(bt, &lo, &a);
    if (rc == 0 && (rc = bt_rank(bt, &hi, &b)) == 0) {
        /* hi counts the records up to and including (p, UINT64_MAX) */
        s->ckeyed = b - a;
        s->dkeyed = 0;
    }
    return rc;
}

void qk_txn_end(qk_state *s, int committed)
{
    if (committed)
        s->ckeyed = (uint64_t)((int64_t)s->ckeyed + s->dkeyed);
    s->dkeyed = 0;
}

/* Whether item id of queue qkey still has its live record. */
static int live(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, uint64_t id, int *found)
{
    uint8_t p[QK_KEY_MAX];
    uint32_t n = qo_prefix(KEY_WHEN, qkey, qklen, p);
    p[n] = W_LIVE;
    bt_path path;
    return qo_seek_at(bt, p, n + 1, id, &path, found);
}

int qk_find(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const uint8_t *key, uint32_t klen,
            uint64_t now_ns, double window, uint64_t *id, int *dup)
{
    uint8_t kk[QK_KEY_MAX];
    uint32_t kkl = dedup_key(qkey, qklen, key, klen, kk);
    uint64_t put_ns = 0;
    bt_path path;
    int found;
    *dup = 0;
    int rc = read_key(bt, kk, kkl, &path, &found, id, &put_ns);
    if (rc || !found)
        return rc;
    if (now_ns < qo_due(put_ns, window)) {
        *dup = 1;
        return 0;
    }
    return live(bt, qkey, qklen, *id, dup);
}

int qk_add(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s, const uint8_t *key,
           uint32_t klen, uint64_t id, uint64_t now_ns)
{
    uint8_t kk[QK_KEY_MAX], v[8 + QS_MAX_DEDUP_KEY];
    uint32_t kkl = dedup_key(qkey, qklen, key, klen, kk);
    uint64_t old_id, old_put;
    bt_path path;
    int found, rc = read_key(bt, kk, kkl, &path, &found, &old_id, &old_put);
    /* a stale key's expiry record, if any, is dropped by qk_prune: it no
     * longer names this key's item */
    if (rc == 0 && found)
        rc = bt_delete(bt, &path);
    if (rc)
        return rc;
    wr64(v, id);
    wr64(v + 8, now_ns);
    bt_buf kv = {v, 16, 16};
    if ((rc = qo_insert_at(bt, kk, kkl, 0, &kv)) != 0)
        return rc;
    uint32_t n = qo_prefix(KEY_WHEN, qkey, qklen, kk);
    kk[n] = W_LIVE;
    wr64(v, now_ns);
    memcpy(v + 8, key, klen);
    kv.len = 8 + (size_t)klen;
    if ((rc = qo_insert_at(bt, kk, n + 1, id, &kv)) != 0)
        return rc;
    s->dkeyed++;
    return 0;
}

/* Drops the key record of key when it still names item id. */
static int drop_key(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const uint8_t *key,
                    uint32_t klen, uint64_t id)
{
    uint8_t kk[QK_KEY_MAX];
    uint32_t kkl = dedup_key(qkey, qklen, key, klen, kk);
    uint64_t kid = 0, put_ns;
    bt_path path;
    int found, rc = read_key(bt, kk, kkl, &path, &found, &kid, &put_ns);
    if (rc == 0 && found && kid == id)
        rc = bt_delete(bt, &path);
    return rc;
}

int qk_gone(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s, uint64_t id,
            double window, uint64_t now_ns)
{
    uint8_t p[QK_KEY_MAX];
    uint32_t n = qo_prefix(KEY_WHEN, qkey, qklen, p);
    p[n] = W_LIVE;
    bt_path path;
    int found, rc = qo_seek_at(bt, p, n + 1, id, &path, &found);
    if (rc || !found)
        return rc;
    bt_buf v = {0};
    if ((rc = bt_read(bt, &path, NULL, &v, 0, NULL)) == 0 &&
        (v.len <= 8 || v.len > 8 + QS_MAX_DEDUP_KEY))
        rc = QS_CORRUPT;
    if (rc == 0)
        rc = bt_delete(bt, &path);
    if (rc == 0) {
        s->dkeyed--;
        uint64_t due = qo_due(rd64(v.data), window);
        uint32_t klen = (uint32_t)(v.len - 8);
        if (due <= now_ns) {
            rc = drop_key(bt, qkey, qklen, v.data + 8, klen, id);
        } else {
            p[n] = W_GONE;
            qo_be64_put(p + n + 1, due);
            bt_buf kv = {v.data + 8, klen, klen};
            rc = qo_insert_at(bt, p, n + 9, id, &kv);
        }
    }
    free(v.data);
    return rc;
}

int qk_prune(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, uint64_t now_ns, size_t max)
{
    uint8_t p[QK_KEY_MAX];
    uint32_t n = qo_prefix(KEY_WHEN, qkey, qklen, p);
    p[n] = W_GONE;
    bt_key pk = {p, n + 1, 0};
    bt_buf k = {0}, v = {0};
    bt_path path;
    uint64_t id;
    int rc = 0;
    for (size_t i = 0; i < max; i++) {
        k.len = v.len = 0;
        if ((rc = bt_seek_ge(bt, &pk, &path)) != 0 ||
            (rc = bt_read(bt, &path, &k, &v, 0, &id)) != 0)
            break;
        if (k.len != n + 9 || memcmp(k.data, p, n + 1) != 0 || qo_be64_get(k.data + n + 1) > now_ns)
            break;      /* past this queue's expiry index, or not due */
        if (v.len == 0 || v.len > QS_MAX_DEDUP_KEY) {
            rc = QS_CORRUPT;
            break;
        }
        if ((rc = bt_delete(bt, &path)) != 0 ||
            (rc = drop_key(bt, qkey, qklen, v.data, (uint32_t)v.len, id)) != 0)
            break;
    }
    free(k.data);
    free(v.data);
    return rc == QS_NOTFOUND ? 0 : rc;
}
