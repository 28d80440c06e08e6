"""One node instance on the per-node layout: its own casket, its input
ports fed by the edge protocol, its outboxes, and the sender loop.

Seed 000's layout: every node instance has a standalone casket
(``DIR/nodes/NODE.I.qdb``, :func:`names.node_casket`) with one owner
epoch, and every edge, even on one machine, is the exactly-once transfer
of :mod:`.edge`.  In the instance's casket:

- its input ports, the queues :func:`names.input_queue` names, holding
  chunks of items (:mod:`.chunks`; bounded to the node's maxsize in items,
  max_deliveries and the dead-letter port per chunk), filled only by
  :meth:`Inbox.accept <pyqstore.flow.edge.Inbox.accept>` with the marks per
  (edge, sender);
- one :class:`~pyqstore.flow.edge.Outbox` per (outgoing edge, receiving
  instance), on the wire ``names.edge_to(edge, j)`` from
  ``names.sender(node, i)``; a partitioned edge picks j by the stable
  partition of each item's key, a shared edge sends each firing's items to
  one instance, taking them in turn;
- its state and counters, as on the shared layout.

The firing is :class:`pyqstore.flow.firing.Instance`'s: reserve, the work
with no lock held, then one transaction of this casket acks the batch,
appends what it emitted to the outboxes (each item encoded by its edge's
codec) and writes the state.  An outbox without room aborts it; the firing
waits for room (woken by this process's sender loop) and tries again.
Finishing appends an end of stream to every outbox in the finishing
transaction; an instance's inputs are exhausted once its inbox has applied
the end of every upstream instance on every edge into it and its queues
hold nothing.  The instance is finished when its outboxes are empty too.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

from .. import Casket
from .._batch import Batch
from .._queue import resolve_codec
from . import names
from .chunks import chunk_limit, decode_chunk, encode_chunks, port_bound
from .edge import ROOM_WAIT, Inbox, Outbox, Verdict, transfer
from .firing import Instance
from .graph import Edge, Flow
from .partition import partition
from .transport import TransportFactory, inbox_ports

__all__ = ["NodeInstance", "Sender", "configure_inputs", "DEFAULT_MAX_BATCHES"]

#: unsent batches an outbox holds before the firings that feed it wait
DEFAULT_MAX_BATCHES = 16


def node_chunk_limit(flow: Flow, node: str) -> int:
    """The most items in one chunk of the node's input ports
    (:func:`.chunks.chunk_limit` of its batch and maxsize)."""
    n = flow.nodes[node]
    return chunk_limit(n.batch, n.maxsize)


def configure_inputs(casket: Casket, flow: Flow, node: str, instance: int) -> None:
    """Store the policy of the instance's input queues in its casket
    (maxsize, max_deliveries, the dead-letter port), before any batch is
    accepted: the runner (or the actor that owns the casket) does it at
    start.  The queues hold chunks (:mod:`.chunks`): the bound is the
    node's maxsize in chunks of its chunk limit, and max_deliveries counts
    the reserves of a chunk.  A port no edge feeds (a put-driven source's,
    which its producers fill) holds items, bounded by maxsize items."""
    n = flow.nodes[node]
    bound = port_bound(n.maxsize, node_chunk_limit(flow, node))
    dead = names.dead_queue(node) if n.max_deliveries else ""
    fed = set(inbox_ports(flow, node, instance).values())
    with casket.transaction():
        for queue in fed:
            casket.queue(queue, maxsize=bound, max_deliveries=n.max_deliveries, dead_letter=dead)
        for port in n.inputs:
            queue = names.input_queue(node, port, None)
            if not any(e.dst_port == port for e in flow.edges_into(node)):
                casket.queue(queue, flow.codec(node, port), maxsize=n.maxsize,
                             max_deliveries=n.max_deliveries, dead_letter=dead)


class _ToOutbox:
    """A firing's put target for one outbox: the items become one batch of
    chunks of at most limit items (the receiver's chunk limit), each
    encoded by the edge's codec (the base firing calls put_many inside its
    transaction)."""

    def __init__(self, outbox: Outbox, casket: Casket, codec: Any, limit: int) -> None:
        self.outbox = outbox
        self.casket = casket
        self.codec = codec
        self.limit = limit

    def put_many(self, items: list[Any]) -> None:
        self._put_many_encoded(self._encode_many(items))

    # the firing encodes before its transaction (as for a Queue)
    def _encode_many(self, items: list[Any]) -> list[Any]:
        return encode_chunks(self.codec, items, self.limit)

    def _put_many_encoded(self, encoded: list[Any]) -> None:
        self.outbox.put(encoded, self.casket)


class _EndOf(_ToOutbox):
    def _encode_many(self, items: list[Any]) -> list[Any]:
        return items

    def _put_many_encoded(self, encoded: list[Any]) -> None:
        self.outbox.put_end(self.casket)


class NodeInstance(Instance):
    """Instance ``instance`` of a node in its own casket, for the owner
    holding epoch.  :meth:`fire`, :meth:`try_finish`, :meth:`setup`,
    :meth:`close` and ``done`` as on the shared layout; :attr:`outboxes`
    for the :class:`Sender`; :meth:`accept` for a transport that calls the
    receiving instance itself; :meth:`drained` once everything it sent
    was delivered."""

    def __init__(self, casket: Casket, flow: Flow, node: str, instance: int, epoch: int,
                 should_stop: Callable[[], bool] = lambda: False,
                 max_batches: int = DEFAULT_MAX_BATCHES) -> None:
        super().__init__(casket, flow, node, instance, epoch, should_stop)
        self.sender = names.sender(node, instance)
        #: (edge name, receiving instance j) -> its outbox, in this casket;
        #: it sends to instance j of ``receiver[edge name]``
        self.outboxes: dict[tuple[str, int], Outbox] = {}
        self.receiver: dict[str, str] = {}
        self._to: dict[tuple[str, int], _ToOutbox] = {}
        for e in flow.edges_from(node):
            codec = resolve_codec(e.codec)
            limit = node_chunk_limit(flow, e.dst)
            self.receiver[e.name] = e.dst
            for j in range(flow.nodes[e.dst].parallelism):
                box = Outbox(casket, names.edge_to(e.name, j), self.sender, epoch, max_batches)
                self.outboxes[(e.name, j)] = box
                self._to[(e.name, j)] = _ToOutbox(box, casket, codec, limit)
        self._turn = 0
        self._finishing = False
        ports = inbox_ports(flow, node, instance)
        self.inbox: Optional[Inbox] = Inbox(casket, epoch, ports) if ports else None
        # The ports that edges feed hold chunks: read raw, one chunk per
        # firing, decoded by _items (a put-driven source's own port, fed by
        # producers, holds items).
        chunked = set(ports.values())
        self._chunk_codecs: dict[str, Any] = {}
        for k, (port, q) in enumerate(self.inputs):
            if q.name in chunked:
                self._chunk_codecs[q.name] = resolve_codec(flow.codec(node, port))
                self.inputs[k] = (port, casket.queue(q.name))
        if self._chunk_codecs:
            self._take = 1

    def _items(self, batch: Batch[Any]) -> list[Any]:
        codec = self._chunk_codecs.get(batch.queue.name)
        if codec is None:
            return super()._items(batch)
        items: list[Any] = []
        for item_id, raw in zip(batch.ids, batch.payloads):
            items += decode_chunk(codec, raw, batch.queue.name, item_id)
        return items

    def accept(self, edge: str, sender: str, seq: int, payloads: list[bytes]) -> Verdict:
        """Apply a batch sent to this instance (:meth:`Inbox.accept
        <pyqstore.flow.edge.Inbox.accept>`): the entry point of a transport
        that runs in the receiving instance's process (a Ray actor call)."""
        if self.inbox is None:
            raise LookupError(f"node {self.node.name!r} is a source: it receives no edge")
        return self.accept_many(edge, sender, [(seq, payloads)])[0]

    def accept_many(self, edge: str, sender: str,
                    batches: Sequence[tuple[int, list[bytes]]]) -> list[Verdict]:
        """:meth:`accept` for several batches in one transaction
        (:meth:`Inbox.accept_many <pyqstore.flow.edge.Inbox.accept_many>`),
        a batch that does not fit given ROOM_WAIT seconds for room."""
        if self.inbox is None:
            raise LookupError(f"node {self.node.name!r} is a source: it receives no edge")
        return self.inbox.accept_many(edge, sender, batches, ROOM_WAIT)

    def drained(self) -> bool:
        """Every batch this instance put in its outboxes was delivered."""
        return all(box.held() == 0 for box in self.outboxes.values())

    # ---------------------------------------------------------- the firing

    def _route(self, e: Edge, items: list[Any], puts: dict[str, tuple[Any, list[Any]]],
               bound: dict[str, str]) -> None:
        k = self.flow.nodes[e.dst].parallelism
        if e.key is None:
            # shared work: the firing's items go to one instance, in turn
            self._turn += 1
            targets = [(self._turn % k, items)]
        else:
            by: dict[int, list[Any]] = {}
            for x in items:
                by.setdefault(partition(e.key(x), k), []).append(x)
            targets = list(by.items())
        for j, xs in targets:
            wire = names.edge_to(e.name, j)
            puts.setdefault(wire, (self._to[(e.name, j)], []))[1].extend(xs)
            bound[wire] = e.dst

    def _routed(self, result: Any) -> list[tuple[Any, list[Any]]]:
        puts = super()._routed(result)
        if self._finishing:
            # after the last output, in the same transaction: the end of
            # stream of every outbox, so a receiver learns it in order
            for key, box in self.outboxes.items():
                to = self._to[key]
                puts.append((_EndOf(box, to.casket, to.codec, to.limit), []))
        return puts

    def _wait_for_room(self, puts: list[tuple[Any, list[Any]]]) -> bool:
        # an outbox's room comes from this process's sender loop, which
        # wakes wait_for_room at once; the stop flag is looked at between
        for to, _ in puts:
            if isinstance(to, _ToOutbox):
                while not to.outbox.wait_for_room(timeout=0.1):
                    if self.should_stop():
                        return False
        return super()._wait_for_room([p for p in puts if not isinstance(p[0], _ToOutbox)])

    # ------------------------------------------------- the end of the stream

    def _upstream_done(self) -> bool:
        inbox = self.inbox
        if inbox is None:
            return True
        for e in self.flow.edges_into(self.node.name):
            wire = names.edge_to(e.name, self.instance)
            for i in range(self.flow.nodes[e.src].parallelism):
                if not inbox.ended(wire, names.sender(e.src, i)):
                    return False
        return True

    def try_finish(self) -> bool:
        self._finishing = True
        try:
            return super().try_finish()
        finally:
            self._finishing = False


class Sender:
    """The sender loop of one instance: a thread per outbox that offers its
    batches, oldest first and all it holds at a time (one call and one
    ``sent`` for them), to the receiving instance through a transport
    the factory makes for it (:func:`pyqstore.flow.edge.transfer`), and
    waits for the next batch on the outbox's futex word when it is empty.
    A GAP, a FULL or a transport error is offered again after a pause of
    at most ``max_backoff`` seconds.  An error of any other kind
    (StaleOwner) stops every thread and is kept in :attr:`error`."""

    def __init__(self, instance: NodeInstance, transports: TransportFactory, *,
                 max_backoff: float = 0.05) -> None:
        self.instance = instance
        self.transports = transports
        self.max_backoff = max_backoff
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for (edge, j), box in self.instance.outboxes.items():
            t = threading.Thread(target=self._send, args=(box, self.instance.receiver[edge], j),
                                 daemon=True,
                                 name=f"send {box.edge} from {box.sender}")
            t.start()
            self._threads.append(t)

    def _send(self, box: Outbox, node: str, j: int) -> None:
        transport = None
        try:
            transport = self.transports(node, j)
            while not self._stop.is_set():
                transfer(box, transport.accept, wait=0.1, stop=self._stop, backoff=0.001,
                         max_backoff=self.max_backoff, window=box.max_batches,
                         accept_many=transport.accept_many)
        except BaseException as e:      # the worker reads it and ends the process
            if self.error is None:
                self.error = e
            self._stop.set()
        finally:
            if transport is not None:
                transport.close()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every thread (each after its current offer) and wait for
        them."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
