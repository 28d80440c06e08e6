"""Sources: replayable producers whose position is node state, committed
in the firing that emits what they produced, so a restarted source neither
skips nor repeats."""
from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Iterator, Optional

from .blocks import read_block

__all__ = ["IterableSource", "FileSource", "PutSource"]


class IterableSource:
    """The items of an iterable that gives the same items each time it is
    iterated (a list, a range, a picklable object with ``__iter__``); the
    state ``pos`` counts the items emitted, and a restart skips them."""

    def __init__(self, iterable: Iterable[Any]) -> None:
        self.iterable = iterable
        self._it: Optional[Iterator[Any]] = None

    def __getstate__(self) -> dict[str, Any]:
        return {"iterable": self.iterable}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.iterable = d["iterable"]
        self._it = None

    def produce(self, ctx: Any, n: int) -> list[Any]:
        """Up to n next items; [] when the iterable is exhausted."""
        if self._it is None:
            self._it = itertools.islice(iter(self.iterable), ctx.state.get("pos", 0), None)
        items = list(itertools.islice(self._it, n))
        ctx.state["pos"] = ctx.state.get("pos", 0) + len(items)
        return items


class FileSource:
    """A file in blocks of whole lines of at most block_size bytes (a
    longer line is a block of its own), each one item of bytes, or with
    lines=True its lines (without the newline, as bytes).  The state
    ``offset`` is where the next block starts."""

    def __init__(self, path: str, block_size: int = 1 << 20, lines: bool = False) -> None:
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, not {block_size!r}")
        self.path = os.fspath(path)
        self.block_size = block_size
        self.lines = lines

    def produce(self, ctx: Any, n: int) -> list[Any]:
        """Up to n next blocks (or their lines); [] at the end of the file."""
        offset = ctx.state.get("offset", 0)
        out: list[Any] = []
        with open(self.path, "rb") as f:
            for _ in range(n):
                block, offset = read_block(f, offset, self.block_size)
                if not block:
                    break
                if self.lines:
                    out.extend(block.splitlines())
                else:
                    out.append(block)
        ctx.state["offset"] = offset
        return out


class PutSource:
    """A source fed by the application while the flow runs, from any
    process: :class:`pyqstore.flow.Producer` puts numbered batches into its
    input port ``put`` (a bounded queue of at most maxsize items, codec
    pickle), each applied once, and ends the stream with
    :meth:`~pyqstore.flow.Producer.end`; the source hands the items on to
    its output port in its firings and finishes once the stream ended and
    its port is empty."""

    inputs = ("put",)

    def __init__(self, maxsize: int = 10000) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be an int >= 1, not {maxsize!r}")
        self.maxsize = maxsize

    def step(self, batch: list[Any], ctx: Any) -> list[Any]:
        return batch
