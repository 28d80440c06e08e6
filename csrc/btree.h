/* btree.h -- the counted B+tree with duplicate keys (bt_ prefix).
 *
 * Records are ordered by (key, seq): key by memcmp with a shorter prefix
 * first, then the 64-bit duplicate sequence number.  Interior cells carry
 * the number of records below them, so ranks and counts are O(log n).
 * Every function works in one view of one namespace (bt_ctx) and returns 0
 * or an error code (QS_CORRUPT, QS_NOMEM, errno, ...).  A failed writing
 * call may have changed the writer's pages: the caller aborts the
 * transaction (or restores a savepoint) on failure. */
#ifndef QS_BTREE_H
#define QS_BTREE_H
#include <stddef.h>
#include <stdint.h>
#include "pager.h"

#define BT_MAXDEPTH 24

typedef struct bt_ctx {
    pager *p;
    int wview;          /* 1: the writer's view (required for writes) */
    int ns;             /* namespace: index into pg_meta.root */
} bt_ctx;

typedef struct bt_key {
    const uint8_t *key;
    uint32_t klen;
    uint64_t seq;
} bt_key;

/* A position: the pages from root to leaf and the index taken at each.
 * At the leaf, idx is a record index (== ncells: just past the end). */
typedef struct bt_path {
    int depth;
    uint32_t pg[BT_MAXDEPTH];
    int idx[BT_MAXDEPTH];
    /* Set by a writer's bt_seek: the pages' images and whether each is
     * already the writer's own, valid while epoch == pager.epoch. */
    uint64_t epoch;
    uint8_t *ptr[BT_MAXDEPTH];
    uint8_t mine[BT_MAXDEPTH];
} bt_path;

/* A growable output buffer for copied records. */
typedef struct bt_buf {
    uint8_t *data;
    size_t len, cap;
} bt_buf;

int bt_buf_reserve(bt_buf *b, size_t more);

/* Positions path at the first record >= probe (QS_NOTFOUND: none). */
int bt_seek(bt_ctx *c, const bt_key *probe, bt_path *path);
/* Like bt_seek, but moves past a leaf's end so path is on a record: for
 * reading (an insert needs bt_seek's unsettled position). */
int bt_seek_ge(bt_ctx *c, const bt_key *probe, bt_path *path);
/* bt_seek_ge for a scan that makes its next probe from the record it found
 * (past that key, or past an id): QS_CORRUPT when the record found sorts
 * before probe, or is (key, UINT64_MAX) for a probe with seq UINT64_MAX
 * ("past every record of this key"; no record has that seq).  A tree
 * whose keys are out of order answers so, and the scan would find the same
 * records again and never end.  path is set as by bt_seek_ge either way. */
int bt_seek_onward(bt_ctx *c, const bt_key *probe, bt_path *path);
/* First / last record (QS_NOTFOUND when the tree is empty). */
int bt_first(bt_ctx *c, bt_path *path);
int bt_last(bt_ctx *c, bt_path *path);
/* Steps (QS_NOTFOUND past either end). */
int bt_next(bt_ctx *c, bt_path *path);
int bt_prev(bt_ctx *c, bt_path *path);

/* The record at path: its key appended to kout (if non-NULL, preceded by a
 * u32 length when with_len), its value likewise to vout, its seq to *seq
 * (if non-NULL). */
int bt_read(bt_ctx *c, const bt_path *path, bt_buf *kout, bt_buf *vout,
            int with_len, uint64_t *seq);

/* The value of the record at path into buf when it fits in cap bytes;
 * *vlen gets its length either way (buf untouched when longer). */
int bt_read_into(bt_ctx *c, const bt_path *path, void *buf, size_t cap, size_t *vlen);

/* Whether the record at path has key (key, klen), seq ignored: *eq 0/1. */
int bt_key_is(bt_ctx *c, const bt_path *path, const uint8_t *key, uint32_t klen, int *eq);

/* bt_key_is, and when the key is key: the record's seq in *seq and its
 * value appended to vout (if not NULL) -- one parse of the cell instead of
 * three.  Same returns as bt_read; *eq 0 leaves *seq and vout alone. */
int bt_item(bt_ctx *c, const bt_path *path, const uint8_t *key, uint32_t klen, int *eq,
            uint64_t *seq, bt_buf *vout);

/* Inserts record (k, val) at path, which must come from bt_seek(k). */
int bt_insert(bt_ctx *c, bt_path *path, const bt_key *k, const void *val, size_t vlen);

/* bt_insert that, when the leaf had room (*kept = 1), leaves path just past
 * the new record: a following insert of a key that sorts after k and
 * before the record after it may reuse path without seeking.  *kept = 0:
 * path is no longer valid. */
int bt_insert_next(bt_ctx *c, bt_path *path, const bt_key *k, const void *val, size_t vlen,
                   int *kept);

/* Replaces the value of the record at path (from a writer's bt_seek or
 * bt_next) with val, keeping its key and seq, inside its leaf: the cell is
 * rewritten where it lies, the cells below it moved by the size's change,
 * and no count above the leaf changes (the record stays where it was).
 * *done 0 when that is not possible -- the record's value is or would be
 * on overflow pages, or the leaf has no room for the larger cell -- and
 * then nothing changed: the caller deletes and inserts.  *done 1: path is
 * still on the record.  Returns 0, or QS_NOTFOUND (path not on a record),
 * QS_CORRUPT, or the pager's errors with the leaf unchanged. */
int bt_replace(bt_ctx *c, bt_path *path, const void *val, size_t vlen, int *done);

/* The values of a run of records, one after another from p, in a layout
 * the caller describes (the tree reads nothing else of it):
 * lens != NULL: value i is the lens[i] bytes following value i-1;
 * lens == NULL: each value follows a header of hdr (>= 4) bytes that ends
 * with the value's length, 4 bytes little-endian; p is at the first header.
 * The caller checks lengths and bounds. */
typedef struct bt_vals {
    const uint8_t *p;
    const uint32_t *lens;
    uint32_t hdr;
} bt_vals;

static inline uint32_t bt_vals_len(const bt_vals *v)
{
    if (v->lens)
        return *v->lens;
    const uint8_t *h = v->p + v->hdr - 4;
    return (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
}

static inline const uint8_t *bt_vals_data(const bt_vals *v)
{
    return v->lens ? v->p : v->p + v->hdr;
}

static inline void bt_vals_next(bt_vals *v)
{
    if (v->lens)
        v->p += *v->lens++;
    else
        v->p += v->hdr + bt_vals_len(v);
}

/* Inserts the n records (key, seq0 + i) -> the plen bytes of prefix (the
 * same for each: a layout of the caller's) followed by value i, the values
 * taken from *vals (left after the last one on success), in one pass:
 * leaves are filled in place and the counts above each updated once.  The
 * caller checks that plen plus each value's length fits a value.  The records
 * must all sort after every record of key and before the next key (as
 * appending ids to a queue does).  *path is used without seeking when
 * *valid (the caller vouches that it is where the first record goes: the
 * tree unchanged since a previous call left it there); on success *valid
 * says whether *path is left just past the last record inserted. */
int bt_append_run(bt_ctx *c, bt_path *path, int *valid, const uint8_t *key, uint32_t klen,
                  uint64_t seq0, size_t n, const uint8_t *prefix, uint32_t plen,
                  bt_vals *vals);

/* Appends a value to key, with the file's next sequence number (so after
 * every value the key has).  *seq_out (may be NULL) gets it. */
int bt_putdup(bt_ctx *c, const uint8_t *key, uint32_t klen, const void *val,
              size_t vlen, uint64_t *seq_out);

/* Makes (key, val) key's only record: removes every record key has and
 * appends val with the file's next sequence number.  *removed gets how many
 * records were removed.  On an error the tree may have lost some of key's
 * records and not gained the new one: as after any write that fails in the
 * middle, the caller's transaction is spoiled (qstore.h, "Record
 * functions"). */
int bt_put_only(bt_ctx *c, const uint8_t *key, uint32_t klen, const void *val, size_t vlen,
                uint64_t *removed);

/* Removes the record at path (path is not valid afterwards). */
int bt_delete(bt_ctx *c, bt_path *path);

/* bt_delete that, when the leaf kept the removed record's successor and
 * needed no merge (*kept = 1), leaves path on that successor.  *kept = 0:
 * path is no longer valid (seek again). */
int bt_delete_next(bt_ctx *c, bt_path *path, int *kept);

/* Number of records < probe. */
int bt_rank(bt_ctx *c, const bt_key *probe, uint64_t *rank);

/* Number of records in the tree. */
int bt_total(bt_ctx *c, uint64_t *n);

/* Height of the tree (0 when empty). */
int bt_depth(bt_ctx *c, uint32_t *depth);

/* Integrity walk of the committed tree of namespace c->ns, reading pages from
 * disk.  Marks every page it owns in seen[] (QS_CORRUPT when marked
 * twice).  *records gets the count.  On damage writes a description into
 * msg. */
int bt_check(bt_ctx *c, uint8_t *seen, uint64_t *records, char *msg, size_t msgcap);

#endif
