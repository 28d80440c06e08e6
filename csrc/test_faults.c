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
 * after a whole transaction, no older than the last one a synced commit
 * (or qs_sync) ended; every third transaction commits with
 * qs_commit_nosync, which a cut may lose.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "test_common.h"
#include "pager.h"
#include <limits.h>

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

/* Set by the big-transaction tests: fdatasync/fsync do not reach the disk
 * (the power-loss simulation keeps its own account of what a sync made
 * durable, and injected faults still apply), so thousands of reopens do
 * not wait on a slow disk. */
static atomic_int f_fake_sync;

/* While f_watch is set: f_commits counts commit frames (log pages past the
 * header with the commit flag in their trailer) that were written whole.
 * A transaction is committed exactly when its commit frame reached the
 * log, so a test can tell what qs_commit had to leave visible. */
#define F_TR_FLAGS 4004u            /* pagefmt.h: TR_FLAGS */
static atomic_int f_watch;
static atomic_long f_commits;
static atomic_long f_commit_countdown;  /* f_countdown when one was seen */

/* Commit frames among the frames a write to the log carries (wal.c: a
 * frame is an 8-byte header -- magic "QSFR", hole start, hole end -- then
 * the page without its hole, so its trailer ends the frame; a delta frame,
 * magic "QSFD", has its length after the magic and ends with the trailer
 * too). */
#define F_FRAME_MAGIC 0x52465351u
#define F_DELTA_MAGIC 0x44465351u
static int f_has_commit(const struct iovec *iov, int cnt, off_t off)
{
    if (off < 4096)
        return 0;
    size_t len = 0;
    for (int i = 0; i < cnt; i++)
        len += iov[i].iov_len;
    unsigned char *b = malloc(len ? len : 1);
    if (!b)
        return 0;
    size_t at = 0;
    for (int i = 0; i < cnt; i++) {
        memcpy(b + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    int found = 0;
    for (size_t q = 0; q + 8 <= len;) {
        uint32_t magic;
        uint16_t hs, he;
        memcpy(&magic, b + q, 4);
        memcpy(&hs, b + q + 4, 2);
        memcpy(&he, b + q + 6, 2);
        size_t flen;
        if (magic == F_DELTA_MAGIC)
            flen = hs;
        else if (magic != F_FRAME_MAGIC || hs > he || he > 4000)
            break;
        else
            flen = 8 + 4096 - (size_t)(he - hs);
        if (flen < 8 + 4096 - 4000)
            break;
        if (q + flen > len)
            break;
        if (b[q + flen - (4096 - F_TR_FLAGS)] & 1)
            found++;
        q += flen;
    }
    free(b);
    return found;
}

static void f_watch_commit(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (!atomic_load(&f_watch))
        return;
    char link[64], path[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    if (n <= 0 || !is_log(path))
        return;
    int found = f_has_commit(iov, cnt, off);
    if (found) {
        atomic_fetch_add(&f_commits, found);
        atomic_store(&f_commit_countdown, atomic_load(&f_countdown));
    }
}


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
static uint64_t pl_durable;         /* power_loss: what qs_commit or qs_sync made durable */
#define PL_SNAPS 1024           /* cuts a sampled run takes at most */
/* One simulated power cut: what had committed, the last log sync, the
 * transaction under way, and the write it came after. */
typedef struct {
    uint64_t committed, floor, started;
    uint64_t durable;   /* the last transaction a synced commit or qs_sync ended */
    char write[64];
} pl_cut;
static pl_cut *pl_cuts;             /* grows: a full run cuts after every write */
static size_t pl_cuts_cap;
static tc_rng pl_rng = {42};
static char pl_dir[512];
static long pl_unsynced[2];          /* diagnosis: log / main pages varied */
/* Used by the big-transaction tests (0 elsewhere): snapshot every
 * pl_stride_main-th write to the main file and every pl_stride_log-th
 * write to the log instead of every pl_stride-th write; vary how the
 * unsynced pages are chosen per snapshot. */
static long pl_stride_main, pl_stride_log, pl_off_main, pl_off_log;
static long pl_writes_main, pl_writes_log;
static int pl_mix_modes;
static uint64_t pl_floor;           /* pl_committed at the last log sync */
static uint64_t pl_started;         /* the transaction under way */
static uint64_t pl_last_off, pl_last_len;
/* (fd, page offset) -> index + 1 into pl_pages: a big transaction leaves
 * thousands of unsynced pages */
static uint32_t *pl_idx;
static size_t pl_idx_cap;

static size_t pl_hash(int fd, uint64_t off)
{
    uint64_t x = (off / 4096) * 0x9E3779B97F4A7C15ull ^ (uint64_t)fd * 0xBF58476D1CE4E5B9ull;
    return (size_t)(x ^ (x >> 31));
}

static void pl_idx_add(size_t i)
{
    size_t m = pl_idx_cap - 1, h = pl_hash(pl_pages[i].fd, pl_pages[i].off) & m;
    while (pl_idx[h])
        h = (h + 1) & m;
    pl_idx[h] = (uint32_t)(i + 1);
}

static void pl_idx_rebuild(void)
{
    size_t want = 1024;
    while (want < 2 * (pl_n + 1))
        want *= 2;
    if (want != pl_idx_cap) {
        free(pl_idx);
        pl_idx = malloc(want * sizeof *pl_idx);
        pl_idx_cap = want;
    }
    memset(pl_idx, 0, pl_idx_cap * sizeof *pl_idx);
    for (size_t i = 0; i < pl_n; i++)
        pl_idx_add(i);
}

/* 1: the main file, 2: the log, 0: not tracked */
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
    return strcmp(path, pl_main) == 0 ? 1 : strcmp(path, pl_log) == 0 ? 2 : 0;
}

static pl_page *pl_find(int fd, uint64_t off)
{
    if (!pl_idx_cap)
        pl_idx_rebuild();
    for (size_t h = pl_hash(fd, off) & (pl_idx_cap - 1); pl_idx[h];
         h = (h + 1) & (pl_idx_cap - 1)) {
        pl_page *q = &pl_pages[pl_idx[h] - 1];
        if (q->fd == fd && q->off == off)
            return q;
    }
    if (pl_n == pl_cap) {
        pl_cap = pl_cap ? pl_cap * 2 : 256;
        pl_pages = realloc(pl_pages, pl_cap * sizeof *pl_pages);
    }
    pl_page *p = &pl_pages[pl_n++];
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->off = off;
    if (2 * (pl_n + 1) > pl_idx_cap)
        pl_idx_rebuild();
    else
        pl_idx_add(pl_n - 1);
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
    pl_last_off = off;
    pl_last_len = len;
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
    pl_idx_rebuild();
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
static long pl_commit_cuts;

/* which: 1 main file, 2 log; commit: the write carried a commit frame */
static void pl_maybe_snapshot(int which, int commit)
{
    pl_writes++;
    if (pl_stride_main) {
        long n = which == 1 ? ++pl_writes_main : ++pl_writes_log;
        long stride = which == 1 ? pl_stride_main : pl_stride_log;
        long off = which == 1 ? pl_off_main : pl_off_log;
        /* right after a commit frame is the sharpest point: always cut */
        if (pl_nsnaps >= pl_max_snaps || (!commit && (n + off) % stride != 0))
            return;
        pl_commit_cuts += commit != 0;
    } else if (pl_nsnaps >= pl_max_snaps || pl_writes % pl_stride != 0)
        return;
    if ((size_t)pl_nsnaps == pl_cuts_cap) {
        size_t ncap = pl_cuts_cap ? 2 * pl_cuts_cap : 256;
        pl_cut *nc = realloc(pl_cuts, ncap * sizeof *nc);
        if (!nc)
            return;     /* no room to record it: this cut is not taken */
        pl_cuts = nc;
        pl_cuts_cap = ncap;
    }
    int k = pl_nsnaps++;
    /* pl_mix_modes: a quarter of the cuts keep every unsynced page's last
     * version, a quarter its synced one, half choose page by page */
    int smode = pl_mix_modes ? (int)tc_below(&pl_rng, 4) : 0;
    pl_cuts[k].floor = pl_floor;
    pl_cuts[k].started = pl_started;
    snprintf(pl_cuts[k].write, sizeof pl_cuts[k].write, "%s %s of %" PRIu64 " bytes at %" PRIu64,
             which == 1 ? "main" : "log", commit ? "commit write" : "write", pl_last_len,
             pl_last_off);
    char m[700], l[720];
    snprintf(m, sizeof m, "%s/snap%05d", pl_dir, k);
    snprintf(l, sizeof l, "%s/snap%05d-log", pl_dir, k);
    pl_copy_raw(pl_main, m);
    pl_copy_raw(pl_log, l);
    pl_cuts[k].committed = pl_committed;
    pl_cuts[k].durable = pl_durable;
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
        else if (smode == 2)
            choice = p->nver;
        else if (smode == 3)
            choice = 0;
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
    struct iovec one = {(void *)buf, r > 0 ? (size_t)r : 0};
    if (track && r > 0) {
        pl_after(fd, (uint64_t)off, (size_t)r);
        pl_maybe_snapshot(track, track == 2 && f_has_commit(&one, 1, off));
    }
    pthread_mutex_unlock(&pl_mu);
    if (r > 0)
        f_watch_commit(fd, &one, 1, off);
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
        pl_maybe_snapshot(track, track == 2 && (size_t)r == total &&
                                     f_has_commit(iov, cnt, off));
    }
    pthread_mutex_unlock(&pl_mu);
    if (r > 0 && (size_t)r == total)
        f_watch_commit(fd, iov, cnt, off);
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
    int r = atomic_load(&f_fake_sync) ? 0 : real_fdatasync(fd);
    pthread_mutex_lock(&pl_mu);
    int which = r == 0 ? pl_tracked(fd) : 0;
    if (which)
        pl_synced(fd);
    if (which == 2)
        pl_floor = pl_committed;    /* every commit so far is durable */
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
    int r = atomic_load(&f_fake_sync) ? 0 : real_fsync(fd);
    pthread_mutex_lock(&pl_mu);
    int which = r == 0 ? pl_tracked(fd) : 0;
    if (which)
        pl_synced(fd);
    if (which == 2)
        pl_floor = pl_committed;    /* every commit so far is durable */
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
        pl_idx_rebuild();
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

/* The payload of the k-th item (from 1) appended to stream "pls": each
 * transaction i appends "s<i>a", "s<i>b". */
static int pl_stream_val(char *out, size_t cap, uint64_t k)
{
    return snprintf(out, cap, "s%" PRIu64 "%c", (k + 1) / 2, k % 2 ? 'a' : 'b');
}

/* Issue 13's other records, in transaction i: on "plo" a priority item
 * (priority runs 'r') and, every third transaction, one delayed for a
 * million seconds ('d'); on "pld" (max_deliveries 1, dead letters to
 * "pldd") an item put, and a reserve and release, so that each reserve
 * first moves the item the transaction before released to the dead-letter
 * queue; on stream "pls" with group "g" ('s', 't', 'g', 'e'): the ack of
 * the group's one pending item, two appends, a group read of one item. */
static int pl_txn_semantics(qs_casket *c, uint64_t i)
{
    char v[64];
    int vn = snprintf(v, sizeof v, "o%" PRIu64, i);
    uint32_t lens[2] = {(uint32_t)vn, 0};
    int rc = qs_queue_put_order(c, "plo", 3, 1, v, (size_t)vn, lens, i % 3 ? 0 : 1e6,
                                (int)(i % 10), NULL);
    if (!rc && i == 1) {
        qs_queue_config qc = {0, 1, 0, "pldd", 4};
        rc = qs_queue_config_set(c, "pld", 3, &qc);
    }
    if (!rc) {
        vn = snprintf(v, sizeof v, "d%" PRIu64, i);
        rc = qs_queue_put(c, "pld", 3, v, (size_t)vn, NULL);
    }
    if (!rc) {
        qs_items *it = NULL;
        if ((rc = qs_queue_reserve(c, "pld", 3, 0, 0, &it)) == 0)
            rc = qs_queue_release(c, "pld", 3, it->ids[0], it->token);
        qs_items_free(it);
    }
    if (!rc)
        rc = qs_stream_group(c, "pls", 3, "g", 1, QS_STREAM_FIRST, 0);
    if (!rc) {
        qs_items *pend = NULL;
        if ((rc = qs_stream_pending(c, "pls", 3, "g", 1, &pend)) == 0 && pend->count)
            rc = qs_stream_ack(c, "pls", 3, "g", 1, pend->count, pend->ids, NULL);
        qs_items_free(pend);
    }
    if (!rc) {
        int a = pl_stream_val(v, sizeof v, 2 * i - 1);
        int b = pl_stream_val(v + a, sizeof v - (size_t)a, 2 * i);
        lens[0] = (uint32_t)a;
        lens[1] = (uint32_t)b;
        rc = qs_stream_append(c, "pls", 3, 2, v, (size_t)(a + b), lens, (double)i, NULL);
    }
    if (!rc) {
        qs_items *got = NULL;
        rc = qs_stream_read_group(c, "pls", 3, "g", 1, "c", 1, 1, 0, (double)i, &got);
        if (!rc && got->count != 1)
            rc = QS_INVAL;      /* the state is not what we wrote */
        qs_items_free(got);
    }
    return rc;
}

/* Whether item 0 of it is the len bytes of want. */
static int pl_is(const qs_items *it, const char *want, int len)
{
    return it && it->count >= 1 && it->off[1] - it->off[0] == (uint64_t)len &&
           memcmp(it->data + it->off[0], want, (size_t)len) == 0;
}

/* pl_txn_semantics's records after transaction j: "plo" holds j items,
 * j / 3 of them delayed, the front the one of the highest priority; "pld"
 * holds "d<j>", delivered once, "pldd" "d1" .. "d<j-1>" in order, each
 * delivered once (none of them in both); the stream keeps items j .. 2j
 * (retention removed what the group acknowledged), and the group's one
 * pending entry is item j, delivered once. */
static int pl_verify_semantics(qs_casket *c, uint64_t j, const char *what)
{
    int bad = 0;
    uint64_t n = 0;
    char want[64];
    int wn;
    if (qs_queue_len(c, "plo", 3, &n) != 0 || n != j)
        bad++;
    if (qs_queue_delayed(c, "plo", 3, &n) != 0 || n != j / 3)
        bad++;
    uint64_t front = 0;
    for (uint64_t i = 1; i <= j; i++)
        if (i % 3 && (!front || i % 10 > front % 10))
            front = i;
    qs_items *it = NULL;
    /* a queue with nothing available peeks QS_NOTFOUND (qstore.h), as "plo"
     * does before the first commit (the full run's first cut) */
    int prc = qs_queue_peek(c, "plo", 3, 1, &it);
    if (front ? prc != 0 || !pl_is(it, want, snprintf(want, sizeof want, "o%" PRIu64, front))
              : prc != QS_NOTFOUND && (prc != 0 || it->count != 0))
        bad++;
    qs_items_free(it);
    it = NULL;
    if (qs_queue_len(c, "pld", 3, &n) != 0 || n != (j ? 1 : 0))
        bad++;
    uint32_t d = 0;
    if (j && (qs_queue_peek(c, "pld", 3, 1, &it) != 0 ||
              !pl_is(it, want, snprintf(want, sizeof want, "d%" PRIu64, j)) ||
              qs_queue_item_info(c, "pld", 3, it->ids[0], &d, NULL, NULL) != 0 || d != 1))
        bad++;
    qs_items_free(it);
    it = NULL;
    uint64_t dead = j ? j - 1 : 0;
    if (qs_queue_len(c, "pldd", 4, &n) != 0 || n != dead)
        bad++;
    else if (dead && qs_queue_peek(c, "pldd", 4, (size_t)dead, &it) == 0 && it->count == dead) {
        for (uint64_t k = 0; k < dead; k++) {
            wn = snprintf(want, sizeof want, "d%" PRIu64, k + 1);
            if (it->off[k + 1] - it->off[k] != (uint64_t)wn ||
                memcmp(it->data + it->off[k], want, (size_t)wn) != 0 ||
                qs_queue_item_info(c, "pldd", 4, it->ids[k], &d, NULL, NULL) != 0 || d != 1)
                bad++;
        }
    } else if (dead)
        bad++;
    qs_items_free(it);
    it = NULL;
    if (qs_stream_len(c, "pls", 3, &n) != 0 || n != (j ? j + 1 : 0))
        bad++;
    qs_items *pend = NULL;
    if (j) {
        if (qs_stream_read(c, "pls", 3, 0, 1, &it) != 0 ||
            !pl_is(it, want, pl_stream_val(want, sizeof want, j)))
            bad++;
        uint32_t dl = 0;
        if (qs_stream_pending(c, "pls", 3, "g", 1, &pend) != 0 || pend->count != 1 ||
            !it || it->count != 1 || pend->ids[0] != it->ids[0] ||
            pend->off[1] - pend->off[0] < 12 ||
            (memcpy(&dl, pend->data + pend->off[0] + 8, 4), dl != 1))
            bad++;
    }
    qs_items_free(it);
    qs_items_free(pend);
    if (bad)
        printf("  %s: queue semantics records do not hold transaction %" PRIu64 " (%d bad)\n",
               what, j, bad);
    return bad;
}

/* power_loss commits every third transaction with qs_commit_nosync: a cut
 * may then lose it (and the nosync ones before it) but never one that a
 * later synced commit covered. */
static int pl_nosync(uint64_t i) { return i % 3 == 2; }

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
    /* the queue policy's records: the config rewritten, an item added, and
     * the front item's delivery record rewritten (reserved, failed) */
    if (!rc) {
        qs_queue_config qc = {1000 + i, 0, 0, NULL, 0};
        rc = qs_queue_config_set(c, "plq", 3, &qc);
    }
    if (!rc)
        rc = qs_queue_put(c, "plq", 3, k, (size_t)kn, NULL);
    if (!rc) {
        qs_items *it = NULL;
        char why[32];
        int wn = snprintf(why, sizeof why, "r%" PRIu64, i);
        if ((rc = qs_queue_reserve(c, "plq", 3, 0, 0, &it)) == 0)
            rc = qs_queue_fail(c, "plq", 3, it->ids[0], it->token, why, (size_t)wn);
        qs_items_free(it);
    }
    if (!rc)
        rc = pl_txn_semantics(c, i);
    /* dedup keys: a new key "k<i>" stored, then "k1" again, a duplicate */
    for (int d = 0; d < 2 && !rc; d++) {
        char dk[24];
        uint32_t vl = (uint32_t)kn, dl = (uint32_t)snprintf(dk, sizeof dk, "k%" PRIu64,
                                                            d ? (uint64_t)1 : i);
        size_t stored = 0;
        uint64_t id = 0;
        rc = qs_queue_put_keyed(c, "plk", 3, 1, k, vl, &vl, dk, dl, &dl, 0, 0, &id, &stored);
        if (rc == 0 && stored != (size_t)(d == 0))
            rc = QS_CORRUPT;
    }
    if (rc) {
        qs_abort(c);
        return rc;
    }
    return pl_nosync(i) ? qs_commit_nosync(c) : qs_commit(c);
}

/* The dedup keys after transaction j: j items, keys k1..kj each a
 * duplicate of its item (checked in a transaction that is aborted). */
static int pl_verify_keys(qs_casket *c, uint64_t j, const char *what)
{
    uint64_t len = 0;
    int bad = qs_queue_len(c, "plk", 3, &len) != 0 || len != j;
    qs_items *all = NULL;
    if (j && (qs_queue_peek(c, "plk", 3, (size_t)j, &all) != 0 || all->count != j))
        bad++;
    if (!bad && qs_begin(c) == 0) {
        for (uint64_t i = 1; i <= j + 1 && !bad; i++) {
            char dk[24];
            uint32_t one = 1, dl = (uint32_t)snprintf(dk, sizeof dk, "k%" PRIu64, i);
            size_t stored = 9;
            uint64_t id = 0;
            if (qs_queue_put_keyed(c, "plk", 3, 1, "x", 1, &one, dk, dl, &dl, 0, 0, &id,
                                   &stored) != 0 ||
                stored != (i == j + 1) || (i <= j && id != all->ids[i - 1]))
                bad++;
        }
        qs_abort(c);
    }
    qs_items_free(all);
    if (bad)
        printf("  %s: dedup keys do not hold transaction %" PRIu64 " (len %" PRIu64 ")\n", what,
               j, len);
    return bad;
}

/* The policy records after transaction j: config maxsize 1000 + j, j
 * items, the front one reserved j times and failed last with "r<j>". */
static int pl_verify_policy(qs_casket *c, uint64_t j, const char *what)
{
    qs_queue_config got;
    uint64_t len = 0;
    int rc = qs_queue_config_get(c, "plq", 3, &got);
    int bad = rc != 0 || got.maxsize != (j ? 1000 + j : 0);
    if (rc == 0)
        qs_free((void *)got.dead_letter);
    if (qs_queue_len(c, "plq", 3, &len) != 0 || len != j)
        bad++;
    qs_items *it = NULL;
    if (j && qs_queue_peek(c, "plq", 3, 1, &it) == 0 && it->count == 1) {
        uint32_t d = 0;
        void *r = NULL;
        size_t rl = 0;
        char want[32];
        int wn = snprintf(want, sizeof want, "r%" PRIu64, j);
        if (qs_queue_item_info(c, "plq", 3, it->ids[0], &d, &r, &rl) != 0 || d != j ||
            rl != (size_t)wn || memcmp(r, want, rl) != 0)
            bad++;
        qs_free(r);
    } else if (j)
        bad++;
    qs_items_free(it);
    if (bad)
        printf("  %s: queue policy records do not hold transaction %" PRIu64 " (config rc %d, "
               "len %" PRIu64 ")\n", what, j, rc, len);
    return bad;
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
    /* full: a cut after every write of 300 transactions; otherwise a
     * seeded sample of 40 */
    pl_max_snaps = tc_full() ? LONG_MAX : tc_scaled(150, 5);
    pl_stride = tc_full() ? 1 : 3 + (long)tc_below(&pl_rng, 5);
    pl_nsnaps = 0;
    pl_writes = 0;
    pl_committed = pl_durable = 0;
    uint64_t ntx = tc_full() ? 300 : (uint64_t)tc_scaled(40, 4);
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
        if (!pl_nosync(i))
            pl_durable = i;
        pthread_mutex_unlock(&pl_mu);
        if (i % 10 == 0) {
            CHECK_RC(qs_sync(c), 0);
            pthread_mutex_lock(&pl_mu);
            pl_durable = i;
            pthread_mutex_unlock(&pl_mu);
        }
    }
    pthread_mutex_lock(&pl_mu);
    pl_on = 0;
    for (size_t i = 0; i < pl_n; i++)
        pl_page_free(&pl_pages[i]);
    pl_n = 0;
    pl_idx_rebuild();
    pthread_mutex_unlock(&pl_mu);
    CHECK_RC(qs_close(c), 0);
    printf("  seed %" PRIu64 ": %ld tracked writes, %d simulated power cuts "
           "(every %ld-th write)\n", seed, pl_writes, pl_nsnaps, pl_stride);

    int bad_snaps = 0, lost_nosync = 0;
    for (int k = 0; k < pl_nsnaps; k++) {
        char m[700], l[720], what[64];
        snprintf(m, sizeof m, "%s/snap%05d", t.dir, k);
        snprintf(l, sizeof l, "%s/snap%05d-log", t.dir, k);
        snprintf(what, sizeof what, "cut %d (after commit %" PRIu64 ")", k,
                 pl_cuts[k].committed);
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
            uint64_t lo = pl_cuts[k].durable, hi = pl_cuts[k].committed + 1;
            lost_nosync += j < pl_cuts[k].committed;
            if (j < lo || j > hi) {
                printf("  %s: the casket holds transaction %" PRIu64 ", not %" PRIu64
                       "..%" PRIu64 "\n", what, j, lo, hi);
                bad++;
            }
            if (!bad)
                bad += pl_verify(c, j, what);
            if (!bad)
                bad += pl_verify_policy(c, j, what);
            if (!bad)
                bad += pl_verify_semantics(c, j, what);
            if (!bad)
                bad += pl_verify_keys(c, j, what);
            qs_close(c);
        }
        if (bad)
            bad_snaps++;
        remove(m);          /* rerun with the printed seed to look closer */
        remove(l);
    }
    printf("  %d of %d power cuts left a bad casket; %d lost nosync commits\n", bad_snaps,
           pl_nsnaps, lost_nosync);
    if (getenv("QS_PL_MODE"))
        printf("  unsynced pages at the cuts: %ld in the log, %ld in the "
               "main file\n", pl_unsynced[0], pl_unsynced[1]);
    CHECK(bad_snaps == 0);
    tc_tmp_remove(&t);
}


/* ------------------------------------------------------------------ */
/* big transactions: pages the file grows by go straight to the main   */
/* file (pager.c, DIRECT) when a commit has PG_DIRECT_MIN of them or    */
/* when they are spilled; the main file is synced before the commit     */
/* frame.  The workload mixes transactions that grow the file by        */
/* hundreds of pages (putdup_many of records of 100-300 bytes, queue    */
/* put_many), ones that free pages and reuse them, small ones, and      */
/* aborted big ones.                                                     */

#define BG_MAXTX 64
#define BG_Q "bigq"
#define BG_QN 4

enum { BG_RECS, BG_QUEUE, BG_SMALL, BG_DEL, BG_MIX };

typedef struct {
    int kind;
    int nrec;       /* records it adds, keys "hh.iii.rrrrr" */
    int nq;         /* queue items it adds */
    int del;        /* the transaction whose records it removes (0: none) */
    int qget;       /* queue items it asks for (qs_queue_get) */
    int chunk;      /* records per qs_putdup_many call (0: one call) */
    int abort;      /* ends in qs_abort */
    int got;        /* queue items its get returned */
    int status;     /* 1: committed */
} bg_tx;

typedef struct {
    bg_tx tx[BG_MAXTX + 1];     /* 1-based */
    int ntx;
} bg_model;

static long bg_errors;          /* mismatches seen while running */

static uint32_t bg_hash(uint32_t a, uint32_t b)
{
    uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

static int bg_key(char *k, int i, int r)
{
    return snprintf(k, 32, "%02x.%03d.%05d", bg_hash((uint32_t)i, (uint32_t)r) & 0xff, i, r);
}

/* value of record r of transaction i (q = 0) or of its queue item r (q = 1) */
static size_t bg_vlen(int i, int r, int q)
{
    return 100 + bg_hash((uint32_t)(2 * i + q), (uint32_t)r ^ 0x5555u) % 201;
}

static size_t bg_val(unsigned char *p, int i, int r, int q)
{
    size_t n = bg_vlen(i, r, q);
    uint32_t s = bg_hash((uint32_t)(i + 1000 * q), (uint32_t)r);
    for (size_t b = 0; b < n; b++)
        p[b] = (unsigned char)(s + b * 7 + (b >> 5));
    if (q) {        /* queue items say whose they are */
        memcpy(p, &i, 4);
        memcpy(p + 4, &r, 4);
    }
    return n;
}

static int bg_alive(const bg_model *m, int i, int j)
{
    if (i > j || !m->tx[i].status || !m->tx[i].nrec)
        return 0;
    for (int k = i + 1; k <= j; k++)
        if (m->tx[k].status && m->tx[k].del == i)
            return 0;
    return 1;
}

/* The queue after transaction j (counting j itself when self is set,
 * whatever its status): items (i << 20 | r) in order, *front of them
 * consumed.  Returns the malloc'd sequence. */
static uint32_t *bg_qseq(const bg_model *m, int j, int self, size_t *n, size_t *front)
{
    size_t cap = 16, len = 0, got = 0;
    uint32_t *seq = malloc(cap * sizeof *seq);
    for (int i = 1; i <= j; i++) {
        const bg_tx *t = &m->tx[i];
        if (!t->status && !(self && i == j))
            continue;
        for (int r = 0; r < t->nq; r++) {
            if (len == cap)
                seq = realloc(seq, (cap *= 2) * sizeof *seq);
            seq[len++] = (uint32_t)i << 20 | (uint32_t)r;
        }
        if (!(self && i == j))
            got += (size_t)t->got;
    }
    *n = len;
    *front = got;
    return seq;
}

/* checks queue items against the model's sequence from position at */
static int bg_check_items(const qs_items *it, const uint32_t *seq, size_t nseq,
                          size_t at, const char *what)
{
    unsigned char want[512];
    int bad = 0;
    for (size_t x = 0; x < it->count; x++) {
        if (at + x >= nseq) {
            printf("  %s: queue item %zu is beyond the %zu expected\n", what, at + x, nseq);
            return bad + 1;
        }
        int i = (int)(seq[at + x] >> 20), r = (int)(seq[at + x] & 0xfffff);
        size_t wn = bg_val(want, i, r, 1);
        size_t n = (size_t)(it->off[x + 1] - it->off[x]);
        if (n != wn || memcmp(it->data + it->off[x], want, wn) != 0 ||
            (x && it->ids[x] <= it->ids[x - 1])) {
            if (bad < 3) {
                int gi = -1, gr = -1;
                if (n >= 8) {
                    memcpy(&gi, it->data + it->off[x], 4);
                    memcpy(&gr, it->data + it->off[x] + 4, 4);
                }
                printf("  %s: queue item %zu is (%d, %d) len %zu, want (%d, %d) len %zu\n",
                       what, at + x, gi, gr, n, i, r, wn);
            }
            bad++;
        }
    }
    return bad;
}

/* The casket holds exactly the state after transaction j: every record
 * of each transaction or none (values checked, nothing else), "last",
 * the queue's items in order, and qs_check passes. */
static int bg_verify(qs_casket *c, const bg_model *m, int j, const char *what)
{
    int bad = 0;
    long tally[BG_MAXTX + 1] = {0};
    uint64_t total = 0, want_total = 0;
    int saw_last = 0;
    unsigned char want[512];
    qs_cursor *cur = NULL;
    int rc = qs_cursor_open(c, &cur);
    if (rc) {
        printf("  %s: qs_cursor_open %d (%s)\n", what, rc, qs_strerror(rc));
        return 1;
    }
    rc = qs_cursor_first(cur);
    while (rc == 0) {
        void *out = NULL;
        size_t outlen = 0;
        uint64_t count = 0;
        rc = qs_cursor_read(cur, 4096, 0, &out, &outlen, &count);
        if (rc || count == 0) {
            qs_free(out);
            break;
        }
        const unsigned char *p = out, *end = p + outlen;
        for (uint64_t x = 0; x < count && p + 8 <= end; x++) {
            uint32_t kn, vn;
            memcpy(&kn, p, 4);
            const char *k = (const char *)p + 4;
            memcpy(&vn, p + 4 + kn, 4);
            const unsigned char *v = p + 8 + kn;
            p += 8 + kn + vn;
            total++;
            int i, r;
            unsigned h;
            char kz[40] = "";
            if (kn < sizeof kz)
                memcpy(kz, k, kn);
            if (kn == 4 && memcmp(k, "last", 4) == 0) {
                char tmp[24] = "";
                memcpy(tmp, v, vn < 23 ? vn : 23);
                if (saw_last++ || (int)strtol(tmp, NULL, 10) != j) {
                    printf("  %s: \"last\" is %s, want %d\n", what, tmp, j);
                    bad++;
                }
            } else if (kn == 12 && sscanf(kz, "%2x.%3d.%5d", &h, &i, &r) == 3 && i >= 1 &&
                       i <= m->ntx && r < m->tx[i].nrec) {
                size_t wn = bg_val(want, i, r, 0);
                if (vn != wn || memcmp(v, want, wn) != 0) {
                    if (bad < 5)
                        printf("  %s: record %s has a wrong value\n", what, kz);
                    bad++;
                }
                tally[i]++;
            } else {
                if (bad < 5)
                    printf("  %s: unexpected record \"%s\" (%u bytes)\n", what, kz, kn);
                bad++;
            }
        }
        qs_free(out);
    }
    qs_cursor_close(cur);
    if (rc != 0 && rc != QS_NOTFOUND) {
        printf("  %s: reading the records failed: %d (%s)\n", what, rc, qs_strerror(rc));
        bad++;
    }
    if (j > 0 && !saw_last) {
        printf("  %s: \"last\" is missing, want %d\n", what, j);
        bad++;
    }
    want_total = j > 0;
    for (int i = 1; i <= m->ntx; i++) {
        long w = bg_alive(m, i, j) ? m->tx[i].nrec : 0;
        want_total += (uint64_t)w;
        if (tally[i] != w) {
            if (bad < 8)
                printf("  %s: transaction %d (kind %d%s) has %ld of %d records, want %ld "
                       "(state after %d)\n", what, i, m->tx[i].kind,
                       m->tx[i].abort ? ", aborted" : "", tally[i], m->tx[i].nrec, w, j);
            bad++;
        }
    }
    uint64_t recs = 0;
    rc = qs_records(c, &recs);
    if (rc || recs != want_total || total != want_total) {
        printf("  %s: qs_records %d: %" PRIu64 ", scanned %" PRIu64 ", want %" PRIu64 "\n",
               what, rc, recs, total, want_total);
        bad++;
    }
    /* the queue */
    size_t nseq, front;
    uint32_t *seq = bg_qseq(m, j, 0, &nseq, &front);
    uint64_t qlen = 0;
    rc = qs_queue_len(c, BG_Q, BG_QN, &qlen);
    if (rc || qlen != nseq - front) {
        printf("  %s: queue length %d: %" PRIu64 ", want %zu\n", what, rc, qlen, nseq - front);
        bad++;
    }
    qs_items *it = NULL;
    rc = qs_queue_peek(c, BG_Q, BG_QN, nseq - front + 1, &it);
    if (nseq == front ? rc != QS_NOTFOUND : rc != 0 || it->count != nseq - front) {
        printf("  %s: queue peek %d (%s), %zu items, want %zu\n", what, rc, qs_strerror(rc),
               it ? it->count : 0, nseq - front);
        bad++;
    } else if (it)
        bad += bg_check_items(it, seq, nseq, front, what);
    qs_items_free(it);
    free(seq);
    char msg[512] = "";
    rc = qs_check(c, msg, sizeof msg);
    if (rc) {
        printf("  %s: qs_check %d (%s): %s\n", what, rc, qs_strerror(rc), msg);
        bad++;
    }
    return bad;
}

/* the transaction j that "last" names (0: none yet), -1 on a read error */
static int bg_last(qs_casket *c)
{
    void *v = NULL;
    size_t vn = 0;
    int rc = qs_get(c, "last", 4, &v, &vn), j = -1;
    if (rc == QS_NOTFOUND)
        j = 0;
    else if (rc == 0 && vn < 20) {
        char tmp[24];
        memcpy(tmp, v, vn);
        tmp[vn] = 0;
        j = (int)strtol(tmp, NULL, 10);
    }
    qs_free(v);
    return j;
}

/* Runs transaction i of the model (sets got, not status).  Returns 0 or
 * the first error (the transaction then aborted), *where the call. */
static int bg_run(qs_casket *c, bg_model *m, int i, const char **where)
{
    bg_tx *t = &m->tx[i];
    char k[32];
    unsigned char v[512];
    int rc;
    t->got = 0;
    *where = "begin";
    if ((rc = qs_begin(c)) != 0)
        return rc;
    if (t->del) {
        *where = "out";
        for (int r = 0; r < m->tx[t->del].nrec && !rc; r++) {
            int kn = bg_key(k, t->del, r);
            rc = qs_out(c, k, (size_t)kn);
        }
    }
    if (!rc && t->nrec) {
        *where = "putdup_many";
        int chunk = t->chunk ? t->chunk : t->nrec;
        for (int r0 = 0; r0 < t->nrec && !rc; r0 += chunk) {
            int n = t->nrec - r0 < chunk ? t->nrec - r0 : chunk;
            char *keys = malloc((size_t)n * 16);
            unsigned char *vals = malloc((size_t)n * 320);
            uint64_t *koff = malloc(((size_t)n + 1) * sizeof *koff);
            uint64_t *voff = malloc(((size_t)n + 1) * sizeof *voff);
            koff[0] = voff[0] = 0;
            for (int x = 0; x < n; x++) {
                char kb[32];
                int kn = bg_key(kb, i, r0 + x);
                memcpy(keys + koff[x], kb, (size_t)kn);
                koff[x + 1] = koff[x] + (uint64_t)kn;
                voff[x + 1] = voff[x] + bg_val(vals + voff[x], i, r0 + x, 0);
            }
            rc = qs_putdup_many(c, (size_t)n, keys, koff, vals, voff);
            free(keys);
            free(vals);
            free(koff);
            free(voff);
        }
    }
    if (!rc && t->nq) {
        *where = "queue_put_many";
        unsigned char *vals = malloc((size_t)t->nq * 320);
        uint32_t *lens = malloc((size_t)t->nq * sizeof *lens);
        size_t len = 0;
        for (int r = 0; r < t->nq; r++) {
            lens[r] = (uint32_t)bg_val(vals + len, i, r, 1);
            len += lens[r];
        }
        rc = qs_queue_put_many(c, BG_Q, BG_QN, (size_t)t->nq, vals, len, lens, NULL);
        free(vals);
        free(lens);
    }
    if (!rc && t->qget) {
        *where = "queue_get";
        qs_items *it = NULL;
        rc = qs_queue_get(c, BG_Q, BG_QN, (size_t)t->qget, 0, &it);
        if (rc == QS_NOTFOUND)
            rc = 0;
        else if (rc == 0) {
            size_t nseq, front;
            uint32_t *seq = bg_qseq(m, i, 1, &nseq, &front);
            size_t want = nseq - front < (size_t)t->qget ? nseq - front : (size_t)t->qget;
            char what[64];
            snprintf(what, sizeof what, "transaction %d's queue get", i);
            if (it->count != want) {
                printf("  %s: %zu items, want %zu\n", what, it->count, want);
                bg_errors++;
            }
            bg_errors += bg_check_items(it, seq, nseq, front, what);
            t->got = (int)it->count;
            free(seq);
        }
        qs_items_free(it);
    }
    /* read some of its own records back: after spills they come from the
     * log or, for pages the file grew by, from the main file */
    for (int x = 0; x < 16 && !rc && t->nrec; x++) {
        *where = "get";
        int r = (int)(bg_hash((uint32_t)i, (uint32_t)x) % (uint32_t)t->nrec);
        int kn = bg_key(k, i, r);
        void *got = NULL;
        size_t gn = 0;
        rc = qs_get(c, k, (size_t)kn, &got, &gn);
        size_t wn = bg_val(v, i, r, 0);
        if (rc == 0 && (gn != wn || memcmp(got, v, wn) != 0)) {
            printf("  transaction %d reads its record %s back wrong\n", i, k);
            bg_errors++;
        }
        qs_free(got);
    }
    if (!rc) {
        *where = "put last";
        int kn = snprintf(k, sizeof k, "%d", i);
        rc = qs_put(c, "last", 4, k, (size_t)kn);
    }
    if (rc || t->abort) {
        if (qs_in_transaction(c)) {
            int rc2 = qs_abort(c);
            if (rc2) {
                printf("  transaction %d: qs_abort %d (%s)\n", i, rc2, qs_strerror(rc2));
                bg_errors++;
            }
        }
        return rc;
    }
    *where = "commit";
    return qs_commit(c);
}

/* A repeating pattern: big record batches, big queue batches, a big batch
 * that first removes an earlier one (its pages go on the free list and
 * are reused), small transactions (some consuming many queue items), and
 * aborted big ones. */
static void bg_schedule(bg_model *m, int ntx, int big, int chunk)
{
    memset(m, 0, sizeof *m);
    m->ntx = ntx;
    int oldest = 0;     /* next candidate for removal */
    for (int i = 1; i <= ntx; i++) {
        bg_tx *t = &m->tx[i];
        int round = (i - 1) / 8;
        switch ((i - 1) % 8) {
        case 0: t->kind = BG_RECS; t->nrec = big; break;
        case 1: t->kind = BG_SMALL; t->nrec = 3; break;
        case 2: t->kind = BG_QUEUE; t->nq = big; t->abort = round % 2 == 1; break;
        case 3: t->kind = BG_SMALL; t->nrec = 2; t->qget = big / 16; break;
        case 4: t->kind = BG_MIX; t->nrec = big / 2; t->nq = big / 2; t->qget = big / 4; break;
        case 5: t->kind = BG_DEL; t->nrec = big / 2; break;
        case 6: t->kind = BG_RECS; t->nrec = big; t->abort = round % 2 == 0; break;
        default: t->kind = BG_SMALL; t->nrec = 1; t->qget = big; break;
        }
        t->chunk = t->kind == BG_SMALL ? 0 : chunk;
        if (t->kind == BG_DEL) {
            while (++oldest < i && (m->tx[oldest].abort || m->tx[oldest].nrec < 3 ||
                                    m->tx[oldest].kind == BG_SMALL))
                ;
            if (oldest < i)
                t->del = oldest;
        }
    }
}

static int fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Runs the schedule on path; with cuts, verifies (then removes) the
 * power-cut snapshots taken so far after each transaction. */
typedef struct {
    const char *dir;
    int sync, tiny;
    uint64_t ckpt;
    int verified, bad_snaps;
    long direct_commits;
} bg_run_ctx;

static void bg_verify_snaps(bg_run_ctx *x, const bg_model *m)
{
    for (; x->verified < pl_nsnaps; x->verified++) {
        int k = x->verified;
        char sm[700], sl[720], what[260];
        snprintf(sm, sizeof sm, "%s/snap%05d", x->dir, k);
        snprintf(sl, sizeof sl, "%s/snap%05d-log", x->dir, k);
        snprintf(what, sizeof what, "cut %d (sync %s%s, after a %s, in transaction %" PRIu64
                 ", committed %" PRIu64 ", durable %" PRIu64 ")", k, x->sync ? "on" : "off",
                 x->tiny ? ", tiny cache" : "", pl_cuts[k].write, pl_cuts[k].started,
                 pl_cuts[k].committed, pl_cuts[k].floor);
        int rc, bad = 0;
        char rm[760], rl[780];
        int keep = getenv("QS_TEST_KEEP_BAD") != NULL;
        snprintf(rm, sizeof rm, "%s.raw", sm);
        snprintf(rl, sizeof rl, "%s.raw-log", sm);
        if (keep) {     /* the cut as it was, before recovery touches it */
            tc_copy_file(sm, rm);
            tc_copy_file(sl, rl);
        }
        /* even cuts reopen read-write (recovery, then a checkpoint into
         * the copy), odd ones read-only (recovery in memory only) */
        qs_casket *c = tc_open(sm, k % 2 ? QS_OPEN_READ : QS_OPEN_WRITE, 1, 0, 0, &rc);
        if (!c && rc == QS_NOTCASKET && pl_cuts[k].started == 0) {
            /* cut while qs_open created the casket, before its first sync:
             * there never was a casket */
        } else if (!c) {
            printf("  %s: qs_open %d (%s)\n", what, rc, qs_strerror(rc));
            bad++;
        } else {
            int j = bg_last(c);
            int lo = (int)(x->sync ? pl_cuts[k].committed : pl_cuts[k].floor);
            int hi = (int)pl_cuts[k].started;
            if (j < 0 || j < lo || j > hi || (j > 0 && !m->tx[j].status)) {
                printf("  %s: the casket holds transaction %d (want %d..%d, committed)\n",
                       what, j, lo, hi);
                bad++;
            }
            if (j >= 0 && j <= m->ntx)
                bad += bg_verify(c, m, j, what);
            rc = qs_close(c);
            if (rc) {
                printf("  %s: qs_close %d (%s)\n", what, rc, qs_strerror(rc));
                bad++;
            }
        }
        if (bad) {
            x->bad_snaps++;
            if (keep)
                printf("  kept %s (and -log), as cut\n", rm);
        } else if (keep) {
            remove(rm);
            remove(rl);
        }
        remove(sm);
        remove(sl);
    }
}

static int bg_workload(const char *path, bg_model *m, bg_run_ctx *x, int cuts)
{
    int rc, errors = 0;
    const char *where;
    qs_casket *c = tc_open(path, QS_OPEN_NEW, x->sync, x->tiny ? 16 * 4096 : 0, x->ckpt, &rc);
    if (!c) {
        printf("  open %s: %d (%s)\n", path, rc, qs_strerror(rc));
        return 1;
    }
    for (int i = 1; i <= m->ntx; i++) {
        pthread_mutex_lock(&pl_mu);
        pl_started = (uint64_t)i;
        pthread_mutex_unlock(&pl_mu);
        qs_stat s0, s1;
        qs_stat_get(c, &s0);
        rc = bg_run(c, m, i, &where);
        qs_stat_get(c, &s1);
        /* a commit that grew the file by many pages (32: one that spills
         * goes direct below PG_DIRECT_MIN) and, with no checkpoint in
         * between, the log by far fewer bytes: it went direct */
        if (rc == 0 && !m->tx[i].abort && s1.checkpoints == s0.checkpoints &&
            s1.pages >= s0.pages + 32 &&
            s1.log_bytes - s0.log_bytes < (s1.pages - s0.pages) * 4096 / 8)
            x->direct_commits++;
        if (rc) {
            printf("  transaction %d failed at %s: %d (%s)\n", i, where, rc, qs_strerror(rc));
            errors++;
            break;
        }
        m->tx[i].status = !m->tx[i].abort;
        if (m->tx[i].status) {
            pthread_mutex_lock(&pl_mu);
            pl_committed = (uint64_t)i;
            pthread_mutex_unlock(&pl_mu);
        }
        if (cuts)
            bg_verify_snaps(x, m);
    }
    if (!errors) {
        int last = 0;
        for (int i = 1; i <= m->ntx; i++)
            if (m->tx[i].status)
                last = i;
        char what[64];
        snprintf(what, sizeof what, "the live casket (sync %s)", x->sync ? "on" : "off");
        errors += bg_verify(c, m, last, what);
    }
    pthread_mutex_lock(&pl_mu);
    pl_started = pl_committed;
    pthread_mutex_unlock(&pl_mu);
    rc = qs_close(c);
    if (rc) {
        printf("  qs_close %d (%s)\n", rc, qs_strerror(rc));
        errors++;
    }
    if (cuts)
        bg_verify_snaps(x, m);
    return errors;
}

static void pl_track(const char *path, const char *log, int on)
{
    pthread_mutex_lock(&pl_mu);
    pl_on = on;
    snprintf(pl_main, sizeof pl_main, "%s", path);
    snprintf(pl_log, sizeof pl_log, "%s", log);
    for (size_t i = 0; i < pl_n; i++)
        pl_page_free(&pl_pages[i]);
    pl_n = 0;
    pl_idx_rebuild();
    pl_writes = pl_writes_main = pl_writes_log = 0;
    pl_committed = pl_floor = pl_started = 0;
    pthread_mutex_unlock(&pl_mu);
}

/* Power cuts all through the big workload: every cut must reopen, pass
 * qs_check and hold exactly the state after one whole transaction; with
 * sync on no older than the last acknowledged commit, with sync off no
 * older than the last log sync (a prefix of the commits either way). */
static void bg_power_loss(int sync, int tiny)
{
    atomic_store(&f_fake_sync, 1);
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int fds = fd_count();
    uint64_t seed = tc_seed();
    pl_rng.s = seed;
    static bg_model m;
    /* without spills (tiny), the biggest commits must grow the file by
     * PG_DIRECT_MIN pages (records of 100-300 bytes) to go direct */
    int big = (int)tc_scaled(tiny ? 1500 : 5000, 2);
    int ntx = 16;       /* twice the pattern: each kind of abort once */
    bg_schedule(&m, ntx, big, tiny ? 96 : 0);
    bg_run_ctx x = {t.dir, sync, tiny, 512 * 1024, 0, 0, 0};
    bg_errors = 0;

    /* a dry run counts the writes, to spread the cuts over all of them */
    char dry[700], drylog[720];
    snprintf(dry, sizeof dry, "%s/dry", t.dir);
    snprintf(drylog, sizeof drylog, "%s/dry-log", t.dir);
    pl_track(dry, drylog, 1);
    pl_max_snaps = 0;
    pl_stride_main = pl_stride_log = 1;
    int errors = bg_workload(dry, &m, &x, 0);
    long wmain = pl_writes_main, wlog = pl_writes_log;
    pl_track("", "", 0);
    remove(dry);
    remove(drylog);

    /* cuts: one after every commit frame, the rest shared by the writes
     * to the main file (direct pages, checkpoints) and to the log */
    long snaps = tc_scaled(300, 10), spread = snaps - ntx > 8 ? snaps - ntx : 8;
    pl_max_snaps = snaps + 40 < 1000 ? snaps + 40 : 1000;
    pl_stride_main = (wmain + spread / 2 - 1) / (spread / 2);
    pl_stride_log = (wlog + spread / 2 - 1) / (spread / 2);
    if (pl_stride_main < 1 || tc_full())
        pl_stride_main = 1;
    if (pl_stride_log < 1 || tc_full())
        pl_stride_log = 1;
    if (tc_full())
        pl_max_snaps = LONG_MAX;   /* every write */
    pl_commit_cuts = 0;
    pl_off_main = (long)tc_below(&pl_rng, (uint64_t)pl_stride_main);
    pl_off_log = (long)tc_below(&pl_rng, (uint64_t)pl_stride_log);
    pl_mix_modes = 1;
    pl_nsnaps = 0;
    snprintf(pl_dir, sizeof pl_dir, "%s", t.dir);
    bg_schedule(&m, ntx, big, tiny ? 96 : 0);
    pl_track(t.path, t.log, 1);
    errors += bg_workload(t.path, &m, &x, 1);
    pl_track("", "", 0);
    long smain = pl_stride_main, slog = pl_stride_log;
    pl_stride_main = pl_stride_log = 0;
    pl_mix_modes = 0;
    printf("  seed %" PRIu64 ", sync %s%s: %d transactions of up to %d records (%ld commits "
           "seen going direct), %ld writes to the main file, %ld to the log; %d power cuts "
           "(%ld right after a commit frame, the others every %ld-th / %ld-th write), "
           "%d bad\n",
           seed, sync ? "on" : "off", tiny ? ", 64-page cache" : "", ntx, big,
           x.direct_commits, wmain, wlog, pl_nsnaps, pl_commit_cuts, smain, slog,
           x.bad_snaps);
    CHECK(errors == 0);
    CHECK(bg_errors == 0);
    CHECK(x.bad_snaps == 0);
    CHECK(pl_nsnaps >= snaps / 2);
    CHECK(pl_commit_cuts >= ntx / 2);
    CHECK(x.direct_commits > 0);        /* the path under test was taken */
    CHECK(fd_count() == fds);
    tc_tmp_remove(&t);
}

static void big_power_loss_sync(void) { bg_power_loss(1, 0); }
static void big_power_loss_nosync(void) { bg_power_loss(0, 0); }
static void big_power_loss_spill_sync(void) { bg_power_loss(1, 1); }
static void big_power_loss_spill_nosync(void) { bg_power_loss(0, 1); }

/* ---- faults in big transactions ---------------------------------- */

typedef struct {
    long trials, injected, failed_commits, failed_ops, visible_with_error, clean;
} bg_fault_stats;

/* Base: three committed transactions (a big record batch, a big queue
 * batch, a small one).  Transaction 4 runs with the n-th write (or sync)
 * failing: with queue, it adds a big queue batch and consumes half the
 * queue; otherwise it removes transaction 1's records and adds a big
 * batch (free pages reused plus fresh ones).  Transaction 5 (mixed) must
 * then work. */
static void bg_fault_model(bg_model *m, int big, int tiny, int queue)
{
    memset(m, 0, sizeof *m);
    m->ntx = 5;
    int chunk = tiny ? 96 : 0;
    m->tx[1] = (bg_tx){.kind = BG_RECS, .nrec = big, .chunk = chunk};
    m->tx[2] = (bg_tx){.kind = BG_QUEUE, .nq = big};
    m->tx[3] = (bg_tx){.kind = BG_SMALL, .nrec = 3};
    if (queue)
        m->tx[4] = (bg_tx){.kind = BG_QUEUE, .nq = big, .qget = big / 2, .nrec = 2};
    else
        m->tx[4] = (bg_tx){.kind = BG_DEL, .del = 1, .nrec = big, .chunk = chunk};
    m->tx[5] = (bg_tx){.kind = BG_MIX, .nrec = big / 3, .nq = 40, .qget = 25, .chunk = chunk};
}

#define BG_CKPT (128 * 1024)    /* commits of transaction 4 checkpoint */

/* The casket at t as a writer killed now would leave it (its files as they
 * stand, no close, no checkpoint) must recover transactions 1..j of m:
 * whatever a failed write left in the log, the committed frames are the
 * ones recovery reads. */
static int bg_verify_killed(const tc_tmp *t, const bg_model *m, int j, uint64_t cache,
                            const char *when)
{
    char path[700], log[720], shm[720], what[480];
    snprintf(path, sizeof path, "%s-killed", t->path);
    snprintf(log, sizeof log, "%s-log", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    if (tc_copy_file(t->path, path) != 0 || tc_copy_file(t->log, log) != 0) {
        printf("  copying the killed image failed\n");
        return 1;
    }
    int rc, errors = 0;
    qs_casket *c = tc_open(path, QS_OPEN_READ, 1, cache, BG_CKPT, &rc);
    snprintf(what, sizeof what, "%s; the files as a kill leaves them", when);
    if (!c) {
        printf("  %s: open %d (%s)\n", what, rc, qs_strerror(rc));
        errors++;
    } else {
        errors += bg_verify(c, m, j, what);
        qs_close(c);
    }
    unlink(path);
    unlink(log);
    unlink(shm);
    return errors;
}

static int bg_fault_trial(const tc_tmp *t, const char *base, const char *baselog, int kind,
                          long n, int sticky, int err, int tiny, int queue, int big,
                          bg_fault_stats *st)
{
    int rc, errors = 0;
    const char *where = "";
    static bg_model m;
    bg_fault_model(&m, big, tiny, queue);
    m.tx[1].status = m.tx[2].status = m.tx[3].status = 1;
    if (tc_copy_file(base, t->path) != 0 || tc_copy_file(baselog, t->log) != 0) {
        printf("  copying the base casket failed\n");
        return 1;
    }
    uint64_t cache = tiny ? 16 * 4096 : 0;
    qs_casket *c = tc_open(t->path, QS_OPEN_WRITE, 1, cache, BG_CKPT, &rc);
    if (!c) {
        printf("  n=%ld: open %d (%s)\n", n, rc, qs_strerror(rc));
        return 1;
    }
    /* transaction 2's items: transaction 4 consumes from them */
    atomic_store(&f_commits, 0);
    atomic_store(&f_watch, 1);
    f_arm(kind, n, sticky, err);
    rc = bg_run(c, &m, 4, &where);
    long hits = atomic_load(&f_hits);
    f_disarm();
    atomic_store(&f_watch, 0);
    long commits = atomic_load(&f_commits);
    char path[256];
    snprintf(path, sizeof path, "%s", f_last_path);
    char when[400];
    snprintf(when, sizeof when, "%s%s, fault %d%s at call %ld (in %s), %s -> %d (%s)",
             queue ? "queue" : "records", tiny ? ", tiny cache" : "", kind,
             sticky ? " from then on" : "", n, hits ? path : "none reached", where, rc,
             qs_strerror(rc));
    st->trials++;
    if (qs_in_transaction(c)) {
        printf("  %s: a transaction is still open\n", when);
        errors++;
        qs_abort(c);
    }
    int j = bg_last(c);
    int vis = j == 4;
    if (j != 3 && j != 4) {
        printf("  %s: \"last\" says %d, want 3 or 4\n", when, j);
        errors++;
    }
    if (hits == 0) {
        st->clean++;
        if (rc != 0 || !vis) {
            printf("  %s: failed with no fault injected\n", when);
            errors++;
        }
    } else {
        st->injected++;
        if (rc && !strcmp(where, "commit"))
            st->failed_commits++;
        else if (rc)
            st->failed_ops++;
        if (rc && vis)
            st->visible_with_error++;
    }
    /* committed exactly when its commit frame reached the log: an error
     * before that aborts it, one after it (the log sync, the checkpoint)
     * leaves it committed */
    if (vis != (commits > 0)) {
        printf("  %s: the transaction is %s but its commit frame was %s\n", when,
               vis ? "visible" : "gone", commits ? "written" : "never written");
        errors++;
    }
    if (rc == 0 && !vis) {
        printf("  %s: qs_commit returned 0 but the transaction is gone\n", when);
        errors++;
    }
    m.tx[4].status = vis;
    errors += bg_verify(c, &m, vis ? 4 : 3, when);
    errors += bg_verify_killed(t, &m, vis ? 4 : 3, cache, when);
    char what[480];
    if (n % 2) {
        /* the handle goes on working */
        rc = bg_run(c, &m, 5, &where);
        if (rc) {
            printf("  %s: the next transaction failed at %s: %d (%s)\n", when, where, rc,
                   qs_strerror(rc));
            errors++;
        }
        m.tx[5].status = rc == 0;
        snprintf(what, sizeof what, "%s; then transaction 5", when);
        errors += bg_verify(c, &m, rc == 0 ? 5 : vis ? 4 : 3, what);
        if ((rc = qs_close(c)) != 0) {
            printf("  %s: qs_close %d (%s)\n", when, rc, qs_strerror(rc));
            errors++;
        }
        c = tc_open(t->path, QS_OPEN_WRITE, 1, cache, BG_CKPT, &rc);
        if (!c) {
            printf("  %s: reopen %d (%s)\n", when, rc, qs_strerror(rc));
            return errors + 1;
        }
        snprintf(what, sizeof what, "%s; then transaction 5, reopened", when);
        errors += bg_verify(c, &m, m.tx[5].status ? 5 : vis ? 4 : 3, what);
    } else {
        /* or is closed and reopened first */
        if ((rc = qs_close(c)) != 0) {
            printf("  %s: qs_close %d (%s)\n", when, rc, qs_strerror(rc));
            errors++;
        }
        c = tc_open(t->path, QS_OPEN_WRITE, 1, cache, BG_CKPT, &rc);
        if (!c) {
            printf("  %s: reopen %d (%s)\n", when, rc, qs_strerror(rc));
            return errors + 1;
        }
        snprintf(what, sizeof what, "%s; reopened", when);
        errors += bg_verify(c, &m, vis ? 4 : 3, what);
        rc = bg_run(c, &m, 5, &where);
        if (rc) {
            printf("  %s: after a reopen the next transaction failed at %s: %d (%s)\n", when,
                   where, rc, qs_strerror(rc));
            errors++;
        }
        m.tx[5].status = rc == 0;
        snprintf(what, sizeof what, "%s; reopened, then transaction 5", when);
        errors += bg_verify(c, &m, rc == 0 ? 5 : vis ? 4 : 3, what);
    }
    if ((rc = qs_close(c)) != 0) {
        printf("  %s: final qs_close %d (%s)\n", when, rc, qs_strerror(rc));
        errors++;
    }
    return errors;
}

static void bg_fault_sweep(int kind, int sticky, int err, const char *name)
{
    atomic_store(&f_fake_sync, 1);
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int fds = fd_count();
    int big = (int)tc_scaled(1500, 2), errors = 0;
    bg_errors = 0;
    bg_fault_stats st = {0};
    char base[700], baselog[720];
    snprintf(base, sizeof base, "%s/base", t.dir);
    snprintf(baselog, sizeof baselog, "%s/base-log", t.dir);
    for (int cfg = 0; cfg < 4 && !errors; cfg++) {
        int tiny = cfg & 1, queue = cfg >> 1;
        static bg_model m;
        bg_fault_model(&m, big, tiny, queue);
        int rc;
        const char *where;
        qs_casket *c = tc_open(base, QS_OPEN_NEW, 1, tiny ? 16 * 4096 : 0, BG_CKPT, &rc);
        REQUIRE_RC(rc, 0);
        for (int i = 1; i <= 3; i++) {
            REQUIRE_RC(bg_run(c, &m, i, &where), 0);
            m.tx[i].status = 1;
        }
        REQUIRE_RC(qs_close(c), 0);
        /* how many calls of this kind transaction 4 makes, and which
         * write carries its commit frame */
        const long big_n = 1L << 40;
        REQUIRE(tc_copy_file(base, t.path) == 0 && tc_copy_file(baselog, t.log) == 0);
        c = tc_open(t.path, QS_OPEN_WRITE, 1, tiny ? 16 * 4096 : 0, BG_CKPT, &rc);
        REQUIRE_RC(rc, 0);
        atomic_store(&f_commit_countdown, big_n);
        atomic_store(&f_watch, 1);
        f_arm(kind, big_n, 0, err);
        rc = bg_run(c, &m, 4, &where);
        long calls = big_n - atomic_load(&f_countdown);
        long at_commit = big_n - atomic_load(&f_commit_countdown);
        f_disarm();
        atomic_store(&f_watch, 0);
        REQUIRE_RC(rc, 0);
        REQUIRE_RC(qs_close(c), 0);
        /* every call when few; else the first and last ten, those around
         * the commit frame, and an even spread */
        long limit = tc_scaled(36, 6);
        long tried = 0;
        for (long n = 1; n <= calls + 1 && !errors; n++) {
            int near = n <= 10 || n > calls - 10 || (n >= at_commit - 6 && n <= at_commit + 3);
            if (calls > limit && !near &&
                n % ((calls - 20) / (limit - 20 > 1 ? limit - 20 : 1) + 1) != 0)
                continue;
            if (tc_small() && calls > limit && near && n % 3 != 0 && n != at_commit &&
                n != at_commit - 1)
                continue;
            errors += bg_fault_trial(&t, base, baselog, kind, n, sticky, err, tiny, queue, big,
                                     &st);
            tried++;
        }
        printf("  %s, %s%s: transaction 4 makes %ld such calls (the commit frame in write "
               "%ld); %ld tried\n", name, queue ? "queue" : "records",
               tiny ? ", 64-page cache" : "", calls, at_commit, tried);
    }
    printf("  %s: %ld trials, %ld faults injected: %ld failed commits (%ld of them "
           "committed: the error came after the commit frame), %ld failed operations, "
           "%ld clean runs\n", name, st.trials, st.injected, st.failed_commits,
           st.visible_with_error, st.failed_ops, st.clean);
    CHECK(errors == 0);
    CHECK(bg_errors == 0);
    CHECK(st.injected > 0);
    CHECK(fd_count() == fds);
    tc_tmp_remove(&t);
}

static void big_write_error_once(void) { bg_fault_sweep(F_WRITE, 0, EIO, "EIO once"); }
static void big_write_enospc_sticky(void)
{
    bg_fault_sweep(F_WRITE, 1, ENOSPC, "ENOSPC from then on");
}
static void big_sync_error_once(void) { bg_fault_sweep(F_SYNC, 0, EIO, "sync EIO once"); }

/* Every write comes back short while big transactions grow the file. */
static void big_short_writes(void)
{
    atomic_store(&f_fake_sync, 1);
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc, errors = 0;
    const char *where;
    static bg_model m;
    bg_schedule(&m, 10, (int)tc_scaled(1200, 2), 96);
    bg_errors = 0;
    for (int tiny = 0; tiny < 2 && !errors; tiny++) {
        atomic_store(&f_short, 1);
        qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 1, tiny ? 16 * 4096 : 0, 256 * 1024, &rc);
        if (!c) {
            atomic_store(&f_short, 0);
            REQUIRE_RC(rc, 0);
        }
        int last = 0;
        for (int i = 1; i <= m.ntx; i++) {
            m.tx[i].status = 0;
            rc = bg_run(c, &m, i, &where);
            if (rc) {
                printf("  transaction %d failed at %s: %d (%s)\n", i, where, rc,
                       qs_strerror(rc));
                errors++;
                break;
            }
            m.tx[i].status = !m.tx[i].abort;
            if (m.tx[i].status)
                last = i;
        }
        errors += bg_verify(c, &m, last, "short writes, live");
        CHECK_RC(qs_close(c), 0);
        atomic_store(&f_short, 0);
        c = tc_open(t.path, QS_OPEN_WRITE, 1, 0, 0, &rc);
        REQUIRE_RC(rc, 0);
        errors += bg_verify(c, &m, last, "short writes, reopened");
        qs_close(c);
    }
    CHECK(errors == 0);
    CHECK(bg_errors == 0);
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
    RUN(big_short_writes);
    RUN(big_power_loss_sync);
    RUN(big_power_loss_nosync);
    RUN(big_power_loss_spill_sync);
    RUN(big_power_loss_spill_nosync);
    RUN(big_write_error_once);
    RUN(big_write_enospc_sticky);
    RUN(big_sync_error_once);
    atomic_store(&f_fake_sync, 0);
    free(pl_pages);
    free(pl_idx);
    return tc_summary();
}
