/*
 * test_version.c -- the format version of page 0 and of the log header:
 * a version-1 casket (made by patching a fresh file's headers, checksums
 * resealed) is read unchanged read-only and converted by a read-write
 * open, its logged commits kept; a version above QS_FORMAT_VERSION is
 * refused with QS_VERSION and a detail naming the version, and the files
 * are left as they were.
 */
#include "test_records.h"
#include "pagefmt.h"
#include "wal.h"

/* The format version in the header page of file `path` (page 0 of the
 * main file, or the log's header), or -1. */
static long header_version(const char *path)
{
    uint8_t page[PG_SIZE];
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(page, 1, sizeof page, f);
    fclose(f);
    return n == sizeof page ? (long)tc_le32(page + HDR_VERSION) : -1;
}

/* Rewrites the version of the header page of `path`, resealing its
 * checksum, as a casket of that version would have written it. */
static int set_header_version(const char *path, uint32_t version)
{
    uint8_t page[PG_SIZE];
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    int ok = fread(page, 1, sizeof page, f) == sizeof page;
    if (ok) {
        for (int i = 0; i < 4; i++)
            page[HDR_VERSION + i] = (uint8_t)(version >> (8 * i));
        wal_page_seal(page);
        ok = fseek(f, 0, SEEK_SET) == 0 && fwrite(page, 1, sizeof page, f) == sizeof page;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A casket whose page 0 holds "a" and whose log holds the commit of "b"
 * (a crash copy: the copy is taken before the writer's close checkpoints),
 * both headers then stamped `version`. */
static void make_casket(tc_tmp *t, uint32_t version)
{
    REQUIRE(tc_tmp_make(t) == 0);
    int rc;
    qs_casket *c = open_mode(t->path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t->path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "b", "2"), 0);
    CHECK_RC(qs_queue_put(c, "q", 1, "x", 1, NULL), 0);
    char copy[sizeof t->path + 8], copylog[sizeof t->path + 16];
    snprintf(copy, sizeof copy, "%s.copy", t->path);
    snprintf(copylog, sizeof copylog, "%s.copy-log", t->path);
    REQUIRE(tc_copy_file(t->path, copy) == 0);
    REQUIRE(tc_copy_file(t->log, copylog) == 0);
    CHECK_RC(qs_close(c), 0);
    REQUIRE(rename(copy, t->path) == 0);
    REQUIRE(rename(copylog, t->log) == 0);
    char shm[sizeof t->path + 8];
    snprintf(shm, sizeof shm, "%s-shm", t->path);
    unlink(shm);
    REQUIRE(set_header_version(t->path, version) == 0);
    REQUIRE(set_header_version(t->log, version) == 0);
}

static void holds_records(qs_casket *c)
{
    CHECK(get_is(c, "a", "1"));
    CHECK(get_is(c, "b", "2"));
    uint64_t n = 0;
    CHECK_RC(qs_queue_len(c, "q", 1, &n), 0);
    CHECK(n == 1);
}

static void version1_read_only(void)
{
    tc_tmp t;
    make_casket(&t, 1);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    holds_records(c);
    CHECK(stat_of(c).format_version == 1);
    CHECK_RC(qs_close(c), 0);
    /* read as is: neither header was rewritten */
    CHECK(header_version(t.path) == 1);
    CHECK(header_version(t.log) == 1);
    tc_tmp_remove(&t);
}

static void version1_converted(void)
{
    tc_tmp t;
    make_casket(&t, 1);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    /* converted during the open, durably: before anything is written */
    CHECK(header_version(t.path) == QS_FORMAT_VERSION);
    CHECK(header_version(t.log) == QS_FORMAT_VERSION);
    CHECK(stat_of(c).format_version == QS_FORMAT_VERSION);
    holds_records(c);
    CHECK_RC(put_str(c, "c", "3"), 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    holds_records(c);
    CHECK(get_is(c, "c", "3"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void newer_version_refused(void)
{
    static const int flags[] = {QS_OPEN_READ, QS_OPEN_WRITE, QS_OPEN_CREATE};
    tc_tmp t;
    make_casket(&t, QS_FORMAT_VERSION + 1);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int rc;
        qs_casket *c = open_mode(t.path, flags[i], &rc);
        CHECK(c == NULL);
        CHECK_RC(rc, QS_VERSION);
        char want[64];
        snprintf(want, sizeof want, "format version %d", QS_FORMAT_VERSION + 1);
        CHECK(strstr(qs_open_detail(), want) != NULL);
        if (!strstr(qs_open_detail(), want))
            printf("  detail: %s\n", qs_open_detail());
    }
    CHECK(header_version(t.path) == QS_FORMAT_VERSION + 1);
    CHECK(header_version(t.log) == QS_FORMAT_VERSION + 1);
    tc_tmp_remove(&t);
}

/* A log of a newer version behind a page 0 this build reads must not be
 * dropped as a torn header (its commits would be lost silently). */
static void newer_log_refused(void)
{
    tc_tmp t;
    make_casket(&t, QS_FORMAT_VERSION);
    REQUIRE(set_header_version(t.log, QS_FORMAT_VERSION + 1) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    CHECK(c == NULL);
    CHECK_RC(rc, QS_VERSION);
    CHECK(header_version(t.log) == QS_FORMAT_VERSION + 1);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(version1_read_only);
    RUN(version1_converted);
    RUN(newer_version_refused);
    RUN(newer_log_refused);
    return tc_summary();
}
