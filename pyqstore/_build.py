"""cffi build script for the pyqstore C core (API mode, out-of-line).

setuptools runs it through ``cffi_modules`` in setup.py; it can also be run
directly (``python pyqstore/_build.py``) to compile ``pyqstore/_qstore`` in
place.  The declarations given to cffi are taken from csrc/qstore.h, the
public header, so the binding never drifts from the C interface.
"""
from __future__ import annotations

import glob
import os

from cffi import FFI

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
_CSRC_ABS = os.path.join(_ROOT, "csrc")


def _rel(path: str) -> str:
    """Path relative to the working directory when possible (setuptools
    wants relative source paths; a build from another drive keeps it
    absolute)."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def read_cdef(header: str = os.path.join(_CSRC_ABS, "qstore.h")) -> str:
    """Return the plain C declarations of qstore.h for ``ffi.cdef``.

    Takes the text after ``#include <stdint.h>`` up to the last
    ``#ifdef __cplusplus``, dropping preprocessor lines and the
    ``extern "C" {`` line of the opening C++ guard.
    """
    with open(header, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if "#include <stdint.h>" in l)
    end = max(i for i, l in enumerate(lines) if l.strip() == "#ifdef __cplusplus")
    out = []
    for line in lines[start + 1:end]:
        s = line.strip()
        if s.startswith("#") or s == 'extern "C" {':
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def c_sources(absolute: bool = False) -> list[str]:
    """The engine's C files: csrc/*.c except tests, fuzzers and the leak
    harness."""
    names = sorted(glob.glob(os.path.join(_CSRC_ABS, "*.c")))
    keep = [
        n for n in names
        if not os.path.basename(n).startswith(("test_", "fuzz_", "leak_"))
    ]
    return keep if absolute else [_rel(n) for n in keep]


def make_builder(absolute: bool = False) -> FFI:
    """A new FFI builder for pyqstore._qstore.  Source paths are relative to
    the current directory (as setuptools wants), or absolute (for
    ``FFI.compile``, which builds from inside its tmpdir)."""
    builder = FFI()
    builder.cdef(read_cdef())
    builder.set_source(
        "pyqstore._qstore",
        '#include "qstore.h"',
        sources=c_sources(absolute),
        include_dirs=[_CSRC_ABS if absolute else _rel(_CSRC_ABS)],
        # Hidden visibility: the engine's functions are called only from
        # inside the extension, so calls between them need no PLT.  -flto:
        # the engine is split into files by job (csrc/), and the small
        # calls between them on every operation (cs_owns, cs_enter_call,
        # cs_read_enter) are inlined again as they were when one file
        # held them all -- without it the split costs ~1.7% instructions
        # per putdup (bench/callgrind_check.py).
        extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-flto"],
        extra_link_args=["-O2", "-flto"],
        libraries=["pthread"],
    )
    return builder


ffibuilder = make_builder()

if __name__ == "__main__":
    # In-place build without pip: python pyqstore/_build.py
    import shutil

    tmp = os.path.join(_ROOT, "build", "cffi")
    built = make_builder(absolute=True).compile(tmpdir=tmp, verbose=False)
    # Leave exactly one extension in the package: a stale one with another
    # suffix (abi3 vs cpython-XY) could otherwise be imported instead.
    for old in glob.glob(os.path.join(_HERE, "_qstore.*.so")) + glob.glob(
        os.path.join(_HERE, "_qstore.*.pyd")
    ):
        os.remove(old)
    print(shutil.copy(built, _HERE))
