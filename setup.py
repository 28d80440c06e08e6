"""Build glue: setuptools reads the metadata from pyproject.toml; the only
thing declared here is the cffi extension, which has no pyproject key.

cffi (API mode) already compiles the extension against the limited API
(``py_limited_api=True``, so the module is ``_qstore.abi3.so``) on CPython
builds that support it.  The wheel's tag has to say so too, or a
``_qstore.abi3.so`` ships inside a ``cp3XY-cp3XY`` wheel that pip refuses on
every other Python: ask bdist_wheel for ``cp310-abi3`` (the floor set by
requires-python) where cffi uses the limited API, i.e. on a regular CPython;
not on PyPy (no stable ABI), a debug build or a free-threaded build (cffi
turns the limited API off on both).

The one extension declared directly is pyqstore._heldcalls (the calls that
keep the GIL; see its source): written against the limited API, built where
cffi's is, and left out elsewhere, where pyqstore makes those calls through
cffi instead.
"""
import platform
import sys
import sysconfig

from setuptools import Extension, setup


def _limited_api() -> bool:
    return (
        platform.python_implementation() == "CPython"
        and not hasattr(sys, "gettotalrefcount")  # debug build
        and not sysconfig.get_config_var("Py_GIL_DISABLED")  # free-threaded
    )


# `pip install -e .` makes a "strict" editable install: a .pth file naming a
# tree of links to the package's files.  The default ("lenient") installs an
# import hook instead, which type checkers cannot follow: mypy --strict on a
# user's program then found no pyqstore (and so no py.typed).  A file added
# to the package needs `pip install -e .` again to appear.
_OPTIONS: dict[str, dict[str, str]] = {"editable_wheel": {"mode": "strict"}}
_EXTENSIONS: list[Extension] = []
if _limited_api():
    _OPTIONS["bdist_wheel"] = {"py_limited_api": "cp310"}
    # libc is linked by name although the module calls nothing of it: a
    # linker that drops unused libraries (--as-needed) left it with no
    # DT_NEEDED at all, and auditwheel then cannot tell which libc the
    # wheel was built for (InvalidLibcError).
    _EXTENSIONS.append(Extension(
        "pyqstore._heldcalls", ["pyqstore/_heldcalls.c"], py_limited_api=True,
        include_dirs=["csrc"],
        extra_compile_args=["-O2", "-std=c11"],
        extra_link_args=["-Wl,--no-as-needed", "-lc"]))

setup(
    cffi_modules=["pyqstore/_build.py:ffibuilder"],
    ext_modules=_EXTENSIONS,
    options=_OPTIONS,
)
