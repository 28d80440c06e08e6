"""Exactly once under SIGKILL with the local runner: node processes killed
at random moments are restarted by the supervisor, and the flow's output
equals the sequential reference, no item lost, none twice.  The runner runs
in a thread of the test (so its signal handlers stay unset); the test kills
node processes by the pids it reports."""
from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import pyqstore
from pyqstore.flow import CallbackSink, FileSource, Flow, IterableSource, QueueSink, Runner
from pyqstore.flow import names

# a guard against a hang, not a speed bound: the per-node layout commits
# three transactions per batch on the way (firing, accept, sent), and the
# machine may be busy
DEADLINE = 120.0
LAYOUTS = ("shared", "per-node")
ROUNDS = int(os.environ.get("QS_FLOW_KILL_ROUNDS", "30"))


def words_of(batch, ctx):
    # the combiner: one (word, count) per word and firing
    for w, n in collections.Counter(w for line in batch for w in line.split()).items():
        ctx.emit("out", (w, n))


def word(pair):
    return pair[0]


class Count:
    """The reducer: counts in its state, emitted once its inputs are done."""

    def step(self, batch, ctx):
        for w, n in batch:
            ctx.state[w] = ctx.state.get(w, 0) + n

    def finish(self, ctx):
        return [(w, ctx.state[w]) for w in ctx.state]


class StoreById:
    """A sink outside the flow that writes idempotently: one file per batch
    id, written once (a repeated id must bring the same items, or its first
    write would stand for different ones and the check would see it)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, batch_id, items) -> None:
        edge, seq = batch_id
        path = os.path.join(self.directory, f"{seq:08d}")
        if os.path.exists(path):
            return
        with open(path + ".tmp", "w") as f:
            f.write(repr(items))
        os.replace(path + ".tmp", path)


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    return [" ".join(rnd.choice(vocab) for _ in range(rnd.randint(1, 8))) for _ in range(n)]


class Paced:
    """The lines of text, each after the first `fast` a millisecond late
    until the file gate exists: a run stopped with Ctrl-C is then still
    far from its end however fast the machine (a wait inside the source's
    firing that never ended would keep the stop from coming)."""

    def __init__(self, text: list[str], fast: int, gate: str) -> None:
        self.text, self.fast, self.gate = text, fast, gate

    def __iter__(self):
        for i, line in enumerate(self.text):
            if i >= self.fast and not os.path.exists(self.gate):
                time.sleep(0.001)
            yield line


def wordcount(text: list[str], out: str, gate=None) -> Flow:
    f = Flow("wordcount")
    source = text if gate is None else Paced(text, len(text) // 10, gate)
    f.source("lines", IterableSource(source), batch=10)
    f.node("split", words_of, parallelism=2, batch=10, maxsize=200, max_deliveries=0)
    f.node("count", Count, parallelism=2, batch=50, maxsize=500, max_deliveries=0)
    f.sink("sink", CallbackSink(StoreById(out)), batch=7, max_deliveries=0)
    f.edge("lines", "split")
    f.edge("split", "count", key=word)
    f.edge("count", "sink")
    return f


def run_killing(runner: Runner, rounds: int, rnd: random.Random, targets=None) -> tuple:
    result: list = []
    t = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    t.start()
    end = time.monotonic() + DEADLINE
    kills = []
    while t.is_alive() and len(kills) < rounds and time.monotonic() < end:
        time.sleep(rnd.uniform(0.02, 0.25))
        pids = {k: p for k, p in runner.pids().items() if targets is None or k[0] in targets}
        if not pids:
            continue
        key = rnd.choice(sorted(pids))
        try:
            os.kill(pids[key], signal.SIGKILL)
            kills.append(key)
        except ProcessLookupError:
            pass
    t.join(max(1.0, end - time.monotonic()))
    assert not t.is_alive(), f"the run did not end within {DEADLINE} s ({len(kills)} kills)"
    return result[0], kills


@pytest.mark.parametrize("layout", LAYOUTS)
def test_wordcount_is_exactly_once_under_random_kills(tmp_path, layout):
    """per-node: a kill lands in a firing, in a sender's offer or sent, or
    in a receiver's accept (run by its sender's process), at random."""
    text = lines(40000, seed=14)
    out = tmp_path / "sink"
    out.mkdir()
    runner = Runner(wordcount(text, str(out)), str(tmp_path / "run"), display=None,
                    restart_pause=0.02, layout=layout, max_batches=4)
    summary, kills = run_killing(runner, rounds=ROUNDS, rnd=random.Random(1))
    assert summary.finished
    assert len(kills) >= ROUNDS // 2, kills
    print(f"{len(kills)} kills, {sum(n.restarts for n in summary.nodes.values())} restarts")
    assert sum(n.restarts for n in summary.nodes.values()) >= len(kills) - 1
    got = collections.Counter()
    pairs = 0
    for name in sorted(os.listdir(out)):
        if name.endswith(".tmp"):
            continue
        for w, n in eval((out / name).read_text()):
            assert w not in got, f"{w!r} counted by two reducers or written twice"
            got[w] = n
            pairs += 1
    assert got == collections.Counter(w for line in text for w in line.split())
    assert summary.nodes["sink"].items_in == pairs
    assert summary.nodes["lines"].items_out == len(text)
    assert all(n.dead_letters == 0 for n in summary.nodes.values())


def sink_casket(run, layout: str) -> str:
    return str(run / (names.CASKET if layout == "shared" else names.node_casket("sink", 0)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_file_source_neither_skips_nor_repeats_across_kills(tmp_path, layout):
    path = tmp_path / "in.txt"
    rows = [f"row {i:05d} " + "x" * (i % 37) for i in range(30000)]
    path.write_text("\n".join(rows) + "\n")
    f = Flow("copy")
    f.source("lines", FileSource(str(path), block_size=200, lines=True), batch=1)
    f.sink("sink", QueueSink("result"), batch=50, max_deliveries=0)
    f.edge("lines", "sink")
    runner = Runner(f, str(tmp_path / "run"), display=None, restart_pause=0.02, layout=layout)
    summary, kills = run_killing(runner, rounds=12, rnd=random.Random(2), targets={"lines"})
    assert summary.finished and len(kills) >= 4, kills
    with pyqstore.open(sink_casket(tmp_path / "run", layout)) as db:
        got = db.queue("result", "pickle").get_many(10 ** 6)
    assert [b.decode() for b in got] == rows      # in order, each once


def _runner_script(tmp_path):
    script = tmp_path / "wc.py"
    script.write_text(
        "import sys, test_flow_kill as t\n"
        "from pyqstore.flow import Runner\n"
        "if __name__ == '__main__':\n"
        "    text = t.lines(int(sys.argv[3]), seed=3)\n"
        "    gate = sys.argv[5] if len(sys.argv) > 5 else None\n"
        "    s = Runner(t.wordcount(text, sys.argv[2], gate), sys.argv[1], display=sys.stdout,\n"
        "               layout=sys.argv[4] if len(sys.argv) > 4 else 'shared').run()\n"
        "    print('FINISHED' if s.finished else 'STOPPED', flush=True)\n")
    return script


def _wait_for_progress(run, deadline=20.0, layout="shared"):
    casket = run / (names.CASKET if layout == "shared" else names.node_casket("lines", 0))
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        time.sleep(0.1)
        if casket.exists():
            with pyqstore.open(str(casket)) as db:
                if db.get(names.meta_key("lines", 0, "out")):
                    return
    raise AssertionError(f"no firing committed in {deadline} s")


def test_a_killed_runner_leaves_no_node_running(tmp_path):
    out = tmp_path / "sink"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # 500,000 lines: the flow is far from its end when the runner dies
    p = subprocess.Popen([sys.executable, str(_runner_script(tmp_path)), str(tmp_path / "run"),
                          str(out), "500000"], env=env, stdout=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        _wait_for_progress(tmp_path / "run")
        end = time.monotonic() + 20
        while True:     # the six node processes, started one after another
            kids = [int(x) for x in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()]
            nodes = [k for k in kids if b"spawn_main" in open(f"/proc/{k}/cmdline", "rb").read()]
            if len(nodes) == 6 or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert len(nodes) == 6, kids
        p.kill()
        p.wait()
        end = time.monotonic() + 15
        while time.monotonic() < end and any(os.path.exists(f"/proc/{k}/status") and
                                             "zombie" not in open(f"/proc/{k}/status").read()
                                             for k in nodes):
            time.sleep(0.1)
        alive = [k for k in nodes if os.path.exists(f"/proc/{k}/status")
                 and "zombie" not in open(f"/proc/{k}/status").read()]
        assert alive == [], f"node processes {alive} outlived their runner"
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ctrl_c_stops_the_run_and_a_second_run_resumes(tmp_path, layout):
    """SIGINT to a runner process (what Ctrl-C sends) ends it after the
    current firings, the flow unfinished; running it again on the same
    directory finishes with the reference's answer."""
    script = _runner_script(tmp_path)
    out = tmp_path / "sink"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    gate = str(tmp_path / "stopped")     # the lines come slowly until it exists
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(out), "20000",
                          layout, gate], env=env, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _wait_for_progress(tmp_path / "run", layout=layout)
        os.killpg(p.pid, signal.SIGINT)          # the whole group, as a terminal does
        stdout, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, stdout
    assert stdout.strip().endswith("STOPPED"), stdout
    assert "stopped: run again on the directory to resume" in stdout
    text = lines(20000, seed=3)
    open(gate, "wb").close()
    summary = Runner(wordcount(text, str(out), gate), str(tmp_path / "run"), display=None,
                     layout=layout).run()
    assert summary.finished
    got = collections.Counter()
    for name in os.listdir(out):
        for w, n in eval((out / name).read_text()):
            got[w] += n
    assert got == collections.Counter(w for line in text for w in line.split())


def test_a_node_that_fails_outside_its_firings_stops_the_run_with_an_error(tmp_path):
    f = Flow("missing")
    f.source("lines", FileSource(str(tmp_path / "no-such-file"), block_size=100))
    f.sink("sink", QueueSink("result"))
    f.edge("lines", "sink")
    runner = Runner(f, str(tmp_path / "run"), display=None, restart_pause=0.01, max_crashes=3)
    t0 = time.monotonic()
    try:
        runner.run()
    except pyqstore.FlowError as e:
        assert "node lines[0] failed 3 times in a row (exit status 1" in str(e)
    else:
        raise AssertionError("the run of a source with no file ended without an error")
    assert time.monotonic() - t0 < 30
