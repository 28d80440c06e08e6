/* records.h -- the record API (records.c, rec_ prefix) as the casket's
 * other files see it. */
#ifndef QS_RECORDS_H
#define QS_RECORDS_H
#include "casket.h"

/* QS_INVAL for a NULL buffer with a length, QS_TOOBIG past the limits. */
int rec_check_kv(const void *key, size_t klen, const void *val, size_t vlen);

/* qs_putdup without the call accounting. */
int rec_putdup(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen);

/* Applies the putdups the calling thread's transaction buffered / forgets
 * them (its transaction ended). */
int rec_flush_pending(qs_casket *c);
void rec_drop_pending(qs_casket *c);

#endif
