/*
 * test_faults.c -- I/O errors and short writes, injected by interposing the
 * system calls the engine uses (pwrite, pwritev, fdatasync, fsync,
 * ftruncate): the library is linked statically into this program, so its
 * calls land here first and go on to libc through dlsym(RTLD_NEXT).
 *
 * After every injected failure the casket must hold each transaction
 * entirely or not at all, pass qs_check, keep working once the fault is
 * gone, and show after close + reopen exactly what the handle showed.
 * qstore.h: "An error while writing the log aborts the transaction ... An
 * error from the sync itself is returned after the transaction became
 * visible ... In every case the transaction is over when qs_commit returns."
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "test_common.h"

/* ------------------------------------------------------------------ */
/* the interposer                                                      */

enum { F_NONE = 0, F_WRITE = 1, F_SYNC = 2, F_TRUNC = 3 };

static atomic_int f_kind;           /* which calls may fail */
static atomic_long f_countdown;     /* fail the n-th matching call */
static atomic_int f_sticky;         /* then keep failing */
static atomic_int f_errno = EIO;
static atomic_long f_hits;          /* failures injected */
static atomic_int f_short;          /* writes do at most 1000 bytes */
static char f_last_path[256];       /* file of the last injected failure */
static atomic_long f_main_writes;   /* writes to the main file since arming */

static void f_note_fd(int fd)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, f_last_path, sizeof f_last_path - 1);
    f_last_path[n > 0 ? n : 0] = 0;
}

static int is_log(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && strcmp(path + n - 4, "-log") == 0;
}

/* counts writes to the main file (a checkpoint has begun) */
static void f_count_write(int fd)
{
    if (atomic_load(&f_kind) == F_NONE)
        return;
    char link[64], path[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    if (n > 0 && !is_log(path))
        atomic_fetch_add(&f_main_writes, 1);
}

static int f_fail(int kind, int fd)
{
    if (atomic_load(&f_kind) != kind)
        return 0;
    if (atomic_load(&f_sticky) && atomic_load(&f_hits) > 0) {
        atomic_fetch_add(&f_hits, 1);
        return 1;
    }
    if (atomic_fetch_sub(&f_countdown, 1) == 1) {
        atomic_fetch_add(&f_hits, 1);
        f_note_fd(fd);
        if (!atomic_load(&f_sticky))
            atomic_store(&f_kind, F_NONE);
        return 1;
    }
    return 0;
}

static void f_arm(int kind, long nth, int sticky, int err)
{
    atomic_store(&f_kind, F_NONE);
    atomic_store(&f_countdown, nth);
    atomic_store(&f_sticky, sticky);
    atomic_store(&f_errno, err);
    atomic_store(&f_hits, 0);
    atomic_store(&f_main_writes, 0);
    f_last_path[0] = 0;
    atomic_store(&f_kind, kind);
}

static void f_disarm(void) { atomic_store(&f_kind, F_NONE); }

#define REAL(name) \
    static __typeof__(name) *real_##name; \
    if (!real_##name) \
        real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite);
    if (f_fail(F_WRITE, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    f_count_write(fd);
    if (atomic_load(&f_short) && n > 1000)
        n = 1000;
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(pwritev);
    if (f_fail(F_WRITE, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    f_count_write(fd);
    if (atomic_load(&f_short) && cnt > 0) {
        /* a short write: part of the first buffer only */
        size_t n = iov[0].iov_len > 1000 ? 1000 : iov[0].iov_len;
        struct iovec one = {iov[0].iov_base, n};
        return real_pwritev(fd, &one, 1, off);
    }
    return real_pwritev(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev(fd, iov, cnt, off);
}

int fdatasync(int fd)
{
    REAL(fdatasync);
    if (f_fail(F_SYNC, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    return real_fdatasync(fd);
}

int fsync(int fd)
{
    REAL(fsync);
    if (f_fail(F_SYNC, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    return real_fsync(fd);
}

int ftruncate(int fd, off_t len)
{
    REAL(ftruncate);
    if (f_fail(F_TRUNC, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len) { return ftruncate(fd, len); }

/* ------------------------------------------------------------------ */
/* the workload: transaction i puts RECS records "f<i>/<j>"             */

#define RECS 60
#define MAXTX 400
#define VLEN 3000

static void tx_val(unsigned char *p, int i, int j)
{
    for (int b = 0; b < VLEN; b++)
        p[b] = (unsigned char)(i * 31 + j * 7 + b);
}

/* runs transaction i; returns the first error and where it happened */
static int tx_run(qs_casket *c, int i, const char **where)
{
    unsigned char v[VLEN];
    int rc = qs_begin(c);
    if (rc) {
        *where = "begin";
        return rc;
    }
    for (int j = 0; j < RECS; j++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "f%03d/%02d", i, j);
        tx_val(v, i, j);
        rc = qs_putdup(c, k, (size_t)kn, v, VLEN);
        if (rc) {
            *where = "putdup";
            int rc2 = qs_abort(c);
            if (rc2)
                printf("  abort after a failed putdup: %d (%s)\n", rc2,
                       qs_strerror(rc2));
            return rc;
        }
    }
    *where = "commit";
    return qs_commit(c);
}

/* how many of transaction i's records are visible (checking values) */
static int tx_visible(qs_casket *c, int i, int *bad)
{
    int n = 0;
    unsigned char want[VLEN];
    for (int j = 0; j < RECS; j++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "f%03d/%02d", i, j);
        void *v = NULL;
        size_t vn = 0;
        int rc = qs_get(c, k, (size_t)kn, &v, &vn);
        if (rc == 0) {
            tx_val(want, i, j);
            if (vn != VLEN || memcmp(v, want, VLEN) != 0)
                (*bad)++;
            n++;
        } else if (rc != QS_NOTFOUND) {
            (*bad)++;
        }
        qs_free(v);
    }
    return n;
}

/* every transaction so far is all there or all gone, as `state` says */
static int verify_all(qs_casket *c, const signed char *state, int ntx,
                      const char *when)
{
    int errors = 0;
    uint64_t want = 0;
    for (int i = 0; i < ntx; i++) {
        int bad = 0, n = tx_visible(c, i, &bad);
        int expect = state[i] ? RECS : 0;
        if (bad || n != expect) {
            if (errors < 3)
                printf("  %s: transaction %d has %d of %d records visible "
                       "(%d bad), want %d\n", when, i, n, RECS, bad, expect);
            errors++;
        }
        want += (uint64_t)expect;
    }
    uint64_t recs = 0;
    int rc = qs_records(c, &recs);
    if (rc || recs != want) {
        printf("  %s: qs_records %d, %" PRIu64 " records, want %" PRIu64
               "\n", when, rc, recs, want);
        errors++;
    }
    char msg[512] = "";
    rc = qs_check(c, msg, sizeof msg);
    if (rc) {
        printf("  %s: qs_check %d (%s): %s\n", when, rc, qs_strerror(rc),
               msg);
        errors++;
    }
    return errors;
}

/*
 * For n = 1, 2, ...: the n-th call of the given kind after arming fails
 * (once, or from then on when sticky); one transaction runs; the fault is
 * lifted; the state is checked in the handle, then again after a reopen.
 */
static void fault_sweep(int kind, int sticky, int err, const char *name)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    /* a tiny cache (transactions spill) and a small checkpoint threshold
     * (commits checkpoint) put writes of every kind inside transactions */
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 16 * 4096, 96 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    static signed char state[MAXTX];
    memset(state, 0, sizeof state);
    int ntx = 0;
    const char *where = "";
    for (int i = 0; i < 3; i++, ntx++) {
        REQUIRE_RC(tx_run(c, ntx, &where), 0);
        state[ntx] = 1;
    }
    int failed_commits = 0, failed_ops = 0, clean = 0, errors = 0;
    int visible_after_failed = 0, ckpt_fail_visible = 0;
    long maxn = (long)tc_scaled(kind == F_WRITE ? 120 : 40, 4);
    for (long n = 1; n <= maxn && ntx < MAXTX - 2 && !errors; n++) {
        int i = ntx++;
        f_arm(kind, n, sticky, err);
        rc = tx_run(c, i, &where);
        long hits = atomic_load(&f_hits);
        long main_writes = atomic_load(&f_main_writes);
        f_disarm();
        char path[256];
        snprintf(path, sizeof path, "%s", f_last_path);
        if (qs_in_transaction(c)) {
            printf("  n=%ld: a transaction is still open after %s returned "
                   "%d\n", n, where, rc);
            errors++;
            qs_abort(c);
        }
        if (hits == 0) {
            if (rc != 0) {
                printf("  n=%ld: %s failed (%d %s) with no fault injected\n",
                       n, where, rc, qs_strerror(rc));
                errors++;
            }
            state[i] = 1;
            clean++;
            break;          /* the transaction no longer reaches call n */
        }
        int bad = 0, vis = tx_visible(c, i, &bad);
        if (getenv("QS_TEST_TRACE"))
            printf("  n=%ld: %s -> %d (%s), %ld faults, last in %s, %d of %d "
                   "visible\n", n, where, rc, qs_strerror(rc), hits, path,
                   vis, RECS);
        if (bad || (vis != 0 && vis != RECS)) {
            printf("  n=%ld (%s %s, fault in %s): transaction partly "
                   "visible: %d of %d records, %d bad\n", n, where,
                   qs_strerror(rc), path, vis, RECS, bad);
            errors++;
        }
        state[i] = vis == RECS;
        if (rc == 0) {
            /* the failure was absorbed (retried, or after the commit) */
            if (vis != RECS) {
                printf("  n=%ld: commit returned 0 but the transaction is "
                       "not visible\n", n);
                errors++;
            }
        } else if (strcmp(where, "commit") == 0) {
            failed_commits++;
            if (vis)
                visible_after_failed++;
            if (kind == F_WRITE && is_log(path) && !main_writes && vis &&
                !sticky) {
                printf("  n=%ld: a log write failed (%s) and qs_commit "
                       "returned %d, yet the transaction is visible "
                       "(header: it is aborted)\n", n, qs_strerror(rc), rc);
                errors++;
            }
            if (kind == F_WRITE && vis && (main_writes || !is_log(path)))
                ckpt_fail_visible++;
            if (kind == F_SYNC && is_log(path) && !vis) {
                printf("  n=%ld: the log sync failed and the transaction "
                       "is gone (header: it stays visible)\n", n);
                errors++;
            }
        } else {
            failed_ops++;
            if (vis) {
                printf("  n=%ld: %s failed (%d) and was aborted, yet the "
                       "transaction is visible\n", n, where, rc);
                errors++;
            }
        }
        errors += verify_all(c, state, ntx, "after the fault");
        /* the handle works again */
        int j = ntx++;
        rc = tx_run(c, j, &where);
        if (rc) {
            printf("  n=%ld: the next transaction failed at %s: %d (%s)\n",
                   n, where, rc, qs_strerror(rc));
            errors++;
            int b2 = 0;
            state[j] = tx_visible(c, j, &b2) == RECS;
        } else {
            state[j] = 1;
        }
        /* and a reopen shows the same */
        rc = qs_close(c);
        if (rc)
            printf("  n=%ld: qs_close %d (%s)\n", n, rc, qs_strerror(rc));
        c = tc_open(t.path, QS_OPEN_WRITE, 1, 16 * 4096, 96 * 1024, &rc);
        if (!c) {
            printf("  n=%ld: reopen failed: %d (%s)\n", n, rc,
                   qs_strerror(rc));
            errors++;
            break;
        }
        errors += verify_all(c, state, ntx, "after reopen");
    }
    printf("  %s: %d failed commits (%d of them visible), %d failed "
           "operations, %d clean runs\n", name, failed_commits,
           visible_after_failed, failed_ops, clean);
    if (ckpt_fail_visible)
        printf("  note: %d times qs_commit returned the error of the "
               "checkpoint it ran after committing, for a transaction that "
               "is committed (visible, and still there after a reopen)\n",
               ckpt_fail_visible);
    CHECK(errors == 0);
    if (c)
        qs_close(c);
    tc_tmp_remove(&t);
}

static void write_error_once(void) { fault_sweep(F_WRITE, 0, EIO, "EIO"); }
static void write_enospc_sticky(void)
{
    fault_sweep(F_WRITE, 1, ENOSPC, "ENOSPC from then on");
}
static void sync_error_once(void) { fault_sweep(F_SYNC, 0, EIO, "sync"); }
static void truncate_error_once(void)
{
    fault_sweep(F_TRUNC, 0, EIO, "ftruncate");
}

/* Faults during open, sync, compact and close: errors are fine, damage
 * is not. */
static void faults_in_maintenance(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    static signed char state[MAXTX];
    memset(state, 0, sizeof state);
    int ntx = 0, errors = 0;
    const char *where;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    for (int i = 0; i < 10; i++, ntx++) {
        REQUIRE_RC(tx_run(c, ntx, &where), 0);
        state[ntx] = 1;
    }
    static const int kinds[] = {F_WRITE, F_SYNC, F_TRUNC};
    int rounds = (int)tc_scaled(12, 3);
    for (int k = 0; k < 3; k++) {
        for (long n = 1; n <= rounds && !errors; n++) {
            /* one more committed transaction so there is work to do */
            REQUIRE_RC(tx_run(c, ntx, &where), 0);
            state[ntx++] = 1;
            /* the odd ones: delete a transaction's records, so compaction
             * has something to move */
            if (n % 2) {
                int victim = (int)(n * 7 + k) % ntx;
                if (state[victim]) {
                    CHECK_RC(qs_begin(c), 0);
                    for (int j = 0; j < RECS; j++) {
                        char key[32];
                        int kn = snprintf(key, sizeof key, "f%03d/%02d",
                                          victim, j);
                        CHECK_RC(qs_out(c, key, (size_t)kn), 0);
                    }
                    CHECK_RC(qs_commit(c), 0);
                    state[victim] = 0;
                }
            }
            const char *op = n % 3 == 0 ? "qs_sync" : n % 3 == 1
                                                      ? "qs_compact"
                                                      : "qs_close+open";
            f_arm(kinds[k], n, 0, EIO);
            if (n % 3 == 0) {
                rc = qs_sync(c);
            } else if (n % 3 == 1) {
                rc = qs_compact(c);
            } else {
                rc = qs_close(c);
                c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
            }
            long hits = atomic_load(&f_hits);
            f_disarm();
            if (!c) {
                /* the open itself may fail on a fault; then it must work
                 * without one */
                c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
                if (!c) {
                    printf("  %s with fault kind %d at call %ld: reopen "
                           "without a fault fails: %d (%s)\n", op, kinds[k],
                           n, rc, qs_strerror(rc));
                    errors++;
                    break;
                }
            }
            if (hits && rc == 0 && strcmp(op, "qs_close+open") != 0)
                printf("  note: %s absorbed an injected fault (kind %d)\n",
                       op, kinds[k]);
            char when[96];
            snprintf(when, sizeof when, "%s, fault kind %d at call %ld", op,
                     kinds[k], n);
            errors += verify_all(c, state, ntx, when);
            REQUIRE_RC(qs_close(c), 0);
            c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
            REQUIRE_RC(rc, 0);
            snprintf(when, sizeof when, "%s, fault kind %d at call %ld, "
                     "reopened", op, kinds[k], n);
            errors += verify_all(c, state, ntx, when);
        }
    }
    CHECK(errors == 0);
    if (c)
        qs_close(c);
    tc_tmp_remove(&t);
}

/* Every write comes back short: the engine must finish it. */
static void short_writes(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    atomic_store(&f_short, 1);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 16 * 4096, 96 * 1024,
                           &rc);
    if (!c) {
        atomic_store(&f_short, 0);
        REQUIRE_RC(rc, 0);
    }
    static signed char state[MAXTX];
    memset(state, 0, sizeof state);
    const char *where;
    int ntx = (int)tc_scaled(40, 4), errors = 0;
    for (int i = 0; i < ntx; i++) {
        rc = tx_run(c, i, &where);
        if (rc) {
            printf("  transaction %d failed at %s: %d (%s)\n", i, where, rc,
                   qs_strerror(rc));
            errors++;
            break;
        }
        state[i] = 1;
    }
    CHECK_RC(qs_compact(c), 0);
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
    atomic_store(&f_short, 0);
    REQUIRE_RC(rc, 0);
    errors += verify_all(c, state, ntx, "short writes");
    CHECK(errors == 0);
    qs_close(c);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(short_writes);
    RUN(write_error_once);
    RUN(write_enospc_sticky);
    RUN(sync_error_once);
    RUN(truncate_error_once);
    RUN(faults_in_maintenance);
    return tc_summary();
}
