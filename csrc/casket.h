/* casket.h -- the casket's internals (cs_ prefix): the handle's struct,
 * which the casket's files (casket.c, txn.c, group.c, records.c, cursor.c,
 * maint.c) share, and what the layers above the transaction layer (the
 * records, the queues) call: cs_write, cs_read_enter, the call accounting,
 * and cs_layer, through which they are called back.  Not public: the
 * public interface is qstore.h. */
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
    /* Whether rc, returned by one of the layer's cs_write functions,
     * refuses the operation without touching anything: such a result does
     * not spoil the transaction it ran in, nor a group commit. */
    int (*refused)(int rc);
} cs_layer;

#define CS_LAYERS 2     /* records, queues */

struct qs_casket {
    char *path;
    int fd, log_fd;
    int readonly;
    atomic_int sync;
    pager pg;
    pthread_mutex_t mu;         /* one operation on the pager at a time */
    pthread_mutex_t wmu;        /* the write lock ... */
    pthread_cond_t wcond;
    int wbusy;
    atomic_uint_fast64_t owner; /* ... and the thread id holding it */
    int explicit_txn;           /* set and cleared holding wmu */
    /* The thread owning the explicit transaction, as the kernel knows it,
     * so a writer waiting for it can tell when it has ended (wmu) */
    int txn_tid;                /* kernel thread id */
    uint64_t txn_tid_start;     /* its start time, 0 unknown: ids are reused */
    uint64_t txn_thread;        /* pthread_self(), for messages */
    int txn_error;              /* a failure that spoiled the transaction */
    pthread_mutex_t smu;        /* group commit */
    pthread_cond_t scond;
    uint64_t lsn_base;          /* log sequence of offset 0 of this generation */
    uint64_t lsn_written, lsn_synced;
    int syncing;
    int64_t last_sync_us;       /* how long the last fdatasync of the log took */
    pthread_mutex_t gmu;        /* grouped commits (see write_grouped) */
    struct group_req *ghead, *gtail;
    int gleader;                /* some thread leads a group now */
    pthread_cond_t gcond;       /* a leader gathering waits for gwant queued */
    int gqueued, gwant, gprev;  /* callers queued; size of the last group */
    uint64_t version;           /* bumped whenever any view changes */
    atomic_int calls;           /* public calls in progress */
    atomic_int closed;          /* set by qs_shutdown: new calls refused */
    int fatal;                  /* the log could not be restarted: no commit
                                   may be written until a retry succeeds */
    int defunct;                /* compaction renamed the file but could not
                                   reopen it: writes refused until reopened */
    /* putdups of the open transaction not yet applied to the tree: they are
     * applied in key order, in batches (see rec_flush_pending, records.c) */
    bt_buf pend_keys, pend_vals;
    uint64_t *pend_koff, *pend_voff;
    size_t pend_n, pend_cap;
    uint64_t checkpoint_bytes;
    /* the layers registered with cs_layer_add, in order; flush_due: one
     * of them has work buffered for the open transaction */
    struct {
        const cs_layer *ops;
        void *state;
    } layers[CS_LAYERS];
    int nlayers, flush_due;
    /* other processes (shm.c): shared is 0 only for compaction's private
     * scratch casket */
    int shared;
    sh_region sh;
    uint64_t seen_seq;          /* the shared commit count our view reflects */
    uint64_t wrote_seq;         /* ... right after our last own commit */
    double lock_timeout;
    unsigned perm;              /* qs_options.perm: bits of the files it creates */
    int frozen;                 /* a snapshot (qs_snapshot_open): the view
                                   stays at one commit, pinned in the region */
    /* a running compaction or backup: records copied, records to copy */
    _Atomic uint64_t progress_done, progress_total;
    unsigned fork_gen;          /* fork generation at open (see cs_enter_call) */
    /* cursors of this handle not yet closed (qs_stat.open_cursors); atomic
     * because cursors of one handle are opened and closed by any thread */
    _Atomic uint64_t open_cursors;
};

struct qs_cursor {
    qs_casket *c;
    bt_path path;
    uint64_t version;
    int wview;
    int positioned;
    int on_record;              /* path is at the remembered record itself,
                                   not at the one after it (it was removed) */
    bt_buf key;                 /* the current record's key and seq */
    uint64_t seq;
};

#define LOG_SUFFIX "-log"
#define SHM_SUFFIX "-shm"

/* Opens a handle (qs_open; shared 0: a private casket with no region, for
 * compaction's scratch file); cs_destroy_sync and cs_free undo it once its
 * pager is closed. */
int cs_open(const char *path, const qs_options *opts, int shared, qs_casket **out);
void cs_destroy_sync(qs_casket *c);
void cs_free(qs_casket *c);

/* Bumped in the child of every fork (see cs_enter_call). */
unsigned cs_fork_generation(void);


/* Runs fn in the writer's view (bt is the user namespace; fn may build a
 * context for another namespace over bt->p): inside the calling thread's
 * transaction, or as a transaction of its own that commits when fn returns
 * 0 and aborts otherwise.  fn runs with the operation mutex held. */
typedef int (*cs_write_fn)(qs_casket *c, bt_ctx *bt, void *arg);
int cs_write(qs_casket *c, cs_write_fn fn, void *arg);

/* cs_write that never waits for the write lock: QS_LOCKED when another
 * thread or process holds it. */
int cs_write_try(qs_casket *c, cs_write_fn fn, void *arg);

/* Takes the operation mutex for a read in the caller's view (the writer's
 * own if it holds the write lock) of namespace ns; cs_read_leave releases
 * it.  cs_read_enter returns 0 or the error of applying buffered putdups
 * (then the mutex is not held). */
int cs_read_enter(qs_casket *c, bt_ctx *bt, int ns);
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
