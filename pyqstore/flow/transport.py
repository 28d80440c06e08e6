"""How a sending node instance hands a batch to a receiving one, on the
per-node layout: the :class:`Transport` interface, and the local transport.

A transport is made for one receiving instance, (node, instance), by a
:data:`TransportFactory`; the sender loop (:class:`pyqstore.flow.pernode.Sender`)
calls ``accept(edge, sender, seq, payloads)`` with the oldest batch of an
outbox and removes the batch once the answer is ACCEPTED or DUPLICATE
(:func:`pyqstore.flow.edge.transfer`).  A call that failed and may succeed
later raises one of :data:`~pyqstore.flow.edge.TRANSPORT_ERRORS` (OSError,
EOFError, TimeoutError): the batch is offered again after a pause.  Any
other exception stops the sender (StaleOwner: another owner took a casket
over).

:class:`LocalTransport` opens the receiving instance's casket on this
machine and applies the batch with its :class:`~pyqstore.flow.edge.Inbox`:
the accept transaction runs in the sender's process, under the receiver's
write lock and owner epoch.  A transport between machines (Ray: an actor
call to the receiving instance, whose :meth:`NodeInstance.accept
<pyqstore.flow.pernode.NodeInstance.accept>` does the same in its own
process) only has to carry the four arguments and the verdict.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, Optional, Protocol, Sequence

from .. import Casket
from .. import open as open_casket
from ..errors import LockedError
from . import names
from .edge import ROOM_WAIT, Inbox, Verdict
from .graph import Flow

__all__ = ["Transport", "TransportFactory", "LocalTransport", "local_transports",
           "inbox_ports"]


class Transport(Protocol):
    """The sender's handle on one receiving instance."""

    def accept(self, edge: str, sender: str, seq: int, payloads: list[bytes]) -> Verdict:
        """Apply batch seq of sender on edge in the receiver (its
        :meth:`Inbox.accept <pyqstore.flow.edge.Inbox.accept>`) and return
        the verdict; payloads [] is the sender's end of stream.  Raises one
        of TRANSPORT_ERRORS when the receiver could not be reached (try
        again later)."""
        ...

    def accept_many(self, edge: str, sender: str,
                    batches: Sequence[tuple[int, list[bytes]]]) -> list[Verdict]:
        """Several batches of sender on edge, in order, in one call (the
        receiver's :meth:`Inbox.accept_many
        <pyqstore.flow.edge.Inbox.accept_many>`: one commit): their
        verdicts as far as it got, which may be fewer than the batches.
        Raises as :meth:`accept`."""
        ...

    def close(self) -> None:
        """Let go of what the transport holds (a casket, a connection)."""
        ...


#: Makes the transport to instance ``instance`` of node ``node``; the sender
#: loop calls it once per receiving instance, in the thread that sends.
TransportFactory = Callable[[str, int], Transport]


def inbox_ports(flow: Flow, node: str, instance: int) -> dict[str, str]:
    """What instance ``instance`` of node receives: the wire name of each
    edge into it (:func:`names.edge_to`) and the queue of its input port in
    the instance's casket."""
    ports = {}
    for e in flow.edges_into(node):
        part = flow.partitioned(node, e.dst_port)
        ports[names.edge_to(e.name, instance)] = names.input_queue(
            node, e.dst_port, instance if part else None)
    return ports


class LocalTransport:
    """The receiving instance's casket on this machine, opened at the first
    batch, and its inbox for the owner holding epoch."""

    def __init__(self, directory: str, flow: Flow, node: str, instance: int, epoch: int,
                 sync: bool = True) -> None:
        self.path = os.path.join(os.fspath(directory), names.node_casket(node, instance))
        self.ports = inbox_ports(flow, node, instance)
        self.epoch = epoch
        self.sync = sync
        self._casket: Optional[Casket] = None
        self._inbox: Optional[Inbox] = None

    def __repr__(self) -> str:
        return f"<pyqstore.flow.LocalTransport to {self.path!r}>"

    def accept(self, edge: str, sender: str, seq: int, payloads: list[bytes]) -> Verdict:
        return self.accept_many(edge, sender, [(seq, payloads)])[0]

    def accept_many(self, edge: str, sender: str,
                    batches: Sequence[tuple[int, list[bytes]]]) -> list[Verdict]:
        if self._inbox is None:
            # the runner made and claimed every casket before any node
            # started: "w", so a wrong directory is an error, not a new casket
            self._casket = open_casket(self.path, "w", sync=self.sync)
            self._inbox = Inbox(self._casket, self.epoch, self.ports)
        try:
            return self._inbox.accept_many(edge, sender, batches, ROOM_WAIT)
        except LockedError as e:
            # the receiver held its write lock for lock_timeout (it is
            # stopped, or stalled): unreachable for now, not a failure
            raise TimeoutError(f"{self!r}: {e}") from e

    def close(self) -> None:
        if self._casket is not None:
            self._casket.close()
        self._casket = None
        self._inbox = None


def local_transports(directory: str, flow: Flow, epochs: Mapping[tuple[str, int], int],
                     sync: bool = True) -> TransportFactory:
    """The factory of the local runner: a :class:`LocalTransport` to each
    receiving instance, with the owner epoch the runner claimed its casket
    with (``epochs[(node, instance)]``)."""
    def make(node: str, instance: int) -> Transport:
        return LocalTransport(directory, flow, node, instance, epochs[(node, instance)], sync)
    return make
