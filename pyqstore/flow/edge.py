"""The exactly-once edge between two caskets: outbox, inbox, transfer.

The sender's :class:`Outbox` lives in the sender's casket and is filled in
the sender's firing transaction; each batch gets the next sequence number of
its (edge, sender), stored in that transaction.  :func:`transfer` offers the
oldest unsent batch to the receiver's :meth:`Inbox.accept` (a direct call or
a remote one) and removes it only once the receiver answered that it holds
it.  The receiver applies a batch in one transaction that also raises its
mark for (edge, sender), and only when the batch's sequence number is the
mark + 1.  docs/DESIGN.md ("Flow edges") argues why this is exactly once
across kills of either side.

Names (edge, sender) are non-empty str without NUL.  The records this module
keeps in a casket are prefixed ``flow/``: ``flow/seq/…`` (the last sequence
number an outbox assigned) and ``flow/mark/…`` (the last one an inbox
applied); the outbox's queues are ``flow/outbox/…`` (one item per batch) and
``flow/room/…`` (one token per free batch slot, so that a producer can wait
for room with a blocking reserve rather than by polling).
"""
from __future__ import annotations

import enum
import struct
import threading
import time
from typing import Callable, Iterable, Mapping, Optional, Union

from .. import Casket, Queue
from ..errors import (
    CorruptError,
    Empty,
    InvalidArgumentError,
    OutboxFull,
    TransactionError,
    UnknownEdge,
)
from ._records import read_counter, write_counter
from .owner import require_owner

__all__ = ["Verdict", "Outbox", "Inbox", "transfer", "Accept", "TRANSPORT_ERRORS"]

Payload = Union[bytes, bytearray, memoryview]

_HEAD = struct.Struct(">QI")  # a batch: seq, count, count lengths, the payloads
_LEN = struct.Struct(">I")
_TOKEN = b""


class Verdict(enum.Enum):
    """The receiver's answer to one batch."""

    #: Applied now: its payloads are in the input port, the mark raised.
    ACCEPTED = "accepted"
    #: Applied before (sequence <= mark); nothing changed.
    DUPLICATE = "duplicate"
    #: Early (sequence > mark + 1): refused, nothing stored; send it again
    #: after the batches before it.
    GAP = "gap"


#: The receiver's entry point as the sender calls it:
#: ``accept(edge, sender, seq, payloads) -> Verdict``.
Accept = Callable[[str, str, int, list[bytes]], Verdict]

#: What :func:`transfer` takes for a failed call that may succeed later
#: (a receiver that is down, restarting, or holds its write lock).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, TimeoutError)


def _name(x: object, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} must be str, not {type(x).__name__}")
    if not x or "\0" in x:
        raise ValueError(f"{what} must be a non-empty str without NUL, not {x!r}")
    return x


def _seq(x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"sequence number must be an int, not {type(x).__name__}")
    if x < 1:
        raise InvalidArgumentError(f"sequence number must be >= 1, not {x}")
    return x


def _payloads(batch: object) -> list[bytes]:
    if isinstance(batch, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"payloads must be an iterable of bytes, not one {type(batch).__name__}")
    if not isinstance(batch, Iterable):
        raise TypeError(f"payloads must be an iterable of bytes, not {type(batch).__name__}")
    out = []
    for i, p in enumerate(batch):
        if not isinstance(p, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload {i} must be bytes-like, not {type(p).__name__}")
        out.append(bytes(p))
    return out


def _key(prefix: bytes, edge: str, sender: str) -> bytes:
    # the edge's length first, so no pair of names can spell another's key
    e = edge.encode("utf-8")
    return prefix + b"%d:" % len(e) + e + b"/" + sender.encode("utf-8")


def _encode(seq: int, payloads: list[bytes]) -> bytes:
    parts = [_HEAD.pack(seq, len(payloads))]
    parts += [_LEN.pack(len(p)) for p in payloads]
    parts += payloads
    return b"".join(parts)


def _decode(raw: bytes, where: str) -> tuple[int, list[bytes]]:
    try:
        seq, n = _HEAD.unpack_from(raw)
        at = _HEAD.size + n * _LEN.size
        lens = [_LEN.unpack_from(raw, _HEAD.size + i * _LEN.size)[0] for i in range(n)]
    except struct.error:
        raise CorruptError(f"{where}: batch record of {len(raw)} bytes is cut short") from None
    payloads = []
    for length in lens:
        payloads.append(raw[at:at + length])
        at += length
    if at != len(raw):
        raise CorruptError(f"{where}: batch {seq} holds {len(raw)} bytes, its lengths say {at}")
    return seq, payloads


def _wait_for_item(queue: Queue[bytes], timeout: Optional[float]) -> bool:
    # reserve waits on the queue's futex word; the item stays where it is
    try:
        item = queue.reserve(timeout=timeout)
    except Empty:
        return False
    item.release()
    return True


class Outbox:
    """The unsent batches of one edge from one sending instance, in the
    sender's own casket, at most ``max_batches`` of them.

    :meth:`put` runs inside the sender's firing transaction; :meth:`next`,
    :meth:`wait` and :meth:`sent` are the transfer's (one thread, see
    :func:`transfer`).  Every call that writes, and :meth:`next`, first
    checks the casket's owner epoch: StaleOwner once another owner claimed
    the casket.
    """

    def __init__(self, casket: Casket, edge: str, sender: str, epoch: int,
                 max_batches: int = 64) -> None:
        """The outbox of (edge, sender) in casket, for the owner holding
        epoch (:func:`pyqstore.flow.claim`).  Making it sets the room to
        ``max_batches`` minus the batches it holds, in one transaction (a
        bound changed since the last run takes effect)."""
        self.edge = _name(edge, "edge")
        self.sender = _name(sender, "sender")
        if isinstance(max_batches, bool) or not isinstance(max_batches, int):
            raise TypeError(f"max_batches must be an int, not {type(max_batches).__name__}")
        if max_batches < 1:
            raise InvalidArgumentError(f"max_batches must be >= 1, not {max_batches}")
        self.max_batches = max_batches
        self.epoch = epoch
        self._casket = casket
        tail = _key(b"", edge, sender).decode("utf-8")
        self._seq_key = b"flow/seq/" + tail.encode("utf-8")
        self._batches = casket.queue("flow/outbox/" + tail)
        self._room = casket.queue("flow/room/" + tail)
        with casket.transaction():
            require_owner(casket, epoch)
            self._set_room(sum(1 for _ in self._batches.iter()))

    def _set_room(self, held: int) -> None:
        # Inside a transaction.  The room is the bound minus the batches
        # held, never below 0: a bound lowered below what the outbox holds
        # gives room back only once the batches fell under it.  iter()
        # counts reserved tokens too (a producer's wait_for_room holds one
        # for an instant; one killed meanwhile gives it back).
        tokens = sum(1 for _ in self._room.iter())
        want = max(0, self.max_batches - held)
        if tokens < want:
            self._room.put_many([_TOKEN] * (want - tokens))
        elif tokens > want:
            self._room.get_many(tokens - want)

    def __repr__(self) -> str:
        return f"<pyqstore.flow.Outbox {self.edge!r} from {self.sender!r} in {self._casket.path!r}>"

    def put(self, payloads: Iterable[Payload], txn: Casket) -> Optional[int]:
        """Add payloads as the next batch, inside txn, the transaction of
        the calling thread on the outbox's casket (``with casket.transaction()
        as txn``), so the batch commits or aborts with the firing that
        produced it.  Returns the batch's sequence number, or None for no
        payloads (no batch).  OutboxFull when the outbox holds
        ``max_batches`` (nothing written: abort, :meth:`wait_for_room`, fire
        again); StaleOwner; TypeError for a payload that is not bytes-like;
        TransactionError when txn is not such a transaction."""
        items = _payloads(payloads)
        casket = self._casket
        if txn is not casket or not casket.in_transaction:
            raise TransactionError(
                f"Outbox.put must run inside the calling thread's transaction on "
                f"{casket.path!r}, passed as txn; got {txn!r}")
        if not items:
            return None
        require_owner(casket, self.epoch)
        try:
            self._room.get_nowait()
        except Empty:
            raise OutboxFull(f"{self!r} holds {self.max_batches} unsent batches") from None
        seq = read_counter(casket, self._seq_key) + 1
        write_counter(casket, self._seq_key, seq)
        self._batches.put(_encode(seq, items))
        return seq

    def wait_for_room(self, timeout: Optional[float] = None) -> bool:
        """Wait (blocking, no polling) until the outbox has room for a batch
        or timeout seconds passed (None: no limit); True when there is room.
        Called outside a transaction, before the firing that puts: room only
        comes from :meth:`sent` in another thread or process."""
        if self._casket.in_transaction:
            raise TransactionError("wait_for_room inside a transaction would never see room")
        return _wait_for_item(self._room, timeout)

    def pending(self, limit: int) -> list[tuple[int, list[bytes]]]:
        """Up to limit unsent batches, oldest first, as (seq, payloads),
        without removing them.  StaleOwner once the casket has another
        owner (its batches are that owner's to send now)."""
        require_owner(self._casket, self.epoch)
        where = repr(self)
        return [_decode(raw, where) for raw in self._batches.peek_many(limit)]

    def next(self) -> Optional[tuple[int, list[bytes]]]:
        """The oldest unsent batch (seq, payloads) without removing it, or
        None when there is none."""
        got = self.pending(1)
        return got[0] if got else None

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait (blocking) until there is an unsent batch or timeout seconds
        passed (None: no limit); True when there is one."""
        return _wait_for_item(self._batches, timeout)

    def sent(self, seq: int) -> int:
        """The receiver holds every batch up to seq (it answered ACCEPTED or
        DUPLICATE for seq, and it applies batches only in order): remove
        them and give their room back, in one transaction.  Returns how many
        were removed (0 when they were gone already).  InvalidArgumentError
        for a seq this outbox never assigned; StaleOwner."""
        seq = _seq(seq)
        casket = self._casket
        removed = 0
        with casket.transaction():
            require_owner(casket, self.epoch)
            last = read_counter(casket, self._seq_key)
            if seq > last:
                raise InvalidArgumentError(
                    f"{self!r} assigned sequence numbers up to {last}, not {seq}")
            while True:
                heads = [_decode(raw, repr(self))[0]
                         for raw in self._batches.peek_many(self.max_batches)]
                done = sum(1 for s in heads if s <= seq)
                if done:
                    self._batches.get_many(done)
                    removed += done
                if done < len(heads) or not heads:
                    break
            if removed:
                # len() leaves out reserved batches, and only this thread's
                # wait() reserves one, for an instant, before it returns
                self._set_room(len(self._batches))
        return removed


class Inbox:
    """The receiving end of a node's edges, in the receiver's own casket:
    for each edge the input port (a queue) its batches go to, and per
    (edge, sender) the mark, the sequence number of the last batch applied.
    """

    def __init__(self, casket: Casket, epoch: int, ports: Mapping[str, str]) -> None:
        """An inbox in casket for the owner holding epoch; ports maps each
        edge received to the name of its input port's queue (several edges
        may feed one port)."""
        if not isinstance(ports, Mapping) or not ports:
            raise TypeError("ports must be a non-empty mapping of edge name -> queue name")
        self._casket = casket
        self.epoch = epoch
        self._ports = {_name(e, "edge"): casket.queue(_name(q, "port queue name"))
                       for e, q in ports.items()}

    def __repr__(self) -> str:
        return f"<pyqstore.flow.Inbox of {self._casket.path!r}>"

    def mark(self, edge: str, sender: str) -> int:
        """The sequence number of the last batch applied from sender on
        edge (0 before the first)."""
        return read_counter(self._casket, _key(b"flow/mark/", _name(edge, "edge"),
                                           _name(sender, "sender")))

    def accept(self, edge: str, sender: str, seq: int, payloads: Iterable[Payload]) -> Verdict:
        """Apply batch seq of sender on edge at most once, in one
        transaction: the payloads go to the edge's input port and the mark
        becomes seq when seq is the mark + 1 (ACCEPTED); a seq <= mark was
        applied before (DUPLICATE, nothing changes); a seq > mark + 1 comes
        before a batch still missing (GAP, nothing stored).  UnknownEdge for
        an edge this inbox does not receive; TypeError/InvalidArgumentError
        for a bad name, seq (< 1) or payload (not bytes-like, or none);
        StaleOwner once another owner claimed the casket."""
        port = self._ports.get(_name(edge, "edge"))
        if port is None:
            raise UnknownEdge(f"{self!r} receives no edge {edge!r} (it receives "
                              f"{', '.join(map(repr, sorted(self._ports)))})")
        key = _key(b"flow/mark/", edge, _name(sender, "sender"))
        seq = _seq(seq)
        items = _payloads(payloads)
        if not items:
            raise InvalidArgumentError(f"batch {seq} of {sender!r} on {edge!r} holds no payload")
        casket = self._casket
        with casket.transaction():
            require_owner(casket, self.epoch)
            mark = read_counter(casket, key)
            if seq != mark + 1:
                return Verdict.DUPLICATE if seq <= mark else Verdict.GAP
            port.put_many(items)
            write_counter(casket, key, seq)
        return Verdict.ACCEPTED


def transfer(outbox: Outbox, accept: Accept, *, wait: Optional[float] = 0.0,
             stop: Optional[threading.Event] = None,
             retry_on: tuple[type[BaseException], ...] = TRANSPORT_ERRORS,
             backoff: float = 0.01, max_backoff: float = 1.0) -> int:
    """Move the outbox's batches to the receiver, oldest first, one at a
    time: offer each to ``accept(edge, sender, seq, payloads)`` and remove it
    once the answer is ACCEPTED or DUPLICATE.  On GAP, or when accept raises
    one of retry_on (a transport error), offer it again after a pause that
    doubles from backoff up to max_backoff seconds; any other exception
    (StaleOwner, bad input) is raised.  When the outbox is empty, wait up to
    ``wait`` seconds (None: no limit) for a batch.  Returns the number of
    batches delivered, when the outbox stayed empty for ``wait`` or once
    stop is set.

    Only one transfer may run per outbox at a time (its removals assume the
    batches it offered are still at the front)."""
    delivered = 0
    pause = backoff
    while not (stop is not None and stop.is_set()):
        batch = outbox.next()
        if batch is None:
            if not outbox.wait(wait):
                return delivered
            continue
        seq, payloads = batch
        try:
            verdict: Optional[Verdict] = Verdict(accept(outbox.edge, outbox.sender, seq, payloads))
        except retry_on:
            verdict = None
        if verdict is Verdict.ACCEPTED or verdict is Verdict.DUPLICATE:
            outbox.sent(seq)
            delivered += 1
            pause = backoff
            continue
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)
        pause = min(pause * 2, max_backoff)
    return delivered
