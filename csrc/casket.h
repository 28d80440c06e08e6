/* casket.h -- the casket's internals shared with the queue layer (cs_
 * prefix).  Not public: the public interface is qstore.h. */
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

struct qq_registry;

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
     * applied in key order, in batches (see flush_pending) */
    bt_buf pend_keys, pend_vals;
    uint64_t *pend_koff, *pend_voff;
    size_t pend_n, pend_cap;
    uint64_t checkpoint_bytes;
    /* the queue layer's in-memory state (queue.c), guarded by mu */
    struct qq_registry *queues;
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

/* Monotonic clock, seconds. */
double cs_now(void);

/* Public-call accounting (see qs_shutdown): cs_enter_call returns 0, or
 * the error the call must return: QS_CLOSED once the casket is closed,
 * QS_FORKED in a child process that inherited the handle. */
int cs_enter_call(qs_casket *c);
void cs_leave_call(qs_casket *c);

/* Each public function checks its handle, counts itself in (so qs_shutdown
 * can wait for it and refuse it after) and calls its do_ implementation. */
#define COUNTED(name, params, handle, casket, impl, args)                               \
    int name params                                                                     \
    {                                                                                   \
        if (!(handle))                                                                  \
            return QS_INVAL;                                                            \
        int rc = cs_enter_call(casket);                                                 \
        if (rc)                                                                         \
            return rc;                                                                  \
        rc = impl args;                                                             \
        cs_leave_call(casket);                                                          \
        return rc;                                                                      \
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
