/* wal.c -- the log.  The header and every frame are one page each, so all
 * writes are page aligned and a frame can never share a block with
 * another. */
#include "wal.h"
#include "osdep.h"
#include "checksum.h"
#include "qstore.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CK_SEED 0x7173746f72650001ULL
#define SCAN_CHUNK_PAGES 64u

void page_seal(uint8_t *page)
{
    wr64(page + TR_CHECKSUM, ck_sum64(page, TR_CHECKSUM, CK_SEED));
}

int page_verify(const uint8_t *page, uint32_t pgno)
{
    if (rd64(page + TR_CHECKSUM) != ck_sum64(page, TR_CHECKSUM, CK_SEED))
        return QS_CORRUPT;
    if (rd32(page + TR_PGNO) != pgno)
        return QS_CORRUPT;
    return 0;
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return QS_CORRUPT;  /* short file: something promised is missing */
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int wal_read_header(wal *w)
{
    uint8_t *h = malloc(PG_SIZE);
    if (!h)
        return QS_NOMEM;
    int rc = pread_full(w->fd, h, PG_SIZE, 0);
    if (rc == 0) {
        if (memcmp(h, LOG_MAGIC, 8) != 0 || page_verify(h, 0) != 0 ||
            rd32(h + HDR_PAGESIZE) != PG_SIZE)
            rc = QS_CORRUPT;
        else if (rd32(h + HDR_VERSION) != QS_FORMAT_VERSION)
            rc = QS_VERSION;
        else {
            w->salt = rd64(h + HDR_SALT);
            w->base_txn = rd64(h + HDR_BASE_TXN);
        }
    }
    free(h);
    if (rc == 0) {
        struct stat st;
        if (fstat(w->fd, &st) != 0)
            return errno;
        w->alloc = (uint64_t)st.st_size;
    }
    return rc;
}

static uint64_t fresh_salt(uint64_t old)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mix[4] = {old, (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
    uint64_t s = ck_sum64(mix, sizeof mix, 0x5a17);
    return s == old ? s + 1 : s;
}

int wal_reset(wal *w, uint64_t base_txn)
{
    uint8_t *h = calloc(1, PG_SIZE);
    if (!h)
        return QS_NOMEM;
    uint64_t salt = fresh_salt(w->salt);
    memcpy(h, LOG_MAGIC, 8);
    wr32(h + HDR_VERSION, QS_FORMAT_VERSION);
    wr32(h + HDR_PAGESIZE, PG_SIZE);
    wr64(h + HDR_SALT, salt);
    wr64(h + HDR_BASE_TXN, base_txn);
    wr32(h + TR_PGNO, 0);
    page_seal(h);
    int rc = pwrite_full(w->fd, h, PG_SIZE, 0);
    free(h);
    if (rc)
        return rc;
    w->salt = salt;
    w->base_txn = base_txn;
    if (w->alloc < PG_SIZE)
        w->alloc = PG_SIZE;
    return 0;
}

void wal_stamp(const wal *w, uint8_t *page, uint32_t pgno, uint64_t txn,
               uint32_t flags, uint32_t nframes, const pg_meta *meta)
{
    memset(page + PG_USABLE, 0, PG_SIZE - PG_USABLE);
    wr32(page + TR_PGNO, pgno);
    wr32(page + TR_FLAGS, flags);
    wr64(page + TR_SALT, w->salt);
    wr64(page + TR_TXN, txn);
    if (flags & TR_FLAG_COMMIT) {
        wr32(page + TR_NFRAMES, nframes);
        meta_store(page + TR_META, meta);
    }
    page_seal(page);
}

/* A pending transaction's frames, held until its commit frame is seen. */
typedef struct pending {
    uint32_t *pgno;
    uint64_t *off;
    size_t n, cap;
} pending;

static int pending_add(pending *p, uint32_t pgno, uint64_t off)
{
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 256;
        uint32_t *np = realloc(p->pgno, ncap * sizeof *np);
        if (!np)
            return QS_NOMEM;
        p->pgno = np;
        uint64_t *no = realloc(p->off, ncap * sizeof *no);
        if (!no)
            return QS_NOMEM;
        p->off = no;
        p->cap = ncap;
    }
    p->pgno[p->n] = pgno;
    p->off[p->n] = off;
    p->n++;
    return 0;
}

int wal_recover(wal *w, hm_map *idx, wal_recovery *rec)
{
    memset(rec, 0, sizeof *rec);
    rec->end = PG_SIZE;
    struct stat st;
    if (fstat(w->fd, &st) != 0)
        return errno;
    uint64_t size = (uint64_t)st.st_size;
    uint8_t *buf = malloc((size_t)SCAN_CHUNK_PAGES * PG_SIZE);
    if (!buf)
        return QS_NOMEM;
    pending pend = {0};
    uint64_t last_txn = w->base_txn, cur_txn = 0;
    int rc = 0, stop = 0;
    for (uint64_t off = PG_SIZE; !stop && off + PG_SIZE <= size;) {
        size_t npages = (size_t)((size - off) / PG_SIZE);
        if (npages > SCAN_CHUNK_PAGES)
            npages = SCAN_CHUNK_PAGES;
        rc = pread_full(w->fd, buf, npages * PG_SIZE, off);
        if (rc)
            break;
        for (size_t i = 0; i < npages; i++, off += PG_SIZE) {
            const uint8_t *f = buf + i * PG_SIZE;
            uint32_t pgno = rd32(f + TR_PGNO);
            uint64_t txn = rd64(f + TR_TXN);
            if (page_verify(f, pgno) != 0 || pgno == 0 || rd64(f + TR_SALT) != w->salt ||
                txn <= last_txn || (pend.n > 0 && txn != cur_txn)) {
                stop = 1;
                break;
            }
            cur_txn = txn;
            if ((rc = pending_add(&pend, pgno, off)) != 0) {
                stop = 1;
                break;
            }
            if (rd32(f + TR_FLAGS) & TR_FLAG_COMMIT) {
                if (rd32(f + TR_NFRAMES) != pend.n) {
                    stop = 1;
                    break;
                }
                for (size_t j = 0; j < pend.n; j++)
                    if (hm_put(idx, pend.pgno[j], pend.off[j]) != 0) {
                        rc = QS_NOMEM;
                        stop = 1;
                        break;
                    }
                meta_load(f + TR_META, &rec->meta);
                rec->found_commit = 1;
                rec->end = off + PG_SIZE;
                rec->frames += pend.n;
                last_txn = txn;
                pend.n = 0;
            }
        }
    }
    free(pend.pgno);
    free(pend.off);
    free(buf);
    w->alloc = size;
    return rc;
}

int wal_reserve(wal *w, uint64_t end, int sync_growth)
{
    if (end <= w->alloc)
        return 0;
    uint64_t chunk = w->alloc / 4;
    if (chunk < (1u << 20))
        chunk = 1u << 20;
    if (chunk > (64u << 20))
        chunk = 64u << 20;
    uint64_t target = end + chunk;
    target = (target + PG_SIZE - 1) / PG_SIZE * PG_SIZE;
    size_t zlen = 1u << 20;
    uint8_t *z = calloc(1, zlen);
    if (!z)
        return QS_NOMEM;
    int rc = 0;
    for (uint64_t off = w->alloc; off < target && rc == 0;) {
        size_t n = target - off < zlen ? (size_t)(target - off) : zlen;
        rc = pwrite_full(w->fd, z, n, off);
        off += n;
    }
    free(z);
    if (rc == 0 && sync_growth && os_datasync(w->fd) != 0)
        rc = errno;
    if (rc == 0)
        w->alloc = target;
    return rc;
}

int wal_write(wal *w, uint8_t *const *pages, size_t n, uint64_t off)
{
    return pages_write(w->fd, pages, n, off);
}

int pages_write(int fd, uint8_t *const *pages, size_t n, uint64_t off)
{
    enum { BATCH = 64 };
    struct iovec iov[BATCH];
    while (n) {
        size_t k = n < BATCH ? n : BATCH;
        for (size_t i = 0; i < k; i++) {
            iov[i].iov_base = pages[i];
            iov[i].iov_len = PG_SIZE;
        }
        size_t want = k * PG_SIZE;
        ssize_t got = pwritev(fd, iov, (int)k, (off_t)off);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if ((size_t)got != want) {
            /* Short write: finish page by page. */
            for (size_t i = 0; i < k; i++) {
                int rc = pwrite_full(fd, pages[i], PG_SIZE, off + i * PG_SIZE);
                if (rc)
                    return rc;
            }
        }
        pages += k;
        n -= k;
        off += want;
    }
    return 0;
}

int wal_read_frame(wal *w, uint64_t off, uint32_t pgno, uint8_t *page)
{
    int rc = pread_full(w->fd, page, PG_SIZE, off);
    if (rc)
        return rc;
    return page_verify(page, pgno);
}

int wal_sync(wal *w)
{
    w->syncs++;
    if (os_datasync(w->fd) != 0)
        return errno;
    return 0;
}

int wal_shrink(wal *w, uint64_t keep)
{
    if (w->alloc <= keep)
        return 0;
    if (ftruncate(w->fd, (off_t)keep) != 0)
        return errno;
    w->alloc = keep;
    return 0;
}
