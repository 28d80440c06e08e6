/* test_batchsort.c -- bs_sort (batchsort.c), the order a batch of putdups
 * is applied in, against a reference: a stable sort by memcmp order with
 * the shorter of two keys that agree on its length first.  The cases pick
 * keys that the radix passes on the 8-byte prefix cannot tell apart (equal
 * first 8 bytes, keys shorter than 8 next to the same bytes zero-padded),
 * duplicates whose given order must survive, and batches big enough for
 * every 16-bit digit of the radix sort to be mixed. */
#include "test_common.h"
#include "batchsort.h"

typedef struct ref_key {
    const uint8_t *p;
    size_t len;
    uint32_t idx;
} ref_key;

static int ref_cmp(const void *x, const void *y)
{
    const ref_key *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int r = n ? memcmp(a->p, b->p, n) : 0;
    if (r == 0 && a->len != b->len)
        r = a->len < b->len ? -1 : 1;
    if (r == 0)
        r = a->idx < b->idx ? -1 : a->idx > b->idx;
    return r;
}

/* Sorts the batch both ways; 1 when bs_sort gives the reference order. */
static int sorts_like_reference(size_t n, const uint8_t *keys, const uint64_t *koff)
{
    ref_key *ref = malloc(n * sizeof *ref);
    bs_ent *got = NULL;
    int ok = ref != NULL && bs_sort(n, keys, koff, &got) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ref[i] = (ref_key){keys + koff[i], koff[i + 1] - koff[i], (uint32_t)i};
    if (ok)
        qsort(ref, n, sizeof *ref, ref_cmp);
    for (size_t i = 0; ok && i < n; i++)
        if (got[i].idx != ref[i].idx) {
            printf("  position %zu: bs_sort gives key %u, the reference key %u\n", i,
                   (unsigned)got[i].idx, (unsigned)ref[i].idx);
            ok = 0;
        }
    free(ref);
    free(got);
    return ok;
}

/* A batch of n keys drawn from alphabet-poor bytes so prefixes collide. */
static void random_batch(tc_rng *r, size_t n, size_t maxlen, uint8_t **keys, uint64_t **koff)
{
    *koff = malloc((n + 1) * sizeof **koff);
    *keys = malloc(n * maxlen + 1);
    (*koff)[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = tc_below(r, maxlen + 1);
        uint8_t *k = *keys + (*koff)[i];
        /* a shared stem most of the time, then a few distinct bytes */
        size_t stem = tc_below(r, 4) ? (len < 9 ? len : 9) : 0;
        for (size_t b = 0; b < len; b++)
            k[b] = b < stem ? (uint8_t)('a' + (b & 1)) : (uint8_t)tc_below(r, 3);
        (*koff)[i + 1] = (*koff)[i] + len;
    }
}

static void sorts_random_batches_like_the_reference(void)
{
    uint64_t seed = tc_seed();
    tc_rng r = {seed};
    long rounds = tc_scaled(300, 10);
    for (long round = 0; round < rounds; round++) {
        size_t n = 1 + tc_below(&r, round % 10 == 0 ? 5000 : 200);
        uint8_t *keys;
        uint64_t *koff;
        random_batch(&r, n, round % 3 == 0 ? 4 : 20, &keys, &koff);
        int ok = sorts_like_reference(n, keys, koff);
        if (!ok)
            printf("  seed %llu, round %ld, %zu keys\n", (unsigned long long)seed, round, n);
        free(keys);
        free(koff);
        REQUIRE(ok);
    }
}

/* "a" and "a\0" have the same zero-padded prefix: the shorter sorts first;
 * equal keys keep the order they were given in. */
static void ties_on_the_prefix_are_broken_by_the_whole_key(void)
{
    static const uint8_t keys[] = "a\0" "a" "abcdefgh2" "abcdefgh1" "" "a" "abcdefgh";
    /* a\0 | a | abcdefgh2 | abcdefgh1 | (empty) | a | abcdefgh */
    static const uint64_t koff[] = {0, 2, 3, 12, 21, 21, 22, 30};
    bs_ent *got = NULL;
    REQUIRE_RC(bs_sort(7, keys, koff, &got), 0);
    static const uint32_t want[] = {4, 1, 5, 0, 6, 3, 2};
    for (size_t i = 0; i < 7; i++)
        CHECK(got[i].idx == want[i]);
    free(got);
}

/* Keys that differ only in the high digit of the prefix, or only past it,
 * in a batch wider than one 16-bit digit's buckets. */
static void every_radix_digit_is_sorted(void)
{
    size_t n = (size_t)tc_scaled(70000, 10);
    uint8_t *keys = malloc(n * 10);
    uint64_t *koff = malloc((n + 1) * sizeof *koff);
    REQUIRE(keys && koff);
    tc_rng r = {tc_seed()};
    koff[0] = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *k = keys + koff[i];
        uint64_t x = tc_next(&r);
        for (int b = 0; b < 8; b++)
            k[b] = (uint8_t)(x >> (8 * (b % 4 == 1 ? 0 : b)));
        k[8] = (uint8_t)tc_below(&r, 2);
        koff[i + 1] = koff[i] + 8 + tc_below(&r, 2);
    }
    CHECK(sorts_like_reference(n, keys, koff));
    free(keys);
    free(koff);
}

int main(void)
{
    RUN(ties_on_the_prefix_are_broken_by_the_whole_key);
    RUN(sorts_random_batches_like_the_reference);
    RUN(every_radix_digit_is_sorted);
    return tc_summary();
}
