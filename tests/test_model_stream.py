"""Stateful property test: streams with consumer groups against a reference
model (plain lists and dicts, a fake clock passed in as the stream's clock).

The model of one stream:

* ``items``: ``[id, payload, stamp]`` of every item the stream keeps, in id
  order (ids are the real ones append returned, checked to increase);
* ``groups``: group name -> ``{"last": id, "pending": {id: [consumer,
  delivered_at, deliveries]}}``;
* ``first_kept``: every id below it that was the stream's is gone;
* ``maxlen`` / ``max_age`` (0: none), ``last_id``;

with retention applied as qstore.h says (beyond maxlen, older than max_age
at an append or configure, at or below every group's horizon once there is
a group), commit, abort, and close/reopen (which aborts an open
transaction).
"""
from __future__ import annotations

import copy
import os
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore
from test_queue_model import payload_lists, small_payloads

GROUPS = ["g1", "g2", "été"]
CONSUMERS = ["c1", "c2"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-smodel-")
        self.path = os.path.join(self.dir, "s.qs")
        self.clock = Clock()
        self.c = pyqstore.open(self.path, "n", sync=False)
        self.s = self.c.stream("s", clock=self.clock)
        self.m: dict[str, Any] = {"items": [], "groups": {}, "first_kept": 0, "maxlen": 0,
                                  "max_age": 0.0, "last_id": 0}
        self.seen_max = 0          # highest id ever returned (committed or not)
        self.saved: Optional[dict[str, Any]] = None     # the model at begin

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                if self.c.in_transaction:
                    self.c.abort()
                self.c.check()
                self.c.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ the model

    def trim(self, now: float) -> None:
        m = self.m
        groups = m["groups"]
        horizon = min((min(g["pending"]) - 1 if g["pending"] else g["last"]
                       for g in groups.values()), default=None)
        oldest = now - m["max_age"] if now >= 0 and m["max_age"] > 0 else float("-inf")
        removed = 0
        while m["items"]:
            i, _, stamp = m["items"][0]
            if ((m["maxlen"] and len(m["items"]) > m["maxlen"]) or stamp < oldest
                    or (horizon is not None and i <= horizon)):
                m["items"].pop(0)
                removed = i
            else:
                break
        if removed:
            m["first_kept"] = max(m["first_kept"], removed + 1)

    def group(self, name: str) -> pyqstore.Group:
        # an existing group keeps its position whatever start says
        return self.s.group(name, start="last")

    # ---------------------------------------------------------------- rules

    @rule(payloads=payload_lists)
    def append(self, payloads: list[bytes]) -> None:
        if not payloads:
            assert self.s.append_many(payloads) == []
            return
        ids = self.s.append_many(payloads)
        assert len(ids) == len(payloads)
        assert ids[0] > self.m["last_id"] and ids == list(range(ids[0], ids[0] + len(ids)))
        self.m["items"] += [[i, p, self.clock.t] for i, p in zip(ids, payloads)]
        self.m["last_id"] = ids[-1]
        self.trim(self.clock.t)

    @rule(payload=small_payloads)
    def append_one(self, payload: bytes) -> None:
        self.append([payload])

    @rule(name=st.sampled_from(GROUPS), start=st.sampled_from(["first", "last", "id"]),
          data=st.data())
    def create_group(self, name: str, start: str, data: Any) -> None:
        m = self.m
        if name in m["groups"]:
            self.s.group(name, start="first")
            return
        if start == "id":
            choices = [i for i, _, _ in m["items"]] + [m["last_id"] + 1]
            if m["first_kept"] > 1:
                choices.append(m["first_kept"] - 1)
            at = data.draw(st.sampled_from(choices))
            if 0 < at < m["first_kept"]:
                with pytest.raises(pyqstore.TrimmedError):
                    self.s.group(name, start=at)
                return
            self.s.group(name, start=at)
            last = at - 1
        else:
            self.s.group(name, start=start)
            last = (m["first_kept"] - 1 if m["first_kept"] else 0) if start == "first" \
                else m["last_id"]
        m["groups"][name] = {"last": last, "pending": {}}
        self.trim(-1)

    @precondition(lambda self: self.m["groups"])
    @rule(data=st.data(), n=st.integers(1, 5), consumer=st.sampled_from(CONSUMERS))
    def read_group(self, data: Any, n: int, consumer: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.m["groups"])))
        g = self.m["groups"][name]
        new = [it for it in self.m["items"] if it[0] > g["last"]][:n]
        got = self.group(name).read(n, consumer=consumer)
        assert [(x.id, x.payload) for x in got] == [(i, p) for i, p, _ in new]
        for i, _, _ in new:
            g["pending"][i] = [consumer, self.clock.t, 1]
        if new:
            g["last"] = new[-1][0]

    @precondition(lambda self: any(g["pending"] for g in self.m["groups"].values()))
    @rule(data=st.data(), stray=st.booleans())
    def ack(self, data: Any, stray: bool) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, g in self.m["groups"].items()
                                                if g["pending"])))
        g = self.m["groups"][name]
        ids = data.draw(st.lists(st.sampled_from(sorted(g["pending"])), min_size=1, max_size=4))
        if stray:
            # an id the group never read (or acknowledged already)
            ids.append(data.draw(st.sampled_from([self.m["last_id"] + 5] + [
                i for i, _, _ in self.m["items"] if i not in g["pending"]])))
        bad = [i for i in sorted(set(ids)) if i not in g["pending"]]
        if bad:
            with pytest.raises(pyqstore.NotPendingError) as ei:
                self.group(name).ack(ids)
            assert ei.value.id == bad[0]
            return
        self.group(name).ack(ids)
        for i in ids:
            g["pending"].pop(i, None)
        self.trim(-1)

    @precondition(lambda self: self.m["groups"])
    @rule(data=st.data(), min_idle=st.sampled_from([0, 1, 5]), n=st.integers(1, 4),
          consumer=st.sampled_from(CONSUMERS))
    def claim(self, data: Any, min_idle: float, n: int, consumer: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.m["groups"])))
        g = self.m["groups"][name]
        now = self.clock.t
        kept = {i: p for i, p, _ in self.m["items"]}
        want = []
        for i in sorted(g["pending"]):
            if len(want) == n:
                break
            e = g["pending"][i]
            if now - e[1] < min_idle:
                continue
            if i not in kept:
                del g["pending"][i]
                continue
            want.append((i, kept[i]))
            g["pending"][i] = [consumer, now, e[2] + 1]
        got = self.group(name).claim(min_idle, consumer=consumer, n=n)
        assert [(x.id, x.payload) for x in got] == want
        self.trim(-1)

    @rule(maxlen=st.sampled_from([None, 0, 1, 3]), max_age=st.sampled_from([None, 0, 2, 10]))
    def configure(self, maxlen: Optional[int], max_age: Optional[float]) -> None:
        self.s.configure(maxlen, max_age)
        self.m["maxlen"] = maxlen or 0
        self.m["max_age"] = float(max_age or 0)
        self.trim(self.clock.t)

    @rule(dt=st.sampled_from([0.5, 1, 3, 11]))
    def tick(self, dt: float) -> None:
        self.clock.t += dt

    @rule(data=st.data(), n=st.integers(1, 6))
    def replay(self, data: Any, n: int) -> None:
        m = self.m
        starts = [0] + [i for i, _, _ in m["items"]]
        if m["first_kept"] > 1:
            starts.append(m["first_kept"] - 1)
        start = data.draw(st.sampled_from(starts))
        if 0 < start < m["first_kept"]:
            with pytest.raises(pyqstore.TrimmedError):
                self.s.read(start, n)
            return
        want = [(i, p) for i, p, _ in m["items"] if i >= start][:n]
        assert [(x.id, x.payload) for x in self.s.read(start, n)] == want

    @precondition(lambda self: self.saved is None)
    @rule()
    def begin(self) -> None:
        self.c.begin()
        self.saved = copy.deepcopy(self.m)

    @precondition(lambda self: self.saved is not None)
    @rule()
    def commit(self) -> None:
        self.c.commit()
        self.saved = None

    @precondition(lambda self: self.saved is not None)
    @rule()
    def abort(self) -> None:
        self.c.abort()
        self.m, self.saved = self.saved, None

    @rule()
    def reopen(self) -> None:
        self.c.close()
        if self.saved is not None:      # close abandons the transaction
            self.m, self.saved = self.saved, None
        self.c = pyqstore.open(self.path, "w", sync=False)
        self.s = self.c.stream("s", clock=self.clock)

    # ----------------------------------------------------------- invariants

    @invariant()
    def same_items(self) -> None:
        assert len(self.s) == len(self.m["items"])
        got = self.s.read(0, 1000)
        assert [(x.id, x.payload) for x in got] == [(i, p) for i, p, _ in self.m["items"]]

    @invariant()
    def same_pending(self) -> None:
        for name, g in self.m["groups"].items():
            got = self.group(name).pending()
            assert [(e.id, e.consumer, e.delivered_at, e.deliveries) for e in got] == [
                (i, *g["pending"][i]) for i in sorted(g["pending"])], name


StreamMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStreamModel = StreamMachine.TestCase
