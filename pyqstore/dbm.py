"""The :mod:`dbm` interface to pyqstore caskets.

    >>> import pyqstore.dbm
    >>> with pyqstore.dbm.open("data.qs", "c") as db:
    ...     db["fruit"] = b"apple"          # str keys are stored as UTF-8
    ...     db.keys()
    [b'fruit']

:func:`open` takes the arguments of :func:`dbm.open`; its objects are
:class:`pyqstore.Casket` objects (so a transaction, ``putdup`` and the
queues are there too) whose :meth:`~Database.keys` returns a list, as the
objects of the dbm modules do.  :data:`error` is
:class:`pyqstore.StorageError`, an :class:`OSError`, raised for everything
I/O in nature (missing, damaged, locked or read-only files, closed
handles, failed system calls).

The standard library's :func:`dbm.open` and :func:`dbm.whichdb` cannot
recognise a casket (``whichdb`` knows only the formats of the modules the
standard library ships, and answers ``""``), so ``dbm.open(path, "r")`` on
a casket raises ``dbm.error``: open caskets with :func:`pyqstore.dbm.open`
and tell them apart with :func:`pyqstore.dbm.whichdb`.
"""
from __future__ import annotations

import dbm as _dbm
import io
import os
from typing import Optional

from ._casket import Casket, Flag, PathLike
from .errors import StorageError

__all__ = ["open", "error", "whichdb", "Database"]

error = StorageError

# The first 8 bytes of a casket's main file (pagefmt.h: MAIN_MAGIC).
_MAGIC = b"qstore\0\x1a"


class Database(Casket):
    """A casket opened by :func:`open`: a :class:`pyqstore.Casket` whose
    :meth:`keys` returns a list of every key (once each), as dbm objects'
    ``keys()`` does."""

    def keys(self) -> list[bytes]:  # type: ignore[override]
        """Every key in order, once each, as a list."""
        return list(super().keys())


def open(file: PathLike, flag: Flag = "r", mode: int = 0o666) -> Database:
    """Open the casket ``file`` as :func:`dbm.open` opens a database:
    ``flag`` is ``"r"`` (default: read-only), ``"w"`` (read-write, must
    exist), ``"c"`` (read-write, create when missing) or ``"n"`` (always
    new and empty); ``mode`` the permission bits, less the umask, of the
    files it creates (the casket, ``file-log`` and ``file-shm``).  Other
    options of :func:`pyqstore.open` keep their defaults."""
    if not isinstance(flag, str) or flag not in ("r", "w", "c", "n"):
        raise ValueError(f"flag must be one of 'r', 'w', 'c', 'n', not {flag!r}")
    return Database(file, flag, mode=mode)


def whichdb(filename: PathLike) -> Optional[str]:
    """As :func:`dbm.whichdb`, knowing caskets too: ``"pyqstore.dbm"`` when
    ``filename`` is a casket, else what :func:`dbm.whichdb` says (None when
    the file cannot be read, ``""`` when its format is unknown, or the name
    of a standard dbm module)."""
    try:
        with io.open(os.fspath(filename), "rb") as f:
            head = f.read(len(_MAGIC))
    except OSError:
        head = b""
    if head == _MAGIC:
        return __name__
    return _dbm.whichdb(filename)

