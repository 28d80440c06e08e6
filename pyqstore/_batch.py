"""Batches of reservations and the pending list: :class:`Batch`,
:class:`Pending` and the Queue methods built on them (``reserve_many``,
``ack_many``, ``release_many``, ``pending``, ``claim``).

A batch is one C call to reserve (``qs_queue_reserve_many`` or
``qs_queue_claim``) and one to end (``qs_queue_ack_many`` or
``qs_queue_release_many``): one commit each, or part of the caller's
transaction.
"""
from __future__ import annotations

import math
import time
from array import array
from typing import TYPE_CHECKING, Any, Generic, Iterable, Iterator, NamedTuple, Optional, TypeVar

from ._qstore import ffi, lib
from .errors import Empty

if TYPE_CHECKING:
    from ._queue import Item, Queue

__all__ = ["Batch", "Pending"]

T = TypeVar("T")

_INTR = lib.QS_INTR
_NOTFOUND = lib.QS_NOTFOUND
_NOTRESERVED = lib.QS_NOTRESERVED


class Pending(NamedTuple):
    """One reserved item of a queue, as :meth:`Queue.pending` lists it
    (Redis's XPENDING).  Times are on the clock of :func:`time.monotonic`,
    which every process on the machine shares."""

    #: the item's id
    id: int
    #: the holder's process id
    pid: int
    #: the holder's casket handle (its slot in ``NAME-shm`` and the slot's
    #: generation: unique among the handles open on the casket meanwhile)
    handle: int
    #: True when the holder is the casket handle that listed it
    mine: bool
    #: when the reservation took effect for every handle (its commit)
    reserved_at: float
    #: when its lease ends, None for a reservation without a lease
    lease_ends: Optional[float]
    #: seconds since reserved_at, when the list was made
    idle: float
    #: reserves of the item so far, this one included (its record's count,
    #: read in the caller's view); None when the item is not in that view
    #: any more (acked by the caller's open transaction, or meanwhile)
    deliveries: Optional[int]


class Batch(Generic[T]):
    """Items reserved together under one reservation token, by
    :meth:`Queue.reserve_many` or :meth:`Queue.claim`.  Iterable (its
    :class:`Item` objects, in id order), ``len()``, indexable.

    :meth:`ack` removes every item of it, :meth:`release` gives every item
    back, each in one commit (or as part of the caller's transaction).  As
    a context manager it acks when the block succeeds and releases when it
    raises.  Items acked or released one by one (``item.ack()``) are left
    out of the batch's ack and release."""

    # The ids and payloads are kept as the reserve gave them; the Item
    # objects are made on first use: a firing reads only the payloads and
    # acks by ids, and making a thousand Items was 7 % of a flow's time.
    __slots__ = ("queue", "_ids", "_payloads", "_items", "_token")

    def __init__(self, queue: "Queue[T]", ids: list[int], payloads: list[T], token: int) -> None:
        self.queue = queue
        self._ids = ids
        self._payloads = payloads
        self._items: "Optional[list[Item[T]]]" = None
        self._token = token

    @property
    def items(self) -> "list[Item[T]]":
        got = self._items
        if got is None:
            from ._queue import Item

            q, token = self.queue, self._token
            got = self._items = [Item(q, i, p, token) for i, p in zip(self._ids, self._payloads)]
        return got

    @property
    def ids(self) -> list[int]:
        return list(self._ids)

    @property
    def payloads(self) -> list[T]:
        return list(self._payloads)

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> "Iterator[Item[T]]":
        return iter(self.items)

    def __getitem__(self, i: int) -> "Item[T]":
        return self.items[i]

    def __bool__(self) -> bool:
        return bool(self._ids)

    def ack(self) -> None:
        """Remove every item of the batch for good, in one commit (or in
        the calling thread's transaction).  NotReservedError, with nothing
        removed, when one of them is no longer reserved under this batch
        (acked or released already, its lease ran out, or another consumer
        claimed it)."""
        _end(self.queue, lib.qs_queue_ack_many, "ack", self._ids, self._token)

    def release(self) -> None:
        """Give every item of the batch back, in one call: they are
        available again at their places.  NotReservedError, with nothing
        released, as for :meth:`ack`."""
        _end(self.queue, lib.qs_queue_release_many, "release", self._ids, self._token)

    def __enter__(self) -> "Batch[T]":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is None:
            self.ack()
        else:
            self.release()

    def __repr__(self) -> str:
        return f"<pyqstore.Batch {self.queue.name!r} ids={self.ids}>"


def _end(queue: "Queue[Any]", fn: Any, op: str, item_ids: list[int], token: int) -> None:
    """One ack_many / release_many call for the items of these ids, all
    reserved under token."""
    if not item_ids:
        return
    ids = array("Q", item_ids)
    rc = fn(queue._c, queue._key, queue._klen, len(ids), ffi.from_buffer("uint64_t[]", ids), token)
    if rc:
        err = queue._error(rc, f"{op}_many")
        if rc == _NOTRESERVED:
            shown = list(ids) if len(ids) <= 10 else list(ids[:10]) + ["..."]
            err.args = (f"{err.args[0]}: one of items {shown}; nothing was done",)
        raise err


def _items_arg(queue: "Queue[Any]", items: "Iterable[Item[Any]]", op: str) -> "list[Item[Any]]":
    from ._queue import Item

    if isinstance(items, Batch):
        got = list(items.items)     # its Items, made now if not yet
    elif isinstance(items, Item):
        got = [items]
    else:
        got = list(items)
    seen: set[int] = set()
    for it in got:
        if not isinstance(it, Item):
            raise TypeError(f"{op}: takes Items (from reserve, reserve_many or claim), "
                            f"not {type(it).__name__}")
        if it.queue._key != queue._key or it.queue._c != queue._c:
            raise ValueError(f"{op}: item {it.id} belongs to queue {it.queue.name!r} "
                             f"of {it.queue._casket.path!r}, not to queue {queue.name!r} "
                             f"of {queue._casket.path!r}")
        if it.id in seen:
            raise ValueError(f"{op}: item {it.id} is given twice")
        seen.add(it.id)
    return sorted(got, key=lambda it: it.id)


def end_many(queue: "Queue[Any]", items: "Iterable[Item[Any]]", ack: bool) -> None:
    """Queue.ack_many / release_many: items of one batch (one reservation
    token: one C call, all or none)."""
    op = "ack_many" if ack else "release_many"
    got = _items_arg(queue, items, op)
    if not got:
        return
    token = got[0]._token
    for it in got:
        if it._token != token:
            raise ValueError(
                f"{op}: item {it.id} is of another batch than item {got[0].id}: one call "
                "ends the items of one reserve_many or claim (one reservation); call it "
                "once per batch")
    fn = lib.qs_queue_ack_many if ack else lib.qs_queue_release_many
    _end(queue, fn, op[:-5], [it.id for it in got], token)


def _lease_arg(lease: Optional[float]) -> float:
    from ._queue import seconds_arg

    if lease is None:
        return 0.0
    s = seconds_arg(lease, "lease")
    if not s > 0:
        raise ValueError(f"lease must be a positive number of seconds or None, not {lease!r}")
    return s


# a reservation not yet decoded: (token, ids, the payloads as stored)
Reserved = tuple[int, list[int], list[bytes]]


def _undecoded(out: Any) -> Reserved:
    """The reservation in a qs_items, which is freed."""
    from ._queue import _split

    token = out[0].token
    ids, raw = _split(out[0])
    return token, ids, raw


def decoded(queue: "Queue[T]", reserved: Reserved) -> "Batch[T]":
    """The Batch of a reservation.  DecodeError when a payload does not
    decode with the queue's codec, the batch released."""
    from ._queue import _decode_all

    token, ids, raw = reserved
    codec = queue._codec
    payloads: list[Any] = raw
    if codec is not None:
        try:
            payloads = _decode_all(queue, codec, ids, raw)
        except BaseException:
            queue._release(ids, token)
            raise
    return Batch(queue, ids, payloads, token)


def reserve_many(queue: "Queue[T]", n: int, timeout: Optional[float],
                 lease: Optional[float]) -> "Batch[T]":
    return decoded(queue, reserve_undecoded(queue, n, timeout, lease))


def reserve_undecoded(queue: "Queue[T]", n: int, timeout: Optional[float],
                      lease: Optional[float]) -> Reserved:
    """reserve_many's reservation as (token, ids, payloads), the payloads
    not yet decoded: decoded() makes the Batch.  It lets a caller reserve
    inside a transaction and decode after the commit, outside the
    casket's write lock (Python objects only: nothing to free)."""
    from ._queue import _count_arg, _timeout_arg

    if _count_arg(n) == 0:
        raise ValueError("reserve_many: n must be at least 1")
    t = _timeout_arg(True, timeout)
    lease_s = _lease_arg(lease)
    out = ffi.new("qs_items **")
    k = queue._key
    rc = lib.qs_queue_reserve_many(queue._c, k, queue._klen, n, t, lease_s, out)
    while rc == _INTR:  # the signal's handler ran as the call returned
        rc = lib.qs_queue_reserve_many(queue._c, k, queue._klen, n, lib.qs_queue_wait_left(),
                                       lease_s, out)
    if rc:
        if rc == _NOTFOUND:
            raise Empty(f"queue {queue.name!r} is empty")
        raise queue._error(rc, "reserve_many")
    return _undecoded(out)


def claim(queue: "Queue[T]", min_idle: float, n: int, lease: Optional[float]) -> "Batch[T]":
    from ._queue import _count_arg, seconds_arg

    idle = seconds_arg(min_idle, "min_idle")
    if math.isnan(idle) or idle < 0:
        raise ValueError(f"claim: min_idle must be a non-negative number of seconds, "
                         f"not {min_idle!r}")
    if _count_arg(n) == 0:
        raise ValueError("claim: n must be at least 1")
    lease_s = _lease_arg(lease)
    out = ffi.new("qs_items **")
    rc = lib.qs_queue_claim(queue._c, queue._key, queue._klen, n, idle, lease_s, out)
    if rc == _NOTFOUND:
        return Batch(queue, [], [], 0)
    if rc:
        raise queue._error(rc, "claim")
    return decoded(queue, _undecoded(out))


def pending(queue: "Queue[Any]") -> list[Pending]:
    out = ffi.new("qs_pending **")
    count = ffi.new("size_t *")
    rc = lib.qs_queue_pending(queue._c, queue._key, queue._klen, out, count)
    if rc:
        raise queue._error(rc, "pending")
    now = time.monotonic_ns()
    try:
        entries = [out[0][i] for i in range(count[0])]
        rows = [(e.id, e.pid, e.handle, bool(e.mine), e.reserved_ns * 1e-9,
                 e.lease_end_ns * 1e-9 if e.lease_end_ns else None,
                 max(now - e.reserved_ns, 0) * 1e-9) for e in entries]
    finally:
        lib.qs_free(out[0])
    n = ffi.new("uint32_t *")
    got = []
    for row in rows:
        # The count lives in the item's record (qdeliv.c), not in the
        # region's entry.  The list is of committed reservations, the
        # record is read in the caller's view: an item the caller's open
        # transaction acked (or another handle acked since the list was
        # copied) has none.
        rc = lib.qs_queue_item_info(queue._c, queue._key, queue._klen, row[0], n, ffi.NULL,
                                    ffi.NULL)
        if rc and rc != lib.QS_NOTFOUND:
            raise queue._error(rc, "pending")
        got.append(Pending(*row, None if rc else int(n[0])))
    return got
