"""Seed 004's experiment (Wide Finder on a queue): a real log file read in
blocks of whole lines, producer threads putting the blocks on a queue of
the backend, consumer threads taking them and counting the articles
fetched; beside it the seed's baseline, one thread looping over the file
(widefinder.count_baseline).  Threads x block size, for each counting
strategy of the seed:

  mapreduce  each consumer counts into its own Counter; merged at the end
  locked     every hit goes into one shared Counter under a lock (the
             seed's refs)
  agent      each consumer sends a block's hits, as one queue item, to an
             aggregator thread through the backend's queue "hits" (the
             seed's agents)

Every cell's counts must equal the baseline's, key for key.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from typing import Any, Callable, Optional

from . import backends as bk
from . import widefinder as wf
from .experiments import Progress, Workdir, _quiet, backend_report, machine

STRATEGIES = ("mapreduce", "locked", "agent")
SEED_BLOCKS = (8 << 20, 16 << 20, 32 << 20, 64 << 20)    # the seed's 8M to 64M
LOG, HITS = "log", "hits"
END = b""           # the item that tells one consumer the blocks are all taken
_POLL = 0.0005      # seconds a consumer waits when the queue is empty


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.at, self.seconds = time.monotonic() + seconds, seconds

    def check(self, who: str) -> None:
        if time.monotonic() > self.at:
            raise TimeoutError(f"drain: {who} not done within {self.seconds:.0f} s")


def _take(store: bk.Store, name: str, deadline: _Deadline, who: str) -> bytes:
    """The next item of queue name, waiting (polling) for one."""
    while True:
        got = store.qget_many(name, 1)
        if got:
            return got[0]
        deadline.check(who)
        time.sleep(_POLL)


def _produce(store: bk.Store, path: str, block: int, start: int, stop: int) -> int:
    n = 0
    for b in wf.blocks(path, block, start, stop):
        store.qput(LOG, b)
        n += 1
    return n


def _consume(store: bk.Store, strategy: str, add_shared: Callable[[str], None],
             deadline: _Deadline) -> Counter[str]:
    """Takes blocks until an END; mapreduce returns its counts, locked adds
    every hit through add_shared, agent sends each block's hits to HITS and
    an END there when done."""
    mine: Counter[str] = Counter()
    while True:
        b = _take(store, LOG, deadline, "a consumer")
        if b == END:
            break
        if strategy == "mapreduce":
            mine.update(wf.count_block(b))
        elif strategy == "locked":
            for k in wf.KEY.findall(b):
                add_shared(k.decode())
        else:
            hits = wf.KEY.findall(b)
            if hits:
                store.qput(HITS, b"\n".join(hits))
    if strategy == "agent":
        store.qput(HITS, END)
    return mine


def _aggregate(store: bk.Store, consumers: int, deadline: _Deadline) -> Counter[str]:
    """The agent: counts the hits arriving on HITS until every consumer
    has sent its END."""
    total: Counter[str] = Counter()
    done = 0
    while done < consumers:
        item = _take(store, HITS, deadline, "the aggregator")
        if item == END:
            done += 1
        else:
            total.update(k.decode() for k in item.split(b"\n"))
    return total


def drain_cell(backend: bk.Backend, session: bk.Session, path: str, block: int,
               producers: int, consumers: int, strategy: str, wd: Workdir,
               timeout: float) -> tuple[float, Counter[str]]:
    """One run on a fresh store: (seconds from the producers' start to the
    last consumer's end, the counts).  Every thread has its own handle
    (Store.connect: the product's way for threads), the main thread puts
    one END per consumer once the producers are done."""
    d = wd.fresh()
    first = bk.open_store(backend, d, False, session)
    handles = [first]
    threads: list[threading.Thread] = []
    try:
        for _ in range(producers + consumers + (strategy == "agent")):
            handles.append(first.connect())
        prod_h, cons_h = handles[1:1 + producers], handles[1 + producers:1 + producers + consumers]
        total: Counter[str] = Counter()
        lock = threading.Lock()
        errors: list[BaseException] = []
        deadline = _Deadline(timeout)

        def add_locked(k: str) -> None:
            with lock:
                total[k] += 1

        def run(work: Callable[[], Any], merge: bool) -> None:
            try:
                out = work()
                if merge:
                    with lock:
                        total.update(out)
            except BaseException as e:      # reported after the join
                errors.append(e)
                deadline.at = 0             # the others give up at their next empty poll

        prod = [threading.Thread(target=run, args=(
            lambda h=h, r=r: _produce(h, path, block, *r), False), daemon=True)
            for h, r in zip(prod_h, wf.split(path, producers))]
        cons = [threading.Thread(target=run, args=(
            lambda h=h: _consume(h, strategy, add_locked, deadline), True), daemon=True)
            for h in cons_h]
        if strategy == "agent":
            cons.append(threading.Thread(target=run, args=(
                lambda: _aggregate(handles[-1], consumers, deadline), True), daemon=True))
        threads = prod + cons
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in prod:
            t.join(max(0.0, deadline.at - time.monotonic()))
        if not errors and not any(t.is_alive() for t in prod):
            for _ in range(consumers):
                first.qput(LOG, END)
        else:
            deadline.at = 0
        for t in cons:
            t.join(max(0.0, deadline.at - time.monotonic()) + 1)
        dt = time.perf_counter() - t0
        if errors:
            raise errors[0]
        if any(t.is_alive() for t in threads):
            raise TimeoutError(f"drain: threads still running after {timeout:.0f} s")
        return dt, total
    finally:
        # a handle closed under a thread still in the library can crash it
        if not any(t.is_alive() for t in threads):
            for h in {id(h): h for h in handles}.values():
                h.close()
            shutil.rmtree(d, ignore_errors=True)


def _extremes(cells: list[dict[str, Any]]) -> dict[str, Any]:
    best = min(cells, key=lambda c: c["seconds"])
    worst = max(cells, key=lambda c: c["seconds"])
    return {"best": best, "worst": worst, "worst_over_best": worst["seconds"] / best["seconds"]}


def drain(backends: list[bk.Backend], consumers: list[int], blocks: list[int],
          strategies: list[str], producers: int = 1, size: int = 1 << 30,
          log: Optional[str] = None, seed: int = 4, base: Optional[str] = None,
          progress: Progress = _quiet, timeout: Optional[float] = None) -> dict[str, Any]:
    """Seed 004 on every usable queue backend: threads x block size (bytes)
    for each strategy, and the baseline at each block size, over the log
    file `log`, or one of `size` bytes generated (widefinder.generate, with
    seed) in the scratch directory.  Best and worst cell per backend and
    strategy, and over all."""
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise ValueError(f"strategies are {', '.join(STRATEGIES)}; not {', '.join(bad)}")
    if not consumers or not blocks or min(consumers + blocks) < 1 or producers < 1:
        raise ValueError("consumers, producers and block sizes must be positive")
    usable, report = backend_report(backends, "queue")
    if max(consumers) > 1:
        for be in list(usable):
            if be.no_concurrent_consumers:
                usable.remove(be)
                report[be.name] = {"available": False, "reason": "cannot have concurrent "
                                   f"consumers: {be.no_concurrent_consumers}"}
    cells: list[dict[str, Any]] = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        path = log or os.path.join(wd.root, "access.log")
        lines = wf.generate(path, size, seed) if log is None else None
        nbytes = os.path.getsize(path)
        if timeout is None:
            timeout = 120 + nbytes / (256 << 10)   # no reading here is slower than 256 KiB/s
        baseline, want = wf.timed_baselines(path, blocks, progress)
        for be in usable:
            try:
                with be.session(False) as session:
                    for s in strategies:
                        for n in consumers:
                            for b in blocks:
                                progress(f"{be.name} {s} consumers={n} block={b}")
                                dt, got = drain_cell(be, session, path, b, producers, n, s, wd,
                                                     timeout)
                                cells.append({"backend": be.name, "strategy": s,
                                              "consumers": n, "block": b, "seconds": dt,
                                              "mib_per_s": nbytes / dt / (1 << 20),
                                              "correct": got == want})
            except bk.Unsupported as e:
                report[be.name] = {"available": False, "reason": f"cannot do this: {e}"}
                cells = [c for c in cells if c["backend"] != be.name]
    groups = [{"backend": be.name, "strategy": s,
               **_extremes([c for c in cells if c["backend"] == be.name and c["strategy"] == s])}
              for be in usable if any(c["backend"] == be.name for c in cells)
              for s in strategies]
    return {"experiment": "drain", "log": {"path": log, "bytes": nbytes, "lines": lines,
                                           "generated_seed": seed if log is None else None},
            "producers": producers, "consumers": consumers, "blocks": blocks,
            "strategies": strategies, "machine": info, "backends": report,
            "baseline": baseline, "matches": sum(want.values()), "articles": len(want),
            "top10": wf.top(want), "cells": cells, "extremes": groups,
            "overall": _extremes(cells) if cells else None,
            "all_correct": all(c["correct"] for c in cells)}
