"""Reading a file in blocks of whole lines, from a stored offset.

:func:`read_block` is the file source's reader: given the offset where the
last committed block ended it returns the next block and the offset after
it, so a source that commits that offset with the items it produced
neither skips nor repeats when it restarts.  (The benchmark's
``qstore_bench.widefinder.blocks`` is the same cut as a generator; it can
call this function.)"""
from __future__ import annotations

from typing import BinaryIO


def read_block(f: BinaryIO, offset: int, block_size: int) -> tuple[bytes, int]:
    """The block of whole lines starting at offset (a line's start): at most
    block_size bytes, unless its first line is longer (then that line), a
    last line without its newline included.  Returns (block, next offset);
    an empty block at the end of the file."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, not {block_size}")
    f.seek(offset)
    data = f.read(block_size)
    if len(data) < block_size:          # the end of the file: all of it
        return data, offset + len(data)
    cut = data.rfind(b"\n") + 1
    while cut == 0:                     # one line longer than a block
        more = f.read(block_size)
        if not more:
            return data, offset + len(data)
        nl = more.find(b"\n")
        if nl >= 0:
            data += more[:nl + 1]
            return data, offset + len(data)
        data += more
    return data[:cut], offset + cut
