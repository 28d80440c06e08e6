"""The library's calls that keep the GIL (pyqstore/_heldcalls.c), installed
once: Casket.get's and Queue.put's.  The extension is built on CPython's
limited API and is absent elsewhere (PyPy, free-threaded and debug
builds): there both are None and every call goes through cffi."""
from __future__ import annotations

from typing import Callable, Optional, Union

from ._qstore import ffi, lib

__all__ = ["held_get", "held_put"]

held_get: Optional[Callable[[int, bytes], Union[bytes, int]]]
held_put: Optional[Callable[[int, bytes], int]]
try:
    from . import _heldcalls
except ImportError:  # pragma: no cover - depends on the interpreter
    held_get = held_put = None
else:
    _heldcalls.install(int(ffi.cast("uintptr_t", ffi.addressof(lib, "qs_get_nowait"))),
                       int(ffi.cast("uintptr_t", ffi.addressof(lib, "qs_queue_put_held"))))
    held_get = _heldcalls.get
    held_put = _heldcalls.put
