/* qorder.h -- delayed items and priority runs of a queue (qorder.c, qo_
 * prefix): the queue layer's second and third kind of item record.
 *
 * Layout, in NS_QUEUE beside queue.c's ("q" + name, id) run:
 *   ("r" + u16 nlen + name + lvl, id)        an item of priority 9 - lvl
 *                                             (lvl 0..8: priorities 9..1)
 *   ("d" + u16 nlen + name + due + lvl, id)  a delayed item, due at `due`
 *                                             (u64 big-endian, ns of
 *                                             CLOCK_REALTIME), of priority
 *                                             9 - lvl (lvl 9: priority 0)
 * The value is the item's value, unchanged (queue.c's tag byte and what
 * follows): these files only move it between keys.  The name's length
 * makes one name's runs contiguous (no name's key is a prefix of another
 * name's), so each kind is counted with two rank descents; ascending lvl
 * is descending priority, and the delayed index is in due order, then
 * lvl, then id.  Every function works in the writer's view of bt unless
 * it says otherwise and returns 0 or an error code of the tree. */
#ifndef QS_QORDER_H
#define QS_QORDER_H
#include "btree.h"
#include "qstore.h"

#define QO_MAX_PRIORITY 9
/* Run index of the plain run ("q" + name), priority 0; runs 0..8 are the
 * priority runs, highest priority first. */
#define QO_MAIN 9
#define QO_KEY_MAX (1 + 2 + QS_MAX_QUEUE_NAME + 8 + 1)

/* A queue's priority and delayed items: committed counts and the open
 * transaction's change to them (both also in the queue's total). */
typedef struct qo_state {
    uint64_t cprio, cdelay;
    int64_t dprio, ddelay;
} qo_state;

/* Whether the queue holds priority items / delayed items in the writer's
 * view (a queue that never had either pays these two tests). */
static inline int qo_has_prio(const qo_state *s) { return (int64_t)s->cprio + s->dprio > 0; }
static inline int qo_has_delayed(const qo_state *s)
{
    return (int64_t)s->cdelay + s->ddelay > 0;
}

/* A run being read: its index and key. */
typedef struct qo_run {
    int run;
    uint32_t klen;
    const uint8_t *key;
    const uint8_t *qkey;        /* the queue's "q" + name */
    uint32_t qklen;
    uint8_t buf[QO_KEY_MAX];
} qo_run;

/* The committed counts of queue qkey's priority and delayed items (in
 * bt's view) into s (its changes zeroed); *extra gets their sum. */
int qo_count(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t *extra);

/* Folds the transaction's changes in (committed) or drops them. */
void qo_txn_end(qo_state *s, int committed);

/* Positions r on the first run that holds items, highest priority first:
 * the plain run when the queue has no priority items (no seek). */
int qo_run_first(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *s, qo_run *r);

/* Moves r to the next run after it that holds items (the plain run last).
 * @return 0, QS_NOTFOUND (r was on the plain run), or a tree error. */
int qo_run_next(bt_ctx *bt, qo_run *r);

/* Priority -> run index (priority 0 is QO_MAIN). */
static inline int qo_run_of(int priority) { return QO_MAX_PRIORITY - priority; }

/* The key of run `run` of queue qkey into out (QO_KEY_MAX bytes); its
 * length. */
uint32_t qo_run_key(const uint8_t *qkey, uint32_t qklen, int run, uint8_t *out);

/* The key of the delayed index of queue qkey for due time due_ns and run
 * `run` into out; its length. */
uint32_t qo_delay_key(const uint8_t *qkey, uint32_t qklen, uint64_t due_ns, int run,
                      uint8_t *out);

/* Moves every delayed item of queue qkey due at now_ns or before into its
 * run at its id; *moved gets how many, *next_due the due time of the first
 * one left (UINT64_MAX: none).  s is kept up to date. */
int qo_promote(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t now_ns,
               size_t *moved, uint64_t *next_due);

/* Positions path on item id of queue qkey, in whichever run holds it;
 * *run gets that run.  QS_CORRUPT when no run holds it (the caller knows
 * it is there). */
int qo_seek_item(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *s, uint64_t id,
                 bt_path *path, int *run);

/* Positions path on delayed item id of queue qkey, looking through the
 * queue's delayed index in due order (it is keyed by due time, not id:
 * for reads of one item such as qs_queue_item_info, not for hot paths).
 * @return 0, QS_NOTFOUND (no delayed item id), or a btree error. */
int qo_seek_delayed(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, uint64_t id, bt_path *path);

/* Moves item id of queue qkey from its run into the delayed index, due at
 * due_ns, keeping its value and priority. */
int qo_delay_item(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s, uint64_t id,
                  uint64_t due_ns);

/* Removes every delayed item of queue qkey; *removed gets how many. */
int qo_clear_delayed(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, qo_state *s,
                     uint64_t *removed);

/* Names of the queues that hold priority or delayed items, sorted
 * (qo_name_cmp) and distinct; the caller frees them with qo_names_free. */
typedef struct qo_name {
    uint8_t *p;
    uint32_t len;
} qo_name;
typedef struct qo_names {
    qo_name *at;
    size_t n, cap;
} qo_names;
/* @fail *l empty (nothing to free). */
int qo_names_get(bt_ctx *bt, qo_names *l);
void qo_names_free(qo_names *l);

/* Name order (bytes, a name before any longer one it begins): <0, 0, >0. */
int qo_name_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl);

/* A read of every item of a queue in id order, whatever its run, delayed
 * ones included (the delayed index is read whole at the start).  st: the
 * queue's committed counts in bt's view (qo_count).  qo_scan_next
 * positions path on the record of the next item, *id its id (QS_NOTFOUND:
 * no more).  bt must not change meanwhile. */
typedef struct qo_scan qo_scan;
int qo_scan_begin(bt_ctx *bt, const uint8_t *qkey, uint32_t qklen, const qo_state *st,
                  uint64_t after, qo_scan **out);
int qo_scan_next(bt_ctx *bt, qo_scan *s, bt_path *path, uint64_t *id);
void qo_scan_end(qo_scan *s);

/* kind + u16 big-endian name length + name: the prefix of every key of
 * one kind of one queue (qdedup.h's too); its length. */
uint32_t qo_prefix(uint8_t kind, const uint8_t *qkey, uint32_t qklen, uint8_t *out);

/* Inserts record (key, id) -> v. */
int qo_insert_at(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t id, const bt_buf *v);

/* Seeks (key, id): *found whether path is on it (0, with path where it
 * would go, when absent). */
int qo_seek_at(bt_ctx *bt, const uint8_t *key, uint32_t klen, uint64_t id, bt_path *path,
               int *found);

/* Big-endian u64 (the due times in keys, which sort as numbers). */
static inline void qo_be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint64_t qo_be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The wall clock delays are measured on, ns since the epoch
 * (CLOCK_REALTIME, or the time qs_test_set_clock set). */
uint64_t qo_now_ns(void);

/* due time of a delay of `delay` seconds from now_ns (saturating). */
uint64_t qo_due(uint64_t now_ns, double delay);

#endif
