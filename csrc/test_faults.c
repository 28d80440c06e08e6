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
 *
 * power_loss simulates power cuts: it remembers every page written since
 * the last fdatasync/fsync of its file, and at many points copies the
 * casket with each such page set to any one of its versions (a disk may
 * reorder unsynced writes), then checks that the copy opens to the state
 * after a whole transaction, no older than the last one committed.
 */
#include <dlfcn.h>
#include <pthread.h>
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


/* ---- power-loss simulation ------------------------------------------
 * While enabled, every page written to the casket's two files since that
 * file's last fdatasync/fsync is remembered with each version written.  A
 * snapshot copies both files and sets each such page to a random one of
 * its versions or to what it held at the last sync: any state a power cut
 * could leave when the disk reorders unsynced writes. */

typedef struct {
    int fd;
    uint64_t off;
    unsigned char *orig;        /* content at the last sync; NULL: zeros */
    unsigned char **ver;        /* versions written since, oldest first */
    int nver;
} pl_page;

static pthread_mutex_t pl_mu = PTHREAD_MUTEX_INITIALIZER;
static int pl_on;
static char pl_main[600], pl_log[620];
static pl_page *pl_pages;
static size_t pl_n, pl_cap;
static long pl_writes;              /* tracked write calls */
static long pl_stride = 5, pl_max_snaps = 120;
static int pl_nsnaps;
static uint64_t pl_committed;       /* set by the test after each commit */
static uint64_t pl_snap_committed[512];
static tc_rng pl_rng = {42};
static char pl_dir[512];
static long pl_unsynced[2];          /* diagnosis: log / main pages varied */

static int pl_tracked(int fd)
{
    if (!pl_on)
        return 0;
    char link[64], path[700];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = 0;
    return strcmp(path, pl_main) == 0 || strcmp(path, pl_log) == 0;
}

static pl_page *pl_find(int fd, uint64_t off)
{
    for (size_t i = 0; i < pl_n; i++)
        if (pl_pages[i].fd == fd && pl_pages[i].off == off)
            return &pl_pages[i];
    if (pl_n == pl_cap) {
        pl_cap = pl_cap ? pl_cap * 2 : 256;
        pl_pages = realloc(pl_pages, pl_cap * sizeof *pl_pages);
    }
    pl_page *p = &pl_pages[pl_n++];
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->off = off;
    unsigned char *buf = malloc(4096);
    ssize_t got = pread(fd, buf, 4096, (off_t)off);
    if (got <= 0) {
        free(buf);
        buf = NULL;
    } else if (got < 4096) {
        memset(buf + got, 0, 4096 - (size_t)got);
    }
    p->orig = buf;
    return p;
}

static void pl_page_free(pl_page *p)
{
    free(p->orig);
    for (int v = 0; v < p->nver; v++)
        free(p->ver[v]);
    free(p->ver);
}

/* called before a write of len bytes at off: remember the old pages */
static void pl_before(int fd, uint64_t off, size_t len)
{
    for (uint64_t a = off / 4096 * 4096; a < off + len; a += 4096)
        pl_find(fd, a);
}

/* called after it: remember the new content of each page */
static void pl_after(int fd, uint64_t off, size_t len)
{
    for (uint64_t a = off / 4096 * 4096; a < off + len; a += 4096) {
        pl_page *p = pl_find(fd, a);
        unsigned char *buf = calloc(1, 4096);
        if (pread(fd, buf, 4096, (off_t)a) < 0)
            memset(buf, 0, 4096);
        p->ver = realloc(p->ver, (size_t)(p->nver + 1) * sizeof *p->ver);
        p->ver[p->nver++] = buf;
    }
}

static void pl_synced(int fd)
{
    size_t j = 0;
    for (size_t i = 0; i < pl_n; i++) {
        if (pl_pages[i].fd == fd)
            pl_page_free(&pl_pages[i]);
        else
            pl_pages[j++] = pl_pages[i];
    }
    pl_n = j;
}

static void pl_copy_raw(const char *from, const char *to)
{
    int a = open(from, O_RDONLY), b = open(to, O_WRONLY | O_CREAT | O_TRUNC,
                                           0644);
    char buf[65536];
    ssize_t n;
    while (a >= 0 && b >= 0 && (n = read(a, buf, sizeof buf)) > 0)
        if (write(b, buf, (size_t)n) != n)
            break;
    if (a >= 0)
        close(a);
    if (b >= 0)
        close(b);
}

/* after a tracked write: maybe take a snapshot (a simulated power cut) */
static void pl_maybe_snapshot(int main_fd_hint)
{
    (void)main_fd_hint;
    pl_writes++;
    if (pl_nsnaps >= pl_max_snaps || pl_writes % pl_stride != 0)
        return;
    int k = pl_nsnaps++;
    char m[700], l[720];
    snprintf(m, sizeof m, "%s/snap%03d", pl_dir, k);
    snprintf(l, sizeof l, "%s/snap%03d-log", pl_dir, k);
    pl_copy_raw(pl_main, m);
    pl_copy_raw(pl_log, l);
    pl_snap_committed[k] = pl_committed;
    /* which fd is which file */
    for (size_t i = 0; i < pl_n; i++) {
        pl_page *p = &pl_pages[i];
        char link[64], path[700];
        snprintf(link, sizeof link, "/proc/self/fd/%d", p->fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        if (n <= 0)
            continue;
        path[n] = 0;
        int is_main = strcmp(path, pl_main) == 0;
        const char *dst = is_main ? m : l;
        int choice = (int)tc_below(&pl_rng, (uint64_t)p->nver + 1);
        /* QS_PL_MODE (diagnosis): 1 every page at its last version (no
         * loss), 2 every page as at its last sync, 3 main-file pages new
         * and log pages old */
        const char *mode = getenv("QS_PL_MODE");
        if (mode && *mode == '1')
            choice = p->nver;
        else if (mode && *mode == '2')
            choice = 0;
        else if (mode && *mode == '3')
            choice = is_main ? p->nver : 0;
        if (mode)
            pl_unsynced[is_main] += 1;
        unsigned char zero[4096] = {0};
        const unsigned char *src = choice == 0
                                       ? (p->orig ? p->orig : zero)
                                       : p->ver[choice - 1];
        int fd = open(dst, O_WRONLY);
        if (fd >= 0) {
            /* not pwrite: that is ours, and pl_mu is held */
            if (lseek(fd, (off_t)p->off, SEEK_SET) == (off_t)p->off) {
                ssize_t w = write(fd, src, 4096);
                (void)w;
            }
            close(fd);
        }
    }
}

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
    pthread_mutex_lock(&pl_mu);
    int track = pl_tracked(fd);
    if (track)
        pl_before(fd, (uint64_t)off, n);
    ssize_t r = real_pwrite(fd, buf, n, off);
    if (track && r > 0) {
        pl_after(fd, (uint64_t)off, (size_t)r);
        pl_maybe_snapshot(fd);
    }
    pthread_mutex_unlock(&pl_mu);
    return r;
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
    pthread_mutex_lock(&pl_mu);
    int track = pl_tracked(fd);
    size_t total = 0;
    for (int i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    if (track)
        pl_before(fd, (uint64_t)off, total);
    ssize_t r = real_pwritev(fd, iov, cnt, off);
    if (track && r > 0) {
        pl_after(fd, (uint64_t)off, (size_t)r);
        pl_maybe_snapshot(fd);
    }
    pthread_mutex_unlock(&pl_mu);
    return r;
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
    int r = real_fdatasync(fd);
    pthread_mutex_lock(&pl_mu);
    if (r == 0 && pl_tracked(fd))
        pl_synced(fd);
    pthread_mutex_unlock(&pl_mu);
    return r;
}

int fsync(int fd)
{
    REAL(fsync);
    if (f_fail(F_SYNC, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    int r = real_fsync(fd);
    pthread_mutex_lock(&pl_mu);
    if (r == 0 && pl_tracked(fd))
        pl_synced(fd);
    pthread_mutex_unlock(&pl_mu);
    return r;
}

int ftruncate(int fd, off_t len)
{
    REAL(ftruncate);
    if (f_fail(F_TRUNC, fd)) {
        errno = atomic_load(&f_errno);
        return -1;
    }
    int r = real_ftruncate(fd, len);
    pthread_mutex_lock(&pl_mu);
    if (r == 0 && pl_tracked(fd)) {
        size_t j = 0;
        for (size_t i = 0; i < pl_n; i++) {
            if (pl_pages[i].fd == fd && pl_pages[i].off >= (uint64_t)len)
                pl_page_free(&pl_pages[i]);
            else
                pl_pages[j++] = pl_pages[i];
        }
        pl_n = j;
    }
    pthread_mutex_unlock(&pl_mu);
    return r;
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


/* ------------------------------------------------------------------ */
/* power loss                                                          */

#define PL_BATCH 30
#define PL_KEEP 3

static void pl_fill(unsigned char *p, size_t n, uint64_t i, uint64_t salt)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)(i * 131 + salt * 17 + j * 7 + (j >> 8));
}

static int pl_txn(qs_casket *c, uint64_t i)
{
    unsigned char v[9000];
    char k[64];
    int rc = qs_begin(c);
    if (rc)
        return rc;
    int kn = snprintf(k, sizeof k, "t%03" PRIu64, i);
    size_t vn = (size_t)((i * 7919) % 9000);
    pl_fill(v, vn, i, 0);
    rc = qs_put(c, k, (size_t)kn, v, vn);
    for (int b = 0; b < PL_BATCH && !rc; b++) {
        kn = snprintf(k, sizeof k, "b%03" PRIu64 "/%02d", i, b);
        pl_fill(v, 700, i, (uint64_t)b + 1);
        rc = qs_putdup(c, k, (size_t)kn, v, 700);
    }
    for (int b = 0; b < PL_BATCH && !rc && i > PL_KEEP; b++) {
        kn = snprintf(k, sizeof k, "b%03" PRIu64 "/%02d", i - PL_KEEP, b);
        rc = qs_outlist(c, k, (size_t)kn, NULL);
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

/* the casket holds exactly the state after transaction j */
static int pl_verify(qs_casket *c, uint64_t j, const char *what)
{
    int bad = 0;
    unsigned char want[9000];
    uint64_t expect = j ? j + 1 : 0;
    expect += (uint64_t)PL_BATCH * (j < PL_KEEP ? j : PL_KEEP);
    uint64_t recs = 0;
    if (qs_records(c, &recs) != 0 || recs != expect) {
        printf("  %s: %" PRIu64 " records, want %" PRIu64 " (j=%" PRIu64
               ")\n", what, recs, expect, j);
        bad++;
    }
    for (uint64_t i = 1; i <= j + 1; i++) {
        char k[64];
        int kn = snprintf(k, sizeof k, "t%03" PRIu64, i);
        void *v = NULL;
        size_t vn = 0;
        int rc = qs_get(c, k, (size_t)kn, &v, &vn);
        size_t wn = (size_t)((i * 7919) % 9000);
        pl_fill(want, wn, i, 0);
        if (i <= j ? (rc != 0 || vn != wn || memcmp(v, want, wn) != 0)
                   : rc != QS_NOTFOUND) {
            if (bad < 3)
                printf("  %s: %s rc %d (j=%" PRIu64 ")\n", what, k, rc, j);
            bad++;
        }
        qs_free(v);
    }
    return bad;
}

static void power_loss(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, 32 * 4096, 128 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    uint64_t seed = tc_seed();
    pl_rng.s = seed;
    snprintf(pl_dir, sizeof pl_dir, "%s", t.dir);
    snprintf(pl_main, sizeof pl_main, "%s", t.path);
    snprintf(pl_log, sizeof pl_log, "%s", t.log);
    pl_max_snaps = tc_scaled(150, 5);
    pl_stride = 3 + (long)tc_below(&pl_rng, 5);
    pl_nsnaps = 0;
    pl_writes = 0;
    pl_committed = 0;
    uint64_t ntx = (uint64_t)tc_scaled(40, 4);
    pthread_mutex_lock(&pl_mu);
    pl_on = 1;
    pthread_mutex_unlock(&pl_mu);
    for (uint64_t i = 1; i <= ntx; i++) {
        rc = pl_txn(c, i);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
        pthread_mutex_lock(&pl_mu);
        pl_committed = i;
        pthread_mutex_unlock(&pl_mu);
        if (i % 10 == 0)
            CHECK_RC(qs_sync(c), 0);
    }
    pthread_mutex_lock(&pl_mu);
    pl_on = 0;
    for (size_t i = 0; i < pl_n; i++)
        pl_page_free(&pl_pages[i]);
    pl_n = 0;
    pthread_mutex_unlock(&pl_mu);
    CHECK_RC(qs_close(c), 0);
    printf("  seed %" PRIu64 ": %ld tracked writes, %d simulated power cuts "
           "(every %ld-th write)\n", seed, pl_writes, pl_nsnaps, pl_stride);

    int bad_snaps = 0;
    for (int k = 0; k < pl_nsnaps; k++) {
        char m[700], l[720], what[64];
        snprintf(m, sizeof m, "%s/snap%03d", t.dir, k);
        snprintf(l, sizeof l, "%s/snap%03d-log", t.dir, k);
        snprintf(what, sizeof what, "cut %d (after commit %" PRIu64 ")", k,
                 pl_snap_committed[k]);
        c = tc_open(m, QS_OPEN_WRITE, 1, 0, 0, &rc);
        int bad = 0;
        if (!c) {
            printf("  %s: qs_open %d (%s)\n", what, rc, qs_strerror(rc));
            bad++;
        } else {
            char msg[512] = "";
            rc = qs_check(c, msg, sizeof msg);
            if (rc) {
                printf("  %s: qs_check %d (%s): %s\n", what, rc,
                       qs_strerror(rc), msg);
                bad++;
            }
            void *v = NULL;
            size_t vn = 0;
            uint64_t j = 0;
            rc = qs_get(c, "last", 4, &v, &vn);
            if (rc == 0 && vn < 20) {
                char tmp[24];
                memcpy(tmp, v, vn);
                tmp[vn] = 0;
                j = strtoull(tmp, NULL, 10);
            } else if (rc != QS_NOTFOUND) {
                printf("  %s: get last %d\n", what, rc);
                bad++;
            }
            qs_free(v);
            uint64_t lo = pl_snap_committed[k];
            if (j < lo || j > lo + 1) {
                printf("  %s: the casket holds transaction %" PRIu64 "\n",
                       what, j);
                bad++;
            }
            if (!bad)
                bad += pl_verify(c, j, what);
            qs_close(c);
        }
        if (bad)
            bad_snaps++;
        remove(m);          /* rerun with the printed seed to look closer */
        remove(l);
    }
    printf("  %d of %d power cuts left a bad casket\n", bad_snaps, pl_nsnaps);
    if (getenv("QS_PL_MODE"))
        printf("  unsynced pages at the cuts: %ld in the log, %ld in the "
               "main file\n", pl_unsynced[0], pl_unsynced[1]);
    CHECK(bad_snaps == 0);
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
    RUN(power_loss);
    return tc_summary();
}
