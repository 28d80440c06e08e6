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
#include "shm.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char region_path[700];

static void region_init(sh_region *r)
{
    int alone = 0;
    REQUIRE_RC(sh_open(r, region_path, 0644, 1.0, &alone), 0);
    REQUIRE(alone);
    sh_commit cm = {.salt = 7, .log_end = 4096, .seq = 1};
    sh_init(r, &cm, 1);
    REQUIRE_RC(sh_share(r), 0);
}

/* What a child does once attached; returns its exit status. */
typedef int (*child_fn)(sh_region *r);

typedef struct {
    pid_t pid;
    int done_fd;        /* read end: one byte once the child did its part */
    int hold_fd;        /* write end: closing it lets a holding child exit */
} child;

/* Forks a child that attaches, runs fn, reports, then either exits at once
 * (dies holding whatever fn took: _exit, no sh_close) or, with hold, stays
 * attached until released. */
static int child_start(child *ch, child_fn fn, int hold)
{
    int done[2], keep[2];
    if (pipe(done) != 0 || pipe(keep) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(done[0]);
        close(keep[1]);
        sh_region r;
        int alone = 0;
        int status = sh_open(&r, region_path, 0644, 2.0, &alone) == 0 && !alone ? fn(&r) : 90;
        char b = (char)status;
        if (write(done[1], &b, 1) != 1)
            _exit(91);
        if (hold)
            while (read(keep[0], &b, 1) > 0)
                ;
        _exit(status);
    }
    close(done[1]);
    close(keep[0]);
    ch->pid = pid;
    ch->done_fd = done[0];
    ch->hold_fd = keep[1];
    return 0;
}

/* Waits for the child's report; its status byte. */
static int child_report(child *ch)
{
    char b = 99;
    if (read(ch->done_fd, &b, 1) != 1)
        return 98;
    return b;
}

static int child_finish(child *ch)
{
    close(ch->hold_fd);
    close(ch->done_fd);
    int status = 0;
    waitpid(ch->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs fn in a child with a deadline (seconds): its exit status, or -1 if
 * it had to be killed. */
static int child_within(child_fn fn, double deadline)
{
    child ch;
    if (child_start(&ch, fn, 0) != 0)
        return -2;
    double t0 = tc_now();
    int status = 0;
    for (;;) {
        pid_t w = waitpid(ch.pid, &status, WNOHANG);
        if (w == ch.pid)
            break;
        if (tc_now() - t0 > deadline) {
            kill(ch.pid, SIGKILL);
            waitpid(ch.pid, &status, 0);
            close(ch.done_fd);
            close(ch.hold_fd);
            return -1;
        }
        usleep(2000);
    }
    close(ch.done_fd);
    close(ch.hold_fd);
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
    snprintf(region_path, sizeof region_path, "%s-shm", t.path);
    sh_region owner;
    region_init(&owner);
    REQUIRE(owner.fd >= 0);

    child dying, newcomer;
    REQUIRE(child_start(&dying, fn, 0) == 0);
    CHECK_RC(child_report(&dying), 0);
    CHECK_RC(child_finish(&dying), 0);
    REQUIRE(child_start(&newcomer, just_attach, 1) == 0);
    CHECK_RC(child_report(&newcomer), 0);

    CHECK_RC(child_within(after, 3.0), 0);

    /* the parent, too, gets through */
    int died = 0;
    CHECK_RC(sh_wlock(&owner, 3.0, &died), 0);
    sh_wunlock(&owner);
    CHECK_RC(child_finish(&newcomer), 0);
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
    snprintf(region_path, sizeof region_path, "%s-shm", t.path);
    sh_region owner;
    region_init(&owner);
    child dying;
    REQUIRE(child_start(&dying, begin_checkpoint, 0) == 0);
    CHECK_RC(child_report(&dying), 0);
    CHECK_RC(child_finish(&dying), 0);
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
    snprintf(region_path, sizeof region_path, "%s-shm", t.path);
    sh_region owner;
    region_init(&owner);
    int began[2];
    REQUIRE(pipe(began) == 0);
    began_fd = began[1];
    child ck;
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
    CHECK_RC(child_finish(&ck), 0);
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
static void discarded_region_is_not_joined(void)
{
    tc_tmp t = {0};
    REQUIRE(tc_tmp_make(&t) == 0);
    snprintf(region_path, sizeof region_path, "%s-shm", t.path);
    sh_region a;
    int alone = 0;
    REQUIRE_RC(sh_open(&a, region_path, 0644, 1.0, &alone), 0);
    REQUIRE(alone && a.created);
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        sh_forget(&a);  /* the parent's descriptor: it must not count as ours */
        close(ready[0]);
        close(ready[1]);
        sh_region b;
        int al = 0;
        int rc = sh_open(&b, region_path, 0644, 5.0, &al);
        struct stat x, y;
        int same = rc == 0 && fstat(b.fd, &x) == 0 && stat(region_path, &y) == 0 &&
                   x.st_dev == y.st_dev && x.st_ino == y.st_ino;
        _exit(rc ? 10 : !al ? 11 : !same ? 12 : 0);
    }
    close(ready[1]);
    char c;
    CHECK(read(ready[0], &c, 1) == 0);  /* the child dropped its copy */
    close(ready[0]);
    /* until the child holds the file open, waiting for byte 0 */
    for (double t0 = tc_now(); !has_open(pid, region_path) && tc_now() - t0 < 5;)
        usleep(1000);
    CHECK(has_open(pid, region_path));
    sh_discard(&a, region_path);
    sh_close(&a);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_RC(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0);
    CHECK(access(region_path, F_OK) == 0);  /* the child's own, new region */
    unlink(region_path);
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
