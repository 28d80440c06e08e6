/* group.h -- grouped commits (group.c, gc_ prefix). */
#ifndef QS_GROUP_H
#define QS_GROUP_H
#include "casket.h"

/* cs_write for record operations: outside a transaction, fn is applied in
 * one transaction with other threads' operations queued at the same time,
 * and committed (and synced) before gc_write returns its result. */
int gc_write(qs_casket *c, cs_write_fn fn, void *arg);

#endif
