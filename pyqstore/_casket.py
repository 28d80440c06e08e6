"""The Casket class: a Python handle on one pyqstore file."""
from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import MutableMapping
from contextlib import contextmanager
from itertools import accumulate
from array import array
from typing import Any, Callable, Iterable, Iterator, Literal, Optional, TypeVar, Union, overload

from ._qstore import ffi, lib
from .errors import ClosedError, Error, error_for
from ._queue import Codec, CodecName, Queue, list_queues, publish, seconds_arg
from ._policy import configure
from ._stream import Stream

__all__ = ["Casket", "Snapshot", "open", "BytesLike"]

BytesLike = Union[bytes, bytearray, memoryview, str]
"""What keys and values may be: bytes-like objects, or str (UTF-8)."""

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

T = TypeVar("T")

Flag = Literal["r", "w", "c", "n"]
"""Open modes, as in :mod:`dbm`: read-only, read-write, create, new."""

_FLAGS = {
    "r": lib.QS_OPEN_READ,
    "w": lib.QS_OPEN_WRITE,
    "c": lib.QS_OPEN_CREATE,
    "n": lib.QS_OPEN_NEW,
}

# The hot calls, bound once: a module global is cheaper than lib.<name>.
_qs_put = lib.qs_put
_qs_putkeep = lib.qs_putkeep
_qs_putdup = lib.qs_putdup
_qs_get = lib.qs_get
_qs_get_into = lib.qs_get_into
from ._held import held_get as _held_get
from ._held import store as _store
_unpack = ffi.unpack

_MISSING: Any = object()

_NOTFOUND = lib.QS_NOTFOUND
_KEYEXIST = lib.QS_KEYEXIST
_NOATTACH = lib.QS_NOATTACH
_NULL = ffi.NULL
_u32 = struct.Struct("<I")
_unpack_u32 = _u32.unpack_from

# Records fetched per qs_cursor_read call: grows from _BATCH_MIN to
# _BATCH_MAX, and is limited so a batch holds about _BATCH_BYTES.
_BATCH_MIN = 4
_BATCH_MAX = 256
_BATCH_BYTES = 1 << 20

_STAT_FIELDS = tuple(name for name, _ in ffi.typeof("qs_stat").fields)


def _arg(x: Any, what: str) -> tuple[Any, int]:
    """Turn a key or value into (something C accepts as const void *, length)
    without copying bytes-like input."""
    t = type(x)
    if t is bytes:
        return x, len(x)
    if t is str:
        b = x.encode("utf-8")
        return b, len(b)
    if isinstance(x, (bytes, bytearray)):
        return ffi.from_buffer(x), len(x)
    if isinstance(x, memoryview):
        if not x.c_contiguous:
            b = x.tobytes()
            return b, len(b)
        return ffi.from_buffer(x), x.nbytes
    if isinstance(x, str):
        b = x.encode("utf-8")
        return b, len(b)
    raise TypeError(
        f"{what} must be bytes, bytearray, memoryview or str, "
        f"not {type(x).__name__}"
    )


def _to_bytes(x: Any, what: str) -> bytes:
    """Like _arg, but always a bytes object (used to pack many records)."""
    t = type(x)
    b: bytes
    if t is bytes:
        b = x
        return b
    if t is str:
        b = x.encode("utf-8")
        return b
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode("utf-8")
    raise TypeError(
        f"{what} must be bytes, bytearray, memoryview or str, "
        f"not {type(x).__name__}"
    )


#: Each thread's buffer for get's values (a get releases the GIL while
#: the library copies into it, so threads cannot share one): two cffi
#: allocations and the library's buffer to free were most of a get's cost.
_SCRATCH = 4096
_scratch = threading.local()


def _take(pp: Any, n: int) -> bytes:
    """Copy n bytes from the library buffer *pp, then qs_free it."""
    p = pp[0]
    pp[0] = _NULL  # the out-parameter may be reused: never free twice
    try:
        if p == _NULL:
            return b""
        b: bytes = ffi.unpack(ffi.cast("char *", p), n)
        return b
    finally:
        lib.qs_free(p)


def _split_values(buf: bytes, count: int) -> list[bytes]:
    """Parse [u32 len][bytes]... into a list of count byte strings."""
    out: list[bytes] = []
    append = out.append
    pos = 0
    for _ in range(count):
        (n,) = _unpack_u32(buf, pos)
        pos += 4
        append(buf[pos:pos + n])
        pos += n
    if pos != len(buf):
        raise Error(f"malformed value list from the C core ({pos} != {len(buf)})")
    return out


def _split_records(buf: bytes, count: int) -> list[tuple[bytes, bytes]]:
    """Parse [u32 klen][key][u32 vlen][value]... into (key, value) pairs."""
    out: list[tuple[bytes, bytes]] = []
    append = out.append
    pos = 0
    for _ in range(count):
        (n,) = _unpack_u32(buf, pos)
        pos += 4
        k = buf[pos:pos + n]
        pos += n
        (n,) = _unpack_u32(buf, pos)
        pos += 4
        append((k, buf[pos:pos + n]))
        pos += n
    if pos != len(buf):
        raise Error(f"malformed record list from the C core ({pos} != {len(buf)})")
    return out


class _Cursor:
    """A C cursor owned by one iterator of a Casket.  It keeps the casket
    alive, so the casket's handle is never freed before the cursor."""

    __slots__ = ("ptr", "casket")

    def __init__(self, ptr: Any, casket: "Casket") -> None:
        self.ptr = ptr
        self.casket = casket

    def close(self) -> None:
        p, self.ptr = self.ptr, None
        if p is not None:
            lib.qs_cursor_close(p)

    def __del__(self) -> None:
        self.close()


class Casket(MutableMapping[bytes, bytes]):
    """An open pyqstore casket: an ordered, transactional mapping from byte
    string keys to one or more byte string values (duplicates, kept in
    insertion order).

    It is a :class:`collections.abc.MutableMapping` whose value for a key is
    the key's first value: ``c[k]`` and ``get`` read it, ``c[k] = v``,
    ``update`` and ``setdefault`` store the only value (``put``), ``del
    c[k]`` and ``pop`` remove every value.  With duplicates: iteration and
    :meth:`keys` yield each key once, :meth:`items` and :meth:`values` one
    entry per record, and ``len(c)`` is the number of records, each
    duplicate counted (the number of keys is ``sum(1 for _ in c)``).
    :meth:`getdup`, :meth:`putdup`, :meth:`count` and :meth:`outlist` work
    on all the values of a key.  Two caskets are equal only when they are
    the same handle (comparing contents would read both files whole), and a
    casket is hashable.

    Create one with :func:`pyqstore.open`.  Keys and values may be
    ``bytes``, ``bytearray``, ``memoryview`` or ``str`` (encoded as UTF-8);
    results are always ``bytes``.  Keys sort by ``memcmp`` order, a shorter
    key before a longer one it prefixes.

    A Casket may be used by many threads at once.  A transaction belongs to
    the thread that began it; other threads' writes wait for it to end (up
    to ``lock_timeout``, then :class:`LockedError` naming its thread), and
    their reads see the last committed state.  A transaction whose thread
    ended without commit or abort is aborted by the next write of another
    thread.  :meth:`close` waits for calls in progress in other threads to
    return; calls begun after close() started raise :class:`ClosedError`.

    Attributes:
        path: the path the casket was opened with (its log is
            ``path + "-log"``).
    """

    path: Union[str, bytes]

    def __init__(
        self,
        path: PathLike,
        flag: Flag = "c",
        *,
        sync: bool = True,
        lock_timeout: float = 5.0,
        cache_size: Optional[int] = None,
        checkpoint_size: Optional[int] = None,
        mode: int = 0o644,
    ) -> None:
        """Open the casket at ``path``; see :func:`pyqstore.open`."""
        # Closing protocol.  close() calls qs_shutdown, which waits for the
        # calls running in C and makes every later call on the handle return
        # QS_CLOSED (raised as ClosedError); the handle's memory is freed
        # only by __del__.  So methods call straight into C with no lock or
        # bookkeeping of their own.  Set first so __del__/close work even if
        # opening fails.
        self._c: Any = None
        self._addr = 0      # self._c's address, for _held_get
        self._closing = 1
        self._close_lock = threading.Lock()

        if not isinstance(flag, str) or flag not in _FLAGS:
            raise ValueError(f"flag must be one of 'r', 'w', 'c', 'n', not {flag!r}")
        fspath = os.fspath(path)
        self.path = fspath
        bpath = os.fsencode(fspath)
        if b"\0" in bpath:
            raise ValueError("embedded null byte in path")
        for what, size in (("cache_size", cache_size), ("checkpoint_size", checkpoint_size)):
            if size is not None:
                if isinstance(size, bool) or not isinstance(size, int):
                    raise TypeError(f"{what} must be an int or None, not {type(size).__name__}")
                if size < 0:
                    raise ValueError(f"{what} must be >= 0")
        if not seconds_arg(lock_timeout, "lock_timeout") >= 0:
            raise ValueError("lock_timeout must be >= 0")
        if isinstance(mode, bool) or not isinstance(mode, int):
            raise TypeError(f"mode must be an int (permission bits), not {type(mode).__name__}")
        if not 0 <= mode <= 0o7777:
            raise ValueError(f"mode must be permission bits between 0 and 0o7777, not {mode:#o}")

        opts = ffi.new("qs_options *")
        lib.qs_options_init(opts)
        opts.flag = _FLAGS[flag]
        opts.perm = mode
        opts.sync = 1 if sync else 0
        opts.lock_timeout = float(lock_timeout)
        if cache_size is not None:
            opts.cache_bytes = int(cache_size)
        if checkpoint_size is not None:
            opts.checkpoint_bytes = int(checkpoint_size)
        out = ffi.new("qs_casket **")
        rc = lib.qs_open(bpath, opts, out)
        if rc == _NOATTACH:  # the region is what this user may not write
            raise error_for(rc, "open", os.fsdecode(fspath) + "-shm")
        if rc:
            detail = ffi.string(lib.qs_open_detail()).decode("utf-8", "replace") or None
            raise error_for(rc, "open", fspath, detail)
        self._c = out[0]
        self._addr = int(ffi.cast("uintptr_t", self._c))
        self._closing = 0
        self.flag = flag

    # ---------------------------------------------------------------- plumbing

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"casket {self.path!r} is closed")

    def _call(self, op: str, fn: Callable[..., int], *args: Any) -> int:
        """Call fn(handle, *args); raise on a nonzero return code."""
        rc = fn(self._c, *args)
        if rc:
            raise error_for(rc, op, self.path, handle=self._c)
        return rc

    def _key_count(self, fn: Callable[..., int], key: BytesLike, op: str) -> int:
        """fn(handle, key, klen, uint64_t *) for the per-key counting calls;
        0 when the key has no value."""
        k, kl = _arg(key, "key")
        out = ffi.new("uint64_t *")
        rc = fn(self._c, k, kl, out)
        if rc:
            if rc == _NOTFOUND:
                return 0
            raise self._error(rc, op)
        return int(out[0])

    def _error(self, rc: int, op: str) -> Error:
        return error_for(rc, op, self.path, handle=self._c)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called (or started)."""
        return self._closing != 0

    def close(self) -> None:
        """Close the casket.  Idempotent.

        A transaction still open, whichever thread began it, is abandoned.
        Calls running in other threads are waited for; calls waiting for
        another thread's transaction, and every later call, raise
        :class:`ClosedError`.  The log is checkpointed into the main file; an
        :class:`Error` is raised if that failed (the casket is closed
        anyway).
        """
        with self._close_lock:
            if self._c is None or self._closing:
                return
            self._closing = 1
            rc = lib.qs_shutdown(self._c)
        if rc:
            raise error_for(rc, "close", self.path)

    def __enter__(self) -> "Casket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Only here is the handle freed: no thread can be inside a method of
        # an object that is being collected, and cursors keep their casket
        # alive, so nothing can use the pointer afterwards.
        c = getattr(self, "_c", None)
        if c is not None:
            self._c = None
            self._addr = 0
            try:
                lib.qs_close(c)
            except Exception:  # interpreter teardown may have cleared lib
                pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<pyqstore.Casket {self.path!r} {state}>"

    # A handle, not a value: Mapping's __eq__ would read both caskets whole
    # (and set __hash__ to None).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __reduce__(self) -> Any:
        raise TypeError("a Casket cannot be pickled or sent to another process; pass its "
                        "path and open it there with pyqstore.open() (several processes "
                        "may have one casket open at once)")

    # ----------------------------------------------------------------- writes

    def put(self, key: BytesLike, value: BytesLike) -> None:
        """Store ``value`` as the only value of ``key`` (replacing all of its
        duplicates)."""
        if type(key) is bytes and type(value) is bytes:
            # _store (see _heldcalls.c) keeps the GIL where the put waits
            # for nobody (sync off) and elsewhere releases it once
            rc = _qs_put(self._c, key, len(key), value, len(value)) if _store is None \
                else _store(self._addr, key, value)
        else:
            k, kl = _arg(key, "key")
            v, vl = _arg(value, "value")
            rc = lib.qs_put(self._c, k, kl, v, vl)
        if rc:
            raise self._error(rc, "put")

    __setitem__ = put

    def putkeep(self, key: BytesLike, value: BytesLike) -> bool:
        """Store ``value`` only if ``key`` has no value.  Returns True when
        stored, False when the key already existed (nothing changed)."""
        if type(key) is bytes and type(value) is bytes:
            rc = _qs_putkeep(self._c, key, len(key), value, len(value))
        else:
            k, kl = _arg(key, "key")
            v, vl = _arg(value, "value")
            rc = lib.qs_putkeep(self._c, k, kl, v, vl)
        if rc:
            if rc == _KEYEXIST:
                return False
            raise self._error(rc, "putkeep")
        return True

    def putdup(self, key: BytesLike, value: BytesLike) -> None:
        """Add ``value`` after the existing values of ``key``."""
        if type(key) is bytes and type(value) is bytes:
            rc = _qs_putdup(self._c, key, len(key), value, len(value))
        else:
            k, kl = _arg(key, "key")
            v, vl = _arg(value, "value")
            rc = lib.qs_putdup(self._c, k, kl, v, vl)
        if rc:
            raise self._error(rc, "putdup")

    def putdup_many(self, pairs: Iterable[tuple[BytesLike, BytesLike]]) -> int:
        """:meth:`putdup` every ``(key, value)`` of ``pairs`` in one atomic
        call (all or none; its own transaction when none is open).  Returns
        the number of records added."""
        keys: list[bytes] = []
        vals: list[bytes] = []
        kappend = keys.append
        vappend = vals.append
        for pair in pairs:
            try:
                key, value = pair
            except (TypeError, ValueError):
                raise TypeError(
                    f"putdup_many expects (key, value) pairs, got {type(pair).__name__}"
                ) from None
            kappend(_to_bytes(key, "key"))
            vappend(_to_bytes(value, "value"))
        n = len(keys)
        if n == 0:
            if self._closing:
                raise self._closed_error()
            return 0
        koff = array("Q", [0])
        koff.extend(accumulate(map(len, keys)))
        voff = array("Q", [0])
        voff.extend(accumulate(map(len, vals)))
        kbuf = b"".join(keys)
        vbuf = b"".join(vals)
        del keys, vals
        kp = ffi.from_buffer("uint64_t[]", koff)
        vp = ffi.from_buffer("uint64_t[]", voff)
        rc = lib.qs_putdup_many(self._c, n, kbuf, kp, vbuf, vp)
        if rc:
            raise self._error(rc, "putdup_many")
        return n

    def out(self, key: BytesLike) -> bool:
        """Remove the first value of ``key``.  Returns False when the key had
        no value."""
        k, kl = _arg(key, "key")
        rc = lib.qs_out(self._c, k, kl)
        if rc:
            if rc == _NOTFOUND:
                return False
            raise self._error(rc, "out")
        return True

    def outlist(self, key: BytesLike) -> int:
        """Remove every value of ``key``; returns how many were removed."""
        return self._key_count(lib.qs_outlist, key, "outlist")

    def __delitem__(self, key: BytesLike) -> None:
        """Remove every value of ``key``; KeyError when it has none."""
        if self.outlist(key) == 0:
            raise KeyError(key)

    def pop(self, key: BytesLike, default: Any = _MISSING) -> Any:
        """Remove every value of ``key`` and return its first; ``default``
        (or KeyError when not given) when it has none.  Of two threads or
        processes popping one key at once, one gets the value."""
        value = self.get(key, _MISSING)
        if value is not _MISSING and self.outlist(key):
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def setdefault(self, key: BytesLike, default: Optional[BytesLike] = None) -> bytes:
        """The first value of ``key``; when it has none, store ``default``
        (atomically, as :meth:`putkeep`) and return it as bytes.  A casket
        stores no None: a missing key with no default is a TypeError."""
        while True:
            value = self.get(key)
            if value is not None:
                return value
            if default is None:
                raise TypeError(f"setdefault: {key!r} has no value and a casket cannot store "
                                f"None: give a bytes-like default")
            if self.putkeep(key, default):
                return _to_bytes(default, "default")

    # ------------------------------------------------------------------ reads

    @overload
    def get(self, key: BytesLike) -> Optional[bytes]: ...

    @overload
    def get(self, key: BytesLike, default: T) -> Union[bytes, T]: ...

    def get(self, key: BytesLike, default: Any = None) -> Any:
        """The first value of ``key``, or ``default`` when it has none."""
        # The hot path of seed 001's reads: bytes keys skip _arg's call and
        # the C calls are module globals (a lib attribute lookup each call
        # cost more than the type test).  First the get that keeps the GIL;
        # where it would have waited (QS_WOULDBLOCK), for a value longer
        # than its buffer and for any error, the cffi call below, which
        # waits, reads any length and raises.
        if type(key) is bytes:
            if _held_get is not None:
                v = _held_get(self._addr, key)
                if type(v) is bytes:
                    return v
                if v == _NOTFOUND:
                    return default
            k, kl = key, len(key)
        else:
            k, kl = _arg(key, "key")
        try:
            buf, pn = _scratch.cell
        except AttributeError:
            buf, pn = _scratch.cell = (ffi.new("char[]", _SCRATCH), ffi.new("size_t *"))
        rc = _qs_get_into(self._c, k, kl, buf, _SCRATCH, pn)
        if rc:
            if rc == _NOTFOUND:
                return default
            raise self._error(rc, "get")
        n = pn[0]
        if n <= _SCRATCH:
            return _unpack(buf, n)
        return self._get_large(k, kl, default)

    def _get_large(self, k: Any, kl: int, default: Any) -> Any:
        # a value longer than the scratch buffer: the library's own copy
        pp = ffi.new("void **")
        pn = ffi.new("size_t *")
        rc = lib.qs_get(self._c, k, kl, pp, pn)
        if rc:
            lib.qs_free(pp[0])
            if rc == _NOTFOUND:
                return default
            raise self._error(rc, "get")
        return _take(pp, pn[0])

    def __getitem__(self, key: BytesLike) -> bytes:
        """The first value of ``key``; KeyError when it has none."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        b: bytes = value
        return b

    def getdup(self, key: BytesLike) -> list[bytes]:
        """Every value of ``key`` in insertion order (empty when none)."""
        k, kl = _arg(key, "key")
        pp = ffi.new("void **")
        pn = ffi.new("size_t *")
        pcount = ffi.new("uint64_t *")
        rc = lib.qs_getdup(self._c, k, kl, pp, pn, pcount)
        if rc:
            lib.qs_free(pp[0])
            if rc == _NOTFOUND:
                return []
            raise self._error(rc, "getdup")
        count = int(pcount[0])
        buf = _take(pp, pn[0])
        if count == 0:
            return []
        return _split_values(buf, count)

    def count(self, key: BytesLike) -> int:
        """Number of values of ``key`` (0 when absent)."""
        return self._key_count(lib.qs_count, key, "count")

    def __contains__(self, key: object) -> bool:
        """True when ``key`` has at least one value."""
        return self.count(key) > 0  # type: ignore[arg-type]

    def __len__(self) -> int:
        """Number of records, each duplicate counted (so with duplicates it
        is more than the number of keys iteration yields)."""
        pcount = ffi.new("uint64_t *")
        self._call("len", lib.qs_records, pcount)
        return int(pcount[0])

    # -------------------------------------------------------------- iteration

    def _cursor_open(self) -> _Cursor:
        pcur = ffi.new("qs_cursor **")
        rc = lib.qs_cursor_open(self._c, pcur)
        if rc:
            raise self._error(rc, "cursor")
        return _Cursor(pcur[0], self)

    def _cursor_close(self, cur: _Cursor) -> None:
        cur.close()

    def _cursor_rc(self, cur: _Cursor, fn: Callable[..., int], *args: Any) -> int:
        """fn(cursor, *args); its return code (QS_CLOSED once the casket is
        shut down: the C core refuses calls on it)."""
        p = cur.ptr
        if p is None:
            raise self._closed_error()
        return fn(p, *args)

    def _cursor_call(self, cur: _Cursor, op: str, fn: Callable[..., int], *args: Any) -> bool:
        """Run a cursor function; False on QS_NOTFOUND, raise on errors."""
        rc = self._cursor_rc(cur, fn, *args)
        if rc:
            if rc == _NOTFOUND:
                return False
            raise self._error(rc, op)
        return True

    def _cursor_key(self, cur: _Cursor) -> Optional[bytes]:
        """Key under the cursor, or None when unpositioned."""
        pk = ffi.new("void **")
        pn = ffi.new("size_t *")
        rc = self._cursor_rc(cur, lib.qs_cursor_get, pk, pn, _NULL, _NULL)
        if rc:
            lib.qs_free(pk[0])
            if rc == _NOTFOUND:
                return None
            raise self._error(rc, "cursor_get")
        return _take(pk, pn[0])

    def _position(self, cur: _Cursor, start: Optional[bytes], reverse: bool) -> bool:
        """Put the cursor on the first record to read; False when none."""
        if start is None:
            if reverse:
                return self._cursor_call(cur, "cursor_last", lib.qs_cursor_last)
            return self._cursor_call(cur, "cursor_first", lib.qs_cursor_first)
        if not reverse:
            return self._cursor_call(cur, "cursor_jump", lib.qs_cursor_jump,
                                     start, len(start))
        # Reverse: the last record whose key is <= start.  The smallest key
        # greater than start is start + b"\0"; jump there and step back.
        if len(start) < lib.QS_MAX_KEY:
            succ = start + b"\0"
            if not self._cursor_call(cur, "cursor_jump", lib.qs_cursor_jump,
                                     succ, len(succ)):
                return self._cursor_call(cur, "cursor_last", lib.qs_cursor_last)
            return self._cursor_call(cur, "cursor_prev", lib.qs_cursor_prev)
        # A maximal-length start: no key extends it, so step over its own
        # duplicates.
        if not self._cursor_call(cur, "cursor_jump", lib.qs_cursor_jump,
                                 start, len(start)):
            return self._cursor_call(cur, "cursor_last", lib.qs_cursor_last)
        while True:
            k = self._cursor_key(cur)
            if k != start:
                break
            if not self._cursor_call(cur, "cursor_next", lib.qs_cursor_next):
                return self._cursor_call(cur, "cursor_last", lib.qs_cursor_last)
        return self._cursor_call(cur, "cursor_prev", lib.qs_cursor_prev)

    def _records(self, start: Optional[BytesLike], reverse: bool) -> Iterator[list[tuple[bytes, bytes]]]:
        """Generator of record batches from a private cursor."""
        sb = None if start is None else _to_bytes(start, "start")
        cur = self._cursor_open()
        try:
            if not self._position(cur, sb, reverse):
                return
            pp = ffi.new("void **")
            pn = ffi.new("size_t *")
            pcount = ffi.new("uint64_t *")
            rev = 1 if reverse else 0
            batch = _BATCH_MIN
            while True:
                pp[0] = _NULL  # a failing call may leave it untouched
                rc = self._cursor_rc(cur, lib.qs_cursor_read, batch, rev, pp, pn, pcount)
                if rc:
                    lib.qs_free(pp[0])
                    if rc == _NOTFOUND:
                        return
                    raise self._error(rc, "cursor_read")
                count = int(pcount[0])
                nbytes = int(pn[0])
                buf = _take(pp, nbytes)
                if count == 0:
                    return
                yield _split_records(buf, count)
                per = max(1, nbytes // count)
                batch = max(1, min(_BATCH_MAX, batch * 4, _BATCH_BYTES // per))
        finally:
            self._cursor_close(cur)

    def _check_iter_args(self, start: Optional[BytesLike]) -> None:
        if self._closing:
            raise self._closed_error()
        if start is not None:
            _arg(start, "start")

    def items(self, start: Optional[BytesLike] = None,  # type: ignore[override]
              reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Iterate ``(key, value)`` records in key order, a key's duplicates
        in insertion order.

        ``start``: forward, begin at the first key >= start; with
        ``reverse=True``, walk backwards from the last record whose key is
        <= start.

        What it sees: records are read in batches (up to 256 records or
        about 1 MiB).  Each batch reads the calling thread's view at that
        moment: its own transaction's changes, or else the newest commit of
        any handle or process.  So while others commit, an iteration never
        yields a record twice or out of order and yields every record that
        stays in place throughout, but records added or removed meanwhile
        may or may not appear, and the total matches no single commit.  For
        one commit's state, iterate a :meth:`snapshot`.
        """
        self._check_iter_args(start)
        return self._items(start, reverse)

    def _items(self, start: Optional[BytesLike], reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        for batch in self._records(start, reverse):
            yield from batch

    def keys(self, start: Optional[BytesLike] = None,  # type: ignore[override]
             reverse: bool = False) -> Iterator[bytes]:
        """Iterate keys in order as :meth:`items` does, each key once
        however many values it has."""
        self._check_iter_args(start)
        return self._keys(start, reverse)

    def _keys(self, start: Optional[BytesLike], reverse: bool) -> Iterator[bytes]:
        last = None
        for batch in self._records(start, reverse):
            for k, _ in batch:
                if k != last:
                    yield k
                    last = k

    def values(self, start: Optional[BytesLike] = None,  # type: ignore[override]
               reverse: bool = False) -> Iterator[bytes]:
        """Iterate values as :meth:`items` does."""
        self._check_iter_args(start)
        return self._values(start, reverse)

    def _values(self, start: Optional[BytesLike], reverse: bool) -> Iterator[bytes]:
        for batch in self._records(start, reverse):
            for _, v in batch:
                yield v

    def __iter__(self) -> Iterator[bytes]:
        """Same as :meth:`keys`: each key once."""
        self._check_iter_args(None)
        return self._keys(None, False)

    # ----------------------------------------------------------- transactions

    def begin(self) -> None:
        """Begin a write transaction owned by the calling thread (waiting up
        to ``lock_timeout`` while another thread owns one, then LockedError).
        TransactionError when this thread already has one."""
        self._call("begin", lib.qs_begin)

    def commit(self, sync: bool = True) -> None:
        """Commit this thread's transaction (durable on return when opened
        with ``sync=True``).  TransactionError when this thread has none.
        On an I/O error the transaction is aborted and the error raised.

        ``sync=False``: do not wait for the log sync, however the casket
        was opened.  The transaction is visible and survives this
        process's death at once, but a power cut may lose it (with what was
        committed after it) until a later synced commit on this casket,
        :meth:`sync` or a checkpoint returns.  For changes whose loss is
        harmless, at no fdatasync's cost."""
        rc = lib.qs_commit(self._c) if sync else lib.qs_commit_nosync(self._c)
        if rc:
            raise self._error(rc, "commit")

    def abort(self) -> None:
        """Abandon this thread's transaction, restoring the casket exactly.
        TransactionError when this thread has none."""
        rc = lib.qs_abort(self._c)
        if rc:
            raise self._error(rc, "abort")

    @property
    def in_transaction(self) -> bool:
        """True when the calling thread owns a transaction on this casket."""
        if self._closing:
            raise self._closed_error()
        return bool(lib.qs_in_transaction(self._c))

    @contextmanager
    def transaction(self, sync: bool = True) -> Iterator["Casket"]:
        """Context manager: begin, then commit (``commit(sync)``) when the
        block succeeds or abort (and re-raise) when it raises."""
        self.begin()
        try:
            yield self
        except BaseException:
            try:
                self.abort()
            except Error:
                pass
            raise
        self.commit(sync)

    # ------------------------------------------------------------------ queues

    @overload
    def queue(self, name: str, codec: None = None, *, maxsize: Optional[int] = None,
              max_deliveries: Optional[int] = None, dead_letter: Optional[str] = None,
              dedup_window: Optional[float] = None) -> "Queue[bytes]": ...

    @overload
    def queue(self, name: str, codec: CodecName, *, maxsize: Optional[int] = None,
              max_deliveries: Optional[int] = None, dead_letter: Optional[str] = None,
              dedup_window: Optional[float] = None) -> "Queue[Any]": ...

    @overload
    def queue(self, name: str, codec: "Codec[T]", *, maxsize: Optional[int] = None,
              max_deliveries: Optional[int] = None, dead_letter: Optional[str] = None,
              dedup_window: Optional[float] = None) -> "Queue[T]": ...

    def queue(self, name: str, codec: Any = None, *, maxsize: Optional[int] = None,
              max_deliveries: Optional[int] = None, dead_letter: Optional[str] = None,
              dedup_window: Optional[float] = None) -> "Queue[Any]":
        """The queue called name (it exists once it holds an item).  codec:
        None (payloads are bytes-like, str as UTF-8; items come back as
        bytes), "pickle", "json", "msgpack", or an object with
        ``encode(obj) -> bytes`` and ``decode(bytes) -> obj``.

        The policy arguments are stored in the casket (every handle, in
        every process, applies the same policy): those given replace the
        stored values, None keeps them (``queue.config()`` shows them).
        maxsize: the items the queue may hold, reserved ones included
        (0: no bound); a maxsize below what it holds now raises
        :class:`pyqstore.BoundError` and changes nothing.  max_deliveries:
        reserves of an item without an ack before it goes to the
        dead_letter queue (0: no limit, the default); dead_letter ("":
        none).  dedup_window: seconds a put's key is remembered.  Setting
        them is a write: inside a transaction it is part of it."""
        if self._closing:
            raise self._closed_error()
        q = Queue(self, name, codec)
        if maxsize is not None or max_deliveries is not None or dead_letter is not None \
                or dedup_window is not None:
            configure(q, maxsize, max_deliveries, dead_letter, dedup_window)
        return q

    def stream(self, name: str, maxlen: Optional[int] = None, max_age: Optional[float] = None,
               clock: Callable[[], float] = time.time) -> "Stream":
        """The stream called name: an append-only log with consumer groups
        (see :class:`pyqstore.Stream`).  When maxlen or max_age is given,
        both are stored in the casket as its retention settings (None there:
        no limit); with neither, the stored settings stay.  clock gives the time that stamps items and pending
        entries (time.time; a test may pass a fake one)."""
        if self._closing:
            raise self._closed_error()
        return Stream(self, name, maxlen, max_age, clock)

    def queues(self) -> list[str]:
        """Names of the queues holding at least one item, in name order."""
        return [name for name, _ in list_queues(self)]

    def queue_lengths(self) -> dict[str, int]:
        """Each queue holding an item and its length (as ``len(queue)``)."""
        return dict(list_queues(self))

    def publish(self, payload: Any, names: Iterable[str],
                codec: Union[None, CodecName, "Codec[Any]"] = None) -> int:
        """Fan-out: put one payload on every named queue, storing it once;
        its storage is freed when the last of them has consumed it.  Returns
        the item id (the same in every queue)."""
        return publish(self, payload, names, codec)

    # ------------------------------------------------------------- snapshots

    def snapshot(self, *, max_log_size: Optional[int] = None,
                 cache_size: Optional[int] = None) -> "Snapshot":
        """A read-only view of one commit: every read and iteration through
        it (records, ``queue(name).iter()``, ``peek_many``, ``len``) sees
        the newest commit at the time of this call, whatever other threads
        and processes commit meanwhile, until it is closed.  Use it as a
        context manager::

            with casket.snapshot() as s:
                n = sum(1 for _ in s.items())   # one commit's count

        It does not see this thread's open transaction.  It never blocks
        writers.  While it is open, checkpoints are held off (they would
        overwrite pages it reads), so the log grows with every commit, up to
        ``max_log_size`` bytes (None: 1 GiB).  Then a checkpoint goes ahead
        anyway and every later read of the snapshot raises
        :class:`SnapshotTooOldError`; close it and take a new one.  Closing
        it lets the next commit checkpoint and shrink the log again.
        Reservations are live state, not part of a commit: ``len`` and
        ``peek_many`` skip the items reserved now, ``iter()`` yields them.

        ``cache_size``: the snapshot's page memory budget (None: as for
        :func:`open`).  A snapshot is a read-only handle of its own (it
        takes one of the 128 handle slots); writes raise ReadOnlyError.
        """
        for name, v in (("max_log_size", max_log_size), ("cache_size", cache_size)):
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise ValueError(f"{name} must be a positive int or None, not {v!r}")
        out = ffi.new("qs_casket **")
        rc = lib.qs_snapshot_open(self._c, max_log_size or 0, cache_size or 0, out)
        if rc:
            raise self._error(rc, "snapshot")
        return Snapshot(self, out[0])

    def backup(self, dest: PathLike) -> None:
        """Write a consistent copy of the casket to a new file ``dest``
        while this and other handles and processes go on writing.

        The copy holds exactly the records and queue items of one commit
        (read through a :meth:`snapshot`), compacted, in a single synced
        file that opens on its own: no ``-log`` or ``-shm`` file goes with
        it.  Reserved items are copied as ordinary items.  It is written as
        ``dest + "-backup"`` and linked to ``dest`` only once complete and
        durable, so a failed or killed backup leaves no ``dest``.

        Raises FileExists when ``dest``, ``dest-log`` or ``dest-shm`` exists
        (nothing is replaced), :class:`SnapshotTooOldError` when the log
        outgrew the snapshot's limit (1 GiB) during the copy.
        :meth:`copy_progress` tells how far it has got.
        """
        bdest = os.fsencode(os.fspath(dest))
        if not bdest or b"\0" in bdest:
            raise ValueError("backup destination must be a non-empty path without NUL bytes")
        rc = lib.qs_backup(self._c, bdest)
        if rc:
            raise error_for(rc, "backup", os.fsdecode(bdest))

    def copy_progress(self) -> tuple[int, int]:
        """``(records copied, records to copy)`` of the :meth:`compact` or
        :meth:`backup` running on this casket (in another thread), or of the
        last one; ``(0, 0)`` before the first."""
        done = ffi.new("uint64_t *")
        total = ffi.new("uint64_t *")
        self._call("progress", lib.qs_progress, done, total)
        return int(done[0]), int(total[0])

    # -------------------------------------------------------------- upkeep

    def sync(self) -> None:
        """Checkpoint: write every committed change into the main file and
        sync it.  TransactionError inside a transaction."""
        self._call("sync", lib.qs_sync)

    def check(self) -> None:
        """Verify the whole file.  Returns None when sound; raises
        :class:`CorruptError` with the C core's description otherwise."""
        msg = ffi.new("char[]", 1024)
        rc = lib.qs_check(self._c, msg, 1024)
        if rc:
            detail = ffi.string(msg).decode("utf-8", "replace") or None
            raise error_for(rc, "check", self.path, detail)

    def compact(self) -> None:
        """Rewrite the casket compactly and return free space to the file
        system.  TransactionError inside a transaction, ReadOnlyError on a
        read-only casket."""
        self._call("compact", lib.qs_compact)

    def stats(self) -> dict[str, Any]:
        """Every field of ``qs_stat`` (pages, free_pages, records,
        file_bytes, log_bytes, depth, commits, ..., open_cursors: the C
        cursors of live iterators of this handle) plus ``"path"``."""
        st = ffi.new("qs_stat *")
        self._call("stats", lib.qs_stat_get, st)
        d: dict[str, Any] = {name: int(getattr(st, name)) for name in _STAT_FIELDS}
        d["path"] = self.path
        return d


class Snapshot(Casket):
    """A read-only view of one commit of a casket; see
    :meth:`Casket.snapshot`.  It has every read method of a Casket (get,
    getdup, count, len, items, keys, values, queue, queues, queue_lengths,
    stats, check); writes raise ReadOnlyError.  Close it (or leave its
    ``with`` block) as soon as it is no longer needed: while it is open the
    casket's log cannot be checkpointed."""

    def __init__(self, parent: Casket, handle: Any) -> None:  # noqa: D107 - internal
        self._close_lock = threading.Lock()
        self.path = parent.path
        self.flag = "r"
        self._c = handle
        self._addr = int(ffi.cast("uintptr_t", handle))
        self._closing = 0

    def __enter__(self) -> "Snapshot":
        return self

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<pyqstore.Snapshot of {self.path!r} {state}>"


def open(
    path: PathLike,
    flag: Flag = "c",
    *,
    sync: bool = True,
    lock_timeout: float = 5.0,
    cache_size: Optional[int] = None,
    checkpoint_size: Optional[int] = None,
    mode: int = 0o644,
) -> Casket:
    """Open a casket.

    Args:
        path: the casket file (str, bytes or os.PathLike); its log is
            ``path + "-log"``.
        flag: as in :mod:`dbm`: ``"r"`` read-only, ``"w"`` read-write on an
            existing file, ``"c"`` create if missing, ``"n"`` always new and
            empty.
        sync: when true, a commit returns only once it is durable.
        lock_timeout: seconds to wait for another process's lock, or for
            another thread's transaction, before :class:`LockedError`
            (0 fails at once).
        cache_size: page memory budget in bytes (None: the default,
            256 MiB); a bigger transaction spills dirty pages to the file.
        checkpoint_size: log size in bytes that triggers a checkpoint
            (None: the default, 4 MiB, which a process alone with the
            casket stretches to up to 16 MiB while the log's updates are
            spread over many pages: see ``checkpoint_bytes`` in
            ``qstore.h``).
        mode: the permission bits of every file the open creates (the
            casket, ``path + "-log"`` and ``path + "-shm"``), less the
            umask, as in :func:`os.open` and :func:`dbm.open`.  Files that
            exist keep theirs; :meth:`Casket.compact` keeps the main
            file's, :meth:`Casket.backup` gives ``dest`` this mode.

    Raises:
        ValueError: for a bad flag, or mode outside 0..0o7777.
        FileNotFound: (also FileNotFoundError) for "r"/"w" on a missing file.
        CorruptError: when the file is damaged or not a casket.
        LockedError: when another process holds the casket.
    """
    return Casket(path, flag, sync=sync, lock_timeout=lock_timeout,
                  cache_size=cache_size, checkpoint_size=checkpoint_size, mode=mode)
