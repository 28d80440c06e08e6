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

/* Lets go of one hold of a shared buffer; the last frees it. */
void ps_release(pg_buf *b);

#endif
