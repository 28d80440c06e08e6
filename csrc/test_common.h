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
 */
#ifndef TEST_COMMON_H
#define TEST_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qstore.h"

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

#define RUN(fn)                                                              \
    do {                                                                     \
        double tc_t0_ = tc_now();                                            \
        tc_cur_failed = 0;                                                   \
        tc_cur_name = #fn;                                                   \
        fflush(stdout);                                                      \
        fn();                                                                \
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

/* ---- temporary directories ---- */

typedef struct {
    char dir[512];
    char path[600];     /* dir + "/casket" */
    char log[620];      /* path + "-log" */
} tc_tmp;

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
    return 0;
}

static inline void tc_tmp_remove(tc_tmp *t)
{
    if (!t->dir[0])
        return;
    const char *keep = getenv("QS_TEST_KEEP");
    if (keep && *keep) {
        printf("  kept %s\n", t->dir);
        return;
    }
    nftw(t->dir, tc_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    if (tc_file_size(t->dir) >= 0) {
        /* something recreated a file behind our back: try once more */
        nftw(t->dir, tc_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        if (tc_file_size(t->dir) >= 0)
            printf("  warning: could not remove %s\n", t->dir);
    }
    t->dir[0] = 0;
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
