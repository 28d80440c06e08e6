/* group.c -- grouped commits (gc_ prefix): record operations of several
 * threads, each outside a transaction, applied and committed as one
 * transaction.  Apart from txn.c because it is a scheduling policy over
 * the transaction layer's calls (take the lock, apply, commit, sync), not
 * part of what a transaction is. */
#include "handle.h"
#include "group.h"
#include "txn.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* ---- grouped commits ----------------------------------------------------------
 * A record operation outside a transaction is a transaction of its own.
 * Threads that issue them at the same time queue here; the first in line
 * leads: it takes the write lock once for everyone queued, applies their
 * operations in queue order, commits them as one transaction (one log
 * write and, with sync on, one fdatasync), then hands the lead to whoever
 * queued meanwhile and wakes its group -- in that order, which gather()
 * counts on.  Each operation's result is the
 * same as if it had run alone at its place in the order: it is applied
 * whole or refused, and committed (and synced) before its caller returns.
 * Without this every operation passed the write lock from thread to
 * thread (a sleeper takes ~50 us to wake on these machines), which capped
 * 8 committing threads at ~3.2x one thread. */

#define GROUP_MAX 128   /* operations per group: bounds a follower's wait */
#define GATHER_MIN_US 20
#ifndef GATHER_MAX_US
#define GATHER_MAX_US 500
#endif

typedef struct group_req {
    cs_write_fn fn;
    void *arg;
    int rc;
    int lead;           /* it is this request's turn to lead */
    int done;           /* a leader applied it; rc is its result */
    int spoiled;        /* the leader's own mark: it failed, leave it out */
    int handed;         /* the lead came from the previous leader */
    double deadline;    /* when waiting for another process gives up */
    pthread_cond_t cv;
    struct group_req *next;
} group_req;

/* Applies the group's operations in one transaction (holding the write
 * lock, mu held).  An operation that fails other than by refusing spoils
 * the transaction: it is aborted, that operation gets its error, and the
 * rest are applied again without it.  Returns whether any is left to
 * commit. */
static int apply_group(qs_casket *c, group_req *batch)
{
    for (;;) {
        pg_begin(&c->pg);
        bt_ctx bt = {&c->pg, 1, NS_USER};
        group_req *spoiler = NULL;
        int live = 0;
        for (group_req *r = batch; r; r = r->next) {
            if (r->spoiled)
                continue;
            r->rc = r->fn(c, &bt, r->arg);
            c->version++;
            int trc = pg_trim(&c->pg, 1);
            if (r->rc == 0 && trc)
                r->rc = trc;
            if (r->rc && !tx_refused(c, r->rc)) {
                spoiler = r;
                break;
            }
            live += r->rc == 0;
        }
        if (!spoiler)
            return live;
        spoiler->spoiled = 1;
        pthread_mutex_unlock(&c->mu);
        tx_abort_locked(c);
        pthread_mutex_lock(&c->mu);
    }
}

static void pass_lead(qs_casket *c)
{
    pthread_mutex_lock(&c->gmu);
    if (c->ghead) {
        c->ghead->lead = c->ghead->handed = 1;
        pthread_cond_signal(&c->ghead->cv);
    } else
        c->gleader = 0;
    pthread_mutex_unlock(&c->gmu);
}

/* With sync on, waits for the callers worth having in the next group. */
static void gather(qs_casket *c, group_req *me)
{
    pthread_mutex_lock(&c->gmu);
    /* The last group's callers were woken as its sync ended and are about
     * to queue again; those queued now came while it ran. */
    int want = c->gprev + (me->handed ? c->gqueued : 0);
    if (want > GROUP_MAX)
        want = GROUP_MAX;
    if (c->gprev > 1 && c->gqueued < want) {
        /* Bounded by the device: callers that take longer than a few syncs
         * to come back are better served by the next group (a thread that
         * writes now and then must not hold up one that writes all the
         * time, and a device that syncs in microseconds must not wait
         * hundreds of them). */
        int64_t cap = 8 * __atomic_load_n(&c->last_sync_us, __ATOMIC_RELAXED);
        if (cap < GATHER_MIN_US)
            cap = GATHER_MIN_US;
        if (cap > GATHER_MAX_US)
            cap = GATHER_MAX_US;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += cap * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        c->gwant = want;
        while (c->gqueued < want)
            if (pthread_cond_timedwait(&c->gcond, &c->gmu, &ts) != 0)
                break;
        c->gwant = 0;
    }
    pthread_mutex_unlock(&c->gmu);
}

/* Leads the group that starts with me (the queue's head). */
static int lead_group(qs_casket *c, group_req *me)
{
    int sync = atomic_load(&c->sync);
    if (sync)
        gather(c, me);
    double left = me->deadline - cs_now();
    int rc = tx_writer_enter_opt(c, 1, left > 0 ? left : 0);
    if (rc == 0 && (rc = tx_heal(c)) != 0)
        tx_writer_leave(c);
    /* Take the queue as it is now (me first); later arrivals form the
     * next group.  When the lock could not be had, only I give up: the
     * next in line tries with its own deadline. */
    pthread_mutex_lock(&c->gmu);
    group_req *batch = me, *last = me;
    int taken = 1;
    for (; rc == 0 && last->next && taken < GROUP_MAX; taken++)
        last = last->next;
    c->ghead = last->next;
    if (!c->ghead)
        c->gtail = NULL;
    last->next = NULL;
    c->gqueued -= taken;
    c->gprev = rc == 0 ? taken : 0;
    pthread_mutex_unlock(&c->gmu);

    uint64_t lsn = 0;
    int crc = rc;
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        int live = apply_group(c, batch);
        pthread_mutex_unlock(&c->mu);
        if (live)
            crc = tx_commit_release(c, &lsn);
        else {
            tx_abort_locked(c);
            tx_writer_leave(c);
        }
    } else
        me->rc = rc;

    if (crc == 0 && lsn)
        crc = tx_group_sync(c, lsn);
    pass_lead(c);
    for (group_req *r = batch, *next; r; r = next) {
        next = r->next;
        if (rc == 0 && r->rc == 0)
            r->rc = crc;
        if (r == me)
            continue;
        pthread_mutex_lock(&c->gmu);
        r->done = 1;
        pthread_cond_signal(&r->cv);  /* r may be gone once we unlock */
        pthread_mutex_unlock(&c->gmu);
    }
    return me->rc;
}

/* cs_write for record operations: grouped with other threads' when run
 * outside a transaction. */
int gc_write(qs_casket *c, cs_write_fn fn, void *arg)
{
    if (c->readonly)
        return QS_READONLY;
    if (cs_owns(c))
        return cs_write(c, fn, arg);
    group_req me = {.fn = fn, .arg = arg, .deadline = cs_now() + c->lock_timeout};
    pthread_cond_init(&me.cv, NULL);
    pthread_mutex_lock(&c->gmu);
    if (c->gtail)
        c->gtail->next = &me;
    else
        c->ghead = &me;
    c->gtail = &me;
    if (++c->gqueued >= c->gwant && c->gwant)
        pthread_cond_signal(&c->gcond);
    if (!c->gleader)
        c->gleader = me.lead = 1;
    while (!me.lead && !me.done)
        pthread_cond_wait(&me.cv, &c->gmu);
    int led = me.lead && !me.done;
    pthread_mutex_unlock(&c->gmu);
    int rc = led ? lead_group(c, &me) : me.rc;
    pthread_cond_destroy(&me.cv);
    return rc;
}
