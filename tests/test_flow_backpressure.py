"""Backpressure with the local runner: a slow sink behind bounded queues
(maxsize 1000) keeps every queue within its bound while the flow runs, and
the node processes' memory flat, since a producer waits for room instead of
piling items up."""
from __future__ import annotations

import threading
import time

from pyqstore.flow import CallbackSink, Flow, IterableSource, Runner
from pyqstore.flow.status import status

ITEMS = 30000
BOUND = 1000
MiB = 1 << 20


def plus_one(batch):
    return [x + 1 for x in batch]


def slow_sink(batch_id, items):
    time.sleep(0.02)        # about 5,000 items/s at batches of 100


def rss(pid: int):
    """The resident memory of process pid, None once it ended (a zombie
    has no VmRSS)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return None


def test_a_slow_sink_keeps_every_queue_within_its_bound_and_memory_flat(tmp_path):
    f = Flow("backpressure")
    f.source("src", IterableSource(range(ITEMS)), batch=500)
    f.node("map", plus_one, parallelism=2, batch=200, maxsize=BOUND)
    f.sink("sink", CallbackSink(slow_sink), batch=100, maxsize=BOUND)
    f.edge("src", "map")
    f.edge("map", "sink")
    run = str(tmp_path / "run")
    runner = Runner(f, run, display=None)
    result: list = []
    t = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    t.start()
    depths: dict[str, list[int]] = {"map": [], "sink": []}
    memory: dict[tuple[str, int], list[int]] = {}
    try:
        end = time.monotonic() + 120
        while t.is_alive() and time.monotonic() < end:
            time.sleep(0.1)
            try:
                st = status(run, with_state=False)
            except Exception:       # the runner has not written its topology yet
                continue
            if st.finished:
                break
            for name in depths:
                for p in st.nodes[name].ports:
                    depths[name].append(p.available + p.reserved + p.delayed)
            if max(depths["sink"], default=0) >= BOUND // 2:   # backpressure reached
                for key, pid in runner.pids().items():
                    m = rss(pid)
                    if m is not None:
                        memory.setdefault(key, []).append(m)
        t.join(120)
    finally:
        runner.stop()
        t.join(30)
    assert not t.is_alive() and result[0].finished
    assert len(depths["sink"]) >= 20, "too few looks at the running flow"
    assert max(depths["map"]) <= BOUND and max(depths["sink"]) <= BOUND, depths
    # the sink was the bottleneck: its queue stood near its bound
    assert sum(1 for d in depths["sink"] if d >= BOUND - 200) >= 5, depths["sink"]
    assert set(memory) >= {("src", 0), ("map", 0), ("map", 1), ("sink", 0)}
    for key, samples in memory.items():
        assert len(samples) >= 5, (key, samples)
        # after the first look: growth bounded (no item piles up in memory);
        # a process holding ITEMS items would grow by more than this
        assert max(samples) - samples[0] <= 16 * MiB, (key, [s // 1024 for s in samples])
