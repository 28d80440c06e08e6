"""The partition of a key: the same in every process and on every machine.

Python's ``hash()`` of a str differs per process (PYTHONHASHSEED), so it
would send one word to two reducers; the partition is a CRC-32 of the key's
bytes instead."""
from __future__ import annotations

import pickle
import zlib
from typing import Any


def key_bytes(key: Any) -> bytes:
    """bytes as they are, str as UTF-8, int as its decimal digits, anything
    else pickled (protocol 4: the same bytes for the same value in every
    process of one Python version)."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode()
    return pickle.dumps(key, protocol=4)


def partition(key: Any, k: int) -> int:
    """The instance (0 .. k-1) that owns key."""
    return zlib.crc32(key_bytes(key)) % k
