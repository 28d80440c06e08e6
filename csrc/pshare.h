/* pshare.h -- committed page images shared by the handles of one casket
 * within one process (ps_ prefix): one copy in memory however many
 * handles read the page.
 *
 * Why: each handle's pager keeps its own cache, so a process that gives
 * each of its threads a handle of its own (seed 001's threaded test, a pool
 * of consumers) read every page from the kernel once per handle -- a
 * pread, a checksum, for a log frame its decoding, then the tree's
 * structure check -- and held as many copies as handles: with ten handles
 * the read phase ran at a third of one handle's rate, most of it waiting
 * for memory.  A pager that misses asks this cache first and, on a hit,
 * holds the very buffer; a pager that read a page from disk files its
 * buffer here.  While a casket has one handle in the process the cache is
 * idle: a miss costs one atomic load more.
 *
 * What makes an image valid for another handle: it is filed under the log
 * generation it was read in (the log's salt; a checkpoint, the only thing
 * that rewrites main-file pages a reader can reach, starts a new one) and
 * under where it came from: a log frame's offset (a committed frame is
 * never overwritten within its generation) or PS_MAIN (the main-file
 * page, which within a generation changes only where the file grows,
 * beyond every committed page count).  A pager asks with its own view's
 * salt, page number and source, so a handle that has not caught up yet
 * gets the image its view holds, never a newer one.  The cache holds the
 * images of one generation: the first filed under a new salt drops the
 * others, unless its log's base transaction is lower than theirs (a member
 * behind a checkpoint; salts are random, base transactions only grow).
 * Salt 0 means "no generation to share in": nothing is found or filed.
 *
 * A shared buffer's data never changes (pager.c copies before it would
 * write); its holders count says how many caches hold it, and the last one
 * to let go frees it.  Thread-safe: a mutex per casket, one for the
 * process's registry, and fork() leaves the child with both consistent.
 * Memory: the cache holds at most the largest page budget among its
 * members' pagers, and lets go of everything when fewer than two
 * members remain. */
#ifndef QS_PSHARE_H
#define QS_PSHARE_H
#include <stddef.h>
#include <stdint.h>
#include "pager.h"

/* The source of a main-file image (a log frame's is its offset). */
#define PS_MAIN UINT64_MAX

typedef struct ps_cache ps_cache;

/* Joins the cache of the casket whose main file is (dev, ino), creating it
 * for the first member.  budget_pages: the joining pager's page budget.
 * Returns 0 (*out set) or QS_NOMEM (*out NULL, nothing taken). */
int ps_join(uint64_t dev, uint64_t ino, size_t budget_pages, ps_cache **out);

/* Leaves the cache (NULL: nothing).  The last member frees it; with one
 * member left it drops its holds and goes idle.  Buffers the leaving
 * pager still holds are its own to release (ps_release). */
void ps_leave(ps_cache *pc);

/* The shared image of pgno read from src in generation salt, with a hold
 * for the caller (which ends with ps_release), or NULL.  It passed its
 * checksum when it was filed.  pc NULL: NULL.  nowait: NULL rather than
 * wait for the cache's mutex (qs_get_nowait, whose caller holds the GIL;
 * another member may hold it while it lets go of a whole generation). */
pg_buf *ps_find(ps_cache *pc, uint64_t salt, uint32_t pgno, uint64_t src, int nowait);

/* Files b, the caller's own verified committed image of pgno (holders 0)
 * read from src in generation salt, whose log's base transaction is
 * base_txn.  An image of a generation other than the cache's replaces the
 * cache's images unless its base_txn is lower (a member behind a
 * checkpoint: the cache keeps the newer generation).  If the cache takes
 * it, b is shared from then on, the caller holding one hold; otherwise
 * (idle, salt 0, an older generation, out of memory, the mutex busy with
 * nowait) b stays the caller's own. */
void ps_keep(ps_cache *pc, uint64_t salt, uint64_t base_txn, uint32_t pgno, uint64_t src,
             pg_buf *b, int nowait);

/* ---- catching up without reading the log ----
 * A handle that catches up over another handle's commits scanned the log
 * for them: read every frame, decode it, check its checksum, and drop or
 * replace its images of their pages.  Ten threads, each committing
 * through a handle of its own, so read each commit nine times.  The
 * members of a cache file what they commit instead, and a member whose
 * view is behind by commits of this process's handles only takes their
 * page numbers and offsets from here, and the images from the cache. */

/* The most frames the cache keeps of the commits filed (and so the most
 * one commit may have to be filed): four per run. */
#define PS_RUN_FRAMES 32768

/* The most commits the cache keeps filed (~80 bytes each, 16 a frame:
 * 1.2 MB once a second handle commits).  Enough for seed 001's 10-thread
 * put, each thread with a handle of its own: at 64, a handle whose thread
 * waited longer than 64 commits of the others (for the GIL, for the write
 * lock) scanned the log instead, up to 2 MB of it for one put, about once
 * per 70 commits.  At 1024, once the puts kept the GIL (qs_put_held), a
 * thread's 5 ms turn made ~400 commits, and a handle came back after nine
 * turns of the others: 57 k puts/s, 70 k at 8192.  More than one log
 * generation holds at seed 001's sizes (16 MiB at ~7 KB a commit), and a
 * checkpoint starts the ring again anyway. */
#define PS_RUNS 8192

/* One frame of a published commit: the page it holds and its offset. */
typedef struct ps_frame {
    uint32_t pgno;
    uint64_t off;
} ps_frame;

/* Files the commit a member just published: its frames span log bytes
 * [from, to) of generation salt (the log index entries it made, any
 * order: a commit has one frame per page), and meta is the state it
 * committed.  Call after filing the images (ps_keep), which moves the
 * cache to a new generation.  The cache keeps the newest PS_RUNS commits and
 * PS_RUN_FRAMES of their frames; it files nothing when idle, for salt 0
 * or a generation other than its images', for more frames than it keeps,
 * or out of memory (a member catching up over a commit not filed reads
 * the log for it).  Thread-safe. */
void ps_note_commit(ps_cache *pc, uint64_t salt, uint64_t from, uint64_t to,
                    const pg_meta *meta, const ps_frame *frames, size_t n);

/* Catches a view of generation salt up from log offset from to to over
 * the filed commits, if a chain of them covers [from, to) exactly: calls
 * apply(ctx, pgno, off, image) for their frames, commit by commit, where
 * image is a hold on the cache's image of that frame (the callee owns the
 * hold) or NULL, and sets *meta to the last commit's meta.  Returns 1
 * (caught up), 0 (not covered: nothing applied, *meta untouched; scan the
 * log), or the first error apply returned (a prefix of the frames
 * applied: scan the log from `from`, which applies them again).  apply
 * runs under the cache's mutex: it may not call ps_ functions other
 * than ps_release. */
int ps_catch_up(ps_cache *pc, uint64_t salt, uint64_t from, uint64_t to,
                int (*apply)(void *ctx, uint32_t pgno, uint64_t off, pg_buf *image),
                void *ctx, pg_meta *meta);

/* A member's checkpoint turned generation old_salt, whose final log index
 * (page -> newest frame) is logidx, into generation salt with base_txn:
 * every image filed as the newest of its page is now the new generation's
 * main-file image (PS_MAIN), so members that follow the new generation
 * find it here instead of reading the file again; the others are dropped,
 * and so are the filed commits.  old_salt 0 (the checkpointer's view did
 * not share) drops everything. */
void ps_new_generation(ps_cache *pc, uint64_t old_salt, uint64_t salt, uint64_t base_txn,
                       const struct hm_map *logidx);

/* Whether pc shares anything now (two or more members); NULL: no. */
int ps_active(const ps_cache *pc);

/* Lets go of one hold of a shared buffer; the last frees it. */
void ps_release(pg_buf *b);

#endif
