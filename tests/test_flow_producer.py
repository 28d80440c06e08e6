"""A put-driven source: the application puts numbered batches into a running
flow from other processes, each applied exactly once across the kill of a
producer, and ends the stream with Producer.end; bad uses are clear errors."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import pyqstore
from pyqstore.flow import Flow, Producer, PutSource, QueueSink, Runner, Verdict
from pyqstore.flow import names
from pyqstore.flow.layout import TOPOLOGY, layout_of, read_topology
from pyqstore.flow.runner import LAYOUTS
from pyqstore.flow.status import status

BATCHES = 300
PER_BATCH = 10

# A producer process: resumes after its mark, but first puts the two
# batches before it again (what an application that does not trust its
# last answers does); each batch is deterministic from its number.
PRODUCER = """
import sys, time
from pyqstore.flow import Producer, Verdict
directory, name, batches, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with Producer(directory, "in", name) as p:
    start = max(1, p.mark - 1)
    for seq in range(start, batches + 1):
        items = [(name, seq, i) for i in range(per)]
        v = p.put(items, seq)
        assert v in (Verdict.ACCEPTED, Verdict.DUPLICATE), v
        print(seq, v.value, flush=True)
"""


def tag(batch):
    return [(name, seq, i, "seen") for name, seq, i in batch]


def put_flow(maxsize: int = 50) -> Flow:
    f = Flow("fed")
    f.source("in", PutSource(maxsize=maxsize), batch=20)
    f.node("tag", tag, batch=20, maxsize=100)
    f.sink("out", QueueSink("result"), batch=50)
    f.edge("in", "tag")
    f.edge("tag", "out")
    return f


def start_run(directory: str, flow: Flow, layout: str = "per-node"):
    runner = Runner(flow, directory, display=None, layout=layout)
    result: list = []
    t = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    t.start()
    end = time.monotonic() + 30
    while not os.path.exists(os.path.join(directory, TOPOLOGY)):
        assert time.monotonic() < end, "the runner wrote no topology"
        time.sleep(0.02)
    return runner, t, result


def casket_of(directory: str, node: str) -> str:
    """The casket holding instance 0 of node's records (a source's marks,
    a QueueSink's queue) in the run's layout."""
    return os.path.join(directory, layout_of(read_topology(directory)).records(node, 0)[0])


def spawn_producer(directory: str, name: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", PRODUCER, directory, name, str(BATCHES),
                             str(PER_BATCH)], env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_producers_in_other_processes_put_exactly_once_across_their_kills(tmp_path, layout):
    directory = str(tmp_path / "run")
    runner, t, result = start_run(directory, put_flow(), layout)
    rnd = random.Random(14)
    kills = 0
    db = None

    def mark(name: str) -> int:
        raw = db.get(names.producer_mark("in", name))
        return int.from_bytes(raw, "big") if raw else 0
    try:
        db = pyqstore.open(casket_of(directory, "in"), "r")
        procs = {name: spawn_producer(directory, name) for name in ("a", "b")}
        # each producer is killed once its mark moved some batches past
        # where it stood when it started: mid-stream, maybe mid-put
        kill_at = {name: rnd.randint(5, 60) for name in procs}
        end = time.monotonic() + 120
        while procs and time.monotonic() < end:
            time.sleep(0.005)
            for name, p in list(procs.items()):
                if p.poll() is not None:
                    out = p.stdout.read()
                    if p.returncode == 0:
                        assert out.split()[-1] in ("accepted", "duplicate"), out
                        del procs[name]
                    else:
                        assert p.returncode == -signal.SIGKILL, (p.returncode, out)
                        procs[name] = spawn_producer(directory, name)
                        kill_at[name] = mark(name) + rnd.randint(5, 60)
                elif kills < 8 and mark(name) >= kill_at[name]:
                    p.kill()
                    kills += 1
        assert not procs, "the producers did not finish"
        assert kills >= 4
        assert t.is_alive()                     # the stream is open: the flow goes on
        with Producer(directory, "in", "closer") as p:
            p.end()
        t.join(60)
        assert not t.is_alive(), f"the flow did not finish after end():\n{status(directory)}"
        assert result[0].finished
    finally:
        if db is not None:
            db.close()
        runner.stop()
        t.join(30)
    with pyqstore.open(casket_of(directory, "out")) as db:
        got = db.queue("result", "pickle").get_many(10 ** 6)
    want = sorted((name, seq, i, "seen") for name in ("a", "b")
                  for seq in range(1, BATCHES + 1) for i in range(PER_BATCH))
    assert sorted(got) == want                   # every item, none twice
    for name in ("a", "b"):                      # each producer's items in its order
        mine = [x for x in got if x[0] == name]
        assert mine == sorted(mine)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_producer_numbers_refuses_gaps_and_ends_the_stream(tmp_path, layout):
    directory = str(tmp_path / "run")
    runner, t, result = start_run(directory, put_flow(maxsize=30), layout)
    try:
        with Producer(directory, "in", "p") as p:
            assert p.mark == 0
            assert p.put([("p", 1, 0)]) is Verdict.ACCEPTED           # the next number
            assert p.put([("p", 2, 0)], 2) is Verdict.ACCEPTED
            assert p.put([("p", 2, 0)], 2) is Verdict.DUPLICATE
            assert p.put([("p", 1, 0)], 1) is Verdict.DUPLICATE
            with pytest.raises(pyqstore.InvalidArgumentError,
                               match="batch 4 comes after batch 2: batch 3 is missing"):
                p.put([("p", 4, 0)], 4)
            with pytest.raises(ValueError, match="room for 31 never comes"):
                p.put([("p", 3, i) for i in range(31)], 3)
            assert p.mark == 2
            # more than the port holds at once: the put waits for the flow
            for seq in range(3, 13):
                assert p.put([("p", seq, i) for i in range(30)], seq) is Verdict.ACCEPTED
            p.end()
            p.end()
            with pytest.raises(pyqstore.FlowError, match="the stream was ended"):
                p.put([("p", 13, 0)], 13)
            assert p.mark == 12
        t.join(60)
        assert not t.is_alive() and result[0].finished
    finally:
        runner.stop()
        t.join(30)
    with pyqstore.open(casket_of(directory, "out")) as db:
        got = db.queue("result", "pickle").get_many(10 ** 6)
    assert got == [("p", 1, 0, "seen"), ("p", 2, 0, "seen")] + \
        [("p", seq, i, "seen") for seq in range(3, 13) for i in range(30)]


def test_bad_producers_and_put_sources(tmp_path):
    with pytest.raises(pyqstore.FlowError, match="no flow has run on"):
        Producer(str(tmp_path / "none"), "in", "p")
    directory = str(tmp_path / "run")
    runner, t, result = start_run(directory, put_flow())
    try:
        with pytest.raises(pyqstore.FlowError, match=r"has no put-driven source 'tag' "
                                                     r"\(its put-driven sources: in\)"):
            Producer(directory, "tag", "p")
        with pytest.raises(ValueError, match="non-empty str"):
            Producer(directory, "in", "")
    finally:
        runner.stop()
        t.join(30)
    f = Flow()
    f.source("in", PutSource())
    f.node("m", tag)
    with pytest.raises(pyqstore.FlowError, match=r"'in' is a source; its input port is fed by "
                                                 r"the application"):
        f.edge("m", "in.put")
    with pytest.raises(ValueError, match="maxsize must be an int >= 1"):
        PutSource(maxsize=0)
    with pytest.raises(pyqstore.FlowError, match="batch 200 exceeds its input's maxsize 100"):
        Flow().source("in", PutSource(maxsize=100), batch=200)
