/* qdeliv.h -- the delivery record of a queue item (qd_ prefix): item tag 2,
 * written by a reserve, carrying how many times the item was reserved and
 * the reason its last holder gave for failing it, before the item's plain
 * value (tag 0 + payload, or tag 1: a shared payload's reference). */
#ifndef QS_QDELIV_H
#define QS_QDELIV_H
#include "btree.h"

#define QD_TAG 2
#define QD_MAX_REASON 1024      /* bytes of a fail reason kept */

/* The delivery header at the front of an item value of v_len bytes.  A
 * value without one (tag 0 or 1) has count 0, no reason, hdr 0. */
typedef struct qd_info {
    uint32_t count;             /* reserves so far */
    const uint8_t *reason;      /* into the value; NULL when none */
    uint32_t reason_len;
    size_t hdr;                 /* bytes before the plain value */
} qd_info;

/* Parses v.  Returns 0, or QS_CORRUPT for an empty value or a header
 * that does not fit (or is followed by nothing). */
int qd_parse(const uint8_t *v, size_t len, qd_info *out);

/* Appends to out the value v (a plain or a tag-2 value of len bytes) with
 * its header replaced: count, and reason (reason NULL: keep v's).  Returns
 * 0, QS_CORRUPT (as qd_parse) or QS_NOMEM; out's length is as it was on
 * failure. */
int qd_build(bt_buf *out, const uint8_t *v, size_t len, uint32_t count, const uint8_t *reason,
             uint32_t reason_len);

#endif
