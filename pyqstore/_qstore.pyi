# The cffi extension built from csrc/qstore.h (see _build.py).  cffi makes
# `ffi` and `lib` at build time with no static description of them, so to a
# type checker they are Any: the typed surface is the Python layer above.
from typing import Any

ffi: Any
lib: Any
