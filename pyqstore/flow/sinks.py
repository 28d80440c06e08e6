"""Sinks: where a flow's results leave it.  Each is a node with one input
port and one instance; its firings are numbered, and ``ctx.batch_id`` is
``(edge, sequence)``: the same id for the same items if the firing is
repeated after a kill, so a sink writing outside the flow can write
idempotently."""
from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["CallbackSink", "FileSink", "QueueSink"]


class CallbackSink:
    """Calls fn(batch_id, items) for each batch.  fn runs before the
    firing commits: after a kill it is called again with the same id and
    items, so it must store by id (write the batch under its id, or skip
    an id it has)."""

    stable_batches = True

    def __init__(self, fn: Callable[[tuple[str, int], list[Any]], Any]) -> None:
        self.fn = fn

    def step(self, batch: list[Any], ctx: Any) -> None:
        self.fn(ctx.batch_id, batch)


class FileSink:
    """Appends each item as a line (str as UTF-8, bytes as they are, other
    values as their str()) to the file at path.  The length of the file is
    state committed with the firing; a restarted sink first cuts the file
    back to it, dropping what an uncommitted firing wrote."""

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)

    def setup(self, ctx: Any) -> None:
        with open(self.path, "ab") as f:
            f.truncate(ctx.state.get("size", 0))

    def step(self, batch: list[Any], ctx: Any) -> None:
        data = b"".join((x if isinstance(x, bytes) else str(x).encode()) + b"\n" for x in batch)
        with open(self.path, "r+b") as f:
            f.seek(ctx.state.get("size", 0))
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        ctx.state["size"] = ctx.state.get("size", 0) + len(data)


class QueueSink:
    """Puts the items in the casket's queue called name (codec pickle), in
    the firing's transaction: they are there exactly once."""

    def __init__(self, name: str) -> None:
        self.name = name

    def step(self, batch: list[Any], ctx: Any) -> None:
        ctx.put_after(self.name, batch)
