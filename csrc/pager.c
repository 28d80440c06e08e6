/* pager.c -- see pager.h.  Memory is bounded by `budget` page buffers:
 * committed images are evicted by a clock hand, and a transaction's dirty
 * pages beyond the budget are written to the log as uncommitted frames
 * ("spilled") and read back if touched again. */
#include "pager.h"
#include "osdep.h"
#include "pshare.h"
#include "qstore.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SPARE 256
#define TRUNK_NEXT 4
#define TRUNK_N 8
#define TRUNK_ENTRIES 12
#define TRUNK_CAP ((PG_USABLE - TRUNK_ENTRIES) / 4)

_Static_assert(offsetof(pg_buf, data) == 0, "pg_checked finds the buffer from its data");

static inline void set_ref(pg_buf *b, uint8_t v)
{
    atomic_store_explicit(&b->ref, v, memory_order_relaxed);
}

static inline uint8_t get_ref(pg_buf *b) { return atomic_load_explicit(&b->ref, memory_order_relaxed); }

static pg_buf *buf_new(pager *p)
{
    pg_buf *b = p->spare;
    if (b) {
        p->spare = b->next;
        p->nspare--;
    } else if (!(b = malloc(sizeof *b)))
        return NULL;
    b->off = 0;
    b->depth = WAL_DELTA_DEPTH;
    b->next = NULL;
    atomic_store_explicit(&b->holders, 0, memory_order_relaxed);
    set_ref(b, 1);
    atomic_store_explicit(&b->checked, 0, memory_order_relaxed);
    return b;
}

static inline int is_shared(pg_buf *b)
{
    return atomic_load_explicit(&b->holders, memory_order_relaxed) != 0;
}

static void buf_drop(pager *p, pg_buf *b)
{
    if (is_shared(b))
        ps_release(b);
    else if (p->nspare < MAX_SPARE) {
        b->next = p->spare;
        p->spare = b;
        p->nspare++;
    } else
        free(b);
}

static inline pg_buf *as_buf(uint64_t v) { return (pg_buf *)(uintptr_t)v; }
static inline uint64_t as_val(pg_buf *b) { return (uint64_t)(uintptr_t)b; }

/* Pages the file grows by in a transaction have no committed image that a
 * reader or recovery could need, so a big transaction writes them straight
 * into the main file instead of the log: they are written once instead of
 * twice (log, then checkpoint).  The main file is synced before the commit
 * frame is written, so a durable commit never names a page that is not.
 * A spill or dirty buffer offset with DIRECT set means "in the main file". */
#define DIRECT (1ull << 63)
/* The most frames of a commit that may be delta frames: small commits
 * rewrite a few pages, each a little; a big transaction's pages are mostly
 * new or much changed, and would only pay for the diff. */
#define PG_DELTA_PAGES 16

static inline int is_fresh(const pager *p, uint32_t pgno) { return pgno >= p->meta.npages; }

static int cmp_buf_pgno(const void *a, const void *b)
{
    uint32_t x = (*(pg_buf *const *)a)->pgno, y = (*(pg_buf *const *)b)->pgno;
    return x < y ? -1 : x > y;
}

/* Writes n stamped page images to their places in the main file: sorted,
 * each run of consecutive page numbers in one pwritev. */
static int direct_write(pager *p, pg_buf **list, size_t n)
{
    if (n == 0)
        return 0;
    uint8_t **pages = malloc(n * sizeof *pages);
    if (!pages)
        return QS_NOMEM;
    qsort(list, n, sizeof *list, cmp_buf_pgno);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i;
        while (j < n && list[j]->pgno == list[i]->pgno + (j - i)) {
            pages[j] = list[j]->data;
            j++;
        }
        rc = wal_pages_write(p->fd, pages + i, j - i, (uint64_t)list[i]->pgno * PG_SIZE);
        i = j;
    }
    free(pages);
    if (rc)
        return rc;
    /* The device writes these while the transaction goes on: a big
     * commit's sync then waits only for what was written last. */
    os_write_behind(p->fd, (uint64_t)list[0]->pgno * PG_SIZE,
                    (uint64_t)(list[n - 1]->pgno - list[0]->pgno + 1) * PG_SIZE);
    for (size_t i = 0; i < n; i++)
        list[i]->off = DIRECT;
    p->txn_direct += (uint32_t)n;
    return 0;
}

static void drop_all(pager *p, hm_map *m)
{
    uint32_t k;
    uint64_t v;
    for (size_t i = 0; i < m->cap; i++)
        if (hm_slot(m, i, &k, &v))
            buf_drop(p, as_buf(v));
    hm_clear(m);
}

/* Returns 0, QS_CORRUPT (past the end), QS_WOULDBLOCK (nowait: not all in
 * the page cache) or errno. */
static int pread_page(int fd, uint8_t *page, uint64_t off, int nowait)
{
    size_t got = 0;
    while (got < PG_SIZE) {
        ssize_t n = os_pread(fd, page + got, PG_SIZE - got, (off_t)(off + got), nowait);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return nowait && errno == EAGAIN ? QS_WOULDBLOCK : errno;
        }
        if (n == 0)
            return QS_CORRUPT;
        got += (size_t)n;
    }
    return 0;
}

static int pwrite_page(int fd, const uint8_t *page, uint64_t off)
{
    size_t put = 0;
    while (put < PG_SIZE) {
        ssize_t n = pwrite(fd, page + put, PG_SIZE - put, (off_t)(off + put));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        put += (size_t)n;
    }
    return 0;
}

/* Reads the committed image of pgno from the log or the main file. */
static int main_size_pages(pager *p, uint64_t *pages);

/* rc, remembering pgno when rc says the page is damaged: a reader can then
 * be told where (qs_corrupt_page) without every caller passing it up. */
static int damaged(pager *p, uint32_t pgno, int rc)
{
    if (rc == QS_CORRUPT)
        atomic_store_explicit(&p->bad_page, pgno, memory_order_relaxed);
    return rc;
}

uint32_t pg_bad_page(pager *p) { return atomic_exchange_explicit(&p->bad_page, 0, memory_order_relaxed); }

/* The committed image of pgno from src (a log offset, or PS_MAIN: the
 * main file).  With nowait (qs_get_nowait) the page comes from the
 * kernel's page cache or not at all: QS_WOULDBLOCK. */
static int read_from(pager *p, uint32_t pgno, uint64_t src, uint8_t *page, int nowait)
{
    if (src != PS_MAIN)
        return damaged(p, pgno, wal_read_frame(&p->log, src, pgno, page, nowait));
    /* Another process may have grown the file (pages written directly). */
    if (pgno >= p->main_pages && main_size_pages(p, &p->main_pages) != 0)
        return errno;
    if (pgno >= p->main_pages)
        return damaged(p, pgno, QS_CORRUPT);
    int rc = pread_page(p->fd, page, (uint64_t)pgno * PG_SIZE, nowait);
    return damaged(p, pgno, rc ? rc : wal_page_verify(page, pgno));
}

/* Where the committed image of pgno is: its newest log frame, or PS_MAIN. */
static inline uint64_t committed_src(const pager *p, uint32_t pgno)
{
    uint64_t off;
    return hm_get(&p->logidx, pgno, &off) ? off : PS_MAIN;
}

int pg_read_raw(pager *p, uint32_t pgno, uint8_t *page)
{
    if (pgno == 0 || pgno >= p->meta.npages)
        return QS_CORRUPT;
    return read_from(p, pgno, committed_src(p, pgno), page, 0);
}

static void build_header(uint8_t *page, const pg_meta *m)
{
    memset(page, 0, PG_SIZE);
    memcpy(page, MAIN_MAGIC, 8);
    wr32(page + HDR_VERSION, QS_FORMAT_VERSION);
    wr32(page + HDR_PAGESIZE, PG_SIZE);
    wr32(page + TR_PGNO, 0);
    meta_store(page + TR_META, m);
    wal_page_seal(page);
}

static int main_size_pages(pager *p, uint64_t *pages)
{
    struct stat st;
    if (fstat(p->fd, &st) != 0)
        return errno;
    *pages = (uint64_t)st.st_size / PG_SIZE;
    return 0;
}

int pg_backed_pages(pager *p, uint64_t *pages)
{
    uint64_t main;
    int rc = main_size_pages(p, &main);
    if (rc == 0)
        *pages = main + p->logidx.len;
    return rc;
}

int pg_open(pager *p, int fd, int log_fd, int readonly, int create,
            size_t budget_pages, uint64_t checkpoint_bytes)
{
    return pg_open_mode(p, fd, log_fd, readonly, create, 0, budget_pages, checkpoint_bytes);
}

int pg_open_mode(pager *p, int fd, int log_fd, int readonly, int create, int attach,
                 size_t budget_pages, uint64_t checkpoint_bytes)
{
    memset(p, 0, sizeof *p);
    /* never 0: a tree path whose pointers are not current says so with
     * epoch 0 (btree.c), which must match no pager */
    p->epoch = 1;
    p->fd = fd;
    p->readonly = readonly;
    p->has_log = log_fd >= 0;
    p->log.fd = log_fd;
    p->budget = budget_pages < 64 ? 64 : budget_pages;
    p->checkpoint_bytes = checkpoint_bytes;
    p->log_end = PG_SIZE;
    p->version = QS_FORMAT_VERSION;     /* until page 0 says otherwise */
    /* Without a log there is no generation to file images under; without
     * the cache (out of memory) each page is read from disk as before. */
    struct stat st;
    if (p->has_log && fstat(fd, &st) == 0)
        ps_join((uint64_t)st.st_dev, (uint64_t)st.st_ino, p->budget, &p->share);
    uint8_t *page = malloc(PG_SIZE);
    if (!page)
        return QS_NOMEM;
    int rc = 0, page0_bad = 0;
    if (create) {
        memset(&p->meta, 0, sizeof p->meta);
        p->meta.npages = 1;
        p->version = QS_FORMAT_VERSION;
        build_header(page, &p->meta);
        if ((rc = pwrite_page(fd, page, 0)) != 0)
            goto fail;
        if (os_datasync(fd) != 0) {
            rc = errno;
            goto fail;
        }
    } else {
        rc = pread_page(fd, page, 0, 0);
        if (rc == QS_CORRUPT)
            rc = QS_NOTCASKET;  /* shorter than one page: not ours */
        if (rc)
            goto fail;
        if (memcmp(page, MAIN_MAGIC, 8) != 0) {
            rc = QS_NOTCASKET;
            goto fail;
        }
        if (wal_page_verify(page, 0) != 0)
            page0_bad = 1;  /* maybe torn by a checkpoint; the log may save us */
        else if ((p->version = rd32(page + HDR_VERSION)) < QS_FORMAT_VERSION_MIN ||
                 p->version > QS_FORMAT_VERSION) {
            snprintf(p->damage, sizeof p->damage,
                     "format version %u; this build reads versions %u to %u "
                     "(a newer pyqstore may read it)", (unsigned)p->version,
                     (unsigned)QS_FORMAT_VERSION_MIN, (unsigned)QS_FORMAT_VERSION);
            rc = QS_VERSION;
            goto fail;
        } else if (rd32(page + HDR_PAGESIZE) != PG_SIZE) {
            rc = QS_CORRUPT;
            goto fail;
        } else
            meta_load(page + TR_META, &p->meta);
    }
    if ((rc = main_size_pages(p, &p->main_pages)) != 0)
        goto fail;
    if (!page0_bad && !attach && (p->meta.npages == 0 || p->main_pages < p->meta.npages)) {
        rc = QS_CORRUPT;  /* truncated: pages the header promises are gone */
        goto fail;
    }

    if (attach) {
        /* Other handles have the casket open: the log is theirs as much as
         * ours, and page 0 may be in the middle of a checkpoint's rewrite.
         * The first pg_refresh reads both, inside the checkpoint guard. */
        p->reload = 1;
        free(page);
        return 0;
    }
    int log_ok = 0;
    if (p->has_log) {
        rc = wal_read_header(&p->log);
        if (rc == 0)
            log_ok = 1;
        else if (rc == QS_CORRUPT && !page0_bad) {
            /* A torn header loses only frames never synced; a damaged one
             * would lose synced commits silently. */
            wal_recovery rec;
            if ((rc = wal_check_header_loss(&p->log, p->meta.txn, &rec)) != 0) {
                if (rc == QS_CORRUPT)
                    wal_describe(&rec, p->damage, sizeof p->damage);
                goto fail;
            }
        } else if (rc != QS_CORRUPT)
            goto fail;  /* QS_VERSION: a newer log; dropping it would lose commits */
        rc = 0;
    }
    if (log_ok) {
        /* Frames not newer than the main file's last checkpoint are history. */
        if (!page0_bad && p->log.base_txn < p->meta.txn)
            p->log.base_txn = p->meta.txn;
        wal_recovery rec;
        if ((rc = wal_recover(&p->log, &p->logidx, &rec)) != 0) {
            if (rc == QS_CORRUPT)
                wal_describe(&rec, p->damage, sizeof p->damage);
            goto fail;
        }
        if (rec.found_commit) {
            p->meta = rec.meta;
            p->log_end = rec.end;
            page0_bad = 0;
        }
    }
    if (page0_bad) {
        rc = QS_CORRUPT;
        goto fail;
    }
    if (p->meta.npages == 0 || p->meta.root[0] >= p->meta.npages ||
        p->meta.root[1] >= p->meta.npages || p->meta.free_head >= p->meta.npages) {
        rc = QS_CORRUPT;
        goto fail;
    }
    p->next_txn = p->meta.txn + 1;
    if (!readonly) {
        /* Fold whatever the log holds into the main file and start a fresh
         * generation, so no frame of an older life can ever be replayed. */
        /* The recovered frames may still sit only in the page cache (the
         * writer was killed, the machine was not): make them durable before
         * the main file takes their pages. */
        /* An older version's page 0 is rewritten as this one (its records
         * are all valid in this version) before the log is restarted, so
         * nothing of this version is written under the old number. */
        if ((p->logidx.len || p->version != QS_FORMAT_VERSION) &&
            ((rc = wal_sync(&p->log)) != 0 || (rc = pg_checkpoint_copy(p, NULL)) != 0))
            goto fail;
        p->version = QS_FORMAT_VERSION;
        if ((rc = pg_checkpoint_finish(p, PG_SIZE)) != 0)
            goto fail;
        /* Zero-fill the first stretch of log now, under the sync that open
         * pays anyway, so early commits overwrite allocated blocks. */
        if ((rc = wal_reserve(&p->log, 2 * PG_SIZE, 0)) != 0)
            goto fail;
        if ((rc = wal_sync(&p->log)) != 0)
            goto fail;
        p->checkpoints = 0;
    } else if (log_ok)
        p->share_salt = p->log.salt;
    free(page);
    return 0;
fail:
    free(page);
    pg_close(p);
    return rc;
}

void pg_close(pager *p)
{
    if (p->in_txn)
        pg_abort(p);
    wal_unmap(&p->log);
    drop_all(p, &p->cache);
    hm_free(&p->cache);
    hm_free(&p->logidx);
    hm_free(&p->dirty);
    hm_free(&p->spill);
    free(p->cw_bufs);
    free(p->cw_fresh);
    free(p->cw_pages);
    free(p->cw_delta);
    free(p->cw_deltas);
    while (p->spare) {
        pg_buf *b = p->spare;
        p->spare = b->next;
        free(b);
    }
    p->nspare = 0;
    free(p->pub_frames);
    ps_leave(p->share);
    p->share = NULL;
}

static int cache_insert(pager *p, hm_map *m, uint32_t pgno, pg_buf *b)
{
    b->pgno = pgno;
    if (hm_put(m, pgno, as_val(b)) != 0) {
        buf_drop(p, b);
        return QS_NOMEM;
    }
    return 0;
}

static int get_committed(pager *p, uint32_t pgno, pg_buf **out)
{
    uint64_t v;
    if (hm_get(&p->cache, pgno, &v)) {
        pg_buf *b = as_buf(v);
        /* Tested first: a shared image's line is read by every holder's
         * thread, and a store on every hit would bounce it between cores. */
        if (!get_ref(b))
            set_ref(b, 1);
        *out = b;
        return 0;
    }
    if (pgno == 0 || pgno >= p->meta.npages)
        return QS_CORRUPT;
    /* pgno is below the committed page count, so what the source holds
     * is a committed image, the same for every handle whose view names
     * this source: another handle may have read it already (pshare.h). */
    uint64_t src = committed_src(p, pgno);
    pg_buf *b = ps_find(p->share, p->share_salt, pgno, src, p->cached_only);
    if (b) {
        if (hm_put(&p->cache, pgno, as_val(b)) != 0) {
            ps_release(b);
            return QS_NOMEM;
        }
        p->pages_shared++;
        *out = b;
        return 0;
    }
    if (!(b = buf_new(p)))
        return QS_NOMEM;
    int rc = read_from(p, pgno, src, b->data, p->cached_only);
    if (rc) {
        buf_drop(p, b);
        return rc;
    }
    if ((rc = cache_insert(p, &p->cache, pgno, b)) != 0)
        return rc;
    p->pages_read++;
    ps_keep(p->share, p->share_salt, p->log.base_txn, pgno, src, b, p->cached_only);
    *out = b;
    return 0;
}

/* The writer's own image of pgno if it has one (dirty, or spilled and
 * loaded back as dirty).  *out NULL when the page is unchanged. */
static int get_private(pager *p, uint32_t pgno, pg_buf **out)
{
    uint64_t v;
    *out = NULL;
    if (hm_get(&p->dirty, pgno, &v)) {
        *out = as_buf(v);
        set_ref(*out, 1);
        return 0;
    }
    if (hm_get(&p->spill, pgno, &v)) {
        if (p->cached_only)
            return QS_WOULDBLOCK;
        pg_buf *b = buf_new(p);
        if (!b)
            return QS_NOMEM;
        int rc;
        if (v & DIRECT) {
            rc = pread_page(p->fd, b->data, (uint64_t)pgno * PG_SIZE, 0);
            if (rc == 0)
                rc = wal_page_verify(b->data, pgno);
        } else
            rc = wal_read_frame(&p->log, v, pgno, b->data, 0);
        if ((rc = damaged(p, pgno, rc)) != 0) {
            buf_drop(p, b);
            return rc;
        }
        if ((rc = cache_insert(p, &p->dirty, pgno, b)) != 0)
            return rc;
        *out = b;
    }
    return 0;
}

int pg_get(pager *p, int wview, uint32_t pgno, uint8_t **out)
{
    pg_buf *b;
    int rc;
    if (wview) {
        if (pgno == 0 || pgno >= p->wmeta.npages)
            return QS_CORRUPT;
        if ((rc = get_private(p, pgno, &b)) != 0)
            return rc;
        if (b) {
            *out = b->data;
            return 0;
        }
    }
    if ((rc = get_committed(p, pgno, &b)) != 0)
        return rc;
    *out = b->data;
    return 0;
}

int pg_get_mine(pager *p, uint32_t pgno, uint8_t **out, int *mine)
{
    pg_buf *b;
    int rc;
    if (pgno == 0 || pgno >= p->wmeta.npages)
        return QS_CORRUPT;
    if ((rc = get_private(p, pgno, &b)) != 0)
        return rc;
    *mine = b != NULL;
    if (!b && (rc = get_committed(p, pgno, &b)) != 0)
        return rc;
    *out = b->data;
    return 0;
}

/* The writer's copy of a committed image.  A tree page's gap may hold
 * anything in memory (pagefmt.h), so a copy-on-write costs what the page
 * holds: most of a queue's leaf, whose head is taken and tail appended at
 * every commit, is gap. */
static void copy_image(uint8_t *dst, const uint8_t *src)
{
    uint32_t hs, he;
    if (!tree_gap(src, &hs, &he)) {
        memcpy(dst, src, PG_SIZE);
        return;
    }
    memcpy(dst, src, hs);
    memcpy(dst + he, src + he, PG_SIZE - he);
}

int pg_write(pager *p, uint32_t pgno, uint8_t **out)
{
    pg_buf *b, *c;
    int rc;
    if (pgno == 0 || pgno >= p->wmeta.npages)
        return QS_CORRUPT;
    if ((rc = get_private(p, pgno, &b)) != 0)
        return rc;
    if (!b) {
        if ((rc = get_committed(p, pgno, &c)) != 0)
            return rc;
        if (!(b = buf_new(p)))
            return QS_NOMEM;
        copy_image(b->data, c->data);
        atomic_store_explicit(&b->checked,
                              atomic_load_explicit(&c->checked, memory_order_relaxed),
                              memory_order_relaxed);
        if ((rc = cache_insert(p, &p->dirty, pgno, b)) != 0)
            return rc;
    }
    *out = b->data;
    return 0;
}

/* A blank writable image for pgno, whatever it held before. */
static int write_blank(pager *p, uint32_t pgno, uint8_t **out)
{
    uint64_t v;
    pg_buf *b;
    if (hm_get(&p->dirty, pgno, &v))
        b = as_buf(v);
    else {
        if (!(b = buf_new(p)))
            return QS_NOMEM;
        int rc = cache_insert(p, &p->dirty, pgno, b);
        if (rc)
            return rc;
    }
    memset(b->data, 0, PG_SIZE);
    set_ref(b, 1);
    atomic_store_explicit(&b->checked, 1, memory_order_relaxed);
    *out = b->data;
    return 0;
}

int pg_alloc(pager *p, uint32_t *pgno, uint8_t **out)
{
    pg_meta *m = &p->wmeta;
    int rc;
    if (m->free_head) {
        uint8_t *trunk;
        if ((rc = pg_write(p, m->free_head, &trunk)) != 0)
            return rc;
        uint32_t n = rd32(trunk + TRUNK_N);
        if (trunk[0] != PT_TRUNK || n > TRUNK_CAP)
            return QS_CORRUPT;
        uint32_t got;
        if (n > 0) {
            got = rd32(trunk + TRUNK_ENTRIES + 4 * (n - 1));
            if (got == 0 || got >= m->npages)
                return QS_CORRUPT;
            wr32(trunk + TRUNK_N, n - 1);
        } else {
            got = m->free_head;
            uint32_t next = rd32(trunk + TRUNK_NEXT);
            if (next >= m->npages)
                return QS_CORRUPT;
            m->free_head = next;
        }
        if ((rc = write_blank(p, got, out)) != 0)
            return rc;
        m->free_count--;
        *pgno = got;
        return 0;
    }
    if (m->npages >= UINT32_MAX - 1)
        return QS_FULL;
    uint32_t got = m->npages;
    m->npages++;
    if ((rc = write_blank(p, got, out)) != 0) {
        m->npages--;
        return rc;
    }
    *pgno = got;
    return 0;
}

int pg_free(pager *p, uint32_t pgno)
{
    pg_meta *m = &p->wmeta;
    uint8_t *page;
    int rc;
    if (m->free_head) {
        uint8_t *trunk;
        if ((rc = pg_write(p, m->free_head, &trunk)) != 0)
            return rc;
        uint32_t n = rd32(trunk + TRUNK_N);
        if (trunk[0] != PT_TRUNK || n > TRUNK_CAP)
            return QS_CORRUPT;
        if (n < TRUNK_CAP) {
            wr32(trunk + TRUNK_ENTRIES + 4 * n, pgno);
            wr32(trunk + TRUNK_N, n + 1);
            m->free_count++;
            /* Its old image is of no further use to this transaction. */
            return write_blank(p, pgno, &page);
        }
    }
    if ((rc = write_blank(p, pgno, &page)) != 0)
        return rc;
    page[0] = PT_TRUNK;
    wr32(page + TRUNK_NEXT, m->free_head);
    wr32(page + TRUNK_N, 0);
    m->free_head = pgno;
    m->free_count++;
    return 0;
}

void pg_begin(pager *p)
{
    p->wmeta = p->meta;
    p->txn = p->next_txn++;
    p->txn_start = p->txn_end = p->log_end;
    p->txn_direct = 0;
    p->txn_frames = 0;
    p->in_txn = 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Writes about a quarter of the dirty pages as uncommitted frames (or, for
 * pages new to the file, into the main file) and forgets them.  The victims
 * are those not touched since the last spill, lowest page numbers first:
 * the pages a growing tree allocated earliest, and runs of consecutive
 * numbers that go out in few large writes (picked in hash order they went
 * out one or two pages per write, and the device wrote them as scattered). */
static int spill(pager *p)
{
    size_t want = p->dirty.len / 4 + 1, n = 0, ncand = 0;
    uint8_t **pages = malloc(want * sizeof *pages);
    pg_buf **victims = malloc(p->dirty.len * sizeof *victims);   /* candidates first */
    int rc = 0;
    if (!victims || !pages) {
        rc = QS_NOMEM;
        goto out;
    }
    uint32_t k;
    uint64_t v;
    for (size_t i = 0; i < p->dirty.cap; i++)
        if (hm_slot(&p->dirty, i, &k, &v)) {
            pg_buf *b = as_buf(v);
            if (get_ref(b))
                set_ref(b, 0);  /* a second chance */
            else
                victims[ncand++] = b;
        }
    if (ncand < want) {
        /* Mostly hot pages: every page is a candidate. */
        ncand = 0;
        for (size_t i = 0; i < p->dirty.cap; i++)
            if (hm_slot(&p->dirty, i, &k, &v))
                victims[ncand++] = as_buf(v);
    }
    qsort(victims, ncand, sizeof *victims, cmp_buf_pgno);
    n = want < ncand ? want : ncand;
    for (size_t i = 0; i < n; i++)
        set_ref(victims[i], 2); /* chosen */
    /* Frames are appended after the transaction's last one, in one write
     * (a page spilled again gets a new frame; recovery keeps the last). */
    size_t fresh = 0, ndirect = 0;
    uint64_t at = p->txn_end;
    pg_buf **direct = malloc((n ? n : 1) * sizeof *direct);
    if (!direct) {
        rc = QS_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        pg_buf *b = victims[i];
        wal_stamp(&p->log, b->data, b->pgno, p->txn, 0, 0, NULL);
        if (is_fresh(p, b->pgno)) {
            direct[ndirect++] = b;
            continue;
        }
        b->off = p->txn_end;
        p->txn_end += wal_frame_len(b->data);
        pages[fresh++] = b->data;
    }
    rc = direct_write(p, direct, ndirect);
    free(direct);
    if (rc == 0)
        rc = wal_reserve(&p->log, p->txn_end, 0);
    if (rc == 0 && fresh)
        rc = wal_write(&p->log, pages, NULL, fresh, at, NULL, 0);
    if (rc) {
        /* None of these frames counts, so the transaction's next ones go
         * where they were to go: a gap in its frames would stop recovery
         * there and lose the transaction, committed or not, at a crash. */
        p->txn_end = at;
        goto out;
    }
    p->txn_frames += (uint32_t)fresh;
    for (size_t i = 0; i < n; i++) {
        pg_buf *b = victims[i];
        if (hm_put(&p->spill, b->pgno, b->off) != 0) {
            rc = QS_NOMEM;
            goto out;
        }
        hm_del(&p->dirty, b->pgno);
        buf_drop(p, b);
        victims[i] = NULL;
        p->spilled++;
    }
out:
    if (victims)
        for (size_t i = 0; i < n; i++)
            if (victims[i])
                set_ref(victims[i], 1);
    free(victims);
    free(pages);
    return rc;
}

int pg_trim(pager *p, int is_writer)
{
    p->epoch++;
    size_t low = p->budget - p->budget / 8;
    if (p->cache.len + p->dirty.len <= p->budget)
        return 0;
    for (size_t steps = 0; p->cache.len && p->cache.len + p->dirty.len > low &&
                           steps < 3 * p->cache.cap; steps++) {
        size_t i = p->cache_hand;
        p->cache_hand = (p->cache_hand + 1) & (p->cache.cap - 1);
        uint32_t k;
        uint64_t v;
        if (!hm_slot(&p->cache, i, &k, &v))
            continue;
        pg_buf *b = as_buf(v);
        if (get_ref(b)) {
            set_ref(b, 0);
            continue;
        }
        hm_del(&p->cache, k);
        buf_drop(p, b);
        /* The backward shift may have moved an entry into slot i. */
        p->cache_hand = i;
    }
    if (is_writer && p->in_txn && p->dirty.len > low)
        return spill(p);
    return 0;
}

/* The committed image of pgno a delta frame may be based on: the page's
 * newest frame of this generation, cached, fewer than WAL_DELTA_DEPTH
 * deltas below it, and not spilled by this transaction; NULL when there is
 * none.  An image whose frame offset or generation does not match the
 * log index's (one another process's commit rewrote in place, one of an
 * older generation) is never a base. */
static pg_buf *delta_base(pager *p, uint32_t pgno)
{
    uint64_t off, v;
    if (!hm_get(&p->logidx, pgno, &off) || (p->spill.len && hm_get(&p->spill, pgno, &v)) ||
        !hm_get(&p->cache, pgno, &v))
        return NULL;
    pg_buf *c = as_buf(v);
    if (c->off != off || c->depth >= WAL_DELTA_DEPTH || rd32(c->data + TR_PGNO) != pgno ||
        rd64(c->data + TR_SALT) != p->log.salt)
        return NULL;
    return c;
}

int pg_commit_prepare(pager *p)
{
    /* +1: the page pg_commit_write may bring back to carry the commit */
    return hm_reserve(&p->logidx, p->dirty.len + p->spill.len + 1) ? QS_NOMEM : 0;
}

int pg_commit_write(pager *p, int will_sync, int *wrote)
{
    int rc;
    *wrote = 0;
    if (p->dirty.len == 0 && p->spill.len == 0)
        return 0;
    if (p->dirty.len == 0) {
        /* Everything was spilled: bring one page back to carry the commit. */
        uint32_t k = 0;
        uint64_t v;
        uint8_t *unused;
        for (size_t i = 0; i < p->spill.cap; i++)
            if (hm_slot(&p->spill, i, &k, &v))
                break;
        if ((rc = pg_get(p, 1, k, &unused)) != 0)
            return rc;
    }
    size_t n = p->dirty.len, fresh = 0;
    if (n > p->cw_cap) {
        /* kept between commits: a stream of small commits allocates nothing */
        size_t ncap = n < 64 ? 64 : n;
        pg_buf **b = malloc(ncap * sizeof *b), **f = malloc(ncap * sizeof *f);
        uint8_t **pg = malloc(ncap * sizeof *pg);
        if (!b || !f || !pg) {
            free(b);
            free(f);
            free(pg);
            return QS_NOMEM;
        }
        free(p->cw_bufs);
        free(p->cw_fresh);
        free(p->cw_pages);
        p->cw_bufs = b;
        p->cw_fresh = f;
        p->cw_pages = pg;
        p->cw_cap = ncap;
    }
    pg_buf **bufs = p->cw_bufs, **fresh_bufs = p->cw_fresh;
    uint8_t **pages = p->cw_pages;
    uint32_t k;
    uint64_t v;
    size_t j = 0;
    for (size_t i = 0; i < p->dirty.cap && j < n; i++)
        if (hm_slot(&p->dirty, i, &k, &v))
            bufs[j++] = as_buf(v);
    /* Pages new to the file go to the main file when there are many (or
     * some already went there); its sync comes before the commit frame.
     * The last page always goes to the log: it carries the commit. */
    size_t nfresh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        nfresh += is_fresh(p, bufs[i]->pgno);
    if (p->txn_direct || nfresh >= PG_DIRECT_MIN) {
        size_t nd = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (is_fresh(p, bufs[i]->pgno)) {
                wal_stamp(&p->log, bufs[i]->data, bufs[i]->pgno, p->txn, 0, 0, NULL);
                fresh_bufs[nd++] = bufs[i];
            }
        if ((rc = direct_write(p, fresh_bufs, nd)) != 0)
            goto out;
    }
    if (p->txn_direct && os_datasync(p->fd) != 0) {
        rc = errno;
        goto out;
    }
    /* The other pages as frames after the transaction's spilled ones, in
     * one write whose last frame is the commit frame. */
    uint64_t at = p->txn_end, end = at;
    for (size_t i = 0; i < n; i++) {
        if (i != n - 1 && (bufs[i]->off & DIRECT))
            continue;
        fresh_bufs[fresh] = bufs[i];
        pages[fresh++] = bufs[i]->data;
    }
    uint32_t nframes = p->txn_frames + (uint32_t)fresh;
    p->wmeta.txn = p->txn;
    /* Small commits log what changed in pages they logged before. */
    wal_delta *deltas = NULL;
    if (fresh <= PG_DELTA_PAGES) {
        /* each kept once made: a failed one is tried again next commit */
        if (!p->cw_delta)
            p->cw_delta = malloc(PG_DELTA_PAGES * (size_t)PG_SIZE);
        if (!p->cw_deltas)
            p->cw_deltas = malloc(PG_DELTA_PAGES * sizeof *p->cw_deltas);
        if (p->cw_delta && p->cw_deltas)
            deltas = p->cw_deltas;
    }
    for (size_t i = 0; i < fresh; i++) {
        pg_buf *b = fresh_bufs[i];
        int last = i == fresh - 1;
        wal_stamp(&p->log, b->data, b->pgno, p->txn, last ? TR_FLAG_COMMIT : 0,
                  nframes, &p->wmeta);
        uint32_t len = wal_frame_len(b->data);
        b->depth = 0;
        if (deltas) {
            uint8_t *room = p->cw_delta + i * (size_t)PG_SIZE;
            /* (a nearly empty page's frame is too short to gain: no lookup) */
            pg_buf *c = len / 2 >= WAL_DELTA_MIN ? delta_base(p, b->pgno) : NULL;
            uint32_t dlen = c ? wal_delta_encode(c->data, b->data, c->off, c->depth + 1u, room,
                                                 len / 2) : 0;
            deltas[i] = (wal_delta){room, dlen};
            if (dlen) {
                len = dlen;
                b->depth = (uint8_t)(c->depth + 1);
            }
        }
        b->off = end;
        end += len;
    }
    if ((rc = wal_reserve(&p->log, end, will_sync)) != 0)
        goto out;
    if ((rc = wal_write(&p->log, pages, deltas, fresh, at, NULL, will_sync ? 0 : end)) != 0)
        goto out;
    p->txn_end = end;
    *wrote = 1;
out:
    if (p->cw_cap > 4096) {
        /* a big transaction's arrays are not kept */
        free(p->cw_bufs);
        free(p->cw_fresh);
        free(p->cw_pages);
        p->cw_bufs = p->cw_fresh = NULL;
        p->cw_pages = NULL;
        p->cw_cap = 0;
    }
    return rc;
}

/* Room in p->pub_frames for n frames; 0 when there is none (the commit
 * is then not filed: other handles read the log for it). */
static int pub_room(pager *p, size_t n)
{
    if (n <= p->pub_cap)
        return 1;
    ps_frame *f = realloc(p->pub_frames, n * sizeof *f);
    if (!f)
        return 0;
    p->pub_frames = f;
    p->pub_cap = n;
    return 1;
}

void pg_publish(pager *p)
{
    uint32_t k;
    uint64_t v, old;
    size_t left = p->dirty.len;
    /* Other handles of the process catch up over this commit from the
     * shared cache (its images, and the frames filed below).  A big
     * transaction is not filed: its frames would not be kept, and filing
     * its images would cost its commit a lock per page. */
    size_t most = p->dirty.len + p->spill.len;
    int file = most <= PS_RUN_FRAMES && ps_active(p->share) && p->share_salt &&
               pub_room(p, most);
    size_t nframes = 0;
    for (size_t i = 0; i < p->dirty.cap && left; i++) {
        if (!hm_slot(&p->dirty, i, &k, &v))
            continue;
        left--;
        pg_buf *b = as_buf(v);
        uint64_t off = b->off;
        /* pg_commit_prepare reserved room in the log index, which only
         * the writer changes, so that put cannot fail.  Readers may have used
         * the cache's room meanwhile: a page that does not fit there is
         * simply not cached (the log index or the main file has it). */
        int cached = 1;
        if (hm_get(&p->cache, k, &old)) {
            buf_drop(p, as_buf(old));
            hm_put(&p->cache, k, v);    /* replaces in place */
        } else if (hm_put(&p->cache, k, v) != 0) {
            buf_drop(p, b);
            cached = 0;
        }
        if (off & DIRECT) {
            if (p->main_pages <= k)
                p->main_pages = (uint64_t)k + 1;
            /* a page the file grew by: its committed image is the main
             * file's from now on */
            if (file && cached)
                ps_keep(p->share, p->share_salt, p->log.base_txn, k, PS_MAIN, b, 0);
        } else {
            hm_put(&p->logidx, k, off);
            if (file) {
                if (cached)
                    ps_keep(p->share, p->share_salt, p->log.base_txn, k, off, b, 0);
                p->pub_frames[nframes++] = (ps_frame){k, off};
            }
        }
    }
    left = p->spill.len;
    for (size_t i = 0; i < p->spill.cap && left; i++) {
        if (!hm_slot(&p->spill, i, &k, &v))
            continue;
        left--;
        if (hm_get(&p->dirty, k, &old))
            continue;
        if (hm_get(&p->cache, k, &old)) {
            hm_del(&p->cache, k);
            buf_drop(p, as_buf(old));
        }
        if (v & DIRECT) {
            if (p->main_pages <= k)
                p->main_pages = (uint64_t)k + 1;
        } else {
            hm_put(&p->logidx, k, v);
            if (file)
                p->pub_frames[nframes++] = (ps_frame){k, v};
        }
    }
    if (file)
        ps_note_commit(p->share, p->share_salt, p->log_end, p->txn_end, &p->wmeta,
                       p->pub_frames, nframes);
    hm_clear(&p->dirty);
    hm_clear(&p->spill);
    p->meta = p->wmeta;
    p->log_end = p->txn_end;
    p->in_txn = 0;
    p->commits++;
}

void pg_abort(pager *p)
{
    drop_all(p, &p->dirty);
    hm_clear(&p->spill);
    p->in_txn = 0;
}

typedef struct pg_off { uint64_t pgno, off; } pg_off;

static int cmp_pgoff(const void *a, const void *b)
{
    return cmp_u64(a, b);
}

/* An image as the log would give it back: the hole zeroed (the cache's
 * copy may hold stale bytes there, which are never read). */
static void copy_as_logged(uint8_t *dst, const uint8_t *src)
{
    uint32_t hs, he;
    page_hole(src, &hs, &he);
    memcpy(dst, src, hs);
    memset(dst + hs, 0, he - hs);
    memcpy(dst + he, src + he, PG_SIZE - he);
}

/* Pages copied per turn: the guard is held for at most this many memcpy,
 * and the turn's buffer is 256 KiB. */
#define CKPT_BATCH 64
_Static_assert(CKPT_BATCH <= 64, "pg_checkpoint_copy marks a batch's cached pages in 64 bits");

int pg_checkpoint_copy(pager *p, const pg_guard *guard)
{
    size_t n = p->logidx.len, j = 0;
    pg_off *list = malloc((n ? n : 1) * sizeof *list);
    uint8_t *page = malloc(CKPT_BATCH * (size_t)PG_SIZE);
    int rc = 0;
    if (!list || !page) {
        rc = QS_NOMEM;
        goto out;
    }
    uint32_t k;
    uint64_t v;
    for (size_t i = 0; i < p->logidx.cap; i++)
        if (hm_slot(&p->logidx, i, &k, &v)) {
            list[j].pgno = k;
            list[j].off = v;
            j++;
        }
    qsort(list, n, sizeof *list, cmp_pgoff);
    /* Most logged pages were written by this handle and are still cached:
     * a memcpy instead of a read, a frame decode and a checksum each. */
    for (size_t i = 0; i < n; i += CKPT_BATCH) {
        size_t m = n - i < CKPT_BATCH ? n - i : CKPT_BATCH;
        uint64_t from_cache = 0;
        uint8_t *pages[CKPT_BATCH];
        if (guard)
            guard->hold(guard->ctx, 1);
        for (size_t s = 0; s < m; s++) {
            pages[s] = page + s * (size_t)PG_SIZE;
            if (hm_get(&p->cache, (uint32_t)list[i + s].pgno, &v)) {
                copy_as_logged(pages[s], as_buf(v)->data);
                from_cache |= 1ull << s;
            }
        }
        if (guard)
            guard->hold(guard->ctx, 0);
        for (size_t s = 0; s < m; s++)
            if (!(from_cache >> s & 1) &&
                (rc = wal_read_frame(&p->log, list[i + s].off, (uint32_t)list[i + s].pgno,
                                     pages[s], 0)) != 0)
                goto out;
        for (size_t s = 0; s < m;) {
            size_t t = s + 1;
            while (t < m && list[i + t].pgno == list[i + s].pgno + (t - s))
                t++;
            if ((rc = wal_pages_write(p->fd, pages + s, t - s, list[i + s].pgno * PG_SIZE)) != 0)
                goto out;
            s = t;
        }
        /* The device writes this turn's pages while the next is copied:
         * the sync below then waits for the last turn only. */
        os_write_behind(p->fd, list[i].pgno * PG_SIZE,
                        (list[i + m - 1].pgno - list[i].pgno + 1) * PG_SIZE);
    }
    /* Page 0 names the newest transaction the main file holds, and recovery
     * ignores log frames up to it: so it may only say so once the pages it
     * vouches for are durable.  Hence two syncs. */
    if (n && os_datasync(p->fd) != 0) {
        rc = errno;
        goto out;
    }
    build_header(page, &p->meta);
    if ((rc = pwrite_page(p->fd, page, 0)) != 0)
        goto out;
    if (os_datasync(p->fd) != 0) {
        rc = errno;
        goto out;
    }
    p->checkpoints++;
out:
    free(list);
    free(page);
    return rc;
}

int pg_checkpoint_finish(pager *p, uint64_t keep_log_bytes)
{
    /* The main file holds everything now, whatever happens to the log. */
    uint64_t old_salt = p->share_salt ? p->log.salt : 0;
    int rc = wal_reset(&p->log, p->meta.txn);
    if (rc == 0)
        ps_new_generation(p->share, old_salt, p->log.salt, p->log.base_txn, &p->logidx);
    hm_clear(&p->logidx);
    if (p->main_pages < p->meta.npages)
        p->main_pages = p->meta.npages;
    p->log_end = PG_SIZE;
    p->share_salt = 0;
    if (rc)
        return rc;
    p->share_salt = p->log.salt;
    if (keep_log_bytes < PG_SIZE)
        keep_log_bytes = PG_SIZE;
    wal_shrink(&p->log, keep_log_bytes);  /* failing leaves a longer log: harmless */
    return 0;
}

/* A page another handle changed: a cached image becomes the new one when
 * the scan has it -- a whole image, or a delta on the image we hold -- and
 * it checks out; else it is dropped. */
static void forget_cached(void *ctx, uint32_t pgno, uint64_t off, const uint8_t *page,
                          const uint8_t *delta)
{
    pager *p = ctx;
    uint64_t v;
    if (!hm_get(&p->cache, pgno, &v))
        return;
    pg_buf *b = as_buf(v);
    if ((page && wal_page_verify(page, pgno) == 0) || delta) {
        if (is_shared(b)) {
            /* Other handles hold this image: ours becomes a copy of our own. */
            pg_buf *nb = buf_new(p);
            if (!nb)
                goto drop;
            nb->pgno = pgno;
            if (delta)
                memcpy(nb->data, b->data, PG_SIZE);
            hm_put(&p->cache, pgno, as_val(nb));    /* replaces in place */
            ps_release(b);
            b = nb;
        }
        uint32_t depth = 0;
        if (page)
            memcpy(b->data, page, PG_SIZE);
        else if (wal_delta_apply(delta, b->data, &depth) != 0 ||
                 wal_page_verify(b->data, pgno) != 0)
            goto drop;
        b->off = off;
        b->depth = (uint8_t)depth;
        /* the tree checks its structure again */
        atomic_store_explicit(&b->checked, 0, memory_order_relaxed);
        return;
    }
drop:
    hm_del(&p->cache, pgno);
    buf_drop(p, b);
}

/* ps_catch_up's apply: the frame at off is pgno's newest; an image of it
 * from the shared cache replaces ours, else ours is dropped. */
static int catch_up_frame(void *ctx, uint32_t pgno, uint64_t off, pg_buf *image)
{
    pager *p = ctx;
    uint64_t v;
    if (hm_put(&p->logidx, pgno, off) != 0) {
        if (image)
            ps_release(image);
        return QS_NOMEM;
    }
    if (!hm_get(&p->cache, pgno, &v)) {
        if (image)
            ps_release(image);  /* read when wanted, from the shared cache */
        return 0;
    }
    buf_drop(p, as_buf(v));
    if (image) {
        hm_put(&p->cache, pgno, as_val(image));     /* replaces in place */
        p->pages_shared++;
    } else
        hm_del(&p->cache, pgno);
    return 0;
}

/* Page 0 of the main file: its meta, or QS_CORRUPT when it fails its check. */
static int read_page0_meta(pager *p, pg_meta *m)
{
    uint8_t *page = malloc(PG_SIZE);
    if (!page)
        return QS_NOMEM;
    int rc = pread_page(p->fd, page, 0, 0);
    if (rc == 0 && (wal_page_verify(page, 0) != 0 || memcmp(page, MAIN_MAGIC, 8) != 0))
        rc = QS_CORRUPT;
    if (rc == 0)
        meta_load(page + TR_META, m);
    free(page);
    return rc;
}

/* Whether the main file already holds every commit of log generation salt
 * up to end: its frames are whole and valid and the last of them commits a
 * transaction no newer than page 0's (main_txn).  So a checkpointer that
 * was killed after writing page 0, before it published the new generation
 * (the region still names this one, the log's header may name the next),
 * left a consistent casket, not a damaged one.  *yes 0 otherwise. */
static int log_superseded(pager *p, uint64_t salt, uint64_t end, uint64_t main_txn, int *yes)
{
    *yes = 0;
    wal w = p->log;
    w.salt = salt;
    hm_map idx = {0};
    wal_recovery rec;
    int rc = wal_scan(&w, &idx, PG_SIZE, end, 0, 0, &rec, NULL, NULL);
    hm_free(&idx);
    if (rc == 0)
        *yes = rec.found_commit && rec.end == end && rec.meta.txn <= main_txn;
    return rc == QS_CORRUPT ? 0 : rc;
}

int pg_refresh(pager *p, uint64_t salt, uint64_t end)
{
    int rc, reloaded = 0;
    if (salt != p->log.salt || p->reload) {
        /* Another handle checkpointed (or this one just attached): the main file holds all the old log
         * held, and the log started a new generation. */
        pg_meta m;
        if ((rc = read_page0_meta(p, &m)) != 0)
            return rc;
        wal w = p->log;
        int superseded = 0;
        if (salt != 0) {
            if ((rc = wal_read_header(&w)) != 0)
                return rc;
            if (w.salt != salt && end > PG_SIZE &&
                (rc = log_superseded(p, salt, end, m.txn, &superseded)) != 0)
                return rc;
            if (w.salt != salt && !superseded)
                return QS_CORRUPT;
        } else
            w.salt = 0;     /* no log yet (a read-only handle opened alone) */
        if (m.npages == 0 || m.root[0] >= m.npages || m.root[1] >= m.npages ||
            m.free_head >= m.npages)
            return QS_CORRUPT;
        drop_all(p, &p->cache);
        hm_clear(&p->logidx);
        /* A superseded generation stays the one we follow: the next writer
         * finishes the dead checkpoint and publishes a new one. */
        p->log.salt = salt ? salt : w.salt;
        p->share_salt = superseded ? 0 : p->log.salt;
        p->log.base_txn = w.base_txn > m.txn && !superseded ? w.base_txn : m.txn;
        p->meta = m;
        p->log_end = superseded ? end : PG_SIZE;
        p->reload = 0;
        reloaded = 1;
        if ((rc = main_size_pages(p, &p->main_pages)) != 0)
            return rc;
    }
    pg_meta caught;
    if (end > p->log_end &&
        ps_catch_up(p->share, p->share_salt, p->log_end, end, catch_up_frame, p, &caught) == 1) {
        /* every commit since our view was published by a handle of this
         * process: no log read */
        p->meta = caught;
        p->log_end = end;
    } else if (end > p->log_end) {
        wal_recovery rec;
        rc = wal_scan(&p->log, &p->logidx, p->log_end, end, p->meta.txn, 1, &rec, forget_cached,
                      p);
        if (rc)
            return rc;
        if (!rec.found_commit && reloaded && p->log_end == PG_SIZE) {
            /* Nothing newer than page 0 in the log: superseded, or damaged. */
            int superseded;
            if ((rc = log_superseded(p, p->log.salt, end, p->meta.txn, &superseded)) != 0)
                return rc;
            if (superseded) {
                p->share_salt = 0;
                p->log_end = end;
                rec.found_commit = 1;
                rec.end = end;
                rec.meta = p->meta;
            }
        }
        if (!rec.found_commit || rec.end != end)
            return QS_CORRUPT;
        p->log_frames_read += rec.frames;
        p->meta = rec.meta;
        p->log_end = end;
    } else if (end < p->log_end)
        return QS_CORRUPT;
    if (p->next_txn <= p->meta.txn)
        p->next_txn = p->meta.txn + 1;
    p->epoch++;
    return 0;
}

int pg_checkpoint_unfinished(pager *p, int *yes)
{
    *yes = 0;
    if (!p->has_log)
        return 0;
    pg_meta m;
    int rc = read_page0_meta(p, &m);
    if (rc)
        return rc == QS_CORRUPT ? 0 : rc;   /* page 0 older or torn: the log repairs it */
    wal w = p->log;
    if ((rc = wal_read_header(&w)) != 0)
        return rc == QS_CORRUPT ? 0 : rc;
    *yes = m.txn >= p->meta.txn && (p->log_end > PG_SIZE || w.salt != p->log.salt);
    if (*yes) {
        hm_clear(&p->logidx);   /* every page it names is in the main file */
        p->share_salt = 0;
    }
    return 0;
}

int pg_adopt(pager *p, int *found)
{
    struct stat st;
    *found = 0;
    if (fstat(p->log.fd, &st) != 0)
        return errno;
    p->log.alloc = (uint64_t)st.st_size;
    wal_recovery rec;
    int rc = wal_scan(&p->log, &p->logidx, p->log_end, (uint64_t)st.st_size, p->meta.txn, 0, &rec,
                      forget_cached, p);
    if (rc == 0 && rec.found_commit) {
        p->meta = rec.meta;
        p->log_end = rec.end;
        if (p->next_txn <= p->meta.txn)
            p->next_txn = p->meta.txn + 1;
        p->epoch++;
        *found = 1;
    }
    return rc;
}

int pg_check_log(pager *p, char *msg, size_t cap)
{
    if (!p->has_log || p->log.salt == 0)
        return 0;
    struct stat st;
    if (fstat(p->log.fd, &st) != 0)
        return errno;
    hm_map idx = {0};
    wal_recovery rec;
    int rc = wal_scan(&p->log, &idx, PG_SIZE, (uint64_t)st.st_size, p->log.base_txn, 0, &rec,
                      NULL, NULL);
    hm_free(&idx);
    if (rc == QS_CORRUPT)
        wal_describe(&rec, msg, cap);
    else if (rc == 0 && rec.end < p->log_end) {
        snprintf(msg, cap, "frame %llu (offset %llu) is damaged, but the committed frames run "
                 "to offset %llu", (unsigned long long)rec.bad_frame,
                 (unsigned long long)rec.bad_off, (unsigned long long)p->log_end);
        rc = QS_CORRUPT;
    }
    return rc;
}

int pg_log_size(pager *p)
{
    struct stat st;
    if (fstat(p->log.fd, &st) != 0)
        return errno;
    p->log.alloc = (uint64_t)st.st_size;
    return 0;
}
