"""The library's calls made from pyqstore/_heldcalls.c rather than
through cffi, installed once: Casket.get's, which keeps the GIL;
Casket.put's store, Queue.put's append and Queue.get's take, which keep
it where the call waits for nobody (inside the caller's transaction, or
with sync off and the write lock free) and release it once elsewhere.
The extension is built on CPython's limited API and is absent elsewhere
(PyPy, free-threaded and debug builds): there all four are None and
every call goes through cffi."""
from __future__ import annotations

from typing import Callable, Optional, Union

from ._qstore import ffi, lib

__all__ = ["append", "held_get", "store", "take"]

held_get: Optional[Callable[[int, bytes], Union[bytes, int]]]
append: Optional[Callable[[int, bytes], int]]
store: Optional[Callable[[int, bytes, bytes], int]]
take: Optional[Callable[[int, bytes, float], Union[bytes, int]]]


def _address(name: str) -> int:
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


try:
    from . import _heldcalls
except ImportError:  # pragma: no cover - depends on the interpreter
    held_get = append = store = take = None
else:
    _heldcalls.install(_address("qs_get_nowait"), _address("qs_queue_put_held"),
                       _address("qs_queue_put_id"), _address("qs_queue_get"), _address("qs_items_free"),
                       _address("qs_put_held"), _address("qs_put"), _address("qs_queue_get_held"))
    held_get = _heldcalls.get
    append = _heldcalls.append
    store = _heldcalls.store
    take = _heldcalls.take
