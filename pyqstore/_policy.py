"""A queue's stored policy (qs_queue_config): maxsize, max_deliveries,
dead_letter, dedup_window.  The config is a record of the casket, so every
handle in every process applies the same one; ``casket.queue(name, ...)``
with arguments replaces the ones given and keeps the others."""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from ._qstore import ffi, lib
from .errors import error_for

if TYPE_CHECKING:
    from ._queue import Queue

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


class QueueConfig(NamedTuple):
    """A queue's stored policy.  maxsize 0: no bound; max_deliveries 0: no
    limit; dead_letter None: none; dedup_window 0.0: a key is remembered
    while its item is queued."""

    maxsize: int
    max_deliveries: int
    dead_letter: Optional[str]
    dedup_window: float


def _count(x: Any, what: str, top: int) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{what} must be an int, not {type(x).__name__}")
    n = int(x)
    if n < 0:
        raise ValueError(f"{what} must not be negative (0 means no limit), got {n}")
    if n > top:
        raise ValueError(f"{what} must be at most {top}, got {n}")
    return n


def _window(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"dedup_window must be a number of seconds, not {type(x).__name__}")
    w = float(x)
    if math.isnan(w) or w < 0 or math.isinf(w):
        raise ValueError(f"dedup_window must be a finite number of seconds >= 0, got {w}")
    return w


def config_get(q: "Queue[Any]") -> QueueConfig:
    """The queue's config in the calling thread's view."""
    cfg = ffi.new("qs_queue_config *")
    rc = lib.qs_queue_config_get(q._c, q._key, q._klen, cfg)
    if rc:
        q._raise(rc, "config")
    dl = None
    if cfg.dead_letter != ffi.NULL:
        try:
            dl = ffi.unpack(ffi.cast("char *", cfg.dead_letter),
                            cfg.dead_letter_len).decode("utf-8", "replace")
        finally:
            lib.qs_free(cfg.dead_letter)
    return QueueConfig(int(cfg.maxsize), int(cfg.max_deliveries), dl, float(cfg.dedup_window))


def configure(q: "Queue[Any]", maxsize: Any = None, max_deliveries: Any = None,
              dead_letter: Any = None, dedup_window: Any = None) -> None:
    """Stores the arguments given (not None) as the queue's config, keeping
    the stored values of the others; every argument is checked before
    anything is read or stored.  In the caller's transaction if it has one,
    else in one of its own (the read and the write see the same config)."""
    from ._queue import queue_name

    m = None if maxsize is None else _count(maxsize, "maxsize", _U64_MAX)
    d = None if max_deliveries is None else _count(max_deliveries, "max_deliveries", _U32_MAX)
    w = None if dedup_window is None else _window(dedup_window)
    dl: Optional[bytes] = None
    if dead_letter is not None:
        if dead_letter == "":
            dl = b""    # removes the dead-letter queue
        else:
            try:
                dl = queue_name(dead_letter)
            except TypeError:
                raise TypeError("dead_letter must be a queue name (str), not "
                                f"{type(dead_letter).__name__}") from None
            if dl == q._key:
                raise ValueError(f"dead_letter must name another queue, not {q.name!r} itself")
    casket = q._casket
    if casket.in_transaction:
        _merge_store(q, m, d, dl, w)
    else:
        with casket.transaction():
            _merge_store(q, m, d, dl, w)


def _merge_store(q: "Queue[Any]", m: Optional[int], d: Optional[int], dl: Optional[bytes],
                 w: Optional[float]) -> None:
    old = config_get(q)
    maxsize = old.maxsize if m is None else m
    max_deliveries = old.max_deliveries if d is None else d
    window = old.dedup_window if w is None else w
    if dl is None:
        dl = old.dead_letter.encode("utf-8") if old.dead_letter is not None else b""
    if dl and not max_deliveries:
        raise ValueError(f"dead_letter {dl.decode('utf-8', 'replace')!r} needs max_deliveries "
                         f"(>= 1): without a limit no item of {q.name!r} is ever dead-lettered")
    if max_deliveries and not dl:
        raise ValueError(f"max_deliveries {max_deliveries} needs a dead_letter queue: an item of "
                         f"{q.name!r} reserved that often is moved there, never dropped")
    cfg = ffi.new("qs_queue_config *")
    cfg.maxsize = maxsize
    cfg.max_deliveries = max_deliveries
    cfg.dedup_window = window
    keep = ffi.from_buffer(dl) if dl else ffi.NULL
    cfg.dead_letter = keep
    cfg.dead_letter_len = len(dl)
    rc = lib.qs_queue_config_set(q._c, q._key, q._klen, cfg)
    if rc == lib.QS_QBOUND:
        raise error_for(rc, "configure", q._casket.path, queue=q.name, handle=q._c,
                        detail=f"maxsize {maxsize} is below the number of items the "
                        f"queue holds ({len(q)} available, and the reserved ones); "
                        "its config is unchanged")
    if rc:
        q._raise(rc, "configure")

