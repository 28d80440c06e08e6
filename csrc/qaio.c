/* qaio.c -- asynchronous waiters of queues (see qaio.h and qstore.h's
 * qs_aio_*).  One registry per process: the armed waiters, the handles
 * they were armed on, and the watcher thread that sleeps on those
 * handles' regions for other processes' commits. */
#include "qaio.h"
#include "qres.h"
#include "queue.h"
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* futex_waitv (Linux 5.16), declared here for older headers. */
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#define WAITV_MAX 128           /* the kernel's limit per call */
#define WAITV_SIZE_U32 0x02
struct qa_waitv {
    uint64_t val;
    uint64_t uaddr;
    uint32_t flags;
    uint32_t reserved;
};
/* How often the watcher looks when the kernel cannot wait on all its
 * words at once (no futex_waitv, or more handles than one call takes). */
#define FALLBACK_S 0.02

struct qs_aio {
    int fd;                     /* eventfd */
    unsigned gen;               /* the registry generation it was made in */
    uint64_t *fired;            /* fired ids not yet collected */
    size_t nfired, cap;         /* cap >= nfired + armed, so a fire never allocates */
    size_t armed;
    int signalled;              /* the eventfd holds a count not yet read */
};

typedef struct qa_waiter {
    uint64_t id;
    qs_aio *owner;
    qs_casket *c;
    sh_region *r;
    uint64_t qhash;
    _Atomic uint32_t *word;
    uint32_t seen;              /* the word's value when armed */
} qa_waiter;

typedef struct qa_handle {
    qs_casket *c;
    sh_region *r;
} qa_handle;

enum { FIRED_LOCAL, FIRED_WATCHER, FIRED_CLOSED };

static struct {
    pthread_mutex_t mu;
    qa_waiter *w;               /* armed */
    size_t n, cap;
    qa_handle *h;               /* handles a waiter was ever armed on, until they close */
    size_t nh, hcap;
    uint64_t next_id;
    uint64_t fired[3];
    pthread_t thread;
    int running, stop;
    _Atomic uint32_t ctl;       /* bumped to make the watcher look again */
    unsigned gen;               /* bumped in a forked child */
} reg = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Atomic size_t armed_total;  /* reg.n, read without the mutex */

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) { pthread_mutex_lock(&reg.mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&reg.mu); }

/* The child has no watcher and none of the parent's waiters: their
 * eventfds and the region counts are the parent's.  Its qs_aio objects are
 * of the old generation and fail with QS_FORKED. */
static void after_fork_child(void)
{
    pthread_mutex_init(&reg.mu, NULL);
    free(reg.w);
    free(reg.h);
    reg.w = NULL;
    reg.h = NULL;
    reg.n = reg.cap = reg.nh = reg.hcap = 0;
    reg.running = reg.stop = 0;
    reg.gen++;
    atomic_store(&armed_total, 0);
}

static void install_fork_hooks(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

/* ---- firing (reg.mu held) ---------------------------------------------------- */

static void signal_owner(qs_aio *a)
{
    if (a->signalled)
        return;
    uint64_t one = 1;
    /* Cannot fail short of a count near 2^64; EAGAIN would mean it is
     * readable already, which is all the loop needs. */
    ssize_t wr = write(a->fd, &one, sizeof one);
    (void)wr;
    a->signalled = 1;
}

static void fire_at(size_t i, int why)
{
    qa_waiter *w = &reg.w[i];
    qr_aio_leave(w->r, w->qhash);
    qs_aio *a = w->owner;
    a->fired[a->nfired++] = w->id;
    a->armed--;
    signal_owner(a);
    reg.fired[why]++;
    reg.w[i] = reg.w[--reg.n];
    atomic_fetch_sub(&armed_total, 1);
}

/* Drops waiter i without telling anyone (disarmed, or its qs_aio closed). */
static void drop_at(size_t i)
{
    qa_waiter *w = &reg.w[i];
    qr_aio_leave(w->r, w->qhash);
    w->owner->armed--;
    reg.w[i] = reg.w[--reg.n];
    atomic_fetch_sub(&armed_total, 1);
}

static void fire_changed(int why)
{
    for (size_t i = 0; i < reg.n;) {
        if (atomic_load(reg.w[i].word) != reg.w[i].seen)
            fire_at(i, why);    /* the last one moved into i */
        else
            i++;
    }
}

void qa_notify_local(void)
{
    if (!atomic_load(&armed_total))
        return;
    pthread_mutex_lock(&reg.mu);
    fire_changed(FIRED_LOCAL);
    pthread_mutex_unlock(&reg.mu);
}

static void kick_watcher(void)
{
    atomic_fetch_add(&reg.ctl, 1);
    sh_futex_wake(&reg.ctl, INT_MAX);
}

/* ---- the watcher thread ---------------------------------------------------------- */

static void *watch_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reg.mu);
    while (!reg.stop) {
        /* The words' values are read before the waiters' words are
         * compared: a commit after the comparison changes a value the
         * kernel then compares, and the wait returns at once. */
        struct qa_waitv v[WAITV_MAX];
        size_t nv = 0;
        v[nv++] = (struct qa_waitv){atomic_load(&reg.ctl), (uint64_t)(uintptr_t)&reg.ctl,
                                    WAITV_SIZE_U32, 0};
        for (size_t i = 0; i < reg.nh && nv < WAITV_MAX; i++) {
            _Atomic uint32_t *g = qr_aio_gen(reg.h[i].r);
            v[nv++] = (struct qa_waitv){atomic_load(g), (uint64_t)(uintptr_t)g, WAITV_SIZE_U32, 0};
        }
        int partial = reg.nh + 1 > WAITV_MAX;
        fire_changed(FIRED_WATCHER);
        pthread_mutex_unlock(&reg.mu);
        struct timespec ts, *tp = NULL;
        if (partial) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += (long)(FALLBACK_S * 1e9);
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            tp = &ts;
        }
        if (syscall(SYS_futex_waitv, v, (unsigned)nv, 0u, tp, CLOCK_MONOTONIC) < 0 &&
            errno == ENOSYS) {
            /* An older kernel: sleep on the first region's word (or on
             * ctl) and look at the others now and then. */
            _Atomic uint32_t *w = (_Atomic uint32_t *)(uintptr_t)v[nv > 1 ? 1 : 0].uaddr;
            sh_futex_wait(w, (uint32_t)v[nv > 1 ? 1 : 0].val, FALLBACK_S);
        }
        /* EFAULT: a handle closed and its region went away between the
         * list and the wait; it is off the list now. */
        pthread_mutex_lock(&reg.mu);
    }
    pthread_mutex_unlock(&reg.mu);
    return NULL;
}

/* Starts the watcher (reg.mu held) with every signal blocked: signals
 * are the interpreter's main thread's business. */
static int start_watcher(void)
{
    if (reg.running)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    reg.stop = 0;
    int rc = pthread_create(&reg.thread, NULL, watch_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        return rc;
    reg.running = 1;
    return 0;
}

/* ---- the handles' layer: closing fires their waiters ------------------------------ */

static void qa_closing(qs_casket *c, void *state);
static const cs_layer qa_layer = {.wake = qa_closing};
static char qa_state;           /* the layer keeps nothing per handle */

/* Takes c off the list of handles (reg.mu held); returns whether that
 * was the last, the watcher told to stop: then the caller joins it (in
 * *t) once it let go of reg.mu. */
static int forget_handle(qs_casket *c, pthread_t *t)
{
    for (size_t i = 0; i < reg.nh; i++)
        if (reg.h[i].c == c) {
            reg.h[i] = reg.h[--reg.nh];
            break;
        }
    if (!reg.running || reg.nh)
        return 0;
    reg.stop = 1;
    reg.running = 0;
    *t = reg.thread;
    kick_watcher();
    return 1;
}

/* qs_shutdown began on c (c's mutex held, its region still mapped): its
 * waiters fire (their next take returns QS_CLOSED), it leaves the list,
 * and the watcher stops with the last handle. */
static void qa_closing(qs_casket *c, void *state)
{
    (void)state;
    pthread_mutex_lock(&reg.mu);
    for (size_t i = 0; i < reg.n;) {
        if (reg.w[i].c == c)
            fire_at(i, FIRED_CLOSED);
        else
            i++;
    }
    pthread_t t;
    int join = forget_handle(c, &t);
    pthread_mutex_unlock(&reg.mu);
    if (join)
        pthread_join(t, NULL);
}

/* Registers the layer on c once (its mutex held meanwhile). */
static int ensure_layer(qs_casket *c)
{
    int rc = cs_view_lock(c);
    if (rc)
        return rc;
    if (!cs_layer_state(c, &qa_layer))
        rc = cs_layer_add(c, &qa_layer, &qa_state);
    cs_view_unlock(c);
    return rc;
}

/* c's entry in the list of handles, added if new (reg.mu held). */
static int ensure_handle(qs_casket *c, int *added)
{
    *added = 0;
    for (size_t i = 0; i < reg.nh; i++)
        if (reg.h[i].c == c)
            return 0;
    if (reg.nh == reg.hcap) {
        size_t ncap = reg.hcap ? reg.hcap * 2 : 8;
        qa_handle *nh = realloc(reg.h, ncap * sizeof *nh);
        if (!nh)
            return QS_NOMEM;
        reg.h = nh;
        reg.hcap = ncap;
    }
    reg.h[reg.nh++] = (qa_handle){c, cs_region(c)};
    *added = 1;
    return 0;
}

/* ---- the public calls ---------------------------------------------------------------- */

int qs_aio_open(qs_aio **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    pthread_once(&fork_once, install_fork_hooks);
    qs_aio *a = calloc(1, sizeof *a);
    if (!a)
        return QS_NOMEM;
    a->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (a->fd < 0) {
        int e = errno;
        free(a);
        return e;
    }
    pthread_mutex_lock(&reg.mu);
    a->gen = reg.gen;
    pthread_mutex_unlock(&reg.mu);
    *out = a;
    return 0;
}

int qs_aio_fd(const qs_aio *a) { return a ? a->fd : -1; }

static int do_arm(qs_aio *a, qs_casket *c, const void *name, size_t nlen, uint64_t *id)
{
    uint64_t qhash;
    int rc = qq_queue_hash(name, nlen, &qhash);
    if (rc)
        return rc;
    if (cs_readonly(c))
        return QS_READONLY;
    sh_region *r = cs_region(c);
    if (!cs_shared(c) || !r->up_words)
        return QS_INVAL;
    if ((rc = ensure_layer(c)) != 0)
        return rc;
    pthread_mutex_lock(&reg.mu);
    if (a->gen != reg.gen) {
        pthread_mutex_unlock(&reg.mu);
        return QS_FORKED;
    }
    int added = 0;
    rc = ensure_handle(c, &added);
    if (rc == 0 && reg.n == reg.cap) {
        size_t ncap = reg.cap ? reg.cap * 2 : 64;
        qa_waiter *nw = realloc(reg.w, ncap * sizeof *nw);
        if (nw) {
            reg.w = nw;
            reg.cap = ncap;
        } else
            rc = QS_NOMEM;
    }
    if (rc == 0 && a->nfired + a->armed + 1 > a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 16;
        uint64_t *nf = realloc(a->fired, ncap * sizeof *nf);
        if (nf) {
            a->fired = nf;
            a->cap = ncap;
        } else
            rc = QS_NOMEM;
    }
    if (rc == 0)
        rc = start_watcher();
    if (rc) {
        if (added)
            reg.nh--;
        pthread_mutex_unlock(&reg.mu);
        return rc;
    }
    /* Counted before the word is read (qr_aio_enter): see qres.h. */
    qr_aio_enter(r, qhash);
    _Atomic uint32_t *word = qr_word(r, qhash);
    reg.w[reg.n++] = (qa_waiter){++reg.next_id, a, c, r, qhash, word, atomic_load(word)};
    a->armed++;
    atomic_fetch_add(&armed_total, 1);
    *id = reg.next_id;
    if (added)
        kick_watcher();     /* a new region to sleep on */
    /* A shutdown that began before the waiter was listed may have run
     * qa_closing already: this waiter fires now, the same way, and the
     * handle leaves the list (its region is about to go). */
    pthread_t t;
    int join = 0;
    if (cs_closing(c)) {
        fire_at(reg.n - 1, FIRED_CLOSED);
        join = forget_handle(c, &t);
    }
    pthread_mutex_unlock(&reg.mu);
    if (join)
        pthread_join(t, NULL);
    return 0;
}

int qs_aio_arm(qs_aio *a, qs_casket *c, const void *name, size_t nlen, uint64_t *id)
{
    if (!a || !id)
        return QS_INVAL;
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_arm(a, c, name, nlen, id));
}

int qs_aio_disarm(qs_aio *a, uint64_t id)
{
    if (!a)
        return QS_INVAL;
    pthread_mutex_lock(&reg.mu);
    int rc = QS_NOTFOUND;
    if (a->gen != reg.gen)
        rc = QS_FORKED;
    for (size_t i = 0; rc == QS_NOTFOUND && i < reg.n; i++)
        if (reg.w[i].id == id && reg.w[i].owner == a) {
            drop_at(i);
            rc = 0;
        }
    for (size_t i = 0; rc == QS_NOTFOUND && i < a->nfired; i++)
        if (a->fired[i] == id) {
            memmove(&a->fired[i], &a->fired[i + 1], (a->nfired - i - 1) * sizeof *a->fired);
            a->nfired--;
            rc = 0;
        }
    pthread_mutex_unlock(&reg.mu);
    return rc;
}

int qs_aio_fired(qs_aio *a, uint64_t *ids, size_t max, size_t *n)
{
    if (n)
        *n = 0;
    if (!a || !ids || !n)
        return QS_INVAL;
    pthread_mutex_lock(&reg.mu);
    if (a->gen != reg.gen) {
        pthread_mutex_unlock(&reg.mu);
        return QS_FORKED;
    }
    size_t k = a->nfired < max ? a->nfired : max;
    memcpy(ids, a->fired, k * sizeof *ids);
    memmove(a->fired, a->fired + k, (a->nfired - k) * sizeof *a->fired);
    a->nfired -= k;
    if (a->nfired == 0 && a->signalled) {
        uint64_t count;
        ssize_t rd = read(a->fd, &count, sizeof count);
        (void)rd;   /* EAGAIN: nothing was pending after all */
        a->signalled = 0;
    }
    pthread_mutex_unlock(&reg.mu);
    *n = k;
    return 0;
}

size_t qs_aio_armed(const qs_aio *a)
{
    if (!a)
        return 0;
    pthread_mutex_lock(&reg.mu);
    size_t n = a->gen == reg.gen ? a->armed : 0;
    pthread_mutex_unlock(&reg.mu);
    return n;
}

void qs_aio_stats(qs_aio_stat *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&reg.mu);
    st->armed = reg.n;
    st->fired_local = reg.fired[FIRED_LOCAL];
    st->fired_watcher = reg.fired[FIRED_WATCHER];
    st->fired_closed = reg.fired[FIRED_CLOSED];
    st->handles = reg.nh;
    st->watcher = reg.running;
    pthread_mutex_unlock(&reg.mu);
}

void qs_aio_close(qs_aio *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&reg.mu);
    if (a->gen == reg.gen)
        for (size_t i = 0; i < reg.n;) {
            if (reg.w[i].owner == a)
                drop_at(i);
            else
                i++;
        }
    pthread_mutex_unlock(&reg.mu);
    close(a->fd);
    free(a->fired);
    free(a);
}
