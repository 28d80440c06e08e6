"""One firing on the shared casket, driven in this process: what a raising
node leaves (nothing emitted, its batch back with the deliveries counted,
then dead letters with the error's text), state across a reopen, and a
full downstream queue that makes the firing wait outside its transaction."""
from __future__ import annotations

import io
import os
import pickle
import random
import threading
import time

import pytest

import pyqstore
from pyqstore.flow import Flow, IterableSource, QueueSink, claim
from pyqstore.flow import names
from pyqstore.flow.blocks import read_block
from pyqstore.flow.firing import Instance, configure_queues

from _flow_layouts import LAYOUTS, Fired


def explode(batch):
    raise RuntimeError(f"cannot take {batch[0]}")


def tally(batch, ctx):
    for x in batch:
        ctx.state[x] = ctx.state.get(x, 0) + 1
    return batch


def flow_of(work, max_deliveries=3, maxsize=100, sink_maxsize=100) -> Flow:
    f = Flow("t")
    f.source("src", IterableSource(["a", "b", "a", "c"]), batch=4)
    f.node("work", work, batch=4, maxsize=maxsize, max_deliveries=max_deliveries)
    f.sink("out", QueueSink("result"), maxsize=sink_maxsize, batch=sink_maxsize)
    f.edge("src", "work")
    f.edge("work", "out")
    f.validate()
    return f


def instances(db, f):
    configure_queues(db, f)
    epoch = claim(db)
    return {n: Instance(db, f, n, 0, epoch) for n in f.nodes}


def deliver_all(fired) -> None:
    while fired.deliver(random.Random(0)):
        pass


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_raising_node_emits_nothing_and_its_items_go_dead_with_the_error(tmp_path, layout):
    f = flow_of(explode, max_deliveries=3)
    fired = Fired(str(tmp_path), f, layout)
    try:
        inst = {n: fired.insts[(n, 0)] for n in f.nodes}
        assert inst["src"].fire()
        deliver_all(fired)
        work_q = fired.input("work")
        out_q = fired.input("out")
        for round in (1, 2, 3):
            assert inst["work"].fire(timeout=0)
            deliver_all(fired)
            assert len(out_q) == 0 and out_q.pending() == []       # nothing emitted
            assert len(work_q) == 4 and work_q.pending() == []     # all back
            assert fired.dead("work") == []
        # the fourth take moves them to the dead-letter port, and the flow goes on
        assert not inst["work"].fire(timeout=0)
        assert len(work_q) == 0
        held = fired.dead("work")
        assert [h.payload for h in held] == ["a", "b", "a", "c"]
        # three firings' reserves and this one: the count and the text travel along
        assert {(h.deliveries, h.reason) for h in held} == {(4, "RuntimeError: cannot take a")}
        assert inst["work"].state.get("a") is None
        assert not inst["work"].try_finish()     # the source has not finished
        assert not inst["src"].fire() and inst["src"].try_finish()
        deliver_all(fired)
        assert inst["work"].try_finish()     # inputs exhausted: dead letters do not hold it up
    finally:
        fired.close()


def test_state_and_output_commit_together_and_survive_a_reopen(tmp_path):
    path = str(tmp_path / "f.qdb")
    f = flow_of(tally)
    with pyqstore.open(path, sync=False) as db:
        inst = instances(db, f)
        assert inst["src"].fire()
        assert inst["work"].fire(timeout=0)
        assert dict(inst["work"].state) == {"a": 2, "b": 1, "c": 1}
    with pyqstore.open(path, sync=False) as db:
        again = Instance(db, f, "work", 0, claim(db))
        assert dict(again.state) == {"a": 2, "b": 1, "c": 1}
        assert len(db.queue(names.input_queue("out", "in", None))) == 4
        src = Instance(db, f, "src", 0, claim(db))
        assert src.state["pos"] == 4
        assert not src.fire()                         # the source does not repeat
        assert src.try_finish() and src.done


def test_a_full_downstream_queue_makes_the_firing_wait_outside_its_transaction(tmp_path):
    f = flow_of(tally, sink_maxsize=5)
    with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as db:
        inst = instances(db, f)
        out_q = db.queue(names.input_queue("out", "in", None), "pickle")
        out_q.put_many(["x", "y", "z"])            # room for 2, the firing emits 4
        assert inst["src"].fire()
        t = threading.Thread(target=inst["work"].fire, kwargs={"timeout": 0})
        t.start()
        time.sleep(0.3)
        assert t.is_alive()
        assert len(out_q) == 3
        # not inside a transaction: another handle of this process can write
        with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as other:
            with other.transaction():
                other.put(b"k", b"v")
            assert other.queue(names.input_queue("out", "in", None), "pickle").get_many(3) == \
                ["x", "y", "z"]
        t.join(10)
        assert not t.is_alive()
        assert out_q.get_many(10) == ["a", "b", "a", "c"]
        assert dict(inst["work"].state) == {"a": 2, "b": 1, "c": 1}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_emitting_more_than_a_port_can_ever_hold_fails_the_batch(tmp_path, layout):
    f = flow_of(tally, sink_maxsize=3, max_deliveries=0)
    fired = Fired(str(tmp_path), f, layout)
    try:
        assert fired.insts[("src", 0)].fire()
        deliver_all(fired)
        assert fired.insts[("work", 0)].fire(timeout=0)
        item = fired.input("work").reserve()
        # shared: the queue flow/in/out/in; per-node: the edge into instance 0
        port = "flow/in/out/in" if layout == "shared" else "work.out->out.in[0]"
        assert f"emitted 4 items to {port} in one firing, more than its maxsize 3" in item.reason
        assert len(fired.input("out")) == 0
    finally:
        fired.close()


def test_read_block_cuts_whole_lines_from_any_offset():
    data = b"one\ntwo\nthree-long-line\nfour\nx"
    f = io.BytesIO(data)
    out, off = [], 0
    while True:
        block, off = read_block(f, off, 6)
        if not block:
            break
        out.append(block)
    # a block that fills block_size ends at its last newline, even when
    # the rest is the file's last line: the reader does not look past it
    assert out == [b"one\n", b"two\n", b"three-long-line\n", b"four\n", b"x"]
    assert read_block(f, 8, 100) == (data[8:], len(data))
    assert b"".join(out) == data
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        read_block(f, 0, 0)


class Picky:
    """A sink callback that refuses one item and records what it was given."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, batch_id, items) -> None:
        self.calls.append((batch_id, list(items)))
        if "b" in items:
            raise ValueError("no b")


def test_a_sink_batch_keeps_its_id_when_repeated_and_a_dead_one_frees_it(tmp_path):
    from pyqstore.flow import CallbackSink
    picky = Picky()
    f = Flow("t")
    f.source("src", IterableSource(["a", "b", "c", "d"]), batch=4)
    f.sink("out", CallbackSink(picky), batch=2, max_deliveries=2)
    f.edge("src", "out")
    with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as db:
        inst = instances(db, f)
        inst["out"].work = CallbackSink(picky)
        inst["out"]._call = inst["out"]._caller()
        assert inst["src"].fire()
        while inst["out"].fire(timeout=0) or len(db.queue(names.input_queue("out", "in", None))):
            pass
    edge = names.input_queue("out", "in", None)
    # batch 1 (a, b) failed twice under one id; dead-lettered, the next batch is 2
    assert picky.calls == [((edge, 1), ["a", "b"]), ((edge, 1), ["a", "b"]),
                           ((edge, 2), ["c", "d"])]


def passthrough(batch):
    return batch


def _chain(n):
    """src (n items, one batch) -> work (passthrough, batches of 4) -> out
    (the queue "result")."""
    f = Flow("t")
    f.source("src", IterableSource(range(n)), batch=n)
    f.node("work", passthrough, batch=4, maxsize=100, max_deliveries=3)
    f.sink("out", QueueSink("result"), maxsize=100, batch=100)
    f.edge("src", "work")
    f.edge("work", "out")
    f.validate()
    return f


def test_a_firing_reserves_the_next_batch_in_its_own_commit(tmp_path):
    """One commit per firing of a node with one input: the firing's
    transaction acks its batch, emits, and reserves the next batch (its
    deliveries counted in that commit), so only the first reserve is a
    commit of its own; the items still arrive once, in order."""
    f = _chain(40)
    with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as db:
        inst = instances(db, f)
        assert inst["src"].fire()
        before = db.stats()["commits"]
        firings = 0
        while inst["work"].fire(timeout=0):
            firings += 1
        assert firings == 10
        # 10 firings: the first reserve, then one commit each (the last
        # finds nothing ahead); two commits per firing without the reserve ahead
        assert db.stats()["commits"] - before == firings + 1
        held = db.queue(names.input_queue("work", "in", None)).pending()
        assert held == []
        while inst["out"].fire(timeout=0):
            pass
        assert [pickle.loads(x) for x in db.queue("result").get_many(100)] == list(range(40))


def test_a_batch_reserved_ahead_goes_back_when_the_node_closes(tmp_path):
    """A node stopped between two firings holds the batch its last firing
    reserved ahead; closing it gives that batch back at once (not after
    the lease), and the next instance takes the same items in order."""
    f = _chain(12)
    with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as db:
        inst = instances(db, f)
        assert inst["src"].fire()
        assert inst["work"].fire(timeout=0)
        q = db.queue(names.input_queue("work", "in", None))
        assert len(q.pending()) == 4         # items 4..7, reserved ahead
        inst["work"].close()
        assert q.pending() == []
        again = instances(db, f)
        while again["work"].fire(timeout=0):
            pass
        while again["out"].fire(timeout=0):
            pass
        assert [pickle.loads(x) for x in db.queue("result").get_many(100)] == list(range(12))


class Recording:
    stable_batches = True

    def __init__(self):
        self.calls = []

    def __call__(self, batch_id, items) -> None:
        self.calls.append((batch_id, list(items)))


def test_a_sink_numbers_the_batch_it_reserves_ahead_and_a_new_instance_keeps_the_number(tmp_path):
    """A sink's firing reserves and numbers its next batch in its own
    commit (one commit per firing); stopped between two firings, the
    batch it holds goes back, and the next instance hands the same items
    under the same number, then goes on numbering."""
    from pyqstore.flow import CallbackSink
    rec = Recording()
    f = Flow("t")
    f.source("src", IterableSource(range(12)), batch=12)
    f.sink("out", CallbackSink(rec), batch=3)
    f.edge("src", "out")
    edge = names.input_queue("out", "in", None)
    with pyqstore.open(str(tmp_path / "f.qdb"), sync=False) as db:
        inst = instances(db, f)
        sink = inst["out"]
        sink.work = CallbackSink(rec)
        sink._call = sink._caller()
        assert inst["src"].fire()
        before = db.stats()["commits"]
        assert sink.fire(timeout=0) and sink.fire(timeout=0)
        # the first reserve, then one commit per firing (each reserving ahead)
        assert db.stats()["commits"] - before == 3
        assert len(db.queue(edge).pending()) == 3        # batch 3, numbered, held
        sink.close()
        assert db.queue(edge).pending() == []
        again = instances(db, f)["out"]
        again.work = CallbackSink(rec)
        again._call = again._caller()
        while again.fire(timeout=0):
            pass
    assert rec.calls == [((edge, k + 1), [3 * k, 3 * k + 1, 3 * k + 2]) for k in range(4)]
