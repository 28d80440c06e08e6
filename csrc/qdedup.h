/* qdedup.h -- a queue's dedup keys (qdedup.c, qk_ prefix): the records
 * that let a keyed put (qs_queue_put_keyed) find the item an earlier put
 * with the same key stored.
 *
 * Layout, in NS_QUEUE beside the queue's items:
 *   ("k" + u16 nlen + name + key, 0)             u64 id | u64 put time
 *                                                 (little-endian; ns of
 *                                                 the queue clock)
 *   ("w" + u16 nlen + name + 0x00, id)            u64 put time | key: the
 *                                                 keyed items still in the
 *                                                 queue, by id
 *   ("w" + u16 nlen + name + 0x01 + due, id)      key: keys whose item left
 *                                                 the queue, kept until
 *                                                 `due` (u64 big-endian,
 *                                                 put time + the window)
 * A key is a duplicate while its item is in the queue (a "w" 0x00 record,
 * whatever run or reservation holds it) or its put time is within the
 * queue's dedup window.  When a keyed item leaves (taken, acked, cleared,
 * dead-lettered) qk_gone moves its "w" record to the expiry index, or
 * drops the key when the window has passed; qk_prune, run by every keyed
 * put, drops a few expired keys from the front of that index, so no put
 * walks every key.  Every function works in bt's view and returns 0 or an
 * error code of the tree. */
#ifndef QS_QDEDUP_H
#define QS_QDEDUP_H
#include "btree.h"
#include "qstore.h"

/* A queue's keyed items ("w" 0x00 records): committed count and the open
 * transaction's change. */
typedef struct qk_state {
    uint64_t ckeyed;
    int64_t dkeyed;
} qk_state;

/* Whether the queue may hold keyed items in the writer's view: a queue
 * that never had one pays this test when an item leaves. */
static inline int qk_any(const qk_state *s) { return (int64_t)s->ckeyed + s->dkeyed > 0; }

/* The committed count of queue qkey's keyed items into s (change zeroed). */
int qk_count(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s);

/* Folds the transaction's change in (committed) or drops it. */
void qk_txn_end(qk_state *s, int committed);

/* Whether key (1..QS_MAX_DEDUP_KEY bytes) of queue qkey is a duplicate at
 * now_ns with a window of `window` seconds: *dup 1 and *id the first
 * item's id, or *dup 0 (*id then unspecified). */
int qk_find(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const uint8_t *key, uint32_t klen,
            uint64_t now_ns, double window, uint64_t *id, int *dup);

/* Records key for the new item id, put at now_ns (replacing a key record
 * left by an item whose window passed). */
int qk_add(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s, const uint8_t *key,
           uint32_t klen, uint64_t id, uint64_t now_ns);

/* Item id left queue qkey (a no-op for an item without a key): its key
 * is kept until put time + window, or dropped when that is not after
 * now_ns.  Moves bt's records: a path into the queue is not valid after. */
int qk_gone(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qk_state *s, uint64_t id,
            double window, uint64_t now_ns);

/* Drops up to max keys of queue qkey whose time ran out by now_ns. */
int qk_prune(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, uint64_t now_ns, size_t max);

#endif
