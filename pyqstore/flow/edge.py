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
applied) and ``flow/end/…`` (the sequence number of a sender's end of
stream, once applied); the outbox is the bounded queue ``flow/outbox/…``
(one item per batch, maxsize the outbox's bound).
"""
from __future__ import annotations

import enum
import os
import struct
import threading
import time
from itertools import accumulate
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from .. import Casket, Queue
from ..errors import (
    CorruptError,
    Empty,
    Full,
    InvalidArgumentError,
    OutboxFull,
    TransactionError,
    UnknownEdge,
)
from ._records import read_counter, write_counter
from .owner import require_owner

__all__ = ["Verdict", "Outbox", "Inbox", "transfer", "Accept", "AcceptMany",
           "TRANSPORT_ERRORS", "ROOM_WAIT"]

Payload = Union[bytes, bytearray, memoryview]

_HEAD = struct.Struct(">QI")  # a batch: seq, count, count lengths, the payloads
_LEN = struct.Struct(">I")
_BYTES = frozenset([bytes])

#: How often a producer waiting for room looks again when the batches are
#: sent by another process: a transfer in the producer's own process wakes
#: it at once (:meth:`Outbox.sent` notifies), one elsewhere cannot, since a
#: queue has a futex word for its items but none for its room.
_ROOM_RECHECK = 0.05
_room_lock = threading.Lock()
_room_signals: dict[tuple[str, str], threading.Condition] = {}


def _room_signal(path: str, queue: str) -> threading.Condition:
    """The condition every Outbox of this process on one outbox queue
    shares: sent() notifies it, wait_for_room() waits on it."""
    with _room_lock:
        cond = _room_signals.get((path, queue))
        if cond is None:
            cond = _room_signals[(path, queue)] = threading.Condition()
        return cond


class Verdict(enum.Enum):
    """The receiver's answer to one batch."""

    #: Applied now: its payloads are in the input port, the mark raised.
    ACCEPTED = "accepted"
    #: Applied before (sequence <= mark); nothing changed.
    DUPLICATE = "duplicate"
    #: Early (sequence > mark + 1): refused, nothing stored; send it again
    #: after the batches before it.
    GAP = "gap"
    #: The input port (a bounded queue) has no room for the batch: refused,
    #: nothing stored; send it again once the receiver has consumed some.
    FULL = "full"


#: The receiver's entry point as the sender calls it:
#: ``accept(edge, sender, seq, payloads) -> Verdict``; payloads [] is the
#: sender's end of stream on that edge.
Accept = Callable[[str, str, int, list[bytes]], Verdict]

#: The same for several batches of one sender on one edge in one call:
#: ``accept_many(edge, sender, [(seq, payloads), ...]) -> [Verdict, ...]``,
#: a verdict for each batch in order up to the first GAP or FULL.
AcceptMany = Callable[[str, str, list[tuple[int, list[bytes]]]], list[Verdict]]

#: How long a runner's receiver gives a batch that does not fit in its
#: input port for the consumer to make room (Inbox.accept_many's wait),
#: before it answers FULL: woken by the consumer's commit, where the
#: sender, answered FULL, would look again only after its pause.
ROOM_WAIT = 0.2

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
    if type(batch) is list and set(map(type, batch)) <= _BYTES:
        # what firings and transports hand in: one pass in C, no copies
        return batch
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
    n = len(payloads)
    # the n lengths in one struct call: a batch is a thousand payloads
    return b"".join([_HEAD.pack(seq, n), struct.pack(">%dI" % n, *map(len, payloads)),
                     *payloads])


def _seq_of(raw: bytes, where: str) -> int:
    """The sequence number of a batch record, without its payloads."""
    try:
        seq: int = _HEAD.unpack_from(raw)[0]
    except struct.error:
        raise CorruptError(f"{where}: batch record of {len(raw)} bytes is cut short") from None
    return seq


def _decode(raw: bytes, where: str) -> tuple[int, list[bytes]]:
    try:
        seq, n = _HEAD.unpack_from(raw)
        lens = struct.unpack_from(">%dI" % n, raw, _HEAD.size)
    except struct.error:
        raise CorruptError(f"{where}: batch record of {len(raw)} bytes is cut short") from None
    ends = list(accumulate(lens, initial=_HEAD.size + n * _LEN.size))
    if ends[-1] != len(raw):
        raise CorruptError(f"{where}: batch {seq} holds {len(raw)} bytes, its lengths say "
                           f"{ends[-1]}")
    return seq, list(map(raw.__getitem__, map(slice, ends, ends[1:])))


def outbox_queue(edge: str, sender: str) -> str:
    """The name of the queue that holds the outbox of (edge, sender)."""
    return "flow/outbox/" + _key(b"", edge, sender).decode("utf-8")


class Outbox:
    """The unsent batches of one edge from one sending instance, in the
    sender's own casket, at most ``max_batches`` of them: the bounded queue
    ``flow/outbox/E/S``, one item per batch.

    :meth:`put` and :meth:`put_end` run inside the sender's firing
    transaction; :meth:`next`, :meth:`wait` and :meth:`sent` are the
    transfer's (one thread, see :func:`transfer`).  Every call that
    writes, and :meth:`next`, first checks the casket's owner epoch:
    StaleOwner once another owner claimed the casket.
    """

    def __init__(self, casket: Casket, edge: str, sender: str, epoch: int,
                 max_batches: int = 64) -> None:
        """The outbox of (edge, sender) in casket, for the owner holding
        epoch (:func:`pyqstore.flow.claim`).  Making it stores the queue's
        maxsize, ``max_batches`` or what it holds if that is more (a bound
        lowered since the last run takes effect as batches leave)."""
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
        self._batches = casket.queue(outbox_queue(edge, sender))
        self._signal = _room_signal(os.fsdecode(casket.path), self._batches.name)
        with casket.transaction():
            require_owner(casket, epoch)
            self._set_bound(self.held())

    def _set_bound(self, held: int) -> None:
        # Inside a transaction.  A maxsize below what the queue holds is
        # refused (BoundError), so a lowered bound is stored as the batches
        # held until sent() brings them under it.
        want = max(self.max_batches, held)
        if self._batches.maxsize != want:
            self._casket.queue(self._batches.name, maxsize=want)

    def held(self) -> int:
        """The batches in the outbox, unsent or being offered."""
        q = self._batches
        return len(q) + len(q.pending())

    def __repr__(self) -> str:
        return f"<pyqstore.flow.Outbox {self.edge!r} from {self.sender!r} in {self._casket.path!r}>"

    def _append(self, items: list[bytes], txn: Casket) -> int:
        casket = self._casket
        if txn is not casket or not casket.in_transaction:
            raise TransactionError(
                f"Outbox.put must run inside the calling thread's transaction on "
                f"{casket.path!r}, passed as txn; got {txn!r}")
        require_owner(casket, self.epoch)
        seq = read_counter(casket, self._seq_key) + 1
        try:
            self._batches.put_nowait(_encode(seq, items))
        except Full:
            raise OutboxFull(f"{self!r} holds {self.max_batches} unsent batches") from None
        write_counter(casket, self._seq_key, seq)
        return seq

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
        if not items:
            return None
        return self._append(items, txn)

    def put_end(self, txn: Casket) -> int:
        """Add the sender's end of stream on this edge, a batch of no
        payloads, inside txn as :meth:`put` (after it, the sender puts
        nothing more).  The receiver records it with its mark
        (:meth:`Inbox.ended`).  Returns its sequence number; OutboxFull,
        StaleOwner, TransactionError as :meth:`put`."""
        return self._append([], txn)

    def wait_for_room(self, timeout: Optional[float] = None) -> bool:
        """Wait until the outbox has room for a batch or timeout seconds
        passed (None: no limit); True when there is room.  Called outside a
        transaction, before the firing that puts: room only comes from
        :meth:`sent` in another thread or process.  A :meth:`sent` of this
        process wakes it at once; one of another process is seen within
        50 ms."""
        if self._casket.in_transaction:
            raise TransactionError("wait_for_room inside a transaction would never see room")
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._signal:
            while self.held() >= self.max_batches:
                left = _ROOM_RECHECK if end is None else min(_ROOM_RECHECK,
                                                             end - time.monotonic())
                if left <= 0:
                    return False
                self._signal.wait(left)
        return True

    def pending(self, limit: int) -> list[tuple[int, list[bytes]]]:
        """Up to limit unsent batches, oldest first, as (seq, payloads),
        without removing them (payloads [] is the end of stream).
        StaleOwner once the casket has another owner (its batches are that
        owner's to send now)."""
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
        # asleep on the queue's futex word; the batch stays where it is,
        # uncounted and unwritten
        return self._batches._wait_for_item(timeout)

    def sent(self, seq: int) -> int:
        """The receiver holds every batch up to seq (it answered ACCEPTED or
        DUPLICATE for seq, and it applies batches only in order): remove
        them, in one transaction, and wake the producers of this process
        waiting for room.  Returns how many were removed (0 when they were
        gone already).  InvalidArgumentError for a seq this outbox never
        assigned; StaleOwner."""
        seq = _seq(seq)
        casket = self._casket
        removed = 0
        # No sync of its own: a power cut that loses the removal leaves the
        # batches to be offered again, and the receiver's mark drops them
        # as duplicates.  The casket's next synced commit makes it durable.
        with casket.transaction(sync=False):
            require_owner(casket, self.epoch)
            last = read_counter(casket, self._seq_key)
            if seq > last:
                raise InvalidArgumentError(
                    f"{self!r} assigned sequence numbers up to {last}, not {seq}")
            while True:
                where = repr(self)
                heads = [_seq_of(raw, where) for raw in self._batches.peek_many(self.max_batches)]
                done = sum(1 for s in heads if s <= seq)
                if done:
                    self._batches.get_many(done)
                    removed += done
                if done < len(heads) or not heads:
                    break
            if removed:
                self._set_bound(self.held())
        if removed:
            with self._signal:
                self._signal.notify_all()
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

    def ended(self, edge: str, sender: str) -> bool:
        """Whether the end of stream of sender on edge was applied (a batch
        of no payloads, :meth:`Outbox.put_end`): every batch it will send
        on that edge is in the input port."""
        key = _key(b"flow/end/", _name(edge, "edge"), _name(sender, "sender"))
        return self._casket.get(key) is not None

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
        before a batch still missing (GAP, nothing stored); an input port
        without room for the batch refuses it (FULL, nothing stored).
        UnknownEdge for an edge this inbox does not receive;
        TypeError/InvalidArgumentError for a bad name, seq (< 1) or payload
        (not bytes-like, or none); StaleOwner once another owner claimed
        the casket."""
        return self.accept_many(edge, sender, [(seq, payloads)])[0]

    def accept_many(self, edge: str, sender: str,
                    batches: Sequence[tuple[int, Iterable[Payload]]],
                    wait: float = 0.0) -> list[Verdict]:
        """:meth:`accept` for several batches of sender on edge, in order,
        in one transaction (one commit, and for a remote sender one call):
        the verdict of each, up to and including the first GAP or FULL
        (the batches after it are not looked at: each would be a GAP).
        With ``wait`` > 0, a batch that does not fit is given up to that
        many seconds, outside the transaction, for the port's consumer to
        make room (woken by its commit), and it and the ones after it are
        taken in a next transaction, rather than answered FULL at once and
        offered again after the sender's pause.  Every argument is checked
        before anything is stored; errors as :meth:`accept`,
        InvalidArgumentError for no batches."""
        port = self._ports.get(_name(edge, "edge"))
        if port is None:
            raise UnknownEdge(f"{self!r} receives no edge {edge!r} (it receives "
                              f"{', '.join(map(repr, sorted(self._ports)))})")
        key = _key(b"flow/mark/", edge, _name(sender, "sender"))
        if not batches:
            raise InvalidArgumentError("accept_many: no batches")
        checked = [(_seq(seq), _payloads(payloads)) for seq, payloads in batches]
        verdicts = self._apply(port, edge, sender, key, checked)
        end = time.monotonic() + wait
        while verdicts[-1] is Verdict.FULL:
            i = len(verdicts) - 1
            left = end - time.monotonic()
            try:
                if left <= 0 or not port.wait_for_room(len(checked[i][1]), timeout=left):
                    break
            except ValueError:      # more than the port's maxsize: it never fits
                break
            verdicts[i:] = self._apply(port, edge, sender, key, checked[i:])
        return verdicts

    def _apply(self, port: Queue[bytes], edge: str, sender: str, key: bytes,
               checked: list[tuple[int, list[bytes]]]) -> list[Verdict]:
        casket = self._casket
        verdicts: list[Verdict] = []
        with casket.transaction():
            require_owner(casket, self.epoch)
            mark = first = read_counter(casket, key)
            for seq, items in checked:
                if seq <= mark:
                    verdicts.append(Verdict.DUPLICATE)
                    continue
                if seq != mark + 1:
                    verdicts.append(Verdict.GAP)
                    break
                if items:
                    try:
                        port.put_many(items)    # all or, Full, none of them
                    except Full:
                        verdicts.append(Verdict.FULL)
                        break
                else:
                    write_counter(casket, _key(b"flow/end/", edge, sender), seq)
                mark = seq
                verdicts.append(Verdict.ACCEPTED)
            if mark != first:
                write_counter(casket, key, mark)
        return verdicts


def transfer(outbox: Outbox, accept: Accept, *, wait: Optional[float] = 0.0,
             stop: Optional[threading.Event] = None,
             retry_on: tuple[type[BaseException], ...] = TRANSPORT_ERRORS,
             backoff: float = 0.01, max_backoff: float = 1.0, window: int = 1,
             accept_many: Optional[AcceptMany] = None) -> int:
    """Move the outbox's batches to the receiver, oldest first: offer up to
    ``window`` of them in order, each to ``accept(edge, sender, seq,
    payloads)``, and remove those up to the last answered ACCEPTED or
    DUPLICATE in one :meth:`Outbox.sent` (the receiver applies batches only
    in order, so it holds every one before).  On GAP or FULL, or when
    accept raises one of retry_on (a transport error), stop offering and
    offer that batch again after a pause that doubles from backoff up to
    max_backoff seconds; any other exception (StaleOwner, bad input) is
    raised.  When the outbox is empty, wait up to ``wait`` seconds (None:
    no limit) for a batch.  Returns the number of batches delivered, when
    the outbox stayed empty for ``wait`` or once stop is set.

    With ``accept_many``, the batches offered at a time go in one call to
    it instead of one call to accept each: one round trip and one commit
    of the receiver for the whole window, with the same verdicts.

    Only one transfer may run per outbox at a time (its removals assume the
    batches it offered are still at the front)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidArgumentError(f"window must be an int >= 1, not {window!r}")
    delivered = 0
    pause = backoff
    while not (stop is not None and stop.is_set()):
        batches = outbox.pending(window)
        if not batches:
            if not outbox.wait(wait):
                return delivered
            continue
        held: Optional[int] = None
        refused = False
        for seq, verdict in _offer(outbox, accept, accept_many, batches, retry_on):
            if verdict is Verdict.ACCEPTED or verdict is Verdict.DUPLICATE:
                held = seq
                delivered += 1
                continue
            refused = True
            break
        if held is not None:
            outbox.sent(held)
            pause = backoff
        if not refused:
            continue
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)
        pause = min(pause * 2, max_backoff)
    return delivered


def _offer(outbox: Outbox, accept: Accept, accept_many: Optional[AcceptMany],
           batches: list[tuple[int, list[bytes]]],
           retry_on: tuple[type[BaseException], ...]) -> Iterator[tuple[int, Optional[Verdict]]]:
    """(seq, its verdict) for the batches offered, in order, as far as the
    answers go: None for a call that raised one of retry_on.  An answer of
    accept_many may stop early (at a GAP or FULL, or, from a transport
    that waited for an earlier call, after the batches that call carried):
    the rest are offered again by the next round."""
    if accept_many is None:
        for seq, payloads in batches:
            try:
                yield seq, Verdict(accept(outbox.edge, outbox.sender, seq, payloads))
            except retry_on:
                yield seq, None
                return
        return
    try:
        verdicts = [Verdict(v) for v in accept_many(outbox.edge, outbox.sender, batches)]
    except retry_on:
        verdicts = []
    if len(verdicts) > len(batches):
        raise InvalidArgumentError(f"accept_many answered {len(verdicts)} verdicts for "
                                   f"{len(batches)} batches")
    if not verdicts:
        yield batches[0][0], None
    yield from zip((seq for seq, _ in batches), verdicts)
