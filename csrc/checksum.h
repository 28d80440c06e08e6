/* checksum.h -- 64-bit checksums of page images (ck_ prefix). */
#ifndef QS_CHECKSUM_H
#define QS_CHECKSUM_H
#include <stddef.h>
#include <stdint.h>

/* Returns a 64-bit checksum of len bytes at p, mixed with seed.  Any change
 * of one or more bytes changes the result with probability ~1 - 2^-64; never
 * fails. */
uint64_t ck_sum64(const void *p, size_t len, uint64_t seed);

/* Returns a 64-bit checksum of len bytes at p, mixed with seed: CRC-32C
 * (the Castagnoli polynomial, as iSCSI, ext4 and RocksDB use it) of each
 * quarter of the input (of all of it below 64 bytes), the four mixed with
 * len and seed.  Any change within one quarter changes the result with
 * probability ~1 - 2^-32, and every burst of up to 32 bits within one
 * quarter changes it.  The same on every host and either path; never
 * fails. */
uint64_t ck_crc4(const void *p, size_t len, uint64_t seed);
/* Whether ck_crc4 runs on the CPU's CRC-32C instruction (x86-64 SSE4.2)
 * rather than tables, at several times the speed of ck_sum64: a writer
 * picks ck_crc4 only then. */
int ck_crc_fast(void);
/* ck_crc4 on the tables whatever the CPU, for tests that compare the two
 * paths. */
uint64_t ck_crc4_portable(const void *p, size_t len, uint64_t seed);
/* The standard CRC-32C of len bytes at p continuing crc (0 to start; pass
 * a result back in to extend it), for tests against published check
 * values ("123456789" gives 0xE3069283). */
uint32_t ck_crc32c(uint32_t crc, const void *p, size_t len);

#endif
