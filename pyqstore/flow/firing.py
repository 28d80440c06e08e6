"""One node instance on the shared-casket layout and its firing.

A firing: reserve up to ``batch`` items of one input port (one commit that
counts their deliveries), run the node's work with no lock held, then ONE
transaction acks them, puts what the work emitted into the downstream
queues and writes the node's state and counters.  A full downstream queue
aborts that transaction (nothing waits inside one); the firing waits for
room outside it and tries the same transaction again.  When the work
raises, the batch is released with the error's text (``item.fail``), and
the queue's max_deliveries / dead_letter policy moves an item that failed
too often to the node's dead-letter port.  A kill at any moment leaves
either the whole firing committed or none of it, and the reservations of a
dead process come back to the queue by themselves.
"""
from __future__ import annotations

import inspect
import time
import traceback
from typing import Any, Callable, Optional

from .. import Casket, Queue
from .._batch import Batch, Reserved, decoded, reserve_undecoded
from .._queue import CodecName
from ..errors import DecodeError, Empty, FlowError, Full, OutboxFull
from . import names
from ._records import read_counter, write_counter
from .graph import Edge, Flow, Node, work_arity
from .owner import require_owner
from .partition import partition
from .state import State

__all__ = ["Context", "Instance", "configure_queues"]

_REASON_LIMIT = 1024
#: seconds between two looks at should_stop while a firing waits for room
_STOP_CHECK = 0.2


def configure_queues(casket: Casket, flow: Flow) -> None:
    """Store every input queue's policy (maxsize, max_deliveries, the
    dead-letter port) in the casket: the runner does it once, before any
    node process starts, so every process applies the same one."""
    with casket.transaction():
        for node in flow.nodes.values():
            for port in node.inputs:
                for q in _input_names(flow, node, port):
                    casket.queue(q, flow.codec(node.name, port), maxsize=node.maxsize,
                                 max_deliveries=node.max_deliveries,
                                 dead_letter=names.dead_queue(node.name)
                                 if node.max_deliveries else "")


def _input_names(flow: Flow, node: Node, port: str) -> list[str]:
    if flow.partitioned(node.name, port):
        return [names.input_queue(node.name, port, i) for i in range(node.parallelism)]
    return [names.input_queue(node.name, port, None)]


class Context:
    """What a node's work sees: ``name``, ``instance``, ``parallelism``,
    ``state`` (dict-like, committed with the firing), ``port`` (the input
    port of this batch), ``batch_id`` (sinks: ``(edge, sequence)``),
    :meth:`emit`."""

    def __init__(self, node: Node, instance: int, state: State) -> None:
        self.name = node.name
        self.instance = instance
        self.parallelism = node.parallelism
        self.state = state
        self.port: Optional[str] = None
        self.batch_id: Optional[tuple[str, int]] = None
        self._outputs = node.outputs
        self.emitted: dict[str, list[Any]] = {}
        self.extra: dict[str, list[Any]] = {}

    def emit(self, port: str, *items: Any) -> None:
        """Send items to the output port (they leave with the firing's
        commit, not before)."""
        if port not in self._outputs:
            raise FlowError(f"node {self.name!r} has no output port {port!r} "
                            f"(its outputs: {', '.join(self._outputs) or 'none'})")
        self.emitted.setdefault(port, []).extend(items)

    def put_after(self, queue: str, items: list[Any]) -> None:
        """Put items into the casket's queue (codec pickle) in the firing's
        transaction (the queue sink)."""
        self.extra.setdefault(queue, []).extend(items)

    def _reset(self) -> None:
        self.emitted = {}
        self.extra = {}
        self.state.discard()


def _reason(e: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    b = text.encode("utf-8", "replace")[:_REASON_LIMIT]
    return b.decode("utf-8", "ignore")


class Instance:
    """Instance i of a node, working on the shared casket; made in the
    node's process.  :meth:`fire` does one firing, :meth:`try_finish` the
    end of the stream."""

    def __init__(self, casket: Casket, flow: Flow, node: str, instance: int, epoch: int,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.casket = casket
        self.flow = flow
        self.node = flow.nodes[node]
        self.instance = instance
        self.epoch = epoch
        self.should_stop = should_stop
        self.state = State(casket, names.state_prefix(node, instance))
        self.ctx = Context(self.node, instance, self.state)
        n = self.node
        self.inputs: list[tuple[str, Queue[Any]]] = []
        for port in n.inputs:
            part = flow.partitioned(n.name, port)
            qn = names.input_queue(n.name, port, instance if part else None)
            self.inputs.append((port, casket.queue(qn, flow.codec(n.name, port))))
        self._next_input = 0
        #: entries one firing reserves from an input queue: up to batch items
        #: here; one chunk on the per-node layout (:meth:`_items`)
        self._take = n.batch
        #: a batch the last firing's transaction reserved for the next one
        #: (a node with one input port): one commit per firing, not two;
        #: with a sink's number for it
        self._ahead: Optional[tuple[Batch[Any], Optional[tuple[str, int]]]] = None
        self._queues: dict[str, Queue[Any]] = {}
        work = n.work
        self.work: Any = work() if inspect.isclass(work) else work
        self._call = self._caller()
        self.stable = bool(getattr(self.work, "stable_batches", False))

    # -------------------------------------------------------------- helpers

    def _caller(self) -> Callable[[list[Any]], Any]:
        w = self.work
        if self.node.kind != "node" or hasattr(w, "step"):
            return lambda batch: w.step(batch, self.ctx)
        if work_arity(w, self.node.name) == 1:
            return lambda batch: w(batch)
        return lambda batch: w(batch, self.ctx)

    def _meta(self, what: str) -> bytes:
        return names.meta_key(self.node.name, self.instance, what)

    def _bump(self, what: str, by: int) -> None:
        if by:
            k = self._meta(what)
            write_counter(self.casket, k, read_counter(self.casket, k) + by)

    def _fired(self) -> None:
        # when it last fired, for `qstore flow status`: in the firing's
        # transaction, one record
        write_counter(self.casket, self._meta("last"), time.time_ns())

    def _queue(self, name: str, codec: CodecName) -> Queue[Any]:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = self.casket.queue(name, codec)
        return q

    @property
    def done(self) -> bool:
        return read_counter(self.casket, self._meta("done")) != 0

    def setup(self) -> None:
        if hasattr(self.work, "setup"):
            self.work.setup(self.ctx)
            self.state.discard()

    def close(self) -> None:
        # a batch reserved ahead by the last firing goes back now, not when
        # its lease runs out (the node is stopping; another may take it)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            # a sink's record of the batch stays: the next instance hands
            # the same items under the same number
            ahead[0].release()
        if hasattr(self.work, "close") and self.node.kind == "node":
            self.work.close(self.ctx)

    # -------------------------------------------------------------- routing

    def _routed(self, result: Any) -> list[tuple[Any, list[Any]]]:
        """The puts of this firing: per downstream queue, its items in
        order.  An output port with several edges sends each its copy."""
        ctx = self.ctx
        if result is not None:
            if "out" not in self.node.outputs:
                raise FlowError(f"node {self.node.name!r} returned items but has no output "
                                f"port 'out'; emit them with ctx.emit(port, ...)")
            ctx.emitted.setdefault("out", []).extend(result)
        puts: dict[str, tuple[Any, list[Any]]] = {}
        bound: dict[str, str] = {}
        for port, items in ctx.emitted.items():
            for e in self.flow.edges_from(self.node.name, port):
                self._route(e, items, puts, bound)
        for qn, dst in bound.items():
            m = self.flow.nodes[dst].maxsize
            if len(puts[qn][1]) > m:
                raise FlowError(f"node {self.node.name!r} emitted {len(puts[qn][1])} items to "
                                f"{qn} in one firing, more than its maxsize {m}: they could "
                                f"never fit")
        for qn, items in ctx.extra.items():
            puts.setdefault(qn, (self._queue(qn, "pickle"), []))[1].extend(items)
        return [v for v in puts.values() if v[1]]

    def _route(self, e: Edge, items: list[Any], puts: dict[str, tuple[Any, list[Any]]],
               bound: dict[str, str]) -> None:
        """Add the items sent on edge e to puts, under the name of the queue
        each goes to (bound: that name's receiving node, whose maxsize a
        firing's items must fit).  The per-node layout routes to outboxes."""
        k = self.flow.nodes[e.dst].parallelism
        for x in items:
            qn = names.input_queue(e.dst, e.dst_port,
                                   None if e.key is None else partition(e.key(x), k))
            puts.setdefault(qn, (self._queue(qn, e.codec), []))[1].append(x)
            bound[qn] = e.dst

    def _commit(self, batch: Any, puts: list[tuple[Any, list[Any]]],
                counts: dict[str, int]) -> bool:
        """The firing's one transaction; on a full downstream queue, wait
        for room outside it and try again.  False when told to stop while
        waiting (nothing committed)."""
        # encoded before the transaction: not under the write lock
        encoded = [(q, q._encode_many(items)) for q, items in puts]
        while True:
            try:
                with self.casket.transaction():
                    require_owner(self.casket, self.epoch)
                    if batch is not None:
                        batch.ack()     # a whole batch: no per-item checks
                        if self.stable:
                            self.casket.out(self._meta("inflight"))
                    for q, items in encoded:
                        q._put_many_encoded(items)
                    self.state.write()
                    for what, by in counts.items():
                        self._bump(what, by)
                    self._fired()
                    ahead = self._reserve_ahead(batch)
                self.ctx._reset()
                if ahead is not None:
                    self._take_ahead(batch.queue, *ahead)
                return True
            except (Full, OutboxFull):
                pass
            if not self._wait_for_room(puts):
                return False

    def _reserve_ahead(self, batch: Any) -> Optional[tuple[Reserved, Optional[tuple[str, int]]]]:
        """Inside the firing's transaction: reserve the next batch of the
        same input, so that its reserve (and the deliveries it counts)
        commits with this firing instead of in a commit of its own; a sink
        numbers it there too, which is as atomic as the numbering in a
        reserve of its own.  (the reservation, a sink's batch id), or None
        for a source, a node with several inputs (it takes them in turn),
        when told to stop, or when nothing is there (a reserve in a
        transaction never waits)."""
        if batch is None or len(self.inputs) != 1 or self.should_stop():
            return None
        q = batch.queue
        try:
            # decoded after the commit, outside the casket's write lock
            # (which the other nodes of a shared casket are waiting for)
            ahead = reserve_undecoded(q, self._take, None, None)
        except Empty:
            return None
        if not self.stable:
            return ahead, None
        return ahead, (q.name, self._number(ahead[1][0], len(ahead[1])))

    def _take_ahead(self, q: Queue[Any], ahead: Reserved,
                    batch_id: Optional[tuple[str, int]]) -> None:
        try:
            self._ahead = (decoded(q, ahead), batch_id)
        except DecodeError:
            # released: the next reserve meets the payload as any reserve does
            pass

    def _number(self, first: int, count: int) -> int:
        """A sink's next batch number, recorded with the ids it covers (the
        first id and how many; in the caller's transaction)."""
        seq = read_counter(self.casket, self._meta("seq")) + 1
        write_counter(self.casket, self._meta("seq"), seq)
        self.casket.put(self._meta("inflight"), b"%d %d %d" % (seq, first, count))
        return seq

    def _wait_for_room(self, puts: list[tuple[Any, list[Any]]]) -> bool:
        """Wait until every put fits; False when told to stop first."""
        # asleep on each full queue's wake-up word, which a consumer's
        # commit moves; the slices only bound how late a stop is seen
        for q, items in puts:
            while not q.wait_for_room(len(items), timeout=_STOP_CHECK):
                if self.should_stop():
                    return False
        return True

    # --------------------------------------------------------------- firing

    def fire(self, timeout: float = 0.05) -> bool:
        """One firing; False when there was no work (nothing to reserve, or
        a source at its end)."""
        if self.node.kind == "source" and not self.inputs:
            return self._fire_source()
        for _ in range(len(self.inputs)):
            port, q = self.inputs[self._next_input]
            self._next_input = (self._next_input + 1) % len(self.inputs)
            if self._fire_port(port, q, timeout if len(self.inputs) == 1 else 0):
                return True
        return False

    def _fire_source(self) -> bool:
        items = self.work.produce(self.ctx, self.node.batch)
        if not items:
            self.ctx._reset()
            return False
        self.ctx.emitted.setdefault(self.node.outputs[0], []).extend(items)
        puts = self._routed(None)
        if not self._commit(None, puts, {"out": len(items)}):
            # told to stop while waiting for room: the process ends, and the
            # source starts again from its committed position
            self.ctx._reset()
        return True

    def _reserve(self, q: Queue[Any], timeout: float) -> Any:
        if not self.stable:
            return q.reserve_many(self._take, timeout=timeout)
        # A sink numbers its batches: the number and the ids it covers are
        # recorded in the reserve's own commit, so a firing repeated after
        # a kill hands the same items under the same id.
        inflight = self.casket.get(self._meta("inflight"))
        if inflight is not None:
            seq, first, count = (int(x) for x in inflight.split(b" "))
            batch = q.reserve_many(count, timeout=timeout)
            if batch.ids[0] == first and len(batch) == count:
                self.ctx.batch_id = (q.name, seq)
                return batch
            batch.release()
            if not q.pending():
                # nothing is held any more, so that batch is not coming back
                # as it was (its items went to the dead-letter port): number
                # the next batch afresh
                self.casket.out(self._meta("inflight"))
            # else the dead holder's reservation has not come back yet
            # (about 100 ms) and these are later items: try again
            time.sleep(0.01)
            raise Empty(q.name)
        try:
            with self.casket.transaction():
                batch = q.reserve_many(self._take)
                seq = self._number(batch.ids[0], len(batch))
        except Empty:
            time.sleep(min(timeout, 0.02))   # a reserve in a transaction never waits
            raise
        self.ctx.batch_id = (q.name, seq)
        return batch

    def _items(self, batch: Batch[Any]) -> list[Any]:
        """The items a reserved batch hands the work: its payloads, as the
        input queue's codec decoded them (the per-node layout's chunks are
        decoded here)."""
        return batch.payloads

    def _fire_port(self, port: str, q: Queue[Any], timeout: float) -> bool:
        if self._ahead is not None and self._ahead[0].queue is q:
            (batch, batch_id), self._ahead = self._ahead, None
            if batch_id is not None:
                self.ctx.batch_id = batch_id
        else:
            try:
                batch = self._reserve(q, timeout)
            except Empty:
                return False
        self.ctx.port = port
        taken = len(batch)
        try:
            items = self._items(batch)
            taken = len(items)
            result = self._call(items)
            if result is not None and not isinstance(result, list):
                result = list(result)
            puts = self._routed(result)
        except Exception as e:
            self.ctx._reset()
            reason = _reason(e)
            with self.casket.transaction():
                for it in batch:
                    it.fail(reason)
                self._bump("failed", taken)
                self._fired()
            return True
        counts = {"in": taken, "out": sum(len(v) for _, v in puts)}
        if not self._commit(batch, puts, counts):
            self.ctx._reset()
            batch.release()
            return True
        return True

    # ----------------------------------------------------- end of the stream

    def inputs_exhausted(self) -> bool:
        """Every upstream instance has finished, and every input queue of
        this instance holds nothing, available or reserved.  The finished
        marks are read first: an upstream instance commits its last items
        with its mark, so nothing can arrive after this check holds.  A
        put-driven source's upstream is its producers: its mark is the
        ``closed`` one that Producer.end commits, which every later put
        reads in its transaction and refuses."""
        if self.node.kind == "source" and not read_counter(self.casket, self._meta("closed")):
            return False
        return (self._upstream_done()
                and all(len(q) == 0 and not q.pending() for _, q in self.inputs))

    def _upstream_done(self) -> bool:
        """Every upstream instance has committed its last output (here: its
        finished mark in the shared casket)."""
        for up in self.flow.upstream(self.node.name):
            for i in range(self.flow.nodes[up].parallelism):
                if not read_counter(self.casket, names.meta_key(up, i, "done")):
                    return False
        return True

    def try_finish(self) -> bool:
        """Finish when the inputs are exhausted (a source: when it produced
        nothing): run the work's ``finish(ctx)`` and commit what it emitted
        with the finished mark.  True once finished."""
        if self.done:
            return True
        if (self.node.kind != "source" or self.inputs) and not self.inputs_exhausted():
            return False
        self.ctx.port = None
        result = None
        if hasattr(self.work, "finish"):
            result = self.work.finish(self.ctx)
            if result is not None and not isinstance(result, list):
                result = list(result)
        puts = self._routed(result)
        counts = {"out": sum(len(v) for _, v in puts), "done": 1}
        if not self._commit(None, puts, counts):
            self.ctx._reset()
            return False
        return True
