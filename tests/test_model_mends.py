"""Stateful property test: delivery counts across transactions against a
model (issue 13: "the count is not part of that transaction").

The model is plain Python: ``items`` is the list, in id order, of the seqs
the queue holds (reserved ones included; an item's payload is its seq's
digits); ``counts``: seq -> deliveries, which reserves raise and nothing
lowers, an abort included; ``held``: handle -> (seq, made in the open
transaction).  Reserves, releases, acks and codec gets run inside and
outside transactions; an abort restores ``items`` and drops the
reservations the transaction made, never the counts.  A codec get counts
nothing.  Close and reopen keep the counts.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore


class CountMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-mmodel-")
        self.path = os.path.join(self.dir, "m.qs")
        self.c = pyqstore.open(self.path, "n", sync=False)
        self.items: list[int] = []
        self.counts: dict[int, int] = {}
        self.held: dict[int, tuple[int, bool]] = {}
        self.objs: dict[int, pyqstore.Item] = {}
        self.seq = 0
        self.next_handle = 0
        self.txn: Optional[tuple[list[int], dict[int, tuple[int, bool]]]] = None
        self.acked: set[int] = set()

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def q(self) -> pyqstore.Queue:
        return self.c.queue("jobs")

    def free(self) -> list[int]:
        held = {s for s, _ in self.held.values()}
        return [s for s in self.items if s not in held]

    @rule(n=st.integers(1, 3))
    def put(self, n: int) -> None:
        for _ in range(n):
            self.seq += 1
            self.q().put(b"%d" % self.seq)
            self.items.append(self.seq)
            self.counts[self.seq] = 0

    @rule()
    def reserve(self) -> None:
        free = self.free()
        try:
            it = self.q().reserve(timeout=0)
        except pyqstore.Empty:
            assert not free
            return
        s = free[0]
        assert it.payload == b"%d" % s
        self.counts[s] += 1
        assert it.deliveries == self.counts[s]
        h = self.next_handle
        self.next_handle += 1
        self.held[h] = (s, self.txn is not None)
        self.objs[h] = it

    @rule()
    def codec_get(self) -> None:
        free = self.free()
        try:
            got = self.c.queue("jobs", codec=_Raw()).get(block=False)
        except pyqstore.Empty:
            assert not free
            return
        assert got == b"%d" % free[0]
        self.items.remove(free[0])

    @precondition(lambda self: self.held)
    @rule(data=st.data(), ack=st.booleans())
    def end(self, data: st.DataObject, ack: bool) -> None:
        h = data.draw(st.sampled_from(sorted(self.held)))
        s, made = self.held.pop(h)
        it = self.objs[h]
        if ack and self.txn is not None and not made:
            self.acked.add(h)   # an abort keeps it reserved
        else:
            del self.objs[h]
        if ack:
            it.ack()
            self.items.remove(s)
        else:
            it.release()        # at once, even inside a transaction

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        self.c.begin()
        self.txn = (list(self.items), dict(self.held))

    @precondition(lambda self: self.txn is not None)
    @rule()
    def commit(self) -> None:
        self.c.commit()
        self.held = {h: (s, False) for h, (s, _) in self.held.items()}
        for h in self.acked:
            del self.objs[h]
        self.acked.clear()
        self.txn = None

    @precondition(lambda self: self.txn is not None)
    @rule()
    def abort(self) -> None:
        self.c.abort()
        items, held_before = self.txn
        self.items = items
        # reservations made inside are gone; committed ones it acked are
        # held again; releases (at once) stay released
        kept = {h: v for h, v in self.held.items() if not v[1]}
        for h in self.acked:
            kept[h] = held_before[h]
        self.acked.clear()
        self.held = kept
        for h in list(self.objs):
            if h not in self.held:
                del self.objs[h]
        self.txn = None

    @precondition(lambda self: self.txn is None)
    @rule()
    def reopen(self) -> None:
        self.c.close()
        self.c = pyqstore.open(self.path, sync=False)
        self.held.clear()
        self.objs.clear()

    @invariant()
    def length(self) -> None:
        assert len(self.q()) == len(self.free())


class _Raw:
    """A codec that hands the bytes back: a codec queue's get path."""

    name = "raw"

    def encode(self, obj: Any) -> bytes:
        return bytes(obj)

    def decode(self, data: bytes) -> Any:
        return data


CountMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCountModel = CountMachine.TestCase
