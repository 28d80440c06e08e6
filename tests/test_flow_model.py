"""The flow model's checks: each bad flow is a FlowError naming the
problem when the flow is built (or validated by run), never a hang."""
from __future__ import annotations

import subprocess
import sys

import pytest

import pyqstore
from pyqstore.flow import FileSource, Flow, IterableSource, QueueSink, partition


def double(batch):
    return [2 * x for x in batch]


def two_ports(batch, ctx):
    ctx.emit("even", *[x for x in batch if x % 2 == 0])


def chain() -> Flow:
    f = Flow("t")
    f.source("src", IterableSource(range(10)))
    f.node("map", double)
    f.sink("out", QueueSink("out"))
    return f


def test_an_edge_naming_a_port_the_node_does_not_have():
    f = chain()
    with pytest.raises(pyqstore.FlowError, match=r"node 'map' has no output port 'odd' \(its outputs: out\)"):
        f.edge("map.odd", "out")
    with pytest.raises(pyqstore.FlowError, match=r"node 'map' has no input port 'left' \(its inputs: in\)"):
        f.edge("src", "map.left")
    with pytest.raises(pyqstore.FlowError, match=r"the flow has no node 'mop'"):
        f.edge("src", "mop")
    assert issubclass(pyqstore.FlowError, ValueError)


def test_an_unconnected_input():
    f = chain()
    f.edge("src", "map")
    with pytest.raises(pyqstore.FlowError, match=r"input port out\.in is not connected"):
        f.validate()
    f.edge("map", "out")
    f.validate()


def test_two_edges_into_one_port_with_different_codecs():
    f = chain()
    f.edge("src", "map", codec="pickle")
    f.node("map2", double)
    f.edge("src", "map2")
    f.edge("map2", "out", codec="json")
    with pytest.raises(pyqstore.FlowError,
                       match=r"input port out\.in has edges with two codecs: 'json' .*and 'pickle'"):
        f.edge("map", "out", codec="pickle")


def test_a_function_that_spawn_cannot_load():
    f = Flow()
    with pytest.raises(pyqstore.FlowError, match=r"node 'l'.*cannot be pickled for a spawned process"):
        f.node("l", lambda batch: batch)

    def local(batch):
        return batch
    with pytest.raises(pyqstore.FlowError, match=r"node 'local'.*cannot be pickled.*top level of a module"):
        f.node("local", local)
    f.source("src", IterableSource(range(3)))
    f.node("map", double)
    with pytest.raises(pyqstore.FlowError, match=r"key function .* cannot be pickled"):
        f.edge("src", "map", key=lambda x: x)


def test_other_bad_flows():
    f = Flow()
    with pytest.raises(pyqstore.FlowError, match="has no source"):
        f.validate()
    f.source("src", IterableSource([1]))
    with pytest.raises(pyqstore.FlowError, match="already has a node 'src'"):
        f.source("src", IterableSource([1]))
    with pytest.raises(ValueError, match="parallelism must be >= 1, not 0"):
        f.node("m", double, parallelism=0)
    with pytest.raises(pyqstore.FlowError, match="batch 50 exceeds its input's maxsize 10"):
        f.node("m", double, batch=50, maxsize=10)
    with pytest.raises(pyqstore.FlowError, match="work must be a function or a class"):
        f.node("m", 42)
    with pytest.raises(pyqstore.FlowError, match="has no step"):
        f.node("m", int.__class__.__class__("NoStep", (), {}))
    with pytest.raises(pyqstore.FlowError, match="codec 'xml' is not"):
        f.node("m", double)
        f.edge("src", "m", codec="xml")
    f.node("a", double)
    f.node("b", double)
    f.edge("src", "a")
    f.edge("a", "b")
    f.edge("b", "a")
    f.edge("src", "m")
    with pytest.raises(pyqstore.FlowError, match=r"cycle: a -> b -> a"):
        f.validate()


def test_a_file_source_needs_a_positive_block_size(tmp_path):
    with pytest.raises(ValueError, match="block_size must be an int >= 1, not 0"):
        FileSource(str(tmp_path / "x"), block_size=0)


def test_the_partition_of_a_key_is_the_same_in_every_process():
    keys = ["word", "", "ünïcode", 17, ("a", 1), b"raw"]
    here = [partition(k, 7) for k in keys]
    code = ("from pyqstore.flow import partition;"
            f"print([partition(k, 7) for k in {keys!r}])")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin",
                                  "PYTHONPATH": ":".join(sys.path)}, check=True).stdout
        assert out.strip() == repr(here)
