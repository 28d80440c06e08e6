/*
 * test_dedup.c -- dedup keys (qs_queue_put_keyed, qdedup.h): a duplicate
 * stores nothing and gets the first item's id, while the item is in the
 * queue or within the window (the test clock); repeats within a batch;
 * the key going with its item (get, ack, clear, dead letter); expired keys
 * pruned; an abort forgetting a key, a reopen keeping it; refusals that
 * change nothing; qs_check on the records.  Run under valgrind and ASan
 * like the rest.
 */
#include "test_common.h"

#define T0 1000000.0

static int set_conf(qs_casket *c, const char *q, uint64_t maxsize, uint32_t maxdel, const char *dl,
                    double window)
{
    qs_queue_config cfg = {maxsize, maxdel, window, dl, dl ? strlen(dl) : 0};
    return qs_queue_config_set(c, q, strlen(q), &cfg);
}

/* One keyed put of v under key k (NULL: none); the id it returns in *id,
 * whether it stored the item in *stored. */
static int kput(qs_casket *c, const char *q, const char *v, const char *k, uint64_t *id,
                size_t *stored)
{
    uint32_t len = (uint32_t)strlen(v), kl = k ? (uint32_t)strlen(k) : QS_NO_KEY;
    return qs_queue_put_keyed(c, q, strlen(q), 1, v, len, &len, k, k ? kl : 0, &kl, 0, 0, id,
                              stored);
}

static uint64_t kid(qs_casket *c, const char *q, const char *v, const char *k)
{
    uint64_t id = 0;
    return kput(c, q, v, k, &id, NULL) == 0 ? id : 0;
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    return qs_queue_len(c, q, strlen(q), &n) == 0 ? n : UINT64_MAX;
}

static uint64_t records(qs_casket *c)
{
    uint64_t n = UINT64_MAX;
    return qs_queue_records(c, &n) == 0 ? n : UINT64_MAX;
}

/* Takes one item of q; its id (0: none). */
static uint64_t take(qs_casket *c, const char *q)
{
    qs_items *it = NULL;
    uint64_t id = 0;
    if (qs_queue_get(c, q, strlen(q), 1, 0, &it) == 0 && it->count == 1)
        id = it->ids[0];
    qs_items_free(it);
    return id;
}

static void duplicates_and_batches(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    qs_queue_test_clock(T0);
    size_t stored = 9;
    uint64_t first = 0, id = 0;
    CHECK_RC(kput(c, "a", "one", "k", &first, &stored), 0);
    CHECK(first > 0 && stored == 1);
    CHECK_RC(kput(c, "a", "two", "k", &id, &stored), 0);
    CHECK(id == first && stored == 0);
    CHECK(qlen(c, "a") == 1);
    /* a batch: against the queue, repeats within it, items without keys */
    const char vals[] = "12345";
    uint32_t lens[5] = {1, 1, 1, 1, 1};
    uint32_t kl[5] = {1, 1, QS_NO_KEY, 1, QS_NO_KEY};
    uint64_t ids[5] = {0};
    CHECK_RC(qs_queue_put_keyed(c, "a", 1, 5, vals, 5, lens, "kbb", 3, kl, 0, 0, ids, &stored),
             0);
    CHECK(stored == 3);
    CHECK(ids[0] == first && ids[1] > first && ids[3] == ids[1] && ids[2] > ids[1] &&
          ids[4] > ids[2]);
    CHECK(qlen(c, "a") == 4);
    /* a priority and a delayed item keep their keys too */
    uint32_t one = 1, k1 = 1;
    CHECK_RC(qs_queue_put_keyed(c, "a", 1, 1, "p", 1, &one, "p", 1, &k1, 0, 7, &id, NULL), 0);
    uint64_t p = id;
    CHECK_RC(qs_queue_put_keyed(c, "a", 1, 1, "d", 1, &one, "d", 1, &k1, 30, 0, &id, NULL), 0);
    uint64_t d = id;
    CHECK(kid(c, "a", "x", "p") == p && kid(c, "a", "x", "d") == d);
    CHECK(qlen(c, "a") == 6);
    /* reserved: still a duplicate; acked (no window): free */
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "a", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1 && it->ids[0] == p);
    CHECK(kid(c, "a", "x", "p") == p);
    CHECK_RC(qs_queue_ack(c, "a", 1, it->ids[0], it->token), 0);
    qs_items_free(it);
    CHECK(kid(c, "a", "x", "p") > d);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

static void window_and_pruning(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    qs_queue_test_clock(T0);
    CHECK_RC(set_conf(c, "w", 0, 0, NULL, 10), 0);
    uint64_t first = kid(c, "w", "one", "k");
    CHECK(take(c, "w") == first);
    qs_queue_test_clock(T0 + 9);
    CHECK(kid(c, "w", "two", "k") == first);  /* gone, in the window */
    CHECK(qlen(c, "w") == 0);
    qs_queue_test_clock(T0 + 11);
    uint64_t again = kid(c, "w", "three", "k");
    CHECK(again > first);
    /* in the queue past the window: still a duplicate */
    qs_queue_test_clock(T0 + 100);
    CHECK(kid(c, "w", "four", "k") == again);
    CHECK_RC(qs_queue_clear(c, "w", 1, NULL), 0);
    /* keys of items gone and windows passed do not pile up */
    uint64_t base = records(c);
    double now = T0 + 200;
    for (int i = 0; i < 300; i++) {
        char k[16];
        snprintf(k, sizeof k, "key%d", i);
        qs_queue_test_clock(now += 20);
        CHECK(kid(c, "w", "v", k) > 0);
        CHECK(take(c, "w") > 0);
    }
    CHECK(records(c) <= base + 4);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

static void transactions_and_reopen(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    qs_queue_test_clock(T0);
    CHECK_RC(set_conf(c, "t", 0, 0, NULL, 3600), 0);
    CHECK_RC(qs_begin(c), 0);
    uint64_t in = kid(c, "t", "in", "k");
    CHECK(in > 0 && kid(c, "t", "again", "k") == in);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "t") == 0);
    uint64_t first = kid(c, "t", "kept", "k");
    CHECK(first > 0);
    CHECK(take(c, "t") == first);
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(kid(c, "t", "after reopen", "k") == first);
    CHECK(qlen(c, "t") == 0);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

static void dead_letter_and_refusals(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    qs_queue_test_clock(T0);
    CHECK_RC(set_conf(c, "j", 2, 1, "dead", 5), 0);
    uint64_t first = kid(c, "j", "w", "k");
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1);
    CHECK_RC(qs_queue_release(c, "j", 1, it->ids[0], it->token), 0);
    qs_items_free(it);
    it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), QS_NOTFOUND);  /* dead-lettered */
    CHECK(qlen(c, "dead") == 1);
    CHECK(kid(c, "j", "x", "k") == first);
    qs_queue_test_clock(T0 + 6);
    uint64_t next = kid(c, "j", "x", "k");
    CHECK(next > first);
    /* full: a duplicate needs no room, a new key gets QS_QFULL */
    CHECK(kid(c, "j", "y", "m") > next);
    size_t stored = 7;
    uint64_t id = 5;
    CHECK_RC(kput(c, "j", "z", "k", &id, &stored), 0);
    CHECK(id == next && stored == 0);
    CHECK_RC(kput(c, "j", "z", "n", &id, &stored), QS_QFULL);
    CHECK(id == next && stored == 0);
    /* bad input: nothing stored, the transaction usable */
    uint32_t one = 1, kl0 = 0, kbig = QS_MAX_DEDUP_KEY + 1, k3 = 3;
    static char big[QS_MAX_DEDUP_KEY + 1];
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "", 0, &kl0, 0, 0, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, big, sizeof big, &kbig, 0, 0, &id,
                                NULL), QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "ab", 2, &k3, 0, 0, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "abc", 3, NULL, 0, 0, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "abcd", 4, &k3, 0, 0, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "abc", 3, &k3, -1, 0, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "abc", 3, &k3, 0, 10, &id, NULL),
             QS_INVAL);
    CHECK_RC(qs_queue_put_keyed(c, "q", 1, 1, "v", 1, &one, "abc", 3, &k3, 0, 0, &id, NULL), 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 1);
    CHECK(check_ok(c) == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_test_clock(0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(duplicates_and_batches);
    RUN(window_and_pruning);
    RUN(transactions_and_reopen);
    RUN(dead_letter_and_refusals);
    return tc_summary();
}
