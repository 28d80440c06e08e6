"""The flow the Ray tests run, in a module of its own so that the test and
a driver in a subprocess build the same one; Ray's workers do not have
tests/ray on their path, so the module travels by value
(:func:`by_value`)."""
from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from typing import Any, Optional

from pyqstore.flow import Flow, IterableSource, QueueSink

KEYS = 37
VOLUMES = {"source": "a", "map": "a", "reduce": "b", "sink": "a"}


def by_value() -> None:
    """Pickle this module's functions by value for Ray's workers."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def key_of(pair: tuple[int, int]) -> int:
    return pair[0]


def to_pair(batch: list[int]) -> list[tuple[int, int]]:
    time.sleep(0.005)
    return [(x % KEYS, x) for x in batch]


def held_pairs(hold: str, start: int, batch: list[int]) -> list[tuple[int, int]]:
    """to_pair, but a batch reaching item start waits while the file hold
    exists: the test, not the machine's speed, decides that the stream is
    still running when it kills or replaces something."""
    while batch and batch[-1] >= start and os.path.exists(hold):
        time.sleep(0.01)
    return to_pair(batch)


class SumByKey:
    """The reducer: per key the count and the sum of its values, as state
    in the instance's casket, emitted when the input is exhausted."""

    def step(self, batch: list[tuple[int, int]], ctx: Any) -> None:
        for k, v in batch:
            n, s = ctx.state.get(str(k), (0, 0))
            ctx.state[str(k)] = (n + 1, s + v)

    def finish(self, ctx: Any) -> list[tuple[int, int, int]]:
        return [(int(k), *ctx.state[k]) for k in ctx.state]


def flow(n: int, name: str, hold: Optional[str] = None) -> Flow:
    """source -> map x2 -> reduce x2 (partitioned by key) -> sink; with
    hold, the items from n // 2 on wait in the map while that file exists."""
    f = Flow(name)
    f.source("source", IterableSource(range(n)), batch=50)
    work = to_pair if hold is None else functools.partial(held_pairs, hold, n // 2)
    f.node("map", work, parallelism=2, batch=50, maxsize=2000)
    f.node("reduce", SumByKey, parallelism=2, batch=100, maxsize=2000)
    f.sink("sink", QueueSink("out"), batch=100)
    f.edge("source", "map")
    f.edge("map", "reduce", key=key_of)
    f.edge("reduce", "sink")
    return f


def reference(n: int) -> dict[int, tuple[int, int]]:
    """The sequential answer: per key its count and sum."""
    count: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for x in range(n):
        count[x % KEYS] += 1
        total[x % KEYS] += x
    return {k: (count[k], total[k]) for k in count}


def result(directory: str) -> list[tuple[int, int, int]]:
    """What the sink put in its casket's queue, every item once."""
    import os

    import pyqstore
    from pyqstore.flow import names

    path = os.path.join(directory, VOLUMES["sink"], names.node_casket("sink", 0))
    with pyqstore.open(path, "r") as c:
        return [tuple(x) for x in c.queue("out", "pickle").iter()]
