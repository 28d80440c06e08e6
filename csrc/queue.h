/* queue.h -- the queue layer (queue.c, qq_ prefix), the public qs_queue_*
 * calls of qstore.h.  Nothing below calls into it: it registers its
 * callbacks with the transaction layer (cs_layer, casket.h) when a handle
 * first uses a queue. */
#ifndef QS_QUEUE_H
#define QS_QUEUE_H
#include "casket.h"

#endif
