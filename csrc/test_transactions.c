/*
 * test_transactions.c -- transactions: misuse (commit without begin, a
 * second begin, failed calls inside one), isolation from the handle's
 * other threads, an invariant kept by concurrent transactions with aborts,
 * spills, compaction and syncs, and transaction owners (lock_timeout
 * between threads, an owner that ended or whose thread id was reused).
 */
#include <sys/syscall.h>

#include "test_records.h"
#include "handle.h"     /* transaction owners: a reused thread id is faked */

static void txn_misuse(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_commit(c), QS_TXN);
    CHECK_RC(qs_abort(c), QS_TXN);
    CHECK(qs_in_transaction(c) == 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK(qs_in_transaction(c) != 0);
    CHECK(stat_of(c).in_transaction != 0);
    CHECK_RC(qs_begin(c), QS_TXN);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    CHECK(get_is(c, "a", "1"));                 /* own changes visible */
    CHECK_RC(qs_sync(c), QS_TXN);
    CHECK_RC(qs_compact(c), QS_TXN);
    /* a failed call inside a transaction leaves it open and unchanged */
    static unsigned char big[QS_MAX_KEY + 1];
    CHECK_RC(qs_put(c, big, sizeof big, "x", 1), QS_TOOBIG);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_putkeep(c, "a", 1, "2", 1), QS_KEYEXIST);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_out(c, "zz", 2), QS_NOTFOUND);
    CHECK(qs_in_transaction(c) != 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(qs_in_transaction(c) == 0);
    CHECK(stat_of(c).in_transaction == 0);
    CHECK_RC(qs_commit(c), QS_TXN);
    CHECK_RC(qs_abort(c), QS_TXN);
    CHECK(get_is(c, "a", "1"));

    /* abort restores everything */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "a", "changed"), 0);
    CHECK_RC(put_str(c, "b", "new"), 0);
    CHECK_RC(qs_putdup(c, "a", 1, "d", 1), 0);
    CHECK(records_of(c) == 3);
    CHECK_RC(qs_abort(c), 0);
    CHECK(get_is(c, "a", "1"));
    CHECK_RC(get_rc(c, "b"), QS_NOTFOUND);
    CHECK(records_of(c) == 1);

    /* closing with a transaction open aborts it */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "x", "lost"), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(get_rc(c, "x"), QS_NOTFOUND);
    CHECK(get_is(c, "a", "1"));
    CHECK(qs_in_transaction(c) == 0);
    CHECK_RC(check_ok(c), 0);

    /* a transaction can be begun again after commit and abort */
    for (int i = 0; i < 5; i++) {
        CHECK_RC(qs_begin(c), 0);
        CHECK_RC(put_str(c, "loop", i & 1 ? "odd" : "even"), 0);
        CHECK_RC(i & 1 ? qs_abort(c) : qs_commit(c), 0);
    }
    CHECK(get_is(c, "loop", "even"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int get_x, count_x, first, commit, abort_, intxn, st_intxn, out_rc;
    uint64_t records;
    atomic_int done;
    int put_rc;
} iso_arg;

static void *iso_reader(void *p)
{
    iso_arg *a = p;
    a->get_x = get_rc(a->c, "x");
    uint64_t n = 99;
    qs_count(a->c, "x", 1, &n);
    a->count_x = (int)n;
    qs_records(a->c, &a->records);
    qs_cursor *cur = NULL;
    a->first = -1;
    if (qs_cursor_open(a->c, &cur) == 0) {
        a->first = qs_cursor_first(cur);
        qs_cursor_close(cur);
    }
    a->commit = qs_commit(a->c);
    a->abort_ = qs_abort(a->c);
    a->intxn = qs_in_transaction(a->c);
    qs_stat st;
    qs_stat_get(a->c, &st);
    a->st_intxn = (int)st.in_transaction;
    return NULL;
}

static void *iso_writer(void *p)
{
    iso_arg *a = p;
    a->put_rc = put_str(a->c, "y", "from B");
    a->done = 1;
    return NULL;
}

static void txn_isolation_threads(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "x", "from A"), 0);
    CHECK(get_is(c, "x", "from A"));

    iso_arg a;
    memset(&a, 0, sizeof a);
    a.c = c;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, iso_reader, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.get_x, QS_NOTFOUND);
    CHECK(a.count_x == 0);
    CHECK(a.records == 0);
    CHECK_RC(a.first, QS_NOTFOUND);
    CHECK_RC(a.commit, QS_TXN);
    CHECK_RC(a.abort_, QS_TXN);
    CHECK(a.intxn == 0);
    CHECK(a.st_intxn != 0);
    CHECK(qs_in_transaction(c) != 0);   /* A's txn untouched */

    /* B's write waits for A's transaction */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, iso_writer, &a) == 0);
    msleep(300);
    CHECK(a.done == 0);
    CHECK_RC(get_rc(c, "y"), QS_NOTFOUND);
    CHECK_RC(qs_commit(c), 0);
    pthread_join(th, NULL);
    CHECK(a.done == 1);
    CHECK_RC(a.put_rc, 0);

    /* now B sees A's commit */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, iso_reader, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.get_x, 0);
    CHECK(a.count_x == 1);
    CHECK(a.records == 2);
    CHECK_RC(a.first, 0);
    CHECK(a.st_intxn == 0);
    CHECK(get_is(c, "y", "from B"));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}


/* Writers move amounts between ten "bank" values in transactions (a third
 * of them aborted), and pile up junk that spills (tiny cache) but is removed
 * or aborted before any commit; one thread compacts and syncs now and then.
 * Readers must always see ten values summing to zero, and no junk. */

typedef struct {
    qs_casket *c;
    qs_cursor *cur;
    int id, rounds;
    atomic_int *stop;
    int rc;
    long commits, aborts, reads, bad;
} inv_arg;

static int bank_read(qs_casket *c, int64_t *sum, uint64_t *cnt)
{
    void *out = NULL;
    size_t outlen = 0;
    int rc = qs_getdup(c, "bank", 4, &out, &outlen, cnt);
    if (rc)
        return rc;
    *sum = 0;
    const unsigned char *p = out, *end = p + outlen;
    for (uint64_t i = 0; i < *cnt; i++) {
        if (end - p < 12 || tc_le32(p) != 8) {
            qs_free(out);
            return QS_CORRUPT;
        }
        int64_t x;
        memcpy(&x, p + 4, 8);
        *sum += x;
        p += 12;
    }
    qs_free(out);
    return p == end ? 0 : QS_CORRUPT;
}

static void *inv_writer(void *p)
{
    inv_arg *a = p;
    tc_rng r = {(uint64_t)a->id * 7777 + 1};
    unsigned char junk[6000];
    memset(junk, 'j', sizeof junk);
    for (int n = 0; n < a->rounds && !a->rc; n++) {
        int rc = qs_begin(a->c);
        if (rc) { a->rc = rc; break; }
        void *out = NULL;
        size_t outlen = 0;
        uint64_t cnt = 0;
        rc = qs_getdup(a->c, "bank", 4, &out, &outlen, &cnt);
        int64_t v[10] = {0};
        if (!rc && cnt == 10 && outlen == 120)
            for (int i = 0; i < 10; i++)
                memcpy(&v[i], (unsigned char *)out + 12 * i + 4, 8);
        else if (!rc)
            rc = QS_CORRUPT;
        qs_free(out);
        /* junk that makes the transaction spill */
        int njunk = (int)tc_below(&r, 80);
        for (int i = 0; i < njunk && !rc; i++)
            rc = qs_putdup(a->c, "junk", 4, junk, sizeof junk);
        int from = (int)tc_below(&r, 10), to = (int)tc_below(&r, 10);
        int64_t amt = (int64_t)tc_below(&r, 1000);
        v[from] -= amt;
        v[to] += amt;
        if (!rc)
            rc = qs_outlist(a->c, "bank", 4, NULL);
        for (int i = 0; i < 10 && !rc; i++)
            rc = qs_putdup(a->c, "bank", 4, &v[i], 8);
        int abort_it = tc_below(&r, 3) == 0;
        if (!rc && !abort_it && njunk)
            rc = qs_outlist(a->c, "junk", 4, NULL);
        if (rc) {
            a->rc = rc;
            qs_abort(a->c);
            break;
        }
        if (abort_it) {
            rc = qs_abort(a->c);
            a->aborts++;
        } else {
            rc = qs_commit(a->c);
            a->commits++;
        }
        if (rc)
            a->rc = rc;
    }
    return NULL;
}

static void *inv_reader(void *p)
{
    inv_arg *a = p;
    int small = tc_small();
    while (!*a->stop) {
        if (small)
            msleep(1);  /* valgrind runs one thread at a time: let the
                           writers in */
        int64_t sum = 0;
        uint64_t cnt = 0, junk = 1;
        int rc = bank_read(a->c, &sum, &cnt);
        if (rc || cnt != 10 || sum != 0) {
            if (a->bad < 3)
                printf("  reader: rc %d, %" PRIu64 " bank values, sum %"
                       PRId64 "\n", rc, cnt, sum);
            a->bad++;
        }
        if (qs_count(a->c, "junk", 4, &junk) != 0 || junk != 0) {
            if (a->bad < 3)
                printf("  reader: %" PRIu64 " junk values visible\n", junk);
            a->bad++;
        }
        /* the same through a cursor: one cursor_read of the bank, and
         * nothing at or after "junk" */
        if (a->cur) {
            void *out = NULL;
            size_t outlen = 0;
            uint64_t cnt2 = 0;
            rc = qs_cursor_jump(a->cur, "bank", 4);
            if (!rc)
                rc = qs_cursor_read(a->cur, 20, 0, &out, &outlen, &cnt2);
            int64_t s2 = 0;
            const unsigned char *p = out, *end = p + outlen;
            for (uint64_t i = 0; !rc && i < cnt2; i++) {
                if (end - p < 20 || tc_le32(p) != 4 || tc_le32(p + 8) != 8) {
                    rc = QS_CORRUPT;
                    break;
                }
                int64_t x;
                memcpy(&x, p + 12, 8);
                s2 += x;
                p += 20;
            }
            qs_free(out);
            if (rc || cnt2 != 10 || s2 != 0) {
                if (a->bad < 3)
                    printf("  reader cursor: rc %d, %" PRIu64 " records, sum %"
                           PRId64 "\n", rc, cnt2, s2);
                a->bad++;
            }
            rc = qs_cursor_jump(a->cur, "junk", 4);
            if (rc != QS_NOTFOUND) {
                if (a->bad < 3)
                    printf("  reader cursor: jump to junk gave %d\n", rc);
                a->bad++;
            }
        }
        a->reads++;
    }
    return NULL;
}

static void *inv_maint(void *p)
{
    inv_arg *a = p;
    int n = 0;
    while (!*a->stop && !a->rc) {
        msleep(20);
        int rc = (n++ % 3 == 0) ? qs_compact(a->c) : qs_sync(a->c);
        if (rc)
            a->rc = rc;
        a->commits++;
    }
    return NULL;
}

static void threads_txn_invariant(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 64 * 4096, 256 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    for (int i = 0; i < 10; i++) {
        int64_t z = 0;
        CHECK_RC(qs_putdup(c, "bank", 4, &z, 8), 0);
    }
    enum { NW = 3, NR = 2 };
    atomic_int stop = 0;
    inv_arg w[NW], rd[NR], mt;
    pthread_t wt[NW], rt[NR], mtt;
    memset(&mt, 0, sizeof mt);
    mt.c = c;
    mt.stop = &stop;
    for (int i = 0; i < NR; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        rd[i].c = c;
        rd[i].stop = &stop;
        CHECK_RC(qs_cursor_open(c, &rd[i].cur), 0);
        pthread_create(&rt[i], NULL, inv_reader, &rd[i]);
    }
    pthread_create(&mtt, NULL, inv_maint, &mt);
    for (int i = 0; i < NW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].id = i;
        w[i].rounds = (int)tc_scaled(150, 5);
        pthread_create(&wt[i], NULL, inv_writer, &w[i]);
    }
    long commits = 0, aborts = 0, reads = 0, bad = 0;
    for (int i = 0; i < NW; i++) {
        pthread_join(wt[i], NULL);
        CHECK_RC(w[i].rc, 0);
        commits += w[i].commits;
        aborts += w[i].aborts;
    }
    stop = 1;
    for (int i = 0; i < NR; i++) {
        pthread_join(rt[i], NULL);
        qs_cursor_close(rd[i].cur);
        reads += rd[i].reads;
        bad += rd[i].bad;
    }
    pthread_join(mtt, NULL);
    CHECK_RC(mt.rc, 0);
    qs_stat st = stat_of(c);
    printf("  %ld commits, %ld aborts, %ld compactions/syncs, %ld reads, "
           "%ld bad; spilled pages %" PRIu64 "\n", commits, aborts,
           mt.commits, reads, bad, st.spilled_pages);
    CHECK(bad == 0);
    int64_t sum = 1;
    uint64_t cnt = 0;
    CHECK_RC(bank_read(c, &sum, &cnt), 0);
    CHECK(cnt == 10 && sum == 0);
    CHECK(count_of(c, "junk", 4) == 0);
    CHECK(records_of(c) == 10);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(bank_read(c, &sum, &cnt), 0);
    CHECK(cnt == 10 && sum == 0);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}


/* ------------------------------------------------------------------ */
/* transaction owners: lock_timeout between threads, ended owners      */

typedef struct {
    qs_casket *c;
    atomic_int phase;     /* set by the test thread: 1 = end the transaction */
    int begin_rc, put_rc, abort_rc;
    int tid;
    pthread_t self;
    atomic_int ready;
} own_arg;

/* begins, writes, and either waits for phase 1 and aborts (phase 0 at the
 * start) or just ends with the transaction open (phase -1) */
static void *own_main(void *p)
{
    own_arg *a = p;
    a->tid = (int)syscall(SYS_gettid);
    a->self = pthread_self();
    a->begin_rc = qs_begin(a->c);
    a->put_rc = put_str(a->c, "ghost", "x");
    int leave_open = a->phase < 0;
    a->ready = 1;
    if (leave_open)
        return NULL;
    while (a->phase < 1)
        msleep(5);
    a->abort_rc = qs_abort(a->c);
    return NULL;
}

static void thread_txn_owner(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW;
    o.sync = 0;
    o.lock_timeout = 0.2;
    qs_casket *c = NULL;
    REQUIRE_RC(qs_open(t.path, &o, &c), 0);

    /* a live owner: other threads wait lock_timeout, then QS_LOCKED naming it */
    own_arg a;
    memset(&a, 0, sizeof a);
    a.c = c;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    while (!a.ready)
        msleep(1);
    CHECK_RC(a.begin_rc, 0);
    CHECK_RC(a.put_rc, 0);
    double t0 = tc_now();
    int rc = put_str(c, "k", "v");
    double dt = tc_now() - t0;
    printf("  put while another thread's transaction is open: rc %d after %.3fs\n", rc, dt);
    CHECK_RC(rc, QS_LOCKED);
    CHECK(dt >= 0.15 && dt < 3.0);
    qs_lock_holder h;
    qs_locked_by(&h);
    CHECK(h.pid == (uint64_t)getpid());
    CHECK(h.tid == (uint64_t)a.tid);
    CHECK(h.thread == (uint64_t)a.self);
    CHECK_RC(qs_begin(c), QS_LOCKED);
    CHECK(!qs_in_transaction(c));
    a.phase = 1;
    pthread_join(th, NULL);
    CHECK_RC(a.abort_rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);

    /* an owner that ended with its transaction open: the next writer of
     * another thread aborts it and goes on */
    memset(&a, 0, sizeof a);
    a.c = c;
    a.phase = -1;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    pthread_join(th, NULL);
    CHECK_RC(a.begin_rc, 0);
    CHECK_RC(a.put_rc, 0);
    t0 = tc_now();
    CHECK_RC(put_str(c, "k2", "v2"), 0);
    CHECK(tc_now() - t0 < 0.15);
    CHECK_RC(get_rc(c, "ghost"), QS_NOTFOUND);
    CHECK(get_is(c, "k2", "v2"));
    qs_stat st;
    CHECK_RC(qs_stat_get(c, &st), 0);
    CHECK(st.in_transaction == 0);
    /* and transactions work as before */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(put_str(c, "k3", "v3"), 0);
    CHECK_RC(qs_commit(c), 0);
    CHECK(records_of(c) == 3);

    /* a live thread under the owner's id but with another start time is
     * another thread (ids are reused): the owner counts as ended */
    memset(&a, 0, sizeof a);
    a.c = c;
    REQUIRE(pthread_create(&th, NULL, own_main, &a) == 0);
    while (!a.ready)
        msleep(1);
    CHECK_RC(a.begin_rc, 0);
    CHECK(c->txn_tid == a.tid);
    CHECK(c->txn_tid_start != 0);       /* read from /proc */
    CHECK_RC(put_str(c, "k4", "v4"), QS_LOCKED);    /* the owner lives */
    c->txn_tid_start++;
    CHECK_RC(put_str(c, "k4", "v4"), 0);
    CHECK_RC(get_rc(c, "ghost"), QS_NOTFOUND);
    a.phase = 1;
    pthread_join(th, NULL);
    CHECK_RC(a.abort_rc, QS_TXN);   /* it has no transaction any more */
    CHECK(records_of(c) == 4);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(txn_misuse);
    RUN(txn_isolation_threads);
    RUN(threads_txn_invariant);
    RUN(thread_txn_owner);
    return tc_summary();
}
