/* queue.h -- the queue layer (queue.c, qq_ prefix), the public qs_queue_*
 * calls of qstore.h.  Nothing below calls into it: it registers its
 * callbacks with the transaction layer (cs_layer, casket.h) when a handle
 * first uses a queue. */
#ifndef QS_QUEUE_H
#define QS_QUEUE_H
#include "casket.h"

/* The hash of queue name that chooses its wake-up word (qres.h), for the
 * asynchronous waiters (qaio.c).  0, or QS_INVAL for a name qs_queue_*
 * refuses (empty, NULL, longer than QS_MAX_QUEUE_NAME); *hash is then
 * unchanged. */
int qq_queue_hash(const void *name, size_t nlen, uint64_t *hash);

/* Another writer of the queue namespace's tree (stream.c) changed it in
 * the caller's write: the put positions queue.c remembers (a path into
 * that tree) are stale.  No-op for a handle that never used a queue. */
void qq_tree_changed(qs_casket *c);

#endif
