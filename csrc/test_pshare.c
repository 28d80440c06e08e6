/*
 * test_pshare.c -- page images shared by the handles of one casket in one
 * process (pshare.c): a second handle takes the pages a first one read
 * instead of reading them again (qs_stat's pages_read, pages_shared); what
 * every handle reads stays what a handle of its own would read -- across
 * commits of another handle, checkpoints (a new log generation), a small
 * cache that evicts, a snapshot of an older commit beside them, threads
 * that each use their own handle while a writer commits, closes in any
 * order, and a fork (run under valgrind and ASan by make valgrind / asan).
 */
#include "test_common.h"
#include "pshare.h"

#define NKEYS 3000

static int key_of(char *key, size_t cap, int i) { return snprintf(key, cap, "key%06d", i); }

/* The value of key i at version v: the key's number, then the version,
 * padded so that pages fill and split. */
static size_t value_of(char *val, size_t cap, int i, unsigned v)
{
    int n = snprintf(val, cap, "%06d:%08u:", i, v);
    size_t len = 40 + (size_t)(i % 7) * 9;
    memset(val + n, 'a' + (int)(v % 26), len - (size_t)n);
    return len;
}

/* Puts versions[i] of every key i with versions[i] changed (all when
 * changed NULL) in one transaction. */
static int write_versions(qs_casket *c, const unsigned *versions, const unsigned char *changed)
{
    char key[32], val[128];
    int rc = qs_begin(c);
    for (int i = 0; rc == 0 && i < NKEYS; i++) {
        if (changed && !changed[i])
            continue;
        int kl = key_of(key, sizeof key, i);
        size_t vl = value_of(val, sizeof val, i, versions[i]);
        rc = qs_put(c, key, (size_t)kl, val, vl);
    }
    return rc ? (qs_abort(c), rc) : qs_commit(c);
}

/* 0 when c reads versions[i] for every key i, else the first key that
 * differs + 1 (-rc when a get failed). */
static int read_matches(qs_casket *c, const unsigned *versions)
{
    char key[32], want[128], got[128];
    for (int i = 0; i < NKEYS; i++) {
        int kl = key_of(key, sizeof key, i);
        size_t wl = value_of(want, sizeof want, i, versions[i]), gl = 0;
        int rc = qs_get_into(c, key, (size_t)kl, got, sizeof got, &gl);
        if (rc)
            return rc < 0 ? rc : -rc;
        if (gl != wl || memcmp(got, want, wl) != 0)
            return i + 1;
    }
    return 0;
}

static qs_stat stat_of(qs_casket *c)
{
    qs_stat st;
    memset(&st, 0, sizeof st);
    qs_stat_get(c, &st);
    return st;
}

static void second_handle_takes_what_the_first_read(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v[NKEYS];
    REQUIRE_RC(write_versions(w, v, NULL), 0);
    REQUIRE_RC(qs_sync(w), 0);
    REQUIRE_RC(qs_close(w), 0);

    /* Alone, a handle reads every page itself and shares nothing. */
    qs_casket *a = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(a, v), 0);
    qs_stat sa = stat_of(a);
    CHECK(sa.pages_read > 10);
    CHECK(sa.pages_shared == 0);

    /* An idle cache filed nothing of a's, so b reads the pages itself
     * and, a member now beside a, files them; c then takes every one. */
    qs_casket *b = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(b, v), 0);
    qs_stat sb = stat_of(b);
    CHECK(sb.pages_read >= sa.pages_read);
    qs_casket *c = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(c, v), 0);
    qs_stat sc = stat_of(c);
    CHECK(sc.pages_read == 0);
    CHECK(sc.pages_shared >= sa.pages_read);
    CHECK_RC(qs_close(b), 0);
    CHECK_RC(qs_close(a), 0);
    /* c's images outlive the handles that read them */
    CHECK_RC(read_matches(c, v), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Readers with small caches follow a writer's commits and checkpoints:
 * after every round each reads exactly the model. */
static void readers_follow_commits_and_checkpoints(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    /* 64 KiB of checkpoint: one every round or two */
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 64 * 1024, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v[NKEYS];
    static unsigned char changed[NKEYS];
    REQUIRE_RC(write_versions(w, v, NULL), 0);
    enum { READERS = 3 };
    qs_casket *r[READERS];
    for (int k = 0; k < READERS; k++) {
        /* the smallest budget (64 pages): every read pass evicts */
        r[k] = tc_open(t.path, QS_OPEN_READ, 0, 1, 0, &rc);
        REQUIRE_RC(rc, 0);
    }
    unsigned seed = 12345;
    uint64_t checkpoints_before = stat_of(w).checkpoints;
    for (unsigned round = 1; round <= 24; round++) {
        memset(changed, 0, sizeof changed);
        int n = 1 + (int)(rand_r(&seed) % 400);
        for (int j = 0; j < n; j++) {
            int i = (int)(rand_r(&seed) % NKEYS);
            changed[i] = 1;
            v[i] = round;
        }
        REQUIRE_RC(write_versions(w, v, changed), 0);
        if (round % 5 == 0)
            REQUIRE_RC(qs_sync(w), 0);
        /* a reader that skips a round catches up over more commits */
        for (int k = 0; k < READERS; k++)
            if (k != (int)(round % 4))
                CHECK_RC(read_matches(r[k], v), 0);
        CHECK_RC(read_matches(w, v), 0);
    }
    CHECK(stat_of(w).checkpoints > checkpoints_before + 4);
    uint64_t shared = 0;
    for (int k = 0; k < READERS; k++) {
        shared += stat_of(r[k]).pages_shared;
        CHECK_RC(qs_close(r[k]), 0);
    }
    CHECK(shared > 0);
    CHECK_RC(qs_close(w), 0);
    tc_tmp_remove(&t);
}

/* A snapshot reads its commit's images while handles that caught up read
 * the newer ones of the same pages, in the same log generation.  The
 * shared cache holds one image per page, the newest filed: a writer files
 * what it commits, so a snapshot shares the pages of its commit only until
 * they are rewritten, and a handle opened later shares the newest. */
static void snapshot_beside_shared_readers(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v1[NKEYS], v2[NKEYS], v3[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        v1[i] = 1;
        v2[i] = 2;
        v3[i] = 3;
    }
    REQUIRE_RC(write_versions(w, v1, NULL), 0);
    REQUIRE_RC(qs_sync(w), 0);      /* v1 in the main file */
    qs_casket *b = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(b, v1), 0);       /* main-file images, filed */
    qs_casket *s = NULL;
    REQUIRE_RC(qs_snapshot_open(w, 0, 0, &s), 0);
    CHECK_RC(read_matches(s, v1), 0);
    CHECK(stat_of(s).pages_shared > 0);     /* v1's main-file pages, from b */
    REQUIRE_RC(write_versions(w, v2, NULL), 0);     /* in the log */
    CHECK_RC(read_matches(b, v2), 0);
    CHECK_RC(read_matches(s, v1), 0);
    REQUIRE_RC(write_versions(w, v3, NULL), 0);
    qs_casket *c = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(c, v3), 0);
    qs_stat sc = stat_of(c);
    CHECK(sc.pages_shared > 0);             /* v3's pages, filed by w */
    CHECK_RC(read_matches(s, v1), 0);
    CHECK_RC(read_matches(b, v3), 0);
    CHECK_RC(qs_close(s), 0);
    CHECK_RC(qs_sync(w), 0);        /* a new generation */
    CHECK_RC(read_matches(c, v3), 0);
    CHECK_RC(read_matches(b, v3), 0);
    CHECK_RC(qs_close(c), 0);
    CHECK_RC(qs_close(b), 0);
    CHECK_RC(qs_close(w), 0);
    tc_tmp_remove(&t);
}

typedef struct {
    const char *path;
    _Atomic unsigned *versions;     /* the newest committed version of each key */
    atomic_int *stop;
    atomic_int *reading;            /* readers past their first read */
    long reads;
    atomic_int bad;                 /* what went wrong, 0 none */
} reader_arg;

/* Reads random keys through a handle of its own: each value is whole,
 * names its own key, and is at least as new as the version committed
 * before the read began (a read sees the newest commit). */
static void *reader(void *p)
{
    reader_arg *a = p;
    int rc;
    qs_casket *c = tc_open(a->path, QS_OPEN_READ, 0, 1, 0, &rc);
    if (!c) {
        a->bad = 1;
        return NULL;
    }
    unsigned seed = (unsigned)(uintptr_t)p;
    char key[32], got[128];
    while (!atomic_load(a->stop) && !a->bad) {
        int i = (int)(rand_r(&seed) % NKEYS);
        unsigned before = atomic_load(&a->versions[i]);
        int kl = key_of(key, sizeof key, i);
        size_t gl = 0;
        if ((rc = qs_get_into(c, key, (size_t)kl, got, sizeof got - 1, &gl)) != 0) {
            a->bad = 2;
            break;
        }
        got[gl] = 0;
        int gi;
        unsigned gv;
        char want[128];
        if (sscanf(got, "%d:%u:", &gi, &gv) != 2 || gi != i || gv < before) {
            a->bad = 3;
            break;
        }
        size_t wl = value_of(want, sizeof want, i, gv);
        if (wl != gl || memcmp(want, got, wl) != 0)
            a->bad = 4;
        if (a->reads++ == 0)
            atomic_fetch_add(a->reading, 1);
    }
    tc_close(c);
    return NULL;
}

static void threads_with_handles_of_their_own(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 128 * 1024, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v[NKEYS];
    static _Atomic unsigned committed[NKEYS];
    REQUIRE_RC(write_versions(w, v, NULL), 0);
    atomic_int stop = 0, reading = 0;
    enum { READERS = 4 };
    reader_arg args[READERS];
    pthread_t th[READERS];
    for (int k = 0; k < READERS; k++) {
        args[k] = (reader_arg){t.path, committed, &stop, &reading, 0, 0};
        REQUIRE(pthread_create(&th[k], NULL, reader, &args[k]) == 0);
    }
    /* The commits start once every reader reads (under valgrind a thread
     * may take long to be scheduled); a reader that failed ends the wait. */
    for (int waited = 0; atomic_load(&reading) < READERS && waited < 30000; waited++) {
        int failed = 0;
        for (int k = 0; k < READERS; k++)
            failed |= args[k].bad;
        if (failed)
            break;
        msleep(1);
    }
    unsigned seed = 777;
    char key[32], val[128];
    int rounds = getenv("QS_TEST_SCALE") && !strcmp(getenv("QS_TEST_SCALE"), "small") ? 20 : 1500;
    for (int round = 1; round <= rounds; round++) {
        /* a few keys per commit; a checkpoint every 128 KiB of log */
        int n = 1 + (int)(rand_r(&seed) % 20);
        int keys[20];
        CHECK_RC(qs_begin(w), 0);
        for (int j = 0; j < n; j++) {
            int i = keys[j] = (int)(rand_r(&seed) % NKEYS);
            v[i] = (unsigned)round;
            int kl = key_of(key, sizeof key, i);
            size_t vl = value_of(val, sizeof val, i, v[i]);
            CHECK_RC(qs_put(w, key, (size_t)kl, val, vl), 0);
        }
        CHECK_RC(qs_commit(w), 0);
        for (int j = 0; j < n; j++)
            atomic_store(&committed[keys[j]], v[keys[j]]);
    }
    atomic_store(&stop, 1);
    for (int k = 0; k < READERS; k++) {
        pthread_join(th[k], NULL);
        CHECK(args[k].bad == 0);
        if (args[k].bad)
            printf("  reader %d: failure %d after %ld reads\n", k, args[k].bad, args[k].reads);
        CHECK(args[k].reads > 0);
    }
    CHECK(stat_of(w).checkpoints > 0);
    CHECK_RC(read_matches(w, v), 0);
    CHECK_RC(qs_close(w), 0);
    tc_tmp_remove(&t);
}

static int child_reads(void *arg, int report, int release)
{
    (void)report;
    (void)release;
    const char *path = arg;
    static unsigned v[NKEYS];
    int rc;
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_READ;
    qs_casket *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        if ((rc = qs_open(path, &o, &c[k])) != 0)
            return 10;
    int bad = read_matches(c[0], v) || read_matches(c[1], v);
    qs_stat st;
    qs_stat_get(c[1], &st);
    (qs_close)(c[0]);
    (qs_close)(c[1]);
    return bad ? 11 : st.pages_shared == 0 ? 12 : 0;
}

/* The child of a fork, made while the parent's handles shared images,
 * opens handles of its own that share among themselves. */
static void child_of_fork_shares_its_own(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v[NKEYS];
    REQUIRE_RC(write_versions(w, v, NULL), 0);
    qs_casket *b = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(b, v), 0);
    CHECK_RC(read_matches(w, v), 0);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, child_reads, t.path) == 0);
    int status = tc_child_end(&ch);
    CHECK(status == 0);
    if (status)
        printf("  the child ended with %d\n", status);
    CHECK_RC(read_matches(b, v), 0);
    CHECK_RC(qs_close(b), 0);
    CHECK_RC(qs_close(w), 0);
    tc_tmp_remove(&t);
}

/* The cache's rule between generations, driven through ps_ itself: an
 * image filed by a member still behind a checkpoint (its log's base
 * transaction lower) leaves the newer generation's images where they are;
 * an image of a later generation replaces them. */
static void older_generation_leaves_the_newer_one(void)
{
    /* a (dev, ino) no file of this test has */
    ps_cache *a, *b;
    REQUIRE_RC(ps_join(UINT64_MAX, UINT64_MAX - 1, 16, &a), 0);
    REQUIRE_RC(ps_join(UINT64_MAX, UINT64_MAX - 1, 16, &b), 0);
    REQUIRE(a == b);
    pg_buf *newer = calloc(1, sizeof *newer), *older = calloc(1, sizeof *older);
    pg_buf *later = calloc(1, sizeof *later);
    REQUIRE(newer && older && later);
    ps_keep(a, 0x2222, 10, 5, 4096, newer, 0);
    CHECK(atomic_load(&newer->holders) == 2);
    pg_buf *got = ps_find(b, 0x2222, 5, 4096, 0);
    CHECK(got == newer);
    if (got)
        ps_release(got);

    ps_keep(b, 0x1111, 7, 6, PS_MAIN, older, 0);
    CHECK(atomic_load(&older->holders) == 0);   /* not taken: still b's own */
    CHECK(ps_find(a, 0x1111, 6, PS_MAIN, 0) == NULL);
    got = ps_find(a, 0x2222, 5, 4096, 0);
    CHECK(got == newer);
    if (got)
        ps_release(got);
    free(older);

    ps_keep(b, 0x3333, 12, 5, 8192, later, 0);
    CHECK(atomic_load(&later->holders) == 2);
    CHECK(atomic_load(&newer->holders) == 1);   /* the cache let go of it */
    CHECK(ps_find(a, 0x2222, 5, 4096, 0) == NULL);
    got = ps_find(a, 0x3333, 5, 8192, 0);
    CHECK(got == later);
    if (got)
        ps_release(got);
    ps_release(newer);
    ps_release(later);
    ps_leave(b);    /* one member left: the cache lets go of later */
    ps_leave(a);
}

/* A child process's commit of every key at version v (arg: a
 * child_commit), through a handle of its own, ended without a close. */
typedef struct {
    const char *path;
    const unsigned *versions;
} child_commit;

static int child_writes(void *arg, int report, int release)
{
    (void)report;
    (void)release;
    const child_commit *cc = arg;
    int rc;
    qs_casket *c = tc_open(cc->path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    if (rc)
        return 10;
    return write_versions(c, cc->versions, NULL) ? 11 : 0;
}

/* Two writers of one process take turns: each follows the other's
 * commits from the shared cache (the frames each commit filed and its
 * images), reading no log frame, and reads exactly what was committed --
 * across a checkpoint, and with some keys only changed.  A commit of
 * another process is then read from the log. */
static void writers_follow_each_other_from_memory(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *h[2];
    h[0] = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    h[1] = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    static unsigned v[NKEYS];
    static unsigned char changed[NKEYS];
    uint32_t rnd = 7;
    for (int round = 1; round <= 12; round++) {
        qs_casket *w = h[round % 2], *r = h[1 - round % 2];
        for (int i = 0; i < NKEYS; i++) {
            rnd = rnd * 1103515245u + 12345u;
            changed[i] = round < 3 || (rnd >> 16) % 5 == 0;
            if (changed[i])
                v[i] = (unsigned)round;
        }
        REQUIRE_RC(write_versions(w, v, changed), 0);
        if (round == 6)
            CHECK_RC(qs_sync(w), 0);        /* a new log generation */
        CHECK_RC(read_matches(r, v), 0);
        CHECK_RC(read_matches(w, v), 0);
    }
    qs_stat s0 = stat_of(h[0]), s1 = stat_of(h[1]);
    CHECK(s0.log_frames_read == 0 && s1.log_frames_read == 0);
    CHECK(s0.pages_shared > 0 && s1.pages_shared > 0);
    /* and after the checkpoint the images it copied are the new
     * generation's main-file images: nothing is read from the file */
    CHECK(s0.pages_read == 0 && s1.pages_read == 0);
    if (s0.log_frames_read || s1.log_frames_read || s0.pages_read || s1.pages_read)
        printf("  log frames read: %llu, %llu; pages read %llu, %llu\n",
               (unsigned long long)s0.log_frames_read, (unsigned long long)s1.log_frames_read,
               (unsigned long long)s0.pages_read, (unsigned long long)s1.pages_read);
    for (int i = 0; i < NKEYS; i++)
        v[i] = 100;
    child_commit cc = {t.path, v};
    tc_child ch;
    REQUIRE(tc_child_start(&ch, child_writes, &cc) == 0);
    CHECK(tc_child_end(&ch) == 0);
    CHECK_RC(read_matches(h[0], v), 0);
    CHECK(stat_of(h[0]).log_frames_read > 0);       /* not filed here: read */
    for (int i = 0; i < NKEYS; i += 3)
        v[i] = 101;
    memset(changed, 0, sizeof changed);
    for (int i = 0; i < NKEYS; i += 3)
        changed[i] = 1;
    REQUIRE_RC(write_versions(h[0], v, changed), 0);
    CHECK_RC(read_matches(h[1], v), 0);     /* the child's commit, then h[0]'s */
    /* A transaction of more pages than the cache files: the other handle
     * scans the log for it. */
    uint64_t scanned = stat_of(h[1]).log_frames_read;
    static char big[2000];
    memset(big, 'b', sizeof big);
    REQUIRE_RC(qs_begin(h[0]), 0);
    for (int i = 0; i < 2 * PS_RUN_FRAMES && rc == 0; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "big%06d", i);
        rc = qs_put(h[0], key, (size_t)kl, big, sizeof big);
    }
    CHECK_RC(rc, 0);
    CHECK_RC(qs_commit(h[0]), 0);
    CHECK_RC(read_matches(h[1], v), 0);
    char got[sizeof big];
    size_t gl = 0;
    CHECK_RC(qs_get_into(h[1], "big008191", 9, got, sizeof got, &gl), 0);
    CHECK(gl == sizeof big && memcmp(got, big, gl) == 0);
    CHECK(stat_of(h[1]).log_frames_read > scanned);
    CHECK_RC(qs_close(h[0]), 0);
    CHECK_RC(qs_close(h[1]), 0);
    qs_casket *c = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(read_matches(c, v), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* Puts key far%06d (from, to] through c, each its own commit. */
static int put_each(qs_casket *c, int from, int to)
{
    int rc = 0;
    for (int i = from + 1; i <= to && rc == 0; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "far%06d", i);
        rc = qs_put(c, key, (size_t)kl, key, (size_t)kl);
    }
    return rc;
}

/* 0 when c reads every key put_each put up to n, else the first missing. */
static int reads_each(qs_casket *c, int n)
{
    for (int i = 1; i <= n; i++) {
        char key[32], got[32];
        int kl = snprintf(key, sizeof key, "far%06d", i);
        size_t gl = 0;
        if (qs_get_into(c, key, (size_t)kl, got, sizeof got, &gl) != 0 || gl != (size_t)kl ||
            memcmp(got, key, gl) != 0)
            return i;
    }
    return 0;
}

/* A handle left behind by many commits of another (a thread that waited)
 * still follows from memory while the cache keeps them all, and reads the
 * log for the rest once it does not. */
static void a_handle_far_behind_follows_from_memory(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *w = tc_open(t.path, QS_OPEN_NEW, 0, 0, 256u << 20, &rc);
    REQUIRE_RC(rc, 0);
    qs_casket *r = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 256u << 20, &rc);
    REQUIRE_RC(rc, 0);
    /* seed 001's 10 threads, each putting holding the GIL (qs_put_held)
     * for its 5 ms turn: ~400 commits a turn, nine turns between two */
    int behind = 5000;
    REQUIRE_RC(put_each(w, 0, 1), 0);
    CHECK(reads_each(r, 1) == 0);
    REQUIRE_RC(put_each(w, 1, 1 + behind), 0);
    CHECK(reads_each(r, 1 + behind) == 0);
    CHECK(stat_of(r).log_frames_read == 0);
    CHECK(stat_of(w).checkpoints == 0);
    if (stat_of(r).log_frames_read)
        printf("  %d commits behind: %llu log frames read\n", behind,
               (unsigned long long)stat_of(r).log_frames_read);
    /* beyond what the cache keeps: the log is read, and reads the same */
    int n = 1 + behind + PS_RUNS + 24;
    REQUIRE_RC(put_each(w, 1 + behind, n), 0);
    CHECK(reads_each(r, n) == 0);
    CHECK(stat_of(r).log_frames_read > 0);
    CHECK_RC(put_each(r, n, n + 1), 0);     /* and it writes from there */
    CHECK(reads_each(w, n + 1) == 0);
    CHECK_RC(qs_close(w), 0);
    CHECK_RC(qs_close(r), 0);
    tc_tmp_remove(&t);
}

#define WRITERS 4
#define PUTS_EACH 400

typedef struct {
    const char *path;
    int id;
    int bad;
} writer_arg;

/* Autocommit puts of keys of its own through a handle of its own; after
 * each, its previous key must read back: the handle follows the other
 * writers' commits (from the shared cache) before each of its own. */
static void *own_handle_writer(void *p)
{
    writer_arg *a = p;
    int rc;
    qs_casket *c = tc_open(a->path, QS_OPEN_WRITE, 0, 0, 0, &rc);
    if (rc) {
        a->bad = 1;
        return NULL;
    }
    char key[32], val[32];
    for (int i = 0; i < PUTS_EACH && !a->bad; i++) {
        int kl = snprintf(key, sizeof key, "w%d-%05d", a->id, i);
        int vl = snprintf(val, sizeof val, "%d:%d", a->id, i);
        if (qs_put(c, key, (size_t)kl, val, (size_t)vl) != 0)
            a->bad = 2;
        else if (i % 50 == 49 && qs_sync(c) != 0)
            a->bad = 3;     /* a checkpoint now and then, from any writer */
    }
    if (qs_close(c) != 0)
        a->bad = 4;
    return NULL;
}

static void threads_write_through_handles_of_their_own(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *first = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    pthread_t th[WRITERS];
    writer_arg args[WRITERS];
    for (int k = 0; k < WRITERS; k++) {
        args[k] = (writer_arg){t.path, k, 0};
        REQUIRE(pthread_create(&th[k], NULL, own_handle_writer, &args[k]) == 0);
    }
    for (int k = 0; k < WRITERS; k++) {
        pthread_join(th[k], NULL);
        CHECK(args[k].bad == 0);
    }
    /* the first handle followed them all; so does a new one */
    qs_casket *later = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    int wrong = 0;
    for (int k = 0; k < WRITERS; k++)
        for (int i = 0; i < PUTS_EACH; i++) {
            char key[32], val[32], got[32];
            int kl = snprintf(key, sizeof key, "w%d-%05d", k, i);
            int vl = snprintf(val, sizeof val, "%d:%d", k, i);
            for (int h = 0; h < 2; h++) {
                size_t gl = 0;
                int grc = qs_get_into(h ? later : first, key, (size_t)kl, got, sizeof got, &gl);
                wrong += grc != 0 || gl != (size_t)vl || memcmp(got, val, gl) != 0;
            }
        }
    CHECK(wrong == 0);
    if (wrong)
        printf("  %d reads wrong\n", wrong);
    CHECK_RC(qs_close(later), 0);
    CHECK_RC(qs_close(first), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    RUN(second_handle_takes_what_the_first_read);
    RUN(readers_follow_commits_and_checkpoints);
    RUN(snapshot_beside_shared_readers);
    RUN(threads_with_handles_of_their_own);
    RUN(child_of_fork_shares_its_own);
    RUN(older_generation_leaves_the_newer_one);
    RUN(writers_follow_each_other_from_memory);
    RUN(a_handle_far_behind_follows_from_memory);
    RUN(threads_write_through_handles_of_their_own);
    return tc_summary();
}
