"""Exceptions raised by pyqstore.

Every exception is a :class:`pyqstore.Error`.  Return codes of the C core are
translated by :func:`error_for` using one table, ``_CODE_TABLE``; positive
codes are errno values from failed system calls and become exceptions that
are also the matching built-in :class:`OSError` subclass.  Every error that
is I/O in nature (about the file, its lock or its handle, or a failed system
call) derives from :class:`StorageError`, which is also an :class:`OSError`:
``except OSError`` and ``except dbm.error`` catch them, as they catch the
errors of the standard library's dbm modules.
"""
from __future__ import annotations

import builtins
import errno as _errno
import os
import queue as _queue
from typing import Any, Optional, Union

__all__ = [
    "Error",
    "StorageError",
    "CorruptError",
    "LockedError",
    "ReadOnlyError",
    "TransactionError",
    "ClosedError",
    "NotFoundError",
    "KeyExistsError",
    "TooBigError",
    "InvalidArgumentError",
    "NoMemoryError",
    "FullError",
    "ReservationsFullError",
    "ForkedError",
    "SnapshotTooOldError",
    "NotReservedError",
    "NoGroupError",
    "NotPendingError",
    "TrimmedError",
    "WouldBlockError",
    "DecodeError",
    "Empty",
    "Full",
    "BoundError",
    "TimedOut",
    "Interrupted",
    "FileNotFound",
    "PermissionDenied",
    "FileExists",
    "IOFailure",
    "StaleOwner",
    "RemoteVolume",
    "UnknownEdge",
    "OutboxFull",
    "FlowError",
    "error_for",
]
# IOError, the old name of IOFailure, stays importable but is left out of
# __all__: "from pyqstore.errors import *" must not shadow the built-in.


class Error(Exception):
    """Root of every exception raised by pyqstore.

    ``code`` is the C return code that caused it (0 when raised by the
    Python layer itself).
    """

    code: int = 0
    #: What failed and where, e.g. ``"open 'data.qs'"`` (empty when raised
    #: by the Python layer itself); ``reason`` is the rest of the message.
    where: str = ""
    reason: str = ""


class StorageError(Error, builtins.OSError):
    """An error that is I/O in nature: the file is damaged or not a casket,
    locked, read-only, full, closed, or a system call failed.  Also an
    :class:`OSError` (``errno`` is set when a system call failed, else
    None), as the errors of the :mod:`dbm` modules are, so ``except
    dbm.error`` catches it; it is :data:`pyqstore.dbm.error`."""


class CorruptError(StorageError):
    """The file is damaged, is not a pyqstore casket (an empty file is
    not one, nor is a device or a pipe: "not a regular file"), or has a
    format version this library cannot read."""


class LockedError(StorageError):
    """Another process, or another thread's transaction, held the casket's
    write lock for longer than ``lock_timeout``.  The message names the
    holder: the thread (name, ``threading.get_ident()`` and native id) or
    the process id."""


class ReadOnlyError(StorageError):
    """A write was attempted on a casket opened with flag ``"r"``."""


class TransactionError(Error):
    """Transaction misuse: nested ``begin()``, or ``commit()``/``abort()``
    by a thread that has no transaction."""


class ClosedError(StorageError):
    """The casket (or the cursor behind an iterator) was closed."""


class NotFoundError(Error, LookupError):
    """A record was not found where the C core required one (only seen
    from low-level calls; the Casket API reports absence by its return
    values or :class:`KeyError`)."""


class KeyExistsError(Error):
    """The key already has a value (internal; ``putkeep`` returns False)."""


class TooBigError(Error, ValueError):
    """A key is longer than 16 KiB or a value longer than 1 GiB."""


class InvalidArgumentError(Error, ValueError):
    """An argument is out of range."""


class NoMemoryError(Error, MemoryError):
    """The C core could not allocate memory."""


class FullError(StorageError):
    """The casket would exceed 2**32 pages (QS_FULL).  Fatal for the
    transaction the write ran in: it can only be aborted.  Not raised for
    a full reservation table (:class:`ReservationsFullError`) nor for a
    bounded queue that has no room (:class:`Full`)."""


class ReservationsFullError(Error):
    """A reserve found the casket holding as many reserved items as it can
    (49,152 at once; QS_RESFULL).  A refusal: nothing changed, the
    transaction goes on, and the reserve can be retried once other
    reservations end (ack, release, lease).

    Deliberately not a :class:`FullError` (which reserve raised for this
    before): ``except FullError`` handles a spoiled transaction -- abort,
    make room in the file -- and would abort work that only has to wait
    and retry here."""


class ForkedError(Error):
    """A casket handle was used in a child process that inherited it
    through ``fork()``; open the casket again (by path) in the child."""


class SnapshotTooOldError(Error):
    """A snapshot was held open until the log reached its limit
    (``max_log_size``); a checkpoint then went ahead and took the pages it
    read.  The snapshot can only be closed; take a new one."""


class NotReservedError(Error):
    """An ack or release of an item that is not reserved under that
    reservation: already acknowledged or released, or its lease ran out
    (and perhaps another consumer holds it now)."""


class NoGroupError(Error, LookupError):
    """A stream call named a group the stream does not have (a
    :class:`pyqstore.Stream`'s ``group()`` creates it)."""


class NotPendingError(Error, LookupError):
    """``Group.ack`` of an id the group has no pending entry for: never
    read by the group, or acknowledged already.  ``id`` is that id; nothing
    was acknowledged."""

    id: int = 0


class TrimmedError(Error, LookupError):
    """A stream read (or a group's start) from an id that retention
    removed: reading on would skip the removed items without a word."""


class WouldBlockError(StorageError, builtins.BlockingIOError):
    """A call that may not wait would have waited (QS_WOULDBLOCK): for
    another thread's call on the same handle, or for a checkpoint.  Only
    the library's non-waiting calls return it, and pyqstore answers it
    itself by making the waiting call instead, so it reaches a program
    only through the C interface.  Also a BlockingIOError."""


class DecodeError(Error, ValueError):
    """A queue's codec could not decode an item's payload.  The item was
    not consumed: it is still in the queue, at its place.  ``queue`` is
    the queue's name, ``id`` the item's id and ``payload`` its raw bytes;
    the codec's own exception is the ``__cause__``."""

    def __init__(self, message: str, queue: str, id: int, payload: bytes) -> None:
        super().__init__(message)
        self.queue = queue
        self.id = id
        self.payload = payload


class Empty(Error, _queue.Empty):
    """A queue had no item to get (also the standard library's
    :class:`queue.Empty`, so code written for :mod:`queue` catches it)."""


class Full(Error, _queue.Full):
    """A bounded queue (``casket.queue(name, maxsize=N)``) holds N items
    and a put could not wait for room (QS_QFULL): nothing was put.  Also the
    standard library's :class:`queue.Full`.  A refusal: the transaction
    goes on."""


class BoundError(Error, ValueError):
    """``casket.queue(name, maxsize=N)`` with N below the number of items
    the queue holds now (QS_QBOUND): the stored config is unchanged."""


class TimedOut(Error):
    """A wait with a timeout ended first (QS_TIMEDOUT: ``Queue.join``
    returns False for it rather than raising).  Not a TimeoutError, which
    is an OSError: nothing failed in the system."""


class Interrupted(StorageError, builtins.InterruptedError):
    """A wait was ended by a signal with nothing taken.  Queue methods do
    not raise it: they let the signal's handler run (and raise, as
    KeyboardInterrupt for Ctrl-C) and otherwise wait on.  Also an
    InterruptedError."""


class FileNotFound(StorageError, builtins.FileNotFoundError):
    """ENOENT: the casket file does not exist.  Also a FileNotFoundError."""


class PermissionDenied(StorageError, builtins.PermissionError):
    """EACCES/EPERM from a system call.  Also a PermissionError.  Also
    raised by a read-only open that may not write the region ``NAME-shm``
    (named in the message) while other processes have the casket open."""


class FileExists(StorageError, builtins.FileExistsError):
    """EEXIST from a system call.  Also a FileExistsError."""


class IOFailure(StorageError):
    """Any other failed system call (ENOSPC, EIO, ...).  Also an OSError,
    with ``errno``, ``strerror`` and ``filename`` set.

    Named like its siblings FileNotFound, PermissionDenied and FileExists
    (the condition, without the built-ins' "Error"); it was called IOError,
    which tracebacks showed as if it were the built-in (an alias of
    OSError).  ``IOError`` remains an alias of this class."""


class StaleOwner(Error):
    """A flow node's casket has been taken over: its owner epoch record
    (raised by :func:`pyqstore.flow.claim` whenever a new owner opens the
    casket for a node) is no longer the epoch this outbox or inbox was made
    with.  Raised before anything is written; the old owner must stop."""


class RemoteVolume(StorageError):
    """A flow node's casket lies on a network or user-space file system
    (NFS, CIFS/SMB, FUSE, 9p, Ceph, ...).  The casket's shared region needs
    every process that opens it to run on one kernel, so its volume must be
    attached to one machine at a time: a local disk, or a block device
    moved between machines."""


class UnknownEdge(Error, LookupError):
    """An inbox was handed a batch for an edge it does not receive (also a
    :class:`LookupError`)."""


class OutboxFull(Error, _queue.Full):
    """An outbox already holds its maximum number of unsent batches (also
    the standard library's :class:`queue.Full`).  A refusal: nothing was
    written; wait for room (:meth:`pyqstore.flow.Outbox.wait_for_room`)
    outside the transaction and fire again."""


class FlowError(Error, ValueError):
    """A flow that cannot run, found when it is built (an edge naming a
    port its node does not have, an unconnected input, two codecs on one
    port, a function a spawned process could not load), or a firing that
    cannot commit (more items emitted to a port than its maxsize).  Also a
    :class:`ValueError`."""


#: The old name of :class:`IOFailure`, kept so existing ``except
#: pyqstore.IOError`` code works; the same class, not a subclass.
IOError = IOFailure  # noqa: A001 - the public old name, on purpose


# The one table: name of a C code (the enum of csrc/qstore.h) -> (exception
# class, message override or None; without one the message is
# qs_strerror(code)).  The codes' values are read from the extension by name
# (_table), so they are written out only in qstore.h; tests/test_errors.py
# checks that every code from QS_NOTFOUND to QS_LAST_ERRCODE is here.
_CODE_TABLE: dict[str, tuple[type[Error], Optional[str]]] = {
    "QS_NOTFOUND": (NotFoundError, None),
    "QS_KEYEXIST": (KeyExistsError, None),
    "QS_CORRUPT": (CorruptError, None),
    "QS_NOTCASKET": (CorruptError, "not a pyqstore casket"),
    "QS_VERSION": (CorruptError, "unsupported format version"),
    "QS_LOCKED": (LockedError, None),
    "QS_READONLY": (ReadOnlyError, None),
    "QS_TXN": (TransactionError, None),
    "QS_INVAL": (InvalidArgumentError, None),
    "QS_NOMEM": (NoMemoryError, None),
    "QS_TOOBIG": (TooBigError, None),
    "QS_CLOSED": (ClosedError, None),
    "QS_FULL": (FullError, None),
    "QS_NOTRESERVED": (NotReservedError, None),
    "QS_FORKED": (ForkedError, None),
    "QS_RESFULL": (ReservationsFullError, None),
    "QS_SNAPSHOT_OLD": (SnapshotTooOldError, None),
    "QS_INTR": (Interrupted, None),
    "QS_NOTFILE": (CorruptError, "not a regular file"),
    "QS_STREAM_NOGROUP": (NoGroupError, None),
    "QS_STREAM_NOTPENDING": (NotPendingError, None),
    "QS_STREAM_TRIMMED": (TrimmedError, None),
    "QS_WOULDBLOCK": (WouldBlockError, None),
    "QS_NOATTACH": (PermissionDenied, "other processes have the casket open, and a "
                    "read-only open that may not write this region cannot follow their changes"),
    "QS_QFULL": (Full, None),
    "QS_QBOUND": (BoundError, None),
    "QS_TIMEDOUT": (TimedOut, None),
}

# errno -> OSError-flavoured class; anything else is IOFailure.
_ERRNO_TABLE: dict[int, type[Error]] = {
    _errno.ENOENT: FileNotFound,
    _errno.EACCES: PermissionDenied,
    _errno.EPERM: PermissionDenied,
    _errno.EEXIST: FileExists,
}

_by_code: Optional[dict[int, tuple[type[Error], Optional[str]]]] = None


def _table() -> dict[int, tuple[type[Error], Optional[str]]]:
    global _by_code
    if _by_code is None:
        # Imported lazily so this module can be imported (e.g. for docs)
        # without the compiled extension.
        from ._qstore import lib

        _by_code = {getattr(lib, name): entry for name, entry in _CODE_TABLE.items()}
    return _by_code


def _strerror(rc: int) -> str:
    from ._qstore import ffi, lib

    text: str = ffi.string(lib.qs_strerror(rc)).decode("utf-8", "replace")
    return text


def _lock_holder() -> str:
    """Who held the lock at this thread's last QS_LOCKED (qs_locked_by)."""
    import threading

    from ._qstore import ffi, lib

    h = ffi.new("qs_lock_holder *")
    lib.qs_locked_by(h)
    if h.tid:
        names = [t.name for t in threading.enumerate() if t.native_id == h.tid]
        name = f" {names[0]!r}" if names else ""
        return (f" (held by the transaction of thread{name} of this process:"
                f" ident {h.thread}, native id {h.tid})")
    if h.pid and h.pid != os.getpid():
        return f" (held by process {h.pid})"
    return ""


def _describe_path(path: Union[str, bytes, None]) -> str:
    if path is None:
        return ""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return f" {path!r}"


def error_for(
    rc: int,
    op: str,
    path: Union[str, bytes, None] = None,
    detail: Optional[str] = None,
    *,
    queue: Optional[str] = None,
    handle: Any = None,
) -> Error:
    """Build (not raise) the exception for C return code ``rc``.

    ``op`` names the operation (``"open"``, ``"put"``, ...), ``path`` the
    casket, ``queue`` the queue it was on, ``detail`` replaces the default
    description when given (for example the message of ``qs_check``).
    ``handle``, the casket's C handle, lets a QS_CORRUPT name the damaged
    page (``qs_corrupt_page``) when the C core found one.
    """
    where = op if queue is None else f"{op} queue {queue!r} of"
    where += _describe_path(path)
    if rc > 0:
        cls = _ERRNO_TABLE.get(rc, IOFailure)
        strerror = detail or os.strerror(rc)
        exc = cls(rc, f"{op}: {strerror}", path)
    else:
        cls, override = _table().get(rc, (Error, None))
        strerror = detail or override or _strerror(rc)
        if cls is LockedError and not detail:
            strerror += _lock_holder()
        if handle is not None and detail is None and cls is CorruptError:
            from ._qstore import lib

            page = lib.qs_corrupt_page(handle)
            if page:
                strerror = f"casket is corrupt: page {page} is damaged (see qstore check)"
        exc = cls(f"{where}: {strerror}")
    exc.code = rc
    exc.where = where
    exc.reason = strerror
    return exc
