/* qres.c -- the queue module's shared state in the region (see qres.h):
 * the wake-up words blocked readers sleep on and the table of reserved
 * items, kept in the room shm.c leaves for the layer above. */
#include "qres.h"
#include "qstore.h"
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---- wake-ups ---------------------------------------------------------------- */

/* The words of our room in the region: QR_BUCKETS wake-up words, then as
 * many counts of their sleepers (asynchronous waiters included), then the
 * async generation word and the count of asynchronous waiters (qr_aio_*). */
_Static_assert(2 * QR_BUCKETS + 2 == SH_UP_WORDS, "wake-up words fill the header's room");
#define BUCKET(r, b) (&(r)->up_words[(b)])
#define BWAITERS(r, b) (&(r)->up_words[QR_BUCKETS + (b)])
#define AIO_GEN(r) (&(r)->up_words[2 * QR_BUCKETS])
#define AIO_WAITERS(r) (&(r)->up_words[2 * QR_BUCKETS + 1])

uint32_t qr_wait_word(const sh_region *r, uint64_t qhash)
{
    return atomic_load(BUCKET(r, qhash % QR_BUCKETS));
}

void qr_wait_begin(void)
{
    (void)sh_intr_take();
}

/* qr_set_wait_slice's seconds, as the bits of a double (0: none). */
static _Atomic uint64_t wait_slice_bits;

void qr_set_wait_slice(double seconds)
{
    uint64_t bits;
    memcpy(&bits, &seconds, sizeof bits);
    atomic_store(&wait_slice_bits, seconds > 0 ? bits : 0);
}

int qr_wait(sh_region *r, uint64_t qhash, uint32_t word, double timeout)
{
    if (sh_intr_take())
        return EINTR;
    double slice = 0;
    uint64_t bits = atomic_load_explicit(&wait_slice_bits, memory_order_relaxed);
    memcpy(&slice, &bits, sizeof slice);
    int sliced = bits && (timeout < 0 || timeout > slice);
    size_t b = qhash % QR_BUCKETS;
    atomic_fetch_add(BWAITERS(r, b), 1);
    int rc = sh_futex_wait(BUCKET(r, b), word, sliced ? slice : timeout);
    atomic_fetch_sub(BWAITERS(r, b), 1);
    /* the slice passed (or a spurious wake-up) with nothing to look at */
    if (rc == 0 && sliced && atomic_load(BUCKET(r, b)) == word)
        return EINTR;
    return rc;
}

/* The word is bumped before the waiter counts are read, and a waiter
 * counts itself before it reads the word (sequentially consistent both):
 * so either the wake sees the waiter or the waiter sees the new word. */
int qr_wake(sh_region *r, uint64_t qhash)
{
    size_t b = qhash % QR_BUCKETS;
    atomic_fetch_add(BUCKET(r, b), 1);
    if (!atomic_load(BWAITERS(r, b)))
        return 0;
    sh_futex_wake(BUCKET(r, b), INT_MAX);
    return 1;
}

void qr_aio_kick(sh_region *r)
{
    if (atomic_load(AIO_WAITERS(r))) {
        atomic_fetch_add(AIO_GEN(r), 1);
        sh_futex_wake(AIO_GEN(r), INT_MAX);
    }
}

/* qr_wake for the wakes of this file, which have no waiters of their own
 * process to tell first. */
static void wake_all_kinds(sh_region *r, uint64_t qhash)
{
    if (qr_wake(r, qhash))
        qr_aio_kick(r);
}

void qr_wake_all(sh_region *r)
{
    for (uint64_t b = 0; b < QR_BUCKETS; b++)
        wake_all_kinds(r, b);
}

_Atomic uint32_t *qr_word(sh_region *r, uint64_t qhash) { return BUCKET(r, qhash % QR_BUCKETS); }

_Atomic uint32_t *qr_aio_gen(sh_region *r) { return AIO_GEN(r); }

void qr_aio_enter(sh_region *r, uint64_t qhash)
{
    atomic_fetch_add(BWAITERS(r, qhash % QR_BUCKETS), 1);
    atomic_fetch_add(AIO_WAITERS(r), 1);
}

void qr_aio_leave(sh_region *r, uint64_t qhash)
{
    atomic_fetch_sub(AIO_WAITERS(r), 1);
    atomic_fetch_sub(BWAITERS(r, qhash % QR_BUCKETS), 1);
}

/* ---- reservations ---------------------------------------------------------------
 * Two open-addressing tables with linear probing and backward-shift
 * deletion: items by id, queues by hash, in the region's room for the
 * layer above (up_area; up_count counts the entries).  Only the write-lock
 * holder changes them, inside the up_seq seqlock, so readers without the
 * lock (lengths) retry instead of seeing a half-moved entry; the first
 * change after a holder died halfway through one (up_seq odd) repairs the
 * tables (repair_torn). */
_Static_assert(QR_RES_CAP * sizeof(qr_res) + QR_QCAP * sizeof(qr_qent) == SH_UP_BYTES,
               "the tables fill the region's room for them exactly");
_Static_assert(_Alignof(qr_res) <= 8 && _Alignof(qr_qent) <= 8, "the room is 8-aligned");
#define RES(r) ((qr_res *)(r)->up_area)
#define QTAB(r) ((qr_qent *)(void *)((uint8_t *)(r)->up_area + QR_RES_CAP * sizeof(qr_res)))

/* An item is (queue, id): a published payload has one id in several queues. */
static size_t res_home2(uint64_t id, uint64_t qh)
{
    return (size_t)(((id ^ (qh * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull) >> 48) &
           (QR_RES_CAP - 1);
}
static uint64_t qkey(uint64_t qhash) { return qhash ? qhash : 1; }
static size_t q_home(uint64_t qh) { return (size_t)((qh * 0x9E3779B97F4A7C15ull) >> 52) & (QR_QCAP - 1); }

const qr_res *qr_find(const sh_region *r, uint64_t qhash, uint64_t id)
{
    if (!r->up_area)
        return NULL;    /* a handle without a region (read-only media) */
    uint64_t k = qkey(qhash);
    size_t i = res_home2(id, k);
    for (size_t n = 0; n < QR_RES_CAP; n++, i = (i + 1) & (QR_RES_CAP - 1)) {
        if (RES(r)[i].id == id && RES(r)[i].qhash == k)
            return &RES(r)[i];
        if (RES(r)[i].id == 0)
            return NULL;
    }
    return NULL;
}

void qr_prefetch(const sh_region *r, uint64_t qhash, uint64_t id)
{
    if (r->up_area)
        __builtin_prefetch(&RES(r)[res_home2(id, qkey(qhash))], 1);
}

static qr_qent *q_find(const sh_region *r, uint64_t qhash)
{
    uint64_t k = qkey(qhash);
    size_t i = q_home(k);
    for (size_t n = 0; n < QR_QCAP; n++, i = (i + 1) & (QR_QCAP - 1)) {
        if (QTAB(r)[i].qhash == k)
            return &QTAB(r)[i];
        if (QTAB(r)[i].qhash == 0)
            return NULL;
    }
    return NULL;
}

int qr_room(const sh_region *r, uint64_t n)
{
    return *r->up_count + n <= QR_RES_CAP / 4 * 3;
}

#define NRES(r) (*(r)->up_count)

static void seq_open(sh_region *r) { atomic_fetch_add(r->up_seq, 1); }
static void seq_close(sh_region *r) { atomic_fetch_add(r->up_seq, 1); }

static void repair_torn(sh_region *r);

/* The run loses id (its entry goes, or stops being plain): the side of
 * the run with more ids stays. */
static void run_drop(qr_qent *q, uint64_t id)
{
    if (!q->run_lo || id < q->run_lo || id > q->run_hi)
        return;
    if (q->run_lo == q->run_hi)
        q->run_lo = q->run_hi = 0;
    else if (id == q->run_lo)
        q->run_lo++;
    else if (id == q->run_hi)
        q->run_hi--;
    else if (id - q->run_lo >= q->run_hi - id)
        q->run_hi = id - 1;
    else
        q->run_lo = id + 1;
}

/* A plain entry of id is there now: the run takes it when it touches an
 * end (a reserve shares ascending ids), or starts with it. */
static void run_take(qr_qent *q, uint64_t id)
{
    if (!q->run_lo)
        q->run_lo = q->run_hi = id;
    else if (id == q->run_hi + 1)
        q->run_hi = id;
    else if (id + 1 == q->run_lo)
        q->run_lo = id;
}

/* Adds entry e (its holder named in it); an entry of its (qhash, id) is
 * replaced in place. */
static int res_add_as(sh_region *r, const qr_res *e)
{
    if (e->id == 0)
        return QS_FULL;
    uint64_t k = qkey(e->qhash);
    size_t i = res_home2(e->id, k);
    while (RES(r)[i].id && !(RES(r)[i].id == e->id && RES(r)[i].qhash == k))
        i = (i + 1) & (QR_RES_CAP - 1);
    int fresh = RES(r)[i].id == 0;
    if (fresh && !qr_room(r, 1))
        return QS_FULL;
    qr_qent *q = q_find(r, k);
    seq_open(r);
    if (!q) {
        size_t j = q_home(k), n;
        for (n = 0; n < QR_QCAP && QTAB(r)[j].qhash; n++)
            j = (j + 1) & (QR_QCAP - 1);
        if (n == QR_QCAP) {
            seq_close(r);
            return QS_FULL;
        }
        q = &QTAB(r)[j];
        *q = (qr_qent){k, 0, 0, 0, 0};
    }
    if (fresh) {
        q->count++;
        NRES(r)++;
    }
    RES(r)[i] = *e;
    RES(r)[i].qhash = k;
    if (e->count_due)
        run_drop(q, e->id);
    else
        run_take(q, e->id);
    if (e->deadline_ns && (!q->min_deadline_ns || e->deadline_ns < q->min_deadline_ns))
        q->min_deadline_ns = e->deadline_ns;
    seq_close(r);
    return 0;
}

int qr_add(sh_region *r, uint64_t id, uint64_t qhash, uint64_t token, uint64_t deadline_ns)
{
    repair_torn(r);
    qr_res e = {.id = id, .qhash = qhash, .token = token, .deadline_ns = deadline_ns,
                .reserved_ns = sh_now_ns(), .slot = r->slot, .gen = r->gen,
                .pid = atomic_load(&r->slots[r->slot].pid)};
    return res_add_as(r, &e);
}

int qr_add_due(sh_region *r, uint64_t id, uint64_t qhash, uint64_t token, uint32_t count_due)
{
    repair_torn(r);
    qr_res e = {.id = id, .qhash = qhash, .token = token, .reserved_ns = sh_now_ns(),
                .slot = r->slot, .gen = r->gen, .pid = atomic_load(&r->slots[r->slot].pid),
                .count_due = count_due ? count_due : 1};
    return res_add_as(r, &e);
}

/* Backward-shift deletion of slot i of a linear-probing table. */
#define SHIFT_DELETE(tab, cap, i, keyfield, home)                                  \
    do {                                                                           \
        size_t hole_ = (i), j_ = (i);                                              \
        for (;;) {                                                                 \
            j_ = (j_ + 1) & ((cap) - 1);                                           \
            if (tab[j_].keyfield == 0)                                             \
                break;                                                             \
            size_t h_ = home(tab[j_]);                                             \
            if (((j_ - h_) & ((cap) - 1)) >= ((j_ - hole_) & ((cap) - 1))) {       \
                tab[hole_] = tab[j_];                                              \
                hole_ = j_;                                                        \
            }                                                                      \
        }                                                                          \
        memset(&tab[hole_], 0, sizeof tab[hole_]);                                 \
    } while (0)

#define QENT_HOME(e) q_home((e).qhash)
#define RES_HOME(e) res_home2((e).id, (e).qhash)

static void q_drop_one(sh_region *r, qr_qent *q)
{
    if (!q)
        return;
    if (q->count > 1) {
        q->count--;
        return;
    }
    size_t i = (size_t)(q - QTAB(r));
    SHIFT_DELETE(QTAB(r), QR_QCAP, i, qhash, QENT_HOME);
}

static void res_delete_at(sh_region *r, size_t i)
{
    qr_qent *q = q_find(r, RES(r)[i].qhash);
    if (q)
        run_drop(q, RES(r)[i].id);
    SHIFT_DELETE(RES(r), QR_RES_CAP, i, id, RES_HOME);
    q_drop_one(r, q);
    NRES(r)--;
}

void qr_del(sh_region *r, uint64_t qhash, uint64_t id)
{
    repair_torn(r);
    const qr_res *e = qr_find(r, qhash, id);
    if (!e)
        return;
    seq_open(r);
    res_delete_at(r, (size_t)(e - RES(r)));
    seq_close(r);
}

/* Spins before a reader takes what it saw: a change that never settles was
 * left by a holder that died in it, and repair_torn mends it only under the
 * write lock. */
#define READ_SPINS 1000

/* Copies the queue's entry as one consistent snapshot, without the write
 * lock: 1 when it has one, 0 when not (*out zeroed), -1 when a change never
 * settled (*out is what the last try saw, possibly torn). */
static int q_read(const sh_region *r, uint64_t qhash, qr_qent *out)
{
    for (unsigned spins = 0;; spins++) {
        uint32_t s1 = atomic_load(r->up_seq);
        if (!(s1 & 1) || spins >= READ_SPINS) {
            const qr_qent *q = q_find(r, qhash);
            if (q)
                *out = *q;
            else
                memset(out, 0, sizeof *out);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load(r->up_seq) == s1)
                return q != NULL;
            if (spins >= READ_SPINS)
                return -1;
        }
        if (spins > 100)
            sched_yield();
    }
}

uint64_t qr_count(const sh_region *r, uint64_t qhash, uint64_t *min_deadline_ns)
{
    qr_qent q = {0};
    if (r->up_area)
        (void)q_read(r, qhash, &q);   /* a torn read still gives a count */
    if (min_deadline_ns)
        *min_deadline_ns = q.min_deadline_ns;
    return q.count;
}

int qr_run_end(const sh_region *r, uint64_t qhash, uint64_t id, uint64_t *hi)
{
    qr_qent q;
    if (!r->up_area || q_read(r, qhash, &q) != 1)
        return 0;   /* no run, or a torn one: no skip */
    if (!q.run_lo || id < q.run_lo || id > q.run_hi)
        return 0;
    *hi = q.run_hi;
    return 1;
}

/* Copies tried before a listing takes what it saw. */
#define LIST_TRIES 64

size_t qr_list(const sh_region *r, uint64_t qhash, qr_res *out, size_t cap, int *torn)
{
    *torn = 0;
    if (!r->up_area)
        return 0;
    uint64_t k = qkey(qhash);
    for (unsigned tries = 1;; tries++) {
        uint32_t s1 = atomic_load(r->up_seq);
        size_t n = 0;
        if (!(s1 & 1) || tries >= LIST_TRIES) {
            for (size_t i = 0; i < QR_RES_CAP; i++) {
                const qr_res *e = &RES(r)[i];
                if (e->id && e->qhash == k) {
                    if (n < cap)
                        out[n] = *e;
                    n++;
                }
            }
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load(r->up_seq) == s1)
                return n;
            if (tries >= LIST_TRIES) {
                *torn = 1;
                return n;
            }
        }
        sched_yield();
    }
}

#define SWEEP_NS 100000000ull

int qr_sweep_due(const sh_region *r)
{
    return sh_now_ns() - atomic_load(&r->up_clock_ns) > SWEEP_NS;
}

int qr_mine(const sh_region *r, const qr_res *e)
{
    return e->slot == r->slot && e->gen == r->gen;
}

/* Whether entry e's holder is gone: its slot was taken again (another
 * generation) or nobody holds the slot's lock. */
static int holder_gone(const sh_region *r, const qr_res *e, uint8_t *dead)
{
    if (e->slot >= SH_SLOTS)
        return 1;
    if (qr_mine(r, e))
        return 0;
    if (sh_slot_gen(r, e->slot) != e->gen)
        return 1;
    if (dead[e->slot] == 0)
        dead[e->slot] = sh_slot_alive(r, e->slot) ? 1 : 2;
    return dead[e->slot] == 2;
}

uint64_t qr_expire(sh_region *r, uint64_t qhash, int force)
{
    size_t n;
    return qr_expire_due(r, qhash, force, NULL, 0, &n);
}

uint64_t qr_expire_due(sh_region *r, uint64_t qhash, int force, qr_res *due, size_t cap,
                       size_t *ndue)
{
    *ndue = 0;
    repair_torn(r);
    uint64_t k = qkey(qhash), md = 0;
    uint64_t n = qr_count(r, k, &md);
    if (!n)
        return 0;
    uint64_t now = sh_now_ns();
    int leases = md && md <= now;
    int sweep = force || now - atomic_load(&r->up_clock_ns) > SWEEP_NS;
    if (!leases && !sweep)
        return 0;
    if (sweep)
        atomic_store(&r->up_clock_ns, now);
    uint8_t dead[SH_SLOTS] = {0};
    uint64_t dropped = 0, new_md = 0;
    seq_open(r);
    for (size_t i = 0; i < QR_RES_CAP;) {
        qr_res *e = &RES(r)[i];
        if (e->id == 0 || e->qhash != k) {
            i++;
            continue;
        }
        int gone = sweep && holder_gone(r, e, dead);
        if (gone && e->count_due && due) {
            /* its count is ours to make durable (see qr_add_due) */
            if (*ndue < cap) {
                e->slot = r->slot;
                e->gen = r->gen;
                e->pid = atomic_load(&r->slots[r->slot].pid);
                due[(*ndue)++] = *e;
            }
            i++;
            continue;
        }
        if ((e->deadline_ns && e->deadline_ns <= now) || gone) {
            res_delete_at(r, i);  /* a later entry may move into i */
            dropped++;
            continue;
        }
        if (e->deadline_ns && (!new_md || e->deadline_ns < new_md))
            new_md = e->deadline_ns;
        i++;
    }
    qr_qent *q = q_find(r, k);
    if (q)
        q->min_deadline_ns = new_md;
    seq_close(r);
    return dropped;
}

void qr_drop_mine(sh_region *r)
{
    repair_torn(r);
    seq_open(r);
    for (size_t i = 0; i < QR_RES_CAP;) {
        qr_res *e = &RES(r)[i];
        if (e->id && qr_mine(r, e)) {
            uint64_t k = e->qhash;
            res_delete_at(r, i);
            wake_all_kinds(r, k);
            continue;
        }
        i++;
    }
    seq_close(r);
}

/* Rebuilds both tables from the entries present, dropping duplicates: a
 * handle killed in the middle of a change may have left an entry copied
 * but not cleared, or a count not yet adjusted. */
static void res_repair(sh_region *r)
{
    qr_res *keep = malloc(QR_RES_CAP * sizeof *keep);
    size_t n = 0;
    for (size_t i = 0; keep && i < QR_RES_CAP; i++)
        if (RES(r)[i].id)
            keep[n++] = RES(r)[i];
    memset(RES(r), 0, QR_RES_CAP * sizeof *RES(r));
    memset(QTAB(r), 0, QR_QCAP * sizeof *QTAB(r));
    NRES(r) = 0;
    atomic_store(r->up_seq, 0);
    for (size_t i = 0; i < n; i++) {
        qr_res e = keep[i];
        if (!qr_find(r, e.qhash, e.id))  /* re-added under its holder's name */
            res_add_as(r, &e);
    }
    free(keep);     /* without memory the reservations are dropped: the
                       items return to their queues, nothing is lost */
}

/* A holder killed halfway through a change (up_seq odd) left the tables
 * half-moved: the next change, holding the write lock, repairs them. */
static void repair_torn(sh_region *r)
{
    if (r->up_area && (atomic_load(r->up_seq) & 1))
        res_repair(r);
}
