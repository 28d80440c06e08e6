/*
 * test_errors.c -- the error conventions of qstore.h: qs_strerror's table
 * (every code from QS_NOTFOUND to QS_LAST_ERRCODE has its own text; a code
 * added without one already stops the build, as errors.c asserts the
 * table's size, and this finds a gap inside it), and the rule for closed
 * and forked handles, checked for every call it covers.
 */
#include <sys/wait.h>

#include "test_common.h"

static void every_code_has_its_own_text(void)
{
    const char *unknown = qs_strerror(QS_LAST_ERRCODE - 1);
    CHECK(strcmp(unknown, "unknown error") == 0);
    CHECK(strcmp(qs_strerror(QS_NOTFOUND + 1), unknown) == 0);
    CHECK(strcmp(qs_strerror(INT32_MIN), unknown) == 0);
    for (int rc = QS_NOTFOUND; rc >= QS_LAST_ERRCODE; rc--) {
        const char *text = qs_strerror(rc);
        REQUIRE(text != NULL);
        if (strcmp(text, unknown) == 0 || !*text)
            printf("  code %d has no text\n", rc);
        CHECK(strcmp(text, unknown) != 0 && *text);
        for (int other = rc + 1; other <= QS_NOTFOUND; other++)
            CHECK(strcmp(text, qs_strerror(other)) != 0);
    }
}

static void success_and_errno_values(void)
{
    CHECK(strcmp(qs_strerror(QS_OK), "success") == 0);
    CHECK(strcmp(qs_strerror(ENOSPC), strerror(ENOSPC)) == 0);
    CHECK(strcmp(qs_strerror(EIO), strerror(EIO)) == 0);
}

/* Calls every function the "Closed and forked handles" rule covers, with
 * arguments that would succeed on an open handle, and counts (naming them)
 * the calls that do not return want. */
static int every_call_returns(qs_casket *c, qs_cursor *cur, qs_queue *q, const char *dir,
                              int want)
{
    int bad = 0;
    uint64_t n = 0, m = 0, ids[1] = {1}, koff[2] = {0, 1}, voff[2] = {0, 1};
    uint32_t lens[1] = {1};
    const unsigned char frame[6] = {QS_FRAME_BYTES, 1, 0, 0, 0, 'v'};
    void *v = NULL, *k = NULL;
    size_t vn = 0, kn = 0;
    qs_items *it = NULL;
    qs_casket *snap = NULL;
    qs_cursor *cur2 = NULL;
    qs_stat st;
    char msg[256], dest[700];
    snprintf(dest, sizeof dest, "%s/backup", dir);
#define EXPECT(call)                                                              \
    do {                                                                          \
        int64_t got_ = (call);                                                    \
        if (got_ != want) {                                                       \
            printf("  %s returned %lld, not %d\n", #call, (long long)got_, want); \
            bad++;                                                                \
        }                                                                         \
    } while (0)
    EXPECT(qs_begin(c));
    EXPECT(qs_commit(c));
    EXPECT(qs_abort(c));
    EXPECT(qs_put(c, "k", 1, "v", 1));
    EXPECT(qs_putkeep(c, "n", 1, "v", 1));
    EXPECT(qs_putdup(c, "k", 1, "v", 1));
    EXPECT(qs_putdup_many(c, 1, "k", koff, "v", voff));
    EXPECT(qs_get(c, "k", 1, &v, &vn));
    EXPECT(qs_getdup(c, "k", 1, &v, &vn, &n));
    EXPECT(qs_count(c, "k", 1, &n));
    EXPECT(qs_records(c, &n));
    EXPECT(qs_out(c, "k", 1));
    EXPECT(qs_outlist(c, "k", 1, &n));
    EXPECT(qs_sync(c));
    EXPECT(qs_check(c, msg, sizeof msg));
    EXPECT(qs_compact(c));
    EXPECT(qs_snapshot_open(c, 0, 0, &snap));
    EXPECT(qs_backup(c, dest));
    EXPECT(qs_progress(c, &n, &m));
    EXPECT(qs_stat_get(c, &st));
    EXPECT(qs_cursor_open(c, &cur2));
    EXPECT(qs_cursor_first(cur));
    EXPECT(qs_cursor_last(cur));
    EXPECT(qs_cursor_jump(cur, "k", 1));
    EXPECT(qs_cursor_next(cur));
    EXPECT(qs_cursor_prev(cur));
    EXPECT(qs_cursor_get(cur, &k, &kn, &v, &vn));
    EXPECT(qs_cursor_read(cur, 1, 0, &v, &vn, &n));
    EXPECT(qs_cursor_out(cur));
    EXPECT(qs_queue_put(c, "q", 1, "v", 1, &n));
    EXPECT(qs_queue_put_id(q, "v", 1));
    EXPECT(qs_queue_put_many(c, "q", 1, 1, "v", 1, lens, &n));
    EXPECT(qs_queue_put_framed(c, "q", 1, 1, frame, sizeof frame, &n));
    EXPECT(qs_queue_publish(c, 1, "q", koff, "v", 1, &n));
    EXPECT(qs_queue_get(c, "q", 1, 1, 0, &it));
    EXPECT(qs_queue_peek(c, "q", 1, 1, &it));
    EXPECT(qs_queue_scan(c, "q", 1, 0, 1, 0, &it));
    EXPECT(qs_queue_reserve(c, "q", 1, 0, 0, &it));
    EXPECT(qs_queue_reserve_many(c, "q", 1, 1, 0, 0, &it));
    EXPECT(qs_queue_ack(c, "q", 1, 1, 1));
    EXPECT(qs_queue_ack_many(c, "q", 1, 1, ids, 1));
    EXPECT(qs_queue_release(c, "q", 1, 1, 1));
    EXPECT(qs_queue_len(c, "q", 1, &n));
    EXPECT(qs_queue_clear(c, "q", 1, &n));
    EXPECT(qs_queue_list(c, &it));
    EXPECT(qs_queue_records(c, &n));
#undef EXPECT
    /* anything a call wrongly handed out, so valgrind names the call above
     * rather than a leak */
    qs_free(v);
    qs_free(k);
    qs_items_free(it);
    qs_cursor_close(cur2);
    qs_close(snap);
    return bad;
}

typedef struct {
    tc_tmp t;
    qs_casket *c;
    qs_cursor *cur;
    qs_queue *q;
} handles;

static int handles_open(handles *h)
{
    int rc;
    memset(h, 0, sizeof *h);
    if (tc_tmp_make(&h->t) != 0)
        return -1;
    h->c = tc_open(h->t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    if (!h->c)
        return rc;
    if ((rc = qs_put(h->c, "k", 1, "v", 1)) != 0 || (rc = qs_cursor_open(h->c, &h->cur)) != 0 ||
        (rc = qs_cursor_first(h->cur)) != 0 || (rc = qs_queue_new(h->c, "q", 1, &h->q)) != 0)
        return rc;
    return qs_queue_put_id(h->q, "v", 1) == 1 ? 0 : -1;
}

static void handles_close(handles *h)
{
    qs_queue_free(h->q);
    qs_cursor_close(h->cur);
    qs_close(h->c);
    tc_tmp_remove(&h->t);
}

static void every_call_on_a_closed_handle_is_qs_closed(void)
{
    handles h;
    int rc = handles_open(&h);
    CHECK_RC(rc, 0);
    if (rc == 0) {
        CHECK_RC(qs_shutdown(h.c), 0);
        CHECK_RC(every_call_returns(h.c, h.cur, h.q, h.t.dir, QS_CLOSED), 0);
        CHECK_RC(qs_shutdown(h.c), 0);
    }
    handles_close(&h);
}

static void every_call_in_a_forked_child_is_qs_forked(void)
{
    handles h;
    int rc = handles_open(&h);
    CHECK_RC(rc, 0);
    if (rc == 0) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int bad = every_call_returns(h.c, h.cur, h.q, h.t.dir, QS_FORKED);
            bad += qs_shutdown(h.c) != QS_FORKED;
            bad += qs_close(h.c) != 0;
            fflush(stdout);
            _exit(bad > 100 ? 100 : bad);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        if (WIFEXITED(status) && WEXITSTATUS(status))
            printf("  %d calls in the child did not return QS_FORKED\n", WEXITSTATUS(status));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        /* the parent's handle is untouched by what the child did */
        uint64_t n = 0;
        CHECK_RC(qs_queue_len(h.c, "q", 1, &n), 0);
        CHECK(n == 1);
    }
    handles_close(&h);
}

int main(void)
{
    RUN(every_code_has_its_own_text);
    RUN(success_and_errno_values);
    RUN(every_call_on_a_closed_handle_is_qs_closed);
    RUN(every_call_in_a_forked_child_is_qs_forked);
    return tc_summary();
}
