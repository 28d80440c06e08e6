"""Build glue for qstore-bench: the only thing declared here is the cffi
extension of the `native` driver (qstore_bench/_native_build.py), which has
no pyproject key."""
from setuptools import setup

setup(cffi_modules=["qstore_bench/_native_build.py:ffibuilder"])
