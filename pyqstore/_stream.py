"""Streams with consumer groups: :class:`Stream`, :class:`Group`.

An append-only log whose items keep their ids, read by groups that each
see every item once (Redis Streams' XADD, XREADGROUP, XACK, XPENDING,
XAUTOCLAIM).  Every method is one call into the C core (csrc/stream.c);
see ``Casket.stream``.
"""
from __future__ import annotations

import os
import struct
import time
from array import array
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, NoReturn, Optional, Union

from ._qstore import ffi, lib
from ._queue import _count_arg, _pack, _raw_payload, _split, _timeout_arg, queue_name, seconds_arg
from .errors import NotPendingError, error_for

if TYPE_CHECKING:
    from ._casket import Casket

__all__ = ["Stream", "Group", "StreamItem", "StreamPending"]

_NOTFOUND = lib.QS_NOTFOUND
_INTR = lib.QS_INTR
_NOTPENDING = lib.QS_STREAM_NOTPENDING
_TRIMMED = lib.QS_STREAM_TRIMMED
_MAX_NAME = lib.QS_MAX_QUEUE_NAME
_PENDING_HDR = struct.Struct("=dI")     # qs_stream_pending's entry header


class StreamItem(NamedTuple):
    """One item of a stream: its id and its payload (bytes)."""

    id: int
    payload: bytes


class StreamPending(NamedTuple):
    """One pending entry of a group (``Group.pending``): the item's id,
    the consumer it was handed to, when (the stream's clock, seconds) and
    how many times it was delivered."""

    id: int
    consumer: str
    delivered_at: float
    deliveries: int


def _items(out: Any) -> list[StreamItem]:
    ids, payloads = _split(out)
    return [StreamItem(i, p) for i, p in zip(ids, payloads)]


def _batch(n: Any) -> int:
    """A read's batch size: an int >= 1."""
    k = _count_arg(n)
    if k < 1:
        raise ValueError("n must be >= 1")
    return k


class Stream:
    """An append-only log in a casket.  Create with ``casket.stream(name)``.

    Items keep their ids (unique in the casket, increasing in append
    order); reading never consumes.  Retention removes the oldest items:
    beyond ``maxlen``, older than ``max_age`` seconds at an append, and,
    once the stream has a group, those every group has acknowledged.
    Calls inside ``casket.transaction()`` are part of it; outside, each
    commits on its own (durably when the casket was opened with
    ``sync=True``).
    """

    __slots__ = ("_casket", "_c", "_key", "_klen", "name", "_clock")

    def __init__(self, casket: "Casket", name: str, maxlen: Optional[int] = None,
                 max_age: Optional[float] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._key = queue_name(name)
        self._klen = len(self._key)
        self.name = name
        self._casket = casket
        self._c = casket._c
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        self._clock = clock
        if maxlen is not None or max_age is not None:
            self.configure(maxlen, max_age)

    def __repr__(self) -> str:
        return f"<pyqstore.Stream {self.name!r} of {self._casket.path!r}>"

    def _raise(self, rc: int, op: str, detail: Optional[str] = None) -> NoReturn:
        raise error_for(rc, f"{op} stream {self.name!r} of", self._casket.path, detail,
                        handle=self._c)

    def _now(self) -> float:
        now = seconds_arg(self._clock(), "the clock's time")
        if not now >= 0 or now == float("inf"):
            raise ValueError(f"the clock gave {now!r}: it must be a finite time >= 0")
        return now

    def configure(self, maxlen: Optional[int] = None, max_age: Optional[float] = None) -> None:
        """Store both retention settings (in the casket: every process sees
        them; they replace the stored ones) and apply them now.  ``maxlen``: items at most (None or 0: no
        limit); ``max_age``: seconds an item is kept at most, checked at
        each append (None or 0: no limit)."""
        n = 0 if maxlen is None else _count_arg(maxlen)
        age = 0.0 if max_age is None else seconds_arg(max_age, "max_age")
        if not age >= 0 or age == float("inf"):
            raise ValueError("max_age must be a finite number of seconds >= 0 or None")
        rc = lib.qs_stream_configure(self._c, self._key, self._klen, n, age, self._now())
        if rc:
            self._raise(rc, "configure")

    def append(self, payload: Any) -> int:
        """Append one item (bytes-like, or str as UTF-8); returns its id."""
        return self._append([_raw_payload(payload)], "append")[0]

    def append_many(self, payloads: Iterable[Any]) -> list[int]:
        """Append every payload in one transaction; returns their ids."""
        if isinstance(payloads, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"append_many takes an iterable of payloads, not one "
                            f"{type(payloads).__name__}: use append(x) or append_many([x])")
        items = [_raw_payload(p) for p in payloads]
        return self._append(items, "append_many") if items else []

    def _append(self, items: list[bytes], op: str) -> list[int]:
        data, lens = _pack(items)
        first = ffi.new("uint64_t *")
        rc = lib.qs_stream_append(self._c, self._key, self._klen, len(items), data, len(data),
                                  ffi.from_buffer("uint32_t[]", lens), self._now(), first)
        if rc:
            self._raise(rc, op)
        return list(range(first[0], first[0] + len(items)))

    def read(self, start_id: int = 0, n: int = 100) -> list[StreamItem]:
        """Up to n items with ids >= start_id (0: from the oldest kept), in
        id order, without consuming them.  :class:`pyqstore.TrimmedError`
        when retention removed start_id: reading on would skip what was
        removed without a word."""
        start = _count_arg(start_id)
        out = ffi.new("qs_items **")
        rc = lib.qs_stream_read(self._c, self._key, self._klen, start, _batch(n), out)
        if rc == _TRIMMED:
            self._raise(rc, "read", f"id {start} was removed by retention (maxlen, max_age, or "
                        "acknowledged by every group); read from 0 for the oldest item kept")
        if rc:
            self._raise(rc, "read")
        return _items(out[0])

    def __len__(self) -> int:
        n = ffi.new("uint64_t *")
        rc = lib.qs_stream_len(self._c, self._key, self._klen, n)
        if rc:
            self._raise(rc, "len")
        return int(n[0])

    def group(self, name: str, start: Union[str, int] = "first") -> "Group":
        """The consumer group called name, created durably on first use:
        start "first" (every item the stream keeps), "last" (only items
        appended from now on) or an id (>= 1, from there on).  An existing
        group keeps its own position whatever start says."""
        return Group(self, name, start)


class Group:
    """A consumer group of a stream (``stream.group(name)``): hands every
    item of the stream once to one of its consumers; items read are
    pending until acknowledged."""

    __slots__ = ("stream", "name", "_key", "_klen")

    def __init__(self, stream: Stream, name: str, start: Union[str, int] = "first") -> None:
        self.stream = stream
        self.name = name
        if not isinstance(name, str):
            raise TypeError(f"group name must be str, not {type(name).__name__}")
        if not name:
            raise ValueError("group name must not be empty")
        self._key = name.encode("utf-8")
        self._klen = len(self._key)
        if self._klen > _MAX_NAME:
            raise ValueError(f"group name is {self._klen} bytes long; the limit is {_MAX_NAME}")
        if start == "first":
            kind, at = lib.QS_STREAM_FIRST, 0
        elif start == "last":
            kind, at = lib.QS_STREAM_LAST, 0
        elif isinstance(start, int) and not isinstance(start, bool):
            if start < 1:
                raise ValueError(f"start id must be >= 1, not {start}")
            kind, at = lib.QS_STREAM_AT, start
        else:
            raise ValueError(f"start must be 'first', 'last' or an id >= 1, not {start!r}")
        rc = lib.qs_stream_group(stream._c, stream._key, stream._klen, self._key, self._klen,
                                 kind, at)
        if rc == _TRIMMED:
            self._raise(rc, "create", f"start id {start} was removed from the stream by "
                        "retention: start from 'first' for the oldest item kept")
        if rc:
            self._raise(rc, "create")

    def __repr__(self) -> str:
        return f"<pyqstore.Group {self.name!r} of stream {self.stream.name!r}>"

    def _raise(self, rc: int, op: str, detail: Optional[str] = None) -> NoReturn:
        raise error_for(rc, f"{op} group {self.name!r} of stream {self.stream.name!r} of",
                        self.stream._casket.path, detail, handle=self.stream._c)

    @staticmethod
    def _consumer(consumer: Optional[str]) -> bytes:
        if consumer is None:
            return f"pid-{os.getpid()}".encode()
        if not isinstance(consumer, str):
            raise TypeError(f"consumer must be str, not {type(consumer).__name__}")
        if not consumer:
            raise ValueError("consumer name must not be empty")
        b = consumer.encode("utf-8")
        if len(b) > _MAX_NAME:
            raise ValueError(f"consumer name is {len(b)} bytes long; the limit is {_MAX_NAME}")
        return b

    def read(self, n: int = 1, consumer: Optional[str] = None, block: bool = False,
             timeout: Optional[float] = None) -> list[StreamItem]:
        """Up to n items this group has not had yet, handed to consumer
        (default: "pid-<process id>") and pending from now on, in the same
        transaction.  ``[]`` when there is nothing new; with block, wait up
        to timeout seconds (None: no limit) for an append of any process.
        Inside a transaction it never waits."""
        k = _batch(n)
        cons = self._consumer(consumer)
        wait = _timeout_arg(block, timeout)
        deadline = time.monotonic() + wait if wait > 0 else wait
        s = self.stream
        out = ffi.new("qs_items **")
        while True:
            rc = lib.qs_stream_read_group(s._c, s._key, s._klen, self._key, self._klen, cons,
                                          len(cons), k, wait, s._now(), out)
            if rc != _INTR:
                break
            # A signal's handler ran as the call returned and did not
            # raise: the wait goes on for the time it had left.
            if deadline > 0:
                wait = max(0.0, deadline - time.monotonic())
        if rc == _NOTFOUND:
            return []
        if rc:
            self._raise(rc, "read")
        return _items(out[0])

    def ack(self, ids: Union[int, Iterable[int]]) -> None:
        """Acknowledge items (an id or ids) the group read: their pending
        entries go, in one transaction.  :class:`pyqstore.NotPendingError`
        naming the id when one is not pending (never read by the group, or
        acknowledged already); then nothing is acknowledged."""
        id_list: list[int] = [ids] if isinstance(ids, int) else list(ids)
        if not id_list:
            return
        for i in id_list:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be ints, not {type(i).__name__}")
            if i < 1:
                raise ValueError(f"an id is >= 1, not {i}")
        arr = array("Q", id_list)
        bad = ffi.new("uint64_t *")
        s = self.stream
        rc = lib.qs_stream_ack(s._c, s._key, s._klen, self._key, self._klen, len(arr),
                               ffi.from_buffer("uint64_t[]", arr), bad)
        if rc == _NOTPENDING:
            try:
                self._raise(rc, "ack", f"id {bad[0]} is not pending in the group (never read "
                            "by it, or acknowledged already); nothing was acknowledged")
            except NotPendingError as e:
                e.id = int(bad[0])
                raise
        if rc:
            self._raise(rc, "ack")

    def pending(self) -> list[StreamPending]:
        """The group's pending entries, oldest id first (XPENDING)."""
        s = self.stream
        out = ffi.new("qs_items **")
        rc = lib.qs_stream_pending(s._c, s._key, s._klen, self._key, self._klen, out)
        if rc:
            self._raise(rc, "pending")
        ids, entries = _split(out[0])
        hdr = _PENDING_HDR.size
        return [StreamPending(i, e[hdr:].decode("utf-8", "replace"), *_PENDING_HDR.unpack_from(e))
                for i, e in zip(ids, entries)]

    def claim(self, min_idle: float, consumer: Optional[str] = None,
              n: int = 100) -> list[StreamItem]:
        """Hand consumer up to n pending items delivered at least min_idle
        seconds ago (XAUTOCLAIM): a consumer that died leaves its entries
        pending, and another takes them over here.  Each counts one more
        delivery.  An entry whose item retention removed is dropped."""
        idle = seconds_arg(min_idle, "min_idle")
        if not idle >= 0 or idle == float("inf"):
            raise ValueError("min_idle must be a finite number of seconds >= 0")
        cons = self._consumer(consumer)
        s = self.stream
        out = ffi.new("qs_items **")
        rc = lib.qs_stream_claim(s._c, s._key, s._klen, self._key, self._klen, cons, len(cons),
                                 idle, _batch(n), s._now(), out)
        if rc:
            self._raise(rc, "claim")
        return _items(out[0])
