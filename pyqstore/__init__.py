"""pyqstore: an embedded, crash-safe, transactional B+tree store with
duplicate keys.

    >>> import pyqstore
    >>> with pyqstore.open("data.qs") as c:
    ...     c.putdup(b"fruit", b"apple")
    ...     c.putdup(b"fruit", b"pear")
    ...     c.getdup(b"fruit")
    [b'apple', b'pear']

The engine is written in C (csrc/) and reached through cffi; calls into it
release the GIL.  See :func:`open` and :class:`Casket`.
"""
from __future__ import annotations

__version__ = "0.1.0"

from ._casket import BytesLike, Casket, Snapshot, open
from ._queue import Batch, Item, Pending, Queue
from ._stream import Group, Stream, StreamItem, StreamPending
from .errors import (
    ClosedError,
    CorruptError,
    DecodeError,
    BoundError,
    Empty,
    Error,
    Full,
    TimedOut,
    FileExists,
    FileNotFound,
    FullError,
    ForkedError,
    InvalidArgumentError,
    Interrupted,
    IOError,  # noqa: F401 - IOFailure's old name, kept out of __all__
    IOFailure,
    KeyExistsError,
    LockedError,
    NoMemoryError,
    NotFoundError,
    NoGroupError,
    NotPendingError,
    NotReservedError,
    PermissionDenied,
    ReadOnlyError,
    ReservationsFullError,
    OutboxFull,
    FlowError,
    RemoteVolume,
    SnapshotTooOldError,
    StaleOwner,
    StorageError,
    TooBigError,
    TransactionError,
    TrimmedError,
    WouldBlockError,
    UnknownEdge,
)

# IOError, the old name of IOFailure, is reachable as pyqstore.IOError but
# left out of __all__ so that "from pyqstore import *" does not shadow the
# built-in name.
__all__ = [
    "__version__",
    "open",
    "Casket",
    "Snapshot",
    "BytesLike",
    "Queue",
    "Item",
    "Batch",
    "Stream",
    "Group",
    "StreamItem",
    "StreamPending",
    "Pending",
    "Error",
    "StorageError",
    "Empty",
    "Full",
    "BoundError",
    "TimedOut",
    "NotReservedError",
    "NoGroupError",
    "NotPendingError",
    "TrimmedError",
    "WouldBlockError",
    "DecodeError",
    "CorruptError",
    "LockedError",
    "ReadOnlyError",
    "TransactionError",
    "ClosedError",
    "NotFoundError",
    "KeyExistsError",
    "TooBigError",
    "InvalidArgumentError",
    "Interrupted",
    "NoMemoryError",
    "FullError",
    "ReservationsFullError",
    "ForkedError",
    "SnapshotTooOldError",
    "FileNotFound",
    "PermissionDenied",
    "FileExists",
    "IOFailure",
    "StaleOwner",
    "RemoteVolume",
    "UnknownEdge",
    "OutboxFull",
    "FlowError",
]
