/*
 * test_pending.c -- the pending list (qs_queue_pending), claims
 * (qs_queue_claim) and qs_queue_release_many: their arguments, how they
 * meet transactions, and the holders of other handles and processes (a
 * holder in another process is a forked child that opens the casket
 * itself).
 */
#include "test_common.h"
#include <fcntl.h>
#include <math.h>

static qs_casket *open_q(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static int qput(qs_casket *c, const char *q, const char *v, uint64_t *id)
{
    return qs_queue_put(c, q, strlen(q), v, strlen(v), id);
}

/* The pending list of queue q, *n entries (NULL on failure, with *n 0). */
static qs_pending *pend(qs_casket *c, const char *q, size_t *n)
{
    qs_pending *p = NULL;
    *n = 0;
    int rc = qs_queue_pending(c, q, strlen(q), &p, n);
    if (rc) {
        printf("  qs_queue_pending: %d (%s)\n", rc, qs_strerror(rc));
        return NULL;
    }
    return p;
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = UINT64_MAX;
    return qs_queue_len(c, q, strlen(q), &n) == 0 ? n : UINT64_MAX;
}

static void bad_arguments(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qput(c, "q", "a", NULL), 0);
    qs_items *it = (qs_items *)0x1;
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, -1.0, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, NAN, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, 0, -1.0, &it), QS_INVAL);
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, 0, NAN, &it), QS_INVAL);
    CHECK_RC(qs_queue_claim(c, "q", 1, 0, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_claim(c, "", 0, 1, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, 0, 0, NULL), QS_INVAL);
    CHECK_RC(qs_queue_claim(NULL, "q", 1, 1, 0, 0, &it), QS_INVAL);
    /* nothing reserved: nothing to claim */
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, 0, 0, &it), QS_NOTFOUND);
    CHECK(it == NULL);
    qs_pending *p = (qs_pending *)0x1;
    size_t n = 7;
    CHECK_RC(qs_queue_pending(c, "q", 1, NULL, &n), QS_INVAL);
    CHECK_RC(qs_queue_pending(c, "q", 1, &p, NULL), QS_INVAL);
    CHECK_RC(qs_queue_pending(c, "", 0, &p, &n), QS_INVAL);
    CHECK(p == NULL && n == 0);
    CHECK_RC(qs_queue_pending(NULL, "q", 1, &p, &n), QS_INVAL);
    uint64_t ids[2] = {1, 1};
    CHECK_RC(qs_queue_release_many(c, "q", 1, 0, ids, 1), QS_INVAL);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 1, NULL, 1), QS_INVAL);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 1, ids, 1), QS_NOTRESERVED);
    /* a queue with nothing reserved, or none at all: an empty list */
    REQUIRE((p = pend(c, "q", &n)) != NULL);
    CHECK(n == 0);
    qs_free(p);
    REQUIRE((p = pend(c, "nope", &n)) != NULL);
    CHECK(n == 0);
    qs_free(p);
    qs_close(c);
    tc_tmp_remove(&t);
}

static void release_many(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    for (int i = 0; i < 4; i++)
        CHECK_RC(qput(c, "q", "x", NULL), 0);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_reserve_many(c, "q", 1, 3, 0, 0, &it), 0);
    REQUIRE(it->count == 3);
    CHECK(qlen(c, "q") == 1);
    uint64_t twice[2] = {it->ids[1], it->ids[1]};
    CHECK_RC(qs_queue_release_many(c, "q", 1, 2, twice, it->token), QS_INVAL);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 3, it->ids, it->token + 1), QS_NOTRESERVED);
    CHECK(qlen(c, "q") == 1);       /* all or none */
    CHECK_RC(qs_queue_release(c, "q", 1, it->ids[2], it->token), 0);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 3, it->ids, it->token), QS_NOTRESERVED);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 2, it->ids, it->token), 0);
    CHECK(qlen(c, "q") == 4);
    qs_items_free(it);

    /* in a transaction, reserved there: released at once */
    REQUIRE_RC(qs_begin(c), 0);
    it = NULL;
    REQUIRE_RC(qs_queue_reserve_many(c, "q", 1, 2, 0, 0, &it), 0);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(qs_queue_release_many(c, "q", 1, 2, it->ids, it->token), 0);
    CHECK(qlen(c, "q") == 4);
    CHECK_RC(qs_commit(c), 0);
    qs_items_free(it);
    size_t n;
    qs_pending *p = pend(c, "q", &n);
    CHECK(p && n == 0);
    qs_free(p);
    qs_close(c);
    tc_tmp_remove(&t);
}

static void pending_and_claim_between_handles(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *a = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    qs_casket *b = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t id[4];
    for (int i = 0; i < 4; i++)
        CHECK_RC(qput(a, "q", "v", &id[i]), 0);
    qs_items *ia = NULL, *ib = NULL;
    uint64_t t0 = (uint64_t)(tc_now() * 1e9);
    REQUIRE_RC(qs_queue_reserve_many(a, "q", 1, 2, 0, 60.0, &ia), 0);
    size_t n;
    qs_pending *p = pend(b, "q", &n);
    REQUIRE(p && n == 2);
    CHECK(p[0].id == id[0] && p[1].id == id[1]);
    CHECK(p[0].pid == (uint32_t)getpid() && !p[0].mine && p[0].handle == p[1].handle);
    CHECK(p[0].reserved_ns >= t0 && p[0].reserved_ns <= (uint64_t)(tc_now() * 1e9));
    CHECK(p[0].lease_end_ns >= p[0].reserved_ns + 59000000000ull);
    uint64_t a_handle = p[0].handle;
    qs_free(p);
    p = pend(a, "q", &n);
    REQUIRE(p && n == 2);
    CHECK(p[0].mine && p[0].handle == a_handle);
    qs_free(p);

    /* held for less than min_idle: not claimed */
    CHECK_RC(qs_queue_claim(b, "q", 1, 10, 30.0, 0, &ib), QS_NOTFOUND);
    msleep(30);
    REQUIRE_RC(qs_queue_claim(b, "q", 1, 1, 0.02, 0, &ib), 0);
    CHECK(ib->count == 1 && ib->ids[0] == id[0] && ib->token);
    CHECK(qlen(a, "q") == 2);
    /* the former holder lost it; the claimer holds it */
    CHECK_RC(qs_queue_ack(a, "q", 1, id[0], ia->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(a, "q", 1, id[0], ia->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack_many(a, "q", 1, 2, ia->ids, ia->token), QS_NOTRESERVED);
    p = pend(a, "q", &n);
    REQUIRE(p && n == 2);
    CHECK(p[0].id == id[0] && p[0].handle != a_handle && !p[0].mine && p[0].lease_end_ns == 0);
    CHECK(p[1].id == id[1] && p[1].handle == a_handle);
    qs_free(p);
    /* a claim in a transaction that aborts leaves the item with its holder */
    REQUIRE_RC(qs_begin(a), 0);
    qs_items *ic = NULL;
    REQUIRE_RC(qs_queue_claim(a, "q", 1, 5, 0, 0, &ic), 0);
    CHECK(ic->count == 2 && ic->ids[0] == id[0] && ic->ids[1] == id[1]);
    CHECK(qlen(a, "q") == 2);
    CHECK_RC(qs_abort(a), 0);
    qs_items_free(ic);
    CHECK_RC(qs_queue_ack(b, "q", 1, id[0], ib->token), 0);
    /* claimed and acknowledged in one transaction: the item is gone, and
     * its former holder's reservation with it */
    REQUIRE_RC(qs_begin(b), 0);
    ic = NULL;
    REQUIRE_RC(qs_queue_claim(b, "q", 1, 5, 0, 0, &ic), 0);
    CHECK(ic->count == 1 && ic->ids[0] == id[1]);
    CHECK_RC(qs_queue_ack(b, "q", 1, id[1], ic->token), 0);
    CHECK(qlen(b, "q") == 2);
    CHECK_RC(qs_commit(b), 0);
    qs_items_free(ic);
    p = pend(a, "q", &n);
    CHECK(p && n == 0);
    qs_free(p);
    CHECK(qlen(a, "q") == 2);
    CHECK_RC(qs_queue_ack(a, "q", 1, id[1], ia->token), QS_NOTRESERVED);
    qs_items_free(ia);
    qs_items_free(ib);

    /* a claimed item released in a transaction is free at once, for
     * everyone, whatever the transaction does next */
    REQUIRE_RC(qs_queue_reserve(a, "q", 1, 0, 0, &ia), 0);
    REQUIRE_RC(qs_begin(b), 0);
    ib = NULL;
    REQUIRE_RC(qs_queue_claim(b, "q", 1, 1, 0, 0, &ib), 0);
    CHECK_RC(qs_queue_release(b, "q", 1, ib->ids[0], ib->token), 0);
    CHECK(qlen(b, "q") == 2);
    CHECK_RC(qs_abort(b), 0);
    CHECK(qlen(a, "q") == 2);
    CHECK_RC(qs_queue_ack(a, "q", 1, ia->ids[0], ia->token), QS_NOTRESERVED);
    qs_items_free(ia);
    qs_items_free(ib);
    CHECK_RC(check_ok(a), 0);
    qs_close(b);
    qs_close(a);
    tc_tmp_remove(&t);
}

/* Two handles claiming at once never get one item twice: every item is
 * idle long enough once, and a claim makes it fresh again (held for
 * less than min_idle by its new holder), so each of the 32 is claimed
 * exactly once over both. */
typedef struct claimer {
    qs_casket *c;
    uint64_t got[64];
    size_t n;
} claimer;

static void *claimer_main(void *arg)
{
    claimer *cl = arg;
    for (;;) {
        qs_items *it = NULL;
        if (qs_queue_claim(cl->c, "q", 1, 3, 1.0, 0, &it) != 0)
            return NULL;
        for (size_t i = 0; i < it->count && cl->n < 64; i++)
            cl->got[cl->n++] = it->ids[i];
        qs_items_free(it);
    }
}

static void claims_race(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *a = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    claimer cl[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) {
        cl[i].c = open_q(t.path, QS_OPEN_WRITE, &rc);
        REQUIRE_RC(rc, 0);
    }
    for (int i = 0; i < 32; i++)
        CHECK_RC(qput(a, "q", "v", NULL), 0);
    qs_items *ia = NULL;
    REQUIRE_RC(qs_queue_reserve_many(a, "q", 1, 32, 0, 0, &ia), 0);
    REQUIRE(ia->count == 32);
    msleep(1100);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&th[i], NULL, claimer_main, &cl[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("  claimed %zu and %zu\n", cl[0].n, cl[1].n);
    CHECK(cl[0].n + cl[1].n == 32);
    uint8_t seen[64] = {0};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < cl[k].n; i++) {
            uint64_t x = cl[k].got[i] - ia->ids[0];
            CHECK(x < 32 && !seen[x]);
            if (x < 32)
                seen[x] = 1;
        }
    size_t n;
    qs_pending *p = pend(a, "q", &n);
    REQUIRE(p && n == 32);
    for (size_t i = 0; i < n; i++)
        CHECK(!p[i].mine);
    qs_free(p);
    CHECK(qlen(a, "q") == 0);
    CHECK_RC(qs_queue_ack_many(a, "q", 1, 32, ia->ids, ia->token), QS_NOTRESERVED);
    qs_items_free(ia);
    for (int i = 0; i < 2; i++)
        qs_close(cl[i].c);
    qs_close(a);
    tc_tmp_remove(&t);
}

/* A child that opens the casket, reserves n items of "q" without a lease,
 * reports their ids (8 bytes each) and holds them until released. */
static int holder_main(void *arg, int report, int release)
{
    const char *path = arg;
    int rc;
    qs_casket *d = open_q(path, QS_OPEN_WRITE, &rc);
    qs_items *it = NULL;
    if (!d || qs_queue_reserve_many(d, "q", 1, 2, 0, 0, &it) != 0)
        _exit(3);
    uint64_t out[2] = {it->ids[0], it->count > 1 ? it->ids[1] : 0};
    if (write(report, out, sizeof out) != (ssize_t)sizeof out)
        _exit(4);
    char ch;
    if (read(release, &ch, 1) != 0)
        _exit(5);
    /* the first was claimed meanwhile: ours no more */
    int ack0 = qs_queue_ack(d, "q", 1, out[0], it->token);
    int ack1 = qs_queue_ack(d, "q", 1, out[1], it->token);
    qs_items_free(it);
    qs_close(d);
    _exit(ack0 == QS_NOTRESERVED && ack1 == 0 ? 0 : 6);
}

static void processes(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    for (int i = 0; i < 3; i++)
        CHECK_RC(qput(c, "q", "v", NULL), 0);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, holder_main, t.path) == 0);
    uint64_t ids[2] = {0, 0};
    CHECK(read(ch.report, ids, sizeof ids) == (ssize_t)sizeof ids);
    size_t n;
    qs_pending *p = pend(c, "q", &n);
    CHECK(p && n == 2);
    if (p && n == 2)
        CHECK(p[0].id == ids[0] && p[1].id == ids[1] && p[0].pid == (uint32_t)ch.pid &&
              !p[0].mine);
    qs_free(p);
    msleep(20);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_claim(c, "q", 1, 1, 0.01, 0, &it), 0);
    CHECK(it && it->count == 1 && it->ids[0] == ids[0]);
    CHECK(tc_child_end(&ch) == 0);      /* its own ack of the claimed one failed */
    CHECK_RC(qs_queue_ack(c, "q", 1, ids[0], it->token), 0);
    qs_items_free(it);
    p = pend(c, "q", &n);
    CHECK(p && n == 0);
    qs_free(p);
    CHECK(qlen(c, "q") == 1);

    /* a holder killed: its items come back, nothing to claim */
    REQUIRE(tc_child_start(&ch, holder_main, t.path) == 0);
    CHECK(read(ch.report, ids, sizeof ids) == (ssize_t)sizeof ids);
    CHECK(qlen(c, "q") == 0);
    tc_child_kill(&ch);
    double t0 = tc_now();
    while (qlen(c, "q") != 1 && tc_now() - t0 < 3.0)
        msleep(5);
    CHECK(qlen(c, "q") == 1);
    CHECK_RC(qs_queue_claim(c, "q", 1, 5, 0, 0, &it), QS_NOTFOUND);
    p = pend(c, "q", &n);
    CHECK(p && n == 0);
    qs_free(p);
    qs_close(c);
    tc_tmp_remove(&t);
}

/* A region of an earlier layout (version 3: 40-byte reservation entries,
 * 2,727,936 bytes; version 4: 24-byte queue entries, 3,776,512 bytes;
 * version 5: this layout, kept by a build that seals pages with format 3's
 * checksum only), as
 * a live process of that version keeps it: a header that passes its own
 * checks and byte 0 held shared.  An open now must refuse it (QS_CORRUPT)
 * rather than read its entries as ours. */
static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

static void old_region_refused(uint32_t version, uint64_t size)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qput(c, "q", "kept", NULL), 0);
    qs_close(c);
    char shm[700];
    snprintf(shm, sizeof shm, "%s-shm", t.path);
    int fd = open(shm, O_RDWR | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    uint8_t h[48] = {0};
    const uint32_t fields[6] = {version, 128, 256, 65536, 4096, 0};
    memcpy(h, "qstshm\0\x01", 8);
    memcpy(h + 8, fields, sizeof fields);
    memcpy(h + 32, &size, 8);
    uint64_t check = fnv(h, 40);
    memcpy(h + 40, &check, 8);
    CHECK(ftruncate(fd, (off_t)size) == 0);
    CHECK(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    REQUIRE(fcntl(fd, F_OFD_SETLK, &fl) == 0);     /* "attached" */
    qs_casket *d = open_q(t.path, QS_OPEN_WRITE, &rc);
    CHECK(d == NULL);
    CHECK_RC(rc, QS_CORRUPT);
    if (d)
        qs_close(d);
    close(fd);      /* the old process left: the next open rebuilds it */
    d = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(d, "q") == 1);
    CHECK(tc_file_size(shm) == 3842048);
    qs_close(d);
    tc_tmp_remove(&t);
}

static void old_layout_region_refused(void)
{
    old_region_refused(3, 2727936);
    old_region_refused(4, 3776512);
    old_region_refused(5, 3842048);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(bad_arguments);
    RUN(release_many);
    RUN(pending_and_claim_between_handles);
    RUN(claims_race);
    RUN(processes);
    RUN(old_layout_region_refused);
    return tc_summary();
}
