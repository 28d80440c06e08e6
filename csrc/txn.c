/* txn.c -- the transaction layer (tx_ inside; the cs_ calls of casket.h
 * for the layers above; qs_begin/qs_commit/qs_abort): the write lock, held
 * by a thread within the process and by the handle's slot across
 * processes; the owner of an explicit transaction, as the kernel knows it,
 * so one whose thread ended is abandoned; catching up with other processes'
 * commits; commit, abort, sync and checkpoint; running an operation in the
 * writer's view.  Apart because it is the one place that knows what a
 * transaction is: the record, cursor and queue layers above only hand it
 * operations to run. */
#include "handle.h"
#include "osdep.h"
#include "txn.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a checkpoint waits for other processes' operations to end
 * before it is put off to a later commit. */
#define CKPT_WAIT 0.25

static atomic_uint_fast64_t next_tid = 1;
static _Thread_local uint64_t my_tid_v;

static uint64_t my_tid(void)
{
    if (!my_tid_v)
        my_tid_v = atomic_fetch_add(&next_tid, 1);
    return my_tid_v;
}

int cs_owns(qs_casket *c)
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
    unsigned gen = cs_fork_generation();
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

void tx_locked_by_nobody(void)
{
    locked_by = (qs_lock_holder){0, 0, 0};
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
    tx_layers_call(c, TX_REFRESH);
    return 0;
}

/* cs_view_lock; without waiting (QS_WOULDBLOCK, nothing held) when wait
 * is 0. */
static int view_lock(qs_casket *c, int wait)
{
    if (wait)
        pthread_mutex_lock(&c->mu);
    else if (pthread_mutex_trylock(&c->mu) != 0)
        return QS_WOULDBLOCK;
    if (!c->shared)
        return 0;
    if (wait)
        sh_op_enter(&c->sh);
    else if (sh_op_try_enter(&c->sh) != 0) {
        pthread_mutex_unlock(&c->mu);
        return QS_WOULDBLOCK;
    }
    /* A snapshot never moves; a checkpoint may only have taken its pages
     * away after revoking its pin (inside the guard we are now in). */
    int rc = c->frozen ? (sh_pin_revoked(&c->sh) ? QS_SNAPSHOT_OLD : 0) : catch_up(c);
    if (rc) {
        sh_op_leave(&c->sh);
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

int cs_view_lock(qs_casket *c) { return view_lock(c, 1); }

void cs_view_unlock(qs_casket *c)
{
    if (c->shared)
        sh_op_leave(&c->sh);
    pthread_mutex_unlock(&c->mu);
}

/* Publishes our newest commit (or checkpoint) to other handles; mu held. */
void tx_publish(qs_casket *c)
{
    if (!c->shared)
        return;
    sh_publish(&c->sh, c->pg.log.salt, c->pg.log_end);
    c->seen_seq = c->wrote_seq = sh_commit_seq(&c->sh);
}

static int checkpoint_run(qs_casket *c, uint64_t keep, int pins_hold_off);

/* Takes the cross-process write lock for the thread that holds the
 * in-process one, and brings the writer up to date: the newest commit, a
 * commit a writer that died holding the lock left unpublished, a
 * checkpoint it died in, the log's size, and a transaction number no other
 * writer has used. */
/* view_wait 0: QS_WOULDBLOCK (nothing held) where bringing the writer up
 * to date would wait for another thread's call on the handle -- unless
 * the lock's last holder died, whose leftovers are never left behind. */
static int process_lock(qs_casket *c, double timeout, int view_wait)
{
    int died, rc = sh_wlock(&c->sh, timeout, &died);
    if (rc)
        return rc;
    int unfinished = 0;
    if ((rc = view_lock(c, view_wait || died)) == 0) {
        int found = 0;
        if (died && (rc = pg_adopt(&c->pg, &found)) == 0 && !found)
            rc = pg_checkpoint_unfinished(&c->pg, &unfinished);
        else if (c->seen_seq != c->wrote_seq && c->pg.log.salt)
            rc = pg_log_size(&c->pg);
        if (rc == 0 && found) {
            c->version++;
            tx_layers_call(c, TX_REFRESH);
            tx_publish(c);
        }
        if (rc == 0 && c->pg.log.salt == 0 && !c->readonly) {
            /* The casket was first opened read-only, without a log. */
            if ((rc = wal_reset(&c->pg.log, c->pg.meta.txn)) == 0 &&
                (rc = pg_log_size(&c->pg)) == 0) {
                c->pg.log_end = PG_SIZE;
                tx_publish(c);
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
    /* The dead writer's checkpoint is finished before anything is logged
     * behind page 0.  Its pins were revoked by the dead checkpointer, and
     * a snapshot taken since reads the main file only. */
    if (rc == 0 && unfinished &&
        (rc = checkpoint_run(c, tx_log_keep(c), 0)) != 0) {
        /* Readers kept us out: the next taker, finding the lock's holder
         * dead, tries again. */
        sh_wabandon(&c->sh);
        return rc;
    }
    if (rc)
        sh_wunlock(&c->sh);
    return rc;
}

int tx_process_lock(qs_casket *c, double timeout)
{
    return process_lock(c, timeout, 1);
}

/* ---- the layers above (cs_layer) -------------------------------------------- */

int cs_layer_add(qs_casket *c, const cs_layer *ops, void *state)
{
    if (c->nlayers == CS_LAYERS)
        return QS_INVAL;
    c->layers[c->nlayers].ops = ops;
    c->layers[c->nlayers].state = state;
    c->nlayers++;
    return 0;
}

void *cs_layer_state(qs_casket *c, const cs_layer *ops)
{
    for (int i = 0; i < c->nlayers; i++)
        if (c->layers[i].ops == ops)
            return c->layers[i].state;
    return NULL;
}

void cs_flush_due(qs_casket *c) { c->flush_due = 1; }

void tx_layers_call(qs_casket *c, tx_event ev)
{
    for (int i = 0; i < c->nlayers; i++) {
        const cs_layer *l = c->layers[i].ops;
        void (*fn)(qs_casket *, void *) = ev == TX_REFRESH      ? l->refresh
                                          : ev == TX_INVALIDATE ? l->invalidate
                                          : ev == TX_CLOSE      ? l->close
                                          : ev == TX_WAKE       ? l->wake
                                                                : l->free;
        if (fn)
            fn(c, c->layers[i].state);
    }
}

/* The writer's transaction ended (mu held): what the layers buffered for
 * it is applied or gone. */
static void layers_txn_end(qs_casket *c, int committed)
{
    c->flush_due = 0;
    for (int i = 0; i < c->nlayers; i++)
        if (c->layers[i].ops->txn_end)
            c->layers[i].ops->txn_end(c, c->layers[i].state, committed);
}

/* Applies what the layers buffered for the calling thread's transaction
 * (write lock held, mu not); the first error. */
static int flush_layers(qs_casket *c)
{
    int rc = 0;
    c->flush_due = 0;
    for (int i = 0; i < c->nlayers && rc == 0; i++)
        if (c->layers[i].ops->flush)
            rc = c->layers[i].ops->flush(c, c->layers[i].state);
    return rc;
}

/* ---- the write lock and transactions ---------------------------------------- */

static void writer_release(qs_casket *c);

int tx_writer_enter(qs_casket *c)
{
    return tx_writer_enter_opt(c, 1, c->lock_timeout);
}

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
    tx_abort_locked(c);
    tx_writer_leave(c);
    pthread_mutex_lock(&c->wmu);
}

/* QS_LOCKED for the thread that owns the transaction (wmu held). */
static int locked_by_thread(qs_casket *c)
{
    locked_by = (qs_lock_holder){(uint64_t)getpid(), (uint64_t)c->txn_tid, c->txn_thread};
    return QS_LOCKED;
}

static int writer_enter(qs_casket *c, int wait, double timeout, int view_wait);

/* Takes the in-process write lock, then the process lock.  Another
 * thread's transaction is waited for up to timeout seconds (wait 0: not
 * at all), then QS_LOCKED; one whose thread has ended is abandoned (see
 * abandon_orphan).  Another thread's single call is always waited for: it
 * ends by itself, within the call.  Another process is waited for what is
 * left of timeout. */
int tx_writer_enter_opt(qs_casket *c, int wait, double timeout)
{
    return writer_enter(c, wait, timeout, 1);
}

/* tx_writer_enter_opt; view_wait 0 as process_lock's. */
static int writer_enter(qs_casket *c, int wait, double timeout, int view_wait)
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
        int rc = process_lock(c, left > 0 ? left : 0, view_wait);
        if (rc) {
            if (rc == QS_LOCKED)
                locked_by = (qs_lock_holder){sh_wlock_holder(&c->sh), 0, 0};
            writer_release(c);
            return rc;
        }
    }
    return 0;
}

void tx_writer_leave(qs_casket *c)
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

static void run_followup(qs_casket *c);

void tx_abort_locked(qs_casket *c)
{
    pthread_mutex_lock(&c->mu);
    pg_abort(&c->pg);
    layers_txn_end(c, 0);
    c->version++;
    pthread_mutex_unlock(&c->mu);
    if (c->followup_due)
        run_followup(c);
}

int cs_followup_due(qs_casket *c)
{
    if (c->in_followup)
        return 0;
    c->followup_due = 1;
    return 1;
}

static int commit_locked(qs_casket *c, uint64_t *sync_lsn, int may_checkpoint);

/* The layers' follow-up of an abort (cs_layer.followup), holding the write
 * lock: its own transaction, committed and synced before the lock goes.
 * Its failure is not the aborting caller's: a layer's txn_end learns of it
 * (cs_followup_due returns 0 in the follow-up's own abort). */
static void run_followup(qs_casket *c)
{
    c->followup_due = 0;
    c->in_followup = 1;
    int rc = tx_heal(c);
    if (rc) {
        pthread_mutex_lock(&c->mu);
        layers_txn_end(c, 0);
        pthread_mutex_unlock(&c->mu);
        c->in_followup = 0;
        return;
    }
    pthread_mutex_lock(&c->mu);
    pg_begin(&c->pg);
    bt_ctx bt = {&c->pg, 1, NS_USER};
    for (int i = 0; i < c->nlayers && rc == 0; i++)
        if (c->layers[i].ops->followup)
            rc = c->layers[i].ops->followup(c, &bt, c->layers[i].state);
    c->version++;
    int trc = pg_trim(&c->pg, 1);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        rc = trc;
    uint64_t lsn = 0;
    if (rc)
        tx_abort_locked(c);
    else if (commit_locked(c, &lsn, 1) == 0 && lsn)
        tx_group_sync(c, lsn);
    c->in_followup = 0;
}

/* Waits until the log is durable up to lsn; one waiter syncs for all. */
int tx_group_sync(qs_casket *c, uint64_t lsn)
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
int tx_checkpoint(qs_casket *c, uint64_t keep)
{
    return checkpoint_run(c, keep, 1);
}

/* pg_checkpoint_copy's guard: this handle's readers use the committed
 * cache under the operation mutex. */
static void hold_cache(void *ctx, int take)
{
    qs_casket *c = ctx;
    if (take)
        pthread_mutex_lock(&c->mu);
    else
        pthread_mutex_unlock(&c->mu);
}

/* pins_hold_off 0: finishing a dead writer's checkpoint, which no pin
 * taken since can stop. */
static int checkpoint_run(qs_casket *c, uint64_t keep, int pins_hold_off)
{
    int rc = 0;
    /* A snapshot below its log limit holds the checkpoint off: put off to
     * a later commit like one that waited too long for readers.  Tested
     * first without the guard (cheap, and readers are not stopped), then
     * again inside it, where no pin can be taken any more. */
    if (c->shared && pins_hold_off && sh_pins_hold(&c->sh, c->pg.log_end))
        return QS_LOCKED;
    /* Other processes may be reading pages the copy overwrites. */
    if (c->shared && (rc = sh_ckpt_begin(&c->sh, CKPT_WAIT)) != 0)
        return rc;
    if (c->shared) {
        if (pins_hold_off && sh_pins_hold(&c->sh, c->pg.log_end)) {
            sh_ckpt_end(&c->sh);
            return QS_LOCKED;
        }
        sh_pins_revoke(&c->sh);     /* their next operation fails */
    }
    /* Write-ahead rule: the main file may only receive pages whose log
     * frames are durable, or a power cut halfway through the copy could
     * leave newer pages in it than the log can replay to.  Holds with sync
     * off too: there commits may be lost, but never the file's sanity. */
    if (c->pg.logidx.len && (rc = tx_group_sync(c, c->lsn_base + c->pg.log_end)) == 0)
        rc = pg_checkpoint_copy(&c->pg, &(pg_guard){hold_cache, c});
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
    tx_publish(c);
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
int tx_heal(qs_casket *c)
{
    if (c->defunct)
        return c->defunct;
    if (!c->fatal)
        return 0;
    int rc = tx_checkpoint(c, tx_log_keep(c));
    if (rc == 0)
        c->fatal = 0;
    return rc;
}

uint64_t tx_log_keep(const qs_casket *c)
{
    return c->checkpoint_most + (1u << 20);
}

/* Whether the log (the writer's view of it) is long enough to checkpoint.
 * What a checkpoint writes to the main file is its log index's pages, then
 * three syncs.  Seed 001's puts of random keys (each rewriting a leaf and
 * the counts above it) logged 4 MiB over ~500 distinct pages: a 4 MiB
 * checkpoint wrote 2 MB to the main file for it.  Letting the log grow
 * until the pages are at most an eighth of its bytes, so that later
 * updates land on pages already logged, took 1-thread puts from 109 k to
 * 149 k/s (sync off, the log written behind).  Not while another process
 * shares the casket: 4 producer + 4 consumer processes moved 6-10% fewer
 * items with the longer log, whose frames the other processes read back
 * to catch up. */
static int checkpoint_due(qs_casket *c)
{
    uint64_t end = c->pg.log_end;
    if (end <= c->checkpoint_bytes)
        return 0;
    if (end > c->checkpoint_most || (uint64_t)c->pg.logidx.len * PG_SIZE <= end / 8)
        return 1;
    return c->shared && sh_other_process(&c->sh);
}

/* Commits the open transaction of the calling thread (which holds the write
 * lock) and releases the lock, without waiting for the sync: *sync_lsn is
 * then the log position to pass to tx_group_sync, or 0 when nothing needs
 * syncing (sync off, nothing written, or a checkpoint already synced it). */
int tx_commit_release(qs_casket *c, uint64_t *sync_lsn)
{
    int rc = commit_locked(c, sync_lsn, 1);
    tx_writer_leave(c);
    return rc;
}

/* tx_commit_release without letting go of the write lock (on failure the
 * transaction is aborted, the lock still held).  may_checkpoint 0 leaves a
 * checkpoint that is due to the next commit that may run one. */
static int commit_locked(qs_casket *c, uint64_t *sync_lsn, int may_checkpoint)
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
        tx_abort_locked(c);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    if (wrote) {
        pg_publish(&c->pg);
        tx_publish(c);
    } else
        pg_abort(&c->pg);
    layers_txn_end(c, 1);
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
    if (wrote && may_checkpoint && checkpoint_due(c))
        synced = tx_checkpoint(c, tx_log_keep(c)) == 0;
    if (wrote && sync && !synced)
        *sync_lsn = lsn;
    return 0;
}

/* Commits, lets go of the write lock and waits for the sync; may_checkpoint
 * as commit_locked's. */
static int commit_and_leave(qs_casket *c, int may_checkpoint)
{
    uint64_t lsn;
    int rc = commit_locked(c, &lsn, may_checkpoint);
    tx_writer_leave(c);
    return rc == 0 && lsn ? tx_group_sync(c, lsn) : rc;
}

/* Takes the write lock (tx_writer_enter_opt with the handle's lock
 * timeout) and then heals a log that a failed checkpoint left unusable:
 * 0 with the lock held, or the error with it let go. */
static int writer_enter_healed(qs_casket *c, int wait)
{
    int rc = tx_writer_enter_opt(c, wait, c->lock_timeout);
    if (rc == 0 && (rc = tx_heal(c)) != 0)
        tx_writer_leave(c);
    return rc;
}

int tx_begin(qs_casket *c)
{
    if (c->readonly)
        return QS_READONLY;
    if (cs_owns(c))
        return QS_TXN;
    int rc = writer_enter_healed(c, 1);
    if (rc)
        return rc;
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

int tx_commit(qs_casket *c, int wait_sync)
{
    if (!cs_owns(c) || !c->explicit_txn)
        return QS_TXN;
    if (c->flush_due)
        flush_layers(c);  /* a failure is recorded in txn_error */
    if (c->txn_error) {
        int rc = c->txn_error;
        tx_abort_locked(c);
        tx_writer_leave(c);
        return rc;
    }
    if (wait_sync)
        return commit_and_leave(c, 1);
    uint64_t lsn;   /* logged; a later sync (anyone's) makes it durable */
    return tx_commit_release(c, &lsn);
}

int tx_abort(qs_casket *c)
{
    if (!cs_owns(c) || !c->explicit_txn)
        return QS_TXN;
    tx_abort_locked(c);
    tx_writer_leave(c);
    return 0;
}

int qs_in_transaction(qs_casket *c)
{
    return c && cs_owns(c) && c->explicit_txn;
}

void qs_set_sync(qs_casket *c, int on)
{
    if (c)
        atomic_store(&c->sync, on ? 1 : 0);
}

/* Results that refuse an operation without touching anything: they do not
 * spoil the transaction the operation ran in.  The layers that run
 * operations say which of their results are such (cs_layer.refused). */
int tx_refused(qs_casket *c, int rc)
{
    for (int i = 0; i < c->nlayers; i++) {
        const cs_layer *l = c->layers[i].ops;
        if (l->refused && l->refused(rc))
            return 1;
    }
    return 0;
}

/* The rest of a write (tx_write_core, cs_write_held), the operation mutex
 * taken: fn, then a transaction of its own committed or aborted, or the
 * caller's marked failed by an error that is not a refusal. */
static inline int write_locked(qs_casket *c, cs_write_fn fn, void *arg, int own,
                               int may_checkpoint)
{
    if (!own)
        pg_begin(&c->pg);
    bt_ctx bt = {&c->pg, 1, NS_USER};
    int rc = fn(c, &bt, arg);
    c->version++;
    int trc = pg_trim(&c->pg, 1);
    pthread_mutex_unlock(&c->mu);
    int refusal = rc && tx_refused(c, rc);
    if (rc == 0 && trc)
        rc = trc;
    if (!own) {
        if (rc == 0)
            return commit_and_leave(c, may_checkpoint);
        tx_abort_locked(c);
        tx_writer_leave(c);
        return rc;
    }
    if (rc && !refusal)
        c->txn_error = rc;
    return rc;
}

/* Runs fn in the writer's view: inside this thread's transaction, or as a
 * transaction of its own. */
int tx_write_core(qs_casket *c, cs_write_fn fn, void *arg, int wait)
{
    if (c->readonly)
        return QS_READONLY;
    int own = cs_owns(c);
    if (own && c->txn_error)
        return c->txn_error;
    if (!own) {
        int rc = writer_enter_healed(c, wait);
        if (rc)
            return rc;
    }
    pthread_mutex_lock(&c->mu);
    return write_locked(c, fn, arg, own, 1);
}

int cs_write(qs_casket *c, cs_write_fn fn, void *arg)
{
    if (cs_owns(c) && c->flush_due) {
        int rc = flush_layers(c);
        if (rc)
            return rc;
    }
    return tx_write_core(c, fn, arg, 1);
}

/* Read operations run in the caller's view under the operation mutex. */
static int read_enter(qs_casket *c, bt_ctx *bt, int ns, int wait)
{
    bt->p = &c->pg;
    bt->wview = cs_owns(c);
    bt->ns = ns;
    if (bt->wview && c->flush_due) {
        /* applying the transaction's buffered putdups is work of unbounded
         * length (it may spill pages to the log): not for a caller that
         * may not wait */
        if (!wait)
            return QS_WOULDBLOCK;
        int rc = flush_layers(c);
        if (rc)
            return rc;
    }
    int rc = view_lock(c, wait);
    /* From here to cs_read_leave: a page neither in the handle's cache
     * nor in the kernel's would be a wait for the device (the catching up
     * above may still read) */
    c->pg.cached_only = !wait && rc == 0;
    return rc;
}

int cs_read_enter(qs_casket *c, bt_ctx *bt, int ns) { return read_enter(c, bt, ns, 1); }

int cs_read_try_enter(qs_casket *c, bt_ctx *bt, int ns) { return read_enter(c, bt, ns, 0); }

void cs_read_leave(qs_casket *c, bt_ctx *bt)
{
    c->pg.cached_only = 0;
    pg_trim(&c->pg, bt->wview);
    cs_view_unlock(c);
}

int cs_write_held(qs_casket *c, cs_write_fn fn, void *arg)
{
    /* the caller holds the interpreter's lock: another thread's call on
     * the handle, or the unbounded work of applying buffered putdups,
     * would stall every thread of the process with it */
    if (!cs_in_txn(c) || c->flush_due)
        return QS_WOULDBLOCK;
    if (c->txn_error)
        return c->txn_error;
    if (pthread_mutex_trylock(&c->mu) != 0)
        return QS_WOULDBLOCK;
    return write_locked(c, fn, arg, 1, 1);
}

/* Whether a thread leads a group of record operations (group.c) now:
 * those queued behind it go first. */
static int group_under_way(qs_casket *c)
{
    pthread_mutex_lock(&c->gmu);
    int busy = c->gleader;
    pthread_mutex_unlock(&c->gmu);
    return busy;
}

/* Another thread's single operation outside a transaction (a held call's
 * fallback, made without the caller's lock) lets go of the handle's write
 * lock within microseconds and needs nothing from the caller to get there:
 * a held call waits that long for it instead of falling back too.  When it
 * fell back at once, it became the thread asleep on the write lock, woken
 * at each of the other thread's releases to take the lock from between
 * that thread's held calls, which then fell back in turn: a producer and
 * a consumer thread on one handle handed the lock and the GIL over for
 * every item from the first fallback on (47 k items/s, against 93 k for
 * one thread doing the same puts and gets).  An explicit transaction may
 * need the caller's lock to end, so it is not waited for. */
#define HELD_WAIT_NS 30000ull    /* as long as sh_wlock spins for a running holder */

static void wait_for_single_writer(qs_casket *c)
{
    if (!atomic_load_explicit(&c->owner, memory_order_relaxed))
        return;
    uint64_t from = sh_now_ns();
    while (atomic_load_explicit(&c->owner, memory_order_relaxed) &&
           !__atomic_load_n(&c->explicit_txn, __ATOMIC_RELAXED) &&
           sh_now_ns() - from < HELD_WAIT_NS)
        for (int i = 0; i < 32; i++)
            os_cpu_relax();
}

int cs_write_held_commit(qs_casket *c, cs_write_fn fn, void *arg)
{
    if (cs_owns(c))
        return cs_write_held(c, fn, arg);
    if (c->readonly)
        return QS_READONLY;
    /* A commit of its own waits for nobody only with sync off, and only
     * when it leaves the checkpoint (three syncs and the copy) to a call
     * made without the caller's lock: the next call finds it due and
     * returns QS_WOULDBLOCK, and its fallback runs it. */
    if (atomic_load(&c->sync) || group_under_way(c))
        return QS_WOULDBLOCK;
    wait_for_single_writer(c);
    int rc = writer_enter(c, 0, 0, 0);
    if (rc)
        return rc == QS_LOCKED ? QS_WOULDBLOCK : rc;
    if (c->fatal || c->defunct || c->followup_due || checkpoint_due(c) ||
        pthread_mutex_trylock(&c->mu) != 0) {
        tx_writer_leave(c);
        return QS_WOULDBLOCK;
    }
    /* (sync turned on meanwhile by another thread: the commit syncs) */
    return write_locked(c, fn, arg, 0, 0);
}

int cs_write_try(qs_casket *c, cs_write_fn fn, void *arg)
{
    if (cs_owns(c))
        return cs_write(c, fn, arg);
    return tx_write_core(c, fn, arg, 0);
}

int cs_in_txn(qs_casket *c) { return cs_owns(c) && c->explicit_txn; }

/* ---- public entry points ---------------------------------------------------- */

int qs_begin(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, tx_begin(c));
}

int qs_commit(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, tx_commit(c, 1));
}

int qs_commit_nosync(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, tx_commit(c, 0));
}

int qs_abort(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, tx_abort(c));
}
