"""RocksDB (rocksdict) and LevelDB (plyvel): the log-structured stores our
users pick today, driven as their documentation advises.

Neither has duplicate keys or queues, so both get the layout their users
build on an ordered key space: a tag byte, a length-prefixed name (so no
name is a prefix of another's keys) and a big-endian sequence number
(insertion order is key order):

  k<key>                        plain key -> value (seed 001)
  d<len32><key><seq64>          one duplicate of key (seed 000's putdup)
  q<len32><name><seq64>         one queue item

A transaction is the product's WriteBatch, applied atomically by one
write; with --sync that write is synced (RocksDB WriteOptions.sync, LevelDB
write_batch(sync=True)), as is every single put outside a transaction.
Threads share the one handle (both libraries are thread-safe and lock
the database directory against a second opener), each with its own batch.
"""
from __future__ import annotations

import importlib.metadata
import itertools
import os
import struct
import threading
from typing import Any, Iterator, Optional

from . import backends as bk

_be32 = struct.Struct(">I").pack
_be64 = struct.Struct(">Q").pack


def _named(tag: bytes, name: bytes) -> bytes:
    return tag + _be32(len(name)) + name


class _Rocks:
    """rocksdict in raw mode (bytes in, bytes out: no pickling)."""

    def __init__(self, path: str, sync: bool) -> None:
        import rocksdict

        self.mod = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = rocksdict.Rdict(path, opts)
        wo = rocksdict.WriteOptions()
        wo.sync = sync
        self.db.set_write_options(wo)

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.db.get(key)
        return result

    def batch(self) -> Any:
        return self.mod.WriteBatch(raw_mode=True)

    def write(self, batch: Any) -> None:
        self.db.write(batch)

    def delete(self, key: bytes) -> None:
        self.db.delete(key)

    def scan(self, prefix: bytes, start: Optional[bytes] = None
             ) -> Iterator[tuple[bytes, bytes]]:
        """The records under prefix in key order, from start (a key under
        prefix) if given."""
        it = self.db.iter()
        it.seek(start or prefix)
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                break
            yield k, it.value()
            it.next()

    def close(self) -> None:
        self.db.close()


class _Level:
    def __init__(self, path: str, sync: bool) -> None:
        import plyvel  # type: ignore[import-untyped, unused-ignore]

        self.sync = sync
        self.db = plyvel.DB(path, create_if_missing=True)

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value, sync=self.sync)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.db.get(key)
        return result

    def batch(self) -> Any:
        return self.db.write_batch(sync=self.sync)

    def write(self, batch: Any) -> None:
        batch.write()

    def delete(self, key: bytes) -> None:
        self.db.delete(key, sync=self.sync)

    def scan(self, prefix: bytes, start: Optional[bytes] = None
             ) -> Iterator[tuple[bytes, bytes]]:
        if start is None:
            with self.db.iterator(prefix=prefix) as it:
                yield from it
            return
        # plyvel takes a prefix or a start, not both: stop at the first key
        # past the prefix instead
        with self.db.iterator(start=start, stop=_after_prefix(prefix)) as it:
            yield from it

    def close(self) -> None:
        self.db.close()


def _after_prefix(prefix: bytes) -> Optional[bytes]:
    """The least key above every key that starts with prefix (None: there
    is none, the prefix is all 0xff)."""
    head = prefix.rstrip(b"\xff")
    return head[:-1] + bytes([head[-1] + 1]) if head else None


class _Shared:
    """What the handles of one store's threads share: the database, the
    sequence, the consumers' lock, and how many handles are still open."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.seq = itertools.count(1)     # next() is atomic under the GIL
        self.take = threading.Lock()      # two consumers never take the same items
        self.handles = 0
        self.lock = threading.Lock()


class _LsmStore(bk.Store):
    def __init__(self, shared: _Shared) -> None:
        self.s = shared
        self.e = shared.engine
        self.batch: Any = None
        with shared.lock:
            shared.handles += 1

    def begin(self) -> None:
        self.batch = self.e.batch()

    def commit(self) -> None:
        batch, self.batch = self.batch, None
        self.e.write(batch)

    def _put(self, key: bytes, value: bytes) -> None:
        if self.batch is not None:
            self.batch.put(key, value)
        else:
            self.e.put(key, value)

    def put(self, key: bytes, value: bytes) -> None:
        self._put(b"k" + key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.e.get(b"k" + key)
        return result

    def putdup(self, key: bytes, value: bytes) -> None:
        self._put(_named(b"d", key) + _be64(next(self.s.seq)), value)

    def getdup(self, key: bytes) -> list[bytes]:
        return [v for _, v in self.e.scan(_named(b"d", key))]

    def qput(self, name: str, payload: bytes) -> None:
        self._put(_named(b"q", name.encode()) + _be64(next(self.s.seq)), payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        with self.s.take:
            taken = list(itertools.islice(self.e.scan(_named(b"q", name.encode())), n))
            if not taken:
                return []
            own = self.batch is None
            batch = self.e.batch() if own else self.batch
            for k, _ in taken:
                batch.delete(k)
            if own:
                self.e.write(batch)
        return [v for _, v in taken]

    def qlen(self, name: str) -> int:
        return sum(1 for _ in self.e.scan(_named(b"q", name.encode())))

    def connect(self) -> bk.Store:
        return _LsmStore(self.s)

    def close(self) -> None:
        with self.s.lock:
            self.s.handles -= 1
            last = self.s.handles == 0
        if last:
            self.e.close()


class _Lsm(bk.Backend):
    kinds = frozenset({"casket", "queue", "kv"})
    engine: Any = None
    no_processes = "the library locks the database directory: one process opens it at a time"

    def open(self, directory: str, sync: bool) -> bk.Store:
        return _LsmStore(_Shared(self.engine(os.path.join(directory, self.name), sync)))


# the engines by backend name, for code that drives them directly
# (queue_lines.py's queue lines)
ENGINES = {"rocksdb": _Rocks, "leveldb": _Level}


class RocksDB(_Lsm):
    name = "rocksdb"
    module = "rocksdict"
    hint = "pip install rocksdict"
    engine = _Rocks

    def version(self) -> str:
        return f"rocksdict {importlib.metadata.version('rocksdict')}"


class LevelDB(_Lsm):
    name = "leveldb"
    module = "plyvel"
    hint = "pip install plyvel (its wheels bundle LevelDB; else apt-get install libleveldb-dev)"
    engine = _Level

    def version(self) -> str:
        import plyvel  # type: ignore[import-untyped, unused-ignore]
        return f"LevelDB {plyvel.__leveldb_version__}, plyvel {plyvel.__version__}"
