/* shm.h -- the region processes share beside a casket, NAME-shm (sh_
 * prefix): who is attached, the cross-process write lock, the checkpoint
 * guard, snapshot pins, the newest commit, and room for the layer above
 * (the queue module keeps its wake-up words and reservations there, qres.h)
 * that this module maps but never reads.
 *
 * The file is mapped MAP_SHARED by every handle on the casket.  Locks are
 * open-file-description (OFD) record locks on bytes of it, so the kernel
 * drops them when a process dies, however it dies:
 *   byte 0       "attached": held shared by every handle; the opener that
 *                gets it exclusively is alone and (re)builds the region, so
 *                a stale or damaged region never outlives its last user
 *   byte 16+i    slot i, held exclusively by the handle using it (a slot
 *                whose byte is free belongs to a dead or closed handle)
 * Everything read from the region is bounds-checked: a damaged region can
 * make operations fail, never read or write outside the mapping.
 *
 * Not thread-safe by itself: the transaction layer (txn.c) calls the op guard under its
 * operation mutex and the write-lock calls while holding its in-process
 * write lock. */
#ifndef QS_SHM_H
#define QS_SHM_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SH_SLOTS 128            /* handles attached at once */

/* Room in the region for the layer above (the queue module's reservations
 * and wake-up words): shm.c maps it, allocates and zeroes it with the
 * region, and reads none of it.  In the header page: a seqlock word
 * (up_seq), a counter (up_count) and SH_UP_WORDS futex words; after the
 * slots, SH_UP_BYTES bytes, 8-aligned (up_area).  Their sizes, and the three
 * numbers SH_UP_SHAPE_A..C that the layer above checks against its own, are
 * part of the region's format: the header records the shape and an attach
 * refuses a region of another one. */
#define SH_UP_WORDS 514
#define SH_UP_BYTES 3833856u
#define SH_UP_SHAPE_A 256u
#define SH_UP_SHAPE_B 65536u
#define SH_UP_SHAPE_C 4096u

typedef struct sh_slot {
    _Atomic uint32_t in_op;     /* 1 while the handle runs an operation */
    _Atomic uint32_t gen;       /* bumped each time the slot is taken */
    _Atomic uint32_t used;
    _Atomic uint32_t pid;
    /* A snapshot held through this slot: while pin_limit is nonzero no
     * checkpoint may restart the log until the log is pin_limit bytes long;
     * a checkpoint that goes ahead then sets pin_revoked first. */
    _Atomic uint64_t pin_limit;
    _Atomic uint32_t pin_revoked;
    uint32_t pin_pad;
} sh_slot;

typedef struct sh_header sh_header;

typedef struct sh_region {
    int fd;
    uint8_t *base;
    size_t size;
    sh_header *hdr;
    sh_slot *slots;
    uint32_t slot;              /* ours */
    uint32_t gen;               /* our slot's generation */
    uint32_t pid;               /* getpid() at attach: the caller's, since a
                                   handle is refused after fork (casket.c),
                                   and sh_other_process runs at commits,
                                   where getpid's system call would cost */
    int exclusive;              /* we hold byte 0 exclusively */
    int created;                /* this open created the file */
    /* The room for the layer above, mapped (all NULL without a region),
     * and a word of its own per handle. */
    _Atomic uint32_t *up_seq;
    uint32_t *up_count;
    _Atomic uint32_t *up_words;
    void *up_area;
    _Atomic uint64_t up_clock_ns;
    /* sh_other_process's last answer (bit 0; bit 1: one is kept) and the
     * header's attach_seq it was read under (bits 32-63) */
    _Atomic uint64_t others_memo;
} sh_region;

/* The newest commit as published by its writer. */
typedef struct sh_commit {
    uint64_t salt;              /* log generation */
    uint64_t log_end;           /* offset after its commit frame */
    uint64_t seq;               /* commits and checkpoints published so far */
} sh_commit;

/* Opens (creating it with permission bits perm) the region file at path and attaches: takes
 * byte 0 exclusively if nobody else has it (then *alone is 1 and the
 * region is blank, its blocks allocated: the caller recovers the casket
 * and calls sh_init), or shared, waiting up to timeout seconds while an
 * opener that is alone initializes it (then *alone is 0 and the region has
 * been validated), and claims a slot.  Returns 0, QS_LOCKED (timeout, or
 * every slot in use), QS_CORRUPT (a region in use by live processes that
 * fails validation), QS_NOTFILE or EISDIR (path is not a regular file),
 * QS_NOMEM or errno (ENOSPC: no room for the region; EACCES, EROFS: it may
 * not be written); on failure nothing stays open or mapped, and a file the
 * call created is removed. */
int sh_open(sh_region *r, const char *path, mode_t perm, double timeout, int *alone);

/* For an open that fails after sh_open succeeded: removes the region file
 * at path if this open created it and still holds it exclusively (nobody
 * else can have found it then; one waiting to attach notices it is gone).
 * Call before sh_close. */
void sh_discard(sh_region *r, const char *path);

/* A read-only handle that cannot write the region (EACCES, EPERM, EROFS
 * from sh_open) works without one, reading the files alone, provided no
 * handle with a region has the casket open.  sh_observe takes a shared
 * lock in the main file open as main_fd, held until it is closed, and
 * checks the region at path: 0 (nobody attached, or no region), QS_NOATTACH
 * (handles are attached: their commits and checkpoints could not be
 * followed), QS_NOTFILE or errno; on failure the lock is released.
 * sh_wait_unobserved, for every opener with a region (main file open as
 * main_fd, attached): waits up to timeout seconds while such handles have
 * the casket open; 0 or QS_LOCKED. */
int sh_observe(int main_fd, const char *path);
int sh_wait_unobserved(int main_fd, double timeout);

/* Fills a blank region (after sh_open said alone) with the casket's
 * current commit and next transaction number. */
void sh_init(sh_region *r, const sh_commit *cm, uint64_t next_txn);

/* Lets other openers in: converts byte 0 from exclusive to shared
 * (atomically).  Returns 0 or errno. */
int sh_share(sh_region *r);

/* Tries to become the only handle (byte 0 exclusive, without waiting):
 * 0, QS_LOCKED when other handles are attached, or errno. */
int sh_exclusive(sh_region *r);

/* Releases the slot and every lock and unmaps.  After fork in the child,
 * call sh_forget instead: it unmaps and closes without touching the
 * locks, which the child shares with its parent. */
void sh_close(sh_region *r);
void sh_forget(sh_region *r);

/* ---- the newest commit ------------------------------------------------------ */

void sh_read_commit(const sh_region *r, sh_commit *cm);
/* Publishes a commit (holding the write lock). */
void sh_publish(sh_region *r, uint64_t salt, uint64_t log_end);
/* The change counter alone: a cheap "did anything change" test. */
uint64_t sh_commit_seq(const sh_region *r);

/* ---- the write lock ------------------------------------------------------------ */

/* Takes the cross-process write lock (a word in the region naming its
 * holder's slot), waiting up to timeout seconds: woken when the holder
 * releases it; a holder that died is noticed within about 20 ms of
 * waiting and the lock taken over, with *holder_died set.  Returns 0 or
 * QS_LOCKED. */
int sh_wlock(sh_region *r, double timeout, int *holder_died);
void sh_wunlock(sh_region *r);
/* Lets go of the write lock as if its holder had died: the next taker gets
 * *holder_died and repairs what this holder could not (an interrupted
 * checkpoint it failed to finish). */
void sh_wabandon(sh_region *r);
/* The handles attached besides ours, and in *mine those of this process
 * (for messages: they may come and go meanwhile). */
uint32_t sh_others(const sh_region *r, uint32_t *mine);
/* Whether a slot of another process is in use: one that died attached
 * still counts (not checked: this is read at commits, and 128 lock tests
 * would cost more than the commit).  The 128 slots are scanned only when a
 * slot was taken or let go since the last call (the answer is kept in r). */
int sh_other_process(sh_region *r);
/* The pid of the process holding the write lock now, 0 when it is free
 * (for messages: it may have changed by the time it is read). */
uint32_t sh_wlock_holder(const sh_region *r);

/* Transaction numbers are drawn from one counter for all handles, so a
 * writer that died mid-transaction never shares a number with the next
 * one.  Holding the write lock: returns a number >= floor, and the counter
 * moves past it. */
uint64_t sh_take_txn(sh_region *r, uint64_t floor);

/* ---- the checkpoint guard --------------------------------------------------------
 * A checkpoint overwrites pages of the main file that other handles may be
 * reading.  Each operation runs between sh_op_enter and sh_op_leave; a
 * checkpointer (holding the write lock) waits until no other handle is in
 * an operation and keeps new ones out until sh_ckpt_end. */
void sh_op_enter(sh_region *r);
/* sh_op_enter without waiting: 0 (inside an operation), or QS_WOULDBLOCK
 * while another handle's checkpoint runs (not inside). */
int sh_op_try_enter(sh_region *r);
void sh_op_leave(sh_region *r);
/* 0: no other handle is inside an operation now, nor will be until
 * sh_ckpt_end.  QS_LOCKED: some handle stayed inside one for longer than
 * max_wait seconds (the checkpoint is to be skipped; sh_ckpt_end is then
 * already done). */
int sh_ckpt_begin(sh_region *r, double max_wait);
void sh_ckpt_end(sh_region *r);

/* ---- snapshot pins ----------------------------------------------------------------
 * A snapshot reads the main file and the log as of one commit, across many
 * operations.  Its pin holds checkpoints off (they would overwrite main-file
 * pages it reads and restart the log under it) until the log reaches the
 * pin's limit; then the checkpoint revokes the pin, and the snapshot's next
 * operation fails.  Pins are set and tested inside an operation (between
 * sh_op_enter and sh_op_leave), and revoked only by a checkpointer past
 * sh_ckpt_begin, so a revoked pin is never read from after the revocation. */
/* Pins our slot's view until the log is limit (> 0) bytes long. */
void sh_pin(sh_region *r, uint64_t limit);
void sh_unpin(sh_region *r);
/* Whether a checkpoint revoked our pin. */
int sh_pin_revoked(const sh_region *r);
/* Whether another live handle's pin still holds checkpoints off with the
 * log log_bytes long. */
int sh_pins_hold(const sh_region *r, uint64_t log_bytes);
/* Revokes every other handle's pin (a checkpointer, past sh_ckpt_begin);
 * returns how many. */
uint32_t sh_pins_revoke(sh_region *r);

/* ---- for the layer above -------------------------------------------------------- */

/* Futexes on the shared mapping (not FUTEX_PRIVATE: every process).
 * sh_futex_wait sleeps while *w == val, up to timeout seconds (< 0: no
 * limit); returns EINTR when a signal handler ran during the wait
 * (handlers installed without SA_RESTART, as Python installs its own),
 * else 0: woken, timed out, or the word had already changed.
 * sh_futex_wake wakes up to n sleepers. */
int sh_futex_wait(_Atomic uint32_t *w, uint32_t val, double timeout);
void sh_futex_wake(_Atomic uint32_t *w, int n);

/* Whether a futex wait of the calling thread returned EINTR since the last
 * call, which clears it.  Waits that retry on EINTR (the write lock's)
 * would otherwise swallow the signal: its handler has run, and a later
 * sleep of the same call (a get waiting for items after waiting for the
 * lock) would not be interrupted, leaving a Ctrl-C unanswered until the
 * sleep ends.  Per thread; never fails. */
int sh_intr_take(void);

/* Slot i (< SH_SLOTS): its generation, bumped each time a handle takes it,
 * and whether a live handle holds it (ours always is; a system call for
 * the others). */
uint32_t sh_slot_gen(const sh_region *r, uint32_t i);
int sh_slot_alive(const sh_region *r, uint32_t i);

uint64_t sh_now_ns(void);

#endif
