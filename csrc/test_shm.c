/*
 * test_shm.c -- the region processes share (shm.c), driven directly:
 * handles that die holding the write lock or the checkpoint guard, with
 * their slot taken again by a newcomer before anyone notices.
 *
 * Each "handle" is a child process; a pipe tells the parent when a child
 * has done its part, and a child that must stay alive blocks reading
 * another pipe until the parent closes it.  Waits that could hang run in
 * a child the parent kills after a deadline, so a regression fails instead
 * of hanging the suite.
 */
#include "test_common.h"
#include "test_region.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>


/* What a child does once attached; returns its exit status. */
typedef int (*child_fn)(sh_region *r);

typedef struct {
    child_fn fn;
    int hold;
} attach_arg;

/* The child of child_start: attaches, runs fn, reports its status byte,
 * then either exits at once (dies holding whatever fn took: _exit, no
 * sh_close) or, with hold, stays attached until released. */
static int attached_main(void *arg, int report, int release)
{
    const attach_arg *a = arg;
    sh_region r;
    int alone = 0;
    int status = sh_open(&r, tc_region_path, 0644, 2.0, &alone) == 0 && !alone ? a->fn(&r) : 90;
    char b = (char)status;
    if (write(report, &b, 1) != 1)
        return 91;
    if (a->hold)
        while (read(release, &b, 1) > 0)
            ;
    return status;
}

static int child_start(tc_child *ch, child_fn fn, int hold)
{
    attach_arg a = {fn, hold};
    return tc_child_start(ch, attached_main, &a);
}

/* Waits for the child's report; its status byte. */
static int child_report(tc_child *ch)
{
    char b = 99;
    if (read(ch->report, &b, 1) != 1)
        return 98;
    return b;
}

/* Runs fn in a child with a deadline (seconds): its exit status, or -1 if
 * it had to be killed. */
static int child_within(child_fn fn, double deadline)
{
    tc_child ch;
    if (child_start(&ch, fn, 0) != 0)
        return -2;
    double t0 = tc_now();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(ch.pid, &status, WNOHANG);
        if (w == ch.pid)
            break;
        if (tc_now() - t0 > deadline) {
            tc_child_kill(&ch);
            return -1;
        }
        usleep(2000);
    }
    close(ch.report);
    close(ch.release);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int take_wlock(sh_region *r)
{
    int died = 0;
    return sh_wlock(r, 1.0, &died) == 0 ? 0 : 10;
}

static int begin_checkpoint(sh_region *r)
{
    int died = 0;
    if (sh_wlock(r, 1.0, &died) != 0)
        return 10;
    return sh_ckpt_begin(r, 1.0) == 0 ? 0 : 11;
}

static int just_attach(sh_region *r)
{
    (void)r;
    return 0;
}

static int enter_op(sh_region *r)
{
    sh_op_enter(r);
    sh_op_leave(r);
    return 0;
}

static int wlock_after_death(sh_region *r)
{
    int died = 0;
    if (sh_wlock(r, 3.0, &died) != 0)
        return 20;
    sh_wunlock(r);
    return died ? 0 : 21;
}

/* A handle dies inside fn; a newcomer then takes the dead one's slot and
 * stays; a third handle runs after (within 3 s) and must get through. */
static void dies_then_slot_reused(child_fn fn, child_fn after)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    snprintf(tc_region_path, sizeof tc_region_path, "%s-shm", t.path);
    sh_region owner;
    REQUIRE(tc_region_init(&owner) == 0);
    REQUIRE(owner.fd >= 0);

    tc_child dying, newcomer;
    REQUIRE(child_start(&dying, fn, 0) == 0);
    CHECK_RC(child_report(&dying), 0);
    CHECK_RC(tc_child_end(&dying), 0);
    REQUIRE(child_start(&newcomer, just_attach, 1) == 0);
    CHECK_RC(child_report(&newcomer), 0);

    CHECK_RC(child_within(after, 3.0), 0);

    /* the parent, too, gets through */
    int died = 0;
    CHECK_RC(sh_wlock(&owner, 3.0, &died), 0);
    sh_wunlock(&owner);
    CHECK_RC(tc_child_end(&newcomer), 0);
    sh_close(&owner);
    tc_tmp_remove(&t);
}

static void wlock_holder_died_slot_reused(void)
{
    dies_then_slot_reused(take_wlock, wlock_after_death);
}

static void checkpointer_died_slot_reused(void)
{
    dies_then_slot_reused(begin_checkpoint, enter_op);
}

static void checkpointer_died_slot_free(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    snprintf(tc_region_path, sizeof tc_region_path, "%s-shm", t.path);
    sh_region owner;
    REQUIRE(tc_region_init(&owner) == 0);
    tc_child dying;
    REQUIRE(child_start(&dying, begin_checkpoint, 0) == 0);
    CHECK_RC(child_report(&dying), 0);
    CHECK_RC(tc_child_end(&dying), 0);
    CHECK_RC(child_within(enter_op, 3.0), 0);
    double t0 = tc_now();
    sh_op_enter(&owner);
    sh_op_leave(&owner);
    CHECK(tc_now() - t0 < 3.0);
    sh_close(&owner);
    tc_tmp_remove(&t);
}

/* A live checkpointer keeps operations out until it ends, then lets them
 * in: the guard is not simply ignored. */
static int began_fd = -1;   /* checkpoint_briefly writes a byte once inside */

static int checkpoint_briefly(sh_region *r)
{
    int died = 0;
    if (sh_wlock(r, 1.0, &died) != 0 || sh_ckpt_begin(r, 1.0) != 0)
        return 10;
    char b = 1;
    if (write(began_fd, &b, 1) != 1)
        return 12;
    usleep(300000);
    sh_ckpt_end(r);
    sh_wunlock(r);
    return 0;
}

static void live_checkpointer_keeps_ops_out(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    snprintf(tc_region_path, sizeof tc_region_path, "%s-shm", t.path);
    sh_region owner;
    REQUIRE(tc_region_init(&owner) == 0);
    int began[2];
    REQUIRE(pipe(began) == 0);
    began_fd = began[1];
    tc_child ck;
    REQUIRE(child_start(&ck, checkpoint_briefly, 1) == 0);
    char b = 0;
    CHECK(read(began[0], &b, 1) == 1);  /* it is inside its 300 ms checkpoint */
    close(began[0]);
    close(began[1]);
    double t0 = tc_now();
    sh_op_enter(&owner);
    double waited = tc_now() - t0;
    sh_op_leave(&owner);
    CHECK_RC(child_report(&ck), 0);
    CHECK(waited > 0.05);
    CHECK(waited < 2.0);
    CHECK_RC(tc_child_end(&ck), 0);
    sh_close(&owner);
    tc_tmp_remove(&t);
}

/* Whether process pid has path open. */
static int has_open(pid_t pid, const char *path)
{
    char dir[64], link[400], target[800];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            found = strcmp(target, path) == 0;
        }
    }
    closedir(d);
    return found;
}

/* An opener that created the region and failed removes it; one that was
 * waiting for it meanwhile must not settle on the removed file (it would
 * be alone there while the next opener is alone in a new one). */
/* The child of discarded_region_is_not_joined: drops the parent's
 * descriptor of region *arg (it must not count as its own), closes its
 * report (end of file tells the parent), then opens the region anew,
 * waiting up to 5 s: 0 when it made a new one at tc_region_path. */
static int joining_main(void *arg, int report, int release)
{
    (void)release;
    sh_forget(arg);
    close(report);
    sh_region b;
    int al = 0;
    int rc = sh_open(&b, tc_region_path, 0644, 5.0, &al);
    struct stat x, y;
    int same = rc == 0 && fstat(b.fd, &x) == 0 && stat(tc_region_path, &y) == 0 &&
               x.st_dev == y.st_dev && x.st_ino == y.st_ino;
    return rc ? 10 : !al ? 11 : !same ? 12 : 0;
}

static void discarded_region_is_not_joined(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    snprintf(tc_region_path, sizeof tc_region_path, "%s-shm", t.path);
    sh_region a;
    int alone = 0;
    REQUIRE_RC(sh_open(&a, tc_region_path, 0644, 1.0, &alone), 0);
    REQUIRE(alone && a.created);
    tc_child ch;
    REQUIRE(tc_child_start(&ch, joining_main, &a) == 0);
    char c;
    CHECK(read(ch.report, &c, 1) == 0);  /* the child dropped its copy */
    /* until the child holds the file open, waiting for byte 0 */
    for (double t0 = tc_now(); !has_open(ch.pid, tc_region_path) && tc_now() - t0 < 5;)
        usleep(1000);
    CHECK(has_open(ch.pid, tc_region_path));
    sh_discard(&a, tc_region_path);
    sh_close(&a);
    CHECK_RC(tc_child_end(&ch), 0);
    CHECK(access(tc_region_path, F_OK) == 0);  /* the child's own, new region */
    unlink(tc_region_path);
    tc_tmp_remove(&t);
}

int main(void)
{
    RUN(discarded_region_is_not_joined);
    RUN(wlock_holder_died_slot_reused);
    RUN(checkpointer_died_slot_reused);
    RUN(checkpointer_died_slot_free);
    RUN(live_checkpointer_keeps_ops_out);
    return tc_summary();
}
