"""Build glue: setuptools reads the metadata from pyproject.toml; the only
thing declared here is the cffi extension, which has no pyproject key."""
from setuptools import setup

setup(cffi_modules=["pyqstore/_build.py:ffibuilder"])
