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

/* The invariant qr_run_end promises: when it answers for id, every id
 * from id to *hi has a plain entry of the queue.  Checked against the
 * table itself after each of many random adds (plain and due), deletes,
 * expiries and repairs, on two queues. */
static int run_holds(const sh_region *r, uint64_t qh, uint64_t top)
{
    for (uint64_t id = 1; id <= top; id++) {
        uint64_t hi = 0;
        if (!qr_run_end(r, qh, id, &hi))
            continue;
        if (hi < id)
            return 0;
        for (uint64_t x = id; x <= hi; x++) {
            const qr_res *e = qr_find(r, qh, x);
            if (!e || e->count_due)
                return 0;
        }
    }
    return 1;
}

static void reserved_runs_hold_only_plain_entries(void)
{
    tc_tmp t = {0};
    sh_region r;
    REQUIRE(region_new(&t, &r) == 0);
    enum { TOP = 300, STEPS = 6000 };
    uint64_t seed = 12345, now = sh_now_ns();
    int bad = 0;
    for (int step = 0; step < STEPS && !bad; step++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t x = seed >> 33, qh = 3 + (x & 1), id = 1 + (x >> 1) % TOP;
        switch ((x >> 12) % 8) {
        case 0: case 1: case 2:     /* a reserve: ascending ids from id */
            for (uint64_t k = 0; k < 1 + (x >> 20) % 40 && id + k <= TOP; k++)
                qr_add(&r, id + k, qh, 1, 0);
            break;
        case 3:
            qr_add_due(&r, id, qh, 1, 2);
            break;
        case 4: case 5:             /* acks: ascending, from the front */
            for (uint64_t k = 0; k < 1 + (x >> 20) % 20; k++)
                qr_del(&r, qh, id + k);
            break;
        case 6:                     /* a lease that ends */
            qr_add(&r, id, qh, 1, now - 1);
            qr_expire(&r, qh, 0);
            break;
        default:                    /* torn by a dead holder: rebuilt */
            atomic_fetch_add(r.up_seq, 1);
            qr_del(&r, qh, id);
            break;
        }
        bad = !run_holds(&r, 3, TOP) || !run_holds(&r, 4, TOP);
    }
    CHECK(!bad);
    /* and a reserve of ascending ids is one run the whole way */
    for (uint64_t id = 1; id <= TOP + 100; id++)
        qr_del(&r, 5, id);
    for (uint64_t id = 1000; id < 6000; id++)
        REQUIRE_RC(qr_add(&r, id, 5, 1, 0), 0);
    uint64_t hi = 0;
    CHECK(qr_run_end(&r, 5, 1000, &hi) && hi == 5999);
    qr_del(&r, 5, 1000);            /* acked from the front: the run shrinks */
    CHECK(!qr_run_end(&r, 5, 1000, &hi) && qr_run_end(&r, 5, 1001, &hi) && hi == 5999);
    qr_del(&r, 5, 2000);            /* a hole: the longer side stays */
    CHECK(qr_run_end(&r, 5, 2001, &hi) && hi == 5999 && !qr_run_end(&r, 5, 1500, &hi));
    sh_close(&r);
    tc_tmp_remove(&t);
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
    RUN(reserved_runs_hold_only_plain_entries);
    return tc_summary();
}
