"""Shared fixtures for the pyqstore tests."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

import pyqstore
from _procs import Kids


@pytest.fixture
def path(tmp_path) -> str:
    """A casket path in a fresh directory (the file does not exist yet)."""
    return os.path.join(str(tmp_path), "test.qs")


@pytest.fixture
def casket(path) -> Iterator[pyqstore.Casket]:
    """A new, empty casket opened read-write (sync off for speed)."""
    c = pyqstore.open(path, "n", sync=False)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def kids() -> Iterator[Kids]:
    """Starts multiprocessing children (Kids.start, Kids.spawn) and kills
    whatever of them is still running when the test ends."""
    k = Kids()
    try:
        yield k
    finally:
        k.cleanup()
