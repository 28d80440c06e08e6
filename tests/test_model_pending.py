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

Claims use min_idle 0 (every committed reservation qualifies), an hour
(none does), or one that splits the committed reservations by the times
pending() lists (time.monotonic's clock, the one the C core stamps them
with): the ones reserved before the split time qualify, the later ones
do not; an item reserved within the claim call's own duration of the split
may go either way.  ``since``: item id -> the monotonic time before and
after the call (or commit) that made its reservation take effect, which
the reserve time pending() lists must lie within: a claim gives its items
a new holder and a new reserve time.  pending() lists committed
reservations: inside A's transaction, what an abort would leave.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
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
        self.since: dict[int, tuple[float, float]] = {}
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

    def add_batch(self, h: int, b: pyqstore.Batch, t0: float, t1: float) -> None:
        """Batch b, made by a call between monotonic times t0 and t1."""
        k = self.next_batch
        self.next_batch += 1
        self.batches[k] = (h, b)
        for it in b:
            self.owner[it.id] = k
            if self.txn is not None:
                self.txn["fresh"].add(it.id)
            else:
                self.since[it.id] = (t0, t1)

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
        t0 = time.monotonic()
        b = self.q[h].reserve_many(n, timeout=0)
        t1 = time.monotonic()
        assert [(it.id, it.payload) for it in b] == want
        self.add_batch(h, b, t0, t1)

    @rule(h=HANDLES, n=COUNTS, how=st.sampled_from(["all", "none", "split"]), data=st.data())
    def claim(self, h: int, n: int, how: str, data: st.DataObject) -> None:
        h = self.actor(h)
        fresh = self.txn["fresh"] if self.txn is not None else set()
        mine = sorted(i for i in self.owner if i not in fresh)
        at = {p.id: p.reserved_at for p in self.q[h].pending()}
        assert sorted(at) == sorted(self.committed_owner())
        if how == "split" and not mine:
            how = "none"
        if how == "all":
            split = float("inf")
        elif how == "none":
            split = float("-inf")
        else:
            # a split time between two reserve times (or before or after
            # all); drawn by position, as equal times may come or not
            times = sorted(at[i] for i in mine)
            k = data.draw(st.integers(0, len(times)), label="split")
            split = (times[0] - 1 if k == 0 else times[-1] + 1e-6 if k == len(times)
                     else (times[k - 1] + times[k]) / 2)
        t0 = time.monotonic()
        min_idle = 0 if how == "all" else 3600 if how == "none" else max(t0 - split, 0)
        b = self.q[h].claim(min_idle=min_idle, n=n)
        t1 = time.monotonic()
        # the C core compares at its own now, within [t0, t1]
        sure = [i for i in mine if at[i] <= split][:n]
        maybe = [i for i in mine if at[i] <= split + (t1 - t0) + 1e-6]
        if [i for i in maybe if i not in sure and at[i] > split]:
            assert b.ids == sorted(b.ids) and set(b.ids) <= set(maybe), (b.ids, maybe)
            assert len(b.ids) >= len(sure)
        else:
            assert b.ids == sure, (b.ids, sure, min_idle)
        payload = dict(self.queue)
        assert b.payloads == [payload[i] for i in b.ids]
        if b.ids:
            self.add_batch(h, b, t0, t1)

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
            t0 = time.monotonic()
            self.c[0].commit()
            t1 = time.monotonic()
            for i in self.txn["fresh"]:
                if i in self.owner:
                    self.since[i] = (t0, t1)
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
            t0, t1 = self.since[p.id]
            assert t0 - 1e-6 <= p.reserved_at <= t1 + 1e-6, (p.id, t0, p.reserved_at, t1)

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
