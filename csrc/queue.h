/* queue.h -- hooks of the queue layer (queue.c, qq_ prefix) called by the
 * casket.  All run with the casket's operation mutex held. */
#ifndef QS_QUEUE_H
#define QS_QUEUE_H
#include "casket.h"

/* The writer's transaction ended (committed: 1, aborted: 0): fold its
 * changes to queue lengths and reservations in, or undo them, and wake
 * readers waiting for items that became available. */
void qq_txn_end(qs_casket *c, int committed);

/* The pages under the queue tree changed wholesale (compaction). */
void qq_invalidate(qs_casket *c);

/* Other handles committed: lengths counted before are stale. */
void qq_refresh(qs_casket *c);

/* The handle is closing (holding the write lock): its reservations return
 * to their queues. */
void qq_close(qs_casket *c);

/* Wakes every blocked queue reader (the casket is closing). */
void qq_wake_all(qs_casket *c);

/* Releases the queue layer's memory (no call may be running). */
void qq_free(qs_casket *c);

#endif
