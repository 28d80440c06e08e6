/*
 * test_checksum.c -- the two page checksums (checksum.h) and how a page
 * names its own (wal_page_seal, wal_page_verify): ck_crc32c against the
 * published check value; ck_crc4 giving the same results on the CPU
 * instruction and on the tables, at every length and alignment around the
 * lane split; every one-bit change of a page changing both functions; and a
 * sealed page failing verification when its checksum flag is flipped or
 * any byte outside its hole changes.
 */
#include "test_common.h"
#include "checksum.h"
#include "pagefmt.h"
#include "wal.h"

static void crc32c_check_value(void)
{
    CHECK(ck_crc32c(0, "123456789", 9) == 0xE3069283u);
    /* extending a CRC is the CRC of the concatenation */
    CHECK(ck_crc32c(ck_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
    CHECK(ck_crc32c(0, "", 0) == 0);
}

static void crc4_paths_agree(void)
{
    static uint8_t buf[PG_SIZE + 64];
    srand(tc_seed());
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)rand();
    long step = tc_scaled(1, 7);
    for (size_t len = 0; len <= PG_SIZE; len += (size_t)step)
        for (size_t off = 0; off < 9; off++) {
            uint64_t seed = (uint64_t)len * 0x9E3779B97F4A7C15ULL + off;
            uint64_t a = ck_crc4(buf + off, len, seed), b = ck_crc4_portable(buf + off, len, seed);
            if (a != b) {
                CHECK(a == b);
                printf("    length %zu, offset %zu\n", len, off);
                return;
            }
        }
    /* the seed and the length are mixed in */
    CHECK(ck_crc4(buf, 100, 1) != ck_crc4(buf, 100, 2));
    CHECK(ck_crc4(buf, 100, 1) != ck_crc4(buf, 101, 1));
    static const uint8_t zeros[128];
    CHECK(ck_crc4(zeros, 64, 0) != ck_crc4(zeros, 72, 0));
}

/* Every single-bit change of a page-sized input changes both functions. */
static void one_bit_changes_are_caught(void)
{
    static uint8_t page[TR_CHECKSUM];
    srand(tc_seed() + 1);
    for (size_t i = 0; i < sizeof page; i++)
        page[i] = (uint8_t)rand();
    uint64_t crc = ck_crc4(page, sizeof page, 7), sum = ck_sum64(page, sizeof page, 7);
    long missed = 0, step = tc_scaled(1, 13);
    for (size_t bit = 0; bit < 8 * sizeof page; bit += (size_t)step) {
        page[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        missed += ck_crc4(page, sizeof page, 7) == crc;
        missed += ck_sum64(page, sizeof page, 7) == sum;
        page[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    CHECK(missed == 0);
}

/* An overflow page (no hole but the zeros that end it) full of data. */
static void make_page(uint8_t *page, uint32_t pgno)
{
    memset(page, 0, PG_SIZE);
    page[0] = PT_OVERFLOW;
    for (uint32_t i = 8; i < PG_USABLE; i++)
        page[i] = (uint8_t)(i * 131 + pgno);
    memcpy(page + TR_PGNO, &pgno, 4);
}

static void seal_names_its_function(void)
{
    uint8_t page[PG_SIZE];
    make_page(page, 5);
    wal_page_seal(page);
    uint32_t flags;
    memcpy(&flags, page + TR_FLAGS, 4);
    CHECK(!!(flags & TR_FLAG_CRC) == !!ck_crc_fast());
    CHECK_RC(wal_page_verify(page, 5), 0);
    CHECK_RC(wal_page_verify(page, 6), QS_CORRUPT);
    /* the flag flipped: checked with the other function, which fails */
    page[TR_FLAGS] ^= TR_FLAG_CRC;
    CHECK_RC(wal_page_verify(page, 5), QS_CORRUPT);
    page[TR_FLAGS] ^= TR_FLAG_CRC;
    CHECK_RC(wal_page_verify(page, 5), 0);
    /* any byte the checksum covers */
    for (uint32_t at = 0; at < TR_CHECKSUM; at += 97) {
        page[at] ^= 0x10;
        if (wal_page_verify(page, 5) != QS_CORRUPT) {
            CHECK_RC(wal_page_verify(page, 5), QS_CORRUPT);
            printf("    byte %u\n", at);
        }
        page[at] ^= 0x10;
    }
    /* the other function's seal verifies too: a page of a version-3 casket,
     * flag clear, under its ck_sum64 (no hole: the page's bytes in one run,
     * seeded with the hole's bounds as page_sum does) */
    page[TR_FLAGS] &= (uint8_t)~TR_FLAG_CRC;
    uint32_t hs, he;
    page_hole(page, &hs, &he);
    uint64_t seed = CK_SEED ^ ((uint64_t)hs << 32 | he);
    uint64_t old = ck_sum64(page + he, TR_CHECKSUM - he, ck_sum64(page, hs, seed));
    memcpy(page + TR_CHECKSUM, &old, 8);
    CHECK_RC(wal_page_verify(page, 5), 0);
    page[100] ^= 1;
    CHECK_RC(wal_page_verify(page, 5), QS_CORRUPT);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(crc32c_check_value);
    RUN(crc4_paths_agree);
    RUN(one_bit_changes_are_caught);
    RUN(seal_names_its_function);
    return tc_summary();
}
