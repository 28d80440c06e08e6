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
"""
import platform
import sys
import sysconfig

from setuptools import setup


def _limited_api() -> bool:
    return (
        platform.python_implementation() == "CPython"
        and not hasattr(sys, "gettotalrefcount")  # debug build
        and not sysconfig.get_config_var("Py_GIL_DISABLED")  # free-threaded
    )


setup(
    cffi_modules=["pyqstore/_build.py:ffibuilder"],
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if _limited_api() else {},
)
