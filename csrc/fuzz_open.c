/*
 * fuzz_open.c -- a fuzz target over the open / recover / read / check path.
 *
 * Requirement under test: whatever bytes the main file NAME and the log
 * NAME-log hold, qs_open and every read on the handle return an error or
 * valid data -- never a crash, a hang, an out-of-bounds access, a leak or
 * undefined behaviour.  Return codes are ignored; the sanitizers (ASan,
 * UBSan, libFuzzer's leak and timeout checks, or valgrind) are the oracle.
 *
 * Input layout (all fields optional: a short input reads as zeros):
 *
 *   byte 0       flags
 *                  bit 0  FIX_MAIN: before writing, reseal every whole page
 *                         of the main file (page number = its index,
 *                         checksum recomputed), so mutations get past the
 *                         checksum and reach the structure checks
 *                  bit 1  FIX_LOG: reseal the log header and every frame
 *                         that decodes (checksum only; the frame's page
 *                         number is kept)
 *                  bit 2  NO_LOG: leave NAME-log absent
 *                  bit 3  FIX_SALT: with FIX_LOG, stamp the header's salt
 *                         into every frame
 *                  bit 4  WRITES: after the reads on the read-write
 *                         handle, try a few writes (put, putdup, out,
 *                         queue get, keyed put) and a second check
 *   bytes 1..4   u32 little-endian: length of the main-file part (clamped
 *                to what the input holds)
 *   then         the main file's bytes, then the log's bytes (the rest)
 *
 * Each input is written to a private directory (under /dev/shm when it
 * exists; made once, reused), then: open read-only and read everything;
 * rewrite the files and open read-write (recovery + checkpoint) and read
 * everything (then the optional writes); after that close, reopen the
 * checkpointed result read-only and read it again.  "Read everything" is
 * qs_stat_get, qs_records, qs_check, a full cursor walk (first/next/get,
 * bounded), a short backward walk, qs_cursor_jump and qs_cursor_read,
 * qs_get / qs_getdup / qs_count of keys seen and a few fixed ones,
 * qs_queue_list and qs_queue_len / qs_queue_peek on each listed queue
 * (with its config, delayed count, pending list and the peeked items'
 * delivery records), qs_queue_records, and stream "s" with group "g"
 * (the corpus's semantics seed writes them): length, replay, pending
 * list.  The writes add to these too: a priority and a delayed put, a
 * reserve and fail, an append, a group read and its ack.
 *
 * Built two ways (csrc/fuzz.mk):
 *   - with clang -fsanitize=fuzzer: a libFuzzer target;
 *   - with -DFUZZ_STANDALONE: a main() that replays files and directories
 *     named on the command line (every regular file of a directory, in
 *     name order; *.py skipped), for gcc + ASan/UBSan or valgrind without
 *     clang.
 *     Exit status 0 when every input ran (whatever the library returned);
 *     3 when one ran past REPLAY_TIMEOUT_S (a hang, named on stderr).
 *     FUZZ_VERBOSE=1 in the environment prints each step's result.
 */
#include "qstore.h"
#include "pagefmt.h"
#include "wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    FL_FIX_MAIN = 1,
    FL_FIX_LOG = 2,
    FL_NO_LOG = 4,
    FL_FIX_SALT = 8,
    FL_WRITES = 16
};

#define HDR_BYTES 5u
#define FRAME_MAGIC 0x52465351u         /* "QSFR", as wal.c */
#define DELTA_MAGIC 0x44465351u         /* "QSFD", a delta frame, as wal.c */
#define FRAME_HDR 8u
#define MAX_WALK 20000u                 /* cursor steps per walk */
#define MAX_KEYS 8u                     /* keys remembered for point reads */
#define MAX_QUEUES 16u

static char *g_dir, *g_main, *g_log;
static int g_verbose;                   /* FUZZ_VERBOSE set: one line per step */
static uint8_t *g_buf;                  /* private copy of the input */
static size_t g_cap;

static void fatal(const char *what)
{
    perror(what);
    abort();
}

static void setup(void)
{
    if (g_dir)
        return;
    g_verbose = getenv("FUZZ_VERBOSE") != NULL;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
    if (!base)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    size_t n = strlen(base) + 32;
    g_dir = malloc(n);
    g_main = malloc(n + 8);
    g_log = malloc(n + 16);
    if (!g_dir || !g_main || !g_log)
        fatal("malloc");
    snprintf(g_dir, n, "%s/qsfuzz.XXXXXX", base);
    if (!mkdtemp(g_dir))
        fatal("mkdtemp");
    snprintf(g_main, n + 8, "%s/c", g_dir);
    snprintf(g_log, n + 16, "%s/c-log", g_dir);
}

static void cleanup(void)
{
    if (!g_dir)
        return;
    unlink(g_main);
    unlink(g_log);
    rmdir(g_dir);
}

static void write_file(const char *path, const uint8_t *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fatal(path);
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fatal("write");
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* Reseals the frames of a log image in place, as wal.c lays them out: an
 * 8-byte header (magic, hole start u16, hole end u16), the page's bytes
 * before the hole, the bytes after it.  The checksum (page offset
 * TR_CHECKSUM, always after the hole) is recomputed on the rebuilt page. */
static void fix_log(uint8_t *log, size_t n, int fix_salt)
{
    uint8_t page[PG_SIZE];
    if (n < PG_SIZE)
        return;
    wr32(log + TR_PGNO, 0);
    wal_page_seal(log);
    uint64_t salt = rd64(log + HDR_SALT);
    size_t off = PG_SIZE;
    while (n - off >= FRAME_HDR &&
           (rd32(log + off) == FRAME_MAGIC || rd32(log + off) == DELTA_MAGIC)) {
        if (rd32(log + off) == DELTA_MAGIC) {
            /* Left as it is: its checksum is wal.c's own.  Skipped by its
             * length, so that the frames after it are resealed. */
            size_t len = rd16(log + off + 4);
            if (len < FRAME_HDR || n - off < len)
                break;
            off += len;
            continue;
        }
        uint32_t hs = rd16(log + off + 4), he = rd16(log + off + 6);
        if (hs > he || he > PG_USABLE)
            break;
        size_t len = FRAME_HDR + PG_SIZE - (he - hs);
        if (n - off < len)
            break;
        uint8_t *f = log + off + FRAME_HDR;
        memcpy(page, f, hs);
        memset(page + hs, 0, he - hs);
        memcpy(page + he, f + hs, PG_SIZE - he);
        if (fix_salt)
            wr64(page + TR_SALT, salt);
        wal_page_seal(page);
        /* Copy back everything after the hole: trailer, salt, checksum. */
        memcpy(f + hs, page + he, PG_SIZE - he);
        off += len;
    }
}

static void write_files(const uint8_t *main, size_t mlen, const uint8_t *log,
                        size_t llen, int flags)
{
    write_file(g_main, main, mlen);
    if (flags & FL_NO_LOG)
        unlink(g_log);
    else
        write_file(g_log, log, llen);
}

/* ---- reading everything ---------------------------------------------------- */

typedef struct keyset {
    void *key[MAX_KEYS];
    size_t len[MAX_KEYS];
    unsigned n;
} keyset;

static void keys_add(keyset *ks, void *k, size_t klen)
{
    if (ks->n < MAX_KEYS && (ks->n == 0 || ks->len[ks->n - 1] != klen ||
                             memcmp(ks->key[ks->n - 1], k, klen) != 0)) {
        ks->key[ks->n] = k;
        ks->len[ks->n] = klen;
        ks->n++;
    } else
        qs_free(k);
}

static void keys_free(keyset *ks)
{
    for (unsigned i = 0; i < ks->n; i++)
        qs_free(ks->key[i]);
    ks->n = 0;
}

static void point_reads(qs_casket *c, const void *k, size_t klen)
{
    void *v = NULL, *all = NULL;
    size_t vlen = 0, alen = 0;
    uint64_t cnt = 0;
    qs_get(c, k, klen, &v, &vlen);
    qs_free(v);
    qs_getdup(c, k, klen, &all, &alen, &cnt);
    qs_free(all);
    qs_count(c, k, klen, &cnt);
}

static void walk(qs_casket *c, keyset *ks)
{
    qs_cursor *cur = NULL;
    if (qs_cursor_open(c, &cur) != 0)
        return;
    unsigned steps = 0;
    for (int rc = qs_cursor_first(cur); rc == 0 && steps < MAX_WALK; rc = qs_cursor_next(cur)) {
        void *k = NULL, *v = NULL;
        size_t klen = 0, vlen = 0;
        if (qs_cursor_get(cur, &k, &klen, &v, &vlen) == 0)
            keys_add(ks, k, klen);
        else
            qs_free(k);
        qs_free(v);
        steps++;
    }
    steps = 0;
    for (int rc = qs_cursor_last(cur); rc == 0 && steps < 64; rc = qs_cursor_prev(cur)) {
        void *k = NULL;
        size_t klen = 0;
        qs_cursor_get(cur, &k, &klen, NULL, NULL);
        qs_free(k);
        steps++;
    }
    for (unsigned i = 0; i < ks->n; i++) {
        if (qs_cursor_jump(cur, ks->key[i], ks->len[i]) == 0) {
            void *out = NULL;
            size_t outlen = 0;
            uint64_t cnt = 0;
            qs_cursor_read(cur, 16, (int)(i & 1), &out, &outlen, &cnt);
            qs_free(out);
        }
    }
    qs_cursor_jump(cur, "\xff\xff\xff", 3);
    qs_cursor_close(cur);
}

static void queues(qs_casket *c)
{
    qs_items *list = NULL;
    uint64_t n = 0;
    qs_queue_records(c, &n);
    if (qs_queue_list(c, &list) != 0) {
        qs_items_free(list);
        return;
    }
    for (size_t i = 0; list && i < list->count && i < MAX_QUEUES; i++) {
        const uint8_t *name = list->data + list->off[i];
        size_t nlen = (size_t)(list->off[i + 1] - list->off[i]);
        uint64_t len = 0;
        qs_queue_len(c, name, nlen, &len);
        qs_items *items = NULL;
        qs_queue_peek(c, name, nlen, 4, &items);
        for (size_t k = 0; items && k < items->count; k++) {
            uint32_t d = 0;
            void *why = NULL;
            size_t wl = 0;
            qs_queue_item_info(c, name, nlen, items->ids[k], &d, &why, &wl);
            qs_free(why);
        }
        qs_items_free(items);
        qs_queue_len(c, name, nlen, &len);
        qs_queue_delayed(c, name, nlen, &len);
        qs_queue_config cfg;
        if (qs_queue_config_get(c, name, nlen, &cfg) == 0)
            qs_free((void *)cfg.dead_letter);
        qs_pending *pend = NULL;
        size_t np = 0;
        qs_queue_pending(c, name, nlen, &pend, &np);
        qs_free(pend);
    }
    qs_items_free(list);
    qs_stream_len(c, "s", 1, &n);
    qs_items *got = NULL;
    qs_stream_read(c, "s", 1, 0, 8, &got);
    qs_items_free(got);
    got = NULL;
    qs_stream_pending(c, "s", 1, "g", 1, &got);
    qs_items_free(got);
}

static void writes(qs_casket *c, const keyset *ks)
{
    static const char big[5000];
    qs_put(c, "fuzz", 4, "v", 1);
    qs_putdup(c, "fuzz", 4, big, sizeof big);
    if (ks->n)
        qs_out(c, ks->key[0], ks->len[0]);
    qs_items *list = NULL;
    if (qs_queue_list(c, &list) == 0 && list && list->count) {
        qs_items *got = NULL;
        qs_queue_get(c, list->data + list->off[0], (size_t)(list->off[1] - list->off[0]),
                     2, 0, &got);
        qs_items_free(got);
        /* a keyed put reads the queue's key records: a duplicate of
         * "fk" and a batch with a repeat */
        uint32_t lens[2] = {1, 1}, kl[2] = {2, 2};
        uint64_t ids[2];
        qs_queue_put_keyed(c, list->data + list->off[0], (size_t)(list->off[1] - list->off[0]),
                           2, "ab", 2, lens, "fkfk", 4, kl, 0, 0, ids, NULL);
    }
    qs_items_free(list);
    qs_queue_put(c, "fq", 2, "item", 4, NULL);
    uint32_t one = 4;
    qs_queue_put_order(c, "fq", 2, 1, "prio", 4, &one, 0, 7, NULL);
    qs_queue_put_order(c, "fq", 2, 1, "late", 4, &one, 1e6, 2, NULL);
    qs_items *res = NULL;
    if (qs_queue_reserve(c, "fq", 2, 0, 0, &res) == 0)
        qs_queue_fail(c, "fq", 2, res->ids[0], res->token, "fuzz", 4);
    qs_items_free(res);
    uint64_t first = 0;
    qs_stream_group(c, "s", 1, "g", 1, QS_STREAM_FIRST, 0);
    qs_stream_append(c, "s", 1, 1, "more", 4, &one, 1.0, &first);
    res = NULL;
    if (qs_stream_read_group(c, "s", 1, "g", 1, "f", 1, 2, 0, 2.0, &res) == 0)
        qs_stream_ack(c, "s", 1, "g", 1, res->count, res->ids, NULL);
    qs_items_free(res);
    if (qs_begin(c) == 0) {
        qs_putdup(c, "a", 1, "b", 1);
        qs_putdup(c, "a", 1, "c", 1);
        if (ks->n > 1)
            qs_outlist(c, ks->key[1], ks->len[1], NULL);
        qs_commit(c);
    }
}

static void exercise(qs_casket *c, int do_writes)
{
    char msg[256];
    qs_stat st;
    uint64_t n = 0;
    keyset ks = {0};
    qs_stat_get(c, &st);
    qs_records(c, &n);
    int crc = qs_check(c, msg, sizeof msg);
    walk(c, &ks);
    if (g_verbose)
        fprintf(stderr, "  records %llu, pages %llu, log %llu, keys seen %u, check: %s%s%s\n",
                (unsigned long long)n, (unsigned long long)st.pages,
                (unsigned long long)st.log_bytes, ks.n, qs_strerror(crc), crc ? ": " : "",
                crc ? msg : "");
    for (unsigned i = 0; i < ks.n; i++)
        point_reads(c, ks.key[i], ks.len[i]);
    point_reads(c, "", 0);
    point_reads(c, "a", 1);
    point_reads(c, "key", 3);
    queues(c);
    if (do_writes) {
        writes(c, &ks);
        qs_check(c, msg, sizeof msg);
        keys_free(&ks);
        walk(c, &ks);
    }
    qs_stat_get(c, &st);
    keys_free(&ks);
}

static void run_one(const uint8_t *data, size_t size)
{
    setup();
    if (size + HDR_BYTES > g_cap) {
        free(g_buf);
        g_cap = size + HDR_BYTES + 4096;
        if (!(g_buf = malloc(g_cap)))
            fatal("malloc");
    }
    uint8_t hdr[HDR_BYTES] = {0};
    size_t h = size < HDR_BYTES ? size : HDR_BYTES;
    memcpy(hdr, data, h);
    size_t rest = size - h;
    memcpy(g_buf, data + h, rest);
    int flags = hdr[0];
    size_t mlen = rd32(hdr + 1);
    if (mlen > rest)
        mlen = rest;
    uint8_t *main = g_buf, *log = g_buf + mlen;
    size_t llen = rest - mlen;
    if (flags & FL_FIX_MAIN)
        for (size_t i = 0; (i + 1) * PG_SIZE <= mlen; i++) {
            wr32(main + i * PG_SIZE + TR_PGNO, (uint32_t)i);
            wal_page_seal(main + i * PG_SIZE);
        }
    if (flags & FL_FIX_LOG)
        fix_log(log, llen, flags & FL_FIX_SALT);

    qs_options o;
    qs_options_init(&o);
    o.lock_timeout = 0;
    o.sync = 0;
    o.cache_bytes = 64 * PG_SIZE;       /* small: eviction paths run too */
    qs_casket *c = NULL;

    /* 1. read-only: the files exactly as given. */
    write_files(main, mlen, log, llen, flags);
    o.flag = QS_OPEN_READ;
    int rc = qs_open(g_main, &o, &c);
    if (g_verbose)
        fprintf(stderr, " flags %#x main %zu log %zu: open r: %s\n", flags, mlen, llen,
                qs_strerror(rc));
    if (rc == 0) {
        exercise(c, 0);
        qs_close(c);
    }

    /* 2. read-write: recovery, checkpoint, new log generation. */
    write_files(main, mlen, log, llen, flags);
    o.flag = QS_OPEN_WRITE;
    rc = qs_open(g_main, &o, &c);
    int opened = rc == 0;
    if (g_verbose)
        fprintf(stderr, " open w: %s\n", qs_strerror(rc));
    if (opened) {
        exercise(c, flags & FL_WRITES);
        qs_close(c);
    }

    /* 3. what the read-write handle left behind, read-only. */
    if (opened) {
        o.flag = QS_OPEN_READ;
        rc = qs_open(g_main, &o, &c);
        if (g_verbose)
            fprintf(stderr, " reopen r: %s\n", qs_strerror(rc));
        if (rc == 0) {
            exercise(c, 0);
            qs_close(c);
        }
    }
}

#ifndef FUZZ_STANDALONE

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int registered;
    if (!registered) {
        registered = 1;
        atexit(cleanup);
    }
    run_one(data, size);
    return 0;
}

#else /* FUZZ_STANDALONE */

#include <signal.h>

/* libFuzzer calls an input that runs past -timeout a hang; the replay does
 * too, so a corpus input that hangs again fails the run instead of holding
 * it until CI's own limit.  Generous: valgrind runs ~30x slower. */
#define REPLAY_TIMEOUT_S 120u
static const char *g_replaying;

static void on_alarm(int sig)
{
    (void)sig;
    static const char pre[] = "fuzz_open: a hang: still running after the replay timeout: ";
    ssize_t w = write(2, pre, sizeof pre - 1);
    w = write(2, g_replaying, strlen(g_replaying));
    w = write(2, "\n", 1);
    (void)w;
    _exit(3);
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            fatal("malloc");
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        perror(path);
        free(buf);
        return 1;
    }
    if (g_verbose)
        fprintf(stderr, "%s\n", path);
    g_replaying = path;
    alarm(REPLAY_TIMEOUT_S);
    run_one(buf, n);
    alarm(0);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay(const char *path, unsigned *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t dl = strlen(e->d_name);
        if (e->d_name[0] == '.' || (dl > 3 && strcmp(e->d_name + dl - 3, ".py") == 0))
            continue;           /* hidden files, the corpus generator */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names)
                fatal("realloc");
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len)))
            fatal("malloc");
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            (*count)++;
            bad |= replay_file(names[i]);
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE-OR-DIR...\n", argv[0]);
        return 2;
    }
    signal(SIGALRM, on_alarm);
    int bad = 0;
    unsigned count = 0;
    for (int i = 1; i < argc; i++)
        bad |= replay(argv[i], &count);
    cleanup();
    free(g_buf);
    free(g_dir);
    free(g_main);
    free(g_log);
    printf("fuzz_open: replayed %u inputs%s\n", count, bad ? " (some unreadable)" : "");
    return bad;
}

#endif
