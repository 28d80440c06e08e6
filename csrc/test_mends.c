/*
 * test_mends.c -- the four gaps closed after issue 13's policy work: a
 * full dead-letter queue holds a dead item where it is (not delivered
 * again, not moved over the bound) until it has room; a reserve's count
 * survives an abort of the transaction it ran in, and a SIGKILL of its
 * process with that transaction open; a put with a priority or a delay
 * waits for room like a plain one.  Run under valgrind and ASan like the
 * rest.
 */
#include <math.h>
#include <signal.h>

#include "test_common.h"

static qs_casket *open_p(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static int set_conf(qs_casket *c, const char *q, uint64_t maxsize, uint32_t maxdel, const char *dl)
{
    qs_queue_config cfg = {maxsize, maxdel, 0, dl, dl ? strlen(dl) : 0};
    return qs_queue_config_set(c, q, strlen(q), &cfg);
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    return qs_queue_len(c, q, strlen(q), &n) == 0 ? n : UINT64_MAX;
}

static uint64_t qput(qs_casket *c, const char *q, const char *v)
{
    uint64_t id = 0;
    return qs_queue_put(c, q, strlen(q), v, strlen(v), &id) == 0 ? id : 0;
}

static uint32_t deliveries_of(qs_casket *c, const char *q, uint64_t id)
{
    uint32_t n = 0;
    return qs_queue_item_info(c, q, strlen(q), id, &n, NULL, NULL) == 0 ? n : UINT32_MAX;
}

/* Reserves one item of q and releases it; its id, 0 when none. */
static uint64_t reserve_release(qs_casket *c, const char *q)
{
    qs_items *it = NULL;
    if (qs_queue_reserve(c, q, strlen(q), 0, 0, &it) != 0)
        return 0;
    uint64_t id = it->ids[0];
    int rc = qs_queue_release(c, q, strlen(q), id, it->token);
    qs_items_free(it);
    return rc == 0 ? id : 0;
}

/* A dead-letter queue with maxsize 1 that is full: the source's dead item
 * stays where it is (counted in its length, handed to nobody, the bound
 * kept) while later items are delivered; once the dead-letter queue has
 * room, the next take moves it. */
static void full_dead_letter_queue_holds_the_item(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "dead", 1, 0, NULL), 0);
    CHECK_RC(set_conf(c, "j", 0, 1, "dead"), 0);
    CHECK(qput(c, "dead", "occupant") != 0);
    uint64_t a = qput(c, "j", "a"), b = qput(c, "j", "b");
    REQUIRE(a && b);
    CHECK(reserve_release(c, "j") == a);    /* a: one delivery, the limit */
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1);
    CHECK(it->ids[0] == b);     /* a is held back, b delivered */
    CHECK_RC(qs_queue_release(c, "j", 1, b, it->token), 0);
    qs_items_free(it);
    CHECK(qlen(c, "dead") == 1 && qlen(c, "j") == 2);
    CHECK(deliveries_of(c, "j", a) == 1);
    /* b reached the limit too; neither may move, so a get finds nothing */
    it = NULL;
    CHECK_RC(qs_queue_get(c, "j", 1, 1, 0, &it), QS_NOTFOUND);
    CHECK(it == NULL);
    CHECK(qlen(c, "dead") == 1 && qlen(c, "j") == 2);
    /* room for one: the next take moves a, then finds b held back */
    it = NULL;
    CHECK_RC(qs_queue_get(c, "dead", 4, 1, 0, &it), 0);
    qs_items_free(it);
    it = NULL;
    CHECK_RC(qs_queue_get(c, "j", 1, 1, 0, &it), QS_NOTFOUND);
    CHECK(qlen(c, "dead") == 1 && qlen(c, "j") == 1);
    CHECK(deliveries_of(c, "dead", a) == 1);
    CHECK(deliveries_of(c, "j", b) == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* qs_queue_put_order_wait: a priority or delayed put on a full queue waits
 * for room as a plain one does (here a thread's get frees it), gives up
 * with QS_QFULL when its time is up, and refuses a bad order first. */
typedef struct getter {
    qs_casket *c;
    int rc;
} getter;

static void *get_later(void *arg)
{
    getter *g = arg;
    msleep(100);
    qs_items *it = NULL;
    g->rc = qs_queue_get(g->c, "b", 1, 1, 0, &it);
    qs_items_free(it);
    return NULL;
}

static void ordered_put_waits_for_room(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(set_conf(c, "b", 1, 0, NULL), 0);
    CHECK(qput(c, "b", "fill") != 0);
    qs_queue *q = NULL;
    REQUIRE_RC(qs_queue_new(c, "b", 1, &q), 0);
    CHECK(qs_queue_put_order_wait(q, "x", 1, -1, 0, 1) == QS_INVAL);
    CHECK(qs_queue_put_order_wait(q, "x", 1, 0, 10, 1) == QS_INVAL);
    CHECK(qs_queue_put_order_wait(q, "x", 1, NAN, 0, 1) == QS_INVAL);
    double t0 = tc_now();
    CHECK(qs_queue_put_order_wait(q, "x", 1, 0, 3, 0.1) == QS_QFULL);
    CHECK(tc_now() - t0 >= 0.08);
    CHECK(qs_queue_put_order_wait(q, "x", 1, 5, 0, 0) == QS_QFULL);
    getter g = {c, -1};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, get_later, &g) == 0);
    int64_t id = qs_queue_put_order_wait(q, "hi", 2, 0, 7, 10);
    pthread_join(th, NULL);
    CHECK_RC(g.rc, 0);
    CHECK(id > 0);
    CHECK(qlen(c, "b") == 1);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_get(c, "b", 1, 1, 0, &it), 0);
    CHECK(it && it->count == 1 && (int64_t)it->ids[0] == id && memcmp(it->data, "hi", 2) == 0);
    qs_items_free(it);
    qs_queue_free(q);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Inside a transaction a reserve's count is not part of it: the abort
 * undoes the reserve, an ack, a release, but the count stays (written
 * again by the abort's follow-up), and the next reserve counts on from it. */
static void count_survives_abort(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_p(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t a = qput(c, "j", "a"), b = qput(c, "j", "b");
    REQUIRE(a && b);
    CHECK_RC(qs_begin(c), 0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve_many(c, "j", 1, 2, 0, 0, &it), 0);
    REQUIRE(it && it->count == 2);
    CHECK(deliveries_of(c, "j", a) == 1);
    CHECK_RC(qs_queue_ack(c, "j", 1, a, it->token), 0);      /* acked, then undone */
    CHECK_RC(qs_queue_release(c, "j", 1, b, it->token), 0);  /* released in it */
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "j") == 2);
    CHECK(deliveries_of(c, "j", a) == 1 && deliveries_of(c, "j", b) == 1);
    CHECK_RC(qs_queue_ack(c, "j", 1, a, it->token), QS_NOTRESERVED);
    qs_items_free(it);
    it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1 && it->ids[0] == a);
    CHECK(deliveries_of(c, "j", a) == 2);
    qs_items_free(it);
    /* a reserve in a transaction that commits counts once, not twice */
    CHECK_RC(qs_begin(c), 0);
    it = NULL;
    CHECK_RC(qs_queue_reserve(c, "j", 1, 0, 0, &it), 0);
    REQUIRE(it && it->count == 1 && it->ids[0] == b);
    CHECK_RC(qs_commit(c), 0);
    CHECK(deliveries_of(c, "j", b) == 2);
    CHECK(qlen(c, "j") == 0);   /* both reserved now */
    CHECK_RC(qs_queue_ack(c, "j", 1, b, it->token), 0);
    qs_items_free(it);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    /* and the counts were committed: a reopen sees them */
    c = open_p(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(deliveries_of(c, "j", a) == 2 && qlen(c, "j") == 1);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* A child reserves inside a transaction and is SIGKILLed with it open:
 * the count its transaction held is written by the next handle that
 * looks at the queue, which then counts on from it. */
static int reserve_in_txn_and_hang(void *arg, int report, int release)
{
    int rc;
    qs_casket *c = open_p(arg, QS_OPEN_WRITE, &rc);
    qs_items *it = NULL;
    if (rc == 0 && (rc = qs_begin(c)) == 0)
        rc = qs_queue_reserve(c, "j", 1, 0, 0, &it);
    char n = rc == 0 ? (char)deliveries_of(c, "j", it->ids[0]) : 0;
    if (write(report, &n, 1) != 1)
        _exit(3);
    char buf;
    while (read(release, &buf, 1) < 0 && errno == EINTR)
        ;
    _exit(0);
}

static void count_survives_sigkill_in_txn(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t a = qput(c, "j", "a");
    REQUIRE(a);
    for (uint32_t k = 1; k <= 2; k++) {
        tc_child ch;
        REQUIRE(tc_child_start(&ch, reserve_in_txn_and_hang, t.path) == 0);
        char got = 0;
        CHECK(read(ch.report, &got, 1) == 1 && got == (char)(2 * k - 1));
        CHECK(tc_child_kill(&ch) == 128 + SIGKILL);
        CHECK(deliveries_of(c, "j", a) == 2 * (k - 1));   /* not yet written */
        qs_items *it = NULL;
        /* the dead holder's entry hides the item until a sweep finds it dead */
        CHECK_RC(qs_queue_reserve(c, "j", 1, 5, 0, &it), 0);
        REQUIRE(it && it->count == 1 && it->ids[0] == a);
        CHECK(deliveries_of(c, "j", a) == 2 * k);  /* the dead one's and ours */
        CHECK_RC(qs_queue_release(c, "j", 1, a, it->token), 0);
        qs_items_free(it);
    }
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_p(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(deliveries_of(c, "j", a) == 4);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(full_dead_letter_queue_holds_the_item);
    RUN(ordered_put_waits_for_room);
    RUN(count_survives_abort);
    RUN(count_survives_sigkill_in_txn);
    return tc_summary();
}
