"""The flow model: nodes with named ports, edges from an output port to an
input port, and the checks a flow must pass before it runs.

A node's work is a function ``fn(batch)`` or ``fn(batch, ctx)`` (its
return value, when not None, goes to the port ``out``; ``ctx.emit(port,
*items)`` to any output port; ``ctx.state`` is its dict-like state), or a
class with ``step(batch, ctx)`` and optional ``setup(ctx)``, ``close(ctx)``
and ``finish(ctx)`` (called once, when every input is exhausted; what it
emits is the node's last output).  Sources and sinks are objects of
:mod:`pyqstore.flow.sources` and :mod:`pyqstore.flow.sinks` placed with
:meth:`Flow.source` and :meth:`Flow.sink`.
"""
from __future__ import annotations

import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from .._queue import CodecName
from ..errors import FlowError

__all__ = ["Flow", "Node", "Edge", "DEFAULT_MAX_DELIVERIES"]

#: reserves of an item (kills of its holder included) before it goes to the
#: node's dead-letter port, unless the node says otherwise (0: no limit)
DEFAULT_MAX_DELIVERIES = 5


@dataclass
class Node:
    name: str
    work: Any                      # function, class, source or sink object
    kind: str                      # "node", "source" or "sink"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    parallelism: int = 1
    batch: int = 100
    maxsize: int = 10000
    max_deliveries: int = DEFAULT_MAX_DELIVERIES


@dataclass
class Edge:
    src: str
    src_port: str
    dst: str
    dst_port: str
    key: Optional[Callable[[Any], Any]] = None
    codec: CodecName = "pickle"

    @property
    def name(self) -> str:
        return f"{self.src}.{self.src_port}->{self.dst}.{self.dst_port}"


def _count(x: Any, what: str, low: int) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise TypeError(f"{what} must be an int, not {type(x).__name__}")
    if x < low:
        raise ValueError(f"{what} must be >= {low}, not {x}")
    return x


def _ports(x: Union[str, Sequence[str]], what: str) -> tuple[str, ...]:
    ports = (x,) if isinstance(x, str) else tuple(x)
    for p in ports:
        if not isinstance(p, str) or not p or "/" in p or "." in p:
            raise FlowError(f"{what} port {p!r}: a port is a non-empty str without '/' or '.'")
    if len(set(ports)) != len(ports):
        raise FlowError(f"{what} ports {ports!r} name one port twice")
    return ports


def _spawnable(obj: Any, what: str) -> None:
    """A spawned process gets the node's work by pickling: a lambda, a
    function defined inside another one, or an object holding an open file
    fails there, so it fails here, with its name."""
    try:
        pickle.dumps(obj)
    except Exception as e:
        raise FlowError(f"{what} cannot be pickled for a spawned process "
                        f"({type(e).__name__}: {e}); define it at the top level of a module") from None


def work_arity(fn: Callable[..., Any], what: str) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2:
        return 2
    if len(positional) == 1:
        return 1
    raise FlowError(f"{what} takes no argument; a node's function is fn(batch) or fn(batch, ctx)")


class Flow:
    """A graph of nodes joined by edges.  Build it with :meth:`node`,
    :meth:`source`, :meth:`sink` and :meth:`edge`; :meth:`validate` (also
    called by :meth:`run`) checks the whole graph."""

    def __init__(self, name: str = "flow") -> None:
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []

    def _add(self, node: Node) -> str:
        if not isinstance(node.name, str) or not node.name or "/" in node.name or "." in node.name:
            raise FlowError(f"node name {node.name!r}: a non-empty str without '/' or '.'")
        if node.name in self.nodes:
            raise FlowError(f"flow {self.name!r} already has a node {node.name!r}")
        _count(node.parallelism, f"node {node.name!r}: parallelism", 1)
        _count(node.batch, f"node {node.name!r}: batch", 1)
        _count(node.maxsize, f"node {node.name!r}: maxsize", 1)
        _count(node.max_deliveries, f"node {node.name!r}: max_deliveries", 0)
        if node.batch > node.maxsize:
            raise FlowError(f"node {node.name!r}: batch {node.batch} exceeds its input's maxsize "
                            f"{node.maxsize}")
        _spawnable(node.work, f"node {node.name!r}'s {type(node.work).__name__} {node.work!r}")
        self.nodes[node.name] = node
        return node.name

    def node(self, name: str, work: Any, *, inputs: Union[str, Sequence[str]] = ("in",),
             outputs: Union[str, Sequence[str]] = ("out",), parallelism: int = 1,
             batch: int = 100, maxsize: int = 10000,
             max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> str:
        """Add a node: work is a function or a class (see the module's
        doc).  maxsize bounds each of its input queues (reserved items
        included), batch the items of one firing; parallelism its
        instances, each its own process.  Returns the node's name."""
        what = f"node {name!r}"
        if inspect.isclass(work):
            if not callable(getattr(work, "step", None)):
                raise FlowError(f"{what}: class {work.__name__} has no step(batch, ctx) method")
        elif callable(work):
            work_arity(work, f"{what}: function {getattr(work, '__name__', work)!r}")
        else:
            raise FlowError(f"{what}: work must be a function or a class, not {type(work).__name__}")
        return self._add(Node(name, work, "node", _ports(inputs, what), _ports(outputs, what),
                              parallelism, batch, maxsize, max_deliveries))

    def source(self, name: str, source: Any, *, outputs: Union[str, Sequence[str]] = ("out",),
               batch: int = 100) -> str:
        """Add a source (an object of :mod:`pyqstore.flow.sources`): one
        instance; batch items (blocks, for a file source) per firing.  A
        put-driven source (:class:`~pyqstore.flow.PutSource`) has an input
        port ``put`` that no edge feeds: the application's
        :class:`~pyqstore.flow.Producer` does."""
        inputs = tuple(getattr(source, "inputs", ()))
        if not (callable(getattr(source, "produce", None)) or
                (inputs and callable(getattr(source, "step", None)))):
            raise FlowError(f"source {name!r}: {type(source).__name__} has no produce(ctx, n) "
                            f"method (use pyqstore.flow.IterableSource, FileSource or PutSource)")
        maxsize = getattr(source, "maxsize", max(batch, 1)) if inputs else max(batch, 1)
        return self._add(Node(name, source, "source", _ports(inputs, f"source {name!r}"),
                              _ports(outputs, f"source {name!r}"), 1, batch, maxsize))

    def sink(self, name: str, sink: Any, *, batch: int = 100, maxsize: int = 10000,
             max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> str:
        """Add a sink (an object of :mod:`pyqstore.flow.sinks`) with one
        input port ``in``; one instance, so its batches are numbered in
        one sequence."""
        if not callable(getattr(sink, "step", None)):
            raise FlowError(f"sink {name!r}: {type(sink).__name__} has no step(batch, ctx) method")
        return self._add(Node(name, sink, "sink", ("in",), (), 1, batch, maxsize, max_deliveries))

    def edge(self, src: str, dst: str, *, key: Optional[Callable[[Any], Any]] = None,
             codec: CodecName = "pickle") -> Edge:
        """Join an output port to an input port: ``"node"`` (its port
        ``out`` / ``in``) or ``"node.port"``.  key: partition the items
        among dst's instances by key(item) (a stable hash of its bytes);
        without it they share one queue and any instance takes the next
        batch.  codec: the input queue's codec ("pickle", "json",
        "msgpack"; every edge into one port must use the same)."""
        s, sp = self._end(src, "out", "outputs", "from")
        d, dp = self._end(dst, "in", "inputs", "to")
        if self.nodes[d].kind == "source":
            raise FlowError(f"edge {src!r} -> {dst!r}: {d!r} is a source; its input port is fed "
                            f"by the application (pyqstore.flow.Producer), not by an edge")
        if key is not None:
            if not callable(key):
                raise FlowError(f"edge {src!r} -> {dst!r}: key must be callable, not "
                                f"{type(key).__name__}")
            _spawnable(key, f"edge {src!r} -> {dst!r}: key function {key!r}")
        if codec not in ("pickle", "json", "msgpack"):
            raise FlowError(f"edge {src!r} -> {dst!r}: codec {codec!r} is not pickle, json or msgpack")
        for e in self.edges:
            if (e.dst, e.dst_port) == (d, dp):
                if e.codec != codec:
                    raise FlowError(f"input port {d}.{dp} has edges with two codecs: {e.codec!r} "
                                    f"({e.name}) and {codec!r} ({s}.{sp}->{d}.{dp})")
                if (e.key is None) != (key is None):
                    raise FlowError(f"input port {d}.{dp} has a partitioned and a shared edge "
                                    f"({e.name} and {s}.{sp}->{d}.{dp}); use one kind")
            if (e.src, e.src_port, e.dst, e.dst_port) == (s, sp, d, dp):
                raise FlowError(f"edge {e.name} is already in the flow")
        edge = Edge(s, sp, d, dp, key, codec)
        self.edges.append(edge)
        return edge

    def _end(self, ref: str, default: str, side: str, where: str) -> tuple[str, str]:
        if not isinstance(ref, str):
            raise FlowError(f"edge {where} {ref!r}: name it 'node' or 'node.port'")
        name, _, port = ref.partition(".")
        port = port or default
        node = self.nodes.get(name)
        if node is None:
            raise FlowError(f"edge {where} {ref!r}: the flow has no node {name!r} "
                            f"(nodes: {', '.join(sorted(self.nodes)) or 'none'})")
        ports = getattr(node, side)
        if port not in ports:
            raise FlowError(f"edge {where} {ref!r}: node {name!r} has no {side[:-1]} port "
                            f"{port!r} (its {side}: {', '.join(ports) or 'none'})")
        return name, port

    def edges_into(self, node: str) -> list[Edge]:
        return [e for e in self.edges if e.dst == node]

    def edges_from(self, node: str, port: Optional[str] = None) -> list[Edge]:
        return [e for e in self.edges if e.src == node and (port is None or e.src_port == port)]

    def upstream(self, node: str) -> set[str]:
        return {e.src for e in self.edges_into(node)}

    def partitioned(self, node: str, port: str) -> bool:
        return any(e.key is not None for e in self.edges_into(node) if e.dst_port == port)

    def codec(self, node: str, port: str) -> CodecName:
        for e in self.edges_into(node):
            if e.dst_port == port:
                return e.codec
        return "pickle"

    def validate(self) -> None:
        """FlowError for a flow that cannot run: no source, an input port
        no edge feeds (its node would wait for ever), a cycle (a node
        could never learn that its inputs are exhausted)."""
        if not any(n.kind == "source" for n in self.nodes.values()):
            raise FlowError(f"flow {self.name!r} has no source")
        for n in self.nodes.values():
            if n.kind == "source":
                continue            # a put-driven source's port: fed by producers
            fed = {e.dst_port for e in self.edges_into(n.name)}
            for p in n.inputs:
                if p not in fed:
                    raise FlowError(f"input port {n.name}.{p} is not connected: no edge feeds it")
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = path[path.index(name):] + [name]
                raise FlowError(f"flow {self.name!r} has a cycle: {' -> '.join(cycle)}")
            state[name] = 1
            for e in self.edges_from(name):
                visit(e.dst, path + [name])
            state[name] = 2

        for name in self.nodes:
            visit(name, [])

    def run(self, directory: str, **kw: Any) -> Any:
        """Run the flow with the local runner (see
        :func:`pyqstore.flow.runner.run`) and return its summary."""
        from .runner import run
        return run(self, directory, **kw)
