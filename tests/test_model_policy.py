"""Stateful property test of the queue policy (issue 13) against a model:
deliveries, fail reasons, dead letters and bounded puts, with configs set
and changed, commit, abort, close and reopen.

The model is plain Python: ``jobs`` and ``dead`` are lists, in id order, of
``[seq, count, reason]`` for every item the queue holds (reserved ones
included; the payload is the seq's digits, so an item is known by it);
``held``: handle -> seq of an outstanding reservation of ``jobs``;
``conf``: the stored (maxsize, max_deliveries).  Reservations and their
ends happen outside transactions (the transaction rules of reservations
are test_queue_model's); inside one, puts, gets and config changes, all
undone by an abort, dead-letter moves of gets included.
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
from test_queue_model import small_payloads

reasons = st.one_of(st.just(""), st.text(max_size=12), small_payloads)


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-pmodel-")
        self.path = os.path.join(self.dir, "p.qs")
        self.c = pyqstore.open(self.path, "n", sync=False)
        self.jobs: list[list[Any]] = []
        self.dead: list[list[Any]] = []
        self.held: dict[int, int] = {}
        self.items: dict[int, pyqstore.Item] = {}
        self.conf = (0, 0)
        self.seq = 0
        self.next_handle = 0
        self.txn: Optional[tuple] = None

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- helpers

    def q(self) -> pyqstore.Queue:
        return self.c.queue("jobs")

    def free(self) -> list[list[Any]]:
        held = set(self.held.values())
        return [e for e in self.jobs if e[0] not in held]

    def take_model(self) -> Optional[list[Any]]:
        """The model of one take: spent items at the front go to dead."""
        maxdel = self.conf[1]
        for e in self.free():
            if maxdel and e[1] >= maxdel:
                self.jobs.remove(e)
                self.dead.append(e)
                self.dead.sort(key=lambda x: x[0])
                continue
            return e
        return None

    def snapshot(self) -> tuple:
        return ([list(e) for e in self.jobs], [list(e) for e in self.dead], self.conf, self.seq)

    # ---- rules

    @rule(n=st.integers(1, 3), nowait=st.booleans())
    def put(self, n: int, nowait: bool) -> None:
        maxsize = self.conf[0]
        batch = [b"%d" % (self.seq + i) for i in range(n)]
        room = not maxsize or len(self.jobs) + n <= maxsize
        try:
            if n == 1:
                if nowait:
                    self.q().put_nowait(batch[0])
                else:
                    self.q().put(batch[0], timeout=0)
            else:
                self.q().put_many(batch)
        except pyqstore.Full:
            assert not room
            return
        assert room
        for i in range(n):
            self.jobs.append([self.seq, 0, None])
            self.seq += 1

    @rule()
    def get(self) -> None:
        e = self.take_model()
        try:
            got = self.q().get(block=False)
        except pyqstore.Empty:
            assert e is None
            return
        assert e is not None and got == b"%d" % e[0]
        self.jobs.remove(e)

    @rule(maxsize=st.integers(0, 6), maxdel=st.integers(0, 3))
    def configure(self, maxsize: int, maxdel: int) -> None:
        try:
            self.c.queue("jobs", maxsize=maxsize, max_deliveries=maxdel,
                         dead_letter="dead" if maxdel else "")
        except pyqstore.BoundError:
            assert maxsize and len(self.jobs) > maxsize
            return
        assert not maxsize or len(self.jobs) <= maxsize
        self.conf = (maxsize, maxdel)

    @precondition(lambda self: self.txn is None)
    @rule()
    def reserve(self) -> None:
        e = self.take_model()
        try:
            it = self.q().reserve(timeout=0)
        except pyqstore.Empty:
            assert e is None
            return
        assert e is not None and it.payload == b"%d" % e[0]
        e[1] += 1
        assert it.deliveries == e[1]
        assert it.reason == e[2]
        h = self.next_handle
        self.next_handle += 1
        self.held[h] = e[0]
        self.items[h] = it

    def pick(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.held)))

    @precondition(lambda self: self.txn is None and self.held)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        h = self.pick(data)
        self.items.pop(h).ack()
        seq = self.held.pop(h)
        self.jobs = [e for e in self.jobs if e[0] != seq]

    @precondition(lambda self: self.txn is None and self.held)
    @rule(data=st.data(), reason=st.one_of(st.none(), reasons))
    def release_or_fail(self, data: st.DataObject, reason: Any) -> None:
        h = self.pick(data)
        it = self.items.pop(h)
        seq = self.held.pop(h)
        if reason is None:
            it.release()
            return
        it.fail(reason)
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else reason
        for e in self.jobs:
            if e[0] == seq:
                e[2] = text or None     # an empty reason reads as none

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        self.c.begin()
        self.txn = self.snapshot()

    @precondition(lambda self: self.txn is not None)
    @rule()
    def commit(self) -> None:
        self.c.commit()
        self.txn = None

    @precondition(lambda self: self.txn is not None)
    @rule()
    def abort(self) -> None:
        self.c.abort()
        jobs, dead, conf, _ = self.txn
        self.jobs, self.dead, self.conf = jobs, dead, conf
        self.txn = None

    @precondition(lambda self: self.txn is None)
    @rule()
    def reopen(self) -> None:
        self.c.close()
        self.c = pyqstore.open(self.path, sync=False)
        self.held.clear()
        self.items.clear()

    @rule()
    def dead_reserve_release(self) -> None:
        """Whoever reads the dead-letter queue sees count and reason."""
        if self.txn is not None:
            return
        try:
            it = self.c.queue("dead").reserve(timeout=0)
        except pyqstore.Empty:
            assert not self.dead
            return
        e = self.dead[0]
        e[1] += 1
        assert (it.payload, it.deliveries, it.reason) == (b"%d" % e[0], e[1], e[2])
        it.release()

    # ---- invariants

    @invariant()
    def lengths(self) -> None:
        assert len(self.q()) == len(self.free())
        assert len(self.c.queue("dead")) == len(self.dead)

    @invariant()
    def config(self) -> None:
        cfg = self.q().config()
        assert (cfg.maxsize, cfg.max_deliveries) == self.conf
        assert cfg.dead_letter == ("dead" if self.conf[1] else None)
        if self.conf[0]:
            assert len(self.jobs) <= self.conf[0]


PolicyMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPolicyModel = PolicyMachine.TestCase
