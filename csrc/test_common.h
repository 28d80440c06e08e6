/*
 * test_common.h -- a tiny test harness shared by the C tests (test_*.c).
 *
 * Each test case is a `static void name(void)`; main() calls RUN(name) for
 * each and ends with `return tc_summary();`, which prints "N passed, M failed"
 * and returns 1 when anything failed.
 *
 *   CHECK(cond)          report file:line and the expression, mark the case
 *                        failed, carry on
 *   CHECK_RC(expr, want) the same for a return code, printing both codes
 *   REQUIRE(cond)        CHECK, then return from the case when it failed
 *   REQUIRE_RC(expr, w)  likewise
 *
 * Environment: QS_TEST_SCALE=small shrinks the workloads (valgrind),
 * QS_TEST_SCALE=full makes the power-loss sweeps cut at every write;
 * QS_TEST_SEED=n fixes the seed of the random tests; TMPDIR is where the
 * temporary caskets go (each case gets its own mkdtemp directory, removed
 * at the end unless QS_TEST_KEEP is set).
 *
 * The fixture: RUN ends every case by closing the caskets tc_open opened
 * and the case did not close, and removing the directories tc_tmp_make
 * made and the case did not remove, so a REQUIRE that returns early (or a
 * CHECK-failed case that skipped its clean-up) leaves no handle for
 * valgrind to report and no directory in TMPDIR.  qs_close is routed
 * through tc_close to keep that record; tc_tmp_keep exempts a directory
 * that outlives its case.
 *
 * Helpers: msleep; tc_child_start / tc_child_end / tc_child_kill, a forked
 * child with a pipe each way (reports up, a release down); tc_fd_path, the
 * file a descriptor names (for interposers that pick their writes).
 */
#ifndef TEST_COMMON_H
#define TEST_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qstore.h"

static inline int tc_close(qs_casket *c);
/* Every close in a test goes through tc_close, so the fixture knows which
 * caskets are still open when a case ends; (qs_close) is the real one. */
#define qs_close(c) tc_close(c)

static atomic_int tc_cur_failed;
static int tc_npass, tc_nfail;
static const char *tc_cur_name = "";

#define TC_FAIL_AT(file, line) \
    do { tc_cur_failed = 1; fflush(stdout); } while (0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("  %s:%d: [%s] CHECK failed: %s\n", __FILE__, __LINE__,   \
                   tc_cur_name, #cond);                                      \
            TC_FAIL_AT(__FILE__, __LINE__);                                  \
        }                                                                    \
    } while (0)

#define REQUIRE(cond)                                                        \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("  %s:%d: [%s] REQUIRE failed: %s\n", __FILE__, __LINE__, \
                   tc_cur_name, #cond);                                      \
            TC_FAIL_AT(__FILE__, __LINE__);                                  \
            return;                                                          \
        }                                                                    \
    } while (0)

#define TC_RC_MSG(kind, expr, got, want)                                     \
    printf("  %s:%d: [%s] %s failed: %s returned %d (%s), want %d (%s)\n",   \
           __FILE__, __LINE__, tc_cur_name, kind, #expr, (got),              \
           qs_strerror(got), (want), qs_strerror(want))

#define CHECK_RC(expr, want)                                                 \
    do {                                                                     \
        int tc_rc_ = (expr), tc_want_ = (want);                              \
        if (tc_rc_ != tc_want_) {                                            \
            TC_RC_MSG("CHECK_RC", expr, tc_rc_, tc_want_);                   \
            TC_FAIL_AT(__FILE__, __LINE__);                                  \
        }                                                                    \
    } while (0)

#define REQUIRE_RC(expr, want)                                               \
    do {                                                                     \
        int tc_rc_ = (expr), tc_want_ = (want);                              \
        if (tc_rc_ != tc_want_) {                                            \
            TC_RC_MSG("REQUIRE_RC", expr, tc_rc_, tc_want_);                 \
            TC_FAIL_AT(__FILE__, __LINE__);                                  \
            return;                                                          \
        }                                                                    \
    } while (0)

static inline double tc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void tc_case_cleanup(void);

#define RUN(fn)                                                              \
    do {                                                                     \
        double tc_t0_ = tc_now();                                            \
        tc_cur_failed = 0;                                                   \
        tc_cur_name = #fn;                                                   \
        fflush(stdout);                                                      \
        fn();                                                                \
        tc_case_cleanup();                                                   \
        if (tc_cur_failed) {                                                 \
            tc_nfail++;                                                      \
            printf("FAIL %s (%.2fs)\n", #fn, tc_now() - tc_t0_);             \
        } else {                                                             \
            tc_npass++;                                                      \
            printf("ok   %s (%.2fs)\n", #fn, tc_now() - tc_t0_);             \
        }                                                                    \
        fflush(stdout);                                                      \
    } while (0)

static inline int tc_summary(void)
{
    printf("%d passed, %d failed\n", tc_npass, tc_nfail);
    fflush(stdout);
    return tc_nfail ? 1 : 0;
}

/* ---- environment ---- */

static inline int tc_small(void)
{
    const char *s = getenv("QS_TEST_SCALE");
    return s && strcmp(s, "small") == 0;
}

/* QS_TEST_SCALE=full: the exhaustive runs (every crash point), for local
 * use; CI runs the stated, seeded samples. */
static inline int tc_full(void)
{
    const char *s = getenv("QS_TEST_SCALE");
    return s && strcmp(s, "full") == 0;
}

/* n normally, n/div (at least 1) under QS_TEST_SCALE=small */
static inline long tc_scaled(long n, long div)
{
    if (!tc_small())
        return n;
    n /= div;
    return n < 1 ? 1 : n;
}

static inline uint64_t tc_seed(void)
{
    const char *s = getenv("QS_TEST_SEED");
    if (s && *s)
        return strtoull(s, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
            ((uint64_t)getpid() << 40)) % 1000000007ull;
}

/* ---- PRNG: splitmix64 ---- */

typedef struct { uint64_t s; } tc_rng;

static inline uint64_t tc_next(tc_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, n) */
static inline uint64_t tc_below(tc_rng *r, uint64_t n)
{
    return n ? tc_next(r) % n : 0;
}

static inline void tc_fill(tc_rng *r, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n >= 8) {
        uint64_t x = tc_next(r);
        memcpy(p, &x, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t x = tc_next(r);
        memcpy(p, &x, n);
    }
}

static inline void msleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- what a case left behind (the fixture) ---- */

/* Enough for any one case: a case that opens more without closing them
 * gets a warning, and those are not closed for it. */
#define TC_LEFT_MAX 64
static pthread_mutex_t tc_left_mu = PTHREAD_MUTEX_INITIALIZER;
static qs_casket *tc_left_caskets[TC_LEFT_MAX];
static char tc_left_dirs[TC_LEFT_MAX][512];

/* A free slot of the record, or -1 (with a warning naming what will not
 * be cleaned up); called with tc_left_mu held. */
static inline int tc_left_slot(const char *what)
{
    for (int i = 0; i < TC_LEFT_MAX; i++)
        if (!tc_left_caskets[i] && !tc_left_dirs[i][0])
            return i;
    printf("  warning: more than %d caskets and directories open at once: "
           "the fixture will not clean up %s\n", TC_LEFT_MAX, what);
    return -1;
}

static inline void tc_left_add_casket(qs_casket *c)
{
    pthread_mutex_lock(&tc_left_mu);
    int i = tc_left_slot("a casket");
    if (i >= 0)
        tc_left_caskets[i] = c;
    pthread_mutex_unlock(&tc_left_mu);
}

static inline void tc_left_add_dir(const char *dir)
{
    pthread_mutex_lock(&tc_left_mu);
    int i = tc_left_slot(dir);
    if (i >= 0)
        snprintf(tc_left_dirs[i], sizeof tc_left_dirs[i], "%s", dir);
    pthread_mutex_unlock(&tc_left_mu);
}

/* Forgets c or dir (one of them NULL): the case cleaned it up itself. */
static inline void tc_left_drop(qs_casket *c, const char *dir)
{
    pthread_mutex_lock(&tc_left_mu);
    for (int i = 0; i < TC_LEFT_MAX; i++) {
        if (c && tc_left_caskets[i] == c) {
            tc_left_caskets[i] = NULL;
            break;
        }
        if (dir && strcmp(tc_left_dirs[i], dir) == 0) {
            tc_left_dirs[i][0] = 0;
            break;
        }
    }
    pthread_mutex_unlock(&tc_left_mu);
}

static inline int tc_close(qs_casket *c)
{
    if (c)
        tc_left_drop(c, NULL);
    return (qs_close)(c);
}

/* ---- forked children ---- */

/* A forked child and the parent's ends of its two pipes: `report` reads
 * what the child writes to its report fd, closing `release` is end of file
 * on the child's release fd (so a child can hold something until then). */
typedef struct {
    pid_t pid;
    int report;
    int release;
} tc_child;

/* What a child runs: its return is its exit status.  It must not return
 * into the test harness, so it ends with _exit and never runs atexit. */
typedef int (*tc_child_fn)(void *arg, int report_fd, int release_fd);

/* Forks a child running fn(arg, ...); 0, or -1 (nothing started, no fd
 * left open) when a pipe or the fork failed. */
static inline int tc_child_start(tc_child *ch, tc_child_fn fn, void *arg)
{
    int up[2], down[2];
    if (pipe(up) != 0)
        return -1;
    if (pipe(down) != 0) {
        close(up[0]);
        close(up[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(up[0]);
        close(up[1]);
        close(down[0]);
        close(down[1]);
        return -1;
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(fn(arg, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    ch->pid = pid;
    ch->report = up[0];
    ch->release = down[1];
    return 0;
}

/* Releases the child, waits for it to end, closes the pipes; its exit
 * status, or 128 + the signal that ended it. */
static inline int tc_child_end(tc_child *ch)
{
    close(ch->release);
    int status = 0;
    while (waitpid(ch->pid, &status, 0) < 0 && errno == EINTR)
        ;
    close(ch->report);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* SIGKILLs the child, then tc_child_end (128 + SIGKILL unless it had ended
 * by itself). */
static inline int tc_child_kill(tc_child *ch)
{
    kill(ch->pid, SIGKILL);
    return tc_child_end(ch);
}

/* ---- temporary directories ---- */

typedef struct {
    char dir[512];
    char path[600];     /* dir + "/casket" */
    char log[620];      /* path + "-log" */
} tc_tmp;

/* The path descriptor fd has open (from /proc/self/fd): its length, 0
 * when it cannot be read (path then ""). */
static inline size_t tc_fd_path(int fd, char *path, size_t cap)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, cap - 1);
    path[n > 0 ? n : 0] = 0;
    return n > 0 ? (size_t)n : 0;
}

/* Bytes of this process's mappings of files whose path ends in suffix
 * (0: none, or /proc/self/maps unreadable). */
static inline uint64_t tc_mapped_bytes(const char *suffix)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[1024];
    uint64_t total = 0;
    size_t k = strlen(suffix);
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\n");
        line[n] = 0;
        unsigned long long a, z;
        if (n >= k && strcmp(line + n - k, suffix) == 0 &&
            sscanf(line, "%llx-%llx", &a, &z) == 2)
            total += z - a;
    }
    fclose(f);
    return total;
}

static inline long long tc_file_size(const char *p)
{
    struct stat sb;
    if (stat(p, &sb) != 0)
        return -1;
    return (long long)sb.st_size;
}

static inline int tc_rm_cb(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    remove(p);
    return 0;
}

static inline int tc_tmp_make(tc_tmp *t)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(t->dir, sizeof t->dir, "%s/qstest-XXXXXX", base);
    if (!mkdtemp(t->dir)) {
        printf("  mkdtemp(%s): %s\n", t->dir, strerror(errno));
        return -1;
    }
    snprintf(t->path, sizeof t->path, "%s/casket", t->dir);
    snprintf(t->log, sizeof t->log, "%s-log", t->path);
    tc_left_add_dir(t->dir);
    return 0;
}

/* dir outlives the case that made it (the program removes it later):
 * the fixture leaves it alone. */
static inline void tc_tmp_keep(tc_tmp *t)
{
    tc_left_drop(NULL, t->dir);
}

static inline void tc_rmdir(const char *dir);

static inline void tc_tmp_remove(tc_tmp *t)
{
    if (!t->dir[0])
        return;
    tc_left_drop(NULL, t->dir);
    tc_rmdir(t->dir);
    t->dir[0] = 0;
}

/* Removes dir and everything in it, unless QS_TEST_KEEP is set. */
static inline void tc_rmdir(const char *dir)
{
    const char *keep = getenv("QS_TEST_KEEP");
    if (keep && *keep) {
        printf("  kept %s\n", dir);
        return;
    }
    nftw(dir, tc_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    if (tc_file_size(dir) >= 0) {
        /* something recreated a file behind our back: try once more */
        nftw(dir, tc_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        if (tc_file_size(dir) >= 0)
            printf("  warning: could not remove %s\n", dir);
    }
}

/* The end of every case (RUN): closes what it left open (last opened
 * first), then removes the directories it left. */
static inline void tc_case_cleanup(void)
{
    int caskets = 0, dirs = 0;
    for (int i = TC_LEFT_MAX - 1; i >= 0; i--) {
        qs_casket *c = tc_left_caskets[i];
        if (c) {
            tc_left_caskets[i] = NULL;
            (qs_close)(c);
            caskets++;
        }
    }
    for (int i = 0; i < TC_LEFT_MAX; i++) {
        if (tc_left_dirs[i][0]) {
            tc_rmdir(tc_left_dirs[i]);
            tc_left_dirs[i][0] = 0;
            dirs++;
        }
    }
    if (caskets || dirs)
        printf("  [%s] the fixture closed %d casket(s) and removed %d "
               "directory(ies) the case left\n", tc_cur_name, caskets, dirs);
}


static inline int tc_copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb");
    if (!a)
        return -1;
    FILE *b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return -1;
    }
    char buf[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n)
            rc = -1;
    fclose(a);
    if (fclose(b) != 0)
        rc = -1;
    return rc;
}

static inline qs_casket *tc_open(const char *path, int mode, int sync,
                          uint64_t cache, uint64_t ckpt, int *rcout)
{
    qs_options o;
    qs_options_init(&o);
    o.flag = mode;
    o.sync = sync;
    o.cache_bytes = cache;
    o.checkpoint_bytes = ckpt;
    qs_casket *c = (qs_casket *)0x1;
    int rc = qs_open(path, &o, &c);
    if (rcout)
        *rcout = rc;
    if (rc != 0) {
        if (c != NULL)
            printf("  qs_open failed (%d) but *out is not NULL\n", rc);
        return NULL;
    }
    tc_left_add_casket(c);
    return c;
}

static inline uint32_t tc_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* qs_check, printing the damage it reports. */
static inline int check_ok(qs_casket *c)
{
    char msg[512] = "";
    int rc = qs_check(c, msg, sizeof msg);
    if (rc != 0)
        printf("  qs_check: %d (%s): %s\n", rc, qs_strerror(rc), msg);
    return rc;
}

#endif /* TEST_COMMON_H */
