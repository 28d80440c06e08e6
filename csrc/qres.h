/* qres.h -- the queue module's shared state in the region NAME-shm (qr_
 * prefix: queue, region): wake-up words for blocked queue readers and the
 * reservations of queue items, seen by every process.  It lives in the
 * room shm.c keeps for the layer above (shm.h), which it alone reads.
 * Not thread-safe by itself: queue.c calls it under the casket's operation
 * mutex, and changes reservations holding the write lock. */
#ifndef QS_QRES_H
#define QS_QRES_H
#include "shm.h"

#define QR_BUCKETS 256          /* wake-up words, by hash of queue name */
#define QR_RES_CAP 65536        /* reservation entries (power of two) */
#define QR_QCAP 4096            /* queues holding reservations (power of two) */
_Static_assert(QR_BUCKETS == SH_UP_SHAPE_A && QR_RES_CAP == SH_UP_SHAPE_B &&
               QR_QCAP == SH_UP_SHAPE_C, "the region's room has our shape");

/* One reserved queue item.  id 0 marks an empty entry (ids start at 1).
 * The holder's pid and the time its reservation was shared are there for
 * the pending list (qs_queue_pending) and claims (qs_queue_claim): the
 * slot's own pid may belong to a newer handle by the time it is read. */
typedef struct qr_res {
    uint64_t id;
    uint64_t qhash;             /* hash of the queue key */
    uint64_t token;
    uint64_t deadline_ns;       /* CLOCK_MONOTONIC; 0: no lease */
    uint64_t reserved_ns;       /* CLOCK_MONOTONIC, when qr_add shared it */
    uint32_t slot, gen;         /* the handle that holds it */
    uint32_t pid;               /* the holder's process */
    /* Nonzero: the reserve was made inside the holder's open transaction,
     * which holds the item's delivery count, count_due, not yet committed
     * (qr_add_due).  A region of version 4 had zero here (padding): a
     * process that ignores the field loses only the count. */
    uint32_t count_due;
} qr_res;

/* Reservations per queue, for exact lengths without a scan, and one run
 * of ids [run_lo, run_hi] (run_lo 0: none) that each have a plain entry
 * (no count_due) of the queue: a taker that meets an id of the run seeks
 * past its end instead of stepping over every reserved item (a get behind
 * 5,000 reserved items).  A reserve shares its ids in order, so the run
 * grows at its ends; a removal inside it keeps the longer side. */
typedef struct qr_qent {
    uint64_t qhash;             /* 0: empty */
    uint64_t count;
    uint64_t min_deadline_ns;   /* earliest lease end of its entries, 0 none */
    uint64_t run_lo, run_hi;
} qr_qent;

/* ---- wake-ups ---------------------------------------------------------------- */

/* A waiter reads the word of its queue's bucket before looking for items,
 * then sleeps until it changes (or until timeout seconds, < 0: no limit).
 * qr_wake changes it and wakes the sleepers, in every process.  qr_wait
 * returns EINTR when a signal handler ran while it slept (it is not
 * restarted: the caller's caller may have to act on the signal), or, at
 * once, when one ran during an earlier futex wait of the thread since
 * qr_wait_begin (the write lock's, which retries): the signal came before
 * the sleep and would not end it.  Else 0.  A waiting call runs
 * qr_wait_begin first, so that a signal an earlier call swallowed (and
 * whose handler has run since) does not end this one. */
uint32_t qr_wait_word(const sh_region *r, uint64_t qhash);
void qr_wait_begin(void);
int qr_wait(sh_region *r, uint64_t qhash, uint32_t word, double timeout);
/* The longest sleep of a qr_wait, in seconds (0: as long as its timeout):
 * a longer wait returns EINTR after that long with the word unchanged,
 * for the caller's caller to notice a signal that ended no sleep
 * (qs_set_wait_slice). */
void qr_set_wait_slice(double seconds);
/* Returns whether anyone, in any process, sleeps on the word or waits on
 * it asynchronously; then the caller tells the asynchronous waiters of its
 * own process (qaio.c), and those of the others with qr_aio_kick.  With
 * nobody waiting it costs what it did before the asynchronous waiters
 * came: one increment and one load. */
int qr_wake(sh_region *r, uint64_t qhash);
/* Wakes every sleeper (closing). */
void qr_wake_all(sh_region *r);

/* ---- asynchronous waiters (qaio.c) ---------------------------------------------
 * A waiter that does not sleep on its word (an event loop's coroutine)
 * counts itself with qr_aio_enter, and only then reads its word
 * (qr_word): a wake that bumped the word before the count was seen is
 * then seen in the word.  While such waiters exist anywhere, qr_wake also
 * bumps the region's async generation word (qr_aio_gen) and wakes its
 * sleepers: the one watcher thread of each process with asynchronous
 * waiters sleeps there, and on a change compares each of its waiters'
 * words with the value it remembered.  qr_aio_leave undoes qr_aio_enter
 * (the waiter was told, or gave up).  A region without a room (no
 * region) has no words: the callers check r->up_words first. */
_Atomic uint32_t *qr_word(sh_region *r, uint64_t qhash);
void qr_aio_enter(sh_region *r, uint64_t qhash);
void qr_aio_leave(sh_region *r, uint64_t qhash);
_Atomic uint32_t *qr_aio_gen(sh_region *r);
/* After a qr_wake that returned 1: bumps the async generation word and
 * wakes the watchers, if asynchronous waiters exist in any process. */
void qr_aio_kick(sh_region *r);

/* ---- reservations (all changes holding the write lock) -------------------------- */

/* (qr_find, qr_count and qr_expire also answer, with nothing reserved, for a
 * handle that has no region: read-only media.)  The first change after a
 * holder died halfway through one rebuilds the tables (qr_add, qr_del,
 * qr_expire and qr_drop_mine check, and every lookup_live of queue.c runs
 * qr_expire before it reads them holding the lock). */
/* The entry of item id of queue qhash, or NULL.  (An id alone is not
 * enough: a published payload has the same id in each of its queues.) */
const qr_res *qr_find(const sh_region *r, uint64_t qhash, uint64_t id);
/* A hint, no effect on any result: starts loading the table slot where
 * (qhash, id) would be looked for first, so that a walk over ascending
 * ids (a reserve, an ack, a commit publishing either) that asks for it a
 * few items later finds it in cache; the table is 3.5 MiB, and each look
 * was a miss to memory. */
void qr_prefetch(const sh_region *r, uint64_t qhash, uint64_t id);
/* Adds one, held by this handle since now; QS_FULL when the table is full
 * (nothing changed).  An entry of (qhash, id) there already is taken over
 * in place, without needing room (a claim). */
int qr_add(sh_region *r, uint64_t id, uint64_t qhash, uint64_t token, uint64_t deadline_ns);
/* qr_add of a reserve made inside an open transaction, whose count is
 * durable only when that transaction commits: the entry carries count_due
 * (the count the reserve wrote, >= 1) and no lease, and hides the item from
 * every other handle until the holder commits (qr_add then replaces it
 * with a plain entry, or qr_del ends it), or, after an abort, has written
 * the count again in a transaction of its own, or dies (whoever next
 * expires the queue takes the entry over and writes the count:
 * qr_expire_due).  QS_FULL as qr_add. */
int qr_add_due(sh_region *r, uint64_t id, uint64_t qhash, uint64_t token, uint32_t count_due);
/* Removes the entry of item id of queue qhash if there is one. */
void qr_del(sh_region *r, uint64_t qhash, uint64_t id);
/* Room for n more entries. */
int qr_room(const sh_region *r, uint64_t n);
/* Whether id lies in the run of queue qhash (see qr_qent): then every id
 * from it to *hi is reserved by a plain entry, hidden from every taker.
 * Read consistently without the write lock; 0 (and *hi untouched) when
 * not, or without a region. */
int qr_run_end(const sh_region *r, uint64_t qhash, uint64_t id, uint64_t *hi);
/* Reservations of a queue, read consistently without the write lock. */
uint64_t qr_count(const sh_region *r, uint64_t qhash, uint64_t *min_deadline_ns);
/* Drops the queue's entries whose lease ended and those of handles that are
 * gone (checked at most every 100 ms unless force); returns how many. */
uint64_t qr_expire(sh_region *r, uint64_t qhash, int force);
/* qr_expire that takes over, instead of dropping, the entries with a
 * count_due whose holder is gone: up to cap of them become this handle's
 * (count_due kept) and are copied to due, *ndue how many; the rest wait
 * for a later sweep, still hiding their items.  qr_expire drops them. */
uint64_t qr_expire_due(sh_region *r, uint64_t qhash, int force, qr_res *due, size_t cap,
                       size_t *ndue);
/* Drops every entry held by our slot (closing) and wakes the readers of
 * each queue that lost one. */
void qr_drop_mine(sh_region *r);
/* Whether qr_expire would look for dead holders now. */
int qr_sweep_due(const sh_region *r);

/* Copies the entries of queue qhash, up to cap of them, into out (in no
 * particular order) and returns how many the queue has (which may be more
 * than cap).  Read without the write lock, inside the seqlock: a copy a
 * change overlapped is taken again, up to a bound, then as it was seen
 * (*torn set; call again holding the write lock for an exact one). */
size_t qr_list(const sh_region *r, uint64_t qhash, qr_res *out, size_t cap, int *torn);

/* Whether the entry belongs to this handle. */
int qr_mine(const sh_region *r, const qr_res *e);

#endif
