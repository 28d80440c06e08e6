"""Stateful property test: priorities and delays of queue items against a
reference model, on a fake clock.

It extends test_queue_model.QueueMachine (puts, publish, get, peek, clear,
reserve, ack, release, transactions, reopen) with:

* ``prio``: seq -> priority (0 unless put with one): the model's order of
  available items is (priority descending, seq);
* ``delayed``: queue name -> {seq: due time} for the items put or released
  with a delay that are not yet in the queue proper.  They are invisible
  to get, reserve and peek, counted by ``len()`` and ``delayed()``.  A get,
  reserve or clear of the queue first moves the ones due (due <= now) in,
  so peek sees a due item only after one of those (qstore.h, "Priorities
  and delays"); clear removes them all;
* ``now``: the fake clock, given to the C core with qs_queue_test_clock
  (a test-only hook: the delay clock of this process).  Its values and the
  delays are multiples of 1/4 s from 10^6 s, so their nanoseconds are exact
  in a double and "due" compares exactly.

An abort restores ``delayed`` as it was at begin (a move of a due item
into its queue, a delayed put, and the move of a delayed release are part
of the transaction; the release's end of the reservation is not).
"""
from __future__ import annotations

from typing import Optional

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from pyqstore._qstore import lib
from test_queue_model import NAMES, QueueMachine, _settings, names, payloads

T0 = 1_000_000.0
delays = st.sampled_from([None, 0, 0.25, 1, 1, 2.5])
priorities = st.one_of(st.none(), st.integers(0, 9), st.sampled_from([0, 9]))


class OrderMachine(QueueMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        lib.qs_queue_test_clock(self.now)
        self.prio: dict[int, int] = {}
        self.delayed: dict[str, dict[int, float]] = {n: {} for n in NAMES}

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            lib.qs_queue_test_clock(0.0)

    # ----------------------------------------------------------- the model

    def available(self, name: str) -> list[tuple[int, bytes]]:
        hidden = self.reserved_seqs(name) | set(self.delayed[name])
        items = [(s, p) for (s, p) in self.queues[name] if s not in hidden]
        return sorted(items, key=lambda sp: (-self.prio.get(sp[0], 0), sp[0]))

    def move_due(self, name: str, until: Optional[float] = None) -> None:
        """What a get, reserve or clear of name does first."""
        t = self.now if until is None else until
        self.delayed[name] = {s: d for s, d in self.delayed[name].items() if d > t}

    def model_abort(self) -> None:
        assert self.txn is not None
        self.delayed = self.txn["delayed"]
        super().model_abort()

    # --------------------------------------------------------------- rules

    @rule(name=names, payload=payloads, delay=delays, priority=priorities)
    def put_order(self, name: str, payload: bytes, delay, priority) -> None:
        real_id = self.qs[name].put(payload, delay=delay, priority=priority)
        seq = self.new_seq()
        self.learn(seq, real_id)
        self.queues[name].append((seq, payload))
        self.prio[seq] = priority or 0
        if delay:
            self.delayed[name][seq] = self.now + delay

    @rule(name=names, batch=st.lists(payloads, max_size=4), delay=delays, priority=priorities)
    def put_many_order(self, name: str, batch: list[bytes], delay, priority) -> None:
        assert self.qs[name].put_many(batch, delay=delay, priority=priority) == len(batch)
        for p in batch:
            seq = self.new_seq()
            self.queues[name].append((seq, p))
            self.prio[seq] = priority or 0
            if delay:
                self.delayed[name][seq] = self.now + delay

    @precondition(lambda self: self.res)
    @rule(data=st.data(), delay=st.sampled_from([0.25, 1, 3]))
    def release_delay(self, data: st.DataObject, delay: float) -> None:
        h = data.draw(st.sampled_from(sorted(self.res)), label="handle")
        self.items[h].release(delay=delay)
        name, seq = self.res.pop(h)
        self.ended[h] = self.items[h]
        self.delayed[name][seq] = self.now + delay

    @rule(dt=st.sampled_from([0.25, 0.75, 1, 3]))
    def advance(self, dt: float) -> None:
        self.now += dt
        lib.qs_queue_test_clock(self.now)

    # The takes of the base machine, with the move of due items first.

    @rule(name=names)
    def get_nowait(self, name: str) -> None:
        self.move_due(name)
        super().get_nowait(name)

    @rule(name=names, n=st.integers(0, 8))
    def get_many(self, name: str, n: int) -> None:
        if n:       # get_many(0) returns before it looks
            self.move_due(name)
        super().get_many(name, n)

    @rule(name=names)
    def reserve(self, name: str) -> None:
        self.move_due(name)
        super().reserve(name)

    @rule(name=names)
    def clear(self, name: str) -> None:
        self.move_due(name, until=float("inf"))
        super().clear(name)

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        super().begin()
        assert self.txn is not None
        self.txn["delayed"] = {n: dict(d) for n, d in self.delayed.items()}

    # ---------------------------------------------------------- invariants

    @invariant()
    def lengths(self) -> None:
        for n in NAMES:
            assert self.qs[n].delayed() == len(self.delayed[n]), n
            assert len(self.qs[n]) == len(self.available(n)) + len(self.delayed[n]), n

    @invariant()
    def listing(self) -> None:
        expected = sorted((n for n in NAMES if self.queues[n]), key=lambda n: n.encode())
        assert self.c.queues() == expected
        assert self.c.queue_lengths() == {
            n: len(self.available(n)) + len(self.delayed[n]) for n in expected}


    @invariant()
    def scan(self) -> None:
        """iter: every item held (reserved and delayed ones too), id order."""
        for n in NAMES:
            assert list(self.qs[n].iter()) == [p for _, p in self.queues[n]], n


class SmallCacheOrderMachine(OrderMachine):
    """The same with a tiny page cache and frequent checkpoints."""

    OPEN_KW = {"cache_size": 64 * 4096, "checkpoint_size": 64 * 1024}


OrderMachine.TestCase.settings = _settings
SmallCacheOrderMachine.TestCase.settings = _settings
TestOrderModel = OrderMachine.TestCase
TestOrderModelSmallCache = SmallCacheOrderMachine.TestCase
