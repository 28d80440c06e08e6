"""The flow's counter records: an unsigned 64-bit number, big-endian."""
from __future__ import annotations

import struct

from .. import Casket
from ..errors import CorruptError

_U64 = struct.Struct(">Q")


def read_counter(casket: Casket, key: bytes) -> int:
    """The counter stored under key, 0 when there is none yet.
    CorruptError for a record that is not 8 bytes."""
    raw = casket.get(key)
    if raw is None:
        return 0
    if len(raw) != _U64.size:
        raise CorruptError(f"record {key!r} of {casket.path!r} is {len(raw)} bytes, not 8")
    value: int = _U64.unpack(raw)[0]
    return value


def write_counter(casket: Casket, key: bytes, value: int) -> None:
    """Store value as the counter under key."""
    casket.put(key, _U64.pack(value))
