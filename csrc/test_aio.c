/*
 * test_aio.c -- asynchronous waiters (qaio.c, qs_aio_* in qstore.h): a
 * commit of this process fires a waiter by itself, another process's
 * commit through the watcher thread; disarming leaves nothing; closing
 * the casket fires its waiters and stops the watcher; bad arguments and
 * a notifier used across fork() are refused.
 */
#include "test_common.h"
#include <poll.h>
#include <pthread.h>

/* Whether the notifier's descriptor becomes readable within ms. */
static int readable(qs_aio *a, int ms)
{
    struct pollfd p = {.fd = qs_aio_fd(a), .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return n == 1 && (p.revents & POLLIN);
}

static qs_aio_stat stats(void)
{
    qs_aio_stat st;
    qs_aio_stats(&st);
    return st;
}

/* A new casket in a new directory and a notifier: 0, or -1. */
typedef struct {
    tc_tmp t;
    qs_casket *c;
    qs_aio *a;
} fx;

static int fx_open(fx *f)
{
    memset(f, 0, sizeof *f);
    if (tc_tmp_make(&f->t) != 0)
        return -1;
    f->c = tc_open(f->t.path, QS_OPEN_NEW, 0, 0, 0, NULL);
    return f->c && qs_aio_open(&f->a) == 0 ? 0 : -1;
}

static void fx_close(fx *f)
{
    qs_aio_close(f->a);
    if (f->c)
        CHECK_RC(qs_close(f->c), 0);
    tc_tmp_remove(&f->t);
}

static void local_commit_fires(void)
{
    fx f;
    REQUIRE(fx_open(&f) == 0);
    qs_casket *c = f.c;
    qs_aio *a = f.a;
    uint64_t id = 0, other = 0, got[4];
    size_t n = 9;
    CHECK_RC(qs_aio_arm(a, c, "a", 1, &id), 0);
    CHECK_RC(qs_aio_arm(a, c, "b", 1, &other), 0);
    CHECK(id >= 1 && other != id && qs_aio_armed(a) == 2);
    CHECK(!readable(a, 0));
    /* Told inside the commit, so readable the moment the put returns.
     * Which side counts the fire is a race only when the watcher is awake
     * at that moment (arm kicked it, and a loaded machine may not have run
     * it yet): it then finds the word moved and fires first, which is as
     * good.  So the put is retried on a new queue until one lands while the
     * watcher sleeps; a commit that did not tell its own process's waiters
     * would never count a local fire. */
    int local = 0;
    for (int try = 0; try < 50 && !local; try++) {
        char q[16] = "a";
        int len = 1;
        if (try) {
            CHECK_RC(qs_aio_fired(a, got, 4, &n), 0);  /* the last try's */
            len = snprintf(q, sizeof q, "r%d", try);
            CHECK_RC(qs_aio_arm(a, c, q, (size_t)len, &id), 0);
            usleep(10000);      /* let the watcher fall asleep again */
        }
        qs_aio_stat before = stats();
        CHECK_RC(qs_queue_put(c, q, (size_t)len, "x", 1, NULL), 0);
        qs_aio_stat mid = stats();
        CHECK(mid.fired_local + mid.fired_watcher ==
              before.fired_local + before.fired_watcher + 1);
        local = mid.fired_local == before.fired_local + 1;
        CHECK(readable(a, 0));
    }
    CHECK(local);
    CHECK_RC(qs_aio_fired(a, got, 4, &n), 0);
    CHECK(n == 1 && got[0] == id);
    CHECK(!readable(a, 0));         /* read empty with the last one */
    CHECK(qs_aio_armed(a) == 1);    /* b's waiter still waits */
    CHECK_RC(qs_aio_disarm(a, id), QS_NOTFOUND);   /* collected */
    CHECK_RC(qs_aio_disarm(a, other), 0);
    CHECK(qs_aio_armed(a) == 0 && stats().armed == 0);
    fx_close(&f);
}

/* Disarmed (armed, or fired and not collected) waiters are gone: a later
 * commit tells nobody. */
static void disarm_leaves_nothing(void)
{
    fx f;
    REQUIRE(fx_open(&f) == 0);
    qs_casket *c = f.c;
    qs_aio *a = f.a;
    uint64_t ids[200];
    char name[16];
    for (int i = 0; i < 200; i++) {
        int len = snprintf(name, sizeof name, "q%d", i);
        CHECK_RC(qs_aio_arm(a, c, name, (size_t)len, &ids[i]), 0);
    }
    CHECK(qs_aio_armed(a) == 200);
    CHECK_RC(qs_queue_put(c, "q0", 2, "x", 1, NULL), 0);  /* fires q0's */
    for (int i = 0; i < 200; i++)
        CHECK_RC(qs_aio_disarm(a, ids[i]), 0);
    CHECK(qs_aio_armed(a) == 0 && stats().armed == 0);
    CHECK(readable(a, 0));          /* the count of the fire stays... */
    uint64_t got[4];
    size_t n = 9;
    CHECK_RC(qs_aio_fired(a, got, 4, &n), 0);
    CHECK(n == 0 && !readable(a, 0));   /* ...and the first look empties it */
    for (int i = 0; i < 200; i++) {
        int len = snprintf(name, sizeof name, "q%d", i);
        CHECK_RC(qs_queue_put(c, name, (size_t)len, "y", 1, NULL), 0);
    }
    CHECK(!readable(a, 50));
    fx_close(&f);
}

/* The child opens the casket itself and puts one item once released. */
static int put_when_released(void *arg, int report_fd, int release_fd)
{
    const char *path = arg;
    qs_casket *c = tc_open(path, QS_OPEN_WRITE, 0, 0, 0, NULL);
    if (!c)
        _exit(2);
    char ch = 'o';
    if (write(report_fd, &ch, 1) != 1)
        _exit(3);
    while (read(release_fd, &ch, 1) > 0)
        ;
    int rc = qs_queue_put(c, "cross", 5, "z", 1, NULL);
    qs_close(c);
    _exit(rc == 0 ? 0 : 4);
}

static void other_process_fires_through_watcher(void)
{
    fx f;
    REQUIRE(fx_open(&f) == 0);
    qs_casket *c = f.c;
    qs_aio *a = f.a;
    tc_child ch;
    REQUIRE(tc_child_start(&ch, put_when_released, f.t.path) == 0);
    char b;
    CHECK(read(ch.report, &b, 1) == 1);
    uint64_t id = 0, got[2];
    size_t n = 0;
    CHECK_RC(qs_aio_arm(a, c, "cross", 5, &id), 0);
    qs_aio_stat before = stats();
    CHECK(before.watcher == 1);
    CHECK_RC(tc_child_end(&ch), 0);     /* releases it: it puts and exits */
    CHECK(readable(a, 10000));
    CHECK_RC(qs_aio_fired(a, got, 2, &n), 0);
    CHECK(n == 1 && got[0] == id);
    qs_aio_stat after = stats();
    CHECK(after.fired_watcher == before.fired_watcher + 1);
    CHECK(after.fired_local == before.fired_local);
    fx_close(&f);
}

static void close_fires_and_stops_watcher(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, NULL);
    qs_casket *d = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, NULL);
    REQUIRE(c != NULL && d != NULL);
    qs_aio *a = NULL;
    REQUIRE_RC(qs_aio_open(&a), 0);
    uint64_t ic = 0, id = 0, got[4];
    size_t n = 0;
    CHECK_RC(qs_aio_arm(a, c, "a", 1, &ic), 0);
    CHECK_RC(qs_aio_arm(a, d, "a", 1, &id), 0);
    qs_aio_stat before = stats();
    CHECK(before.watcher == 1 && before.handles == 2);
    CHECK_RC(qs_close(c), 0);
    CHECK_RC(qs_aio_fired(a, got, 4, &n), 0);
    CHECK(n == 1 && got[0] == ic);
    qs_aio_stat mid = stats();
    CHECK(mid.fired_closed == before.fired_closed + 1);
    CHECK(mid.watcher == 1 && mid.handles == 1);    /* d is still open */
    CHECK_RC(qs_close(d), 0);
    CHECK_RC(qs_aio_fired(a, got, 4, &n), 0);
    CHECK(n == 1 && got[0] == id);
    qs_aio_stat after = stats();
    CHECK(after.watcher == 0 && after.handles == 0 && after.armed == 0);
    qs_aio_close(a);
    tc_tmp_remove(&t);
}

static void bad_arguments(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, NULL);
    REQUIRE(c != NULL);
    qs_aio *a = (qs_aio *)0x1;
    CHECK_RC(qs_aio_open(NULL), QS_INVAL);
    REQUIRE_RC(qs_aio_open(&a), 0);
    uint64_t id = 77;
    CHECK_RC(qs_aio_arm(NULL, c, "a", 1, &id), QS_INVAL);
    CHECK_RC(qs_aio_arm(a, NULL, "a", 1, &id), QS_INVAL);
    CHECK_RC(qs_aio_arm(a, c, "a", 1, NULL), QS_INVAL);
    CHECK_RC(qs_aio_arm(a, c, "", 0, &id), QS_INVAL);
    CHECK_RC(qs_aio_arm(a, c, NULL, 1, &id), QS_INVAL);
    CHECK_RC(qs_aio_arm(a, c, "a", QS_MAX_QUEUE_NAME + 1, &id), QS_INVAL);
    CHECK(id == 77 && qs_aio_armed(a) == 0);
    CHECK_RC(qs_aio_disarm(a, 12345), QS_NOTFOUND);
    CHECK_RC(qs_aio_disarm(NULL, 1), QS_INVAL);
    size_t n = 5;
    uint64_t got[1];
    CHECK_RC(qs_aio_fired(NULL, got, 1, &n), QS_INVAL);
    CHECK(n == 0);
    CHECK_RC(qs_aio_fired(a, NULL, 1, &n), QS_INVAL);
    CHECK(qs_aio_fd(NULL) == -1 && qs_aio_armed(NULL) == 0);
    qs_aio_stats(NULL);
    qs_aio_close(NULL);
    CHECK_RC(qs_close(c), 0);
    c = tc_open(t.path, QS_OPEN_READ, 0, 0, 0, NULL);
    REQUIRE(c != NULL);
    CHECK_RC(qs_aio_arm(a, c, "a", 1, &id), QS_READONLY);
    CHECK_RC(qs_close(c), 0);
    CHECK_RC(qs_aio_arm(a, c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 0, NULL), "a", 1, &id), 0);
    CHECK_RC(qs_shutdown(c), 0);
    CHECK_RC(qs_aio_arm(a, c, "a", 1, &id), QS_CLOSED);
    CHECK_RC(qs_close(c), 0);
    qs_aio_close(a);
    tc_tmp_remove(&t);
}

static int use_inherited(void *arg, int report_fd, int release_fd)
{
    (void)report_fd;
    (void)release_fd;
    qs_aio *a = arg;
    uint64_t got[1];
    size_t n;
    int ok = qs_aio_fired(a, got, 1, &n) == QS_FORKED && qs_aio_disarm(a, 1) == QS_FORKED &&
             qs_aio_armed(a) == 0 && stats().armed == 0 && stats().watcher == 0;
    qs_aio_close(a);    /* frees the copy */
    _exit(ok ? 0 : 1);
}

static void notifier_across_fork(void)
{
    fx f;
    REQUIRE(fx_open(&f) == 0);
    qs_casket *c = f.c;
    qs_aio *a = f.a;
    uint64_t id;
    CHECK_RC(qs_aio_arm(a, c, "a", 1, &id), 0);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, use_inherited, a) == 0);
    CHECK_RC(tc_child_end(&ch), 0);
    CHECK(qs_aio_armed(a) == 1);    /* the parent's waiter is untouched */
    CHECK_RC(qs_queue_put(c, "a", 1, "x", 1, NULL), 0);
    CHECK(readable(a, 0));
    fx_close(&f);
}

typedef struct {
    qs_casket *c;
    qs_aio *a;
    int armed;
} arm_loop;

static void *arm_until_refused(void *arg)
{
    arm_loop *l = arg;
    uint64_t id;
    while (qs_aio_arm(l->a, l->c, "a", 1, &id) == 0)
        l->armed++;
    return NULL;
}

/* Arms racing a shutdown: however they interleave, once the handle is shut
 * down no waiter of it stays armed, it is off the list of handles, and the
 * watcher has stopped (an arm listed after the shutdown's own pass over the
 * waiters fires and takes the handle off itself). */
static void arm_racing_shutdown(void)
{
    int rounds = tc_small() ? 5 : 40;
    for (int round = 0; round < rounds; round++) {
        fx f;
        REQUIRE(fx_open(&f) == 0);
        arm_loop l = {f.c, f.a, 0};
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, arm_until_refused, &l) == 0);
        msleep(round % 4);
        CHECK_RC(qs_shutdown(f.c), 0);
        pthread_join(th, NULL);
        qs_aio_stat st = stats();
        CHECK(st.armed == 0 && st.handles == 0 && st.watcher == 0);
        CHECK(qs_aio_armed(f.a) == 0);
        fx_close(&f);
    }
}

int main(void)
{
    RUN(local_commit_fires);
    RUN(disarm_leaves_nothing);
    RUN(other_process_fires_through_watcher);
    RUN(close_fires_and_stops_watcher);
    RUN(bad_arguments);
    RUN(notifier_across_fork);
    RUN(arm_racing_shutdown);
    return tc_summary();
}
