/*
 * errors.c -- qs_strerror: the one table of the library's error texts.
 *
 * The QS_* codes are consecutive from QS_NOTFOUND down to QS_LAST_ERRCODE,
 * so the table is an array indexed by QS_NOTFOUND - rc.  Each entry names
 * its code in the initializer, so the texts cannot drift out of order, and
 * the static assert below stops the build when a code is added to qstore.h
 * without a text here (or a text without moving QS_LAST_ERRCODE).
 * pyqstore/errors.py maps the same codes, by name, to exception classes;
 * tests/test_errors.py checks that every code has a text and a class.
 */
#include <string.h>

#include "qstore.h"

#define ERR_INDEX(rc) (QS_NOTFOUND - (rc))

static const char *const err_text[] = {
    [ERR_INDEX(QS_NOTFOUND)] = "not found",
    [ERR_INDEX(QS_KEYEXIST)] = "key already has a value",
    [ERR_INDEX(QS_CORRUPT)] = "casket is corrupt (a page failed its checksum or structure check)",
    [ERR_INDEX(QS_NOTCASKET)] = "not a pyqstore casket (bad magic number)",
    [ERR_INDEX(QS_VERSION)] = "unsupported casket format version",
    [ERR_INDEX(QS_LOCKED)] = "casket is locked by another thread or process (lock_timeout passed)",
    [ERR_INDEX(QS_READONLY)] = "casket is open read-only",
    [ERR_INDEX(QS_TXN)] = "transaction misuse (nested begin, or no transaction of this thread)",
    [ERR_INDEX(QS_INVAL)] = "invalid argument",
    [ERR_INDEX(QS_NOMEM)] = "out of memory",
    [ERR_INDEX(QS_TOOBIG)] = "key or value too long",
    [ERR_INDEX(QS_CLOSED)] = "casket is closed",
    [ERR_INDEX(QS_FULL)] = "casket is full (2^32 pages)",
    [ERR_INDEX(QS_NOTRESERVED)] =
        "item is not reserved under this token (acknowledged, released, or its lease expired)",
    [ERR_INDEX(QS_FORKED)] =
        "casket handle inherited across fork(); open the casket again in the child",
    [ERR_INDEX(QS_RESFULL)] = "too many items reserved at once (the casket holds 49,152)",
    [ERR_INDEX(QS_SNAPSHOT_OLD)] =
        "snapshot too old: the log outgrew its limit and was checkpointed under it",
    [ERR_INDEX(QS_INTR)] = "interrupted by a signal while waiting (nothing was taken)",
    [ERR_INDEX(QS_NOTFILE)] = "not a regular file (a device, pipe or socket)",
    [ERR_INDEX(QS_NOATTACH)] =
        "other processes have the casket open and this one may not write its region "
        "NAME-shm, which a read-only open needs to follow their changes",
    [ERR_INDEX(QS_QFULL)] = "queue is full (it holds its maxsize items)",
    [ERR_INDEX(QS_QBOUND)] = "maxsize is below the number of items the queue holds",
    [ERR_INDEX(QS_TIMEDOUT)] = "timed out: the queue still held items (join) or had no room (wait for room)",
    [ERR_INDEX(QS_STREAM_NOGROUP)] = "the stream has no group of that name",
    [ERR_INDEX(QS_STREAM_NOTPENDING)] =
        "the group has no pending entry for that id (never read by the group, or acknowledged)",
    [ERR_INDEX(QS_STREAM_TRIMMED)] = "the id was removed from the stream by retention",
    [ERR_INDEX(QS_WOULDBLOCK)] =
        "the call would have waited (for another thread or process, a sync, a checkpoint, "
        "or a page to be read from the file)",
};

_Static_assert(sizeof err_text / sizeof err_text[0] == ERR_INDEX(QS_LAST_ERRCODE) + 1,
               "every QS_* code from QS_NOTFOUND to QS_LAST_ERRCODE needs a text in err_text");

const char *qs_strerror(int rc)
{
    if (rc == QS_OK)
        return "success";
    if (rc > 0)
        return strerror(rc);
    if (rc <= QS_NOTFOUND && rc >= QS_LAST_ERRCODE && err_text[ERR_INDEX(rc)])
        return err_text[ERR_INDEX(rc)];
    return "unknown error";
}
