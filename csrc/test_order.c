/*
 * test_order.c -- priorities and delays of queue items (qorder.c,
 * "Priorities and delays" in qstore.h): the order get, reserve and peek
 * hand items out in, acks and clears of priority items, delayed puts and
 * releases on a fixed test clock (qs_queue_test_clock), their counts in
 * len and qs_queue_delayed, transactions, reopen, bad arguments (state
 * unchanged), a reserved priority item at the tree's very end, many items
 * over every priority across leaf splits, scans over every run in id
 * order, a blocked get woken by a due
 * time on the real clock, and a SIGKILLed writer whose delayed items
 * come back with their due times.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "test_common.h"

#define T0 2000000000.0     /* the test clock's start, seconds */

static int put_o(qs_casket *c, const char *q, const char *v, double delay, int prio,
                 uint64_t *id)
{
    uint32_t len = (uint32_t)strlen(v);
    return qs_queue_put_order(c, q, strlen(q), 1, v, len, &len, delay, prio, id);
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    int rc = qs_queue_len(c, q, strlen(q), &n);
    return rc ? UINT64_MAX : n;
}

static uint64_t qdelayed(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    int rc = qs_queue_delayed(c, q, strlen(q), &n);
    return rc ? UINT64_MAX : n;
}

/* Takes every available item (no wait) and compares the payloads with
 * want, a space-separated list ("" for none). */
static int drain_is(qs_casket *c, const char *q, const char *want)
{
    qs_items *it = NULL;
    int rc = qs_queue_get(c, q, strlen(q), 100000, 0, &it);
    char got[4096] = "";
    size_t at = 0;
    for (size_t i = 0; rc == 0 && i < it->count; i++) {
        size_t n = (size_t)(it->off[i + 1] - it->off[i]);
        if (at + n + 2 >= sizeof got)
            break;
        if (i)
            got[at++] = ' ';
        memcpy(got + at, it->data + it->off[i], n);
        at += n;
        got[at] = 0;
    }
    qs_items_free(it);
    if (rc && rc != QS_NOTFOUND) {
        printf("  drain_is(%s): rc %d (%s)\n", q, rc, qs_strerror(rc));
        return 0;
    }
    if (strcmp(got, want) != 0) {
        printf("  drain_is(%s): got \"%s\", want \"%s\"\n", q, got, want);
        return 0;
    }
    return 1;
}

static void priorities(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    const int prio[] = {0, 3, 9, 3, 0, 1, 9, 5};
    const char *val[] = {"a0", "b3", "c9", "d3", "e0", "f1", "g9", "h5"};
    for (int i = 0; i < 8; i++)
        CHECK_RC(put_o(c, "q", val[i], 0, prio[i], NULL), 0);
    CHECK(qlen(c, "q") == 8);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 3, &it), 0);
    CHECK(it->count == 3 && memcmp(it->data, "c9g9h5", 6) == 0);
    qs_items_free(it);
    /* reserve the first, get the next: the reserved one is skipped */
    it = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &it), 0);
    CHECK(it->count == 1 && memcmp(it->data, "c9", 2) == 0);
    uint64_t rid = it->ids[0], tok = it->token;
    qs_items_free(it);
    CHECK(drain_is(c, "q", "g9 h5 b3 d3 f1 a0 e0"));
    CHECK(qlen(c, "q") == 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, rid, tok), 0);
    /* ack really removed it: a reopen finds nothing */
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == 0);
    uint64_t recs = 1;
    CHECK_RC(qs_queue_records(c, &recs), 0);
    CHECK(recs == 0);
    /* clear removes priority items too */
    CHECK_RC(put_o(c, "q", "x", 0, 4, NULL), 0);
    CHECK_RC(put_o(c, "q", "y", 0, 0, NULL), 0);
    uint64_t removed = 0;
    CHECK_RC(qs_queue_clear(c, "q", 1, &removed), 0);
    CHECK(removed == 2 && qlen(c, "q") == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* The item a reserve hides is the tree's last record (a priority run's
 * keys sort after every plain run's): the take must still go on to the
 * plain run. */
static void reserved_at_tree_end(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_o(c, "q", "plain", 0, 0, NULL), 0);
    CHECK_RC(put_o(c, "q", "high", 0, 7, NULL), 0);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &it), 0);
    CHECK(it->count == 1 && memcmp(it->data, "high", 4) == 0);
    qs_items_free(it);
    CHECK(drain_is(c, "q", "plain"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void delays(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_queue_test_clock(T0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t ia = 0, ib = 0, ic = 0;
    CHECK_RC(put_o(c, "q", "a", 10, 0, &ia), 0);
    CHECK_RC(put_o(c, "q", "b", 0, 0, &ib), 0);
    CHECK_RC(put_o(c, "q", "c", 5, 2, &ic), 0);
    CHECK(ia < ib && ib < ic);
    CHECK(qlen(c, "q") == 3 && qdelayed(c, "q") == 2);
    CHECK(drain_is(c, "q", "b"));
    qs_queue_test_clock(T0 + 5);
    CHECK(drain_is(c, "q", "c"));
    CHECK(qdelayed(c, "q") == 1);
    /* release with delay: back after it, with its id */
    qs_queue_test_clock(T0 + 10);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &it), 0);
    CHECK(it->count == 1 && it->ids[0] == ia);
    uint64_t tok = it->token;
    qs_items_free(it);
    CHECK_RC(qs_queue_release_delay(c, "q", 1, ia, tok, 3), 0);
    CHECK_RC(qs_queue_release_delay(c, "q", 1, ia, tok, 3), QS_NOTRESERVED);
    CHECK(qlen(c, "q") == 1 && qdelayed(c, "q") == 1);
    CHECK(drain_is(c, "q", ""));
    /* the due time is in the file */
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == 1 && qdelayed(c, "q") == 1);
    qs_queue_test_clock(T0 + 12.9);
    CHECK(drain_is(c, "q", ""));
    qs_queue_test_clock(T0 + 13);
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "q", 1, 5, 0, &it), 0);
    CHECK(it->count == 1 && it->ids[0] == ia);
    qs_items_free(it);
    CHECK(qlen(c, "q") == 0 && qdelayed(c, "q") == 0);
    /* clear removes delayed items */
    CHECK_RC(put_o(c, "q", "z", 100, 3, NULL), 0);
    uint64_t removed = 0;
    CHECK_RC(qs_queue_clear(c, "q", 1, &removed), 0);
    CHECK(removed == 1 && qlen(c, "q") == 0 && qdelayed(c, "q") == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

static void transactions(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_queue_test_clock(T0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_o(c, "q", "old", 0, 0, NULL), 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_o(c, "q", "hi", 0, 9, NULL), 0);
    CHECK_RC(put_o(c, "q", "later", 1, 0, NULL), 0);
    CHECK(qlen(c, "q") == 3 && qdelayed(c, "q") == 1);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 1 && qdelayed(c, "q") == 0);
    /* a due item moved and taken in an aborted transaction is back */
    CHECK_RC(put_o(c, "q", "later", 1, 5, NULL), 0);
    qs_queue_test_clock(T0 + 1);
    CHECK_RC(qs_begin(c), 0);
    CHECK(drain_is(c, "q", "later old"));
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(qs_begin(c), 0);
    CHECK(drain_is(c, "q", "later old"));
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 0 && qdelayed(c, "q") == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

static void bad_arguments(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_o(c, "q", "kept", 0, 0, NULL), 0);
    const double delays[] = {-1, -1e-9, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++)
        CHECK_RC(put_o(c, "q", "x", delays[i], 0, NULL), QS_INVAL);
    CHECK_RC(put_o(c, "q", "x", 0, 10, NULL), QS_INVAL);
    CHECK_RC(put_o(c, "q", "x", 0, -1, NULL), QS_INVAL);
    CHECK_RC(put_o(c, "", "x", 0, 1, NULL), QS_INVAL);
    uint32_t len = 5;      /* lengths not adding up */
    CHECK_RC(qs_queue_put_order(c, "q", 1, 1, "x", 1, &len, 0, 1, NULL), QS_INVAL);
    uint64_t first = 7;
    CHECK_RC(qs_queue_put_order(c, "q", 1, 0, NULL, 0, NULL, 0, 1, &first), 0);
    CHECK(first == 0);
    CHECK_RC(qs_queue_release_delay(c, "q", 1, 1, 1, NAN), QS_INVAL);
    CHECK_RC(qs_queue_release_delay(c, "q", 1, 1, 1, 2), QS_NOTRESERVED);
    CHECK_RC(qs_queue_delayed(c, "q", 1, NULL), QS_INVAL);
    /* the transaction goes on */
    CHECK_RC(put_o(c, "q", "kept2", 0, 1, NULL), 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 2 && qdelayed(c, "q") == 0);
    CHECK(drain_is(c, "q", "kept2 kept"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Many items over every priority, several leaves each, some delayed: the
 * order is priority then id, and the counts stay right across reopen. */
static void many(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_queue_test_clock(T0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    enum { N = 3000 };
    char v[64];
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        snprintf(v, sizeof v, "item-%06d-%040d", i, i);
        CHECK_RC(put_o(c, "q", v, i % 7 == 0 ? 1 + i % 3 : 0, i % 10, &ids[i]), 0);
    }
    CHECK(qlen(c, "q") == N);
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == N);
    qs_queue_test_clock(T0 + 10);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_get(c, "q", 1, N + 1, 0, &it), 0);
    CHECK(it->count == N);
    int ok = 1;
    for (size_t k = 1; k < it->count; k++) {
        int a = atoi((const char *)it->data + it->off[k - 1] + 5);
        int b = atoi((const char *)it->data + it->off[k] + 5);
        if (!(a % 10 > b % 10 || (a % 10 == b % 10 && it->ids[k - 1] < it->ids[k])))
            ok = 0;
    }
    CHECK(ok);
    qs_items_free(it);
    CHECK(qlen(c, "q") == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

/* qs_queue_scan reads every run and the delayed index, merged in id
 * order, and goes on after any id. */
static void scan_all_runs(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_queue_test_clock(T0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    enum { N = 600 };
    uint64_t ids[N];
    char v[32];
    for (int i = 0; i < N; i++) {
        snprintf(v, sizeof v, "v%d", i);
        CHECK_RC(put_o(c, "q", v, i % 4 == 0 ? (double)(N - i) : 0, i % 3 ? i % 10 : 0, &ids[i]),
                 0);
    }
    uint64_t after = 0;
    size_t seen = 0;
    int ok = 1;
    for (;;) {
        qs_items *it = NULL;
        REQUIRE_RC(qs_queue_scan(c, "q", 1, after, 7, 1 << 20, &it), 0);
        if (it->count == 0) {
            qs_items_free(it);
            break;
        }
        for (size_t k = 0; k < it->count; k++, seen++) {
            snprintf(v, sizeof v, "v%zu", seen);
            size_t n = (size_t)(it->off[k + 1] - it->off[k]);
            if (seen >= N || it->ids[k] != ids[seen] || n != strlen(v) ||
                memcmp(it->data + it->off[k], v, n) != 0)
                ok = 0;
        }
        after = it->ids[it->count - 1];
        qs_items_free(it);
    }
    CHECK(ok && seen == N);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int rc;
    double done;            /* when the get returned */
} waiter;

static void *waiter_main(void *p)
{
    waiter *w = p;
    qs_items *it = NULL;
    w->rc = qs_queue_get(w->c, "w", 1, 1, 20, &it);
    w->done = tc_now();
    qs_items_free(it);
    return NULL;
}

/* A get blocked (with a long timeout) on an empty queue: a delayed put
 * wakes it, it sleeps until the due time and takes the item then. */
static void wait_for_due(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    waiter w = {c, -1, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, waiter_main, &w) == 0);
    msleep(100);
    /* measured from the put, not from the thread's start (a loaded machine
     * may start it late; then it finds the item still delayed) */
    double put_at = tc_now();
    CHECK_RC(put_o(c, "w", "due", 0.3, 0, NULL), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.done - put_at >= 0.29 && w.done - put_at < 10);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static int crash_main(void *arg, int report, int release)
{
    const char *path = arg;
    (void)release;
    int rc;
    qs_casket *c = tc_open(path, QS_OPEN_WRITE, 1, 0, 0, &rc);
    if (!c)
        return 2;
    qs_queue_test_clock(T0);
    if (put_o(c, "q", "far", 100, 6, NULL) || put_o(c, "q", "plain", 0, 0, NULL))
        return 3;
    qs_items *it = NULL;
    if (qs_queue_reserve(c, "q", 1, 0, 0, &it) || it->count != 1)
        return 4;
    if (qs_queue_release_delay(c, "q", 1, it->ids[0], it->token, 200))
        return 5;
    char ok = 1;
    if (write(report, &ok, 1) != 1)
        return 6;
    for (;;)
        pause();
}

/* A writer SIGKILLed after its delayed puts and release committed
 * (sync on): they are all there after reopen, with their due times. */
static void crash_keeps_due_times(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_close(c), 0);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, crash_main, t.path) == 0);
    char ok = 0;
    CHECK(read(ch.report, &ok, 1) == 1 && ok == 1);
    CHECK(tc_child_kill(&ch) == 128 + SIGKILL);
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == 2 && qdelayed(c, "q") == 2);
    qs_queue_test_clock(T0 + 99);
    CHECK(drain_is(c, "q", ""));
    qs_queue_test_clock(T0 + 100);
    CHECK(drain_is(c, "q", "far"));
    qs_queue_test_clock(T0 + 199);
    CHECK(drain_is(c, "q", ""));
    qs_queue_test_clock(T0 + 200);
    CHECK(drain_is(c, "q", "plain"));
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(priorities);
    RUN(reserved_at_tree_end);
    RUN(delays);
    RUN(transactions);
    RUN(bad_arguments);
    RUN(many);
    RUN(scan_all_runs);
    RUN(wait_for_due);
    RUN(crash_keeps_due_times);
    return tc_summary();
}
