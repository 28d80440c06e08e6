"""qstore-bench flow ray: the 3-stage chain on Ray, pyqstore's flow against
the chain a Ray user writes today, and what a node kill costs.

Both chains are source -> identity -> tally (flowbench's) with a trivial function over
36-byte items in batches of 1000, every actor pinned to one of two worker
nodes of a :class:`pyqstore.flow.raycluster.LocalCluster` (this machine,
loopback only).  The baseline's actors hand each batch to the next by an
actor call and keep nothing: no store, no durability, what is in flight
when a node dies is gone.  The flow's nodes each have their own casket and
the exactly-once edges between them (docs/DESIGN.md "Flows on Ray").

The kill: while the flow runs, the worker node hosting the middle stage is
removed and a replacement offering its volume added; the tally's count,
sampled every ``sample`` seconds, gives the rate before, the lowest rate
after, and the time until the rate is back to half of the rate before.

Run it only in a network namespace with loopback alone; the command
(cli_ray.py) re-executes itself there.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from typing import Any, Optional

from . import flowbench as fb
from .experiments import Workdir, machine

#: where the chain's nodes live: the source and the tally on the worker
#: offering volume a, the middle stage on the one offering b (the one the
#: kill replaces), so every batch crosses between the two workers twice
VOLUMES = {"source": "a", "map": "b", "tally": "a"}


# ------------------------------------------------------------------ baseline

def _baseline_actors() -> tuple[Any, Any, Any]:
    import ray  # type: ignore[import-not-found, unused-ignore]

    @ray.remote(num_cpus=0)
    class Sink:
        def __init__(self) -> None:
            self.count = 0

        def push(self, batch: list[bytes]) -> int:
            self.count += len(batch)
            return self.count

        def seen(self) -> int:
            return self.count

    @ray.remote(num_cpus=0)
    class Stage:
        def __init__(self, sink: Any) -> None:
            self.sink = sink

        def push(self, batch: list[bytes]) -> int:
            return int(ray.get(self.sink.push.remote(fb.identity(batch))))

    @ray.remote(num_cpus=0)
    class Source:
        def __init__(self, stage: Any) -> None:
            self.stage = stage

        def run(self, n: int, size: int, window: int) -> int:
            # at most window batches in flight: the backpressure a Ray user
            # adds by hand so that a slow sink does not fill the object store
            pending: list[Any] = []
            batch: list[bytes] = []
            for item in fb.Items(n):
                batch.append(item)
                if len(batch) == size:
                    pending.append(self.stage.push.remote(batch))
                    batch = []
                    if len(pending) >= window:
                        _, pending = ray.wait(pending, num_returns=1)
            if batch:
                pending.append(self.stage.push.remote(batch))
            ray.get(pending)
            return n

    return Source, Stage, Sink


def run_baseline(items: int, batch: int, window: int = 16) -> dict[str, Any]:
    """The in-memory chain over ``items`` items in batches of ``batch``;
    its actors on the workers offering vol:a (source, sink) and vol:b
    (stage), as the flow's are."""
    import ray  # type: ignore[import-not-found, unused-ignore]

    from pyqstore.flow.rayrunner import VOLUME_SHARE

    Source, Stage, Sink = _baseline_actors()
    sink = Sink.options(resources={"vol:a": VOLUME_SHARE}).remote()
    stage = Stage.options(resources={"vol:b": VOLUME_SHARE}).remote(sink)
    source = Source.options(resources={"vol:a": VOLUME_SHARE}).remote(stage)
    ray.get([sink.seen.remote(), stage.push.remote([]), source.__ray_ready__.remote()])
    t = time.perf_counter()
    ray.get(source.run.remote(items, batch, window))
    elapsed = time.perf_counter() - t
    seen = ray.get(sink.seen.remote())
    for a in (source, stage, sink):
        ray.kill(a)
    if seen != items:
        raise RuntimeError(f"the in-memory chain delivered {seen} of {items} items")
    return {"items": items, "seconds": elapsed, "items_per_s": items / elapsed}


# ---------------------------------------------------------------------- flow

def run_flow(wd: Any, items: int, batch: int, *, sync: bool = True, name: str = "raybench",
             kill_at: Optional[float] = None, cluster: Any = None,
             sample: float = 0.2) -> dict[str, Any]:
    """flowbench's chain (source -> identity -> tally) as a flow on Ray
    over ``items`` items, in a fresh directory of wd.  With kill_at (a
    fraction of the items), the worker hosting the middle stage is
    replaced once the tally has seen that many, the source holding at
    twice that until the worker is gone; the result then holds the rate
    samples and the dip.  AssertionError unless each item arrived
    once (the tally's count and sum)."""
    from pyqstore.flow import rayrunner

    d = wd.fresh()
    stats = os.path.join(d, "stats")
    os.mkdir(stats)
    # the kill run's source holds at twice the kill's fraction until the
    # worker is gone: however fast the machine, the kill lands mid-run
    gate = os.path.join(d, "killed")
    hold: Optional[tuple[int, str]] = None
    kill_when = math.inf
    if kill_at is not None:
        hold = (min(items, int(2 * kill_at * items)), gate)
        kill_when = min(kill_at * items, hold[0])
    run = rayrunner.start(fb.chain_flow(items, batch, stats, hold=hold), os.path.join(d, "run"),
                          name=name, volumes=VOLUMES, sync=sync)
    samples: list[tuple[float, int]] = []
    killed: Optional[float] = None
    joined = 0.0
    t0 = time.perf_counter()
    try:
        while True:
            p = run.progress()
            now = time.perf_counter() - t0
            seen = p["tally"].items_in
            samples.append((now, seen))
            if p["tally"].finished:
                break
            if killed is None and seen >= kill_when:
                killed = now
                joined = cluster.replace(VOLUMES["map"], removed=lambda: open(gate, "wb").close())
            if now > fb.RUN_TIMEOUT:
                raise RuntimeError(f"the chain on Ray did not finish within {fb.RUN_TIMEOUT:.0f} s")
            time.sleep(sample)
        elapsed = time.perf_counter() - t0
    finally:
        run.shutdown()
    with open(os.path.join(stats, "tally.json")) as f:
        got = json.load(f)
    if (got["count"], got["sum"]) != (items, items * (items - 1) // 2):
        raise AssertionError(f"the chain on Ray delivered {got['count']} items (sum {got['sum']}), "
                             f"not {items} (sum {items * (items - 1) // 2})")
    # the actors' starts are in elapsed; the baseline's are not (it starts
    # its clock once its actors answer), so the ratio uses the flowing time:
    # the source's first firing to the tally's last (flowbench's clocks)
    flowing = fb._flowing(fb.read_clocks(stats), "source", "tally")
    out: dict[str, Any] = {"items": items, "seconds": elapsed, "items_per_s": items / elapsed,
                           "flowing_s": flowing, "flowing_items_per_s": items / flowing}
    if kill_at is not None:
        if killed is None:
            raise RuntimeError("the held source let the kill run finish before the kill")
        out.update(kill_cost(samples, killed), replacement_join_s=joined)
    return out


def kill_cost(samples: list[tuple[float, int]], killed: float) -> dict[str, Any]:
    """From (seconds, items seen) samples and the moment of the kill: the
    median rate before it, the lowest rate after it, and the seconds from
    the kill until a sample's rate is at least half the rate before (None:
    it never was, before the end)."""
    rates = [(t1, (n1 - n0) / (t1 - t0))
             for (t0, n0), (t1, n1) in zip(samples, samples[1:]) if t1 > t0]
    before = [r for t, r in rates if t <= killed] or [0.0]
    after = [(t, r) for t, r in rates if t > killed]
    rate_before = statistics.median(before)
    lowest = min((r for _, r in after), default=rate_before)
    back = next((t - killed for t, r in after if r >= rate_before / 2), None)
    return {"rate_before": rate_before, "lowest_after": lowest, "recovery_s": back,
            "killed_at": killed, "samples": samples}


def measure(items: int, batch: int, kill_items: int, *, sync: bool = True, reps: int = 1,
            base: Optional[str] = None) -> dict[str, Any]:
    """Everything in one cluster (a head and two workers on this machine,
    loopback only): the baseline and the flow ``reps`` times each,
    alternating, best kept; then one flow run of kill_items items with the
    middle stage's worker replaced at 30 %."""
    import ray  # type: ignore[import-not-found, unused-ignore]

    from pyqstore.flow.raycluster import LocalCluster

    with Workdir(base) as wd, LocalCluster([("a",), ("b",)]) as cluster:
        info = machine(wd.root)
        ray.init(address=cluster.address, namespace="qstore-bench", log_to_driver=False)
        baseline, flows = [], []
        for r in range(reps):
            baseline.append(run_baseline(items, batch))
            flows.append(run_flow(wd, items, batch, sync=sync, name=f"raybench-{r}"))
        kill = run_flow(wd, kill_items, batch, sync=sync, name="raybench-kill", kill_at=0.3,
                        cluster=cluster)
    best_base = max(baseline, key=lambda x: x["items_per_s"])
    best_flow = max(flows, key=lambda x: x["flowing_items_per_s"])
    ratio = best_flow["flowing_items_per_s"] / best_base["items_per_s"]
    # each round's flow against the baseline run beside it: the spread
    # that the best-of ratio hides
    rounds = [f["flowing_items_per_s"] / b["items_per_s"] for b, f in zip(baseline, flows)]
    return {"experiment": "flow-ray", "items": items, "item_bytes": fb.ITEM_SIZE,
            "batch": batch, "sync": sync, "reps": reps, "machine": info,
            "baseline": best_base, "flow": best_flow, "ratio": ratio, "required_ratio": 0.5,
            "ok": ratio >= 0.5, "round_ratios": rounds, "kill": kill}
