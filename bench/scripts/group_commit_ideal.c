/* group_commit_ideal.c -- what group commit can reach on this machine with
 * no database at all: T threads each loop { append a 100-byte record to a
 * shared buffer under a mutex; wait until an fdatasync covers it }.  The
 * first waiter that finds no sync running writes the buffer (one pwrite at
 * a preallocated offset) and syncs for everyone.  With gather_us > 0 that
 * syncer first waits, up to gather_us, until every thread has a record in
 * the buffer -- the strategy the casket's grouped writes use.
 *
 *   cc -O2 -pthread bench/group_commit_ideal.c -o /tmp/gci
 *   /tmp/gci [threads] [seconds] [gather_us] [dir]
 *
 * Measured on 2 vCPUs: one thread 6,400-7,000/s; 8 threads 24,500-25,400/s
 * without gathering (two cohorts take turns, each sync covers about half of
 * the threads) and 28,000-30,600/s with gather_us = 400. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REC 100
#define AREA (4u << 20)     /* preallocated: syncs flush no size change */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int fd, syncing, nthreads;
static long gather_us;
static unsigned long appended, synced;
static char pending[64 * 1024];
static size_t npending;
static off_t write_at;
static atomic_int stop;
static atomic_long commits;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void wait_for_all(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += gather_us * 1000;
    while (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    while (appended - synced < (unsigned long)nthreads)
        if (pthread_cond_timedwait(&cv, &mu, &ts) != 0)
            break;
}

static void *committer(void *arg)
{
    (void)arg;
    char rec[REC];
    memset(rec, 'r', sizeof rec);
    char out[sizeof pending];
    while (!atomic_load(&stop)) {
        pthread_mutex_lock(&mu);
        if (npending + REC > sizeof pending)
            npending = 0;   /* only the sync pattern matters, not the bytes */
        memcpy(pending + npending, rec, REC);
        npending += REC;
        unsigned long mine = ++appended;
        if (gather_us && appended - synced >= (unsigned long)nthreads)
            pthread_cond_broadcast(&cv);
        while (synced < mine) {
            if (syncing) {
                pthread_cond_wait(&cv, &mu);
                continue;
            }
            syncing = 1;
            if (gather_us)
                wait_for_all();
            unsigned long target = appended;
            size_t len = npending;
            memcpy(out, pending, len);
            npending = 0;
            off_t at = write_at;
            write_at = (write_at + (off_t)len) % (AREA - sizeof pending);
            pthread_mutex_unlock(&mu);
            if (pwrite(fd, out, len, at) != (ssize_t)len || fdatasync(fd) != 0) {
                perror("pwrite/fdatasync");
                exit(1);
            }
            pthread_mutex_lock(&mu);
            syncing = 0;
            if (target > synced)
                synced = target;
            pthread_cond_broadcast(&cv);
        }
        pthread_mutex_unlock(&mu);
        atomic_fetch_add(&commits, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 8;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    gather_us = argc > 3 ? atol(argv[3]) : 0;
    const char *dir = argc > 4 ? argv[4] : ".";
    if (nthreads < 1 || nthreads > 256 || !(seconds > 0) || gather_us < 0 || gather_us > 100000) {
        fprintf(stderr, "usage: group_commit_ideal [threads 1..256] [seconds] [gather_us] [dir]\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/gci-%d.tmp", dir, (int)getpid());
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char *zeros = calloc(1, AREA);
    if (fd < 0 || !zeros || pwrite(fd, zeros, AREA, 0) != (ssize_t)AREA || fsync(fd) != 0) {
        perror(path);
        return 1;
    }
    free(zeros);
    pthread_t th[256];
    double t0 = now_s();
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, committer, NULL);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stop, 1);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    double rate = (double)atomic_load(&commits) / (now_s() - t0);
    printf("%d threads, gather %ld us: %.0f synced commits/s\n", nthreads, gather_us, rate);
    close(fd);
    unlink(path);
    return 0;
}
