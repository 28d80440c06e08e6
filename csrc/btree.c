/* btree.c -- see btree.h and docs/DESIGN.md. */
#include "btree.h"
#include "qstore.h"
#include <stdio.h>
#include <stdlib.h>

/* Tree page header. */
#define H_TYPE 0
#define H_NCELLS 2
#define H_CSTART 4
#define H_FRAG 6
#define H_RIGHT 8
#define H_RCOUNT 16
#define H_SIZE 24u
#define CAPACITY (PG_USABLE - H_SIZE)
_Static_assert(H_NCELLS == TREE_NCELLS && H_CSTART == TREE_CSTART && H_SIZE == TREE_HDR,
               "the log's view of the tree page header (pagefmt.h) matches btree.c");

/* Leaf cell. */
#define L_KLEN 0
#define L_FLAGS 2
#define L_VLEN 4
#define L_SEQ 8
#define L_DATA 16u
/* Interior cell. */
#define I_CHILD 0
#define I_KLEN 4
#define I_FLAGS 6
#define I_COUNT 8
#define I_SEQ 16
#define I_DATA 24u

#define F_OVFL 1u
#define MAX_LOCAL 1000u         /* largest inline cell */
#define KEY_PREFIX 512u         /* key bytes kept inline in an overflow cell */
#define MAX_CELL 1000u

/* Overflow page. */
#define OV_NEXT 4
#define OV_DATA 8u
#define OV_CAP (PG_USABLE - OV_DATA)

static inline uint32_t ncells(const uint8_t *pg) { return rd16(pg + H_NCELLS); }
static inline uint16_t cell_off(const uint8_t *pg, uint32_t i) { return rd16(pg + H_SIZE + 2 * i); }

/* A parsed cell. */
typedef struct cellv {
    const uint8_t *key;     /* inline key bytes */
    uint32_t kin, klen;     /* inline / full key length */
    uint64_t seq;
    uint32_t ovfl;          /* first overflow page, 0 = none */
    const uint8_t *val;     /* leaf, inline value */
    uint32_t vlen;
    uint32_t child;         /* interior */
    uint64_t count;
    uint32_t size;          /* bytes of the cell */
} cellv;

int bt_buf_reserve(bt_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < b->len + more)
        ncap *= 2;
    uint8_t *nd = realloc(b->data, ncap);
    if (!nd)
        return QS_NOMEM;
    b->data = nd;
    b->cap = ncap;
    return 0;
}

static int node_ok(const uint8_t *pg)
{
    uint32_t n = ncells(pg), cs = rd16(pg + H_CSTART);
    if ((pg[H_TYPE] != PT_LEAF && pg[H_TYPE] != PT_INTERIOR) ||
        H_SIZE + 2 * n > cs || cs > PG_USABLE)
        return QS_CORRUPT;
    return 0;
}

static int parse_leaf(const uint8_t *pg, uint32_t i, cellv *cv)
{
    uint32_t off = cell_off(pg, i);
    if (off < H_SIZE || off + L_DATA > PG_USABLE)
        return QS_CORRUPT;
    const uint8_t *c = pg + off;
    cv->klen = rd16(c + L_KLEN);
    cv->vlen = rd32(c + L_VLEN);
    cv->seq = rd64(c + L_SEQ);
    if (cv->klen > QS_MAX_KEY || cv->vlen > QS_MAX_VALUE)
        return QS_CORRUPT;
    uint64_t size;
    if (rd16(c + L_FLAGS) & F_OVFL) {
        if (off + L_DATA + 4 > PG_USABLE || (cv->ovfl = rd32(c + L_DATA)) == 0)
            return QS_CORRUPT;
        cv->kin = cv->klen < KEY_PREFIX ? cv->klen : KEY_PREFIX;
        cv->key = c + L_DATA + 4;
        cv->val = NULL;
        size = L_DATA + 4 + (uint64_t)cv->kin;
    } else {
        cv->ovfl = 0;
        cv->kin = cv->klen;
        cv->key = c + L_DATA;
        cv->val = cv->key + cv->klen;
        size = L_DATA + (uint64_t)cv->klen + cv->vlen;
    }
    if (off + size > PG_USABLE)
        return QS_CORRUPT;
    cv->size = (uint32_t)size;
    return 0;
}

static int parse_int(const uint8_t *pg, uint32_t i, cellv *cv)
{
    uint32_t off = cell_off(pg, i);
    if (off < H_SIZE || off + I_DATA > PG_USABLE)
        return QS_CORRUPT;
    const uint8_t *c = pg + off;
    cv->child = rd32(c + I_CHILD);
    cv->klen = rd16(c + I_KLEN);
    cv->count = rd64(c + I_COUNT);
    cv->seq = rd64(c + I_SEQ);
    cv->val = NULL;
    cv->vlen = 0;
    if (cv->klen > QS_MAX_KEY)
        return QS_CORRUPT;
    if (rd16(c + I_FLAGS) & F_OVFL) {
        if (off + I_DATA + 4 > PG_USABLE || (cv->ovfl = rd32(c + I_DATA)) == 0)
            return QS_CORRUPT;
        cv->kin = cv->klen < KEY_PREFIX ? cv->klen : KEY_PREFIX;
        cv->key = c + I_DATA + 4;
        cv->size = I_DATA + 4 + cv->kin;
    } else {
        cv->ovfl = 0;
        cv->kin = cv->klen;
        cv->key = c + I_DATA;
        cv->size = I_DATA + cv->klen;
    }
    if (off + cv->size > PG_USABLE)
        return QS_CORRUPT;
    return 0;
}

static inline int parse(const uint8_t *pg, uint32_t i, cellv *cv)
{
    return pg[H_TYPE] == PT_LEAF ? parse_leaf(pg, i, cv) : parse_int(pg, i, cv);
}

static inline uint32_t root_of(bt_ctx *c) { return pg_meta_of(c->p, c->wview)->root[c->ns]; }
static inline void set_root(bt_ctx *c, uint32_t r) { c->p->wmeta.root[c->ns] = r; }

/* ---- overflow chains ---------------------------------------------------- */

/* Copies len bytes starting skip bytes into the chain at first to dst. */
static int ovfl_read(bt_ctx *c, uint32_t first, uint64_t skip, uint64_t len, uint8_t *dst)
{
    uint32_t pgno = first;
    uint64_t limit = (skip + len) / OV_CAP + 2;
    while (len) {
        uint8_t *pg;
        if (pgno == 0 || limit-- == 0)
            return QS_CORRUPT;
        int rc = pg_get(c->p, c->wview, pgno, &pg);
        if (rc)
            return rc;
        if (pg[0] != PT_OVERFLOW)
            return QS_CORRUPT;
        if (skip >= OV_CAP)
            skip -= OV_CAP;
        else {
            uint64_t n = OV_CAP - skip;
            if (n > len)
                n = len;
            memcpy(dst, pg + OV_DATA + skip, n);
            dst += n;
            len -= n;
            skip = 0;
        }
        pgno = rd32(pg + OV_NEXT);
    }
    return 0;
}

/* Writes a then b into a new chain; *first gets its first page. */
static int ovfl_write(bt_ctx *c, const uint8_t *a, uint64_t alen, const uint8_t *b,
                      uint64_t blen, uint32_t *first)
{
    uint8_t *prev = NULL;
    *first = 0;
    do {
        uint32_t pgno;
        uint8_t *pg;
        int rc = pg_alloc(c->p, &pgno, &pg);
        if (rc)
            return rc;
        pg[0] = PT_OVERFLOW;
        if (prev)
            wr32(prev + OV_NEXT, pgno);
        else
            *first = pgno;
        uint32_t room = OV_CAP, at = OV_DATA;
        if (alen) {
            uint32_t n = alen < room ? (uint32_t)alen : room;
            memcpy(pg + at, a, n);
            a += n;
            alen -= n;
            at += n;
            room -= n;
        }
        if (blen && room) {
            uint32_t n = blen < room ? (uint32_t)blen : room;
            memcpy(pg + at, b, n);
            b += n;
            blen -= n;
        }
        prev = pg;  /* stays valid: buffers only move at pg_trim */
    } while (alen || blen);
    return 0;
}

static int ovfl_free(bt_ctx *c, uint32_t first, uint64_t bytes)
{
    uint32_t pgno = first;
    uint64_t pages = bytes / OV_CAP + 1;
    while (pgno) {
        uint8_t *pg;
        if (pages-- == 0)
            return QS_CORRUPT;
        int rc = pg_get(c->p, 1, pgno, &pg);
        if (rc)
            return rc;
        if (pg[0] != PT_OVERFLOW)
            return QS_CORRUPT;
        uint32_t next = rd32(pg + OV_NEXT);
        if ((rc = pg_free(c->p, pgno)) != 0)
            return rc;
        pgno = next;
    }
    return 0;
}

static uint64_t ovfl_bytes(const cellv *cv, int leaf)
{
    return (uint64_t)(cv->klen - cv->kin) + (leaf ? cv->vlen : 0);
}

/* Full key of a cell: into *tmp (malloc'd) when it has an overflow part. */
static int full_key(bt_ctx *c, const cellv *cv, const uint8_t **key, uint8_t **tmp)
{
    *tmp = NULL;
    if (cv->kin == cv->klen) {
        *key = cv->key;
        return 0;
    }
    uint8_t *k = malloc(cv->klen);
    if (!k)
        return QS_NOMEM;
    memcpy(k, cv->key, cv->kin);
    int rc = ovfl_read(c, cv->ovfl, 0, cv->klen - cv->kin, k + cv->kin);
    if (rc) {
        free(k);
        return rc;
    }
    *key = *tmp = k;
    return 0;
}

/* ---- comparison ------------------------------------------------------- */

/* *res = sign of (probe - cell); with_seq 0 compares keys only. */
static int cmp_cell(bt_ctx *c, const bt_key *pk, const cellv *cv, int with_seq, int *res)
{
    uint32_t n = pk->klen < cv->kin ? pk->klen : cv->kin;
    int r = n ? memcmp(pk->key, cv->key, n) : 0;
    if (r == 0 && cv->kin < cv->klen && pk->klen > cv->kin) {
        /* The prefixes tie and both keys go on: read the rest. */
        uint32_t rest = (pk->klen < cv->klen ? pk->klen : cv->klen) - cv->kin;
        uint8_t *tmp = malloc(rest ? rest : 1);
        if (!tmp)
            return QS_NOMEM;
        int rc = ovfl_read(c, cv->ovfl, 0, rest, tmp);
        if (rc) {
            free(tmp);
            return rc;
        }
        r = memcmp(pk->key + cv->kin, tmp, rest);
        free(tmp);
    }
    if (r == 0 && pk->klen != cv->klen)
        r = pk->klen < cv->klen ? -1 : 1;
    if (r == 0 && with_seq && pk->seq != cv->seq)
        r = pk->seq < cv->seq ? -1 : 1;
    *res = r;
    return 0;
}

/* Leaf: first index whose record is >= probe.  Interior: first index whose
 * separator is > probe (== ncells: the right child). */
/* Compares probe with an inline cell without parsing it in full: the hot
 * loop of every descent.  Returns 0 and sets *r, or 1 when the cell needs
 * the general path (overflow or damage). */
static inline int quick_cmp(const uint8_t *pg, uint32_t i, int leaf, const bt_key *pk, int *r)
{
    uint32_t off = cell_off(pg, i);
    const uint8_t *cp = pg + off;
    uint32_t hdr = leaf ? L_DATA : I_DATA;
    if (off < H_SIZE || off + hdr > PG_USABLE)
        return 1;
    uint32_t klen = rd16(cp + (leaf ? L_KLEN : I_KLEN));
    if ((rd16(cp + (leaf ? L_FLAGS : I_FLAGS)) & F_OVFL) || off + hdr + klen > PG_USABLE)
        return 1;
    uint32_t n = pk->klen < klen ? pk->klen : klen;
    if (n >= 8) {
        /* Most keys differ in their first 8 bytes: one word compare. */
        uint64_t a, b;
        memcpy(&a, pk->key, 8);
        memcpy(&b, cp + hdr, 8);
        if (a != b) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            a = __builtin_bswap64(a);
            b = __builtin_bswap64(b);
#endif
            *r = a < b ? -1 : 1;
            return 0;
        }
    }
    int v = n ? memcmp(pk->key, cp + hdr, n) : 0;
    if (v == 0 && pk->klen != klen)
        v = pk->klen < klen ? -1 : 1;
    if (v == 0) {
        uint64_t seq = rd64(cp + (leaf ? L_SEQ : I_SEQ));
        if (pk->seq != seq)
            v = pk->seq < seq ? -1 : 1;
    }
    *r = v;
    return 0;
}

static int node_search(bt_ctx *c, const uint8_t *pg, const bt_key *pk, uint32_t *pos)
{
    int leaf = pg[H_TYPE] == PT_LEAF;
    uint32_t lo = 0, hi = ncells(pg);
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        cellv cv;
        int r, rc;
        if (quick_cmp(pg, mid, leaf, pk, &r) != 0) {
            if ((rc = parse(pg, mid, &cv)) != 0)
                return rc;
            if ((rc = cmp_cell(c, pk, &cv, 1, &r)) != 0)
                return rc;
        }
        if (r > 0 || (!leaf && r == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    *pos = lo;
    return 0;
}

static uint32_t child_at(const uint8_t *pg, uint32_t i, uint64_t *count)
{
    if (i >= ncells(pg)) {
        if (count)
            *count = rd64(pg + H_RCOUNT);
        return rd32(pg + H_RIGHT);
    }
    const uint8_t *cp = pg + cell_off(pg, i);
    if (count)
        *count = rd64(cp + I_COUNT);
    return rd32(cp + I_CHILD);
}

static void set_child(uint8_t *pg, uint32_t i, uint32_t child, uint64_t count)
{
    if (i >= ncells(pg)) {
        wr32(pg + H_RIGHT, child);
        wr64(pg + H_RCOUNT, count);
    } else {
        uint8_t *cp = pg + cell_off(pg, i);
        wr32(cp + I_CHILD, child);
        wr64(cp + I_COUNT, count);
    }
}

static void add_count(uint8_t *pg, uint32_t i, int64_t delta)
{
    uint8_t *at = i >= ncells(pg) ? pg + H_RCOUNT : pg + cell_off(pg, i) + I_COUNT;
    wr64(at, rd64(at) + (uint64_t)delta);
}

static uint64_t node_count(const uint8_t *pg)
{
    if (pg[H_TYPE] == PT_LEAF)
        return ncells(pg);
    uint64_t n = rd64(pg + H_RCOUNT);
    for (uint32_t i = 0; i < ncells(pg); i++)
        n += rd64(pg + cell_off(pg, i) + I_COUNT);
    return n;
}

/* ---- navigation ----------------------------------------------------------- */

/* node_ok plus, once per image read from disk, every cell: each pointer
 * past the pointer array, each cell inside the page and well formed.
 * After it, cell access needs no bounds checks (the fuzzer's lesson). */
static int node_verify(uint8_t *pg)
{
    int rc = node_ok(pg);
    _Atomic uint8_t *checked = pg_checked(pg);
    if (rc || atomic_load_explicit(checked, memory_order_relaxed))
        return rc;
    uint32_t n = ncells(pg), lo = H_SIZE + 2 * n;
    for (uint32_t i = 0; i < n; i++) {
        cellv cv;
        if (cell_off(pg, i) < lo || parse(pg, i, &cv) != 0)
            return QS_CORRUPT;
        if (pg[H_TYPE] == PT_INTERIOR && cv.child == 0)
            return QS_CORRUPT;
    }
    if (pg[H_TYPE] == PT_INTERIOR && rd32(pg + H_RIGHT) == 0)
        return QS_CORRUPT;
    atomic_store_explicit(checked, 1, memory_order_relaxed);
    return 0;
}

static int load(bt_ctx *c, uint32_t pgno, uint8_t **pg)
{
    int rc = pg_get(c->p, c->wview, pgno, pg);
    return rc ? rc : node_verify(*pg);
}

int bt_seek(bt_ctx *c, const bt_key *probe, bt_path *path)
{
    uint32_t pgno = root_of(c);
    path->depth = 0;
    path->epoch = 0;
    if (!pgno)
        return QS_NOTFOUND;
    for (int d = 0;; d++) {
        uint8_t *pg;
        uint32_t pos;
        int rc, mine = 0;
        if (d >= BT_MAXDEPTH)
            return QS_CORRUPT;
        if (c->wview) {
            if ((rc = pg_get_mine(c->p, pgno, &pg, &mine)) != 0 || (rc = node_verify(pg)) != 0)
                return rc;
        } else if ((rc = load(c, pgno, &pg)) != 0)
            return rc;
        if ((rc = node_search(c, pg, probe, &pos)) != 0)
            return rc;
        path->pg[d] = pgno;
        path->idx[d] = (int)pos;
        path->ptr[d] = pg;
        path->mine[d] = (uint8_t)mine;
        if (pg[H_TYPE] == PT_LEAF) {
            path->depth = d + 1;
            path->epoch = c->p->epoch;
            return 0;
        }
        pgno = child_at(pg, pos, NULL);
    }
}

/* Descends from level d (whose idx is set) to a leaf, taking the first
 * (leftmost) or last child below. */
static int descend(bt_ctx *c, bt_path *path, int d, int rightmost)
{
    path->epoch = 0;
    for (;;) {
        uint8_t *pg;
        int rc = load(c, path->pg[d], &pg);
        if (rc)
            return rc;
        if (pg[H_TYPE] == PT_LEAF) {
            path->depth = d + 1;
            if (rightmost)
                path->idx[d] = (int)ncells(pg) - 1;
            return 0;
        }
        if (d + 1 >= BT_MAXDEPTH)
            return QS_CORRUPT;
        if (rightmost)
            path->idx[d] = (int)ncells(pg);
        path->pg[d + 1] = child_at(pg, (uint32_t)path->idx[d], NULL);
        path->idx[d + 1] = 0;
        d++;
    }
}

/* Moves to the first record of the next leaf (QS_NOTFOUND: none). */
static int next_leaf(bt_ctx *c, bt_path *path)
{
    path->epoch = 0;
    for (int d = path->depth - 2; d >= 0; d--) {
        uint8_t *pg;
        int rc = load(c, path->pg[d], &pg);
        if (rc)
            return rc;
        if ((uint32_t)path->idx[d] < ncells(pg)) {
            path->idx[d]++;
            path->pg[d + 1] = child_at(pg, (uint32_t)path->idx[d], NULL);
            path->idx[d + 1] = 0;
            return descend(c, path, d + 1, 0);
        }
    }
    return QS_NOTFOUND;
}

static int prev_leaf(bt_ctx *c, bt_path *path)
{
    path->epoch = 0;
    for (int d = path->depth - 2; d >= 0; d--) {
        uint8_t *pg;
        int rc = load(c, path->pg[d], &pg);
        if (rc)
            return rc;
        if (path->idx[d] > 0) {
            path->idx[d]--;
            path->pg[d + 1] = child_at(pg, (uint32_t)path->idx[d], NULL);
            return descend(c, path, d + 1, 1);
        }
    }
    return QS_NOTFOUND;
}

/* Makes path point at a record, moving forward past leaf ends. */
static int settle_forward(bt_ctx *c, bt_path *path)
{
    for (;;) {
        uint8_t *pg;
        int leaf = path->depth - 1, rc;
        if (path->depth == 0)
            return QS_NOTFOUND;
        if ((rc = load(c, path->pg[leaf], &pg)) != 0)
            return rc;
        if ((uint32_t)path->idx[leaf] < ncells(pg))
            return 0;
        if ((rc = next_leaf(c, path)) != 0)
            return rc;
    }
}

static int settle_backward(bt_ctx *c, bt_path *path)
{
    for (;;) {
        int leaf = path->depth - 1, rc;
        if (path->depth == 0)
            return QS_NOTFOUND;
        if (path->idx[leaf] >= 0) {
            uint8_t *pg;
            if ((rc = load(c, path->pg[leaf], &pg)) != 0)
                return rc;
            if ((uint32_t)path->idx[leaf] < ncells(pg))
                return 0;
            path->idx[leaf] = (int)ncells(pg) - 1;
            continue;
        }
        if ((rc = prev_leaf(c, path)) != 0)
            return rc;
    }
}

int bt_seek_ge(bt_ctx *c, const bt_key *probe, bt_path *path)
{
    int rc = bt_seek(c, probe, path);
    return rc ? rc : settle_forward(c, path);
}

int bt_first(bt_ctx *c, bt_path *path)
{
    uint32_t r = root_of(c);
    path->depth = 0;
    path->epoch = 0;
    if (!r)
        return QS_NOTFOUND;
    path->pg[0] = r;
    path->idx[0] = 0;
    int rc = descend(c, path, 0, 0);
    return rc ? rc : settle_forward(c, path);
}

int bt_last(bt_ctx *c, bt_path *path)
{
    uint32_t r = root_of(c);
    path->depth = 0;
    path->epoch = 0;
    if (!r)
        return QS_NOTFOUND;
    path->pg[0] = r;
    path->idx[0] = 0;
    int rc = descend(c, path, 0, 1);
    return rc ? rc : settle_backward(c, path);
}

int bt_next(bt_ctx *c, bt_path *path)
{
    if (path->depth == 0)
        return QS_NOTFOUND;
    path->idx[path->depth - 1]++;
    return settle_forward(c, path);
}

int bt_prev(bt_ctx *c, bt_path *path)
{
    if (path->depth == 0)
        return QS_NOTFOUND;
    path->idx[path->depth - 1]--;
    return settle_backward(c, path);
}

static int cell_at(bt_ctx *c, const bt_path *path, cellv *cv)
{
    uint8_t *pg;
    int leaf = path->depth - 1, rc;
    if (path->depth == 0)
        return QS_NOTFOUND;
    /* the writer's own image of the leaf, as path_write trusts it: a taker
     * or an ack walking a queue reads each cell there, with no lookup */
    if (path->epoch == c->p->epoch && path->mine[leaf])
        pg = path->ptr[leaf];
    else if ((rc = load(c, path->pg[leaf], &pg)) != 0)
        return rc;
    if (path->idx[leaf] < 0 || (uint32_t)path->idx[leaf] >= ncells(pg) || pg[H_TYPE] != PT_LEAF)
        return QS_NOTFOUND;
    return parse_leaf(pg, (uint32_t)path->idx[leaf], cv);
}

static int append_value(bt_ctx *c, const cellv *cv, bt_buf *vout, size_t hdr);

int bt_read(bt_ctx *c, const bt_path *path, bt_buf *kout, bt_buf *vout,
            int with_len, uint64_t *seq)
{
    cellv cv;
    int rc = cell_at(c, path, &cv);
    if (rc)
        return rc;
    if (seq)
        *seq = cv.seq;
    size_t hdr = with_len ? 4 : 0;
    /* An overflow chain longer than the file could hold is damage: say so
     * before reserving room for it. */
    if (cv.ovfl && ovfl_bytes(&cv, 1) / OV_CAP >= pg_meta_of(c->p, c->wview)->npages)
        return QS_CORRUPT;
    if (kout && hdr + cv.klen > 0) {
        if ((rc = bt_buf_reserve(kout, hdr + cv.klen)) != 0)
            return rc;
        uint8_t *d = kout->data + kout->len;
        if (with_len)
            wr32(d, cv.klen);
        if (cv.kin)
            memcpy(d + hdr, cv.key, cv.kin);
        if (cv.kin < cv.klen && (rc = ovfl_read(c, cv.ovfl, 0, cv.klen - cv.kin, d + hdr + cv.kin)) != 0)
            return rc;
        kout->len += hdr + cv.klen;
    }
    return vout ? append_value(c, &cv, vout, hdr) : 0;
}

int bt_read_into(bt_ctx *c, const bt_path *path, void *buf, size_t cap, size_t *vlen)
{
    cellv cv;
    int rc = cell_at(c, path, &cv);
    if (rc)
        return rc;
    if (cv.ovfl && ovfl_bytes(&cv, 1) / OV_CAP >= pg_meta_of(c->p, c->wview)->npages)
        return QS_CORRUPT;
    *vlen = cv.vlen;
    if (cv.vlen > cap || !cv.vlen)
        return 0;
    if (cv.ovfl)
        return ovfl_read(c, cv.ovfl, cv.klen - cv.kin, cv.vlen, buf);
    memcpy(buf, cv.val, cv.vlen);
    return 0;
}

/* Appends cell cv's value to vout, after its length (u32) when hdr is 4. */
static int append_value(bt_ctx *c, const cellv *cv, bt_buf *vout, size_t hdr)
{
    if (hdr + cv->vlen == 0)
        return 0;
    int rc = bt_buf_reserve(vout, hdr + cv->vlen);
    if (rc)
        return rc;
    uint8_t *d = vout->data + vout->len;
    if (hdr)
        wr32(d, cv->vlen);
    if (cv->ovfl)
        rc = ovfl_read(c, cv->ovfl, cv->klen - cv->kin, cv->vlen, d + hdr);
    else if (cv->vlen)
        memcpy(d + hdr, cv->val, cv->vlen);
    if (rc)
        return rc;
    vout->len += hdr + cv->vlen;
    return 0;
}

int bt_item(bt_ctx *c, const bt_path *path, const uint8_t *key, uint32_t klen, int *eq,
            uint64_t *seq, bt_buf *vout)
{
    cellv cv;
    int r, rc = cell_at(c, path, &cv);
    *eq = 0;
    if (rc)
        return rc;
    bt_key pk = {key, klen, 0};
    if (cv.klen != klen)
        return 0;
    if ((rc = cmp_cell(c, &pk, &cv, 0, &r)) != 0 || r != 0)
        return rc;
    if (cv.ovfl && ovfl_bytes(&cv, 1) / OV_CAP >= pg_meta_of(c->p, c->wview)->npages)
        return QS_CORRUPT;
    *eq = 1;
    *seq = cv.seq;
    return vout ? append_value(c, &cv, vout, 0) : 0;
}

int bt_key_is(bt_ctx *c, const bt_path *path, const uint8_t *key, uint32_t klen, int *eq)
{
    cellv cv;
    int r, rc = cell_at(c, path, &cv);
    if (rc)
        return rc;
    bt_key pk = {key, klen, 0};
    if (cv.klen != klen) {
        *eq = 0;
        return 0;
    }
    if ((rc = cmp_cell(c, &pk, &cv, 0, &r)) != 0)
        return rc;
    *eq = r == 0;
    return 0;
}

int bt_seek_onward(bt_ctx *c, const bt_key *probe, bt_path *path)
{
    int rc = bt_seek_ge(c, probe, path);
    if (rc)
        return rc;
    cellv cv;
    int r;
    if ((rc = cell_at(c, path, &cv)) != 0 || (rc = cmp_cell(c, probe, &cv, 1, &r)) != 0)
        return rc;
    /* r > 0: the tree answered with a record before the probe.  r == 0
     * with seq UINT64_MAX: a record no counter hands out, found by a probe
     * that means "past every record of this key". */
    return r > 0 || (r == 0 && probe->seq == UINT64_MAX) ? QS_CORRUPT : 0;
}

/* ---- page editing --------------------------------------------------------- */

/* Writable image of the page at path level d, reusing the pointer bt_seek
 * found when it is still current and already the writer's own. */
static int path_write(bt_ctx *c, bt_path *path, int d, uint8_t **pg)
{
    if (path->epoch == c->p->epoch && path->mine[d]) {
        *pg = path->ptr[d];
        return 0;
    }
    int rc = pg_write(c->p, path->pg[d], pg);
    if (rc == 0 && path->epoch == c->p->epoch) {
        path->ptr[d] = *pg;
        path->mine[d] = 1;
    }
    return rc;
}

static void node_init(uint8_t *pg, int type)
{
    memset(pg, 0, PG_USABLE);
    pg[H_TYPE] = (uint8_t)type;
    wr16(pg + H_CSTART, PG_USABLE);
}

static uint32_t node_used(const uint8_t *pg)
{
    return (PG_USABLE - rd16(pg + H_CSTART)) - rd16(pg + H_FRAG) + 2 * ncells(pg);
}

static void defragment(uint8_t *pg)
{
    uint8_t tmp[PG_USABLE];
    uint32_t n = ncells(pg), top = PG_USABLE;
    memcpy(tmp, pg, PG_USABLE);
    for (uint32_t i = 0; i < n; i++) {
        cellv cv;
        if (parse(tmp, i, &cv) != 0 || cv.size > top - (H_SIZE + 2 * n)) {
            memcpy(pg, tmp, PG_USABLE);     /* verified pages never get here */
            return;
        }
        top -= cv.size;
        memcpy(pg + top, tmp + cell_off(tmp, i), cv.size);
        wr16(pg + H_SIZE + 2 * i, (uint16_t)top);
    }
    wr16(pg + H_CSTART, (uint16_t)top);
    wr16(pg + H_FRAG, 0);
}

/* Inserts cell bytes at index i if they fit: returns 1, else 0. */
static int node_put(uint8_t *pg, uint32_t i, const uint8_t *cell, uint32_t size)
{
    uint32_t n = ncells(pg), cs = rd16(pg + H_CSTART);
    uint32_t gap = cs - (H_SIZE + 2 * n);
    if (gap < size + 2) {
        if (gap + rd16(pg + H_FRAG) < size + 2)
            return 0;
        defragment(pg);
        cs = rd16(pg + H_CSTART);
        if (cs < H_SIZE + 2 * n + size + 2)
            return 0;       /* the fragment count lied (a damaged page) */
    }
    cs -= size;
    memcpy(pg + cs, cell, size);
    uint8_t *ptrs = pg + H_SIZE;
    memmove(ptrs + 2 * (i + 1), ptrs + 2 * i, 2 * (n - i));
    wr16(ptrs + 2 * i, (uint16_t)cs);
    wr16(pg + H_CSTART, (uint16_t)cs);
    wr16(pg + H_NCELLS, (uint16_t)(n + 1));
    return 1;
}

static void node_remove(uint8_t *pg, uint32_t i, uint32_t size)
{
    uint32_t n = ncells(pg), off = cell_off(pg, i);
    uint8_t *ptrs = pg + H_SIZE;
    memmove(ptrs + 2 * i, ptrs + 2 * (i + 1), 2 * (n - i - 1));
    wr16(pg + H_NCELLS, (uint16_t)(n - 1));
    if (off == rd16(pg + H_CSTART))
        wr16(pg + H_CSTART, (uint16_t)(off + size));
    else
        wr16(pg + H_FRAG, (uint16_t)(rd16(pg + H_FRAG) + size));
    if (n == 1) {
        wr16(pg + H_CSTART, PG_USABLE);
        wr16(pg + H_FRAG, 0);
    }
}

/* Changes the size of cell i, at off and old bytes long, to size bytes
 * where it lies, keeping its first keep bytes (<= both sizes): its end
 * stays, and the cells below it in the cell area move with its front by
 * the change, their pointers with them.  The caller has checked that the
 * gap holds a growth.  Returns the cell's new offset; the bytes after the
 * kept ones are the caller's to write. */
static uint32_t node_resize(uint8_t *pg, uint32_t i, uint32_t off, uint32_t old, uint32_t size,
                            uint32_t keep)
{
    uint32_t n = ncells(pg), cs = rd16(pg + H_CSTART);
    if (size == old)
        return off;
    /* a grown cell starts lower, a shrunk one higher */
    uint32_t noff = off + old - size;
    memmove(pg + cs + noff - off, pg + cs, off + keep - cs);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t o = cell_off(pg, j);
        if (o < off)
            wr16(pg + H_SIZE + 2 * j, (uint16_t)(o + noff - off));
    }
    wr16(pg + H_SIZE + 2 * i, (uint16_t)noff);
    wr16(pg + H_CSTART, (uint16_t)(cs + noff - off));
    return noff;
}

/* Builds an interior cell for separator (key, klen, seq); long keys get an
 * overflow chain of their own. */
static int make_int_cell(bt_ctx *c, uint32_t child, uint64_t count, const uint8_t *key,
                         uint32_t klen, uint64_t seq, uint8_t *cell, uint32_t *size)
{
    wr32(cell + I_CHILD, child);
    wr16(cell + I_KLEN, (uint16_t)klen);
    wr64(cell + I_COUNT, count);
    wr64(cell + I_SEQ, seq);
    if (I_DATA + klen <= MAX_LOCAL) {
        wr16(cell + I_FLAGS, 0);
        if (klen)
            memcpy(cell + I_DATA, key, klen);
        *size = I_DATA + klen;
        return 0;
    }
    uint32_t first;
    int rc = ovfl_write(c, key + KEY_PREFIX, klen - KEY_PREFIX, NULL, 0, &first);
    if (rc)
        return rc;
    wr16(cell + I_FLAGS, F_OVFL);
    wr32(cell + I_DATA, first);
    memcpy(cell + I_DATA + 4, key, KEY_PREFIX);
    *size = I_DATA + 4 + KEY_PREFIX;
    return 0;
}

static int make_leaf_cell(bt_ctx *c, const bt_key *k, const uint8_t *val, size_t vlen,
                          uint8_t *cell, uint32_t *size)
{
    wr16(cell + L_KLEN, (uint16_t)k->klen);
    wr32(cell + L_VLEN, (uint32_t)vlen);
    wr64(cell + L_SEQ, k->seq);
    if (L_DATA + k->klen + vlen <= MAX_LOCAL) {
        wr16(cell + L_FLAGS, 0);
        if (k->klen)
            memcpy(cell + L_DATA, k->key, k->klen);
        if (vlen)
            memcpy(cell + L_DATA + k->klen, val, vlen);
        *size = L_DATA + k->klen + (uint32_t)vlen;
        return 0;
    }
    uint32_t kin = k->klen < KEY_PREFIX ? k->klen : KEY_PREFIX, first;
    int rc = ovfl_write(c, k->key + kin, k->klen - kin, val, vlen, &first);
    if (rc)
        return rc;
    wr16(cell + L_FLAGS, F_OVFL);
    wr32(cell + L_DATA, first);
    if (kin)
        memcpy(cell + L_DATA + 4, k->key, kin);
    *size = L_DATA + 4 + kin;
    return 0;
}

/* Cells of a page plus one new one, copied out for a split. */
typedef struct cellset {
    uint8_t data[2 * PG_USABLE];
    uint16_t off[PG_USABLE / 2 + 2];
    uint16_t size[PG_USABLE / 2 + 2];
    uint32_t n, bytes;
} cellset;

static void gather(const uint8_t *pg, uint32_t at, const uint8_t *cell, uint32_t csize,
                   cellset *s)
{
    uint32_t n = ncells(pg), w = 0;
    s->n = 0;
    s->bytes = 0;
    for (uint32_t i = 0; i <= n; i++) {
        const uint8_t *src;
        uint32_t sz;
        if (i == at) {
            src = cell;
            sz = csize;
            memcpy(s->data + w, src, sz);
            s->off[s->n] = (uint16_t)w;
            s->size[s->n++] = (uint16_t)sz;
            w += sz;
        }
        if (i == n)
            break;
        cellv cv;
        parse(pg, i, &cv);
        src = pg + cell_off(pg, i);
        memcpy(s->data + w, src, cv.size);
        s->off[s->n] = (uint16_t)w;
        s->size[s->n++] = (uint16_t)cv.size;
        w += cv.size;
    }
    s->bytes = w;
}

static void fill(uint8_t *pg, int type, const cellset *s, uint32_t from, uint32_t to)
{
    node_init(pg, type);
    for (uint32_t i = from; i < to; i++)
        node_put(pg, i - from, s->data + s->off[i], s->size[i]);
}

/* Where to split n cells: the count going left.  Appends at the end leave
 * the old page full; otherwise split at the byte midpoint. */
static uint32_t split_point(const cellset *s, uint32_t at)
{
    if (at == s->n - 1)
        return s->n - 1;
    if (at == 0)
        return 1;
    uint32_t acc = 0, m = 0;
    while (m < s->n - 1 && acc + s->size[m] + 2 <= (s->bytes + 2 * s->n) / 2) {
        acc += s->size[m] + 2;
        m++;
    }
    if (m == 0)
        m = 1;
    return m;
}

/* After child `left` at path level lvl+1 split into left and right (new page)
 * with separator cell sep (child/count fields ignored), fix level lvl. */
static int insert_in_parent(bt_ctx *c, bt_path *path, int lvl, uint32_t left, uint64_t nleft,
                            uint32_t right, uint64_t nright, uint8_t *sep, uint32_t sepsize)
{
    int rc;
    uint8_t *pg;
    wr32(sep + I_CHILD, left);
    wr64(sep + I_COUNT, nleft);
    if (lvl < 0) {
        uint32_t rootno;
        if ((rc = pg_alloc(c->p, &rootno, &pg)) != 0)
            return rc;
        node_init(pg, PT_INTERIOR);
        node_put(pg, 0, sep, sepsize);
        wr32(pg + H_RIGHT, right);
        wr64(pg + H_RCOUNT, nright);
        set_root(c, rootno);
        return 0;
    }
    if ((rc = pg_write(c->p, path->pg[lvl], &pg)) != 0)
        return rc;
    uint32_t i = (uint32_t)path->idx[lvl];
    set_child(pg, i, right, nright);
    if (node_put(pg, i, sep, sepsize))
        return 0;
    /* Split this interior page: the middle cell moves up. */
    static _Thread_local cellset s;
    gather(pg, i, sep, sepsize, &s);
    uint32_t oldright = rd32(pg + H_RIGHT);
    uint64_t oldrcount = rd64(pg + H_RCOUNT);
    uint32_t m = split_point(&s, i);
    if (m >= s.n - 1)
        m = s.n - 2;  /* the right page needs at least one cell */
    uint8_t up[MAX_CELL];
    uint32_t upsize = s.size[m];
    memcpy(up, s.data + s.off[m], upsize);
    uint32_t newpg;
    uint8_t *np;
    if ((rc = pg_alloc(c->p, &newpg, &np)) != 0)
        return rc;
    if ((rc = pg_write(c->p, path->pg[lvl], &pg)) != 0)
        return rc;
    fill(pg, PT_INTERIOR, &s, 0, m);
    wr32(pg + H_RIGHT, rd32(up + I_CHILD));
    wr64(pg + H_RCOUNT, rd64(up + I_COUNT));
    fill(np, PT_INTERIOR, &s, m + 1, s.n);
    wr32(np + H_RIGHT, oldright);
    wr64(np + H_RCOUNT, oldrcount);
    return insert_in_parent(c, path, lvl - 1, path->pg[lvl], node_count(pg), newpg,
                            node_count(np), up, upsize);
}

static int insert_impl(bt_ctx *c, bt_path *path, const bt_key *k, const void *val, size_t vlen,
                       int *kept)
{
    uint8_t cell[MAX_CELL];
    uint32_t size;
    int rc;
    if ((rc = make_leaf_cell(c, k, val, vlen, cell, &size)) != 0)
        return rc;
    uint8_t *pg;
    if (path->depth == 0) {
        uint32_t pgno;
        if ((rc = pg_alloc(c->p, &pgno, &pg)) != 0)
            return rc;
        node_init(pg, PT_LEAF);
        node_put(pg, 0, cell, size);
        set_root(c, pgno);
        return 0;
    }
    int leaf = path->depth - 1;
    for (int d = 0; d < leaf; d++) {
        if ((rc = path_write(c, path, d, &pg)) != 0)
            return rc;
        add_count(pg, (uint32_t)path->idx[d], 1);
    }
    if ((rc = path_write(c, path, leaf, &pg)) != 0)
        return rc;
    uint32_t at = (uint32_t)path->idx[leaf];
    if (node_put(pg, at, cell, size)) {
        path->idx[leaf] = (int)at + 1;
        *kept = 1;
        return 0;
    }
    uint32_t newpg, nleft = ncells(pg);
    uint8_t *np;
    if (at == nleft) {
        /* Appending to a full leaf (a queue's right edge): it stays as it
         * is and the new cell starts the right page -- what split_point
         * chooses for an append, without copying the page out and back. */
        if ((rc = pg_alloc(c->p, &newpg, &np)) != 0)
            return rc;
        node_init(np, PT_LEAF);
        node_put(np, 0, cell, size);
    } else {
        static _Thread_local cellset s;
        gather(pg, at, cell, size, &s);
        uint32_t m = split_point(&s, at);
        if ((rc = pg_alloc(c->p, &newpg, &np)) != 0)
            return rc;
        if ((rc = pg_write(c->p, path->pg[leaf], &pg)) != 0)
            return rc;
        fill(pg, PT_LEAF, &s, 0, m);
        fill(np, PT_LEAF, &s, m, s.n);
        nleft = m;
    }
    /* The separator is the right page's first key. */
    cellv first;
    parse_leaf(np, 0, &first);
    const uint8_t *fkey;
    uint8_t *tmp;
    if ((rc = full_key(c, &first, &fkey, &tmp)) != 0)
        return rc;
    uint8_t sep[MAX_CELL];
    uint32_t sepsize;
    rc = make_int_cell(c, 0, 0, fkey, first.klen, first.seq, sep, &sepsize);
    free(tmp);
    if (rc)
        return rc;
    return insert_in_parent(c, path, leaf - 1, path->pg[leaf], nleft, newpg, ncells(np),
                            sep, sepsize);
}

/* The leaf cell path ends at, read where the caller will change it: in
 * the writer's own image of the leaf (path_write), which a taker or an ack
 * walking a queue has at hand.  Sets *pg, *at and *cv; QS_NOTFOUND when
 * the path ends past the leaf's cells. */
static inline int writable_cell(bt_ctx *c, bt_path *path, uint8_t **pg, uint32_t *at,
                                cellv *cv)
{
    int leaf = path->depth - 1, rc;
    if (path->depth == 0)
        return QS_NOTFOUND;
    if ((rc = path_write(c, path, leaf, pg)) != 0)
        return rc;
    *at = (uint32_t)path->idx[leaf];
    if (path->idx[leaf] < 0 || *at >= ncells(*pg) || (*pg)[H_TYPE] != PT_LEAF)
        return QS_NOTFOUND;
    return parse_leaf(*pg, *at, cv);
}

int bt_replace(bt_ctx *c, bt_path *path, const void *val, size_t vlen, int *done)
{
    *done = 0;
    uint8_t *pg;
    uint32_t i;
    cellv cv;
    int rc = writable_cell(c, path, &pg, &i, &cv);
    if (rc)
        return rc;
    uint32_t n = ncells(pg);
    uint64_t size = L_DATA + (uint64_t)cv.klen + vlen;
    if (cv.ovfl || size > MAX_LOCAL)
        return 0;
    uint32_t off = cell_off(pg, i);
    if (off < rd16(pg + H_CSTART))
        return QS_CORRUPT;  /* a cell in the gap: the cells below it would not move */
    if (size > cv.size) {
        uint32_t gap = rd16(pg + H_CSTART) - (H_SIZE + 2 * n), grow = (uint32_t)size - cv.size;
        if (gap < grow) {
            if (gap + rd16(pg + H_FRAG) < grow)
                return 0;
            defragment(pg);
            if (rd16(pg + H_CSTART) - (H_SIZE + 2 * n) < grow)
                return 0;   /* the fragment count lied (a damaged page) */
            off = cell_off(pg, i);
        }
    }
    off = node_resize(pg, i, off, cv.size, (uint32_t)size, L_DATA + cv.klen);
    /* the key (and the header's klen, flags, seq) stay; the value's length
     * and bytes are new */
    wr32(pg + off + L_VLEN, (uint32_t)vlen);
    if (vlen)
        memcpy(pg + off + L_DATA + cv.klen, val, vlen);
    *done = 1;
    return 0;
}

int bt_insert(bt_ctx *c, bt_path *path, const bt_key *k, const void *val, size_t vlen)
{
    int kept = 0;
    return insert_impl(c, path, k, val, vlen, &kept);
}

int bt_insert_next(bt_ctx *c, bt_path *path, const bt_key *k, const void *val, size_t vlen,
                   int *kept)
{
    *kept = 0;
    return insert_impl(c, path, k, val, vlen, kept);
}

int bt_append_run(bt_ctx *c, bt_path *path, int *validp, const uint8_t *key, uint32_t klen,
                  uint64_t seq0, size_t n, const uint8_t *prefix, uint32_t plen,
                  bt_vals *vals)
{
    int valid = *validp && path->depth > 0, rc;
    size_t i = 0;
    *validp = 0;
    uint8_t cell[MAX_CELL];
    uint32_t head = L_DATA + klen + plen;   /* a cell's bytes before its value */
    while (i < n) {
        bt_key pk = {key, klen, seq0 + i};
        if (!valid) {
            if ((rc = bt_seek(c, &pk, path)) != 0 && rc != QS_NOTFOUND)
                return rc;
            valid = 1;
        }
        if (path->depth > 0) {
            /* Fill the leaf with cells built in place, then add to the
             * counts above it once. */
            int leaf = path->depth - 1;
            uint8_t *pg;
            if ((rc = path_write(c, path, leaf, &pg)) != 0)
                return rc;
            uint32_t at = (uint32_t)path->idx[leaf], added = 0;
            /* What every cell of the run shares is written once (a key
             * and prefix too long for a cell leave the loop below at
             * once: the general insert handles them). */
            if (head <= MAX_LOCAL) {
                wr16(cell + L_KLEN, (uint16_t)klen);
                wr16(cell + L_FLAGS, 0);
                memcpy(cell + L_DATA, key, klen);
                if (plen == 1)
                    cell[L_DATA + klen] = prefix[0];  /* the usual: a store, no call */
                else if (plen)
                    memcpy(cell + L_DATA + klen, prefix, plen);
            }
            while (i < n) {
                uint32_t vlen = bt_vals_len(vals), size = head + vlen;
                if (size > MAX_LOCAL)
                    break;
                wr32(cell + L_VLEN, plen + vlen);
                wr64(cell + L_SEQ, seq0 + i);
                if (vlen)
                    memcpy(cell + head, bt_vals_data(vals), vlen);
                if (!node_put(pg, at, cell, size))
                    break;
                bt_vals_next(vals);
                at++;
                added++;
                i++;
            }
            path->idx[leaf] = (int)at;
            for (int d = 0; d < leaf && added; d++) {
                uint8_t *ip;
                if ((rc = path_write(c, path, d, &ip)) != 0)
                    return rc;
                add_count(ip, (uint32_t)path->idx[d], added);
            }
            if (i == n)
                break;
        }
        /* A full leaf (split), an overflow value or an empty tree: the
         * general insert, then seek afresh unless it kept the path.  A
         * value that fits a cell goes through the cell buffer (a split
         * comes every leaf or so); only an overflow value is allocated. */
        uint32_t vlen = bt_vals_len(vals);
        size_t total = (size_t)plen + vlen;
        uint8_t *one = total <= sizeof cell ? cell : malloc(total);
        if (!one)
            return QS_NOMEM;
        if (plen)
            memcpy(one, prefix, plen);
        if (vlen)
            memcpy(one + plen, bt_vals_data(vals), vlen);
        bt_key ik = {key, klen, seq0 + i};
        valid = 0;
        rc = insert_impl(c, path, &ik, one, total, &valid);
        if (one != cell)
            free(one);
        if (rc)
            return rc;
        bt_vals_next(vals);
        i++;
    }
    *validp = valid;
    return 0;
}

int bt_putdup(bt_ctx *c, const uint8_t *key, uint32_t klen, const void *val, size_t vlen,
              uint64_t *seq_out)
{
    /* Sequence numbers come from one counter for the whole file, so the new
     * record sorts after every value the key has and no (key, seq) is ever
     * used twice. */
    pg_meta *m = &c->p->wmeta;
    bt_key pk = {key, klen, m->next_seq};
    bt_path path;
    int rc = bt_seek(c, &pk, &path);
    if (rc && rc != QS_NOTFOUND)
        return rc;
    if ((rc = bt_insert(c, &path, &pk, val, vlen)) != 0)
        return rc;
    m->next_seq++;
    if (seq_out)
        *seq_out = pk.seq;
    return 0;
}

int bt_put_only(bt_ctx *c, const uint8_t *key, uint32_t klen, const void *val, size_t vlen,
                uint64_t *removed)
{
    /* The probe sorts after every record of key, so its seek lands where
     * the new record goes, just past the key's last record: a key with no
     * records costs one descent and a look at one neighbour, where removing
     * (seek) and then appending (seek again) cost two.  Records are removed
     * from the back, one seek each, until the neighbour is another key's. */
    pg_meta *m = &c->p->wmeta;
    bt_key pk = {key, klen, m->next_seq};
    *removed = 0;
    for (;;) {
        bt_path path, prev;
        int eq = 0, rc = bt_seek(c, &pk, &path);
        if (rc && rc != QS_NOTFOUND)
            return rc;
        if (rc == 0) {
            int leaf = path.depth - 1;
            if (path.idx[leaf] > 0) {
                path.idx[leaf]--;
                rc = bt_key_is(c, &path, key, klen, &eq);
                path.idx[leaf]++;
                prev = path;
                prev.idx[leaf]--;
            } else {
                prev = path;
                if ((rc = bt_prev(c, &prev)) == 0)
                    rc = bt_key_is(c, &prev, key, klen, &eq);
                else if (rc == QS_NOTFOUND)
                    rc = 0;
            }
            if (rc)
                return rc;
        }
        if (!eq) {
            if ((rc = bt_insert(c, &path, &pk, val, vlen)) != 0)
                return rc;
            m->next_seq++;
            return 0;
        }
        if ((rc = bt_delete(c, &prev)) != 0)
            return rc;
        ++*removed;
    }
}

/* Removes child i of the interior page at level lvl, whose subtree is gone. */
static int remove_child(bt_ctx *c, bt_path *path, int lvl)
{
    uint8_t *pg;
    int rc = pg_write(c->p, path->pg[lvl], &pg);
    if (rc)
        return rc;
    uint32_t n = ncells(pg), i = (uint32_t)path->idx[lvl];
    if (n == 0) {
        if ((rc = pg_free(c->p, path->pg[lvl])) != 0)
            return rc;
        if (lvl == 0) {
            set_root(c, 0);
            return 0;
        }
        return remove_child(c, path, lvl - 1);
    }
    cellv cv;
    uint32_t victim = i < n ? i : n - 1;
    if ((rc = parse_int(pg, victim, &cv)) != 0)
        return rc;
    if (i >= n) {
        wr32(pg + H_RIGHT, cv.child);
        wr64(pg + H_RCOUNT, cv.count);
    }
    uint32_t ovfl = cv.ovfl;
    uint64_t obytes = ovfl_bytes(&cv, 0);
    node_remove(pg, victim, cv.size);
    return ovfl ? ovfl_free(c, ovfl, obytes) : 0;
}

/* Merges the under-full leaf at path with a sibling when the two fit in
 * one page; *merged 0 when they did not (nothing changed). */
static int maybe_merge(bt_ctx *c, bt_path *path, int *merged)
{
    int lvl = path->depth - 2;
    *merged = 0;
    uint8_t *par;
    int rc = pg_get(c->p, 1, path->pg[lvl], &par);
    if (rc)
        return rc;
    uint32_t n = ncells(par), i = (uint32_t)path->idx[lvl];
    if (n == 0)
        return 0;
    uint32_t j = i < n ? i : i - 1;
    uint64_t ca, cb;
    uint32_t a = child_at(par, j, &ca), b = child_at(par, j + 1, &cb);
    uint8_t *pa, *pb;
    if ((rc = load(c, a, &pa)) != 0 || (rc = load(c, b, &pb)) != 0)
        return rc;
    if (pa[H_TYPE] != PT_LEAF || pb[H_TYPE] != PT_LEAF)
        return QS_CORRUPT;
    if (node_used(pa) + node_used(pb) > CAPACITY)
        return 0;
    *merged = 1;
    if ((rc = pg_write(c->p, a, &pa)) != 0 || (rc = pg_get(c->p, 1, b, &pb)) != 0)
        return rc;
    uint32_t na = ncells(pa);
    for (uint32_t k = 0; k < ncells(pb); k++) {
        cellv cv;
        if ((rc = parse_leaf(pb, k, &cv)) != 0)
            return rc;
        if (!node_put(pa, na + k, pb + cell_off(pb, k), cv.size))
            return QS_CORRUPT;
    }
    if ((rc = pg_free(c->p, b)) != 0)
        return rc;
    if ((rc = pg_write(c->p, path->pg[lvl], &par)) != 0)
        return rc;
    set_child(par, j + 1, a, ca + cb);
    cellv sep;
    if ((rc = parse_int(par, j, &sep)) != 0)
        return rc;
    uint32_t ovfl = sep.ovfl;
    uint64_t obytes = ovfl_bytes(&sep, 0);
    node_remove(par, j, sep.size);
    return ovfl ? ovfl_free(c, ovfl, obytes) : 0;
}

static int collapse_root(bt_ctx *c)
{
    for (;;) {
        uint32_t r = root_of(c);
        uint8_t *pg;
        if (!r)
            return 0;
        int rc = load(c, r, &pg);
        if (rc)
            return rc;
        if (pg[H_TYPE] != PT_INTERIOR || ncells(pg) != 0)
            return 0;
        uint32_t child = rd32(pg + H_RIGHT);
        if ((rc = pg_free(c->p, r)) != 0)
            return rc;
        set_root(c, child);
    }
}

static int delete_impl(bt_ctx *c, bt_path *path, int *kept)
{
    int leaf = path->depth - 1;
    uint8_t *pg;
    uint32_t at;
    cellv cv;
    int rc = writable_cell(c, path, &pg, &at, &cv);
    if (rc)
        return rc;
    uint32_t ovfl = cv.ovfl;
    uint64_t obytes = ovfl_bytes(&cv, 1);
    for (int d = 0; d < leaf; d++) {
        if ((rc = path_write(c, path, d, &pg)) != 0)
            return rc;
        add_count(pg, (uint32_t)path->idx[d], -1);
    }
    if ((rc = path_write(c, path, leaf, &pg)) != 0)
        return rc;
    node_remove(pg, at, cv.size);
    /* freeing the chain writes other pages, which may move the leaf's */
    if (ovfl && ((rc = ovfl_free(c, ovfl, obytes)) != 0 ||
                 (rc = pg_write(c->p, path->pg[leaf], &pg)) != 0))
        return rc;
    int under = leaf > 0 && node_used(pg) < CAPACITY / 4, merged = 0;
    /* A leaf drained from its front stays under a quarter full for its
     * last records, and its full sibling cannot take it: nothing merges,
     * and the path stays valid (a re-seek per record was a quarter of a
     * drain's instructions). */
    if (under && ncells(pg) > at && (rc = maybe_merge(c, path, &merged)) != 0)
        return rc;
    if (ncells(pg) > at && !merged) {
        /* The next record moved into the removed one's slot of this leaf. */
        if (path->epoch == c->p->epoch) {
            path->ptr[leaf] = pg;
            path->mine[leaf] = 1;
        }
        *kept = 1;
        return 0;
    }
    if (merged)
        return collapse_root(c);
    if (ncells(pg) == 0) {
        /* An emptied root leaf stays: a queue that drains to empty and
         * refills would otherwise free and allocate it (two more pages in
         * each of those commits). */
        if (leaf == 0)
            return 0;
        if ((rc = pg_free(c->p, path->pg[leaf])) != 0)
            return rc;
        rc = remove_child(c, path, leaf - 1);
    } else if (under)
        rc = maybe_merge(c, path, &merged);
    return rc ? rc : collapse_root(c);
}

int bt_delete(bt_ctx *c, bt_path *path)
{
    int kept = 0;
    return delete_impl(c, path, &kept);
}

int bt_delete_next(bt_ctx *c, bt_path *path, int *kept)
{
    *kept = 0;
    return delete_impl(c, path, kept);
}

int bt_rank(bt_ctx *c, const bt_key *probe, uint64_t *rank)
{
    uint32_t pgno = root_of(c);
    uint64_t acc = 0;
    for (int d = 0; pgno; d++) {
        uint8_t *pg;
        uint32_t pos;
        int rc;
        if (d >= BT_MAXDEPTH)
            return QS_CORRUPT;
        if ((rc = load(c, pgno, &pg)) != 0 || (rc = node_search(c, pg, probe, &pos)) != 0)
            return rc;
        if (pg[H_TYPE] == PT_LEAF) {
            acc += pos;
            break;
        }
        for (uint32_t i = 0; i < pos; i++)
            acc += rd64(pg + cell_off(pg, i) + I_COUNT);
        pgno = child_at(pg, pos, NULL);
    }
    *rank = acc;
    return 0;
}

int bt_total(bt_ctx *c, uint64_t *n)
{
    uint32_t r = root_of(c);
    uint8_t *pg;
    *n = 0;
    if (!r)
        return 0;
    int rc = load(c, r, &pg);
    if (rc)
        return rc;
    *n = node_count(pg);
    return 0;
}

int bt_depth(bt_ctx *c, uint32_t *depth)
{
    bt_path path;
    int rc = bt_first(c, &path);
    *depth = rc == 0 ? (uint32_t)path.depth : 0;
    return rc == QS_NOTFOUND ? 0 : rc;
}

/* ---- integrity check ------------------------------------------------------ */

typedef struct checker {
    bt_ctx *c;
    uint8_t *seen;
    uint32_t npages;
    int leaf_depth;
    char *msg;
    size_t msgcap;
    uint8_t page[PG_SIZE];
} checker;

static int fail(checker *k, uint32_t pgno, const char *what)
{
    snprintf(k->msg, k->msgcap, "page %u: %s", pgno, what);
    return QS_CORRUPT;
}

static int mark(checker *k, uint32_t pgno, const char *what)
{
    if (pgno == 0 || pgno >= k->npages)
        return fail(k, pgno, what);
    if (k->seen[pgno])
        return fail(k, pgno, "page used twice");
    k->seen[pgno] = 1;
    return 0;
}

static int check_chain(checker *k, uint32_t first, uint64_t bytes)
{
    uint64_t pages = bytes ? (bytes + OV_CAP - 1) / OV_CAP : 1;
    uint32_t pgno = first;
    for (uint64_t i = 0; i < pages; i++) {
        int rc = mark(k, pgno, "overflow page number out of range");
        if (rc)
            return rc;
        if ((rc = pg_read_raw(k->c->p, pgno, k->page)) != 0)
            return rc == QS_CORRUPT ? fail(k, pgno, "overflow page fails its checksum") : rc;
        if (k->page[0] != PT_OVERFLOW)
            return fail(k, pgno, "expected an overflow page");
        pgno = rd32(k->page + OV_NEXT);
    }
    return pgno == 0 ? 0 : fail(k, first, "overflow chain longer than its record");
}

/* Full key of cell i of a page copy, into a malloc'd buffer. */
static int copy_key(checker *k, const uint8_t *pg, uint32_t i, bt_buf *out, uint64_t *seq)
{
    cellv cv;
    int rc = parse(pg, i, &cv);
    if (rc)
        return rc;
    out->len = 0;
    if ((rc = bt_buf_reserve(out, cv.klen + 1)) != 0)
        return rc;
    memcpy(out->data, cv.key, cv.kin);
    if (cv.kin < cv.klen && (rc = ovfl_read(k->c, cv.ovfl, 0, cv.klen - cv.kin, out->data + cv.kin)) != 0)
        return rc;
    out->len = cv.klen;
    *seq = cv.seq;
    return 0;
}

static int kcmp(const bt_buf *a, uint64_t as, const bt_buf *b, uint64_t bs)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int r = n ? memcmp(a->data, b->data, n) : 0;
    if (r == 0 && a->len != b->len)
        r = a->len < b->len ? -1 : 1;
    if (r == 0 && as != bs)
        r = as < bs ? -1 : 1;
    return r;
}

/* Walks the subtree at pgno: keys within [lo, hi) (NULL: unbounded). */
static int walk(checker *k, uint32_t pgno, int depth, const bt_buf *lo, uint64_t loseq,
                const bt_buf *hi, uint64_t hiseq, uint64_t *count)
{
    int rc = mark(k, pgno, "child page number out of range");
    if (rc)
        return rc;
    if (depth >= BT_MAXDEPTH)
        return fail(k, pgno, "tree too deep");
    uint8_t *pg = malloc(PG_SIZE);
    bt_buf key = {0}, prev = {0};
    uint64_t seq = 0, prevseq = 0;
    if (!pg)
        return QS_NOMEM;
    if ((rc = pg_read_raw(k->c->p, pgno, pg)) != 0) {
        if (rc == QS_CORRUPT)
            rc = fail(k, pgno, "tree page fails its checksum");
        goto out;
    }
    if (node_ok(pg) != 0) {
        rc = fail(k, pgno, "bad tree page header");
        goto out;
    }
    uint32_t n = ncells(pg);
    int leaf = pg[H_TYPE] == PT_LEAF;
    if (leaf) {
        if (k->leaf_depth < 0)
            k->leaf_depth = depth;
        else if (k->leaf_depth != depth) {
            rc = fail(k, pgno, "leaves at different depths");
            goto out;
        }
    }
    if (n == 0 && leaf && depth > 0) {
        rc = fail(k, pgno, "empty leaf");
        goto out;
    }
    uint64_t total = 0;
    uint32_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        cellv cv;
        if (parse(pg, i, &cv) != 0) {
            rc = fail(k, pgno, "cell outside its page");
            goto out;
        }
        used += cv.size;
        if ((rc = copy_key(k, pg, i, &key, &seq)) != 0)
            goto out;
        if ((i > 0 && kcmp(&prev, prevseq, &key, seq) >= 0) ||
            (lo && kcmp(lo, loseq, &key, seq) > 0) || (hi && kcmp(&key, seq, hi, hiseq) >= 0)) {
            rc = fail(k, pgno, "keys out of order");
            goto out;
        }
        if (cv.ovfl && (rc = check_chain(k, cv.ovfl, ovfl_bytes(&cv, leaf))) != 0)
            goto out;
        if (leaf)
            total++;
        else {
            uint64_t sub;
            if ((rc = walk(k, cv.child, depth + 1, i ? &prev : lo, i ? prevseq : loseq, &key,
                           seq, &sub)) != 0)
                goto out;
            if (sub != cv.count) {
                rc = fail(k, pgno, "subtree count does not match its records");
                goto out;
            }
            total += sub;
        }
        bt_buf t = prev;
        prev = key;
        key = t;
        prevseq = seq;
    }
    if (used + rd16(pg + H_FRAG) != PG_USABLE - rd16(pg + H_CSTART)) {
        rc = fail(k, pgno, "cell space accounting is off");
        goto out;
    }
    if (!leaf) {
        uint64_t sub;
        if ((rc = walk(k, rd32(pg + H_RIGHT), depth + 1, n ? &prev : lo, n ? prevseq : loseq, hi,
                       hiseq, &sub)) != 0)
            goto out;
        if (sub != rd64(pg + H_RCOUNT)) {
            rc = fail(k, pgno, "subtree count does not match its records");
            goto out;
        }
        total += sub;
    }
    *count = total;
out:
    free(key.data);
    free(prev.data);
    free(pg);
    return rc;
}

int bt_check(bt_ctx *c, uint8_t *seen, uint64_t *records, char *msg, size_t msgcap)
{
    checker *k = malloc(sizeof *k);
    if (!k)
        return QS_NOMEM;
    k->c = c;
    k->seen = seen;
    k->npages = c->p->meta.npages;
    k->leaf_depth = -1;
    k->msg = msg;
    k->msgcap = msgcap;
    *records = 0;
    uint32_t r = root_of(c);
    int rc = r ? walk(k, r, 0, NULL, 0, NULL, 0, records) : 0;
    free(k);
    return rc;
}
