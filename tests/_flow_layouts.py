"""A flow's instances fired in this process on either layout, for the
tests that drive firings by hand: on "shared" one casket; on "per-node" a
casket per instance, and deliver() moves one outbox batch to its receiver
(the transfer's three steps, with the receiver's accept called directly),
sometimes offering it twice, as a retry after a lost answer would."""
from __future__ import annotations

import os
import random
from typing import Any, Optional

import pyqstore
from pyqstore.flow import Flow, Verdict, claim, names
from pyqstore.flow.chunks import chunk_count, decode_chunk
from pyqstore.flow.firing import Instance, configure_queues
from pyqstore.flow.pernode import NodeInstance, configure_inputs

LAYOUTS = ("shared", "per-node")


class DeadItem:
    """One item of a dead-letter port, reserved: its payload, and the
    deliveries and reason of the entry that holds it (itself, or on the
    per-node layout its chunk)."""

    def __init__(self, payload: Any, entry: Any) -> None:
        self.payload = payload
        self.deliveries = entry.deliveries
        self.reason = entry.reason


class ChunkedPort:
    """A per-node input port (a queue of chunks) seen as its items."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def __len__(self) -> int:
        return sum(map(chunk_count, self.queue.peek_many(max(1, len(self.queue)))))

    def pending(self) -> list:
        return self.queue.pending()

    def reserve(self) -> Any:
        return self.queue.reserve()

    def get_many(self, n: int) -> list:
        out: list = []
        while len(out) < n and len(self.queue):
            raw = self.queue.peek()
            assert chunk_count(raw) <= n - len(out), "a chunk would split"
            out += decode_chunk(pyqstore._queue.resolve_codec("pickle"), self.queue.get(),
                                self.queue.name, 0)
        return out


class Fired:
    def __init__(self, directory: str, flow: Flow, layout: str, max_batches: int = 16) -> None:
        self.flow = flow
        self.layout = layout
        self.caskets: dict[tuple[str, int], pyqstore.Casket] = {}
        self.insts: dict[tuple[str, int], Any] = {}
        keys = [(n.name, i) for n in flow.nodes.values() for i in range(n.parallelism)]
        if layout == "shared":
            db = pyqstore.open(os.path.join(directory, names.CASKET), sync=False)
            configure_queues(db, flow)
            epoch = claim(db)
            for k in keys:
                self.caskets[k] = db
                self.insts[k] = Instance(db, flow, k[0], k[1], epoch)
        else:
            os.makedirs(os.path.join(directory, names.NODES), exist_ok=True)
            for k in keys:
                db = pyqstore.open(os.path.join(directory, names.node_casket(*k)), sync=False)
                configure_inputs(db, flow, *k)
                self.caskets[k] = db
                self.insts[k] = NodeInstance(db, flow, k[0], k[1], claim(db),
                                             max_batches=max_batches)

    def casket(self, node: str, instance: int = 0) -> pyqstore.Casket:
        return self.caskets[(node, instance)]

    def queue(self, node: str, instance: int, name: str) -> Any:
        return self.casket(node, instance).queue(name, "pickle")

    def input(self, node: str, instance: Optional[int] = None, port: str = "in") -> Any:
        """The input port's queue (a shared edge's one queue on "shared"),
        seen as its items (on "per-node" it holds chunks)."""
        part = self.flow.partitioned(node, port)
        qn = names.input_queue(node, port, instance if part else None)
        if self.layout == "shared":
            return self.queue(node, instance or 0, qn)
        return ChunkedPort(self.casket(node, instance or 0).queue(qn))

    def dead(self, node: str) -> list[DeadItem]:
        """The dead letters of every instance of node, reserved (to read
        their counts and reasons), item by item."""
        out = []
        chunked = self.layout != "shared" and bool(self.flow.edges_into(node))
        for db in {id(c): c for (n, _), c in self.caskets.items() if n == node}.values():
            q = db.queue(names.dead_queue(node), None if chunked else "pickle")
            for _ in range(len(q)):
                entry = q.reserve()
                if not chunked:
                    out.append(DeadItem(entry.payload, entry))
                    continue
                codec = pyqstore._queue.resolve_codec("pickle")
                out += [DeadItem(x, entry)
                        for x in decode_chunk(codec, entry.payload, q.name, entry.id)]
        return out

    def has_room(self, inst: Any) -> bool:
        """A firing of inst would not wait: each of its outboxes has room
        for the one batch a firing puts there (in this process nothing
        else would make room while it waits)."""
        return all(b.held() < b.max_batches for b in getattr(inst, "outboxes", {}).values())

    def deliver(self, rnd: random.Random) -> bool:
        """Offer one outbox's oldest batch (a random one); False when every
        outbox is empty or there is no outbox (shared)."""
        if self.layout == "shared":
            return False
        boxes = [(inst, key, box) for inst in self.insts.values()
                 for key, box in inst.outboxes.items() if box.held()]
        if not boxes:
            return False
        inst, (edge, j), box = rnd.choice(boxes)
        seq, payloads = box.next()
        receiver = self.insts[(inst.receiver[edge], j)]
        verdict = receiver.accept(box.edge, box.sender, seq, payloads)
        if rnd.random() < 0.2:      # a retry after a lost answer
            assert receiver.accept(box.edge, box.sender, seq, payloads) in (
                Verdict.DUPLICATE, Verdict.FULL)
        if verdict in (Verdict.ACCEPTED, Verdict.DUPLICATE):
            box.sent(seq)
        return True

    def close(self) -> None:
        for db in {id(c): c for c in self.caskets.values()}.values():
            db.close()
