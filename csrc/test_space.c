/*
 * test_space.c -- sizes and space: a 64 MiB value, 200,000 duplicates of
 * one key, keys and values at the sizes where the page layout changes,
 * compaction, the file and log not growing under churn, and the log
 * length at which a checkpoint comes.
 * QS_TEST_SCALE=small shrinks the big cases (64 MiB value -> 8 MiB,
 * 200,000 duplicates -> 20,000, ...).
 */
#include "test_records.h"

static void big_value(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    size_t n = tc_small() ? (8u << 20) : (64u << 20);
    unsigned char *big = malloc(n);
    REQUIRE(big != NULL);
    fill_val(big, n, 1);
    CHECK_RC(qs_put(c, "small", 5, "x", 1), 0);
    CHECK_RC(qs_put(c, "big", 3, big, n), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s1 = stat_of(c);
    CHECK(s1.file_bytes >= n);

    void *v = NULL;
    size_t vn = 0;
    CHECK_RC(qs_get(c, "big", 3, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 1));
    qs_free(v);
    CHECK_RC(check_ok(c), 0);

    /* survives a reopen */
    CHECK_RC(qs_close(c), 0);
    c = open_mode(t.path, QS_OPEN_WRITE, &rc);
    REQUIRE_RC(rc, 0);
    v = NULL;
    CHECK_RC(qs_get(c, "big", 3, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 1));
    qs_free(v);

    /* outlist frees its pages */
    uint64_t removed = 0;
    CHECK_RC(qs_outlist(c, "big", 3, &removed), 0);
    CHECK(removed == 1);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s2 = stat_of(c);
    uint64_t want_free = (uint64_t)(n / QS_PAGE_SIZE) * 99 / 100;
    if (s2.free_pages < want_free)
        printf("  free_pages after outlist: %" PRIu64 " (want >= %" PRIu64
               ")\n", s2.free_pages, want_free);
    CHECK(s2.free_pages >= want_free);
    CHECK_RC(check_ok(c), 0);

    /* a new value of the same size reuses them */
    fill_val(big, n, 2);
    CHECK_RC(qs_put(c, "big2", 4, big, n), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s3 = stat_of(c);
    printf("  file_bytes: after first put %" PRIu64 ", after reuse %" PRIu64
           " (free pages %" PRIu64 " -> %" PRIu64 ")\n", s1.file_bytes,
           s3.file_bytes, s2.free_pages, s3.free_pages);
    CHECK(s3.file_bytes <= s1.file_bytes + (1u << 20));
    v = NULL;
    CHECK_RC(qs_get(c, "big2", 4, &v, &vn), 0);
    CHECK(v && val_ok(v, vn, n, 2));
    qs_free(v);
    CHECK(get_is(c, "small", "x"));
    CHECK_RC(check_ok(c), 0);

    /* a big value inside a transaction that is aborted leaves nothing */
    CHECK_RC(qs_begin(c), 0);
    CHECK_RC(qs_putdup(c, "big2", 4, big, n / 2), 0);
    CHECK(count_of(c, "big2", 4) == 2);
    CHECK_RC(qs_abort(c), 0);
    CHECK(count_of(c, "big2", 4) == 1);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    free(big);
    tc_tmp_remove(&t);
}

static void many_dups(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const uint64_t N = (uint64_t)tc_scaled(200000, 10);
    CHECK_RC(put_str(c, "a", "before"), 0);
    CHECK_RC(put_str(c, "c", "after"), 0);

    /* in batches: putdup_many and plain putdup inside a transaction */
    const size_t B = 5000;
    uint64_t *koff = malloc((B + 1) * sizeof *koff);
    uint64_t *voff = malloc((B + 1) * sizeof *voff);
    char *keys = malloc(B);
    unsigned char *vals = malloc(B * 8);
    memset(keys, 'b', B);
    uint64_t i = 0;
    int batch = 0;
    while (i < N) {
        size_t m = N - i < B ? (size_t)(N - i) : B;
        if (batch++ % 2 == 0) {
            for (size_t j = 0; j <= m; j++) {
                koff[j] = j;
                voff[j] = 8 * j;
            }
            for (size_t j = 0; j < m; j++) {
                uint64_t x = i + j;
                memcpy(vals + 8 * j, &x, 8);
            }
            rc = qs_putdup_many(c, m, keys, koff, vals, voff);
            CHECK_RC(rc, 0);
        } else {
            CHECK_RC(qs_begin(c), 0);
            for (size_t j = 0; j < m; j++) {
                uint64_t x = i + j;
                rc = qs_putdup(c, "b", 1, &x, 8);
                if (rc)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
        }
        if (rc)
            break;
        i += m;
    }
    free(koff);
    free(voff);
    free(keys);
    free(vals);
    REQUIRE(i == N);
    CHECK(count_of(c, "b", 1) == N);
    CHECK(records_of(c) == N + 2);
    CHECK(count_of(c, "a", 1) == 1);
    CHECK(count_of(c, "c", 1) == 1);
    CHECK_RC(check_ok(c), 0);

    /* getdup: all in insertion order */
    void *out = NULL;
    size_t outlen = 0;
    uint64_t cnt = 0;
    CHECK_RC(qs_getdup(c, "b", 1, &out, &outlen, &cnt), 0);
    CHECK(cnt == N);
    CHECK(outlen == N * 12);
    if (out && outlen == N * 12) {
        uint64_t bad = 0;
        for (uint64_t j = 0; j < N; j++) {
            const unsigned char *p = (const unsigned char *)out + 12 * j;
            uint64_t x;
            memcpy(&x, p + 4, 8);
            if (tc_le32(p) != 8 || x != j)
                bad++;
        }
        CHECK(bad == 0);
    }
    qs_free(out);

    /* cursor: forward from "b" and backward from "c" */
    qs_cursor *cur = NULL;
    CHECK_RC(qs_cursor_open(c, &cur), 0);
    if (cur) {
        uint64_t bad = 0, j = 0;
        rc = qs_cursor_jump(cur, "b", 1);
        while (rc == 0) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            if (qs_cursor_get(cur, &k, &kn, &v, &vn) != 0) {
                bad++;
                break;
            }
            int isb = kn == 1 && memcmp(k, "b", 1) == 0;
            if (isb) {
                uint64_t x = 0;
                if (vn == 8)
                    memcpy(&x, v, 8);
                if (vn != 8 || x != j)
                    bad++;
                j++;
            }
            qs_free(k);
            qs_free(v);
            if (!isb)
                break;
            rc = qs_cursor_next(cur);
        }
        CHECK(bad == 0);
        CHECK(j == N);
        /* backward */
        CHECK_RC(qs_cursor_jump(cur, "c", 1), 0);
        j = N;
        bad = 0;
        while ((rc = qs_cursor_prev(cur)) == 0) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            if (qs_cursor_get(cur, &k, &kn, &v, &vn) != 0) {
                bad++;
                break;
            }
            int isb = kn == 1 && memcmp(k, "b", 1) == 0;
            if (isb) {
                uint64_t x = 0;
                if (vn == 8)
                    memcpy(&x, v, 8);
                if (vn != 8 || x != j - 1)
                    bad++;
                j--;
            }
            qs_free(k);
            qs_free(v);
            if (!isb)
                break;
        }
        CHECK(bad == 0);
        CHECK(j == 0);
        qs_cursor_close(cur);
    }

    /* qs_out removes in insertion order */
    const uint64_t OUTS = (uint64_t)tc_scaled(3000, 10);
    CHECK_RC(qs_begin(c), 0);
    for (uint64_t j = 0; j < OUTS; j++) {
        if (j % 250 == 0) {
            void *v = NULL;
            size_t vn = 0;
            uint64_t x = ~0ull;
            CHECK_RC(qs_get(c, "b", 1, &v, &vn), 0);
            if (v && vn == 8)
                memcpy(&x, v, 8);
            qs_free(v);
            if (x != j)
                printf("  after %" PRIu64 " outs the first value is %" PRIu64
                       "\n", j, x);
            CHECK(x == j);
        }
        rc = qs_out(c, "b", 1);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
    }
    CHECK_RC(qs_commit(c), 0);
    CHECK(count_of(c, "b", 1) == N - OUTS);
    {
        void *v = NULL;
        size_t vn = 0;
        uint64_t x = ~0ull;
        CHECK_RC(qs_get(c, "b", 1, &v, &vn), 0);
        if (v && vn == 8)
            memcpy(&x, v, 8);
        qs_free(v);
        CHECK(x == OUTS);
    }
    CHECK_RC(check_ok(c), 0);

    /* outlist removes the rest, and the neighbours stay */
    uint64_t removed = 0;
    CHECK_RC(qs_outlist(c, "b", 1, &removed), 0);
    CHECK(removed == N - OUTS);
    CHECK(count_of(c, "b", 1) == 0);
    CHECK(records_of(c) == 2);
    CHECK(get_is(c, "a", "before"));
    CHECK(get_is(c, "c", "after"));
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void compaction(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = open_mode(t.path, QS_OPEN_NEW, &rc);
    REQUIRE_RC(rc, 0);
    const int N = (int)tc_scaled(20000, 5);
    const size_t VL = 300;
    REQUIRE_RC(fill_records(c, N, VL), 0);
    /* a few big values too, so overflow chains move */
    unsigned char *bigv = malloc(50000);
    fill_val(bigv, 50000, 7);
    for (int i = 0; i < 20; i++) {
        char k[32];
        int kn = snprintf(k, sizeof k, "big%02d", i);
        CHECK_RC(qs_put(c, k, (size_t)kn, bigv, 50000), 0);
    }
    CHECK_RC(qs_sync(c), 0);
    qs_stat s1 = stat_of(c);

    /* delete 90% (and the odd big values) */
    CHECK_RC(qs_begin(c), 0);
    for (int i = 0; i < N; i++) {
        if (i % 10 == 0)
            continue;
        char k[32];
        int kn = snprintf(k, sizeof k, "k%06d", i);
        rc = qs_out(c, k, (size_t)kn);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
    }
    for (int i = 1; i < 20; i += 2) {
        char k[32];
        int kn = snprintf(k, sizeof k, "big%02d", i);
        CHECK_RC(qs_out(c, k, (size_t)kn), 0);
    }
    CHECK_RC(qs_commit(c), 0);
    CHECK_RC(qs_sync(c), 0);
    qs_stat s2 = stat_of(c);
    CHECK_RC(qs_compact(c), 0);
    qs_stat s3 = stat_of(c);
    printf("  file_bytes: full %" PRIu64 ", after deletes %" PRIu64
           ", compacted %" PRIu64 "; pages %" PRIu64 " free %" PRIu64 "\n",
           s1.file_bytes, s2.file_bytes, s3.file_bytes, s3.pages,
           s3.free_pages);
    CHECK(s3.file_bytes < s1.file_bytes / 3);
    CHECK(s3.free_pages < s3.pages / 10 + 2);
    CHECK(s3.records == (uint64_t)(N / 10 + (N % 10 ? 1 : 0)) + 10);

    for (int pass = 0; pass < 2; pass++) {
        /* content intact */
        CHECK_RC(check_ok(c), 0);
        unsigned char *v = NULL;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "k%06d", i);
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, (void **)&v, &vn);
            if (i % 10 == 0) {
                if (rc != 0 || !val_ok(v, vn, VL, (uint64_t)i))
                    bad++;
            } else if (rc != QS_NOTFOUND) {
                bad++;
            }
            qs_free(v);
            v = NULL;
        }
        for (int i = 0; i < 20; i++) {
            char k[32];
            int kn = snprintf(k, sizeof k, "big%02d", i);
            size_t vn = 0;
            rc = qs_get(c, k, (size_t)kn, (void **)&v, &vn);
            if (i % 2 == 0) {
                if (rc != 0 || !val_ok(v, vn, 50000, 7))
                    bad++;
            } else if (rc != QS_NOTFOUND) {
                bad++;
            }
            qs_free(v);
            v = NULL;
        }
        CHECK(bad == 0);
        /* still writable after compaction */
        if (pass == 0) {
            CHECK_RC(put_str(c, "after-compact", "yes"), 0);
            CHECK_RC(qs_out(c, "after-compact", 13), 0);
            CHECK_RC(qs_close(c), 0);
            c = open_mode(t.path, QS_OPEN_WRITE, &rc);
            REQUIRE_RC(rc, 0);
        }
    }
    CHECK_RC(qs_close(c), 0);
    free(bigv);
    tc_tmp_remove(&t);
}


/* Keys and values around the sizes where the layout changes (inline cell
 * limit, overflow key prefix, overflow page capacity), keys sharing long
 * prefixes and keys that prefix each other, in enough numbers that the
 * tree splits and long keys become separators. */

typedef struct {
    unsigned char *k;
    size_t kn;
    int nv;
} bkey;

static int bkey_cmp(const void *a, const void *b)
{
    const bkey *x = a, *y = b;
    size_t m = x->kn < y->kn ? x->kn : y->kn;
    int c = m ? memcmp(x->k, y->k, m) : 0;
    if (c)
        return c;
    return x->kn < y->kn ? -1 : x->kn > y->kn;
}

static size_t bval_len(size_t ki, int j)
{
    static const size_t lens[] = {0, 1, 968, 983, 984, 985, 999, 1000, 1001,
                                  3991, 3992, 3993, 4096, 7984, 7985, 12000};
    return lens[(ki * 7 + (size_t)j * 3) % (sizeof lens / sizeof lens[0])];
}

static void boundary_sizes(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 64 * 4096, 128 * 1024,
                           &rc);
    REQUIRE_RC(rc, 0);
    static const size_t klens[] = {1, 2, 511, 512, 513, 700, 975, 976, 977,
                                   983, 984, 985, 999, 1000, 1001, 3991,
                                   3992, 3993, 4000, 8000, QS_MAX_KEY};
    const size_t NL = sizeof klens / sizeof klens[0];
    const int PER = 12;
    size_t nk = NL * PER + 1;
    bkey *keys = calloc(nk, sizeof *keys);
    size_t n = 0;
    for (size_t li = 0; li < NL; li++) {
        for (int q = 0; q < PER; q++) {
            size_t kn = klens[li];
            unsigned char *k = malloc(kn);
            memset(k, 'P', kn);
            /* vary the last byte, or a byte just past the 512-byte prefix,
             * or make it a prefix of a longer one (q == 0: all 'P') */
            if (q > 0 && q < 6)
                k[kn - 1] = (unsigned char)('A' + q);
            else if (q >= 6 && kn > 513)
                k[513 + (size_t)(q - 6) % (kn - 513)] = (unsigned char)('a' + q);
            else if (q >= 6)
                k[0] = (unsigned char)('a' + q);
            keys[n].k = k;
            keys[n].kn = kn;
            n++;
        }
    }
    keys[n].k = malloc(1);
    keys[n].kn = 0;                  /* the empty key */
    n++;
    /* drop duplicate keys so each appears once */
    qsort(keys, n, sizeof *keys, bkey_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && bkey_cmp(&keys[u - 1], &keys[i]) == 0) {
            free(keys[i].k);
            continue;
        }
        keys[u++] = keys[i];
    }
    n = u;
    unsigned char *vb = malloc(16384);
    uint64_t total = 0;
    /* insert in a scrambled order, some keys with several values */
    CHECK_RC(qs_begin(c), 0);
    for (size_t step = 0; step < n; step++) {
        size_t i = (step * 7919) % n;
        int nv = 1 + (int)(i % 3);
        for (int j = 0; j < nv; j++) {
            size_t vn = bval_len(i, j);
            fill_val(vb, vn, i * 10 + (size_t)j);
            rc = qs_putdup(c, keys[i].k, keys[i].kn, vb, vn);
            if (rc) {
                printf("  putdup key len %zu value len %zu: %d (%s)\n",
                       keys[i].kn, vn, rc, qs_strerror(rc));
                CHECK_RC(rc, 0);
            }
            total++;
        }
        keys[i].nv = nv;
    }
    CHECK_RC(qs_commit(c), 0);

    for (int pass = 0; pass < 3; pass++) {
        CHECK(records_of(c) == total);
        CHECK_RC(check_ok(c), 0);
        /* a forward walk in memcmp order */
        qs_cursor *cur = NULL;
        CHECK_RC(qs_cursor_open(c, &cur), 0);
        if (!cur)
            break;
        size_t i = 0;
        int j = 0, bad = 0;
        uint64_t seen = 0;
        while (i < n && keys[i].nv == 0)
            i++;
        rc = qs_cursor_first(cur);
        while (rc == 0 && i < n) {
            void *k = NULL, *v = NULL;
            size_t kn = 0, vn = 0;
            rc = qs_cursor_get(cur, &k, &kn, &v, &vn);
            if (rc)
                break;
            if (kn != keys[i].kn || (kn && memcmp(k, keys[i].k, kn)) ||
                !val_ok(v, vn, bval_len(i, j), i * 10 + (size_t)j)) {
                if (bad++ < 3)
                    printf("  pass %d: record %" PRIu64 ": key len %zu (want "
                           "%zu), value len %zu (want %zu)\n", pass, seen,
                           kn, keys[i].kn, vn, bval_len(i, j));
            }
            qs_free(k);
            qs_free(v);
            seen++;
            if (++j >= keys[i].nv) {
                j = 0;
                do
                    i++;
                while (i < n && keys[i].nv == 0);
            }
            rc = qs_cursor_next(cur);
        }
        CHECK(bad == 0);
        CHECK(seen == total);
        CHECK(rc == QS_NOTFOUND || rc == 0);
        /* each key by get / count / jump */
        for (i = 0; i < n; i++) {
            uint64_t cn = count_of(c, keys[i].k, keys[i].kn);
            if (cn != (uint64_t)keys[i].nv) {
                if (bad++ < 6)
                    printf("  pass %d: count of key %zu (len %zu) is %" PRIu64
                           ", want %d\n", pass, i, keys[i].kn, cn,
                           keys[i].nv);
                continue;
            }
            if (!keys[i].nv)
                continue;
            void *v = NULL;
            size_t vn = 0;
            rc = qs_get(c, keys[i].k, keys[i].kn, &v, &vn);
            if (rc || !val_ok(v, vn, bval_len(i, 0), i * 10))
                bad++;
            qs_free(v);
            void *k = NULL;
            size_t kn = 0;
            rc = qs_cursor_jump(cur, keys[i].k, keys[i].kn);
            if (!rc)
                rc = qs_cursor_get(cur, &k, &kn, NULL, NULL);
            if (rc || kn != keys[i].kn || (kn && memcmp(k, keys[i].k, kn)))
                bad++;
            qs_free(k);
        }
        CHECK(bad == 0);
        qs_cursor_close(cur);

        if (pass == 0) {
            /* remove every other key, and the first value of the rest */
            CHECK_RC(qs_begin(c), 0);
            for (i = 0; i < n; i++) {
                if (i % 2 == 0) {
                    uint64_t removed = 0;
                    CHECK_RC(qs_outlist(c, keys[i].k, keys[i].kn, &removed),
                             0);
                    CHECK(removed == (uint64_t)keys[i].nv);
                    total -= (uint64_t)keys[i].nv;
                    keys[i].nv = 0;
                }
            }
            CHECK_RC(qs_commit(c), 0);
        } else if (pass == 1) {
            CHECK_RC(qs_compact(c), 0);
            CHECK_RC(qs_close(c), 0);
            c = open_mode(t.path, QS_OPEN_WRITE, &rc);
            REQUIRE_RC(rc, 0);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i].k);
    free(keys);
    free(vb);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

static void space_reuse(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    const uint64_t ckpt = 1 << 20;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, ckpt, &rc);
    REQUIRE_RC(rc, 0);
    const int ROUNDS = (int)tc_scaled(50, 5), N = 2000, NKEYS = 200;
    const size_t VL = 100;
    const uint64_t peak = (uint64_t)N * (VL + 5);
    /* the log legitimately holds up to checkpoint_bytes of frames before
     * a checkpoint lets it be reused; beyond that, 2 x live data + 2 MiB */
    const uint64_t bound = 2 * peak + (2u << 20) + ckpt;
    uint64_t worst = 0, at10 = 0, last = 0, worst_file = 0, worst_log = 0;
    unsigned char v[128];
    uint64_t *koff = malloc((N + 1) * sizeof *koff);
    uint64_t *voff = malloc((N + 1) * sizeof *voff);
    char *keys = malloc((size_t)N * 5 + 1);   /* + snprintf's NUL */
    unsigned char *vals = malloc((size_t)N * VL);
    for (int r = 0; r < ROUNDS; r++) {
        if (r % 2 == 0) {
            /* one transaction of putdups, one of outs */
            CHECK_RC(qs_begin(c), 0);
            for (int i = 0; i < N; i++) {
                char k[8];
                snprintf(k, sizeof k, "r%04d", i % NKEYS);
                fill_val(v, VL, (uint64_t)(r * N + i));
                if ((rc = qs_putdup(c, k, 5, v, VL)) != 0)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
            CHECK(records_of(c) == (uint64_t)N);
            CHECK_RC(qs_begin(c), 0);
            for (int i = 0; i < N; i++) {
                char k[8];
                snprintf(k, sizeof k, "r%04d", i % NKEYS);
                if ((rc = qs_out(c, k, 5)) != 0)
                    break;
            }
            CHECK_RC(rc, 0);
            CHECK_RC(qs_commit(c), 0);
        } else {
            /* one putdup_many, then outlists in autocommit */
            koff[0] = voff[0] = 0;
            for (int i = 0; i < N; i++) {
                snprintf(keys + 5 * i, 6, "r%04d", i % NKEYS);
                fill_val(vals + VL * i, VL, (uint64_t)(r * N + i));
                koff[i + 1] = 5 * (uint64_t)(i + 1);
                voff[i + 1] = VL * (uint64_t)(i + 1);
            }
            CHECK_RC(qs_putdup_many(c, N, keys, koff, vals, voff), 0);
            CHECK(records_of(c) == (uint64_t)N);
            for (int k = 0; k < NKEYS; k++) {
                char kb[8];
                snprintf(kb, sizeof kb, "r%04d", k);
                uint64_t removed = 0;
                CHECK_RC(qs_outlist(c, kb, 5, &removed), 0);
                CHECK(removed == (uint64_t)(N / NKEYS));
            }
        }
        CHECK(records_of(c) == 0);
        qs_stat st = stat_of(c);
        last = st.file_bytes + st.log_file_bytes;
        if (last > worst) {
            worst = last;
            worst_file = st.file_bytes;
            worst_log = st.log_file_bytes;
        }
        if (r == 9)
            at10 = last;
        if (tc_cur_failed)
            break;
    }
    free(koff);
    free(voff);
    free(keys);
    free(vals);
    qs_stat st = stat_of(c);
    printf("  file+log bytes: worst %" PRIu64 " (%" PRIu64 " + %" PRIu64
           "), after round 10 %" PRIu64 ", at the end %" PRIu64 " (bound %"
           PRIu64 "); pages %" PRIu64 " free %" PRIu64 "\n", worst,
           worst_file, worst_log, at10, last, bound, st.pages,
           st.free_pages);
    CHECK(worst <= bound);
    if (at10)
        CHECK(last <= at10 + (512u << 10));   /* no steady growth */
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

/* ---- when a checkpoint comes ---- */

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* One-put commits until the log has taken `logged` bytes (counting across
 * checkpoints), each under a random key, or always under the one key
 * "same".  Returns the longest the log got (qs_stat.log_bytes after a
 * commit), and in *ckpts the checkpoints made meanwhile. */
static uint64_t longest_log(qs_casket *c, int random_keys, uint64_t logged, uint64_t *rng,
                            uint64_t *ckpts)
{
    qs_stat st = stat_of(c);
    uint64_t first = st.checkpoints, prev = st.log_bytes, total = 0, most = 0;
    unsigned char k[16], v[32];
    memset(v, 'v', sizeof v);
    while (total < logged && !tc_cur_failed) {
        uint64_t a = next_rand(rng), b = next_rand(rng);
        memcpy(k, &a, 8);
        memcpy(k + 8, &b, 8);
        memcpy(v, &a, 8);
        if (random_keys)
            CHECK_RC(qs_put(c, k, sizeof k, v, sizeof v), 0);
        else
            CHECK_RC(qs_put(c, "same", 4, v, sizeof v), 0);
        st = stat_of(c);
        total += st.log_bytes > prev ? st.log_bytes - prev : st.log_bytes;
        prev = st.log_bytes;
        if (st.log_bytes > most)
            most = st.log_bytes;
    }
    *ckpts = st.checkpoints - first;
    return most;
}

typedef struct {
    const char *path;
} attach_arg;

/* A process that keeps the casket open until released. */
static int stay_attached(void *arg, int report, int release)
{
    const attach_arg *a = arg;
    qs_options o;
    qs_options_init(&o);
    o.flag = QS_OPEN_WRITE;
    o.sync = 0;
    qs_casket *c = NULL;
    int rc = qs_open(a->path, &o, &c);
    char ok = rc == 0 ? 'y' : 'n';
    if (write(report, &ok, 1) != 1 || rc)
        _exit(1);
    char b;
    while (read(release, &b, 1) > 0)
        ;
    _exit(qs_close(c) == 0 ? 0 : 1);
}

/* With the default checkpoint size a checkpoint that would copy pages
 * amounting to more than an eighth of the log waits for a longer log (up
 * to 16 MiB); a log of updates to a few pages is checkpointed at 4 MiB, as
 * is any log when the size was asked for, or while another process has
 * the casket open (whose handles read the log back). */
static void checkpoint_waits_for_spread_updates(void)
{
    tc_tmp t;
    REQUIRE(tc_tmp_make(&t) == 0);
    int rc;
    const uint64_t MiB = 1u << 20, commit_slack = 64u << 10;
    uint64_t rng = 0x9e3779b97f4a7c15ull, ckpts = 0;
    qs_casket *c = tc_open(t.path, QS_OPEN_NEW, 0, 0, 0, &rc);
    REQUIRE_RC(rc, 0);
    /* a tree of ~20,000 records over some 500 leaves */
    CHECK_RC(qs_begin(c), 0);
    unsigned char k[16], v[32] = {0};
    for (int i = 0; i < 20000; i++) {
        uint64_t a = next_rand(&rng), b = next_rand(&rng);
        memcpy(k, &a, 8);
        memcpy(k + 8, &b, 8);
        CHECK_RC(qs_put(c, k, sizeof k, v, sizeof v), 0);
    }
    CHECK_RC(qs_commit(c), 0);
    CHECK_RC(qs_sync(c), 0);

    uint64_t most = longest_log(c, 1, 40 * MiB, &rng, &ckpts);
    printf("  random keys, default size: log up to %" PRIu64 " bytes, %" PRIu64
           " checkpoints\n", most, ckpts);
    CHECK(most > 6 * MiB);
    CHECK(most <= 16 * MiB + commit_slack);
    CHECK(ckpts >= 2);

    CHECK_RC(qs_sync(c), 0);   /* each case starts with an empty log */
    most = longest_log(c, 0, 12 * MiB, &rng, &ckpts);
    printf("  one key, default size: log up to %" PRIu64 " bytes, %" PRIu64
           " checkpoints\n", most, ckpts);
    CHECK(most <= 4 * MiB + commit_slack);
    CHECK(ckpts >= 2);

    /* another process attached */
    attach_arg a = {t.path};
    tc_child ch;
    REQUIRE(tc_child_start(&ch, stay_attached, &a) == 0);
    char ok = 0;
    CHECK(read(ch.report, &ok, 1) == 1 && ok == 'y');
    CHECK_RC(qs_sync(c), 0);
    most = longest_log(c, 1, 12 * MiB, &rng, &ckpts);
    printf("  random keys, another process attached: log up to %" PRIu64 " bytes\n", most);
    CHECK(most <= 4 * MiB + commit_slack);
    CHECK(ckpts >= 2);
    CHECK(tc_child_end(&ch) == 0);
    /* it left: the log may grow again (sh_other_process scans anew when a
     * slot is let go, not only when one is taken) */
    CHECK_RC(qs_sync(c), 0);
    most = longest_log(c, 1, 40 * MiB, &rng, &ckpts);
    printf("  random keys, the other process gone: log up to %" PRIu64 " bytes\n", most);
    CHECK(most > 6 * MiB);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);

    /* the size asked for: 4 MiB */
    c = tc_open(t.path, QS_OPEN_WRITE, 0, 0, 4 * MiB, &rc);
    REQUIRE_RC(rc, 0);
    most = longest_log(c, 1, 12 * MiB, &rng, &ckpts);
    printf("  random keys, 4 MiB asked for: log up to %" PRIu64 " bytes\n", most);
    CHECK(most <= 4 * MiB + commit_slack);
    CHECK(ckpts >= 2);
    CHECK_RC(check_ok(c), 0);
    CHECK_RC(qs_close(c), 0);
    tc_tmp_remove(&t);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(big_value);
    RUN(many_dups);
    RUN(compaction);
    RUN(boundary_sizes);
    RUN(space_reuse);
    RUN(checkpoint_waits_for_spread_updates);
    return tc_summary();
}
