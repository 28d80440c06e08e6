"""Stateful property test: dedup keys against a reference model, on a fake
clock.

It extends test_model_order.OrderMachine (puts, publish, get, peek, clear,
reserve, ack, release, delays, priorities, transactions, reopen) with keyed
puts.  The model: ``keys``: queue name -> {key: (seq, put time)} of the
last item stored with each key.  A keyed put is a duplicate when the key is
there and its item is still held by the queue (in ``queues``: available,
reserved or delayed) or ``now < put time + window`` (WINDOW, stored with
each queue's config, so it holds across reopen); a duplicate stores nothing
and returns the item's id.  Repeats within one put_many dedupe the same
way.  An abort restores ``keys`` as they were at begin; a close abandons
the transaction; a reopen keeps what was committed.
"""
from __future__ import annotations

from typing import Optional

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from test_model_order import OrderMachine, delays, priorities
from test_queue_model import NAMES, _settings, names, payloads

WINDOW = {n: w for n, w in zip(NAMES, [0.0, 1.5, 0.25, 3.0])}
dedup_keys = st.one_of(st.none(), st.sampled_from([b"k1", b"k2", b"k3", b"\x00", b"x" * 512]))


class DedupMachine(OrderMachine):
    def __init__(self) -> None:
        super().__init__()
        for n in NAMES:
            self.qs[n] = self.c.queue(n, dedup_window=WINDOW[n])
        self.keys: dict[str, dict[bytes, tuple[int, float]]] = {n: {} for n in NAMES}

    # ----------------------------------------------------------- the model

    def duplicate(self, name: str, key: bytes) -> Optional[int]:
        """The model seq a keyed put of key on name gets back, or None."""
        if key not in self.keys[name]:
            return None
        seq, put = self.keys[name][key]
        held = any(s == seq for s, _ in self.queues[name])
        return seq if held or self.now < put + WINDOW[name] else None

    def store(self, name: str, payload: bytes, key: Optional[bytes], delay, priority) -> int:
        seq = self.new_seq()
        self.queues[name].append((seq, payload))
        self.prio[seq] = priority or 0
        if delay:
            self.delayed[name][seq] = self.now + delay
        if key is not None:
            self.keys[name][key] = (seq, self.now)
        return seq

    def model_abort(self) -> None:
        assert self.txn is not None
        self.keys = self.txn["keys"]
        super().model_abort()

    # --------------------------------------------------------------- rules

    @rule(name=names, payload=payloads, key=dedup_keys, delay=delays, priority=priorities)
    def put_keyed(self, name: str, payload: bytes, key, delay, priority) -> None:
        real_id = self.qs[name].put(payload, delay=delay, priority=priority, key=key)
        dup = None if key is None else self.duplicate(name, key)
        seq = self.store(name, payload, key, delay, priority) if dup is None else dup
        self.learn(seq, real_id)

    @rule(name=names, batch=st.lists(st.tuples(payloads, dedup_keys), max_size=5),
          delay=delays, priority=priorities)
    def put_many_keyed(self, name: str, batch, delay, priority) -> None:
        n = self.qs[name].put_many([p for p, _ in batch], keys=[k for _, k in batch],
                                   delay=delay, priority=priority)
        stored = 0
        for p, k in batch:
            if k is None or self.duplicate(name, k) is None:
                self.store(name, p, k, delay, priority)
                stored += 1
        assert n == stored

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        super().begin()
        assert self.txn is not None
        self.txn["keys"] = {n: dict(d) for n, d in self.keys.items()}


class SmallCacheDedupMachine(DedupMachine):
    """The same with a tiny page cache and frequent checkpoints."""

    OPEN_KW = {"cache_size": 64 * 4096, "checkpoint_size": 64 * 1024}


DedupMachine.TestCase.settings = _settings
SmallCacheDedupMachine.TestCase.settings = _settings
TestDedupModel = DedupMachine.TestCase
TestDedupModelSmallCache = SmallCacheDedupMachine.TestCase
