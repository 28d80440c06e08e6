"""Random small flows (chains, fan-out, fan-in, shared and partitioned
parallel nodes) with injected exceptions, their instances fired in a
random order in this process, against a reference that applies the same
functions item by item: each sink holds exactly the reference's items,
each dead-letter port exactly the items that failed max_deliveries times,
and transient failures change nothing."""
from __future__ import annotations

import collections
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from _flow_layouts import LAYOUTS, Fired
from pyqstore.flow import Flow, IterableSource, QueueSink, names

MAX_DELIVERIES = 3
_seen: set = set()      # items that already failed once (transient failures)


class Affine:
    """x -> (a*x + b) mod 1000; raises for every x with x % bad == 0 (a
    permanent failure), and once for the first x with x % 7 == tag
    (transient)."""

    def __init__(self, name: str, a: int, b: int, bad: int, tag: int) -> None:
        self.name, self.a, self.b, self.bad, self.tag = name, a, b, bad, tag

    def __call__(self, batch):
        for x in batch:
            if self.bad and x % self.bad == 0:
                raise ValueError(f"{self.name} refuses {x}")
            # once per node: once per item would let a batch holding three
            # such items fail three firings in a row and go dead
            if x % 7 == self.tag and self.name not in _seen:
                _seen.add(self.name)
                raise RuntimeError(f"{self.name}: transient on {x}")
        return [(self.a * x + self.b) % 1000 for x in batch]

    def one(self, x):
        return (self.a * x + self.b) % 1000


def identity(x):
    return x


@st.composite
def flows(draw):
    n = draw(st.integers(1, 4))
    nodes = []
    for i in range(n):
        parents = draw(st.lists(st.integers(-1, i - 1), min_size=1, max_size=2, unique=True))
        bad = draw(st.sampled_from([0, 0, 5, 11]))
        nodes.append(dict(
            name=f"n{i}", parents=parents,
            fn=Affine(f"n{i}", draw(st.integers(1, 9)), draw(st.integers(0, 99)), bad,
                      draw(st.integers(-1, 6))),
            # a node with permanent failures takes one item per firing, so which
            # items fail does not depend on how they were batched
            batch=1 if bad else draw(st.integers(1, 5)),
            parallelism=draw(st.integers(1, 2)),
            keyed=draw(st.booleans())))
    items = draw(st.lists(st.integers(0, 999), min_size=0, max_size=40))
    return nodes, items, draw(st.integers(0, 2 ** 32))


def reference(nodes, items):
    out = {-1: list(items)}
    dead = {}
    for i, nd in enumerate(nodes):
        inputs = [x for p in nd["parents"] for x in out[p]]
        bad = nd["fn"].bad
        dead[nd["name"]] = sorted(x for x in inputs if bad and x % bad == 0)
        out[i] = [nd["fn"].one(x) for x in inputs if not (bad and x % bad == 0)]
    children = {p for nd in nodes for p in nd["parents"]}
    sinks = {f"sink{i}": sorted(out[i]) for i in range(-1, len(nodes)) if i not in children}
    return sinks, dead


def build(nodes, items) -> Flow:
    f = Flow("model")
    f.source("src", IterableSource(items), batch=3)
    for nd in nodes:
        f.node(nd["name"], nd["fn"], batch=nd["batch"], parallelism=nd["parallelism"],
               maxsize=1000, max_deliveries=MAX_DELIVERIES)
    children = set()
    for nd in nodes:
        for p in nd["parents"]:
            children.add(p)
            f.edge("src" if p < 0 else nodes[p]["name"], nd["name"],
                   key=identity if nd["keyed"] else None)
    for i in range(-1, len(nodes)):
        if i not in children:
            f.sink(f"sink{i}", QueueSink(f"result/{i}"), maxsize=1000)
            f.edge("src" if i < 0 else nodes[i]["name"], f"sink{i}")
    f.validate()
    return f


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=flows())
def test_random_flows_match_the_sequential_reference(tmp_path_factory, layout, case):
    nodes, items, seed = case
    _seen.clear()
    f = build(nodes, items)
    rnd = random.Random(seed)
    fired = Fired(str(tmp_path_factory.mktemp("flow")), f, layout, max_batches=rnd.randint(1, 4))
    try:
        insts = list(fired.insts.values())
        for _ in range(20000):
            live = [x for x in insts if not x.done]
            if not live:
                break
            if rnd.random() < 0.5 and fired.deliver(rnd):
                continue
            x = rnd.choice(live)
            if not fired.has_room(x):
                fired.deliver(rnd)
                continue
            if not x.fire(timeout=0):
                x.try_finish()
        assert all(x.done for x in insts), "the flow did not finish"
        sinks, dead = reference(nodes, items)
        for name, want in sinks.items():
            i = name[len("sink"):]
            got = fired.queue(name, 0, f"result/{i}").get_many(10 ** 6)
            assert sorted(got) == want, name
        for nd in nodes:
            held = fired.dead(nd["name"])
            assert sorted(h.payload for h in held) == dead[nd["name"]], nd["name"]
            for h in held:
                assert h.reason.startswith(f"ValueError: {nd['name']} refuses")
        for db in fired.caskets.values():
            for q, n in db.queue_lengths().items():
                assert not q.startswith(("flow/in/", "flow/outbox/")) or n == 0, (q, n)
    finally:
        fired.close()
