/* wal.c -- the log: a one-page header, then frames.  A frame is a page
 * image without its hole (pagefmt.h, page_hole): an 8-byte header (magic,
 * hole start, hole end), the bytes before the hole, the bytes after it
 * (trailer included).  A commit of one small change so writes a few hundred
 * bytes instead of a page, and later frames share the page cache page; like
 * SQLite's WAL this relies on a write never damaging bytes of a sector it
 * does not write ("powersafe overwrite").
 *
 * A page's later frames in one generation may be delta frames (format 3):
 * the byte runs that differ from the page's previous frame, and the
 * trailer.  The first frame of a page in a generation is always whole, so
 * a page torn in the main file by a cut checkpoint is rebuilt from the log
 * alone, as before (the torn-page hazard PostgreSQL's full-page writes
 * answer); chains are at most WAL_DELTA_DEPTH deltas long. */
#include "wal.h"
#include "osdep.h"
#include "checksum.h"
#include "qstore.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAGIC 0x52465351u         /* "QSFR" */
#define FRAME_HDR 8u
#define FRAME_MAX (FRAME_HDR + PG_SIZE)
#define SCAN_BUF (256u << 10)

/* The checksum covers the page without its hole (and names the hole's
 * bounds): hashing only what a page holds makes a commit of a small change
 * cheap, and the hole is never read, written to the log, or trusted.  The
 * page's TR_FLAG_CRC names the function: a damaged flag picks the other one,
 * which fails as surely as a damaged byte. */
static uint64_t page_sum(const uint8_t *page)
{
    uint32_t hs, he;
    page_hole(page, &hs, &he);
    uint64_t seed = CK_SEED ^ ((uint64_t)hs << 32 | he);
    if (rd32(page + TR_FLAGS) & TR_FLAG_CRC)
        return ck_crc4(page + he, TR_CHECKSUM - he, ck_crc4(page, hs, seed));
    return ck_sum64(page + he, TR_CHECKSUM - he, ck_sum64(page, hs, seed));
}

/* Format 4 seals with ck_crc4 where the CPU has the instruction for it,
 * and with ck_sum64 elsewhere, where it is the faster; both verify
 * everywhere. */
void wal_page_seal(uint8_t *page)
{
    uint32_t flags = rd32(page + TR_FLAGS) & ~TR_FLAG_CRC;
    wr32(page + TR_FLAGS, ck_crc_fast() ? flags | TR_FLAG_CRC : flags);
    wr64(page + TR_CHECKSUM, page_sum(page));
}

int wal_page_verify(const uint8_t *page, uint32_t pgno)
{
    if (rd64(page + TR_CHECKSUM) != page_sum(page))
        return QS_CORRUPT;
    if (rd32(page + TR_PGNO) != pgno)
        return QS_CORRUPT;
    return 0;
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return QS_CORRUPT;  /* short file: something promised is missing */
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int wal_read_header(wal *w)
{
    uint8_t *h = malloc(PG_SIZE);
    if (!h)
        return QS_NOMEM;
    int rc = pread_full(w->fd, h, PG_SIZE, 0);
    if (rc == 0) {
        if (memcmp(h, LOG_MAGIC, 8) != 0 || wal_page_verify(h, 0) != 0 ||
            rd32(h + HDR_PAGESIZE) != PG_SIZE)
            rc = QS_CORRUPT;
        else if (rd32(h + HDR_VERSION) < QS_FORMAT_VERSION_MIN ||
                 rd32(h + HDR_VERSION) > QS_FORMAT_VERSION)
            rc = QS_VERSION;
        else {
            w->salt = rd64(h + HDR_SALT);
            w->base_txn = rd64(h + HDR_BASE_TXN);
        }
    }
    free(h);
    if (rc == 0) {
        struct stat st;
        if (fstat(w->fd, &st) != 0)
            return errno;
        w->alloc = (uint64_t)st.st_size;
    }
    return rc;
}

static uint64_t fresh_salt(uint64_t old)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mix[4] = {old, (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
    uint64_t s = ck_sum64(mix, sizeof mix, 0x5a17);
    if (s == old)
        s++;
    return s ? s : 1;   /* 0 means "no log" to the shared region */
}

int wal_reset(wal *w, uint64_t base_txn)
{
    uint8_t *h = calloc(1, PG_SIZE);
    if (!h)
        return QS_NOMEM;
    uint64_t salt = fresh_salt(w->salt);
    memcpy(h, LOG_MAGIC, 8);
    wr32(h + HDR_VERSION, QS_FORMAT_VERSION);
    wr32(h + HDR_PAGESIZE, PG_SIZE);
    wr64(h + HDR_SALT, salt);
    wr64(h + HDR_BASE_TXN, base_txn);
    wr32(h + TR_PGNO, 0);
    wal_page_seal(h);
    int rc = pwrite_full(w->fd, h, PG_SIZE, 0);
    free(h);
    if (rc)
        return rc;
    w->salt = salt;
    w->base_txn = base_txn;
    w->synced = 0;      /* nothing of the new generation is synced yet */
    if (w->alloc < PG_SIZE)
        w->alloc = PG_SIZE;
    return 0;
}

void wal_stamp(const wal *w, uint8_t *page, uint32_t pgno, uint64_t txn,
               uint32_t flags, uint32_t nframes, const pg_meta *meta)
{
    memset(page + PG_USABLE, 0, PG_SIZE - PG_USABLE);
    wr32(page + TR_PGNO, pgno);
    wr32(page + TR_FLAGS, flags);
    wr64(page + TR_SALT, w->salt);
    wr64(page + TR_TXN, txn);
    if (flags & TR_FLAG_COMMIT) {
        wr32(page + TR_NFRAMES, nframes);
        meta_store(page + TR_META, meta);
        wr64(page + TR_SYNCED, w->synced);
    }
    wal_page_seal(page);
}

/* A pending transaction's frames, held until its commit frame is seen. */
typedef struct pending {
    uint32_t *pgno;
    uint64_t *off;
    size_t n, cap;
} pending;

static int pending_add(pending *p, uint32_t pgno, uint64_t off)
{
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 256;
        uint32_t *np = realloc(p->pgno, ncap * sizeof *np);
        if (!np)
            return QS_NOMEM;
        p->pgno = np;
        uint64_t *no = realloc(p->off, ncap * sizeof *no);
        if (!no)
            return QS_NOMEM;
        p->off = no;
        p->cap = ncap;
    }
    p->pgno[p->n] = pgno;
    p->off[p->n] = off;
    p->n++;
    return 0;
}

uint32_t wal_frame_len(const uint8_t *page)
{
    uint32_t hs, he;
    page_hole(page, &hs, &he);
    return FRAME_HDR + PG_SIZE - (he - hs);
}

/* Rebuilds the page image of the frame in buf (avail bytes of it): 0 and
 * *len set, or QS_CORRUPT when it is not a whole, valid-looking frame.  The
 * checksum is the caller's to verify. */
static int frame_decode(const uint8_t *buf, size_t avail, uint8_t *page, uint32_t *len)
{
    if (avail < FRAME_HDR || rd32(buf) != FRAME_MAGIC)
        return QS_CORRUPT;
    uint32_t hs = rd16(buf + 4), he = rd16(buf + 6);
    if (hs > he || he > PG_USABLE)
        return QS_CORRUPT;
    uint32_t n = FRAME_HDR + PG_SIZE - (he - hs);
    if (avail < n)
        return QS_CORRUPT;
    memcpy(page, buf + FRAME_HDR, hs);
    memset(page + hs, 0, he - hs);
    memcpy(page + he, buf + FRAME_HDR + hs, PG_SIZE - he);
    *len = n;
    return 0;
}

/* ---- delta frames ----------------------------------------------------------
 * A 40-byte header -- magic "QSFD", the frame's length, its depth in the
 * chain (1: its base is a whole frame), the new image's hole, the base
 * frame's offset, the base image's checksum, the frame's own checksum --
 * then runs (offset, length, bytes: ascending, within [0, PG_USABLE), outside
 * the hole), then the page's trailer, always whole (it changes with every
 * frame, and the scan reads page number, transaction and flags from it). */
#define DELTA_MAGIC 0x44465351u         /* "QSFD" */
#define DELTA_HDR 40u
#define TRAILER (PG_SIZE - PG_USABLE)
#define RUN_HDR 4u
_Static_assert(WAL_DELTA_MIN == DELTA_HDR + TRAILER, "wal.h's WAL_DELTA_MIN");
/* Equal bytes a run absorbs rather than end: a new run costs RUN_HDR. */
#define RUN_GAP RUN_HDR

/* A delta frame's trailer: page bytes [PG_USABLE, PG_SIZE) end the frame. */
static inline const uint8_t *delta_trailer(const uint8_t *f, uint32_t len)
{
    return f + len - TRAILER;
}

/* The function is the one the page's trailer names (page_sum). */
static uint64_t delta_sum(const uint8_t *f, uint32_t len)
{
    uint64_t seed = CK_SEED ^ 0xd1a7;
    if (rd32(delta_trailer(f, len) + (TR_FLAGS - PG_USABLE)) & TR_FLAG_CRC)
        return ck_crc4(f + DELTA_HDR, len - DELTA_HDR, ck_crc4(f + 4, 28, seed));
    return ck_sum64(f + DELTA_HDR, len - DELTA_HDR, ck_sum64(f + 4, 28, seed));
}

/* The first i in [i, e) where a and b differ, or e (the loop the diff
 * spends its time in).  Most of a rewritten page equals its base: libc's
 * vector memcmp passes equal 256-byte blocks at several times the speed of
 * the word loop, which then finds the byte within the block. */
static size_t skip_equal(const uint8_t *a, const uint8_t *b, size_t i, size_t e)
{
    while (i + 256 <= e && memcmp(a + i, b + i, 256) == 0)
        i += 256;
    while (i + 32 <= e && ((rd64(a + i) ^ rd64(b + i)) | (rd64(a + i + 8) ^ rd64(b + i + 8)) |
                           (rd64(a + i + 16) ^ rd64(b + i + 16)) |
                           (rd64(a + i + 24) ^ rd64(b + i + 24))) == 0)
        i += 32;
    while (i + 8 <= e && rd64(a + i) == rd64(b + i))
        i += 8;
    while (i < e && a[i] == b[i])
        i++;
    return i;
}

static const uint8_t zero_page[PG_USABLE];

/* Appends to out (at *at, at most room bytes in all) the runs in which
 * the len bytes of page at offset s differ from ref's len bytes: 0, or -1
 * when they do not fit. */
static int add_runs(uint8_t *out, uint32_t *at, uint32_t room, const uint8_t *page,
                    const uint8_t *ref, uint32_t s, size_t len)
{
    const uint8_t *p = page + s;
    for (size_t i = skip_equal(p, ref, 0, len); i < len; i = skip_equal(p, ref, i, len)) {
        /* A word at a time while words differ (a shifted cell pointer
         * array, a new cell), bytewise over the equal ones. */
        size_t from = i, last = i;
        for (size_t j = i + 1; j < len && j - last <= RUN_GAP;) {
            if (j + 8 <= len && rd64(p + j) != rd64(ref + j)) {
                last = j + 7;
                j += 8;
                continue;
            }
            if (p[j] != ref[j])
                last = j;
            j++;
        }
        while (p[last] == ref[last])
            last--;
        size_t n = last + 1 - from;
        if (*at + RUN_HDR + n > room)
            return -1;
        wr16(out + *at, (uint16_t)(s + from));
        wr16(out + *at + 2, (uint16_t)n);
        memcpy(out + *at + RUN_HDR, p + from, n);
        *at += RUN_HDR + (uint32_t)n;
        i = last + 1;
    }
    return 0;
}

uint32_t wal_delta_encode(const uint8_t *base, const uint8_t *page, uint64_t base_off,
                          uint32_t depth, uint8_t *out, uint32_t most)
{
    if (depth == 0 || depth > WAL_DELTA_DEPTH || most > FRAME_MAX ||
        most < DELTA_HDR + TRAILER)
        return 0;
    uint32_t bhs, bhe, hs, he;
    page_hole(base, &bhs, &bhe);
    page_hole(page, &hs, &he);
    uint32_t at = DELTA_HDR, room = most - TRAILER;
    /* The new image outside its hole, against the base as logged: its
     * hole reads back as zeros. */
    const uint32_t seg[2][2] = {{0, hs}, {he, PG_USABLE}};
    for (int k = 0; k < 2; k++) {
        uint32_t s = seg[k][0], e = seg[k][1];
        uint32_t a = s > bhs ? s : bhs, z = e < bhe ? e : bhe;
        if (a >= z) {
            if (add_runs(out, &at, room, page, base + s, s, e - s) != 0)
                return 0;
            continue;
        }
        if (add_runs(out, &at, room, page, base + s, s, a - s) != 0 ||
            add_runs(out, &at, room, page, zero_page, a, z - a) != 0 ||
            add_runs(out, &at, room, page, base + z, z, e - z) != 0)
            return 0;
    }
    memcpy(out + at, page + PG_USABLE, TRAILER);
    at += TRAILER;
    wr32(out, DELTA_MAGIC);
    wr16(out + 4, (uint16_t)at);
    wr16(out + 6, (uint16_t)depth);
    wr16(out + 8, (uint16_t)hs);
    wr16(out + 10, (uint16_t)he);
    wr32(out + 12, 0);
    wr64(out + 16, base_off);
    wr64(out + 24, rd64(base + TR_CHECKSUM));
    wr64(out + 32, delta_sum(out, at));
    return at;
}

/* The delta frame at f (avail bytes of it): 0 and *len, or QS_CORRUPT when
 * it is not a whole, well-formed one (check: or fails its checksum). */
static int delta_peek(const uint8_t *f, size_t avail, uint32_t *len, int check)
{
    if (avail < DELTA_HDR || rd32(f) != DELTA_MAGIC)
        return QS_CORRUPT;
    uint32_t n = rd16(f + 4), depth = rd16(f + 6);
    if (n < DELTA_HDR + TRAILER || n > avail || n > FRAME_MAX || depth == 0 ||
        depth > WAL_DELTA_DEPTH || rd64(f + 16) < PG_SIZE)
        return QS_CORRUPT;
    if (check && rd64(f + 32) != delta_sum(f, n))
        return QS_CORRUPT;
    *len = n;
    return 0;
}

/* Applies the delta frame f (len bytes, peeked) to page, the image of its
 * base: 0, or QS_CORRUPT for a run out of bounds (page then undefined). */
static int delta_apply(const uint8_t *f, uint32_t len, uint8_t *page)
{
    uint32_t hs = rd16(f + 8), he = rd16(f + 10);
    if (hs > he || he > PG_USABLE)
        return QS_CORRUPT;
    uint32_t at = DELTA_HDR, end = len - TRAILER, floor = 0;
    while (at < end) {
        if (end - at < RUN_HDR)
            return QS_CORRUPT;
        uint32_t o = rd16(f + at), n = rd16(f + at + 2);
        if (n == 0 || o < floor || o + n > PG_USABLE || n > end - at - RUN_HDR)
            return QS_CORRUPT;
        memcpy(page + o, f + at + RUN_HDR, n);
        floor = o + n;
        at += RUN_HDR + n;
    }
    memcpy(page + PG_USABLE, f + end, TRAILER);
    memset(page + hs, 0, he - hs);
    return 0;
}

int wal_delta_apply(const uint8_t *delta, uint8_t *page, uint32_t *depth)
{
    uint32_t len, hs, he;
    if (delta_peek(delta, FRAME_MAX, &len, 0) != 0 ||
        rd64(page + TR_CHECKSUM) != rd64(delta + 24))
        return QS_CORRUPT;
    /* the base as logged: its hole zeros */
    page_hole(page, &hs, &he);
    memset(page + hs, 0, he - hs);
    *depth = rd16(delta + 6);
    return delta_apply(delta, len, page);
}

int wal_recover(wal *w, hm_map *idx, wal_recovery *rec)
{
    struct stat st;
    if (fstat(w->fd, &st) != 0)
        return errno;
    int rc = wal_scan(w, idx, PG_SIZE, (uint64_t)st.st_size, w->base_txn, 0, rec, NULL, NULL);
    w->alloc = (uint64_t)st.st_size;
    return rc;
}

/* Does the raw trailer at tr (page byte PG_USABLE) name a commit frame
 * find_claim wants?  Its checksum is not yet known. */
static int trailer_claims(const wal *w, const uint8_t *tr, int any_salt, uint64_t last_txn,
                          uint64_t bad)
{
    return (any_salt || rd64(tr + (TR_SALT - PG_USABLE)) == w->salt) &&
           (rd32(tr + (TR_FLAGS - PG_USABLE)) & TR_FLAG_COMMIT) &&
           rd64(tr + (TR_TXN - PG_USABLE)) > last_txn &&
           rd64(tr + (TR_SYNCED - PG_USABLE)) > bad;
}

/* Does a valid commit frame of this generation, with a transaction above
 * last_txn, lie in [from, size) and declare the log synced past bad (any_salt:
 * a commit frame of any generation)?  Such a
 * frame proves the bytes at bad were durable, so the frame there is damaged,
 * not torn: a frame is only written after everything it declares synced, and
 * committed bytes of a generation are never rewritten.  Frames are not
 * aligned, so every occurrence of the frame magic is a candidate; the salt,
 * flags, transaction and declaration are read from the raw frame before the
 * checksum is computed, so the stale frames of older generations that follow
 * most logs cost a few compares each.  Returns 0 (*claim_off set when found)
 * or an errno/QS_NOMEM. */
static int find_claim(wal *w, int any_salt, uint64_t from, uint64_t size, uint64_t last_txn,
                      uint64_t bad, uint8_t *buf, uint8_t *page, uint64_t *claim_off,
                      uint64_t *claim_synced)
{
    uint8_t magic[4];
    wr32(magic, FRAME_MAGIC);   /* its first three bytes are DELTA_MAGIC's too */
    *claim_off = 0;
    for (uint64_t bstart = from; bstart + FRAME_HDR <= size;) {
        size_t blen = size - bstart < SCAN_BUF ? (size_t)(size - bstart) : SCAN_BUF;
        int rc = pread_full(w->fd, buf, blen, bstart);
        if (rc)
            return rc;
        /* Candidates start in [0, first_next); the rest of the buffer only
         * completes frames, and the next read starts at first_next. */
        size_t first_next = bstart + blen >= size ? blen : blen - FRAME_MAX;
        for (size_t at = 0; at < first_next;) {
            const uint8_t *m = memmem(buf + at, blen - at, magic, 3);
            if (!m || (size_t)(m - buf) >= first_next)
                break;
            at = (size_t)(m - buf);
            size_t avail = blen - at;
            uint32_t dlen;
            if (delta_peek(m, avail, &dlen, 0) == 0) {
                const uint8_t *tr = delta_trailer(m, dlen);
                if (trailer_claims(w, tr, any_salt, last_txn, bad) &&
                    rd32(tr + (TR_PGNO - PG_USABLE)) != 0 && delta_peek(m, avail, &dlen, 1) == 0) {
                    *claim_off = bstart + at;
                    *claim_synced = rd64(tr + (TR_SYNCED - PG_USABLE));
                    return 0;
                }
                at++;
                continue;
            }
            if (avail < 4 || rd32(m) != FRAME_MAGIC) {
                at++;
                continue;
            }
            uint32_t hs = avail >= FRAME_HDR ? rd16(m + 4) : 1;
            uint32_t he = avail >= FRAME_HDR ? rd16(m + 6) : 0;
            if (hs <= he && he <= PG_USABLE && avail >= FRAME_HDR + PG_SIZE - (he - hs)) {
                /* page byte f >= he sits at m + FRAME_HDR + hs + (f - he) */
                if (trailer_claims(w, m + FRAME_HDR + hs + (PG_USABLE - he), any_salt, last_txn,
                                   bad)) {
                    uint32_t n;
                    if (frame_decode(m, avail, page, &n) == 0 &&
                        wal_page_verify(page, rd32(page + TR_PGNO)) == 0 && rd32(page + TR_PGNO) != 0) {
                        *claim_off = bstart + at;
                        *claim_synced = rd64(page + TR_SYNCED);
                        return 0;
                    }
                }
            }
            at++;
        }
        if (bstart + blen >= size)
            break;
        bstart += first_next;
    }
    return 0;
}

int wal_scan(wal *w, hm_map *idx, uint64_t from, uint64_t size, uint64_t last_txn, int trusted,
             wal_recovery *rec,
             void (*on_page)(void *ctx, uint32_t pgno, uint64_t off, const uint8_t *page,
                             const uint8_t *delta),
             void *ctx)
{
    memset(rec, 0, sizeof *rec);
    rec->end = from;
    uint8_t *buf = malloc(SCAN_BUF), *page = malloc(PG_SIZE);
    if (!buf || !page) {
        free(buf);
        free(page);
        return QS_NOMEM;
    }
    pending pend = {0};
    uint64_t cur_txn = 0, nframes = 0;
    uint64_t bstart = 0, blen = 0;      /* buf holds file bytes [bstart, bstart + blen) */
    uint64_t off = from;
    int rc = 0, stopped = 0;
    for (; off + FRAME_HDR <= size; nframes++) {
        if (off + FRAME_MAX > bstart + blen && bstart + blen < size) {
            blen = size - off < SCAN_BUF ? size - off : SCAN_BUF;
            bstart = off;
            if ((rc = pread_full(w->fd, buf, (size_t)blen, off)) != 0)
                break;
        }
        uint32_t len;
        const uint8_t *f = buf + (off - bstart);
        size_t avail = (size_t)(bstart + blen - off);
        int delta = rd32(f) == DELTA_MAGIC;
        stopped = 1;
        if (delta) {
            /* Only the trailer is read here: the image needs the base. */
            if (delta_peek(f, avail, &len, !trusted) != 0)
                break;
            memcpy(page + PG_USABLE, f + len - TRAILER, TRAILER);
        } else if (frame_decode(f, avail, page, &len) != 0)
            break;
        uint32_t pgno = rd32(page + TR_PGNO);
        uint64_t txn = rd64(page + TR_TXN);
        uint64_t base;
        if ((!trusted && !delta && wal_page_verify(page, pgno) != 0) || pgno == 0 ||
            rd64(page + TR_SALT) != w->salt ||
            txn <= last_txn || (pend.n > 0 && txn != cur_txn))
            break;
        /* A delta's base is the page's newest committed frame before it. */
        if (delta && !(hm_get(idx, pgno, &base) && base == rd64(f + 16) && base < off))
            break;
        stopped = 0;
        cur_txn = txn;
        if ((rc = pending_add(&pend, pgno, off)) != 0)
            break;
        if (trusted && on_page)
            on_page(ctx, pgno, off, delta ? NULL : page, delta ? f : NULL);
        if (rd32(page + TR_FLAGS) & TR_FLAG_COMMIT) {
            if (rd32(page + TR_NFRAMES) != pend.n) {
                stopped = 1;
                break;
            }
            off += len;
            for (size_t j = 0; j < pend.n && rc == 0; j++) {
                if (hm_put(idx, pend.pgno[j], pend.off[j]) != 0)
                    rc = QS_NOMEM;
                else if (on_page && !trusted)
                    on_page(ctx, pend.pgno[j], pend.off[j], NULL, NULL);
            }
            if (rc)
                break;
            meta_load(page + TR_META, &rec->meta);
            rec->found_commit = 1;
            rec->end = off;
            rec->frames += pend.n;
            last_txn = txn;
            pend.n = 0;
        } else
            off += len;
    }
    if (rc == 0 && stopped) {
        rec->bad_frame = nframes + 1;
        rec->bad_off = off;
    }
    if (rc == 0 && stopped && !trusted) {
        /* Torn tail or damage?  Only a later declaration can tell. */
        uint64_t claim, claimed;
        rc = find_claim(w, 0, off + 1, size, last_txn, off, buf, page, &claim, &claimed);
        if (rc == 0 && claim) {
            rec->claim_off = claim;
            rec->claim_synced = claimed;
            rc = QS_CORRUPT;
        }
    }
    free(pend.pgno);
    free(pend.off);
    free(buf);
    free(page);
    return rc;
}

int wal_check_header_loss(wal *w, uint64_t last_txn, wal_recovery *rec)
{
    memset(rec, 0, sizeof *rec);
    struct stat st;
    if (fstat(w->fd, &st) != 0)
        return errno;
    uint8_t *buf = malloc(SCAN_BUF), *page = malloc(PG_SIZE);
    int rc = buf && page ? 0 : QS_NOMEM;
    /* A frame that declares anything past the header synced was written
     * after a sync that covered the header of its generation. */
    if (rc == 0)
        rc = find_claim(w, 1, PG_SIZE, (uint64_t)st.st_size, last_txn, PG_SIZE, buf, page,
                        &rec->claim_off, &rec->claim_synced);
    free(buf);
    free(page);
    if (rc == 0 && rec->claim_off)
        rc = QS_CORRUPT;
    return rc;
}

void wal_describe(const wal_recovery *rec, char *msg, size_t cap)
{
    if (rec->bad_frame == 0) {
        snprintf(msg, cap,
                 "the header is damaged, but the commit frame at offset %llu declares the log "
                 "synced through offset %llu",
                 (unsigned long long)rec->claim_off, (unsigned long long)rec->claim_synced);
        return;
    }
    snprintf(msg, cap,
             "frame %llu (offset %llu) is damaged, but the commit frame at offset %llu "
             "declares the log synced through offset %llu",
             (unsigned long long)rec->bad_frame, (unsigned long long)rec->bad_off,
             (unsigned long long)rec->claim_off, (unsigned long long)rec->claim_synced);
}

int wal_reserve(wal *w, uint64_t end, int sync_growth)
{
    if (end <= w->alloc)
        return 0;
    uint64_t chunk = w->alloc / 4;
    if (chunk < (1u << 20))
        chunk = 1u << 20;
    if (chunk > (64u << 20))
        chunk = 64u << 20;
    uint64_t target = end + chunk;
    target = (target + PG_SIZE - 1) / PG_SIZE * PG_SIZE;
    /* In pieces: the page cache keeps the folio size a write created, and
     * every later small write into a large folio walks all its blocks (a
     * 300-byte commit frame into a log zeroed by 1 MiB writes costs 1.2 us
     * in the kernel, 0.4 us after 64 KiB ones; measured on ext4, 6.18). */
    size_t zlen = 64u << 10;
    uint8_t *z = calloc(1, zlen);
    if (!z)
        return QS_NOMEM;
    int rc = 0;
    for (uint64_t off = w->alloc; off < target && rc == 0;) {
        size_t n = target - off < zlen ? (size_t)(target - off) : zlen;
        rc = pwrite_full(w->fd, z, n, off);
        off += n;
    }
    free(z);
    if (rc == 0 && sync_growth && os_datasync(w->fd) != 0)
        rc = errno;
    if (rc == 0)
        w->alloc = target;
    return rc;
}

/* pwritev until every byte of iov[0..cnt) is written (iov is consumed). */
static int pwritev_full(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    while (cnt > 0) {
        ssize_t got = pwritev(fd, iov, cnt, (off_t)off);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        off += (uint64_t)got;
        while (cnt > 0 && (size_t)got >= iov->iov_len) {
            got -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + got;
            iov->iov_len -= (size_t)got;
        }
    }
    return 0;
}

/* Bytes of log after which the device is told to start writing them. */
#define WAL_BEHIND (1024u << 10)

/* Starts the device writing the log's whole pages below end.  Without it a
 * log written with sync off reaches the device only in the checkpoint's
 * syncs, which then wait for all of it: 0.58 s of a 1.05 s run of 10^5
 * one-put commits, 0.15 s with it.  The page that end lies in is left
 * alone: the next commit writes into it. */
static void write_behind(wal *w, uint64_t end)
{
    uint64_t to = end / PG_SIZE * PG_SIZE;
    if (to < w->behind)     /* the log restarted (perhaps in another process) */
        w->behind = to;
    if (to - w->behind < WAL_BEHIND)
        return;
    os_write_behind(w->fd, w->behind, to - w->behind);
    w->behind = to;
}

/* The frame header for a stamped page; *hs, *he: its hole. */
static void frame_header(const uint8_t *page, uint8_t hdr[FRAME_HDR], uint32_t *hs,
                         uint32_t *he)
{
    page_hole(page, hs, he);
    wr32(hdr, FRAME_MAGIC);
    wr16(hdr + 4, (uint16_t)*hs);
    wr16(hdr + 6, (uint16_t)*he);
}

void wal_unmap(wal *w)
{
    if (w->map)
        munmap(w->map, (size_t)w->map_len);
    w->map = NULL;
    w->map_len = 0;
}

/* Is [0, end) of the file mapped?  Maps [0, alloc) when it is not and end
 * lies within alloc.  The mapping never reaches past alloc, which the
 * file is known to hold (zero-filled, its blocks allocated): a store
 * there cannot fault for want of space.  Where alloc shrank (another
 * process shrank the log at its checkpoint, and pg_log_size saw it) the
 * old mapping is dropped first. */
static int map_covers(wal *w, uint64_t end)
{
    if (w->map && w->map_len <= w->alloc && end <= w->map_len)
        return 1;
    wal_unmap(w);
    if (end > w->alloc || w->map_failed == w->alloc || w->alloc > SIZE_MAX)
        return 0;
    void *m = mmap(NULL, (size_t)w->alloc, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, 0);
    if (m == MAP_FAILED) {
        w->map_failed = w->alloc;
        return 0;
    }
    w->map = m;
    w->map_len = w->alloc;
    return 1;
}

/* Small commits with sync off cost a pwritev each, most of their time in
 * the kernel (1.6 us for a 150-byte frame, against 0.06 us to copy it into
 * a mapping that is already there); the copy goes to the same page cache.
 * A store into a page of the mapping that is new, or that writeback has
 * since cleaned and write-protected, faults, and costs about what the
 * pwritev did: so only writes of at most a quarter page go through the
 * mapping, a fault then amortized over several commits.  Seed 001's puts,
 * 4-7 KB frames each commit, ran 20% slower mapped; 1:1 queue churn,
 * 128- and 188-byte frames, 40-70% faster. */
#define MAP_MOST (PG_SIZE / 4)
static void map_write(wal *w, uint8_t *const *pages, const wal_delta *deltas, size_t n,
                      uint64_t off, uint64_t *offs)
{
    uint8_t *to = w->map + off;
    for (size_t i = 0; i < n; i++) {
        if (offs)
            offs[i] = (uint64_t)(to - w->map);
        if (deltas && deltas[i].len) {
            memcpy(to, deltas[i].bytes, deltas[i].len);
            to += deltas[i].len;
            continue;
        }
        uint32_t hs, he;
        uint8_t hdr[FRAME_HDR];
        frame_header(pages[i], hdr, &hs, &he);
        memcpy(to, hdr, FRAME_HDR);
        memcpy(to + FRAME_HDR, pages[i], hs);
        memcpy(to + FRAME_HDR + hs, pages[i] + he, PG_SIZE - he);
        to += FRAME_HDR + PG_SIZE - (he - hs);
    }
}

int wal_write(wal *w, uint8_t *const *pages, const wal_delta *deltas, size_t n, uint64_t off,
              uint64_t *offs, uint64_t map_end)
{
    if (map_end && map_end - off <= MAP_MOST && map_covers(w, map_end)) {
        map_write(w, pages, deltas, n, off, offs);
        write_behind(w, map_end);
        return 0;
    }
    enum { BATCH = 128 };       /* frames per pwritev: 3 iovecs each */
    struct iovec iov[3 * BATCH];
    uint8_t hdr[BATCH][FRAME_HDR];
    while (n) {
        size_t k = n < BATCH ? n : BATCH;
        int cnt = 0;
        uint64_t at = off;
        for (size_t i = 0; i < k; i++) {
            if (offs)
                offs[i] = at;
            if (deltas && deltas[i].len) {
                iov[cnt++] = (struct iovec){(void *)deltas[i].bytes, deltas[i].len};
                at += deltas[i].len;
                continue;
            }
            uint32_t hs, he;
            frame_header(pages[i], hdr[i], &hs, &he);
            iov[cnt++] = (struct iovec){hdr[i], FRAME_HDR};
            if (hs)
                iov[cnt++] = (struct iovec){pages[i], hs};
            iov[cnt++] = (struct iovec){pages[i] + he, PG_SIZE - he};
            at += FRAME_HDR + PG_SIZE - (he - hs);
        }
        int rc = pwritev_full(w->fd, iov, cnt, off);
        if (rc)
            return rc;
        pages += k;
        if (deltas)
            deltas += k;
        if (offs)
            offs += k;
        n -= k;
        off = at;
    }
    write_behind(w, off);
    return 0;
}

int wal_pages_write(int fd, uint8_t *const *pages, size_t n, uint64_t off)
{
    enum { BATCH = 64 };
    struct iovec iov[BATCH];
    while (n) {
        size_t k = n < BATCH ? n : BATCH;
        for (size_t i = 0; i < k; i++)
            iov[i] = (struct iovec){pages[i], PG_SIZE};
        int rc = pwritev_full(fd, iov, (int)k, off);
        if (rc)
            return rc;
        pages += k;
        n -= k;
        off += (uint64_t)k * PG_SIZE;
    }
    return 0;
}

/* wal_read_frame, with at most left more delta frames below this one. */
static int read_frame(wal *w, uint64_t off, uint32_t pgno, uint8_t *page, int nowait, int left)
{
    uint8_t buf[FRAME_MAX];
    size_t got = 0;
    while (got < FRAME_MAX) {
        ssize_t r = os_pread(w->fd, buf + got, FRAME_MAX - got, (off_t)(off + got), nowait);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return nowait && errno == EAGAIN ? QS_WOULDBLOCK : errno;
        }
        if (r == 0)
            break;      /* the last frame of the file may be short of FRAME_MAX */
        got += (size_t)r;
    }
    uint32_t len;
    if (got >= 4 && rd32(buf) == DELTA_MAGIC) {
        /* Bases lie at lower offsets, and the depth is bounded: a damaged
         * chain ends. */
        if (left == 0 || delta_peek(buf, got, &len, 1) != 0 || rd64(buf + 16) >= off)
            return QS_CORRUPT;
        int rc = read_frame(w, rd64(buf + 16), pgno, page, nowait, left - 1);
        if (rc)
            return rc;
        if (rd64(page + TR_CHECKSUM) != rd64(buf + 24) || delta_apply(buf, len, page) != 0)
            return QS_CORRUPT;
        return wal_page_verify(page, pgno);
    }
    int rc = frame_decode(buf, got, page, &len);
    return rc ? rc : wal_page_verify(page, pgno);
}

int wal_read_frame(wal *w, uint64_t off, uint32_t pgno, uint8_t *page, int nowait)
{
    return read_frame(w, off, pgno, page, nowait, WAL_DELTA_DEPTH);
}

int wal_sync(wal *w)
{
    w->syncs++;
    if (os_datasync(w->fd) != 0)
        return errno;
    return 0;
}

int wal_shrink(wal *w, uint64_t keep)
{
    if (w->alloc <= keep)
        return 0;
    if (w->map_len > keep)
        wal_unmap(w);
    if (ftruncate(w->fd, (off_t)keep) != 0)
        return errno;
    w->alloc = keep;
    return 0;
}
