/*
 * test_records.h -- helpers over the record API for the tests split from
 * test_basic.c (test_api.c, test_space.c, test_damage.c,
 * test_transactions.c, test_threads.c, test_processes.c): open with a
 * flag, put and get strings, the counts and stats of a handle, the
 * deterministic value of record i, a casket filled with n records.
 */
#ifndef TEST_RECORDS_H
#define TEST_RECORDS_H

#include "test_common.h"

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static inline qs_casket *open_mode(const char *path, int mode, int *rc)
{
    return tc_open(path, mode, 0, 0, 0, rc);
}

static inline int put_str(qs_casket *c, const char *k, const char *v)
{
    return qs_put(c, k, strlen(k), v, strlen(v));
}

/* 1 when key k has exactly the value v (first value) */
static inline int get_is(qs_casket *c, const char *k, const char *v)
{
    void *val = NULL;
    size_t vn = 0;
    int rc = qs_get(c, k, strlen(k), &val, &vn);
    int ok = rc == 0 && vn == strlen(v) && memcmp(val, v, vn) == 0;
    qs_free(val);
    return ok;
}

static inline int get_rc(qs_casket *c, const char *k)
{
    void *val = NULL;
    size_t vn = 0;
    int rc = qs_get(c, k, strlen(k), &val, &vn);
    qs_free(val);
    return rc;
}

static inline uint64_t records_of(qs_casket *c)
{
    uint64_t n = (uint64_t)-1;
    if (qs_records(c, &n) != 0)
        return (uint64_t)-1;
    return n;
}

static inline uint64_t count_of(qs_casket *c, const void *k, size_t kn)
{
    uint64_t n = (uint64_t)-1;
    if (qs_count(c, k, kn, &n) != 0)
        return (uint64_t)-1;
    return n;
}

static inline qs_stat stat_of(qs_casket *c)
{
    qs_stat st;
    memset(&st, 0, sizeof st);
    qs_stat_get(c, &st);
    return st;
}

/* deterministic value of record i, n bytes */
static inline void fill_val(unsigned char *p, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static inline int val_ok(const unsigned char *p, size_t n, size_t want_n,
                         uint64_t i)
{
    if (n != want_n)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (p[j] != (unsigned char)(i * 131 + j * 7 + (j >> 8)))
            return 0;
    return 1;
}

/* Fills a casket with n records "k%06d" -> fill_val(vlen, i). */
static inline int fill_records(qs_casket *c, int n, size_t vlen)
{
    unsigned char *v = malloc(vlen ? vlen : 1);
    int rc = qs_begin(c);
    for (int i = 0; i < n && rc == 0; i++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "k%06d", i);
        fill_val(v, vlen, (uint64_t)i);
        rc = qs_put(c, k, (size_t)kn, v, vlen);
    }
    if (rc == 0)
        rc = qs_commit(c);
    else
        qs_abort(c);
    free(v);
    return rc;
}

#endif /* TEST_RECORDS_H */
