"""The per-node layout: what only it has.  A stopped receiving node makes
its input port fill to its bound, then the sender's outbox to its bound,
and the sender waits (no item lost or doubled once the node goes on); the
layout a directory was first run with is kept; the end of the stream
crosses the edges.  The layout-independent behaviour is tested on both
layouts by test_flow_firing, test_model_flow and test_flow_kill."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import pyqstore
from pyqstore.flow import Flow, IterableSource, QueueSink, Runner, names
from pyqstore.flow.owner import owner_epoch
from pyqstore.flow.chunks import count_items

N = 4000


def flow_of(n: int = N) -> Flow:
    f = Flow("bp")
    f.source("src", IterableSource(range(n)), batch=10)
    f.sink("sink", QueueSink("result"), batch=20, maxsize=200, max_deliveries=0)
    f.edge("src", "sink")
    return f


def counter(path: str, key: bytes) -> int:
    with pyqstore.open(path) as db:
        raw = db.get(key)
    return 0 if raw is None else int.from_bytes(raw, "big")


def test_a_stopped_receiver_bounds_the_senders_outbox_and_the_sender_waits(tmp_path):
    run = tmp_path / "run"
    runner = Runner(flow_of(), str(run), display=None, layout="per-node", max_batches=4,
                    sync=False)
    result: list = []
    t = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    t.start()
    src_path = str(run / names.node_casket("src", 0))
    sink_path = str(run / names.node_casket("sink", 0))
    out_key = names.meta_key("src", 0, "out")
    end = time.monotonic() + 30
    while time.monotonic() < end and not (("sink", 0) in runner.pids()
                                          and os.path.exists(src_path)
                                          and counter(src_path, out_key) > 0):
        time.sleep(0.01)
    sink_pid = runner.pids()[("sink", 0)]
    os.kill(sink_pid, signal.SIGSTOP)
    try:
        # the source fills the sink's port (200) and its outbox (4 batches of
        # 10), then waits: its count stops moving
        samples = []
        end = time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.5)
            samples.append(counter(src_path, out_key))
            if len(samples) >= 3 and samples[-1] == samples[-3]:
                break
        assert samples[-1] == samples[-3] < N, samples
        with pyqstore.open(src_path) as db:
            boxes = {q: n for q, n in db.queue_lengths().items() if q.startswith("flow/outbox/")}
            assert list(boxes.values()) == [4], boxes
            assert db.queue(next(iter(boxes))).config().maxsize == 4
        with pyqstore.open(sink_path) as db:
            port = db.queue(names.input_queue("sink", "in", None))
            held = count_items(port, chunked=True)     # the port holds chunks
            assert held <= 200
            taken = len(db.queue("result"))
        # what the source made is in the port, the outbox, or past the sink
        assert samples[-1] <= held + 4 * 10 + taken + 20
    finally:
        os.kill(sink_pid, signal.SIGCONT)
    t.join(60)
    assert not t.is_alive() and result[0].finished
    with pyqstore.open(sink_path) as db:
        assert db.queue("result", "pickle").get_many(10 ** 6) == list(range(N))


def test_a_directory_keeps_the_layout_of_its_first_run(tmp_path):
    run = tmp_path / "run"
    s = Runner(flow_of(30), str(run), display=None, layout="per-node", sync=False).run()
    assert s.finished and s.nodes["sink"].items_in == 30
    assert (run / names.LAYOUT).read_text() == "per-node\n"
    assert not (run / names.CASKET).exists()
    with pytest.raises(pyqstore.FlowError,
                       match=r"holds a run with layout 'per-node': run it again with "
                             r"layout='per-node'"):
        Runner(flow_of(30), str(run), display=None, layout="shared").run()
    with pytest.raises(ValueError, match="layout must be 'shared' or 'per-node', not 'both'"):
        Runner(flow_of(30), str(run), layout="both")
    # run again: finished instances exit at once, nothing is sent twice
    s = flow_of(30).run(str(run), display=None, layout="per-node", sync=False)
    assert s.finished and s.nodes["sink"].items_in == 30
    with pyqstore.open(str(run / names.node_casket("sink", 0))) as db:
        assert db.queue("result", "pickle").get_many(100) == list(range(30))
        assert owner_epoch(db) == 2             # each run claimed each casket


def test_with_no_layout_a_new_directory_runs_per_node_and_an_old_one_keeps_its_own(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    s = Runner(flow_of(30), str(new), display=None, sync=False).run()
    assert s.finished and (new / names.LAYOUT).read_text() == "per-node\n"
    assert (new / names.node_casket("sink", 0)).exists() and not (new / names.CASKET).exists()
    Runner(flow_of(30), str(old), display=None, layout="shared", sync=False).run()
    # a shared run from before the layout record: its casket says what it is
    (old / names.LAYOUT).unlink()
    s = flow_of(30).run(str(old), display=None, sync=False)    # resumes: nothing to do
    assert s.finished and s.nodes["sink"].items_in == 30
    assert (old / names.LAYOUT).read_text() == "shared\n" and not (old / names.NODES).exists()
    with pyqstore.open(str(old / names.CASKET)) as db:
        assert db.queue("result", "pickle").get_many(100) == list(range(30))


def test_a_shared_edge_spreads_its_firings_over_the_instances(tmp_path):
    f = Flow("spread")
    f.source("src", IterableSource(range(600)), batch=10)
    f.node("work", double, parallelism=3, batch=10, maxsize=100)
    f.sink("sink", QueueSink("result"), maxsize=1000)
    f.edge("src", "work")
    f.edge("work", "sink")
    run = tmp_path / "run"
    s = f.run(str(run), display=None, layout="per-node", sync=False)
    assert s.finished
    ins = [counter(str(run / names.node_casket("work", i)), names.meta_key("work", i, "in"))
           for i in range(3)]
    assert sum(ins) == 600 and all(n > 0 for n in ins), ins
    with pyqstore.open(str(run / names.node_casket("sink", 0))) as db:
        assert sorted(db.queue("result", "pickle").get_many(10 ** 6)) == \
            sorted(2 * x for x in range(600))


def double(batch):
    return [2 * x for x in batch]


def test_a_full_outbox_makes_the_firing_wait_outside_its_transaction(tmp_path):
    from _flow_layouts import Fired
    import random
    f = Flow("wait")
    f.source("src", IterableSource(range(30)), batch=10)
    f.sink("sink", QueueSink("result"), maxsize=1000)
    f.edge("src", "sink")
    fired = Fired(str(tmp_path), f, "per-node", max_batches=1)
    try:
        src = fired.insts[("src", 0)]
        (box,) = src.outboxes.values()
        assert src.fire() and box.held() == 1
        t = threading.Thread(target=src.fire)
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and box.held() == 1       # waiting for room
        # not inside a transaction: another handle of this process can write
        with pyqstore.open(str(tmp_path / names.node_casket("src", 0)), sync=False) as other:
            with other.transaction():
                other.put(b"k", b"v")
        assert fired.deliver(random.Random(1))          # sent() wakes it
        t.join(10)
        assert not t.is_alive() and box.held() == 1
        assert src.state["pos"] == 20
        while fired.deliver(random.Random(1)):
            pass
        assert fired.input("sink").get_many(100) == list(range(20))
    finally:
        fired.close()


def test_the_local_transport_calls_a_receiver_holding_its_lock_unreachable(tmp_path):
    """A receiver that holds its write lock past lock_timeout (a stopped or
    stalled process) is a TimeoutError, one of the errors the sender
    offers again after, not an error that ends the sender."""
    from pyqstore.flow import LocalTransport, TRANSPORT_ERRORS, claim
    from pyqstore.flow.pernode import configure_inputs
    f = flow_of(10)
    (tmp_path / names.NODES).mkdir()
    path = str(tmp_path / names.node_casket("sink", 0))
    with pyqstore.open(path, sync=False) as db:
        configure_inputs(db, f, "sink", 0)
        epoch = claim(db)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pyqstore.open(path, sync=False) as db:
            with db.transaction():
                db.put(b"k", b"v")
                held.set()
                release.wait(30)
    t = threading.Thread(target=hold)
    t.start()
    transport = LocalTransport(str(tmp_path), f, "sink", 0, epoch, sync=False)
    try:
        assert held.wait(10)
        with pytest.raises(TimeoutError, match="locked by another thread or process") as e:
            transport.accept(names.edge_to("src.out->sink.in", 0), names.sender("src", 0), 1,
                             [b"x"])
        assert isinstance(e.value, TRANSPORT_ERRORS)
        release.set()
        t.join(10)
        assert transport.accept(names.edge_to("src.out->sink.in", 0), names.sender("src", 0),
                                1, [b"x"]).value == "accepted"
    finally:
        release.set()
        transport.close()
