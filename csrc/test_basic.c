/*
 * test_basic.c -- targeted tests of the public API (qstore.h): errors,
 * transactions, big values, many duplicates, compaction, sizes at the
 * layout's boundaries, damaged files, threads, qs_shutdown, the
 * inter-process lock and space reuse.  QS_TEST_SCALE=small shrinks the big
 * cases (64 MiB value -> 8 MiB, 200,000 duplicates -> 20,000, ...).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "test_common.h"
#include "pagefmt.h"
#include "casket.h"     /* transaction owners: a reused thread id is faked */

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static qs_casket *open_mode(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static int put_str(qs_casket *c, const char *k, const char *v)
{
    return qs_put(c, k, strlen(k), v, strlen(v));
}

/* 1 when key k has exactly the value v (first value) */
static int get_is(qs_casket *c, const char *k, const char *v)
{
    void *val = NULL;
    size_t vn = 0;
    int rc = qs_get(c, k, strlen(k), &val, &vn);
    int ok = rc == 0 && vn == strlen(v) && memcmp(val, v, vn) == 0;
    qs_free(val);
    return ok;
}

static int get_rc(qs_casket *c, const char *k)
{
    void *val = NULL;
    size_t vn = 0;
    int rc = qs_get(c, k, strlen(k), &val, &vn);
    qs_free(val);
    return rc;
}

static uint64_t records_of(qs_casket *c)
{
    uint64_t n = (uint64_t)-1;
    if (qs_records(c, &n) != 0)
        return (uint64_t)-1;
    return n;
}

static uint64_t count_of(qs_casket *c, const void *k, size_t kn)
{
    uint64_t n = (uint64_t)-1;
    if (qs_count(c, k, kn, &n) != 0)
        return (uint64_t)-1;
    return n;
}

static qs_stat stat_of(qs_casket *c)
{
    qs_stat st;
    memset(&st, 0, sizeof st);
    qs_stat_get(c, &st);
    return st;
}

/* deterministic value of record i, n bytes */
static void fill_val(unsigned char *p, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static int val_ok(const unsigned char *p, size_t n, size_t want_n,
                  uint64_t i)
{
    if (n != want_n)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (p[j] != (unsigned char)(i * 131 + j * 7 + (j >> 8)))
            return 0;
    return 1;
}

/* Fills a casket with n records "k%06d" -> fill_val(vlen, i). */
static int fill_records(qs_casket *c, int n, size_t vlen)
{
    unsigned char *v = malloc(vlen ? vlen : 1);
    int rc = qs_begin(c);
    for (int i = 0; i < n && rc == 0; i++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "k%06d", i);
        fill_val(v, vlen, (uint64_t)i);
        rc = qs_put(c, k, (size_t)kn, v, vlen);
    }
    if (rc == 0)
        rc = qs_commit(c);
    else
        qs_abort(c);
    free(v);
    return rc;
}

/* ------------------------------------------------------------------ */

static void empty_casket(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    for (int round = 0; round < 2; round++) {
        void *v = (void *)0x1;
        size_t vn = 0;
        CHECK_RC(qs_get(c, "a", 1, &v, &vn), QS_NOTFOUND);
        CHECK(v == NULL);
        CHECK_RC(qs_get(c, "", 0, &v, &vn), QS_NOTFOUND);
        uint64_t n = 5;
        CHECK_RC(qs_records(c, &n), 0);
        CHECK(n == 0);
        CHECK(count_of(c, "a", 1) == 0);
        void *out = (void *)0x1;
        size_t outlen = 3;
        n = 5;
        CHECK_RC(qs_getdup(c, "a", 1, &out, &outlen, &n), 0);
        CHECK(n == 0 && out == NULL);
        CHECK_RC(qs_out(c, "a", 1), QS_NOTFOUND);
        qs_cursor *cur = NULL;
        CHECK_RC(qs_cursor_open(c, &cur), 0);
        if (cur) {
            CHECK_RC(qs_cursor_first(cur), QS_NOTFOUND);
            CHECK_RC(qs_cursor_last(cur), QS_NOTFOUND);
            CHECK_RC(qs_cursor_jump(cur, "", 0), QS_NOTFOUND);
            CHECK_RC(qs_cursor_get(cur, NULL, NULL, NULL, NULL), QS_NOTFOUND);
            qs_cursor_close(cur);
        }
        CHECK_RC(check_ok(c), 0);
        qs_stat st = stat_of(c);
        CHECK(st.records == 0);
        CHECK(st.depth == 0);
        CHECK(st.page_size == QS_PAGE_SIZE);
        CHECK(st.format_version == QS_FORMAT_VERSION);
        CHECK(st.in_transaction == 0);
        CHECK_RC(qs_close(c), 0);
        c = open_mode(t.path, QS_OPEN_WRITE, &rc);
        REQUIRE_RC(rc, 0);
    }
    CHECK_RC(qs_close(c), 0);
    CHECK_RC(qs_close(NULL), 0);
    qs_free(NULL);
    tc_tmp_remove(&t);
}

static void txn_misuse(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_commit(c), QS_TXN);
    CHECK_RC(qs_abort(c), QS_TXN);
    CHECK(qs_in_transaction(c) == 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK(qs_in_transaction(c) != 0);
    CHECK(stat_of(c).in_transaction != 0);
    CHECK_RC(qs_begin(c), QS_TXN);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    CHECK(get_is(c, "a", "1"));                 /* own changes visible */
    CHECK_RC(qs_sync(c), QS_TXN);
    CHECK_RC(qs_compact(c), QS_TXN);
    /* a failed call inside a transaction leaves it open and unchanged */
    static unsigned char big[QS_MAX_KEY + 1];
    CHECK_RC(qs_put(c, big, sizeof big, "x", 1), QS_TOOBIG);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_putkeep(c, "a", 1, "2", 1), QS_KEYEXIST);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_out(c, "zz", 2), QS_NOTFOUND);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qs_in_transaction(c) == 0);
    CHECK(stat_of(c).in_transaction == 0);
    CHECK_RC(qs_commit(c), QS_TXN);
    CHECK_RC(qs_abort(c), QS_TXN);
    CHECK(get_is(c, "a", "1"));

    /* abort restores everything */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "a", "changed"), 0);
    CHECK_RC(put_str(c, "b", "new"), 0);
    CHECK_RC(qs_putdup(c, "a", 1, "d", 1), 0);
    CHECK(records_of(c) == 3);
    CHECK_RC(qs_abort(c), 0);
    CHECK(get_is(c, "a", "1"));
    CHECK_RC(get_rc(c, "b"), QS_NOTFOUND);
    CHECK(records_of(c) == 1);

    /* closing with a transaction open aborts it */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "x", "lost"), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(get_rc(c, "x"), QS_NOTFOUND);
    CHECK(get_is(c, "a", "1"));
    CHECK(qs_in_transaction(c) == 0);
    CHECK_RC(check_ok(c), 0);

    /* a transaction can be begun again after commit and abort */
    for (int i = 0; i < 5; i++) {
        CHECK_RC(qs_begin(c), 0);
        CHECK_RC(put_str(c, "loop", i & 1 ? "odd" : "even"), 0);
        CHECK_RC(i & 1 ? qs_abort(c) : qs_commit(c), 0);
    }
    CHECK(get_is(c, "loop", "even"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void readonly_open(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_CREATE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);
    CHECK_RC(qs_putdup(c, "k", 1, "w", 1), 0);
    CHECK_RC(qs_close(c), 0);

    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(get_is(c, "k", "v"));
    CHECK(count_of(c, "k", 1) == 2);
    CHECK_RC(put_str(c, "k", "x"), QS_READONLY);
    CHECK_RC(qs_putdup(c, "k", 1, "x", 1), QS_READONLY);
    CHECK_RC(qs_putkeep(c, "n", 1, "x", 1), QS_READONLY);
    CHECK_RC(qs_out(c, "k", 1), QS_READONLY);
    CHECK_RC(qs_outlist(c, "k", 1, NULL), QS_READONLY);
    uint64_t off[2] = {0, 1};
    CHECK_RC(qs_putdup_many(c, 1, "k", off, "x", off), QS_READONLY);
    CHECK_RC(qs_begin(c), QS_READONLY);
    CHECK_RC(qs_compact(c), QS_READONLY);
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        CHECK_RC(qs_cursor_first(cur), 0);
        CHECK_RC(qs_cursor_out(cur), QS_READONLY);
        void *v = NULL;
        size_t vn = 0;
        CHECK_RC(qs_cursor_get(cur, NULL, NULL, &v, &vn), 0);
        CHECK(vn == 1 && v && memcmp(v, "v", 1) == 0);
        qs_free(v);
        qs_cursor_close(cur);
    }
    CHECK(count_of(c, "k", 1) == 2);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void open_missing(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_READ, &rc);
    CHECK(c == NULL);
    CHECK_RC(rc, ENOENT);
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    CHECK(c == NULL);
    CHECK_RC(rc, ENOENT);
    CHECK(tc_file_size(t.path) < 0);

    /* bad options */
    qs_options o;
    qs_options_init(&o);
    CHECK(o.flag == QS_OPEN_CREATE);
    CHECK(o.sync != 0);
    CHECK(o.lock_timeout > 4.99 && o.lock_timeout < 5.01);
    o.flag = 42;
    c = (qs_casket *)0x1;
    CHECK_RC(qs_open(t.path, &o, &c), QS_INVAL);
    CHECK(c == NULL);
    qs_options_init(&o);
    CHECK(o.perm == 0644);
    o.perm = 010000;            /* beyond the permission bits */
    c = (qs_casket *)0x1;
    CHECK_RC(qs_open(t.path, &o, &c), QS_INVAL);
    CHECK(c == NULL);
    CHECK(tc_file_size(t.path) < 0);

    /* a directory that does not exist */
    char p[700];
    snprintf(p, sizeof p, "%s/no/such/dir/casket", t.dir);
    c = open_mode(p, QS_OPEN_CREATE, &rc);
    CHECK(c == NULL);
    CHECK(rc == ENOENT);
    tc_tmp_remove(&t);
}

static void open_new_truncates(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(fill_records(c, 2000, 100), 0);
    CHECK(records_of(c) == 2000);
    CHECK_RC(qs_close(c), 0);

    c = open_mode(t.path, QS_OPEN_CREATE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(records_of(c) == 2000);       /* CREATE keeps */
    CHECK_RC(qs_close(c), 0);

    c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(records_of(c) == 0);
    CHECK_RC(get_rc(c, "k000001"), QS_NOTFOUND);
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        CHECK_RC(qs_cursor_first(cur), QS_NOTFOUND);
        qs_cursor_close(cur);
    }
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(put_str(c, "fresh", "1"), 0);
    CHECK_RC(qs_close(c), 0);

    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(records_of(c) == 1);
    CHECK(get_is(c, "fresh", "1"));
    CHECK_RC(get_rc(c, "k000001"), QS_NOTFOUND);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void too_big(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    unsigned char *k = malloc(QS_MAX_KEY + 1);
    memset(k, 'K', QS_MAX_KEY + 1);
    CHECK_RC(qs_put(c, k, QS_MAX_KEY + 1, "v", 1), QS_TOOBIG);
    CHECK_RC(qs_putdup(c, k, QS_MAX_KEY + 1, "v", 1), QS_TOOBIG);
    CHECK_RC(qs_putkeep(c, k, QS_MAX_KEY + 1, "v", 1), QS_TOOBIG);
    uint64_t koff[2] = {0, QS_MAX_KEY + 1}, voff[2] = {0, 1};
    CHECK_RC(qs_putdup_many(c, 1, k, koff, "v", voff), QS_TOOBIG);
    CHECK(records_of(c) == 0);

    /* exactly QS_MAX_KEY is fine */
    k[QS_MAX_KEY - 1] = 'z';
    CHECK_RC(qs_put(c, k, QS_MAX_KEY, "big key", 7), 0);
    CHECK_RC(qs_putdup(c, k, QS_MAX_KEY, "again", 5), 0);
    CHECK(count_of(c, k, QS_MAX_KEY) == 2);
    CHECK(count_of(c, k, QS_MAX_KEY - 1) == 0);
    void *v = NULL;
    size_t vn = 0;
    CHECK_RC(qs_get(c, k, QS_MAX_KEY, &v, &vn), 0);
    CHECK(vn == 7 && v && memcmp(v, "big key", 7) == 0);
    qs_free(v);
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        void *kk = NULL;
        size_t kn = 0;
        CHECK_RC(qs_cursor_jump(cur, k, 10), 0);
        CHECK_RC(qs_cursor_get(cur, &kk, &kn, NULL, NULL), 0);
        CHECK(kn == QS_MAX_KEY && kk && memcmp(kk, k, kn) == 0);
        qs_free(kk);
        qs_cursor_close(cur);
    }

    /* a value one byte over QS_MAX_VALUE: the engine must refuse it
     * before reading it; the mapping costs no memory. */
    size_t vlen = (size_t)QS_MAX_VALUE + 1;
    void *m = mmap(NULL, vlen, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS |
                   MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
        CHECK_RC(qs_put(c, "v", 1, m, vlen), QS_TOOBIG);
        CHECK_RC(qs_putdup(c, "v", 1, m, vlen), QS_TOOBIG);
        CHECK_RC(qs_putkeep(c, "v", 1, m, vlen), QS_TOOBIG);
        munmap(m, vlen);
    }
    CHECK(records_of(c) == 2);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);

    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(count_of(c, k, QS_MAX_KEY) == 2);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    free(k);
    tc_tmp_remove(&t);
}

static void big_value(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    size_t n = tc_small() ? (8u << 20) : (64u << 20);
    unsigned char *big = malloc(n);
    REQUIRE(big != NULL);
    fill_val(big, n, 1);
    CHECK_RC(qs_put(c, "small", 5, "x", 1), 0);
    CHECK_RC(qs_put(c, "big", 3, big, n), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s1 = stat_of(c);
    CHECK(s1.file_bytes >= n);

    void *v = NULL;
    size_t vn = 0;
    CHECK_RC(qs_get(c, "big", 3, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 1));
    qs_free(v);
    CHECK_RC(check_ok(c), 0);

    /* survives a reopen */
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    v = NULL;
    CHECK_RC(qs_get(c, "big", 3, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 1));
    qs_free(v);

    /* outlist frees its pages */
    uint64_t removed = 0;
    CHECK_RC(qs_outlist(c, "big", 3, &removed), 0);
    CHECK(removed == 1);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s2 = stat_of(c);
    uint64_t want_free = (uint64_t)(n / QS_PAGE_SIZE) * 99 / 100;
    if (s2.free_pages < want_free)
        printf("  free_pages after outlist: %" PRIu64 " (want >= %" PRIu64
               ")\n", s2.free_pages, want_free);
    CHECK(s2.free_pages >= want_free);
    CHECK_RC(check_ok(c), 0);

    /* a new value of the same size reuses them */
    fill_val(big, n, 2);
    CHECK_RC(qs_put(c, "big2", 4, big, n), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s3 = stat_of(c);
    printf("  file_bytes: after first put %" PRIu64 ", after reuse %" PRIu64
           " (free pages %" PRIu64 " -> %" PRIu64 ")\n", s1.file_bytes,
           s3.file_bytes, s2.free_pages, s3.free_pages);
    CHECK(s3.file_bytes <= s1.file_bytes + (1u << 20));
    v = NULL;
    CHECK_RC(qs_get(c, "big2", 4, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 2));
    qs_free(v);
    CHECK(get_is(c, "small", "x"));
    CHECK_RC(check_ok(c), 0);

    /* a big value inside a transaction that is aborted leaves nothing */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_putdup(c, "big2", 4, big, n / 2), 0);
    CHECK(count_of(c, "big2", 4) == 2);
    CHECK_RC(qs_abort(c), 0);
    CHECK(count_of(c, "big2", 4) == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    free(big);
    tc_tmp_remove(&t);
}

static void many_dups(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const uint64_t N = (uint64_t)tc_scaled(200000, 10);
    CHECK_RC(put_str(c, "a", "before"), 0);
    CHECK_RC(put_str(c, "c", "after"), 0);

    /* in batches: putdup_many and plain putdup inside a transaction */
    const size_t B = 5000;
    uint64_t *koff = malloc((B + 1) * sizeof *koff);
    uint64_t *voff = malloc((B + 1) * sizeof *voff);
    char *keys = malloc(B);
    unsigned char *vals = malloc(B * 8);
    memset(keys, 'b', B);
    uint64_t i = 0;
    int batch = 0;
    while (i < N) {
        size_t m = N - i < B ? (size_t)(N - i) : B;
        if (batch++ % 2 == 0) {
            for (size_t j = 0; j <= m; j++) {
                koff[j] = j;
                voff[j] = 8 * j;
            }
            for (size_t j = 0; j < m; j++) {
                uint64_t x = i + j;
                memcpy(vals + 8 * j, &x, 8);
            }
            rc = qs_putdup_many(c, m, keys, koff, vals, voff);
            CHECK_RC(rc, 0);
        } else {
            CHECK_RC(qs_begin(c), 0);
            for (size_t j = 0; j < m; j++) {
                uint64_t x = i + j;
                rc = qs_putdup(c, "b", 1, &x, 8);
                if (rc)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
        }
        if (rc)
            break;
        i += m;
    }
    free(koff);
    free(voff);
    free(keys);
    free(vals);
    REQUIRE(i == N);
    CHECK(count_of(c, "b", 1) == N);
    CHECK(records_of(c) == N + 2);
    CHECK(count_of(c, "a", 1) == 1);
    CHECK(count_of(c, "c", 1) == 1);
    CHECK_RC(check_ok(c), 0);

    /* getdup: all in insertion order */
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_getdup(c, "b", 1, &out, &outlen, &cnt), 0);
    CHECK(cnt == N);
    CHECK(outlen == N * 12);
    if (out && outlen == N * 12) {
        uint64_t bad = 0;
        for (uint64_t j = 0; j < N; j++) {
            const unsigned char *p = (const unsigned char *)out + 12 * j;
            uint64_t x;
            memcpy(&x, p + 4, 8);
            if (tc_le32(p) != 8 || x != j)
                bad++;
        }
        CHECK(bad == 0);
    }
    qs_free(out);

    /* cursor: forward from "b" and backward from "c" */
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        uint64_t bad = 0, j = 0;
        rc = qs_cursor_jump(cur, "b", 1);
        while (rc == 0) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            if (qs_cursor_get(cur, &k, &kn, &v, &vn) != 0) {
                bad++;
                break;
            }
            int isb = kn == 1 && memcmp(k, "b", 1) == 0;
            if (isb) {
                uint64_t x = 0;
                if (vn == 8)
                    memcpy(&x, v, 8);
                if (vn != 8 || x != j)
                    bad++;
                j++;
            }
            qs_free(k);
            qs_free(v);
            if (!isb)
                break;
            rc = qs_cursor_next(cur);
        }
        CHECK(bad == 0);
        CHECK(j == N);
        /* backward */
        CHECK_RC(qs_cursor_jump(cur, "c", 1), 0);
        j = N;
        bad = 0;
        while ((rc = qs_cursor_prev(cur)) == 0) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            if (qs_cursor_get(cur, &k, &kn, &v, &vn) != 0) {
                bad++;
                break;
            }
            int isb = kn == 1 && memcmp(k, "b", 1) == 0;
            if (isb) {
                uint64_t x = 0;
                if (vn == 8)
                    memcpy(&x, v, 8);
                if (vn != 8 || x != j - 1)
                    bad++;
                j--;
            }
            qs_free(k);
            qs_free(v);
            if (!isb)
                break;
        }
        CHECK(bad == 0);
        CHECK(j == 0);
        qs_cursor_close(cur);
    }

    /* qs_out removes in insertion order */
    const uint64_t OUTS = (uint64_t)tc_scaled(3000, 10);
    CHECK_RC(qs_begin(c), 0);
    for (uint64_t j = 0; j < OUTS; j++) {
        if (j % 250 == 0) {
            void *v = NULL;
            size_t vn = 0;
            uint64_t x = ~0ull;
            CHECK_RC(qs_get(c, "b", 1, &v, &vn), 0);
            if (v && vn == 8)
                memcpy(&x, v, 8);
            qs_free(v);
            if (x != j)
                printf("  after %" PRIu64 " outs the first value is %" PRIu64
                       "\n", j, x);
            CHECK(x == j);
        }
        rc = qs_out(c, "b", 1);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
    }
    CHECK_RC(qs_commit(c), 0);
    CHECK(count_of(c, "b", 1) == N - OUTS);
    {
        void *v = NULL;
        size_t vn = 0;
        uint64_t x = ~0ull;
        CHECK_RC(qs_get(c, "b", 1, &v, &vn), 0);
        if (v && vn == 8)
            memcpy(&x, v, 8);
        qs_free(v);
        CHECK(x == OUTS);
    }
    CHECK_RC(check_ok(c), 0);

    /* outlist removes the rest, and the neighbours stay */
    uint64_t removed = 0;
    CHECK_RC(qs_outlist(c, "b", 1, &removed), 0);
    CHECK(removed == N - OUTS);
    CHECK(count_of(c, "b", 1) == 0);
    CHECK(records_of(c) == 2);
    CHECK(get_is(c, "a", "before"));
    CHECK(get_is(c, "c", "after"));
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void compaction(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const int N = (int)tc_scaled(20000, 5);
    const size_t VL = 300;
    REQUIRE_RC(fill_records(c, N, VL), 0);
    /* a few big values too, so overflow chains move */
    unsigned char *bigv = malloc(50000);
    fill_val(bigv, 50000, 7);
    for (int i = 0; i < 20; i++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "big%02d", i);
        CHECK_RC(qs_put(c, k, (size_t)kn, bigv, 50000), 0);
    }
    CHECK_RC(qs_sync(c), 0);
    qs_stat s1 = stat_of(c);

    /* delete 90% (and the odd big values) */
    CHECK_RC(qs_begin(c), 0);
    for (int i = 0; i < N; i++) {
        if (i % 10 == 0)
            continue;
        char k[32];
        int kn = snprintf(k, sizeof k, "k%06d", i);
        rc = qs_out(c, k, (size_t)kn);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
    }
    for (int i = 1; i < 20; i += 2) {
        char k[32];
        int kn = snprintf(k, sizeof k, "big%02d", i);
        CHECK_RC(qs_out(c, k, (size_t)kn), 0);
    }
    CHECK_RC(qs_commit(c), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s2 = stat_of(c);
    CHECK_RC(qs_compact(c), 0);
    qs_stat s3 = stat_of(c);
    printf("  file_bytes: full %" PRIu64 ", after deletes %" PRIu64
           ", compacted %" PRIu64 "; pages %" PRIu64 " free %" PRIu64 "\n",
           s1.file_bytes, s2.file_bytes, s3.file_bytes, s3.pages,
           s3.free_pages);
    CHECK(s3.file_bytes < s1.file_bytes / 3);
    CHECK(s3.free_pages < s3.pages / 10 + 2);
    CHECK(s3.records == (uint64_t)(N / 10 + (N % 10 ? 1 : 0)) + 10);

    for (int pass = 0; pass < 2; pass++) {
        /* content intact */
        CHECK_RC(check_ok(c), 0);
        unsigned char *v = NULL;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "k%06d", i);
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, (void **)&v, &vn);
            if (i % 10 == 0) {
                if (rc != 0 || !val_ok(v, vn, VL, (uint64_t)i))
                    bad++;
            } else if (rc != QS_NOTFOUND) {
                bad++;
            }
            qs_free(v);
            v = NULL;
        }
        for (int i = 0; i < 20; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "big%02d", i);
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, (void **)&v, &vn);
            if (i % 2 == 0) {
                if (rc != 0 || !val_ok(v, vn, 50000, 7))
                    bad++;
            } else if (rc != QS_NOTFOUND) {
                bad++;
            }
            qs_free(v);
            v = NULL;
        }
        CHECK(bad == 0);
        /* still writable after compaction */
        if (pass == 0) {
            CHECK_RC(put_str(c, "after-compact", "yes"), 0);
            CHECK_RC(qs_out(c, "after-compact", 13), 0);
            CHECK_RC(qs_close(c), 0);
            c = open_mode(t.path, QS_OPEN_WRITE, &rc);
            REQUIRE_RC(rc, 0);
        }
    }
    CHECK_RC(qs_close(c), 0);
    free(bigv);
    tc_tmp_remove(&t);
}


/* Keys and values around the sizes where the layout changes (inline cell
 * limit, overflow key prefix, overflow page capacity), keys sharing long
 * prefixes and keys that prefix each other, in enough numbers that the
 * tree splits and long keys become separators. */

typedef struct {
    unsigned char *k;
    size_t kn;
    int nv;
} bkey;

static int bkey_cmp(const void *a, const void *b)
{
    const bkey *x = a, *y = b;
    size_t m = x->kn < y->kn ? x->kn : y->kn;
    int c = m ? memcmp(x->k, y->k, m) : 0;
    if (c)
        return c;
    return x->kn < y->kn ? -1 : x->kn > y->kn;
}

static size_t bval_len(size_t ki, int j)
{
    static const size_t lens[] = {0, 1, 968, 983, 984, 985, 999, 1000, 1001,
                                  3991, 3992, 3993, 4096, 7984, 7985, 12000};
    return lens[(ki * 7 + (size_t)j * 3) % (sizeof lens / sizeof lens[0])];
}

static void boundary_sizes(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 64 * 4096, 128 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    static const size_t klens[] = {1, 2, 511, 512, 513, 700, 975, 976, 977,
                                   983, 984, 985, 999, 1000, 1001, 3991,
                                   3992, 3993, 4000, 8000, QS_MAX_KEY};
    const size_t NL = sizeof klens / sizeof klens[0];
    const int PER = 12;
    size_t nk = NL * PER + 1;
    bkey *keys = calloc(nk, sizeof *keys);
    size_t n = 0;
    for (size_t li = 0; li < NL; li++) {
        for (int q = 0; q < PER; q++) {
            size_t kn = klens[li];
            unsigned char *k = malloc(kn);
            memset(k, 'P', kn);
            /* vary the last byte, or a byte just past the 512-byte prefix,
             * or make it a prefix of a longer one (q == 0: all 'P') */
            if (q > 0 && q < 6)
                k[kn - 1] = (unsigned char)('A' + q);
            else if (q >= 6 && kn > 513)
                k[513 + (size_t)(q - 6) % (kn - 513)] = (unsigned char)('a' + q);
            else if (q >= 6)
                k[0] = (unsigned char)('a' + q);
            keys[n].k = k;
            keys[n].kn = kn;
            n++;
        }
    }
    keys[n].k = malloc(1);
    keys[n].kn = 0;                  /* the empty key */
    n++;
    /* drop duplicate keys so each appears once */
    qsort(keys, n, sizeof *keys, bkey_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && bkey_cmp(&keys[u - 1], &keys[i]) == 0) {
            free(keys[i].k);
            continue;
        }
        keys[u++] = keys[i];
    }
    n = u;
    unsigned char *vb = malloc(16384);
    uint64_t total = 0;
    /* insert in a scrambled order, some keys with several values */
    CHECK_RC(qs_begin(c), 0);
    for (size_t step = 0; step < n; step++) {
        size_t i = (step * 7919) % n;
        int nv = 1 + (int)(i % 3);
        for (int j = 0; j < nv; j++) {
            size_t vn = bval_len(i, j);
            fill_val(vb, vn, i * 10 + (size_t)j);
            rc = qs_putdup(c, keys[i].k, keys[i].kn, vb, vn);
            if (rc) {
                printf("  putdup key len %zu value len %zu: %d (%s)\n",
                       keys[i].kn, vn, rc, qs_strerror(rc));
                CHECK_RC(rc, 0);
            }
            total++;
        }
        keys[i].nv = nv;
    }
    CHECK_RC(qs_commit(c), 0);

    for (int pass = 0; pass < 3; pass++) {
        CHECK(records_of(c) == total);
        CHECK_RC(check_ok(c), 0);
        /* a forward walk in memcmp order */
        qs_cursor *cur = NULL;
        CHECK_RC(qs_cursor_open(c, &cur), 0);
        if (!cur)
            break;
        size_t i = 0;
        int j = 0, bad = 0;
        uint64_t seen = 0;
        while (i < n && keys[i].nv == 0)
            i++;
        rc = qs_cursor_first(cur);
        while (rc == 0 && i < n) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            rc = qs_cursor_get(cur, &k, &kn, &v, &vn);
            if (rc)
                break;
            if (kn != keys[i].kn || (kn && memcmp(k, keys[i].k, kn)) ||
                !val_ok(v, vn, bval_len(i, j), i * 10 + (size_t)j)) {
                if (bad++ < 3)
                    printf("  pass %d: record %" PRIu64 ": key len %zu (want "
                           "%zu), value len %zu (want %zu)\n", pass, seen,
                           kn, keys[i].kn, vn, bval_len(i, j));
            }
            qs_free(k);
            qs_free(v);
            seen++;
            if (++j >= keys[i].nv) {
                j = 0;
                do
                    i++;
                while (i < n && keys[i].nv == 0);
            }
            rc = qs_cursor_next(cur);
        }
        CHECK(bad == 0);
        CHECK(seen == total);
        CHECK(rc == QS_NOTFOUND || rc == 0);
        /* each key by get / count / jump */
        for (i = 0; i < n; i++) {
            uint64_t cn = count_of(c, keys[i].k, keys[i].kn);
            if (cn != (uint64_t)keys[i].nv) {
                if (bad++ < 6)
                    printf("  pass %d: count of key %zu (len %zu) is %" PRIu64
                           ", want %d\n", pass, i, keys[i].kn, cn,
                           keys[i].nv);
                continue;
            }
            if (!keys[i].nv)
                continue;
            void *v = NULL;
            size_t vn = 0;
            rc = qs_get(c, keys[i].k, keys[i].kn, &v, &vn);
            if (rc || !val_ok(v, vn, bval_len(i, 0), i * 10))
                bad++;
            qs_free(v);
            void *k = NULL;
            size_t kn = 0;
            rc = qs_cursor_jump(cur, keys[i].k, keys[i].kn);
            if (!rc)
                rc = qs_cursor_get(cur, &k, &kn, NULL, NULL);
            if (rc || kn != keys[i].kn || (kn && memcmp(k, keys[i].k, kn)))
                bad++;
            qs_free(k);
        }
        CHECK(bad == 0);
        qs_cursor_close(cur);

        if (pass == 0) {
            /* remove every other key, and the first value of the rest */
            CHECK_RC(qs_begin(c), 0);
            for (i = 0; i < n; i++) {
                if (i % 2 == 0) {
                    uint64_t removed = 0;
                    CHECK_RC(qs_outlist(c, keys[i].k, keys[i].kn, &removed),
                             0);
                    CHECK(removed == (uint64_t)keys[i].nv);
                    total -= (uint64_t)keys[i].nv;
                    keys[i].nv = 0;
                }
            }
            CHECK_RC(qs_commit(c), 0);
        } else if (pass == 1) {
            CHECK_RC(qs_compact(c), 0);
            CHECK_RC(qs_close(c), 0);
            c = open_mode(t.path, QS_OPEN_WRITE, &rc);
            REQUIRE_RC(rc, 0);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i].k);
    free(keys);
    free(vb);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

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

static void strerror_all(void)
{
    const char *seen[64];
    int n = 0;
    for (int rc = QS_NOTFOUND; rc >= QS_LAST_ERRCODE; rc--) {
        const char *s = qs_strerror(rc);
        CHECK(s != NULL && s[0] != 0);
        if (!s)
            continue;
        for (int j = 0; j < n; j++)
            if (strcmp(seen[j], s) == 0) {
                printf("  code %d repeats the string \"%s\"\n", rc, s);
                CHECK(strcmp(seen[j], s) != 0);
            }
        seen[n++] = s;
    }
    const char *s = qs_strerror(ENOENT);
    CHECK(s != NULL && s[0] != 0);
    for (int j = 0; s && j < n; j++)
        CHECK(strcmp(seen[j], s) != 0);
    s = qs_strerror(0);
    CHECK(s != NULL && s[0] != 0);
    s = qs_strerror(-1);           /* unknown codes still get a string */
    CHECK(s != NULL && s[0] != 0);
    s = qs_strerror(QS_LAST_ERRCODE - 1);
    CHECK(s != NULL && s[0] != 0);
    s = qs_strerror(123456);
    CHECK(s != NULL && s[0] != 0);
}

static void putdup_many_atomic(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t koff0[1] = {0};
    CHECK_RC(qs_putdup_many(c, 0, "", koff0, "", koff0), 0);
    CHECK(records_of(c) == 0);

    /* 3 records, the second with a too-long key: none is added */
    size_t kl = 2 + QS_MAX_KEY + 1 + 2;
    char *keys = malloc(kl);
    memset(keys, 'q', kl);
    memcpy(keys, "k1", 2);
    memcpy(keys + kl - 2, "k3", 2);
    uint64_t koff[4] = {0, 2, 2 + QS_MAX_KEY + 1, kl};
    uint64_t voff[4] = {0, 1, 2, 3};
    CHECK_RC(qs_putdup_many(c, 3, keys, koff, "abc", voff), QS_TOOBIG);
    CHECK(records_of(c) == 0);
    CHECK_RC(get_rc(c, "k1"), QS_NOTFOUND);

    /* inside a transaction: the transaction stays as it was */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "in", "txn"), 0);
    CHECK_RC(qs_putdup_many(c, 3, keys, koff, "abc", voff), QS_TOOBIG);
    CHECK(qs_in_transaction(c) != 0);
    CHECK(records_of(c) == 1);
    CHECK_RC(get_rc(c, "k1"), QS_NOTFOUND);
    /* a good batch in the same transaction */
    koff[2] = 4;
    memcpy(keys + 2, "k2", 2);
    memcpy(keys + 4, "k3", 2);
    koff[3] = 6;
    CHECK_RC(qs_putdup_many(c, 3, keys, koff, "abc", voff), 0);
    CHECK(records_of(c) == 4);
    CHECK_RC(qs_commit(c), 0);
    CHECK(get_is(c, "k1", "a"));
    CHECK(get_is(c, "k2", "b"));
    CHECK(get_is(c, "k3", "c"));
    CHECK(get_is(c, "in", "txn"));
    /* the same key many times in one batch keeps the order */
    uint64_t ko[5] = {0, 1, 2, 3, 4}, vo[5] = {0, 1, 2, 3, 4};
    CHECK_RC(qs_putdup_many(c, 4, "zzzz", ko, "1234", vo), 0);
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_getdup(c, "z", 1, &out, &outlen, &cnt), 0);
    CHECK(cnt == 4 && outlen == 20);
    if (out && outlen == 20)
        CHECK(memcmp(out, "\1\0\0\0" "1" "\1\0\0\0" "2" "\1\0\0\0" "3"
                          "\1\0\0\0" "4", 20) == 0);
    qs_free(out);
    CHECK_RC(check_ok(c), 0);
    free(keys);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void cursor_semantics(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    CHECK_RC(put_str(c, "b", "2"), 0);
    CHECK_RC(put_str(c, "c", "3"), 0);
    qs_stat st;
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.open_cursors == 0);
    qs_cursor *cur = NULL, *other = NULL;
    REQUIRE_RC(qs_cursor_open(c, &cur), 0);
    REQUIRE_RC(qs_cursor_open(c, &other), 0);
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.open_cursors == 2);
    qs_cursor_close(other);
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.open_cursors == 1);
    CHECK_RC(qs_cursor_get(cur, NULL, NULL, NULL, NULL), QS_NOTFOUND);
    CHECK_RC(qs_cursor_jump(cur, "b", 1), 0);

    /* valid across a commit that changes other keys */
    CHECK_RC(put_str(c, "bb", "new"), 0);
    CHECK_RC(qs_out(c, "a", 1), 0);
    void *k = NULL;
    size_t kn = 0;
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);
    CHECK(kn == 1 && k && memcmp(k, "b", 1) == 0);
    qs_free(k);
    k = NULL;
    CHECK_RC(qs_cursor_next(cur), 0);
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);
    CHECK(kn == 2 && k && memcmp(k, "bb", 2) == 0);
    qs_free(k);
    k = NULL;

    /* the record under the cursor removed by someone else */
    CHECK_RC(qs_out(c, "bb", 2), 0);
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), QS_NOTFOUND);
    qs_free(k);
    k = NULL;
    CHECK_RC(qs_cursor_next(cur), 0);
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);
    CHECK(kn == 1 && k && memcmp(k, "c", 1) == 0);
    qs_free(k);
    k = NULL;
    CHECK_RC(qs_cursor_next(cur), QS_NOTFOUND);
    CHECK_RC(qs_cursor_get(cur, NULL, NULL, NULL, NULL), QS_NOTFOUND);

    /* the cursor sees its thread's transaction */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "0", "zero"), 0);
    CHECK_RC(qs_cursor_first(cur), 0);
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);
    CHECK(kn == 1 && k && memcmp(k, "0", 1) == 0);
    qs_free(k);
    k = NULL;
    CHECK_RC(qs_cursor_out(cur), 0);      /* moves to "b" */
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);
    CHECK(kn == 1 && k && memcmp(k, "b", 1) == 0);
    qs_free(k);
    k = NULL;
    CHECK_RC(qs_abort(c), 0);
    CHECK(records_of(c) == 2);

    /* cursor_read: all, then the end */
    CHECK_RC(qs_cursor_first(cur), 0);
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_cursor_read(cur, 10, 0, &out, &outlen, &cnt), 0);
    CHECK(cnt == 2);
    CHECK(outlen == 2 * 10);
    if (out && outlen == 20)
        CHECK(memcmp(out, "\1\0\0\0b\1\0\0\0" "2\1\0\0\0c\1\0\0\0" "3", 20)
              == 0);
    qs_free(out);
    out = NULL;
    rc = qs_cursor_read(cur, 10, 0, &out, &outlen, &cnt);
    CHECK((rc == 0 && cnt == 0) || rc == QS_NOTFOUND);
    qs_free(out);
    out = NULL;
    /* backward from the last */
    CHECK_RC(qs_cursor_last(cur), 0);
    CHECK_RC(qs_cursor_read(cur, 1, 1, &out, &outlen, &cnt), 0);
    CHECK(cnt == 1 && outlen == 10);
    if (out && outlen == 10)
        CHECK(memcmp(out, "\1\0\0\0c\1\0\0\0" "3", 10) == 0);
    qs_free(out);
    out = NULL;
    CHECK_RC(qs_cursor_get(cur, &k, &kn, NULL, NULL), 0);   /* now on b */
    CHECK(kn == 1 && k && memcmp(k, "b", 1) == 0);
    qs_free(k);
    k = NULL;

    /* cursor_out of the last record */
    CHECK_RC(qs_cursor_last(cur), 0);
    CHECK_RC(qs_cursor_out(cur), QS_NOTFOUND);
    CHECK(records_of(c) == 1);
    CHECK_RC(get_rc(c, "c"), QS_NOTFOUND);
    qs_cursor_close(cur);
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.open_cursors == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void persistence_sync_off(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    qs_set_sync(c, 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    qs_set_sync(c, 1);
    CHECK_RC(put_str(c, "b", "2"), 0);
    qs_stat st = stat_of(c);
    CHECK(st.commits == 2);
    CHECK(st.syncs >= 1);
    CHECK(st.log_bytes > 0);
    CHECK_RC(qs_sync(c), 0);
    st = stat_of(c);
    CHECK(st.log_bytes == 0);
    CHECK(st.checkpoints >= 1);
    CHECK(st.depth >= 1);
    CHECK(st.pages * QS_PAGE_SIZE <= st.file_bytes);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(get_is(c, "a", "1"));
    CHECK(get_is(c, "b", "2"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* threads                                                             */

#define NWRITERS 4

typedef struct {
    qs_casket *c;
    int id, n;
    int rc;
    atomic_int *stop;
    long reads, bad;
} thr_arg;

static void *writer_main(void *p)
{
    thr_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        char v[32];
        int vn = snprintf(v, sizeof v, "w%d-%06d", a->id, i);
        int rc = qs_putdup(a->c, "shared", 6, v, (size_t)vn);
        if (rc) {
            a->rc = rc;
            break;
        }
    }
    return NULL;
}

/* checks that the values in a packed getdup buffer hold, for each writer,
 * 0, 1, 2, ... in order with no gap */
static int seq_ok(const unsigned char *p, size_t len, uint64_t cnt)
{
    int next[NWRITERS] = {0};
    const unsigned char *end = p + len;
    for (uint64_t i = 0; i < cnt; i++) {
        if (end - p < 4)
            return 0;
        uint32_t n = tc_le32(p);
        p += 4;
        if ((size_t)(end - p) < n || n != 9)
            return 0;
        int w = p[1] - '0', seq = 0;
        for (int d = 3; d < 9; d++)
            seq = seq * 10 + (p[d] - '0');
        if (w < 0 || w >= NWRITERS || seq != next[w])
            return 0;
        next[w]++;
        p += n;
    }
    return p == end;
}

static void *reader_main(void *p)
{
    thr_arg *a = p;
    uint64_t last = 0;
    qs_cursor *cur = NULL;
    if (qs_cursor_open(a->c, &cur) != 0) {
        a->bad++;
        return NULL;
    }
    int small = tc_small();
    while (!*a->stop) {
        if (small)
            msleep(1);
        uint64_t n = 0;
        if (qs_count(a->c, "shared", 6, &n) != 0 || n < last)
            a->bad++;
        last = n;
        void *out = NULL;
        size_t outlen = 0;
        uint64_t cnt = 0;
        if (qs_getdup(a->c, "shared", 6, &out, &outlen, &cnt) != 0 ||
            cnt < last || !seq_ok(out, outlen, cnt))
            a->bad++;
        qs_free(out);
        /* a cursor walk over the key with cursor_read */
        int rc = qs_cursor_jump(cur, "shared", 6);
        uint64_t walked = 0;
        while (rc == 0) {
            out = NULL;
            rc = qs_cursor_read(cur, 64, 0, &out, &outlen, &cnt);
            qs_free(out);
            if (rc != 0 || cnt == 0)
                break;
            walked += cnt;
        }
        if (rc != 0 && rc != QS_NOTFOUND)
            a->bad++;
        if (walked < last)
            a->bad++;
        a->reads++;
    }
    qs_cursor_close(cur);
    return NULL;
}

static void threads_putdup(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    int per = (int)tc_scaled(500, 5);
    atomic_int stop = 0;
    thr_arg w[NWRITERS], r;
    pthread_t wt[NWRITERS], rt;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.stop = &stop;
    REQUIRE(pthread_create(&rt, NULL, reader_main, &r) == 0);
    for (int i = 0; i < NWRITERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].id = i;
        w[i].n = per;
        pthread_create(&wt[i], NULL, writer_main, &w[i]);
    }
    for (int i = 0; i < NWRITERS; i++) {
        pthread_join(wt[i], NULL);
        CHECK_RC(w[i].rc, 0);
    }
    stop = 1;
    pthread_join(rt, NULL);
    printf("  reader: %ld passes, %ld bad\n", r.reads, r.bad);
    CHECK(r.bad == 0);
    CHECK(count_of(c, "shared", 6) == (uint64_t)(NWRITERS * per));
    CHECK(records_of(c) == (uint64_t)(NWRITERS * per));
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_getdup(c, "shared", 6, &out, &outlen, &cnt), 0);
    CHECK(cnt == (uint64_t)(NWRITERS * per));
    CHECK(seq_ok(out, outlen, cnt));
    qs_free(out);
    qs_stat st = stat_of(c);
    printf("  commits %" PRIu64 ", syncs %" PRIu64 "\n", st.commits,
           st.syncs);
    /* puts issued at once are committed in groups: at most one commit each */
    CHECK(st.commits >= 1 && st.commits <= (uint64_t)(NWRITERS * per));
    /* at most one per commit, besides the open's and the checkpoints' */
    CHECK(st.syncs <= st.commits + st.checkpoints + 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(count_of(c, "shared", 6) == (uint64_t)(NWRITERS * per));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Operations issued at once by many threads are committed in groups;
 * each must still get the result it would have had alone at its place in
 * some order: of the threads racing to putkeep a key exactly one wins,
 * of those racing to out it exactly one removes it. */
#define NRACERS 8
typedef struct {
    qs_casket *c;
    int nkeys;
    int kept, keyexist, removed, notfound, other;
    pthread_barrier_t *phase;   /* every putkeep ends before any out */
} racer_arg;

static void *racer_main(void *p)
{
    racer_arg *a = p;
    char key[32];
    for (int phase = 0; phase < 2; phase++) {
        pthread_barrier_wait(a->phase);
        for (int j = 0; j < a->nkeys; j++) {
            int kl = snprintf(key, sizeof key, "race%05d", j);
            int rc = phase == 0 ? qs_putkeep(a->c, key, (size_t)kl, &a, sizeof(void *))
                                : qs_out(a->c, key, (size_t)kl);
            if (rc == 0)
                phase == 0 ? a->kept++ : a->removed++;
            else if (phase == 0 && rc == QS_KEYEXIST)
                a->keyexist++;
            else if (phase == 1 && rc == QS_NOTFOUND)
                a->notfound++;
            else
                a->other++;
        }
    }
    return NULL;
}

static void threads_grouped_results(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    for (int sync = 0; sync < 2; sync++) {
        qs_casket *c = tc_open(t.path, QS_OPEN_NEW, sync, 0, 0, &rc);
        REQUIRE_RC(rc, 0);
        int nkeys = (int)tc_scaled(sync ? 150 : 1500, 5);
        pthread_barrier_t phase;
        pthread_barrier_init(&phase, NULL, NRACERS);
        racer_arg a[NRACERS];
        pthread_t th[NRACERS];
        for (int i = 0; i < NRACERS; i++) {
            a[i] = (racer_arg){.c = c, .nkeys = nkeys, .phase = &phase};
            REQUIRE(pthread_create(&th[i], NULL, racer_main, &a[i]) == 0);
        }
        int kept = 0, removed = 0, refused = 0, other = 0;
        for (int i = 0; i < NRACERS; i++) {
            pthread_join(th[i], NULL);
            kept += a[i].kept;
            removed += a[i].removed;
            refused += a[i].keyexist + a[i].notfound;
            other += a[i].other;
        }
        pthread_barrier_destroy(&phase);
        qs_stat st = stat_of(c);
        printf("  sync %d: %d keys, %" PRIu64 " commits for %d operations\n", sync, nkeys,
               st.commits, 2 * NRACERS * nkeys);
        CHECK(other == 0);
        CHECK(kept == nkeys);
        CHECK(removed == nkeys);
        CHECK(refused == 2 * (NRACERS - 1) * nkeys);
        CHECK(records_of(c) == 0);
        CHECK_RC(check_ok(c), 0);
        CHECK_RC(qs_close(c), 0);
    }
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int get_x, count_x, first, commit, abort_, intxn, st_intxn, out_rc;
    uint64_t records;
    atomic_int done;
    int put_rc;
} iso_arg;

static void *iso_reader(void *p)
{
    iso_arg *a = p;
    a->get_x = get_rc(a->c, "x");
    uint64_t n = 99;
    qs_count(a->c, "x", 1, &n);
    a->count_x = (int)n;
    qs_records(a->c, &a->records);
    qs_cursor *cur = NULL;
    a->first = -1;
    if (qs_cursor_open(a->c, &cur) == 0) {
        a->first = qs_cursor_first(cur);
        qs_cursor_close(cur);
    }
    a->commit = qs_commit(a->c);
    a->abort_ = qs_abort(a->c);
    a->intxn = qs_in_transaction(a->c);
    qs_stat st;
    qs_stat_get(a->c, &st);
    a->st_intxn = (int)st.in_transaction;
    return NULL;
}

static void *iso_writer(void *p)
{
    iso_arg *a = p;
    a->put_rc = put_str(a->c, "y", "from B");
    a->done = 1;
    return NULL;
}

static void txn_isolation_threads(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "x", "from A"), 0);
    CHECK(get_is(c, "x", "from A"));

    iso_arg a;
    memset(&a, 0, sizeof a);
    a.c = c;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, iso_reader, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.get_x, QS_NOTFOUND);
    CHECK(a.count_x == 0);
    CHECK(a.records == 0);
    CHECK_RC(a.first, QS_NOTFOUND);
    CHECK_RC(a.commit, QS_TXN);
    CHECK_RC(a.abort_, QS_TXN);
    CHECK(a.intxn == 0);
    CHECK(a.st_intxn != 0);
    CHECK(qs_in_transaction(c) != 0);   /* A's txn untouched */

    /* B's write waits for A's transaction */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, iso_writer, &a) == 0);
    msleep(300);
    CHECK(a.done == 0);
    CHECK_RC(get_rc(c, "y"), QS_NOTFOUND);
    CHECK_RC(qs_commit(c), 0);
    pthread_join(th, NULL);
    CHECK(a.done == 1);
    CHECK_RC(a.put_rc, 0);

    /* now B sees A's commit */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, iso_reader, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.get_x, 0);
    CHECK(a.count_x == 1);
    CHECK(a.records == 2);
    CHECK_RC(a.first, 0);
    CHECK(a.st_intxn == 0);
    CHECK(get_is(c, "y", "from B"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}


/* Writers move amounts between ten "bank" values in transactions (a third
 * of them aborted), and pile up junk that spills (tiny cache) but is removed
 * or aborted before any commit; one thread compacts and syncs now and then.
 * Readers must always see ten values summing to zero, and no junk. */

typedef struct {
    qs_casket *c;
    qs_cursor *cur;
    int id, rounds;
    atomic_int *stop;
    int rc;
    long commits, aborts, reads, bad;
} inv_arg;

static int bank_read(qs_casket *c, int64_t *sum, uint64_t *cnt)
{
    void *out = NULL;
    size_t outlen = 0;
    int rc = qs_getdup(c, "bank", 4, &out, &outlen, cnt);
    if (rc)
        return rc;
    *sum = 0;
    const unsigned char *p = out, *end = p + outlen;
    for (uint64_t i = 0; i < *cnt; i++) {
        if (end - p < 12 || tc_le32(p) != 8) {
            qs_free(out);
            return QS_CORRUPT;
        }
        int64_t x;
        memcpy(&x, p + 4, 8);
        *sum += x;
        p += 12;
    }
    qs_free(out);
    return p == end ? 0 : QS_CORRUPT;
}

static void *inv_writer(void *p)
{
    inv_arg *a = p;
    tc_rng r = {(uint64_t)a->id * 7777 + 1};
    unsigned char junk[6000];
    memset(junk, 'j', sizeof junk);
    for (int n = 0; n < a->rounds && !a->rc; n++) {
        int rc = qs_begin(a->c);
        if (rc) { a->rc = rc; break; }
        void *out = NULL;
        size_t outlen = 0;
        uint64_t cnt = 0;
        rc = qs_getdup(a->c, "bank", 4, &out, &outlen, &cnt);
        int64_t v[10] = {0};
        if (!rc && cnt == 10 && outlen == 120)
            for (int i = 0; i < 10; i++)
                memcpy(&v[i], (unsigned char *)out + 12 * i + 4, 8);
        else if (!rc)
            rc = QS_CORRUPT;
        qs_free(out);
        /* junk that makes the transaction spill */
        int njunk = (int)tc_below(&r, 80);
        for (int i = 0; i < njunk && !rc; i++)
            rc = qs_putdup(a->c, "junk", 4, junk, sizeof junk);
        int from = (int)tc_below(&r, 10), to = (int)tc_below(&r, 10);
        int64_t amt = (int64_t)tc_below(&r, 1000);
        v[from] -= amt;
        v[to] += amt;
        if (!rc)
            rc = qs_outlist(a->c, "bank", 4, NULL);
        for (int i = 0; i < 10 && !rc; i++)
            rc = qs_putdup(a->c, "bank", 4, &v[i], 8);
        int abort_it = tc_below(&r, 3) == 0;
        if (!rc && !abort_it && njunk)
            rc = qs_outlist(a->c, "junk", 4, NULL);
        if (rc) {
            a->rc = rc;
            qs_abort(a->c);
            break;
        }
        if (abort_it) {
            rc = qs_abort(a->c);
            a->aborts++;
        } else {
            rc = qs_commit(a->c);
            a->commits++;
        }
        if (rc)
            a->rc = rc;
    }
    return NULL;
}

static void *inv_reader(void *p)
{
    inv_arg *a = p;
    int small = tc_small();
    while (!*a->stop) {
        if (small)
            msleep(1);  /* valgrind runs one thread at a time: let the
                           writers in */
        int64_t sum = 0;
        uint64_t cnt = 0, junk = 1;
        int rc = bank_read(a->c, &sum, &cnt);
        if (rc || cnt != 10 || sum != 0) {
            if (a->bad < 3)
                printf("  reader: rc %d, %" PRIu64 " bank values, sum %"
                       PRId64 "\n", rc, cnt, sum);
            a->bad++;
        }
        if (qs_count(a->c, "junk", 4, &junk) != 0 || junk != 0) {
            if (a->bad < 3)
                printf("  reader: %" PRIu64 " junk values visible\n", junk);
            a->bad++;
        }
        /* the same through a cursor: one cursor_read of the bank, and
         * nothing at or after "junk" */
        if (a->cur) {
            void *out = NULL;
            size_t outlen = 0;
            uint64_t cnt2 = 0;
            rc = qs_cursor_jump(a->cur, "bank", 4);
            if (!rc)
                rc = qs_cursor_read(a->cur, 20, 0, &out, &outlen, &cnt2);
            int64_t s2 = 0;
            const unsigned char *p = out, *end = p + outlen;
            for (uint64_t i = 0; !rc && i < cnt2; i++) {
                if (end - p < 20 || tc_le32(p) != 4 || tc_le32(p + 8) != 8) {
                    rc = QS_CORRUPT;
                    break;
                }
                int64_t x;
                memcpy(&x, p + 12, 8);
                s2 += x;
                p += 20;
            }
            qs_free(out);
            if (rc || cnt2 != 10 || s2 != 0) {
                if (a->bad < 3)
                    printf("  reader cursor: rc %d, %" PRIu64 " records, sum %"
                           PRId64 "\n", rc, cnt2, s2);
                a->bad++;
            }
            rc = qs_cursor_jump(a->cur, "junk", 4);
            if (rc != QS_NOTFOUND) {
                if (a->bad < 3)
                    printf("  reader cursor: jump to junk gave %d\n", rc);
                a->bad++;
            }
        }
        a->reads++;
    }
    return NULL;
}

static void *inv_maint(void *p)
{
    inv_arg *a = p;
    int n = 0;
    while (!*a->stop && !a->rc) {
        msleep(20);
        int rc = (n++ % 3 == 0) ? qs_compact(a->c) : qs_sync(a->c);
        if (rc)
            a->rc = rc;
        a->commits++;
    }
    return NULL;
}

static void threads_txn_invariant(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 64 * 4096, 256 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    for (int i = 0; i < 10; i++) {
        int64_t z = 0;
        CHECK_RC(qs_putdup(c, "bank", 4, &z, 8), 0);
    }
    enum { NW = 3, NR = 2 };
    atomic_int stop = 0;
    inv_arg w[NW], rd[NR], mt;
    pthread_t wt[NW], rt[NR], mtt;
    memset(&mt, 0, sizeof mt);
    mt.c = c;
    mt.stop = &stop;
    for (int i = 0; i < NR; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        rd[i].c = c;
        rd[i].stop = &stop;
        CHECK_RC(qs_cursor_open(c, &rd[i].cur), 0);
        pthread_create(&rt[i], NULL, inv_reader, &rd[i]);
    }
    pthread_create(&mtt, NULL, inv_maint, &mt);
    for (int i = 0; i < NW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].id = i;
        w[i].rounds = (int)tc_scaled(150, 5);
        pthread_create(&wt[i], NULL, inv_writer, &w[i]);
    }
    long commits = 0, aborts = 0, reads = 0, bad = 0;
    for (int i = 0; i < NW; i++) {
        pthread_join(wt[i], NULL);
        CHECK_RC(w[i].rc, 0);
        commits += w[i].commits;
        aborts += w[i].aborts;
    }
    stop = 1;
    for (int i = 0; i < NR; i++) {
        pthread_join(rt[i], NULL);
        qs_cursor_close(rd[i].cur);
        reads += rd[i].reads;
        bad += rd[i].bad;
    }
    pthread_join(mtt, NULL);
    CHECK_RC(mt.rc, 0);
    qs_stat st = stat_of(c);
    printf("  %ld commits, %ld aborts, %ld compactions/syncs, %ld reads, "
           "%ld bad; spilled pages %" PRIu64 "\n", commits, aborts,
           mt.commits, reads, bad, st.spilled_pages);
    CHECK(bad == 0);
    int64_t sum = 1;
    uint64_t cnt = 0;
    CHECK_RC(bank_read(c, &sum, &cnt), 0);
    CHECK(cnt == 10 && sum == 0);
    CHECK(count_of(c, "junk", 4) == 0);
    CHECK(records_of(c) == 10);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(bank_read(c, &sum, &cnt), 0);
    CHECK(cnt == 10 && sum == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}


/* ------------------------------------------------------------------ */
/* transaction owners: lock_timeout between threads, ended owners      */

typedef struct {
    qs_casket *c;
    atomic_int phase;     /* set by the test thread: 1 = end the transaction */
    int begin_rc, put_rc, abort_rc;
    int tid;
    pthread_t self;
    atomic_int ready;
} own_arg;

/* begins, writes, and either waits for phase 1 and aborts (phase 0 at the
 * start) or just ends with the transaction open (phase -1) */
static void *own_main(void *p)
{
    own_arg *a = p;
    a->tid = (int)syscall(SYS_gettid);
    a->self = pthread_self();
    a->begin_rc = qs_begin(a->c);
    a->put_rc = put_str(a->c, "ghost", "x");
    int leave_open = a->phase < 0;
    a->ready = 1;
    if (leave_open)
        return NULL;
    while (a->phase < 1)
        msleep(5);
    a->abort_rc = qs_abort(a->c);
    return NULL;
}

static void thread_txn_owner(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW;
    o.sync = 0;
    o.lock_timeout = 0.2;
    qs_casket *c = NULL;
    REQUIRE_RC(qs_open(t.path, &o, &c), 0);

    /* a live owner: other threads wait lock_timeout, then QS_LOCKED naming it */
    own_arg a;
    memset(&a, 0, sizeof a);
    a.c = c;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    while (!a.ready)
        msleep(1);
    CHECK_RC(a.begin_rc, 0);
    CHECK_RC(a.put_rc, 0);
    double t0 = tc_now();
    int rc = put_str(c, "k", "v");
    double dt = tc_now() - t0;
    printf("  put while another thread's transaction is open: rc %d after %.3fs\n", rc, dt);
    CHECK_RC(rc, QS_LOCKED);
    CHECK(dt >= 0.15 && dt < 3.0);
    qs_lock_holder h;
    qs_locked_by(&h);
    CHECK(h.pid == (uint64_t)getpid());
    CHECK(h.tid == (uint64_t)a.tid);
    CHECK(h.thread == (uint64_t)a.self);
    CHECK_RC(qs_begin(c), QS_LOCKED);
    CHECK(!qs_in_transaction(c));
    a.phase = 1;
    pthread_join(th, NULL);
    CHECK_RC(a.abort_rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);

    /* an owner that ended with its transaction open: the next writer of
     * another thread aborts it and goes on */
    memset(&a, 0, sizeof a);
    a.c = c;
    a.phase = -1;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.begin_rc, 0);
    CHECK_RC(a.put_rc, 0);
    t0 = tc_now();
    CHECK_RC(put_str(c, "k2", "v2"), 0);
    CHECK(tc_now() - t0 < 0.15);
    CHECK_RC(get_rc(c, "ghost"), QS_NOTFOUND);
    CHECK(get_is(c, "k2", "v2"));
    qs_stat st;
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.in_transaction == 0);
    /* and transactions work as before */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "k3", "v3"), 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(records_of(c) == 3);

    /* a live thread under the owner's id but with another start time is
     * another thread (ids are reused): the owner counts as ended */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    while (!a.ready)
        msleep(1);
    CHECK_RC(a.begin_rc, 0);
    CHECK(c->txn_tid == a.tid);
    CHECK(c->txn_tid_start != 0);       /* read from /proc */
    CHECK_RC(put_str(c, "k4", "v4"), QS_LOCKED);    /* the owner lives */
    c->txn_tid_start++;
    CHECK_RC(put_str(c, "k4", "v4"), 0);
    CHECK_RC(get_rc(c, "ghost"), QS_NOTFOUND);
    a.phase = 1;
    pthread_join(th, NULL);
    CHECK_RC(a.abort_rc, QS_TXN);   /* it has no transaction any more */
    CHECK(records_of(c) == 4);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* qs_shutdown                                                         */

typedef struct {
    qs_casket *c;
    atomic_int phase;     /* set by the test thread */
    int put_rc, commit_rc, begin_rc;
    atomic_int done;
} sd_arg;

/* begins a transaction, writes, waits for phase 1, then tries to commit */
static void *sd_txn_owner(void *p)
{
    sd_arg *a = p;
    a->begin_rc = qs_begin(a->c);
    a->put_rc = put_str(a->c, "in-txn", "x");
    a->done = 1;
    while (a->phase < 1)
        msleep(5);
    a->commit_rc = qs_commit(a->c);
    return NULL;
}

/* an autocommit write that queues behind the other thread's transaction */
static void *sd_queued_writer(void *p)
{
    sd_arg *a = p;
    a->put_rc = put_str(a->c, "queued", "y");
    a->done = 1;
    return NULL;
}

static void shutdown_semantics(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);

    /* another thread owns a transaction; a third thread queues a write */
    sd_arg owner, queued;
    memset(&owner, 0, sizeof owner);
    memset(&queued, 0, sizeof queued);
    owner.c = queued.c = c;
    pthread_t to, tq;
    REQUIRE(pthread_create(&to, NULL, sd_txn_owner, &owner) == 0);
    while (!owner.done)
        msleep(5);
    CHECK_RC(owner.begin_rc, 0);
    CHECK_RC(owner.put_rc, 0);
    REQUIRE(pthread_create(&tq, NULL, sd_queued_writer, &queued) == 0);
    msleep(100);
    CHECK(queued.done == 0);            /* waiting for the write lock */

    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur)
        CHECK_RC(qs_cursor_first(cur), 0);

    CHECK_RC(qs_shutdown(c), 0);
    pthread_join(tq, NULL);
    CHECK_RC(queued.put_rc, QS_CLOSED);
    owner.phase = 1;
    pthread_join(to, NULL);
    CHECK_RC(owner.commit_rc, QS_CLOSED);

    /* every later call: QS_CLOSED */
    void *v = NULL;
    size_t vn = 0;
    uint64_t n = 0;
    CHECK_RC(qs_get(c, "k", 1, &v, &vn), QS_CLOSED);
    qs_free(v);
    CHECK_RC(put_str(c, "k", "w"), QS_CLOSED);
    CHECK_RC(qs_putdup(c, "k", 1, "w", 1), QS_CLOSED);
    CHECK_RC(qs_out(c, "k", 1), QS_CLOSED);
    CHECK_RC(qs_records(c, &n), QS_CLOSED);
    CHECK_RC(qs_count(c, "k", 1, &n), QS_CLOSED);
    CHECK_RC(qs_begin(c), QS_CLOSED);
    CHECK_RC(qs_sync(c), QS_CLOSED);
    CHECK_RC(qs_compact(c), QS_CLOSED);
    char msg[64];
    CHECK_RC(qs_check(c, msg, sizeof msg), QS_CLOSED);
    qs_cursor *cur2 = NULL;
    rc = qs_cursor_open(c, &cur2);
    CHECK(rc == QS_CLOSED || rc == 0);
    qs_cursor_close(cur2);
    if (cur) {
        CHECK_RC(qs_cursor_next(cur), QS_CLOSED);
        CHECK_RC(qs_cursor_first(cur), QS_CLOSED);
        CHECK_RC(qs_cursor_get(cur, NULL, NULL, NULL, NULL), QS_CLOSED);
        CHECK_RC(qs_cursor_out(cur), QS_CLOSED);
        qs_cursor_close(cur);
    }
    CHECK_RC(qs_shutdown(c), 0);        /* a second call */
    CHECK_RC(qs_close(c), 0);

    /* the abandoned transaction and the queued write left nothing */
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(get_is(c, "k", "v"));
    CHECK_RC(get_rc(c, "in-txn"), QS_NOTFOUND);
    CHECK_RC(get_rc(c, "queued"), QS_NOTFOUND);
    CHECK(records_of(c) == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    /* the log is cut back to one page at close */
    long long ls = tc_file_size(t.log);
    CHECK(ls >= 0 && ls <= QS_PAGE_SIZE);
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int id;
    long ok, closed, other;
} sdc_arg;

static void *sdc_worker(void *p)
{
    sdc_arg *a = p;
    qs_cursor *cur = NULL;
    int rc = qs_cursor_open(a->c, &cur);
    if (rc) {
        if (rc == QS_CLOSED) a->closed++; else a->other++;
        return NULL;
    }
    for (long i = 0;; i++) {
        char k[32];
        snprintf(k, sizeof k, "w%d-%ld", a->id, i % 500);
        switch ((i + a->id) % 5) {
        case 0: rc = put_str(a->c, k, "value"); break;
        case 1: rc = qs_putdup(a->c, k, strlen(k), "dup", 3); break;
        case 2: rc = get_rc(a->c, k); if (rc == QS_NOTFOUND) rc = 0; break;
        case 3: rc = qs_cursor_jump(cur, k, strlen(k));
                if (rc == QS_NOTFOUND) rc = 0;
                if (!rc) { rc = qs_cursor_next(cur); if (rc == QS_NOTFOUND) rc = 0; }
                break;
        default:
            rc = qs_begin(a->c);
            if (!rc) {
                int r2 = put_str(a->c, k, "txn");
                int r3 = (i & 1) ? qs_commit(a->c) : qs_abort(a->c);
                rc = r2 ? r2 : r3;
            }
        }
        if (rc == 0)
            a->ok++;
        else if (rc == QS_CLOSED)
            a->closed++;
        else
            a->other++;
        if (rc == QS_CLOSED && a->closed > 3)
            break;
    }
    qs_cursor_close(cur);
    return NULL;
}

static void shutdown_concurrent(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rounds = (int)tc_scaled(10, 5);
    for (int r = 0; r < rounds; r++) {
        int rc;
        qs_casket *c = tc_open(t.path, r ? QS_OPEN_WRITE : QS_OPEN_NEW, 0,
                               64 * 4096, 0, &rc);
        REQUIRE_RC(rc, 0);
        enum { NT = 4 };
        sdc_arg a[NT];
        pthread_t th[NT];
        for (int i = 0; i < NT; i++) {
            memset(&a[i], 0, sizeof a[i]);
            a[i].c = c;
            a[i].id = i;
            pthread_create(&th[i], NULL, sdc_worker, &a[i]);
        }
        msleep(20 + 10 * r);
        rc = qs_shutdown(c);
        CHECK_RC(rc, 0);
        long ok = 0, other = 0;
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            ok += a[i].ok;
            other += a[i].other;
        }
        if (other)
            printf("  round %d: %ld calls failed with codes other than "
                   "QS_CLOSED\n", r, other);
        CHECK(other == 0);
        CHECK(ok > 0);
        CHECK_RC(qs_close(c), 0);
        c = open_mode(t.path, QS_OPEN_WRITE, &rc);
        REQUIRE_RC(rc, 0);
        CHECK_RC(check_ok(c), 0);
        CHECK_RC(qs_close(c), 0);
    }
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* the inter-process lock                                              */

/* A child process that opens path and holds the write lock inside a
 * transaction that puts k=child: for hold_ms then commits (hold_ms >= 0),
 * or until its release reaches end of file, then closes without
 * committing.  It reports 'y' once the transaction is open. */
typedef struct {
    const char *path;
    long hold_ms;
} holder_arg;

static int txn_holder_main(void *arg, int report, int release)
{
    const holder_arg *a = arg;
    int rc;
    qs_casket *c = open_mode(a->path, QS_OPEN_WRITE, &rc);
    int ok_txn = c && qs_begin(c) == 0 && put_str(c, "k", "child") == 0;
    char ok = ok_txn ? 'y' : 'n';
    if (write(report, &ok, 1) != 1)
        return 3;
    if (!ok_txn)
        return 2;
    if (a->hold_ms >= 0) {
        msleep(a->hold_ms);
        if (qs_commit(c) != 0)
            return 4;
    } else {
        char b;
        while (read(release, &b, 1) > 0)
            ;
    }
    qs_close(c);
    return 0;
}

static int txn_holder(tc_child *ch, const char *path, long hold_ms)
{
    holder_arg a = {path, hold_ms};
    return tc_child_start(ch, txn_holder_main, &a);
}

/* Several processes open one casket read-write; the write lock is held for
 * a transaction, readers never wait for it, and a holder that dies lets
 * go. */
static void lock_other_process(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);
    CHECK_RC(qs_close(c), 0);

    tc_child holder;
    REQUIRE(txn_holder(&holder, t.path, -1) == 0);
    char ok = 0;
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');

    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_WRITE;
    o.lock_timeout = 0.2;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);   /* opening never waits for a writer */
    REQUIRE(c != NULL);
    /* a reader sees the last commit, not the other process's transaction */
    double t0 = tc_now();
    CHECK(get_is(c, "k", "v"));
    CHECK(tc_now() - t0 < 0.1);
    t0 = tc_now();
    rc = put_str(c, "k2", "x");
    double dt = tc_now() - t0;
    printf("  lock_timeout 0.2: put rc %d after %.3fs\n", rc, dt);
    CHECK_RC(rc, QS_LOCKED);
    CHECK(dt >= 0.15 && dt < 1.5);
    qs_set_sync(c, 1);
    CHECK_RC(qs_begin(c), QS_LOCKED);
    CHECK(!qs_in_transaction(c));
    qs_close(c);
    o.lock_timeout = 0;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    t0 = tc_now();
    if (c)
        CHECK_RC(put_str(c, "k2", "x"), QS_LOCKED);
    CHECK(tc_now() - t0 < 0.15);
    /* starting empty needs the file to ourselves */
    qs_casket *d = NULL;
    o.flag = QS_OPEN_NEW;
    CHECK_RC(qs_open(t.path, &o, &d), QS_LOCKED);
    CHECK(d == NULL);
    o.flag = QS_OPEN_WRITE;

    /* the holder closes without committing: its transaction is gone */
    CHECK(tc_child_end(&holder) == 0);
    if (c) {
        CHECK_RC(put_str(c, "k2", "x"), 0);
        CHECK(get_is(c, "k", "v"));
        qs_close(c);
    }

    /* a holder killed with SIGKILL releases the lock */
    REQUIRE(txn_holder(&holder, t.path, -1) == 0);
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');
    o.lock_timeout = 1;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    tc_child_kill(&holder);
    if (c) {
        CHECK_RC(put_str(c, "k3", "y"), 0);
        CHECK(get_is(c, "k", "v"));
        CHECK_RC(check_ok(c), 0);
        qs_close(c);
    }

    /* a writer waits for a holder that commits after 300 ms, then sees
     * its commit */
    o.lock_timeout = 5;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    REQUIRE(txn_holder(&holder, t.path, 300) == 0);
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');
    t0 = tc_now();
    if (c) {
        CHECK_RC(put_str(c, "k4", "z"), 0);
        dt = tc_now() - t0;
        printf("  waited %.3fs for a holder of 0.3s\n", dt);
        CHECK(dt > 0.1 && dt < 4);
        CHECK(get_is(c, "k", "child"));
        CHECK(get_is(c, "k4", "z"));
    }
    CHECK(tc_child_end(&holder) == 0);

    /* two handles in one process write in turn and see each other */
    d = NULL;
    CHECK_RC(qs_open(t.path, &o, &d), 0);
    if (c && d) {
        CHECK_RC(put_str(d, "k5", "d"), 0);
        CHECK(get_is(c, "k5", "d"));
        CHECK_RC(put_str(c, "k5", "c"), 0);
        CHECK(get_is(d, "k5", "c"));
        CHECK_RC(qs_begin(d), 0);
        CHECK_RC(put_str(d, "k6", "t"), 0);
        o.lock_timeout = 0;
        qs_casket *e = NULL;
        CHECK_RC(qs_open(t.path, &o, &e), 0);
        if (e) {
            CHECK(get_is(e, "k5", "c"));
            CHECK_RC(put_str(e, "k7", "blocked"), QS_LOCKED);
            qs_close(e);
        }
        CHECK_RC(qs_commit(d), 0);
        CHECK(get_is(c, "k6", "t"));
    }
    if (d)
        qs_close(d);
    if (c) {
        CHECK_RC(check_ok(c), 0);
        qs_close(c);
    }
    tc_tmp_remove(&t);
}

static void space_reuse(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    const uint64_t ckpt = 1 << 20;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, ckpt, &rc);
    REQUIRE_RC(rc, 0);
    const int ROUNDS = (int)tc_scaled(50, 5), N = 2000, NKEYS = 200;
    const size_t VL = 100;
    const uint64_t peak = (uint64_t)N * (VL + 5);
    /* the log legitimately holds up to checkpoint_bytes of frames before
     * a checkpoint lets it be reused; beyond that, 2 x live data + 2 MiB */
    const uint64_t bound = 2 * peak + (2u << 20) + ckpt;
    uint64_t worst = 0, at10 = 0, last = 0, worst_file = 0, worst_log = 0;
    unsigned char v[128];
    uint64_t *koff = malloc((N + 1) * sizeof *koff);
    uint64_t *voff = malloc((N + 1) * sizeof *voff);
    char *keys = malloc((size_t)N * 5 + 1);   /* + snprintf's NUL */
    unsigned char *vals = malloc((size_t)N * VL);
    for (int r = 0; r < ROUNDS; r++) {
        if (r % 2 == 0) {
            /* one transaction of putdups, one of outs */
            CHECK_RC(qs_begin(c), 0);
            for (int i = 0; i < N; i++) {
                char k[8];
                snprintf(k, sizeof k, "r%04d", i % NKEYS);
                fill_val(v, VL, (uint64_t)(r * N + i));
                if ((rc = qs_putdup(c, k, 5, v, VL)) != 0)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
            CHECK(records_of(c) == (uint64_t)N);
            CHECK_RC(qs_begin(c), 0);
            for (int i = 0; i < N; i++) {
                char k[8];
                snprintf(k, sizeof k, "r%04d", i % NKEYS);
                if ((rc = qs_out(c, k, 5)) != 0)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
        } else {
            /* one putdup_many, then outlists in autocommit */
            koff[0] = voff[0] = 0;
            for (int i = 0; i < N; i++) {
                snprintf(keys + 5 * i, 6, "r%04d", i % NKEYS);
                fill_val(vals + VL * i, VL, (uint64_t)(r * N + i));
                koff[i + 1] = 5 * (uint64_t)(i + 1);
                voff[i + 1] = VL * (uint64_t)(i + 1);
            }
            CHECK_RC(qs_putdup_many(c, N, keys, koff, vals, voff), 0);
            CHECK(records_of(c) == (uint64_t)N);
            for (int k = 0; k < NKEYS; k++) {
                char kb[8];
                snprintf(kb, sizeof kb, "r%04d", k);
                uint64_t removed = 0;
                CHECK_RC(qs_outlist(c, kb, 5, &removed), 0);
                CHECK(removed == (uint64_t)(N / NKEYS));
            }
        }
        CHECK(records_of(c) == 0);
        qs_stat st = stat_of(c);
        last = st.file_bytes + st.log_file_bytes;
        if (last > worst) {
            worst = last;
            worst_file = st.file_bytes;
            worst_log = st.log_file_bytes;
        }
        if (r == 9)
            at10 = last;
        if (tc_cur_failed)
            break;
    }
    free(koff);
    free(voff);
    free(keys);
    free(vals);
    qs_stat st = stat_of(c);
    printf("  file+log bytes: worst %" PRIu64 " (%" PRIu64 " + %" PRIu64
           "), after round 10 %" PRIu64 ", at the end %" PRIu64 " (bound %"
           PRIu64 "); pages %" PRIu64 " free %" PRIu64 "\n", worst,
           worst_file, worst_log, at10, last, bound, st.pages,
           st.free_pages);
    CHECK(worst <= bound);
    if (at10)
        CHECK(last <= at10 + (512u << 10));   /* no steady growth */
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(empty_casket);
    RUN(txn_misuse);
    RUN(readonly_open);
    RUN(open_missing);
    RUN(open_new_truncates);
    RUN(too_big);
    RUN(strerror_all);
    RUN(putdup_many_atomic);
    RUN(cursor_semantics);
    RUN(persistence_sync_off);
    RUN(big_value);
    RUN(many_dups);
    RUN(compaction);
    RUN(boundary_sizes);
    RUN(random_file);
    RUN(empty_file);
    RUN(truncated_half);
    RUN(flipped_byte);
    RUN(misplaced_page);
    RUN(lock_other_process);
    RUN(txn_isolation_threads);
    RUN(threads_putdup);
    RUN(threads_grouped_results);
    RUN(threads_txn_invariant);
    RUN(space_reuse);
    RUN(thread_txn_owner);
    RUN(shutdown_semantics);
    RUN(shutdown_concurrent);
    return tc_summary();
}
