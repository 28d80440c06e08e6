/*
 * qstore.h -- the public interface of the pyqstore C core.
 *
 * A casket is one file holding an ordered B+tree of byte-string keys and
 * values (compared with memcmp, a shorter key sorting before any longer key
 * it prefixes).  A key may hold several values ("duplicates"); they are kept
 * in insertion order.  Changes are made in transactions that are atomic and,
 * with sync on, durable when qs_commit returns.  See docs/DESIGN.md for the
 * file format and the commit protocol.
 *
 * Return codes.  One convention for every int-returning function: 0 on
 * success; on failure one of the negative QS_* codes below or a positive
 * errno value from a failed system call.  qs_strerror() describes all
 * three kinds.  Unless a function says otherwise, a failed call changed
 * nothing: the casket and the caller's transaction are as they were before
 * the call.  The exceptions, which return something else: qs_in_transaction
 * (a truth value), qs_corrupt_page (a page number), and qs_queue_put_id,
 * which returns an id (>= 1) on success and so cannot give an errno as a
 * positive value: it returns a QS_* code as it is and an errno e negated,
 * as -e.  The two ranges never meet (QS_* codes are below -32000, errno
 * values below 4096), so `r <= QS_NOTFOUND ? r : -r` turns a failed r back
 * into the code the other functions return; it is the one function whose
 * failures need this, kept so because a put then returns its id without an
 * out-parameter.
 *
 * Errors, function by function.  Each function's comment ends with
 *   @return  what it returns: 0, then each code it can fail with and when;
 *   @fail    the state of its out-parameters, and of the casket and the
 *            caller's transaction where the rule above does not say it,
 *            after any failure but HANDLE's (which leaves all untouched).
 * Groups of codes that recur are named there in capitals:
 *   HANDLE   QS_INVAL for a NULL handle, QS_FORKED, QS_CLOSED: see "Closed
 *            and forked handles" below.
 *   STORAGE  QS_NOMEM, QS_CORRUPT (a damaged page or structure; see
 *            qs_corrupt_page), or an errno (EIO, ...) from reading the files;
 *            also the same errors while catching up with other handles'
 *            commits before a call (a call sees the newest commit).
 *   WRITE    a writing call's own: QS_READONLY (opened read-only, or a
 *            snapshot), QS_LOCKED (the write lock was not had within
 *            lock_timeout; qs_locked_by names the holder), QS_FULL (the
 *            file would exceed 2^32 pages), an errno writing or syncing
 *            the log (ENOSPC, EIO, ...), the error that spoiled the
 *            caller's transaction (see "Record functions"), and DEFERRED.
 *   SNAPSHOT QS_SNAPSHOT_OLD: a snapshot past its log limit (every call
 *            that reads on it; see qs_snapshot_open).
 *   DEFERRED inside a transaction, the error of applying its buffered
 *            putdups ("Deferred putdup errors" below).
 *
 * Deferred putdup errors.  Inside a transaction (qs_begin) qs_putdup does
 * not change the tree at once: it copies the record into the transaction's
 * buffer, which is applied, in key order, by the first of these calls of
 * the owning thread: the qs_putdup that fills the buffer (as many bytes
 * of keys and values as cache_bytes allows pages, clamped to 32 MiB ..
 * 1 GiB, or a record per 128 of those bytes: 2 Mi records or 256 MiB by
 * default); any other call that writes in the transaction (qs_put,
 * qs_putkeep, qs_putdup_many, qs_out, qs_outlist, qs_cursor_out and the
 * queue calls that write, get and reserve included); any call that reads
 * in its view (qs_get, qs_getdup, qs_count, qs_records, qs_stat_get, the
 * cursor calls that move or read, qs_queue_peek, qs_queue_scan,
 * qs_queue_len, qs_queue_list, qs_queue_records); and qs_commit.  An error
 * applying it (STORAGE, QS_FULL, or an errno spilling pages to the log) is
 * returned by that call, whatever the call was asked to do, and spoils the
 * transaction: its later writes return the error again and qs_commit
 * aborts the transaction and returns it.  qs_abort drops the buffer.  So a
 * putdup that returned 0 inside a transaction is known to be stored only
 * when qs_commit returns 0.
 *
 * Closed and forked handles, for every function below that takes a
 * qs_casket, or a qs_cursor or qs_queue made from one, unless it says
 * otherwise: a NULL handle is QS_INVAL; in a child process that inherited
 * the handle through fork() the call fails with QS_FORKED (the parent's
 * locks and shared state are not the child's: the child opens the casket
 * again); once qs_shutdown or qs_close has begun on the casket it fails
 * with QS_CLOSED (a call already running when qs_shutdown began finishes
 * first, and a blocked wait returns QS_CLOSED).  Any of these failures
 * changes nothing and leaves every out-parameter as it was: they are found
 * before the function looks at its other arguments (but qs_queue_put_id
 * refuses a bad value first).  Not checked by qs_set_sync,
 * qs_in_transaction and qs_corrupt_page (they only read or set a field of
 * the handle, whose memory stays valid until qs_close), qs_queue_new (it
 * only names the queue: the calls on it fail instead), and the freeing
 * calls qs_cursor_close, qs_queue_free and qs_close, which ignore NULL
 * (qs_close in a forked child frees the copy's memory and descriptors
 * without touching what the parent shares, and returns 0); qs_shutdown
 * returns QS_FORKED in a forked child and 0 when called again.
 *
 * Memory.  Byte strings returned through `void **` out-parameters are
 * allocated by the library and owned by the caller, who releases them with
 * qs_free(); qs_items by qs_items_free(); handles (qs_casket, qs_cursor,
 * qs_queue) by their close or free call.  Strings returned as `const char
 * *` are the library's.  Input buffers are only read during the call.
 *
 * Threads.  One qs_casket may be used from many threads at once.  A write
 * transaction belongs to the thread that began it; other threads calling a
 * writing function wait until it ends, for up to the casket's lock_timeout
 * (then QS_LOCKED, and qs_locked_by names the owner), while their reads
 * proceed against the last committed state and never wait for the
 * transaction as a whole.  A thread that ends with its transaction open
 * leaves it to be aborted by the next writer of another thread (found
 * within about 20 ms of waiting; Linux: by the kernel's thread id and the
 * thread's start time).  Another thread's single writing call is always
 * waited for.  Outside an explicit transaction every writing call is its
 * own transaction.
 *
 * This header is read by the cffi build (pyqstore/_build.py): lines starting
 * with '#' are dropped there, so everything the binding needs is plain C
 * declarations.
 */
#ifndef QSTORE_H
#define QSTORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: our own range, below errno values and above INT_MIN. */
enum {
    QS_OK = 0,
    QS_NOTFOUND = -32001,   /* no such key, or a cursor ran off an end */
    QS_KEYEXIST = -32002,   /* qs_putkeep: the key already has a value */
    QS_CORRUPT = -32003,    /* a page failed its checksum or structure check */
    QS_NOTCASKET = -32004,  /* the file is not a casket (bad magic) */
    QS_VERSION = -32005,    /* a casket of a format version we cannot read */
    QS_LOCKED = -32006,     /* another process, or another thread's
                               transaction, holds the casket's write lock
                               (past lock_timeout); see qs_locked_by */
    QS_READONLY = -32007,   /* a write on a casket opened read-only */
    QS_TXN = -32008,        /* transaction misuse: nested begin, commit or
                               abort with no transaction of this thread */
    QS_INVAL = -32009,      /* an argument is out of range */
    QS_NOMEM = -32010,      /* an allocation failed */
    QS_TOOBIG = -32011,     /* key longer than QS_MAX_KEY or value longer
                               than QS_MAX_VALUE */
    QS_CLOSED = -32012,     /* the handle was closed (see "Closed and
                               forked handles" above) */
    QS_FULL = -32013,       /* the file would exceed 2^32 pages */
    QS_NOTRESERVED = -32014, /* qs_queue_ack/release: the item is not
                               reserved under this token (acknowledged,
                               released, or its lease expired) */
    QS_FORKED = -32015,     /* the handle was opened in the parent of a
                               fork(): a child must open the casket itself
                               (see "Closed and forked handles" above) */
    QS_RESFULL = -32016,    /* qs_queue_reserve: the casket's table of
                               reservations held at once (49,152, over all
                               handles and processes) is full */
    QS_SNAPSHOT_OLD = -32017, /* a snapshot's log limit was reached and a
                               checkpoint took the pages it read: the
                               snapshot only closes now */
    QS_INTR = -32018,       /* qs_queue_get/reserve: a signal handler ran
                               while waiting; nothing was taken */
    QS_NOTFILE = -32019,    /* the path (or its NAME-log, NAME-shm) is a
                               device, pipe or socket, not a regular file */
    QS_NOATTACH = -32020,   /* qs_open read-only: other processes have the
                               casket open and this one may not write its
                               region NAME-shm, so it cannot follow their
                               commits */
    QS_QFULL = -32021,      /* qs_queue_put*: the queue holds its maxsize
                               (qs_queue_config) items; nothing was put */
    QS_QBOUND = -32022,     /* qs_queue_config_set: the new maxsize is below
                               the items the queue holds now */
    QS_TIMEDOUT = -32023,   /* qs_queue_join: the queue still held items
                               when the timeout passed; qs_queue_wait_room:
                               it still had no room */
    QS_STREAM_NOGROUP = -32024, /* qs_stream_*: the stream has no group of
                               that name (qs_stream_group creates one) */
    QS_STREAM_NOTPENDING = -32025, /* qs_stream_ack: an id the group has
                               no pending entry for (never read by the
                               group, or acknowledged already) */
    QS_STREAM_TRIMMED = -32026, /* qs_stream_read/group: the start id is one
                               retention removed from the stream */
    QS_WOULDBLOCK = -32027, /* qs_get_nowait: the call would have waited for
                               another thread's call on the handle, for a
                               checkpoint, or for a page to be read from the
                               file; qs_put_held, qs_queue_put_held,
                               qs_queue_get_held: it would have waited for
                               anyone */
    QS_LAST_ERRCODE = -32027
};

enum {
    QS_MAX_KEY = 16384,             /* bytes */
    QS_MAX_QUEUE_NAME = 4096,       /* bytes */
    QS_MAX_VALUE = 1073741824,      /* 1 GiB */
    QS_MAX_DEDUP_KEY = 512,         /* bytes of a queue put's dedup key */
    QS_PAGE_SIZE = 4096,
    /* 2: queue configs ('m'), delivery counts (item tag 2), dedup keys
     * ('k') -- issue 13.  A version-1 casket is read as is read-only and
     * converted by a read-write open (its page 0 and log header rewritten
     * as version 2 before anything is written).
     * 3: delta log frames (wal.c).  Versions 1 and 2 are converted the same
     * way (their logs hold whole frames only, which version 3 reads); a
     * build for version 2 refuses a version-3 casket or log (QS_VERSION)
     * rather than stopping its replay at the first delta frame.
     * 4: a page's trailer flag (TR_FLAG_CRC, pagefmt.h) says which of two
     * checksums seals it: four CRC-32C lanes where the CPU computes CRC-32C
     * (x86-64 with SSE4.2: twice the speed, a third of a seed 001 put's
     * instructions were the checksum), the version-3 hash elsewhere.
     * Versions 1 to 3 are converted the same way (every page they hold
     * verifies under version 4); a build for version 3 refuses a version-4
     * casket or log (QS_VERSION) rather than call its pages damaged.  Above
     * 4 is QS_VERSION. */
    QS_FORMAT_VERSION = 4,
    QS_FORMAT_VERSION_MIN = 1       /* the oldest version this build opens */
};

/* Open flags (qs_options.flag), as in the dbm module: "r" "w" "c" "n". */
enum {
    QS_OPEN_READ = 0,       /* read-only; the file must exist */
    QS_OPEN_WRITE = 1,      /* read-write; the file must exist */
    QS_OPEN_CREATE = 2,     /* read-write; create if missing */
    QS_OPEN_NEW = 3         /* read-write; always start empty */
};

typedef struct qs_casket qs_casket;
typedef struct qs_cursor qs_cursor;

typedef struct qs_options {
    int flag;               /* one of QS_OPEN_* (dbm's "flag") */
    unsigned perm;          /* permission bits of every file the open
                               creates (the casket, its -log and -shm),
                               before the umask, as open(2)'s mode
                               (dbm's "mode"); qs_options_init: 0644.
                               Files that exist keep theirs. */
    int sync;               /* nonzero: commit returns only once durable.
                               0: a commit returns once the kernel has it
                               (it survives the process, not the machine);
                               a commit of a quarter page of log or less
                               is copied into a shared mapping of the log
                               instead of written: the same kernel pages
                               without a system call (the device's errors
                               on them, as on a write's, show only at a
                               sync) */
    double lock_timeout;    /* seconds to wait for the write lock held by
                               another process or by another thread's
                               transaction; 0 fails at once with QS_LOCKED */
    uint64_t cache_bytes;   /* page memory budget (committed cache plus a
                               transaction's dirty pages); 0 = default
                               (256 MiB).  A larger transaction spills.
                               A transaction's buffered putdups (below)
                               take up to as much again.  Handles of one
                               casket in one process share the committed
                               pages they read (the same buffers, counted
                               in each budget), and keep up to the largest
                               of their budgets more in a shared cache. */
    uint64_t checkpoint_bytes; /* log size that triggers a checkpoint: the
                               first commit that leaves the log longer
                               checkpoints.  0 = the default: 4 MiB, except
                               that while no other process has the casket
                               open a checkpoint that would copy more
                               pages than an eighth of the log's bytes
                               waits for a longer log, up to 16 MiB (its
                               pages then take more of the updates). */
} qs_options;

typedef struct qs_stat {
    uint32_t page_size;
    uint32_t format_version;  /* of the file as this handle opened it */
    uint64_t pages;          /* pages in the casket, header included */
    uint64_t free_pages;     /* pages on the free list */
    uint64_t records;        /* records in the user namespace, each
                                duplicate counted */
    uint64_t file_bytes;     /* size of the main file */
    uint64_t log_bytes;      /* committed bytes in the log not yet
                                checkpointed */
    uint64_t log_file_bytes; /* size of the log file */
    uint32_t depth;          /* height of the user tree (0 when empty) */
    uint32_t in_transaction; /* nonzero while some thread holds a txn */
    uint64_t commits;        /* commits since open */
    uint64_t syncs;          /* fdatasync calls on the log since open */
    uint64_t checkpoints;    /* checkpoints since open */
    uint64_t spilled_pages;  /* dirty pages written before commit */
    uint64_t open_cursors;   /* cursors opened on this handle by
                                qs_cursor_open and not yet closed by
                                qs_cursor_close: a count that stays above
                                0 once its users are done is a leak */
    uint64_t pages_read;     /* committed page images this handle read
                                from its files since open */
    uint64_t pages_shared;   /* ... and took instead from another handle of
                                the casket in this process, which had read
                                them: one copy in memory for both */
    uint64_t log_frames_read; /* log frames this handle read to follow
                                other handles' commits since open (the
                                commits of handles in this process are
                                followed from memory, not read) */
} qs_stat;

/* Describes any return code of this library (0, QS_*, or errno).
 * @return a static string, never NULL ("unknown error" for a negative
 *         code that is not ours). */
const char *qs_strerror(int rc);

/* Releases a buffer returned by this library through a `void **`
 * out-parameter.  NULL is ignored. */
void qs_free(void *p);

/* Fills *opts with the defaults: QS_OPEN_CREATE, perm 0644, sync on, 5 s
 * lock timeout, cache and checkpoint sizes 0 (the defaults).  opts must
 * not be NULL. */
void qs_options_init(qs_options *opts);

/* Opens (or creates) the casket at `path` and its log `path`-log.
 * On success *out is a new handle, owned by the caller until qs_close.
 * opts NULL means the defaults (qs_options_init).  Flag READ needs no
 * write access when no other process has the casket open: the handle then
 * reads the files without a region, and keeps openers with one out until
 * it is closed; it never creates `path`-shm when it may not write `path`.
 * @return 0, or
 *   QS_INVAL     path or out NULL, path "", flag not a QS_OPEN_*, perm
 *                above 07777, lock_timeout negative, NaN or infinite
 *   ENOENT       flag READ/WRITE on a missing file (or a missing
 *                directory in path, any flag)
 *   QS_NOTFILE, EISDIR  path, or its -log or -shm, is not a regular file
 *                (refused before anything is created)
 *   QS_NOTCASKET not a casket (also an existing empty file with flag
 *                CREATE: only NEW overwrites it)
 *   QS_VERSION, QS_CORRUPT  a casket we cannot read, a damaged one
 *                (qs_open_detail names a damaged log frame; for QS_VERSION
 *                the file's version and the newest this build reads).  A
 *                version-1 casket opened read-write is converted to
 *                QS_FORMAT_VERSION during the open (durably, before the
 *                open returns); read-only it is read unchanged
 *   QS_LOCKED    after lock_timeout; also while read-only handles without
 *                a region have it open, and at once for flag NEW while
 *                other handles have it open (qs_open_detail says how many,
 *                of this process and of others)
 *   QS_NOATTACH  flag READ without write access to `path`-shm while other
 *                processes have the casket open
 *   QS_NOMEM, or an errno (EACCES; ENOSPC: no room for the region or the
 *                log; ...)
 * @fail *out NULL (when out is not NULL), nothing left open, and the files
 *       this call created removed (unless other handles attached
 *       meanwhile: then they are theirs). */
int qs_open(const char *path, const qs_options *opts, qs_casket **out);

/* After qs_open failed in this thread because a frame of the log is
 * damaged although a later frame declares it synced (QS_CORRUPT): names
 * the log file, the frame and its offset; after flag NEW failed with
 * QS_LOCKED for other handles: how many, of this process and of others.
 * Otherwise "".  The string is the library's, valid until this thread's
 * next qs_open; never NULL.  Never fails. */
const char *qs_open_detail(void);

/* Closes the casket's files: waits for calls running in other threads to
 * return, makes calls queued for the write lock and all later calls return
 * QS_CLOSED, abandons a transaction still open (whichever thread began it)
 * and checkpoints.  The handle's memory stays valid, so other threads that
 * still hold it get QS_CLOSED rather than a crash, until qs_close.
 * @return 0 (also for a second call), or QS_INVAL (c NULL), QS_FORKED (in
 *         a forked child: nothing is shut down), or the checkpoint's error
 *         (STORAGE, an errno writing or syncing the files)
 * @fail   after a checkpoint's error the handle is shut down all the same;
 *         what was committed stays in the log, and the next open recovers
 *         it. */
int qs_shutdown(qs_casket *c);

/* qs_shutdown, then frees the handle: it must not be used again.  NULL is
 * ignored.
 * @return qs_shutdown's result; 0 for NULL and in a forked child (which
 *         frees only its copy)
 * @fail   the handle is freed all the same. */
int qs_close(qs_casket *c);

/* Sets sync on (nonzero) or off for later commits.  Never fails; NULL is
 * ignored. */
void qs_set_sync(qs_casket *c, int on);

/* Begins a write transaction owned by the calling thread, waiting while
 * another thread of this process owns one (up to lock_timeout, as every
 * writer; a transaction whose thread has ended is aborted instead).
 * @return 0, or QS_TXN (this thread has one already), QS_READONLY,
 *         QS_LOCKED (another thread's transaction past lock_timeout, or
 *         another process), HANDLE, or the error of restarting a log that
 *         a failed checkpoint left unusable (STORAGE, an errno)
 * @fail   no transaction is open; nothing changed. */
int qs_begin(qs_casket *c);

/* Who held the write lock when the calling thread's last call failed with
 * QS_LOCKED (like errno, per thread; qs_open resets it).  pid: the holding
 * process, 0 unknown; tid and thread: when the holder was another thread's
 * transaction in this process, that thread's kernel id (Python's
 * threading.get_native_id()) and pthread_t (threading.get_ident()), else
 * 0.  For messages: the holder may have let go since.  Never fails; NULL
 * is ignored. */
typedef struct qs_lock_holder {
    uint64_t pid;
    uint64_t tid;
    uint64_t thread;
} qs_lock_holder;
void qs_locked_by(qs_lock_holder *out);

/* Commits this thread's transaction.  With sync on, returns once the
 * transaction is durable (one log fdatasync, shared with concurrent
 * committers).  In every case but QS_TXN and HANDLE the transaction is
 * over when qs_commit returns.
 * @return 0, or
 *   QS_TXN       this thread has no transaction (nothing changed)
 *   DEFERRED, or the error that spoiled the transaction: it is aborted
 *   STORAGE, QS_FULL, an errno writing the log: the transaction is aborted
 *                (its changes are gone)
 *   an errno from the sync itself: returned after the transaction became
 *                visible; it then may or may not survive a crash
 *   HANDLE       (a transaction open at qs_shutdown was abandoned there)
 * @fail as each code says. */
int qs_commit(qs_casket *c);

/* qs_commit that does not wait for the log sync, whatever the handle's
 * sync setting: on return the transaction is visible and in the log, so
 * it survives the death of this process (a kill, a crash), but a machine
 * crash or power cut may lose it until a later synced commit (anyone's on
 * this casket: one log, synced in order), a qs_sync or a checkpoint
 * returns.  Losing it then loses nothing after it.  For a change whose
 * loss is harmless, such as forgetting what a receiver already holds
 * (the flow's sender removing a delivered batch: offered again, it is
 * dropped as a duplicate), so that it costs no fdatasync.
 * @return as qs_commit, without its sync errors
 * @fail as qs_commit. */
int qs_commit_nosync(qs_casket *c);

/* Abandons this thread's transaction (its buffered putdups too): the
 * casket is exactly as before qs_begin.
 * @return 0, or QS_TXN (this thread has no transaction), HANDLE
 * @fail   nothing changed. */
int qs_abort(qs_casket *c);

/* Nonzero when the calling thread owns a transaction on c.  Not a return
 * code (see "Return codes"): 0 also for NULL; never fails. */
int qs_in_transaction(qs_casket *c);

/* Record functions.  Keys are 0..QS_MAX_KEY bytes, values 0..QS_MAX_VALUE
 * bytes (QS_TOOBIG otherwise); a NULL key or value pointer is allowed only
 * with length 0 (QS_INVAL otherwise).  Writing functions fail with
 * QS_READONLY on a read-only casket.  Inside a transaction, a refusal
 * found before anything changes (QS_TOOBIG, QS_INVAL, QS_KEYEXIST,
 * QS_NOTFOUND) leaves the transaction open and unchanged; an I/O, memory
 * or corruption error in the middle of a change spoils the transaction:
 * every later write in it returns that error and qs_commit aborts it and
 * returns it.  Outside a transaction such a call is rolled back whole
 * (and is committed, with other threads' calls, before it returns). */

/* Replaces all values of key with this one value.
 * @return 0, or QS_INVAL (key or val NULL with a length), QS_TOOBIG,
 *         HANDLE, WRITE, STORAGE
 * @fail   as "Record functions" says. */
int qs_put(qs_casket *c, const void *key, size_t klen,
           const void *val, size_t vlen);

/* qs_put for a caller holding a lock that other threads of the process
 * need (the Python binding calls it holding the interpreter's lock, and
 * falls back to qs_put without it): where qs_put would wait for anyone it
 * returns QS_WOULDBLOCK instead, having done nothing.  Inside the calling
 * thread's transaction it puts as qs_queue_put_held does.  Outside one it
 * commits the put as a transaction of its own only when that waits for
 * nobody: sync off (qs_set_sync: no fdatasync to wait for), no other
 * thread's call or transaction and no other process holding the write
 * lock, no other thread's grouped record operations under way, and no
 * checkpoint due (the call that finds one due returns QS_WOULDBLOCK, and
 * the fallback's commit checkpoints).  It may read pages from the file
 * and write the commit to the log: I/O, but no wait for anyone.  On one
 * thread it gains nothing over qs_put; on two, what it saves is a lock
 * hand-over between the threads for every put.
 * @return as qs_put, or QS_WOULDBLOCK
 * @fail   as qs_put; on QS_WOULDBLOCK nothing changed (a transaction of
 *         the caller's as it was). */
int qs_put_held(qs_casket *c, const void *key, size_t klen,
                const void *val, size_t vlen);

/* Stores the value only if the key has none.
 * @return 0, or QS_KEYEXIST (the key has a value: nothing changed),
 *         QS_INVAL, QS_TOOBIG (as qs_put), HANDLE, WRITE, STORAGE
 * @fail   as "Record functions" says. */
int qs_putkeep(qs_casket *c, const void *key, size_t klen,
               const void *val, size_t vlen);

/* Adds the value after the existing values of key.  Inside a transaction
 * the record is buffered ("Deferred putdup errors"): its own errors may be
 * returned by a later call.
 * @return 0, or QS_INVAL, QS_TOOBIG (as qs_put), QS_NOMEM copying it into
 *         the buffer (not added, the transaction unchanged), HANDLE,
 *         WRITE (DEFERRED: when this putdup fills the buffer), STORAGE
 * @fail   as "Record functions" says. */
int qs_putdup(qs_casket *c, const void *key, size_t klen,
              const void *val, size_t vlen);

/* Adds n records in one call: record i has key keys[koff[i]..koff[i+1])
 * and value vals[voff[i]..voff[i+1]) (koff and voff have n+1 entries).
 * Each is a putdup.  Atomic: all or none (a transaction of its own when
 * none is open); every record is checked before anything changes.  n 0
 * writes nothing and returns 0 (QS_READONLY on a read-only casket).
 * @return 0, or QS_INVAL (koff or voff NULL with n > 0, n >= 2^32 - 1, an
 *         offset below the one before it, keys or vals NULL with a
 *         record of nonzero length), QS_TOOBIG (a record's key or value),
 *         HANDLE, WRITE, STORAGE
 * @fail   no record added; the transaction as "Record functions" says. */
int qs_putdup_many(qs_casket *c, size_t n,
                   const void *keys, const uint64_t *koff,
                   const void *vals, const uint64_t *voff);

/* First value of key, copied to a new buffer *val of *vlen bytes, the
 * caller's (qs_free it; never NULL on success, also for 0 bytes).
 * @return 0, or QS_NOTFOUND (the key has no value), QS_INVAL (val or vlen
 *         NULL, key NULL with klen > 0), QS_TOOBIG (klen), HANDLE,
 *         STORAGE, SNAPSHOT, DEFERRED
 * @fail   *val NULL and *vlen 0 (untouched when either is NULL). */
int qs_get(qs_casket *c, const void *key, size_t klen,
           void **val, size_t *vlen);

/* First value of key, copied into the caller's buffer: *vlen gets its
 * length, and when that is at most cap the value is in buf[0..*vlen);
 * when it is longer, buf is untouched (call again with a buffer of *vlen
 * bytes, or use qs_get, which also sees a value changed in between).  The
 * value is read from its page straight into buf: for small values one
 * call, no buffer of the library's to allocate or free.
 * @return 0, or QS_NOTFOUND (the key has no value), QS_INVAL (vlen NULL,
 *         buf NULL with cap > 0, key NULL with klen > 0), QS_TOOBIG
 *         (klen), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *vlen 0 (untouched when NULL); buf may hold part of the value
 *         (STORAGE in the middle of a long one), else untouched. */
int qs_get_into(qs_casket *c, const void *key, size_t klen,
                void *buf, size_t cap, size_t *vlen);

/* qs_get_into that never waits: where qs_get_into would wait -- for
 * another thread's call running on this handle, for a checkpoint some
 * handle is writing into the main file, for a page of the value's path
 * that is neither in the handle's cache nor in the kernel's page cache
 * (read with RWF_NOWAIT; a system without it refuses any page the handle
 * has not cached), or for the calling
 * thread's transaction to apply the putdups it buffered -- it returns
 * QS_WOULDBLOCK instead.  (Only catching up with another handle's newer
 * commit, which reads that commit's index from the log, is done as
 * qs_get_into does it.)  For a caller that holds a lock other threads
 * need while it waits: the Python binding calls it holding the
 * interpreter's lock (so a get costs no lock hand-over between threads)
 * and falls back to qs_get_into, called without that lock, on
 * QS_WOULDBLOCK.  A page it had to leave stays missing: the fallback reads
 * it, and the next qs_get_nowait on that path finds it cached.
 * @return as qs_get_into, or QS_WOULDBLOCK
 * @fail   as qs_get_into; on QS_WOULDBLOCK *vlen 0, and buf may hold part
 *         of a long value (its first pages were cached, a later one not). */
int qs_get_nowait(qs_casket *c, const void *key, size_t klen,
                  void *buf, size_t cap, size_t *vlen);

/* All values of key in insertion order, packed into one new buffer *out
 * (qs_free it): for each value a 4-byte little-endian length then the
 * bytes.  *count is the number of values, *outlen the buffer size.
 * A key with no value gives *count 0 and *out NULL, returning 0.
 * @return 0, or QS_INVAL (out, outlen or count NULL, key NULL with
 *         klen > 0), QS_TOOBIG (klen), HANDLE, STORAGE, SNAPSHOT, DEFERRED;
 *         never QS_NOTFOUND
 * @fail   *out NULL, *outlen 0, *count 0 (untouched when one is NULL). */
int qs_getdup(qs_casket *c, const void *key, size_t klen,
              void **out, size_t *outlen, uint64_t *count);

/* Number of values of key (0 when absent), O(log n) whatever the count.
 * @return 0, or QS_INVAL (count NULL, key NULL with klen > 0), QS_TOOBIG
 *         (klen), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *count 0 (untouched when count is NULL). */
int qs_count(qs_casket *c, const void *key, size_t klen, uint64_t *count);

/* Number of records in the casket, each duplicate counted.  O(1).
 * @return 0, or QS_INVAL (count NULL), HANDLE, STORAGE, SNAPSHOT,
 *         DEFERRED
 * @fail   *count 0, or untouched when the view could not be had (catching
 *         up, SNAPSHOT, DEFERRED): do not use it. */
int qs_records(qs_casket *c, uint64_t *count);

/* Removes the first value of key.
 * @return 0, or QS_NOTFOUND (the key has no value: nothing changed),
 *         QS_INVAL (key NULL with klen > 0), QS_TOOBIG (klen), HANDLE,
 *         WRITE, STORAGE
 * @fail   as "Record functions" says. */
int qs_out(qs_casket *c, const void *key, size_t klen);

/* Removes all values of key; *removed (may be NULL) gets how many (0 for
 * a key without values: not an error).
 * @return 0, or QS_INVAL (key NULL with klen > 0), QS_TOOBIG (klen),
 *         HANDLE, WRITE, STORAGE
 * @fail   *removed 0; the transaction as "Record functions" says. */
int qs_outlist(qs_casket *c, const void *key, size_t klen,
               uint64_t *removed);

/* Writes every committed change to the main file and syncs it
 * (a checkpoint).  On a read-only handle it does nothing and returns 0.
 * @return 0, or QS_TXN (this thread has a transaction), QS_LOCKED (the
 *         write lock past lock_timeout, or another handle's operation or
 *         an open snapshot holds the checkpoint off: nothing is lost, the
 *         commits stay in the log), HANDLE, STORAGE, an errno writing or
 *         syncing the files
 * @fail   every commit stays in the log (the next checkpoint copies it). */
int qs_sync(qs_casket *c);

/* Walks the whole file: every page's checksum, the tree's order and counts,
 * overflow chains, the free list, and that every page is used exactly once;
 * and the log: every committed frame, and no damaged frame that a later
 * frame declares synced (as recovery would judge it at the next open).
 * A writable handle takes the write lock for the walk.  msg (msgcap
 * bytes, NUL-terminated, truncated) gets a description of the first damage
 * found, "" when sound; msg may be NULL or msgcap 0.
 * @return 0 when sound, or QS_CORRUPT (damage: msg says where), QS_TXN
 *         (this thread has a transaction), QS_LOCKED (the write lock past
 *         lock_timeout), HANDLE, STORAGE (msg may name what failed),
 *         SNAPSHOT
 * @fail   msg as above ("" for QS_TXN and QS_LOCKED; untouched for
 *         HANDLE); nothing changed. */
int qs_check(qs_casket *c, char *msg, size_t msgcap);

/* The number of the last page this handle found damaged when reading it
 * (a checksum or page-number mismatch, a page missing from the file), or 0
 * when it has found none since the last call (the number is forgotten once
 * returned) -- so also 0 when the damage reported as QS_CORRUPT was in the
 * structure between sound pages (qs_check's message names those).  For
 * telling a user where a QS_CORRUPT came from: call it right after.  Not
 * a return code (see "Return codes"): never fails; 0 for NULL.  Valid
 * until qs_close. */
uint32_t qs_corrupt_page(qs_casket *c);

/* Rewrites the casket compactly and gives the free space back to the file
 * system.  Crash-safe: until the new file is renamed over the old one, the
 * old file stays authoritative; the new file has the old one's permission
 * bits.  Failures before the rename change nothing.  If the handle
 * cannot reopen the new file after the rename (out of memory, I/O error),
 * it keeps serving reads of the last commit but refuses writes with that
 * error until the casket is reopened; an error syncing the directory after
 * a successful switch is returned as is.
 * @return 0, or QS_READONLY, QS_TXN (this thread has a transaction),
 *         QS_LOCKED (the write lock past lock_timeout, or other handles,
 *         of this process or others, have the casket open), HANDLE,
 *         STORAGE, an errno (ENOSPC, ...)
 * @fail   as above. */
int qs_compact(qs_casket *c);

/* Opens a snapshot of c: a new read-only handle (*out, the caller's until
 * qs_close) whose view is the newest commit of any handle at the time of
 * the call and stays there, across calls and processes, until it is closed.
 * Every read function, cursors and the queue reads (qs_queue_peek,
 * qs_queue_scan, qs_queue_len, qs_queue_list) work on it; writes fail with
 * QS_READONLY.  It does not see the calling thread's open transaction.
 * Reservations are not part of a commit: qs_queue_len and qs_queue_peek on
 * a snapshot skip the items reserved now, qs_queue_scan shows them all.
 *
 * A snapshot never blocks writers.  It holds checkpoints off (they would
 * overwrite main-file pages it reads): while it is open the log grows,
 * until it is max_log_bytes long (0: 1 GiB).  Then the next checkpoint goes
 * ahead anyway and every later call on the snapshot fails with
 * QS_SNAPSHOT_OLD (it can only be closed).  While a snapshot holds them
 * off, checkpoints are put off as when readers are slow: qs_sync returns
 * QS_LOCKED, commits go on.  cache_bytes is the snapshot's page memory
 * budget (0: as qs_options).
 * @return 0, or QS_INVAL (out NULL), the errors of qs_open with flag
 *         QS_OPEN_READ on c's path (QS_LOCKED, QS_NOATTACH, QS_NOMEM,
 *         STORAGE, an errno), HANDLE
 * @fail   *out NULL (when out is not NULL); nothing is left open. */
int qs_snapshot_open(qs_casket *c, uint64_t max_log_bytes, uint64_t cache_bytes,
                     qs_casket **out);

/* Writes a consistent copy of c to a new casket at dest while other
 * handles and processes go on writing: the records and queue items of one
 * commit (through a snapshot, as qs_snapshot_open), compacted, in one main
 * file that is synced and needs no log (reservations are not copied: their
 * items are there, unreserved).  The copy is built as dest-backup (and
 * dest-backup-log) and linked to dest only when complete and durable, so a
 * failed or killed backup leaves no dest; dest gets the permission bits
 * c was opened with (qs_options.perm).  Progress is reported by
 * qs_progress.
 * @return 0, or QS_INVAL (dest NULL or ""), EEXIST (dest, dest-log or
 *         dest-shm exists: nothing is replaced), QS_SNAPSHOT_OLD (the log
 *         outgrew the snapshot's limit during the copy), the errors of
 *         qs_snapshot_open, HANDLE, QS_NOMEM, STORAGE, an errno (ENOSPC,
 *         EACCES, ...)
 * @fail   no dest, and no dest-backup left behind; c unchanged. */
int qs_backup(qs_casket *c, const char *dest);

/* Progress of the compaction or backup running on c (or of the last one):
 * *done records copied of *total.  Callable from another thread while it
 * runs.  Both 0 before the first.
 * @return 0, or QS_INVAL (done or total NULL), HANDLE
 * @fail   *done and *total untouched. */
int qs_progress(qs_casket *c, uint64_t *done, uint64_t *total);

/* Fills *st.  The counts are read one by one, not at one instant:
 * open_cursors may lag a cursor another thread is opening or closing at
 * that moment.
 * @return 0, or QS_INVAL (st NULL), HANDLE, and what getting the caller's
 *         view can fail with: STORAGE (catching up), SNAPSHOT, DEFERRED
 * @fail   *st all zero (untouched when st is NULL). */
int qs_stat_get(qs_casket *c, qs_stat *st);

/* Cursors walk keys in order and a key's duplicates in insertion order.
 * A cursor reads the view of the thread using it (its own transaction's
 * changes, or the last commit) and stays valid across commits: after a
 * change it finds its place again by its current key.  A cursor is used by
 * one thread at a time and must be closed before its casket.  A new cursor
 * is unpositioned.  *out is the caller's until qs_cursor_close (NULL is
 * ignored there).
 * @return 0, or QS_INVAL (out NULL), QS_NOMEM, HANDLE
 * @fail   *out untouched. */
int qs_cursor_open(qs_casket *c, qs_cursor **out);
void qs_cursor_close(qs_cursor *cur);

/* Position on the first / last record.
 * @return 0, or QS_NOTFOUND (no record), HANDLE, STORAGE, SNAPSHOT,
 *         DEFERRED
 * @fail   QS_NOTFOUND and a failed read leave the cursor unpositioned; a
 *         view that could not be had (catching up, SNAPSHOT, DEFERRED)
 *         leaves it where it was. */
int qs_cursor_first(qs_cursor *cur);
int qs_cursor_last(qs_cursor *cur);

/* Position on the first record whose key is >= key.
 * @return 0, or QS_NOTFOUND (there is none), QS_INVAL (key NULL with
 *         klen > 0), QS_TOOBIG (klen), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   as qs_cursor_first; QS_INVAL and QS_TOOBIG leave it as it was. */
int qs_cursor_jump(qs_cursor *cur, const void *key, size_t klen);

/* Step.
 * @return 0, or QS_NOTFOUND (at the end: the cursor is then unpositioned;
 *         or it was unpositioned), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   as qs_cursor_first (an error finding its record again leaves it
 *         on that record, to be found by the next call). */
int qs_cursor_next(qs_cursor *cur);
int qs_cursor_prev(qs_cursor *cur);

/* Copies the record under the cursor into new buffers (qs_free both; either
 * out-pointer pair may be NULL to skip it); a 0-byte key or value still
 * gets a buffer.
 * @return 0, or QS_NOTFOUND (unpositioned, or the record was removed by
 *         someone else), QS_INVAL (key without klen, val without vlen),
 *         QS_NOMEM, HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *key and *val NULL (those asked for), *klen and *vlen untouched
 *         (all untouched for QS_INVAL); the cursor stays where it was. */
int qs_cursor_get(qs_cursor *cur, void **key, size_t *klen,
                  void **val, size_t *vlen);

/* Reads up to max records from the cursor's position onward (forward, or
 * backward when reverse is nonzero), leaving the cursor after the last
 * one read.  Output as qs_getdup, each record a key then a value:
 * [u32 klen][key][u32 vlen][value]...  *count 0 (returning 0) at the
 * end, when unpositioned, or for max 0.
 * @return 0, or QS_INVAL (out, outlen or count NULL), HANDLE, STORAGE,
 *         SNAPSHOT, DEFERRED
 * @fail   *out NULL, *outlen 0, *count 0 (untouched when one is NULL). */
int qs_cursor_read(qs_cursor *cur, size_t max, int reverse,
                   void **out, size_t *outlen, uint64_t *count);

/* Removes the record under the cursor; the cursor moves to the record
 * after it.  A write as the record functions' ("Record functions").
 * @return 0, or QS_NOTFOUND (three cases: the cursor was unpositioned or
 *         its record was removed by someone else -- nothing removed; or
 *         the removed record was the last -- removed, the cursor is now
 *         unpositioned), QS_READONLY, HANDLE, WRITE, STORAGE
 * @fail   nothing removed (but for the last QS_NOTFOUND above); the
 *         transaction as "Record functions" says. */
int qs_cursor_out(qs_cursor *cur);

/* ---- queues ----------------------------------------------------------------
 *
 * Named FIFO queues of byte-string payloads, kept in the casket beside (not
 * among) the user records: qs_records, cursors and the record functions never
 * see them.  A queue is named by 1..QS_MAX_QUEUE_NAME bytes and exists while
 * it holds an item.  Every item has a 64-bit id, unique in the casket and
 * increasing in the order items were added; a queue hands its items out in
 * id order.
 *
 * Queue operations are transactional like record writes: inside the calling
 * thread's transaction they are part of it (an abort puts consumed items
 * back at the front and drops added ones); outside one each call commits on
 * its own.  Operations that consume (get, reserve, ack, clear) take the
 * write lock, so they wait for another thread's transaction to end.
 *
 * Reservations (at-least-once delivery): qs_queue_reserve hands out an item
 * without removing it and hides it from every other consumer until it is
 * acknowledged (removed), released, its lease runs out, this handle is
 * closed, or another handle claims it (qs_queue_claim).  Reservations live in this handle's memory only: after a crash
 * and reopen every unacknowledged item is back, at the front, in order.
 *
 * Times are seconds: timeout < 0 waits without limit, 0 does not wait.
 * Inside a transaction nothing waits (waiting would hold the write lock).
 *
 * Priorities and delays (qs_queue_put_order, qs_queue_release_delay): an
 * item has a priority 0..9 (0 unless put with another); get, reserve and
 * peek hand out the highest priority first, in id order within one.  A
 * delayed item is invisible to get, reserve and peek until its due time
 * has passed, then available like any other of its priority, at its id.
 * It counts in qs_queue_len (and qs_queue_delayed counts it alone) and is
 * removed by qs_queue_clear.  A due item is moved into its queue by the
 * next get, reserve or clear of the queue (they hold the write lock);
 * peek shows it after that.  A blocked get or reserve wakes when the
 * first delayed item falls due, whichever process put it.  Due times are
 * stored in the casket as wall-clock times (CLOCK_REALTIME, ns since the
 * epoch), so they hold across processes, close and crashes: a clock set
 * forward makes items due early, one set back delays them by as much (a
 * waiter that woke at the old due time sleeps again until the new one).
 * A queue that never had a priority or delayed item pays nothing for
 * them but two more rank descents when its length is first counted.
 *
 * A bad name (NULL, empty, or longer than QS_MAX_QUEUE_NAME) is QS_INVAL
 * for every call that takes one.  The calls that write (put, publish,
 * get, reserve, ack, release, clear) fail as the record functions do
 * ("Record functions": WRITE, STORAGE); the ones that only read (peek,
 * scan, len, list, records) with HANDLE, STORAGE, SNAPSHOT and DEFERRED.
 */

/* Items handed out by the queue functions, in one allocation owned by the
 * caller: release it with qs_items_free. */
typedef struct qs_items {
    size_t count;               /* number of items */
    uint64_t *ids;              /* count item ids (qs_queue_list: each
                                   queue's length, as qs_queue_len) */
    uint64_t *off;              /* count + 1 offsets into data: item i is
                                   data[off[i] .. off[i+1]) */
    uint8_t *data;              /* payloads (qs_queue_list: names) */
    uint64_t token;             /* qs_queue_reserve: the reservation */
    uint64_t same_size;         /* every item is this many bytes long, or
                                   UINT64_MAX when lengths differ (lets a
                                   binding split data in one step) */
} qs_items;

/* Releases items (the qs_items and the arrays in it).  NULL is ignored. */
void qs_items_free(qs_items *items);

/* Appends one item to queue name; *id (may be NULL) gets its id.
 * @return 0, or QS_INVAL (a bad name, val NULL with vlen > 0), QS_TOOBIG
 *         (a payload over QS_MAX_VALUE - 1 bytes), QS_QFULL (a bounded
 *         queue holding its maxsize items, qs_queue_config: a refusal, it
 *         never waits; see qs_queue_put_wait), HANDLE, WRITE, STORAGE
 * @fail   *id untouched. */
int qs_queue_put(qs_casket *c, const void *name, size_t nlen,
                 const void *val, size_t vlen, uint64_t *id);

/* A queue named once, for the calls below that take it instead of the
 * name: a binding then passes fewer arguments per call and the name is not
 * checked and copied every time.  *out is the caller's until qs_queue_free
 * (NULL is ignored there).  It refers to c without owning any of it: it
 * must not be used after qs_close(c), but may be freed then.  The queue
 * need not exist yet.
 * @return 0, or QS_INVAL (c or out NULL, a bad name), QS_NOMEM; never
 *         QS_CLOSED or QS_FORKED (the calls on the queue report those)
 * @fail   *out NULL (when out is not NULL). */
typedef struct qs_queue qs_queue;
int qs_queue_new(qs_casket *c, const void *name, size_t nlen, qs_queue **out);
void qs_queue_free(qs_queue *q);

/* qs_queue_put on q, returning the new item's id (>= 1) rather than taking
 * a pointer for it.  On failure a negative value (see "Return codes"
 * above): a QS_* code as qs_queue_put returns it, or -e for an errno e.
 * @return the id (>= 1), or QS_INVAL (q NULL, val NULL with vlen > 0),
 *         QS_TOOBIG (as qs_queue_put; both found before q's casket is
 *         looked at), QS_CLOSED, QS_FORKED, WRITE and STORAGE (an errno e
 *         as -e) */
int64_t qs_queue_put_id(qs_queue *q, const void *val, size_t vlen);

/* qs_queue_put_id for a caller that holds a lock every thread of its
 * process needs (Python's interpreter lock: pyqstore's Queue.put calls it
 * holding the GIL, and falls back to qs_queue_put_id without it): where
 * the put would wait for anyone it returns QS_WOULDBLOCK instead, having
 * done nothing.  Inside the calling thread's explicit transaction on q's
 * casket, which holds the write lock already, it puts unless that
 * transaction has buffered putdups to apply first (qs_putdup) or another
 * thread is inside a call on the handle.  Outside one it commits the put
 * as a transaction of its own on the terms of qs_put_held: sync off, the
 * write lock free in this process and in every other, no other thread's
 * grouped record operations under way, no checkpoint due.  It may read
 * pages from the file and write to the log (a commit, or a transaction
 * larger than the cache spilling), and wakes the queue's waiters in any
 * process: I/O and a wake-up, but no wait for anyone.  With one thread
 * it saves little; with a producer thread and a consumer thread on one
 * queue it saves a hand-over of the interpreter's lock and of the write
 * lock for every item (qs_queue_get_held is the consumer's half).
 * @return as qs_queue_put_id, or QS_WOULDBLOCK
 * @fail   as qs_queue_put_id (an error other than a refusal such as
 *         QS_QFULL fails an explicit transaction); on QS_WOULDBLOCK
 *         nothing put and a transaction as it was. */
int64_t qs_queue_put_held(qs_queue *q, const void *val, size_t vlen);

/* qs_queue_put_id that waits for room when q is a bounded queue holding its
 * maxsize items (qs_queue_config): up to timeout seconds (< 0: no limit,
 * 0: not at all), asleep on the queue's wake-up word, which any process's
 * commit that removes items of a bounded queue (get, ack, clear) or widens
 * its bound moves.  Inside the caller's transaction it never waits (the
 * consumers would need the write lock it holds).
 * @return the id, or what qs_queue_put_id returns, or QS_QFULL (still no
 *         room when the time was up; nothing put), QS_INVAL (also timeout
 *         NaN), QS_INTR (a signal handler ran while it waited: nothing put;
 *         qs_queue_wait_left says how long was left), QS_CLOSED (the
 *         casket closed while it waited)
 * @fail   nothing put. */
int64_t qs_queue_put_wait(qs_queue *q, const void *val, size_t vlen, double timeout);

/* qs_queue_put_wait of an item with a delay (seconds, 0: none) and a
 * priority (0..9), as qs_queue_put_order stores them: it waits for room in
 * a full bounded queue the same way, asleep on the same word.
 * @return the id, or what qs_queue_put_wait returns; QS_INVAL also for a
 *         delay negative, NaN or infinite, or a priority outside 0..9
 *         (found before q's casket is looked at)
 * @fail   nothing put. */
int64_t qs_queue_put_order_wait(qs_queue *q, const void *val, size_t vlen, double delay,
                                int priority, double timeout);

/* Appends n items in one call and one transaction (or as part of the
 * caller's): the payloads are concatenated in vals (vals_len bytes), item i
 * being the lens[i] bytes after item i-1.  Their ids are *first_id,
 * *first_id + 1, ... (first_id may be NULL).  Checks every item before
 * changing anything.  n 0 adds nothing and returns 0 (*first_id 0).
 * @return 0, or QS_INVAL (a bad name, lens NULL with n > 0, vals NULL with
 *         vals_len > 0, lengths not adding up to vals_len), QS_TOOBIG (a
 *         payload over QS_MAX_VALUE - 1 bytes), QS_QFULL (a bounded queue
 *         without room for all n: none is added), HANDLE, WRITE, STORAGE
 * @fail   *first_id untouched; no item added. */
int qs_queue_put_many(qs_casket *c, const void *name, size_t nlen, size_t n,
                      const void *vals, size_t vals_len, const uint32_t *lens,
                      uint64_t *first_id);

/* qs_queue_put_many with the payloads framed: frames holds n records, each
 * the byte QS_FRAME_BYTES, the payload's length as 4 bytes little-endian,
 * then the payload, frames_len bytes in all.  This is the layout Python's
 * marshal (format version 2) gives a list of bytes-like objects after its
 * 5-byte list header, so a binding can pack a batch in one pass of C.
 * Checks every record before changing anything: QS_INVAL when a record
 * starts with another byte or the records do not exactly fill frames_len
 * (nothing is stored: the caller may then pack the batch another way),
 * QS_TOOBIG for a payload over QS_MAX_VALUE - 1 bytes.
 * @return 0, or QS_INVAL (a bad name, frames NULL with frames_len > 0, a
 *         bad record as above), QS_TOOBIG, QS_QFULL (as qs_queue_put_many),
 *         HANDLE, WRITE, STORAGE
 * @fail   *first_id untouched; no item added. */
enum { QS_FRAME_BYTES = 0x73 };   /* marshal's TYPE_STRING, "s" */
int qs_queue_put_framed(qs_casket *c, const void *name, size_t nlen, size_t n,
                        const void *frames, size_t frames_len, uint64_t *first_id);

/* Fan-out: stores the payload once and appends a reference to it, under one
 * id, to each of nnames queues (name i is names[noff[i] .. noff[i+1])).  The
 * payload's storage is freed when the last queue has consumed its reference.
 * @return 0, or QS_INVAL (nnames 0, names or noff NULL, val NULL with
 *         vlen > 0, a bad name, a name given twice), QS_TOOBIG (a payload
 *         over QS_MAX_VALUE bytes), QS_QFULL (one of the queues is a full
 *         bounded queue), HANDLE, WRITE, STORAGE
 * @fail   *id untouched; no queue changed. */
int qs_queue_publish(qs_casket *c, size_t nnames, const void *names, const uint64_t *noff,
                     const void *val, size_t vlen, uint64_t *id);

/* Removes and returns up to max (>= 1) items from the front of the queue,
 * skipping reserved ones.  Waits up to timeout for at least one item when
 * the queue is empty (woken by a commit that adds to it, a release, or a
 * lease running out).  QS_NOTFOUND: still empty at the timeout (*out is
 * then NULL); QS_CLOSED when the casket is closed while waiting; QS_INTR
 * when a signal handler (one installed without SA_RESTART, as Python's
 * are) ran in this thread while it waited: nothing was taken, *out is
 * NULL, and the caller may call again with the time that is left
 * (qs_queue_wait_left).  That includes a handler that ran while the call
 * waited for the write lock (each look at the queue takes it): the lock's
 * wait goes on, and the call returns QS_INTR once it has the lock, looked
 * and found nothing, instead of sleeping.  A signal that arrives in the
 * instant between a look at the queue and the sleep (or while the write
 * lock's wait is between two sleeps) is not seen until the next wake-up,
 * as with any wait that cannot block signals atomically around its sleep;
 * qs_set_wait_slice bounds how late that is.  The other waiting calls
 * (reserve, put on a full bounded queue, join, wait for room, a stream
 * group's read) do the same.
 * @return 0, or QS_NOTFOUND, QS_CLOSED, QS_INTR (above), QS_INVAL (out
 *         NULL, a bad name, max 0, timeout NaN), QS_NOMEM, HANDLE, WRITE,
 *         STORAGE
 * @fail   *out NULL (when out is not NULL); nothing taken. */
int qs_queue_get(qs_casket *c, const void *name, size_t nlen, size_t max,
                 double timeout, qs_items **out);

/* qs_queue_get without waiting (timeout 0) for a caller that holds a lock
 * every thread of its process needs, as qs_queue_put_held: where the get
 * would wait for anyone -- the write lock held by another thread or
 * process, sync on (its commit would wait for the fdatasync), another
 * thread inside a call on the handle, a checkpoint due -- it returns
 * QS_WOULDBLOCK instead, having taken nothing, and the caller makes the
 * ordinary call (qs_queue_get, which may also wait for an item) without
 * its lock.  Inside the calling thread's explicit transaction it takes as
 * qs_queue_get does there.
 * @return 0, or QS_NOTFOUND (no item available: *out NULL), QS_WOULDBLOCK,
 *         QS_INVAL (out NULL, a bad name, max 0), QS_NOMEM, HANDLE, WRITE,
 *         STORAGE
 * @fail   *out NULL (when out is not NULL); nothing taken. */
int qs_queue_get_held(qs_casket *c, const void *name, size_t nlen, size_t max,
                      qs_items **out);

/* After qs_queue_get or qs_queue_reserve returned QS_INTR in this thread:
 * the seconds that were left of its timeout (>= 0), or -1 when it had
 * none; to pass to the call that goes on waiting.  Per thread, like errno.
 * Never fails. */
double qs_queue_wait_left(void);

/* Makes every wait for a queue or stream of this process (qs_queue_get,
 * qs_queue_reserve, the other waiting calls named there) sleep at most
 * seconds at a time and then return QS_INTR as if a signal's handler had
 * run, with qs_queue_wait_left the time that is left; 0 (the default)
 * sleeps as long as the timeout says.  For a caller that runs signal
 * handlers between calls, as Python does: a signal that arrived while the
 * thread was awake inside the call ended no sleep, and its handler would
 * otherwise wait for the next wake-up, which an untimed wait on a quiet
 * queue may never have.  The Python binding sets 0.25.  Process-wide;
 * never fails (a negative or NaN value is taken as 0). */
void qs_set_wait_slice(double seconds);

/* Returns copies of up to max items from the front without removing them
 * (reserved ones skipped), in the caller's view.
 * @return 0, or QS_NOTFOUND (none available), QS_INVAL (out NULL, a bad
 *         name, max 0), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *out NULL (when out is not NULL). */
int qs_queue_peek(qs_casket *c, const void *name, size_t nlen, size_t max,
                  qs_items **out);

/* Returns copies of the items of the queue whose ids are above `after`, in
 * id order, reserved ones included, without consuming: up to max (>= 1)
 * items and, past the first, about max_bytes of payload.  Pass the last
 * id returned as `after` to go on; *out has count 0 at the end (also for a
 * queue that does not exist).  Each call reads the caller's view then: on
 * a snapshot (qs_snapshot_open) all calls see one commit; elsewhere each
 * call sees the newest, so an iteration never yields an item twice or out
 * of order, yields every item that stayed in the queue throughout, and
 * may or may not yield items added or consumed meanwhile.  Items of every
 * priority and delayed ones are included, all in id order ("Priorities
 * and delays"; the items carry neither their priority nor their due time
 * here).  A queue that holds priority or delayed items costs two rank
 * descents and a read of its whole delayed index more per call.
 * @return 0, or QS_INVAL (out NULL, a bad name, max 0, after UINT64_MAX),
 *         HANDLE, STORAGE, SNAPSHOT, DEFERRED; never QS_NOTFOUND
 * @fail   *out NULL (when out is not NULL). */
int qs_queue_scan(qs_casket *c, const void *name, size_t nlen, uint64_t after, size_t max,
                  size_t max_bytes, qs_items **out);

/* Reserves the first available item (waiting as qs_queue_get) and returns
 * it with its reservation token in (*out)->token.  lease > 0: the
 * reservation ends by itself after lease seconds; 0: it lasts until ack,
 * release or close.  A reservation made inside a transaction is undone if
 * the transaction aborts.  QS_RESFULL: no room for one more reservation
 * (counting those the open transaction made), nothing changed; the
 * transaction stays usable.
 * @return 0, or QS_RESFULL, and as qs_queue_get (QS_NOTFOUND, QS_CLOSED,
 *         QS_INTR, ...), QS_INVAL also for lease negative or NaN
 * @fail   *out NULL (when out is not NULL); nothing reserved. */
int qs_queue_reserve(qs_casket *c, const void *name, size_t nlen, double timeout,
                     double lease, qs_items **out);

/* qs_queue_reserve of up to max (>= 1) items at once, all under one token:
 * the first available ones, in order.  A batch stops early where the room
 * for reservations ends; QS_RESFULL only when there is room for none.
 * Used by a binding that must look at payloads (decode them) before they
 * are consumed: reserve, look, then qs_queue_ack_many or release.
 * @return as qs_queue_reserve (QS_INVAL also for max 0)
 * @fail   as qs_queue_reserve. */
int qs_queue_reserve_many(qs_casket *c, const void *name, size_t nlen, size_t max,
                          double timeout, double lease, qs_items **out);

/* qs_queue_reserve_many without a lease that counts no delivery: for a
 * binding that must look at the payloads before they are consumed (a
 * codec queue's get decodes them, then acknowledges them with
 * qs_queue_ack_many at once), so such a get is no delivery, as a plain
 * qs_queue_get is none.  An item at its queue's max_deliveries is moved to
 * the dead-letter queue as a get moves it.  A payload the binding cannot
 * use is given back with qs_queue_fail_counted (it counts that one
 * delivery) or qs_queue_release (it counts none).
 * @return as qs_queue_reserve_many
 * @fail   as qs_queue_reserve_many. */
int qs_queue_reserve_uncounted(qs_casket *c, const void *name, size_t nlen, size_t max,
                               double timeout, qs_items **out);

/* Acknowledges a reserved item: removes it from the queue (as part of the
 * caller's transaction, if any; an abort leaves it reserved).
 * @return 0, or QS_NOTRESERVED (no reservation of id under token: nothing
 *         changed), QS_INVAL (a bad name), HANDLE, WRITE, STORAGE */
int qs_queue_ack(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token);

/* qs_queue_ack of n (>= 1) items reserved under one token, ids in
 * increasing order, in one transaction (or as part of the caller's).  All
 * or none: every id is checked first; QS_NOTRESERVED when one is not
 * reserved under token, QS_INVAL for n == 0 or ids not increasing; the
 * caller's transaction is then unchanged.
 * @return 0, or QS_NOTRESERVED, QS_INVAL (also a bad name, ids NULL),
 *         HANDLE, WRITE, STORAGE */
int qs_queue_ack_many(qs_casket *c, const void *name, size_t nlen, size_t n,
                      const uint64_t *ids, uint64_t token);

/* Ends a reservation without consuming: the item is available again, at
 * its place at the front.  Takes effect at once, transaction or not.
 * @return 0, or QS_NOTRESERVED as qs_queue_ack (also for an item
 *         acknowledged in the open transaction), QS_INVAL (a bad name),
 *         HANDLE, WRITE (it takes the write lock), STORAGE */
int qs_queue_release(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                     uint64_t token);

/* qs_queue_release of n (>= 1) items reserved under one token, ids in
 * increasing order, in one call.  All or none, as qs_queue_ack_many: every
 * id is checked first (QS_NOTRESERVED, QS_INVAL for n == 0 or ids not
 * increasing: nothing released).  Takes effect at once, transaction or
 * not, as qs_queue_release.
 * @return 0, or QS_NOTRESERVED, QS_INVAL (also a bad name, ids NULL),
 *         HANDLE, WRITE, STORAGE */
int qs_queue_release_many(qs_casket *c, const void *name, size_t nlen, size_t n,
                          const uint64_t *ids, uint64_t token);

/* One reservation of a queue's item, as qs_queue_pending lists it.  Times
 * are CLOCK_MONOTONIC nanoseconds (the clock of every process on the
 * machine: Python's time.monotonic_ns()). */
typedef struct qs_pending {
    uint64_t id;                /* the item */
    uint64_t handle;            /* the holder's handle: its slot in the region
                                   NAME-shm, and in the high 32 bits the slot's
                                   generation (unique while the region lives) */
    uint64_t reserved_ns;       /* when the reservation took effect for every
                                   handle: the commit of its reserve or claim */
    uint64_t lease_end_ns;      /* when its lease ends; 0: no lease */
    uint32_t pid;               /* the holder's process */
    uint32_t mine;              /* 1 when the calling handle is the holder */
} qs_pending;

/* The pending list of the queue (Redis's XPENDING): every reservation of
 * its items that has taken effect (committed), held by any handle in any
 * process, in id order.  Reservations that the caller's open transaction
 * made, claimed or ended change the list when it commits.  Leases that
 * ended and the reservations of holders that died are ended first when the
 * write lock is free (as qs_queue_len does).  Read without the write lock;
 * when other handles change the reservations all the time the list is
 * taken again holding it, if it is free, else it is the last copy read,
 * which holds no item twice but may miss one whose entry moved meanwhile.
 * *out is an array of *count entries, the caller's, released with qs_free
 * (never NULL on success, also for 0 entries); a queue without
 * reservations, or one that does not exist, has 0.
 * @return 0, or QS_INVAL (out or count NULL, a bad name), QS_NOMEM, HANDLE
 * @fail   *out NULL, *count 0 (untouched when one is NULL). */
int qs_queue_pending(qs_casket *c, const void *name, size_t nlen, qs_pending **out,
                     size_t *count);

/* Claims reservations that their holders have held too long (Redis's
 * XAUTOCLAIM): takes up to max (>= 1) items of the queue whose reservation
 * (as qs_queue_pending lists it, any holder, this handle's other tokens
 * included) took effect at least min_idle seconds ago, in id order, and
 * returns them as qs_queue_reserve_many does, reserved under one new token
 * of this handle with the lease given (0: none).  At its commit the items
 * pass to the caller: the former holder's ack or release of them returns
 * QS_NOTRESERVED from then on.  Two claims never get one item (both run
 * holding the write lock, and the first one's commit gives the item a new
 * holder and a new reserve time).  Inside a transaction the claim is part
 * of it: an abort leaves the items with their holders; a release of a
 * claimed item inside it ends the former holder's reservation too, at once.
 * The reservations of holders that died are ended (their items return to
 * the queue, nothing to claim) by the same check as every queue operation,
 * at most every 100 ms.  Never waits for items.
 * @return 0, or QS_NOTFOUND (none held that long; *out NULL), QS_RESFULL
 *         (as qs_queue_reserve), QS_INVAL (out NULL, a bad name, max 0,
 *         min_idle or lease negative or NaN), QS_NOMEM, HANDLE, WRITE,
 *         STORAGE (QS_CORRUPT also for a reservation whose item is gone)
 * @fail   *out NULL (when out is not NULL); nothing claimed. */
int qs_queue_claim(qs_casket *c, const void *name, size_t nlen, size_t max, double min_idle,
                   double lease, qs_items **out);

/* qs_queue_put_many with a delay and a priority for every item (see
 * "Priorities and delays" above): delay seconds from now (0: available at
 * once), priority 0..9.  A priority or delayed item is stored in its own
 * run of records, so this is slower than qs_queue_put_many by a seek.
 * @return 0, or QS_INVAL (as qs_queue_put_many; delay negative, NaN or
 *         infinite; priority outside 0..9), QS_TOOBIG, QS_QFULL (a bounded
 *         queue without room for all n: a refusal, it never waits; one item
 *         may wait with qs_queue_put_order_wait), HANDLE, WRITE, STORAGE
 * @fail   *first_id untouched; no item added; inside a transaction the
 *         QS_INVAL and QS_TOOBIG refusals leave it as it was. */
int qs_queue_put_order(qs_casket *c, const void *name, size_t nlen, size_t n,
                       const void *vals, size_t vals_len, const uint32_t *lens,
                       double delay, int priority, uint64_t *first_id);

/* klens[i] of qs_queue_put_keyed for an item put without a dedup key. */
#define QS_NO_KEY 0xFFFFFFFF

/* qs_queue_put_order with a dedup key for each item (idempotent producers,
 * JetStream's Nats-Msg-Id): item i's key is the next klens[i] bytes of keys
 * (1..QS_MAX_DEDUP_KEY; QS_NO_KEY: none, no bytes), the keys one after
 * another filling keys_len bytes.  An item whose key is a duplicate is not
 * stored and ids[i] gets the id of the item first put with that key; a
 * key is a duplicate while that item is in the queue (available, delayed,
 * reserved or of any priority) or while its put is less than the queue's
 * dedup_window seconds old (qs_queue_config; the queue clock of
 * qs_queue_test_clock), whatever process put it.  Keys repeated within the
 * batch dedupe the same way (the first one is stored).  The key goes with
 * its item: when the item leaves the queue (taken, acked, cleared, or moved
 * to the dead-letter queue, which gets no key), the key is kept until its
 * put time plus the window then in force, then dropped (each keyed put
 * drops a few expired keys, so the work per put is bounded); a key whose
 * window passed while its item is still in the queue stays a duplicate.
 * Keys are committed, aborted and made durable with the items.  A keyed
 * put never waits for room: on a bounded queue without room for the new
 * items it stores none and returns QS_QFULL.  ids (n entries) and stored
 * (how many items were new) may be NULL; n 0 stores nothing.
 * @return 0, or QS_INVAL (as qs_queue_put_order; klens NULL, a key of 0
 *         bytes or longer than QS_MAX_DEDUP_KEY, keys not exactly filling
 *         keys_len), QS_TOOBIG, QS_QFULL, QS_NOMEM, HANDLE, WRITE, STORAGE
 * @fail   ids and *stored untouched; no item or key added; inside a
 *         transaction the QS_INVAL, QS_TOOBIG and QS_QFULL refusals leave
 *         it as it was. */
int qs_queue_put_keyed(qs_casket *c, const void *name, size_t nlen, size_t n,
                       const void *vals, size_t vals_len, const uint32_t *lens,
                       const void *keys, size_t keys_len, const uint32_t *klens,
                       double delay, int priority, uint64_t *ids, size_t *stored);

/* qs_queue_release that makes the item available again only after delay
 * seconds (0: at once, as qs_queue_release): nack with delay.  The item
 * keeps its id and priority; until then it is a delayed item.  The
 * reservation ends at once (as qs_queue_release's); the move into the
 * delayed index is part of the caller's transaction, so an abort leaves
 * the item available at once instead.
 * @return 0, or QS_NOTRESERVED (as qs_queue_release), QS_INVAL (a bad
 *         name; delay negative, NaN or infinite: nothing released),
 *         HANDLE, WRITE, STORAGE
 * @fail   on QS_INVAL and QS_NOTRESERVED nothing changed. */
int qs_queue_release_delay(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                           uint64_t token, double delay);

/* *count = delayed items of the queue in the caller's view (those due but
 * not yet moved into the queue included).
 * @return 0, or QS_INVAL (count NULL, a bad name), HANDLE, STORAGE,
 *         SNAPSHOT, DEFERRED
 * @fail   *count 0 (untouched when count is NULL). */
int qs_queue_delayed(qs_casket *c, const void *name, size_t nlen, uint64_t *count);

/* For tests only: the wall clock of delays in this process is `now`
 * (seconds since the epoch) from here on; now <= 0 returns to the real
 * clock.  Waits keep their own clock: with a fixed time set, a blocked
 * get's wait for a due time does not end early. */
void qs_queue_test_clock(double now);

/* *len = items available to get in the caller's view (reserved ones not
 * counted; delayed ones counted, see "Priorities and delays").  O(1) once the queue has been used through this handle.  A
 * queue that does not exist has length 0 (not an error).
 * @return 0, or QS_INVAL (len NULL, a bad name), HANDLE, STORAGE,
 *         SNAPSHOT, DEFERRED
 * @fail   *len 0 (untouched when len is NULL). */
int qs_queue_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len);

/* Removes every available (unreserved) item, delayed ones included;
 * *removed (may be NULL) gets how many.
 * @return 0, or QS_INVAL (a bad name), HANDLE, WRITE, STORAGE
 * @fail   *removed 0. */
int qs_queue_clear(qs_casket *c, const void *name, size_t nlen, uint64_t *removed);

/* Lists the queues holding at least one item, in name order: name i is
 * data[off[i] .. off[i+1]) and ids[i] its length as qs_queue_len.
 * *out has count 0 when there are none.
 * @return 0, or QS_INVAL (out NULL), QS_NOMEM, HANDLE, STORAGE, SNAPSHOT,
 *         DEFERRED
 * @fail   *out NULL (when out is not NULL). */
int qs_queue_list(qs_casket *c, qs_items **out);

/* Records in the queue namespace (items, shared payloads and their counts):
 * for statistics and tests.
 * @return 0, or QS_INVAL (count NULL), HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *count 0, or untouched when the view could not be had: do not
 *         use it. */
int qs_queue_records(qs_casket *c, uint64_t *count);

/* ---- asynchronous waiters --------------------------------------------------
 * For event loops (pyqstore's Queue.get_async): a qs_aio is a file
 * descriptor that becomes readable when a queue one of its waiters is
 * armed on may have items; the loop collects the fired waiters and tries
 * its take again.  No thread per waiter: a commit of this process fires
 * the process's waiters itself, and one watcher thread per process fires
 * them for other processes' commits (started by the first qs_aio_arm,
 * stopped when the last handle a waiter was armed on closes).  Linux
 * (eventfd, futex_waitv; on kernels before 5.16, or with more than 127
 * handles armed on, the watcher also looks every 20 ms).  A qs_aio is not
 * tied to one thread; its calls serialize on the process's registry. */
typedef struct qs_aio qs_aio;

typedef struct qs_aio_stat {
    uint64_t armed;             /* waiters armed in this process now */
    uint64_t fired_local;       /* fired by commits of this process */
    uint64_t fired_watcher;     /* fired by the watcher (other processes) */
    uint64_t fired_closed;      /* fired because their casket closed */
    uint64_t handles;           /* handles a waiter was armed on, not yet closed */
    int watcher;                /* 1 while the watcher thread runs */
} qs_aio_stat;

/* Makes a notifier: an eventfd, non-blocking and close-on-exec, with no
 * waiter.  Release it with qs_aio_close.
 * @return 0, or QS_INVAL (out NULL), QS_NOMEM, an errno of eventfd
 *         (EMFILE, ENFILE)
 * @fail   *out NULL (when out is not NULL). */
int qs_aio_open(qs_aio **out);

/* The descriptor to watch for reading (the notifier's: qs_aio_close
 * closes it), -1 for NULL.  Never fails. */
int qs_aio_fd(const qs_aio *a);

/* Arms a waiter on queue name of casket c.  It fires once, when the
 * queue's wake-up word moves after this call: a commit of any process
 * that added items to the queue, a release, an abort that returned items,
 * a lease end noticed, a holder's death noticed -- or when qs_shutdown
 * begins on c (the next take then returns QS_CLOSED).  Arm before looking
 * at the queue (a take with timeout 0), and items committed between the
 * look and the wait are not missed.  A waiter may fire with nothing for
 * it (queues share words by a hash of their names; another consumer came
 * first): look, and arm again.  *id names the waiter (>= 1) for
 * qs_aio_disarm and qs_aio_fired.
 * @return 0, or QS_INVAL (a or id NULL, a bad name, c without a region:
 *         compaction's scratch handle), QS_READONLY (c is read-only: it
 *         could take nothing), QS_FORKED (also a made before a fork),
 *         QS_NOMEM, EAGAIN (the watcher thread could not be started),
 *         HANDLE, STORAGE (c catching up with other handles' commits)
 * @fail   *id unchanged; nothing armed. */
int qs_aio_arm(qs_aio *a, qs_casket *c, const void *name, size_t nlen, uint64_t *id);

/* Removes waiter id of a, armed or fired and not yet collected: a waiter
 * that gave up (cancelled, timed out) leaves nothing behind.
 * @return 0, or QS_NOTFOUND (no such waiter of a: collected already),
 *         QS_INVAL (a NULL), QS_FORKED (a made before a fork) */
int qs_aio_disarm(qs_aio *a, uint64_t id);

/* Collects up to max ids of a's fired waiters into ids, *n how many; once
 * none is left the descriptor is read empty (not readable until the next
 * fire).
 * @return 0, or QS_INVAL (a NULL argument), QS_FORKED (a made before a
 *         fork)
 * @fail   *n 0 (when n is not NULL); nothing collected. */
int qs_aio_fired(qs_aio *a, uint64_t *ids, size_t max, size_t *n);

/* How many waiters of a are armed now (0 for NULL, and in a forked child).
 * Never fails. */
size_t qs_aio_armed(const qs_aio *a);

/* The process's counters (for tests and statistics), into *st; NULL is
 * ignored.  Never fails. */
void qs_aio_stats(qs_aio_stat *st);

/* Disarms a's waiters, closes its descriptor and frees it; NULL is
 * ignored.  Collected or not, its fired ids are gone.  In a forked child
 * it only closes the copy's descriptor and frees. */
void qs_aio_close(qs_aio *a);

/* Waits until queue name holds no item: none available and none reserved
 * (the standard library's Queue.join), whoever consumes them, in any
 * process: asleep on the queue's wake-up word, which a commit that leaves
 * a queue empty moves.  timeout < 0: no limit; inside the caller's
 * transaction it does not wait (it looks at the transaction's view).
 * @return 0 (empty), or QS_TIMEDOUT (items still held when the time was
 *         up), QS_INVAL (a bad name, timeout NaN), QS_INTR (a signal
 *         handler ran while it waited; qs_queue_wait_left says how long was
 *         left), QS_CLOSED (the casket closed meanwhile), HANDLE, STORAGE,
 *         SNAPSHOT, DEFERRED */
int qs_queue_join(qs_casket *c, const void *name, size_t nlen, double timeout);

/* Waits until queue name has room for n (>= 1) more items: until a put of
 * n items (qs_queue_put_many) would not be refused QS_QFULL by its
 * maxsize (qs_queue_config; reserved and delayed items count), whoever
 * consumes them, in any process; at once for an unbounded queue.  Asleep
 * on the queue's wake-up word, which any process's commit that removes
 * items of a bounded queue (get, ack, clear, a move to the dead-letter
 * queue) or widens its bound moves: for a producer that must not wait
 * inside its transaction (a flow's firing, whose puts go to several
 * queues at once), so it aborts on QS_QFULL, waits here, and tries again.
 * Nothing is put or held: another producer may take the room first.
 * timeout < 0: no limit; inside the caller's transaction it does not wait
 * (it looks at the transaction's view).
 * @return 0 (room), or QS_TIMEDOUT (no room when the time was up), QS_INVAL
 *         (a bad name, n 0, n over the queue's maxsize: it could never
 *         fit, timeout NaN), QS_INTR (a signal handler ran while it waited;
 *         qs_queue_wait_left says how long was left), QS_CLOSED (the casket
 *         closed meanwhile), QS_NOMEM, HANDLE, STORAGE, SNAPSHOT, DEFERRED */
int qs_queue_wait_room(qs_casket *c, const void *name, size_t nlen, uint64_t n,
                       double timeout);

/* ---- deliveries -------------------------------------------------------------
 *
 * Every reserve (qs_queue_reserve, qs_queue_reserve_many, and the reserve a
 * codec queue's get makes in the binding) counts one delivery of each item
 * it hands out, in the item's record: outside a transaction the count is
 * part of the reserve's own commit, so it is durable when the reserve
 * returns (with sync on) and a crash or a killed holder after it keeps it.
 * Inside a transaction the count is not part of it: the transaction holds
 * it until it commits, and an abort (qs_abort, a failed commit, a closed
 * handle or ended thread abandoning it) undoes the reserve but writes the
 * count again in a commit of its own before the write lock goes; a process
 * killed with the transaction open leaves the count in the shared region,
 * where the next handle that looks at the queue finds it with the dead
 * holder's reservation and writes it (the item stays hidden until then).
 * Not kept: the count of a killed process that was the casket's last
 * handle (the next open rebuilds the region) or of a power cut before the
 * transaction committed.  A queue whose config (below) has
 * max_deliveries N moves an item that was reserved N times to its
 * dead-letter queue, with its id, count and last reason, instead of handing
 * it out again: the take (get or reserve) that reaches it moves it, in the
 * same commit.  A bounded dead-letter queue is never overfilled: while it
 * holds maxsize items, the spent item stays where it is (in its queue's
 * length, handed to nobody; the take goes on past it), and the first take
 * that reaches it once the dead-letter queue has room moves it.  The check
 * and the move are one write, so no two takers overfill it. */

/* qs_queue_release that also records why the holder failed the item
 * (reason, up to QD_MAX_REASON = 1024 bytes; rlen 0: an empty reason), kept
 * with its delivery count and seen by whoever reads it later
 * (qs_queue_item_info), also in the dead-letter queue.  The release takes
 * effect at once, as qs_queue_release's; the reason is a write in the
 * caller's transaction, if any.
 * @return 0, or what qs_queue_release returns, QS_INVAL (also reason NULL
 *         with rlen > 0, rlen over 1024)
 * @fail   nothing released, no reason stored. */
int qs_queue_fail(qs_casket *c, const void *name, size_t nlen, uint64_t id, uint64_t token,
                  const void *reason, size_t rlen);

/* qs_queue_fail that also counts one delivery of the item: for an item
 * qs_queue_reserve_uncounted handed out that could not be used (its payload
 * does not decode), so that a queue with max_deliveries moves an item that
 * never decodes to its dead-letter queue instead of handing it out for
 * ever.  Inside a transaction the count outlives an abort as a reserve's
 * does ("deliveries" above).
 * @return as qs_queue_fail
 * @fail   as qs_queue_fail (nothing counted). */
int qs_queue_fail_counted(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                          uint64_t token, const void *reason, size_t rlen);

/* Item id of queue name in the caller's view (plain, priority or delayed:
 * a priority or delayed item is looked for in its run or the delayed index
 * after a miss, so that lookup costs more): *deliveries = how often it was
 * reserved; *reason (reason may be NULL to skip it) = a new buffer holding
 * the last fail reason, the caller's to qs_free, NULL when none (or an
 * empty one) was given (*rlen its length).
 * @return 0, or QS_NOTFOUND (no such item in that queue), QS_INVAL
 *         (deliveries NULL, reason without rlen, a bad name), QS_NOMEM,
 *         HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *deliveries 0, *reason NULL, *rlen 0. */
int qs_queue_item_info(qs_casket *c, const void *name, size_t nlen, uint64_t id,
                       uint32_t *deliveries, void **reason, size_t *rlen);

/* ---- queue policy ----------------------------------------------------------
 *
 * A queue's config is a record of the casket (format version 2), so every
 * handle in every process applies the same policy, and setting it is a
 * write like a put: inside the caller's transaction it is part of it, an
 * abort restores the previous config.  A queue without one has the
 * defaults (all zero: unbounded, no delivery limit, no dead-letter queue,
 * no dedup window).  Handles cache it per queue and reread it when another
 * handle committed, so puts and gets do not read it. */
typedef struct qs_queue_config {
    uint64_t maxsize;           /* items the queue may hold, reserved ones
                                   included; 0: no bound */
    uint32_t max_deliveries;    /* reserves of an item without an ack before
                                   it is dead-lettered; 0: no limit */
    double dedup_window;        /* seconds a dedup key is remembered after
                                   its put; 0: while its item is queued */
    const void *dead_letter;    /* name of the dead-letter queue, NULL: none */
    size_t dead_letter_len;     /* its length in bytes */
} qs_queue_config;

/* Replaces the config of queue `name` with *cfg (all fields; a config
 * equal to the defaults removes the record).  A queue need not exist.
 * A maxsize below the items the queue holds now (available, reserved)
 * is refused: the bound would be broken at once, and nothing is dropped
 * to meet it.
 * @return 0, or QS_INVAL (cfg NULL, a bad name, dedup_window negative,
 *         NaN or infinite, a bad dead_letter name, dead_letter equal to
 *         name, one of dead_letter and max_deliveries without the other),
 *         QS_QBOUND (maxsize
 *         below the queue's items in the caller's view), QS_READONLY,
 *         HANDLE, WRITE, STORAGE
 * @fail   the stored config unchanged; QS_INVAL and QS_QBOUND are refusals
 *         (the transaction goes on). */
int qs_queue_config_set(qs_casket *c, const void *name, size_t nlen,
                        const qs_queue_config *cfg);

/* *cfg = the config of queue `name` in the caller's view (the defaults when
 * none was set).  cfg->dead_letter, when not NULL, is a new buffer the
 * caller frees with qs_free.
 * @return 0, or QS_INVAL (cfg NULL, a bad name), QS_NOMEM, HANDLE, STORAGE,
 *         SNAPSHOT, DEFERRED
 * @fail   *cfg zeroed (untouched when cfg is NULL). */
int qs_queue_config_get(qs_casket *c, const void *name, size_t nlen, qs_queue_config *cfg);

/* ---- streams ---------------------------------------------------------------
 *
 * Append-only logs with consumer groups (Redis Streams): a stream's items
 * keep their ids (unique in the casket, increasing in the order of
 * appends, as queue items') and are read without being consumed.  A group
 * is a cursor on the stream with pending entries: each group is handed
 * every item once (several consumers of one group share its items: two
 * never get the same one), and an item it was handed stays pending (with
 * its consumer, the time it was delivered and how many times) until the
 * group acknowledges it.  Streams, groups and entries are records of the
 * casket: every handle and process sees the same, and each call is a
 * transaction of its own or part of the calling thread's.
 *
 * Retention removes the oldest items, in the transaction that makes them
 * removable: beyond maxlen items, older than max_age seconds at an append,
 * and -- when the stream has at least one group -- those every group has
 * acknowledged (at or below each group's horizon: its oldest pending id
 * minus one, or the last id it was handed when none is pending).  A
 * stream without a group keeps its items until maxlen or max_age.
 *
 * Names of streams, groups and consumers are 1..QS_MAX_QUEUE_NAME bytes;
 * a bad one is QS_INVAL.  A stream and a queue of one name are
 * different things.  `now` is the caller's clock in seconds (>= 0, finite;
 * the binding passes time.time()): it stamps items (for max_age) and
 * pending entries (for claim), so that a test can pass a fake clock.  The
 * calls that write fail as the record functions do ("Record functions":
 * WRITE, STORAGE; a refusal listed below leaves the transaction usable);
 * those that only read (read, len, pending) with HANDLE, STORAGE,
 * SNAPSHOT, DEFERRED.
 */

enum {
    QS_STREAM_FIRST = 0,    /* qs_stream_group: from the oldest item kept */
    QS_STREAM_LAST = 1,     /* only items appended after the group's creation */
    QS_STREAM_AT = 2        /* from start_id on */
};

/* Stores the stream's retention settings (every process sees them):
 * maxlen items at most (0: no limit), items at most max_age seconds old
 * at an append (0: no limit); applies them at once (now for max_age).
 * @return 0, or QS_INVAL (a bad name, max_age negative, NaN or infinite,
 *         a bad now), WRITE, STORAGE
 * @fail   nothing stored or removed. */
int qs_stream_configure(qs_casket *c, const void *name, size_t nlen, uint64_t maxlen,
                        double max_age, double now);

/* Appends n (>= 1) items, stamped now, in one transaction: value i is the
 * lens[i] bytes of vals after value i-1 (vals_len their sum).  Their ids
 * are *first_id .. *first_id + n - 1.  Retention runs after them (an item
 * beyond maxlen may be one of these).  Wakes the stream's blocked group
 * readers in every process when the transaction ends.
 * @return 0, or QS_INVAL (a bad name, n 0, lens NULL, a sum other than
 *         vals_len, a bad now), QS_TOOBIG (a value of QS_MAX_VALUE - 8
 *         bytes or more), WRITE, STORAGE
 * @fail   nothing appended; *first_id (may be NULL) 0. */
int qs_stream_append(qs_casket *c, const void *name, size_t nlen, size_t n, const void *vals,
                     size_t vals_len, const uint32_t *lens, double now, uint64_t *first_id);

/* Copies up to max (>= 1) items with ids >= start_id, in id order, without
 * consuming (start_id 0: from the oldest kept).  *out (the caller's, free
 * with qs_items_free) has count 0 when there are none.
 * @return 0, or QS_INVAL (a bad name, max 0, out NULL), QS_STREAM_TRIMMED
 *         (start_id is one retention removed: the read would skip items
 *         silently), QS_NOMEM, HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *out NULL. */
int qs_stream_read(qs_casket *c, const void *name, size_t nlen, uint64_t start_id, size_t max,
                   qs_items **out);

/* Items the stream holds now, into *len (0 for a stream never written).
 * @return 0, or QS_INVAL (a bad name, len NULL), HANDLE, STORAGE, SNAPSHOT,
 *         DEFERRED
 * @fail   *len 0. */
int qs_stream_len(qs_casket *c, const void *name, size_t nlen, uint64_t *len);

/* Creates group `group` of the stream (durably, as a write) if it does not
 * exist: it will be handed the items from start on (QS_STREAM_FIRST,
 * QS_STREAM_LAST, or QS_STREAM_AT with start_id >= 1).  An existing group
 * is left as it is (its position is its own), whatever start says.
 * @return 0, or QS_INVAL (a bad name, a bad start), QS_STREAM_TRIMMED
 *         (QS_STREAM_AT an id retention removed), WRITE, STORAGE
 * @fail   no group created. */
int qs_stream_group(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    int start, uint64_t start_id);

/* Hands consumer up to max (>= 1) items the group has not been handed
 * yet, in id order, and records a pending entry for each (consumer,
 * delivered now, 1 delivery) in the same transaction.  Waits as
 * qs_queue_get when there are none (timeout < 0 without limit, 0 not at
 * all, never inside a transaction), woken by an append's commit in any
 * process.  *out (the caller's) holds ids and payloads.
 * @return 0, or QS_NOTFOUND (nothing new within the timeout), QS_INVAL
 *         (a bad name or consumer, max 0, timeout NaN, a bad now, out
 *         NULL), QS_STREAM_NOGROUP, QS_INTR (a signal handler ran while
 *         waiting; call again with the time left), QS_CLOSED (closed while
 *         waiting), QS_NOMEM, WRITE, STORAGE
 * @fail   *out NULL; nothing handed out. */
int qs_stream_read_group(qs_casket *c, const void *name, size_t nlen, const void *group,
                         size_t glen, const void *consumer, size_t clen, size_t max,
                         double timeout, double now, qs_items **out);

/* Acknowledges n (>= 1) items of the group: their pending entries go, and
 * retention removes what every group has acknowledged.  An id given twice
 * counts once.  All or nothing: every id is checked first.
 * @return 0, or QS_INVAL (a bad name, n 0, ids NULL), QS_STREAM_NOGROUP,
 *         QS_STREAM_NOTPENDING (*bad_id, if not NULL, gets the first id
 *         in id order that the group has no pending entry for), QS_NOMEM,
 *         WRITE, STORAGE
 * @fail   nothing acknowledged; *bad_id 0 but for QS_STREAM_NOTPENDING. */
int qs_stream_ack(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                  size_t n, const uint64_t *ids, uint64_t *bad_id);

/* The group's pending entries in id order (XPENDING): ids[i] the item's
 * id, data[off[i] .. off[i+1]) the entry: f64 delivered at (the `now` of
 * the read or claim), u32 deliveries (both little-endian, as the machine
 * stores them), then the consumer's name.
 * @return 0, or QS_INVAL (a bad name, out NULL), QS_STREAM_NOGROUP,
 *         QS_NOMEM, HANDLE, STORAGE, SNAPSHOT, DEFERRED
 * @fail   *out NULL. */
int qs_stream_pending(qs_casket *c, const void *name, size_t nlen, const void *group,
                      size_t glen, qs_items **out);

/* Hands consumer up to max (>= 1) of the group's pending items delivered
 * at least min_idle seconds before now (XAUTOCLAIM), oldest id first:
 * each entry is now the consumer's, delivered now, one delivery more.  A
 * pending entry whose item retention removed (maxlen, max_age) is dropped
 * instead.  *out (the caller's) holds ids and payloads, count 0 for none.
 * @return 0, or QS_INVAL (a bad name or consumer, max 0, min_idle
 *         negative, NaN or infinite, a bad now, out NULL),
 *         QS_STREAM_NOGROUP, QS_NOMEM, WRITE, STORAGE
 * @fail   *out NULL; nothing claimed. */
int qs_stream_claim(qs_casket *c, const void *name, size_t nlen, const void *group, size_t glen,
                    const void *consumer, size_t clen, double min_idle, size_t max, double now,
                    qs_items **out);

#ifdef __cplusplus
}
#endif
#endif /* QSTORE_H */
