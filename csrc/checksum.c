/* checksum.c -- the page checksums: a four-lane multiply-rotate hash in the
 * style of xxHash64 (ck_sum64), and four CRC-32C lanes (ck_crc4).  Pages are
 * checksummed on every write and every read from disk, so both run at
 * several GB/s; ck_sum64 without CPU-specific instructions. */
#include "checksum.h"
#include <string.h>

static const uint64_t P1 = 0x9E3779B185EBCA87ULL;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
static const uint64_t P3 = 0x165667B19E3779F9ULL;
static const uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
static const uint64_t P5 = 0x27D4EB2F165667C5ULL;

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;   /* host order: checksums are not portable across endianness */
}

static inline uint64_t round1(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
    acc ^= round1(0, v);
    return acc * P1 + P4;
}

/* Folds 8 bytes into h. */
static inline uint64_t absorb8(uint64_t h, uint64_t v)
{
    h ^= round1(0, v);
    return rotl(h, 27) * P1 + P4;
}

/* Spreads every bit of h over all of the result. */
static inline uint64_t avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t ck_sum64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const unsigned char *limit = end - 32;
        do {
            v1 = round1(v1, rd64(p));
            v2 = round1(v2, rd64(p + 8));
            v3 = round1(v3, rd64(p + 16));
            v4 = round1(v4, rd64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = merge(h, v1);
        h = merge(h, v2);
        h = merge(h, v3);
        h = merge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    for (; p + 8 <= end; p += 8)
        h = absorb8(h, rd64(p));
    while (p < end) {
        h ^= (*p) * P5;
        h = rotl(h, 11) * P1;
        p++;
    }
    return avalanche(h);
}

/* ---- four CRC-32C lanes ----------------------------------------------------
 * SSE4.2's crc32 instruction takes 8 bytes per instruction where the hash
 * above spends five; a lane is bound by its 3-cycle latency, so four lanes
 * over the four quarters of the input run side by side.  The table-driven
 * path gives the same results (a page sealed on one machine verifies on any
 * other); it is only chosen where the instruction is missing, and there the
 * sealer uses ck_sum64 (ck_crc_fast says which). */

static uint32_t crc_table[8][256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

/* The raw register update (no pre- or post-inversion). */
static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t len)
{
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w = c;     /* CRC-32C takes the bytes least significant first */
        for (int b = 0; b < 8; b++)
            w ^= (uint64_t)p[b] << (8 * b);
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
            crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
            crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
            crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
    }
    for (; len; p++, len--)
        c = crc_table[0][(c ^ *p) & 0xff] ^ (c >> 8);
    return c;
}

static uint64_t lanes_mix(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, size_t len,
                          uint64_t seed)
{
    uint64_t h = seed + P5 + (uint64_t)len;
    h = absorb8(h, (uint64_t)c0 << 32 | c1);
    h = absorb8(h, (uint64_t)c2 << 32 | c3);
    return avalanche(h);
}

/* Inputs shorter than this are one lane: the split would cost more than it
 * saves. */
#define LANES_MIN 64u

/* The length of each of the first three lanes (the fourth takes the rest),
 * a multiple of 8 so the hardware path runs whole words; 0 for one lane.
 * Both paths split here, so they agree on every length. */
static size_t lane_len(size_t len)
{
    return len < LANES_MIN ? 0 : (len / 4) & ~(size_t)7;
}

static uint64_t crc4_soft(const unsigned char *p, size_t len, uint64_t seed)
{
    uint32_t c[4] = {~0u, ~0u, ~0u, ~0u};
    size_t q = lane_len(len);
    if (!q) {
        c[0] = crc_soft(c[0], p, len);
    } else {
        for (int k = 0; k < 3; k++)
            c[k] = crc_soft(c[k], p + (size_t)k * q, q);
        c[3] = crc_soft(c[3], p + 3 * q, len - 3 * q);
    }
    return lanes_mix(c[0], c[1], c[2], c[3], len, seed);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define CRC_HW 1
/* One lane over len bytes: the instruction takes 8, 4 or 1 of them. */
__attribute__((target("sse4.2"))) static inline uint64_t crc_hw_tail(uint64_t c,
                                                                   const unsigned char *p,
                                                                   size_t len)
{
    for (; len >= 8; p += 8, len -= 8)
        c = __builtin_ia32_crc32di(c, rd64(p));
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c = __builtin_ia32_crc32si((uint32_t)c, w);
        p += 4;
        len -= 4;
    }
    for (; len; p++, len--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p);
    return c;
}

__attribute__((target("sse4.2"))) static uint64_t crc4_hw(const unsigned char *p, size_t len,
                                                         uint64_t seed)
{
    uint64_t c0 = ~0u, c1 = ~0u, c2 = ~0u, c3 = ~0u;
    size_t j = 0, q = lane_len(len);
    if (!q) {
        c0 = crc_hw_tail(c0, p, len);
    } else {
        const unsigned char *p1 = p + q, *p2 = p + 2 * q, *p3 = p + 3 * q;
        /* two words a lane a turn: the loop's own add-compare-branch was
         * three instructions for every four CRC ones */
        for (; j + 16 <= q; j += 16) {
            c0 = __builtin_ia32_crc32di(c0, rd64(p + j));
            c1 = __builtin_ia32_crc32di(c1, rd64(p1 + j));
            c2 = __builtin_ia32_crc32di(c2, rd64(p2 + j));
            c3 = __builtin_ia32_crc32di(c3, rd64(p3 + j));
            c0 = __builtin_ia32_crc32di(c0, rd64(p + j + 8));
            c1 = __builtin_ia32_crc32di(c1, rd64(p1 + j + 8));
            c2 = __builtin_ia32_crc32di(c2, rd64(p2 + j + 8));
            c3 = __builtin_ia32_crc32di(c3, rd64(p3 + j + 8));
        }
        if (j < q) {
            c0 = __builtin_ia32_crc32di(c0, rd64(p + j));
            c1 = __builtin_ia32_crc32di(c1, rd64(p1 + j));
            c2 = __builtin_ia32_crc32di(c2, rd64(p2 + j));
            c3 = __builtin_ia32_crc32di(c3, rd64(p3 + j));
            j += 8;
        }
        c3 = crc_hw_tail(c3, p3 + j, len - 3 * q - j);
    }
    return lanes_mix((uint32_t)c0, (uint32_t)c1, (uint32_t)c2, (uint32_t)c3, len, seed);
}
#else
#define CRC_HW 0
#endif

static int crc_hw_present;

/* The table is built even where the instruction is present: ck_crc32c and
 * ck_crc4_portable (the tests' cross-check) use it, and 8 KiB at load is
 * cheaper than a once-guard on every call. */
__attribute__((constructor)) static void crc_init(void)
{
    crc_table_init();
#if CRC_HW
    __builtin_cpu_init();
    crc_hw_present = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

int ck_crc_fast(void) { return crc_hw_present; }

uint64_t ck_crc4(const void *data, size_t len, uint64_t seed)
{
#if CRC_HW
    if (crc_hw_present)
        return crc4_hw(data, len, seed);
#endif
    return crc4_soft(data, len, seed);
}

uint64_t ck_crc4_portable(const void *data, size_t len, uint64_t seed)
{
    return crc4_soft(data, len, seed);
}

uint32_t ck_crc32c(uint32_t crc, const void *data, size_t len)
{
    return ~crc_soft(~crc, data, len);
}
