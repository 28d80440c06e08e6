"""Queues in a casket: :class:`Queue`, :class:`Item` and payload codecs.

Every method is one call into the C core (csrc/queue.c); batches are one
call for the whole batch.  See ``Casket.queue``.
"""
from __future__ import annotations

import functools
import json
import marshal
import numbers
import operator
import pickle
import struct
import threading
import time
from array import array
from itertools import accumulate, pairwise, repeat
from typing import TYPE_CHECKING, Any, AsyncIterator, Generic, Iterable, Iterator, Literal, NoReturn, Optional, Protocol, TypeVar, Union, overload

from . import _aio
from ._qstore import ffi, lib
from . import _batch
from ._batch import Batch, Pending
from .errors import DecodeError, Empty, Full, TooBigError, error_for

from ._policy import QueueConfig, config_get
from ._held import append as _append
from ._held import take as _take

if TYPE_CHECKING:
    from ._casket import Casket

__all__ = ["Queue", "Item", "Batch", "Pending", "Codec", "CodecName", "resolve_codec"]

T = TypeVar("T")

BytesLike = Union[bytes, bytearray, memoryview, str]
"""What a queue without a codec takes as a payload (str as UTF-8); its
items come back as bytes."""

CodecName = Literal["pickle", "json", "msgpack"]
"""The codecs known by name.  Their payloads are typed Any: what comes
back is whatever the codec makes of the bytes."""

_NOTFOUND = lib.QS_NOTFOUND
_INTR = lib.QS_INTR
_wait_left = lib.qs_queue_wait_left
# Every wait below loops on QS_INTR, and Python runs a signal's handler as
# the call returns.  A signal that came while the waiting thread was awake
# inside the call (between the write lock's sleeps, or between a look at
# the queue and the sleep) ended no sleep: without a slice its handler (a
# Ctrl-C) waited for the next wake-up, which an untimed get on a quiet
# queue may never have.  Now it waits a quarter of a second at most.
WAIT_SLICE = 0.25
lib.qs_set_wait_slice(WAIT_SLICE)
_INVAL = lib.QS_INVAL
_MAX_NAME = lib.QS_MAX_QUEUE_NAME
_qs_put_id = lib.qs_queue_put_id
_QFULL = lib.QS_QFULL
_ERRNO_FLOOR = -4096   # qs_queue_put_id returns an errno e as -e, above this
_qs_put_framed = lib.qs_queue_put_framed
_qs_get = lib.qs_queue_get
_qs_items_free = lib.qs_items_free
_unpack = ffi.unpack
_buffer = ffi.buffer
# Per-thread scratch out-parameters for the hottest calls.
_tls = threading.local()
_new = ffi.new
_char_p = ffi.typeof("char *")
_cast = ffi.cast


class Codec(Protocol[T]):
    """Anything with ``encode(obj) -> bytes`` and ``decode(bytes) -> obj``;
    a queue with a ``Codec[T]`` is a ``Queue[T]``."""

    def encode(self, obj: T) -> bytes: ...

    def decode(self, data: bytes) -> T: ...


class _Pickle:
    name = "pickle"

    @staticmethod
    def encode(obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode(data: bytes) -> Any:
        return pickle.loads(data)

    # A batch in one map, no Python frame per item: about half the time of
    # a call of encode / decode per item for small items.  dumps always
    # returns bytes, so _encoded's check has nothing to find.
    @staticmethod
    def encode_many(objs: Iterable[Any]) -> list[bytes]:
        return list(map(pickle.dumps, objs, repeat(pickle.HIGHEST_PROTOCOL)))

    # list.extend appends as it goes: when a payload fails, out holds the
    # ones decoded before it
    @staticmethod
    def decode_into(data: list[bytes], out: list[Any]) -> None:
        out.extend(map(pickle.loads, data))


class _Json:
    name = "json"

    @staticmethod
    def encode(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @staticmethod
    def decode(data: bytes) -> Any:
        return json.loads(data)


class _Msgpack:
    name = "msgpack"

    def __init__(self) -> None:
        import msgpack  # raises ImportError when not installed

        self._packb = msgpack.packb
        self._unpackb = msgpack.unpackb

    def encode(self, obj: Any) -> bytes:
        b: bytes = self._packb(obj, use_bin_type=True)
        return b

    def decode(self, data: bytes) -> Any:
        return self._unpackb(data, raw=False)


def resolve_codec(codec: Union[None, str, Codec[Any]]) -> Optional[Codec[Any]]:
    """None, a codec name ("pickle", "json", "msgpack") or a codec object."""
    if codec is None:
        return None
    if isinstance(codec, str):
        if codec == "pickle":
            return _Pickle()
        if codec == "json":
            return _Json()
        if codec == "msgpack":
            try:
                return _Msgpack()
            except ImportError:
                raise ValueError(
                    "codec 'msgpack' needs the msgpack package: pip install msgpack"
                ) from None
        raise ValueError(f"unknown codec {codec!r}: use 'pickle', 'json', 'msgpack' "
                         "or an object with encode() and decode()")
    if callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None)):
        return codec
    raise TypeError("codec must be None, 'pickle', 'json', 'msgpack' or an object "
                    f"with encode(obj) -> bytes and decode(bytes) -> obj, not {codec!r}")


def queue_name(name: Any) -> bytes:
    """The UTF-8 bytes of a queue name, checked."""
    if not isinstance(name, str):
        raise TypeError(f"queue name must be str, not {type(name).__name__}")
    if not name:
        raise ValueError("queue name must not be empty")
    b = name.encode("utf-8")
    if len(b) > _MAX_NAME:
        raise ValueError(f"queue name is {len(b)} bytes long; the limit is {_MAX_NAME}")
    return b


def _raw_payload(x: Any) -> bytes:
    """A payload with no codec: bytes-like as it is, str as UTF-8."""
    t = type(x)
    b: bytes
    if t is bytes:
        b = x
        return b
    if t is str or isinstance(x, str):
        b = x.encode("utf-8")
        return b
    if isinstance(x, (bytes, bytearray)):
        return bytes(x)
    if isinstance(x, memoryview):
        return x.tobytes()
    raise TypeError(
        f"queue payload must be bytes, bytearray, memoryview or str (or use a codec), "
        f"not {type(x).__name__}"
    )


def _encoded_all(codec: Codec[Any], objs: Iterable[Any]) -> list[bytes]:
    """Every object encoded, as _encoded would (pickle in one pass)."""
    if type(codec) is _Pickle:
        return _Pickle.encode_many(objs)
    return [_encoded(codec, x) for x in objs]


def _encoded(codec: Codec[Any], obj: Any) -> bytes:
    b = codec.encode(obj)
    if type(b) is not bytes:
        if isinstance(b, (bytes, bytearray, memoryview)):
            return bytes(b)
        raise TypeError(f"codec {codec!r} encode() returned {type(b).__name__}, not bytes")
    return b


_CHUNK = 1024


_LIST_HDR = 5       # marshal's list header: "[", then the count as 4 bytes


def _framed(items: list[Any]) -> Optional[bytes]:
    """The payloads as qs_queue_put_framed takes them, packed in one pass of
    C: marshal (format 2, which has no back-references) writes a list as its
    header and then each bytes-like item as "s", its length in 4 bytes
    little-endian and its bytes; a str or any other item gets another
    leading byte, which the C call refuses (QS_INVAL, nothing stored).
    None when marshal cannot write the list at all (an unmarshallable item,
    a payload of 2 GiB or more, a list subclass)."""
    try:
        framed = marshal.dumps(items, 2)
    except ValueError:
        return None
    return framed if framed[0] == 0x5B else None     # "[": a list


def _pack(items: list[Any]) -> tuple[bytes, "array[int]"]:
    """(the payloads concatenated, their lengths as uint32).  Both are taken
    a chunk at a time, the lengths right after the join: each payload object
    is then fetched from memory once, not once per pass (a list made over
    time has its objects scattered through the heap)."""
    join = b"".join
    try:
        if len(items) <= _CHUNK:
            return join(items), array("I", map(len, items))
        parts = []
        lens: array[int] = array("I")
        add_lens = lens.extend
        for i in range(0, len(items), _CHUNK):
            part = items[i:i + _CHUNK]
            parts.append(join(part))
            add_lens(map(len, part))
        return join(parts), lens
    except OverflowError:
        raise TooBigError("put_many: a payload is 4 GiB or longer") from None


_MIXED = (1 << 64) - 1

# One qs_queue_scan call of Queue.iter reads at most this many items, and
# past the first about this many bytes: memory stays bounded for any queue.
_SCAN_ITEMS = 256
_SCAN_BYTES = 1 << 20


@functools.lru_cache(maxsize=64)
def _splitter(size: int, n: int) -> struct.Struct:
    """A Struct that cuts n payloads of size bytes each out of one buffer
    in C (several times faster than slicing in a loop)."""
    return struct.Struct(f"{size}s" * n)


def _split(items: Any) -> tuple[list[int], list[bytes]]:
    """(ids, payloads) of a qs_items, which is then freed."""
    try:
        n = items.count
        if n == 0:
            return [], []
        same = items.same_size
        offs = _unpack(items.off, n + 1)
        data = _unpack(_cast(_char_p, items.data), offs[n]) if offs[n] else b""
        ids = _unpack(items.ids, n)
    finally:
        _qs_items_free(items)
    if n == 1:
        return ids, [data]
    if same != _MIXED:
        return ids, list(_splitter(same, n).unpack(data))
    return ids, [data[a:b] for a, b in pairwise(offs)]


def _codec_name(codec: Codec[Any]) -> str:
    name = getattr(codec, "name", None)
    return name if isinstance(name, str) else repr(codec)


def _decode_all(queue: "Queue[T]", codec: Codec[T], ids: list[int], payloads: list[bytes]) -> list[T]:
    """Every payload decoded; DecodeError naming the first that fails."""
    out: list[T] = []
    if type(codec) is _Pickle:
        try:
            _Pickle.decode_into(payloads, out)
            return out
        except Exception:
            pass        # the loop below names the payload, going on from it
    decode = codec.decode
    for i in range(len(out), len(payloads)):
        p = payloads[i]
        try:
            out.append(decode(p))
        except Exception as e:
            raise DecodeError(
                f"queue {queue.name!r}: item {ids[i]} does not decode with codec "
                f"{_codec_name(codec)}: {type(e).__name__}: {e}; it was not consumed",
                queue.name, ids[i], p) from e
    return out


def _count_arg(n: Any) -> int:
    """A batch size: an int >= 0 (TypeError for "3", 2.0 or True)."""
    if isinstance(n, bool):
        raise TypeError("n must be an int, not bool")
    try:
        n = operator.index(n)     # an int, or an integer type such as numpy's
    except TypeError:
        raise TypeError(f"n must be an int, not {type(n).__name__}") from None
    if n < 0:
        raise ValueError("n must be >= 0")
    i: int = n
    return i


def seconds_arg(x: Any, what: str) -> float:
    """A number of seconds as a float; TypeError naming the argument for
    anything that is not a real number (a str, None, a bool)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds, not {type(x).__name__}")
    return float(x)


MAX_PRIORITY = 9


def _delay_arg(delay: Any) -> float:
    """A delay in seconds: None or a finite number >= 0 (TypeError for a
    str or a bool, ValueError for a negative, NaN or infinite one)."""
    if delay is None:
        return 0.0
    d = seconds_arg(delay, "delay")
    if not 0 <= d < float("inf"):
        raise ValueError(f"delay must be a finite number of seconds >= 0, not {delay!r}")
    return d


def _priority_arg(priority: Any) -> int:
    """A priority: None (0) or an int 0..9 (TypeError for 1.0, "1" or
    True)."""
    if priority is None:
        return 0
    if isinstance(priority, bool):
        raise TypeError("priority must be an int 0..9, not bool")
    try:
        p = operator.index(priority)
    except TypeError:
        raise TypeError(f"priority must be an int 0..9, not {type(priority).__name__}") from None
    if not 0 <= p <= MAX_PRIORITY:
        raise ValueError(f"priority must be 0..{MAX_PRIORITY}, not {p}")
    i: int = p
    return i


# qs_queue_put_keyed's length of an item without a key (QS_NO_KEY: a
# #define, which cffi's cdef does not see)
_NO_KEY = 0xFFFFFFFF
MAX_DEDUP_KEY = lib.QS_MAX_DEDUP_KEY


def _key_arg(key: Any) -> Optional[bytes]:
    """A dedup key: None or bytes of 1..MAX_DEDUP_KEY (TypeError for a str
    or anything else, ValueError for an empty or too long one)."""
    if key is None:
        return None
    if type(key) is not bytes:
        raise TypeError(f"key must be bytes, not {type(key).__name__}")
    if not 0 < len(key) <= MAX_DEDUP_KEY:
        raise ValueError(f"key must be 1..{MAX_DEDUP_KEY} bytes, not {len(key)}")
    return key


def _keys_arg(keys: Any, n: int) -> list[Optional[bytes]]:
    """put_many's keys: an iterable of n keys (each as _key_arg)."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"keys must be an iterable of keys (bytes or None), not one "
                        f"{type(keys).__name__}")
    try:
        out = [_key_arg(k) for k in keys]
    except TypeError as e:
        if "key must be" in str(e):
            raise
        raise TypeError(f"keys must be an iterable of keys, not {type(keys).__name__}") from None
    if len(out) != n:
        raise ValueError(f"keys has {len(out)} keys for {n} payloads")
    return out


def _timeout_arg(block: bool, timeout: Optional[float]) -> float:
    if not block:
        return 0.0
    if timeout is None:
        return -1.0
    t = seconds_arg(timeout, "timeout")
    if not t >= 0:
        raise ValueError("timeout must be a non-negative number or None")
    return t


class Item(Generic[T]):
    """A reserved item (see :meth:`Queue.reserve`): ``id``, ``payload``,
    :meth:`ack`, :meth:`release` and :meth:`fail`; ``deliveries`` and
    ``reason`` tell its history.  The reservation is this object's: an
    ack or release through another Item (or after the lease ran out) never
    touches another consumer's reservation."""

    __slots__ = ("queue", "id", "payload", "_token")

    def __init__(self, queue: "Queue[T]", id: int, payload: T, token: int) -> None:
        self.queue = queue
        self.id = id
        self.payload = payload
        self._token = token

    def ack(self) -> None:
        """Remove the item for good (in the calling thread's transaction, if
        any).  NotReservedError when the reservation is over."""
        q = self.queue
        rc = lib.qs_queue_ack(q._c, q._key, q._klen, self.id, self._token)
        if rc:
            raise error_for(rc, "ack", q._casket.path, queue=q.name, handle=q._c)

    def release(self, delay: Optional[float] = None) -> None:
        """Give the item back: it is available again at its place at the
        front of the queue -- at once, or after ``delay`` seconds (nack with
        delay: until then it is a delayed item, see :meth:`Queue.put`).
        NotReservedError when the reservation is over; TypeError or
        ValueError for a delay that is not a finite number >= 0 (nothing
        released)."""
        q = self.queue
        d = _delay_arg(delay)
        if d:
            rc = lib.qs_queue_release_delay(q._c, q._key, q._klen, self.id, self._token, d)
        else:
            rc = lib.qs_queue_release(q._c, q._key, q._klen, self.id, self._token)
        if rc:
            raise error_for(rc, "release", q._casket.path, queue=q.name, handle=q._c)

    def fail(self, reason: Union[str, bytes] = "") -> None:
        """Release the item, recording why it failed (str as UTF-8, or
        bytes; up to 1024 bytes): kept with its delivery count, and read as
        ``reason`` by whoever gets it next, in a dead-letter queue too.
        NotReservedError when the reservation is over."""
        if isinstance(reason, str):
            r = reason.encode("utf-8")
        elif isinstance(reason, (bytes, bytearray)):
            r = bytes(reason)
        else:
            raise TypeError(f"reason must be str or bytes, not {type(reason).__name__}")
        if len(r) > 1024:
            raise ValueError(f"reason is {len(r)} bytes long; the limit is 1024")
        q = self.queue
        rc = lib.qs_queue_fail(q._c, q._key, q._klen, self.id, self._token, r, len(r))
        if rc:
            raise error_for(rc, "fail", q._casket.path, queue=q.name, handle=q._c)

    def _info(self) -> tuple[int, Optional[str]]:
        q = self.queue
        n = _new("uint32_t *")
        rp = _new("void **")
        rl = _new("size_t *")
        rc = lib.qs_queue_item_info(q._c, q._key, q._klen, self.id, n, rp, rl)
        if rc:
            raise error_for(rc, "item info", q._casket.path, queue=q.name, handle=q._c)
        reason = None
        if rp[0] != ffi.NULL:
            try:
                reason = ffi.unpack(ffi.cast("char *", rp[0]), rl[0]).decode("utf-8", "replace")
            finally:
                lib.qs_free(rp[0])
        return int(n[0]), reason

    @property
    def deliveries(self) -> int:
        """How many times the item was reserved, this reserve included
        (counted durably by each reserve; read from the casket while the
        item is in its queue: NotFoundError after an ack)."""
        return self._info()[0]

    @property
    def reason(self) -> Optional[str]:
        """The reason its last holder gave to :meth:`fail` (None when
        none, or an empty one, was given), as :attr:`deliveries` reads it."""
        return self._info()[1]

    def __enter__(self) -> "Item[T]":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        """Ack when the block succeeds, release when it raises."""
        if exc_type is None:
            self.ack()
        else:
            self.release()

    def __repr__(self) -> str:
        return f"<pyqstore.Item {self.queue.name!r} id={self.id}>"


class Queue(Generic[T]):
    """A named FIFO queue in a casket.  Create with ``casket.queue(name)``.

    A ``Queue[T]`` hands out items of type T: ``Queue[bytes]`` without a
    codec (it takes any bytes-like payload or str), ``Queue[Any]`` with a
    codec named by a string, ``Queue[T]`` with a ``Codec[T]`` object.

    Items come out in the order they were put.  Operations inside
    ``casket.transaction()`` are part of it; outside, each call commits on
    its own (durably when the casket was opened with ``sync=True``).
    """

    # _c is the casket's C handle: the handle lives as long as the Casket
    # object, which this queue keeps alive; after close() calls on it fail
    # cleanly with ClosedError.
    # _q names the queue once for qs_queue_put_id (fewer arguments per put:
    # each costs ~25 ns in a cffi call); it holds nothing of the casket.
    __slots__ = ("_casket", "_c", "_caddr", "_q", "_qaddr", "_key", "_klen", "_codec", "name")

    def __init__(self, casket: "Casket", name: str,
                 codec: Union[None, CodecName, Codec[T]] = None) -> None:
        self._key = queue_name(name)
        self.name = name
        self._casket = casket
        self._c = casket._c
        self._caddr = casket._addr      # self._c's address, for _take
        self._klen = len(self._key)
        self._codec = resolve_codec(codec)
        out = _new("qs_queue **")
        rc = lib.qs_queue_new(self._c, self._key, self._klen, out)
        if rc:
            self._raise(rc, "queue")
        self._q = ffi.gc(out[0], lib.qs_queue_free)
        self._qaddr = int(ffi.cast("uintptr_t", out[0]))     # for _append

    def __repr__(self) -> str:
        return f"<pyqstore.Queue {self.name!r} of {self._casket.path!r}>"

    def _raise(self, rc: int, op: str) -> NoReturn:
        raise self._error(rc, op)

    def _error(self, rc: int, op: str) -> Exception:
        return error_for(rc, op, self._casket.path, queue=self.name, handle=self._c)

    # ------------------------------------------------------------------ put

    @overload
    def put(self: "Queue[bytes]", payload: BytesLike, block: bool = True,
            timeout: Optional[float] = None, delay: Optional[float] = None,
            priority: Optional[int] = None, key: Optional[bytes] = None) -> int: ...

    @overload
    def put(self, payload: T, block: bool = True, timeout: Optional[float] = None,
            delay: Optional[float] = None, priority: Optional[int] = None,
            key: Optional[bytes] = None) -> int: ...

    def put(self, payload: Any, block: bool = True, timeout: Optional[float] = None,
            delay: Optional[float] = None, priority: Optional[int] = None,
            key: Optional[bytes] = None) -> int:
        """Append one item; returns its id.

        On a bounded queue (``casket.queue(name, maxsize=N)``) holding N
        items, wait up to timeout seconds (None: no limit) for a consumer in
        any process to make room, or with block false not at all; raise
        :class:`pyqstore.Full` (also a :class:`queue.Full`) when there is
        none.  Inside a transaction it never waits.

        ``priority`` (an int 0..9; None, the default, is 0): get, reserve
        and peek take the highest first, oldest first within one.
        ``delay`` (seconds; None or 0: none): the item stays invisible to
        get, reserve and peek until then (it counts in ``len()`` and
        :meth:`delayed`), then is available at its id.  The due time is
        stored as a wall-clock time, so it holds across processes and
        reopening.  TypeError or ValueError name a bad one; nothing is
        stored.  A put with a delay or a priority waits for room (block,
        timeout) like any other.

        ``key`` (bytes, 1..512 of them; None: none) makes the put
        idempotent (JetStream's Nats-Msg-Id): when an item put with the same
        key is still in the queue (available, reserved, delayed, of any
        priority), or was put less than the queue's ``dedup_window``
        seconds ago (``casket.queue(name, dedup_window=s)``), nothing is
        stored and the first item's id is returned.  The key goes with its
        item: once the item has left the queue (taken, acked, cleared or
        dead-lettered) and the window has passed, the key may be used
        again.  It is part of the transaction, across processes, and
        durable like the item.  TypeError for a key that is not bytes,
        ValueError for an empty or too long one.  A keyed put waits for
        room like any other (a duplicate needs none)."""
        if delay is not None or priority is not None or key is not None:
            if key is not None:
                return self._put_keyed_wait(payload, key, delay, priority, block, timeout)
            d = _delay_arg(delay)
            p = _priority_arg(priority)
            t = _timeout_arg(block, timeout)
            c = self._codec
            return self._put_wait(_raw_payload(payload) if c is None else _encoded(c, payload),
                                  t, d, p)
        # Each bytecode here costs every put (bench/callgrind_check.py): the
        # parameters are positional-or-keyword because keyword-only ones
        # with defaults took 12% more instructions per put (no specialized
        # call), and payload is rebound rather than copied to a new name.
        if self._codec is not None:
            payload = _encoded(self._codec, payload)
        elif type(payload) is not bytes:
            payload = _raw_payload(payload)
        # _append (see _heldcalls.c) keeps the GIL where the put waits for
        # nobody (inside this thread's transaction, or committed alone with
        # sync off and the write lock free), and elsewhere releases it once
        # for the put; without the extension, the cffi call.
        r: int = _qs_put_id(self._q, payload, len(payload)) if _append is None \
            else _append(self._qaddr, payload)
        if r < 0:
            if r == _QFULL:
                return self._put_wait(payload, _timeout_arg(block, timeout))
            self._raise(r if r < _ERRNO_FLOOR else -r, "put")
        return r

    def _put_wait(self, b: bytes, timeout: float, delay: float = 0.0, priority: int = 0) -> int:
        # The queue was full (or the item has a delay or a priority): put,
        # waiting for room in C (the futex word), through signals as get
        # does.
        r: int = lib.qs_queue_put_order_wait(self._q, b, len(b), delay, priority, timeout)
        while r == _INTR:
            r = lib.qs_queue_put_order_wait(self._q, b, len(b), delay, priority, _wait_left())
        if r < 0:
            if r == _QFULL:
                raise Full(f"queue {self.name!r} is full ({self.config().maxsize} items)")
            self._raise(r if r < _ERRNO_FLOOR else -r, "put")
        return r

    def put_nowait(self, payload: Any, key: Optional[bytes] = None) -> int:
        """``put(payload, block=False, key=key)``."""
        if key is not None:
            return self.put(payload, False, None, None, None, key)
        return self.put(payload, False)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait until the queue holds no item, none available and none
        reserved, whoever consumes them, in any process (the standard
        library's ``join()``, with the items' acks as ``task_done()``).
        True when it is empty, False when timeout seconds (None: no limit)
        passed first.  Inside a transaction it does not wait."""
        t = _timeout_arg(True, timeout)
        rc = lib.qs_queue_join(self._c, self._key, self._klen, t)
        while rc == _INTR:
            rc = lib.qs_queue_join(self._c, self._key, self._klen, _wait_left())
        if rc == lib.QS_TIMEDOUT:
            return False
        if rc:
            self._raise(rc, "join")
        return True

    def wait_for_room(self, n: int = 1, timeout: Optional[float] = None) -> bool:
        """Wait until a put of n items would find room in this bounded queue
        (its maxsize counts reserved and delayed items), whoever consumes
        them, in any process; at once for an unbounded queue.  True when
        there is room, False when timeout seconds (None: no limit) passed
        first.  Nothing is put or held, so another producer may take the
        room first: for a producer whose put runs in a transaction, which
        never waits (it aborts on Full, waits here, and tries again).
        Inside a transaction it does not wait.  ValueError for n < 1 or
        more than the maxsize (they could never fit)."""
        n = _count_arg(n)
        if n < 1:
            raise ValueError("n must be >= 1")
        t = _timeout_arg(True, timeout)
        rc = lib.qs_queue_wait_room(self._c, self._key, self._klen, n, t)
        while rc == _INTR:
            rc = lib.qs_queue_wait_room(self._c, self._key, self._klen, n, _wait_left())
        if rc == lib.QS_TIMEDOUT:
            return False
        if rc == lib.QS_INVAL:
            raise ValueError(f"queue {self.name!r} holds at most {self.config().maxsize} items: "
                             f"room for {n} never comes")
        if rc:
            self._raise(rc, "wait_for_room")
        return True

    def config(self) -> "QueueConfig":
        """The queue's stored policy (see ``casket.queue``), as the calling
        thread's view has it."""
        return config_get(self)

    @property
    def maxsize(self) -> int:
        """The stored bound (0: none), as :meth:`config` has it."""
        return config_get(self).maxsize

    @overload
    def put_many(self: "Queue[bytes]", payloads: Iterable[BytesLike], *,
                 delay: Optional[float] = None, priority: Optional[int] = None,
                 keys: Optional[Iterable[Optional[bytes]]] = None) -> int: ...

    @overload
    def put_many(self, payloads: Iterable[T], *, delay: Optional[float] = None,
                 priority: Optional[int] = None,
                 keys: Optional[Iterable[Optional[bytes]]] = None) -> int: ...

    def put_many(self, payloads: Iterable[Any], *, delay: Optional[float] = None,
                 priority: Optional[int] = None,
                 keys: Optional[Iterable[Optional[bytes]]] = None) -> int:
        """Append every payload of the iterable in one call (one transaction
        unless inside the caller's); returns how many were stored.
        ``delay`` and ``priority`` as :meth:`put`, for every item.  ``keys``:
        one dedup key per payload (None for an item without one), as
        :meth:`put`'s ``key``; an item whose key is a duplicate, also of an
        earlier item of the same batch, is not stored (so fewer than given
        may be stored).  On a bounded queue without room for all of them it
        stores none and raises :class:`pyqstore.Full` (it never waits)."""
        if isinstance(payloads, (str, bytes, bytearray, memoryview)):
            # iterating would store one item per character (or per int)
            raise TypeError(f"put_many takes an iterable of payloads, not one "
                            f"{type(payloads).__name__}: use put(x) or put_many([x])")
        if keys is not None:
            items = list(payloads)
            return self._put_keyed(items, keys, delay, priority, "put_many")[1]
        if delay is not None or priority is not None:
            items = list(payloads)
            self._put_order(items, delay, priority, "put_many")
            return len(items)
        codec = self._codec
        if codec is not None:
            items = _encoded_all(codec, payloads)
        elif isinstance(payloads, list):
            items = payloads
        else:
            items = list(payloads)
        return self._put_many_encoded(items)

    def _encode_many(self, payloads: Iterable[T]) -> list[Any]:
        """The payloads as put_many stores them, for _put_many_encoded: the
        flow's firing encodes before its transaction begins, so that the
        casket's write lock, which other processes wait for, is not held
        while Python encodes."""
        codec = self._codec
        if codec is None:
            return list(payloads)
        return _encoded_all(codec, payloads)

    def _put_many_encoded(self, items: list[Any]) -> int:
        n = len(items)
        if n == 0:
            return 0
        k = self._key
        framed = _framed(items)
        if framed is not None:
            rc = _qs_put_framed(self._c, k, self._klen, n, ffi.from_buffer(framed) + _LIST_HDR,
                                len(framed) - _LIST_HDR, ffi.NULL)
            if rc != _INVAL:
                if rc:
                    self._raise_put_many(rc, n)
                return n
        # Not all bytes-like: str, or a bad item (raises TypeError naming it).
        data, lens = _pack([_raw_payload(p) for p in items])
        rc = lib.qs_queue_put_many(self._c, k, self._klen, n, data, len(data),
                                   ffi.from_buffer("uint32_t[]", lens), ffi.NULL)
        if rc:
            self._raise_put_many(rc, n)
        return n

    def _stored(self, items: list[Any]) -> list[bytes]:
        """Items as the queue stores them: encoded with its codec, or as
        plain bytes (TypeError naming a payload that is neither)."""
        codec = self._codec
        if codec is None:
            return [_raw_payload(x) for x in items]
        return _encoded_all(codec, items)

    def _put_order(self, items: list[Any], delay: Any, priority: Any, op: str) -> int:
        """Stores items (encoded here) with a delay and a priority
        (qs_queue_put_order); the first id, or 0 for none."""
        d = _delay_arg(delay)
        p = _priority_arg(priority)
        if not items:
            return 0
        data, lens = _pack(self._stored(items))
        out = _new("uint64_t *")
        rc = lib.qs_queue_put_order(self._c, self._key, self._klen, len(items), data,
                                    len(data), ffi.from_buffer("uint32_t[]", lens), d, p, out)
        if rc:
            self._raise(rc, op)
        return int(out[0])

    def _put_keyed_wait(self, payload: Any, key: Any, delay: Any, priority: Any, block: bool,
                        timeout: Optional[float]) -> int:
        """put with a key: qs_queue_put_keyed never waits, so on Full
        (outside a transaction, blocking) wait for room on the queue's
        wake-up word (qs_queue_wait_room) and try again: another producer
        may have taken the room, or stored the key meanwhile."""
        t = _timeout_arg(block, timeout)
        end = None if t < 0 else time.monotonic() + t
        while True:
            try:
                return self._put_keyed([payload], [key], delay, priority, "put")[0][0]
            except Full:
                left = -1.0 if end is None else end - time.monotonic()
                if t == 0 or (end is not None and left <= 0) or lib.qs_in_transaction(self._c):
                    raise
            rc = lib.qs_queue_wait_room(self._c, self._key, self._klen, 1, left)
            while rc == _INTR:
                rc = lib.qs_queue_wait_room(self._c, self._key, self._klen, 1, _wait_left())
            if rc and rc != lib.QS_TIMEDOUT:
                self._raise(rc, "put")

    def _put_keyed(self, items: list[Any], keys: Iterable[Optional[bytes]], delay: Any,
                   priority: Any, op: str) -> tuple[list[int], int]:
        """Stores items (encoded here) with their dedup keys
        (qs_queue_put_keyed): (each item's id, the first item's for a
        duplicate; how many were stored)."""
        d = _delay_arg(delay)
        p = _priority_arg(priority)
        klist = _keys_arg(keys, len(items))
        if not items:
            return [], 0
        data, lens = _pack(self._stored(items))
        klens = array("I", [_NO_KEY if k is None else len(k) for k in klist])
        n = len(items)
        ids = _new("uint64_t[]", n)
        stored = _new("size_t *")
        rc = lib.qs_queue_put_keyed(self._c, self._key, self._klen, n, data, len(data),
                                    ffi.from_buffer("uint32_t[]", lens),
                                    b"".join(k for k in klist if k is not None),
                                    sum(len(k) for k in klist if k is not None),
                                    ffi.from_buffer("uint32_t[]", klens), d, p, ids, stored)
        if rc:
            if rc == _QFULL and op == "put_many":
                self._raise_put_many(rc, n)
            if rc == _QFULL:
                raise Full(f"queue {self.name!r} is full ({self.config().maxsize} items)")
            self._raise(rc, op)
        return list(ids), int(stored[0])

    def delayed(self) -> int:
        """How many of the queue's items are delayed (put or released with
        a delay whose time has not come, or come but not yet moved into
        the queue by a get or reserve).  They are counted by ``len()``
        too."""
        return self._count_call(lib.qs_queue_delayed, "delayed")

    def _raise_put_many(self, rc: int, n: int) -> NoReturn:
        if rc == _QFULL:
            raise Full(f"queue {self.name!r} has no room for {n} more items "
                       f"(maxsize {self.config().maxsize}); none was put")
        self._raise(rc, "put_many")

    # ------------------------------------------------------------------ get

    def _get(self, n: int, timeout: float, op: str) -> list[T]:
        codec = self._codec
        if codec is not None:
            return self._get_decoded(codec, n, timeout, op)
        out = _new("qs_items **")
        k = self._key
        rc = _qs_get(self._c, k, self._klen, n, timeout, out)
        while rc == _INTR:  # the signal's handler ran as the call returned
            rc = _qs_get(self._c, k, self._klen, n, _wait_left(), out)
        if rc:
            if rc == _NOTFOUND:
                raise Empty(f"queue {self.name!r} is empty")
            self._raise(rc, op)
        _, payloads = _split(out[0])
        return payloads  # type: ignore[return-value]  # T is bytes without a codec

    def _get_decoded(self, codec: Codec[T], n: int, timeout: float, op: str) -> list[T]:
        # A payload must decode before its removal is committed, or a bad
        # one is lost.  So the batch is reserved (hidden from everyone,
        # nothing removed, inside a transaction as outside; counting no
        # delivery, as a plain get counts none), decoded, and acknowledged
        # in one call only when every item decoded; otherwise released,
        # back at its place, and DecodeError names the first bad item,
        # which alone counts that delivery, with the error as its reason:
        # with max_deliveries an item that never decodes goes to the
        # dead-letter queue instead of failing every get for ever.  A crash
        # in between ends the reservations: nothing is lost.
        out = _new("qs_items **")
        k = self._key
        rc = self._reserve_uncounted(n, timeout, out)
        if rc:
            if rc == _NOTFOUND:
                raise Empty(f"queue {self.name!r} is empty")
            self._raise(rc, op)
        token = out[0].token
        ids, payloads = _split(out[0])
        try:
            objs = _decode_all(self, codec, ids, payloads)
            rc = lib.qs_queue_ack_many(self._c, k, self._klen, len(ids),
                                       ffi.from_buffer("uint64_t[]", array("Q", ids)), token)
            if rc:
                self._raise(rc, op)
        except DecodeError as e:
            self._release(ids, token, e.id, str(e).encode("utf-8", "replace")[:1024])
            raise
        except BaseException:
            self._release(ids, token)
            raise
        return objs

    def _reserve_uncounted(self, n: int, timeout: float, out: Any) -> int:
        """qs_queue_reserve_uncounted of up to n items into out, waiting
        up to timeout seconds; its return code."""
        rc: int = lib.qs_queue_reserve_uncounted(self._c, self._key, self._klen, n, timeout, out)
        while rc == _INTR:  # as in _get: the handler ran and did not raise
            rc = lib.qs_queue_reserve_uncounted(self._c, self._key, self._klen, n, _wait_left(),
                                                out)
        return rc

    def _wait_for_item(self, timeout: Optional[float]) -> bool:
        """Wait until an item is available (at most timeout seconds, None:
        no limit); True when one is.  Nothing is taken and no delivery
        counted: the first item is reserved uncounted, which rewrites
        nothing (a counted reserve of a 50 KB batch record rewrote it whole,
        in a synced commit of its own), and released at once."""
        out = _new("qs_items **")
        rc = self._reserve_uncounted(1, _timeout_arg(True, timeout), out)
        if rc == _NOTFOUND:
            return False
        if rc:
            self._raise(rc, "wait")
        items = out[0]
        try:
            token, first = items.token, items.ids[0]   # its payload is not wanted
        finally:
            _qs_items_free(items)
        self._release([first], token)
        return True

    def _release(self, ids: list[int], token: int, bad: int = 0, reason: bytes = b"") -> None:
        # On the way out of a failed take; a release that fails too (the
        # casket was closed meanwhile) is not reported over the first
        # error: closing the handle ends its reservations anyway.  Item
        # `bad` (an uncounted reserve's item that did not decode) counts
        # its delivery.
        for i in ids:
            if i == bad:
                lib.qs_queue_fail_counted(self._c, self._key, self._klen, i, token, reason,
                                          len(reason))
            else:
                lib.qs_queue_release(self._c, self._key, self._klen, i, token)

    def _get_one(self, timeout: float) -> T:
        # get()'s own path: one item, no lists.  _take (see _heldcalls.c)
        # keeps the GIL where the get waits for nobody, and elsewhere is
        # qs_queue_get made with one release of it, giving bytes; without
        # the extension, the cffi call and a per-thread out-cell.
        codec = self._codec
        if codec is not None:
            return self._get_decoded(codec, 1, timeout, "get")[0]
        if _take is not None:
            r = _take(self._caddr, self._key, timeout)
            if type(r) is bytes:
                return r    # type: ignore[return-value]  # T is bytes without a codec
            # A signal ended the wait (QS_INTR) with nothing taken; Python
            # ran its handler as the call returned, and if that did not
            # raise, the wait goes on for the time it had left.
            while r == _INTR:
                r = _take(self._caddr, self._key, _wait_left())
                if type(r) is bytes:
                    return r    # type: ignore[return-value]
            if r == _NOTFOUND:
                raise Empty(f"queue {self.name!r} is empty")
            self._raise(int(r), "get")
        try:
            out = _tls.items
        except AttributeError:
            out = _tls.items = _new("qs_items **")
        rc = _qs_get(self._c, self._key, self._klen, 1, timeout, out)
        if rc:
            while rc == _INTR:      # as above
                rc = _qs_get(self._c, self._key, self._klen, 1, _wait_left(), out)
            if rc == _NOTFOUND:
                raise Empty(f"queue {self.name!r} is empty")
            if rc:
                self._raise(rc, "get")
        it = out[0]
        try:
            b: T = _buffer(it.data, it.off[1])[:]    # T is bytes without a codec
            return b
        finally:
            _qs_items_free(it)

    def get(self, block: bool = True, timeout: Optional[float] = None) -> T:
        """Remove and return the oldest available item.  With block (the
        default) wait up to timeout seconds (None: no limit) for one; raise
        :class:`pyqstore.Empty` when there is none.  Inside a transaction it
        never waits."""
        return self._get_one(_timeout_arg(block, timeout))

    def get_nowait(self) -> T:
        """``get(block=False)``."""
        return self._get_one(0.0)

    def get_many(self, n: int, block: bool = False, timeout: Optional[float] = None) -> list[T]:
        """Remove and return up to n items, oldest first, in one call.
        Without block an empty queue gives ``[]``; with block wait up to
        timeout for at least one item, then ``[]``."""
        if _count_arg(n) == 0:
            return []
        try:
            return self._get(n, _timeout_arg(block, timeout), "get_many")
        except Empty:
            return []

    def peek(self) -> Optional[T]:
        """The oldest available item without removing it, or None."""
        got = self.peek_many(1)
        return got[0] if got else None

    def peek_many(self, n: int) -> list[T]:
        """Up to n of the oldest available items, without removing them."""
        if _count_arg(n) == 0:
            return []
        out = _new("qs_items **")
        k = self._key
        rc = lib.qs_queue_peek(self._c, k, self._klen, n, out)
        if rc:
            if rc == _NOTFOUND:
                return []
            self._raise(rc, "peek")
        ids, payloads = _split(out[0])
        codec = self._codec
        if codec is not None:
            return _decode_all(self, codec, ids, payloads)
        return payloads  # type: ignore[return-value]  # T is bytes without a codec

    def iter(self, with_ids: bool = False) -> Iterator[Any]:
        """Iterate the queue's items in id order (oldest first) without
        consuming them: each payload (decoded by the queue's codec), or
        ``(id, payload)`` with ``with_ids=True``.

        Every item stored in the queue is yielded, reserved ones included: a
        reservation hides an item from other consumers but it is still in
        the queue (and back at the front after a crash), so a dump or a
        backup must hold it.  (:meth:`peek_many` and ``len()`` skip them.)
        Items of every priority and delayed ones are yielded too, all in id
        order (without their priority or due time: ``qstore dump`` writes
        them as plain items; ``Casket.backup`` keeps both).

        The items are read in batches (up to 256 items or about 1 MiB).  On a
        snapshot (``with casket.snapshot() as s: s.queue(name).iter()``) all
        batches see one commit.  Otherwise each batch reads the newest commit
        at that moment: items come in id order and never twice, every item
        that stays in the queue meanwhile is yielded, and items put or
        consumed during the iteration may or may not be.
        """
        if self._casket._closing:
            raise self._casket._closed_error()
        return self._iter(bool(with_ids))

    def _iter(self, with_ids: bool) -> Iterator[Any]:
        out = _new("qs_items **")
        k = self._key
        codec = self._codec
        after = 0
        while True:
            rc = lib.qs_queue_scan(self._c, k, self._klen, after, _SCAN_ITEMS, _SCAN_BYTES, out)
            if rc:
                self._raise(rc, "iter")
            ids, payloads = _split(out[0])
            if not ids:
                return
            after = ids[-1]
            if codec is not None:
                payloads = [codec.decode(p) for p in payloads]
            if with_ids:
                yield from zip(ids, payloads)
            else:
                yield from payloads

    # -------------------------------------------------------------- reserve

    @staticmethod
    def _lease_arg(lease: Any) -> float:
        lease_s = seconds_arg(lease, "lease")
        if not lease_s > 0:
            raise ValueError("lease must be a positive number of seconds or None")
        return lease_s

    def reserve(self, timeout: Optional[float] = None, lease: Optional[float] = None) -> Item[T]:
        """Reserve the oldest available item (waiting up to timeout seconds,
        None: no limit) and return it as an :class:`Item`.  Until acked or
        released it is hidden from every other consumer; it comes back at
        the front when its lease (seconds) runs out, when this casket handle
        is closed, or after a crash.  Raises Empty at the timeout."""
        t = _timeout_arg(True, timeout)
        lease_s = 0.0 if lease is None else self._lease_arg(lease)
        out = _new("qs_items **")
        k = self._key
        rc = lib.qs_queue_reserve(self._c, k, self._klen, t, lease_s, out)
        while rc == _INTR:  # the signal's handler ran as the call returned
            rc = lib.qs_queue_reserve(self._c, k, self._klen, _wait_left(), lease_s, out)
        if rc:
            if rc == _NOTFOUND:
                raise Empty(f"queue {self.name!r} is empty")
            self._raise(rc, "reserve")
        token = out[0].token
        ids, payloads = _split(out[0])
        codec = self._codec
        if codec is None:
            return Item(self, ids[0], payloads[0], token)  # type: ignore[arg-type]
        try:
            payload = _decode_all(self, codec, ids, payloads)[0]
        except BaseException:
            self._release(ids, token)
            raise
        return Item(self, ids[0], payload, token)

    # -------------------------------------------------------------- asyncio
    # Each waits without a thread: see pyqstore/_aio.py.  The take itself
    # is the non-blocking call (get_nowait, reserve(timeout=0)) made in the
    # loop's thread; like any write it may wait for the write lock while
    # another thread or process holds it (up to lock_timeout).

    async def get_async(self, timeout: Optional[float] = None) -> T:
        """``await q.get_async()``: :meth:`get` for asyncio.  Waits up to
        timeout seconds (None: no limit) for an item without blocking the
        event loop or taking a thread, then raises :class:`pyqstore.Empty`.
        Woken by a commit of any process; ClosedError when the casket is
        closed meanwhile.  Inside a transaction it never waits.
        Cancellation (``task.cancel()``, ``asyncio.wait_for``) leaves
        nothing behind and takes nothing."""
        t = None if timeout is None else _timeout_arg(True, timeout)
        return await _aio.wait_for_take(self, "get_async", self.get_nowait, (Empty,), t)

    async def reserve_async(self, timeout: Optional[float] = None,
                            lease: Optional[float] = None) -> Item[T]:
        """``await q.reserve_async()``: :meth:`reserve` for asyncio, waiting
        as :meth:`get_async` does."""
        t = None if timeout is None else _timeout_arg(True, timeout)
        if lease is not None:
            self._lease_arg(lease)      # a bad lease fails before any wait
        return await _aio.wait_for_take(self, "reserve_async", lambda: self.reserve(0, lease), (Empty,), t)

    @overload
    async def put_async(self: "Queue[bytes]", payload: BytesLike,
                        timeout: Optional[float] = None, key: Optional[bytes] = None) -> int: ...

    @overload
    async def put_async(self, payload: T, timeout: Optional[float] = None,
                        key: Optional[bytes] = None) -> int: ...

    async def put_async(self, payload: Any, timeout: Optional[float] = None,
                        key: Optional[bytes] = None) -> int:
        """``await q.put_async(payload)``: :meth:`put` for asyncio; returns
        the id.  On a bounded queue that is full it waits, as
        :meth:`get_async` does, for a commit that frees room (up to
        timeout seconds, then the queue's Full error); an unbounded queue
        never waits.  ``key``: a dedup key, as :meth:`put`'s (a duplicate
        returns the first item's id at once)."""
        t = None if timeout is None else _timeout_arg(True, timeout)
        if key is not None:
            _key_arg(key)   # a bad key raises here, not after a wait
        return await _aio.wait_for_take(self, "put_async",
                                        lambda: self.put_nowait(payload, key), (Full,), t)

    def __aiter__(self) -> AsyncIterator[T]:
        """``async for item in q``: :meth:`get_async` without a timeout,
        item after item; ends only by the caller (break, cancellation) or
        with ClosedError when the casket closes."""
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[T]:
        while True:
            yield await self.get_async()

    def reserve_many(self, n: int, timeout: Optional[float] = None,
                     lease: Optional[float] = None) -> "Batch[T]":
        """Reserve up to n (>= 1) of the oldest available items in one commit
        (or in the caller's transaction), under one reservation, waiting as
        :meth:`reserve` for the first; returns a :class:`Batch` (ack or
        release it whole, or its items one by one).  Raises Empty at the
        timeout; inside a transaction it never waits."""
        return _batch.reserve_many(self, n, timeout, lease)

    def ack_many(self, items: "Iterable[Item[T]]") -> None:
        """Acknowledge items of one batch (a :class:`Batch`, or some of its
        items) in one commit, all or none: NotReservedError when one is not
        reserved under that batch any more; ValueError for items of
        another queue or another batch, or an item given twice."""
        _batch.end_many(self, items, True)

    def release_many(self, items: "Iterable[Item[T]]") -> None:
        """Give items of one batch back in one call, all or none (errors as
        :meth:`ack_many`)."""
        _batch.end_many(self, items, False)

    def pending(self) -> "list[Pending]":
        """The reserved items of this queue, held by any handle in any
        process, in id order (Redis's XPENDING): a list of :class:`Pending`
        (id, holder's pid and handle, reserved at, lease end, idle seconds).
        Reservations made or ended by the caller's open transaction show
        once it commits."""
        return _batch.pending(self)

    def claim(self, min_idle: float, n: int = 1, lease: Optional[float] = None) -> "Batch[T]":
        """Take over up to n items whose reservation has been held for at
        least min_idle seconds, by any handle in any process (Redis's
        XAUTOCLAIM): returned as a :class:`Batch` reserved by this handle
        (empty when none qualifies), in one commit or in the caller's
        transaction.  From then on the former holder's ack or release of
        them raises NotReservedError.  Items of holders that died come back
        to the queue by themselves (within about 100 ms), not through a
        claim."""
        return _batch.claim(self, min_idle, n, lease)

    # ---------------------------------------------------------------- upkeep

    def _count_call(self, fn: Any, op: str) -> int:
        out = _new("uint64_t *")
        k = self._key
        rc = fn(self._c, k, self._klen, out)
        if rc:
            self._raise(rc, op)
        return int(out[0])

    def __len__(self) -> int:
        """Items available to get (reserved ones not counted, delayed ones
        counted: see :meth:`delayed`).  O(1)."""
        return self._count_call(lib.qs_queue_len, "len")

    def __bool__(self) -> bool:
        return True

    def clear(self) -> int:
        """Remove every available item (reserved ones stay with their
        consumers); returns how many were removed."""
        return self._count_call(lib.qs_queue_clear, "clear")


def list_queues(casket: "Casket") -> list[tuple[str, int]]:
    """(name, length) of every queue holding an item, in name order."""
    out = _new("qs_items **")
    rc = lib.qs_queue_list(casket._c, out)
    if rc:
        raise error_for(rc, "queues", casket.path, handle=casket._c)
    lens, names = _split(out[0])
    return [(n.decode("utf-8", "surrogateescape"), ln) for n, ln in zip(names, lens)]


def publish(casket: "Casket", payload: Any, names: Iterable[str],
            codec: Union[None, CodecName, Codec[Any]] = None) -> int:
    """See Casket.publish."""
    keys = [queue_name(n) for n in ([names] if isinstance(names, str) else names)]
    if not keys:
        raise ValueError("publish needs at least one queue name")
    if len(set(keys)) != len(keys):
        raise ValueError("publish: a queue name is given twice")
    cd = resolve_codec(codec)
    b = _raw_payload(payload) if cd is None else _encoded(cd, payload)
    offs = array("Q", [0])
    offs.extend(accumulate(map(len, keys)))
    out = _new("uint64_t *")
    rc = lib.qs_queue_publish(casket._c, len(keys), b"".join(keys),
                              ffi.from_buffer("uint64_t[]", offs), b, len(b), out)
    if rc:
        raise error_for(rc, "publish", casket.path, handle=casket._c)
    return int(out[0])
