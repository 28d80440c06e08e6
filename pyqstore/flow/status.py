"""What a flow's run holds, read from its caskets: every node and instance,
its ports' depths, its dead letters, its state's size, its counters, and
when it last fired.  :func:`status` opens the run's caskets read-only, so it
works on a running flow without touching it (each look is one read of the
newest commit) and on a stopped one; :func:`collect` reads through caskets
the caller has open (the runner's live display).  ``qstore flow status DIR``
prints it.
"""
from __future__ import annotations

import collections
import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Optional

from .. import Casket, Item, Queue
from .. import open as open_casket
from ._records import read_counter
from .chunks import chunk_count, count_items
from .layout import Layout, Topology, layout_of, read_topology

__all__ = ["status", "collect", "FlowStatus", "NodeStatus", "InstanceStatus", "PortStatus",
           "DeadLetters"]

#: the reasons of the newest dead letters that a status shows
LAST_REASONS = 3


@dataclass
class PortStatus:
    port: str
    direction: str
    instance: Optional[int]        # None: the queue all instances share
    queue: str
    available: int                 # ready to be taken
    reserved: int                  # taken by a firing not committed yet
    delayed: int
    maxsize: int                   # 0: unbounded


@dataclass
class DeadLetters:
    count: int
    last_reasons: list[str] = field(default_factory=list)   # newest last


@dataclass
class InstanceStatus:
    instance: int
    items_in: int
    items_out: int
    failed: int
    finished: bool
    last_firing: Optional[float]   # time.time() of its last committed firing
    state_records: Optional[int]   # None: not read
    state_bytes: Optional[int]


@dataclass
class NodeStatus:
    name: str
    kind: str
    parallelism: int
    ports: list[PortStatus]
    dead_letters: DeadLetters
    instances: list[InstanceStatus]

    @property
    def items_in(self) -> int:
        return sum(i.items_in for i in self.instances)

    @property
    def items_out(self) -> int:
        return sum(i.items_out for i in self.instances)

    @property
    def failed(self) -> int:
        return sum(i.failed for i in self.instances)

    @property
    def finished(self) -> bool:
        return all(i.finished for i in self.instances)

    @property
    def depth(self) -> int:
        """Items waiting in its input ports, reserved ones included."""
        return sum(p.available + p.reserved + p.delayed for p in self.ports
                   if p.direction == "in")


@dataclass
class FlowStatus:
    flow: str
    layout: str
    directory: str
    taken_at: float                # time.monotonic() when it was read
    nodes: dict[str, NodeStatus]

    @property
    def finished(self) -> bool:
        return all(n.finished for n in self.nodes.values())

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["finished"] = self.finished
        del d["taken_at"]
        for n in d["nodes"].values():
            ns = self.nodes[n["name"]]
            n.update(items_in=ns.items_in, items_out=ns.items_out, failed=ns.failed,
                     finished=ns.finished)
        return d

    def __str__(self) -> str:
        return "\n".join(_text(self))


def _ago(t: Optional[float], now: float) -> str:
    if t is None:
        return "never"
    stamp = time.strftime("%H:%M:%S", time.localtime(t))
    return f"{stamp} ({max(0.0, now - t):.1f} s ago)"


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return [line(head)] + [line(r) for r in rows]


def _text(s: FlowStatus) -> list[str]:
    now = time.time()
    state = "finished" if s.finished else "not finished"
    out = [f"flow {s.flow!r} in {s.directory} ({s.layout} layout): {state}", ""]
    rows = []
    for n in s.nodes.values():
        for i in n.instances:
            size = ("-" if i.state_records is None
                    else f"{i.state_records} rec, {i.state_bytes} B")
            rows.append([f"{n.name}[{i.instance}]", n.kind, str(i.items_in), str(i.items_out),
                         str(i.failed), size, "yes" if i.finished else "no",
                         _ago(i.last_firing, now)])
    out += _table(["INSTANCE", "KIND", "IN", "OUT", "FAILED", "STATE", "DONE", "LAST FIRING"],
                  rows, {2, 3, 4})
    out.append("")
    rows = []
    for n in s.nodes.values():
        for p in n.ports:
            who = n.name + (f"[{p.instance}]" if p.instance is not None else "")
            rows.append([f"{who}.{p.port}", p.direction, p.queue, str(p.available),
                         str(p.reserved), str(p.delayed), str(p.maxsize or "-")])
    if rows:
        out += _table(["PORT", "DIR", "QUEUE", "AVAILABLE", "RESERVED", "DELAYED", "MAXSIZE"],
                      rows, {3, 4, 5, 6})
        out.append("")
    rows = [[n.name, str(n.dead_letters.count), " | ".join(n.dead_letters.last_reasons) or "-"]
            for n in s.nodes.values()]
    out += _table(["DEAD LETTERS OF", "COUNT", "LAST REASONS"], rows, {1})
    return out


def _port(casket: Casket, ref: Any) -> PortStatus:
    q = casket.queue(ref.queue)
    if ref.chunk_limit:
        return _chunked_port(q, ref)
    # The length and the reservations are two reads: a batch reserved
    # between them would count twice (a full queue would show more than its
    # bound), so read until the length stood still around the reservations.
    for _ in range(5):
        n = len(q)
        reserved = len(q.pending())
        delayed = q.delayed()
        if len(q) == n:
            break
    return PortStatus(ref.port, ref.direction, ref.instance, ref.queue, n - delayed,
                      reserved, delayed, q.config().maxsize)


def _chunked_port(q: "Queue[bytes]", ref: Any) -> PortStatus:
    # A port of chunks: its items are the counts of the chunks it holds
    # (every one, reserved ones too, in one scan), less those of the
    # reserved chunks; its bound in items is its bound in chunks times
    # the chunk limit.  The flow delays nothing in its ports.
    for _ in range(5):
        counts = {i: chunk_count(raw) for i, raw in q.iter(with_ids=True)}
        held = q.pending()
        if len(counts) == len(q) + len(held):
            break
    reserved = sum(counts.get(p.id, 0) for p in held)
    return PortStatus(ref.port, ref.direction, ref.instance, ref.queue,
                      sum(counts.values()) - reserved, reserved, 0,
                      q.config().maxsize * ref.chunk_limit)


def _dead(caskets: Callable[[str], Casket], refs: list[tuple[str, str]],
          with_reasons: bool, chunked: bool) -> DeadLetters:
    count = 0
    last: collections.deque[str] = collections.deque(maxlen=LAST_REASONS)
    for where, name in refs:
        q = caskets(where).queue(name)
        if not with_reasons:            # the count alone: no scan of an item queue
            count += count_items(q, chunked)
            continue
        newest: collections.deque[int] = collections.deque(maxlen=LAST_REASONS)
        for item_id, raw in q.iter(with_ids=True):
            count += chunk_count(raw) if chunked else 1
            newest.append(item_id)
        for item_id in newest:
            # an Item only to read the item's record (deliveries, reason):
            # nothing is reserved, so token 0 holds nothing
            try:
                reason = Item(q, item_id, b"", 0).reason
            except Exception:   # consumed between the scan and the look
                continue
            last.append(reason or "(no reason)")
    return DeadLetters(count, list(last))


def _instance(casket: Casket, prefix: bytes, i: int, with_state: bool) -> InstanceStatus:
    def counter(what: str) -> int:
        return read_counter(casket, prefix + b"m/" + what.encode())
    last = counter("last")
    records = nbytes = None
    if with_state:
        records = nbytes = 0
        sp = prefix + b"s/"
        for k, v in casket.items(start=sp):
            if not k.startswith(sp):
                break
            records += 1
            nbytes += len(k) - len(sp) + len(v)
    return InstanceStatus(i, counter("in"), counter("out"), counter("failed"),
                          counter("done") != 0, last / 1e9 if last else None, records, nbytes)


def collect(topology: Topology, caskets: Callable[[str], Casket], *, directory: str = "",
            with_state: bool = True, with_reasons: bool = True,
            layout: Optional[Layout] = None) -> FlowStatus:
    """The status of the run of topology, read through caskets(path), which
    gives an open casket for each path of the layout (relative to the run's
    directory).  with_state False skips the state's size (a scan of every
    state record), with_reasons False the dead letters' reasons (a scan of
    the dead-letter queue; their count is read either way)."""
    lay = layout or layout_of(topology)
    nodes = {}
    for n in topology.nodes.values():
        ports = [_port(caskets(ref.casket), ref) for ref in lay.ports(n.name)]
        instances = []
        for i in range(n.parallelism):
            where, prefix = lay.records(n.name, i)
            instances.append(_instance(caskets(where), prefix, i, with_state))
        nodes[n.name] = NodeStatus(n.name, n.kind, n.parallelism, ports,
                                   _dead(caskets, lay.dead_letters(n.name), with_reasons,
                                         lay.chunked(n.name)),
                                   instances)
    return FlowStatus(topology.flow, lay.name, directory, time.monotonic(), nodes)


@contextlib.contextmanager
def _opened(directory: str) -> Iterator[Callable[[str], Casket]]:
    with contextlib.ExitStack() as stack:
        handles: dict[str, Casket] = {}

        def get(path: str) -> Casket:
            if path not in handles:
                handles[path] = stack.enter_context(
                    open_casket(os.path.join(directory, path), "r"))
            return handles[path]
        yield get


def status(directory: str, *, with_state: bool = True) -> FlowStatus:
    """The status of the flow run on directory, from its topology
    (``flow.json``) and its caskets opened read-only.  FlowError when no
    flow has run there; FileNotFound when a casket of its layout is
    missing."""
    directory = os.fspath(directory)
    topology = read_topology(directory)
    with _opened(directory) as caskets:
        return collect(topology, caskets, directory=directory, with_state=with_state)
