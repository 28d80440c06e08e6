"""Where a run keeps a flow's things: the topology the runner writes next to
its caskets, and the layout that says which casket holds what.

The runner writes ``DIR/flow.json`` (:func:`write_topology`): the flow's
nodes, ports and edges as plain data, so a reader that does not have the
flow's code (``qstore flow status``, a producer feeding a put-driven source)
can find every queue and record without unpickling the flow.  A layout
(:class:`SharedLayout`: every node in ``DIR/flow.qdb``) answers, from the
topology alone, which caskets the run has, where each instance's records
are, and which queue is each port and each dead-letter port; another
layout (:class:`PerNodeLayout`: one casket per node instance in
``DIR/nodes``) answers the same; a layout of its own registers with
:func:`register_layout` under the name the topology records.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Protocol

from ..errors import FlowError
from . import names
from .chunks import chunk_limit
from .edge import outbox_queue
from .graph import Flow

__all__ = ["Topology", "NodeInfo", "PortRef", "Layout", "SharedLayout", "PerNodeLayout",
           "register_layout",
           "layout_of", "write_topology", "read_topology", "TOPOLOGY"]

#: the topology file of a run, inside its directory
TOPOLOGY = "flow.json"
_VERSION = 1


@dataclass(frozen=True)
class NodeInfo:
    name: str
    kind: str                      # "node", "source" or "sink"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    parallelism: int
    batch: int
    maxsize: int
    max_deliveries: int


@dataclass(frozen=True)
class EdgeInfo:
    src: str
    src_port: str
    dst: str
    dst_port: str
    partitioned: bool
    codec: str


@dataclass(frozen=True)
class Topology:
    """A flow as plain data: what a reader needs to find its queues."""
    flow: str
    layout: str
    nodes: dict[str, NodeInfo]
    edges: tuple[EdgeInfo, ...]

    @classmethod
    def of(cls, flow: Flow, layout: str = "shared") -> "Topology":
        nodes = {n.name: NodeInfo(n.name, n.kind, n.inputs, n.outputs, n.parallelism, n.batch,
                                  n.maxsize, n.max_deliveries) for n in flow.nodes.values()}
        edges = tuple(EdgeInfo(e.src, e.src_port, e.dst, e.dst_port, e.key is not None, e.codec)
                      for e in flow.edges)
        return cls(flow.name, layout, nodes, edges)

    def partitioned(self, node: str, port: str) -> bool:
        return any(e.partitioned for e in self.edges if e.dst == node and e.dst_port == port)

    def codec(self, node: str, port: str) -> str:
        for e in self.edges:
            if e.dst == node and e.dst_port == port:
                return e.codec
        return "pickle"

    def to_json(self) -> dict[str, Any]:
        return {"version": _VERSION, "flow": self.flow, "layout": self.layout,
                "nodes": [asdict(n) for n in self.nodes.values()],
                "edges": [asdict(e) for e in self.edges]}

    @classmethod
    def from_json(cls, d: Any, where: str) -> "Topology":
        try:
            if d["version"] != _VERSION:
                raise FlowError(f"{where}: topology version {d['version']!r}, this pyqstore "
                                f"reads version {_VERSION}")
            nodes = {}
            for n in d["nodes"]:
                n = dict(n, inputs=tuple(n["inputs"]), outputs=tuple(n["outputs"]))
                nodes[n["name"]] = NodeInfo(**n)
            edges = tuple(EdgeInfo(**e) for e in d["edges"])
            return cls(str(d["flow"]), str(d["layout"]), nodes, edges)
        except (KeyError, TypeError) as e:
            raise FlowError(f"{where} is not a flow topology ({type(e).__name__}: {e})") from None


def write_topology(directory: str, topology: Topology) -> None:
    """Write DIR/flow.json atomically (a reader never sees half of it)."""
    path = os.path.join(directory, TOPOLOGY)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(topology.to_json(), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_topology(directory: str) -> Topology:
    """The topology of the run on directory; FlowError when no flow has
    run there (no flow.json) or the file is not one."""
    path = os.path.join(os.fspath(directory), TOPOLOGY)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise FlowError(f"no flow has run on {os.fspath(directory)!r}: it has no {TOPOLOGY}") \
            from None
    except ValueError as e:
        raise FlowError(f"{path!r} is not a flow topology ({e})") from None
    return Topology.from_json(raw, repr(path))


@dataclass(frozen=True)
class PortRef:
    """One queue of a node's port: its casket (a path relative to the run's
    directory) and name; instance None for a queue all instances share."""
    node: str
    port: str
    direction: str                 # "in", or "out" (an outbox)
    instance: Optional[int]
    casket: str
    queue: str
    codec: str
    #: 0: the queue holds items; k: it holds chunks of at most k items
    #: (the per-node layout's input ports, :mod:`.chunks`)
    chunk_limit: int = 0


class Layout(Protocol):
    """Which casket holds what, for one run's topology."""
    name: str

    def caskets(self) -> list[str]:
        """Every casket of the run, relative to its directory."""
        ...

    def records(self, node: str, instance: int) -> tuple[str, bytes]:
        """The casket of an instance's records and their key prefix
        (state under ``PREFIX + b"s/"``, bookkeeping under ``b"m/"``)."""
        ...

    def ports(self, node: str) -> list[PortRef]:
        """The queues of a node's ports: its input ports' (and outboxes')."""
        ...

    def dead_letters(self, node: str) -> list[tuple[str, str]]:
        """(casket, queue) of each of a node's dead-letter ports."""
        ...

    def chunked(self, node: str) -> bool:
        """Whether the node's input ports, and so its dead letters, hold
        chunks of items (:mod:`.chunks`) rather than items."""
        ...


class SharedLayout:
    """Every node of the run shares one casket, ``DIR/flow.qdb``, named as
    :mod:`.names` says."""
    name = "shared"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def caskets(self) -> list[str]:
        return [names.CASKET]

    def records(self, node: str, instance: int) -> tuple[str, bytes]:
        return names.CASKET, names.instance_prefix(node, instance)

    def ports(self, node: str) -> list[PortRef]:
        n = self.topology.nodes[node]
        out = []
        for port in n.inputs:
            codec = self.topology.codec(node, port)
            if self.topology.partitioned(node, port):
                out += [PortRef(node, port, "in", i, names.CASKET,
                                names.input_queue(node, port, i), codec)
                        for i in range(n.parallelism)]
            else:
                out.append(PortRef(node, port, "in", None, names.CASKET,
                                   names.input_queue(node, port, None), codec))
        return out

    def dead_letters(self, node: str) -> list[tuple[str, str]]:
        return [(names.CASKET, names.dead_queue(node))]

    def chunked(self, node: str) -> bool:
        return False


class PerNodeLayout:
    """Every node instance has its own casket, ``DIR/nodes/NODE.I.qdb``
    (:func:`names.node_casket`), holding its records, its input ports, its
    dead-letter port and one outbox per (outgoing edge, receiving
    instance), as :mod:`.pernode` keeps them."""
    name = "per-node"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def _instances(self, node: str) -> range:
        return range(self.topology.nodes[node].parallelism)

    def caskets(self) -> list[str]:
        return [names.node_casket(n, i) for n in self.topology.nodes for i in self._instances(n)]

    def records(self, node: str, instance: int) -> tuple[str, bytes]:
        return names.node_casket(node, instance), names.instance_prefix(node, instance)

    def ports(self, node: str) -> list[PortRef]:
        n = self.topology.nodes[node]
        limit = chunk_limit(n.batch, n.maxsize) if self.chunked(node) else 0
        out = []
        for i in self._instances(node):
            where = names.node_casket(node, i)
            for port in n.inputs:
                part = self.topology.partitioned(node, port)
                out.append(PortRef(node, port, "in", i, where,
                                   names.input_queue(node, port, i if part else None),
                                   self.topology.codec(node, port), limit))
            for e in self.topology.edges:
                if e.src != node:
                    continue
                edge = f"{e.src}.{e.src_port}->{e.dst}.{e.dst_port}"    # Edge.name
                for j in self._instances(e.dst):
                    out.append(PortRef(node, e.src_port, "out", i, where,
                                       outbox_queue(names.edge_to(edge, j), names.sender(node, i)),
                                       "bytes"))
        return out

    def dead_letters(self, node: str) -> list[tuple[str, str]]:
        return [(names.node_casket(node, i), names.dead_queue(node)) for i in self._instances(node)]

    def chunked(self, node: str) -> bool:
        # the ports edges feed (a put-driven source's port, which its
        # producers feed, holds items; it has no edge into it)
        return any(e.dst == node for e in self.topology.edges)


_LAYOUTS: dict[str, Callable[[Topology], Layout]] = {"shared": SharedLayout,
                                                     "per-node": PerNodeLayout}


def register_layout(name: str, make: Callable[[Topology], Layout]) -> None:
    """Make layout name known to :func:`layout_of` (a per-node layout
    registers itself so)."""
    _LAYOUTS[name] = make


def layout_of(topology: Topology) -> Layout:
    make = _LAYOUTS.get(topology.layout)
    if make is None:
        raise FlowError(f"flow {topology.flow!r} has layout {topology.layout!r}, which this "
                        f"pyqstore does not know (it knows {', '.join(sorted(_LAYOUTS))})")
    return make(topology)
