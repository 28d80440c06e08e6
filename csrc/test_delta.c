/* test_delta.c -- the log's delta frames (wal.c), on a log file of their
 * own: random page images and random changes to them, written as chains of
 * delta frames and read back through wal_read_frame against the images
 * themselves (the reference: the page as logged, its hole zeroed); a frame
 * damaged anywhere in a chain is an error, never a wrong image; a chain
 * longer than WAL_DELTA_DEPTH, or one that points forward, ends; the
 * recovery scan takes a delta only on the page's newest committed frame. */
#include "test_common.h"
#include "wal.h"
#include "qstore.h"
#include <fcntl.h>

enum { LOG_BYTES = 8 << 20 };

typedef struct log_file {
    tc_tmp t;
    wal w;
    uint64_t end;       /* where the next frame goes */
} log_file;

static int log_open(log_file *l)
{
    memset(l, 0, sizeof *l);
    if (tc_tmp_make(&l->t) != 0)
        return -1;
    l->w.fd = open(l->t.log, O_RDWR | O_CREAT, 0644);
    if (l->w.fd < 0 || wal_reset(&l->w, 0) != 0 || wal_reserve(&l->w, LOG_BYTES, 0) != 0)
        return -1;
    l->end = PG_SIZE;
    return 0;
}

static void log_close(log_file *l)
{
    wal_unmap(&l->w);
    if (l->w.fd >= 0)
        close(l->w.fd);
    tc_tmp_remove(&l->t);
}

/* A random image of page pgno: a tree page (leaf or interior, a random
 * gap) or another kind (trailing zeros), with rubbish in its hole. */
static void random_page(tc_rng *r, uint8_t *page)
{
    tc_fill(r, page, PG_SIZE);
    if (tc_below(r, 4)) {
        page[0] = tc_below(r, 2) ? PT_LEAF : PT_INTERIOR;
        uint32_t n = (uint32_t)tc_below(r, 200);
        uint32_t lo = TREE_HDR + 2 * n;
        wr16(page + TREE_NCELLS, (uint16_t)n);
        wr16(page + TREE_CSTART, (uint16_t)(lo + tc_below(r, PG_USABLE - lo + 1)));
    } else {
        page[0] = PT_OVERFLOW;
        uint32_t used = 1 + (uint32_t)tc_below(r, PG_USABLE);
        memset(page + used, 0, PG_USABLE - used);
    }
}

/* A change of the kind commits make: a few bytes here and there, a shifted
 * stretch (a cell pointer inserted), the gap moving, or everything. */
static void random_change(tc_rng *r, uint8_t *page)
{
    int kind = (int)tc_below(r, 5);
    if (kind == 4 || page[0] == PT_OVERFLOW) {
        if (tc_below(r, 8) == 0)
            random_page(r, page);
        else
            for (int k = 1 + (int)tc_below(r, 6); k > 0; k--)    /* not the header */
                page[TREE_HDR + tc_below(r, PG_USABLE - TREE_HDR)] = (uint8_t)tc_next(r);
        if (page[0] == PT_OVERFLOW) {
            uint32_t used = 1 + (uint32_t)tc_below(r, PG_USABLE);
            memset(page + used, 0, PG_USABLE - used);
        }
        return;
    }
    uint32_t n = rd16(page + TREE_NCELLS), cs = rd16(page + TREE_CSTART);
    if (kind == 0 || kind == 1) {
        /* a cell in (or out): the pointer array grows (shrinks) by 2,
         * pointers after the place shift, the gap moves */
        int grow = kind == 0 && TREE_HDR + 2 * (n + 1) <= cs;
        if (!grow && n == 0)
            return;
        uint32_t at = TREE_HDR + 2 * (uint32_t)tc_below(r, n + 1);
        uint32_t end = TREE_HDR + 2 * n;
        if (grow) {
            memmove(page + at + 2, page + at, end - at);
            tc_fill(r, page + at, 2);
            n++;
            uint32_t cell = (uint32_t)tc_below(r, 60);
            if (cell <= cs && cs - cell >= TREE_HDR + 2 * n) {
                cs -= cell;
                tc_fill(r, page + cs, cell);
            }
        } else if (at < end) {
            memmove(page + at, page + at + 2, end - at - 2);
            n--;
        }
        wr16(page + TREE_NCELLS, (uint16_t)n);
        wr16(page + TREE_CSTART, (uint16_t)cs);
    } else
        for (int k = 1 + (int)tc_below(r, 4); k > 0; k--) {
            /* a count above a leaf, a value rewritten */
            uint32_t len = 1 + (uint32_t)tc_below(r, 16);
            uint32_t at = TREE_HDR + (uint32_t)tc_below(r, PG_USABLE - TREE_HDR - len);
            tc_fill(r, page + at, len);
        }
    /* rubbish in the gap, which the log must not carry */
    uint32_t hs, he;
    page_hole(page, &hs, &he);
    if (he > hs)
        tc_fill(r, page + hs, he - hs);
}

/* A few bytes of a tree page changed outside its gap: a small delta. */
static void small_change(tc_rng *r, uint8_t *page)
{
    uint32_t hs, he;
    page_hole(page, &hs, &he);
    for (int k = 0; k < 4; k++) {
        uint32_t at = he < PG_USABLE && (hs <= TREE_HDR || tc_below(r, 2))
                          ? he + (uint32_t)tc_below(r, PG_USABLE - he)
                          : hs > TREE_HDR ? TREE_HDR + (uint32_t)tc_below(r, hs - TREE_HDR) : 1;
        page[at] = (uint8_t)tc_next(r);
    }
}

/* The image as the log gives it back: the hole zeroed. */
static void as_logged(const uint8_t *page, uint8_t *out)
{
    uint32_t hs, he;
    memcpy(out, page, PG_SIZE);
    page_hole(out, &hs, &he);
    memset(out + hs, 0, he - hs);
}

/* Appends the frame of page (stamped here) to the log: a delta on base
 * (its frame at base_off, depth deep) when base is not NULL and the delta
 * is at most most bytes, else whole.  Returns the frame's offset; *len
 * gets its length, *delta whether it is one. */
static uint64_t append(log_file *l, uint8_t *page, uint32_t pgno, uint64_t txn, uint32_t flags,
                       const uint8_t *base, uint64_t base_off, uint32_t depth, uint32_t most,
                       int via_map, uint32_t *len, int *delta)
{
    static const pg_meta meta = {.npages = 2, .txn = 0};
    pg_meta m = meta;
    m.txn = txn;
    wal_stamp(&l->w, page, pgno, txn, flags, 1, &m);
    static uint8_t room[PG_SIZE];
    wal_delta d = {room, 0};
    if (base)
        d.len = wal_delta_encode(base, page, base_off, depth, room, most);
    uint64_t off = l->end;
    uint8_t *pages[1] = {page};
    *len = d.len ? d.len : wal_frame_len(page);
    CHECK_RC(wal_write(&l->w, pages, &d, 1, off, NULL, via_map ? off + *len : 0), 0);
    *delta = d.len != 0;
    l->end += *len;
    return off;
}

/* Chains of random changes: every frame reads back as the image it logged,
 * and a delta is never longer than asked. */
static void chains_read_back_as_the_images_they_logged(void)
{
    log_file l;
    REQUIRE(log_open(&l) == 0);
    uint64_t seed = tc_seed();
    tc_rng r = {seed};
    enum { KEEP = 64 };
    uint64_t offs[KEEP];
    uint8_t (*want)[PG_SIZE] = malloc(KEEP * PG_SIZE);
    uint8_t page[PG_SIZE], prev[PG_SIZE], got[PG_SIZE];
    REQUIRE(want);
    long rounds = tc_scaled(400, 20), deltas = 0, frames = 0;
    for (long round = 0; round < rounds && l.end + 40 * PG_SIZE < LOG_BYTES; round++) {
        uint32_t pgno = 1 + (uint32_t)tc_below(&r, 1000);
        random_page(&r, page);
        uint32_t len;
        int delta, depth = 0;
        uint64_t off = append(&l, page, pgno, 1, 0, NULL, 0, 0, 0, 0, &len, &delta);
        int steps = 1 + (int)tc_below(&r, 3 * WAL_DELTA_DEPTH);
        for (int s = 0; s < steps; s++) {
            int k = (int)(frames % KEEP);
            offs[k] = off;
            as_logged(page, want[k]);
            frames++;
            memcpy(prev, page, PG_SIZE);
            random_change(&r, page);
            uint32_t whole = wal_frame_len(page);
            uint32_t most = whole / 2 + (uint32_t)tc_below(&r, whole / 2 + 1);
            int base = depth < WAL_DELTA_DEPTH;
            off = append(&l, page, pgno, 2 + (uint64_t)s, 0, base ? prev : NULL, off,
                         (uint32_t)depth + 1, most, (int)tc_below(&r, 2), &len, &delta);
            CHECK(!delta || len <= most);
            depth = delta ? depth + 1 : 0;
            deltas += delta;
        }
        int k = (int)(frames % KEEP);
        offs[k] = off;
        as_logged(page, want[k]);
        frames++;
        /* the newest frame and a few older ones, of this chain or others */
        for (int q = 0; q < 4; q++) {
            long back = q == 0 ? 0 : (long)tc_below(&r, frames < KEEP ? (uint64_t)frames : KEEP);
            int i = (int)((frames - 1 - back) % KEEP);
            uint32_t want_pgno = rd32(want[i] + TR_PGNO);
            memset(got, 0xa5, sizeof got);
            int rc = wal_read_frame(&l.w, offs[i], want_pgno, got, 0);
            CHECK_RC(rc, 0);
            if (rc == 0 && memcmp(got, want[i], PG_SIZE) != 0) {
                printf("  seed %llu, round %ld: frame at %llu reads back changed\n",
                       (unsigned long long)seed, round, (unsigned long long)offs[i]);
                CHECK(0);
            }
        }
    }
    printf("  %ld frames, %ld of them deltas\n", frames, deltas);
    CHECK(deltas > frames / 4);
    free(want);
    log_close(&l);
}

/* One byte changed anywhere in a chain's frames -- the delta's header, a
 * run, its trailer, or the whole frame below it -- and reading the delta
 * fails; it never yields another image. */
static void a_damaged_chain_is_an_error(void)
{
    log_file l;
    REQUIRE(log_open(&l) == 0);
    tc_rng r = {tc_seed()};
    uint8_t page[PG_SIZE], prev[PG_SIZE], got[PG_SIZE], byte;
    long rounds = tc_scaled(200, 20);
    for (long round = 0; round < rounds && l.end + 4 * PG_SIZE < LOG_BYTES; round++) {
        uint32_t len0, len1, len2;
        int d1, d2;
        do
            random_page(&r, page);
        while (page[0] == PT_OVERFLOW);
        uint64_t o0 = append(&l, page, 7, 1, 0, NULL, 0, 0, 0, 0, &len0, &d1);
        memcpy(prev, page, PG_SIZE);
        random_change(&r, page);
        uint64_t o1 = append(&l, page, 7, 2, 0, prev, o0, 1, PG_SIZE, 0, &len1, &d1);
        memcpy(prev, page, PG_SIZE);
        random_change(&r, page);
        uint64_t o2 = append(&l, page, 7, 3, 0, prev, o1, 2, PG_SIZE, 0, &len2, &d2);
        if (!d1 || !d2)
            continue;   /* a change too big for a delta: not this case's */
        REQUIRE_RC(wal_read_frame(&l.w, o2, 7, got, 0), 0);
        uint64_t at = o0 + tc_below(&r, o2 + len2 - o0);
        REQUIRE(pread(l.w.fd, &byte, 1, (off_t)at) == 1);
        uint8_t bad = (uint8_t)(byte ^ (1u << tc_below(&r, 8)));
        REQUIRE(pwrite(l.w.fd, &bad, 1, (off_t)at) == 1);
        int rc = wal_read_frame(&l.w, o2, 7, got, 0);
        if (rc != QS_CORRUPT)
            printf("  round %ld: byte %llu of the chain %llu/%llu/%llu damaged, read gives %d\n",
                   round, (unsigned long long)at, (unsigned long long)o0,
                   (unsigned long long)o1, (unsigned long long)o2, rc);
        CHECK_RC(rc, QS_CORRUPT);
        REQUIRE(pwrite(l.w.fd, &byte, 1, (off_t)at) == 1);
    }
    log_close(&l);
}

/* A chain is read to at most WAL_DELTA_DEPTH deltas below a whole frame,
 * whatever depth its frames claim; a base at or after its delta ends it. */
static void chains_end_where_the_format_says(void)
{
    log_file l;
    REQUIRE(log_open(&l) == 0);
    tc_rng r = {tc_seed()};
    uint8_t page[PG_SIZE], prev[PG_SIZE], got[PG_SIZE];
    uint32_t len;
    int delta;
    do
        random_page(&r, page);
    while (page[0] == PT_OVERFLOW);
    uint64_t off = append(&l, page, 3, 1, 0, NULL, 0, 0, 0, 0, &len, &delta);
    /* every frame claims depth 1: the reader counts for itself */
    for (int d = 1; d <= WAL_DELTA_DEPTH + 1; d++) {
        memcpy(prev, page, PG_SIZE);
        small_change(&r, page);
        off = append(&l, page, 3, 1 + (uint64_t)d, 0, prev, off, 1, PG_SIZE, 0, &len, &delta);
        REQUIRE(delta);
        CHECK_RC(wal_read_frame(&l.w, off, 3, got, 0), d <= WAL_DELTA_DEPTH ? 0 : QS_CORRUPT);
    }
    /* a delta naming a base at its own offset, or after it */
    memcpy(prev, page, PG_SIZE);
    small_change(&r, page);
    uint64_t self = l.end;
    off = append(&l, page, 3, 50, 0, prev, self, 1, PG_SIZE, 0, &len, &delta);
    REQUIRE(delta && off == self);
    CHECK_RC(wal_read_frame(&l.w, off, 3, got, 0), QS_CORRUPT);
    /* the encoder refuses a depth outside the format's */
    static uint8_t room[PG_SIZE];
    CHECK(wal_delta_encode(prev, page, PG_SIZE, 0, room, PG_SIZE) == 0);
    CHECK(wal_delta_encode(prev, page, PG_SIZE, WAL_DELTA_DEPTH + 1, room, PG_SIZE) == 0);
    /* and the wrong page number */
    CHECK_RC(wal_read_frame(&l.w, off - len, 4, got, 0), QS_CORRUPT);
    log_close(&l);
}

/* The recovery scan: a delta counts only on its page's newest committed
 * frame; the scan stops at one based on an older frame (what a writer
 * with a stale image would have written), as at a torn frame. */
static void the_scan_takes_deltas_on_the_newest_frame_only(void)
{
    log_file l;
    REQUIRE(log_open(&l) == 0);
    tc_rng r = {tc_seed()};
    uint8_t page[PG_SIZE], v1[PG_SIZE];
    uint32_t len;
    int delta;
    do
        random_page(&r, page);
    while (page[0] == PT_OVERFLOW);
    uint64_t o1 = append(&l, page, 5, 1, TR_FLAG_COMMIT, NULL, 0, 0, 0, 0, &len, &delta);
    memcpy(v1, page, PG_SIZE);
    small_change(&r, page);
    uint64_t o2 = append(&l, page, 5, 2, TR_FLAG_COMMIT, v1, o1, 1, PG_SIZE, 0, &len, &delta);
    REQUIRE(delta);
    uint64_t after2 = l.end;
    memcpy(page, v1, PG_SIZE);
    small_change(&r, page);
    append(&l, page, 5, 3, TR_FLAG_COMMIT, v1, o1, 1, PG_SIZE, 0, &len, &delta);
    REQUIRE(delta);
    hm_map idx = {0};
    wal_recovery rec;
    struct stat st;
    REQUIRE(fstat(l.w.fd, &st) == 0);
    CHECK_RC(wal_scan(&l.w, &idx, PG_SIZE, (uint64_t)st.st_size, 0, 0, &rec, NULL, NULL), 0);
    CHECK(rec.found_commit && rec.meta.txn == 2);
    CHECK(rec.end == after2);
    CHECK(rec.bad_frame == 3 && rec.bad_off == after2);
    uint64_t at;
    CHECK(hm_get(&idx, 5, &at) && at == o2);
    hm_free(&idx);
    log_close(&l);
}

int main(void)
{
    RUN(chains_read_back_as_the_images_they_logged);
    RUN(a_damaged_chain_is_an_error);
    RUN(chains_end_where_the_format_says);
    RUN(the_scan_takes_deltas_on_the_newest_frame_only);
    return tc_summary();
}
