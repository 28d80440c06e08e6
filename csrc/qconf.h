/* qconf.h -- a queue's stored config (qc_ prefix): the record
 * ("m" + name, seq 0) in NS_QUEUE, its validation, encoding and reading.
 * The queue registry (queue.c) caches the decoded config per queue. */
#ifndef QS_QCONF_H
#define QS_QCONF_H
#include "btree.h"
#include "qstore.h"

#define QC_KEY 'm'

/* A decoded config; dl is owned (malloc'ed, NULL when none). */
typedef struct qc_conf {
    uint64_t maxsize;
    uint32_t max_deliveries;
    double dedup_window;
    uint8_t *dl;
    uint32_t dllen;
} qc_conf;

/* Whether cfg may be stored for queue `name` (nlen already checked):
 * 0 or QS_INVAL (the cases of qs_queue_config_set). */
int qc_check(const uint8_t *name, size_t nlen, const qs_queue_config *cfg);

/* Reads the config of queue name into *out (the defaults, all zero, when
 * it has no record).  Returns 0, QS_CORRUPT (a record of a bad size, or
 * one qc_check refuses: a NaN or negative window, a limit without a
 * dead-letter queue),
 * QS_NOMEM or a read error; *out zeroed on failure. */
int qc_read(bt_ctx *bt, const uint8_t *name, size_t nlen, qc_conf *out);

/* Replaces the record of queue name with cfg (checked), removing it when
 * cfg is all defaults.  Returns 0, QS_NOMEM or a write error. */
int qc_write(bt_ctx *bt, const uint8_t *name, size_t nlen, const qs_queue_config *cfg);

/* Frees what *conf owns and zeroes it. */
void qc_clear(qc_conf *conf);

#endif
