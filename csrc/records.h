/* records.h -- the record API (records.c, rec_ prefix) as the casket's
 * other files see it. */
#ifndef QS_RECORDS_H
#define QS_RECORDS_H
#include "casket.h"

/* QS_INVAL for a NULL buffer with a length, QS_TOOBIG past the limits. */
int rec_check_kv(const void *key, size_t klen, const void *val, size_t vlen);

/* qs_putdup without the call accounting (c is not NULL). */
int rec_putdup(qs_casket *c, const void *key, size_t klen, const void *val, size_t vlen);

/* Registers the records' layer with a new handle (cs_layer: its buffered
 * putdups, the record API's refusals); first of all layers. */
void rec_attach(qs_casket *c);

#endif
