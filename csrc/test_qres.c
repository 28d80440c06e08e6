/*
 * test_qres.c -- the queue module's shared state in the region (qres.c),
 * driven directly on a region of its own: the reservation table (add,
 * find, delete, counts, room, leases, holders that died, repair of tables
 * a holder left half-changed) and the wake-up words.
 *
 * A "handle" that must die holding reservations is a child process (the
 * kernel drops its slot's lock when it exits without closing).
 */
#include "test_common.h"
#include "test_region.h"
#include "qres.h"

/* A new region in a new directory t: 0, or -1 (nothing left open). */
static int region_new(tc_tmp *t, sh_region *r)
{
    if (tc_tmp_make(t) != 0)
        return -1;
    snprintf(tc_region_path, sizeof tc_region_path, "%s-shm", t->path);
    return tc_region_init(r);
}

/* Entries in use, counted by scanning the table. */
static uint64_t entries(const sh_region *r)
{
    const qr_res *res = r->up_area;
    uint64_t n = 0;
    for (size_t i = 0; i < QR_RES_CAP; i++)
        n += res[i].id != 0;
    return n;
}

static void adds_finds_deletes(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    uint64_t qa = 11, qb = 12, md = 1;
    CHECK_RC(qr_add(&r, 1, qa, 100, 0), 0);
    CHECK_RC(qr_add(&r, 2, qa, 100, 5000), 0);
    CHECK_RC(qr_add(&r, 1, qb, 101, 3000), 0);  /* one id in two queues */
    CHECK_RC(qr_add(&r, 0, qa, 100, 0), QS_FULL);  /* ids start at 1 */
    CHECK(qr_count(&r, qa, &md) == 2 && md == 5000);
    CHECK(qr_count(&r, qb, &md) == 1 && md == 3000);
    CHECK(qr_count(&r, 13, &md) == 0 && md == 0);
    const qr_res *e = qr_find(&r, qa, 1);
    REQUIRE(e != NULL);
    CHECK(e->token == 100 && e->deadline_ns == 0 && qr_mine(&r, e));
    CHECK(qr_find(&r, qb, 1)->token == 101);
    CHECK(qr_find(&r, qb, 2) == NULL);
    qr_del(&r, qa, 1);
    qr_del(&r, qa, 1);      /* gone already: nothing changes */
    CHECK(qr_find(&r, qa, 1) == NULL);
    CHECK(qr_find(&r, qb, 1) != NULL);
    CHECK(qr_count(&r, qa, NULL) == 1);
    CHECK(entries(&r) == 2 && *r.up_count == 2);
    CHECK((atomic_load(r.up_seq) & 1) == 0);
    sh_close(&r);
    tc_tmp_remove(&t);
}

/* The table takes three quarters of its capacity, then refuses. */
static void room_is_three_quarters(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    uint64_t cap = QR_RES_CAP / 4 * 3;
    int rc = 0;
    for (uint64_t id = 1; id <= cap && rc == 0; id++)
        rc = qr_add(&r, id, 1 + id % 7, 1, 0);
    CHECK_RC(rc, 0);
    CHECK(!qr_room(&r, 1) && qr_room(&r, 0));
    CHECK_RC(qr_add(&r, cap + 1, 1, 1, 0), QS_FULL);
    CHECK(entries(&r) == cap);
    qr_del(&r, 1 + 5 % 7, 5);
    CHECK(qr_room(&r, 1));
    sh_close(&r);
    tc_tmp_remove(&t);
}

static void leases_end(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    uint64_t now = sh_now_ns(), md = 0;
    CHECK_RC(qr_add(&r, 1, 5, 1, now - 1), 0);               /* ended */
    CHECK_RC(qr_add(&r, 2, 5, 1, now + 3600000000000ull), 0); /* an hour */
    CHECK_RC(qr_add(&r, 3, 5, 1, 0), 0);                      /* no lease */
    CHECK(qr_expire(&r, 5, 0) == 1);
    CHECK(qr_count(&r, 5, &md) == 2 && md == now + 3600000000000ull);
    CHECK(qr_find(&r, 5, 1) == NULL && qr_find(&r, 5, 3) != NULL);
    sh_close(&r);
    tc_tmp_remove(&t);
}

static int reserve_and_die(void *arg, int report, int release)
{
    (void)arg;
    (void)release;
    sh_region r;
    if (tc_region_attach(&r) != 0)
        return 10;
    if (qr_add(&r, 7, 9, 1, 0) != 0 || qr_add(&r, 8, 9, 1, 0) != 0)
        return 11;
    char b = 0;
    return write(report, &b, 1) == 1 ? 0 : 12;  /* exits holding them */
}

/* A holder that died without closing: a sweep returns its items, not
 * those of live handles; the sleepers of the queue are woken. */
static void dead_holders_are_swept(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    CHECK_RC(qr_add(&r, 6, 9, 2, 0), 0);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, reserve_and_die, NULL) == 0);
    char b;
    CHECK(read(ch.report, &b, 1) == 1);
    CHECK_RC(tc_child_end(&ch), 0);
    CHECK(qr_count(&r, 9, NULL) == 3);
    const qr_res *e = qr_find(&r, 9, 7);
    CHECK(e && !qr_mine(&r, e));
    CHECK(qr_expire(&r, 9, 1) == 2);
    CHECK(qr_count(&r, 9, NULL) == 1 && qr_find(&r, 9, 6) != NULL);
    sh_close(&r);
    tc_tmp_remove(&t);
}

/* A holder killed halfway through a change leaves the seqlock odd and the
 * tables as they were at that moment (here: an entry copied by a
 * backward shift but not yet cleared, and a count not yet adjusted); the
 * next change rebuilds them. */
static void torn_tables_are_repaired(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    for (uint64_t id = 1; id <= 20; id++)
        REQUIRE_RC(qr_add(&r, id, 3, 1, 0), 0);
    qr_res *res = r.up_area;
    size_t from = 0, to = 0;
    while (res[from].id == 0)
        from++;
    while (res[to].id != 0)
        to++;
    atomic_fetch_add(r.up_seq, 1);  /* a change begins ... */
    res[to] = res[from];            /* ... copies one entry ... */
    *r.up_count += 5;               /* ... and dies with a count wrong */
    CHECK(entries(&r) == 21);
    CHECK_RC(qr_add(&r, 100, 4, 1, 0), 0);
    CHECK((atomic_load(r.up_seq) & 1) == 0);
    CHECK(entries(&r) == 21 && *r.up_count == 21);
    CHECK(qr_count(&r, 3, NULL) == 20 && qr_count(&r, 4, NULL) == 1);
    for (uint64_t id = 1; id <= 20; id++)
        qr_del(&r, 3, id);
    CHECK(entries(&r) == 1 && qr_count(&r, 3, NULL) == 0);
    sh_close(&r);
    tc_tmp_remove(&t);
}

static int wait_for_wake(void *arg, int report, int release)
{
    (void)arg;
    (void)release;
    sh_region r;
    if (tc_region_attach(&r) != 0)
        return 10;
    uint32_t w = qr_wait_word(&r, 42);
    char b = 0;
    if (write(report, &b, 1) != 1)
        return 11;
    double t0 = tc_now();
    while (qr_wait_word(&r, 42) == w && tc_now() - t0 < 10)
        qr_wait(&r, 42, w, 10.0);
    return qr_wait_word(&r, 42) != w ? 0 : 12;
}

/* A sleeper in another process is woken by a change of its queue's word:
 * by qr_wake, or by qr_drop_mine for a queue that lost a reservation. */
static void wakes_reach_other_processes(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    for (int round = 0; round < 2; round++) {
        tc_child ch;
        REQUIRE(tc_child_start(&ch, wait_for_wake, NULL) == 0);
        char b;
        CHECK(read(ch.report, &b, 1) == 1);
        msleep(50);     /* most likely asleep by now; either way it must end */
        if (round == 0)
            qr_wake(&r, 42);
        else {
            CHECK_RC(qr_add(&r, 1, 42, 1, 0), 0);
            qr_drop_mine(&r);
            CHECK(qr_count(&r, 42, NULL) == 0);
        }
        CHECK_RC(tc_child_end(&ch), 0);
    }
    uint32_t w = qr_wait_word(&r, 5);
    qr_wake_all(&r);
    CHECK(qr_wait_word(&r, 5) != w);
    CHECK_RC(qr_wait(&r, 5, w, 5.0), 0);    /* the word moved: no sleep */
    sh_close(&r);
    tc_tmp_remove(&t);
}

/* A handle without a region (read-only media) finds nothing reserved. */
static void no_region_reserves_nothing(void)
{
    sh_region r;
    memset(&r, 0, sizeof r);
    uint64_t md = 1;
    CHECK(qr_find(&r, 1, 1) == NULL);
    CHECK(qr_count(&r, 1, &md) == 0 && md == 0);
    CHECK(qr_expire(&r, 1, 1) == 0);
}

int main(void)
{
    RUN(adds_finds_deletes);
    RUN(room_is_three_quarters);
    RUN(leases_end);
    RUN(dead_holders_are_swept);
    RUN(torn_tables_are_repaired);
    RUN(wakes_reach_other_processes);
    RUN(no_region_reserves_nothing);
    return tc_summary();
}
