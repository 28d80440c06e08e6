"""Stateful property test: the queues of a Casket against a reference model.

The model is plain Python:

* ``queues``: queue name -> list of ``(seq, payload)`` in id order, holding
  every item still in the queue (reserved ones included);
* ``res``: handle -> ``(name, seq)`` for every outstanding reservation (the
  Item objects are kept in ``items`` under the same handle);
* ``ended``: handle -> Item whose reservation is over (ack/release of it
  must raise NotReservedError);
* ``txn``: what abort() must undo (a copy of ``queues``, the reservations
  made inside the transaction and the ones acknowledged inside it).

``seq`` is the model's own counter; the real ids (returned by put, publish
and reserve) are learned as they show up and checked to increase with it.
"""
from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

import pyqstore

NAMES = ["a", "b", "été-队列", "q" * 1500]

names = st.sampled_from(NAMES)
small_payloads = st.binary(max_size=40)
medium_payloads = st.binary(max_size=3000)
big_payloads = st.builds(
    lambda n, b, tail: bytes([b]) * n + tail,
    st.integers(4097, 12000),
    st.integers(0, 255),
    st.binary(max_size=8),
)
payloads = st.one_of(
    small_payloads, small_payloads, small_payloads, medium_payloads, big_payloads
)
payload_lists = st.lists(
    st.one_of(small_payloads, small_payloads, small_payloads, medium_payloads),
    max_size=6,
)


class QueueMachine(RuleBasedStateMachine):
    OPEN_KW: dict = {}

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-qmodel-")
        self.path = os.path.join(self.dir, "q.qs")
        self.c = pyqstore.open(self.path, "n", sync=False, **self.OPEN_KW)
        self.qs = {n: self.c.queue(n) for n in NAMES}
        self.queues: dict[str, list[tuple[int, bytes]]] = {n: [] for n in NAMES}
        self.seq = 0
        self.real_seqs: list[int] = []  # sorted seqs whose real id is known
        self.real: dict[int, int] = {}  # seq -> real id
        self.res: dict[int, tuple[str, int]] = {}
        self.items: dict[int, pyqstore.Item] = {}
        self.ended: dict[int, pyqstore.Item] = {}
        self.next_handle = 0
        self.txn: Optional[dict[str, Any]] = None

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                if self.c.in_transaction:
                    self.c.abort()
                self.c.check()
                self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------- helpers

    def new_seq(self) -> int:
        self.seq += 1
        return self.seq

    def learn(self, seq: int, real_id: int) -> None:
        """Record (or check) the real id of model item seq; real ids must
        increase with seq."""
        assert isinstance(real_id, int) and real_id > 0
        if seq in self.real:
            assert self.real[seq] == real_id, (seq, self.real[seq], real_id)
            return
        i = bisect.bisect_left(self.real_seqs, seq)
        if i > 0:
            lower = self.real[self.real_seqs[i - 1]]
            assert lower < real_id, f"id {real_id} not above earlier id {lower}"
        if i < len(self.real_seqs):
            higher = self.real[self.real_seqs[i]]
            assert real_id < higher, f"id {real_id} not below later id {higher}"
        self.real_seqs.insert(i, seq)
        self.real[seq] = real_id

    def forget_from(self, seq0: int) -> None:
        """Forget the real ids of seqs >= seq0 (items of an aborted
        transaction never existed; their ids may be handed out again)."""
        i = bisect.bisect_left(self.real_seqs, seq0)
        for s in self.real_seqs[i:]:
            del self.real[s]
        del self.real_seqs[i:]

    def reserved_seqs(self, name: str) -> set[int]:
        return {s for (n, s) in self.res.values() if n == name}

    def available(self, name: str) -> list[tuple[int, bytes]]:
        r = self.reserved_seqs(name)
        return [(s, p) for (s, p) in self.queues[name] if s not in r]

    def remove(self, name: str, seqs: set[int]) -> None:
        self.queues[name] = [(s, p) for (s, p) in self.queues[name] if s not in seqs]

    def model_abort(self) -> None:
        """Undo the open transaction in the model."""
        t = self.txn
        assert t is not None
        self.queues = t["queues"]
        for h in t["new_res"]:
            if h in self.res:
                del self.res[h]
                self.ended[h] = self.items[h]
        for h, v in t["acked"].items():
            self.res[h] = v
            del self.ended[h]
        self.forget_from(t["seq0"])
        self.txn = None

    # ---------------------------------------------------------- producing

    @rule(name=names, payload=payloads)
    def put(self, name: str, payload: bytes) -> None:
        real_id = self.qs[name].put(payload)
        seq = self.new_seq()
        self.learn(seq, real_id)
        self.queues[name].append((seq, payload))

    @rule(name=names, batch=payload_lists, as_gen=st.booleans())
    def put_many(self, name: str, batch: list[bytes], as_gen: bool) -> None:
        arg = (p for p in batch) if as_gen else batch
        assert self.qs[name].put_many(arg) == len(batch)
        for p in batch:
            self.queues[name].append((self.new_seq(), p))

    @rule(
        payload=payloads,
        dests=st.lists(names, min_size=1, max_size=len(NAMES), unique=True),
    )
    def publish(self, payload: bytes, dests: list[str]) -> None:
        real_id = self.c.publish(payload, dests)
        seq = self.new_seq()
        self.learn(seq, real_id)
        for n in dests:
            self.queues[n].append((seq, payload))

    # ---------------------------------------------------------- consuming

    @rule(name=names)
    def get_nowait(self, name: str) -> None:
        avail = self.available(name)
        if not avail:
            with pytest.raises(pyqstore.Empty):
                self.qs[name].get_nowait()
            return
        assert self.qs[name].get_nowait() == avail[0][1]
        self.remove(name, {avail[0][0]})

    @rule(name=names, n=st.integers(0, 8))
    def get_many(self, name: str, n: int) -> None:
        avail = self.available(name)[:n]
        got = self.qs[name].get_many(n)
        assert got == [p for _, p in avail]
        self.remove(name, {s for s, _ in avail})

    @rule(name=names)
    def peek(self, name: str) -> None:
        avail = self.available(name)
        assert self.qs[name].peek() == (avail[0][1] if avail else None)

    @rule(name=names, n=st.integers(0, 8))
    def peek_many(self, name: str, n: int) -> None:
        avail = self.available(name)[:n]
        assert self.qs[name].peek_many(n) == [p for _, p in avail]

    @rule(name=names)
    def clear(self, name: str) -> None:
        avail = self.available(name)
        assert self.qs[name].clear() == len(avail)
        self.remove(name, {s for s, _ in avail})

    # ------------------------------------------------------- reservations

    @rule(name=names)
    def reserve(self, name: str) -> None:
        avail = self.available(name)
        if not avail:
            with pytest.raises(pyqstore.Empty):
                self.qs[name].reserve(timeout=0)
            return
        item = self.qs[name].reserve(timeout=0)
        seq, payload = avail[0]
        assert item.payload == payload
        self.learn(seq, item.id)
        h = self.next_handle
        self.next_handle += 1
        self.items[h] = item
        self.res[h] = (name, seq)
        if self.txn is not None:
            self.txn["new_res"].add(h)

    @precondition(lambda self: self.res)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(sorted(self.res)), label="handle")
        self.items[h].ack()
        name, seq = self.res.pop(h)
        self.remove(name, {seq})
        self.ended[h] = self.items[h]
        if self.txn is not None and h not in self.txn["new_res"]:
            self.txn["acked"][h] = (name, seq)

    @precondition(lambda self: self.res)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(sorted(self.res)), label="handle")
        self.items[h].release()
        del self.res[h]
        self.ended[h] = self.items[h]

    @precondition(lambda self: self.ended)
    @rule(data=st.data(), do_ack=st.booleans())
    def end_ended(self, data: st.DataObject, do_ack: bool) -> None:
        h = data.draw(st.sampled_from(sorted(self.ended)), label="handle")
        item = self.ended[h]
        with pytest.raises(pyqstore.NotReservedError):
            if do_ack:
                item.ack()
            else:
                item.release()

    # ------------------------------------------------------- transactions

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        self.c.begin()
        self.txn = {
            "queues": {n: list(v) for n, v in self.queues.items()},
            "new_res": set(),
            "acked": {},
            "seq0": self.seq + 1,
        }

    @precondition(lambda self: self.txn is not None)
    @rule()
    def commit(self) -> None:
        self.c.commit()
        self.txn = None

    @precondition(lambda self: self.txn is not None)
    @rule()
    def abort(self) -> None:
        self.c.abort()
        self.model_abort()

    @rule()
    def reopen(self) -> None:
        if self.res:
            # An Item of a closed casket cannot be acknowledged any more.
            h = min(self.res)
            self.c.close()
            with pytest.raises(pyqstore.ClosedError):
                self.items[h].ack()
        else:
            self.c.close()
        if self.txn is not None:  # close abandons the transaction
            self.model_abort()
        # Every reservation ends; the items are available again in place.
        self.res.clear()
        self.items.clear()
        self.ended.clear()
        self.c = pyqstore.open(self.path, "w", sync=False, **self.OPEN_KW)
        self.qs = {n: self.c.queue(n) for n in NAMES}

    # --------------------------------------------------------- invariants

    @invariant()
    def lengths(self) -> None:
        for n in NAMES:
            assert len(self.qs[n]) == len(self.available(n)), n

    @invariant()
    def listing(self) -> None:
        expected = sorted((n for n in NAMES if self.queues[n]), key=lambda n: n.encode())
        assert self.c.queues() == expected
        assert self.c.queue_lengths() == {n: len(self.available(n)) for n in expected}

    @invariant()
    def user_namespace_empty(self) -> None:
        assert len(self.c) == 0
        assert list(self.c.items()) == []


class SmallCacheQueueMachine(QueueMachine):
    """The same with a tiny page cache (big transactions spill) and a small
    checkpoint threshold (frequent checkpoints)."""

    OPEN_KW = {"cache_size": 64 * 4096, "checkpoint_size": 64 * 1024}


_settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
QueueMachine.TestCase.settings = _settings
SmallCacheQueueMachine.TestCase.settings = _settings
TestQueueModel = QueueMachine.TestCase
TestQueueModelSmallCache = SmallCacheQueueMachine.TestCase
