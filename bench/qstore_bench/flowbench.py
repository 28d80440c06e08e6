"""The flow benchmarks (issue 14): pyqstore.flow's local runner on the
seeds' flows, each answer checked, each time read against a plain loop
measured in the same run.

  chain       the runner's cost: source -> identity -> tally, 36-byte
              items in batches, sync on, against one process doing the same
              puts and gets on one casket in a loop; per layout the runner
              accepts
  widefinder  seed 004 as a flow: file source (blocks of whole lines) ->
              parse x P -> counting by the seed's three strategies,
              against widefinder.count_baseline, with where the time goes
  wordcount   seed 001's Hadoop example: map (with its combiner) ->
              partitioned by word -> reduce x R, against collections.Counter
  tune        seed 002's two knobs on a flow: the batch of every firing x
              the work node's parallelism, fitted like `tune`

The nodes below are module-level classes (a spawned node process imports
this module to load them); each keeps a clock in its state (seconds in its
work, firings, the wall time of its first and last firing), committed with
its firings, and writes it to STATS_DIR/NODE.I.clock.json when it finishes, so
the breakdown survives a restart and needs no access to the flow's caskets
(whatever their layout).
"""
from __future__ import annotations

import glob
import itertools
import json
import os
import pickle
import random
import statistics
import threading
import time
from collections import Counter
from typing import Any, Iterator, Optional

import pyqstore
from pyqstore.flow import CallbackSink, FileSource, Flow, IterableSource, Runner
from pyqstore.flow.runner import DEFAULT_LAYOUT, LAYOUTS

from . import widefinder as wf
from .experiments import Progress, Workdir, _quiet, fit_models, machine

ITEM_SIZE = 36
STRATEGIES = ("mapreduce", "refs", "agents")
RUN_TIMEOUT = 600.0      # seconds a run may take before it is stopped and reported


# ---------------------------------------------------------------- the clocks

def _clock_add(ctx: Any, seconds: float, items: int) -> None:
    """Add one firing's work to the instance's clock (state 'clock':
    work seconds, firings, items, first and last wall time)."""
    now = time.time()
    work, firings, n, first, _ = ctx.state.get("clock", (0.0, 0, 0, now - seconds, now))
    ctx.state["clock"] = (work + seconds, firings + 1, n + items, first, now)


def _clock_write(ctx: Any, stats_dir: str) -> None:
    """The clock as STATS_DIR/NODE.I.clock.json (at the instance's finish)."""
    clock = ctx.state.get("clock")
    if clock is None:
        return
    work, firings, n, first, last = clock
    rec = {"node": ctx.name, "instance": ctx.instance, "work_s": work, "firings": firings,
           "items": n, "first": first, "last": last}
    path = os.path.join(stats_dir, f"{ctx.name}.{ctx.instance}.clock.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
    os.replace(path + ".tmp", path)


def read_clocks(stats_dir: str) -> list[dict[str, Any]]:
    out = []
    for p in sorted(glob.glob(os.path.join(stats_dir, "*.clock.json"))):
        with open(p) as f:
            out.append(json.load(f))
    return out


class _Timed:
    """A node whose work is timed: __call__ runs work(batch, ctx) and adds
    its time to the clock; finish writes the clock."""

    stats_dir = ""

    def work(self, batch: list[Any], ctx: Any) -> None:
        raise NotImplementedError

    def __call__(self, batch: list[Any], ctx: Any) -> None:
        t0 = time.perf_counter()
        self.work(batch, ctx)
        _clock_add(ctx, time.perf_counter() - t0, len(batch))

    def result(self, ctx: Any) -> Optional[list[Any]]:
        return None

    def finish(self, ctx: Any) -> Optional[list[Any]]:
        out = self.result(ctx)
        _clock_write(ctx, self.stats_dir)
        return out


# ------------------------------------------------------- sources and sinks

def item(i: int) -> bytes:
    """Item i of the chain: its number in 36 ASCII digits."""
    return b"%036d" % i


class Items:
    """The items 0 .. n-1 (a picklable iterable that gives the same items
    every time, as IterableSource needs; the flow's pickle stays small).
    With hold=(k, path), item k comes only once path exists: a run that
    must be interrupted part way (the Ray kill) cannot finish first on a
    fast machine, whatever its size."""

    def __init__(self, n: int, hold: Optional[tuple[int, str]] = None) -> None:
        self.n = n
        self.hold = hold

    def __iter__(self) -> Iterator[bytes]:
        if self.hold is None or not 0 <= self.hold[0] < self.n:
            return map(item, range(self.n))
        return itertools.chain(map(item, range(self.hold[0])), self._held())

    def _held(self) -> Iterator[bytes]:
        assert self.hold is not None
        at, path = self.hold
        deadline = time.monotonic() + RUN_TIMEOUT
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the source waited {RUN_TIMEOUT:.0f} s at item {at} "
                                   f"for {path}, which never came")
            time.sleep(0.005)
        yield from map(item, range(at, self.n))


class _TimedSource:
    """A source (the class after this one in the bases) with a clock."""

    stats_dir = ""

    def produce(self, ctx: Any, n: int) -> list[Any]:
        t0 = time.perf_counter()
        items: list[Any] = super().produce(ctx, n)  # type: ignore[misc]
        if items:
            _clock_add(ctx, time.perf_counter() - t0, len(items))
        return items

    def finish(self, ctx: Any) -> None:
        _clock_write(ctx, self.stats_dir)


class TimedItems(_TimedSource, IterableSource):
    """IterableSource of Items(n) with a clock."""

    def __init__(self, n: int, stats_dir: str,
                 hold: Optional[tuple[int, str]] = None) -> None:
        super().__init__(Items(n, hold))
        self.stats_dir = stats_dir

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "stats_dir": self.stats_dir}

    def __setstate__(self, d: dict[str, Any]) -> None:
        super().__setstate__(d)
        self.stats_dir = d["stats_dir"]


class TimedFile(_TimedSource, FileSource):
    """FileSource (blocks of whole lines) with a clock."""

    def __init__(self, path: str, block_size: int, stats_dir: str) -> None:
        super().__init__(path, block_size)
        self.stats_dir = stats_dir


class SaveBatches:
    """A sink's callback that writes each batch under its id, once (an id
    repeated after a kill brings the same items): DIR/SEQ.pickle."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, batch_id: tuple[str, int], items: list[Any]) -> None:
        path = os.path.join(self.directory, f"{batch_id[1]:08d}.pickle")
        if os.path.exists(path):
            return
        with open(path + ".tmp", "wb") as f:
            pickle.dump(items, f)
        os.replace(path + ".tmp", path)


def saved_items(directory: str) -> list[Any]:
    out: list[Any] = []
    for p in sorted(glob.glob(os.path.join(directory, "*.pickle"))):
        with open(p, "rb") as f:
            out.extend(pickle.load(f))
    return out


# ------------------------------------------------------------ layouts, runs

def run_flow(flow: Flow, directory: str, sync: bool = True, layout: Optional[str] = None,
             timeout: float = RUN_TIMEOUT) -> tuple[float, Any]:
    """Run flow on directory with the local runner; (wall seconds of the
    whole run, its Summary).  layout: passed to the runner when it takes
    one (None: its default).  RuntimeError when it did not finish within
    timeout seconds (the runner is stopped first; a runner that takes the
    layout only in run() cannot be stopped, so that run has no timeout),
    or when a node failed an item."""
    kw: dict[str, Any] = {} if layout is None else {"layout": layout}
    t0 = time.perf_counter()
    runner = Runner(flow, directory, sync=sync, display=None, **kw)
    timer = threading.Timer(timeout, runner.stop)
    timer.daemon = True
    timer.start()
    try:
        summary = runner.run()
    finally:
        timer.cancel()
    dt = time.perf_counter() - t0
    if not summary.finished:
        raise RuntimeError(f"flow {flow.name!r} did not finish within {timeout:.0f} s")
    for n in summary.nodes.values():
        if n.dead_letters or n.failed:
            raise RuntimeError(f"flow {flow.name!r}: node {n.name} failed {n.failed} items, "
                               f"{n.dead_letters} dead letters")
    return dt, summary


def _run_dirs(wd: Workdir) -> tuple[str, str, str]:
    """A fresh (flow directory, stats directory, sink directory) for one run."""
    d = wd.fresh()
    stats, out = os.path.join(d, "stats"), os.path.join(d, "out")
    os.mkdir(stats)
    os.mkdir(out)
    return os.path.join(d, "run"), stats, out


def _flowing(clocks: list[dict[str, Any]], first_node: str, last_node: str) -> float:
    """Seconds from the first node's first firing to the last node's last
    (the run without its process starts and ends)."""
    t0 = min(float(c["first"]) for c in clocks if c["node"] == first_node)
    t1 = max(float(c["last"]) for c in clocks if c["node"] == last_node)
    return max(t1 - t0, 1e-9)


def breakdown(flow: Flow, summary: Any, clocks: list[dict[str, Any]],
              wall: float) -> list[dict[str, Any]]:
    """Where the time went, per node: its instances, firings, items in and
    out (the runner's counters), seconds in its work (the clocks; None for
    a node without one, the sinks), the span from its first to its last
    firing, the share of its instances' time over the whole run spent in
    the work, and per firing the milliseconds its instances spent inside
    the span but outside the work: the runner's part (reserve, commit,
    waiting for input or room)."""
    rows = []
    for name, s in summary.nodes.items():
        mine = [c for c in clocks if c["node"] == name]
        k = flow.nodes[name].parallelism
        work = sum(c["work_s"] for c in mine) if mine else None
        span = (max(c["last"] for c in mine) - min(c["first"] for c in mine)) if mine else None
        firings = sum(c["firings"] for c in mine)
        outside = None
        if work is not None and span is not None and firings:
            outside = max(span * k - work, 0.0) / firings * 1e3
        rows.append({"node": name, "instances": k, "firings": firings if mine else None,
                     "items_in": s.items_in, "items_out": s.items_out, "work_s": work,
                     "span_s": span, "work_share": None if work is None else work / (wall * k),
                     "outside_ms_per_firing": outside})
    return rows


# ---------------------------------------------------------------- 1. chain

def identity(batch: list[Any]) -> list[Any]:
    """The chain's trivial function."""
    return batch


class Tally(_Timed):
    """The chain's last stage: counts the items and sums their numbers (so
    each of 0 .. n-1 arrived once: count n and sum n(n-1)/2)."""

    def __init__(self, stats_dir: str) -> None:
        self.stats_dir = stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        n, total = ctx.state.get("tally", (0, 0))
        ctx.state["tally"] = (n + len(batch), total + sum(map(int, batch)))

    def finish(self, ctx: Any) -> None:
        n, total = ctx.state.get("tally", (0, 0))
        with open(os.path.join(self.stats_dir, "tally.json"), "w") as f:
            json.dump({"count": n, "sum": total}, f)
        super().finish(ctx)


def chain_flow(n: int, batch: int, stats_dir: str, parallelism: int = 1,
               work: Any = identity, hold: Optional[tuple[int, str]] = None) -> Flow:
    f = Flow("chain")
    f.source("source", TimedItems(n, stats_dir, hold), batch=batch)
    f.node("map", work, parallelism=parallelism, batch=batch, maxsize=max(10 * batch, 10000),
           max_deliveries=0)
    f.node("tally", Tally(stats_dir), outputs=(), batch=batch, maxsize=max(10 * batch, 10000),
           max_deliveries=0)
    f.edge("source", "map")
    f.edge("map", "tally")
    return f


def run_chain(wd: Workdir, n: int, batch: int, sync: bool, layout: Optional[str],
              timeout: float, parallelism: int = 1, work: Any = identity) -> tuple[float, float]:
    """One run of the chain on fresh files: (wall seconds, flowing
    seconds: the source's first firing to the tally's last).
    AssertionError unless each item arrived once (count and sum)."""
    run_dir, stats, _ = _run_dirs(wd)
    wall, _ = run_flow(chain_flow(n, batch, stats, parallelism, work), run_dir, sync, layout,
                       timeout)
    with open(os.path.join(stats, "tally.json")) as f:
        got = json.load(f)
    if (got["count"], got["sum"]) != (n, n * (n - 1) // 2):
        raise AssertionError(f"the chain (layout {layout or DEFAULT_LAYOUT}, parallelism {parallelism}, "
                             f"batch {batch}) delivered {got['count']} items (sum "
                             f"{got['sum']}), not {n} (sum {n * (n - 1) // 2})")
    return wall, _flowing(read_clocks(stats), "source", "tally")


def chain_loop(path: str, n: int, batch: int, sync: bool) -> tuple[float, int, int]:
    """What the chain does, as one process on one casket: per batch, put
    the items on the first queue (a commit), move them to the second in one
    transaction (the trivial function), take them from it (a commit).
    (seconds, items taken, sum of their numbers)."""
    count = total = 0
    with pyqstore.open(path, sync=sync) as c:
        a, b = c.queue("a", "pickle"), c.queue("b", "pickle")
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            a.put_many([item(i) for i in range(start, min(n, start + batch))])
            with c.transaction():
                b.put_many(identity(a.get_many(batch)))
            got = b.get_many(batch)
            count += len(got)
            total += sum(map(int, got))
        dt = time.perf_counter() - t0
    return dt, count, total


def chain(n: int, batch: int, sync: bool, layouts: list[str], reps: int = 1,
          base: Optional[str] = None, progress: Progress = _quiet,
          timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """The runner's cost: the loop and the chain on each layout, reps
    rounds, alternating, each on fresh files; medians.  Every run must
    deliver each item once (count and sum of the item numbers)."""
    report: dict[str, Any] = {}
    usable = []
    for lay in layouts:
        if lay not in LAYOUTS:
            report[lay] = {"available": False,
                           "reason": f"the runner's layouts are {', '.join(LAYOUTS)}"}
        else:
            usable.append(lay)
            report[lay] = {"available": True}
    want_sum = n * (n - 1) // 2
    loop_runs: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {lay: [] for lay in usable}
    with Workdir(base) as wd:
        info = machine(wd.root)
        for r in range(reps):
            progress(f"loop, round {r + 1}")
            d = wd.fresh()
            dt, count, total = chain_loop(os.path.join(d, "loop.qdb"), n, batch, sync)
            if (count, total) != (n, want_sum):
                raise AssertionError(f"the loop took {count} items (sum {total}), not {n}")
            loop_runs.append(dt)
            for lay in list(usable):
                progress(f"chain, layout {lay}, round {r + 1}")
                wall, flowing = run_chain(wd, n, batch, sync, lay, timeout)
                runs[lay].append({"wall_s": wall, "flowing_s": flowing})
    loop_s = statistics.median(loop_runs)
    loop_rate = n / loop_s
    rows: list[dict[str, Any]] = []
    for lay in usable:
        wall = statistics.median(x["wall_s"] for x in runs[lay])
        flowing = statistics.median(x["flowing_s"] for x in runs[lay])
        rows.append({"layout": lay, "wall_s": wall, "items_per_s": n / wall,
                     "flowing_s": flowing, "flowing_items_per_s": n / flowing,
                     "ratio": n / wall / loop_rate, "flowing_ratio": n / flowing / loop_rate,
                     "runs": runs[lay]})
    faster = None
    if len(rows) >= 2:
        ranked = sorted(rows, key=lambda x: -x["items_per_s"])
        faster = {"layout": ranked[0]["layout"], "than": ranked[1]["layout"],
                  "by": ranked[0]["items_per_s"] / ranked[1]["items_per_s"]}
    return {"experiment": "flow-chain", "items": n, "item_bytes": ITEM_SIZE, "batch": batch,
            "sync": sync, "reps": reps, "machine": info, "layouts": report,
            "layouts_found": "pyqstore.flow.runner.LAYOUTS",
            "loop": {"seconds": loop_s, "items_per_s": loop_rate, "runs": loop_runs},
            "chain": rows, "faster": faster, "required_ratio": 0.5, "goal_items_per_s": 1e6,
            "ok": all(x["ratio"] >= 0.5 for x in rows)}


# ------------------------------------------------------------ 2. Wide Finder

class Parse(_Timed):
    """A parser instance: the article fetches of each block, counted by the
    strategy: mapreduce keeps its own counts in its state and sends them
    once, when its input is exhausted; refs sends every hit, one item each,
    to the shared counter; agents sends each block's counts as one
    message to the aggregator."""

    def __init__(self, strategy: str, stats_dir: str) -> None:
        self.strategy, self.stats_dir = strategy, stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        for block in batch:
            if self.strategy == "mapreduce":
                mine = ctx.state.get("counts", Counter())
                mine.update(wf.count_block(block))
                ctx.state["counts"] = mine
            elif self.strategy == "refs":
                ctx.emit("out", *(k.decode() for k in wf.KEY.findall(block)))
            else:
                ctx.emit("out", wf.count_block(block))

    def result(self, ctx: Any) -> Optional[list[Any]]:
        if self.strategy == "mapreduce":
            return [ctx.state.get("counts", Counter())]
        return None


class Merge(_Timed):
    """One owner of the counts, fed Counters (mapreduce: one per parser at
    its end; agents: one per block); emits the total when done."""

    def __init__(self, stats_dir: str) -> None:
        self.stats_dir = stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        total = ctx.state.get("counts", Counter())
        for c in batch:
            total.update(c)
        ctx.state["counts"] = total

    def result(self, ctx: Any) -> Optional[list[Any]]:
        return [dict(ctx.state.get("counts", Counter()))]


class SharedCounter(_Timed):
    """The refs strategy's shared counter: a record per article in its
    state, each hit an item, every firing one transaction updating the
    records its batch touches."""

    def __init__(self, stats_dir: str) -> None:
        self.stats_dir = stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        for k, n in Counter(batch).items():
            ctx.state[k] = ctx.state.get(k, 0) + n

    def result(self, ctx: Any) -> Optional[list[Any]]:
        return [{k: ctx.state[k] for k in ctx.state if k != "clock"}]


def widefinder_flow(path: str, block: int, parsers: int, strategy: str, stats_dir: str,
                    out_dir: str) -> Flow:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategies are {', '.join(STRATEGIES)}, not {strategy!r}")
    f = Flow(f"widefinder-{strategy}")
    f.source("log", TimedFile(path, block, stats_dir), batch=1)
    # a block is up to 64 MiB: one held by each parser (reserved items
    # count) and two waiting
    f.node("parse", Parse(strategy, stats_dir), parallelism=parsers, batch=1,
           maxsize=parsers + 2, max_deliveries=0)
    # refs: one item per hit, at most one hit per line (a line is > 64 bytes)
    hits = block // 64 + 1000
    if strategy == "refs":
        f.node("count", SharedCounter(stats_dir), batch=10000, maxsize=max(hits, 10000) * 2,
               max_deliveries=0)
    else:
        f.node("count", Merge(stats_dir), batch=parsers if strategy == "mapreduce" else 16,
               maxsize=4 * parsers + 16, max_deliveries=0)
    f.sink("result", CallbackSink(SaveBatches(out_dir)), batch=1, max_deliveries=0)
    f.edge("log", "parse")
    f.edge("parse", "count")
    f.edge("count", "result")
    return f


def widefinder(parsers: list[int], blocks: list[int], strategies: list[str],
               size: int = 64 << 20, log: Optional[str] = None, seed: int = 4,
               sync: bool = True, base: Optional[str] = None, progress: Progress = _quiet,
               timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """Seed 004 as a flow: parsers x block size for each strategy, each
    run's answer against the single-threaded loop's (count_baseline),
    best and worst per strategy, and where the time went in each run."""
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise ValueError(f"strategies are {', '.join(STRATEGIES)}; not {', '.join(bad)}")
    if not parsers or not blocks or min(parsers + blocks) < 1:
        raise ValueError("parsers and block sizes must be positive")
    cells: list[dict[str, Any]] = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        path = log or os.path.join(wd.root, "access.log")
        lines = wf.generate(path, size, seed) if log is None else None
        nbytes = os.path.getsize(path)
        if lines is None:
            with open(path, "rb") as fh:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
        baseline, want = wf.timed_baselines(path, blocks, progress)
        for s in strategies:
            for p in parsers:
                for b in blocks:
                    progress(f"{s} parsers={p} block={b}")
                    run_dir, stats, out = _run_dirs(wd)
                    fl = widefinder_flow(path, b, p, s, stats, out)
                    wall, summary = run_flow(fl, run_dir, sync, timeout=timeout)
                    got: Counter[str] = Counter()
                    for c in saved_items(out):
                        got.update(c)
                    clocks = read_clocks(stats)
                    cells.append({"strategy": s, "parsers": p, "block": b, "seconds": wall,
                                  "flowing_s": _flowing(clocks, "log", "count"),
                                  "lines_per_s": lines / wall, "mib_per_s": nbytes / wall / (1 << 20),
                                  "correct": got == want,
                                  "breakdown": breakdown(fl, summary, clocks, wall)})
    extremes = []
    for s in strategies:
        mine = [c for c in cells if c["strategy"] == s]
        best = min(mine, key=lambda c: c["seconds"])
        worst = max(mine, key=lambda c: c["seconds"])
        extremes.append({"strategy": s, "best": best, "worst": worst,
                         "worst_over_best": worst["seconds"] / best["seconds"]})
    return {"experiment": "flow-widefinder", "log": {"path": log, "bytes": nbytes,
                                                     "lines": lines,
                                                     "generated_seed": seed if log is None else None},
            "parsers": parsers, "blocks": blocks, "strategies": strategies, "sync": sync,
            "machine": info, "baseline": baseline, "matches": sum(want.values()),
            "articles": len(want), "top10": wf.top(want), "cells": cells, "extremes": extremes,
            "all_correct": all(c["correct"] for c in cells)}


# -------------------------------------------------------------- 3. WordCount

VOCABULARY = 2000


def generate_text(path: str, size: int, seed: int = 1) -> int:
    """A text of whole lines (1 to 12 words of a Zipf-like vocabulary of
    VOCABULARY words) up to size bytes; the same (size, seed) always
    writes the same bytes.  Returns the number of lines."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(VOCABULARY)]
    weights = [1.0 / (i + 1) for i in range(VOCABULARY)]
    written = n = 0
    with open(path, "wb") as f:
        while True:
            line = (" ".join(rng.choices(words, weights, k=rng.randint(1, 12))) + "\n").encode()
            if written + len(line) > size:
                return n
            f.write(line)
            written += len(line)
            n += 1


def count_words(path: str) -> Counter[str]:
    """The reference: collections.Counter over the file's words."""
    with open(path, "rb") as f:
        return Counter(w.decode() for w in f.read().split())


class Map(_Timed):
    """WordCount's mapper with the reducer as its combiner: one (word, n)
    per word and block."""

    def __init__(self, stats_dir: str) -> None:
        self.stats_dir = stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        c: Counter[bytes] = Counter()
        for block in batch:
            c.update(block.split())
        ctx.emit("out", *((w.decode(), n) for w, n in c.items()))


def word(pair: tuple[str, int]) -> str:
    return pair[0]


class Reduce(_Timed):
    """WordCount's reducer: a record per word in its state; emits (word,
    sum) for each of its words when its input is exhausted."""

    def __init__(self, stats_dir: str) -> None:
        self.stats_dir = stats_dir

    def work(self, batch: list[Any], ctx: Any) -> None:
        c: Counter[str] = Counter()
        for w, n in batch:
            c[w] += n
        for w, n in c.items():
            ctx.state[w] = ctx.state.get(w, 0) + n

    def result(self, ctx: Any) -> Optional[list[Any]]:
        return [(w, ctx.state[w]) for w in ctx.state if w != "clock"]


def wordcount_flow(path: str, block: int, mappers: int, reducers: int, stats_dir: str,
                   out_dir: str) -> Flow:
    f = Flow("wordcount")
    f.source("text", TimedFile(path, block, stats_dir), batch=1)
    f.node("map", Map(stats_dir), parallelism=mappers, batch=1, maxsize=2 * mappers + 1,
           max_deliveries=0)
    f.node("reduce", Reduce(stats_dir), parallelism=reducers, batch=5000,
           maxsize=4 * VOCABULARY * mappers + 5000, max_deliveries=0)
    f.sink("result", CallbackSink(SaveBatches(out_dir)), batch=5000,
           maxsize=2 * VOCABULARY + 5000, max_deliveries=0)
    f.edge("text", "map")
    f.edge("map", "reduce", key=word)        # partitioned by word
    f.edge("reduce", "result")
    return f


def wordcount(mappers: int, reducers: int, block: int, size: int = 16 << 20, seed: int = 1,
              sync: bool = True, reps: int = 1, base: Optional[str] = None,
              progress: Progress = _quiet, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """WordCount on a generated text: the flow's answer against
    collections.Counter over the input (checked, word for word), and its
    time against that one-thread count."""
    with Workdir(base) as wd:
        info = machine(wd.root)
        path = os.path.join(wd.root, "text.txt")
        lines = generate_text(path, size, seed)
        nbytes = os.path.getsize(path)
        ref_times: list[float] = []
        runs: list[dict[str, Any]] = []
        want: Counter[str] = Counter()
        for r in range(reps):
            progress(f"Counter, round {r + 1}")
            t0 = time.perf_counter()
            want = count_words(path)
            ref_times.append(time.perf_counter() - t0)
            progress(f"flow, round {r + 1}")
            run_dir, stats, out = _run_dirs(wd)
            fl = wordcount_flow(path, block, mappers, reducers, stats, out)
            wall, summary = run_flow(fl, run_dir, sync, timeout=timeout)
            pairs = saved_items(out)
            got = Counter(dict(pairs))
            clocks = read_clocks(stats)
            runs.append({"seconds": wall, "flowing_s": _flowing(clocks, "text", "reduce"),
                         "correct": got == want and len(pairs) == len(got),
                         "breakdown": breakdown(fl, summary, clocks, wall)})
    words = sum(want.values())
    wall = statistics.median(x["seconds"] for x in runs)
    ref = statistics.median(ref_times)
    return {"experiment": "flow-wordcount", "bytes": nbytes, "lines": lines, "words": words,
            "distinct": len(want), "mappers": mappers, "reducers": reducers, "block": block,
            "sync": sync, "reps": reps, "machine": info, "seconds": wall,
            "words_per_s": words / wall, "counter_seconds": ref,
            "counter_words_per_s": words / ref, "runs": runs,
            "top10": sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10],
            "correct": all(x["correct"] for x in runs)}


# ------------------------------------------------------------------ 4. tune

class Busy:
    """The tuned node's work: us microseconds of CPU per item (seed 002's
    slow writes), the items passed on."""

    def __init__(self, us: float) -> None:
        self.us = us

    def __call__(self, batch: list[Any]) -> list[Any]:
        end = time.perf_counter() + self.us * 1e-6 * len(batch)
        while time.perf_counter() < end:
            pass
        return batch


def tune(batches: list[int], parallelism: list[int], n: int, work_us: float, sync: bool,
         base: Optional[str] = None, progress: Progress = _quiet,
         fix: Optional[dict[str, float]] = None, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """Seed 002 on a flow: the chain with a work node of work_us per item,
    items/s (first to last firing: process starts left out) over the batch
    of every firing x the work node's parallelism; the seed's models and
    optima (fit_models, with parallelism for writers)."""
    cells = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        for p in parallelism:
            for b in batches:
                progress(f"parallelism={p} batch={b}")
                wall, flowing = run_chain(wd, n, b, sync, None, timeout, p, Busy(work_us))
                cells.append({"parallelism": p, "batch": b, "items_per_s": n / flowing,
                              "wall_s": wall})
    return {"experiment": "flow-tune", "items": n, "work_us": work_us, "sync": sync,
            "machine": info, "cells": cells,
            "models": fit_models(cells, fix, knob="parallelism")}
