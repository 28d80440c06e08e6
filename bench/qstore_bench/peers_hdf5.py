"""HDF5 (seed 000's "HDF") through h5py: a queue is a group holding a
resizable, chunked dataset of variable-length byte strings (the payloads)
and beside it the id index, a dataset of the items' ids in the same order,
with the consumed prefix in the group's "head" attribute.

HDF5 has no transactions and no journal: a transaction here is one append
of all its items (one resize, one slice write) and then a durability
point, H5Fflush (h5py's File.flush, which hands HDF5's buffers to the OS)
and, with --sync, an fsync of the file.  A crash in the middle of a write
can leave the file unreadable; HDF5 offers nothing better (SWMR is for
readers, not crash safety).  h5py serializes every call with one lock, so
threads share the file; the handles of one file share a lock that keeps
each commit whole."""
from __future__ import annotations

import os
import threading
from typing import Any, Optional

from . import backends as bk


class _File:
    """The h5py file of one store, shared by its handles."""

    def __init__(self, path: str, sync: bool, mode: str) -> None:
        import h5py  # type: ignore[import-untyped, unused-ignore]
        import numpy

        self.h5py, self.np = h5py, numpy
        self.path, self.sync = path, sync
        self.f = h5py.File(path, mode)
        self.lock = threading.Lock()
        self.handles = 0
        self.item = h5py.vlen_dtype(numpy.uint8)  # raw bytes, NULs included

    def queue(self, name: str) -> Any:
        g = self.f.get("queues/" + name)
        if g is None:
            g = self.f.create_group("queues/" + name)
            g.create_dataset("data", (0,), maxshape=(None,), chunks=(1024,), dtype=self.item)
            g.create_dataset("ids", (0,), maxshape=(None,), chunks=(1024,), dtype="u8")
            g.attrs["head"] = 0
            g.attrs["next_id"] = 1
        return g

    def durable(self) -> None:
        self.f.flush()
        if self.sync:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def append(self, name: str, payloads: list[bytes]) -> None:
        with self.lock:
            g = self.queue(name)
            data, ids = g["data"], g["ids"]
            end, first = data.shape[0], int(g.attrs["next_id"])
            data.resize((end + len(payloads),))
            ids.resize((end + len(payloads),))
            arr = self.np.empty(len(payloads), dtype=self.item)
            for i, p in enumerate(payloads):
                arr[i] = self.np.frombuffer(p, dtype=self.np.uint8)
            # not data[end:] = arr, which broadcasts payloads of equal length to 2-D
            data.write_direct(arr, dest_sel=self.np.s_[end:])
            ids[end:] = self.np.arange(first, first + len(payloads), dtype="u8")
            g.attrs["next_id"] = first + len(payloads)
            self.durable()

    def take(self, name: str, n: int) -> list[bytes]:
        with self.lock:
            g = self.queue(name)
            head = int(g.attrs["head"])
            got = g["data"][head:head + n]
            if len(got):
                g.attrs["head"] = head + len(got)
                self.durable()
            return [bytes(a.tobytes()) for a in got]

    def length(self, name: str) -> int:
        with self.lock:
            g = self.queue(name)
            return int(g["data"].shape[0]) - int(g.attrs["head"])


class _H5Store(bk.Store):
    def __init__(self, file: _File) -> None:
        self.file = file
        self.pending: Optional[list[bytes]] = None
        self.pending_queue: Optional[str] = None
        with file.lock:
            file.handles += 1

    def begin(self) -> None:
        self.pending, self.pending_queue = [], None

    def commit(self) -> None:
        items, name = self.pending, self.pending_queue
        self.pending = self.pending_queue = None
        if items and name is not None:
            self.file.append(name, items)

    def qput(self, name: str, payload: bytes) -> None:
        if self.pending is None:
            self.file.append(name, [payload])
            return
        if self.pending_queue not in (None, name):
            raise bk.Unsupported("a transaction over several HDF5 queues (one append each)")
        self.pending_queue = name
        self.pending.append(payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        return self.file.take(name, n)

    def qlen(self, name: str) -> int:
        return self.file.length(name)

    def queue_transaction(self, payloads: list[bytes]) -> None:
        self.file.append("port", payloads)

    def connect(self) -> bk.Store:
        return _H5Store(self.file)

    def close(self) -> None:
        with self.file.lock:
            self.file.handles -= 1
            last = self.file.handles == 0
        if last:
            self.file.f.close()


def reopen(path: str, sync: bool) -> bk.Store:
    """A handle on an existing HDF5 store (its file after a crash, say)."""
    return _H5Store(_File(path, sync, "a"))


class HDF5(bk.Backend):
    name = "hdf5"
    kinds = frozenset({"queue"})
    module = "h5py"
    hint = "pip install h5py"
    no_processes = "HDF5 lets one process write a file; SWMR adds readers, not writers"

    def version(self) -> str:
        import h5py  # type: ignore[import-untyped, unused-ignore]
        return (f"HDF5 {h5py.version.hdf5_version}, h5py {h5py.version.version}; durable "
                f"point: H5Fflush, and fsync with --sync; no journal, no transactions")

    def open(self, directory: str, sync: bool) -> bk.Store:
        return _H5Store(_File(os.path.join(directory, "bench.h5"), sync, "w"))
