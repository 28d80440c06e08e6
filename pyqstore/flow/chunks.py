"""The per-node layout's unit of transfer and storage: a chunk.

On the per-node layout an input port fed by edges holds chunks, not items:
each entry of the port's queue is up to ``limit`` items that one upstream
firing sent to this instance, encoded together by the edge's codec (one
``dumps`` of a list instead of one per item), behind a 4-byte count that
readers without the flow's code (``qstore flow status``) can read.  The
port's queue stores, reserves, acks and dead-letters a chunk as one entry:
the store's work per firing is one record, whatever the batch size.

The bound stays exact in items: the chunk limit of a port is the largest
divisor of the node's maxsize that is at most its batch, and the port's
queue is bounded to ``maxsize // limit`` chunks, so it never holds more
than maxsize items, and a firing's output of n <= maxsize items (the
firing's own check) makes at most ceil(n / limit) <= maxsize // limit
chunks: it fits in an empty port.  A firing takes one chunk: at most
``batch`` items, as on the shared layout.
"""
from __future__ import annotations

import struct
from typing import Any

from .. import Queue
from .._queue import Codec
from ..errors import CorruptError, DecodeError

__all__ = ["chunk_limit", "port_bound", "encode_chunks", "decode_chunk", "chunk_count",
           "count_items"]

_COUNT = struct.Struct(">I")


def chunk_limit(batch: int, maxsize: int) -> int:
    """The most items in one chunk of a port whose node takes ``batch``
    items per firing and holds at most ``maxsize`` (batch <= maxsize, both
    >= 1, as Flow checks): the largest divisor of maxsize not above batch."""
    for d in range(min(batch, maxsize), 0, -1):
        if maxsize % d == 0:
            return d
    raise ValueError(f"batch {batch} and maxsize {maxsize} must be >= 1")


def port_bound(maxsize: int, limit: int) -> int:
    """The port queue's maxsize, in chunks of at most limit items."""
    return maxsize // limit


def encode_chunks(codec: Codec[Any], items: list[Any], limit: int) -> list[bytes]:
    """items, in order, as chunks of at most limit items each."""
    return [_COUNT.pack(len(part)) + codec.encode(part)
            for part in (items[i:i + limit] for i in range(0, len(items), limit))]


def chunk_count(raw: bytes) -> int:
    """How many items a chunk holds, from its header alone (no codec).
    CorruptError for a payload too short to be a chunk."""
    if len(raw) < _COUNT.size:
        raise CorruptError(f"a chunk of {len(raw)} bytes is shorter than its count")
    n: int = _COUNT.unpack_from(raw)[0]
    return n


def decode_chunk(codec: Codec[Any], raw: bytes, queue: str, item_id: int) -> list[Any]:
    """The items of chunk item_id of queue.  DecodeError when the payload is
    not a chunk of that codec (too short, not a list, or not the count its
    header says)."""
    try:
        n = chunk_count(raw)
        items = codec.decode(raw[_COUNT.size:])
    except Exception as e:
        raise DecodeError(f"queue {queue!r}: item {item_id} is not a chunk of items: "
                          f"{type(e).__name__}: {e}", queue, item_id, raw) from e
    if type(items) is not list or len(items) != n:
        got = f"{len(items)} items" if isinstance(items, list) else f"a {type(items).__name__}"
        raise DecodeError(f"queue {queue!r}: chunk {item_id}'s header says {n} items, its "
                          f"payload holds {got}", queue, item_id, raw)
    return items


def count_items(queue: "Queue[bytes]", chunked: bool) -> int:
    """The items a queue holds, reserved ones included: its entries, or,
    when it holds chunks, the sum of their counts (a scan of the queue,
    which the flow bounds; no codec needed)."""
    if not chunked:
        return len(queue) + len(queue.pending())
    return sum(map(chunk_count, queue.iter()))
