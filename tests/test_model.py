"""Stateful property test: a Casket against a reference model.

The model is a dict key -> list of values (duplicates in insertion order),
plus a copy taken at begin() that abort() restores.
"""
from __future__ import annotations

import copy
import itertools
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

import pyqstore

KEYS = [
    b"",
    b"\x00",
    b"a",
    b"ab",
    b"abc",
    b"b",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"k" * 200,
    b"L" * 3000,
    b"L" * 3000 + b"\x00",
    b"M" * 5000,
]

keys = st.sampled_from(KEYS)
small_values = st.binary(max_size=24)
big_values = st.builds(
    lambda n, b: bytes([b]) * n, st.integers(4097, 12000), st.integers(0, 255)
)
values = st.one_of(small_values, small_values, small_values, big_values)


def expected_items(model: dict[bytes, list[bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k in sorted(model) for v in model[k]]


class CasketMachine(RuleBasedStateMachine):
    OPEN_KW: dict = {}

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-model-")
        self.path = os.path.join(self.dir, "m.qs")
        self.c = pyqstore.open(self.path, "n", sync=False, **self.OPEN_KW)
        self.model: dict[bytes, list[bytes]] = {}
        self.snapshot: dict[bytes, list[bytes]] | None = None
        self.steps = 0

    def teardown(self) -> None:
        try:
            self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _add(self, k: bytes, v: bytes) -> None:
        self.model.setdefault(k, []).append(v)

    # ----------------------------------------------------------- writes

    @rule(k=keys, v=values)
    def put(self, k, v):
        self.c.put(k, v)
        self.model[k] = [v]

    @rule(k=keys, v=values)
    def putkeep(self, k, v):
        stored = self.c.putkeep(k, v)
        assert stored == (k not in self.model)
        if stored:
            self.model[k] = [v]

    @rule(k=keys, v=values)
    def putdup(self, k, v):
        self.c.putdup(k, v)
        self._add(k, v)

    @rule(pairs=st.lists(st.tuples(keys, values), max_size=20))
    def putdup_many(self, pairs):
        assert self.c.putdup_many(pairs) == len(pairs)
        for k, v in pairs:
            self._add(k, v)

    @rule(k=keys)
    def out(self, k):
        removed = self.c.out(k)
        assert removed == (k in self.model)
        if removed:
            self.model[k].pop(0)
            if not self.model[k]:
                del self.model[k]

    @rule(k=keys)
    def outlist(self, k):
        assert self.c.outlist(k) == len(self.model.pop(k, []))

    # ------------------------------------------------------------ reads

    @rule(k=keys)
    def get(self, k):
        vs = self.model.get(k)
        assert self.c.get(k) == (vs[0] if vs else None)

    @rule(k=keys)
    def getdup(self, k):
        assert self.c.getdup(k) == self.model.get(k, [])

    @rule(k=keys)
    def count(self, k):
        assert self.c.count(k) == len(self.model.get(k, []))
        assert (k in self.c) == (k in self.model)

    @rule()
    def length(self):
        assert len(self.c) == sum(map(len, self.model.values()))

    @rule(start=st.one_of(st.none(), keys, st.binary(max_size=3)), reverse=st.booleans(),
          limit=st.integers(0, 40))
    def cursor_range(self, start, reverse, limit):
        exp = expected_items(self.model)
        if start is not None:
            if reverse:
                exp = [r for r in exp if r[0] <= start]
            else:
                exp = [r for r in exp if r[0] >= start]
        if reverse:
            exp = exp[::-1]
        it = self.c.items(start, reverse)
        got = list(itertools.islice(it, limit))
        it.close()  # an unfinished iterator releases its cursor
        assert got == exp[:limit]

    @rule(start=st.one_of(st.none(), keys), reverse=st.booleans(), every=st.integers(1, 3))
    def remove_while_iterating(self, start, reverse, every):
        """Walk the keys, removing every `every`-th distinct key as it is
        reached: the walk must still meet every key once, in order."""
        exp = sorted(self.model, reverse=reverse)
        if start is not None:
            exp = [k for k in exp if (k <= start if reverse else k >= start)]
        met = []
        for k in self.c.keys(start, reverse):
            met.append(k)   # each key once, however many values it has
            if len(met) % every == 0:
                assert self.c.outlist(k) == len(self.model.pop(k))
        assert met == exp

    # ----------------------------------------------------- transactions

    @precondition(lambda self: self.snapshot is None)
    @rule()
    def begin(self):
        self.c.begin()
        self.snapshot = copy.deepcopy(self.model)

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def commit(self):
        self.c.commit()
        self.snapshot = None

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def abort(self):
        self.c.abort()
        self.model = self.snapshot
        self.snapshot = None

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def nested_begin_fails(self):
        try:
            self.c.begin()
        except pyqstore.TransactionError:
            pass
        else:
            raise AssertionError("nested begin did not raise")

    @precondition(lambda self: self.snapshot is None)
    @rule(sync=st.booleans())
    def reopen(self, sync):
        if sync:
            self.c.sync()
        self.c.close()
        self.c = pyqstore.open(self.path, "w", sync=False, **self.OPEN_KW)

    # ------------------------------------------------------- invariants

    @invariant()
    def in_transaction_matches(self):
        assert self.c.in_transaction == (self.snapshot is not None)

    @invariant()
    def content_matches(self):
        self.steps += 1
        if self.steps % 5:
            return
        assert list(self.c.items()) == expected_items(self.model)

    def check_full(self):
        assert list(self.c.items()) == expected_items(self.model)
        assert list(self.c.items(reverse=True)) == expected_items(self.model)[::-1]

    @rule()
    def full_check(self):
        self.check_full()
        if self.snapshot is None:
            self.c.check()


class SmallCacheMachine(CasketMachine):
    """The same, with a tiny page cache (transactions spill dirty pages)
    and a tiny checkpoint threshold (checkpoints after most commits)."""

    OPEN_KW = {"cache_size": 16 * 1024, "checkpoint_size": 32 * 1024}


_settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CasketMachine.TestCase.settings = _settings
SmallCacheMachine.TestCase.settings = _settings
TestCasketModel = CasketMachine.TestCase
TestCasketModelSmallCache = SmallCacheMachine.TestCase
