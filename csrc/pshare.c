/* pshare.c -- see pshare.h.  The process's caskets with two or more
 * handles each have one ps_cache: a ring of holds on shared page images
 * (the oldest filed is let go first: a second-level cache sees the first
 * level's misses, so recency is the members' business) and a map from
 * page number to its slot.  One image per page number: a lagging member
 * that asks for an older source than the one filed misses and reads the
 * disk, as without the cache. */
#include "pshare.h"
#include "hmap.h"
#include "pagefmt.h"
#include "qstore.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct ps_slot {
    uint64_t src;
    uint32_t pgno;
    pg_buf *buf;                /* a hold, or NULL */
} ps_slot;

/* A published commit: log bytes [from, to) of the cache's generation
 * (runs are filed only under it, and dropped whenever it changes), its n
 * frames from the frame ring's entry number first on, the meta it made. */
typedef struct ps_run {
    uint64_t from, to;
    uint64_t first;
    size_t n;
    pg_meta meta;
} ps_run;


struct ps_cache {
    ps_cache *next;             /* the registry's list */
    uint64_t dev, ino;
    unsigned members;           /* under the registry's mutex */
    _Atomic int active;         /* members >= 2: read without a lock */
    pthread_mutex_t mu;         /* everything below */
    uint64_t salt;              /* the generation the images belong to */
    uint64_t base_txn;          /* its log's base transaction: a later
                                   generation's is never lower, so a lower
                                   one is a lagging member's older view */
    size_t cap;                 /* most slots: the largest member budget */
    size_t used;                /* slots handed out so far */
    size_t hand;                /* the next slot to replace once used == cap */
    size_t alloc;               /* slots allocated */
    ps_slot *slots;
    hm_map where;               /* pgno -> slot index */
    /* The newest commits members published (ps_note_commit), for members
     * catching up over them: a ring of runs, their frames in a ring of
     * PS_RUN_FRAMES; a run is whole while no later run's frames have
     * overwritten its own (first + PS_RUN_FRAMES >= frames_noted). */
    ps_run *runs;               /* PS_RUNS of them, NULL until the first */
    ps_frame *frames;
    size_t runs_noted;          /* runs filed since the ring was made */
    uint64_t frames_noted;      /* frames filed since the ring was made */
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static ps_cache *registry;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* fork() copies the mutexes in whatever state other threads left them:
 * the parent's thread that forks holds them all across the fork, so the
 * child's copies are consistent and unlocked by the one thread it has. */
static void lock_all(void)
{
    pthread_mutex_lock(&registry_mu);
    for (ps_cache *pc = registry; pc; pc = pc->next)
        pthread_mutex_lock(&pc->mu);
}

static void unlock_all(void)
{
    for (ps_cache *pc = registry; pc; pc = pc->next)
        pthread_mutex_unlock(&pc->mu);
    pthread_mutex_unlock(&registry_mu);
}

static void install_fork_hooks(void) { pthread_atfork(lock_all, unlock_all, unlock_all); }

void ps_release(pg_buf *b)
{
    if (atomic_fetch_sub_explicit(&b->holders, 1, memory_order_acq_rel) == 1)
        free(b);
}

/* Lets go of every image held (pc->mu held); keep_slots: the slot array
 * stays for the same generation's next images. */
static void drop_holds(ps_cache *pc, int keep_slots)
{
    for (size_t i = 0; i < pc->used; i++)
        if (pc->slots[i].buf) {
            ps_release(pc->slots[i].buf);
            pc->slots[i].buf = NULL;
        }
    pc->used = pc->hand = 0;
    pc->runs_noted = 0;         /* the runs name these images' generation */
    pc->frames_noted = 0;
    if (keep_slots) {
        hm_clear(&pc->where);
        return;
    }
    free(pc->runs);
    free(pc->frames);
    pc->runs = NULL;
    pc->frames = NULL;
    free(pc->slots);
    pc->slots = NULL;
    pc->alloc = 0;
    hm_free(&pc->where);
}

int ps_join(uint64_t dev, uint64_t ino, size_t budget_pages, ps_cache **out)
{
    pthread_once(&fork_once, install_fork_hooks);
    *out = NULL;
    pthread_mutex_lock(&registry_mu);
    ps_cache *pc = registry;
    while (pc && !(pc->dev == dev && pc->ino == ino))
        pc = pc->next;
    if (!pc) {
        if (!(pc = calloc(1, sizeof *pc))) {
            pthread_mutex_unlock(&registry_mu);
            return QS_NOMEM;
        }
        pthread_mutex_init(&pc->mu, NULL);
        pc->dev = dev;
        pc->ino = ino;
        pc->next = registry;
        registry = pc;
    }
    pc->members++;
    pthread_mutex_lock(&pc->mu);
    if (budget_pages > pc->cap)
        pc->cap = budget_pages;
    atomic_store(&pc->active, pc->members >= 2);
    pthread_mutex_unlock(&pc->mu);
    pthread_mutex_unlock(&registry_mu);
    *out = pc;
    return 0;
}

void ps_leave(ps_cache *pc)
{
    if (!pc)
        return;
    pthread_mutex_lock(&registry_mu);
    pc->members--;
    if (pc->members < 2) {
        pthread_mutex_lock(&pc->mu);
        atomic_store(&pc->active, 0);
        drop_holds(pc, 0);
        pc->salt = pc->base_txn = 0;
        pthread_mutex_unlock(&pc->mu);
    }
    if (pc->members == 0) {
        ps_cache **at = &registry;
        while (*at != pc)
            at = &(*at)->next;
        *at = pc->next;
        pthread_mutex_destroy(&pc->mu);
        free(pc);
    }
    pthread_mutex_unlock(&registry_mu);
}

/* Takes pc->mu; with nowait only if it is free (0: it was not). */
static int lock_cache(ps_cache *pc, int nowait)
{
    if (nowait)
        return pthread_mutex_trylock(&pc->mu) == 0;
    pthread_mutex_lock(&pc->mu);
    return 1;
}

pg_buf *ps_find(ps_cache *pc, uint64_t salt, uint32_t pgno, uint64_t src, int nowait)
{
    if (!pc || !salt || !atomic_load_explicit(&pc->active, memory_order_relaxed))
        return NULL;
    pg_buf *b = NULL;
    uint64_t i;
    if (!lock_cache(pc, nowait))
        return NULL;
    if (pc->active && pc->salt == salt && hm_get(&pc->where, pgno, &i) &&
        pc->slots[i].src == src) {
        b = pc->slots[i].buf;
        atomic_fetch_add_explicit(&b->holders, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pc->mu);
    return b;
}

/* A slot for pgno (pc->mu held), empty and mapped: the one pgno has, else
 * a new one while the ring is short of cap, else the oldest.  -1: out of
 * memory (nothing changed but a slot let go). */
static long slot_for(ps_cache *pc, uint32_t pgno)
{
    uint64_t i;
    if (!hm_get(&pc->where, pgno, &i)) {
        if (pc->used < pc->cap) {
            if (pc->used == pc->alloc) {
                size_t n = pc->alloc ? 2 * pc->alloc : 64;
                if (n > pc->cap)
                    n = pc->cap;
                ps_slot *s = realloc(pc->slots, n * sizeof *s);
                if (!s)
                    return -1;
                memset(s + pc->alloc, 0, (n - pc->alloc) * sizeof *s);
                pc->slots = s;
                pc->alloc = n;
            }
            i = pc->used++;
        } else {
            i = pc->hand;
            pc->hand = (pc->hand + 1) % pc->used;
            uint64_t j;
            if (hm_get(&pc->where, pc->slots[i].pgno, &j) && j == i)
                hm_del(&pc->where, pc->slots[i].pgno);
        }
        if (hm_put(&pc->where, pgno, i) != 0) {
            if (pc->slots[i].buf) {
                ps_release(pc->slots[i].buf);
                pc->slots[i].buf = NULL;
            }
            return -1;      /* the slot is unmapped: reused later, never found */
        }
    }
    if (pc->slots[i].buf) {
        ps_release(pc->slots[i].buf);
        pc->slots[i].buf = NULL;
    }
    return (long)i;
}

void ps_keep(ps_cache *pc, uint64_t salt, uint64_t base_txn, uint32_t pgno, uint64_t src,
             pg_buf *b, int nowait)
{
    if (!pc || !salt || !atomic_load_explicit(&pc->active, memory_order_relaxed))
        return;
    if (!lock_cache(pc, nowait))
        return;
    if (!pc->active) {
        /* the last but one member left meanwhile */
        pthread_mutex_unlock(&pc->mu);
        return;
    }
    if (pc->salt != salt) {
        if (base_txn < pc->base_txn) {
            /* A member that has not caught up with a checkpoint yet: its
             * image is of an older generation, the cache's are newer and
             * about to be wanted by every member. */
            pthread_mutex_unlock(&pc->mu);
            return;
        }
        /* A new generation (or one of the same base transaction, whose
         * order is unknown): every image held is of another one. */
        drop_holds(pc, 1);
        pc->salt = salt;
        pc->base_txn = base_txn;
    }
    long i = slot_for(pc, pgno);
    if (i >= 0) {
        atomic_store_explicit(&b->holders, 2, memory_order_relaxed);
        pc->slots[i].pgno = pgno;
        pc->slots[i].src = src;
        pc->slots[i].buf = b;
    }
    pthread_mutex_unlock(&pc->mu);
}

int ps_active(const ps_cache *pc)
{
    return pc && atomic_load_explicit(&pc->active, memory_order_relaxed);
}

void ps_note_commit(ps_cache *pc, uint64_t salt, uint64_t from, uint64_t to,
                    const pg_meta *meta, const ps_frame *frames, size_t n)
{
    if (!pc || !salt || from >= to || n > PS_RUN_FRAMES ||
        !atomic_load_explicit(&pc->active, memory_order_relaxed))
        return;     /* more frames than kept: a gap no chain crosses */
    pthread_mutex_lock(&pc->mu);
    if (!pc->active || pc->salt != salt) {
        /* idle, or the cache holds another generation's images: a member
         * catching up over this commit reads the log */
        pthread_mutex_unlock(&pc->mu);
        return;
    }
    if (!pc->runs) {
        pc->runs = malloc(PS_RUNS * sizeof *pc->runs);
        pc->frames = malloc(PS_RUN_FRAMES * sizeof *pc->frames);
        if (!pc->runs || !pc->frames) {
            free(pc->runs);
            free(pc->frames);
            pc->runs = NULL;
            pc->frames = NULL;
            pthread_mutex_unlock(&pc->mu);
            return;
        }
        pc->runs_noted = 0;
        pc->frames_noted = 0;
    }
    ps_run *r = &pc->runs[pc->runs_noted % PS_RUNS];
    r->from = from;
    r->to = to;
    r->first = pc->frames_noted;
    r->n = n;
    r->meta = *meta;
    for (size_t i = 0; i < n; i++)
        pc->frames[(pc->frames_noted + i) % PS_RUN_FRAMES] = frames[i];
    pc->frames_noted += n;
    pc->runs_noted++;
    pthread_mutex_unlock(&pc->mu);
}

/* The number (counted since the ring was made) of the kept run that
 * starts at from, or pc->runs_noted when none does (pc->mu held).  Runs
 * are filed at commit, under the write lock, so the kept ones are in log
 * order: a binary search. */
static size_t run_at(const ps_cache *pc, uint64_t from)
{
    size_t lo = pc->runs_noted < PS_RUNS ? 0 : pc->runs_noted - PS_RUNS, hi = pc->runs_noted;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pc->runs[mid % PS_RUNS].from < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pc->runs_noted && pc->runs[lo % PS_RUNS].from == from ? lo : pc->runs_noted;
}

int ps_catch_up(ps_cache *pc, uint64_t salt, uint64_t from, uint64_t to,
                int (*apply)(void *ctx, uint32_t pgno, uint64_t off, pg_buf *image),
                void *ctx, pg_meta *meta)
{
    if (!pc || !salt || from >= to || !atomic_load_explicit(&pc->active, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&pc->mu);
    int rc = 0;
    if (!pc->active || !pc->runs || pc->salt != salt)
        goto out;   /* the filed runs are of another generation */
    /* First the whole chain, so that nothing is applied unless it covers
     * [from, to) exactly, each of its runs with its frames still kept. */
    size_t first = run_at(pc, from), last = first;
    for (uint64_t at = from;; last++) {
        const ps_run *r = &pc->runs[last % PS_RUNS];
        if (last == pc->runs_noted || r->from != at || r->to > to ||
            pc->frames_noted > r->first + PS_RUN_FRAMES)
            goto out;
        if ((at = r->to) == to)
            break;
    }
    for (size_t c = first; c <= last; c++)
        for (size_t i = 0; i < pc->runs[c % PS_RUNS].n; i++) {
            ps_frame f = pc->frames[(pc->runs[c % PS_RUNS].first + i) % PS_RUN_FRAMES];
            pg_buf *image = NULL;
            uint64_t slot;
            if (hm_get(&pc->where, f.pgno, &slot) &&
                pc->slots[slot].src == f.off && pc->slots[slot].buf) {
                image = pc->slots[slot].buf;
                atomic_fetch_add_explicit(&image->holders, 1, memory_order_relaxed);
            }
            if ((rc = apply(ctx, f.pgno, f.off, image)) != 0)
                goto out;
        }
    *meta = pc->runs[last % PS_RUNS].meta;
    rc = 1;
out:
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

void ps_new_generation(ps_cache *pc, uint64_t old_salt, uint64_t salt, uint64_t base_txn,
                       const hm_map *logidx)
{
    if (!pc || !salt || !atomic_load_explicit(&pc->active, memory_order_relaxed))
        return;
    pthread_mutex_lock(&pc->mu);
    if (!pc->active) {
        pthread_mutex_unlock(&pc->mu);
        return;
    }
    if (!old_salt || pc->salt != old_salt)
        drop_holds(pc, 1);      /* images of some other generation */
    else {
        /* The newest committed image of a page is what the copy put into
         * the main file: the main-file image of the new generation.  Any
         * other (an older frame, or the main file's image of a page the
         * old log changed) is stale there. */
        for (size_t i = 0; i < pc->used; i++) {
            ps_slot *sl = &pc->slots[i];
            if (!sl->buf)
                continue;
            uint64_t off, at;
            int logged = hm_get(logidx, sl->pgno, &off);
            if (logged ? sl->src == off : sl->src == PS_MAIN) {
                sl->src = PS_MAIN;
                continue;
            }
            if (hm_get(&pc->where, sl->pgno, &at) && at == i)
                hm_del(&pc->where, sl->pgno);
            ps_release(sl->buf);
            sl->buf = NULL;
        }
        pc->runs_noted = 0;     /* offsets of the old log */
        pc->frames_noted = 0;
    }
    pc->salt = salt;
    pc->base_txn = base_txn;
    pthread_mutex_unlock(&pc->mu);
}
