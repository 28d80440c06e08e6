"""asyncio waits for queues: what ``Queue.get_async``, ``put_async``,
``reserve_async`` and ``async for item in queue`` await.

A waiting coroutine costs no thread.  Each event loop gets one notifier
(``qs_aio``, an eventfd the loop watches with ``add_reader``); a waiter is
armed on a queue before the take is tried, so an item committed between
the try and the wait fires it.  A commit of this process fires the
process's waiters itself; one watcher thread in C (per process, not per
waiter) fires them for other processes' commits.  See csrc/qaio.c.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from ._qstore import ffi, lib
from .errors import error_for

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["wait_for_take", "stats"]

R = TypeVar("R")

_BATCH = 256        # fired ids collected per qs_aio_fired call


class _Notifier:
    """One event loop's qs_aio: the futures of its armed waiters by id.
    It holds no reference to the loop (the loop's reader holds it), so a
    closed loop and its notifier go away together."""

    __slots__ = ("_a", "_futs", "_ids", "_n", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        out = ffi.new("qs_aio **")
        rc = lib.qs_aio_open(out)
        if rc:
            raise error_for(rc, "get_async")
        self._a = ffi.gc(out[0], lib.qs_aio_close)
        self._futs: dict[int, asyncio.Future[bool]] = {}
        self._ids = ffi.new("uint64_t[]", _BATCH)
        self._n = ffi.new("size_t *")
        loop.add_reader(lib.qs_aio_fd(self._a), self._ready)

    def arm(self, queue: "Queue[Any]", loop: asyncio.AbstractEventLoop,
            op: str) -> tuple[int, "asyncio.Future[bool]"]:
        idp = ffi.new("uint64_t *")
        rc = lib.qs_aio_arm(self._a, queue._c, queue._key, queue._klen, idp)
        if rc:
            queue._raise(rc, op)
        fut: asyncio.Future[bool] = loop.create_future()
        wid = int(idp[0])
        self._futs[wid] = fut
        return wid, fut

    def disarm(self, wid: int) -> None:
        # A waiter that fired and was collected is gone already (NOTFOUND).
        if self._futs.pop(wid, None) is not None:
            lib.qs_aio_disarm(self._a, wid)

    def armed(self) -> int:
        n: int = lib.qs_aio_armed(self._a)
        return n

    def _ready(self) -> None:
        while True:
            rc = lib.qs_aio_fired(self._a, self._ids, _BATCH, self._n)
            if rc:
                raise error_for(rc, "get_async")
            n = self._n[0]
            for i in range(n):
                fut = self._futs.pop(int(self._ids[i]), None)
                if fut is not None and not fut.done():
                    fut.set_result(True)
            if n < _BATCH:
                return


_notifiers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Notifier]" = (
    weakref.WeakKeyDictionary())


def notifier(loop: asyncio.AbstractEventLoop) -> _Notifier:
    """The loop's notifier, made on first use."""
    n = _notifiers.get(loop)
    if n is None:
        n = _notifiers[loop] = _Notifier(loop)
    return n


def _expire(fut: "asyncio.Future[bool]") -> None:
    if not fut.done():
        fut.set_result(False)


async def wait_for_take(queue: "Queue[Any]", op: str, attempt: Callable[[], R],
                        retry: tuple[type[BaseException], ...], timeout: Optional[float]) -> R:
    """attempt() until it returns, waiting between tries for the queue's
    wake-up word to move.  It raises one of retry when it finds nothing
    (Empty, Full); at the timeout (seconds, None: none) that exception
    propagates.  Inside the calling thread's transaction it is tried once:
    a wait would hold the write lock the others need.  The waiter is
    disarmed however the await ends (result, error, cancellation)."""
    if timeout == 0 or lib.qs_in_transaction(queue._c):  # (0 for a closed handle)
        return attempt()
    loop = asyncio.get_running_loop()
    n = notifier(loop)
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        wid, fut = n.arm(queue, loop, op)       # before the try: see the module doc
        timer: Optional[asyncio.TimerHandle] = None
        try:
            try:
                return attempt()
            except retry:
                if deadline is not None and loop.time() >= deadline:
                    raise
            if deadline is not None:
                timer = loop.call_later(deadline - loop.time(), _expire, fut)
            if not await fut:   # the timer's: one last try, then the timeout
                return attempt()
        finally:
            if timer is not None:
                timer.cancel()
            n.disarm(wid)


def stats() -> dict[str, int]:
    """The process's asynchronous-waiter counters (qs_aio_stats): armed,
    fired_local, fired_watcher, fired_closed, handles, watcher."""
    st = ffi.new("qs_aio_stat *")
    lib.qs_aio_stats(st)
    return {k: int(getattr(st, k)) for k in
            ("armed", "fired_local", "fired_watcher", "fired_closed", "handles", "watcher")}
