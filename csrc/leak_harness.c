/*
 * leak_harness.c -- a long-running leak harness for the C core ("proof of
 * trust": seed 001's C program leaked a byte per loop; this one shows ours
 * does not).
 *
 * One process runs R rounds (default 100000; `-n N` or QS_LEAK_ROUNDS=N).
 * Each round opens a casket (cycling create / new / write / read-only over
 * three files), exercises records (put, putkeep, putdup, putdup_many, get,
 * getdup, count, out, outlist), a cursor walk (first/next/get/read/jump/
 * last/prev/out), the queue layer (put, put_many, get, peek, reserve,
 * release, ack, publish, len, list, clear), a transaction that aborts and
 * one that commits, and deliberate error paths (QS_INVAL, QS_TOOBIG,
 * QS_TXN misuse, QS_KEYEXIST, QS_NOTFOUND, QS_NOTRESERVED for an ack with a
 * wrong token, QS_READONLY, QS_NOTCASKET, ENOENT, QS_LOCKED), frees every
 * returned buffer with qs_free / qs_items_free, and closes.  A second,
 * long-lived handle stays open for the whole run and gets a little queue
 * and record traffic every round, so growth inside a handle (which
 * valgrind cannot see: it is freed at close) shows up too.
 *
 * Every return code is checked; an unexpected one is reported with its
 * line and the harness exits 2.
 *
 * Measurements, taken after warm-up (round min(1000, R/10)) and at the end:
 *   - RssAnon from /proc/self/status (see rss_kib), after malloc_trim(0);
 *   - the heap bytes in use (mallinfo2: uordblks + hblkhd) -- exact and
 *     immune to fragmentation;
 *   - the number of open file descriptors (/proc/self/fd).
 * Exit status 1 when, over the measured rounds:
 *   - RSS grew by more than QS_LEAK_MAX_RSS_KIB (default 2048 KiB), or
 *   - the heap in use grew by more than QS_LEAK_MAX_HEAP_KIB (default 256),
 *   - or any file descriptor leaked.
 * Why 2 MiB of RSS: each round's working set is a few tiny caskets (a
 * handful of 4 KiB pages in the page cache, small queue registries, a few
 * KiB of returned buffers), all freed at close; after warm-up the
 * allocator's arenas hold their high-water mark, and malloc_trim hands back
 * what fragmentation would otherwise leave resident, so the honest
 * steady-state drift is a few pages (we see ~0-100 KiB).  The smallest
 * possible leak -- one malloc(1) per round, a 32-byte chunk -- grows RSS by
 * ~3 MiB over 99000 measured rounds, so 2 MiB catches even that while
 * leaving ~20x headroom over the drift.  The heap check is sharper still:
 * one leaked chunk every 100 rounds is ~31 KiB; 256 KiB leaves room for
 * allocator bookkeeping only.  With fewer than QS_LEAK_MIN_ENFORCE (10000)
 * measured rounds the RSS and heap bounds are reported but not enforced
 * (too few rounds to separate a small leak from noise: that is what
 * `make leak-valgrind` / `make leak-asan` are for); fd leaks always fail.
 * Under ASan the RSS figure includes the quarantine and shadow memory and
 * means little; mallinfo2 then sees only glibc's (unused) heap.
 *
 * Other knobs: QS_LEAK_DIR (default /dev/shm when writable, else $TMPDIR
 * or /tmp) for the temporary directory; -q quiet (no progress lines).
 *
 * The negative control (`make leak-control`): built with
 * -DQS_LEAK_SEED_CONTROL, each round is seed 001's leak() (leak_seed.c: one
 * malloc(1), never freed) instead of the store's work, under the same
 * measurements, bounds and verdict, so the seed's `while(1) leak();` runs
 * as a bounded loop of -n rounds.  The control must FAIL both this verdict
 * and `make leak-valgrind`; the store's rounds are too slow (~5 ms) to
 * reach the enforced 10000 measured rounds in a test, the seed's are not.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qstore.h"

#define MIN_ENFORCE 10000L

static unsigned long g_round;
static int g_quiet;

#define FAIL(...)                                                            \
    do {                                                                     \
        fprintf(stderr, "leak_harness: round %lu: ", g_round);               \
        fprintf(stderr, __VA_ARGS__);                                        \
        fputc('\n', stderr);                                                 \
        exit(2);                                                             \
    } while (0)

/* Calls expr and requires it to return want. */
#define RC(expr, want)                                                       \
    do {                                                                     \
        int rc_ = (expr), want_ = (want);                                    \
        if (rc_ != want_)                                                    \
            FAIL("%s:%d: %s returned %d (%s), want %d (%s)", __FILE__,       \
                 __LINE__, #expr, rc_, qs_strerror(rc_), want_,              \
                 qs_strerror(want_));                                        \
    } while (0)

#define OK(expr) RC(expr, 0)

#define REQ(cond)                                                            \
    do {                                                                     \
        if (!(cond))                                                         \
            FAIL("%s:%d: check failed: %s", __FILE__, __LINE__, #cond);      \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The process's anonymous resident memory (RssAnon), where a leak lands.
 * Not VmRSS: that also counts the file pages a handle has mapped -- the
 * log's mapping for small sync-off commits (wal.c) -- which are the page
 * cache, bounded by the log's size, and grew VmRSS by 2.4 MiB over a run
 * on tmpfs with the heap flat.  VmRSS only where RssAnon is not reported. */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long anon = -1, vm = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "RssAnon:", 8) == 0)
            anon = strtol(line + 8, NULL, 10);
        else if (strncmp(line, "VmRSS:", 6) == 0)
            vm = strtol(line + 6, NULL, 10);
    }
    fclose(f);
    return anon >= 0 ? anon : vm;
}

static long heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long)(mi.uordblks + mi.hblkhd);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0) {
        fprintf(stderr, "leak_harness: bad %s=%s\n", name, s);
        exit(2);
    }
    return v;
}

/* ---- state ----------------------------------------------------------------- */

static char g_dir[1024];
static char g_files[3][1100];
static char g_notcasket[1100], g_missing[1100], g_long[1100];
static qs_casket *g_lh; /* the long-lived handle */
static long g_unique;   /* QS_LEAK_UNIQUE_QUEUES (default 1): the long-lived handle uses a
                           new queue name every round, so an in-memory registry that
                           never forgot a name would grow past the bound */

static const char Q1[] = "jobs", Q2[] = "fan-a", Q3[] = "fan-b";
#define SL(s) (s), (sizeof(s) - 1)

static void opts_for(qs_options *o, int mode)
{
    qs_options_init(o);
    o->flag = mode;
    o->sync = 0;
    o->lock_timeout = 0;
    o->cache_bytes = 256 * 1024;
}

/* Parses a getdup / cursor_read buffer, requiring count entries. */
static void walk_packed(const uint8_t *p, size_t len, uint64_t count, int pairs)
{
    size_t pos = 0;
    for (uint64_t i = 0; i < count * (pairs ? 2 : 1); i++) {
        REQ(pos + 4 <= len);
        uint32_t n = (uint32_t)p[pos] | (uint32_t)p[pos + 1] << 8 |
                     (uint32_t)p[pos + 2] << 16 | (uint32_t)p[pos + 3] << 24;
        pos += 4;
        REQ(pos + n <= len);
        pos += n;
    }
    REQ(pos == len);
}

/* ---- the parts of a round --------------------------------------------------- */

static void records(qs_casket *c, unsigned long r)
{
    char k[32], v[64];
    int kl = snprintf(k, sizeof k, "key-%lu", r % 97);
    int vl = snprintf(v, sizeof v, "value-%lu-%lu", r, r * 2654435761u);
    void *buf = NULL;
    size_t len = 0;
    uint64_t n = 0;

    /* persistent keys, bounded set: replaced, not accumulated */
    for (int i = 0; i < 8; i++) {
        char pk[16];
        int pl = snprintf(pk, sizeof pk, "p%d", i);
        OK(qs_put(c, pk, pl, v, vl));
    }
    OK(qs_put(c, k, kl, v, vl));
    RC(qs_putkeep(c, k, kl, v, vl), QS_KEYEXIST);
    OK(qs_putdup(c, k, kl, "dup1", 4));
    OK(qs_putdup(c, k, kl, "dup2-longer", 11));
    OK(qs_get(c, k, kl, &buf, &len));
    REQ(len == (size_t)vl && memcmp(buf, v, len) == 0);
    qs_free(buf);
    buf = NULL;
    OK(qs_getdup(c, k, kl, &buf, &len, &n));
    REQ(n == 3);
    walk_packed(buf, len, n, 0);
    qs_free(buf);
    buf = NULL;
    OK(qs_count(c, k, kl, &n));
    REQ(n == 3);
    OK(qs_records(c, &n));
    OK(qs_out(c, k, kl));
    uint64_t removed = 0;
    OK(qs_outlist(c, k, kl, &removed));
    REQ(removed == 2);
    RC(qs_get(c, k, kl, &buf, &len), QS_NOTFOUND);
    REQ(buf == NULL);
    OK(qs_getdup(c, k, kl, &buf, &len, &n));
    REQ(n == 0 && buf == NULL);
    RC(qs_out(c, k, kl), QS_NOTFOUND);

    /* a value big enough for an overflow chain, every 16th round */
    if (r % 16 == 0) {
        static uint8_t big[3 * QS_PAGE_SIZE + 123];
        memset(big, (int)(r & 0xff), sizeof big);
        OK(qs_put(c, SL("big"), big, sizeof big));
        OK(qs_get(c, SL("big"), &buf, &len));
        REQ(len == sizeof big && memcmp(buf, big, len) == 0);
        qs_free(buf);
        buf = NULL;
        OK(qs_out(c, SL("big")));
    }

    /* putdup_many: 3 records, removed again */
    const char keys[] = "m1m2m2";
    const uint64_t koff[] = {0, 2, 4, 6};
    const char vals[] = "abcdef";
    const uint64_t voff[] = {0, 1, 3, 6};
    OK(qs_putdup_many(c, 3, keys, koff, vals, voff));
    OK(qs_outlist(c, SL("m1"), &removed));
    REQ(removed == 1);
    OK(qs_outlist(c, SL("m2"), &removed));
    REQ(removed == 2);

    /* bad arguments */
    RC(qs_put(c, NULL, 3, v, vl), QS_INVAL);
    RC(qs_put(NULL, k, kl, v, vl), QS_INVAL);
    static uint8_t hugekey[QS_MAX_KEY + 1];
    RC(qs_put(c, hugekey, sizeof hugekey, v, vl), QS_TOOBIG);
    RC(qs_get(c, hugekey, sizeof hugekey, &buf, &len), QS_TOOBIG);
    REQ(buf == NULL);
    const uint64_t badoff[] = {0, 2, 1, 6};
    RC(qs_putdup_many(c, 3, keys, badoff, vals, voff), QS_INVAL);
}

static void cursor_walk(qs_casket *c, int writable)
{
    qs_cursor *cur = NULL;
    void *k = NULL, *v = NULL, *buf = NULL;
    size_t kl = 0, vl = 0, len = 0;
    uint64_t n = 0;
    int rc;

    OK(qs_cursor_open(c, &cur));
    REQ(cur != NULL);
    int steps = 0;
    for (rc = qs_cursor_first(cur); rc == 0; rc = qs_cursor_next(cur)) {
        OK(qs_cursor_get(cur, &k, &kl, &v, &vl));
        qs_free(k);
        qs_free(v);
        k = v = NULL;
        if (++steps == 4) {
            OK(qs_cursor_get(cur, &k, &kl, NULL, NULL));
            qs_free(k);
            k = NULL;
        }
    }
    RC(rc, QS_NOTFOUND);
    RC(qs_cursor_get(cur, &k, &kl, &v, &vl), QS_NOTFOUND);

    OK(qs_cursor_first(cur));
    OK(qs_cursor_read(cur, 5, 0, &buf, &len, &n));
    walk_packed(buf, len, n, 1);
    qs_free(buf);
    buf = NULL;
    OK(qs_cursor_jump(cur, SL("p3")));
    OK(qs_cursor_read(cur, 3, 1, &buf, &len, &n));
    walk_packed(buf, len, n, 1);
    qs_free(buf);
    buf = NULL;
    OK(qs_cursor_last(cur));
    rc = qs_cursor_prev(cur);
    REQ(rc == 0 || rc == QS_NOTFOUND);
    RC(qs_cursor_jump(cur, SL("\xff\xff\xff")), QS_NOTFOUND);

    if (writable) {
        /* a record put and removed through the cursor */
        OK(qs_putdup(c, SL("cur-x"), SL("1")));
        OK(qs_cursor_jump(cur, SL("cur-x")));
        rc = qs_cursor_out(cur);
        REQ(rc == 0 || rc == QS_NOTFOUND);
        RC(qs_get(c, SL("cur-x"), &buf, &len), QS_NOTFOUND);
    } else {
        OK(qs_cursor_first(cur));
        RC(qs_cursor_out(cur), QS_READONLY);
    }
    qs_cursor_close(cur);
    RC(qs_cursor_open(NULL, &cur), QS_INVAL);
}

static void queues(qs_casket *c, unsigned long r)
{
    qs_items *it = NULL, *res = NULL;
    uint64_t id = 0, first = 0, n = 0;
    char p[48];
    int pl = snprintf(p, sizeof p, "payload-%lu", r);

    /* an item an earlier round left reserved at close is back: drop it */
    OK(qs_queue_clear(c, SL(Q1), &n));
    OK(qs_queue_put(c, SL(Q1), p, pl, &id));
    static const char many[] = "onetwothree";
    static const uint32_t lens[] = {3, 3, 5};
    OK(qs_queue_put_many(c, SL(Q1), 3, many, 11, lens, &first));
    REQ(first == id + 1);
    OK(qs_queue_len(c, SL(Q1), &n));
    REQ(n == 4);
    OK(qs_queue_peek(c, SL(Q1), 2, &it));
    REQ(it->count == 2 && it->ids[0] == id);
    qs_items_free(it);
    it = NULL;
    OK(qs_queue_get(c, SL(Q1), 2, 0, &it));
    REQ(it->count == 2 && it->ids[0] == id &&
        it->off[1] - it->off[0] == (uint64_t)pl);
    qs_items_free(it);
    it = NULL;

    /* empty payloads given as (NULL, 0), which the API allows; a key and
     * a value likewise */
    OK(qs_queue_put(c, SL(Q3), NULL, 0, NULL));
    OK(qs_queue_put_many(c, SL(Q3), 0, NULL, 0, NULL, NULL));
    OK(qs_queue_get(c, SL(Q3), 1, 0, &it));
    REQ(it->count == 1 && it->off[1] == it->off[0]);
    qs_items_free(it);
    it = NULL;
    OK(qs_put(c, NULL, 0, NULL, 0));
    OK(qs_putdup(c, SL("empty"), NULL, 0));
    OK(qs_outlist(c, NULL, 0, NULL));
    OK(qs_outlist(c, SL("empty"), NULL));

    /* reserve; ack with a wrong token; release; reserve again; ack */
    OK(qs_queue_reserve(c, SL(Q1), 0, 0, &res));
    REQ(res->count == 1);
    uint64_t rid = res->ids[0], tok = res->token;
    RC(qs_queue_ack(c, SL(Q1), rid, tok + 12345), QS_NOTRESERVED);
    RC(qs_queue_release(c, SL(Q1), rid + 1000, tok), QS_NOTRESERVED);
    OK(qs_queue_release(c, SL(Q1), rid, tok));
    RC(qs_queue_release(c, SL(Q1), rid, tok), QS_NOTRESERVED);
    qs_items_free(res);
    res = NULL;
    OK(qs_queue_reserve(c, SL(Q1), 0, 30.0, &res));
    REQ(res->count == 1 && res->ids[0] == rid);
    OK(qs_queue_ack(c, SL(Q1), res->ids[0], res->token));
    RC(qs_queue_ack(c, SL(Q1), res->ids[0], res->token), QS_NOTRESERVED);
    qs_items_free(res);
    res = NULL;
    /* a reservation left open: dropped by close on even rounds */
    OK(qs_queue_reserve(c, SL(Q1), 0, 0, &res));
    if (r & 1)
        OK(qs_queue_release(c, SL(Q1), res->ids[0], res->token));
    qs_items_free(res);
    res = NULL;

    /* a batch reserved under one token, acknowledged all or none (two
     * items put first, so the queue keeps its length over the rounds) */
    OK(qs_queue_put(c, SL(Q1), p, pl, NULL));
    OK(qs_queue_put(c, SL(Q1), p, pl, NULL));
    OK(qs_queue_reserve_many(c, SL(Q1), 2, 0, 0, &res));
    REQ(res->count == 2);
    RC(qs_queue_ack_many(c, SL(Q1), 2, res->ids, res->token + 1), QS_NOTRESERVED);
    OK(qs_queue_ack_many(c, SL(Q1), 2, res->ids, res->token));
    qs_items_free(res);
    res = NULL;
    REQ(qs_corrupt_page(c) == 0);

    /* fan-out */
    const char names[] = "fan-afan-b";
    const uint64_t noff[] = {0, 5, 10};
    OK(qs_queue_publish(c, 2, names, noff, p, pl, &id));
    OK(qs_queue_get(c, SL(Q2), 10, 0, &it));
    REQ(it->count == 1 && it->ids[0] == id);
    qs_items_free(it);
    it = NULL;
    const uint64_t dupnoff[] = {0, 5, 10};
    RC(qs_queue_publish(c, 2, "fan-afan-a", dupnoff, p, pl, NULL), QS_INVAL);

    OK(qs_queue_list(c, &it));
    REQ(it->count >= 1);
    qs_items_free(it);
    it = NULL;
    OK(qs_queue_records(c, &n));

    /* bad arguments and empty queues */
    RC(qs_queue_put(c, "", 0, p, pl, NULL), QS_INVAL);
    RC(qs_queue_put(c, NULL, 3, p, pl, NULL), QS_INVAL);
    RC(qs_queue_put_many(c, SL(Q1), 3, many, 10, lens, NULL), QS_INVAL);
    RC(qs_queue_get(c, SL(Q1), 0, 0, &it), QS_INVAL);
    REQ(it == NULL);
    RC(qs_queue_publish(c, 0, names, noff, p, pl, NULL), QS_INVAL);
    RC(qs_queue_get(c, SL("never-used"), 1, 0, &it), QS_NOTFOUND);
    REQ(it == NULL);
    RC(qs_queue_reserve(c, SL(Q1), 0, -1.0, &it), QS_INVAL);

    /* leave the casket's queues empty (a reserved item, if any, stays) */
    OK(qs_queue_clear(c, SL(Q1), &n));
    OK(qs_queue_clear(c, SL(Q3), &n));
    OK(qs_queue_clear(c, SL(Q2), &n));
}

static void transactions(qs_casket *c, unsigned long r)
{
    qs_items *it = NULL;
    void *buf = NULL;
    size_t len = 0;
    uint64_t n = 0;

    /* misuse outside a transaction */
    RC(qs_commit(c), QS_TXN);
    RC(qs_abort(c), QS_TXN);
    REQ(!qs_in_transaction(c));

    /* one that aborts */
    OK(qs_begin(c));
    REQ(qs_in_transaction(c));
    RC(qs_begin(c), QS_TXN);
    RC(qs_sync(c), QS_TXN);
    RC(qs_compact(c), QS_TXN);
    OK(qs_put(c, SL("txn-a"), SL("gone")));
    OK(qs_putdup(c, SL("p0"), SL("gone too")));
    OK(qs_queue_put(c, SL(Q1), SL("x"), NULL));
    OK(qs_queue_put(c, SL(Q1), SL("y"), NULL));
    OK(qs_queue_reserve(c, SL(Q1), 0, 0, &it));
    RC(qs_queue_ack(c, SL(Q1), it->ids[0], it->token + 1), QS_NOTRESERVED);
    qs_items_free(it);
    it = NULL;
    OK(qs_queue_get(c, SL(Q1), 1, 0, &it));
    qs_items_free(it);
    it = NULL;
    RC(qs_put(c, NULL, 1, "v", 1), QS_INVAL); /* refused: txn stays usable */
    OK(qs_abort(c));
    RC(qs_get(c, SL("txn-a"), &buf, &len), QS_NOTFOUND);
    OK(qs_queue_len(c, SL(Q1), &n));
    REQ(n == 0);

    /* one that commits */
    OK(qs_begin(c));
    char v[32];
    int vl = snprintf(v, sizeof v, "c%lu", r);
    OK(qs_put(c, SL("txn-c"), v, vl));
    OK(qs_queue_put(c, SL(Q1), v, vl, NULL));
    OK(qs_get(c, SL("txn-c"), &buf, &len));
    qs_free(buf);
    buf = NULL;
    OK(qs_queue_get(c, SL(Q1), 1, 0, &it));
    REQ(it->count == 1);
    qs_items_free(it);
    it = NULL;
    OK(qs_commit(c));
    OK(qs_get(c, SL("txn-c"), &buf, &len));
    REQ(len == (size_t)vl && memcmp(buf, v, len) == 0);
    qs_free(buf);
    buf = NULL;
    OK(qs_out(c, SL("txn-c")));
}

static void readonly_round(qs_casket *c)
{
    void *buf = NULL;
    size_t len = 0;
    uint64_t n = 0;
    qs_items *it = NULL;
    int rc = qs_get(c, SL("p0"), &buf, &len);
    REQ(rc == 0 || rc == QS_NOTFOUND);
    qs_free(buf);
    buf = NULL;
    OK(qs_getdup(c, SL("p1"), &buf, &len, &n));
    qs_free(buf);
    buf = NULL;
    RC(qs_put(c, SL("k"), SL("v")), QS_READONLY);
    RC(qs_out(c, SL("p0")), QS_READONLY);
    RC(qs_begin(c), QS_READONLY);
    RC(qs_commit(c), QS_TXN);
    RC(qs_queue_put(c, SL(Q1), SL("v"), NULL), QS_READONLY);
    rc = qs_queue_peek(c, SL(Q1), 4, &it);
    REQ(rc == 0 || rc == QS_NOTFOUND);
    qs_items_free(it);
    it = NULL;
    OK(qs_queue_len(c, SL(Q1), &n));
    OK(qs_queue_list(c, &it));
    qs_items_free(it);
    it = NULL;
    RC(qs_compact(c), QS_READONLY);
}

static void open_errors(const char *held, int held_readonly)
{
    qs_options o;
    qs_casket *d = (qs_casket *)1;

    /* another handle (ours) holds it: starting it empty is refused, a
     * second handle opens beside it, and compacting needs it alone */
    opts_for(&o, QS_OPEN_NEW);
    RC(qs_open(held, &o, &d), QS_LOCKED);
    REQ(d == NULL);
    opts_for(&o, held_readonly ? QS_OPEN_READ : QS_OPEN_WRITE);
    OK(qs_open(held, &o, &d));
    if (!held_readonly)
        RC(qs_compact(d), QS_LOCKED);
    OK(qs_close(d));
    d = (qs_casket *)1;
    /* not a casket, read-only and read-write */
    opts_for(&o, (g_round & 1) ? QS_OPEN_READ : QS_OPEN_WRITE);
    d = (qs_casket *)1;
    RC(qs_open(g_notcasket, &o, &d), QS_NOTCASKET);
    REQ(d == NULL);
    /* missing, read-only and write */
    opts_for(&o, (g_round & 2) ? QS_OPEN_READ : QS_OPEN_WRITE);
    d = (qs_casket *)1;
    RC(qs_open(g_missing, &o, &d), ENOENT);
    REQ(d == NULL);
    /* bad arguments */
    opts_for(&o, 7);
    RC(qs_open(held, &o, &d), QS_INVAL);
    opts_for(&o, QS_OPEN_READ);
    o.lock_timeout = -1;
    RC(qs_open(held, &o, &d), QS_INVAL);
    RC(qs_open(NULL, NULL, &d), QS_INVAL);
    RC(qs_open("", NULL, &d), QS_INVAL);
    RC(qs_open(held, NULL, NULL), QS_INVAL);
    RC(qs_close(NULL), 0);
    /* the directory itself */
    opts_for(&o, QS_OPEN_READ);
    RC(qs_open(g_dir, &o, &d), EISDIR);
}

static void long_lived(unsigned long r)
{
    /* a bounded set of queue names and keys on the long-lived handle */
    char name[32], key[32];
    int nl = snprintf(name, sizeof name, "lq-%lu", g_unique ? r : r % 50);
    int kl = snprintf(key, sizeof key, "lk-%lu", r % 200);
    qs_items *it = NULL;
    OK(qs_put(g_lh, key, kl, name, nl));
    OK(qs_queue_put(g_lh, name, nl, key, kl, NULL));
    OK(qs_queue_reserve(g_lh, name, nl, 0, 0, &it));
    OK(qs_queue_ack(g_lh, name, nl, it->ids[0], it->token));
    qs_items_free(it);
    if (r % 3 == 0)
        OK(qs_out(g_lh, key, kl));
    if (r % 5000 == 4999) {
        char msg[256];
        OK(qs_check(g_lh, msg, sizeof msg));
        OK(qs_sync(g_lh));
    }
}

static void one_round(unsigned long r)
{
    qs_options o;
    qs_casket *c = NULL;
    int fi = (int)(r % 3);
    /* mode cycle per file: create, write, new, read-only (r/3 % 4) */
    static const int modes[4] = {QS_OPEN_CREATE, QS_OPEN_WRITE, QS_OPEN_NEW, QS_OPEN_READ};
    int mode = modes[(r / 3) % 4];
    opts_for(&o, mode);
    OK(qs_open(g_files[fi], &o, &c));
    REQ(c != NULL);
    qs_set_sync(c, 0);
    open_errors(g_files[fi], mode == QS_OPEN_READ);
    if (mode == QS_OPEN_READ) {
        readonly_round(c);
        cursor_walk(c, 0);
    } else {
        records(c, r);
        cursor_walk(c, 1);
        queues(c, r);
        transactions(c, r);
        if (r % 1000 == 7) {
            char msg[256];
            OK(qs_check(c, msg, sizeof msg));
            OK(qs_compact(c));
        }
    }
    qs_stat st;
    OK(qs_stat_get(c, &st));
    for (int e = QS_LAST_ERRCODE - 1; e <= 0; e++)
        REQ(qs_strerror(e) != NULL);
    if (r % 7 == 0)
        OK(qs_shutdown(c));
    OK(qs_close(c));
    long_lived(r);
}

/* Removes the temporary directory and everything in it (caskets, logs,
 * compaction leftovers). */
static void cleanup(void)
{
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[sizeof g_dir + 300];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
}

#ifdef QS_LEAK_SEED_CONTROL
void leak(void); /* leak_seed.c */
/* one_round is named, not called, so the control builds without warnings */
#define ROUND(r) ((void)(r), (void)one_round, leak())
#else
#define ROUND(r) one_round(r)
#endif

int main(int argc, char **argv)
{
    long rounds = env_long("QS_LEAK_ROUNDS", 100000);
    int opt;
    while ((opt = getopt(argc, argv, "n:q")) != -1) {
        if (opt == 'n') {
            char *end;
            rounds = strtol(optarg, &end, 10);
            if (*end || rounds < 1) {
                fprintf(stderr, "leak_harness: bad -n %s\n", optarg);
                return 2;
            }
        } else if (opt == 'q') {
            g_quiet = 1;
        } else {
            fprintf(stderr, "usage: %s [-n rounds] [-q]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    long max_rss = env_long("QS_LEAK_MAX_RSS_KIB", 2048);
    long max_heap = env_long("QS_LEAK_MAX_HEAP_KIB", 256);
    g_unique = env_long("QS_LEAK_UNIQUE_QUEUES", 1);
    long warm = rounds / 10 < 1000 ? rounds / 10 : 1000;

    /* tmpfs by default: close checkpoints and syncs even with sync off,
     * and on a disk those fdatasyncs, not the library, would set the pace */
    const char *base = getenv("QS_LEAK_DIR");
    if ((!base || !*base) && access("/dev/shm", W_OK | X_OK) == 0)
        base = "/dev/shm";
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/qs-leak-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        perror("leak_harness: mkdtemp");
        return 2;
    }
    atexit(cleanup);
    for (int i = 0; i < 3; i++)
        snprintf(g_files[i], sizeof g_files[i], "%s/c%d.qs", g_dir, i);
    snprintf(g_notcasket, sizeof g_notcasket, "%s/not-a-casket.txt", g_dir);
    snprintf(g_missing, sizeof g_missing, "%s/missing.qs", g_dir);
    snprintf(g_long, sizeof g_long, "%s/long.qs", g_dir);
    {
        FILE *f = fopen(g_notcasket, "w");
        if (!f) {
            perror("leak_harness: create not-a-casket");
            return 2;
        }
        for (int i = 0; i < 3 * QS_PAGE_SIZE; i++)
            fputc("this is not a casket\n"[i % 21], f);
        fclose(f);
    }
    qs_options o;
    opts_for(&o, QS_OPEN_NEW);
    int fds_start = count_fds();
    OK(qs_open(g_long, &o, &g_lh));

    printf("leak_harness: %ld rounds, warm-up %ld, bounds: RSS %ld KiB, heap %ld KiB "
           "(enforced when >= %ld measured rounds), dir %s\n",
           rounds, warm, max_rss, max_heap, MIN_ENFORCE, g_dir);
    fflush(stdout);

    long rss0 = 0, heap0 = 0;
    int fds0 = count_fds();
    double t0 = now(), tw = t0, tlast = t0;
    for (g_round = 0; g_round < (unsigned long)rounds; g_round++) {
        if ((long)g_round == warm) {
            malloc_trim(0);
            rss0 = rss_kib();
            heap0 = heap_bytes();
            fds0 = count_fds();
            tw = now();
            if (!g_quiet)
                printf("  warm-up done at round %lu: RSS %ld KiB, heap in use %ld KiB, %d fds\n",
                       g_round, rss0, heap0 / 1024, fds0);
        }
        ROUND(g_round);
        if (!g_quiet && g_round % 10000 == 9999 && now() - tlast > 0) {
            tlast = now();
            printf("  round %lu: RSS %ld KiB, heap %ld KiB, %.0f rounds/s\n", g_round + 1,
                   rss_kib(), heap_bytes() / 1024, (g_round + 1) / (tlast - t0));
            fflush(stdout);
        }
    }
    /* measured with the long-lived handle still open, as at warm-up */
    double t1 = now();
    malloc_trim(0);
    long rss1 = rss_kib(), heap1 = heap_bytes();
    int fds1 = count_fds();
    char msg[256];
    OK(qs_check(g_lh, msg, sizeof msg));
    OK(qs_close(g_lh));
    g_lh = NULL;
    int fds_closed = count_fds();
    long measured = rounds - warm;
    long drss = rss1 - rss0, dheap = heap1 - heap0;

    printf("leak_harness: %ld rounds in %.2f s, %.0f rounds/s\n", rounds, t1 - t0,
           rounds / (t1 - t0));
    printf("  RSS after warm-up %ld KiB, at end %ld KiB: growth %+ld KiB over %ld rounds "
           "(%+.4f KiB/round, bound %ld KiB)\n",
           rss0, rss1, drss, measured, measured ? (double)drss / measured : 0.0, max_rss);
    printf("  heap in use after warm-up %ld B, at end %ld B: growth %+ld B (%+.4f B/round, "
           "bound %ld KiB)\n",
           heap0, heap1, dheap, measured ? (double)dheap / measured : 0.0, max_heap);
    printf("  open fds after warm-up %d, at end %d; before the long-lived handle %d, "
           "after closing it %d\n", fds0, fds1, fds_start, fds_closed);
    (void)tw;

    int bad = 0;
    if (fds1 != fds0 || fds_closed != fds_start) {
        printf("FAIL: file descriptors leaked (%+d over the rounds, %+d overall)\n",
               fds1 - fds0, fds_closed - fds_start);
        bad = 1;
    }
    if (measured >= MIN_ENFORCE) {
        if (drss > max_rss) {
            printf("FAIL: RSS grew %ld KiB > %ld KiB\n", drss, max_rss);
            bad = 1;
        }
        if (dheap > max_heap * 1024) {
            printf("FAIL: heap in use grew %ld B > %ld KiB\n", dheap, max_heap);
            bad = 1;
        }
    } else {
        printf("  (only %ld measured rounds: RSS/heap bounds not enforced)\n", measured);
    }
    printf("%s\n", bad ? "leak_harness: FAILED" : "leak_harness: OK");
    return bad;
}
