/* handle.h -- struct qs_casket and struct qs_cursor, private to the files
 * that own the handle (casket.c, txn.c, group.c, records.c, cursor.c,
 * maint.c): the layers above reach the handle through casket.h's calls and
 * accessors, so a field can change without their knowing (the layer check,
 * .ci/check_layers.py, refuses an include of this header anywhere else). */
#ifndef QS_HANDLE_H
#define QS_HANDLE_H
#include "casket.h"

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
    /* A checkpoint is due once the log is longer than checkpoint_bytes and
     * the pages it would copy are at most an eighth of the log's bytes (or
     * another process has the casket), or once it is longer than
     * checkpoint_most whatever they are (checkpoint_due, txn.c).  An
     * explicit size sets both. */
    uint64_t checkpoint_bytes, checkpoint_most;
    /* the layers registered with cs_layer_add, in order; flush_due: one
     * of them has work buffered for the open transaction */
    struct {
        const cs_layer *ops;
        void *state;
    } layers[CS_LAYERS];
    int nlayers, flush_due;
    /* a layer's txn_end asked for its follow-up after an abort
     * (cs_followup_due); in_followup: that follow-up is running */
    int followup_due, in_followup;
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

#endif
