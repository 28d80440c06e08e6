/* qstore-bench's C driver (see native_seed.c). */
#ifndef QSB_NATIVE_SEED_H
#define QSB_NATIVE_SEED_H
#include <stddef.h>
#include "qstore.h"

/* Seed 000's workload in one transaction of its own: begins, then for each
 * of the n ids of idlen bytes at ids + i*idlen putdup(qkey, id_i) and
 * putdup(id_i, id_i), then commits.  Returns 0, QS_INVAL for a NULL casket
 * or a NULL buffer with a nonzero length, or the first error of qs_begin,
 * qs_putdup or qs_commit; after a putdup failed the transaction is aborted,
 * so nothing of it is in the casket. */
int qsb_seed(qs_casket *c, const char *qkey, size_t qklen, const void *ids, size_t idlen,
             size_t n);
#endif
