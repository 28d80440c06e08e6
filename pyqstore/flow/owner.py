"""One owner per casket: the owner epoch and the local-volume check.

A flow node's casket is written by one owner at a time, but a replacement
may take its volume over while the old owner still runs (a partitioned
machine, a process the supervisor believed dead).  :func:`claim` raises the
casket's owner epoch, a record in the casket, and every outbox and inbox
checks it (:func:`require_owner`) inside the transaction that writes: the
claim and each write hold the casket's write lock, so once a claim has
committed, every write of an older owner is refused with
:class:`~pyqstore.StaleOwner` before it changes anything.

The casket's shared region (``NAME-shm``) is shared memory: every process
that opens the casket must run on one kernel, so its volume is attached to
one machine at a time.  :func:`claim` refuses a casket on a network or
user-space file system, where processes on other machines could open it.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional, Union

from .. import Casket
from ..errors import RemoteVolume, StaleOwner
from ._records import read_counter, write_counter

__all__ = ["EPOCH_KEY", "claim", "owner_epoch", "require_owner", "fs_type",
           "check_local_volume", "REMOTE_FS_TYPES"]

#: The record holding the owner epoch (8 bytes, big-endian).
EPOCH_KEY = b"flow/owner-epoch"

#: statfs ``f_type`` values (linux/magic.h) of the file systems a casket may
#: not live on: their files can be opened from several machines (network and
#: cluster file systems) or are served by a user-space daemon (FUSE), so the
#: processes sharing the casket's region need not share one kernel.
REMOTE_FS_TYPES: dict[int, str] = {
    0x6969: "NFS",
    0x517B: "SMB",
    0xFF534D42: "CIFS",
    0xFE534D42: "SMB2",
    0x65735546: "FUSE",
    0x01021997: "9p",
    0x00C36400: "Ceph",
    0x5346414F: "AFS",
    0x6B414653: "kAFS",
    0x73757245: "Coda",
    0x564C: "NCP",
    0x01161970: "GFS2",
    0x7461636F: "OCFS2",
    0x0BD00BD0: "Lustre",
    0x47504653: "GPFS",
}


def fs_type(path: Union[str, bytes, os.PathLike]) -> Optional[int]:  # type: ignore[type-arg]
    """The ``f_type`` of the file system holding path (statfs(2)), or None
    where the system has no such call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    # os.statvfs has no f_type; statfs's struct begins with it on every
    # Linux ABI (a long), so the rest of the buffer is left unread.
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(512)
    if libc.statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(path))
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def check_local_volume(path: Union[str, bytes, os.PathLike]) -> None:  # type: ignore[type-arg]
    """Raise :class:`~pyqstore.RemoteVolume` when path lies on a network,
    cluster or FUSE file system (see :data:`REMOTE_FS_TYPES`)."""
    kind = fs_type(path)
    if kind in REMOTE_FS_TYPES:
        raise RemoteVolume(
            f"{os.fsdecode(path)!r} is on a file system of type {REMOTE_FS_TYPES[kind]} (f_type "
            f"{kind:#x}): a flow casket needs a volume attached to one machine at a time "
            f"(a local disk or a block device), since its shared region needs one kernel")


def owner_epoch(casket: Casket) -> int:
    """The casket's owner epoch: 0 before the first :func:`claim`."""
    return read_counter(casket, EPOCH_KEY)


def claim(casket: Casket) -> int:
    """Become the casket's owner: check that it is on a local volume, raise
    its owner epoch by one in a transaction of its own, and return the new
    epoch, which the owner's outboxes and inboxes are made with.  Every
    older owner's next write is then refused (:class:`~pyqstore.StaleOwner`).
    RemoteVolume on a network file system; TransactionError inside a
    transaction of the caller's thread."""
    check_local_volume(casket.path)
    with casket.transaction():
        epoch = owner_epoch(casket) + 1
        write_counter(casket, EPOCH_KEY, epoch)
    return epoch


def require_owner(casket: Casket, epoch: int) -> None:
    """Raise :class:`~pyqstore.StaleOwner` unless the casket's owner epoch
    is still epoch.  Called inside the transaction that writes, whose write
    lock keeps a claim out until it ends."""
    found = owner_epoch(casket)
    if found != epoch:
        raise StaleOwner(
            f"casket {casket.path!r} has owner epoch {found}, this owner holds epoch "
            f"{epoch}: another owner took the casket over; this one must stop")
