"""Exceptions raised by pyqstore.

Every exception is a :class:`pyqstore.Error`.  Return codes of the C core are
translated by :func:`error_for` using one table, ``_CODE_TABLE``; positive
codes are errno values from failed system calls and become exceptions that
are also the matching built-in :class:`OSError` subclass.
"""
from __future__ import annotations

import builtins
import errno as _errno
import os
import queue as _queue
from typing import Optional, Union

__all__ = [
    "Error",
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
    "NotReservedError",
    "Empty",
    "FileNotFound",
    "PermissionDenied",
    "FileExists",
    "IOError",
    "error_for",
]


class Error(Exception):
    """Root of every exception raised by pyqstore.

    ``code`` is the C return code that caused it (0 when raised by the
    Python layer itself).
    """

    code: int = 0


class CorruptError(Error):
    """The file is damaged, is not a pyqstore casket (an empty file is
    not one, nor is a device or a pipe: "not a regular file"), or has a
    format version this library cannot read."""


class LockedError(Error):
    """Another process holds the casket's lock (after ``lock_timeout``)."""


class ReadOnlyError(Error):
    """A write was attempted on a casket opened with flag ``"r"``."""


class TransactionError(Error):
    """Transaction misuse: nested ``begin()``, or ``commit()``/``abort()``
    by a thread that has no transaction."""


class ClosedError(Error):
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


class FullError(Error):
    """The casket would exceed 2**32 pages, or a reserve found the casket
    holding as many reserved items as it can (49,152 at once)."""


class ForkedError(Error):
    """A casket handle was used in a child process that inherited it
    through ``fork()``; open the casket again (by path) in the child."""


class NotReservedError(Error):
    """An ack or release of an item that is not reserved under that
    reservation: already acknowledged or released, or its lease ran out
    (and perhaps another consumer holds it now)."""


class Empty(Error, _queue.Empty):
    """A queue had no item to get (also the standard library's
    :class:`queue.Empty`, so code written for :mod:`queue` catches it)."""


class FileNotFound(Error, builtins.FileNotFoundError):
    """ENOENT: the casket file does not exist.  Also a FileNotFoundError."""


class PermissionDenied(Error, builtins.PermissionError):
    """EACCES/EPERM from a system call.  Also a PermissionError.  Also
    raised by a read-only open that may not write the region ``NAME-shm``
    (named in the message) while other processes have the casket open."""


class FileExists(Error, builtins.FileExistsError):
    """EEXIST from a system call.  Also a FileExistsError."""


class IOError(Error, builtins.OSError):  # noqa: A001 - deliberate name
    """Any other failed system call (ENOSPC, EIO, ...).  Also an OSError,
    with ``errno``, ``strerror`` and ``filename`` set."""


def _codes() -> dict[str, int]:
    # Imported lazily so this module can be imported (e.g. for docs)
    # without the compiled extension.
    from ._qstore import lib

    return {
        "QS_NOTFOUND": lib.QS_NOTFOUND,
        "QS_KEYEXIST": lib.QS_KEYEXIST,
        "QS_CORRUPT": lib.QS_CORRUPT,
        "QS_NOTCASKET": lib.QS_NOTCASKET,
        "QS_VERSION": lib.QS_VERSION,
        "QS_LOCKED": lib.QS_LOCKED,
        "QS_READONLY": lib.QS_READONLY,
        "QS_TXN": lib.QS_TXN,
        "QS_INVAL": lib.QS_INVAL,
        "QS_NOMEM": lib.QS_NOMEM,
        "QS_TOOBIG": lib.QS_TOOBIG,
        "QS_CLOSED": lib.QS_CLOSED,
        "QS_FULL": lib.QS_FULL,
        "QS_NOTRESERVED": lib.QS_NOTRESERVED,
        "QS_FORKED": lib.QS_FORKED,
        "QS_RESFULL": lib.QS_RESFULL,
        "QS_NOTFILE": lib.QS_NOTFILE,
        "QS_NOATTACH": lib.QS_NOATTACH,
    }


# The one table: C code name -> (exception class, message override or None).
# With no override the message is qs_strerror(code).
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
    "QS_RESFULL": (FullError, None),
    "QS_NOTFILE": (CorruptError, "not a regular file"),
    "QS_NOATTACH": (PermissionDenied, "other processes have the casket open, and a "
                    "read-only open that may not write this region cannot follow their changes"),
}

# errno -> OSError-flavoured class; anything else is IOError.
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
        codes = _codes()
        _by_code = {codes[name]: entry for name, entry in _CODE_TABLE.items()}
    return _by_code


def _strerror(rc: int) -> str:
    from ._qstore import ffi, lib

    return ffi.string(lib.qs_strerror(rc)).decode("utf-8", "replace")


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
) -> Error:
    """Build (not raise) the exception for C return code ``rc``.

    ``op`` names the operation (``"open"``, ``"put"``, ...), ``path`` the
    casket, ``detail`` replaces the default description when given (for
    example the message of ``qs_check``).
    """
    if rc > 0:
        cls = _ERRNO_TABLE.get(rc, IOError)
        strerror = detail or os.strerror(rc)
        exc = cls(rc, f"{op}: {strerror}", path)
        exc.code = rc
        return exc
    cls, override = _table().get(rc, (Error, None))
    msg = detail or override or _strerror(rc)
    exc = cls(f"{op}{_describe_path(path)}: {msg}")
    exc.code = rc
    return exc
