/*
 * _heldcalls.c -- pyqstore._heldcalls: the library's calls made from a
 * small module of our own rather than through cffi, most of them holding
 * the interpreter's lock (the GIL) throughout.
 *
 * Why a module of its own: cffi releases the GIL around every C call, and
 * for a call as short as a get of a small value the release is the larger
 * part of the cost once a second thread wants the GIL.  Each release wakes
 * a waiting thread (a futex wake, a context switch), and the caller then
 * waits to take the lock back: seed 001's read phase ran at 1.37 M gets/s
 * on one thread, 654 k on two and 330 k on ten (py-lmdb, which keeps the
 * GIL for its reads: 1.55 M / 793 k / 1.04 M).  A call that holds the GIL
 * must never wait for anyone, though, or every Python thread waits with
 * it: so it calls qs_get_nowait, which answers QS_WOULDBLOCK where
 * qs_get_into would wait, and the Python side then makes the ordinary
 * cffi call (GIL released) instead.  Queue.put does the same with
 * qs_queue_put_held: 4,127 instructions per put in a transaction before,
 * of which 1,069 were the library's; the cffi call's argument conversion,
 * its tuple and the GIL's release and retake were about 950 of the rest.
 * Outside a transaction qs_queue_put_held and qs_queue_get_held commit
 * holding the GIL where the commit waits for nobody (sync off, the write
 * lock free): a producer thread and a consumer thread on one queue then
 * take turns by the GIL's switch interval instead of handing the GIL and
 * the write lock over for every item.  take() falls back to qs_queue_get,
 * which may wait for an item, with the GIL released -- once, where cffi's
 * path released it twice (see take()).
 *
 * The library itself is linked into pyqstore._qstore only (one copy of its
 * process-wide state): pyqstore._held passes the addresses of the calls
 * to install() at import.  Limited API
 * (3.10), like the cffi module.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "qstore.h"

/* The library's calls, by the types of qstore.h's prototypes (the module
 * does not link the library: install() hands it the addresses). */
typedef int (*get_nowait_fn)(qs_casket *c, const void *key, size_t klen, void *buf, size_t cap,
                             size_t *vlen);
typedef int64_t (*put_held_fn)(qs_queue *q, const void *val, size_t vlen);
typedef int64_t (*put_id_fn)(qs_queue *q, const void *val, size_t vlen);
typedef int (*queue_get_fn)(qs_casket *c, const void *name, size_t nlen, size_t max,
                            double timeout, qs_items **out);
typedef int (*queue_get_held_fn)(qs_casket *c, const void *name, size_t nlen, size_t max,
                                 qs_items **out);
typedef void (*items_free_fn)(qs_items *items);
typedef int (*record_put_fn)(qs_casket *c, const void *key, size_t klen, const void *val,
                             size_t vlen);

static get_nowait_fn get_nowait;
static put_held_fn put_held;
static put_id_fn put_id;
static queue_get_fn queue_get;
static queue_get_held_fn queue_get_held;
static items_free_fn items_free;
static record_put_fn record_put_held, record_put;

/* Values up to this long come back as bytes from one call; a longer one
 * comes back as HELD_TOO_LONG and the caller's general path reads it. */
#define HELD_BUF 4096
#define HELD_TOO_LONG 1

static void *address_of(PyObject *address, const char *what)
{
    void *p = PyLong_AsVoidPtr(address);
    if (!p && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "install: the address of %s is NULL", what);
    return p;
}

static PyObject *install(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    static const char *const names[] = {"qs_get_nowait", "qs_queue_put_held", "qs_queue_put_id",
                                        "qs_queue_get", "qs_items_free", "qs_put_held",
                                        "qs_put", "qs_queue_get_held"};
    enum { N = sizeof names / sizeof names[0] };
    void *addr[N];
    if (nargs != N) {
        PyErr_SetString(PyExc_TypeError, "install(qs_get_nowait, qs_queue_put_held, "
                        "qs_queue_put_id, qs_queue_get, qs_items_free, qs_put_held, qs_put, "
                        "qs_queue_get_held) takes eight addresses");
        return NULL;
    }
    for (int i = 0; i < N; i++)
        if (!(addr[i] = address_of(args[i], names[i])))
            return NULL;
    get_nowait = (get_nowait_fn)(uintptr_t)addr[0];
    put_held = (put_held_fn)(uintptr_t)addr[1];
    put_id = (put_id_fn)(uintptr_t)addr[2];
    queue_get = (queue_get_fn)(uintptr_t)addr[3];
    items_free = (items_free_fn)(uintptr_t)addr[4];
    record_put_held = (record_put_fn)(uintptr_t)addr[5];
    record_put = (record_put_fn)(uintptr_t)addr[6];
    queue_get_held = (queue_get_held_fn)(uintptr_t)addr[7];
    Py_RETURN_NONE;
}

/* The arguments every call starts with: an address (args[0]; 0 passes,
 * and the library refuses it with QS_INVAL) and exact bytes (args[1]).
 * call names the call and its arguments in messages; installed is false
 * before install().  0, or -1 with an exception set. */
static int address_and_bytes(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                             const char *call, int installed, void **addr, char **bytes,
                             Py_ssize_t *len)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", call, want);
        return -1;
    }
    if (!installed) {
        PyErr_Format(PyExc_RuntimeError, "%s: install() was not called", call);
        return -1;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s: the second argument must be bytes", call);
        return -1;
    }
    *addr = PyLong_AsVoidPtr(args[0]);
    if (!*addr && PyErr_Occurred())
        return -1;
    return PyBytes_AsStringAndSize(args[1], bytes, len);
}

/* get(handle, key) -> bytes | int.  handle is a live qs_casket's address
 * (the caller keeps the handle alive), key exact bytes.  The value as
 * bytes; or an int: a qs_* code (QS_NOTFOUND, QS_WOULDBLOCK, any error) or
 * HELD_TOO_LONG. */
static PyObject *get(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *c;
    char *key;
    Py_ssize_t klen;
    if (address_and_bytes(args, nargs, 2, "get(handle, key)", get_nowait != NULL, &c, &key,
                          &klen) < 0)
        return NULL;
    char buf[HELD_BUF];
    size_t vlen = 0;
    int rc = get_nowait(c, key, (size_t)klen, buf, sizeof buf, &vlen);
    if (rc)
        return PyLong_FromLong(rc);
    if (vlen > sizeof buf)
        return PyLong_FromLong(HELD_TOO_LONG);
    return PyBytes_FromStringAndSize(buf, (Py_ssize_t)vlen);
}

/* put(queue, payload) -> int.  queue is a live qs_queue's address (the
 * caller keeps it and its casket alive), payload exact bytes: what
 * qs_queue_put_held returns, the new id or a negative code
 * (QS_WOULDBLOCK: make the ordinary call). */
static PyObject *put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *q;
    char *val;
    Py_ssize_t vlen;
    if (address_and_bytes(args, nargs, 2, "put(queue, payload)", put_held != NULL, &q, &val,
                          &vlen) < 0)
        return NULL;
    return PyLong_FromLongLong(put_held(q, val, (size_t)vlen));
}

/* append(queue, payload) -> int.  Queue.put's call: put() where it keeps
 * the GIL, and where that answers QS_WOULDBLOCK (the put would wait for
 * another thread, another process or a sync) qs_queue_put_id with the GIL
 * released, as through cffi: the id, or a negative code (QS_QFULL: the
 * queue is bounded and full, wait through the general path). */
static PyObject *append(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *q;
    char *val;
    Py_ssize_t vlen;
    if (address_and_bytes(args, nargs, 2, "append(queue, payload)", put_id != NULL, &q, &val,
                          &vlen) < 0)
        return NULL;
    int64_t r = put_held(q, val, (size_t)vlen);
    if (r == QS_WOULDBLOCK) {
        Py_BEGIN_ALLOW_THREADS
        r = put_id(q, val, (size_t)vlen);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLongLong(r);
}

/* store(handle, key, value) -> int.  Casket.put's call: qs_put_held,
 * which keeps the GIL where the put waits for nobody (sync off, the write
 * lock free, no checkpoint due), and where that answers QS_WOULDBLOCK
 * qs_put with the GIL released, as through cffi (key and value stay
 * alive in the argument tuple meanwhile).  With two threads putting, a
 * release per put woke the other thread and then waited to take the lock
 * back: seed 001's puts ran at 55 k/s on two threads, against 90 k on
 * one.  handle is a live qs_casket's address, key and value exact bytes:
 * 0 or a qs_* code. */
static PyObject *store(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *c;
    char *key, *val;
    Py_ssize_t klen, vlen;
    if (address_and_bytes(args, nargs, 3, "store(handle, key, value)", record_put != NULL, &c,
                          &key, &klen) < 0)
        return NULL;
    if (!PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "store(handle, key, value): the value must be bytes");
        return NULL;
    }
    if (PyBytes_AsStringAndSize(args[2], &val, &vlen) < 0)
        return NULL;
    int rc = record_put_held(c, key, (size_t)klen, val, (size_t)vlen);
    if (rc == QS_WOULDBLOCK) {
        Py_BEGIN_ALLOW_THREADS
        rc = record_put(c, key, (size_t)klen, val, (size_t)vlen);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(rc);
}

/* take(handle, name, timeout) -> bytes | int.  Queue.get's call:
 * qs_queue_get_held, which keeps the GIL where the get waits for nobody,
 * and where that answers QS_WOULDBLOCK -- or QS_NOTFOUND with a timeout
 * to wait for an item -- qs_queue_get with the GIL released, as through
 * cffi.  Against cffi's get it also saves a second release and retake for
 * qs_items_free, the qs_items ** cell, the buffer object and its slice
 * (about 2,700 instructions of a 22,000-instruction put-and-get pair,
 * bench/callgrind_check.py queue_churn).  handle is a live qs_casket's
 * address, name a queue's name as exact bytes (kept alive by the argument
 * tuple while the GIL is released), timeout as qs_queue_get's.  The oldest
 * available item as bytes, or an int: a qs_* code (QS_NOTFOUND, QS_INTR:
 * run the handlers and call again with the time left, any error).  A
 * MemoryError making the bytes loses the item taken, as the cffi path's
 * copy would. */
static PyObject *take(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *c;
    char *name;
    Py_ssize_t nlen;
    if (address_and_bytes(args, nargs, 3, "take(handle, name, timeout)", queue_get != NULL, &c,
                          &name, &nlen) < 0)
        return NULL;
    double timeout = PyFloat_AsDouble(args[2]);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    qs_items *items = NULL;
    int rc = queue_get_held(c, name, (size_t)nlen, 1, &items);
    if (rc == QS_WOULDBLOCK || (rc == QS_NOTFOUND && timeout != 0)) {
        Py_BEGIN_ALLOW_THREADS
        rc = queue_get(c, name, (size_t)nlen, 1, timeout, &items);
        Py_END_ALLOW_THREADS
    }
    if (rc)
        return PyLong_FromLong(rc);
    PyObject *item = PyBytes_FromStringAndSize((const char *)items->data + items->off[0],
                                               (Py_ssize_t)(items->off[1] - items->off[0]));
    items_free(items);
    return item;
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(addresses of qs_get_nowait, qs_queue_put_held, qs_queue_put_id, qs_queue_get, "
     "qs_items_free, qs_put_held, qs_put)"},
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(queue, payload) -> the id, or a qs_* code (QS_WOULDBLOCK: not held)"},
    {"get", (PyCFunction)(void (*)(void))get, METH_FASTCALL,
     "get(handle, key) -> bytes, or an int: a qs_* code or 1 (too long)"},
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL,
     "append(queue, payload) -> the id, or a negative qs_* code"},
    {"store", (PyCFunction)(void (*)(void))store, METH_FASTCALL,
     "store(handle, key, value) -> 0 or a qs_* code"},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(handle, name, timeout) -> the oldest item as bytes, or a qs_* code"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyqstore._heldcalls",
    "The library's calls that run holding the GIL (see _heldcalls.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__heldcalls(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "TOO_LONG", HELD_TOO_LONG) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
