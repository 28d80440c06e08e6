"""`qstore flow status` and pyqstore.flow.status: what a run holds, read
read-only from its caskets, on a finished run, on a running one (without
disturbing it), and through a layout other than the shared one."""
from __future__ import annotations

import json
import os
import pickle
import threading
import time

import pytest
from click.testing import CliRunner

import pyqstore
from pyqstore.cli import main
from pyqstore.flow import CallbackSink, Flow, IterableSource, QueueSink, Runner
from pyqstore.flow import names
from pyqstore.flow.layout import (PortRef, SharedLayout, Topology, read_topology,
                                  register_layout, write_topology)
from pyqstore.flow.status import collect, status


def double(batch):
    return [2 * x for x in batch]


def refuse_sevens(batch):
    if any(x % 7 == 0 for x in batch):
        raise ValueError(f"{batch[0]} is in a batch with a seven")
    return batch


class Tally:
    def step(self, batch, ctx):
        for x in batch:
            ctx.state[str(x % 3)] = ctx.state.get(str(x % 3), 0) + 1


def slow(batch_id, items):
    time.sleep(0.05)


def mod3(x):
    return x % 3


def small_flow() -> Flow:
    f = Flow("small")
    f.source("src", IterableSource(range(60)), batch=10)
    f.node("map", double, parallelism=2, batch=5, maxsize=50)
    f.node("picky", refuse_sevens, batch=1, max_deliveries=2)
    f.node("tally", Tally, parallelism=2, batch=10)
    f.sink("out", QueueSink("result"))
    f.edge("src", "map")
    f.edge("src", "picky")
    f.edge("map", "tally", key=mod3)
    f.edge("picky", "out")
    return f


def test_the_status_of_a_finished_shared_run(tmp_path):
    run = str(tmp_path / "run")
    t0 = time.time()
    summary = Runner(small_flow(), run, display=None, layout="shared").run()
    t1 = time.time()
    st = status(run)
    assert st.finished and st.flow == "small" and st.layout == "shared"
    for name, n in summary.nodes.items():
        s = st.nodes[name]
        assert (s.items_in, s.items_out, s.failed, s.dead_letters.count) == \
            (n.items_in, n.items_out, n.failed, n.dead_letters)
    picky = st.nodes["picky"]
    assert picky.dead_letters.count == 9                     # 0, 7, ..., 56
    assert picky.dead_letters.last_reasons == [f"ValueError: {x} is in a batch with a seven"
                                               for x in (42, 49, 56)]
    assert picky.failed == 18                                 # each twice
    tally = st.nodes["tally"]
    assert [p.instance for p in tally.ports] == [0, 1]        # partitioned: one queue each
    assert [p.queue for p in tally.ports] == ["flow/in/tally/in/0", "flow/in/tally/in/1"]
    assert all(p.available == p.reserved == p.delayed == 0 for n in st.nodes.values()
               for p in n.ports)
    assert st.nodes["map"].ports[0].maxsize == 50
    with pyqstore.open(os.path.join(run, names.CASKET), "r") as db:
        for i in (0, 1):
            prefix = names.state_prefix("tally", i)
            stored = {k: v for k, v in db.items(start=prefix) if k.startswith(prefix)}
            inst = tally.instances[i]
            assert inst.state_records == len(stored)
            assert inst.state_bytes == sum(len(k) - len(prefix) + len(v) for k, v in stored.items())
    assert sum(i.state_records for i in tally.instances) == 3  # the keys 0, 1, 2
    for n in st.nodes.values():
        for i in n.instances:
            assert i.finished and t0 <= i.last_firing <= t1
    with pyqstore.open(os.path.join(run, names.CASKET), "r") as db:
        quick = collect(read_topology(run), lambda _: db, with_state=False, with_reasons=False)
    assert quick.nodes["picky"].dead_letters.count == 9
    assert quick.nodes["picky"].dead_letters.last_reasons == []
    assert quick.nodes["tally"].instances[0].state_records is None
    text = str(st)
    assert "flow 'small'" in text and "finished" in text
    assert "tally[1].in  in   flow/in/tally/in/1" in text
    assert "ValueError: 56 is in a batch with a seven" in text


def test_the_status_of_a_per_node_run_reads_every_instance_casket(tmp_path):
    run = str(tmp_path / "run")
    summary = Runner(small_flow(), run, display=None, layout="per-node").run()
    st = status(run)
    assert st.finished and st.layout == "per-node"
    for name, n in summary.nodes.items():
        s = st.nodes[name]
        assert (s.items_in, s.items_out, s.failed, s.dead_letters.count) == \
            (n.items_in, n.items_out, n.failed, n.dead_letters)
    assert st.nodes["picky"].dead_letters.count == 9
    assert st.nodes["picky"].dead_letters.last_reasons[-1] == \
        "ValueError: 56 is in a batch with a seven"
    tally = st.nodes["tally"]
    assert [(p.direction, p.instance) for p in tally.ports] == [("in", 0), ("in", 1)]
    # the source's outboxes: two to map's instances, one to picky's
    outs = [p for p in st.nodes["src"].ports if p.direction == "out"]
    assert len(outs) == 3 and all(p.queue.startswith("flow/outbox/") for p in outs)
    # the names are the outboxes' own: each has the bound Outbox stored
    assert all(p.maxsize == 16 for p in outs)
    assert all(p.available == p.reserved == 0 for n in st.nodes.values() for p in n.ports)
    assert sum(i.state_records for i in tally.instances) == 3
    text = str(st)
    assert "per-node" in text and "flow/outbox/" in text


def test_the_cli_prints_the_table_and_json(tmp_path):
    run = str(tmp_path / "run")
    Runner(small_flow(), run, display=None).run()
    cli = CliRunner()
    r = cli.invoke(main, ["flow", "status", run, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got == json.loads(json.dumps(status(run).to_json()))
    assert got["finished"] is True and got["nodes"]["picky"]["dead_letters"]["count"] == 9
    assert got["nodes"]["src"]["items_out"] == 60
    r = cli.invoke(main, ["flow", "status", run, "--no-state"])
    assert r.exit_code == 0 and "INSTANCE" in r.output and "rec," not in r.output
    r = cli.invoke(main, ["flow", "status", str(tmp_path / "none")])
    assert r.exit_code == 1
    assert "no flow has run on" in r.output and "flow.json" in r.output


def test_status_of_a_running_flow_reads_without_disturbing_it(tmp_path):
    run = str(tmp_path / "run")
    f = Flow("slow")
    f.source("src", IterableSource(range(3000)), batch=100)
    f.node("map", double, batch=100, maxsize=300)
    f.sink("out", CallbackSink(slow), batch=20, maxsize=200)
    f.edge("src", "map")
    f.edge("map", "out")
    runner = Runner(f, run, display=None)
    done = []
    t = threading.Thread(target=lambda: done.append(runner.run()))
    t.start()
    seen = []
    try:
        end = time.monotonic() + 60
        while t.is_alive() and time.monotonic() < end:
            try:
                seen.append(status(run, with_state=False))
            except pyqstore.FlowError:    # before the runner wrote flow.json
                pass
            except pyqstore.FileNotFound:
                pass
            time.sleep(0.05)
    finally:
        t.join(120)
    assert not t.is_alive() and done[0].finished
    running = [s for s in seen if not s.finished]
    assert len(running) >= 5
    assert any(s.nodes["out"].depth > 0 for s in running)
    for s in running:
        for name, bound in (("map", 300), ("out", 200)):
            p = s.nodes[name].ports[0]
            assert p.available + p.reserved <= bound
        assert s.nodes["out"].items_in <= 3000
    ins = [s.nodes["out"].items_in for s in running]
    assert ins == sorted(ins)                                 # counters only grow
    final = status(run)
    assert final.finished and final.nodes["out"].items_in == 3000


class SplitLayout(SharedLayout):
    """A layout whose records live in one casket and queues in another: what
    a per-node layout does, in small."""
    name = "split-test"

    def caskets(self):
        return ["records.qdb", "queues.qdb"]

    def records(self, node, instance):
        return "records.qdb", names.instance_prefix(node, instance)

    def ports(self, node):
        return [PortRef(node, r.port, r.direction, r.instance, "queues.qdb", r.queue, r.codec)
                for r in super().ports(node)]

    def dead_letters(self, node):
        return [("queues.qdb", names.dead_queue(node))]


def test_a_layout_plugs_in_by_the_name_its_topology_records(tmp_path):
    f = Flow("split")
    f.source("src", IterableSource([1]))
    f.sink("out", QueueSink("r"), maxsize=7, batch=7)
    f.edge("src", "out")
    run = tmp_path / "run"
    run.mkdir()
    write_topology(str(run), Topology.of(f, layout="split-test"))
    with pytest.raises(pyqstore.FlowError, match="layout 'split-test', which this pyqstore "
                                                 "does not know"):
        status(str(run))
    register_layout("split-test", SplitLayout)
    with pyqstore.open(str(run / "records.qdb")) as db:
        db.put(names.meta_key("out", 0, "in"), (5).to_bytes(8, "big"))
        db.put(names.state_prefix("out", 0) + b"k", pickle.dumps(1))
    with pyqstore.open(str(run / "queues.qdb")) as db:
        db.queue(names.input_queue("out", "in", None), maxsize=7).put_many([b"a", b"b"])
        db.queue(names.dead_queue("out")).put(b"x")
    st = status(str(run))
    out = st.nodes["out"]
    assert st.layout == "split-test"
    assert out.items_in == 5 and out.instances[0].state_records == 1
    assert (out.ports[0].available, out.ports[0].maxsize) == (2, 7)
    assert out.dead_letters.count == 1 and out.dead_letters.last_reasons == ["(no reason)"]
    assert read_topology(str(run)).nodes["out"].maxsize == 7
