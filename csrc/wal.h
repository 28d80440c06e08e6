/* wal.h -- the log file NAME-log (wal_ prefix): its header, frame writes,
 * the recovery scan, growth and reset.  A frame is a page image without its
 * hole, or a delta frame: the runs of bytes in which the image differs from
 * the page's previous frame of the generation (see wal.c).  Either way the
 * page's trailer (pagefmt.h) says which page, transaction and generation it
 * belongs to. */
#ifndef QS_WAL_H
#define QS_WAL_H
#include <stdint.h>
#include "hmap.h"
#include "pagefmt.h"

typedef struct wal {
    int fd;
    uint64_t salt;          /* generation: frames of older ones are ignored */
    uint64_t base_txn;      /* transactions <= this are in the main file */
    uint64_t alloc;         /* bytes of the file known written (zero-filled) */
    uint64_t syncs;         /* commit syncs (wal_sync) made; one thread at a
                               time calls wal_sync, so no lock is needed */
    uint64_t synced;        /* what the next commit frame declares (TR_SYNCED):
                               set by the committer, never above what a
                               finished fdatasync of this generation covered */
    uint64_t behind;        /* the device was told to start writing the log
                               below this offset (os_write_behind) */
    uint8_t *map;           /* MAP_SHARED view of [0, map_len) of the file,
                               for wal_write's map_end (NULL: none) */
    uint64_t map_len;
    uint64_t map_failed;    /* alloc when mmap last failed: not retried
                               until alloc changes */
} wal;

/* Result of the recovery scan. */
typedef struct wal_recovery {
    int found_commit;       /* at least one committed transaction */
    pg_meta meta;           /* meta of the last committed transaction */
    uint64_t end;           /* offset after the last committed frame */
    uint64_t frames;        /* committed frames indexed */
    /* The frame the scan stopped at (0, 0: it read to the end): */
    uint64_t bad_frame;     /* its number, counted from 1 at the scan's start */
    uint64_t bad_off;       /* its offset */
    /* Set when the scan returns QS_CORRUPT for that frame: */
    uint64_t claim_off;     /* the later commit frame declaring it synced */
    uint64_t claim_synced;  /* ... through this offset */
} wal_recovery;

/* Reads and checks the header.  Returns 0 (fields set), QS_CORRUPT when
 * the header is torn or foreign (the caller may start a new generation),
 * QS_VERSION for a version outside QS_FORMAT_VERSION_MIN..QS_FORMAT_VERSION
 * (frames of a newer format: never to be dropped), or an errno.  Changes
 * nothing on disk. */
int wal_read_header(wal *w);

/* Starts a new generation: fresh salt, base_txn, header rewritten at 0.
 * Not synced: frames written later are synced with it.  Returns 0 or errno. */
int wal_reset(wal *w, uint64_t base_txn);

/* Scans committed frames after the header, putting page -> frame offset into
 * idx (which must be empty) and the result into *rec.  Stops at the first
 * frame that is torn, of another generation or out of sequence.  That is a
 * torn tail (return 0) unless a later valid commit frame of this generation
 * with a transaction above the last one indexed declares the log synced
 * past the stopping frame: then that frame was durable and is damaged, and
 * the result is QS_CORRUPT with rec->bad_* and rec->claim_* set.  Returns 0,
 * QS_CORRUPT, QS_NOMEM or an errno; on failure idx may hold part of the
 * scan. */
int wal_recover(wal *w, hm_map *idx, wal_recovery *rec);

/* The scan wal_recover makes, over [from, size) of the file, counting only
 * transactions numbered above last_txn: committed frames go into idx, and
 * on_page (if not NULL) hears of each page a committed transaction
 * changed (page NULL).  rec->end stays at from when nothing after it is
 * committed.  Untrusted scans judge where they stop as wal_recover does
 * (QS_CORRUPT for a damaged synced frame).  trusted: another handle
 * published [from, size) as committed, so frame checksums are not checked
 * here -- on_page then hears
 * of every frame as it is read, with its offset and its image, or for a
 * delta frame (page NULL) the frame itself (delta, see wal_delta_apply),
 * and must verify an image it keeps (pages read later from the index are
 * verified then); untrusted, it hears of a committed frame with both NULL.
 * A delta frame counts only when its base is the page's newest committed
 * frame in idx.  Used to
 * catch up with commits another process made.  Returns 0, QS_CORRUPT,
 * QS_NOMEM or errno; frames after the last complete commit are ignored. */
int wal_scan(wal *w, hm_map *idx, uint64_t from, uint64_t size, uint64_t last_txn, int trusted,
             wal_recovery *rec,
             void (*on_page)(void *ctx, uint32_t pgno, uint64_t off, const uint8_t *page,
                             const uint8_t *delta),
             void *ctx);

/* Turns page, the image of a delta frame's base (its hole may hold
 * anything), into the frame's image, given the frame as wal_scan hands
 * it to on_page (delta): 0, *depth its place in its chain, the image's
 * checksum for the caller to verify (wal_page_verify); or QS_CORRUPT when
 * page is not the base the frame names (by checksum) or the frame is
 * malformed, page then undefined. */
int wal_delta_apply(const uint8_t *delta, uint8_t *page, uint32_t *depth);

/* After wal_read_header returned QS_CORRUPT: is the header damaged rather
 * than torn?  A valid commit frame (of any generation) with a transaction
 * above last_txn that declares frames after the header synced proves the
 * header was durable.  Returns QS_CORRUPT then (rec->claim_* set,
 * rec->bad_frame 0), 0 when the header may be torn or foreign, QS_NOMEM or
 * an errno. */
int wal_check_header_loss(wal *w, uint64_t last_txn, wal_recovery *rec);

/* Describes the damage a scan (or wal_check_header_loss) returned
 * QS_CORRUPT for (rec->bad_* and
 * rec->claim_* set) in msg, NUL-terminated and truncated to cap (> 0). */
void wal_describe(const wal_recovery *rec, char *msg, size_t cap);

/* Stamps the trailer of page (pgno, txn, generation, flags, and for a
 * commit frame nframes, meta and w->synced) and its checksum.  Never
 * fails. */
void wal_stamp(const wal *w, uint8_t *page, uint32_t pgno, uint64_t txn,
               uint32_t flags, uint32_t nframes, const pg_meta *meta);

/* Makes sure bytes [0, end) of the file exist (zero-filled ahead in chunks so
 * that later writes overwrite allocated blocks); syncs the growth when
 * sync_growth.  Returns 0 or errno. */
int wal_reserve(wal *w, uint64_t end, int sync_growth);

/* Bytes of the frame for a stamped page image. */
uint32_t wal_frame_len(const uint8_t *page);

/* The longest chain of delta frames: a page's frame after this many
 * deltas in a row is whole again.  Bounds the reads wal_read_frame makes
 * (and the stack it takes: a frame buffer per level). */
#define WAL_DELTA_DEPTH 8

/* The shortest delta frame: header and trailer, no runs. */
#define WAL_DELTA_MIN 136u

/* A delta frame for a wal_write: len 0 for none (the page goes whole). */
typedef struct wal_delta {
    const uint8_t *bytes;
    uint32_t len;
} wal_delta;

/* Encodes into out the delta frame that turns base -- the image of the
 * page's frame at base_off, in memory (its hole may hold anything) -- into
 * page (stamped: the trailer is final), as the depth-th delta of a chain
 * (1..WAL_DELTA_DEPTH).  Returns its length, or 0 when it would be longer
 * than most bytes (out then holds rubbish; most <= a whole frame's
 * length).  out needs room for most bytes.  Never fails otherwise. */
uint32_t wal_delta_encode(const uint8_t *base, const uint8_t *page, uint64_t base_off,
                          uint32_t depth, uint8_t *out, uint32_t most);

/* Writes n frames one after another from offset off: deltas[i] where
 * deltas is not NULL and deltas[i].len is not 0, else pages[i] (stamped)
 * whole; offs[i] (offs may be NULL) gets frame i's offset.  The frames end
 * at off plus the sum of their lengths (wal_frame_len for a whole one).  Then, each time another 1 MiB of
 * whole pages lies below that end, starts the device writing them (see
 * os_write_behind): durability is still only what a sync gives.
 * map_end: 0, or where the frames end (the caller knows it, having
 * placed them): then they may be copied into a shared mapping of the file
 * (made or remade here) instead of written with pwritev, when they are a
 * quarter page or less and end within alloc -- the same page cache pages,
 * so a process that dies after the copy loses nothing the write would have
 * kept, and a sync covers them; but a store cannot fail, and the pwritev
 * could (EIO, EFBIG), so only for commits no sync follows.  Returns 0 or
 * errno (with map_end: only from the pwritev it falls back to). */
int wal_write(wal *w, uint8_t *const *pages, const wal_delta *deltas, size_t n, uint64_t off,
              uint64_t *offs, uint64_t map_end);

/* Drops wal_write's mapping, if any; before the file shrinks or closes. */
void wal_unmap(wal *w);

/* Writes n whole pages to fd at off, contiguously (pwritev in batches).
 * Returns 0 or errno. */
int wal_pages_write(int fd, uint8_t *const *pages, size_t n, uint64_t off);

/* Reads the frame at off into page (a whole page image; a delta frame's
 * base frames are read first, up to WAL_DELTA_DEPTH of them) and checks
 * its checksum and pgno; with nowait only from the kernel's page cache.
 * Returns 0, QS_CORRUPT, QS_WOULDBLOCK (nowait: the frame is not all in
 * the page cache; page may hold part of it), or errno. */
int wal_read_frame(wal *w, uint64_t off, uint32_t pgno, uint8_t *page, int nowait);

/* fdatasync of the log.  Returns 0 or errno. */
int wal_sync(wal *w);

/* Shrinks the file to at most keep bytes (never below alloc needs).
 * Returns 0 or errno. */
int wal_shrink(wal *w, uint64_t keep);

/* Checks a page image's checksum and page number: 0 or QS_CORRUPT. */
int wal_page_verify(const uint8_t *page, uint32_t pgno);

/* Sets a page image's checksum (after its trailer fields are filled). */
void wal_page_seal(uint8_t *page);

#endif
