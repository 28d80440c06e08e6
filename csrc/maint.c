/* maint.c -- maintenance (qs_sync, qs_check, qs_compact, qs_stat_get,
 * qs_snapshot_open, qs_backup, qs_progress): whole-casket operations that
 * checkpoint, walk every page, or copy every record into a new file.
 * Apart because none of them is on the path of a record operation, and
 * each uses the handle (a second, private or read-only one) as well as the
 * transaction layer. */
#include "handle.h"
#include "osdep.h"
#include "txn.h"
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long the log may grow while a snapshot holds checkpoints off. */
#define DEFAULT_SNAPSHOT_LOG (1ull << 30)

/* ---- sync, check, compact, stat ------------------------------------------------ */

static int do_sync(qs_casket *c)
{
    if (c->readonly)
        return 0;
    if (cs_owns(c))
        return QS_TXN;
    int rc = tx_writer_enter(c);
    if (rc)
        return rc;
    if ((rc = tx_heal(c)) == 0)
        rc = tx_checkpoint(c, tx_log_keep(c));
    tx_writer_leave(c);
    return rc;
}

static int check_freelist(pager *p, uint8_t *seen, char *msg, size_t cap)
{
    uint8_t *page = malloc(PG_SIZE);
    if (!page)
        return QS_NOMEM;
    uint32_t pgno = p->meta.free_head, npages = p->meta.npages;
    uint64_t count = 0;
    int rc = 0;
    while (pgno && rc == 0) {
        if (pgno >= npages || seen[pgno]) {
            snprintf(msg, cap, "page %u: free list points at a bad or used page", pgno);
            rc = QS_CORRUPT;
            break;
        }
        seen[pgno] = 1;
        count++;
        if ((rc = pg_read_raw(p, pgno, page)) != 0) {
            snprintf(msg, cap, "page %u: free-list page unreadable: %s", pgno, qs_strerror(rc));
            break;
        }
        uint32_t n = rd32(page + 8);
        if (page[0] != PT_TRUNK || n > (PG_USABLE - 12) / 4) {
            snprintf(msg, cap, "page %u: bad free-list page", pgno);
            rc = QS_CORRUPT;
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t f = rd32(page + 12 + 4 * i);
            if (f == 0 || f >= npages || seen[f]) {
                snprintf(msg, cap, "page %u: free-list entry %u is bad or used twice", pgno, f);
                rc = QS_CORRUPT;
                break;
            }
            seen[f] = 1;
            count++;
        }
        pgno = rd32(page + 4);
    }
    if (rc == 0 && count != p->meta.free_count) {
        snprintf(msg, cap, "free list holds %llu pages, header says %u",
                 (unsigned long long)count, p->meta.free_count);
        rc = QS_CORRUPT;
    }
    free(page);
    return rc;
}

static int do_check(qs_casket *c, char *msg, size_t msgcap)
{
    char dummy[8];
    if (!msg || msgcap == 0) {
        msg = dummy;
        msgcap = sizeof dummy;
    }
    msg[0] = 0;
    if (cs_owns(c))
        return QS_TXN;
    if (!c->readonly) {
        int wrc = tx_writer_enter(c);
        if (wrc)
            return wrc;
    }
    int vrc = cs_view_lock(c);
    if (vrc) {
        if (!c->readonly)
            tx_writer_leave(c);
        return vrc;
    }
    pager *p = &c->pg;
    char lmsg[200];
    int rc = pg_check_log(p, lmsg, sizeof lmsg);
    if (rc == QS_CORRUPT)
        snprintf(msg, msgcap, "%s%s: %s", c->path, LOG_SUFFIX, lmsg);
    else if (rc)
        snprintf(msg, msgcap, "reading the log failed: %s", qs_strerror(rc));
    /* a damaged count must not size the page map: it could ask for GiBs */
    uint64_t backed = 0;
    if (rc == 0 && (rc = pg_backed_pages(p, &backed)) != 0)
        snprintf(msg, msgcap, "reading the file's size failed: %s", qs_strerror(rc));
    else if (rc == 0 && p->meta.npages > backed) {
        snprintf(msg, msgcap, "the header counts %u pages; the file and its log hold %llu",
                 (unsigned)p->meta.npages, (unsigned long long)backed);
        rc = QS_CORRUPT;
    }
    uint8_t *seen = rc ? NULL : calloc(p->meta.npages ? p->meta.npages : 1, 1);
    if (rc == 0 && !seen)
        rc = QS_NOMEM;
    uint64_t records;
    for (int ns = 0; ns < PG_NAMESPACES && rc == 0; ns++) {
        bt_ctx bt = {p, 0, ns};
        rc = bt_check(&bt, seen, &records, msg, msgcap);
        if (rc && rc != QS_CORRUPT && !msg[0])
            snprintf(msg, msgcap, "reading the tree failed: %s", qs_strerror(rc));
    }
    if (rc == 0)
        rc = check_freelist(p, seen, msg, msgcap);
    for (uint32_t i = 1; rc == 0 && i < p->meta.npages; i++)
        if (!seen[i]) {
            snprintf(msg, msgcap, "page %u: neither in a tree nor on the free list", i);
            rc = QS_CORRUPT;
        }
    free(seen);
    pg_trim(p, 0);
    cs_view_unlock(c);
    if (!c->readonly)
        tx_writer_leave(c);
    return rc;
}

/* Where a copy of every record (compaction, backup) has got to. */
typedef struct copy_state {
    int ns;                     /* namespace being copied */
    int positioned;             /* path is on the next record of ns */
    int done;
    bt_path path;
    bt_buf k, v;
} copy_state;

/* The records a copy will make, for its progress (committed view). */
static int copy_total(pager *src, uint64_t *total)
{
    *total = 0;
    for (int ns = 0; ns < PG_NAMESPACES; ns++) {
        bt_ctx from = {src, 0, ns};
        uint64_t n;
        int rc = bt_total(&from, &n);
        if (rc)
            return rc;
        *total += n;
    }
    return 0;
}

/* Copies up to max more records of src (committed view) into dst's
 * transaction, each namespace in order, counting them in *progress; sets
 * st->done after the last.  The path stays valid between calls only while
 * src's committed view does not move: the caller holds its operation mutex
 * throughout, or src is a snapshot. */
static int copy_some(pager *src, pager *dst, copy_state *st, size_t max,
                     _Atomic uint64_t *progress)
{
    int rc = 0;
    while (!st->done && max > 0) {
        bt_ctx from = {src, 0, st->ns}, to = {dst, 1, st->ns};
        if (!st->positioned) {
            rc = bt_first(&from, &st->path);
            st->positioned = 1;
        }
        for (; rc == 0 && max > 0; max--) {
            uint64_t seq;
            bt_path at;
            st->k.len = st->v.len = 0;
            if ((rc = bt_read(&from, &st->path, &st->k, &st->v, 0, &seq)) != 0)
                break;
            bt_key pk = {st->k.data, (uint32_t)st->k.len, seq};
            if ((rc = bt_seek(&to, &pk, &at)) != 0 && rc != QS_NOTFOUND)
                break;
            if ((rc = bt_insert(&to, &at, &pk, st->v.data, st->v.len)) != 0)
                break;
            if ((rc = pg_trim(dst, 1)) != 0 || (rc = pg_trim(src, 0)) != 0)
                break;
            atomic_fetch_add_explicit(progress, 1, memory_order_relaxed);
            rc = bt_next(&from, &st->path);
        }
        if (rc == QS_NOTFOUND) {
            rc = 0;
            st->positioned = 0;
            st->done = ++st->ns == PG_NAMESPACES;
        }
        if (rc)
            break;
    }
    return rc;
}

static void copy_free(copy_state *st)
{
    free(st->k.data);
    free(st->v.data);
}

/* Copies every record of src (committed view) into dst's transaction. */
static int copy_records(pager *src, pager *dst, qs_casket *counted)
{
    copy_state st = {0};
    uint64_t total;
    int rc = copy_total(src, &total);
    if (rc == 0) {
        atomic_store(&counted->progress_done, 0);
        atomic_store(&counted->progress_total, total);
        rc = copy_some(src, dst, &st, SIZE_MAX, &counted->progress_done);
    }
    copy_free(&st);
    return rc;
}

/* A private casket a copy is written into (compaction, backup): no region,
 * no sync per commit (it is synced once, whole, by scratch_finish); its
 * file is created with permission bits perm. */
static int scratch_open(const char *path, unsigned perm, qs_casket **out)
{
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW;
    o.perm = perm;
    o.sync = 0;
    o.lock_timeout = 0;
    return cs_open(path, &o, 0, out);
}

/* Ends the scratch casket's transaction: commits it when rc is 0 (else
 * aborts it), checkpoints everything into its main file and syncs that, so
 * the file alone is the casket.  Returns the first error. */
static int scratch_finish(qs_casket *t, int rc)
{
    if (rc == 0) {
        int wrote;
        if ((rc = pg_commit_prepare(&t->pg)) == 0)
            rc = pg_commit_write(&t->pg, 0, &wrote);
        if (rc == 0 && wrote)
            pg_publish(&t->pg);
    }
    if (t->pg.in_txn)
        pg_abort(&t->pg);
    if (rc == 0 && (rc = tx_writer_enter(t)) == 0) {
        rc = tx_checkpoint(t, PG_SIZE);
        tx_writer_leave(t);
    }
    if (rc == 0 && os_fullsync(t->fd) != 0)
        rc = errno;
    return rc;
}

static void scratch_free(qs_casket *t)
{
    if (t) {
        pg_close(&t->pg);
        cs_destroy_sync(t);
        cs_free(t);
    }
}

/* Opens the directory holding path (for the sync that makes a rename or a
 * link durable).  0 and *dfd, or an error. */
static int open_dir_of(const char *path, int *dfd)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    if (!dir)
        return QS_NOMEM;
    *dfd = open(dir, O_RDONLY | O_CLOEXEC);
    free(dir);
    return *dfd < 0 ? errno : 0;
}

static int do_compact(qs_casket *c)
{
    if (c->readonly)
        return QS_READONLY;
    if (cs_owns(c))
        return QS_TXN;
    int rc = tx_writer_enter(c);
    if (rc)
        return rc;
    /* The main file is replaced: nobody else may have it open. */
    if (c->shared && (rc = sh_exclusive(&c->sh)) != 0) {
        tx_writer_leave(c);
        return rc;
    }
    size_t n = strlen(c->path);
    char *tmp = malloc(n + 16), *tmplog = malloc(n + 32);
    qs_casket *t = NULL;
    if (!tmp || !tmplog) {
        free(tmp);
        free(tmplog);
        tx_writer_leave(c);
        return QS_NOMEM;
    }
    snprintf(tmp, n + 16, "%s-compact", c->path);
    snprintf(tmplog, n + 32, "%s-compact%s", c->path, LOG_SUFFIX);
    if ((rc = tx_heal(c)) != 0 || (rc = tx_checkpoint(c, PG_SIZE)) != 0)
        goto out;
    /* The compacted file replaces the main file: it keeps its bits exactly
     * (the umask applied at its creation, not now). */
    struct stat ms;
    if (fstat(c->fd, &ms) != 0) {
        rc = errno;
        goto out;
    }
    if ((rc = scratch_open(tmp, ms.st_mode & 07777, &t)) != 0)
        goto out;
    if (fchmod(t->fd, ms.st_mode & 07777) != 0) {
        rc = errno;
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    t->pg.next_txn = c->pg.next_txn;
    pg_begin(&t->pg);
    t->pg.wmeta.next_id = c->pg.meta.next_id;
    t->pg.wmeta.next_seq = c->pg.meta.next_seq;
    rc = copy_records(&c->pg, &t->pg, c);
    pthread_mutex_unlock(&c->mu);
    rc = scratch_finish(t, rc);
    if (rc)
        goto out;
    /* The directory is opened before the rename, so that nothing can fail
     * between the rename and the sync that makes it durable. */
    int dfd;
    if ((rc = open_dir_of(c->path, &dfd)) != 0)
        goto out;
    /* The rename is the commit point: before it the old file is the casket,
     * after it the new one, and the log is empty either way. */
    if (rename(tmp, c->path) != 0) {
        rc = errno;
        close(dfd);
        goto out;
    }
    /* A failed directory sync is reported, but the new file is in place
     * now and this handle must move to it either way. */
    int dir_rc = os_fullsync(dfd) != 0 ? errno : 0;
    close(dfd);
    int newfd = t->fd;
    t->fd = -1;
    pthread_mutex_lock(&c->mu);
    pager fresh;
    rc = pg_open(&fresh, newfd, c->log_fd, 0, 0, c->pg.budget, c->checkpoint_bytes);
    if (rc == 0) {
        fresh.next_txn = c->pg.next_txn > fresh.next_txn ? c->pg.next_txn : fresh.next_txn;
        /* "since open" statistics go on counting */
        fresh.commits = c->pg.commits;
        fresh.checkpoints = c->pg.checkpoints;
        fresh.spilled = c->pg.spilled;
        fresh.pages_read = c->pg.pages_read;
        fresh.pages_shared = c->pg.pages_shared;
        fresh.log_frames_read = c->pg.log_frames_read;
        fresh.log.syncs = c->pg.log.syncs;
        pg_close(&c->pg);
        close(c->fd);
        c->pg = fresh;
        c->fd = newfd;
        c->version++;
        tx_layers_call(c, TX_INVALIDATE);
        tx_publish(c);
    } else {
        /* Our pager still points at the replaced file: writing there would
         * be lost, so refuse writes; reads see the last commit. */
        close(newfd);
        c->defunct = rc;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        rc = dir_rc;
out:
    scratch_free(t);
    if (tmplog)
        unlink(tmplog);
    if (tmp && rc)
        unlink(tmp);
    free(tmp);
    free(tmplog);
    if (c->shared)
        sh_share(&c->sh);
    tx_writer_leave(c);
    return rc;
}

/* ---- snapshots and backups ---------------------------------------------------- */

static int do_snapshot_open(qs_casket *c, uint64_t max_log_bytes, uint64_t cache_bytes,
                            qs_casket **out)
{
    if (!out)
        return QS_INVAL;
    *out = NULL;
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_READ;
    o.perm = c->perm;
    o.lock_timeout = c->lock_timeout;
    o.cache_bytes = cache_bytes;
    o.checkpoint_bytes = c->checkpoint_bytes;
    qs_casket *s;
    int rc = cs_open(c->path, &o, 1, &s);
    if (rc)
        return rc;
    /* The newest commit, pinned inside the checkpoint guard: a checkpoint
     * either ended before (we read its result) or sees the pin. */
    if ((rc = cs_view_lock(s)) == 0) {
        if (s->shared)
            sh_pin(&s->sh, max_log_bytes ? max_log_bytes : DEFAULT_SNAPSHOT_LOG);
        s->frozen = 1;
        cs_view_unlock(s);
    }
    if (rc) {
        qs_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

static char *suffixed(const char *path, const char *suffix)
{
    size_t n = strlen(path), m = strlen(suffix);
    char *p = malloc(n + m + 1);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, suffix, m + 1);
    }
    return p;
}

/* Records copied per operation of the snapshot: short enough that a
 * checkpoint never waits long for the copy, long enough to amortize the
 * guard. */
#define BACKUP_STEP 2048

/* Copies snapshot s into the scratch casket t, one step per operation. */
static int backup_copy(qs_casket *c, qs_casket *s, qs_casket *t)
{
    copy_state st = {0};
    uint64_t total = 0;
    int rc = cs_view_lock(s);
    if (rc)
        return rc;
    rc = copy_total(&s->pg, &total);
    t->pg.next_txn = s->pg.meta.txn + 1;
    pg_begin(&t->pg);
    t->pg.wmeta.next_id = s->pg.meta.next_id;
    t->pg.wmeta.next_seq = s->pg.meta.next_seq;
    cs_view_unlock(s);
    atomic_store(&c->progress_done, 0);
    atomic_store(&c->progress_total, total);
    while (rc == 0 && !st.done && (rc = cs_view_lock(s)) == 0) {
        rc = copy_some(&s->pg, &t->pg, &st, BACKUP_STEP, &c->progress_done);
        cs_view_unlock(s);
    }
    copy_free(&st);
    return rc;
}

static int do_backup(qs_casket *c, const char *dest)
{
    if (!dest || !*dest)
        return QS_INVAL;
    int rc = 0;
    char *dlog = suffixed(dest, LOG_SUFFIX), *dshm = suffixed(dest, SHM_SUFFIX);
    char *tmp = suffixed(dest, "-backup"), *tmplog = tmp ? suffixed(tmp, LOG_SUFFIX) : NULL;
    qs_casket *s = NULL, *t = NULL;
    if (!dlog || !dshm || !tmp || !tmplog) {
        rc = QS_NOMEM;
        goto out;
    }
    /* Never over another casket: its log would be replayed over the copy. */
    if (access(dest, F_OK) == 0 || access(dlog, F_OK) == 0 || access(dshm, F_OK) == 0) {
        rc = EEXIST;
        goto out;
    }
    if ((rc = do_snapshot_open(c, 0, 0, &s)) != 0 || (rc = scratch_open(tmp, c->perm, &t)) != 0)
        goto out;
    rc = scratch_finish(t, backup_copy(c, s, t));
    int dfd = -1;
    if (rc == 0)
        rc = open_dir_of(dest, &dfd);
    /* link, not rename: it fails rather than replace a file that appeared
     * at dest meanwhile. */
    if (rc == 0 && link(tmp, dest) != 0)
        rc = errno;
    if (rc == 0 && os_fullsync(dfd) != 0)
        rc = errno;
    if (dfd >= 0)
        close(dfd);
out:
    scratch_free(t);
    if (s)
        qs_close(s);
    if (tmp)
        unlink(tmp);
    if (tmplog)
        unlink(tmplog);
    free(dlog);
    free(dshm);
    free(tmp);
    free(tmplog);
    return rc;
}

static int do_progress(qs_casket *c, uint64_t *done, uint64_t *total)
{
    if (!done || !total)
        return QS_INVAL;
    *done = atomic_load(&c->progress_done);
    *total = atomic_load(&c->progress_total);
    return 0;
}
uint32_t qs_corrupt_page(qs_casket *c) { return c ? pg_bad_page(&c->pg) : 0; }

static int do_stat_get(qs_casket *c, qs_stat *st)
{
    if (!st)
        return QS_INVAL;
    memset(st, 0, sizeof *st);
    bt_ctx bt;
    READ_ENTER(c, &bt);
    pg_meta *m = pg_meta_of(&c->pg, bt.wview);
    st->page_size = PG_SIZE;
    st->format_version = c->pg.version;
    st->pages = m->npages;
    st->free_pages = m->free_count;
    bt_total(&bt, &st->records);
    bt_depth(&bt, &st->depth);
    st->log_bytes = c->pg.log_end - PG_SIZE;
    st->log_file_bytes = c->pg.log.alloc;
    st->commits = c->pg.commits;
    st->syncs = c->pg.log.syncs;
    st->checkpoints = c->pg.checkpoints;
    st->spilled_pages = c->pg.spilled;
    st->pages_read = c->pg.pages_read;
    st->pages_shared = c->pg.pages_shared;
    st->log_frames_read = c->pg.log_frames_read;
    cs_read_leave(c, &bt);
    st->open_cursors = atomic_load(&c->open_cursors);
    struct stat fs;
    if (fstat(c->fd, &fs) == 0)
        st->file_bytes = (uint64_t)fs.st_size;
    if (c->log_fd >= 0 && fstat(c->log_fd, &fs) == 0)
        st->log_file_bytes = (uint64_t)fs.st_size;
    pthread_mutex_lock(&c->wmu);
    st->in_transaction = (uint32_t)c->wbusy;
    pthread_mutex_unlock(&c->wmu);
    return 0;
}
/* ---- public entry points ---------------------------------------------------- */

int qs_sync(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_sync(c));
}

int qs_check(qs_casket *c, char *msg, size_t msgcap)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_check(c, msg, msgcap));
}

int qs_compact(qs_casket *c)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_compact(c));
}

int qs_snapshot_open(qs_casket *c, uint64_t max_log_bytes, uint64_t cache_bytes, qs_casket **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_snapshot_open(c, max_log_bytes, cache_bytes, out));
}

int qs_backup(qs_casket *c, const char *dest)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_backup(c, dest));
}

int qs_progress(qs_casket *c, uint64_t *done, uint64_t *total)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_progress(c, done, total));
}

int qs_stat_get(qs_casket *c, qs_stat *st)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_stat_get(c, st));
}
