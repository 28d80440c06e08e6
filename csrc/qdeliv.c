/* qdeliv.c -- the delivery header of a queue item value:
 *   [2] [u32 count] [u16 reason length] [reason] [plain value: tag 0 or 1 ...]
 * little-endian.  An item gets it at its first reserve; the plain value
 * after it is unchanged, so every reader strips the header and goes on as
 * with a version-1 item. */
#include "qdeliv.h"
#include "pagefmt.h"
#include "qstore.h"
#include <string.h>

#define QD_FIXED 7u     /* tag, count, reason length */

int qd_parse(const uint8_t *v, size_t len, qd_info *out)
{
    memset(out, 0, sizeof *out);
    if (len == 0)
        return QS_CORRUPT;
    if (v[0] != QD_TAG)
        return 0;
    if (len < QD_FIXED)
        return QS_CORRUPT;
    uint32_t rlen = (uint32_t)v[5] | (uint32_t)v[6] << 8;
    if (rlen > QD_MAX_REASON || len < QD_FIXED + rlen + 1)
        return QS_CORRUPT;
    out->count = rd32(v + 1);
    out->reason = rlen ? v + QD_FIXED : NULL;
    out->reason_len = rlen;
    out->hdr = QD_FIXED + rlen;
    return v[out->hdr] == QD_TAG ? QS_CORRUPT : 0;
}

int qd_build(bt_buf *out, const uint8_t *v, size_t len, uint32_t count, const uint8_t *reason,
             uint32_t reason_len)
{
    qd_info in;
    int rc = qd_parse(v, len, &in);
    if (rc)
        return rc;
    if (!reason) {
        reason = in.reason;
        reason_len = in.reason_len;
    }
    if (reason_len > QD_MAX_REASON)
        reason_len = QD_MAX_REASON;
    size_t plain = len - in.hdr, need = QD_FIXED + reason_len + plain;
    if ((rc = bt_buf_reserve(out, need)) != 0)
        return rc;
    uint8_t *p = out->data + out->len;
    p[0] = QD_TAG;
    wr32(p + 1, count);
    p[5] = (uint8_t)reason_len;
    p[6] = (uint8_t)(reason_len >> 8);
    /* reason may point into v, and v may not overlap out: the caller's */
    if (reason_len)
        memmove(p + QD_FIXED, reason, reason_len);
    memmove(p + QD_FIXED + reason_len, v + in.hdr, plain);
    out->len += need;
    return 0;
}
