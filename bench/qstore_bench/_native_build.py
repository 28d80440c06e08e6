"""cffi build script of ``qstore_bench._native``, the `native` driver.

The extension compiles native_seed.c together with the store's C sources
from csrc/ of the same checkout, chosen and declared by pyqstore's own build
script (pyqstore/_build.py: ``c_sources``, ``read_cdef``), so the driver
always runs the engine of the tree it is built from and declares exactly
the public API.  Compiling the sources (rather than linking
csrc/libqstore.a) keeps ``pip install ./bench`` one step: no ``make``
first, and no stale archive from another revision.  The extension holds its
own copy of the engine (hidden symbols, loaded RTLD_LOCAL like every
extension), so it opens its caskets itself: a handle of pyqstore's
extension is never passed to it.
"""
from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
_STORE_BUILD = os.path.join(_ROOT, "pyqstore", "_build.py")
_DRIVER_CDEF = """
int qsb_seed(qs_casket *c, const char *qkey, size_t qklen, const void *ids, size_t idlen,
             size_t n);
"""


def _store_build() -> ModuleType:
    if not os.path.exists(_STORE_BUILD):
        raise RuntimeError(
            f"qstore-bench's native driver builds from a pyqstore checkout: "
            f"{_STORE_BUILD} not found (install ./bench from the repository)")
    spec = importlib.util.spec_from_file_location("_pyqstore_build", _STORE_BUILD)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_builder() -> Any:
    sb = _store_build()
    builder = sb.FFI()
    # API mode: the compiler checks this declaration against native_seed.h
    builder.cdef(sb.read_cdef() + _DRIVER_CDEF)
    driver = os.path.relpath(os.path.join(_HERE, "native_seed.c"))
    builder.set_source(
        "qstore_bench._native",
        '#include "native_seed.h"',
        sources=[driver] + sb.c_sources(),
        include_dirs=[os.path.relpath(_HERE), os.path.relpath(os.path.join(_ROOT, "csrc"))],
        extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden"],
        libraries=["pthread"],
    )
    return builder


ffibuilder = make_builder()
