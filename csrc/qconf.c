/* qconf.c -- a queue's stored config: one record ("m" + name, seq 0) in
 * NS_QUEUE whose value is
 *   u64 maxsize | u32 max_deliveries | f64 dedup_window | dead-letter name
 * (little-endian; the name fills the rest, empty for none).  No record
 * means the defaults, so a queue that never had a config costs nothing. */
#include "qconf.h"
#include "pagefmt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QC_FIXED 20u    /* bytes before the dead-letter name */

int qc_check(const uint8_t *name, size_t nlen, const qs_queue_config *cfg)
{
    if (!(cfg->dedup_window >= 0) || isinf(cfg->dedup_window))
        return QS_INVAL;
    if (cfg->dead_letter_len > QS_MAX_QUEUE_NAME || (!cfg->dead_letter && cfg->dead_letter_len))
        return QS_INVAL;
    if (cfg->dead_letter && cfg->dead_letter_len == 0)
        return QS_INVAL;
    /* A limit moves items to the dead-letter queue; without one it would
     * have to drop them, and a queue does not lose items unless told to. */
    if (!cfg->dead_letter_len != !cfg->max_deliveries)
        return QS_INVAL;
    if (cfg->dead_letter_len == nlen && memcmp(cfg->dead_letter, name, nlen) == 0)
        return QS_INVAL;    /* an item would be moved onto its own queue */
    return 0;
}

/* The config key of queue name in key (room for 1 + QS_MAX_QUEUE_NAME). */
static uint32_t conf_key(const uint8_t *name, size_t nlen, uint8_t *key)
{
    key[0] = QC_KEY;
    memcpy(key + 1, name, nlen);
    return (uint32_t)nlen + 1;
}

/* Positions path on the config record of key for reading; *found 0 when
 * it has none. */
static int find_conf(bt_ctx *bt, const uint8_t *key, uint32_t klen, bt_path *path, int *found)
{
    bt_key pk = {key, klen, 0};
    *found = 0;
    int eq, rc = bt_seek_ge(bt, &pk, path);
    if (rc == QS_NOTFOUND)
        return 0;
    if (rc == 0 && (rc = bt_key_is(bt, path, key, klen, &eq)) == 0)
        *found = eq;
    return rc;
}

int qc_read(bt_ctx *bt, const uint8_t *name, size_t nlen, qc_conf *out)
{
    memset(out, 0, sizeof *out);
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    uint32_t klen = conf_key(name, nlen, key);
    bt_path path;
    int found, rc = find_conf(bt, key, klen, &path, &found);
    if (rc || !found)
        return rc;
    bt_buf v = {0};
    if ((rc = bt_read(bt, &path, NULL, &v, 0, NULL)) == 0 &&
        (v.len < QC_FIXED || v.len > QC_FIXED + QS_MAX_QUEUE_NAME))
        rc = QS_CORRUPT;
    if (rc == 0) {
        out->maxsize = rd64(v.data);
        out->max_deliveries = rd32(v.data + 8);
        memcpy(&out->dedup_window, v.data + 12, 8);
        out->dllen = (uint32_t)(v.len - QC_FIXED);
        if (out->dllen && !(out->dl = malloc(out->dllen)))
            rc = QS_NOMEM;
        else if (out->dllen)
            memcpy(out->dl, v.data + QC_FIXED, out->dllen);
    }
    if (rc == 0) {
        /* what qc_write stored passed qc_check: a record that does not
         * (a NaN window, a limit without a dead-letter queue) is damage,
         * and would reach the due-time arithmetic as a NaN */
        qs_queue_config cfg = {.maxsize = out->maxsize, .max_deliveries = out->max_deliveries,
                               .dedup_window = out->dedup_window, .dead_letter = out->dl,
                               .dead_letter_len = out->dllen};
        if (qc_check(name, nlen, &cfg) != 0)
            rc = QS_CORRUPT;
    }
    free(v.data);
    if (rc)
        qc_clear(out);
    return rc;
}

int qc_write(bt_ctx *bt, const uint8_t *name, size_t nlen, const qs_queue_config *cfg)
{
    uint8_t key[QS_MAX_QUEUE_NAME + 1];
    uint32_t klen = conf_key(name, nlen, key);
    bt_path path;
    bt_key pk = {key, klen, 0};
    int found, rc = find_conf(bt, key, klen, &path, &found);
    if (rc == 0 && found)
        rc = bt_delete(bt, &path);
    if (rc == 0 && (rc = bt_seek(bt, &pk, &path)) == QS_NOTFOUND)
        rc = 0;
    if (rc || (!cfg->maxsize && !cfg->max_deliveries && cfg->dedup_window == 0 &&
               !cfg->dead_letter_len))
        return rc;
    size_t vlen = QC_FIXED + cfg->dead_letter_len;
    uint8_t *v = malloc(vlen);
    if (!v)
        return QS_NOMEM;
    wr64(v, cfg->maxsize);
    wr32(v + 8, cfg->max_deliveries);
    memcpy(v + 12, &cfg->dedup_window, 8);
    if (cfg->dead_letter_len)
        memcpy(v + QC_FIXED, cfg->dead_letter, cfg->dead_letter_len);
    rc = bt_insert(bt, &path, &pk, v, vlen);
    free(v);
    return rc;
}

void qc_clear(qc_conf *conf)
{
    free(conf->dl);
    memset(conf, 0, sizeof *conf);
}
