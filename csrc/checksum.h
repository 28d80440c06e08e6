/* checksum.h -- 64-bit checksum of page images (ck_ prefix). */
#ifndef QS_CHECKSUM_H
#define QS_CHECKSUM_H
#include <stddef.h>
#include <stdint.h>

/* Returns a 64-bit checksum of len bytes at p, mixed with seed.  Any change
 * of one or more bytes changes the result with probability ~1 - 2^-64; never
 * fails. */
uint64_t ck_sum64(const void *p, size_t len, uint64_t seed);

#endif
