/* bench_seed.c -- qs_bench_seed, the benchmark's driver of seed 000 in C
 * (n ids, two putdups each, in one transaction).  Apart so the benchmark
 * issue can remove it without touching the record API. */
#include "handle.h"
#include "records.h"
#include "txn.h"

/* ---- benchmark driver ----------------------------------------------------- */

static int do_bench_seed(qs_casket *c, const char *qkey, size_t qklen, const void *ids, size_t idlen,
                  size_t n)
{
    if ((!qkey && qklen) || (!ids && n))
        return QS_INVAL;
    int own = cs_owns(c), rc = 0;
    if (!own && (rc = tx_begin(c)) != 0)
        return rc;
    const uint8_t *id = ids;
    for (size_t i = 0; i < n && rc == 0; i++, id += idlen) {
        rc = rec_putdup(c, qkey, qklen, id, idlen);
        if (rc == 0)
            rc = rec_putdup(c, id, idlen, id, idlen);
    }
    if (own)
        return rc;
    if (rc) {
        tx_abort(c);
        return rc;
    }
    return tx_commit(c);
}

/* ---- public entry points ---------------------------------------------------- */

int qs_bench_seed(qs_casket *c, const char *qkey, size_t qklen, const void *ids, size_t idlen,
                  size_t n)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_bench_seed(c, qkey, qklen, ids, idlen, n));
}
