/* pager.h -- pages for the tree (pg_ prefix): the committed page cache, the
 * writer's private dirty pages, spilling them before commit, the log index,
 * checkpoints and the free list.
 *
 * Two views of the casket exist at once: the committed view (every reader)
 * and the writer's view (committed plus its transaction's changes).  The
 * pager is not thread-safe: the casket layer (txn.c) serializes calls with its operation
 * mutex, except pg_commit_write and pg_checkpoint_copy, which touch only
 * writer-owned state and may run while readers work. */
#ifndef QS_PAGER_H
#define QS_PAGER_H
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include "hmap.h"
#include "pagefmt.h"
#include "wal.h"
#include <stddef.h>

struct ps_cache;

/* Fresh pages (ones the file grows by) that make a commit write them
 * straight into the main file rather than the log (pager.c, DIRECT).  Going
 * direct writes them once instead of twice (log, then checkpoint) but costs
 * the commit a second sync, of the main file, before its commit frame; up to
 * 512 KiB, writing them again later costs less than that sync: seed 000's
 * synced transaction of 10^3 items (40 fresh pages) went from two
 * fdatasyncs to one and from 384 k to 434 k items/s (median of 10 A/B
 * pairs, 32 -> 128). */
#define PG_DIRECT_MIN 128

typedef struct pg_buf {
    uint8_t data[PG_SIZE];
    uint64_t off;               /* log offset of its frame once written */
    struct pg_buf *next;        /* spare list */
    uint32_t pgno;
    uint8_t depth;              /* delta frames in a row that end at its
                                   frame (off); WAL_DELTA_DEPTH where that
                                   is not known, so that the page's next
                                   frame is whole */
    _Atomic uint32_t holders;   /* 0: this pager's own buffer.  Otherwise a
                                   committed image shared with the process's
                                   other handles of the casket (pshare.h):
                                   one per cache holding it; its data never
                                   changes, and the last holder frees it */
    _Atomic uint8_t ref;        /* clock bit: used since the hand passed
                                   (relaxed: shared images have one bit for
                                   all their holders, a hint either way) */
    _Atomic uint8_t checked;    /* the tree verified this image's structure
                                   (see pg_checked) */
} pg_buf;

/* The "structure verified" flag of a page image handed out by this pager:
 * an image read from disk starts unverified; the tree checks it in full
 * once and sets the flag, so hot pages are not re-verified on every
 * access.  Copies keep the flag; blank pages start verified.  Atomic
 * because a shared image is verified by whichever holder gets there first
 * (the same bytes: a 1 is true for all); relaxed loads and stores are
 * plain moves. */
static inline _Atomic uint8_t *pg_checked(uint8_t *page)
{
    return &((pg_buf *)(void *)page)->checked;
}

typedef struct pager {
    int fd;                     /* main file */
    int readonly;
    int has_log;                /* a read-only handle may have no log */
    wal log;
    hm_map cache;               /* committed images: pgno -> pg_buf* */
    hm_map logidx;              /* committed: pgno -> newest frame offset */
    pg_meta meta;               /* committed meta */
    uint64_t log_end;           /* offset after the last committed frame */
    uint64_t main_pages;        /* pages present in the main file */
    size_t budget;              /* page buffers allowed (cache + dirty) */
    size_t cache_hand;
    uint64_t checkpoint_bytes;
    /* the writer's transaction */
    int in_txn;
    pg_meta wmeta;
    hm_map dirty;               /* pgno -> pg_buf* */
    hm_map spill;               /* pgno -> offset of its uncommitted frame */
    uint64_t txn, next_txn;
    uint64_t txn_start, txn_end;
    uint32_t txn_direct;        /* pages it wrote straight to the main file */
    uint32_t txn_frames;        /* frames it spilled to the log */
    /* spare buffers and statistics */
    pg_buf *spare;
    size_t nspare;
    uint64_t commits, checkpoints, spilled;
    uint64_t pages_read, pages_shared;  /* committed images: from the files,
                                           from another handle (pshare.h) */
    _Atomic uint32_t bad_page;  /* the last page found damaged when read
                                   (0: none), for qs_corrupt_page */
    uint64_t epoch;             /* bumped by pg_trim: page pointers handed
                                   out before it may be stale; never 0 */
    int reload;                 /* the next pg_refresh rereads page 0 and the
                                   log whatever the salt */
    int cached_only;            /* pg_get and pg_get_mine read a page only
                                   from the kernel's page cache, else answer
                                   QS_WOULDBLOCK (qs_get_nowait) */
    char damage[160];           /* why pg_open found the log damaged
                                   (QS_CORRUPT) or the version unreadable
                                   (QS_VERSION); kept after the failure */
    uint32_t version;           /* format version of page 0 as opened (a
                                   read-write open rewrites it as
                                   QS_FORMAT_VERSION) */
    struct ps_cache *share;     /* images shared with this process's other
                                   handles of the casket (NULL: none) */
    uint64_t share_salt;        /* the generation they are filed under: the
                                   log's salt, or 0 (share nothing) while
                                   this view reads a main file rewritten
                                   within the generation (a checkpointer
                                   died after its copy, pg_refresh and
                                   pg_checkpoint_unfinished) */
    pg_buf **cw_bufs, **cw_fresh;   /* pg_commit_write's lists, kept */
    uint8_t **cw_pages;
    size_t cw_cap;
    uint8_t *cw_delta;          /* room for PG_DELTA_PAGES delta frames, kept */
    struct wal_delta *cw_deltas;
    struct ps_frame *pub_frames;    /* pg_publish's list for the shared
                                       cache (ps_note_commit), kept */
    size_t pub_cap;
    uint64_t log_frames_read;   /* log frames read to catch up with other
                                   handles' commits (qs_stat) */
} pager;

/* Opens the pager over an open main file fd and log fd (log_fd -1: no log,
 * read-only only).  create: the main file is empty and is to be
 * initialized.  A read-write open recovers the log, checkpoints it and
 * starts a new log generation.  Returns 0, QS_NOTCASKET, QS_VERSION,
 * QS_CORRUPT, QS_NOMEM or errno; on failure everything it allocated is
 * released (the fds stay the caller's), and when a damaged log frame was
 * the cause p->damage describes it (else it is empty). */
int pg_open(pager *p, int fd, int log_fd, int readonly, int create,
            size_t budget_pages, uint64_t checkpoint_bytes);

/* pg_open with attach nonzero: other handles have the casket open, so
 * the log is neither recovered nor checkpointed; the pager reads page 0 and
 * learns the log from its first pg_refresh. */
int pg_open_mode(pager *p, int fd, int log_fd, int readonly, int create, int attach,
                 size_t budget_pages, uint64_t checkpoint_bytes);

/* Brings the committed view up to the newest commit another handle
 * published: log generation salt, committed up to offset end.  A new salt
 * means a checkpoint happened (the cache and log index are dropped and
 * page 0 reread); otherwise the frames from the old end to end are
 * indexed and the cached images they replace dropped.  Call with no
 * transaction open and no checkpoint running.  Returns 0, QS_CORRUPT (the
 * log does not hold what was published), QS_NOMEM or errno; on failure the
 * view may have partly moved on, and a retry completes it. */
int pg_refresh(pager *p, uint64_t salt, uint64_t end);

/* After a writer died holding the write lock: indexes any transaction it
 * committed to the log but did not live to publish (*found 1), and learns
 * the log's size.  Returns 0 or an error as pg_refresh. */
int pg_adopt(pager *p, int *found);

/* After a writer died holding the write lock (call holding it, inside the
 * view lock): whether it died in a checkpoint that had already written
 * page 0 (the main file holds this view's newest commit) but not yet
 * published a new log generation (*yes 1).  Then the log index is dropped
 * (its pages are all in the main file) and the caller must finish the
 * checkpoint before anything is written to the log: recovery ignores frames
 * not newer than page 0, so commits appended to this generation would be
 * lost.  Returns 0 or errno. */
int pg_checkpoint_unfinished(pager *p, int *yes);

/* Verifies the log as recovery would read it: every frame of the committed
 * view [header, log_end) is whole and valid, and no frame after them is a
 * damaged frame that a later one declares synced.  Call inside the view
 * lock.  Returns 0, QS_CORRUPT (msg describes the first damage), QS_NOMEM
 * or errno.  Changes nothing. */
int pg_check_log(pager *p, char *msg, size_t cap);

/* How many pages the casket holds data for at most: the main file's pages
 * (a fresh fstat) plus the pages the log has frames of.  A meta.npages above
 * it counts pages that exist nowhere (a damaged header or commit record).
 * Returns 0 and sets *pages, or the errno of a failed fstat (*pages
 * unchanged). */
int pg_backed_pages(pager *p, uint64_t *pages);

/* Learns the log file's size (another process may have grown or cut it)
 * before this handle writes to it.  Returns 0 or errno. */
int pg_log_size(pager *p);

/* Releases memory.  Does not checkpoint or close fds. */
void pg_close(pager *p);

/* The meta seen by a view. */
static inline pg_meta *pg_meta_of(pager *p, int wview)
{
    return wview ? &p->wmeta : &p->meta;
}

/* Page pgno as seen by the view (wview nonzero: the writer's).  *out stays
 * valid until pg_trim.  Returns 0, QS_CORRUPT (out of range, bad checksum),
 * QS_NOMEM or errno. */
int pg_get(pager *p, int wview, uint32_t pgno, uint8_t **out);

/* pg_get in the writer's view that also says whether *out is already the
 * writer's private (writable) image. */
int pg_get_mine(pager *p, uint32_t pgno, uint8_t **out, int *mine);

/* Writable copy of page pgno in the writer's view (in a transaction).
 * Same returns as pg_get. */
int pg_write(pager *p, uint32_t pgno, uint8_t **out);

/* A new zeroed writable page, from the free list or the end of the file.
 * Returns 0, QS_FULL, QS_NOMEM, QS_CORRUPT or errno. */
int pg_alloc(pager *p, uint32_t *pgno, uint8_t **out);

/* Puts pgno on the free list.  Returns 0 or an error as pg_write. */
int pg_free(pager *p, uint32_t pgno);

/* Takes n (>= 1) consecutive ids from the casket's id counter (meta
 * next_id, the queue module's item ids) in the writer's view, inside a
 * transaction: returns the first, >= 1 (ids start at 1).  The counter
 * commits with the transaction; an abort gives the ids back.  (Inline:
 * a single put takes one id.) */
static inline uint64_t pg_alloc_ids(pager *p, uint64_t n)
{
    pg_meta *m = &p->wmeta;
    if (m->next_id == 0)
        m->next_id = 1;
    uint64_t id = m->next_id;
    m->next_id += n;
    return id;
}

/* Ends an operation: evicts committed images over budget and, when
 * is_writer, spills dirty pages over budget to the log.  Returns 0 or the
 * spill's error (the transaction must then be aborted). */
int pg_trim(pager *p, int is_writer);

/* Starts a transaction (the caller holds the write lock). */
void pg_begin(pager *p);

/* Reserves the log index's room for every page the transaction will
 * publish, so that pg_publish cannot fail (a commit that could not index
 * its pages would be lost at the next checkpoint).  Call with the operation
 * mutex held (readers use the index), before pg_commit_write.  Returns 0 or
 * QS_NOMEM (abort the transaction). */
int pg_commit_prepare(pager *p);

/* Writes the transaction's frames, the commit frame last, without syncing.
 * will_sync: a sync of the log follows, and the log's growth is synced
 * here; 0: a small commit may be copied into the log's mapping (wal_write's
 * map_end) instead of written.  *wrote is
 * set to 0 when the transaction changed nothing.  Returns 0 or errno; on
 * failure the transaction is still open (abort it). */
int pg_commit_write(pager *p, int will_sync, int *wrote);

/* Makes the written transaction the committed state (operation mutex held). */
void pg_publish(pager *p);

/* Drops the transaction's changes. */
void pg_abort(pager *p);

/* The guard of the committed cache while pg_checkpoint_copy runs beside
 * readers: hold(ctx, 1) takes the mutex that serializes their use of the
 * cache (the casket's operation mutex), hold(ctx, 0) releases it. */
typedef struct pg_guard {
    void (*hold)(void *ctx, int take);
    void *ctx;
} pg_guard;

/* Copies every logged page to the main file, writes page 0 and syncs the
 * main file.  No transaction may be open, and the view must be the newest
 * committed state (the write lock held).  A page whose committed image is
 * in the cache is copied from there (under guard, NULL when no reader can
 * run), the others are read from the log; runs of consecutive pages go out
 * in one write.  Returns 0, QS_NOMEM, QS_CORRUPT (a log frame failed its
 * checks: the main file may hold some new pages but not page 0, so the log
 * still replays over it) or errno. */
int pg_checkpoint_copy(pager *p, const pg_guard *guard);

/* After pg_checkpoint_copy (operation mutex held): forgets the log index and
 * starts a new log generation.  Returns 0 or errno; on error the log header
 * may be torn, so no further commit may be written through this pager (the
 * committed state is safe in the main file). */
int pg_checkpoint_finish(pager *p, uint64_t keep_log_bytes);

/* The last page this pager found damaged when reading it (a bad checksum
 * or page number, a short read), or 0 when it has found none since the
 * last call: it is forgotten once told.  Any thread may call it. */
uint32_t pg_bad_page(pager *p);

/* Reads page pgno straight from disk (log or main file) without caching:
 * for the integrity check.  Returns as pg_get. */
int pg_read_raw(pager *p, uint32_t pgno, uint8_t *page);

#endif
