"""The application's end of a put-driven source: put numbered batches into a
running (or stopped) flow from any process, each applied exactly once, and
end the stream.

A producer is a sender of the edge protocol (docs/DESIGN.md, "Flow edges")
whose receiver is the source's input port: it names itself, numbers its
batches 1, 2, 3, ..., and each :meth:`Producer.put` is one transaction in
the source's casket that appends the items and raises the producer's mark
only when the batch's number is the mark + 1.  A put whose outcome the
application did not learn (it was killed, the call raised) is simply put
again with the same number: applied once, answered DUPLICATE the second
time.  :attr:`Producer.mark` tells a restarted application where to resume.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterable, Optional

from .. import Casket
from .. import open as open_casket
from ..errors import FlowError, Full, InvalidArgumentError
from . import names
from ._records import read_counter, write_counter
from .edge import Verdict, _name, _seq
from .layout import layout_of, read_topology

__all__ = ["Producer"]


class Producer:
    """Producer name of the put-driven source ``source`` of the flow run on
    directory (the runner has started on it at least once: its topology and
    caskets exist).  Use as a context manager, or call :meth:`close`."""

    def __init__(self, directory: str, source: str, name: str, *, sync: bool = True) -> None:
        directory = os.fspath(directory)
        topo = read_topology(directory)
        node = topo.nodes.get(source)
        if node is None or node.kind != "source" or "put" not in node.inputs:
            have = [n.name for n in topo.nodes.values() if n.kind == "source" and n.inputs]
            raise FlowError(f"flow {topo.flow!r} on {directory!r} has no put-driven source "
                            f"{source!r} (its put-driven sources: {', '.join(have) or 'none'})")
        self.source = source
        self.name = _name(name, "producer name")
        lay = layout_of(topo)
        port = next(p for p in lay.ports(source) if p.port == "put")
        where, _ = lay.records(source, 0)
        if where != port.casket:
            raise FlowError(f"layout {lay.name!r} keeps source {source!r}'s records in {where!r} "
                            f"and its port in {port.casket!r}: a put could not raise its mark "
                            f"in the transaction of its items")
        self.directory = directory
        self._casket: Casket = open_casket(os.path.join(directory, port.casket), "w", sync=sync)
        self._queue = self._casket.queue(port.queue, port.codec)   # type: ignore[call-overload]
        self._mark_key = names.producer_mark(source, self.name)
        self._closed_key = names.meta_key(source, 0, "closed")

    def __repr__(self) -> str:
        return f"<pyqstore.flow.Producer {self.name!r} of {self.source!r} on {self.directory!r}>"

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the producer's casket handle (the stream goes on: see
        :meth:`end`)."""
        self._casket.close()

    @property
    def mark(self) -> int:
        """The number of this producer's last batch applied (0 before the
        first): a restarted application resumes with mark + 1."""
        return read_counter(self._casket, self._mark_key)

    def put(self, items: Iterable[Any], seq: Optional[int] = None,
            timeout: Optional[float] = None) -> Verdict:
        """Put items as batch seq of this producer, durably (with sync, the
        default) and at most once: ACCEPTED when applied now, DUPLICATE when
        batch seq was applied before (nothing changes).  seq None: the next
        number (mark + 1), for an application that does not retry.  When
        the source's port has no room, wait up to timeout seconds (None: no
        limit) for the flow to take items, then Full.
        InvalidArgumentError for a seq after mark + 1 (a batch before it is
        missing: nothing stored); FlowError once the stream ended;
        ValueError for more items than the port can ever hold."""
        batch = list(items)
        want = None if seq is None else _seq(seq)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                with self._casket.transaction():
                    if read_counter(self._casket, self._closed_key):
                        raise FlowError(f"source {self.source!r} on {self.directory!r}: the "
                                        f"stream was ended (Producer.end); nothing more goes in")
                    mark = read_counter(self._casket, self._mark_key)
                    n = mark + 1 if want is None else want
                    if n <= mark:
                        return Verdict.DUPLICATE
                    if n > mark + 1:
                        raise InvalidArgumentError(
                            f"{self!r}: batch {n} comes after batch {mark}: batch {mark + 1} is "
                            f"missing (put it first)")
                    if batch:
                        self._queue.put_many(batch)
                    write_counter(self._casket, self._mark_key, n)
                return Verdict.ACCEPTED
            except Full:
                # the transaction aborted; wait outside it
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._queue.wait_for_room(len(batch), left):
                    raise Full(f"{self!r}: the source's port stayed full for {timeout} s") \
                        from None

    def end(self) -> None:
        """End the source's stream, for every producer: the source finishes
        once the flow took what was put; a put after this raises FlowError.
        Ending twice is harmless."""
        with self._casket.transaction():
            write_counter(self._casket, self._closed_key, 1)
