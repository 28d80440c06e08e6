/*
 * test_crash.c -- kill -9 a writer at a random moment, reopen, and check
 * that the casket is sound and holds exactly the state after some whole
 * number of transactions, no fewer than the writer saw committed.
 *
 * The child commits transactions 1, 2, 3, ... (continuing from what the
 * casket holds), writing i to a pipe after each qs_commit(i) returns.  The
 * parent SIGKILLs it after a random delay, drains the pipe (last reported
 * r), reopens and finds j = value of "last": it must be r or r + 1, and the
 * casket must hold exactly the state after transaction j.
 *
 *   crash_simple:  txn i puts "t<i>" (value of size i*7919 % 9000, some
 *                  overflow) and "last" = i.
 *   crash_batches: txn i also adds 60 records "b<i>/<k>" of 700 bytes and
 *                  removes batch i-4 (qs_outlist on each key), with a tiny
 *                  cache so transactions spill and checkpoints are frequent.
 *   crash_compact: as crash_batches, and after every 7th commit the child
 *                  runs qs_compact or qs_sync, so kills land inside them.
 *
 * QS_TEST_SEED fixes the delays; QS_TEST_SCALE=small runs fewer rounds with
 * longer delays (valgrind starts slowly).
 */
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "test_common.h"

#define BATCH 60
#define BATCH_VL 700
#define KEEP 4

static size_t tval_len(uint64_t i) { return (size_t)((i * 7919) % 9000); }

static void fill_val(unsigned char *p, size_t n, uint64_t i, uint64_t salt)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)(i * 131 + salt * 17 + j * 7 + (j >> 8));
}

static int val_ok(const unsigned char *p, size_t n, size_t want_n,
                  uint64_t i, uint64_t salt)
{
    if (n != want_n)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (p[j] != (unsigned char)(i * 131 + salt * 17 + j * 7 + (j >> 8)))
            return 0;
    return 1;
}

typedef struct {
    const char *name;
    int batches;
    int compact_every;      /* the child runs qs_compact after every n-th */
    int nosync;             /* commit with sync off */
    uint64_t stop_after;    /* the child idles after this many txns (0: never) */
    uint64_t cache_choices[3];
    uint64_t ckpt_choices[3];
} crash_kind;

/* one transaction: number i */
static int do_txn(qs_casket *c, const crash_kind *kind, uint64_t i,
                  unsigned char *buf)
{
    int rc = qs_begin(c);
    if (rc)
        return rc;
    char k[64];
    int kn = snprintf(k, sizeof k, "t%" PRIu64, i);
    size_t vn = tval_len(i);
    fill_val(buf, vn, i, 0);
    rc = qs_put(c, k, (size_t)kn, buf, vn);
    if (!rc && kind->batches) {
        for (int b = 0; b < BATCH && !rc; b++) {
            kn = snprintf(k, sizeof k, "b%" PRIu64 "/%02d", i, b);
            fill_val(buf, BATCH_VL, i, (uint64_t)b + 1);
            rc = qs_putdup(c, k, (size_t)kn, buf, BATCH_VL);
        }
        if (i > KEEP) {
            for (int b = 0; b < BATCH && !rc; b++) {
                uint64_t removed = 0;
                kn = snprintf(k, sizeof k, "b%" PRIu64 "/%02d", i - KEEP, b);
                rc = qs_outlist(c, k, (size_t)kn, &removed);
                if (!rc && removed != 1)
                    rc = QS_INVAL;     /* the state is not what we wrote */
            }
        }
    }
    if (!rc) {
        kn = snprintf(k, sizeof k, "%" PRIu64, i);
        rc = qs_put(c, "last", 4, k, (size_t)kn);
    }
    if (rc) {
        qs_abort(c);
        return rc;
    }
    return qs_commit(c);
}

static uint64_t read_last(qs_casket *c, int *rcout)
{
    void *v = NULL;
    size_t vn = 0;
    int rc = qs_get(c, "last", 4, &v, &vn);
    uint64_t j = 0;
    if (rc == 0) {
        char tmp[32];
        if (vn >= sizeof tmp)
            vn = sizeof tmp - 1;
        memcpy(tmp, v, vn);
        tmp[vn] = 0;
        j = strtoull(tmp, NULL, 10);
    } else if (rc == QS_NOTFOUND) {
        rc = 0;
    }
    qs_free(v);
    *rcout = rc;
    return j;
}

static void child_main(const char *path, const crash_kind *kind,
                       uint64_t cache, uint64_t ckpt, int fd)
{
    int rc;
    qs_casket *c = tc_open(path, QS_OPEN_CREATE, !kind->nosync, cache, ckpt,
                           &rc);
    if (!c)
        _exit(10);
    uint64_t i = read_last(c, &rc);
    if (rc)
        _exit(11);
    unsigned char *buf = malloc(16384);
    for (;;) {
        i++;
        rc = do_txn(c, kind, i, buf);
        if (rc) {
            fprintf(stderr, "child: txn %" PRIu64 ": %d (%s)\n", i, rc,
                    qs_strerror(rc));
            _exit(12);
        }
        if (write(fd, &i, sizeof i) != sizeof i)
            _exit(13);
        if (kind->stop_after && i >= kind->stop_after)
            for (;;)
                pause();        /* wait for the kill */
        if (kind->compact_every && i % (uint64_t)kind->compact_every == 0) {
            rc = (i / (uint64_t)kind->compact_every) % 2 ? qs_compact(c)
                                                         : qs_sync(c);
            if (rc) {
                fprintf(stderr, "child: compact/sync after %" PRIu64
                        ": %d (%s)\n", i, rc, qs_strerror(rc));
                _exit(14);
            }
        }
    }
}

typedef struct {
    const char *path;
    const crash_kind *kind;
    uint64_t cache, ckpt;
} writer_arg;

/* The child of the crash tests: child_main, reporting on report. */
static int writer_main(void *arg, int report, int release)
{
    const writer_arg *a = arg;
    (void)release;
    child_main(a->path, a->kind, a->cache, a->ckpt, report);
    return 99;
}

static int writer_start(tc_child *ch, const char *path, const crash_kind *kind,
                        uint64_t cache, uint64_t ckpt)
{
    writer_arg a = {path, kind, cache, ckpt};
    return tc_child_start(ch, writer_main, &a);
}

/* verifies that the casket holds exactly the state after transaction j */
static void verify_state(qs_casket *c, const crash_kind *kind, uint64_t j,
                         int round)
{
    uint64_t recs = 0;
    CHECK_RC(qs_records(c, &recs), 0);
    uint64_t want = j ? j + 1 : 0;
    if (kind->batches)
        want += (uint64_t)BATCH * (j < KEEP ? j : KEEP);
    if (recs != want)
        printf("  round %d: %" PRIu64 " records, want %" PRIu64 " (j=%"
               PRIu64 ")\n", round, recs, want, j);
    CHECK(recs == want);
    uint64_t bad = 0;
    for (uint64_t i = 1; i <= j + 1; i++) {
        char k[64];
        int kn = snprintf(k, sizeof k, "t%" PRIu64, i);
        void *v = NULL;
        size_t vn = 0;
        int rc = qs_get(c, k, (size_t)kn, &v, &vn);
        if (i <= j) {
            if (rc != 0 || !val_ok(v, vn, tval_len(i), i, 0)) {
                if (bad < 3)
                    printf("  round %d: t%" PRIu64 ": rc %d len %zu (j=%"
                           PRIu64 ")\n", round, i, rc, vn, j);
                bad++;
            }
        } else if (rc != QS_NOTFOUND) {
            printf("  round %d: t%" PRIu64 " present but last=%" PRIu64 "\n",
                   round, i, j);
            bad++;
        }
        qs_free(v);
    }
    if (kind->batches) {
        uint64_t lo = j > KEEP ? j - KEEP : 0;
        for (uint64_t i = lo; i <= j + 1; i++) {
            for (int b = 0; b < BATCH; b++) {
                char k[64];
                int kn = snprintf(k, sizeof k, "b%" PRIu64 "/%02d", i, b);
                void *v = NULL;
                size_t vn = 0;
                int rc = qs_get(c, k, (size_t)kn, &v, &vn);
                int live = i > lo && i <= j;
                if (live ? (rc != 0 ||
                            !val_ok(v, vn, BATCH_VL, i, (uint64_t)b + 1))
                         : rc != QS_NOTFOUND) {
                    if (bad < 3)
                        printf("  round %d: %s: rc %d (j=%" PRIu64 ")\n",
                               round, k, rc, j);
                    bad++;
                }
                qs_free(v);
            }
        }
    }
    CHECK(bad == 0);

    /* a cursor walk sees the same number of records */
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        uint64_t n = 0;
        int rc = qs_cursor_first(cur);
        while (rc == 0) {
            n++;
            rc = qs_cursor_next(cur);
        }
        CHECK_RC(rc, QS_NOTFOUND);
        CHECK(n == want);
        qs_cursor_close(cur);
    }
}

static void crash_rounds(const crash_kind *kind)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    uint64_t seed = tc_seed();
    tc_rng rng = {seed};
    int rounds = (int)tc_scaled(30, 6);
    int small = tc_small();
    printf("  %s: seed %" PRIu64 ", %d rounds\n", kind->name, seed, rounds);
    uint64_t prev_j = 0;
    int killed_early = 0;
    for (int round = 0; round < rounds && !tc_cur_failed; round++) {
        uint64_t cache = kind->cache_choices[tc_below(&rng, 3)];
        uint64_t ckpt = kind->ckpt_choices[tc_below(&rng, 3)];
        long delay_ms;
        uint64_t r = tc_below(&rng, 10);
        if (r == 0)
            delay_ms = (long)tc_below(&rng, 5);         /* during open */
        else
            delay_ms = 5 + (long)tc_below(&rng, 300);
        if (small)
            delay_ms = delay_ms * 4 + 500;
        tc_child writer;
        REQUIRE(writer_start(&writer, t.path, kind, cache, ckpt) == 0);
        uint64_t reported = 0, nrep = 0;
        double deadline = tc_now() + delay_ms / 1000.0;
        int eof = 0;
        /* read reports until the deadline */
        for (;;) {
            double left = deadline - tc_now();
            if (left <= 0)
                break;
            struct pollfd pf = {writer.report, POLLIN, 0};
            int pr = poll(&pf, 1, (int)(left * 1000) + 1);
            if (pr > 0) {
                uint64_t x;
                ssize_t n = read(writer.report, &x, sizeof x);
                if (n == sizeof x) {
                    reported = x;
                    nrep++;
                } else if (n == 0) {
                    eof = 1;
                    break;
                }
            }
        }
        kill(writer.pid, SIGKILL);
        if (!eof) {
            /* what it wrote before it died; end of file once it is dead */
            uint64_t x;
            while (read(writer.report, &x, sizeof x) == sizeof x) {
                reported = x;
                nrep++;
            }
        }
        int status = tc_child_end(&writer);
        if (status != 128 + SIGKILL) {
            printf("  round %d: the child ended by itself (status %d) "
                   "before the kill\n", round, status);
            CHECK(status == 128 + SIGKILL);
            break;
        }
        if (nrep == 0)
            killed_early++;

        int rc;
        qs_casket *c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
        if (rc == ENOENT && prev_j == 0 && nrep == 0)
            continue;       /* killed before the file was created */
        if (rc != 0 && prev_j == 0 && nrep == 0 && round == 0) {
            /* killed while creating the casket: CREATE must cope */
            printf("  round %d: killed after %ld ms while creating; "
                   "QS_OPEN_WRITE gives %d (%s), retrying with CREATE\n",
                   round, delay_ms, rc, qs_strerror(rc));
            c = tc_open(t.path, QS_OPEN_CREATE, 1, 0, 0, &rc);
        }
        if (rc != 0)
            printf("  round %d (killed after %ld ms, cache %" PRIu64
                   ", checkpoint %" PRIu64 "): reopen %d (%s)\n", round,
                   delay_ms, cache, ckpt, rc, qs_strerror(rc));
        REQUIRE_RC(rc, 0);
        char msg[512] = "";
        rc = qs_check(c, msg, sizeof msg);
        if (rc != 0)
            printf("  round %d (killed after %ld ms, cache %" PRIu64
                   ", checkpoint %" PRIu64 "): qs_check %d (%s): %s\n",
                   round, delay_ms, cache, ckpt, rc, qs_strerror(rc), msg);
        CHECK_RC(rc, 0);
        uint64_t j = read_last(c, &rc);
        CHECK_RC(rc, 0);
        uint64_t floor_j = nrep ? reported : prev_j;
        if (kind->nosync && j >= prev_j && j <= floor_j + 1)
            floor_j = j;    /* without sync a commit may be lost */
        if (j < floor_j || j > floor_j + 1)
            printf("  round %d (killed after %ld ms, cache %" PRIu64
                   ", checkpoint %" PRIu64 "): last=%" PRIu64
                   ", reported %" PRIu64 " (%" PRIu64 " reports), before %"
                   PRIu64 "\n", round, delay_ms, cache, ckpt, j, reported,
                   nrep, prev_j);
        CHECK(j >= floor_j && j <= floor_j + 1);
        CHECK(j >= prev_j);
        verify_state(c, kind, j, round);
        CHECK_RC(qs_close(c), 0);
        prev_j = j;
    }
    printf("  %s: %" PRIu64 " transactions survived in all; %d rounds "
           "killed before the first commit\n", kind->name, prev_j,
           killed_early);
    if (tc_cur_failed)
        printf("  reproduce with QS_TEST_SEED=%" PRIu64 "\n", seed);
    tc_tmp_remove(&t);
}

static const crash_kind K_SIMPLE = {
    "simple", 0, 0, 0, 0, {0, 0, 64 * 4096}, {0, 64 * 1024, 256 * 1024}};
static const crash_kind K_BATCHES = {
    "batches", 1, 0, 0, 0, {64 * 4096, 64 * 4096, 0},
    {64 * 1024, 256 * 1024, 0}};
static const crash_kind K_COMPACT = {
    "compact", 1, 7, 0, 0, {0, 64 * 4096, 0}, {0, 64 * 1024, 256 * 1024}};
static const crash_kind K_NOSYNC = {
    "nosync", 1, 0, 1, 0, {0, 64 * 4096, 0}, {0, 64 * 1024, 256 * 1024}};
static const crash_kind K_LOGONLY = {
    "log-only", 0, 0, 0, 150, {0, 0, 0}, {0, 0, 0}};


/* Damaged logs.  A child commits 150 transactions (all still in the log:
 * no checkpoint) and is killed.  Then, on copies, the log is truncated at
 * random places, has bytes flipped, or a page zeroed.  Opening must either
 * fail with QS_CORRUPT or give a sound casket holding exactly the state
 * after some transaction j (a prefix), which then takes new commits. */
static void log_damage(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    const crash_kind *kind = &K_LOGONLY;
    tc_child writer;
    REQUIRE(writer_start(&writer, t.path, kind, 0, 0) == 0);
    uint64_t x, last = 0;
    while (read(writer.report, &x, sizeof x) == sizeof x) {
        last = x;
        if (x >= kind->stop_after)
            break;
    }
    tc_child_kill(&writer);
    REQUIRE(last == kind->stop_after);

    char orig[700], origlog[720];
    snprintf(orig, sizeof orig, "%s.orig", t.path);
    snprintf(origlog, sizeof origlog, "%s.orig-log", t.path);
    REQUIRE(tc_copy_file(t.path, orig) == 0);
    REQUIRE(tc_copy_file(t.log, origlog) == 0);
    long long logsize = tc_file_size(origlog);
    printf("  main file %lld bytes, log %lld bytes\n", tc_file_size(orig),
           logsize);
    REQUIRE(logsize > 8192);

    /* undamaged: everything is there, also for a read-only open (which
     * must replay the log without writing either file) */
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_READ, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    uint64_t j = read_last(c, &rc);
    CHECK(j == last);
    verify_state(c, kind, j, -1);
    char msg[512] = "";
    CHECK_RC(qs_check(c, msg, sizeof msg), 0);
    CHECK_RC(qs_close(c), 0);
    CHECK(tc_file_size(t.path) == tc_file_size(orig));
    CHECK(tc_file_size(t.log) == logsize);
    c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    j = read_last(c, &rc);
    CHECK(j == last);
    qs_close(c);

    uint64_t seed = tc_seed();
    tc_rng rng = {seed};
    int trials = (int)tc_scaled(60, 6), corrupt = 0, opened = 0;
    uint64_t jmin = UINT64_MAX, jmax = 0;
    unsigned char *buf = malloc(16384);
    printf("  seed %" PRIu64 ", %d trials\n", seed, trials);
    for (int trial = 0; trial < trials && !tc_cur_failed; trial++) {
        REQUIRE(tc_copy_file(orig, t.path) == 0);
        REQUIRE(tc_copy_file(origlog, t.log) == 0);
        int how = trial % 3;
        long long off = 4096 + (long long)tc_below(&rng,
                                                   (uint64_t)logsize - 4096);
        char what[128];
        if (how == 0) {
            REQUIRE(truncate(t.log, off) == 0);
            snprintf(what, sizeof what, "log truncated to %lld", off);
        } else {
            int fd = open(t.log, O_RDWR);
            REQUIRE(fd >= 0);
            if (how == 1) {
                unsigned char b = 0;
                REQUIRE(pread(fd, &b, 1, off) == 1);
                b ^= (unsigned char)(1 + tc_below(&rng, 255));
                REQUIRE(pwrite(fd, &b, 1, off) == 1);
                snprintf(what, sizeof what, "log byte %lld flipped", off);
            } else {
                off = off / 4096 * 4096;
                unsigned char z[4096] = {0};
                REQUIRE(pwrite(fd, z, sizeof z, off) == (ssize_t)sizeof z);
                snprintf(what, sizeof what, "log page at %lld zeroed", off);
            }
            close(fd);
        }
        c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
        if (rc != 0) {
            if (rc != QS_CORRUPT)
                printf("  %s: qs_open %d (%s)\n", what, rc, qs_strerror(rc));
            CHECK_RC(rc, QS_CORRUPT);
            corrupt++;
            continue;
        }
        opened++;
        rc = qs_check(c, msg, sizeof msg);
        if (rc != 0)
            printf("  %s: qs_check %d (%s): %s\n", what, rc,
                   qs_strerror(rc), msg);
        CHECK_RC(rc, 0);
        j = read_last(c, &rc);
        CHECK_RC(rc, 0);
        if (j < jmin)
            jmin = j;
        if (j > jmax)
            jmax = j;
        if (how == 0 && off >= logsize)
            CHECK(j == last);
        int failed_before = tc_cur_failed;
        tc_cur_failed = 0;
        verify_state(c, kind, j, trial);
        if (tc_cur_failed)
            printf("  %s: the state is not that after transaction %" PRIu64
                   "\n", what, j);
        tc_cur_failed |= failed_before;
        /* the recovered casket takes new transactions */
        for (uint64_t i = j + 1; i <= j + 5; i++)
            CHECK_RC(do_txn(c, kind, i, buf), 0);
        CHECK_RC(qs_close(c), 0);
        c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
        REQUIRE_RC(rc, 0);
        uint64_t j2 = read_last(c, &rc);
        CHECK(j2 == j + 5);
        verify_state(c, kind, j2, trial);
        CHECK_RC(qs_check(c, msg, sizeof msg), 0);
        qs_close(c);
    }
    printf("  %d opened (transactions kept: %" PRIu64 "..%" PRIu64 " of %"
           PRIu64 "), %d QS_CORRUPT\n", opened, jmin, jmax, last, corrupt);
    free(buf);
    tc_tmp_remove(&t);
}

static void crash_simple(void) { crash_rounds(&K_SIMPLE); }
static void crash_batches(void) { crash_rounds(&K_BATCHES); }
static void crash_compact(void) { crash_rounds(&K_COMPACT); }
static void crash_nosync(void) { crash_rounds(&K_NOSYNC); }

/* The child commits "last" = 1, 2, 3, ... with sync off, each commit a
 * small frame that goes through the log's mapping (it checks that the log
 * is mapped once it has committed), reporting each number after its commit
 * returns; UINT64_MAX reported: the log was not mapped. */
static void small_nosync_child(const char *path, int fd)
{
    int rc;
    qs_casket *c = tc_open(path, QS_OPEN_CREATE, 0, 0, 256 * 1024, &rc);
    if (rc)
        _exit(2);
    uint64_t i = read_last(c, &rc);
    for (int first = 1;; first = 0) {
        char v[32];
        int vn = snprintf(v, sizeof v, "%" PRIu64, ++i);
        if (qs_put(c, "last", 4, v, (size_t)vn) != 0)
            _exit(3);
        uint64_t report = i;
        if (first && tc_mapped_bytes("-log") == 0)
            report = UINT64_MAX;
        if (write(fd, &report, sizeof report) != (ssize_t)sizeof report)
            _exit(4);
    }
}

/* kill -9 loses no small commit made with sync off: the mapping's stores
 * are in the page cache as a write's bytes would be.  Every reported
 * commit is there after the reopen (and at most one more). */
static void crash_small_nosync_commits_kept(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    uint64_t seed = tc_seed(), prev = 0;
    tc_rng rng = {seed};
    int rounds = tc_small() ? 6 : 20;
    for (int round = 0; round < rounds; round++) {
        int p[2];
        REQUIRE(pipe(p) == 0);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            small_nosync_child(t.path, p[1]);
        }
        close(p[1]);
        long delay_ms = 20 + (long)tc_below(&rng, tc_small() ? 400 : 150);
        msleep(delay_ms);
        kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        uint64_t r, reported = 0, n = 0;
        int unmapped = 0;
        while (read(p[0], &r, sizeof r) == (ssize_t)sizeof r) {
            unmapped |= r == UINT64_MAX;
            if (r != UINT64_MAX)
                reported = r;
            n++;
        }
        close(p[0]);
        CHECK(!unmapped);
        int rc;
        qs_casket *c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, &rc);
        REQUIRE_RC(rc, 0);
        uint64_t j = read_last(c, &rc);
        CHECK_RC(rc, 0);
        if (n == 0)
            reported = prev;
        if (j < reported || j > reported + 1)
            printf("  round %d (killed after %ld ms): last=%" PRIu64 ", reported %" PRIu64
                   " (%" PRIu64 " reports); QS_TEST_SEED=%" PRIu64 "\n", round, delay_ms, j,
                   reported, n, seed);
        CHECK(j >= reported && j <= reported + 1);
        CHECK_RC(qs_close(c), 0);
        prev = j;
    }
    printf("  %" PRIu64 " small commits survived %d kills\n", prev, rounds);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(crash_simple);
    RUN(crash_batches);
    RUN(crash_compact);
    RUN(crash_nosync);
    RUN(crash_small_nosync_commits_kept);
    RUN(log_damage);
    return tc_summary();
}
