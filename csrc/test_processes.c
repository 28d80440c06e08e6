/*
 * test_processes.c -- one casket opened by several processes: the write
 * lock between them (lock_timeout, QS_LOCKED, a holder that closes, one
 * killed with SIGKILL, one that commits while another waits), two
 * handles of one process writing in turn, and a checkpointer killed
 * between its steps (pwrite is interposed to die right after a chosen
 * write: the library is linked statically, so its calls land here first).
 */
#include "test_records.h"
#include <dlfcn.h>

/* ------------------------------------------------------------------ */
/* dying after a chosen write                                          */

enum { DIE_NEVER, DIE_AFTER_PAGE0, DIE_AFTER_LOG_HEADER };
static int die_after;   /* set in a child: which write it does not outlive */

static int fd_is(int fd, const char *suffix)
{
    char path[600];
    size_t n = tc_fd_path(fd, path, sizeof path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Set in a thread: its next read of the main file sleeps this long first
 * (an operation that stays inside the checkpoint guard). */
static _Thread_local long slow_read_ms;
/* Set once such a read has begun its sleep (the thread is inside its
 * operation): the main thread waits for it, not for a fixed time. */
static _Atomic int slow_read_asleep;

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    if (slow_read_ms && fd_is(fd, "/casket")) {
        atomic_store(&slow_read_asleep, 1);
        msleep(slow_read_ms);
        slow_read_ms = 0;
    }
    return real(fd, buf, len, off);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    ssize_t n = real(fd, buf, len, off);
    /* The page cache has the write: a SIGKILL now tears nothing. */
    if (die_after != DIE_NEVER && off == 0 && len == 4096 &&
        (die_after == DIE_AFTER_LOG_HEADER ? fd_is(fd, "-log")
                                           : fd_is(fd, "/casket")))
        raise(SIGKILL);
    return n;
}

/* ------------------------------------------------------------------ */
/* the inter-process lock                                              */

/* A child process that opens path and holds the write lock inside a
 * transaction that puts k=child: for hold_ms then commits (hold_ms >= 0),
 * or until its release reaches end of file, then closes without
 * committing.  It reports 'y' once the transaction is open. */
typedef struct {
    const char *path;
    long hold_ms;
} holder_arg;

static int txn_holder_main(void *arg, int report, int release)
{
    const holder_arg *a = arg;
    int rc;
    qs_casket *c = open_mode(a->path, QS_OPEN_WRITE, &rc);
    int ok_txn = c && qs_begin(c) == 0 && put_str(c, "k", "child") == 0;
    char ok = ok_txn ? 'y' : 'n';
    if (write(report, &ok, 1) != 1)
        return 3;
    if (!ok_txn)
        return 2;
    if (a->hold_ms >= 0) {
        msleep(a->hold_ms);
        if (qs_commit(c) != 0)
            return 4;
    } else {
        char b;
        while (read(release, &b, 1) > 0)
            ;
    }
    qs_close(c);
    return 0;
}

static int txn_holder(tc_child *ch, const char *path, long hold_ms)
{
    holder_arg a = {path, hold_ms};
    return tc_child_start(ch, txn_holder_main, &a);
}

/* Several processes open one casket read-write; the write lock is held for
 * a transaction, readers never wait for it, and a holder that dies lets
 * go. */
static void lock_other_process(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "v"), 0);
    CHECK_RC(qs_close(c), 0);

    tc_child holder;
    REQUIRE(txn_holder(&holder, t.path, -1) == 0);
    char ok = 0;
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');

    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_WRITE;
    o.lock_timeout = 0.2;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);   /* opening never waits for a writer */
    REQUIRE(c != NULL);
    /* a reader sees the last commit, not the other process's transaction */
    double t0 = tc_now();
    CHECK(get_is(c, "k", "v"));
    CHECK(tc_now() - t0 < 0.1);
    t0 = tc_now();
    rc = put_str(c, "k2", "x");
    double dt = tc_now() - t0;
    printf("  lock_timeout 0.2: put rc %d after %.3fs\n", rc, dt);
    CHECK_RC(rc, QS_LOCKED);
    CHECK(dt >= 0.15 && dt < 1.5);
    qs_set_sync(c, 1);
    CHECK_RC(qs_begin(c), QS_LOCKED);
    CHECK(!qs_in_transaction(c));
    qs_close(c);
    o.lock_timeout = 0;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    t0 = tc_now();
    if (c)
        CHECK_RC(put_str(c, "k2", "x"), QS_LOCKED);
    CHECK(tc_now() - t0 < 0.15);
    /* starting empty needs the file to ourselves */
    qs_casket *d = NULL;
    o.flag = QS_OPEN_NEW;
    CHECK_RC(qs_open(t.path, &o, &d), QS_LOCKED);
    CHECK(d == NULL);
    o.flag = QS_OPEN_WRITE;

    /* the holder closes without committing: its transaction is gone */
    CHECK(tc_child_end(&holder) == 0);
    if (c) {
        CHECK_RC(put_str(c, "k2", "x"), 0);
        CHECK(get_is(c, "k", "v"));
        qs_close(c);
    }

    /* a holder killed with SIGKILL releases the lock */
    REQUIRE(txn_holder(&holder, t.path, -1) == 0);
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');
    o.lock_timeout = 1;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    tc_child_kill(&holder);
    if (c) {
        CHECK_RC(put_str(c, "k3", "y"), 0);
        CHECK(get_is(c, "k", "v"));
        CHECK_RC(check_ok(c), 0);
        qs_close(c);
    }

    /* a writer waits for a holder that commits after 300 ms, then sees
     * its commit */
    o.lock_timeout = 5;
    c = NULL;
    CHECK_RC(qs_open(t.path, &o, &c), 0);
    REQUIRE(txn_holder(&holder, t.path, 300) == 0);
    CHECK(read(holder.report, &ok, 1) == 1 && ok == 'y');
    t0 = tc_now();
    if (c) {
        CHECK_RC(put_str(c, "k4", "z"), 0);
        dt = tc_now() - t0;
        printf("  waited %.3fs for a holder of 0.3s\n", dt);
        CHECK(dt > 0.1 && dt < 4);
        CHECK(get_is(c, "k", "child"));
        CHECK(get_is(c, "k4", "z"));
    }
    CHECK(tc_child_end(&holder) == 0);

    /* two handles in one process write in turn and see each other */
    d = NULL;
    CHECK_RC(qs_open(t.path, &o, &d), 0);
    if (c && d) {
        CHECK_RC(put_str(d, "k5", "d"), 0);
        CHECK(get_is(c, "k5", "d"));
        CHECK_RC(put_str(c, "k5", "c"), 0);
        CHECK(get_is(d, "k5", "c"));
        CHECK_RC(qs_begin(d), 0);
        CHECK_RC(put_str(d, "k6", "t"), 0);
        o.lock_timeout = 0;
        qs_casket *e = NULL;
        CHECK_RC(qs_open(t.path, &o, &e), 0);
        if (e) {
            CHECK(get_is(e, "k5", "c"));
            CHECK_RC(put_str(e, "k7", "blocked"), QS_LOCKED);
            qs_close(e);
        }
        CHECK_RC(qs_commit(d), 0);
        CHECK(get_is(c, "k6", "t"));
    }
    if (d)
        qs_close(d);
    if (c) {
        CHECK_RC(check_ok(c), 0);
        qs_close(c);
    }
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* a checkpointer killed halfway                                       */

/* A child that opens path, commits k=child and checkpoints (qs_sync),
 * dying at the write die_after names. */
static int dying_checkpointer_main(void *arg, int report, int release)
{
    (void)report;
    (void)release;
    int rc;
    qs_casket *c = open_mode(arg, QS_OPEN_WRITE, &rc);
    if (!c || put_str(c, "k", "child") != 0)
        return 2;
    memcpy(&die_after, (const char *)arg + strlen(arg) + 1, sizeof die_after);
    qs_sync(c);
    return 3;   /* the checkpoint never wrote what it should have died at */
}

/* Runs dying_checkpointer_main on path; its exit status. */
static int kill_checkpointer(const char *path, int die)
{
    char arg[sizeof ((tc_tmp *)0)->path + sizeof die];
    memcpy(arg, path, strlen(path) + 1);
    memcpy(arg + strlen(path) + 1, &die, sizeof die);
    tc_child ch;
    if (tc_child_start(&ch, dying_checkpointer_main, arg) != 0)
        return -1;
    return tc_child_end(&ch);
}

/* What a crash would leave now: t's main file and log copied into cut (a
 * new directory, no region), opened there alone, so recovery runs. */
static qs_casket *open_crash_copy(const tc_tmp *t, tc_tmp *cut, int *rc)
{
    *rc = QS_INVAL;
    if (tc_tmp_make(cut) != 0) {
        cut->dir[0] = 0;    /* nothing for tc_tmp_remove */
        return NULL;
    }
    if (tc_copy_file(t->path, cut->path) != 0 || tc_copy_file(t->log, cut->log) != 0)
        return NULL;
    return open_mode(cut->path, QS_OPEN_WRITE, rc);
}

/* A checkpoint killed after page 0 (the main file then holds the newest
 * commit while the log and the region still name the old generation) or
 * after the new log header (not yet published): a fresh open must see the
 * casket as it was committed, not QS_CORRUPT; the handle that stayed open
 * reads and writes on, and what it writes survives a reopen. */
static void checkpointer_killed_at(int die)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "k", "parent"), 0);
    CHECK_RC(put_str(c, "a", "1"), 0);

    CHECK_RC(kill_checkpointer(t.path, die), 128 + SIGKILL);

    qs_casket *d = NULL;
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_WRITE;
    rc = qs_open(t.path, &o, &d);
    if (rc)
        printf("  open after the kill: rc %d (%s) %s\n", rc, qs_strerror(rc), qs_open_detail());
    CHECK_RC(rc, 0);
    if (d) {
        CHECK(get_is(d, "k", "child"));
        CHECK(get_is(d, "a", "1"));
    }
    /* the open handle takes over the dead writer's lock and writes on */
    CHECK(get_is(c, "k", "child"));
    CHECK_RC(put_str(c, "b", "2"), 0);
    CHECK(get_is(c, "b", "2"));
    if (d) {
        CHECK(get_is(d, "b", "2"));
        CHECK_RC(put_str(d, "c", "3"), 0);
        CHECK_RC(check_ok(d), 0);
        qs_close(d);
    }
    CHECK(get_is(c, "c", "3"));
    /* a crash now (the files as they are, no handle left) loses nothing:
     * the commits since the kill were not appended behind page 0 */
    tc_tmp cut;
    qs_casket *r = open_crash_copy(&t, &cut, &rc);
    CHECK_RC(rc, 0);
    if (r) {
        CHECK(get_is(r, "k", "child") && get_is(r, "a", "1"));
        CHECK(get_is(r, "b", "2"));
        CHECK(get_is(r, "c", "3"));
        CHECK_RC(check_ok(r), 0);
        qs_close(r);
    }
    tc_tmp_remove(&cut);
    /* a third process opening now agrees */
    qs_casket *e = NULL;
    CHECK_RC(qs_open(t.path, &o, &e), 0);
    if (e) {
        CHECK(get_is(e, "b", "2") && get_is(e, "c", "3") && get_is(e, "k", "child"));
        qs_close(e);
    }
    CHECK_RC(qs_close(c), 0);
    /* and recovery, alone, finds every commit */
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    CHECK_RC(rc, 0);
    if (c) {
        CHECK(get_is(c, "k", "child") && get_is(c, "a", "1") && get_is(c, "b", "2") &&
              get_is(c, "c", "3"));
        CHECK_RC(check_ok(c), 0);
        qs_close(c);
    }
    tc_tmp_remove(&t);
}

static void checkpointer_killed_after_page0(void) { checkpointer_killed_at(DIE_AFTER_PAGE0); }

static void checkpointer_killed_after_log_header(void)
{
    checkpointer_killed_at(DIE_AFTER_LOG_HEADER);
}

static void *slow_get(void *arg)
{
    slow_read_ms = 2000;
    return (void *)(intptr_t)get_is(arg, "a", "1");
}

/* The writer that takes over cannot finish the dead checkpoint while
 * another handle stays inside an operation (250 ms): its write fails with
 * QS_LOCKED and it lets go of the lock as a dead holder would, so the next
 * write finishes the checkpoint first and survives a crash. */
static void checkpoint_finished_after_readers_left(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    CHECK_RC(put_str(c, "a", "1"), 0);
    CHECK_RC(kill_checkpointer(t.path, DIE_AFTER_PAGE0), 128 + SIGKILL);
    qs_casket *d = open_mode(t.path, QS_OPEN_WRITE, &rc);
    CHECK_RC(rc, 0);
    if (d) {
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, slow_get, d) == 0);
        for (int i = 0; i < 2000 && !atomic_load(&slow_read_asleep); i++)
            msleep(5);  /* until the reader is inside its operation */
        CHECK(atomic_load(&slow_read_asleep));
        CHECK_RC(put_str(c, "b", "2"), QS_LOCKED);
        void *got;
        pthread_join(th, &got);
        CHECK(got == (void *)1);
    }
    CHECK_RC(put_str(c, "b", "2"), 0);
    tc_tmp cut;
    qs_casket *r = open_crash_copy(&t, &cut, &rc);
    CHECK_RC(rc, 0);
    if (r) {
        CHECK(get_is(r, "k", "child") && get_is(r, "a", "1"));
        CHECK(get_is(r, "b", "2"));
        qs_close(r);
    }
    tc_tmp_remove(&cut);
    if (d)
        qs_close(d);    /* (a close checkpoints: only now) */
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* a checkpoint copies cached images: they must be the newest commit's  */

#define REPLACED_KEYS 400

static void replaced_key(char *k, size_t cap, int i) { snprintf(k, cap, "rk%05d", i); }

/* The child replaces every value, in commits of its own with sync off, and
 * ends without closing: its commits stay in the log, for the parent's
 * checkpoint to copy. */
static int replace_values(void *arg, int report, int release)
{
    (void)report;
    (void)release;
    int rc;
    qs_casket *c = open_mode(arg, QS_OPEN_WRITE, &rc);
    if (rc)
        return 1;
    char k[32];
    for (int i = 0; i < REPLACED_KEYS; i++) {
        replaced_key(k, sizeof k, i);
        if (put_str(c, k, "child's") != 0)
            return 2;
    }
    return 0;
}

/* The parent has read every page into its cache; another process then
 * rewrites all of them.  The parent's checkpoint copies the pages it holds
 * from its cache: only after its refresh replaced each stale image with
 * the child's, or the main file (and every open after it) would go back
 * to the parent's values. */
static void checkpoint_after_another_process_wrote(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    char k[32];
    for (int i = 0; i < REPLACED_KEYS; i++) {
        replaced_key(k, sizeof k, i);
        CHECK_RC(put_str(c, k, "parent's"), 0);
    }
    CHECK_RC(qs_sync(c), 0);    /* the main file has the parent's values */
    for (int i = 0; i < REPLACED_KEYS; i++) {
        replaced_key(k, sizeof k, i);
        CHECK(get_is(c, k, "parent's"));
    }
    tc_child ch;
    REQUIRE(tc_child_start(&ch, replace_values, t.path) == 0);
    CHECK(tc_child_end(&ch) == 0);
    qs_stat before = stat_of(c);
    CHECK_RC(qs_sync(c), 0);
    CHECK(stat_of(c).checkpoints == before.checkpoints + 1);
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    int wrong = 0;
    for (int i = 0; i < REPLACED_KEYS; i++) {
        replaced_key(k, sizeof k, i);
        wrong += !get_is(c, k, "child's");
    }
    CHECK(wrong == 0);
    if (wrong)
        printf("  %d of %d keys lost the child's value\n", wrong, REPLACED_KEYS);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ------------------------------------------------------------------ */
/* small sync-off commits through the log's mapping                    */

#define MAPPED_CHILD_KEYS 50

/* Reads the parent's small commits, then commits its own with a 64 KiB
 * checkpoint size: its checkpoint shrinks the log under the parent's
 * mapping.  Exit 0, or which check failed. */
static int shrink_under_mapping(void *arg, int report, int release)
{
    (void)report;
    (void)release;
    int rc;
    qs_casket *c = tc_open(arg, QS_OPEN_WRITE, 0, 0, 64u << 10, &rc);
    if (rc)
        return 1;
    char k[32], v[32];
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "m%04d", i);
        snprintf(v, sizeof v, "first %d", i);
        if (!get_is(c, k, v))
            return 2;
    }
    for (int i = 0; i < MAPPED_CHILD_KEYS; i++) {
        snprintf(k, sizeof k, "c%04d", i);
        if (put_str(c, k, "child's") != 0)
            return 3;
    }
    qs_stat st = stat_of(c);
    if (st.checkpoints == 0 || st.log_file_bytes > (2u << 20))
        return 4;
    return qs_close(c) == 0 ? 0 : 5;
}

/* With sync off a small commit is copied into a shared mapping of the log.
 * Another process reads those commits, and its checkpoint shrinks the log
 * to a fraction of what the mapping covers; the first process's commits
 * then go on past the shrunk end (a store into a stale mapping there
 * would be SIGBUS), and every commit of both is there after a reopen. */
static void small_commits_through_a_mapping_that_the_log_shrinks_under(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 64u << 20, &rc);
    REQUIRE_RC(rc, 0);
    /* A log of some 6 MiB, the tree left small: pages the main file has,
     * rewritten (new pages would go to the main file), then emptied. */
    static unsigned char val[300];
    char k[32], v[32];
    for (int round = 0; round < 3; round++) {
        CHECK_RC(qs_begin(c), 0);
        val[0] = (unsigned char)round;
        for (int i = 0; i < 20000; i++) {
            snprintf(k, sizeof k, "b%05d", i);
            if (round < 2)
                CHECK_RC(qs_put(c, k, strlen(k), val, sizeof val), 0);
            else
                CHECK_RC(qs_out(c, k, strlen(k)), 0);
        }
        CHECK_RC(qs_commit(c), 0);
        if (round == 0)
            CHECK_RC(qs_sync(c), 0);
    }
    CHECK(tc_mapped_bytes("-log") == 0);       /* big commits are written */
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "m%04d", i);
        snprintf(v, sizeof v, "first %d", i);
        CHECK_RC(put_str(c, k, v), 0);
    }
    uint64_t grown = stat_of(c).log_file_bytes, mapped = tc_mapped_bytes("-log");
    CHECK(grown > (6u << 20));
    CHECK(mapped > (6u << 20) && mapped <= grown);

    tc_child ch;
    REQUIRE(tc_child_start(&ch, shrink_under_mapping, t.path) == 0);
    int child = tc_child_end(&ch);
    CHECK(child == 0);
    if (child)
        printf("  the child failed check %d\n", child);
    long long shrunk = tc_file_size(t.log);
    REQUIRE(shrunk > 0);
    CHECK((uint64_t)shrunk < grown / 2);

    /* 1.5 MB of small commits: past the shrunk end of the log */
    int n = 8000;
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "m%04d", i % 200);
        snprintf(v, sizeof v, "second %d", i);
        CHECK_RC(put_str(c, k, v), 0);
    }
    CHECK(stat_of(c).log_bytes > (uint64_t)shrunk);
    mapped = tc_mapped_bytes("-log");
    CHECK(mapped > 0 && mapped <= stat_of(c).log_file_bytes);
    CHECK_RC(qs_close(c), 0);
    CHECK(tc_mapped_bytes("-log") == 0);

    c = open_mode(t.path, QS_OPEN_READ, &rc);
    REQUIRE_RC(rc, 0);
    int wrong = 0;
    for (int i = n - 200; i < n; i++) {
        snprintf(k, sizeof k, "m%04d", i % 200);
        snprintf(v, sizeof v, "second %d", i);
        wrong += !get_is(c, k, v);
    }
    for (int i = 0; i < MAPPED_CHILD_KEYS; i++) {
        snprintf(k, sizeof k, "c%04d", i);
        wrong += !get_is(c, k, "child's");
    }
    CHECK(wrong == 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(lock_other_process);
    RUN(checkpointer_killed_after_page0);
    RUN(checkpointer_killed_after_log_header);
    RUN(checkpoint_finished_after_readers_left);
    RUN(checkpoint_after_another_process_wrote);
    RUN(small_commits_through_a_mapping_that_the_log_shrinks_under);
    return tc_summary();
}
