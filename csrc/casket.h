/* casket.h -- what the layers above the transaction layer (the records,
 * the queues) call (cs_ prefix): cs_write, cs_read_enter, the call
 * accounting, the accessors, and cs_layer, through which they are called
 * back.  The handle's struct is not here: it is private to the casket's own
 * files (handle.h).  Not public: the public interface is qstore.h. */
#ifndef QS_CASKET_H
#define QS_CASKET_H
#include "qstore.h"
#include "btree.h"
#include "pager.h"
#include "shm.h"
#include <pthread.h>
#include <stdatomic.h>

#define NS_USER 0       /* the record API's namespace */
#define NS_QUEUE 1      /* queue items, shared payloads and their counts */

/* A layer above the transaction layer that keeps state of its own per
 * handle (the records' buffered putdups, the queue registry) registers
 * these with cs_layer_add; the transaction layer calls them back, the way
 * SQLite's pager calls its xReiniter, so it never calls up by name.  Any
 * may be NULL.  Each gets the handle and the state given at registration. */
typedef struct cs_layer {
    /* Applies work buffered for the calling thread's transaction (it holds
     * the write lock; the operation mutex is not held): called before that
     * transaction commits and before it reads or writes, once the layer
     * said so with cs_flush_due.  0 or the error, which spoils the
     * transaction if it is not a refusal. */
    int (*flush)(qs_casket *c, void *state);
    /* The writer's transaction ended: committed 1, aborted 0 (mu held). */
    void (*txn_end)(qs_casket *c, void *state, int committed);
    /* Other handles committed: what was counted in the committed view is
     * stale (mu held). */
    void (*refresh)(qs_casket *c, void *state);
    /* The pages changed wholesale: compaction (mu held). */
    void (*invalidate)(qs_casket *c, void *state);
    /* The handle is closing, holding the write lock, with a region. */
    void (*close)(qs_casket *c, void *state);
    /* The handle is closing: wake every caller blocked in the layer, who
     * then returns QS_CLOSED (mu held). */
    void (*wake)(qs_casket *c, void *state);
    /* Releases the state (no call is running). */
    void (*free)(qs_casket *c, void *state);
    /* After an abort whose txn_end asked for it (cs_followup_due): runs in
     * a transaction of its own, still holding the write lock the aborted
     * one held, before anyone else can write, with mu held (bt: the
     * writer's view, the user namespace, as for cs_write).  That
     * transaction commits (and syncs, with sync on) when every layer's
     * follow-up returned 0, else it aborts; txn_end runs for it as for any
     * other.  What must outlive an abort (a queue reserve's delivery
     * count) is written here. */
    int (*followup)(qs_casket *c, bt_ctx *bt, void *state);
    /* Whether rc, returned by one of the layer's cs_write functions,
     * refuses the operation without touching anything: such a result does
     * not spoil the transaction it ran in, nor a group commit. */
    int (*refused)(int rc);
} cs_layer;

#define CS_LAYERS 4     /* records, queues, asynchronous waiters, streams */



/* Runs fn in the writer's view (bt is the user namespace; fn may build a
 * context for another namespace over bt->p): inside the calling thread's
 * transaction, or as a transaction of its own that commits when fn returns
 * 0 and aborts otherwise.  fn runs with the operation mutex held. */
typedef int (*cs_write_fn)(qs_casket *c, bt_ctx *bt, void *arg);
int cs_write(qs_casket *c, cs_write_fn fn, void *arg);

/* cs_write that never waits for the write lock: QS_LOCKED when another
 * thread or process holds it. */
int cs_write_try(qs_casket *c, cs_write_fn fn, void *arg);

/* cs_write for a caller that may wait for nothing (qs_queue_put_held):
 * fn runs only inside the calling thread's explicit transaction (which
 * holds the write lock already), with no buffered putdups to apply first
 * and the operation mutex free; otherwise QS_WOULDBLOCK, nothing done.
 * fn may still read pages from the file and spill pages to the log. */
int cs_write_held(qs_casket *c, cs_write_fn fn, void *arg);

/* cs_write_held that, outside a transaction, also runs fn as a
 * transaction of its own and commits it, where that waits for nobody:
 * sync off (the commit waits for no fdatasync), no checkpoint due (one
 * that falls due is left to the next call made without the caller's
 * lock), the write lock, the operation mutex and the group of record
 * operations (group.c) free.  Otherwise QS_WOULDBLOCK, nothing done.
 * (qs_put_held.) */
int cs_write_held_commit(qs_casket *c, cs_write_fn fn, void *arg);

/* Takes the operation mutex for a read in the caller's view (the writer's
 * own if it holds the write lock) of namespace ns; cs_read_leave releases
 * it.  cs_read_enter returns 0 or the error of applying buffered putdups
 * (then the mutex is not held). */
int cs_read_enter(qs_casket *c, bt_ctx *bt, int ns);
/* cs_read_enter that never waits for another thread or a checkpoint:
 * QS_WOULDBLOCK (the mutex not held) where cs_read_enter would. */
int cs_read_try_enter(qs_casket *c, bt_ctx *bt, int ns);
void cs_read_leave(qs_casket *c, bt_ctx *bt);

/* Whether the calling thread holds the write lock / has an explicit
 * transaction open. */
int cs_owns(qs_casket *c);
int cs_in_txn(qs_casket *c);

/* The operation mutex for a reader: inside the checkpoint guard, with the
 * committed view brought up to the newest commit of any handle.  Returns 0
 * (held) or the error of catching up (not held). */
int cs_view_lock(qs_casket *c);
void cs_view_unlock(qs_casket *c);

/* Registers layer ops with state (mu held, or before the handle is
 * shared between threads); the callbacks run in registration order.
 * QS_INVAL when CS_LAYERS are registered already. */
int cs_layer_add(qs_casket *c, const cs_layer *ops, void *state);

/* The state registered with ops, NULL if ops is not registered. */
void *cs_layer_state(qs_casket *c, const cs_layer *ops);

/* The calling thread's transaction has work buffered in a layer: its flush
 * runs before the transaction's next read or write and before commit.
 * Once per batch is enough (it stays due until the flush). */
void cs_flush_due(qs_casket *c);

/* Called from a layer's txn_end of an abort: the layers' followup runs
 * once the abort is done.  Returns 1, or 0 when no follow-up will run (the
 * abort is a follow-up's own: the layer must let go of what it kept for
 * it). */
int cs_followup_due(qs_casket *c);

/* Monotonic clock, seconds. */
double cs_now(void);

/* Public-call accounting (see qs_shutdown): every public function enters
 * with cs_enter_call, which returns 0, or the error the call must return:
 * QS_INVAL for a NULL handle, QS_CLOSED once the casket is closed,
 * QS_FORKED in a child process that inherited the handle; after 0 the
 * call leaves with cs_leave_call, or returns through cs_return, which
 * leaves and returns rc:
 *
 *     int rc = cs_enter_call(c);
 *     return rc ? rc : cs_return(c, do_it(c, ...));
 */
int cs_enter_call(qs_casket *c);
void cs_leave_call(qs_casket *c);

static inline int cs_return(qs_casket *c, int rc)
{
    cs_leave_call(c);
    return rc;
}

/* ---- accessors for the layers above (the queue layer reads the handle
 * through these, not through struct qs_casket's fields) ---- */

/* The handle's shared region (its room for the queue's reservations and
 * wake-up words; unmapped, all NULL, without one: read-only media). */
sh_region *cs_region(qs_casket *c);
/* The handle's pager, for a tree context in the committed view (wview 0)
 * while the operation mutex is held. */
pager *cs_pager(qs_casket *c);
/* Whether the handle was opened read-only. */
int cs_readonly(qs_casket *c);
/* Whether the handle works with other handles through its region (0 only
 * for compaction's private scratch casket). */
int cs_shared(qs_casket *c);
/* Whether qs_shutdown has begun: new calls are refused and waits end. */
int cs_closing(qs_casket *c);

#endif
