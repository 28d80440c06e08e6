/*
 * test_errors.c -- the error conventions of qstore.h: qs_strerror's table
 * (every code qstore.h names from QS_NOTFOUND to QS_LAST_ERRCODE has its own
 * text, the numbers between that it does not name none; a code
 * added without one already stops the build, as errors.c asserts the
 * table's size, and this finds a gap inside it), the rule for closed and
 * forked handles, checked for every call it covers (out-parameters left
 * as they were), and each function's @return and @fail: QS_INVAL for every
 * NULL or bad argument a function documents, a sample of its other
 * failures with the state of its out-parameters, and the deferred putdup
 * errors (applied by a later call, which reports them).
 */
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "test_common.h"

static int records_zero(qs_casket *c)
{
    uint64_t n = 99;
    return qs_records(c, &n) == 0 && n == 0;
}

static int queue_records_zero(qs_casket *c)
{
    uint64_t n = 99;
    return qs_queue_records(c, &n) == 0 && n == 0;
}

/* The codes qstore.h names, each once: the range from QS_NOTFOUND to
 * QS_LAST_ERRCODE has no gap (checked below), so a new code must be added
 * here too. */
static const int named_codes[] = {
    QS_NOTFOUND, QS_KEYEXIST, QS_CORRUPT, QS_NOTCASKET, QS_VERSION, QS_LOCKED, QS_READONLY,
    QS_TXN, QS_INVAL, QS_NOMEM, QS_TOOBIG, QS_CLOSED, QS_FULL, QS_NOTRESERVED, QS_FORKED,
    QS_RESFULL, QS_SNAPSHOT_OLD, QS_INTR, QS_NOTFILE, QS_NOATTACH, QS_QFULL, QS_QBOUND,
    QS_TIMEDOUT, QS_STREAM_NOGROUP, QS_STREAM_NOTPENDING, QS_STREAM_TRIMMED, QS_WOULDBLOCK,
};

static int is_named(int rc)
{
    for (size_t i = 0; i < sizeof named_codes / sizeof named_codes[0]; i++)
        if (named_codes[i] == rc)
            return 1;
    return 0;
}

static void every_code_has_its_own_text(void)
{
    const char *unknown = qs_strerror(QS_LAST_ERRCODE - 1);
    CHECK(strcmp(unknown, "unknown error") == 0);
    CHECK(strcmp(qs_strerror(QS_NOTFOUND + 1), unknown) == 0);
    CHECK(strcmp(qs_strerror(INT32_MIN), unknown) == 0);
    CHECK(is_named(QS_LAST_ERRCODE));
    CHECK(sizeof named_codes / sizeof named_codes[0] == (size_t)(QS_NOTFOUND - QS_LAST_ERRCODE + 1));
    for (int rc = QS_NOTFOUND; rc >= QS_LAST_ERRCODE; rc--) {
        const char *text = qs_strerror(rc);
        REQUIRE(text != NULL);
        if (!is_named(rc)) {
            CHECK(strcmp(text, unknown) == 0);
            continue;
        }
        if (strcmp(text, unknown) == 0 || !*text)
            printf("  code %d has no text\n", rc);
        CHECK(strcmp(text, unknown) != 0 && *text);
        for (int other = rc + 1; other <= QS_NOTFOUND; other++)
            CHECK(!is_named(other) || strcmp(text, qs_strerror(other)) != 0);
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
    EXPECT(qs_commit_nosync(c));
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
    EXPECT(qs_stream_configure(c, "s", 1, 1, 0, 1));
    EXPECT(qs_stream_append(c, "s", 1, 1, "v", 1, lens, 1, &n));
    EXPECT(qs_stream_read(c, "s", 1, 0, 1, &it));
    EXPECT(qs_stream_len(c, "s", 1, &n));
    EXPECT(qs_stream_group(c, "s", 1, "g", 1, QS_STREAM_FIRST, 0));
    EXPECT(qs_stream_read_group(c, "s", 1, "g", 1, "c", 1, 1, 0, 1, &it));
    EXPECT(qs_stream_ack(c, "s", 1, "g", 1, 1, ids, &n));
    EXPECT(qs_stream_pending(c, "s", 1, "g", 1, &it));
    EXPECT(qs_stream_claim(c, "s", 1, "g", 1, "c", 1, 0, 1, 1, &it));
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

/* An out-parameter's value before a call, so a test can tell "set to
 * NULL/0" from "left as it was". */
#define UNSET_PTR ((void *)0x5eed)
#define UNSET_NUM 77777u

static int shut_down_keeps(int rc, void *p, uint64_t n)
{
    return rc == QS_CLOSED && p == UNSET_PTR && n == UNSET_NUM;
}

/* qstore.h: out-parameters are untouched by QS_CLOSED (found before the
 * function looks at its other arguments). */
static void closed_handle_leaves_out_parameters(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_put(c, "k", 1, "v", 1), 0);
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    CHECK_RC(qs_shutdown(c), 0);
    void *v = UNSET_PTR;
    size_t vn = UNSET_NUM, on = UNSET_NUM;
    uint64_t n = UNSET_NUM, m = UNSET_NUM;
    CHECK(shut_down_keeps(qs_get(c, "k", 1, &v, &vn), v, vn));
    CHECK(shut_down_keeps(qs_getdup(c, "k", 1, &v, &on, &n), v, n));
    CHECK(on == UNSET_NUM);
    n = UNSET_NUM;
    CHECK(shut_down_keeps(qs_count(c, "k", 1, &n), UNSET_PTR, n));
    CHECK(shut_down_keeps(qs_outlist(c, "k", 1, &n), UNSET_PTR, n));
    CHECK(shut_down_keeps(qs_progress(c, &n, &m), UNSET_PTR, m));
    qs_cursor *cur2 = UNSET_PTR;
    CHECK(shut_down_keeps(qs_cursor_open(c, &cur2), cur2, UNSET_NUM));
    qs_casket *snap = UNSET_PTR;
    CHECK(shut_down_keeps(qs_snapshot_open(c, 0, 0, &snap), snap, UNSET_NUM));
    qs_items *it = UNSET_PTR;
    CHECK(shut_down_keeps(qs_queue_get(c, "q", 1, 1, 0, &it), it, UNSET_NUM));
    CHECK(shut_down_keeps(qs_queue_len(c, "q", 1, &n), UNSET_PTR, n));
    void *k = UNSET_PTR;
    if (cur) {
        CHECK(shut_down_keeps(qs_cursor_get(cur, &k, &vn, &v, &on), k, vn));
        CHECK(v == UNSET_PTR);
        qs_cursor_close(cur);
    }
    char msg[16] = "x";
    CHECK_RC(qs_check(c, msg, sizeof msg), QS_CLOSED);
    CHECK(strcmp(msg, "x") == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Every function whose @return names QS_INVAL for a NULL or bad argument
 * returns it, with its out-parameters as its @fail says. */
static void bad_arguments_are_qs_inval(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_options o;
    qs_casket *c = UNSET_PTR;
    qs_options_init(&o);
    CHECK_RC(qs_open(NULL, &o, &c), QS_INVAL);
    CHECK(c == NULL);
    c = UNSET_PTR;
    CHECK_RC(qs_open("", &o, &c), QS_INVAL);
    CHECK(c == NULL);
    CHECK_RC(qs_open(t.path, &o, NULL), QS_INVAL);
    double timeouts[] = {-1.0, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        qs_options_init(&o);
        o.lock_timeout = timeouts[i];
        c = UNSET_PTR;
        CHECK_RC(qs_open(t.path, &o, &c), QS_INVAL);
        CHECK(c == NULL);
    }
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW + 1;
    c = UNSET_PTR;
    CHECK_RC(qs_open(t.path, &o, &c), QS_INVAL);
    CHECK(c == NULL);
    qs_options_init(&o);
    o.perm = 010000;
    CHECK_RC(qs_open(t.path, &o, &c), QS_INVAL);
    CHECK(tc_file_size(t.path) < 0);    /* nothing made */

    /* a NULL handle */
    CHECK_RC(qs_shutdown(NULL), QS_INVAL);
    CHECK_RC(qs_close(NULL), 0);
    CHECK_RC(qs_begin(NULL), QS_INVAL);
    CHECK_RC(qs_commit(NULL), QS_INVAL);
    CHECK_RC(qs_commit_nosync(NULL), QS_INVAL);
    CHECK_RC(qs_abort(NULL), QS_INVAL);
    CHECK(qs_in_transaction(NULL) == 0);
    CHECK(qs_corrupt_page(NULL) == 0);
    CHECK_RC(qs_put(NULL, "k", 1, "v", 1), QS_INVAL);
    CHECK_RC(qs_sync(NULL), QS_INVAL);
    CHECK_RC(qs_compact(NULL), QS_INVAL);
    CHECK_RC(qs_check(NULL, NULL, 0), QS_INVAL);
    CHECK_RC(qs_cursor_first(NULL), QS_INVAL);
    CHECK_RC(qs_cursor_next(NULL), QS_INVAL);
    CHECK_RC(qs_cursor_out(NULL), QS_INVAL);
    CHECK(qs_queue_put_id(NULL, "v", 1) == QS_INVAL);

    int rc;
    c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    /* records: NULL pointers with a length */
    CHECK_RC(qs_put(c, NULL, 1, "v", 1), QS_INVAL);
    CHECK_RC(qs_put(c, "k", 1, NULL, 1), QS_INVAL);
    CHECK_RC(qs_putkeep(c, NULL, 1, "v", 1), QS_INVAL);
    CHECK_RC(qs_putdup(c, "k", 1, NULL, 1), QS_INVAL);
    uint64_t koff[3] = {0, 1, 2}, back[3] = {0, 2, 1};
    CHECK_RC(qs_putdup_many(c, 1, "k", NULL, "v", koff), QS_INVAL);
    CHECK_RC(qs_putdup_many(c, 2, "kk", back, "vv", koff), QS_INVAL);
    CHECK_RC(qs_putdup_many(c, 1, NULL, koff, "v", koff), QS_INVAL);
    CHECK_RC(qs_putdup_many(c, UINT32_MAX, "k", koff, "v", koff), QS_INVAL);
    void *v = UNSET_PTR;
    size_t vn = UNSET_NUM;
    uint64_t n = UNSET_NUM;
    CHECK_RC(qs_get(c, "k", 1, NULL, &vn), QS_INVAL);
    CHECK(vn == UNSET_NUM);
    CHECK_RC(qs_get(c, NULL, 1, &v, &vn), QS_INVAL);
    CHECK(v == NULL && vn == 0);
    v = UNSET_PTR;
    CHECK_RC(qs_getdup(c, "k", 1, &v, &vn, NULL), QS_INVAL);
    CHECK(v == UNSET_PTR);
    CHECK_RC(qs_getdup(c, NULL, 1, &v, &vn, &n), QS_INVAL);
    CHECK(v == NULL && vn == 0 && n == 0);
    CHECK_RC(qs_count(c, "k", 1, NULL), QS_INVAL);
    n = UNSET_NUM;
    CHECK_RC(qs_count(c, NULL, 1, &n), QS_INVAL);
    CHECK(n == 0);
    CHECK_RC(qs_records(c, NULL), QS_INVAL);
    CHECK_RC(qs_out(c, NULL, 1), QS_INVAL);
    n = UNSET_NUM;
    CHECK_RC(qs_outlist(c, NULL, 1, &n), QS_INVAL);
    CHECK(n == 0);
    CHECK(records_zero(c));
    /* maintenance, snapshots, stat */
    CHECK_RC(qs_check(c, NULL, 0), 0);      /* no message buffer is allowed */
    qs_casket *snap = UNSET_PTR;
    CHECK_RC(qs_snapshot_open(c, 0, 0, NULL), QS_INVAL);
    CHECK_RC(qs_snapshot_open(NULL, 0, 0, &snap), QS_INVAL);
    CHECK(snap == UNSET_PTR);
    CHECK_RC(qs_backup(c, NULL), QS_INVAL);
    CHECK_RC(qs_backup(c, ""), QS_INVAL);
    n = UNSET_NUM;
    CHECK_RC(qs_progress(c, NULL, &n), QS_INVAL);
    CHECK(n == UNSET_NUM);
    CHECK_RC(qs_stat_get(c, NULL), QS_INVAL);
    /* cursors */
    qs_cursor *cur = UNSET_PTR;
    CHECK_RC(qs_cursor_open(c, NULL), QS_INVAL);
    CHECK_RC(qs_cursor_open(NULL, &cur), QS_INVAL);
    CHECK(cur == UNSET_PTR);
    cur = NULL;
    REQUIRE_RC(qs_cursor_open(c, &cur), 0);
    CHECK_RC(qs_cursor_jump(cur, NULL, 1), QS_INVAL);
    void *k = UNSET_PTR;
    CHECK_RC(qs_cursor_get(cur, &k, NULL, NULL, NULL), QS_INVAL);
    CHECK(k == UNSET_PTR);
    CHECK_RC(qs_cursor_get(cur, NULL, NULL, &v, NULL), QS_INVAL);
    CHECK_RC(qs_cursor_read(cur, 1, 0, NULL, &vn, &n), QS_INVAL);
    qs_cursor_close(cur);
    /* queues: bad names, then each call's own arguments */
    char longname[QS_MAX_QUEUE_NAME + 1];
    memset(longname, 'n', sizeof longname);
    uint64_t id = UNSET_NUM;
    CHECK_RC(qs_queue_put(c, NULL, 1, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, "q", 0, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, longname, sizeof longname, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, "q", 1, NULL, 1, &id), QS_INVAL);
    CHECK(id == UNSET_NUM);
    qs_queue *q = UNSET_PTR;
    CHECK_RC(qs_queue_new(NULL, "q", 1, &q), QS_INVAL);
    CHECK(q == NULL);
    q = UNSET_PTR;
    CHECK_RC(qs_queue_new(c, "", 0, &q), QS_INVAL);
    CHECK(q == NULL);
    CHECK_RC(qs_queue_new(c, "q", 1, NULL), QS_INVAL);
    REQUIRE_RC(qs_queue_new(c, "q", 1, &q), 0);
    CHECK(qs_queue_put_id(q, NULL, 1) == QS_INVAL);
    qs_queue_free(q);
    uint32_t lens[2] = {1, 1};
    CHECK_RC(qs_queue_put_many(c, "q", 1, 2, "vv", 2, NULL, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 2, NULL, 2, lens, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 2, "vvv", 3, lens, &id), QS_INVAL);
    const unsigned char bad_lead[6] = {QS_FRAME_BYTES + 1, 1, 0, 0, 0, 'v'};
    const unsigned char short_frame[6] = {QS_FRAME_BYTES, 2, 0, 0, 0, 'v'};
    CHECK_RC(qs_queue_put_framed(c, "q", 1, 1, bad_lead, 6, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "q", 1, 1, short_frame, 6, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "q", 1, 1, NULL, 6, &id), QS_INVAL);
    uint64_t noff[3] = {0, 1, 2};
    CHECK_RC(qs_queue_publish(c, 0, "q", noff, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 1, NULL, noff, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 2, "qq", noff, "v", 1, &id), QS_INVAL);
    CHECK(id == UNSET_NUM);
    CHECK(queue_records_zero(c));
    qs_items *it = UNSET_PTR;
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 0, NULL), QS_INVAL);
    CHECK_RC(qs_queue_get(c, "q", 1, 0, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_get(c, "q", 1, 1, NAN, &it), QS_INVAL);
    CHECK(it == NULL);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_peek(c, "q", 1, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_scan(c, "q", 1, 0, 0, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    CHECK_RC(qs_queue_scan(c, "q", 1, UINT64_MAX, 1, 0, &it), QS_INVAL);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, -1.0, &it), QS_INVAL);
    CHECK(it == NULL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, NAN, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve_many(c, "q", 1, 0, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_ack(c, "", 0, 1, 1), QS_INVAL);
    uint64_t ids[2] = {1, 2};
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 0, ids, 1), QS_INVAL);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 1, NULL, 1), QS_INVAL);
    CHECK_RC(qs_queue_release(c, NULL, 1, 1, 1), QS_INVAL);
    CHECK_RC(qs_queue_len(c, "q", 1, NULL), QS_INVAL);
    n = UNSET_NUM;
    CHECK_RC(qs_queue_len(c, "", 0, &n), QS_INVAL);
    CHECK(n == 0);
    n = UNSET_NUM;
    CHECK_RC(qs_queue_clear(c, NULL, 1, &n), QS_INVAL);
    CHECK(n == 0);
    CHECK_RC(qs_queue_list(c, NULL), QS_INVAL);
    CHECK_RC(qs_queue_records(c, NULL), QS_INVAL);
    CHECK(!qs_in_transaction(c));
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* A sample of each function's other documented failures, and the state
 * its @fail gives the out-parameters. */
static void documented_failures(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_put(c, "k", 1, "v", 1), 0);
    static unsigned char big[QS_MAX_KEY + 1];
    void *v = UNSET_PTR;
    size_t vn = UNSET_NUM;
    uint64_t n = UNSET_NUM;
    CHECK_RC(qs_get(c, "none", 4, &v, &vn), QS_NOTFOUND);
    CHECK(v == NULL && vn == 0);
    v = UNSET_PTR;
    CHECK_RC(qs_get(c, big, sizeof big, &v, &vn), QS_TOOBIG);
    CHECK(v == NULL);
    v = UNSET_PTR;
    CHECK_RC(qs_getdup(c, "none", 4, &v, &vn, &n), 0);
    CHECK(v == NULL && vn == 0 && n == 0);
    n = UNSET_NUM;
    CHECK_RC(qs_count(c, big, sizeof big, &n), QS_TOOBIG);
    CHECK(n == 0);
    CHECK_RC(qs_putkeep(c, "k", 1, "w", 1), QS_KEYEXIST);
    CHECK_RC(qs_out(c, "none", 4), QS_NOTFOUND);
    n = UNSET_NUM;
    CHECK_RC(qs_outlist(c, "none", 4, &n), 0);
    CHECK(n == 0);
    /* transactions */
    CHECK_RC(qs_commit(c), QS_TXN);
    CHECK_RC(qs_commit_nosync(c), QS_TXN);
    CHECK_RC(qs_abort(c), QS_TXN);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_begin(c), QS_TXN);
    CHECK_RC(qs_sync(c), QS_TXN);
    CHECK_RC(qs_compact(c), QS_TXN);
    char msg[64] = "x";
    CHECK_RC(qs_check(c, msg, sizeof msg), QS_TXN);
    CHECK(msg[0] == 0);
    CHECK(qs_in_transaction(c));
    CHECK_RC(qs_abort(c), 0);
    /* cursors, unpositioned */
    qs_cursor *cur = NULL;
    REQUIRE_RC(qs_cursor_open(c, &cur), 0);
    void *k = UNSET_PTR;
    v = UNSET_PTR;
    size_t kn = UNSET_NUM;
    CHECK_RC(qs_cursor_get(cur, &k, &kn, &v, &vn), QS_NOTFOUND);
    CHECK(k == NULL && v == NULL && kn == UNSET_NUM);
    CHECK_RC(qs_cursor_next(cur), QS_NOTFOUND);
    CHECK_RC(qs_cursor_out(cur), QS_NOTFOUND);
    v = UNSET_PTR;
    n = UNSET_NUM;
    CHECK_RC(qs_cursor_read(cur, 5, 0, &v, &vn, &n), 0);
    CHECK(v == NULL && vn == 0 && n == 0);
    CHECK_RC(qs_cursor_jump(cur, "z", 1), QS_NOTFOUND);
    CHECK_RC(qs_cursor_jump(cur, big, sizeof big), QS_TOOBIG);
    qs_cursor_close(cur);
    /* queues */
    qs_items *it = UNSET_PTR;
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 0, &it), QS_NOTFOUND);
    CHECK(it == NULL);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_peek(c, "q", 1, 1, &it), QS_NOTFOUND);
    CHECK(it == NULL);
    CHECK_RC(qs_queue_scan(c, "q", 1, 0, 1, 0, &it), 0);
    CHECK(it && it->count == 0);
    qs_items_free(it);
    n = UNSET_NUM;
    CHECK_RC(qs_queue_len(c, "nothing", 7, &n), 0);
    CHECK(n == 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, 1, 1), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(c, "q", 1, 1, 1), QS_NOTRESERVED);
    uint32_t lens[2] = {1, 1};
    uint64_t first = UNSET_NUM;
    CHECK_RC(qs_queue_put_many(c, "q", 1, 0, NULL, 0, lens, &first), 0);
    CHECK(first == 0);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 2, "ab", 2, lens, &first), 0);
    it = NULL;
    REQUIRE_RC(qs_queue_reserve_many(c, "q", 1, 2, 0, 0, &it), 0);
    REQUIRE(it && it->count == 2);
    /* ids not increasing: QS_INVAL once the first is found reserved, and
     * the reservations are as they were */
    uint64_t rev[2] = {it->ids[1], it->ids[0]};
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 2, rev, it->token), QS_INVAL);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 2, it->ids, it->token + 1), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 2, it->ids, it->token), 0);
    qs_items_free(it);
    /* a second handle: compaction needs the casket to itself */
    qs_casket *d = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    CHECK_RC(rc, 0);
    CHECK_RC(qs_compact(c), QS_LOCKED);
    qs_close(d);
    CHECK_RC(qs_compact(c), 0);
    /* backup over an existing file */
    char dest[700];
    snprintf(dest, sizeof dest, "%s-log", t.path);
    CHECK_RC(qs_backup(c, dest), EEXIST);
    CHECK_RC(qs_close(c), 0);
    /* read-only */
    c = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_put(c, "k", 1, "w", 1), QS_READONLY);
    CHECK_RC(qs_begin(c), QS_READONLY);
    CHECK_RC(qs_compact(c), QS_READONLY);
    CHECK_RC(qs_sync(c), 0);               /* nothing to do */
    CHECK_RC(qs_putdup_many(c, 0, NULL, NULL, NULL, NULL), QS_READONLY);
    uint64_t id = UNSET_NUM;
    CHECK_RC(qs_queue_put(c, "q", 1, "v", 1, &id), QS_READONLY);
    CHECK(id == UNSET_NUM);
    it = UNSET_PTR;
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 0, &it), QS_READONLY);
    CHECK(it == NULL);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* "Deferred putdup errors": a putdup buffered in a transaction whose
 * application fails (here: the log may not grow, RLIMIT_FSIZE, so the
 * pages it dirties cannot spill) reports the error from the next call that
 * reads, then from every write, and qs_commit aborts and returns it. */
static void deferred_putdup_error(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 32 * 4096, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_put(c, "before", 6, "x", 1), 0);
    qs_stat st;
    REQUIRE_RC(qs_stat_get(c, &st), 0);
    CHECK_RC(qs_begin(c), 0);
    unsigned char val[200];
    memset(val, 'v', sizeof val);
    int putrc = 0;
    for (int i = 0; i < 5000 && putrc == 0; i++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "k%05d", i);
        putrc = qs_putdup(c, key, (size_t)kl, val, sizeof val);
    }
    CHECK_RC(putrc, 0);                     /* buffered: nothing failed yet */
    /* The limit is on every file of the process, stdout's too: nothing is
     * printed while it holds. */
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = st.log_bytes + 3 * QS_PAGE_SIZE;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    uint64_t n = UNSET_NUM;
    int count_rc = qs_count(c, "k00001", 6, &n);       /* applies them */
    int put_rc = qs_put(c, "after", 5, "y", 1);
    int putdup_rc = qs_putdup(c, "after", 5, "y", 1);
    int in_txn = qs_in_transaction(c);
    int commit_rc = qs_commit(c);
    int restored = setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_xfsz);
    REQUIRE(restored == 0);
    fflush(stdout);
    CHECK_RC(count_rc, EFBIG);      /* the read reports the putdups' error */
    CHECK(n == 0);
    CHECK_RC(put_rc, EFBIG);        /* the transaction is spoiled */
    CHECK_RC(putdup_rc, EFBIG);
    CHECK(in_txn);
    CHECK_RC(commit_rc, EFBIG);     /* and aborted */
    CHECK(!qs_in_transaction(c));
    n = UNSET_NUM;
    CHECK_RC(qs_records(c, &n), 0);
    CHECK(n == 1);
    CHECK_RC(qs_put(c, "later", 5, "z", 1), 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    RUN(every_code_has_its_own_text);
    RUN(success_and_errno_values);
    RUN(every_call_on_a_closed_handle_is_qs_closed);
    RUN(every_call_in_a_forked_child_is_qs_forked);
    RUN(closed_handle_leaves_out_parameters);
    RUN(bad_arguments_are_qs_inval);
    RUN(documented_failures);
    RUN(deferred_putdup_error);
    return tc_summary();
}
