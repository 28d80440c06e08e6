/*
 * test_policy.c -- the queue policy API (qstore.h, "deliveries" and "queue
 * policy"): configs stored, replaced, removed, refused with the state
 * unchanged, undone by an abort; QS_QFULL on every put path with nothing
 * stored; delivery counts, fail reasons and dead letters; and the tag-2
 * records surviving a reopen and qs_check.  Run under valgrind and ASan
 * like the rest (every error path frees what it took).
 */
#include <math.h>

#include "test_common.h"

static qs_casket *open_p(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static int set_conf(qs_casket *c, const char *q, uint64_t maxsize, uint32_t maxdel, const char *dl,
                    double window)
{
    qs_queue_config cfg = {maxsize, maxdel, window, dl, dl ? strlen(dl) : 0};
    return qs_queue_config_set(c, q, strlen(q), &cfg);
}

/* 1 when q's stored config is exactly this. */
static int conf_is(qs_casket *c, const char *q, uint64_t maxsize, uint32_t maxdel, const char *dl,
                   double window)
{
    qs_queue_config got;
    int rc = qs_queue_config_get(c, q, strlen(q), &got);
    int ok = rc == 0 && got.maxsize == maxsize && got.max_deliveries == maxdel &&
             got.dedup_window == window &&
             (dl ? got.dead_letter_len == strlen(dl) && memcmp(got.dead_letter, dl, strlen(dl)) == 0
                 : got.dead_letter == NULL && got.dead_letter_len == 0);
    if (rc == 0)
        qs_free((void *)got.dead_letter);
    return ok;
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    return qs_queue_len(c, q, strlen(q), &n) == 0 ? n : UINT64_MAX;
}

static int qput(qs_casket *c, const char *q, const char *v)
{
    return qs_queue_put(c, q, strlen(q), v, strlen(v), NULL);
}

static void config_stored(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(conf_is(c, "a", 0, 0, NULL, 0));
    CHECK_RC(set_conf(c, "a", 5, 2, "dead", 1.5), 0);
    CHECK(conf_is(c, "a", 5, 2, "dead", 1.5));
    uint64_t recs = 0;
    CHECK_RC(qs_queue_records(c, &recs), 0);
    CHECK(recs == 1);
    CHECK_RC(qs_close(c), 0);
    c = open_p(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(conf_is(c, "a", 5, 2, "dead", 1.5));
    /* the config record is no queue: the list holds none */
    qs_items *l = NULL;
    CHECK_RC(qs_queue_list(c, &l), 0);
    CHECK(l && l->count == 0);
    qs_items_free(l);
    /* an abort restores it, also in this handle's cache */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(set_conf(c, "a", 1, 0, NULL, 0), 0);
    CHECK(conf_is(c, "a", 1, 0, NULL, 0));
    CHECK_RC(qput(c, "a", "x"), 0);
    CHECK_RC(qput(c, "a", "y"), QS_QFULL);     /* a refusal: the txn goes on */
    CHECK_RC(qs_abort(c), 0);
    CHECK(conf_is(c, "a", 5, 2, "dead", 1.5));
    for (int i = 0; i < 5; i++)
        CHECK_RC(qput(c, "a", "x"), 0);
    CHECK_RC(qput(c, "a", "x"), QS_QFULL);
    /* the defaults remove the record */
    CHECK_RC(set_conf(c, "a", 0, 0, NULL, 0), 0);
    CHECK_RC(qs_queue_records(c, &recs), 0);
    CHECK(recs == 5);
    CHECK_RC(qput(c, "a", "x"), 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void config_refused(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "a", 3, 0, NULL, 0), 0);
    CHECK_RC(qs_queue_config_set(c, "a", 1, NULL), QS_INVAL);
    CHECK_RC(set_conf(c, "a", 3, 0, NULL, -1), QS_INVAL);
    CHECK_RC(set_conf(c, "a", 3, 0, NULL, NAN), QS_INVAL);
    CHECK_RC(set_conf(c, "a", 3, 0, NULL, INFINITY), QS_INVAL);
    CHECK_RC(set_conf(c, "a", 3, 2, "a", 0), QS_INVAL);    /* itself */
    CHECK_RC(set_conf(c, "a", 3, 2, NULL, 0), QS_INVAL);   /* a limit, nowhere to go */
    CHECK_RC(set_conf(c, "a", 3, 0, "d", 0), QS_INVAL);    /* nowhere, no limit */
    qs_queue_config bad = {3, 2, 0, NULL, 4};
    CHECK_RC(qs_queue_config_set(c, "a", 1, &bad), QS_INVAL);
    CHECK_RC(set_conf(c, "", 3, 0, NULL, 0), QS_INVAL);
    CHECK(conf_is(c, "a", 3, 0, NULL, 0));
    /* below the items it holds, reserved ones included */
    CHECK_RC(qput(c, "a", "1"), 0);
    CHECK_RC(qput(c, "a", "2"), 0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "a", 1, 0, 0, &it), 0);
    qs_items_free(it);
    CHECK_RC(set_conf(c, "a", 1, 0, NULL, 0), QS_QBOUND);
    CHECK(conf_is(c, "a", 3, 0, NULL, 0));
    CHECK_RC(set_conf(c, "a", 2, 0, NULL, 0), 0);
    qs_queue_config got;
    CHECK_RC(qs_queue_config_get(c, "a", 1, NULL), QS_INVAL);
    CHECK_RC(qs_queue_config_get(c, "", 0, &got), QS_INVAL);
    CHECK_RC(qs_close(c), 0);
    c = open_p(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "a", 9, 0, NULL, 0), QS_READONLY);
    CHECK(conf_is(c, "a", 2, 0, NULL, 0));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void full_on_every_put(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "a", 2, 0, NULL, 0), 0);
    CHECK_RC(qput(c, "a", "1"), 0);
    uint32_t lens[2] = {1, 1};
    CHECK_RC(qs_queue_put_many(c, "a", 1, 2, "23", 2, lens, NULL), QS_QFULL);
    const uint8_t fr[] = {QS_FRAME_BYTES, 1, 0, 0, 0, 'x', QS_FRAME_BYTES, 1, 0, 0, 0, 'y'};
    CHECK_RC(qs_queue_put_framed(c, "a", 1, 2, fr, sizeof fr, NULL), QS_QFULL);
    CHECK(qlen(c, "a") == 1);
    CHECK_RC(qput(c, "a", "2"), 0);
    uint64_t noff[3] = {0, 1, 2}, id = 0;
    CHECK_RC(qs_queue_publish(c, 2, "ba", noff, "p", 1, &id), QS_QFULL);
    CHECK(qlen(c, "b") == 0 && id == 0);
    qs_queue *q = NULL;
    CHECK_RC(qs_queue_new(c, "a", 1, &q), 0);
    CHECK(qs_queue_put_id(q, "3", 1) == QS_QFULL);
    double t0 = tc_now();
    CHECK(qs_queue_put_wait(q, "3", 1, 0.05) == QS_QFULL);
    CHECK(tc_now() - t0 >= 0.04);
    CHECK(qs_queue_put_wait(q, "3", 1, NAN) == QS_INVAL);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_get(c, "a", 1, 1, 0, &it), 0);
    qs_items_free(it);
    CHECK(qs_queue_put_wait(q, "3", 1, 1) > 0);
    qs_queue_free(q);
    CHECK(qlen(c, "a") == 2);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static uint32_t deliveries_of(qs_casket *c, const char *q, uint64_t id, char *reason, size_t cap)
{
    uint32_t n = 0;
    void *r = NULL;
    size_t rl = 0;
    if (qs_queue_item_info(c, q, strlen(q), id, &n, &r, &rl) != 0)
        return UINT32_MAX;
    if (reason) {
        size_t k = rl < cap - 1 ? rl : cap - 1;
        memcpy(reason, r ? r : "", k);
        reason[k] = 0;
    }
    qs_free(r);
    return n;
}

static void deliveries_and_dead_letters(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "j", 0, 2, "dead", 0), 0);
    uint64_t id = 0, noff[2] = {0, 1};
    CHECK_RC(qs_queue_publish(c, 1, "j", noff, "shared", 6, &id), 0);   /* tag 1 inside tag 2 */
    CHECK_RC(qput(c, "j", "plain"), 0);
    char why[64];
    CHECK(deliveries_of(c, "j", id, why, sizeof why) == 0 && why[0] == 0);
    uint32_t n = 1;
    CHECK_RC(qs_queue_item_info(c, "j", 1, 999, &n, NULL, NULL), QS_NOTFOUND);
    CHECK(n == 0);
    CHECK_RC(qs_queue_item_info(c, "j", 1, id, NULL, NULL, NULL), QS_INVAL);
    for (uint32_t k = 1; k <= 2; k++) {
        qs_items *it = NULL;
        CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
        REQUIRE(it && it->count == 1);
        CHECK(it->ids[0] == id && it->off[1] == 6 && memcmp(it->data, "shared", 6) == 0);
        CHECK(deliveries_of(c, "j", id, NULL, 0) == k);
        CHECK_RC(qs_queue_fail(c, "j", 1, id, it->token, NULL, 3), QS_INVAL);
        CHECK_RC(qs_queue_fail(c, "j", 1, id, it->token + 1, "x", 1), QS_NOTRESERVED);
        CHECK_RC(qs_queue_fail(c, "j", 1, id, it->token, k == 1 ? "first" : "second", k == 1 ? 5 : 6),
                 0);
        CHECK_RC(qs_queue_fail(c, "j", 1, id, it->token, "x", 1), QS_NOTRESERVED);
        qs_items_free(it);
    }
    CHECK(deliveries_of(c, "j", id, why, sizeof why) == 2 && strcmp(why, "second") == 0);
    /* the third take moves it (its shared payload with it) and hands out "plain" */
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1);
    CHECK(it->ids[0] != id && it->off[1] == 5);
    CHECK_RC(qs_queue_ack(c, "j", 1, it->ids[0], it->token), 0);
    qs_items_free(it);
    CHECK(qlen(c, "j") == 0 && qlen(c, "dead") == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_p(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(deliveries_of(c, "dead", id, why, sizeof why) == 2 && strcmp(why, "second") == 0);
    it = NULL;
    CHECK_RC(qs_queue_get(c, "dead", 4, 1, 0, &it), 0);
    CHECK(it && it->count == 1 && it->ids[0] == id && memcmp(it->data, "shared", 6) == 0);
    qs_items_free(it);
    uint64_t recs = 1;
    CHECK_RC(qs_queue_records(c, &recs), 0);
    CHECK(recs == 1);   /* the config: the shared payload and its count are gone */
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* A reserve outside a transaction commits its count: a crash copy taken
 * right after it (the handle never closed) counts it. */
static void count_is_committed_by_the_reserve(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 0, 1 << 30, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t id = 0;
    CHECK_RC(qs_queue_put(c, "j", 1, "v", 1, &id), 0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    qs_items_free(it);
    char copy[sizeof t.path + 8], copylog[sizeof t.path + 16];
    snprintf(copy, sizeof copy, "%s.copy", t.path);
    snprintf(copylog, sizeof copylog, "%s.copy-log", t.path);
    REQUIRE(tc_copy_file(t.path, copy) == 0);
    REQUIRE(tc_copy_file(t.log, copylog) == 0);
    CHECK_RC(qs_close(c), 0);
    c = open_p(copy, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(deliveries_of(c, "j", id, NULL, 0) == 1);
    CHECK(qlen(c, "j") == 1);   /* the reservation died with the handle */
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* qs_queue_join: 0 once nothing is held, reserved items included. */
static void join_waits_for_empty(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_queue_join(c, "j", 1, 0), 0);
    CHECK_RC(qs_queue_join(c, "j", 1, NAN), QS_INVAL);
    CHECK_RC(qs_queue_join(c, "", 0, 0), QS_INVAL);
    CHECK_RC(qput(c, "j", "1"), 0);
    double t0 = tc_now();
    CHECK_RC(qs_queue_join(c, "j", 1, 0.05), QS_TIMEDOUT);
    CHECK(tc_now() - t0 >= 0.04);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1);
    CHECK_RC(qs_queue_join(c, "j", 1, 0), QS_TIMEDOUT);    /* reserved: still held */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_ack(c, "j", 1, it->ids[0], it->token), 0);
    CHECK_RC(qs_queue_join(c, "j", 1, 5), 0);   /* the transaction's view, no wait */
    CHECK_RC(qs_abort(c), 0);
    CHECK_RC(qs_queue_join(c, "j", 1, 0), QS_TIMEDOUT);
    CHECK_RC(qs_queue_ack(c, "j", 1, it->ids[0], it->token), 0);
    CHECK_RC(qs_queue_join(c, "j", 1, 0), 0);
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* qs_queue_wait_room: 0 once a put of n would fit, reserved items holding
 * room; an unbounded queue always has room; n over maxsize never fits. */
static void wait_room_for_n(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 1000, 0), 0);      /* unbounded */
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 0, 0), QS_INVAL);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 1, NAN), QS_INVAL);
    CHECK_RC(qs_queue_wait_room(c, "", 0, 1, 0), QS_INVAL);
    CHECK_RC(set_conf(c, "w", 2, 0, NULL, 0), 0);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 3, 0), QS_INVAL);   /* could never fit */
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 0), 0);
    CHECK_RC(qput(c, "w", "1"), 0);
    double t0 = tc_now();
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 0.05), QS_TIMEDOUT);
    CHECK(tc_now() - t0 >= 0.04);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 1, 0), 0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "w", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 0), QS_TIMEDOUT);   /* reserved: held */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_ack(c, "w", 1, it->ids[0], it->token), 0);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 5), 0);  /* the transaction's view, no wait */
    CHECK_RC(qs_abort(c), 0);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 0), QS_TIMEDOUT);
    CHECK_RC(qs_queue_ack(c, "w", 1, it->ids[0], it->token), 0);
    CHECK_RC(qs_queue_wait_room(c, "w", 1, 2, 0), 0);
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(config_stored);
    RUN(config_refused);
    RUN(full_on_every_put);
    RUN(deliveries_and_dead_letters);
    RUN(count_is_committed_by_the_reserve);
    RUN(join_waits_for_empty);
    RUN(wait_room_for_n);
    return tc_summary();
}
