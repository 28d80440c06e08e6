/* batchsort.h -- the order a batch of putdups is applied in (batchsort.c,
 * bs_ prefix): a pure function of the keys. */
#ifndef QS_BATCHSORT_H
#define QS_BATCHSORT_H
#include <stddef.h>
#include <stdint.h>

typedef struct bs_ent {
    uint64_t prefix;    /* first 8 key bytes, big-endian, zero padded */
    uint32_t idx;       /* the key's index in the batch */
} bs_ent;

/* Orders the n keys (n >= 1; key i is keys[koff[i] .. koff[i + 1]), n <
 * 2^32) by memcmp, a key before the longer keys it is a prefix of, and
 * equal keys in their given order (stable).  0 and *out: n entries in that
 * order, to free(); or QS_NOMEM and *out untouched. */
int bs_sort(size_t n, const uint8_t *keys, const uint64_t *koff, bs_ent **out);

#endif
