/* group_commit.c -- synced one-put commits per second from C threads
 * sharing one casket handle, 1 thread against T: what group commit gives
 * without Python (no GIL hand-offs) in the way.
 *
 *   make -C csrc && cc -O2 -Icsrc bench/group_commit.c csrc/libqstore.a \
 *       -pthread -ldl -o /tmp/group_commit && /tmp/group_commit [T] [seconds] [dir]
 *
 * Each thread loops qs_put(key_i, 36-byte value) with sync on (every put
 * its own durable transaction) for the given time; the same is done with
 * one thread first, on a fresh casket each, and the physical floor -- a
 * 4 KiB pwrite + fdatasync at one offset, repeated -- is measured in the
 * same run.  The three are repeated `rounds` times, alternating, and the
 * medians printed. */
#define _GNU_SOURCE
#include "qstore.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

static qs_casket *g_casket;
static atomic_int g_stop;
static atomic_long g_done;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *writer(void *arg)
{
    long id = (long)(intptr_t)arg, n = 0;
    char key[32], val[36];
    memset(val, 'v', sizeof val);
    while (!atomic_load(&g_stop)) {
        int klen = snprintf(key, sizeof key, "%ld.%ld", id, n++);
        if (qs_put(g_casket, key, (size_t)klen, val, sizeof val) != 0) {
            fprintf(stderr, "put failed\n");
            exit(1);
        }
        atomic_fetch_add(&g_done, 1);
    }
    return NULL;
}

static double run(const char *dir, int threads, double seconds)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gc-%d.qs", dir, threads);
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_NEW;
    o.sync = 1;
    int rc = qs_open(path, &o, &g_casket);
    if (rc) {
        fprintf(stderr, "open %s: %s\n", path, qs_strerror(rc));
        exit(1);
    }
    pthread_t th[256];
    atomic_store(&g_stop, 0);
    atomic_store(&g_done, 0);
    double t0 = now_s();
    for (long i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&g_stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double rate = (double)atomic_load(&g_done) / (now_s() - t0);
    qs_stat st;
    if (getenv("GC_STATS") && qs_stat_get(g_casket, &st) == 0)
        printf("  %d threads: %ld puts, %llu commits, %llu syncs, %llu checkpoints\n", threads,
               atomic_load(&g_done), (unsigned long long)st.commits,
               (unsigned long long)st.syncs, (unsigned long long)st.checkpoints);
    qs_close(g_casket);
    char aux[4200];
    unlink(path);
    snprintf(aux, sizeof aux, "%s-log", path);
    unlink(aux);
    snprintf(aux, sizeof aux, "%s-shm", path);
    unlink(aux);
    return rate;
}

static double floor_rate(const char *dir, double seconds)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gc-floor", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char page[4096];
    memset(page, 'f', sizeof page);
    if (fd < 0 || pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || fsync(fd) != 0) {
        perror(path);
        exit(1);
    }
    long n = 0;
    double t0 = now_s(), t;
    while ((t = now_s()) - t0 < seconds) {
        if (pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || fdatasync(fd) != 0) {
            perror(path);
            exit(1);
        }
        n++;
    }
    close(fd);
    unlink(path);
    return (double)n / (t - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    const char *dir = argc > 3 ? argv[3] : ".";
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (threads < 1 || threads > 256 || !(seconds > 0) || rounds < 1 || rounds > 100) {
        fprintf(stderr, "usage: group_commit [threads 1..256] [seconds] [dir] [rounds]\n");
        return 2;
    }
    double fl[100], one[100], many[100];
    for (int r = 0; r < rounds; r++) {
        fl[r] = floor_rate(dir, seconds);
        one[r] = run(dir, 1, seconds);
        many[r] = run(dir, threads, seconds);
        printf("round %d: floor %.0f/s, 1 thread %.0f/s, %d threads %.0f/s\n", r + 1, fl[r],
               one[r], threads, many[r]);
    }
    double f = median(fl, rounds), o = median(one, rounds), m = median(many, rounds);
    printf("medians: floor %.0f, 1 thread %.0f (%.2fx floor), %d threads %.0f (%.2fx one thread)\n",
           f, o, o / f, threads, m, m / o);
    printf("%s  1 thread >= 0.9x floor\n%s  %d threads > 4x one thread\n",
           o >= 0.9 * f ? "PASS" : "FAIL", m > 4 * o ? "PASS" : "FAIL", threads);
    return 0;
}
