/*
 * test_threads.c -- one handle shared by threads: concurrent putdups with
 * a reader, group commit giving each racing call its own result, and
 * qs_shutdown while other threads hold a transaction, wait for the write
 * lock or keep calling.
 */
#include "test_records.h"

/* ------------------------------------------------------------------ */
/* threads                                                             */

#define NWRITERS 4

typedef struct {
    qs_casket *c;
    int id, n;
    int rc;
    atomic_int *stop;
    long reads, bad;
} thr_arg;

static void *writer_main(void *p)
{
    thr_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        char v[32];
        int vn = snprintf(v, sizeof v, "w%d-%06d", a->id, i);
        int rc = qs_putdup(a->c, "shared", 6, v, (size_t)vn);
        if (rc) {
            a->rc = rc;
            break;
        }
    }
    return NULL;
}

/* checks that the values in a packed getdup buffer hold, for each writer,
 * 0, 1, 2, ... in order with no gap */
static int seq_ok(const unsigned char *p, size_t len, uint64_t cnt)
{
    int next[NWRITERS] = {0};
    const unsigned char *end = p + len;
    for (uint64_t i = 0; i < cnt; i++) {
        if (end - p < 4)
            return 0;
        uint32_t n = tc_le32(p);
        p += 4;
        if ((size_t)(end - p) < n || n != 9)
            return 0;
        int w = p[1] - '0', seq = 0;
        for (int d = 3; d < 9; d++)
            seq = seq * 10 + (p[d] - '0');
        if (w < 0 || w >= NWRITERS || seq != next[w])
            return 0;
        next[w]++;
        p += n;
    }
    return p == end;
}

static void *reader_main(void *p)
{
    thr_arg *a = p;
    uint64_t last = 0;
    qs_cursor *cur = NULL;
    if (qs_cursor_open(a->c, &cur) != 0) {
        a->bad++;
        return NULL;
    }
    int small = tc_small();
    while (!*a->stop) {
        if (small)
            msleep(1);
        uint64_t n = 0;
        if (qs_count(a->c, "shared", 6, &n) != 0 || n < last)
            a->bad++;
        last = n;
        void *out = NULL;
        size_t outlen = 0;
        uint64_t cnt = 0;
        if (qs_getdup(a->c, "shared", 6, &out, &outlen, &cnt) != 0 ||
            cnt < last || !seq_ok(out, outlen, cnt))
            a->bad++;
        qs_free(out);
        /* a cursor walk over the key with cursor_read */
        int rc = qs_cursor_jump(cur, "shared", 6);
        uint64_t walked = 0;
        while (rc == 0) {
            out = NULL;
            rc = qs_cursor_read(cur, 64, 0, &out, &outlen, &cnt);
            qs_free(out);
            if (rc != 0 || cnt == 0)
                break;
            walked += cnt;
        }
        if (rc != 0 && rc != QS_NOTFOUND)
            a->bad++;
        if (walked < last)
            a->bad++;
        a->reads++;
    }
    qs_cursor_close(cur);
    return NULL;
}

static void threads_putdup(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    int per = (int)tc_scaled(500, 5);
    atomic_int stop = 0;
    thr_arg w[NWRITERS], r;
    pthread_t wt[NWRITERS], rt;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.stop = &stop;
    REQUIRE(pthread_create(&rt, NULL, reader_main, &r) == 0);
    for (int i = 0; i < NWRITERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].id = i;
        w[i].n = per;
        pthread_create(&wt[i], NULL, writer_main, &w[i]);
    }
    for (int i = 0; i < NWRITERS; i++) {
        pthread_join(wt[i], NULL);
        CHECK_RC(w[i].rc, 0);
    }
    stop = 1;
    pthread_join(rt, NULL);
    printf("  reader: %ld passes, %ld bad\n", r.reads, r.bad);
    CHECK(r.bad == 0);
    CHECK(count_of(c, "shared", 6) == (uint64_t)(NWRITERS * per));
    CHECK(records_of(c) == (uint64_t)(NWRITERS * per));
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_getdup(c, "shared", 6, &out, &outlen, &cnt), 0);
    CHECK(cnt == (uint64_t)(NWRITERS * per));
    CHECK(seq_ok(out, outlen, cnt));
    qs_free(out);
    qs_stat st = stat_of(c);
    printf("  commits %" PRIu64 ", syncs %" PRIu64 "\n", st.commits,
           st.syncs);
    /* puts issued at once are committed in groups: at most one commit each */
    CHECK(st.commits >= 1 && st.commits <= (uint64_t)(NWRITERS * per));
    /* at most one per commit, besides the open's and the checkpoints' */
    CHECK(st.syncs <= st.commits + st.checkpoints + 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(count_of(c, "shared", 6) == (uint64_t)(NWRITERS * per));
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Operations issued at once by many threads are committed in groups;
 * each must still get the result it would have had alone at its place in
 * some order: of the threads racing to putkeep a key exactly one wins,
 * of those racing to out it exactly one removes it. */
#define NRACERS 8
typedef struct {
    qs_casket *c;
    int nkeys;
    int kept, keyexist, removed, notfound, other;
    pthread_barrier_t *phase;   /* every putkeep ends before any out */
} racer_arg;

static void *racer_main(void *p)
{
    racer_arg *a = p;
    char key[32];
    for (int phase = 0; phase < 2; phase++) {
        pthread_barrier_wait(a->phase);
        for (int j = 0; j < a->nkeys; j++) {
            int kl = snprintf(key, sizeof key, "race%05d", j);
            int rc = phase == 0 ? qs_putkeep(a->c, key, (size_t)kl, &a, sizeof(void *))
                                : qs_out(a->c, key, (size_t)kl);
            if (rc == 0)
                phase == 0 ? a->kept++ : a->removed++;
            else if (phase == 0 && rc == QS_KEYEXIST)
                a->keyexist++;
            else if (phase == 1 && rc == QS_NOTFOUND)
                a->notfound++;
            else
                a->other++;
        }
    }
    return NULL;
}

static void threads_grouped_results(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    for (int sync = 0; sync < 2; sync++) {
        qs_casket *c = tc_open(t.path, QS_OPEN_NEW, sync, 0, 0, &rc);
        REQUIRE_RC(rc, 0);
        int nkeys = (int)tc_scaled(sync ? 150 : 1500, 5);
        pthread_barrier_t phase;
        pthread_barrier_init(&phase, NULL, NRACERS);
        racer_arg a[NRACERS];
        pthread_t th[NRACERS];
        for (int i = 0; i < NRACERS; i++) {
            a[i] = (racer_arg){.c = c, .nkeys = nkeys, .phase = &phase};
            REQUIRE(pthread_create(&th[i], NULL, racer_main, &a[i]) == 0);
        }
        int kept = 0, removed = 0, refused = 0, other = 0;
        for (int i = 0; i < NRACERS; i++) {
            pthread_join(th[i], NULL);
            kept += a[i].kept;
            removed += a[i].removed;
            refused += a[i].keyexist + a[i].notfound;
            other += a[i].other;
        }
        pthread_barrier_destroy(&phase);
        qs_stat st = stat_of(c);
        printf("  sync %d: %d keys, %" PRIu64 " commits for %d operations\n", sync, nkeys,
               st.commits, 2 * NRACERS * nkeys);
        CHECK(other == 0);
        CHECK(kept == nkeys);
        CHECK(removed == nkeys);
        CHECK(refused == 2 * (NRACERS - 1) * nkeys);
        CHECK(records_of(c) == 0);
        CHECK_RC(check_ok(c), 0);
        CHECK_RC(qs_close(c), 0);
    }
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* qs_shutdown                                                         */

typedef struct {
    qs_casket *c;
    atomic_int phase;     /* set by the test thread */
    int put_rc, commit_rc, begin_rc;
    atomic_int done;
} sd_arg;

/* begins a transaction, writes, waits for phase 1, then tries to commit */
static void *sd_txn_owner(void *p)
{
    sd_arg *a = p;
    a->begin_rc = qs_begin(a->c);
    a->put_rc = put_str(a->c, "in-txn", "x");
    a->done = 1;
    while (a->phase < 1)
        msleep(5);
    a->commit_rc = qs_commit(a->c);
    return NULL;
}

/* an autocommit write that queues behind the other thread's transaction */
static void *sd_queued_writer(void *p)
{
    sd_arg *a = p;
    a->put_rc = put_str(a->c, "queued", "y");
    a->done = 1;
    return NULL;
}

static void shutdown_semantics(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);

    /* another thread owns a transaction; a third thread queues a write */
    sd_arg owner, queued;
    memset(&owner, 0, sizeof owner);
    memset(&queued, 0, sizeof queued);
    owner.c = queued.c = c;
    pthread_t to, tq;
    REQUIRE(pthread_create(&to, NULL, sd_txn_owner, &owner) == 0);
    while (!owner.done)
        msleep(5);
    CHECK_RC(owner.begin_rc, 0);
    CHECK_RC(owner.put_rc, 0);
    REQUIRE(pthread_create(&tq, NULL, sd_queued_writer, &queued) == 0);
    msleep(100);
    CHECK(queued.done == 0);            /* waiting for the write lock */

    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur)
        CHECK_RC(qs_cursor_first(cur), 0);

    CHECK_RC(qs_shutdown(c), 0);
    pthread_join(tq, NULL);
    CHECK_RC(queued.put_rc, QS_CLOSED);
    owner.phase = 1;
    pthread_join(to, NULL);
    CHECK_RC(owner.commit_rc, QS_CLOSED);

    /* every later call: QS_CLOSED */
    void *v = NULL;
    size_t vn = 0;
    uint64_t n = 0;
    CHECK_RC(qs_get(c, "k", 1, &v, &vn), QS_CLOSED);
    qs_free(v);
    CHECK_RC(put_str(c, "k", "w"), QS_CLOSED);
    CHECK_RC(qs_putdup(c, "k", 1, "w", 1), QS_CLOSED);
    CHECK_RC(qs_out(c, "k", 1), QS_CLOSED);
    CHECK_RC(qs_records(c, &n), QS_CLOSED);
    CHECK_RC(qs_count(c, "k", 1, &n), QS_CLOSED);
    CHECK_RC(qs_begin(c), QS_CLOSED);
    CHECK_RC(qs_sync(c), QS_CLOSED);
    CHECK_RC(qs_compact(c), QS_CLOSED);
    char msg[64];
    CHECK_RC(qs_check(c, msg, sizeof msg), QS_CLOSED);
    qs_cursor *cur2 = NULL;
    rc = qs_cursor_open(c, &cur2);
    CHECK(rc == QS_CLOSED || rc == 0);
    qs_cursor_close(cur2);
    if (cur) {
        CHECK_RC(qs_cursor_next(cur), QS_CLOSED);
        CHECK_RC(qs_cursor_first(cur), QS_CLOSED);
        CHECK_RC(qs_cursor_get(cur, NULL, NULL, NULL, NULL), QS_CLOSED);
        CHECK_RC(qs_cursor_out(cur), QS_CLOSED);
        qs_cursor_close(cur);
    }
    CHECK_RC(qs_shutdown(c), 0);        /* a second call */
    CHECK_RC(qs_close(c), 0);

    /* the abandoned transaction and the queued write left nothing */
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    CHECK(get_is(c, "k", "v"));
    CHECK_RC(get_rc(c, "in-txn"), QS_NOTFOUND);
    CHECK_RC(get_rc(c, "queued"), QS_NOTFOUND);
    CHECK(records_of(c) == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    /* the log is cut back to one page at close */
    long long ls = tc_file_size(t.log);
    CHECK(ls >= 0 && ls <= QS_PAGE_SIZE);
    tc_tmp_remove(&t);
}

typedef struct {
    qs_casket *c;
    int id;
    long ok, closed, other;
} sdc_arg;

static void *sdc_worker(void *p)
{
    sdc_arg *a = p;
    qs_cursor *cur = NULL;
    int rc = qs_cursor_open(a->c, &cur);
    if (rc) {
        if (rc == QS_CLOSED) a->closed++; else a->other++;
        return NULL;
    }
    for (long i = 0;; i++) {
        char k[32];
        snprintf(k, sizeof k, "w%d-%ld", a->id, i % 500);
        switch ((i + a->id) % 5) {
        case 0: rc = put_str(a->c, k, "value"); break;
        case 1: rc = qs_putdup(a->c, k, strlen(k), "dup", 3); break;
        case 2: rc = get_rc(a->c, k); if (rc == QS_NOTFOUND) rc = 0; break;
        case 3: rc = qs_cursor_jump(cur, k, strlen(k));
                if (rc == QS_NOTFOUND) rc = 0;
                if (!rc) { rc = qs_cursor_next(cur); if (rc == QS_NOTFOUND) rc = 0; }
                break;
        default:
            rc = qs_begin(a->c);
            if (!rc) {
                int r2 = put_str(a->c, k, "txn");
                int r3 = (i & 1) ? qs_commit(a->c) : qs_abort(a->c);
                rc = r2 ? r2 : r3;
            }
        }
        if (rc == 0)
            a->ok++;
        else if (rc == QS_CLOSED)
            a->closed++;
        else
            a->other++;
        if (rc == QS_CLOSED && a->closed > 3)
            break;
    }
    qs_cursor_close(cur);
    return NULL;
}

static void shutdown_concurrent(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rounds = (int)tc_scaled(10, 5);
    for (int r = 0; r < rounds; r++) {
        int rc;
        qs_casket *c = tc_open(t.path, r ? QS_OPEN_WRITE : QS_OPEN_NEW, 0,
                               64 * 4096, 0, &rc);
        REQUIRE_RC(rc, 0);
        enum { NT = 4 };
        sdc_arg a[NT];
        pthread_t th[NT];
        for (int i = 0; i < NT; i++) {
            memset(&a[i], 0, sizeof a[i]);
            a[i].c = c;
            a[i].id = i;
            pthread_create(&th[i], NULL, sdc_worker, &a[i]);
        }
        msleep(20 + 10 * r);
        rc = qs_shutdown(c);
        CHECK_RC(rc, 0);
        long ok = 0, other = 0;
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            ok += a[i].ok;
            other += a[i].other;
        }
        if (other)
            printf("  round %d: %ld calls failed with codes other than "
                   "QS_CLOSED\n", r, other);
        CHECK(other == 0);
        CHECK(ok > 0);
        CHECK_RC(qs_close(c), 0);
        c = open_mode(t.path, QS_OPEN_WRITE, &rc);
        REQUIRE_RC(rc, 0);
        CHECK_RC(check_ok(c), 0);
        CHECK_RC(qs_close(c), 0);
    }
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(threads_putdup);
    RUN(threads_grouped_results);
    RUN(shutdown_semantics);
    RUN(shutdown_concurrent);
    return tc_summary();
}
