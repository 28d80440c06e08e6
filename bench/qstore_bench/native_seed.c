/* qstore-bench's `native` driver: seed 000's transaction driven from C
 * over the public API (qstore.h), so that the difference to the `pyqstore`
 * row is what the Python binding costs.  Bench-only: nothing of it is in
 * the store's library or header. */
#include "native_seed.h"

int qsb_seed(qs_casket *c, const char *qkey, size_t qklen, const void *ids, size_t idlen,
             size_t n)
{
    if (!c || (!qkey && qklen) || (!ids && n))
        return QS_INVAL;
    int rc = qs_begin(c);
    if (rc)
        return rc;
    const char *id = ids;
    for (size_t i = 0; i < n && rc == 0; i++, id += idlen) {
        rc = qs_putdup(c, qkey, qklen, id, idlen);
        if (rc == 0)
            rc = qs_putdup(c, id, idlen, id, idlen);
    }
    if (rc) {
        qs_abort(c);
        return rc;
    }
    return qs_commit(c);
}
