/* qaio.h -- asynchronous waiters of queues (qa_ prefix inside, qs_aio_* in
 * qstore.h): an event loop waits for items without a thread per waiter.
 * Each qs_aio is one eventfd that the loop watches; a waiter is armed on
 * a queue of a casket and remembers the queue's wake-up word (qres.h).
 * Commits of this process tell the process's waiters at once
 * (qa_notify_local, from queue.c's wake); commits of other processes are
 * seen by one watcher thread per process, asleep in the kernel on the
 * async generation word of every region it watches.  Either way a waiter
 * whose word changed is fired: taken off the armed list, its id queued on
 * its qs_aio and the eventfd signalled.  The process's registry is
 * guarded by one mutex, taken after the casket's operation mutex where
 * both are held (the commit path), never before it. */
#ifndef QS_QAIO_H
#define QS_QAIO_H
#include "casket.h"

/* Fires this process's waiters whose word changed: called after qr_wake
 * said someone waits.  One atomic load when none of them is armed. */
void qa_notify_local(void);

#endif
