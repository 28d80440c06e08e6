/* pagefmt.h -- the on-disk layout shared by the log, the pager and the
 * tree.  docs/DESIGN.md describes it in prose; this file is the truth. */
#ifndef QS_PAGEFMT_H
#define QS_PAGEFMT_H
#include <stdint.h>
#include <string.h>

#define PG_SIZE 4096u
#define PG_USABLE 4000u              /* bytes a page's owner may use */
#define PG_NAMESPACES 2

/* Trailer fields (offsets within the page). */
#define TR_PGNO 4000u
#define TR_FLAGS 4004u
#define TR_SALT 4008u
#define TR_TXN 4016u
#define TR_NFRAMES 4024u
#define TR_META 4028u                /* pg_meta, packed, META_BYTES long */
#define TR_SYNCED 4072u              /* commit frame: u64 log offset below which a
                                        completed fdatasync had made this
                                        generation's log durable when the frame
                                        was written; 0 declares nothing */
#define TR_CHECKSUM 4088u            /* covers bytes [0, 4088) */
#define TR_FLAG_COMMIT 1u
#define TR_FLAG_CRC 2u               /* the checksum is ck_crc4's, not ck_sum64's
                                        (format 4; the sealer picks, the
                                        verifier follows the page) */
#define CK_SEED 0x7173746f72650001ULL  /* the page checksum's seed (wal.c) */

/* Page types: first byte of every non-header page in use. */
enum { PT_FREE = 0, PT_LEAF = 1, PT_INTERIOR = 2, PT_OVERFLOW = 3, PT_TRUNK = 4 };

/* Main file page 0 and the log header. */
#define MAIN_MAGIC "qstore\0\x1a"
#define LOG_MAGIC "qstlog\0\x1a"
#define HDR_VERSION 8u               /* u32 format version */
#define HDR_PAGESIZE 12u             /* u32 page size */
#define HDR_SALT 16u                 /* log: u64 salt */
#define HDR_BASE_TXN 24u             /* log: u64 last txn in the main file */

/* The casket's meta: carried by every commit frame and by page 0. */
typedef struct pg_meta {
    uint32_t npages;                 /* pages in use or free, page 0 included */
    uint32_t free_head;              /* first free-list trunk page, 0 = none */
    uint32_t free_count;             /* pages on the free list, trunks too */
    uint32_t root[PG_NAMESPACES];    /* tree roots, 0 = empty tree */
    uint64_t next_id;                /* next queue item id */
    uint64_t txn;                    /* last committed transaction number */
    uint64_t next_seq;               /* next duplicate sequence number: never
                                        reused, so (key, seq) names one record
                                        for the life of the file */
} pg_meta;
#define META_BYTES 44u

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Tree page header fields the log needs (btree.c owns the rest): the cell
 * count and the start of the cell area.  Between the cell pointer array and
 * the cell area lies the page's free gap. */
#define TREE_NCELLS 2u
#define TREE_CSTART 4u
#define TREE_HDR 24u

/* The bytes [*start, *end) of a page image that carry nothing: a tree
 * page's free gap, or the zeros that end any other page's usable area.
 * Log frames leave them out and page checksums skip them, so a tree page's
 * gap may hold anything in memory (it reads back as zeros from the log). */
/* A tree page's free gap [*start, *end): 1, or 0 (start, end untouched)
 * when pg is not a tree page or its header names no gap inside it. */
static inline int tree_gap(const uint8_t *pg, uint32_t *start, uint32_t *end)
{
    if (pg[0] != PT_LEAF && pg[0] != PT_INTERIOR)
        return 0;
    uint32_t lo = TREE_HDR + 2u * rd16(pg + TREE_NCELLS), hi = rd16(pg + TREE_CSTART);
    if (lo > hi || hi > PG_USABLE)
        return 0;
    *start = lo;
    *end = hi;
    return 1;
}

static inline void page_hole(const uint8_t *pg, uint32_t *start, uint32_t *end)
{
    if (tree_gap(pg, start, end))
        return;
    uint32_t e = PG_USABLE;
    while (e >= 8 && rd64(pg + e - 8) == 0)
        e -= 8;
    *start = e;
    *end = PG_USABLE;
}

static inline void meta_store(uint8_t *p, const pg_meta *m)
{
    wr32(p, m->npages);
    wr32(p + 4, m->free_head);
    wr32(p + 8, m->free_count);
    wr32(p + 12, m->root[0]);
    wr32(p + 16, m->root[1]);
    wr64(p + 20, m->next_id);
    wr64(p + 28, m->txn);
    wr64(p + 36, m->next_seq);
}

static inline void meta_load(const uint8_t *p, pg_meta *m)
{
    m->npages = rd32(p);
    m->free_head = rd32(p + 4);
    m->free_count = rd32(p + 8);
    m->root[0] = rd32(p + 12);
    m->root[1] = rd32(p + 16);
    m->next_id = rd64(p + 20);
    m->txn = rd64(p + 28);
    m->next_seq = rd64(p + 36);
}

#endif
