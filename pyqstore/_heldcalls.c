/*
 * _heldcalls.c -- pyqstore._heldcalls: the library's calls that run
 * holding the interpreter's lock (the GIL).
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
 * qs_queue_put_held, which puts only inside the calling thread's own
 * transaction: 4,127 instructions per put in a transaction before, of which
 * 1,069 were the library's; the cffi call's argument conversion, its tuple
 * and the GIL's release and retake were about 950 of the rest.
 *
 * The library itself is linked into pyqstore._qstore only (one copy of its
 * process-wide state): pyqstore._casket passes the addresses of
 * qs_get_nowait and qs_queue_put_held to install() at import.  Limited API
 * (3.10), like the cffi module.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

typedef int (*get_nowait_fn)(void *c, const void *key, size_t klen, void *buf, size_t cap,
                             size_t *vlen);

typedef int64_t (*put_held_fn)(void *q, const void *val, size_t vlen);

static get_nowait_fn get_nowait;
static put_held_fn put_held;

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
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "install(qs_get_nowait, qs_queue_put_held) takes two addresses");
        return NULL;
    }
    void *g = address_of(args[0], "qs_get_nowait");
    void *p = g ? address_of(args[1], "qs_queue_put_held") : NULL;
    if (!p)
        return NULL;
    get_nowait = (get_nowait_fn)(uintptr_t)g;
    put_held = (put_held_fn)(uintptr_t)p;
    Py_RETURN_NONE;
}

/* get(handle, key) -> bytes | int.  handle is a live qs_casket's address
 * (the caller keeps the handle alive; 0 is refused by the library with
 * QS_INVAL), key exact bytes.  The value as bytes; or an int: a qs_* code
 * (QS_NOTFOUND, QS_WOULDBLOCK, any error) or HELD_TOO_LONG. */
static PyObject *get(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "get(handle, key) takes two arguments");
        return NULL;
    }
    if (!get_nowait) {
        PyErr_SetString(PyExc_RuntimeError, "get: install() was not called");
        return NULL;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "get: key must be bytes");
        return NULL;
    }
    void *c = PyLong_AsVoidPtr(args[0]);
    if (!c && PyErr_Occurred())
        return NULL;
    char *key;
    Py_ssize_t klen;
    if (PyBytes_AsStringAndSize(args[1], &key, &klen) < 0)
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
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "put(queue, payload) takes two arguments");
        return NULL;
    }
    if (!put_held) {
        PyErr_SetString(PyExc_RuntimeError, "put: install() was not called");
        return NULL;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "put: payload must be bytes");
        return NULL;
    }
    void *q = PyLong_AsVoidPtr(args[0]);
    if (!q && PyErr_Occurred())
        return NULL;
    char *val;
    Py_ssize_t vlen;
    if (PyBytes_AsStringAndSize(args[1], &val, &vlen) < 0)
        return NULL;
    return PyLong_FromLongLong(put_held(q, val, (size_t)vlen));
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(address of qs_get_nowait, address of qs_queue_put_held)"},
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(queue, payload) -> the id, or a qs_* code (QS_WOULDBLOCK: not held)"},
    {"get", (PyCFunction)(void (*)(void))get, METH_FASTCALL,
     "get(handle, key) -> bytes, or an int: a qs_* code or 1 (too long)"},
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
