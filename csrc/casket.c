/* casket.c -- the public API (qstore.h): files and locks, the write lock and
 * transactions, group commit, cursors, check and compact. */
#include "casket.h"
#include "osdep.h"
#include "queue.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CACHE (256ull << 20)
#define DEFAULT_CHECKPOINT (4ull << 20)
/* How long the log may grow while a snapshot holds checkpoints off. */
#define DEFAULT_SNAPSHOT_LOG (1ull << 30)
#define LOG_SUFFIX "-log"
#define SHM_SUFFIX "-shm"
/* How long a checkpoint waits for other processes' operations to end
 * before it is put off to a later commit. */
#define CKPT_WAIT 0.25

/* ---- small helpers -------------------------------------------------------- */

/* Bumped in the child of every fork(): a handle whose generation differs
 * was inherited, and its locks and shared state belong to the parent. */
static atomic_uint fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void after_fork_in_child(void) { atomic_fetch_add(&fork_generation, 1); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

static int forked(const qs_casket *c)
{
    return c->fork_gen != atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

/* Every public call is counted so qs_shutdown can wait for those running
 * and refuse new ones. */
int cs_enter_call(qs_casket *c)
{
    if (forked(c))
        return QS_FORKED;
    atomic_fetch_add(&c->calls, 1);
    if (atomic_load(&c->closed)) {
        atomic_fetch_sub(&c->calls, 1);
        return QS_CLOSED;
    }
    return 0;
}

void cs_leave_call(qs_casket *c)
{
    atomic_fetch_sub(&c->calls, 1);
}

static atomic_uint_fast64_t next_tid = 1;
static _Thread_local uint64_t my_tid_v;

static uint64_t my_tid(void)
{
    if (!my_tid_v)
        my_tid_v = atomic_fetch_add(&next_tid, 1);
    return my_tid_v;
}

static int i_own(qs_casket *c)
{
    return atomic_load_explicit(&c->owner, memory_order_relaxed) == my_tid();
}

/* ---- threads as the kernel knows them (transaction owners) ------------------ */

/* Start time (clock ticks since boot) of thread tid of this process, from
 * /proc; 0 when it cannot be read (no such thread, no /proc). */
static uint64_t thread_start(int tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* Field 22; the command name (field 2) may hold spaces and parentheses,
     * so count from the last ')'. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static _Thread_local struct {
    unsigned fork_gen;      /* the ids below are this process's */
    int tid;                /* 0: not yet looked up */
    uint64_t start;
} me_kernel;

/* The calling thread's kernel id and start time, looked up once per thread
 * (and again in a forked child, where the thread is another one). */
static void my_kernel_thread(int *tid, uint64_t *start)
{
    unsigned gen = atomic_load_explicit(&fork_generation, memory_order_relaxed);
    if (!me_kernel.tid || me_kernel.fork_gen != gen) {
        me_kernel.tid = (int)syscall(SYS_gettid);
        me_kernel.start = thread_start(me_kernel.tid);
        me_kernel.fork_gen = gen;
    }
    *tid = me_kernel.tid;
    *start = me_kernel.start;
}

/* Whether thread tid (started at start, 0 unknown) of this process has
 * ended.  A thread id is given to a new thread once the old one is gone,
 * so the start time tells the two apart. */
static int thread_ended(int tid, uint64_t start)
{
    if (syscall(SYS_tgkill, getpid(), tid, 0) != 0)
        return errno == ESRCH;
    return start && thread_start(tid) != start;
}

/* Who held the write lock at the calling thread's last QS_LOCKED. */
static _Thread_local qs_lock_holder locked_by;

void qs_locked_by(qs_lock_holder *out)
{
    if (out)
        *out = locked_by;
}

void qs_free(void *p) { free(p); }

void qs_options_init(qs_options *o)
{
    memset(o, 0, sizeof *o);
    o->flag = QS_OPEN_CREATE;
    o->perm = 0644;
    o->sync = 1;
    o->lock_timeout = 5.0;
}

double cs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- other processes' commits ------------------------------------------------ */

/* Catches up with commits other handles published (mu held, guard
 * entered). */
static int catch_up(qs_casket *c)
{
    uint64_t seq = sh_commit_seq(&c->sh);
    if (seq == c->seen_seq || c->pg.in_txn)
        return 0;
    sh_commit cm;
    sh_read_commit(&c->sh, &cm);
    uint64_t old_salt = c->pg.log.salt, old_end = c->pg.log_end;
    int rc = pg_refresh(&c->pg, cm.salt, cm.log_end);
    if (rc)
        return rc;
    if (cm.salt != old_salt) {
        /* Their checkpoint synced everything logged before it. */
        pthread_mutex_lock(&c->smu);
        c->lsn_base += old_end;
        if (c->lsn_written < c->lsn_base + PG_SIZE)
            c->lsn_written = c->lsn_base + PG_SIZE;
        if (c->lsn_synced < c->lsn_base + PG_SIZE)
            __atomic_store_n(&c->lsn_synced, c->lsn_base + PG_SIZE, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&c->scond);
        pthread_mutex_unlock(&c->smu);
    }
    c->seen_seq = cm.seq;
    c->version++;
    qq_refresh(c);
    return 0;
}

int cs_view_lock(qs_casket *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->shared)
        return 0;
    sh_op_enter(&c->sh);
    /* A snapshot never moves; a checkpoint may only have taken its pages
     * away after revoking its pin (inside the guard we are now in). */
    int rc = c->frozen ? (sh_pin_revoked(&c->sh) ? QS_SNAPSHOT_OLD : 0) : catch_up(c);
    if (rc) {
        sh_op_leave(&c->sh);
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

void cs_view_unlock(qs_casket *c)
{
    if (c->shared)
        sh_op_leave(&c->sh);
    pthread_mutex_unlock(&c->mu);
}

/* Publishes our newest commit (or checkpoint) to other handles; mu held. */
static void publish_shared(qs_casket *c)
{
    if (!c->shared)
        return;
    sh_publish(&c->sh, c->pg.log.salt, c->pg.log_end);
    c->seen_seq = c->wrote_seq = sh_commit_seq(&c->sh);
}

/* Takes the cross-process write lock for the thread that holds the
 * in-process one, and brings the writer up to date: the newest commit, a
 * commit a writer that died holding the lock left unpublished, the log's
 * size, and a transaction number no other writer has used. */
static int process_lock(qs_casket *c, double timeout)
{
    int died, rc = sh_wlock(&c->sh, timeout, &died);
    if (rc)
        return rc;
    if ((rc = cs_view_lock(c)) == 0) {
        int found = 0;
        if (died)
            rc = pg_adopt(&c->pg, &found);
        else if (c->seen_seq != c->wrote_seq && c->pg.log.salt)
            rc = pg_log_size(&c->pg);
        if (rc == 0 && found) {
            c->version++;
            qq_refresh(c);
            publish_shared(c);
        }
        if (rc == 0 && c->pg.log.salt == 0 && !c->readonly) {
            /* The casket was first opened read-only, without a log. */
            if ((rc = wal_reset(&c->pg.log, c->pg.meta.txn)) == 0 &&
                (rc = pg_log_size(&c->pg)) == 0) {
                c->pg.log_end = PG_SIZE;
                publish_shared(c);
            }
        }
        if (rc == 0) {
            uint64_t floor = c->pg.meta.txn + 1;
            if (floor < c->pg.next_txn)
                floor = c->pg.next_txn;
            c->pg.next_txn = sh_take_txn(&c->sh, floor);
        }
        cs_view_unlock(c);
    }
    if (rc)
        sh_wunlock(&c->sh);
    return rc;
}

/* ---- the write lock and transactions ---------------------------------------- */

static void writer_release(qs_casket *c);

static int writer_enter_opt(qs_casket *c, int wait, double timeout);

static int writer_enter(qs_casket *c)
{
    return writer_enter_opt(c, 1, c->lock_timeout);
}

static void abort_locked(qs_casket *c);
static void writer_leave(qs_casket *c);

/* How often a writer waiting for another thread's transaction looks
 * whether that thread still exists (a thread's end wakes nobody). */
#define OWNER_POLL_NS 20000000L

/* The transaction of a thread that ended without committing or aborting
 * it: the writer that finds it aborts it and lets go of the write lock
 * (both locks: the process lock is our slot's, whichever thread took it).
 * wmu is held on entry and on return, released in between; owning the
 * lock meanwhile as a single call keeps other waiters from doing the same. */
static void abandon_orphan(qs_casket *c)
{
    atomic_store(&c->owner, my_tid());
    c->explicit_txn = 0;
    pthread_mutex_unlock(&c->wmu);
    abort_locked(c);
    writer_leave(c);
    pthread_mutex_lock(&c->wmu);
}

/* QS_LOCKED for the thread that owns the transaction (wmu held). */
static int locked_by_thread(qs_casket *c)
{
    locked_by = (qs_lock_holder){(uint64_t)getpid(), (uint64_t)c->txn_tid, c->txn_thread};
    return QS_LOCKED;
}

/* Takes the in-process write lock, then the process lock.  Another
 * thread's transaction is waited for up to timeout seconds (wait 0: not
 * at all), then QS_LOCKED; one whose thread has ended is abandoned (see
 * abandon_orphan).  Another thread's single call is always waited for: it
 * ends by itself, within the call.  Another process is waited for what is
 * left of timeout. */
static int writer_enter_opt(qs_casket *c, int wait, double timeout)
{
    double deadline = -1.0;     /* read the clock only if we must wait */
    pthread_mutex_lock(&c->wmu);
    while (c->wbusy && !atomic_load(&c->closed)) {
        if (c->explicit_txn && thread_ended(c->txn_tid, c->txn_tid_start)) {
            abandon_orphan(c);
            continue;
        }
        if (!wait) {
            if (c->explicit_txn)
                locked_by_thread(c);
            else
                locked_by = (qs_lock_holder){(uint64_t)getpid(), 0, 0};
            pthread_mutex_unlock(&c->wmu);
            return QS_LOCKED;
        }
        double now = cs_now();
        if (deadline < 0)
            deadline = now + timeout;
        if (c->explicit_txn && now >= deadline) {
            int rc = locked_by_thread(c);
            pthread_mutex_unlock(&c->wmu);
            return rc;
        }
        /* A slice, on the real-time clock the condition uses: the deadline
         * itself is kept on the monotonic one. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = OWNER_POLL_NS;
        if (c->explicit_txn && (deadline - now) * 1e9 < ns)
            ns = (long)((deadline - now) * 1e9) + 1;
        ts.tv_nsec += ns;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->wcond, &c->wmu, &ts);
    }
    if (c->wbusy) {
        pthread_mutex_unlock(&c->wmu);
        return QS_CLOSED;
    }
    c->wbusy = 1;
    atomic_store(&c->owner, my_tid());
    pthread_mutex_unlock(&c->wmu);
    if (c->shared) {
        double left = !wait ? 0 : deadline < 0 ? timeout : deadline - cs_now();
        int rc = process_lock(c, left > 0 ? left : 0);
        if (rc) {
            if (rc == QS_LOCKED)
                locked_by = (qs_lock_holder){sh_wlock_holder(&c->sh), 0, 0};
            writer_release(c);
            return rc;
        }
    }
    return 0;
}

static void writer_leave(qs_casket *c)
{
    if (c->shared)
        sh_wunlock(&c->sh);
    writer_release(c);
}

/* Releases the in-process write lock. */
static void writer_release(qs_casket *c)
{
    pthread_mutex_lock(&c->wmu);
    c->wbusy = 0;
    c->explicit_txn = 0;
    c->txn_error = 0;
    atomic_store(&c->owner, 0);
    pthread_cond_signal(&c->wcond);
    pthread_mutex_unlock(&c->wmu);
}

static int flush_pending(qs_casket *c);

static void drop_pending(qs_casket *c)
{
    c->pend_n = 0;
    c->pend_keys.len = c->pend_vals.len = 0;
}

static void abort_locked(qs_casket *c)
{
    drop_pending(c);
    pthread_mutex_lock(&c->mu);
    pg_abort(&c->pg);
    qq_txn_end(c, 0);
    c->version++;
    pthread_mutex_unlock(&c->mu);
}

/* Waits until the log is durable up to lsn; one waiter syncs for all. */
static int group_sync(qs_casket *c, uint64_t lsn)
{
    int rc = 0;
    pthread_mutex_lock(&c->smu);
    while (c->lsn_synced < lsn) {
        if (!c->syncing) {
            c->syncing = 1;
            /* Everything written so far, and at least what we wait for. */
            uint64_t target = c->lsn_written > lsn ? c->lsn_written : lsn;
            pthread_mutex_unlock(&c->smu);
            double t0 = cs_now();
            rc = wal_sync(&c->pg.log);
            __atomic_store_n(&c->last_sync_us, (int64_t)((cs_now() - t0) * 1e6),
                             __ATOMIC_RELAXED);
            pthread_mutex_lock(&c->smu);
            c->syncing = 0;
            if (rc == 0 && target > c->lsn_synced)
                __atomic_store_n(&c->lsn_synced, target, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&c->scond);
            if (rc)
                break;
        } else
            pthread_cond_wait(&c->scond, &c->smu);
    }
    pthread_mutex_unlock(&c->smu);
    return rc;
}

/* Checkpoint while holding the write lock with no transaction open. */
static int checkpoint_locked(qs_casket *c, uint64_t keep)
{
    int rc = 0;
    /* A snapshot below its log limit holds the checkpoint off: put off to
     * a later commit like one that waited too long for readers.  Tested
     * first without the guard (cheap, and readers are not stopped), then
     * again inside it, where no pin can be taken any more. */
    if (c->shared && sh_pins_hold(&c->sh, c->pg.log_end))
        return QS_LOCKED;
    /* Other processes may be reading pages the copy overwrites. */
    if (c->shared && (rc = sh_ckpt_begin(&c->sh, CKPT_WAIT)) != 0)
        return rc;
    if (c->shared) {
        if (sh_pins_hold(&c->sh, c->pg.log_end)) {
            sh_ckpt_end(&c->sh);
            return QS_LOCKED;
        }
        sh_pins_revoke(&c->sh);     /* their next operation fails */
    }
    /* Write-ahead rule: the main file may only receive pages whose log
     * frames are durable, or a power cut halfway through the copy could
     * leave newer pages in it than the log can replay to.  Holds with sync
     * off too: there commits may be lost, but never the file's sanity. */
    if (c->pg.logidx.len && (rc = group_sync(c, c->lsn_base + c->pg.log_end)) == 0)
        rc = pg_checkpoint_copy(&c->pg);
    if (rc) {
        if (c->shared)
            sh_ckpt_end(&c->sh);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t old_end = c->pg.log_end;
    rc = pg_checkpoint_finish(&c->pg, keep);
    if (rc)
        c->fatal = rc;
    /* Even a failed log restart may have changed the header: others must
     * reread it (and find the main file complete). */
    publish_shared(c);
    pthread_mutex_unlock(&c->mu);
    if (c->shared)
        sh_ckpt_end(&c->sh);
    pthread_mutex_lock(&c->smu);
    /* Everything logged so far is now in the synced main file. */
    c->lsn_base += old_end;
    c->lsn_written = c->lsn_base + PG_SIZE;
    if (c->lsn_synced < c->lsn_written)
        __atomic_store_n(&c->lsn_synced, c->lsn_written, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&c->scond);
    pthread_mutex_unlock(&c->smu);
    return rc;
}

/* Retries starting a new log generation after that failed (the write lock
 * held): until it succeeds no commit may be written. */
static int heal(qs_casket *c)
{
    if (c->defunct)
        return c->defunct;
    if (!c->fatal)
        return 0;
    int rc = checkpoint_locked(c, c->checkpoint_bytes + (1u << 20));
    if (rc == 0)
        c->fatal = 0;
    return rc;
}

/* Commits the open transaction of the calling thread (which holds the write
 * lock) and releases the lock, without waiting for the sync: *sync_lsn is
 * then the log position to pass to group_sync, or 0 when nothing needs
 * syncing (sync off, nothing written, or a checkpoint already synced it). */
static int commit_release(qs_casket *c, uint64_t *sync_lsn)
{
    int wrote = 0, sync = atomic_load(&c->sync);
    *sync_lsn = 0;
    pthread_mutex_lock(&c->mu);
    int rc = pg_commit_prepare(&c->pg);
    pthread_mutex_unlock(&c->mu);
    /* The commit frame declares what a finished fdatasync made durable of
     * this generation, so recovery can tell damage there from a torn tail.
     * Read without smu: a sync finishing meanwhile only makes it declare
     * less than it could.  lsn_base cannot move while we hold the write
     * lock (it moves at checkpoints, ours or, via catch_up, another
     * process's, which needs the lock too). */
    uint64_t durable = __atomic_load_n(&c->lsn_synced, __ATOMIC_ACQUIRE);
    c->pg.log.synced = durable > c->lsn_base + PG_SIZE ? durable - c->lsn_base : 0;
    if (rc == 0)
        rc = pg_commit_write(&c->pg, sync, &wrote);
    if (rc) {
        abort_locked(c);
        writer_leave(c);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    if (wrote) {
        pg_publish(&c->pg);
        publish_shared(c);
    } else
        pg_abort(&c->pg);
    qq_txn_end(c, 1);
    c->version++;
    pthread_mutex_unlock(&c->mu);
    uint64_t lsn = c->lsn_base + c->pg.log_end;
    pthread_mutex_lock(&c->smu);
    if (lsn > c->lsn_written)
        c->lsn_written = lsn;
    pthread_mutex_unlock(&c->smu);
    /* A checkpoint that fails leaves the log as it was (it is retried at
     * the next commit); this commit then gets its durability from the log
     * sync as usual. */
    int synced = 0;
    if (wrote && c->pg.log_end > c->checkpoint_bytes)
        synced = checkpoint_locked(c, c->checkpoint_bytes + (1u << 20)) == 0;
    writer_leave(c);
    if (wrote && sync && !synced)
        *sync_lsn = lsn;
    return 0;
}

static int commit_and_leave(qs_casket *c)
{
    uint64_t lsn;
    int rc = commit_release(c, &lsn);
    return rc == 0 && lsn ? group_sync(c, lsn) : rc;
}

static int do_begin(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (c->readonly)
        return QS_READONLY;
    if (i_own(c))
        return QS_TXN;
    int rc = writer_enter(c);
    if (rc)
        return rc;
    if ((rc = heal(c)) != 0) {
        writer_leave(c);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    pg_begin(&c->pg);
    pthread_mutex_unlock(&c->mu);
    int tid;
    uint64_t start;
    my_kernel_thread(&tid, &start);
    pthread_mutex_lock(&c->wmu);
    c->explicit_txn = 1;
    c->txn_tid = tid;
    c->txn_tid_start = start;
    c->txn_thread = (uint64_t)pthread_self();
    pthread_mutex_unlock(&c->wmu);
    return 0;
}

static int do_commit(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (!i_own(c) || !c->explicit_txn)
        return QS_TXN;
    flush_pending(c);  /* a failure is recorded in txn_error */
    if (c->txn_error) {
        int rc = c->txn_error;
        abort_locked(c);
        writer_leave(c);
        return rc;
    }
    return commit_and_leave(c);
}

static int do_abort(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (!i_own(c) || !c->explicit_txn)
        return QS_TXN;
    abort_locked(c);
    writer_leave(c);
    return 0;
}

int qs_in_transaction(qs_casket *c)
{
    return c && i_own(c) && c->explicit_txn;
}

void qs_set_sync(qs_casket *c, int on)
{
    if (c)
        atomic_store(&c->sync, on ? 1 : 0);
}

/* Results that refuse an operation without touching anything: they do not
 * spoil the transaction the operation ran in. */
static int refused(int rc)
{
    return rc == QS_TOOBIG || rc == QS_INVAL || rc == QS_KEYEXIST || rc == QS_NOTFOUND ||
           rc == QS_NOTRESERVED || rc == QS_RESFULL;
}

typedef cs_write_fn write_fn;

/* Runs fn in the writer's view: inside this thread's transaction, or as a
 * transaction of its own. */
static int write_core(qs_casket *c, write_fn fn, void *arg, int wait)
{
    if (c->readonly)
        return QS_READONLY;
    int own = i_own(c);
    if (own && c->txn_error)
        return c->txn_error;
    if (!own) {
        int rc = writer_enter_opt(c, wait, c->lock_timeout);
        if (rc)
            return rc;
        if ((rc = heal(c)) != 0) {
            writer_leave(c);
            return rc;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (!own)
        pg_begin(&c->pg);
    bt_ctx bt = {&c->pg, 1, NS_USER};
    int rc = fn(c, &bt, arg);
    c->version++;
    int trc = pg_trim(&c->pg, 1);
    pthread_mutex_unlock(&c->mu);
    int refusal = refused(rc);
    if (rc == 0 && trc)
        rc = trc;
    if (!own) {
        if (rc == 0)
            return commit_and_leave(c);
        abort_locked(c);
        writer_leave(c);
        return rc;
    }
    if (rc && !refusal)
        c->txn_error = rc;
    return rc;
}

static int write_op(qs_casket *c, write_fn fn, void *arg)
{
    if (i_own(c) && c->pend_n) {
        int rc = flush_pending(c);
        if (rc)
            return rc;
    }
    return write_core(c, fn, arg, 1);
}

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
    write_fn fn;
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
            if (r->rc && !refused(r->rc)) {
                spoiler = r;
                break;
            }
            live += r->rc == 0;
        }
        if (!spoiler)
            return live;
        spoiler->spoiled = 1;
        pthread_mutex_unlock(&c->mu);
        abort_locked(c);
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
    int rc = writer_enter_opt(c, 1, left > 0 ? left : 0);
    if (rc == 0 && (rc = heal(c)) != 0)
        writer_leave(c);
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
            crc = commit_release(c, &lsn);
        else {
            abort_locked(c);
            writer_leave(c);
        }
    } else
        me->rc = rc;

    if (crc == 0 && lsn)
        crc = group_sync(c, lsn);
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

/* write_op for record operations: grouped with other threads' when run
 * outside a transaction. */
static int write_grouped(qs_casket *c, write_fn fn, void *arg)
{
    if (c->readonly)
        return QS_READONLY;
    if (i_own(c))
        return write_op(c, fn, arg);
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

/* ---- open and close ------------------------------------------------------- */

/* The handle's mutexes and conditions (set up once its pager opened). */
static void destroy_sync(qs_casket *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->wmu);
    pthread_mutex_destroy(&c->smu);
    pthread_mutex_destroy(&c->gmu);
    pthread_cond_destroy(&c->gcond);
    pthread_cond_destroy(&c->wcond);
    pthread_cond_destroy(&c->scond);
}

static void casket_free(qs_casket *c)
{
    if (c->shared) {
        if (forked(c))
            sh_forget(&c->sh);
        else
            sh_close(&c->sh);
    }
    qq_free(c);
    free(c->pend_keys.data);
    free(c->pend_vals.data);
    free(c->pend_koff);
    free(c->pend_voff);
    if (c->log_fd >= 0)
        close(c->log_fd);
    if (c->fd >= 0)
        close(c->fd);
    free(c->path);
    free(c);
}

static char *log_path_of(const char *path)
{
    size_t n = strlen(path);
    char *lp = malloc(n + sizeof LOG_SUFFIX);
    if (lp) {
        memcpy(lp, path, n);
        memcpy(lp + n, LOG_SUFFIX, sizeof LOG_SUFFIX);
    }
    return lp;
}

static int open_casket(const char *path, const qs_options *opts, int shared, qs_casket **out);

/* Why the last qs_open of this thread failed, when it knows more than the
 * return code (qs_open_detail). */
static __thread char open_detail[320];

const char *qs_open_detail(void)
{
    return open_detail;
}

int qs_open(const char *path, const qs_options *opts, qs_casket **out)
{
    open_detail[0] = 0;
    locked_by = (qs_lock_holder){0, 0, 0};  /* an open's QS_LOCKED names nobody */
    return open_casket(path, opts, 1, out);
}

/* shared 0: a private casket no other handle may open (compaction's
 * scratch file), with no region beside it. */
static int open_casket(const char *path, const qs_options *opts, int shared, qs_casket **out)
{
    qs_options o;
    if (out)
        *out = NULL;
    if (!path || !out || !*path)
        return QS_INVAL;
    if (opts)
        o = *opts;
    else
        qs_options_init(&o);
    if (o.flag < QS_OPEN_READ || o.flag > QS_OPEN_NEW || o.perm > 07777 ||
        !(o.lock_timeout >= 0) || isinf(o.lock_timeout))
        return QS_INVAL;
    pthread_once(&fork_once, install_fork_hook);
    qs_casket *c = calloc(1, sizeof *c);
    if (!c)
        return QS_NOMEM;
    c->fd = c->log_fd = -1;
    c->fork_gen = atomic_load(&fork_generation);
    c->lock_timeout = o.lock_timeout;
    c->perm = o.perm;
    c->readonly = o.flag == QS_OPEN_READ;
    atomic_init(&c->sync, o.sync ? 1 : 0);
    atomic_init(&c->owner, 0);
    c->checkpoint_bytes = o.checkpoint_bytes ? o.checkpoint_bytes : DEFAULT_CHECKPOINT;
    uint64_t cache = o.cache_bytes ? o.cache_bytes : DEFAULT_CACHE;
    int rc = 0, alone = 1, made_main = 0, made_log = 0;
    char *lp = NULL, *sp = NULL;
    if (!(c->path = strdup(path)) || !(lp = log_path_of(path))) {
        rc = QS_NOMEM;
        goto fail;
    }
    /* Refuse what cannot be a casket before anything is created beside it. */
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            rc = EISDIR;
        else if (!S_ISREG(st.st_mode))
            rc = QS_NOTFILE;
    } else if (errno != ENOENT || o.flag < QS_OPEN_CREATE) {
        rc = errno;
    }
    if (rc)
        goto fail;
    int observe = 0;
    if (shared) {
        /* Attach before opening the files: an opener that is alone may
         * recover them, and compaction replaces the main file while it
         * holds the region exclusively. */
        size_t n = strlen(path);
        if (!(sp = malloc(n + sizeof SHM_SUFFIX))) {
            rc = QS_NOMEM;
            goto fail;
        }
        memcpy(sp, path, n);
        memcpy(sp + n, SHM_SUFFIX, sizeof SHM_SUFFIX);
        /* A reader who may not write the casket does not make its region:
         * the file would be the reader's, and lock the casket's owner out. */
        if (c->readonly && faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0 &&
            faccessat(AT_FDCWD, sp, F_OK, AT_EACCESS) != 0)
            rc = EACCES;
        else
            rc = sh_open(&c->sh, sp, (mode_t)o.perm, o.lock_timeout, &alone);
        if (rc == 0) {
            c->shared = 1;
        } else if (c->readonly && (rc == EACCES || rc == EPERM || rc == EROFS)) {
            /* We may not write the region (read-only media, or another
             * user's casket): read the files alone, if nobody attached
             * writes them meanwhile (sh_observe). */
            observe = alone = 1;
            rc = 0;
        } else {
            goto fail;
        }
    }
    int flags = c->readonly ? O_RDONLY : O_RDWR;
    if (o.flag >= QS_OPEN_CREATE)
        flags |= O_CREAT;
    if ((rc = os_open_regular(path, flags, (mode_t)o.perm, QS_NOTFILE, &c->fd, &made_main)) != 0)
        goto fail;
    if (observe)
        rc = sh_observe(c->fd, sp);
    else if (c->shared)
        rc = sh_wait_unobserved(c->fd, o.lock_timeout);
    if (rc)
        goto fail;
    if (fstat(c->fd, &st) != 0) {
        rc = errno;
        goto fail;
    }
    rc = os_open_regular(lp, c->readonly ? O_RDONLY : O_RDWR | O_CREAT, (mode_t)o.perm, QS_NOTFILE,
                         &c->log_fd, &made_log);
    if (rc == ENOENT && c->readonly)
        rc = 0;     /* a read-only handle reads a casket without a log */
    else if (rc)
        goto fail;
    if (o.flag == QS_OPEN_NEW && !alone) {
        rc = QS_LOCKED;     /* cannot empty it under other handles */
        uint32_t mine, others = c->shared ? sh_others(&c->sh, &mine) : 0;
        if (others && mine == others)
            snprintf(open_detail, sizeof open_detail,
                     "flag 'n' cannot empty the casket while %u other handle%s of this "
                     "process %s it open", (unsigned)mine, mine == 1 ? "" : "s",
                     mine == 1 ? "has" : "have");
        else
            snprintf(open_detail, sizeof open_detail,
                     "flag 'n' cannot empty the casket while other handles have it open "
                     "(%u of this process, %u of other processes)", (unsigned)mine,
                     (unsigned)(others - mine));
        goto fail;
    }
    if (o.flag == QS_OPEN_NEW) {
        if (ftruncate(c->fd, 0) != 0 || ftruncate(c->log_fd, 0) != 0) {
            rc = errno;
            goto fail;
        }
        st.st_size = 0;
    }
    /* An empty file this open did not make may be anyone's: only "n"
     * overwrites it. */
    int create = st.st_size == 0 && !c->readonly && (made_main || o.flag == QS_OPEN_NEW);
    if (st.st_size == 0 && !create) {
        rc = QS_NOTCASKET;
        goto fail;
    }
    rc = pg_open_mode(&c->pg, c->fd, c->log_fd, c->readonly, create, !alone,
                      (size_t)(cache / PG_SIZE), c->checkpoint_bytes);
    if (rc)
        goto fail;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->wmu, NULL);
    pthread_mutex_init(&c->smu, NULL);
    pthread_mutex_init(&c->gmu, NULL);
    pthread_cond_init(&c->gcond, NULL);
    pthread_cond_init(&c->wcond, NULL);
    pthread_cond_init(&c->scond, NULL);
    c->lsn_written = c->lsn_synced = PG_SIZE;
    if (c->shared && alone) {
        sh_commit cm = {c->pg.has_log ? c->pg.log.salt : 0, c->pg.log_end, 1};
        sh_init(&c->sh, &cm, c->pg.next_txn);
        c->seen_seq = c->wrote_seq = 1;
        rc = sh_share(&c->sh);
    } else if (c->shared) {
        /* Learn the log now, so a damaged one fails the open. */
        if ((rc = cs_view_lock(c)) == 0)
            cs_view_unlock(c);
    }
    if (rc) {
        pg_close(&c->pg);
        destroy_sync(c);
        goto fail;
    }
    free(lp);
    free(sp);
    *out = c;
    return 0;
fail:
    if (shared && c->pg.damage[0])
        snprintf(open_detail, sizeof open_detail, "%s: %s", lp, c->pg.damage);
    /* Leave the directory as we found it: remove the files this open
     * made, while nobody else can have the casket open (the region held
     * exclusively, or none); an opener waiting for the region finds them
     * gone. */
    if (!c->shared || c->sh.exclusive) {
        if (made_log)
            unlink(lp);
        if (made_main)
            unlink(path);
    }
    if (c->shared)
        sh_discard(&c->sh, sp);
    free(lp);
    free(sp);
    casket_free(c);
    return rc;
}

int qs_shutdown(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (forked(c))
        return QS_FORKED;
    if (atomic_exchange(&c->closed, 1))
        return 0;
    /* Wake writers queued for the write lock and blocked queue readers:
     * they return QS_CLOSED. */
    pthread_mutex_lock(&c->wmu);
    pthread_cond_broadcast(&c->wcond);
    pthread_mutex_unlock(&c->wmu);
    pthread_mutex_lock(&c->mu);
    qq_wake_all(c);
    pthread_mutex_unlock(&c->mu);
    while (atomic_load(&c->calls) > 0) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    /* No call is running: a transaction still open, whoever began it,
     * is abandoned. */
    pthread_mutex_lock(&c->wmu);
    int busy = c->wbusy;
    c->wbusy = 1;
    pthread_mutex_unlock(&c->wmu);
    if (busy && c->pg.in_txn)
        abort_locked(c);
    int rc = 0, locked = !c->shared || busy;
    if (!locked && !c->readonly)
        locked = process_lock(c, c->lock_timeout) == 0;
    if (locked) {
        /* Our reservations go back to their queues; and the last handle
         * leaves the log one page long. */
        if (c->shared)
            qq_close(c);
        uint64_t keep = !c->shared || sh_exclusive(&c->sh) == 0
                            ? PG_SIZE : c->checkpoint_bytes + (1u << 20);
        if (!c->readonly)
            rc = checkpoint_locked(c, keep);
        if (rc == QS_LOCKED)
            rc = 0;     /* others are still reading: they checkpoint later */
        if (c->shared)
            sh_wunlock(&c->sh);
    }
    /* Otherwise the others still commit and checkpoint; our reservations
     * return when they find our slot abandoned. */
    pg_close(&c->pg);
    if (c->shared)
        sh_close(&c->sh);   /* let others in, or let an opener be alone */
    if (c->log_fd >= 0)
        close(c->log_fd);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = c->log_fd = -1;
    return rc;
}

int qs_close(qs_casket *c)
{
    if (!c)
        return 0;
    if (forked(c)) {
        /* The parent owns the locks and the shared state this copy
         * inherited, and its threads' mutexes may have been held at the
         * fork: release our descriptors and memory (casket_free only
         * unmaps the region), touch nothing else. */
        if (!atomic_load(&c->closed))
            pg_close(&c->pg);   /* a shut-down handle's pager is gone */
        casket_free(c);
        return 0;
    }
    int rc = qs_shutdown(c);
    destroy_sync(c);
    casket_free(c);
    return rc;
}

/* ---- records ------------------------------------------------------------ */

typedef struct rec_args {
    const uint8_t *key;
    size_t klen;
    const void *val;
    size_t vlen;
    uint64_t count;
    size_t n;
    const uint8_t *keys, *vals;
    const uint64_t *koff, *voff;
} rec_args;

static int check_kv(const void *key, size_t klen, const void *val, size_t vlen)
{
    if ((!key && klen) || (!val && vlen))
        return QS_INVAL;
    if (klen > QS_MAX_KEY || vlen > QS_MAX_VALUE)
        return QS_TOOBIG;
    return 0;
}

/* Removes every record of key; a->count gets how many. */
static int outlist_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    a->count = 0;
    for (;;) {
        bt_path path;
        int eq, rc = bt_seek_ge(bt, &pk, &path);
        if (rc == QS_NOTFOUND)
            return 0;
        if (rc || (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
            return rc;
        if (!eq)
            return 0;
        if ((rc = bt_delete(bt, &path)) != 0)
            return rc;
        a->count++;
    }
}

static int insert_first(bt_ctx *bt, rec_args *a)
{
    return bt_putdup(bt, a->key, (uint32_t)a->klen, a->val, a->vlen, NULL);
}

static int put_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    int rc = outlist_fn(c, bt, arg);
    return rc ? rc : insert_first(bt, arg);
}

static int putkeep_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    bt_path path;
    int eq = 0, rc = bt_seek_ge(bt, &pk, &path);
    if (rc == 0 && (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    if (rc && rc != QS_NOTFOUND)
        return rc;
    if (eq)
        return QS_KEYEXIST;
    return insert_first(bt, a);
}

static int putdup_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    return bt_putdup(bt, a->key, (uint32_t)a->klen, a->val, a->vlen, NULL);
}

/* A batch is applied in key order: putdups of different keys commute and a
 * stable sort keeps each key's values in their given order, so the result
 * is the same as applying them one by one -- but the tree is then walked
 * left to right, touching each leaf once while it is hot in the CPU cache
 * (and, for batches larger than the cache budget, spilling each page about
 * once instead of over and over). */
typedef struct sort_ent {
    uint64_t prefix;    /* first 8 key bytes, big-endian, zero padded */
    uint32_t idx;
} sort_ent;

static int cmp_full(const rec_args *a, const sort_ent *x, const sort_ent *y)
{
    size_t xl = a->koff[x->idx + 1] - a->koff[x->idx], yl = a->koff[y->idx + 1] - a->koff[y->idx];
    size_t n = xl < yl ? xl : yl;
    int r = n ? memcmp(a->keys + a->koff[x->idx], a->keys + a->koff[y->idx], n) : 0;
    if (r == 0 && xl != yl)
        r = xl < yl ? -1 : 1;
    if (r == 0)
        r = x->idx < y->idx ? -1 : x->idx > y->idx;
    return r;
}

static void merge_sort(const rec_args *a, sort_ent *v, sort_ent *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(a, v, tmp, h);
    merge_sort(a, v + h, tmp, n - h);
    if (cmp_full(a, &v[h - 1], &v[h]) <= 0)
        return;
    memcpy(tmp, v, n * sizeof *v);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        v[k++] = cmp_full(a, &tmp[i], &tmp[j]) <= 0 ? tmp[i++] : tmp[j++];
    while (i < h)
        v[k++] = tmp[i++];
    while (j < n)
        v[k++] = tmp[j++];
}

static int sort_batch(const rec_args *a, sort_ent **out)
{
    size_t n = a->n;
    sort_ent *v = malloc(n * sizeof *v), *tmp = malloc(n * sizeof *tmp);
    size_t *count = calloc(65536, sizeof *count);
    if (!v || !tmp || !count) {
        free(v);
        free(tmp);
        free(count);
        return QS_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = a->keys + a->koff[i];
        size_t kl = a->koff[i + 1] - a->koff[i];
        uint64_t p = 0;
        for (size_t b = 0; b < 8; b++)
            p = (p << 8) | (b < kl ? k[b] : 0);
        v[i].prefix = p;
        v[i].idx = (uint32_t)i;
    }
    /* LSD radix sort on the prefix, 16 bits a pass (stable). */
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(v[i].prefix >> shift) & 0xffff]++;
        if (count[(v[0].prefix >> shift) & 0xffff] == n)
            continue;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t t = count[d];
            count[d] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++)
            tmp[count[(v[i].prefix >> shift) & 0xffff]++] = v[i];
        sort_ent *sw = v;
        v = tmp;
        tmp = sw;
    }
    /* Equal prefixes: order by the whole key (runs are usually sorted). */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && v[j].prefix == v[i].prefix)
            j++;
        if (j - i > 1)
            merge_sort(a, v + i, tmp, j - i);
        i = j;
    }
    free(tmp);
    free(count);
    *out = v;
    return 0;
}

static int putdup_many_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    rec_args *a = arg;
    sort_ent *order = NULL;
    int rc = 0;
    if (a->n > 1 && (rc = sort_batch(a, &order)) != 0)
        return rc;
    for (size_t j = 0; j < a->n && rc == 0; j++) {
        size_t i = order ? order[j].idx : j;
        if (order && j + 16 < a->n) {
            /* Sorted order visits the caller's arrays at random: fetch
             * ahead, offsets first, then the bytes they point at. */
            __builtin_prefetch(&a->koff[order[j + 16].idx]);
            __builtin_prefetch(&a->voff[order[j + 16].idx]);
            size_t f = order[j + 8].idx;
            __builtin_prefetch(a->keys + a->koff[f]);
            __builtin_prefetch(a->vals + a->voff[f]);
        }
        rc = bt_putdup(bt, a->keys + a->koff[i], (uint32_t)(a->koff[i + 1] - a->koff[i]),
                       a->vals + a->voff[i], a->voff[i + 1] - a->voff[i], NULL);
        if (rc == 0 && (j & 1023) == 1023)
            rc = pg_trim(&c->pg, 1);
    }
    free(order);
    return rc;
}

static int out_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    rec_args *a = arg;
    bt_key pk = {a->key, (uint32_t)a->klen, 0};
    bt_path path;
    int eq, rc = bt_seek_ge(bt, &pk, &path);
    if (rc || (rc = bt_key_is(bt, &path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    return eq ? bt_delete(bt, &path) : QS_NOTFOUND;
}

static int do_put(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = c ? check_kv(key, klen, val, vlen) : QS_INVAL;
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return rc ? rc : write_grouped(c, put_fn, &a);
}

static int do_putkeep(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = c ? check_kv(key, klen, val, vlen) : QS_INVAL;
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return rc ? rc : write_grouped(c, putkeep_fn, &a);
}

#define PEND_MAX_RECORDS (256u << 10)
#define PEND_MAX_BYTES (32u << 20)

/* Applies the buffered putdups of the caller's transaction, in key order. */
static int flush_pending(qs_casket *c)
{
    if (c->pend_n == 0)
        return 0;
    rec_args a = {.n = c->pend_n, .keys = c->pend_keys.data, .vals = c->pend_vals.data,
                  .koff = c->pend_koff, .voff = c->pend_voff};
    int rc = write_core(c, putdup_many_fn, &a, 1);
    drop_pending(c);
    return rc;
}

/* Buffers a putdup of the caller's own transaction.  Nothing reads the
 * tree in that view without flushing first, so the deferral cannot be
 * observed; it lets a long run of putdups walk the tree in key order. */
static int pend_add(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    if (c->pend_n + 2 > c->pend_cap) {
        size_t ncap = c->pend_cap ? c->pend_cap * 2 : 1024;
        uint64_t *k = realloc(c->pend_koff, ncap * sizeof *k);
        if (!k)
            return QS_NOMEM;
        c->pend_koff = k;
        uint64_t *v = realloc(c->pend_voff, ncap * sizeof *v);
        if (!v)
            return QS_NOMEM;
        c->pend_voff = v;
        c->pend_cap = ncap;
    }
    if (bt_buf_reserve(&c->pend_keys, klen + 1) || bt_buf_reserve(&c->pend_vals, vlen + 1))
        return QS_NOMEM;
    if (c->pend_n == 0)
        c->pend_koff[0] = c->pend_voff[0] = 0;
    if (klen)
        memcpy(c->pend_keys.data + c->pend_keys.len, key, klen);
    if (vlen)
        memcpy(c->pend_vals.data + c->pend_vals.len, val, vlen);
    c->pend_keys.len += klen;
    c->pend_vals.len += vlen;
    c->pend_n++;
    c->pend_koff[c->pend_n] = c->pend_keys.len;
    c->pend_voff[c->pend_n] = c->pend_vals.len;
    if (c->pend_n >= PEND_MAX_RECORDS || c->pend_keys.len + c->pend_vals.len >= PEND_MAX_BYTES)
        return flush_pending(c);
    return 0;
}

static int do_putdup(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = c ? check_kv(key, klen, val, vlen) : QS_INVAL;
    if (rc)
        return rc;
    if (!c->readonly && i_own(c) && c->explicit_txn) {
        if (c->txn_error)
            return c->txn_error;
        return pend_add(c, key, klen, val, vlen);
    }
    rec_args a = {.key = key, .klen = klen, .val = val, .vlen = vlen};
    return write_grouped(c, putdup_fn, &a);
}

static int do_putdup_many(qs_casket *c, size_t n, const void *keys, const uint64_t *koff,
                   const void *vals, const uint64_t *voff)
{
    if (!c || (n && (!koff || !voff)) || n >= UINT32_MAX)
        return QS_INVAL;
    for (size_t i = 0; i < n; i++) {
        if (koff[i + 1] < koff[i] || voff[i + 1] < voff[i])
            return QS_INVAL;
        int rc = check_kv(keys, koff[i + 1] - koff[i], vals, voff[i + 1] - voff[i]);
        if (rc)
            return rc;
    }
    if (n == 0)
        return c->readonly ? QS_READONLY : 0;
    rec_args a = {.n = n, .keys = keys, .vals = vals, .koff = koff, .voff = voff};
    return write_grouped(c, putdup_many_fn, &a);
}

static int do_out(qs_casket *c, const void *key, size_t klen)
{
    int rc = c ? check_kv(key, klen, NULL, 0) : QS_INVAL;
    rec_args a = {.key = key, .klen = klen};
    return rc ? rc : write_grouped(c, out_fn, &a);
}

static int do_outlist(qs_casket *c, const void *key, size_t klen, uint64_t *removed)
{
    int rc = c ? check_kv(key, klen, NULL, 0) : QS_INVAL;
    rec_args a = {.key = key, .klen = klen};
    if (rc == 0)
        rc = write_grouped(c, outlist_fn, &a);
    if (removed)
        *removed = rc == 0 ? a.count : 0;
    return rc;
}

/* Read operations run in the caller's view under the operation mutex. */
static int read_enter(qs_casket *c, bt_ctx *bt)
{
    bt->p = &c->pg;
    bt->wview = i_own(c);
    bt->ns = NS_USER;
    if (bt->wview && c->pend_n) {
        int rc = flush_pending(c);
        if (rc)
            return rc;
    }
    return cs_view_lock(c);
}

#define READ_ENTER(c, bt)                                                                 \
    do {                                                                                  \
        int enter_rc_ = read_enter((c), (bt));                                            \
        if (enter_rc_)                                                                    \
            return enter_rc_;                                                             \
    } while (0)

static void read_leave(qs_casket *c, bt_ctx *bt)
{
    pg_trim(&c->pg, bt->wview);
    cs_view_unlock(c);
}

int cs_write(qs_casket *c, cs_write_fn fn, void *arg) { return write_op(c, fn, arg); }

int cs_write_try(qs_casket *c, cs_write_fn fn, void *arg)
{
    if (i_own(c))
        return write_op(c, fn, arg);
    return write_core(c, fn, arg, 0);
}

int cs_read_enter(qs_casket *c, bt_ctx *bt, int ns)
{
    int rc = read_enter(c, bt);
    bt->ns = ns;
    return rc;
}

void cs_read_leave(qs_casket *c, bt_ctx *bt) { read_leave(c, bt); }

int cs_owns(qs_casket *c) { return i_own(c); }

int cs_in_txn(qs_casket *c) { return i_own(c) && c->explicit_txn; }

static int find_first(bt_ctx *bt, const void *key, size_t klen, bt_path *path)
{
    bt_key pk = {key, (uint32_t)klen, 0};
    int eq, rc = bt_seek_ge(bt, &pk, path);
    if (rc || (rc = bt_key_is(bt, path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    return eq ? 0 : QS_NOTFOUND;
}

static int do_get(qs_casket *c, const void *key, size_t klen, void **val, size_t *vlen)
{
    if (!c || !val || !vlen)
        return QS_INVAL;
    *val = NULL;
    *vlen = 0;
    int rc = check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_path path;
    bt_buf out = {0};
    READ_ENTER(c, &bt);
    rc = find_first(&bt, key, klen, &path);
    if (rc == 0)
        rc = bt_read(&bt, &path, NULL, &out, 0, NULL);
    read_leave(c, &bt);
    if (rc) {
        free(out.data);
        return rc;
    }
    if (!out.data && !(out.data = malloc(1)))
        return QS_NOMEM;
    *val = out.data;
    *vlen = out.len;
    return 0;
}

static int do_getdup(qs_casket *c, const void *key, size_t klen, void **outp, size_t *outlen,
              uint64_t *count)
{
    if (!c || !outp || !outlen || !count)
        return QS_INVAL;
    *outp = NULL;
    *outlen = 0;
    *count = 0;
    int rc = check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_path path;
    bt_buf out = {0};
    uint64_t n = 0;
    READ_ENTER(c, &bt);
    rc = find_first(&bt, key, klen, &path);
    while (rc == 0) {
        int eq;
        if ((rc = bt_key_is(&bt, &path, key, (uint32_t)klen, &eq)) != 0 || !eq)
            break;
        if ((rc = bt_read(&bt, &path, NULL, &out, 1, NULL)) != 0)
            break;
        n++;
        rc = bt_next(&bt, &path);
    }
    read_leave(c, &bt);
    if (rc && rc != QS_NOTFOUND) {
        free(out.data);
        return rc;
    }
    *outp = out.data;
    *outlen = out.len;
    *count = n;
    return 0;
}

static int do_count(qs_casket *c, const void *key, size_t klen, uint64_t *count)
{
    if (!c || !count)
        return QS_INVAL;
    *count = 0;
    int rc = check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    uint64_t lo, hi;
    bt_key a = {key, (uint32_t)klen, 0}, b = {key, (uint32_t)klen, UINT64_MAX};
    READ_ENTER(c, &bt);
    rc = bt_rank(&bt, &a, &lo);
    if (rc == 0)
        rc = bt_rank(&bt, &b, &hi);
    read_leave(c, &bt);
    if (rc == 0)
        *count = hi - lo;
    return rc;
}

static int do_records(qs_casket *c, uint64_t *count)
{
    if (!c || !count)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(c, &bt);
    int rc = bt_total(&bt, count);
    read_leave(c, &bt);
    return rc;
}

/* ---- sync, check, compact, stat ------------------------------------------------ */

static int do_sync(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (c->readonly)
        return 0;
    if (i_own(c))
        return QS_TXN;
    int rc = writer_enter(c);
    if (rc)
        return rc;
    if ((rc = heal(c)) == 0)
        rc = checkpoint_locked(c, c->checkpoint_bytes + (1u << 20));
    writer_leave(c);
    return rc;
}

static int check_freelist(pager *p, uint8_t *seen, char *msg, size_t cap)
{
    uint8_t *page = malloc(PG_SIZE);
    if (!page)
        return QS_NOMEM;
    uint32_t pgno = p->meta.free_head, npages = p->meta.npages;
    uint64_t count = 0;
    int rc = 0;
    while (pgno && rc == 0) {
        if (pgno >= npages || seen[pgno]) {
            snprintf(msg, cap, "page %u: free list points at a bad or used page", pgno);
            rc = QS_CORRUPT;
            break;
        }
        seen[pgno] = 1;
        count++;
        if ((rc = pg_read_raw(p, pgno, page)) != 0) {
            snprintf(msg, cap, "page %u: free-list page unreadable: %s", pgno, qs_strerror(rc));
            break;
        }
        uint32_t n = rd32(page + 8);
        if (page[0] != PT_TRUNK || n > (PG_USABLE - 12) / 4) {
            snprintf(msg, cap, "page %u: bad free-list page", pgno);
            rc = QS_CORRUPT;
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t f = rd32(page + 12 + 4 * i);
            if (f == 0 || f >= npages || seen[f]) {
                snprintf(msg, cap, "page %u: free-list entry %u is bad or used twice", pgno, f);
                rc = QS_CORRUPT;
                break;
            }
            seen[f] = 1;
            count++;
        }
        pgno = rd32(page + 4);
    }
    if (rc == 0 && count != p->meta.free_count) {
        snprintf(msg, cap, "free list holds %llu pages, header says %u",
                 (unsigned long long)count, p->meta.free_count);
        rc = QS_CORRUPT;
    }
    free(page);
    return rc;
}

static int do_check(qs_casket *c, char *msg, size_t msgcap)
{
    char dummy[8];
    if (!c)
        return QS_INVAL;
    if (!msg || msgcap == 0) {
        msg = dummy;
        msgcap = sizeof dummy;
    }
    msg[0] = 0;
    if (i_own(c))
        return QS_TXN;
    if (!c->readonly) {
        int wrc = writer_enter(c);
        if (wrc)
            return wrc;
    }
    int vrc = cs_view_lock(c);
    if (vrc) {
        if (!c->readonly)
            writer_leave(c);
        return vrc;
    }
    pager *p = &c->pg;
    char lmsg[200];
    int rc = pg_check_log(p, lmsg, sizeof lmsg);
    if (rc == QS_CORRUPT)
        snprintf(msg, msgcap, "%s%s: %s", c->path, LOG_SUFFIX, lmsg);
    else if (rc)
        snprintf(msg, msgcap, "reading the log failed: %s", qs_strerror(rc));
    uint8_t *seen = rc ? NULL : calloc(p->meta.npages ? p->meta.npages : 1, 1);
    if (rc == 0 && !seen)
        rc = QS_NOMEM;
    uint64_t records;
    for (int ns = 0; ns < PG_NAMESPACES && rc == 0; ns++) {
        bt_ctx bt = {p, 0, ns};
        rc = bt_check(&bt, seen, &records, msg, msgcap);
        if (rc && rc != QS_CORRUPT && !msg[0])
            snprintf(msg, msgcap, "reading the tree failed: %s", qs_strerror(rc));
    }
    if (rc == 0)
        rc = check_freelist(p, seen, msg, msgcap);
    for (uint32_t i = 1; rc == 0 && i < p->meta.npages; i++)
        if (!seen[i]) {
            snprintf(msg, msgcap, "page %u: neither in a tree nor on the free list", i);
            rc = QS_CORRUPT;
        }
    free(seen);
    pg_trim(p, 0);
    cs_view_unlock(c);
    if (!c->readonly)
        writer_leave(c);
    return rc;
}

/* Where a copy of every record (compaction, backup) has got to. */
typedef struct copy_state {
    int ns;                     /* namespace being copied */
    int positioned;             /* path is on the next record of ns */
    int done;
    bt_path path;
    bt_buf k, v;
} copy_state;

/* The records a copy will make, for its progress (committed view). */
static int copy_total(pager *src, uint64_t *total)
{
    *total = 0;
    for (int ns = 0; ns < PG_NAMESPACES; ns++) {
        bt_ctx from = {src, 0, ns};
        uint64_t n;
        int rc = bt_total(&from, &n);
        if (rc)
            return rc;
        *total += n;
    }
    return 0;
}

/* Copies up to max more records of src (committed view) into dst's
 * transaction, each namespace in order, counting them in *progress; sets
 * st->done after the last.  The path stays valid between calls only while
 * src's committed view does not move: the caller holds its operation mutex
 * throughout, or src is a snapshot. */
static int copy_some(pager *src, pager *dst, copy_state *st, size_t max,
                     _Atomic uint64_t *progress)
{
    int rc = 0;
    while (!st->done && max > 0) {
        bt_ctx from = {src, 0, st->ns}, to = {dst, 1, st->ns};
        if (!st->positioned) {
            rc = bt_first(&from, &st->path);
            st->positioned = 1;
        }
        for (; rc == 0 && max > 0; max--) {
            uint64_t seq;
            bt_path at;
            st->k.len = st->v.len = 0;
            if ((rc = bt_read(&from, &st->path, &st->k, &st->v, 0, &seq)) != 0)
                break;
            bt_key pk = {st->k.data, (uint32_t)st->k.len, seq};
            if ((rc = bt_seek(&to, &pk, &at)) != 0 && rc != QS_NOTFOUND)
                break;
            if ((rc = bt_insert(&to, &at, &pk, st->v.data, st->v.len)) != 0)
                break;
            if ((rc = pg_trim(dst, 1)) != 0 || (rc = pg_trim(src, 0)) != 0)
                break;
            atomic_fetch_add_explicit(progress, 1, memory_order_relaxed);
            rc = bt_next(&from, &st->path);
        }
        if (rc == QS_NOTFOUND) {
            rc = 0;
            st->positioned = 0;
            st->done = ++st->ns == PG_NAMESPACES;
        }
        if (rc)
            break;
    }
    return rc;
}

static void copy_free(copy_state *st)
{
    free(st->k.data);
    free(st->v.data);
}

/* Copies every record of src (committed view) into dst's transaction. */
static int copy_records(pager *src, pager *dst, qs_casket *counted)
{
    copy_state st = {0};
    uint64_t total;
    int rc = copy_total(src, &total);
    if (rc == 0) {
        atomic_store(&counted->progress_done, 0);
        atomic_store(&counted->progress_total, total);
        rc = copy_some(src, dst, &st, SIZE_MAX, &counted->progress_done);
    }
    copy_free(&st);
    return rc;
}

/* A private casket a copy is written into (compaction, backup): no region,
 * no sync per commit (it is synced once, whole, by scratch_finish); its
 * file is created with permission bits perm. */
static int scratch_open(const char *path, unsigned perm, qs_casket **out)
{
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW;
    o.perm = perm;
    o.sync = 0;
    o.lock_timeout = 0;
    return open_casket(path, &o, 0, out);
}

/* Ends the scratch casket's transaction: commits it when rc is 0 (else
 * aborts it), checkpoints everything into its main file and syncs that, so
 * the file alone is the casket.  Returns the first error. */
static int scratch_finish(qs_casket *t, int rc)
{
    if (rc == 0) {
        int wrote;
        if ((rc = pg_commit_prepare(&t->pg)) == 0)
            rc = pg_commit_write(&t->pg, 0, &wrote);
        if (rc == 0 && wrote)
            pg_publish(&t->pg);
    }
    if (t->pg.in_txn)
        pg_abort(&t->pg);
    if (rc == 0 && (rc = writer_enter(t)) == 0) {
        rc = checkpoint_locked(t, PG_SIZE);
        writer_leave(t);
    }
    if (rc == 0 && os_fullsync(t->fd) != 0)
        rc = errno;
    return rc;
}

static void scratch_free(qs_casket *t)
{
    if (t) {
        pg_close(&t->pg);
        destroy_sync(t);
        casket_free(t);
    }
}

/* Opens the directory holding path (for the sync that makes a rename or a
 * link durable).  0 and *dfd, or an error. */
static int open_dir_of(const char *path, int *dfd)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    if (!dir)
        return QS_NOMEM;
    *dfd = open(dir, O_RDONLY | O_CLOEXEC);
    free(dir);
    return *dfd < 0 ? errno : 0;
}

static int do_compact(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
    if (c->readonly)
        return QS_READONLY;
    if (i_own(c))
        return QS_TXN;
    int rc = writer_enter(c);
    if (rc)
        return rc;
    /* The main file is replaced: nobody else may have it open. */
    if (c->shared && (rc = sh_exclusive(&c->sh)) != 0) {
        writer_leave(c);
        return rc;
    }
    size_t n = strlen(c->path);
    char *tmp = malloc(n + 16), *tmplog = malloc(n + 32);
    qs_casket *t = NULL;
    if (!tmp || !tmplog) {
        free(tmp);
        free(tmplog);
        writer_leave(c);
        return QS_NOMEM;
    }
    snprintf(tmp, n + 16, "%s-compact", c->path);
    snprintf(tmplog, n + 32, "%s-compact%s", c->path, LOG_SUFFIX);
    if ((rc = heal(c)) != 0 || (rc = checkpoint_locked(c, PG_SIZE)) != 0)
        goto out;
    /* The compacted file replaces the main file: it keeps its bits exactly
     * (the umask applied at its creation, not now). */
    struct stat ms;
    if (fstat(c->fd, &ms) != 0) {
        rc = errno;
        goto out;
    }
    if ((rc = scratch_open(tmp, ms.st_mode & 07777, &t)) != 0)
        goto out;
    if (fchmod(t->fd, ms.st_mode & 07777) != 0) {
        rc = errno;
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    t->pg.next_txn = c->pg.next_txn;
    pg_begin(&t->pg);
    t->pg.wmeta.next_id = c->pg.meta.next_id;
    t->pg.wmeta.next_seq = c->pg.meta.next_seq;
    rc = copy_records(&c->pg, &t->pg, c);
    pthread_mutex_unlock(&c->mu);
    rc = scratch_finish(t, rc);
    if (rc)
        goto out;
    /* The directory is opened before the rename, so that nothing can fail
     * between the rename and the sync that makes it durable. */
    int dfd;
    if ((rc = open_dir_of(c->path, &dfd)) != 0)
        goto out;
    /* The rename is the commit point: before it the old file is the casket,
     * after it the new one, and the log is empty either way. */
    if (rename(tmp, c->path) != 0) {
        rc = errno;
        close(dfd);
        goto out;
    }
    /* A failed directory sync is reported, but the new file is in place
     * now and this handle must move to it either way. */
    int dir_rc = os_fullsync(dfd) != 0 ? errno : 0;
    close(dfd);
    int newfd = t->fd;
    t->fd = -1;
    pthread_mutex_lock(&c->mu);
    pager fresh;
    rc = pg_open(&fresh, newfd, c->log_fd, 0, 0, c->pg.budget, c->checkpoint_bytes);
    if (rc == 0) {
        fresh.next_txn = c->pg.next_txn > fresh.next_txn ? c->pg.next_txn : fresh.next_txn;
        /* "since open" statistics go on counting */
        fresh.commits = c->pg.commits;
        fresh.checkpoints = c->pg.checkpoints;
        fresh.spilled = c->pg.spilled;
        fresh.log.syncs = c->pg.log.syncs;
        pg_close(&c->pg);
        close(c->fd);
        c->pg = fresh;
        c->fd = newfd;
        c->version++;
        qq_invalidate(c);
        publish_shared(c);
    } else {
        /* Our pager still points at the replaced file: writing there would
         * be lost, so refuse writes; reads see the last commit. */
        close(newfd);
        c->defunct = rc;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        rc = dir_rc;
out:
    scratch_free(t);
    if (tmplog)
        unlink(tmplog);
    if (tmp && rc)
        unlink(tmp);
    free(tmp);
    free(tmplog);
    if (c->shared)
        sh_share(&c->sh);
    writer_leave(c);
    return rc;
}

/* ---- snapshots and backups ---------------------------------------------------- */

static int do_snapshot_open(qs_casket *c, uint64_t max_log_bytes, uint64_t cache_bytes,
                            qs_casket **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_READ;
    o.perm = c->perm;
    o.lock_timeout = c->lock_timeout;
    o.cache_bytes = cache_bytes;
    o.checkpoint_bytes = c->checkpoint_bytes;
    qs_casket *s;
    int rc = open_casket(c->path, &o, 1, &s);
    if (rc)
        return rc;
    /* The newest commit, pinned inside the checkpoint guard: a checkpoint
     * either ended before (we read its result) or sees the pin. */
    if ((rc = cs_view_lock(s)) == 0) {
        if (s->shared)
            sh_pin(&s->sh, max_log_bytes ? max_log_bytes : DEFAULT_SNAPSHOT_LOG);
        s->frozen = 1;
        cs_view_unlock(s);
    }
    if (rc) {
        qs_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

static char *suffixed(const char *path, const char *suffix)
{
    size_t n = strlen(path), m = strlen(suffix);
    char *p = malloc(n + m + 1);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, suffix, m + 1);
    }
    return p;
}

/* Records copied per operation of the snapshot: short enough that a
 * checkpoint never waits long for the copy, long enough to amortize the
 * guard. */
#define BACKUP_STEP 2048

/* Copies snapshot s into the scratch casket t, one step per operation. */
static int backup_copy(qs_casket *c, qs_casket *s, qs_casket *t)
{
    copy_state st = {0};
    uint64_t total = 0;
    int rc = cs_view_lock(s);
    if (rc)
        return rc;
    rc = copy_total(&s->pg, &total);
    t->pg.next_txn = s->pg.meta.txn + 1;
    pg_begin(&t->pg);
    t->pg.wmeta.next_id = s->pg.meta.next_id;
    t->pg.wmeta.next_seq = s->pg.meta.next_seq;
    cs_view_unlock(s);
    atomic_store(&c->progress_done, 0);
    atomic_store(&c->progress_total, total);
    while (rc == 0 && !st.done && (rc = cs_view_lock(s)) == 0) {
        rc = copy_some(&s->pg, &t->pg, &st, BACKUP_STEP, &c->progress_done);
        cs_view_unlock(s);
    }
    copy_free(&st);
    return rc;
}

static int do_backup(qs_casket *c, const char *dest)
{
    if (!dest || !*dest)
        return QS_INVAL;
    int rc = 0;
    char *dlog = suffixed(dest, LOG_SUFFIX), *dshm = suffixed(dest, SHM_SUFFIX);
    char *tmp = suffixed(dest, "-backup"), *tmplog = tmp ? suffixed(tmp, LOG_SUFFIX) : NULL;
    qs_casket *s = NULL, *t = NULL;
    if (!dlog || !dshm || !tmp || !tmplog) {
        rc = QS_NOMEM;
        goto out;
    }
    /* Never over another casket: its log would be replayed over the copy. */
    if (access(dest, F_OK) == 0 || access(dlog, F_OK) == 0 || access(dshm, F_OK) == 0) {
        rc = EEXIST;
        goto out;
    }
    if ((rc = do_snapshot_open(c, 0, 0, &s)) != 0 || (rc = scratch_open(tmp, c->perm, &t)) != 0)
        goto out;
    rc = scratch_finish(t, backup_copy(c, s, t));
    int dfd = -1;
    if (rc == 0)
        rc = open_dir_of(dest, &dfd);
    /* link, not rename: it fails rather than replace a file that appeared
     * at dest meanwhile. */
    if (rc == 0 && link(tmp, dest) != 0)
        rc = errno;
    if (rc == 0 && os_fullsync(dfd) != 0)
        rc = errno;
    if (dfd >= 0)
        close(dfd);
out:
    scratch_free(t);
    if (s)
        qs_close(s);
    if (tmp)
        unlink(tmp);
    if (tmplog)
        unlink(tmplog);
    free(dlog);
    free(dshm);
    free(tmp);
    free(tmplog);
    return rc;
}

static int do_progress(qs_casket *c, uint64_t *done, uint64_t *total)
{
    if (!done || !total)
        return QS_INVAL;
    *done = atomic_load(&c->progress_done);
    *total = atomic_load(&c->progress_total);
    return 0;
}
uint32_t qs_corrupt_page(qs_casket *c) { return c ? pg_bad_page(&c->pg) : 0; }

static int do_stat_get(qs_casket *c, qs_stat *st)
{
    if (!c || !st)
        return QS_INVAL;
    memset(st, 0, sizeof *st);
    bt_ctx bt;
    READ_ENTER(c, &bt);
    pg_meta *m = pg_meta_of(&c->pg, bt.wview);
    st->page_size = PG_SIZE;
    st->format_version = QS_FORMAT_VERSION;
    st->pages = m->npages;
    st->free_pages = m->free_count;
    bt_total(&bt, &st->records);
    bt_depth(&bt, &st->depth);
    st->log_bytes = c->pg.log_end - PG_SIZE;
    st->log_file_bytes = c->pg.log.alloc;
    st->commits = c->pg.commits;
    st->syncs = c->pg.log.syncs;
    st->checkpoints = c->pg.checkpoints;
    st->spilled_pages = c->pg.spilled;
    read_leave(c, &bt);
    st->open_cursors = atomic_load(&c->open_cursors);
    struct stat fs;
    if (fstat(c->fd, &fs) == 0)
        st->file_bytes = (uint64_t)fs.st_size;
    if (c->log_fd >= 0 && fstat(c->log_fd, &fs) == 0)
        st->log_file_bytes = (uint64_t)fs.st_size;
    pthread_mutex_lock(&c->wmu);
    st->in_transaction = (uint32_t)c->wbusy;
    pthread_mutex_unlock(&c->wmu);
    return 0;
}

/* ---- cursors ------------------------------------------------------------ */

static int do_cursor_open(qs_casket *c, qs_cursor **out)
{
    if (!c || !out)
        return QS_INVAL;
    qs_cursor *cur = calloc(1, sizeof *cur);
    if (!cur)
        return QS_NOMEM;
    cur->c = c;
    atomic_fetch_add(&c->open_cursors, 1);
    *out = cur;
    return 0;
}

void qs_cursor_close(qs_cursor *cur)
{
    if (!cur)
        return;
    atomic_fetch_sub(&cur->c->open_cursors, 1);
    free(cur->key.data);
    free(cur);
}

/* Remembers the record the path points at, or unpositions on rc. */
static int cur_settle(qs_cursor *cur, bt_ctx *bt, int rc)
{
    if (rc) {
        cur->positioned = 0;
        return rc;
    }
    cur->key.len = 0;
    rc = bt_read(bt, &cur->path, &cur->key, NULL, 0, &cur->seq);
    cur->positioned = rc == 0;
    cur->on_record = 1;
    cur->version = cur->c->version;
    cur->wview = bt->wview;
    return rc;
}

/* Re-finds the cursor's record after a change: *exact says whether it is
 * still there (else the path is at the next record, or off the end). */
static int cur_refind(qs_cursor *cur, bt_ctx *bt, int *exact)
{
    *exact = cur->on_record;
    if (cur->version == cur->c->version && cur->wview == bt->wview)
        return 0;
    bt_key pk = {cur->key.data, (uint32_t)cur->key.len, cur->seq};
    int rc = bt_seek_ge(bt, &pk, &cur->path);
    if (rc) {
        *exact = 0;
        cur->version = 0;
        return rc;
    }
    int eq;
    uint64_t seq;
    if ((rc = bt_key_is(bt, &cur->path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    if (eq) {
        if ((rc = bt_read(bt, &cur->path, NULL, NULL, 0, &seq)) != 0)
            return rc;
        eq = seq == cur->seq;
    }
    *exact = cur->on_record = eq;
    cur->version = cur->c->version;
    cur->wview = bt->wview;
    return 0;
}

static int do_cursor_first(qs_cursor *cur)
{
    if (!cur)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_settle(cur, &bt, bt_first(&bt, &cur->path));
    read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_last(qs_cursor *cur)
{
    if (!cur)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_settle(cur, &bt, bt_last(&bt, &cur->path));
    read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_jump(qs_cursor *cur, const void *key, size_t klen)
{
    if (!cur)
        return QS_INVAL;
    int rc = check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_key pk = {key, (uint32_t)klen, 0};
    READ_ENTER(cur->c, &bt);
    rc = cur_settle(cur, &bt, bt_seek_ge(&bt, &pk, &cur->path));
    read_leave(cur->c, &bt);
    return rc;
}

static int cur_step(qs_cursor *cur, bt_ctx *bt, int reverse)
{
    int exact, rc;
    if (!cur->positioned)
        return QS_NOTFOUND;
    rc = cur_refind(cur, bt, &exact);
    if (rc == QS_NOTFOUND && !reverse)
        return cur_settle(cur, bt, QS_NOTFOUND);
    if (rc == QS_NOTFOUND) {
        /* Nothing at or after our key: the previous record is the last. */
        return cur_settle(cur, bt, bt_last(bt, &cur->path));
    }
    if (rc)
        return rc;
    if (reverse)
        rc = bt_prev(bt, &cur->path);
    else if (exact)
        rc = bt_next(bt, &cur->path);
    return cur_settle(cur, bt, rc);
}

static int do_cursor_next(qs_cursor *cur)
{
    if (!cur)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_step(cur, &bt, 0);
    read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_prev(qs_cursor *cur)
{
    if (!cur)
        return QS_INVAL;
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_step(cur, &bt, 1);
    read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_get(qs_cursor *cur, void **key, size_t *klen, void **val, size_t *vlen)
{
    if (!cur || (key && !klen) || (val && !vlen))
        return QS_INVAL;
    if (key)
        *key = NULL;
    if (val)
        *val = NULL;
    if (!cur->positioned)
        return QS_NOTFOUND;
    bt_ctx bt;
    bt_buf k = {0}, v = {0};
    int exact;
    READ_ENTER(cur->c, &bt);
    int rc = cur_refind(cur, &bt, &exact);
    if (rc == 0 && !exact)
        rc = QS_NOTFOUND;
    if (rc == 0)
        rc = bt_read(&bt, &cur->path, key ? &k : NULL, val ? &v : NULL, 0, NULL);
    read_leave(cur->c, &bt);
    if (rc == 0 && key && !k.data && !(k.data = malloc(1)))
        rc = QS_NOMEM;
    if (rc == 0 && val && !v.data && !(v.data = malloc(1)))
        rc = QS_NOMEM;
    if (rc) {
        free(k.data);
        free(v.data);
        return rc;
    }
    if (key) {
        *key = k.data;
        *klen = k.len;
    }
    if (val) {
        *val = v.data;
        *vlen = v.len;
    }
    return 0;
}

static int do_cursor_read(qs_cursor *cur, size_t max, int reverse, void **outp, size_t *outlen,
                   uint64_t *count)
{
    if (!cur || !outp || !outlen || !count)
        return QS_INVAL;
    *outp = NULL;
    *outlen = 0;
    *count = 0;
    if (!cur->positioned || max == 0)
        return 0;
    bt_ctx bt;
    bt_buf out = {0};
    uint64_t n = 0;
    int exact;
    READ_ENTER(cur->c, &bt);
    int rc = cur_refind(cur, &bt, &exact);
    if (rc == QS_NOTFOUND && reverse)
        rc = bt_last(&bt, &cur->path);  /* nothing at or after our key */
    else if (rc == 0 && !exact && reverse)
        rc = bt_prev(&bt, &cur->path);
    while (rc == 0 && n < max) {
        if ((rc = bt_read(&bt, &cur->path, &out, &out, 1, NULL)) != 0)
            break;
        n++;
        rc = reverse ? bt_prev(&bt, &cur->path) : bt_next(&bt, &cur->path);
    }
    if (rc == 0 || rc == QS_NOTFOUND) {
        rc = cur_settle(cur, &bt, rc);
        if (rc == QS_NOTFOUND)
            rc = 0;  /* ran off the end: the cursor is unpositioned */
    }
    read_leave(cur->c, &bt);
    if (rc) {
        free(out.data);
        return rc;
    }
    *outp = out.data;
    *outlen = out.len;
    *count = n;
    return 0;
}

static int cursor_out_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    qs_cursor *cur = arg;
    int exact, rc = cur_refind(cur, bt, &exact);
    if (rc == 0 && !exact)
        rc = QS_NOTFOUND;
    if (rc)
        return rc;
    if ((rc = bt_delete(bt, &cur->path)) != 0)
        return rc;
    /* The record after the removed one is the first >= its (key, seq). */
    bt_key pk = {cur->key.data, (uint32_t)cur->key.len, cur->seq};
    rc = bt_seek_ge(bt, &pk, &cur->path);
    if (rc == QS_NOTFOUND) {
        cur->positioned = 0;
        return 0;
    }
    return rc ? rc : cur_settle(cur, bt, 0);
}

static int do_cursor_out(qs_cursor *cur)
{
    if (!cur)
        return QS_INVAL;
    if (!cur->positioned)
        return QS_NOTFOUND;
    int rc = write_op(cur->c, cursor_out_fn, cur);
    if (rc == 0) {
        /* write_op bumped the version after our settle: re-find by key. */
        cur->version = 0;
        return cur->positioned ? 0 : QS_NOTFOUND;
    }
    return rc;
}

/* ---- public entry points: counted calls ----------------------------------- */

COUNTED(qs_begin, (qs_casket *c), c, c, do_begin, (c))
COUNTED(qs_commit, (qs_casket *c), c, c, do_commit, (c))
COUNTED(qs_abort, (qs_casket *c), c, c, do_abort, (c))
COUNTED(qs_put, (qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen), c, c, do_put, (c, key, klen, val, vlen))
COUNTED(qs_putkeep, (qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen), c, c, do_putkeep, (c, key, klen, val, vlen))
COUNTED(qs_putdup, (qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen), c, c, do_putdup, (c, key, klen, val, vlen))
COUNTED(qs_putdup_many, (qs_casket *c, size_t n, const void *keys, const uint64_t *koff, const void *vals, const uint64_t *voff), c, c, do_putdup_many, (c, n, keys, koff, vals, voff))
COUNTED(qs_out, (qs_casket *c, const void *key, size_t klen), c, c, do_out, (c, key, klen))
COUNTED(qs_outlist, (qs_casket *c, const void *key, size_t klen, uint64_t *removed), c, c, do_outlist, (c, key, klen, removed))
COUNTED(qs_get, (qs_casket *c, const void *key, size_t klen, void **val, size_t *vlen), c, c, do_get, (c, key, klen, val, vlen))
COUNTED(qs_getdup, (qs_casket *c, const void *key, size_t klen, void **outp, size_t *outlen, uint64_t *count), c, c, do_getdup, (c, key, klen, outp, outlen, count))
COUNTED(qs_count, (qs_casket *c, const void *key, size_t klen, uint64_t *count), c, c, do_count, (c, key, klen, count))
COUNTED(qs_records, (qs_casket *c, uint64_t *count), c, c, do_records, (c, count))
COUNTED(qs_sync, (qs_casket *c), c, c, do_sync, (c))
COUNTED(qs_check, (qs_casket *c, char *msg, size_t msgcap), c, c, do_check, (c, msg, msgcap))
COUNTED(qs_compact, (qs_casket *c), c, c, do_compact, (c))
COUNTED(qs_snapshot_open, (qs_casket *c, uint64_t max_log_bytes, uint64_t cache_bytes, qs_casket **out), c, c, do_snapshot_open, (c, max_log_bytes, cache_bytes, out))
COUNTED(qs_backup, (qs_casket *c, const char *dest), c, c, do_backup, (c, dest))
COUNTED(qs_progress, (qs_casket *c, uint64_t *done, uint64_t *total), c, c, do_progress, (c, done, total))
COUNTED(qs_stat_get, (qs_casket *c, qs_stat *st), c, c, do_stat_get, (c, st))
COUNTED(qs_cursor_open, (qs_casket *c, qs_cursor **out), c, c, do_cursor_open, (c, out))
COUNTED(qs_cursor_first, (qs_cursor *cur), cur, cur->c, do_cursor_first, (cur))
COUNTED(qs_cursor_last, (qs_cursor *cur), cur, cur->c, do_cursor_last, (cur))
COUNTED(qs_cursor_jump, (qs_cursor *cur, const void *key, size_t klen), cur, cur->c, do_cursor_jump, (cur, key, klen))
COUNTED(qs_cursor_next, (qs_cursor *cur), cur, cur->c, do_cursor_next, (cur))
COUNTED(qs_cursor_prev, (qs_cursor *cur), cur, cur->c, do_cursor_prev, (cur))
COUNTED(qs_cursor_get, (qs_cursor *cur, void **key, size_t *klen, void **val, size_t *vlen), cur, cur->c, do_cursor_get, (cur, key, klen, val, vlen))
COUNTED(qs_cursor_read, (qs_cursor *cur, size_t max, int reverse, void **outp, size_t *outlen, uint64_t *count), cur, cur->c, do_cursor_read, (cur, max, reverse, outp, outlen, count))
COUNTED(qs_cursor_out, (qs_cursor *cur), cur, cur->c, do_cursor_out, (cur))
