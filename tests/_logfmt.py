"""The log's frame format, read independently of the C scan (the reference
model of DESIGN.md "Log (NAME-log)", csrc/pagefmt.h and csrc/wal.c): the
tests that damage a log or count its frames walk it with this.

A whole frame is an 8-byte header (magic "QSFR", hole start, hole end) and
the page without its hole; a delta frame (format 3) is a 40-byte header
(magic "QSFD", length, depth, hole, base offset, base checksum, its own
checksum), runs of changed bytes, and the page's trailer.  Either way the
trailer, page bytes [PG_USABLE, PG_SIZE), ends the frame.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

PG_SIZE = 4096
PG_USABLE = 4000
FRAME_HDR = 8
FRAME_MAGIC = 0x52465351
DELTA_MAGIC = 0x44465351
DELTA_HDR = 40
TRAILER = PG_SIZE - PG_USABLE
TR_PGNO, TR_FLAGS, TR_SALT, TR_TXN, TR_SYNCED = 4000, 4004, 4008, 4016, 4072


@dataclass
class Frame:
    off: int
    length: int
    commit: bool
    txn: int
    synced: int
    pgno: int = 0
    delta: bool = False
    depth: int = 0  # a delta's place in its chain (1: on a whole frame)
    base: int = 0  # a delta's base frame offset

    @property
    def end(self) -> int:
        return self.off + self.length


def log_frames(data: bytes) -> list[Frame]:
    """The frames of the log's current generation, in order, up to the first
    that does not parse (the writer's output is undamaged here)."""
    salt = struct.unpack_from("<Q", data, 16)[0]
    frames, off = [], PG_SIZE
    while off + FRAME_HDR <= len(data):
        magic, hs, he = struct.unpack_from("<IHH", data, off)
        depth = base = 0
        if magic == DELTA_MAGIC:
            if off + DELTA_HDR > len(data):
                break
            length, depth = hs, he  # the two u16 after the magic
            base = struct.unpack_from("<Q", data, off + 16)[0]
            if length < DELTA_HDR + TRAILER or off + length > len(data):
                break
            he, after_hole = PG_USABLE, off + length - TRAILER
        elif magic != FRAME_MAGIC or hs > he or he > PG_USABLE:
            break
        else:
            length = FRAME_HDR + PG_SIZE - (he - hs)
            if off + length > len(data):
                break
            after_hole = off + FRAME_HDR + hs  # page byte f >= he is at after_hole + f - he

        def field(fmt: str, f: int) -> int:
            return struct.unpack_from(fmt, data, after_hole + f - he)[0]

        if field("<Q", TR_SALT) != salt:
            break
        frames.append(
            Frame(off, length, bool(field("<I", TR_FLAGS) & 1), field("<Q", TR_TXN),
                  field("<Q", TR_SYNCED), field("<I", TR_PGNO), magic == DELTA_MAGIC, depth,
                  base))
        off += length
    return frames
