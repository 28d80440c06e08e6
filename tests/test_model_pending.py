"""Stateful property test: batches (reserve_many, ack_many, release_many),
claims and the pending list of one queue, used through two handles A and
B of one casket, against a reference model.

The model is plain Python:

* ``queue``: list of ``(id, payload)`` of every item still in the queue;
* ``owner``: item id -> the batch that holds it (a key of ``batches``);
* ``batches``: batch key -> ``(handle index, Batch)``;
* ``txn`` (A's open transaction): the ``queue`` and ``owner`` to go back
  to, the ids released meanwhile (a release takes effect at once, so an
  abort does not give them back to anyone) and the ids reserved or claimed
  in it (not claimable, not yet pending).

Claims use min_idle 0 (every committed reservation qualifies) or an hour
(none does), so no clock is needed.  pending() lists committed
reservations: inside A's transaction, what an abort would leave.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import pyqstore
from test_queue_model import small_payloads

HANDLES = st.sampled_from([0, 1])
COUNTS = st.integers(1, 4)


class PendingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-pmodel-")
        self.path = os.path.join(self.dir, "p.qs")
        self.open()
        self.queue: list[tuple[int, bytes]] = []
        self.owner: dict[int, int] = {}
        self.batches: dict[int, tuple[int, pyqstore.Batch]] = {}
        self.next_batch = 0
        self.txn: Optional[dict[str, Any]] = None

    def open(self) -> None:
        self.c = [pyqstore.open(self.path, "c", sync=False),
                  pyqstore.open(self.path, "w", sync=False)]
        self.q = [c.queue("q") for c in self.c]

    def teardown(self) -> None:
        try:
            for c in self.c:
                if not c.closed:
                    if c.in_transaction:
                        c.abort()
                    c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------- helpers

    def usable(self, h: int) -> bool:
        """B waits for A's transaction (it holds the write lock): only A
        acts while one is open."""
        return self.txn is None or h == 0

    def actor(self, h: int) -> int:
        """The handle a rule drawn for h uses: A while A's transaction is
        open (so that transactions get work done in them)."""
        return h if self.txn is None else 0

    def available(self) -> list[tuple[int, bytes]]:
        return [(i, p) for (i, p) in self.queue if i not in self.owner]

    def committed_owner(self) -> dict[int, int]:
        if self.txn is None:
            return self.owner
        return {i: b for i, b in self.txn["owner"].items() if i not in self.txn["released"]}

    def add_batch(self, h: int, b: pyqstore.Batch) -> None:
        k = self.next_batch
        self.next_batch += 1
        self.batches[k] = (h, b)
        for it in b:
            self.owner[it.id] = k
            if self.txn is not None:
                self.txn["fresh"].add(it.id)

    def held(self, k: int, items: list[pyqstore.Item]) -> bool:
        return all(self.owner.get(it.id) == k for it in items)

    # ----------------------------------------------------------- rules

    @initialize(payloads=st.lists(small_payloads, min_size=1, max_size=4), n=COUNTS)
    def start(self, payloads: list[bytes], n: int) -> None:
        """Items, some of them held by B: something to claim from the
        start."""
        for p in payloads:
            self.put(0, p)
        self.reserve_many(1, n)

    @rule(h=HANDLES, payload=small_payloads)
    def put(self, h: int, payload: bytes) -> None:
        h = self.actor(h)
        self.queue.append((self.q[h].put(payload), payload))

    @rule(h=HANDLES, n=COUNTS)
    def reserve_many(self, h: int, n: int) -> None:
        h = self.actor(h)
        want = self.available()[:n]
        if not want:
            with pytest.raises(pyqstore.Empty):
                self.q[h].reserve_many(n, timeout=0)
            return
        b = self.q[h].reserve_many(n, timeout=0)
        assert [(it.id, it.payload) for it in b] == want
        self.add_batch(h, b)

    @rule(h=HANDLES, n=COUNTS, idle=st.booleans())
    def claim(self, h: int, n: int, idle: bool) -> None:
        h = self.actor(h)
        b = self.q[h].claim(min_idle=0 if idle else 3600, n=n)
        if not idle:
            assert len(b) == 0
            return
        fresh = self.txn["fresh"] if self.txn is not None else set()
        want = sorted(i for i in self.owner if i not in fresh)[:n]
        assert b.ids == want
        payload = dict(self.queue)
        assert b.payloads == [payload[i] for i in want]
        if want:
            self.add_batch(h, b)

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), ack=st.booleans(), whole=st.booleans())
    def end(self, data: st.DataObject, ack: bool, whole: bool) -> None:
        # newest first: the choice hypothesis favours is the batch just made
        k = data.draw(st.sampled_from(sorted(self.batches, reverse=True)), label="batch")
        h, b = self.batches[k]
        if not self.usable(h):
            return
        if whole or len(b) == 1:
            items = list(b)
        else:
            items = data.draw(st.lists(st.sampled_from(b.items), min_size=1, unique=True))
        call = (b.ack if ack else b.release) if whole else (
            (lambda: self.q[h].ack_many(items)) if ack else (lambda: self.q[h].release_many(items)))
        if not self.held(k, items):
            with pytest.raises(pyqstore.NotReservedError):
                call()
            return
        call()
        gone = {it.id for it in items}
        for i in gone:
            del self.owner[i]
        if ack:
            self.queue = [(i, p) for (i, p) in self.queue if i not in gone]
        elif self.txn is not None:
            self.txn["released"] |= gone

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        self.c[0].begin()
        self.txn = {"queue": list(self.queue), "owner": dict(self.owner),
                    "released": set(), "fresh": set()}

    @precondition(lambda self: self.txn is not None)
    @rule(abort=st.booleans(), later=st.integers(0, 2))
    def finish(self, abort: bool, later: int) -> None:
        """Commit or abort A's transaction -- one time in three (later 2:
        hypothesis favours 0), so that a transaction holds a few steps."""
        if later != 2:
            return
        if abort:
            self.c[0].abort()
            self.model_abort()
        else:
            self.c[0].commit()
            self.txn = None

    def model_abort(self) -> None:
        t = self.txn
        assert t is not None
        self.owner = {i: b for i, b in t["owner"].items() if i not in t["released"]}
        self.queue = t["queue"]
        self.txn = None

    @rule(later=st.integers(0, 3))
    def reopen(self, later: int) -> None:
        """Close both handles and open them again -- one time in four, as
        it ends everything the model built up."""
        if later != 3:
            return
        for c in self.c:
            c.close()
        if self.txn is not None:    # closing abandons the transaction
            self.model_abort()
        self.owner.clear()          # every reservation ends with its handle
        for k, (h, b) in self.batches.items():
            if len(b):
                with pytest.raises(pyqstore.ClosedError):
                    b.ack()
        self.batches.clear()
        self.open()

    # ------------------------------------------------------- invariants

    @invariant()
    def pending_list(self) -> None:
        owner = self.committed_owner()
        got = self.q[0].pending()
        assert [p.id for p in got] == sorted(owner)
        for p in got:
            holder = self.batches[owner[p.id]][0]
            assert p.mine == (holder == 0) and p.pid == os.getpid() and p.lease_ends is None

    @invariant()
    def lengths(self) -> None:
        assert len(self.q[0]) == len(self.available())
        if self.txn is None:
            assert len(self.q[1]) == len(self.available())


PendingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestPendingModel = PendingMachine.TestCase
