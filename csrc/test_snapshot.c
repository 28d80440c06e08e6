/*
 * test_snapshot.c -- snapshots (qs_snapshot_open), queue scans and backups
 * through the public API: a snapshot keeps reading one commit while the
 * casket is written and checkpoints are held off; past its log limit the
 * checkpoint goes ahead and the snapshot fails with QS_SNAPSHOT_OLD; a
 * backup holds one commit and opens alone; every error path frees what it
 * took (run under valgrind and ASan by make valgrind / asan).
 */
#include "test_common.h"

static uint64_t records_of(qs_casket *c, int *rc)
{
    uint64_t n = 0;
    *rc = qs_records(c, &n);
    return n;
}

static uint64_t cursor_count(qs_casket *c, int *rc)
{
    qs_cursor *cur = NULL;
    uint64_t n = 0;
    if ((*rc = qs_cursor_open(c, &cur)) != 0)
        return 0;
    for (*rc = qs_cursor_first(cur); *rc == 0; *rc = qs_cursor_next(cur))
        n++;
    if (*rc == QS_NOTFOUND)
        *rc = 0;
    qs_cursor_close(cur);
    return n;
}

static int put_n(qs_casket *c, const char *prefix, int from, int n, size_t vlen)
{
    char key[64], val[4096];
    memset(val, 'v', sizeof val);
    int rc = qs_begin(c);
    for (int i = from; rc == 0 && i < from + n; i++) {
        int kl = snprintf(key, sizeof key, "%s%08d", prefix, i);
        rc = qs_putdup(c, key, (size_t)kl, val, vlen);
    }
    return rc ? (qs_abort(c), rc) : qs_commit(c);
}

static void snapshot_holds_one_commit(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 64 * 1024, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(put_n(c, "a", 0, 2000, 50), 0);
    qs_casket *s = NULL;
    CHECK_RC(qs_snapshot_open(NULL, 0, 0, &s), QS_INVAL);
    CHECK_RC(qs_snapshot_open(c, 0, 0, NULL), QS_INVAL);
    REQUIRE_RC(qs_snapshot_open(c, 64u << 20, 1u << 20, &s), 0);
    for (int round = 0; round < 20; round++)
        CHECK_RC(put_n(c, "b", round * 500, 500, 200), 0);
    qs_stat st;
    qs_stat_get(c, &st);
    CHECK(st.log_bytes > 4 * 64 * 1024);    /* checkpoints were held off */
    CHECK(records_of(c, &rc) == 12000);
    CHECK(records_of(s, &rc) == 2000 && rc == 0);
    CHECK(cursor_count(s, &rc) == 2000 && rc == 0);
    CHECK_RC(qs_put(s, "x", 1, "y", 1), QS_READONLY);
    CHECK_RC(qs_sync(c), QS_LOCKED);        /* held off, nothing lost */
    CHECK_RC(qs_close(s), 0);
    CHECK_RC(qs_sync(c), 0);                /* no pin: it goes ahead */
    qs_stat_get(c, &st);
    CHECK(st.log_bytes == 0);
    CHECK(records_of(c, &rc) == 12000);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void snapshot_too_old(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 64 * 1024, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(put_n(c, "a", 0, 100, 50), 0);
    qs_casket *s = NULL;
    const uint64_t limit = 1u << 20;
    REQUIRE_RC(qs_snapshot_open(c, limit, 0, &s), 0);
    uint64_t peak = 0;
    int i = 0;
    for (; i < 10000 && (rc = qs_records(s, &(uint64_t){0})) == 0; i++) {
        CHECK_RC(put_n(c, "b", i * 10, 10, 1000), 0);
        qs_stat st;
        qs_stat_get(c, &st);
        if (st.log_bytes > peak)
            peak = st.log_bytes;
    }
    CHECK_RC(rc, QS_SNAPSHOT_OLD);
    CHECK(peak <= limit + 64 * 1024);       /* one commit past the limit */
    CHECK(peak > limit / 2);
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(s, &cur), 0);
    if (cur) {
        CHECK_RC(qs_cursor_first(cur), QS_SNAPSHOT_OLD);
        qs_cursor_close(cur);
    }
    qs_items *it = NULL;
    CHECK_RC(qs_queue_scan(s, "q", 1, 0, 10, 1 << 20, &it), QS_SNAPSHOT_OLD);
    CHECK(it == NULL);
    CHECK(strstr(qs_strerror(QS_SNAPSHOT_OLD), "snapshot") != NULL);
    CHECK_RC(qs_close(s), 0);
    CHECK(records_of(c, &rc) == 100 + (uint64_t)i * 10);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void queue_scan(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    char val[32];
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(val, sizeof val, "item%d", i);
        REQUIRE_RC(qs_queue_put(c, "q", 1, val, (size_t)n, NULL), 0);
    }
    qs_items *r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r), 0);
    uint64_t reserved = r->ids[0];
    qs_items_free(r);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_scan(c, "", 0, 0, 10, 100, &it), QS_INVAL);
    CHECK_RC(qs_queue_scan(c, "q", 1, 0, 0, 100, &it), QS_INVAL);
    CHECK_RC(qs_queue_scan(c, "q", 1, UINT64_MAX, 1, 100, &it), QS_INVAL);
    CHECK_RC(qs_queue_scan(c, "q", 1, 0, 1, 100, NULL), QS_INVAL);
    uint64_t after = 0, seen = 0;
    int calls = 0;
    for (;;) {
        REQUIRE_RC(qs_queue_scan(c, "q", 1, after, 64, 100, &it), 0);
        calls++;
        size_t n = it->count;
        for (size_t i = 0; i < n; i++) {
            int want = snprintf(val, sizeof val, "item%" PRIu64, seen);
            CHECK(it->off[i + 1] - it->off[i] == (uint64_t)want &&
                  memcmp(it->data + it->off[i], val, (size_t)want) == 0);
            CHECK(it->ids[i] > after);
            if (seen == 0)
                CHECK(it->ids[i] == reserved);      /* reserved ones included */
            after = it->ids[i];
            seen++;
        }
        qs_items_free(it);
        if (n == 0)
            break;
    }
    CHECK(seen == 1000);
    CHECK(calls > 1000 / 64);       /* max_bytes cut the batches short */
    REQUIRE_RC(qs_queue_scan(c, "none", 4, 0, 10, 100, &it), 0);
    CHECK(it->count == 0);
    qs_items_free(it);
    uint64_t len = 0;
    CHECK_RC(qs_queue_len(c, "q", 1, &len), 0);
    CHECK(len == 999);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void backup_copy(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(put_n(c, "a", 0, 5000, 300), 0);
    REQUIRE_RC(qs_queue_put(c, "q", 1, "job", 3, NULL), 0);
    const char *names = "xy";
    uint64_t noff[3] = {0, 1, 2};
    REQUIRE_RC(qs_queue_publish(c, 2, names, noff, "fan", 3, NULL), 0);
    char dest[700], other[700], stale[720];
    snprintf(dest, sizeof dest, "%s/copy", t.dir);
    snprintf(other, sizeof other, "%s/other", t.dir);
    snprintf(stale, sizeof stale, "%s/other-log", t.dir);
    CHECK_RC(qs_backup(c, NULL), QS_INVAL);
    CHECK_RC(qs_backup(c, ""), QS_INVAL);
    CHECK_RC(qs_backup(c, dest), 0);
    CHECK_RC(qs_backup(c, dest), EEXIST);
    FILE *f = fopen(stale, "w");
    REQUIRE(f != NULL);
    fputs("stale", f);
    fclose(f);
    CHECK_RC(qs_backup(c, other), EEXIST);
    CHECK(tc_file_size(other) < 0);
    uint64_t done = 0, total = 0;
    CHECK_RC(qs_progress(c, &done, &total), 0);
    CHECK(done == total && total == 5000 + 1 + 2 + 2);  /* items, payload, count */
    CHECK_RC(qs_progress(c, NULL, &total), QS_INVAL);
    char log[720];
    snprintf(log, sizeof log, "%s-log", dest);
    CHECK(tc_file_size(log) < 0);
    qs_casket *b = tc_open(dest, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(records_of(b, &rc) == 5000);
    CHECK_RC(check_ok(b), 0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_get(b, "x", 1, 1, 0, &it), QS_READONLY);
    CHECK_RC(qs_queue_peek(b, "y", 1, 5, &it), 0);
    if (it) {
        CHECK(it->count == 1 && memcmp(it->data, "fan", 3) == 0);
        qs_items_free(it);
    }
    CHECK_RC(qs_close(b), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    RUN(snapshot_holds_one_commit);
    RUN(snapshot_too_old);
    RUN(queue_scan);
    RUN(backup_copy);
    return tc_summary();
}
