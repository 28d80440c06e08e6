/* cursor.c -- cursors over the user namespace (qs_cursor_* in qstore.h,
 * cur_ inside): a cursor remembers its record by (key, seq) and finds it
 * again after any change.  Apart from records.c because a cursor is state
 * of its own that lives across calls and transactions. */
#include "handle.h"
#include "records.h"
#include "txn.h"
#include <stdatomic.h>
#include <stdlib.h>

/* ---- cursors ------------------------------------------------------------ */

static int do_cursor_open(qs_casket *c, qs_cursor **out)
{
    if (!out)
        return QS_INVAL;
    qs_cursor *cur = calloc(1, sizeof *cur);
    if (!cur)
        return QS_NOMEM;
    cur->c = c;
    atomic_fetch_add(&c->open_cursors, 1);
    *out = cur;
    return 0;
}

void qs_cursor_close(qs_cursor *cur)
{
    if (!cur)
        return;
    atomic_fetch_sub(&cur->c->open_cursors, 1);
    free(cur->key.data);
    free(cur);
}

/* Remembers the record the path points at, or unpositions on rc. */
static int cur_settle(qs_cursor *cur, bt_ctx *bt, int rc)
{
    if (rc) {
        cur->positioned = 0;
        return rc;
    }
    cur->key.len = 0;
    rc = bt_read(bt, &cur->path, &cur->key, NULL, 0, &cur->seq);
    cur->positioned = rc == 0;
    cur->on_record = 1;
    cur->version = cur->c->version;
    cur->wview = bt->wview;
    return rc;
}

/* Re-finds the cursor's record after a change: *exact says whether it is
 * still there (else the path is at the next record, or off the end). */
static int cur_refind(qs_cursor *cur, bt_ctx *bt, int *exact)
{
    *exact = cur->on_record;
    if (cur->version == cur->c->version && cur->wview == bt->wview)
        return 0;
    bt_key pk = {cur->key.data, (uint32_t)cur->key.len, cur->seq};
    int rc = bt_seek_ge(bt, &pk, &cur->path);
    if (rc) {
        *exact = 0;
        cur->version = 0;
        return rc;
    }
    int eq;
    uint64_t seq;
    if ((rc = bt_key_is(bt, &cur->path, pk.key, pk.klen, &eq)) != 0)
        return rc;
    if (eq) {
        if ((rc = bt_read(bt, &cur->path, NULL, NULL, 0, &seq)) != 0)
            return rc;
        eq = seq == cur->seq;
    }
    *exact = cur->on_record = eq;
    cur->version = cur->c->version;
    cur->wview = bt->wview;
    return 0;
}

static int do_cursor_first(qs_cursor *cur)
{
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_settle(cur, &bt, bt_first(&bt, &cur->path));
    cs_read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_last(qs_cursor *cur)
{
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_settle(cur, &bt, bt_last(&bt, &cur->path));
    cs_read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_jump(qs_cursor *cur, const void *key, size_t klen)
{
    int rc = rec_check_kv(key, klen, NULL, 0);
    if (rc)
        return rc;
    bt_ctx bt;
    bt_key pk = {key, (uint32_t)klen, 0};
    READ_ENTER(cur->c, &bt);
    rc = cur_settle(cur, &bt, bt_seek_ge(&bt, &pk, &cur->path));
    cs_read_leave(cur->c, &bt);
    return rc;
}

static int cur_step(qs_cursor *cur, bt_ctx *bt, int reverse)
{
    int exact, rc;
    if (!cur->positioned)
        return QS_NOTFOUND;
    rc = cur_refind(cur, bt, &exact);
    if (rc == QS_NOTFOUND && !reverse)
        return cur_settle(cur, bt, QS_NOTFOUND);
    if (rc == QS_NOTFOUND) {
        /* Nothing at or after our key: the previous record is the last. */
        return cur_settle(cur, bt, bt_last(bt, &cur->path));
    }
    if (rc)
        return rc;
    if (reverse)
        rc = bt_prev(bt, &cur->path);
    else if (exact)
        rc = bt_next(bt, &cur->path);
    return cur_settle(cur, bt, rc);
}

static int do_cursor_next(qs_cursor *cur)
{
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_step(cur, &bt, 0);
    cs_read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_prev(qs_cursor *cur)
{
    bt_ctx bt;
    READ_ENTER(cur->c, &bt);
    int rc = cur_step(cur, &bt, 1);
    cs_read_leave(cur->c, &bt);
    return rc;
}

static int do_cursor_get(qs_cursor *cur, void **key, size_t *klen, void **val, size_t *vlen)
{
    if ((key && !klen) || (val && !vlen))
        return QS_INVAL;
    if (key)
        *key = NULL;
    if (val)
        *val = NULL;
    if (!cur->positioned)
        return QS_NOTFOUND;
    bt_ctx bt;
    bt_buf k = {0}, v = {0};
    int exact;
    READ_ENTER(cur->c, &bt);
    int rc = cur_refind(cur, &bt, &exact);
    if (rc == 0 && !exact)
        rc = QS_NOTFOUND;
    if (rc == 0)
        rc = bt_read(&bt, &cur->path, key ? &k : NULL, val ? &v : NULL, 0, NULL);
    cs_read_leave(cur->c, &bt);
    if (rc == 0 && key && !k.data && !(k.data = malloc(1)))
        rc = QS_NOMEM;
    if (rc == 0 && val && !v.data && !(v.data = malloc(1)))
        rc = QS_NOMEM;
    if (rc) {
        free(k.data);
        free(v.data);
        return rc;
    }
    if (key) {
        *key = k.data;
        *klen = k.len;
    }
    if (val) {
        *val = v.data;
        *vlen = v.len;
    }
    return 0;
}

static int do_cursor_read(qs_cursor *cur, size_t max, int reverse, void **outp, size_t *outlen,
                   uint64_t *count)
{
    if (!outp || !outlen || !count)
        return QS_INVAL;
    *outp = NULL;
    *outlen = 0;
    *count = 0;
    if (!cur->positioned || max == 0)
        return 0;
    bt_ctx bt;
    bt_buf out = {0};
    uint64_t n = 0;
    int exact;
    READ_ENTER(cur->c, &bt);
    int rc = cur_refind(cur, &bt, &exact);
    if (rc == QS_NOTFOUND && reverse)
        rc = bt_last(&bt, &cur->path);  /* nothing at or after our key */
    else if (rc == 0 && !exact && reverse)
        rc = bt_prev(&bt, &cur->path);
    while (rc == 0 && n < max) {
        if ((rc = bt_read(&bt, &cur->path, &out, &out, 1, NULL)) != 0)
            break;
        n++;
        rc = reverse ? bt_prev(&bt, &cur->path) : bt_next(&bt, &cur->path);
    }
    if (rc == 0 || rc == QS_NOTFOUND) {
        rc = cur_settle(cur, &bt, rc);
        if (rc == QS_NOTFOUND)
            rc = 0;  /* ran off the end: the cursor is unpositioned */
    }
    cs_read_leave(cur->c, &bt);
    if (rc) {
        free(out.data);
        return rc;
    }
    *outp = out.data;
    *outlen = out.len;
    *count = n;
    return 0;
}

static int cursor_out_fn(qs_casket *c, bt_ctx *bt, void *arg)
{
    (void)c;
    qs_cursor *cur = arg;
    int exact, rc = cur_refind(cur, bt, &exact);
    if (rc == 0 && !exact)
        rc = QS_NOTFOUND;
    if (rc)
        return rc;
    if ((rc = bt_delete(bt, &cur->path)) != 0)
        return rc;
    /* The record after the removed one is the first >= its (key, seq). */
    bt_key pk = {cur->key.data, (uint32_t)cur->key.len, cur->seq};
    rc = bt_seek_ge(bt, &pk, &cur->path);
    if (rc == QS_NOTFOUND) {
        cur->positioned = 0;
        return 0;
    }
    return rc ? rc : cur_settle(cur, bt, 0);
}

static int do_cursor_out(qs_cursor *cur)
{
    if (!cur->positioned)
        return QS_NOTFOUND;
    int rc = cs_write(cur->c, cursor_out_fn, cur);
    if (rc == 0) {
        /* cs_write bumped the version after our settle: re-find by key. */
        cur->version = 0;
        return cur->positioned ? 0 : QS_NOTFOUND;
    }
    return rc;
}

/* ---- public entry points ---------------------------------------------------- */

int qs_cursor_open(qs_casket *c, qs_cursor **out)
{
    int rc = cs_enter_call(c);
    return rc ? rc : cs_return(c, do_cursor_open(c, out));
}

int qs_cursor_first(qs_cursor *cur)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_first(cur));
}

int qs_cursor_last(qs_cursor *cur)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_last(cur));
}

int qs_cursor_jump(qs_cursor *cur, const void *key, size_t klen)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_jump(cur, key, klen));
}

int qs_cursor_next(qs_cursor *cur)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_next(cur));
}

int qs_cursor_prev(qs_cursor *cur)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_prev(cur));
}

int qs_cursor_get(qs_cursor *cur, void **key, size_t *klen, void **val, size_t *vlen)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_get(cur, key, klen, val, vlen));
}

int qs_cursor_read(qs_cursor *cur, size_t max, int reverse, void **outp, size_t *outlen,
                   uint64_t *count)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_read(cur, max, reverse, outp, outlen, count));
}

int qs_cursor_out(qs_cursor *cur)
{
    int rc = cur ? cs_enter_call(cur->c) : QS_INVAL;
    return rc ? rc : cs_return(cur->c, do_cursor_out(cur));
}
