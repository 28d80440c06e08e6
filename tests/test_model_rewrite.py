"""Stateful property test of the rewrite of an item's record that every
reserve and every fail makes (the delivery count, the fail reason), against
a model, with payloads and reasons of every size class.

A rewrite changes the record's size (a first reserve adds the delivery
header, a fail adds, lengthens or shortens a reason): the B+tree rewrites
the cell where it lies when its leaf holds the new size (moving the cells
below it, or compacting the leaf first), and otherwise deletes and inserts
it (a split, or a value that moves to or from overflow pages).  Payloads
near the inline limit (about 1000 bytes with the key), past it, and small
ones packed many to a leaf reach each of those cases; reasons up to the
1024 bytes kept, and past them (refused).

The model: ``jobs``, in id order, of ``[seq, payload, count, reason]`` for
every item the queue holds; ``held``: seq -> Item of an outstanding
reservation.  The payload starts with the seq's digits, so an item is
known by what it carries.  After every step the casket's pages pass
``check()``, the available items peek in the model's order with the
model's payloads, and each held item reads the model's count and reason.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore

MAX_REASON = 1024       # bytes of a fail reason the casket takes (qdeliv.h)

# the inline limit of a leaf cell is 1000 bytes with its 16-byte header and
# the queue's key: sizes around it, well past it, and small ones
sizes = st.one_of(st.sampled_from([0, 1, 40, 900, 950, 960, 966, 970, 975, 980, 990, 1000,
                                   1100, 3000]),
                  st.integers(0, 1200))
reason_lens = st.one_of(st.sampled_from([0, 1, 7, 60, 500, 900, 1000, 1023, 1024, 1025, 1100]),
                        st.integers(0, 1100))


def payload(seq: int, size: int) -> bytes:
    head = b"%d:" % seq
    return (head + bytes((seq + i) % 251 for i in range(size)))[:max(size, len(head))]


class RewriteMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-rewrite-")
        self.c = pyqstore.open(os.path.join(self.dir, "r.qs"), "n", sync=False)
        self.q = self.c.queue("jobs")
        self.jobs: list[list[Any]] = []
        self.held: dict[int, pyqstore.Item] = {}
        self.seq = 0

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def entry(self, seq: int) -> list[Any]:
        return next(e for e in self.jobs if e[0] == seq)

    def free(self) -> list[list[Any]]:
        return [e for e in self.jobs if e[0] not in self.held]

    @rule(lens=st.lists(sizes, min_size=1, max_size=40))
    def put_many(self, lens: list[int]) -> None:
        batch = []
        for n in lens:
            self.seq += 1
            batch.append([self.seq, payload(self.seq, n), 0, None])
        self.q.put_many([e[1] for e in batch])
        self.jobs.extend(batch)

    @precondition(lambda self: len(self.free()) > 0)
    @rule(n=st.integers(1, 30))
    def reserve_many(self, n: int) -> None:
        want = self.free()[:n]
        batch = self.q.reserve_many(n)
        assert [p for p in batch.payloads] == [e[1] for e in want]
        for it, e in zip(batch, want):
            e[2] += 1
            assert (it.deliveries, it.reason) == (e[2], e[3]), (e[0], it.deliveries, it.reason)
            self.held[e[0]] = it

    def _pick(self, data: st.DataObject) -> Optional[int]:
        if not self.held:
            return None
        return data.draw(st.sampled_from(sorted(self.held)))

    @precondition(lambda self: self.held)
    @rule(data=st.data(), n=reason_lens)
    def fail(self, data: st.DataObject, n: int) -> None:
        seq = self._pick(data)
        assert seq is not None
        reason = (b"%d/" % seq + b"x" * n)[:n]
        if n > MAX_REASON:
            # refused whole: the item stays held, its record as it was
            with pytest.raises(ValueError, match="1024"):
                self.held[seq].fail(reason)
            return
        self.held.pop(seq).fail(reason)
        self.entry(seq)[3] = reason.decode() if reason else None

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        seq = self._pick(data)
        assert seq is not None
        self.held.pop(seq).release()

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seq = self._pick(data)
        assert seq is not None
        self.held.pop(seq).ack()
        self.jobs.remove(self.entry(seq))

    @rule()
    def reopen(self) -> None:
        # reservations end at close, their counts and reasons kept
        self.c.close()
        self.held.clear()
        self.c = pyqstore.open(self.c.path, sync=False)
        self.q = self.c.queue("jobs")

    @invariant()
    def pages_sound(self) -> None:
        self.c.check()

    @invariant()
    def available_in_order(self) -> None:
        free = self.free()
        assert self.q.peek_many(len(free) + 1) == [e[1] for e in free]
        assert len(self.q) == len(free)

    @invariant()
    def held_read_back(self) -> None:
        for seq, it in self.held.items():
            e = self.entry(seq)
            assert (it.deliveries, it.reason) == (e[2], e[3]), (seq, it.deliveries, it.reason)


RewriteMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("QS_HYPOTHESIS_EXAMPLES", "60")), stateful_step_count=40,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_rewrite_model = RewriteMachine.TestCase
