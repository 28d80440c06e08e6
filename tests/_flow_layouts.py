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
from pyqstore.flow.firing import Instance, configure_queues
from pyqstore.flow.pernode import NodeInstance, configure_inputs

LAYOUTS = ("shared", "per-node")


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
        """The input port's queue (a shared edge's one queue on "shared")."""
        part = self.flow.partitioned(node, port)
        qn = names.input_queue(node, port, instance if part else None)
        return self.queue(node, instance or 0, qn)

    def dead(self, node: str) -> list[Any]:
        """The dead letters of every instance of node, reserved (to read
        their counts and reasons)."""
        out = []
        for db in {id(c): c for (n, _), c in self.caskets.items() if n == node}.values():
            q = db.queue(names.dead_queue(node), "pickle")
            out += [q.reserve() for _ in range(len(q))]
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
