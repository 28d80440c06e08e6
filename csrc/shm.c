/* shm.c -- the region processes share beside a casket (see shm.h). */
#include "shm.h"
#include "osdep.h"
#include "qstore.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SH_MAGIC "qstshm\0\x01"
/* Version 4 (two changes of one release): the layer above's reservation
 * entries grew from 40 to 56 bytes (the holder's pid and the time it
 * reserved), so its room is SH_UP_BYTES larger; and two words were added at
 * the end of up_words, the queue module's asynchronous waiters' (a version-3
 * process would not bump them and so not wake those waiters).  A version-3
 * process refuses the region by version and size, and this one refuses a
 * version-3 region (QS_CORRUPT while it is in use, rebuilt when alone), so
 * neither reads the other's entries. */
/* Version 5: the layer above's per-queue entries grew from 24 to 40 bytes
 * (a run of reserved ids, qres.h), so its room grew by 64 KiB; versions 4
 * and 5 refuse each other's regions the same way. */
/* Version 6: the same layout, for the casket's format 4 -- a process of
 * a format-3 build would take the CRC-sealed pages another handle
 * publishes for damaged ones, so the two builds refuse each other's
 * regions as versions 4 and 5 do. */
#define SH_VERSION 6
#define BYTE_ATTACH 0
#define BYTE_SLOT 16

struct sh_header {
    char magic[8];
    uint32_t version, nslots;
    uint32_t up_shape[3];           /* SH_UP_SHAPE_A..C */
    uint32_t pad;
    uint64_t size;
    uint64_t check;                 /* of the fields above */
    _Atomic uint32_t cseq;          /* seqlock over the commit fields */
    _Atomic uint32_t up_seq;        /* the layer above's seqlock */
    _Atomic uint64_t salt, log_end, commits;
    _Atomic uint64_t next_txn;
    _Atomic uint32_t wseq;          /* bumped at each write-lock release */
    _Atomic uint32_t wwaiters;
    _Atomic uint64_t wowner;        /* the write lock: 0 free, else the holder's
                                       slot generation << 32 | slot + 1 */
    _Atomic uint64_t ckpt;          /* the checkpointer, named as in wowner
                                       (a slot alone may have been taken again
                                       by a live newcomer), 0 none */
    _Atomic uint32_t ckpt_seq;      /* bumped as each checkpoint ends */
    _Atomic uint32_t ckpt_waiters;
    uint32_t up_count;              /* the layer above's counter */
    _Atomic uint32_t up_words[SH_UP_WORDS];
    _Atomic uint32_t attach_seq;    /* bumped as a slot is taken or let go */
};

#define OFF_SLOTS 4096
#define OFF_UP 8192
#define SH_SIZE_RAW (OFF_UP + SH_UP_BYTES)
#define SH_SIZE ((SH_SIZE_RAW + 4095) / 4096 * 4096)

_Static_assert(sizeof(struct sh_header) <= OFF_SLOTS, "header fits its page");
_Static_assert(OFF_SLOTS + SH_SLOTS * sizeof(sh_slot) <= OFF_UP, "slots fit");
/* The layout of version 6, which other processes of the same version
 * share: moving a field would need a new SH_VERSION. */
_Static_assert(offsetof(struct sh_header, up_shape) == 16 &&
               offsetof(struct sh_header, up_seq) == 52 &&
               offsetof(struct sh_header, next_txn) == 80 &&
               offsetof(struct sh_header, up_count) == 120 &&
               offsetof(struct sh_header, up_words) == 124 &&
               offsetof(struct sh_header, attach_seq) == 2180 &&
               sizeof(struct sh_header) == 2184 && SH_SIZE == 3842048,
               "region layout of version 6");

uint64_t sh_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_ns(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

/* ---- futexes on the shared mapping (not FUTEX_PRIVATE: other processes) ---- */

/* A futex wait of this thread returned EINTR (sh_intr_take). */
static _Thread_local int intr_seen;

int sh_intr_take(void)
{
    int seen = intr_seen;
    intr_seen = 0;
    return seen;
}

int sh_futex_wait(_Atomic uint32_t *w, uint32_t val, double timeout)
{
    struct timespec ts, *tp = NULL;
    if (timeout >= 0) {
        if (timeout > 1e6)
            timeout = 1e6;
        ts.tv_sec = (time_t)timeout;
        ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
        tp = &ts;
    }
    if (syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, tp, NULL, 0) != 0 && errno == EINTR) {
        intr_seen = 1;
        return EINTR;
    }
    return 0;
}

void sh_futex_wake(_Atomic uint32_t *w, int n)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* ---- OFD byte locks ---------------------------------------------------------- */

static int byte_lock(int fd, off_t at, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EACCES ? QS_LOCKED : errno;
    }
    return 0;
}

/* Whether some other open file description holds a lock on byte at. */
static int byte_held(int fd, off_t at)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return 1;   /* cannot tell: assume alive, never reap a live handle */
    return fl.l_type != F_UNLCK;
}

int sh_slot_alive(const sh_region *r, uint32_t i)
{
    return i == r->slot || byte_held(r->fd, BYTE_SLOT + (off_t)i);
}

uint32_t sh_slot_gen(const sh_region *r, uint32_t i)
{
    return atomic_load(&r->slots[i].gen);
}

/* ---- open and close ---------------------------------------------------------- */

static uint64_t header_check(const struct sh_header *h)
{
    uint64_t x = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)h;
    for (size_t i = 0; i < offsetof(struct sh_header, check); i++)
        x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

static void layout(sh_region *r)
{
    r->hdr = (sh_header *)(void *)r->base;
    r->slots = (sh_slot *)(void *)(r->base + OFF_SLOTS);
    r->up_seq = &r->hdr->up_seq;
    r->up_count = &r->hdr->up_count;
    r->up_words = r->hdr->up_words;
    r->up_area = r->base + OFF_UP;
}

static const uint32_t up_shape[3] = {SH_UP_SHAPE_A, SH_UP_SHAPE_B, SH_UP_SHAPE_C};

static int valid(const sh_region *r)
{
    const struct sh_header *h = r->hdr;
    return memcmp(h->magic, SH_MAGIC, 8) == 0 && h->version == SH_VERSION &&
           h->nslots == SH_SLOTS && memcmp(h->up_shape, up_shape, sizeof up_shape) == 0 &&
           h->size == SH_SIZE && h->check == header_check(h);
}

/* Byte 0: exclusive if nobody else is attached, else shared (waiting while
 * an opener that is alone initializes the region). */
static int attach(sh_region *r, double timeout, int *alone)
{
    uint64_t deadline = sh_now_ns() + (uint64_t)(timeout * 1e9);
    long nap = 100000;
    for (;;) {
        int rc = byte_lock(r->fd, BYTE_ATTACH, F_WRLCK);
        if (rc == 0) {
            *alone = 1;
            return 0;
        }
        if (rc != QS_LOCKED)
            return rc;
        if ((rc = byte_lock(r->fd, BYTE_ATTACH, F_RDLCK)) == 0) {
            /* The others may have left meanwhile: then we are alone after
             * all (a failed upgrade keeps the shared lock). */
            *alone = byte_lock(r->fd, BYTE_ATTACH, F_WRLCK) == 0;
            return 0;
        }
        if (rc != QS_LOCKED)
            return rc;
        if (sh_now_ns() >= deadline)
            return QS_LOCKED;
        nap_ns(nap);
        if (nap < 10000000)
            nap *= 2;
    }
}

/* Whether path still names the file we locked: an opener that failed
 * removes a region it created (holding it exclusively), and one that was
 * waiting for the lock meanwhile holds a file nobody else can find. */
static int still_there(const sh_region *r, const char *path)
{
    struct stat a, b;
    return fstat(r->fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

int sh_open(sh_region *r, const char *path, mode_t perm, double timeout, int *alone)
{
    memset(r, 0, sizeof *r);
    int rc;
    for (int tries = 0;; tries++) {
        r->fd = -1;
        rc = os_open_regular(path, O_RDWR | O_CREAT, perm, QS_NOTFILE, &r->fd, &r->created);
        if (rc || (rc = attach(r, timeout, alone)) != 0)
            goto fail;
        r->exclusive = *alone;
        if (still_there(r, path))
            break;
        close(r->fd);
        if (tries == 100) {
            r->fd = -1;
            rc = QS_LOCKED;
            goto fail;
        }
    }
    struct stat st;
    if (fstat(r->fd, &st) != 0) {
        rc = errno;
        goto fail;
    }
    if (*alone) {
        /* Whatever the file held belonged to handles that are all gone.
         * Its blocks are allocated now: a page of a sparse file that the
         * file system cannot allocate when it is first touched raises
         * SIGBUS, so a full disk fails the open here instead. */
        if (ftruncate(r->fd, 0) != 0) {
            rc = errno;
            goto fail;
        }
        if ((rc = posix_fallocate(r->fd, 0, SH_SIZE)) != 0)
            goto fail;
    } else if ((uint64_t)st.st_size != SH_SIZE) {
        rc = QS_CORRUPT;
        goto fail;
    }
    void *m = mmap(NULL, SH_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (m == MAP_FAILED) {
        rc = errno;
        goto fail;
    }
    r->base = m;
    r->size = SH_SIZE;
    layout(r);
    if (!*alone && !valid(r)) {
        rc = QS_CORRUPT;
        goto fail;
    }
    rc = QS_LOCKED;
    for (uint32_t i = 0; i < SH_SLOTS; i++) {
        int lrc = byte_lock(r->fd, BYTE_SLOT + (off_t)i, F_WRLCK);
        if (lrc == QS_LOCKED)
            continue;
        if (lrc) {
            rc = lrc;
            break;
        }
        sh_slot *s = &r->slots[i];
        r->slot = i;
        r->gen = atomic_fetch_add(&s->gen, 1) + 1;
        atomic_store(&s->in_op, 0);
        atomic_store(&s->pin_limit, 0);     /* a dead holder's snapshot */
        atomic_store(&s->pin_revoked, 0);
        r->pid = (uint32_t)getpid();
        atomic_store(&s->pid, r->pid);
        atomic_store(&s->used, 1);
        atomic_fetch_add(&r->hdr->attach_seq, 1);
        rc = 0;
        break;
    }
    if (rc)
        goto fail;
    return 0;
fail:
    if (r->base)
        munmap(r->base, r->size);
    if (r->fd >= 0) {
        sh_discard(r, path);
        close(r->fd);   /* drops every OFD lock taken through it */
    }
    memset(r, 0, sizeof *r);
    r->fd = -1;
    return rc;
}

void sh_discard(sh_region *r, const char *path)
{
    if (r->created && r->exclusive)
        unlink(path);
    r->created = 0;
}

/* ---- handles without a region --------------------------------------------------
 * A read-only handle that may not write the region keeps a shared lock on
 * this byte of the main file (far past any page) instead.  Each side takes
 * its own lock before it looks for the other's (a region user's is byte 0
 * of the region), so of two that race at least one sees the other. */
#define BYTE_OBSERVE ((off_t)1 << 62)

int sh_observe(int main_fd, const char *path)
{
    int rc = byte_lock(main_fd, BYTE_OBSERVE, F_RDLCK);
    if (rc)
        return rc == QS_LOCKED ? QS_NOATTACH : rc;
    int fd, created;
    rc = os_open_regular(path, O_RDONLY, 0, QS_NOTFILE, &fd, &created);
    if (rc == ENOENT)
        rc = 0;     /* no region: nobody is attached */
    else if (rc == 0) {
        if (byte_held(fd, BYTE_ATTACH))
            rc = QS_NOATTACH;
        close(fd);
    }
    if (rc)
        byte_lock(main_fd, BYTE_OBSERVE, F_UNLCK);
    return rc;
}

int sh_wait_unobserved(int main_fd, double timeout)
{
    uint64_t deadline = sh_now_ns() + (uint64_t)(timeout * 1e9);
    long nap = 100000;
    while (byte_held(main_fd, BYTE_OBSERVE)) {
        if (sh_now_ns() >= deadline)
            return QS_LOCKED;
        nap_ns(nap);
        if (nap < 10000000)
            nap *= 2;
    }
    return 0;
}

void sh_init(sh_region *r, const sh_commit *cm, uint64_t next_txn)
{
    struct sh_header *h = r->hdr;
    memcpy(h->magic, SH_MAGIC, 8);
    h->version = SH_VERSION;
    h->nslots = SH_SLOTS;
    memcpy(h->up_shape, up_shape, sizeof up_shape);
    h->size = SH_SIZE;
    h->check = header_check(h);
    atomic_store(&h->salt, cm->salt);
    atomic_store(&h->log_end, cm->log_end);
    atomic_store(&h->commits, cm->seq);
    atomic_store(&h->next_txn, next_txn);
}

int sh_share(sh_region *r)
{
    int rc = byte_lock(r->fd, BYTE_ATTACH, F_RDLCK);
    if (rc == 0)
        r->exclusive = 0;
    return rc;
}

int sh_exclusive(sh_region *r)
{
    if (r->exclusive)
        return 0;
    int rc = byte_lock(r->fd, BYTE_ATTACH, F_WRLCK);
    if (rc == 0)
        r->exclusive = 1;
    return rc;
}

void sh_close(sh_region *r)
{
    if (!r->base)
        return;
    sh_slot *s = &r->slots[r->slot];
    atomic_store(&s->in_op, 0);
    atomic_store(&s->pin_limit, 0);
    atomic_store(&s->used, 0);
    atomic_fetch_add(&r->hdr->attach_seq, 1);
    munmap(r->base, r->size);
    close(r->fd);
    r->base = NULL;
    r->fd = -1;
}

void sh_forget(sh_region *r)
{
    if (!r->base)
        return;
    munmap(r->base, r->size);
    /* The parent shares this open file description: closing our
     * descriptor does not release its locks. */
    close(r->fd);
    r->base = NULL;
    r->fd = -1;
}

/* ---- the newest commit -------------------------------------------------------- */

void sh_read_commit(const sh_region *r, sh_commit *cm)
{
    struct sh_header *h = r->hdr;
    for (unsigned spins = 0;; spins++) {
        uint32_t s1 = atomic_load(&h->cseq);
        if (!(s1 & 1)) {
            cm->salt = atomic_load(&h->salt);
            cm->log_end = atomic_load(&h->log_end);
            cm->seq = atomic_load(&h->commits);
            if (atomic_load(&h->cseq) == s1)
                return;
        } else if (spins > 1000) {
            /* The publisher died halfway (the next writer repairs it);
             * a mismatched pair fails the log scan cleanly. */
            cm->salt = atomic_load(&h->salt);
            cm->log_end = atomic_load(&h->log_end);
            cm->seq = atomic_load(&h->commits);
            return;
        }
        if (spins > 100)
            sched_yield();
    }
}

uint64_t sh_commit_seq(const sh_region *r)
{
    return atomic_load_explicit(&r->hdr->commits, memory_order_acquire);
}

void sh_publish(sh_region *r, uint64_t salt, uint64_t log_end)
{
    struct sh_header *h = r->hdr;
    atomic_fetch_add(&h->cseq, 1);
    atomic_store(&h->salt, salt);
    atomic_store(&h->log_end, log_end);
    atomic_fetch_add(&h->commits, 1);
    atomic_fetch_add(&h->cseq, 1);
}

/* ---- the write lock ------------------------------------------------------------ */

/* The write lock is a word in the region, taken with one compare-and-swap
 * (no system call while nobody waits: a commit costs two fewer syscalls
 * than with a byte lock, a third of a one-put commit's time with sync off).
 * Its holder is named by slot and slot generation; a holder that died is
 * recognised by its slot's lock byte, which the kernel dropped, or by the
 * slot having been taken again, and the lock is taken over. */
#define SPIN_NS 30000ull

/* How the write lock and the checkpoint guard name their holder. */
static uint64_t holder_name(const sh_region *r)
{
    return (uint64_t)r->gen << 32 | (r->slot + 1);
}

static int owner_gone(const sh_region *r, uint64_t owner)
{
    uint32_t slot = (uint32_t)(owner & 0xffffffffu) - 1, gen = (uint32_t)(owner >> 32);
    if (slot >= SH_SLOTS)
        return 1;
    if (atomic_load(&r->slots[slot].gen) != gen)
        return 1;
    return !sh_slot_alive(r, slot);
}

int sh_wlock(sh_region *r, double timeout, int *holder_died)
{
    struct sh_header *h = r->hdr;
    uint64_t deadline = sh_now_ns() + (uint64_t)(timeout * 1e9);
    uint64_t me = holder_name(r);
    uint64_t seen = 0, seen_since = 0;
    *holder_died = 0;
    for (;;) {
        uint32_t seq = atomic_load(&h->wseq);
        uint64_t owner = 0;
        int got = atomic_compare_exchange_strong(&h->wowner, &owner, me);
        if (!got) {
            /* Suspect a holder only after it kept the lock for 20 ms
             * (asking the kernel is a system call). */
            uint64_t t = sh_now_ns();
            if (owner != seen) {
                seen = owner;
                seen_since = t;
            } else if (t - seen_since > 20000000ull && owner_gone(r, owner)) {
                got = atomic_compare_exchange_strong(&h->wowner, &owner, me);
                *holder_died = got;
            }
        }
        if (got) {
            /* A holder killed halfway through publishing leaves the
             * seqlock odd.  (The layer above repairs its own: up_seq.) */
            if (atomic_load(&h->cseq) & 1)
                atomic_fetch_add(&h->cseq, 1);
            return 0;
        }
        if (owner == me)
            return QS_LOCKED;   /* cannot happen: the in-process lock is held */
        /* Transactions are short: a holder that is running lets go within
         * microseconds, sooner than a sleeper is woken (~50 us on these
         * machines).  Measured with 4+4 processes on 2 CPUs: 0.82-0.85 M
         * items/s with the spin, 0.57-0.59 M without. */
        uint64_t spin_from = sh_now_ns();
        while (atomic_load(&h->wowner) && sh_now_ns() - spin_from < SPIN_NS)
            for (int i = 0; i < 32; i++)
                os_cpu_relax();
        if (!atomic_load(&h->wowner))
            continue;
        uint64_t now = sh_now_ns();
        if (now >= deadline)
            return QS_LOCKED;
        /* Woken by the release; the cap bounds how long a holder that died
         * goes unnoticed. */
        double left = (double)(deadline - now) * 1e-9;
        atomic_fetch_add(&h->wwaiters, 1);
        sh_futex_wait(&h->wseq, seq, left < 0.02 ? left : 0.02);
        atomic_fetch_sub(&h->wwaiters, 1);
    }
}

uint32_t sh_others(const sh_region *r, uint32_t *mine)
{
    uint32_t n = 0, here = 0;
    for (uint32_t i = 0; i < SH_SLOTS; i++) {
        if (i == r->slot || !sh_slot_alive(r, i))
            continue;
        n++;
        here += atomic_load(&r->slots[i].pid) == r->pid;
    }
    *mine = here;
    return n;
}

/* The scan's answer is kept with the attach_seq it was read under: a slot
 * taken or let go since bumps it after its store, so a reader that sees
 * the old sequence scanned before that store and scans again next time. */
int sh_other_process(sh_region *r)
{
    uint32_t seq = atomic_load_explicit(&r->hdr->attach_seq, memory_order_acquire);
    uint64_t memo = atomic_load_explicit(&r->others_memo, memory_order_relaxed);
    if (memo && (uint32_t)(memo >> 32) == seq)
        return (int)(memo & 1);
    int other = 0;
    for (uint32_t i = 0; i < SH_SLOTS && !other; i++)
        other = i != r->slot && atomic_load_explicit(&r->slots[i].used, memory_order_relaxed) &&
                atomic_load_explicit(&r->slots[i].pid, memory_order_relaxed) != r->pid;
    atomic_store_explicit(&r->others_memo, (uint64_t)seq << 32 | 2 | (uint64_t)other,
                          memory_order_relaxed);
    return other;
}

uint32_t sh_wlock_holder(const sh_region *r)
{
    uint64_t owner = atomic_load(&r->hdr->wowner);
    uint32_t slot = (uint32_t)(owner & 0xffffffffu) - 1;
    return owner && slot < SH_SLOTS ? atomic_load(&r->slots[slot].pid) : 0;
}

/* Every waiter is woken: the one the kernel would pick is often not the
 * next to run on a busy machine, and a waiter that loses the race sleeps
 * again (measured: 4+4 processes moved ~10-30% more items than waking one). */
void sh_wunlock(sh_region *r)
{
    struct sh_header *h = r->hdr;
    atomic_store(&h->wowner, 0);
    atomic_fetch_add(&h->wseq, 1);
    if (atomic_load(&h->wwaiters))
        sh_futex_wake(&h->wseq, 1);
}

void sh_wabandon(sh_region *r)
{
    struct sh_header *h = r->hdr;
    atomic_store(&h->wowner, (uint64_t)SH_SLOTS + 1);  /* no such slot: gone */
    atomic_fetch_add(&h->wseq, 1);
    if (atomic_load(&h->wwaiters))
        sh_futex_wake(&h->wseq, 1);
}

uint64_t sh_take_txn(sh_region *r, uint64_t floor)
{
    uint64_t n = atomic_load(&r->hdr->next_txn);
    if (n < floor)
        n = floor;
    atomic_store(&r->hdr->next_txn, n + 1);
    return n;
}

/* ---- the checkpoint guard ----------------------------------------------------- */

/* One try at entering: 1 when in, else 0 with *ck the checkpointer
 * that kept us out (the checkpointer told that we left again). */
static int op_try(sh_region *r, uint64_t me, uint64_t *ck)
{
    struct sh_header *h = r->hdr;
    sh_slot *s = &r->slots[r->slot];
    atomic_store(&s->in_op, 1);
    *ck = atomic_load(&h->ckpt);
    if (*ck == 0 || *ck == me)
        return 1;
    atomic_store(&s->in_op, 0);
    sh_futex_wake(&s->in_op, 1);    /* the checkpointer may be waiting for us */
    return 0;
}

int sh_op_try_enter(sh_region *r)
{
    uint64_t ck;
    return op_try(r, holder_name(r), &ck) ? 0 : QS_WOULDBLOCK;
}

void sh_op_enter(sh_region *r)
{
    struct sh_header *h = r->hdr;
    uint64_t me = holder_name(r);
    uint64_t since = 0;
    for (;;) {
        uint32_t seq = atomic_load(&h->ckpt_seq);
        uint64_t ck;
        if (op_try(r, me, &ck))
            return;
        uint64_t now = sh_now_ns();
        if (!since)
            since = now;
        /* A checkpoint takes milliseconds: only one that lasts is worth a
         * look at its holder (a system call). */
        if (now - since > 20000000ull && owner_gone(r, ck)) {
            /* its checkpointer died: the write lock is free or being taken
             * over, and the next writer redoes the checkpoint anyway */
            atomic_compare_exchange_strong(&h->ckpt, &ck, 0);
            continue;
        }
        atomic_fetch_add(&h->ckpt_waiters, 1);
        sh_futex_wait(&h->ckpt_seq, seq, 0.005);
        atomic_fetch_sub(&h->ckpt_waiters, 1);
    }
}

void sh_op_leave(sh_region *r)
{
    sh_slot *s = &r->slots[r->slot];
    atomic_store(&s->in_op, 0);
    if (atomic_load(&r->hdr->ckpt))
        sh_futex_wake(&s->in_op, 1);
}

int sh_ckpt_begin(sh_region *r, double max_wait)
{
    struct sh_header *h = r->hdr;
    atomic_store(&h->ckpt, holder_name(r));
    uint64_t deadline = sh_now_ns() + (uint64_t)(max_wait * 1e9);
    for (uint32_t i = 0; i < SH_SLOTS; i++) {
        if (i == r->slot)
            continue;
        sh_slot *s = &r->slots[i];
        for (int tries = 0; atomic_load(&s->in_op); tries++) {
            if (tries > 0 && !sh_slot_alive(r, i)) {
                atomic_store(&s->in_op, 0);
                break;
            }
            if (sh_now_ns() >= deadline) {
                sh_ckpt_end(r);
                return QS_LOCKED;
            }
            sh_futex_wait(&s->in_op, 1, 0.001);
        }
    }
    return 0;
}

void sh_ckpt_end(sh_region *r)
{
    struct sh_header *h = r->hdr;
    atomic_store(&h->ckpt, 0);
    atomic_fetch_add(&h->ckpt_seq, 1);
    if (atomic_load(&h->ckpt_waiters))
        sh_futex_wake(&h->ckpt_seq, INT_MAX);
}

/* ---- snapshot pins ---------------------------------------------------------------- */

void sh_pin(sh_region *r, uint64_t limit)
{
    sh_slot *s = &r->slots[r->slot];
    atomic_store(&s->pin_revoked, 0);
    atomic_store(&s->pin_limit, limit);
}

void sh_unpin(sh_region *r)
{
    sh_slot *s = &r->slots[r->slot];
    atomic_store(&s->pin_limit, 0);
    atomic_store(&s->pin_revoked, 0);
}

int sh_pin_revoked(const sh_region *r)
{
    return atomic_load(&r->slots[r->slot].pin_revoked) != 0;
}

int sh_pins_hold(const sh_region *r, uint64_t log_bytes)
{
    for (uint32_t i = 0; i < SH_SLOTS; i++) {
        const sh_slot *s = &r->slots[i];
        uint64_t limit = atomic_load(&s->pin_limit);
        /* the byte lock last: a system call, only for a pin that counts */
        if (i != r->slot && limit > log_bytes && !atomic_load(&s->pin_revoked) &&
            sh_slot_alive(r, i))
            return 1;
    }
    return 0;
}

uint32_t sh_pins_revoke(sh_region *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < SH_SLOTS; i++) {
        sh_slot *s = &r->slots[i];
        if (i != r->slot && atomic_load(&s->pin_limit) && !atomic_load(&s->pin_revoked)) {
            atomic_store(&s->pin_revoked, 1);
            n++;
        }
    }
    return n;
}
