/* casket.c -- the handle (cs_ inside, qs_open/qs_shutdown/qs_close in
 * qstore.h): it owns struct qs_casket, opens the files and the shared region,
 * closes them, counts public calls so qs_shutdown can wait for them, and
 * tells a handle inherited through fork() from its parent's.  Apart from
 * the transaction layer (txn.c) because opening and closing use
 * transactions and checkpoints, never the other way round; every public
 * call of every file enters and leaves through cs_enter_call. */
#include "handle.h"
#include "osdep.h"
#include "records.h"
#include "txn.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CACHE (256ull << 20)
#define DEFAULT_CHECKPOINT (4ull << 20)

/* ---- small helpers -------------------------------------------------------- */

/* Bumped in the child of every fork(): a handle whose generation differs
 * was inherited, and its locks and shared state belong to the parent. */
static atomic_uint fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void after_fork_in_child(void) { atomic_fetch_add(&fork_generation, 1); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

unsigned cs_fork_generation(void)
{
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

static int forked(const qs_casket *c)
{
    return c->fork_gen != atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

/* Every public call is counted so qs_shutdown can wait for those running
 * and refuse new ones. */
int cs_enter_call(qs_casket *c)
{
    if (!c)
        return QS_INVAL;
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

/* ---- open and close ------------------------------------------------------- */

/* The handle's mutexes and conditions (set up once its pager opened). */
void cs_destroy_sync(qs_casket *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->wmu);
    pthread_mutex_destroy(&c->smu);
    pthread_mutex_destroy(&c->gmu);
    pthread_cond_destroy(&c->gcond);
    pthread_cond_destroy(&c->wcond);
    pthread_cond_destroy(&c->scond);
}

void cs_free(qs_casket *c)
{
    if (c->shared) {
        if (forked(c))
            sh_forget(&c->sh);
        else
            sh_close(&c->sh);
    }
    tx_layers_call(c, TX_FREE);
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
    tx_locked_by_nobody();  /* an open's QS_LOCKED names nobody */
    return cs_open(path, opts, 1, out);
}

/* shared 0: a private casket no other handle may open (compaction's
 * scratch file), with no region beside it. */
int cs_open(const char *path, const qs_options *opts, int shared, qs_casket **out)
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
    rec_attach(c);  /* the records' buffered putdups (cs_layer) */
    c->fork_gen = atomic_load(&fork_generation);
    c->lock_timeout = o.lock_timeout;
    c->perm = o.perm;
    c->readonly = o.flag == QS_OPEN_READ;
    atomic_init(&c->sync, o.sync ? 1 : 0);
    atomic_init(&c->owner, 0);
    c->checkpoint_bytes = o.checkpoint_bytes ? o.checkpoint_bytes : DEFAULT_CHECKPOINT;
    c->checkpoint_most = o.checkpoint_bytes ? o.checkpoint_bytes : 4 * DEFAULT_CHECKPOINT;
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
        cs_destroy_sync(c);
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
    cs_free(c);
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
    tx_layers_call(c, TX_WAKE);
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
        tx_abort_locked(c);
    int rc = 0, locked = !c->shared || busy;
    if (!locked && !c->readonly)
        locked = tx_process_lock(c, c->lock_timeout) == 0;
    if (locked) {
        /* The layers let go of what the handle holds in the region (our
         * queue reservations go back to their queues); and the last handle
         * leaves the log one page long. */
        if (c->shared)
            tx_layers_call(c, TX_CLOSE);
        uint64_t keep = !c->shared || sh_exclusive(&c->sh) == 0
                            ? PG_SIZE : tx_log_keep(c);
        if (!c->readonly)
            rc = tx_checkpoint(c, keep);
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
         * fork: release our descriptors and memory (cs_free only
         * unmaps the region), touch nothing else. */
        if (!atomic_load(&c->closed))
            pg_close(&c->pg);   /* a shut-down handle's pager is gone */
        cs_free(c);
        return 0;
    }
    int rc = qs_shutdown(c);
    cs_destroy_sync(c);
    cs_free(c);
    return rc;
}

/* ---- accessors for the layers above ------------------------------------------
 * The queue layer reads the handle through these, so struct qs_casket stays
 * private to the files that own it.  Out of line, and so called once per
 * operation or batch, never per item (callgrind: queue_churn +0.13% core
 * instructions, the other phases unchanged). */

sh_region *cs_region(qs_casket *c) { return &c->sh; }

pager *cs_pager(qs_casket *c) { return &c->pg; }

int cs_readonly(qs_casket *c) { return c->readonly; }

int cs_shared(qs_casket *c) { return c->shared; }

int cs_closing(qs_casket *c) { return atomic_load(&c->closed) != 0; }
