/*
 * test_stream.c -- the stream API (qstore.h, "streams"): append and replay
 * with ids kept, groups that each see every item and share it among their
 * consumers, pending entries (their layout), ack and its refusal (the id
 * named, nothing changed, the transaction usable), retention by maxlen,
 * max_age and the groups' horizon with QS_STREAM_TRIMMED after it, claim,
 * reopening, bad arguments, and blocked group reads woken by another
 * process's append and by qs_shutdown.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_common.h"

#define S "s", 1
#define G "g", 1

static qs_casket *open_s(const char *path, int mode)
{
    return tc_open(path, mode, 0, 0, 0, NULL);
}

/* Appends the NUL-terminated payloads, one transaction; the first id. */
static uint64_t append(qs_casket *c, double now, size_t n, const char *const *p)
{
    uint32_t lens[16];
    char buf[256];
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        lens[i] = (uint32_t)strlen(p[i]);
        memcpy(buf + at, p[i], lens[i]);
        at += lens[i];
    }
    uint64_t first = 0;
    int rc = qs_stream_append(c, S, n, buf, at, lens, now, &first);
    if (rc)
        printf("  qs_stream_append: %d %s\n", rc, qs_strerror(rc));
    return rc ? 0 : first;
}

static uint64_t append1(qs_casket *c, double now, const char *p)
{
    return append(c, now, 1, &p);
}

/* 1 when it holds exactly ids first..first+n-1 (and payload 0 is p0). */
static int items_are(const qs_items *it, uint64_t first, size_t n, const char *p0)
{
    if (!it || it->count != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (it->ids[i] != first + i)
            return 0;
    return !p0 || (it->off[1] - it->off[0] == strlen(p0) &&
                   memcmp(it->data + it->off[0], p0, strlen(p0)) == 0);
}

static int read_group(qs_casket *c, const char *consumer, size_t max, double timeout,
                      double now, qs_items **out)
{
    return qs_stream_read_group(c, S, G, consumer, strlen(consumer), max, timeout, now, out);
}

static uint64_t stream_len(qs_casket *c)
{
    uint64_t n = 99;
    return qs_stream_len(c, S, &n) == 0 ? n : 99;
}

static uint64_t records(qs_casket *c)
{
    uint64_t n = 0;
    qs_queue_records(c, &n);
    return n;
}

static void append_read_len(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    CHECK(stream_len(c) == 0);
    const char *p[] = {"a", "bb", "ccc"};
    uint64_t first = append(c, 1, 3, p);
    REQUIRE(first >= 1);
    CHECK(stream_len(c) == 3);
    qs_items *it = NULL;
    REQUIRE_RC(qs_stream_read(c, S, 0, 10, &it), 0);
    CHECK(items_are(it, first, 3, "a"));
    CHECK(it->off[3] - it->off[2] == 3);
    qs_items_free(it);
    REQUIRE_RC(qs_stream_read(c, S, first + 1, 1, &it), 0);
    CHECK(items_are(it, first + 1, 1, "bb"));
    qs_items_free(it);
    REQUIRE_RC(qs_stream_read(c, S, first + 3, 5, &it), 0);
    CHECK(it->count == 0);
    qs_items_free(it);
    CHECK(stream_len(c) == 3);      /* reading consumed nothing */
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void groups_share_and_pending(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    const char *p[] = {"1", "2", "3", "4"};
    uint64_t first = append(c, 1, 4, p);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_FIRST, 0), 0);
    CHECK_RC(qs_stream_group(c, S, "h", 1, QS_STREAM_FIRST, 0), 0);
    qs_items *a = NULL, *b = NULL, *h = NULL;
    REQUIRE_RC(read_group(c, "ca", 3, 0, 5, &a), 0);
    REQUIRE_RC(read_group(c, "cb", 3, 0, 6, &b), 0);
    CHECK(items_are(a, first, 3, "1"));
    CHECK(items_are(b, first + 3, 1, "4"));
    CHECK_RC(read_group(c, "ca", 3, 0, 7, &h), QS_NOTFOUND);
    CHECK(h == NULL);
    REQUIRE_RC(qs_stream_read_group(c, S, "h", 1, "x", 1, 10, 0, 8, &h), 0);
    CHECK(items_are(h, first, 4, "1"));
    qs_items_free(a);
    qs_items_free(b);
    qs_items_free(h);
    qs_items *pe = NULL;
    REQUIRE_RC(qs_stream_pending(c, S, G, &pe), 0);
    REQUIRE(pe->count == 4);
    for (size_t i = 0; i < 4; i++) {
        const uint8_t *e = pe->data + pe->off[i];
        double at;
        uint32_t n;
        memcpy(&at, e, 8);
        memcpy(&n, e + 8, 4);
        CHECK(pe->ids[i] == first + i);
        CHECK(n == 1);
        CHECK(at == (i < 3 ? 5.0 : 6.0));
        CHECK(pe->off[i + 1] - pe->off[i] == 14 && memcmp(e + 12, i < 3 ? "ca" : "cb", 2) == 0);
    }
    qs_items_free(pe);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void ack_refusal_changes_nothing(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    const char *p[] = {"1", "2", "3"};
    uint64_t first = append(c, 1, 3, p);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_FIRST, 0), 0);
    qs_items *it = NULL;
    REQUIRE_RC(read_group(c, "c", 2, 0, 1, &it), 0);
    qs_items_free(it);
    uint64_t before = records(c), bad = 7;
    CHECK_RC(qs_begin(c), 0);
    uint64_t ids[] = {first + 2, first};
    CHECK_RC(qs_stream_ack(c, S, G, 2, ids, &bad), QS_STREAM_NOTPENDING);
    CHECK(bad == first + 2);
    CHECK(records(c) == before);
    /* the transaction is still usable: the ack of a pending one goes */
    CHECK_RC(qs_stream_ack(c, S, G, 1, ids + 1, &bad), 0);
    CHECK(bad == 0);
    CHECK_RC(qs_commit(c), 0);
    /* the groups' horizon removed the first item */
    CHECK(stream_len(c) == 2);
    CHECK_RC(qs_stream_ack(c, S, G, 1, ids + 1, &bad), QS_STREAM_NOTPENDING);
    CHECK(bad == first);
    uint64_t twice[] = {first + 1, first + 1};
    CHECK_RC(qs_stream_ack(c, S, G, 2, twice, NULL), 0);
    CHECK_RC(qs_stream_ack(c, S, "nope", 4, 1, twice, NULL), QS_STREAM_NOGROUP);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void retention(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    CHECK_RC(qs_stream_configure(c, S, 2, 0, 1), 0);
    const char *p[] = {"1", "2", "3"};
    uint64_t first = append(c, 1, 3, p);
    CHECK(stream_len(c) == 2);
    qs_items *it = NULL;
    CHECK_RC(qs_stream_read(c, S, first, 10, &it), QS_STREAM_TRIMMED);
    CHECK(it == NULL);
    REQUIRE_RC(qs_stream_read(c, S, 0, 10, &it), 0);
    CHECK(items_are(it, first + 1, 2, "2"));
    qs_items_free(it);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_AT, first), QS_STREAM_TRIMMED);
    /* by age: items older than 10 s at the append go */
    CHECK_RC(qs_stream_configure(c, S, 0, 10, 1), 0);
    uint64_t late = append1(c, 20, "late");
    CHECK(stream_len(c) == 1);
    REQUIRE_RC(qs_stream_read(c, S, 0, 10, &it), 0);
    CHECK(items_are(it, late, 1, "late"));
    qs_items_free(it);
    /* a group starting at the last item; ack of everything empties it */
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_AT, late), 0);
    REQUIRE_RC(read_group(c, "c", 1, 0, 21, &it), 0);
    CHECK_RC(qs_stream_ack(c, S, G, 1, it->ids, NULL), 0);
    qs_items_free(it);
    CHECK(stream_len(c) == 0);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void claim_and_reopen(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    const char *p[] = {"1", "2"};
    uint64_t first = append(c, 1, 2, p);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_FIRST, 0), 0);
    qs_items *it = NULL;
    REQUIRE_RC(read_group(c, "dead", 2, 0, 100, &it), 0);
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    REQUIRE((c = open_s(t.path, QS_OPEN_WRITE)));
    REQUIRE_RC(qs_stream_claim(c, S, G, "new", 3, 10, 10, 105, &it), 0);
    CHECK(it->count == 0);       /* idle 5 s only */
    qs_items_free(it);
    REQUIRE_RC(qs_stream_claim(c, S, G, "new", 3, 10, 1, 110, &it), 0);
    CHECK(items_are(it, first, 1, "1"));
    qs_items_free(it);
    REQUIRE_RC(qs_stream_pending(c, S, G, &it), 0);
    REQUIRE(it->count == 2);
    uint32_t n0, n1;
    memcpy(&n0, it->data + it->off[0] + 8, 4);
    memcpy(&n1, it->data + it->off[1] + 8, 4);
    CHECK(n0 == 2 && n1 == 1);
    CHECK(memcmp(it->data + it->off[0] + 12, "new", 3) == 0);
    CHECK(memcmp(it->data + it->off[1] + 12, "dead", 4) == 0);
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void bad_arguments(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    uint32_t len = 1;
    uint64_t id = 5, n = 5;
    qs_items *it = (qs_items *)0x1;
    CHECK_RC(qs_stream_append(c, "", 0, 1, "x", 1, &len, 1, &id), QS_INVAL);
    CHECK(id == 0);
    CHECK_RC(qs_stream_append(c, S, 0, "x", 0, &len, 1, NULL), QS_INVAL);
    CHECK_RC(qs_stream_append(c, S, 1, "x", 2, &len, 1, NULL), QS_INVAL);
    CHECK_RC(qs_stream_append(c, S, 1, "x", 1, NULL, 1, NULL), QS_INVAL);
    CHECK_RC(qs_stream_append(c, S, 1, "x", 1, &len, NAN, NULL), QS_INVAL);
    CHECK_RC(qs_stream_append(c, S, 1, "x", 1, &len, -1, NULL), QS_INVAL);
    CHECK_RC(qs_stream_configure(c, S, 0, -1, 1), QS_INVAL);
    CHECK_RC(qs_stream_configure(c, S, 0, INFINITY, 1), QS_INVAL);
    CHECK_RC(qs_stream_group(c, S, "", 0, QS_STREAM_FIRST, 0), QS_INVAL);
    CHECK_RC(qs_stream_group(c, S, G, 7, 0), QS_INVAL);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_AT, 0), QS_INVAL);
    CHECK_RC(qs_stream_read(c, S, 0, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    CHECK_RC(qs_stream_read(c, S, 0, 1, NULL), QS_INVAL);
    CHECK_RC(qs_stream_len(c, S, NULL), QS_INVAL);
    CHECK_RC(read_group(c, "c", 1, 0, 1, &it), QS_STREAM_NOGROUP);
    CHECK_RC(qs_stream_pending(c, S, G, &it), QS_STREAM_NOGROUP);
    CHECK_RC(qs_stream_claim(c, S, G, "c", 1, 0, 1, 1, &it), QS_STREAM_NOGROUP);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_FIRST, 0), 0);
    CHECK_RC(read_group(c, "", 1, 0, 1, &it), QS_INVAL);
    CHECK_RC(read_group(c, "c", 0, 0, 1, &it), QS_INVAL);
    CHECK_RC(read_group(c, "c", 1, NAN, 1, &it), QS_INVAL);
    CHECK_RC(qs_stream_claim(c, S, G, "c", 1, -1, 1, 1, &it), QS_INVAL);
    CHECK_RC(qs_stream_claim(c, S, G, "c", 1, 0, 0, 1, &it), QS_INVAL);
    CHECK_RC(qs_stream_ack(c, S, G, 0, &id, NULL), QS_INVAL);
    CHECK_RC(qs_stream_ack(c, S, G, 1, NULL, NULL), QS_INVAL);
    CHECK(it == NULL);
    CHECK_RC(qs_stream_len(c, S, &n), 0);
    CHECK(n == 0);
    CHECK_RC(qs_close(c), 0);
    /* no handle */
    CHECK_RC(qs_stream_len(NULL, S, &n), QS_INVAL);
    tc_tmp_remove(&t);
}

/* ---- waits ---- */

static int append_later(void *arg, int report, int release)
{
    (void)release;
    qs_casket *c = open_s(arg, QS_OPEN_WRITE);
    if (!c)
        return 1;
    uint8_t ok = 1;
    if (write(report, &ok, 1) != 1)
        return 2;
    msleep(200);
    int rc = append1(c, 1, "child") ? 0 : 3;
    qs_close(c);
    return rc;
}

static void blocked_read_woken_by_other_process(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_FIRST, 0), 0);
    qs_items *it = NULL;
    CHECK_RC(read_group(c, "c", 1, 0.05, 1, &it), QS_NOTFOUND);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, append_later, t.path) == 0);
    uint8_t ok = 0;
    CHECK(read(ch.report, &ok, 1) == 1 && ok == 1);
    double t0 = tc_now();
    CHECK_RC(read_group(c, "c", 1, 60, 1, &it), 0);
    CHECK(tc_now() - t0 < 30);    /* woken by the append, not the timeout */
    CHECK(it && it->count == 1 && memcmp(it->data, "child", 5) == 0);
    qs_items_free(it);
    CHECK(tc_child_end(&ch) == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int rc;
} waiter;

static void *wait_forever(void *arg)
{
    waiter *w = arg;
    qs_items *it = NULL;
    w->rc = read_group(w->c, "c", 1, -1, 1, &it);
    qs_items_free(it);
    return NULL;
}

static void shutdown_ends_blocked_read(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = open_s(t.path, QS_OPEN_NEW);
    REQUIRE(c);
    CHECK_RC(qs_stream_group(c, S, G, QS_STREAM_LAST, 0), 0);
    waiter w = {c, 99};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, wait_forever, &w) == 0);
    msleep(100);
    CHECK_RC(qs_shutdown(c), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, QS_CLOSED);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    RUN(append_read_len);
    RUN(groups_share_and_pending);
    RUN(ack_refusal_changes_nothing);
    RUN(retention);
    RUN(claim_and_reopen);
    RUN(bad_arguments);
    RUN(blocked_read_woken_by_other_process);
    RUN(shutdown_ends_blocked_read);
    return tc_summary();
}
