"""Waiting for room in a bounded queue: Queue.wait_for_room (qs_queue_wait_room)
and the firing that waits with it for a full downstream queue, asleep on the
queue's wake-up word rather than polling.  The bounds are behaviour bounds,
wide enough for a loaded 2-core machine."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import pyqstore
from pyqstore.flow import Flow, IterableSource, QueueSink, claim
from pyqstore.flow import names
from pyqstore.flow.firing import Instance, configure_queues


def ident(batch):
    return batch


def _switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


def _get_later(path: str, queue: str, n: int, pause: float) -> subprocess.Popen:
    """A consumer in another process: after pause seconds it takes n items
    and prints the monotonic time of its commit (one clock for every
    process of the machine)."""
    code = ("import sys, time, pyqstore\n"
            "db = pyqstore.open(sys.argv[1], sync=False)\n"
            "q = db.queue(sys.argv[2], 'pickle')\n"
            "time.sleep(float(sys.argv[4]))\n"
            "got = q.get_many(int(sys.argv[3]))\n"
            "print(time.monotonic(), len(got), flush=True)\n")
    return subprocess.Popen([sys.executable, "-c", code, path, queue, str(n), str(pause)],
                            stdout=subprocess.PIPE, text=True)


def test_wait_for_room_answers_at_once_times_out_and_refuses_what_never_fits(tmp_path):
    with pyqstore.open(str(tmp_path / "q.qdb"), sync=False) as db:
        free = db.queue("free")
        free.put_many([b"x"] * 100)
        assert free.wait_for_room(10 ** 6, timeout=0)     # unbounded: always room
        q = db.queue("q", maxsize=3)
        assert q.wait_for_room(3, timeout=0)
        q.put_many([b"1", b"2"])
        assert q.wait_for_room(1, timeout=0) and not q.wait_for_room(2, timeout=0)
        item = q.reserve()                                  # reserved items hold room
        assert not q.wait_for_room(2, timeout=0)
        t0 = time.monotonic()
        assert not q.wait_for_room(2, timeout=0.2)
        assert time.monotonic() - t0 >= 0.19
        item.ack()
        assert q.wait_for_room(2, timeout=0)
        with pytest.raises(ValueError, match=r"queue 'q' holds at most 3 items: room for 4 never comes"):
            q.wait_for_room(4)
        with pytest.raises(ValueError, match="n must be >= 1"):
            q.wait_for_room(0)
        with pytest.raises(TypeError):
            q.wait_for_room("1")
        q.put(b"3")
        with db.transaction():                              # looks, never waits
            t0 = time.monotonic()
            assert not q.wait_for_room(2, timeout=5)
            assert time.monotonic() - t0 < 2
            q.get()
            assert q.wait_for_room(2, timeout=5)            # the transaction's view
        db.queue("q", maxsize=10)                           # a wider bound is room
        assert q.wait_for_room(5, timeout=0)


def test_wait_for_room_wakes_when_another_process_consumes(tmp_path):
    path = str(tmp_path / "q.qdb")
    with pyqstore.open(path, sync=False) as db:
        q = db.queue("q", "pickle", maxsize=4)
        q.put_many([1, 2, 3, 4])
        p = _get_later(path, "q", 2, 0.5)
        try:
            assert q.wait_for_room(2, timeout=30)
            woke = time.monotonic()
            out, _ = p.communicate(timeout=30)
        finally:
            p.kill()
        freed_at, n = out.split()
        assert int(n) == 2
        assert woke - float(freed_at) < 1.0, "woken long after the room was made"


def test_a_firing_blocked_on_a_full_queue_sleeps_until_a_consumer_frees_room(tmp_path):
    """The firing's transaction aborts on the full queue and waits outside
    it.  While nobody makes room it sleeps (a poll doubling to 50 ms woke
    about 25 times a second; the wait on the wake-up word only every 0.2 s
    to look at its stop flag), and it commits promptly once another
    process consumed."""
    f = Flow("t")
    f.source("src", IterableSource(list(range(8))), batch=8)
    f.node("work", ident, batch=8, maxsize=100)
    f.sink("out", QueueSink("result"), maxsize=10, batch=10)
    f.edge("src", "work")
    f.edge("work", "out")
    f.validate()
    path = str(tmp_path / "f.qdb")
    with pyqstore.open(path, sync=False) as db:
        configure_queues(db, f)
        epoch = claim(db)
        src = Instance(db, f, "src", 0, epoch)
        work = Instance(db, f, "work", 0, epoch)
        down_name = names.input_queue("out", "in", None)
        down = db.queue(down_name, "pickle")
        down.put_many(list(range(100, 105)))         # room for 5, the firing emits 8
        assert src.fire()
        done = []
        tid = []

        def fire() -> None:
            tid.append(threading.get_native_id())
            work.fire(timeout=0)
            done.append(time.monotonic())

        t = threading.Thread(target=fire)
        t.start()
        time.sleep(0.5)                               # into its wait
        assert t.is_alive() and len(down) == 5
        before = _switches(tid[0])
        time.sleep(2.0)
        woke = _switches(tid[0]) - before
        assert t.is_alive() and len(down) == 5
        assert woke <= 25, f"the waiting firing woke {woke} times in 2 s: it polls"
        p = _get_later(path, down_name, 3, 0.0)
        try:
            out, _ = p.communicate(timeout=30)
        finally:
            p.kill()
        t.join(30)
        assert not t.is_alive()
        freed_at = float(out.split()[0])
        assert done[0] - freed_at < 1.0, "the firing committed long after the room was made"
        assert down.get_many(20) == [103, 104] + list(range(8))
