/*
 * test_queue.c -- targeted tests of the queue API (qstore.h, "queues"):
 * ordering of put/put_many/get/peek, several queues, publish fan-out and the
 * freeing of shared payloads, reserve/ack/release, leases, transactions,
 * reopening, refusals of bad arguments (with the state unchanged), listing,
 * big payloads, a large put_many drained in batches, and a few threaded
 * cases (a blocked get woken by a put, by a release, by qs_shutdown).
 * QS_TEST_SCALE=small shrinks the large batch (200,000 items -> 20,000).
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "test_common.h"

/* ------------------------------------------------------------------ */
/* helpers                                                             */

/* qs_queue_put_many for payloads laid out by n + 1 offsets into vals. */
static int put_many_off(qs_casket *c, const char *name, size_t nlen, size_t n, const void *vals,
                        const uint64_t *off, uint64_t *first)
{
    uint32_t *lens = malloc((n ? n : 1) * sizeof *lens);
    if (!lens)
        return QS_NOMEM;
    for (size_t i = 0; i < n; i++)
        lens[i] = (uint32_t)(off[i + 1] - off[i]);
    const char *base = vals;
    int rc = qs_queue_put_many(c, name, nlen, n, base ? base + (n ? off[0] : 0) : NULL,
                               n ? (size_t)(off[n] - off[0]) : 0, lens, first);
    free(lens);
    return rc;
}

static qs_casket *open_q(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static int qput(qs_casket *c, const char *q, const char *v, uint64_t *id)
{
    return qs_queue_put(c, q, strlen(q), v, strlen(v), id);
}

/* 1 when item i of it has payload s (and id, when id != 0) */
static int item_is(const qs_items *it, size_t i, const char *s, uint64_t id)
{
    if (!it || i >= it->count)
        return 0;
    size_t n = (size_t)(it->off[i + 1] - it->off[i]);
    if (n != strlen(s) || (n && memcmp(it->data + it->off[i], s, n) != 0))
        return 0;
    return id == 0 || it->ids[i] == id;
}

/* Gets one item without waiting; 1 when it is payload s (id when != 0). */
static int get_is(qs_casket *c, const char *q, const char *s, uint64_t id)
{
    qs_items *it = NULL;
    int rc = qs_queue_get(c, q, strlen(q), 1, 0, &it);
    int ok = rc == 0 && it && it->count == 1 && item_is(it, 0, s, id);
    if (!ok)
        printf("  get_is(%s, %s): rc %d (%s), count %zu\n", q, s, rc, qs_strerror(rc),
               it ? it->count : (size_t)0);
    qs_items_free(it);
    return ok;
}

/* The rc of a non-waiting get of one item (the item is dropped). */
static int get_rc(qs_casket *c, const char *q)
{
    qs_items *it = (qs_items *)0x1;
    int rc = qs_queue_get(c, q, strlen(q), 1, 0, &it);
    if (rc == QS_NOTFOUND && it != NULL) {
        printf("  get_rc: QS_NOTFOUND but *out is not NULL\n");
        return -1;
    }
    if (rc == 0)
        qs_items_free(it);
    return rc;
}

static uint64_t qlen(qs_casket *c, const char *q)
{
    uint64_t n = (uint64_t)-1;
    if (qs_queue_len(c, q, strlen(q), &n) != 0)
        return (uint64_t)-1;
    return n;
}

static uint64_t qrecords(qs_casket *c)
{
    uint64_t n = (uint64_t)-1;
    if (qs_queue_records(c, &n) != 0)
        return (uint64_t)-1;
    return n;
}

static uint64_t urecords(qs_casket *c)
{
    uint64_t n = (uint64_t)-1;
    if (qs_records(c, &n) != 0)
        return (uint64_t)-1;
    return n;
}

/* Copies of every available item of q (peek, up to 1000), for comparing
 * states before and after a refused call.  Caller frees. */
static qs_items *snapshot(qs_casket *c, const char *q)
{
    qs_items *it = NULL;
    int rc = qs_queue_peek(c, q, strlen(q), 1000, &it);
    if (rc == QS_NOTFOUND) {
        it = calloc(1, sizeof *it);
        return it;
    }
    return rc == 0 ? it : NULL;
}

static int same_items(const qs_items *a, const qs_items *b)
{
    if (!a || !b || a->count != b->count)
        return 0;
    if (a->count == 0)
        return 1;
    return memcmp(a->ids, b->ids, a->count * sizeof *a->ids) == 0 &&
           memcmp(a->off, b->off, (a->count + 1) * sizeof *a->off) == 0 &&
           memcmp(a->data, b->data, (size_t)a->off[a->count]) == 0;
}

static void free_snapshot(qs_items *it)
{
    if (it && it->count == 0 && !it->ids && !it->off && !it->data)
        free(it);
    else
        qs_items_free(it);
}

/* deterministic payload of item i, n bytes */
static void fill_val(unsigned char *p, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static int val_ok(const unsigned char *p, size_t n, size_t want_n, uint64_t i)
{
    if (n != want_n)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (p[j] != (unsigned char)(i * 131 + j * 7 + (j >> 8)))
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ */

static void put_get_order(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    CHECK(qlen(c, "q") == 0);
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);
    qs_items *it = (qs_items *)0x1;
    CHECK_RC(qs_queue_peek(c, "q", 1, 5, &it), QS_NOTFOUND);
    CHECK(it == NULL);

    uint64_t ida = 0, idb = 0, ide = 0;
    CHECK_RC(qput(c, "q", "a", &ida), 0);
    CHECK_RC(qput(c, "q", "b", &idb), 0);
    CHECK_RC(qput(c, "q", "c", NULL), 0);       /* id may be NULL */
    CHECK_RC(qs_queue_put(c, "q", 1, NULL, 0, &ide), 0);   /* empty payload */
    CHECK(ida >= 1 && idb > ida);
    CHECK(ide > idb);
    CHECK(qlen(c, "q") == 4);

    /* peek: copies, in order, nothing removed */
    it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 2, &it), 0);
    CHECK(it->count == 2);
    CHECK(item_is(it, 0, "a", ida));
    CHECK(item_is(it, 1, "b", idb));
    CHECK(it->off[0] == 0);
    qs_items_free(it);
    CHECK(qlen(c, "q") == 4);

    CHECK(get_is(c, "q", "a", ida));
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "q", 1, 10, 0, &it), 0);
    CHECK(it->count == 3);
    CHECK(item_is(it, 0, "b", idb));
    CHECK(item_is(it, 1, "c", 0));
    CHECK(item_is(it, 2, "", ide));
    CHECK(it->ids[1] > idb && it->ids[1] < ide);
    qs_items_free(it);
    CHECK(qlen(c, "q") == 0);
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);

    /* a waiting get on an empty queue times out with QS_NOTFOUND */
    it = (qs_items *)0x1;
    double t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 0.05, &it), QS_NOTFOUND);
    CHECK(it == NULL);
    CHECK(tc_now() - t0 >= 0.04);

    /* put_many: ids first_id, first_id + 1, ...; after the earlier ones */
    const char vals[] = "onetwothree";
    uint64_t off[4] = {0, 3, 6, 11}, first = 0;
    CHECK_RC(put_many_off(c, "q", 1, 3, vals, off, &first), 0);
    CHECK(first > ide);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 0, NULL, 0, NULL, NULL), 0);  /* nothing */
    uint64_t idf;
    CHECK_RC(qput(c, "q", "four", &idf), 0);
    CHECK(idf == first + 3);
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "q", 1, 100, 0, &it), 0);
    CHECK(it->count == 4);
    CHECK(item_is(it, 0, "one", first));
    CHECK(item_is(it, 1, "two", first + 1));
    CHECK(item_is(it, 2, "three", first + 2));
    CHECK(item_is(it, 3, "four", idf));
    qs_items_free(it);

    CHECK(qrecords(c) == 0);
    CHECK(urecords(c) == 0);        /* queues are not user records */
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void several_queues(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    /* "a", "ab" and "b": a name that prefixes another stays apart */
    const char *names[3] = {"a", "ab", "b"};
    uint64_t ids[3][5], last = 0;
    for (int i = 0; i < 5; i++)
        for (int q = 2; q >= 0; q--) {
            char v[32];
            snprintf(v, sizeof v, "%s-%d", names[q], i);
            CHECK_RC(qput(c, names[q], v, &ids[q][i]), 0);
            CHECK(ids[q][i] > last);        /* unique and increasing */
            last = ids[q][i];
        }
    CHECK_RC(qs_queue_put(c, "x\0y", 3, "nul", 3, NULL), 0);   /* binary name */
    CHECK(qlen(c, "a") == 5 && qlen(c, "ab") == 5 && qlen(c, "b") == 5);
    CHECK(qlen(c, "x") == 0);
    uint64_t n3 = 0;
    CHECK_RC(qs_queue_len(c, "x\0y", 3, &n3), 0);
    CHECK(n3 == 1);
    CHECK(qrecords(c) == 16);
    CHECK(urecords(c) == 0);

    /* a user record with a queue's name is a different thing */
    CHECK_RC(qs_put(c, "a", 1, "user", 4), 0);
    CHECK(urecords(c) == 1);
    CHECK(qlen(c, "a") == 5);

    for (int i = 0; i < 5; i++) {
        char v[32];
        snprintf(v, sizeof v, "ab-%d", i);
        CHECK(get_is(c, "ab", v, ids[1][i]));
    }
    CHECK_RC(get_rc(c, "ab"), QS_NOTFOUND);
    CHECK(qlen(c, "a") == 5 && qlen(c, "b") == 5);
    for (int i = 0; i < 5; i++) {
        char v[32];
        snprintf(v, sizeof v, "b-%d", i);
        CHECK(get_is(c, "b", v, ids[2][i]));
        snprintf(v, sizeof v, "a-%d", i);
        CHECK(get_is(c, "a", v, ids[0][i]));
    }
    CHECK(qrecords(c) == 1);
    CHECK(urecords(c) == 1);
    void *v = NULL;
    size_t vn = 0;
    CHECK_RC(qs_get(c, "a", 1, &v, &vn), 0);
    CHECK(vn == 4 && memcmp(v, "user", 4) == 0);
    qs_free(v);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void publish_fanout(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    CHECK_RC(qput(c, "q2", "before", NULL), 0);
    const char names[] = "q1q2q3";
    uint64_t noff[4] = {0, 2, 4, 6}, id = 0;
    CHECK_RC(qs_queue_publish(c, 3, names, noff, "news", 4, &id), 0);
    CHECK(id > 0);
    /* 3 references + payload + count, and the plain item */
    CHECK(qrecords(c) == 6);
    CHECK(qlen(c, "q1") == 1 && qlen(c, "q2") == 2 && qlen(c, "q3") == 1);

    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q2", 2, 5, &it), 0);
    CHECK(it->count == 2);
    CHECK(item_is(it, 0, "before", 0));
    CHECK(item_is(it, 1, "news", id));
    qs_items_free(it);

    CHECK(get_is(c, "q1", "news", id));
    CHECK(qrecords(c) == 5);        /* one reference fewer */
    CHECK(get_is(c, "q2", "before", 0));
    CHECK(get_is(c, "q2", "news", id));
    CHECK(qrecords(c) == 3);        /* q3's reference, payload, count */
    CHECK_RC(check_ok(c), 0);

    /* the last reference consumed through a reservation: ack frees it */
    it = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q3", 2, 0, 0, &it), 0);
    CHECK(item_is(it, 0, "news", id));
    CHECK(qrecords(c) == 3);
    CHECK_RC(qs_queue_ack(c, "q3", 2, id, it->token), 0);
    qs_items_free(it);
    CHECK(qrecords(c) == 0);

    /* a big payload published to two queues; one consumed by clear */
    size_t big = 100000;
    unsigned char *p = malloc(big);
    REQUIRE(p != NULL);
    fill_val(p, big, 7);
    uint64_t id2 = 0;
    CHECK_RC(qs_queue_publish(c, 2, names, noff, p, big, &id2), 0);
    CHECK(id2 > id);
    CHECK(qrecords(c) == 4);
    it = NULL;
    CHECK_RC(qs_queue_get(c, "q2", 2, 1, 0, &it), 0);
    CHECK(it && it->count == 1 && it->ids[0] == id2 &&
          val_ok(it->data + it->off[0], (size_t)(it->off[1] - it->off[0]), big, 7));
    qs_items_free(it);
    CHECK(qrecords(c) == 3);
    uint64_t removed = 0;
    CHECK_RC(qs_queue_clear(c, "q1", 2, &removed), 0);
    CHECK(removed == 1);
    CHECK(qrecords(c) == 0);
    CHECK_RC(check_ok(c), 0);

    /* a publish in an aborted transaction leaves nothing */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_publish(c, 3, names, noff, p, big, NULL), 0);
    CHECK(qlen(c, "q3") == 1);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qrecords(c) == 0);
    CHECK(qlen(c, "q1") == 0 && qlen(c, "q2") == 0 && qlen(c, "q3") == 0);

    /* published, then close and reopen: shared payloads survive */
    CHECK_RC(qs_queue_publish(c, 1, "q3", noff, "single", 6, &id), 0);
    CHECK_RC(qs_queue_publish(c, 3, names, noff, p, big, &id2), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qrecords(c) == 3 + 5);
    CHECK(get_is(c, "q3", "single", id));
    for (int q = 0; q < 3; q++) {
        it = NULL;
        CHECK_RC(qs_queue_get(c, names + 2 * q, 2, 5, 0, &it), 0);
        CHECK(it && it->count == 1 && it->ids[0] == id2 &&
              val_ok(it->data + it->off[0], (size_t)(it->off[1] - it->off[0]), big, 7));
        qs_items_free(it);
    }
    CHECK(qrecords(c) == 0);
    free(p);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* reserve_many hands out a batch under one token; ack_many removes it all
 * or nothing (inside a transaction and outside), so a binding can look at
 * payloads before they are consumed. */
static void reserve_many_ack_many(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t id[5];
    const char *v[5] = {"i0", "i1", "i2", "i3", "i4"};
    for (int i = 0; i < 5; i++)
        CHECK_RC(qput(c, "q", v[i], &id[i]), 0);

    qs_items *it = (qs_items *)0x1;
    CHECK_RC(qs_queue_reserve_many(c, "q", 1, 0, 0, 0, &it), QS_INVAL);
    CHECK(it == NULL);
    REQUIRE_RC(qs_queue_reserve_many(c, "q", 1, 3, 0, 0, &it), 0);
    CHECK(it->count == 3 && item_is(it, 0, "i0", id[0]) && item_is(it, 2, "i2", id[2]));
    CHECK(qlen(c, "q") == 2);

    /* refusals change nothing: a stranger id, a wrong token, disorder */
    uint64_t bad[3] = {id[0], id[1], id[3]};
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, bad, it->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, it->ids, it->token + 1), QS_NOTRESERVED);
    uint64_t twice[2] = {id[1], id[1]};
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 2, twice, it->token), QS_INVAL);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 0, it->ids, it->token), QS_INVAL);
    CHECK(qrecords(c) == 5);

    /* inside a transaction: a refusal leaves it unchanged, an abort
     * leaves the batch reserved, a commit removes it */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, bad, it->token), QS_NOTRESERVED);
    CHECK(qrecords(c) == 5);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, it->ids, it->token), 0);
    CHECK(qrecords(c) == 2);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qrecords(c) == 5 && qlen(c, "q") == 2);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, it->ids, it->token), 0);
    CHECK(qrecords(c) == 2 && qlen(c, "q") == 2);
    CHECK_RC(qs_queue_ack_many(c, "q", 1, 3, it->ids, it->token), QS_NOTRESERVED);
    qs_items_free(it);

    /* reserved in a transaction, released there: its view is as before */
    REQUIRE_RC(qs_begin(c), 0);
    it = NULL;
    REQUIRE_RC(qs_queue_reserve_many(c, "q", 1, 10, 0, 0, &it), 0);
    CHECK(it->count == 2 && item_is(it, 1, "i4", id[4]));
    CHECK(qlen(c, "q") == 0);
    for (size_t i = 0; i < it->count; i++)
        CHECK_RC(qs_queue_release(c, "q", 1, it->ids[i], it->token), 0);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(qs_commit(c), 0);
    CHECK(get_is(c, "q", "i3", id[3]));
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void reserve_ack_release(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    qs_items *it = (qs_items *)0x1;
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, 0, &it), QS_NOTFOUND);
    CHECK(it == NULL);

    uint64_t id[5];
    const char *v[5] = {"i0", "i1", "i2", "i3", "i4"};
    for (int i = 0; i < 5; i++)
        CHECK_RC(qput(c, "q", v[i], &id[i]), 0);

    qs_items *r0 = NULL, *r1 = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r0), 0);
    CHECK(r0->count == 1 && item_is(r0, 0, "i0", id[0]));
    CHECK(r0->token != 0);
    CHECK(qlen(c, "q") == 4);       /* reserved ones not counted */

    /* the reserved item is hidden from get and peek */
    it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 10, &it), 0);
    CHECK(it->count == 4 && item_is(it, 0, "i1", id[1]));
    qs_items_free(it);
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r1), 0);
    CHECK(item_is(r1, 0, "i1", id[1]));
    CHECK(r1->token != r0->token);
    CHECK(get_is(c, "q", "i2", id[2]));
    CHECK(qlen(c, "q") == 2);

    /* wrong token, wrong id, wrong queue: QS_NOTRESERVED, nothing changes */
    CHECK_RC(qs_queue_ack(c, "q", 1, id[0], r1->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[3], r0->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack(c, "p", 1, id[0], r0->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(c, "q", 1, id[1], r0->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(c, "q", 1, id[2], r0->token), QS_NOTRESERVED);  /* consumed */
    CHECK(qlen(c, "q") == 2);
    CHECK(qrecords(c) == 4);

    /* ack removes; a second ack or a release of it is refused */
    CHECK_RC(qs_queue_ack(c, "q", 1, id[0], r0->token), 0);
    CHECK(qrecords(c) == 3);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[0], r0->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(c, "q", 1, id[0], r0->token), QS_NOTRESERVED);

    /* release: i1 available again, at its place at the front */
    CHECK_RC(qs_queue_release(c, "q", 1, id[1], r1->token), 0);
    CHECK_RC(qs_queue_release(c, "q", 1, id[1], r1->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r1->token), QS_NOTRESERVED);
    CHECK(qlen(c, "q") == 3);
    qs_items_free(r0);
    qs_items_free(r1);

    /* clear removes the available items only */
    r0 = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r0), 0);
    CHECK(item_is(r0, 0, "i1", id[1]));
    uint64_t removed = 99;
    CHECK_RC(qs_queue_clear(c, "q", 1, &removed), 0);
    CHECK(removed == 2);
    CHECK(qlen(c, "q") == 0);
    CHECK(qrecords(c) == 1);
    CHECK_RC(qs_queue_clear(c, "q", 1, NULL), 0);
    CHECK(qrecords(c) == 1);
    CHECK_RC(qs_queue_release(c, "q", 1, id[1], r0->token), 0);
    CHECK(get_is(c, "q", "i1", id[1]));
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r0->token), QS_NOTRESERVED);
    qs_items_free(r0);
    CHECK(qrecords(c) == 0);

    /* a batch get steps over a reservation in the middle of the queue */
    uint64_t mid[6];
    const char *mv[6] = {"m0", "m1", "m2", "m3", "m4", "m5"};
    for (int i = 0; i < 6; i++)
        CHECK_RC(qput(c, "m", mv[i], &mid[i]), 0);
    qs_items *m0 = NULL, *m1 = NULL, *m2 = NULL, *m3 = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "m", 1, 0, 0, &m0), 0);
    REQUIRE_RC(qs_queue_reserve(c, "m", 1, 0, 0, &m1), 0);
    REQUIRE_RC(qs_queue_reserve(c, "m", 1, 0, 0, &m2), 0);
    REQUIRE_RC(qs_queue_reserve(c, "m", 1, 0, 0, &m3), 0);
    CHECK(item_is(m3, 0, "m3", mid[3]));
    CHECK_RC(qs_queue_release(c, "m", 1, mid[0], m0->token), 0);
    CHECK_RC(qs_queue_release(c, "m", 1, mid[2], m2->token), 0);
    CHECK(qlen(c, "m") == 4);
    it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "m", 1, 10, &it), 0);
    CHECK(it->count == 4 && item_is(it, 0, "m0", mid[0]) && item_is(it, 1, "m2", mid[2]) &&
          item_is(it, 2, "m4", mid[4]) && item_is(it, 3, "m5", mid[5]));
    qs_items_free(it);
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "m", 1, 10, 0, &it), 0);
    CHECK(it->count == 4 && item_is(it, 0, "m0", mid[0]) && item_is(it, 1, "m2", mid[2]) &&
          item_is(it, 2, "m4", mid[4]) && item_is(it, 3, "m5", mid[5]));
    qs_items_free(it);
    CHECK(qlen(c, "m") == 0);
    CHECK(qrecords(c) == 2);
    CHECK_RC(qs_queue_ack(c, "m", 1, mid[3], m3->token), 0);
    CHECK_RC(qs_queue_release(c, "m", 1, mid[1], m1->token), 0);
    CHECK(get_is(c, "m", "m1", mid[1]));
    qs_items_free(m0);
    qs_items_free(m1);
    qs_items_free(m2);
    qs_items_free(m3);
    CHECK(qrecords(c) == 0);

    /* a reservation dies with its handle: after reopen the item is back */
    CHECK_RC(qput(c, "q", "x", &id[0]), 0);
    CHECK_RC(qput(c, "q", "y", &id[1]), 0);
    r0 = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r0), 0);
    CHECK(qlen(c, "q") == 1);
    CHECK_RC(qs_close(c), 0);
    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[0], r0->token), QS_NOTRESERVED);
    CHECK(get_is(c, "q", "x", id[0]));
    CHECK(get_is(c, "q", "y", id[1]));
    qs_items_free(r0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void leases(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    uint64_t a, b;
    CHECK_RC(qput(c, "q", "a", &a), 0);
    CHECK_RC(qput(c, "q", "b", &b), 0);

    qs_items *r = NULL, *r2 = NULL;
    /* leases long enough for the calls inside them under valgrind */
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 1.0, &r), 0);
    CHECK(item_is(r, 0, "a", a));
    CHECK(qlen(c, "q") == 1);
    CHECK(get_is(c, "q", "b", b));
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);
    msleep(1200);
    /* the lease ran out: a is back and the old token is worthless */
    CHECK(qlen(c, "q") == 1);
    CHECK_RC(qs_queue_ack(c, "q", 1, a, r->token), QS_NOTRESERVED);
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0.2, &r2), 0);
    CHECK(item_is(r2, 0, "a", a));
    CHECK_RC(qs_queue_release(c, "q", 1, a, r->token), QS_NOTRESERVED);
    qs_items_free(r);

    /* a get waiting on an empty queue gets the item when the lease ends */
    qs_items *it = NULL;
    double t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 10, &it), 0);
    double dt = tc_now() - t0;
    CHECK(item_is(it, 0, "a", a));
    CHECK(dt < 5);
    qs_items_free(it);
    CHECK_RC(qs_queue_ack(c, "q", 1, a, r2->token), QS_NOTRESERVED);
    qs_items_free(r2);
    CHECK(qrecords(c) == 0);

    /* an acked leased item stays acked after the lease time */
    CHECK_RC(qput(c, "q", "c", &a), 0);
    r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0.5, &r), 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, a, r->token), 0);
    qs_items_free(r);
    msleep(700);
    CHECK(qlen(c, "q") == 0);
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);

    /* lease 0: no expiry */
    CHECK_RC(qput(c, "q", "d", &a), 0);
    r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r), 0);
    msleep(100);
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);
    CHECK_RC(qs_queue_ack(c, "q", 1, a, r->token), 0);
    qs_items_free(r);
    CHECK(qrecords(c) == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Once its lease has run out a reservation is over, even when no other
 * call has looked at the queue since: ack and release are refused
 * (QS_NOTRESERVED) and the item is still queued. */
static void lease_over_without_other_calls(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t a, b;
    CHECK_RC(qput(c, "q", "a", &a), 0);
    CHECK_RC(qput(c, "q", "b", &b), 0);
    qs_items *ra = NULL, *rb = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0.5, &ra), 0);
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0.5, &rb), 0);
    CHECK(item_is(ra, 0, "a", a) && item_is(rb, 0, "b", b));
    msleep(700);
    CHECK_RC(qs_queue_ack(c, "q", 1, a, ra->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_release(c, "q", 1, b, rb->token), QS_NOTRESERVED);
    qs_items_free(ra);
    qs_items_free(rb);
    CHECK(qlen(c, "q") == 2);
    CHECK(get_is(c, "q", "a", a));
    CHECK(get_is(c, "q", "b", b));
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* qs_queue_put_held: where it would wait (outside a transaction with sync
 * on, buffered putdups first) QS_WOULDBLOCK with nothing done; otherwise
 * qs_queue_put_id's answers and ids.  (Its commits outside a transaction:
 * test_api.c, queue_held_calls_commit_only_where_they_wait_for_nobody.) */
static void put_held(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    qs_queue *q = NULL, *b = NULL;
    REQUIRE_RC(qs_queue_new(c, "q", 1, &q), 0);
    REQUIRE_RC(qs_queue_new(c, "b", 1, &b), 0);
    CHECK(qs_queue_put_held(NULL, "v", 1) == QS_INVAL);
    CHECK(qs_queue_put_held(q, NULL, 1) == QS_INVAL);

    /* no transaction, sync on (its commit would wait for the sync):
     * refused, nothing put */
    qs_set_sync(c, 1);
    CHECK(qs_queue_put_held(q, "v", 1) == QS_WOULDBLOCK);
    CHECK(qlen(c, "q") == 0);
    qs_set_sync(c, 0);

    /* in one: the ids qs_queue_put_id would hand out, mixed with it */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK(qs_queue_put_held(q, "a", 1) == 1);
    CHECK(qs_queue_put_id(q, "b", 1) == 2);
    CHECK(qs_queue_put_held(q, "", 0) == 3);
    CHECK(qlen(c, "q") == 3);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 0);
    REQUIRE_RC(qs_begin(c), 0);
    int64_t first = qs_queue_put_held(q, "c", 1);
    CHECK(first >= 1 && qs_queue_put_held(q, "d", 1) == first + 1);
    CHECK_RC(qs_commit(c), 0);
    CHECK(get_is(c, "q", "c", (uint64_t)first) && get_is(c, "q", "d", (uint64_t)first + 1));

    /* buffered putdups are applied before any put: that is the ordinary
     * call's work, so the held one refuses and leaves them buffered */
    REQUIRE_RC(qs_begin(c), 0);
    REQUIRE_RC(qs_putdup(c, "k", 1, "v", 1), 0);
    CHECK(qs_queue_put_held(q, "e", 1) == QS_WOULDBLOCK);
    int64_t e = qs_queue_put_id(q, "e", 1);
    CHECK(e > first + 1);
    CHECK(qs_queue_put_held(q, "f", 1) == e + 1);     /* applied now */
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 2 && get_is(c, "q", "e", (uint64_t)e));

    /* a full bounded queue refuses, and the transaction goes on */
    qs_queue_config cfg = {.maxsize = 1};
    REQUIRE_RC(qs_queue_config_set(c, "b", 1, &cfg), 0);
    REQUIRE_RC(qs_begin(c), 0);
    CHECK(qs_queue_put_held(b, "1", 1) >= 1);
    CHECK(qs_queue_put_held(b, "2", 1) == QS_QFULL);
    CHECK(qs_queue_put_held(q, "g", 1) >= 1);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "b") == 1 && qlen(c, "q") == 2);     /* f, g */

    /* a closed casket: the call says so */
    REQUIRE_RC(qs_begin(c), 0);
    qs_shutdown(c);
    CHECK(qs_queue_put_held(q, "h", 1) == QS_CLOSED);
    qs_queue_free(q);
    qs_queue_free(b);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Every call that hands out items leaves *out NULL when it fails, also
 * when the handle is refused before anything is looked at (NULL, closed):
 * a caller may free *out whatever came back. */
static void items_out_null_on_every_failure(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    qs_shutdown(c);                 /* closed, the handle still allocated */
    qs_casket *handles[] = {NULL, c};
    int want[] = {QS_INVAL, QS_CLOSED};
    qs_items *junk = (qs_items *)&junk, *it;
    for (int h = 0; h < 2; h++) {
        qs_casket *x = handles[h];
#define OUT_NULL(call)                                   \
        it = junk;                                       \
        CHECK_RC(call, want[h]);                         \
        CHECK(it == NULL)
        OUT_NULL(qs_queue_get(x, "q", 1, 1, 0, &it));
        OUT_NULL(qs_queue_get_held(x, "q", 1, 1, &it));
        OUT_NULL(qs_queue_scan(x, "q", 1, 0, 1, 0, &it));
        OUT_NULL(qs_queue_peek(x, "q", 1, 1, &it));
        OUT_NULL(qs_queue_reserve(x, "q", 1, 0, 1, &it));
        OUT_NULL(qs_queue_reserve_many(x, "q", 1, 1, 0, 1, &it));
        OUT_NULL(qs_queue_reserve_uncounted(x, "q", 1, 1, 0, &it));
        OUT_NULL(qs_queue_claim(x, "q", 1, 1, 0, 1, &it));
        OUT_NULL(qs_queue_list(x, &it));
#undef OUT_NULL
    }
    qs_close(c);
    tc_tmp_remove(&t);
}

static void transactions(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    uint64_t id[4];
    const char *v[4] = {"a", "b", "c", "d"};
    for (int i = 0; i < 3; i++)
        CHECK_RC(qput(c, "q", v[i], &id[i]), 0);

    /* abort: consumed back at the front in order, produced gone */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK(get_is(c, "q", "a", id[0]));
    CHECK(get_is(c, "q", "b", id[1]));
    CHECK_RC(qput(c, "q", "d", &id[3]), 0);
    CHECK_RC(qput(c, "other", "o", NULL), 0);
    CHECK(qlen(c, "q") == 2);       /* c, d in the writer's view */
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 10, &it), 0);
    CHECK(it->count == 2 && item_is(it, 0, "c", id[2]) && item_is(it, 1, "d", id[3]));
    qs_items_free(it);
    /* nothing waits inside a transaction */
    CHECK_RC(qs_queue_get(c, "empty", 5, 1, -1, &it), QS_NOTFOUND);
    CHECK_RC(qs_queue_reserve(c, "empty", 5, -1, 0, &it), QS_NOTFOUND);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 3);
    CHECK(qlen(c, "other") == 0);
    it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 10, &it), 0);
    CHECK(it->count == 3);
    for (int i = 0; i < 3; i++)
        CHECK(item_is(it, (size_t)i, v[i], id[i]));
    qs_items_free(it);
    CHECK(qrecords(c) == 3);

    /* commit: the consumed gone, the produced at the end */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK(get_is(c, "q", "a", id[0]));
    CHECK_RC(qput(c, "q", "e", &id[3]), 0);
    CHECK(id[3] > id[2]);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 3);
    CHECK(qrecords(c) == 3);

    /* a reservation made in an aborted transaction is undone */
    REQUIRE_RC(qs_begin(c), 0);
    qs_items *r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r), 0);
    CHECK(item_is(r, 0, "b", id[1]));
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 3);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r->token), QS_NOTRESERVED);
    qs_items_free(r);

    /* a reservation made in a committed transaction lasts */
    REQUIRE_RC(qs_begin(c), 0);
    r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r), 0);
    CHECK(item_is(r, 0, "b", id[1]));
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "q") == 2);

    /* an ack in an aborted transaction leaves the item reserved */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r->token), 0);
    CHECK(qrecords(c) == 2);        /* the writer's view */
    /* release of an item acknowledged in the open transaction: refused */
    CHECK_RC(qs_queue_release(c, "q", 1, id[1], r->token), QS_NOTRESERVED);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r->token), QS_NOTRESERVED);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qrecords(c) == 3);
    CHECK(qlen(c, "q") == 2);
    CHECK_RC(get_rc(c, "nothing"), QS_NOTFOUND);
    it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "q", 1, 10, &it), 0);
    CHECK(it->count == 2 && item_is(it, 0, "c", id[2]) && item_is(it, 1, "e", id[3]));
    qs_items_free(it);
    /* still reserved: the ack, now committed, works */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r->token), 0);
    CHECK(get_is(c, "q", "c", id[2]));
    CHECK_RC(qs_commit(c), 0);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[1], r->token), QS_NOTRESERVED);
    qs_items_free(r);
    CHECK(qrecords(c) == 1);

    /* a release inside a transaction takes effect at once and for good */
    r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &r), 0);
    CHECK(item_is(r, 0, "e", id[3]));
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qs_queue_release(c, "q", 1, id[3], r->token), 0);
    CHECK(qlen(c, "q") == 1);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "q") == 1);
    CHECK_RC(qs_queue_ack(c, "q", 1, id[3], r->token), QS_NOTRESERVED);
    qs_items_free(r);

    /* the aborted put_many: all gone; committed ones in order */
    const char vals[] = "xyz";
    uint64_t off[4] = {0, 1, 2, 3}, first = 0;
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(put_many_off(c, "m", 1, 3, vals, off, &first), 0);
    CHECK(qlen(c, "m") == 3);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "m") == 0);
    uint64_t first2 = 0;
    CHECK_RC(put_many_off(c, "m", 1, 3, vals, off, &first2), 0);
    CHECK(get_is(c, "m", "x", first2));
    CHECK(get_is(c, "m", "y", first2 + 1));
    CHECK(get_is(c, "m", "z", first2 + 2));

    /* items got in a transaction and the transaction committed, then
     * reopened: stays consumed */
    CHECK_RC(qs_close(c), 0);
    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "q") == 1);
    CHECK(get_is(c, "q", "e", id[3]));
    CHECK(qrecords(c) == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void reopen(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t ids[20];
    for (int i = 0; i < 20; i++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", i);
        CHECK_RC(qput(c, i % 2 ? "odd" : "even", v, &ids[i]), 0);
    }
    CHECK(get_is(c, "even", "v0", ids[0]));
    CHECK_RC(qs_close(c), 0);

    /* sync on, and reopened read-only: the same items */
    c = tc_open(t.path, QS_OPEN_READ, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "even") == 9 && qlen(c, "odd") == 10);
    CHECK_RC(qput(c, "even", "no", NULL), QS_READONLY);
    CHECK(qlen(c, "even") == 9);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "odd", 3, 100, &it), 0);
    CHECK(it->count == 10);
    for (int i = 0; i < 10; i++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", 2 * i + 1);
        CHECK(item_is(it, (size_t)i, v, ids[2 * i + 1]));
    }
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);

    c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t nid = 0;
    CHECK_RC(qput(c, "even", "new", &nid), 0);
    CHECK(nid > ids[19]);           /* ids are never reused */
    for (int i = 2; i < 20; i += 2) {
        char v[16];
        snprintf(v, sizeof v, "v%d", i);
        CHECK(get_is(c, "even", v, ids[i]));
    }
    CHECK(get_is(c, "even", "new", nid));
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "odd", 3, 1000, 0, &it), 0);
    CHECK(it->count == 10);
    qs_items_free(it);
    CHECK(qrecords(c) == 0);
    CHECK_RC(qs_close(c), 0);

    /* emptied, reopened: ids still go on */
    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t nid2 = 0;
    CHECK_RC(qput(c, "z", "z", &nid2), 0);
    CHECK(nid2 > nid);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void bad_arguments(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    uint64_t ida, idb;
    CHECK_RC(qput(c, "q", "a", &ida), 0);
    CHECK_RC(qput(c, "q", "b", &idb), 0);
    qs_items *res = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "q", 1, 0, 0, &res), 0);   /* a reserved */
    CHECK_RC(qput(c, "q", "c", NULL), 0);

    char *longname = malloc(QS_MAX_QUEUE_NAME + 2);
    REQUIRE(longname != NULL);
    memset(longname, 'n', QS_MAX_QUEUE_NAME + 1);
    longname[QS_MAX_QUEUE_NAME + 1] = 0;

    qs_items *before = snapshot(c, "q");
    REQUIRE(before != NULL);
    uint64_t rec0 = qrecords(c), len0 = qlen(c, "q"), next_id = 0;
    CHECK(rec0 == 3 && len0 == 2);

    qs_items *it;
    uint64_t n, id;
    const char vals[] = "abcdef";
    uint64_t off_ok[4] = {0, 2, 4, 6};
    uint32_t lens_bad[3] = {3, 2, 2};   /* adds up to 7, not 6 */
    double nan = NAN;

    /* names: NULL, empty, one byte too long */
    CHECK_RC(qs_queue_put(c, NULL, 1, "x", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, NULL, 0, "x", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, "q", 0, "x", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, longname, QS_MAX_QUEUE_NAME + 1, "x", 1, &id), QS_INVAL);
    CHECK_RC(put_many_off(c, "", 0, 3, vals, off_ok, &id), QS_INVAL);
    CHECK_RC(put_many_off(c, NULL, 1, 3, vals, off_ok, &id), QS_INVAL);
    it = NULL;
    CHECK_RC(qs_queue_get(c, NULL, 1, 1, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_get(c, "q", 0, 1, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_get(c, longname, QS_MAX_QUEUE_NAME + 1, 1, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_peek(c, NULL, 1, 1, &it), QS_INVAL);
    CHECK_RC(qs_queue_peek(c, "q", 0, 1, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, NULL, 1, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 0, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, longname, QS_MAX_QUEUE_NAME + 1, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_ack(c, NULL, 1, ida, res->token), QS_INVAL);
    CHECK_RC(qs_queue_ack(c, "q", 0, ida, res->token), QS_INVAL);
    CHECK_RC(qs_queue_release(c, NULL, 1, ida, res->token), QS_INVAL);
    CHECK_RC(qs_queue_release(c, "q", 0, ida, res->token), QS_INVAL);
    CHECK_RC(qs_queue_len(c, NULL, 1, &n), QS_INVAL);
    CHECK_RC(qs_queue_len(c, "q", 0, &n), QS_INVAL);
    CHECK_RC(qs_queue_len(c, longname, QS_MAX_QUEUE_NAME + 1, &n), QS_INVAL);
    CHECK_RC(qs_queue_clear(c, NULL, 1, &n), QS_INVAL);
    CHECK_RC(qs_queue_clear(c, "q", 0, &n), QS_INVAL);

    /* counts and times */
    CHECK_RC(qs_queue_get(c, "q", 1, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_peek(c, "q", 1, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_get(c, "q", 1, 1, nan, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, nan, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, -1, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, -0.5, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, nan, &it), QS_INVAL);

    /* payloads and offsets */
    CHECK_RC(qs_queue_put(c, "q", 1, NULL, 3, &id), QS_INVAL);
    uint32_t lens_ok[3] = {2, 2, 2}, lens_short[3] = {2, 2, 1};
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, vals, 6, lens_bad, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, vals, 6, lens_short, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, vals, 5, lens_ok, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, vals, 6, NULL, &id), QS_INVAL);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, NULL, 6, lens_ok, &id), QS_INVAL);

    /* out-parameters */
    CHECK_RC(qs_queue_get(c, "q", 1, 1, 0, NULL), QS_INVAL);
    CHECK_RC(qs_queue_peek(c, "q", 1, 1, NULL), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, 0, NULL), QS_INVAL);
    CHECK_RC(qs_queue_len(c, "q", 1, NULL), QS_INVAL);
    CHECK_RC(qs_queue_list(c, NULL), QS_INVAL);
    CHECK_RC(qs_queue_records(c, NULL), QS_INVAL);

    /* a NULL handle */
    CHECK_RC(qs_queue_put(NULL, "q", 1, "x", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_get(NULL, "q", 1, 1, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_len(NULL, "q", 1, &n), QS_INVAL);

    /* publish: no names, a bad name, a name twice */
    const char names[] = "q1q2q1";
    uint64_t noff[4] = {0, 2, 4, 6}, noff_empty[3] = {0, 2, 2};
    uint64_t noff_long[2] = {0, QS_MAX_QUEUE_NAME + 1};
    CHECK_RC(qs_queue_publish(c, 0, names, noff, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 3, names, noff, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 2, names, noff_empty, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 1, longname, noff_long, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 2, NULL, noff, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 2, names, NULL, "v", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 2, names, noff, NULL, 1, &id), QS_INVAL);

    /* too big: a payload of QS_MAX_VALUE bytes (readable, never written;
     * the check comes before any copy) */
    void *huge = mmap(NULL, (size_t)QS_MAX_VALUE, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (huge != MAP_FAILED) {
        CHECK_RC(qs_queue_put(c, "q", 1, huge, (size_t)QS_MAX_VALUE, &id), QS_TOOBIG);
        uint32_t hlens[2] = {1, (uint32_t)QS_MAX_VALUE};
        CHECK_RC(qs_queue_put_many(c, "q", 1, 2, huge, (size_t)QS_MAX_VALUE + 1, hlens, &id),
                 QS_TOOBIG);
        munmap(huge, (size_t)QS_MAX_VALUE);
    } else
        printf("  note: could not map 1 GiB; QS_TOOBIG not exercised\n");

    /* unchanged: items, reservation, lengths, records, and the next id */
    qs_items *after = snapshot(c, "q");
    CHECK(same_items(before, after));
    free_snapshot(after);
    CHECK(qrecords(c) == rec0);
    CHECK(qlen(c, "q") == len0);
    CHECK(qlen(c, "q1") == 0 && qlen(c, "q2") == 0);
    qs_items *lst = NULL;
    REQUIRE_RC(qs_queue_list(c, &lst), 0);
    CHECK(lst->count == 1);
    qs_items_free(lst);
    CHECK_RC(qput(c, "next", "n", &next_id), 0);
    CHECK(next_id > idb);
    CHECK(get_is(c, "next", "n", next_id));

    /* the same refusals inside a transaction leave it open and unchanged */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qput(c, "q", "t", NULL), 0);
    CHECK_RC(qs_queue_put_many(c, "q", 1, 3, vals, 6, lens_bad, &id), QS_INVAL);
    CHECK_RC(qs_queue_put(c, "q", 0, "x", 1, &id), QS_INVAL);
    CHECK_RC(qs_queue_get(c, "q", 1, 0, 0, &it), QS_INVAL);
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, -1, &it), QS_INVAL);
    CHECK_RC(qs_queue_publish(c, 3, names, noff, "v", 1, &id), QS_INVAL);
    CHECK(qs_in_transaction(c));
    CHECK(qlen(c, "q") == len0 + 1);
    CHECK_RC(qs_abort(c), 0);
    after = snapshot(c, "q");
    CHECK(same_items(before, after));
    free_snapshot(after);

    /* the longest name works */
    CHECK_RC(qs_queue_put(c, longname, QS_MAX_QUEUE_NAME, "L", 1, &id), 0);
    n = 0;
    CHECK_RC(qs_queue_len(c, longname, QS_MAX_QUEUE_NAME, &n), 0);
    CHECK(n == 1);
    it = NULL;
    CHECK_RC(qs_queue_get(c, longname, QS_MAX_QUEUE_NAME, 1, 0, &it), 0);
    CHECK(item_is(it, 0, "L", id));
    qs_items_free(it);

    /* the reservation still holds */
    CHECK_RC(qs_queue_ack(c, "q", 1, ida, res->token), 0);
    qs_items_free(res);
    free_snapshot(before);
    free(longname);
    qs_items_free(NULL);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void listing(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    qs_items *l = NULL;
    REQUIRE_RC(qs_queue_list(c, &l), 0);
    CHECK(l != NULL && l->count == 0);
    qs_items_free(l);

    CHECK_RC(qput(c, "b", "1", NULL), 0);
    CHECK_RC(qput(c, "a", "1", NULL), 0);
    CHECK_RC(qput(c, "ab", "1", NULL), 0);
    CHECK_RC(qput(c, "c", "1", NULL), 0);
    CHECK_RC(qput(c, "b", "2", NULL), 0);
    CHECK_RC(qput(c, "b", "3", NULL), 0);
    CHECK_RC(qput(c, "a", "2", NULL), 0);
    const char pnames[] = "ca";
    uint64_t poff[3] = {0, 1, 2};
    CHECK_RC(qs_queue_publish(c, 2, pnames, poff, "p", 1, NULL), 0);  /* "p"/"c" records */
    CHECK_RC(qs_put(c, "user", 4, "v", 1), 0);
    qs_items *r = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "b", 1, 0, 0, &r), 0);

    l = NULL;
    REQUIRE_RC(qs_queue_list(c, &l), 0);
    REQUIRE(l->count == 4);
    const char *want[4] = {"a", "ab", "b", "c"};
    uint64_t wlen[4] = {3, 1, 2, 2};
    for (size_t i = 0; i < 4; i++) {
        CHECK(item_is(l, i, want[i], 0));
        CHECK(l->ids[i] == wlen[i]);
    }
    qs_items_free(l);

    /* an emptied queue is no longer listed; one with only a reserved
     * item still is, with length 0 */
    CHECK_RC(qs_queue_clear(c, "a", 1, NULL), 0);
    CHECK_RC(qs_queue_clear(c, "b", 1, NULL), 0);
    l = NULL;
    REQUIRE_RC(qs_queue_list(c, &l), 0);
    REQUIRE(l->count == 3);
    CHECK(item_is(l, 0, "ab", 1) && l->ids[0] == 1);
    CHECK(item_is(l, 1, "b", 0) && l->ids[1] == 0);
    CHECK(item_is(l, 2, "c", 0) && l->ids[2] == 2);
    qs_items_free(l);
    CHECK_RC(qs_queue_ack(c, "b", 1, r->ids[0], r->token), 0);
    qs_items_free(r);

    /* inside a transaction: the writer's view */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qput(c, "d", "1", NULL), 0);
    CHECK_RC(qs_queue_clear(c, "ab", 2, NULL), 0);
    l = NULL;
    REQUIRE_RC(qs_queue_list(c, &l), 0);
    REQUIRE(l->count == 2);
    CHECK(item_is(l, 0, "c", 0) && l->ids[0] == 2);
    CHECK(item_is(l, 1, "d", 0) && l->ids[1] == 1);
    qs_items_free(l);
    CHECK_RC(qs_abort(c), 0);
    l = NULL;
    REQUIRE_RC(qs_queue_list(c, &l), 0);
    REQUIRE(l->count == 2);
    CHECK(item_is(l, 0, "ab", 0) && item_is(l, 1, "c", 0));
    qs_items_free(l);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* qs_queue_put_framed: the payloads of well-formed frames (empty, small
 * and leaf-overflowing ones) come back whole and in order; every kind of
 * damaged framing is QS_INVAL with nothing stored. */
static size_t put_frame(unsigned char *at, const unsigned char *val, uint32_t len)
{
    at[0] = QS_FRAME_BYTES;
    for (int b = 0; b < 4; b++)
        at[1 + b] = (unsigned char)(len >> (8 * b));
    if (len)
        memcpy(at + 5, val, len);
    return 5 + (size_t)len;
}

static void put_framed(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    uint32_t sizes[] = {3, 0, 36, 999, 1000, 70000, 1};
    size_t ns = sizeof sizes / sizeof sizes[0], len = 0, start[8];
    unsigned char *val = malloc(70000), *frames = malloc(ns * 5 + 80000);
    REQUIRE(val && frames);
    for (size_t i = 0; i < ns; i++) {
        fill_val(val, sizes[i], i);
        start[i] = len;
        len += put_frame(frames + len, val, sizes[i]);
    }
    /* damaged: nothing stored, the queue never comes to exist */
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns + 1, frames, len, NULL), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns - 1, frames, len, NULL), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns, frames, len - 1, NULL), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns, frames, 4, NULL), QS_INVAL);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, 1, NULL, 8, NULL), QS_INVAL);
    frames[start[3]] = 'u';             /* a str, as marshal writes it */
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns, frames, len, NULL), QS_INVAL);
    frames[start[3]] = QS_FRAME_BYTES;
    frames[1 + 3] = 0x80;               /* the first length overruns */
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns, frames, len, NULL), QS_INVAL);
    frames[1 + 3] = 0;
    CHECK_RC(qs_queue_put_framed(c, "", 0, ns, frames, len, NULL), QS_INVAL);
    CHECK(qrecords(c) == 0);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, 0, NULL, 0, NULL), 0);
    CHECK(qrecords(c) == 0);

    uint64_t first = 0, before;
    CHECK_RC(qput(c, "f", "before", &before), 0);
    CHECK_RC(qs_queue_put_framed(c, "f", 1, ns, frames, len, &first), 0);
    CHECK(first == before + 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);

    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "f") == ns + 1);
    CHECK(get_is(c, "f", "before", before));
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_get(c, "f", 1, 100, 0, &it), 0);
    CHECK(it->count == ns);
    for (size_t i = 0; i < ns && i < it->count; i++) {
        CHECK(it->ids[i] == first + i);
        CHECK(val_ok(it->data + it->off[i], (size_t)(it->off[i + 1] - it->off[i]), sizes[i], i));
    }
    qs_items_free(it);
    CHECK_RC(qs_close(c), 0);
    free(val);
    free(frames);
    tc_tmp_remove(&t);
}

/* qs_queue_new / qs_queue_put_id: bad arguments refused with nothing
 * allocated; ids come back as the return value, in order with the
 * name-taking calls; errors come back negative (a read-only casket, a
 * closed one). */
static void queue_handle(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    qs_queue *q = (qs_queue *)0x1;
    CHECK_RC(qs_queue_new(NULL, "h", 1, &q), QS_INVAL);
    CHECK(q == NULL);
    CHECK_RC(qs_queue_new(c, "", 0, &q), QS_INVAL);
    CHECK_RC(qs_queue_new(c, "h", QS_MAX_QUEUE_NAME + 1, &q), QS_INVAL);
    CHECK_RC(qs_queue_new(c, "h", 1, NULL), QS_INVAL);
    qs_queue_free(NULL);
    CHECK(qs_queue_put_id(NULL, "x", 1) == QS_INVAL);

    REQUIRE_RC(qs_queue_new(c, "h", 1, &q), 0);
    CHECK(qs_queue_put_id(q, NULL, 1) == QS_INVAL);
    uint64_t before;
    CHECK_RC(qput(c, "h", "zero", &before), 0);
    int64_t a = qs_queue_put_id(q, "one", 3), b = qs_queue_put_id(q, "", 0);
    CHECK(a == (int64_t)before + 1 && b == a + 1);
    CHECK(qs_queue_put_id(q, "x", (size_t)QS_MAX_VALUE) == QS_TOOBIG);
    CHECK(qlen(c, "h") == 3);
    CHECK(get_is(c, "h", "zero", before));
    CHECK(get_is(c, "h", "one", (uint64_t)a));
    CHECK(get_is(c, "h", "", (uint64_t)b));
    CHECK(qrecords(c) == 0);
    CHECK_RC(qs_close(c), 0);
    qs_queue_free(q);   /* after qs_close: allowed, touches nothing of c */

    c = tc_open(t.path, QS_OPEN_READ, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    REQUIRE_RC(qs_queue_new(c, "h", 1, &q), 0);
    CHECK(qs_queue_put_id(q, "ro", 2) == QS_READONLY);
    CHECK_RC(qs_shutdown(c), 0);
    CHECK(qs_queue_put_id(q, "late", 4) == QS_CLOSED);
    qs_queue_free(q);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void big_payloads(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    size_t sizes[] = {0, 1, 1023, 1024, 1025, 4095, 4096, 4097, 5000, 70000, 1 << 20};
    size_t ns = sizeof sizes / sizeof sizes[0];
    unsigned char *buf = malloc((1 << 20) * 3);
    REQUIRE(buf != NULL);
    uint64_t ids[16];
    for (size_t i = 0; i < ns; i++) {
        fill_val(buf, sizes[i], i);
        CHECK_RC(qs_queue_put(c, "big", 3, buf, sizes[i], &ids[i]), 0);
    }
    /* put_many mixing small and big */
    uint64_t off[5] = {0, 5000, 5010, 5010 + (1 << 20), 5020 + (1 << 20)};
    for (size_t i = 0; i < 4; i++)
        fill_val(buf + off[i], (size_t)(off[i + 1] - off[i]), 100 + i);
    uint64_t first = 0;
    CHECK_RC(put_many_off(c, "big", 3, 4, buf, off, &first), 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);

    c = open_q(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(qlen(c, "big") == ns + 4);
    qs_items *it = NULL;
    REQUIRE_RC(qs_queue_peek(c, "big", 3, 3, &it), 0);
    CHECK(it->count == 3);
    qs_items_free(it);
    for (size_t i = 0; i < ns; i++) {
        it = NULL;
        CHECK_RC(qs_queue_get(c, "big", 3, 1, 0, &it), 0);
        if (!it)
            continue;
        CHECK(it->count == 1 && it->ids[0] == ids[i]);
        CHECK(val_ok(it->data + it->off[0], (size_t)(it->off[1] - it->off[0]), sizes[i], i));
        qs_items_free(it);
    }
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "big", 3, 10, 0, &it), 0);
    CHECK(it->count == 4);
    for (size_t i = 0; i < 4 && i < it->count; i++) {
        CHECK(it->ids[i] == first + i);
        CHECK(val_ok(it->data + it->off[i], (size_t)(it->off[i + 1] - it->off[i]),
                     (size_t)(off[i + 1] - off[i]), 100 + i));
    }
    qs_items_free(it);
    CHECK(qrecords(c) == 0);

    /* a reserved big item comes back whole after release */
    fill_val(buf, 1 << 20, 9);
    CHECK_RC(qs_queue_put(c, "big", 3, buf, 1 << 20, &ids[0]), 0);
    it = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "big", 3, 0, 0, &it), 0);
    CHECK(val_ok(it->data, (size_t)it->off[1], 1 << 20, 9));
    CHECK_RC(qs_queue_release(c, "big", 3, ids[0], it->token), 0);
    qs_items_free(it);
    it = NULL;
    REQUIRE_RC(qs_queue_get(c, "big", 3, 1, 0, &it), 0);
    CHECK(val_ok(it->data, (size_t)it->off[1], 1 << 20, 9));
    qs_items_free(it);
    CHECK(qrecords(c) == 0);
    free(buf);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void large_batch(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    size_t n = (size_t)tc_scaled(200000, 10);
    uint64_t *off = malloc((n + 1) * sizeof *off);
    REQUIRE(off != NULL);
    off[0] = 0;
    for (size_t i = 0; i < n; i++)
        off[i + 1] = off[i] + 8 + i % 33;
    unsigned char *vals = malloc((size_t)off[n]);
    REQUIRE(vals != NULL);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = vals + off[i];
        size_t len = (size_t)(off[i + 1] - off[i]);
        uint64_t x = i;
        memcpy(p, &x, 8);           /* unique */
        fill_val(p + 8, len - 8, i);
    }
    uint64_t first = 0, pre = 0;
    CHECK_RC(qput(c, "L", "first", &pre), 0);
    CHECK_RC(put_many_off(c, "L", 1, n, vals, off, &first), 0);
    CHECK(first == pre + 1);
    CHECK(qlen(c, "L") == n + 1);
    CHECK(qrecords(c) == n + 1);
    uint64_t after = 0;
    CHECK_RC(qput(c, "L", "last", &after), 0);
    CHECK(after == first + n);
    CHECK_RC(check_ok(c), 0);

    CHECK(get_is(c, "L", "first", pre));
    /* drain in batches of 1000: the n items in order, then "last" */
    size_t got = 0;
    int bad = 0, saw_last = 0;
    while (!bad && !saw_last) {
        qs_items *it = NULL;
        rc = qs_queue_get(c, "L", 1, 1000, 0, &it);
        if (rc != 0) {
            CHECK_RC(rc, 0);
            break;
        }
        size_t left = n + 1 - got;
        if (it->count != (left < 1000 ? left : 1000)) {
            printf("  batch at %zu: %zu items\n", got, it->count);
            bad = 1;
        }
        for (size_t j = 0; j < it->count && !bad; j++) {
            size_t i = got + j;
            if (i == n) {
                CHECK(item_is(it, j, "last", after));
                saw_last = 1;
                continue;
            }
            uint64_t x;
            size_t len = (size_t)(it->off[j + 1] - it->off[j]);
            memcpy(&x, it->data + it->off[j], 8);
            if (it->ids[j] != first + i || len != (size_t)(off[i + 1] - off[i]) || x != i ||
                memcmp(it->data + it->off[j], vals + off[i], len) != 0) {
                printf("  item %zu wrong (id %" PRIu64 ", want %" PRIu64 ")\n", i,
                       it->ids[j], first + i);
                bad = 1;
            }
        }
        got += it->count;
        qs_items_free(it);
    }
    CHECK(!bad);
    CHECK(saw_last);
    CHECK(got == n + 1);
    CHECK_RC(get_rc(c, "L"), QS_NOTFOUND);
    CHECK(qlen(c, "L") == 0);
    CHECK(qrecords(c) == 0);
    CHECK_RC(check_ok(c), 0);

    /* the same batch in a transaction that aborts: nothing */
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(put_many_off(c, "L", 1, n, vals, off, &first), 0);
    CHECK(qlen(c, "L") == n);
    CHECK_RC(qs_abort(c), 0);
    CHECK(qlen(c, "L") == 0);
    CHECK(qrecords(c) == 0);
    CHECK_RC(check_ok(c), 0);
    free(vals);
    free(off);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ---- threads ----------------------------------------------------------- */

typedef struct {
    qs_casket *c;
    double timeout;
    int rc;
    qs_items *it;
    int reserve;
    double t_done;
    atomic_int started, done;
} waiter;

static void *waiter_main(void *p)
{
    waiter *w = p;
    w->started = 1;
    if (w->reserve)
        w->rc = qs_queue_reserve(w->c, "w", 1, w->timeout, 0, &w->it);
    else
        w->rc = qs_queue_get(w->c, "w", 1, 1, w->timeout, &w->it);
    w->t_done = tc_now();
    w->done = 1;
    return NULL;
}

/* qs_set_wait_slice: a wait longer than the slice returns QS_INTR after
 * about one slice with nothing taken and the time left in
 * qs_queue_wait_left (-1 for no limit); a shorter one runs its course; an
 * item put meanwhile is taken by the call made again; 0 turns it off. */
static void wait_slice(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    qs_items *it = NULL;
    qs_set_wait_slice(0.05);
    double t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "s", 1, 1, -1, &it), QS_INTR);
    double took = tc_now() - t0;
    CHECK(took >= 0.04 && took < 2.0);
    CHECK(it == NULL && qs_queue_wait_left() == -1);
    t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "s", 1, 1, 10, &it), QS_INTR);
    took = tc_now() - t0;
    CHECK(took < 2.0 && qs_queue_wait_left() > 8 && qs_queue_wait_left() <= 10 - 0.04);
    CHECK_RC(qs_queue_reserve(c, "s", 1, -1, 60, &it), QS_INTR);
    CHECK(it == NULL);
    t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "s", 1, 1, 0.02, &it), QS_NOTFOUND);   /* under the slice */
    CHECK(tc_now() - t0 >= 0.015);
    uint64_t id;
    CHECK_RC(qput(c, "s", "item", &id), 0);
    CHECK_RC(qs_queue_get(c, "s", 1, 1, qs_queue_wait_left(), &it), 0);
    CHECK(item_is(it, 0, "item", id));
    qs_items_free(it);
    it = NULL;
    qs_set_wait_slice(0);
    t0 = tc_now();
    CHECK_RC(qs_queue_get(c, "s", 1, 1, 0.2, &it), QS_NOTFOUND);    /* off: the whole wait */
    CHECK(tc_now() - t0 >= 0.18);
    qs_set_wait_slice(-1);          /* taken as 0 */
    CHECK_RC(qs_queue_get(c, "s", 1, 1, 0.1, &it), QS_NOTFOUND);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void threads_wake(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);

    /* a put from another thread wakes a blocked get */
    waiter w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.timeout = 10;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, waiter_main, &w) == 0);
    while (!w.started)
        msleep(1);
    msleep(50);
    CHECK(!w.done);
    uint64_t id;
    double t0 = tc_now();
    CHECK_RC(qput(c, "w", "hello", &id), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(item_is(w.it, 0, "hello", id));
    CHECK(w.t_done - t0 < 5);
    qs_items_free(w.it);

    /* a put inside a transaction wakes nobody until the commit */
    memset(&w, 0, sizeof w);
    w.c = c;
    w.timeout = 10;
    REQUIRE(pthread_create(&th, NULL, waiter_main, &w) == 0);
    while (!w.started)
        msleep(1);
    REQUIRE_RC(qs_begin(c), 0);
    CHECK_RC(qput(c, "w", "txn", &id), 0);
    msleep(100);
    CHECK(!w.done);
    t0 = tc_now();
    CHECK_RC(qs_commit(c), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(item_is(w.it, 0, "txn", id));
    CHECK(w.t_done - t0 < 5);
    qs_items_free(w.it);

    /* a release wakes a blocked reserve */
    CHECK_RC(qput(c, "w", "r", &id), 0);
    qs_items *mine = NULL;
    REQUIRE_RC(qs_queue_reserve(c, "w", 1, 0, 0, &mine), 0);
    memset(&w, 0, sizeof w);
    w.c = c;
    w.timeout = 10;
    w.reserve = 1;
    REQUIRE(pthread_create(&th, NULL, waiter_main, &w) == 0);
    while (!w.started)
        msleep(1);
    msleep(50);
    CHECK(!w.done);
    t0 = tc_now();
    CHECK_RC(qs_queue_release(c, "w", 1, id, mine->token), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(item_is(w.it, 0, "r", id));
    CHECK(w.t_done - t0 < 5);
    if (w.it) {
        CHECK(w.it->token != mine->token);
        CHECK_RC(qs_queue_ack(c, "w", 1, id, mine->token), QS_NOTRESERVED);
        CHECK_RC(qs_queue_ack(c, "w", 1, id, w.it->token), 0);
    }
    qs_items_free(mine);
    qs_items_free(w.it);
    CHECK(qrecords(c) == 0);

    /* qs_shutdown makes a get blocked without limit return QS_CLOSED */
    memset(&w, 0, sizeof w);
    w.c = c;
    w.timeout = -1;
    REQUIRE(pthread_create(&th, NULL, waiter_main, &w) == 0);
    while (!w.started)
        msleep(1);
    msleep(50);
    CHECK(!w.done);
    t0 = tc_now();
    CHECK_RC(qs_shutdown(c), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, QS_CLOSED);
    CHECK(w.it == NULL);
    CHECK(w.t_done - t0 < 5);
    CHECK_RC(qput(c, "w", "late", NULL), QS_CLOSED);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_get(c, "w", 1, 1, -1, &it), QS_CLOSED);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* several processes                                                   */

/* A child that opens path, reserves n items of queue q (lease seconds, 0:
 * none), reports their ids and waits to be killed. */
typedef struct {
    const char *path, *q;
    int n;
    double lease;
} reserving_arg;

static int reserving_main(void *arg, int report, int release)
{
    const reserving_arg *a = arg;
    (void)release;
    int rc;
    qs_casket *c = open_q(a->path, QS_OPEN_WRITE, &rc);
    uint64_t ids[16] = {0};
    for (int i = 0; c && i < a->n && i < 16; i++) {
        qs_items *it = NULL;
        if (qs_queue_reserve(c, a->q, strlen(a->q), 0, a->lease, &it) == 0 && it->count == 1)
            ids[i] = it->ids[0];
        qs_items_free(it);
    }
    if (write(report, ids, sizeof ids) != (ssize_t)sizeof ids)
        return 3;
    for (;;)
        pause();
}

static int reserving_child(tc_child *ch, const char *path, const char *q, int n, double lease)
{
    reserving_arg a = {path, q, n, lease};
    return tc_child_start(ch, reserving_main, &a);
}

/* Reservations are shared: another process's reserved items are hidden and
 * not counted; when it is killed they come back at the front, in order,
 * and a blocked reserve here is woken by them. */
static void processes_reservations(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const char *v[4] = {"p0", "p1", "p2", "p3"};
    uint64_t id[4];
    for (int i = 0; i < 4; i++)
        CHECK_RC(qput(c, "q", v[i], &id[i]), 0);
    tc_child holder;
    REQUIRE(reserving_child(&holder, t.path, "q", 2, 0) == 0);
    uint64_t got[16] = {0};
    CHECK(read(holder.report, got, sizeof got) == (ssize_t)sizeof got);
    CHECK(got[0] == id[0] && got[1] == id[1]);
    CHECK(qlen(c, "q") == 2);
    CHECK(get_is(c, "q", "p2", id[2]));
    CHECK(qlen(c, "q") == 1);
    tc_child_kill(&holder);
    /* the dead holder is noticed by a look at the queue (at most every
     * 100 ms) */
    double t0 = tc_now();
    while (qlen(c, "q") != 3 && tc_now() - t0 < 3.0)
        msleep(5);
    double dt = tc_now() - t0;
    printf("  a dead process's reservations came back after %.3f s\n", dt);
    CHECK(qlen(c, "q") == 3);
    CHECK(dt < 2.0);
    qs_items *it = NULL;
    CHECK_RC(qs_queue_reserve(c, "q", 1, 0, 0, &it), 0);
    CHECK(it && it->count == 1 && item_is(it, 0, "p0", id[0]));
    if (it)
        CHECK_RC(qs_queue_release(c, "q", 1, it->ids[0], it->token), 0);
    qs_items_free(it);
    CHECK(qlen(c, "q") == 3);
    CHECK(get_is(c, "q", "p0", id[0]));
    CHECK(get_is(c, "q", "p1", id[1]));
    CHECK(get_is(c, "q", "p3", id[3]));
    CHECK_RC(get_rc(c, "q"), QS_NOTFOUND);
    CHECK_RC(qs_check(c, NULL, 0), 0);
    qs_close(c);
    tc_tmp_remove(&t);
}

/* A child that opens path, reports 'r', gets one item of queue "w"
 * waiting up to 10 s and reports 'y' when it got "hi" within 5 s. */
static int waiting_getter_main(void *arg, int report, int release)
{
    (void)release;
    int rc;
    qs_casket *d = open_q(arg, QS_OPEN_WRITE, &rc);
    char r = 'n';
    if (d && write(report, "r", 1) == 1) {
        qs_items *it = NULL;
        double t0 = tc_now();
        rc = qs_queue_get(d, "w", 1, 1, 10.0, &it);
        if (rc == 0 && it->count == 1 && item_is(it, 0, "hi", 0) &&
            tc_now() - t0 < 5.0)
            r = 'y';
        qs_items_free(it);
        qs_close(d);
    }
    if (write(report, &r, 1) != 1)
        return 3;
    return 0;
}

/* A child blocked in get wakes when this process commits a put. */
static void processes_wake(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    tc_child getter;
    REQUIRE(tc_child_start(&getter, waiting_getter_main, t.path) == 0);
    char r = 0;
    CHECK(read(getter.report, &r, 1) == 1 && r == 'r');
    msleep(100);    /* let it block */
    CHECK_RC(qput(c, "w", "hi", NULL), 0);
    double t0 = tc_now();
    CHECK(read(getter.report, &r, 1) == 1 && r == 'y');
    printf("  woken and answered after %.3f s\n", tc_now() - t0);
    CHECK(tc_child_end(&getter) == 0);
    CHECK(qlen(c, "w") == 0);
    qs_close(c);
    tc_tmp_remove(&t);
}

/* A handle used in a child it was inherited by refuses; closing it there
 * leaves the parent's locks and state alone. */
static void processes_fork(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qput(c, "f", "x", NULL), 0);
    /* a handle shut down before the fork, freed only afterwards (as a
     * garbage collector does) in the child and in the parent */
    qs_casket *gone = open_q(t.path, QS_OPEN_WRITE, &rc);
    CHECK_RC(rc, 0);
    if (gone)
        CHECK_RC(qs_shutdown(gone), 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qput(c, "f", "uncommitted", NULL), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        if (gone)
            bad += qs_close(gone) != 0;
        uint64_t n;
        bad += qs_queue_len(c, "f", 1, &n) != QS_FORKED;
        bad += qput(c, "f", "child", NULL) != QS_FORKED;
        bad += qs_commit(c) != QS_FORKED;
        bad += qs_close(c) != 0;
        /* a fresh handle in the child waits for the parent's transaction */
        qs_options o;
        qs_options_init(&o);
        o.flag = QS_OPEN_WRITE;
        o.lock_timeout = 0.1;
        qs_casket *d = NULL;
        bad += qs_open(t.path, &o, &d) != 0;
        if (d) {
            bad += qput(d, "f", "child", NULL) != QS_LOCKED;
            bad += qs_queue_len(d, "f", 1, &n) != 0 || n != 1;
            qs_close(d);
        }
        _exit(bad);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (gone)
        qs_close(gone);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qlen(c, "f") == 2);
    CHECK(get_is(c, "f", "x", 0));
    CHECK(get_is(c, "f", "uncommitted", 0));
    CHECK_RC(qs_check(c, NULL, 0), 0);
    qs_close(c);
    tc_tmp_remove(&t);
}

/* The shared file beside the casket, damaged while nobody has it open, is
 * rebuilt by the next opener. */
static void processes_region_damaged(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_q(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qput(c, "d", "kept", NULL), 0);
    qs_close(c);
    char shm[sizeof t.path + 8];
    snprintf(shm, sizeof shm, "%s-shm", t.path);
    for (int how = 0; how < 3; how++) {
        int fd = open(shm, O_RDWR | O_CREAT, 0644);
        REQUIRE(fd >= 0);
        if (how == 0) {
            unsigned char junk[8192];
            tc_rng g = {(uint64_t)how + 7};
            for (size_t i = 0; i < sizeof junk; i++)
                junk[i] = (unsigned char)tc_next(&g);
            CHECK(pwrite(fd, junk, sizeof junk, 0) == (ssize_t)sizeof junk);
        } else
            CHECK(ftruncate(fd, how == 1 ? 100 : 0) == 0);
        close(fd);
        c = open_q(t.path, QS_OPEN_WRITE, &rc);
        CHECK_RC(rc, 0);
        if (c) {
            CHECK(qlen(c, "d") == 1);
            qs_items *it = NULL;
            CHECK_RC(qs_queue_peek(c, "d", 1, 1, &it), 0);
            CHECK(it && it->count == 1 && item_is(it, 0, "kept", 0));
            qs_items_free(it);
            CHECK_RC(qput(c, "d", "more", NULL), 0);
            CHECK_RC(qs_check(c, NULL, 0), 0);
            qs_casket *d = open_q(t.path, QS_OPEN_WRITE, &rc);
            CHECK_RC(rc, 0);
            if (d) {
                CHECK(qlen(d, "d") == 2);
                CHECK(get_is(d, "d", "kept", 0));
                qs_close(d);
            }
            CHECK(qlen(c, "d") == 1);
            CHECK(get_is(c, "d", "more", 0));
            CHECK_RC(qput(c, "d", "kept", NULL), 0);
            qs_close(c);
        }
    }
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(put_get_order);
    RUN(several_queues);
    RUN(publish_fanout);
    RUN(reserve_ack_release);
    RUN(reserve_many_ack_many);
    RUN(leases);
    RUN(lease_over_without_other_calls);
    RUN(transactions);
    RUN(put_held);
    RUN(items_out_null_on_every_failure);
    RUN(reopen);
    RUN(bad_arguments);
    RUN(listing);
    RUN(big_payloads);
    RUN(put_framed);
    RUN(queue_handle);
    RUN(large_batch);
    RUN(threads_wake);
    RUN(wait_slice);
    RUN(processes_reservations);
    RUN(processes_wake);
    RUN(processes_fork);
    RUN(processes_region_damaged);
    return tc_summary();
}
