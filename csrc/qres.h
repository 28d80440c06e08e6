/* qres.h -- the queue module's shared state in the region NAME-shm
 * (shm.h): wake-up words for blocked queue readers and the reservations of
 * queue items, in every process.  Not thread-safe by itself: queue.c calls
 * it under the casket's operation mutex, and changes reservations holding
 * the write lock. */
#ifndef QS_QRES_H
#define QS_QRES_H
#include "shm.h"

#define SH_BUCKETS 256          /* wake-up words, by hash of queue name */
#define SH_RES_CAP 65536        /* reservation entries (power of two) */
#define SH_QCAP 4096            /* queues holding reservations (power of two) */

/* One reserved queue item.  id 0 marks an empty entry (ids start at 1). */
typedef struct sh_res {
    uint64_t id;
    uint64_t qhash;             /* hash of the queue key */
    uint64_t token;
    uint64_t deadline_ns;       /* CLOCK_MONOTONIC; 0: no lease */
    uint32_t slot, gen;         /* the handle that holds it */
} sh_res;

/* Reservations per queue, for exact lengths without a scan. */
typedef struct sh_qent {
    uint64_t qhash;             /* 0: empty */
    uint64_t count;
    uint64_t min_deadline_ns;   /* earliest lease end of its entries, 0 none */
} sh_qent;

/* ---- wake-ups ---------------------------------------------------------------- */

/* A waiter reads the word of its queue's bucket before looking for items,
 * then sleeps until it changes (or until timeout seconds, < 0: no limit).
 * sh_wake changes it and wakes the sleepers, in every process.  sh_wait
 * returns EINTR when a signal handler ran while it slept (it is not
 * restarted: the caller's caller may have to act on the signal), else 0. */
uint32_t sh_wait_word(const sh_region *r, uint64_t qhash);
int sh_wait(sh_region *r, uint64_t qhash, uint32_t word, double timeout);
void sh_wake(sh_region *r, uint64_t qhash);
/* Wakes every sleeper (closing). */
void sh_wake_all(sh_region *r);

/* ---- reservations (all changes holding the write lock) -------------------------- */

/* (sh_res_find and sh_res_count also answer, with nothing reserved, for a
 * handle that has no region: read-only media.) */
/* The entry of item id of queue qhash, or NULL.  (An id alone is not
 * enough: a published payload has the same id in each of its queues.) */
const sh_res *sh_res_find(const sh_region *r, uint64_t qhash, uint64_t id);
/* Adds one; QS_FULL when the table is full (nothing changed). */
int sh_res_add(sh_region *r, uint64_t id, uint64_t qhash, uint64_t token,
               uint64_t deadline_ns);
/* Removes the entry of item id of queue qhash if there is one. */
void sh_res_del(sh_region *r, uint64_t qhash, uint64_t id);
/* Room for n more entries. */
int sh_res_room(const sh_region *r, uint64_t n);
/* Reservations of a queue, read consistently without the write lock. */
uint64_t sh_res_count(const sh_region *r, uint64_t qhash, uint64_t *min_deadline_ns);
/* Drops the queue's entries whose lease ended and those of handles that are
 * gone (checked at most every 100 ms unless force); returns how many. */
uint64_t sh_res_expire(sh_region *r, uint64_t qhash, int force);
/* Drops every entry held by our slot (closing) and wakes the readers of
 * each queue that lost one. */
void sh_res_drop_mine(sh_region *r);
/* Whether sh_res_expire would look for dead holders now. */
int sh_res_sweep_due(const sh_region *r);

/* Whether the entry belongs to this handle. */
int sh_res_mine(const sh_region *r, const sh_res *e);

#endif
