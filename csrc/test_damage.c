/*
 * test_damage.c -- damaged files: random bytes, an empty file, a file cut
 * in half, a flipped byte, a page written to the wrong place.  Opening
 * must refuse or qs_check must report QS_CORRUPT; no read returns garbage
 * and nothing crashes.
 */
#include "test_records.h"
#include "pagefmt.h"

/* ------------------------------------------------------------------ */
/* damaged files                                                       */

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Exercises a handle over a damaged file: nothing may crash. */
static void poke_damaged(qs_casket *c)
{
    void *v = NULL;
    size_t vn;
    uint64_t n;
    qs_get(c, "k000010", 7, &v, &vn);
    qs_free(v);
    qs_records(c, &n);
    qs_count(c, "k000010", 7, &n);
    qs_cursor *cur = NULL;
    if (qs_cursor_open(c, &cur) == 0) {
        int steps = 0;
        int rc = qs_cursor_first(cur);
        while (rc == 0 && steps++ < 100000) {
            void *k = NULL;
            v = NULL;
            size_t kn;
            qs_cursor_get(cur, &k, &kn, &v, &vn);
            qs_free(k);
            qs_free(v);
            rc = qs_cursor_next(cur);
        }
        rc = qs_cursor_last(cur);
        steps = 0;
        while (rc == 0 && steps++ < 100000)
            rc = qs_cursor_prev(cur);
        qs_cursor_close(cur);
    }
    char msg[256];
    qs_check(c, msg, sizeof msg);
}

static void random_file(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    tc_rng r = {12345};
    static const size_t sizes[] = {1, 17, 100, 4096, 3 * 4096 + 17, 8192,
                                   1 << 20};
    unsigned char *buf = malloc(1 << 20);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int mode = QS_OPEN_READ; mode <= QS_OPEN_CREATE; mode++) {
            tc_fill(&r, buf, sizes[s]);
            REQUIRE(write_file(t.path, buf, sizes[s]) == 0);
            remove(t.log);
            int rc;
            qs_casket *c = open_mode(t.path, mode, &rc);
            if (rc != QS_NOTCASKET && rc != QS_CORRUPT)
                printf("  random file of %zu bytes, mode %d: qs_open gave "
                       "%d (%s)\n", sizes[s], mode, rc, qs_strerror(rc));
            CHECK(rc == QS_NOTCASKET || rc == QS_CORRUPT);
            CHECK(c == NULL);
            if (c)
                qs_close(c);
            /* the file is not overwritten by a failed open */
            CHECK(tc_file_size(t.path) == (long long)sizes[s]);
        }
    }

    /* a valid first page followed by random pages: open may succeed, but
     * qs_check must find the damage and nothing may crash */
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(fill_records(c, 3000, 100), 0);
    CHECK_RC(qs_close(c), 0);
    remove(t.log);
    FILE *f = fopen(t.path, "rb");
    REQUIRE(f != NULL);
    size_t got = fread(buf, 1, 1 << 20, f);
    fclose(f);
    REQUIRE(got > 8192);
    for (int trial = 0; trial < 4; trial++) {
        /* keep page 0 (and for odd trials also page 1), randomize the rest */
        size_t keep = trial % 2 ? 8192 : 4096;
        tc_fill(&r, buf + keep, got - keep);
        REQUIRE(write_file(t.path, buf, got) == 0);
        remove(t.log);
        c = open_mode(t.path, trial < 2 ? QS_OPEN_READ : QS_OPEN_WRITE, &rc);
        if (rc != 0) {
            CHECK(rc == QS_CORRUPT || rc == QS_NOTCASKET);
            if (!(rc == QS_CORRUPT || rc == QS_NOTCASKET))
                printf("  header + random pages: qs_open gave %d (%s)\n", rc,
                       qs_strerror(rc));
            continue;
        }
        char msg[256] = "";
        rc = qs_check(c, msg, sizeof msg);
        CHECK_RC(rc, QS_CORRUPT);
        poke_damaged(c);
        qs_close(c);
    }
    free(buf);
    tc_tmp_remove(&t);
}

static void empty_file(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    for (int mode = QS_OPEN_READ; mode <= QS_OPEN_CREATE; mode++) {
        REQUIRE(write_file(t.path, "", 0) == 0);
        remove(t.log);
        int rc;
        qs_casket *c = open_mode(t.path, mode, &rc);
        if (mode == QS_OPEN_CREATE) {
            /* CREATE may treat a 0-byte file as new or refuse it */
            if (rc == 0) {
                CHECK(records_of(c) == 0);
                CHECK_RC(check_ok(c), 0);
                qs_close(c);
            } else {
                printf("  0-byte file with CREATE: %d (%s)\n", rc,
                       qs_strerror(rc));
            }
            continue;
        }
        CHECK(rc != 0);
        CHECK(c == NULL);
        if (rc == 0)
            printf("  0-byte file with mode %d opened without error\n", mode);
        if (c)
            qs_close(c);
    }
    tc_tmp_remove(&t);
}

static void truncated_half(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(fill_records(c, 5000, 200), 0);
    CHECK_RC(qs_sync(c), 0);
    CHECK_RC(qs_close(c), 0);
    char orig[700], origlog[720];
    snprintf(orig, sizeof orig, "%s.orig", t.path);
    snprintf(origlog, sizeof origlog, "%s.orig-log", t.path);
    REQUIRE(tc_copy_file(t.path, orig) == 0);
    int have_log = tc_file_size(t.log) >= 0;
    if (have_log)
        REQUIRE(tc_copy_file(t.log, origlog) == 0);
    long long size = tc_file_size(t.path);
    REQUIRE(size > 8 * 4096);

    long long cuts[3] = {size / 2, (size / 2) / 4096 * 4096,
                         (size / 2) / 4096 * 4096 + 100};
    for (int i = 0; i < 3; i++) {
        for (int mode = QS_OPEN_READ; mode <= QS_OPEN_WRITE; mode++) {
            REQUIRE(tc_copy_file(orig, t.path) == 0);
            if (have_log)
                REQUIRE(tc_copy_file(origlog, t.log) == 0);
            REQUIRE(truncate(t.path, cuts[i]) == 0);
            c = open_mode(t.path, mode, &rc);
            if (rc != 0) {
                if (rc != QS_CORRUPT)
                    printf("  truncated to %lld, mode %d: qs_open %d (%s)\n",
                           cuts[i], mode, rc, qs_strerror(rc));
                CHECK_RC(rc, QS_CORRUPT);
                continue;
            }
            char msg[256] = "";
            rc = qs_check(c, msg, sizeof msg);
            if (rc != QS_CORRUPT)
                printf("  truncated to %lld of %lld, mode %d: qs_check %d\n",
                       cuts[i], size, mode, rc);
            CHECK_RC(rc, QS_CORRUPT);
            poke_damaged(c);
            qs_close(c);
        }
    }
    tc_tmp_remove(&t);
}

static void flipped_byte(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const int N = 3000;
    const size_t VL = 300;
    REQUIRE_RC(fill_records(c, N, VL), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat st = stat_of(c);
    CHECK_RC(qs_close(c), 0);
    char orig[700], origlog[720];
    snprintf(orig, sizeof orig, "%s.orig", t.path);
    snprintf(origlog, sizeof origlog, "%s.orig-log", t.path);
    REQUIRE(tc_copy_file(t.path, orig) == 0);
    int have_log = tc_file_size(t.log) >= 0;
    if (have_log)
        REQUIRE(tc_copy_file(t.log, origlog) == 0);
    long long size = tc_file_size(t.path);
    uint64_t pages = (uint64_t)size / QS_PAGE_SIZE;
    REQUIRE(pages > 10);

    uint64_t targets[] = {1, 2, pages / 4, pages / 2, 3 * pages / 4,
                          pages - 1};
    int offsets[] = {2000, 100, 3000, 4000};
    for (size_t ti = 0; ti < sizeof targets / sizeof targets[0]; ti++) {
        uint64_t pg = targets[ti];
        long long off = (long long)pg * QS_PAGE_SIZE + offsets[ti % 4];
        REQUIRE(tc_copy_file(orig, t.path) == 0);
        if (have_log)
            REQUIRE(tc_copy_file(origlog, t.log) == 0);
        int fd = open(t.path, O_RDWR);
        REQUIRE(fd >= 0);
        /* A byte in a page's hole (free gap) carries nothing: the checksum
         * skips it, so flipping it must change nothing at all. */
        uint8_t image[QS_PAGE_SIZE];
        uint32_t hs, he;
        REQUIRE(pread(fd, image, QS_PAGE_SIZE, (off_t)(pg * QS_PAGE_SIZE)) == QS_PAGE_SIZE);
        page_hole(image, &hs, &he);
        int in_hole = (uint32_t)offsets[ti % 4] >= hs && (uint32_t)offsets[ti % 4] < he;
        unsigned char b;
        REQUIRE(pread(fd, &b, 1, off) == 1);
        b ^= 0x10;
        REQUIRE(pwrite(fd, &b, 1, off) == 1);
        close(fd);

        c = open_mode(t.path, QS_OPEN_WRITE, &rc);
        if (rc != 0) {
            if (rc != QS_CORRUPT || in_hole)
                printf("  byte flipped in page %" PRIu64 ": qs_open %d (%s)\n",
                       pg, rc, qs_strerror(rc));
            CHECK_RC(rc, QS_CORRUPT);
            CHECK(!in_hole);
            continue;
        }
        char msg[256] = "";
        rc = qs_check(c, msg, sizeof msg);
        if (rc != (in_hole ? 0 : QS_CORRUPT))
            printf("  byte flipped at %lld (page %" PRIu64 " of %" PRIu64
                   ", %s the hole): qs_check %d (%s)\n", off, pg, pages,
                   in_hole ? "in" : "outside", rc, qs_strerror(rc));
        CHECK_RC(rc, in_hole ? 0 : QS_CORRUPT);
        /* the one damaged page is the one named, once */
        CHECK(qs_corrupt_page(c) == (in_hole ? 0 : pg));
        CHECK(qs_corrupt_page(c) == 0);

        /* every read is right or QS_CORRUPT: never garbage */
        int corrupt = 0, wrong = 0;
        for (int i = 0; i < N; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "k%06d", i);
            void *v = NULL;
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, &v, &vn);
            if (rc == QS_CORRUPT)
                corrupt++;
            else if (rc != 0 || !val_ok(v, vn, VL, (uint64_t)i))
                wrong++;
            qs_free(v);
        }
        CHECK(qs_corrupt_page(c) == (corrupt ? pg : 0));
        /* a cursor walk: right records in order, until QS_CORRUPT */
        qs_cursor *cur = NULL;
        int walk_corrupt = 0, walk_wrong = 0;
        if (qs_cursor_open(c, &cur) == 0) {
            int i = 0;
            rc = qs_cursor_first(cur);
            while (rc == 0 && i < N) {
                void *k = NULL, *v = NULL;
                size_t kn = 0, vn = 0;
                rc = qs_cursor_get(cur, &k, &kn, &v, &vn);
                if (rc == 0) {
                    char want[32];
                    snprintf(want, sizeof want, "k%06d", i);
                    if (kn != 7 || memcmp(k, want, 7) != 0 ||
                        !val_ok(v, vn, VL, (uint64_t)i)) {
                        /* a skipped leaf would show as a later key */
                        walk_wrong++;
                        qs_free(k);
                        qs_free(v);
                        break;
                    }
                    rc = qs_cursor_next(cur);
                    i++;
                }
                qs_free(k);
                qs_free(v);
            }
            if (rc == QS_CORRUPT)
                walk_corrupt = 1;
            else if (rc != QS_NOTFOUND && rc != 0)
                walk_wrong++;
            else if (i != N)
                walk_wrong++;
            qs_cursor_close(cur);
        }
        printf("  page %" PRIu64 "/%" PRIu64 " flipped: %d gets QS_CORRUPT, "
               "%d wrong; cursor walk %s%s\n", pg, pages, corrupt, wrong,
               walk_corrupt ? "hit QS_CORRUPT" : "completed",
               walk_wrong ? " WITH WRONG RECORDS" : "");
        CHECK(wrong == 0);
        CHECK(walk_wrong == 0);
        if (in_hole)
            CHECK(corrupt == 0 && !walk_corrupt);
        else if (st.free_pages == 0) {
            /* every page is in use: the damage must show */
            CHECK(corrupt > 0 || walk_corrupt);
        }
        qs_close(c);
    }
    tc_tmp_remove(&t);
}


/* A whole page written to the wrong place (its own checksum is fine): the
 * engine must notice the page is not the one it asked for. */
static void misplaced_page(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const int N = 3000;
    const size_t VL = 300;
    REQUIRE_RC(fill_records(c, N, VL), 0);
    CHECK_RC(qs_sync(c), 0);
    CHECK_RC(qs_close(c), 0);
    char orig[700], origlog[720];
    snprintf(orig, sizeof orig, "%s.orig", t.path);
    snprintf(origlog, sizeof origlog, "%s.orig-log", t.path);
    REQUIRE(tc_copy_file(t.path, orig) == 0);
    int have_log = tc_file_size(t.log) >= 0;
    if (have_log)
        REQUIRE(tc_copy_file(t.log, origlog) == 0);
    uint64_t pages = (uint64_t)tc_file_size(t.path) / QS_PAGE_SIZE;
    REQUIRE(pages > 20);
    uint64_t pairs[][2] = {{pages / 2, pages / 2 + 1}, {pages / 3, pages - 2},
                           {pages - 1, 5}};
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        uint64_t from = pairs[pi][0], to = pairs[pi][1];
        REQUIRE(tc_copy_file(orig, t.path) == 0);
        if (have_log)
            REQUIRE(tc_copy_file(origlog, t.log) == 0);
        int fd = open(t.path, O_RDWR);
        REQUIRE(fd >= 0);
        unsigned char pg[QS_PAGE_SIZE];
        REQUIRE(pread(fd, pg, sizeof pg, (off_t)(from * QS_PAGE_SIZE)) ==
                (ssize_t)sizeof pg);
        REQUIRE(pwrite(fd, pg, sizeof pg, (off_t)(to * QS_PAGE_SIZE)) ==
                (ssize_t)sizeof pg);
        close(fd);
        c = open_mode(t.path, QS_OPEN_WRITE, &rc);
        if (rc != 0) {
            CHECK_RC(rc, QS_CORRUPT);
            continue;
        }
        char msg[256] = "";
        rc = qs_check(c, msg, sizeof msg);
        if (rc != QS_CORRUPT)
            printf("  page %" PRIu64 " copied over page %" PRIu64 ": "
                   "qs_check %d\n", from, to, rc);
        CHECK_RC(rc, QS_CORRUPT);
        int corrupt = 0, wrong = 0;
        for (int i = 0; i < N; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "k%06d", i);
            void *v = NULL;
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, &v, &vn);
            if (rc == QS_CORRUPT)
                corrupt++;
            else if (rc != 0 || !val_ok(v, vn, VL, (uint64_t)i))
                wrong++;
            qs_free(v);
        }
        printf("  page %" PRIu64 " copied over page %" PRIu64 ": %d gets "
               "QS_CORRUPT, %d wrong (NOTFOUND or bad value)\n", from, to,
               corrupt, wrong);
        CHECK(wrong == 0);
        qs_close(c);
    }
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(random_file);
    RUN(empty_file);
    RUN(truncated_half);
    RUN(flipped_byte);
    RUN(misplaced_page);
    return tc_summary();
}
