/* txn.h -- the transaction layer (txn.c, tx_ prefix) as the casket's other
 * files see it: the write lock, commits, checkpoints.  The layers above
 * the casket (queue.c) use the cs_ calls of casket.h instead. */
#ifndef QS_TXN_H
#define QS_TXN_H
#include "handle.h"

/* The write lock: the in-process one, then the process lock.  Waits up to
 * the handle's lock timeout (tx_writer_enter) or timeout seconds (wait 0:
 * not at all) for another thread's transaction; 0 or QS_LOCKED, QS_CLOSED,
 * or the error of catching up with other processes (nothing held). */
int tx_writer_enter(qs_casket *c);
int tx_writer_enter_opt(qs_casket *c, int wait, double timeout);
void tx_writer_leave(qs_casket *c);

/* Takes the cross-process write lock for the thread holding the
 * in-process one and brings the writer up to date (see txn.c). */
int tx_process_lock(qs_casket *c, double timeout);

/* Aborts the open transaction (write lock held; it stays held). */
void tx_abort_locked(qs_casket *c);

/* Commits the open transaction and releases the write lock without waiting
 * for the sync: *sync_lsn is then what to pass to tx_group_sync, or 0.  On
 * failure the transaction is aborted and the lock released. */
int tx_commit_release(qs_casket *c, uint64_t *sync_lsn);

/* Waits until the log is durable up to lsn; one waiter syncs for all. */
int tx_group_sync(qs_casket *c, uint64_t lsn);

/* The keep for tx_checkpoint that leaves the log file as long as the log
 * may grow before the next checkpoint (+ 1 MiB), so that it is not grown
 * again in every generation. */
uint64_t tx_log_keep(const qs_casket *c);

/* Checkpoints, holding the write lock with no transaction open, and leaves
 * the log at most keep bytes long.  QS_LOCKED: put off (readers, a
 * snapshot); the log is as it was. */
int tx_checkpoint(qs_casket *c, uint64_t keep);

/* Retries a log restart that failed (write lock held): 0 once commits may
 * be written again, else the error that forbids them. */
int tx_heal(qs_casket *c);

/* Publishes our newest commit or checkpoint to other handles (mu held). */
void tx_publish(qs_casket *c);

/* Whether rc refuses an operation without touching anything (the
 * transaction it ran in stays good): some layer's cs_layer.refused says so. */
int tx_refused(qs_casket *c, int rc);

/* Calls one of the layers' callbacks (cs_layer) for every layer that has
 * it, in registration order. */
typedef enum { TX_REFRESH, TX_INVALIDATE, TX_CLOSE, TX_WAKE, TX_FREE } tx_event;
void tx_layers_call(qs_casket *c, tx_event ev);

/* Runs fn in the writer's view, waiting for the write lock (wait 1) or not
 * (wait 0); does not apply buffered putdups first (cs_write does). */
int tx_write_core(qs_casket *c, cs_write_fn fn, void *arg, int wait);

/* qs_begin, qs_commit (wait_sync 1) or qs_commit_nosync (0), qs_abort
 * without the call accounting (c is not NULL: the public entry checked it). */
int tx_begin(qs_casket *c);
int tx_commit(qs_casket *c, int wait_sync);
int tx_abort(qs_casket *c);

/* cs_read_enter for the user namespace that returns its error from the
 * calling function. */
#define READ_ENTER(c, bt)                                                                 \
    do {                                                                                  \
        int enter_rc_ = cs_read_enter((c), (bt), NS_USER);                                \
        if (enter_rc_)                                                                    \
            return enter_rc_;                                                             \
    } while (0)

/* Clears the calling thread's qs_locked_by (an open names nobody). */
void tx_locked_by_nobody(void);

#endif
