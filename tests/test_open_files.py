"""What opening a casket does to the files around it: a failed open must
leave the directory as it found it, and a path that is not a regular file
is refused before anything is created."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pyqstore


def listing(d):
    return sorted(os.listdir(d))


def make_casket(path):
    with pyqstore.open(path, "c") as c:
        c.put(b"k", b"v")
        c.queue("jobs").put_many([b"a", b"b"])


def read_all(path):
    with pyqstore.open(path, "r") as c:
        return dict(c.items()), c.queue("jobs").peek_many(10), len(c.queue("jobs"))


# ------------------------------------------- failed opens leave nothing


@pytest.mark.parametrize("flag", ["r", "w"])
def test_open_missing_creates_nothing(tmp_path, flag):
    with pytest.raises(FileNotFoundError):
        pyqstore.open(str(tmp_path / "missing.qs"), flag)
    assert listing(tmp_path) == []


@pytest.mark.parametrize("flag", ["r", "w", "c"])
def test_text_file_is_refused_and_nothing_created(tmp_path, flag):
    p = tmp_path / "notes.txt"
    p.write_text("not a casket\n" * 400)
    with pytest.raises(pyqstore.CorruptError, match="not a pyqstore casket"):
        pyqstore.open(str(p), flag)
    assert listing(tmp_path) == ["notes.txt"]
    assert p.read_text() == "not a casket\n" * 400


def test_cli_info_on_text_file_creates_nothing(tmp_path):
    p = tmp_path / "notacasket.txt"
    p.write_text("hello\n" * 1000)
    r = subprocess.run([sys.executable, "-m", "pyqstore.cli", "info", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "not a pyqstore casket" in r.stderr
    assert listing(tmp_path) == ["notacasket.txt"]


@pytest.mark.parametrize("flag", ["r", "w", "c", "n"])
def test_not_a_regular_file_is_refused_first(tmp_path, flag):
    """/dev/null opened "c" became a casket beside /dev/null-log and
    /dev/null-shm; a pipe would block the open.  Both are refused before
    anything is created (a symlink to /dev/null here, so no file appears
    in /dev whatever happens)."""
    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (null, fifo):
        with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
            pyqstore.open(str(p), flag, lock_timeout=0)
    assert listing(tmp_path) == ["fifo", "null"]


def test_side_file_not_regular_is_refused(tmp_path):
    p = str(tmp_path / "c.qs")
    make_casket(p)
    os.unlink(p + "-shm")
    os.mkfifo(p + "-shm")
    with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
        pyqstore.open(p, "w", lock_timeout=0)
    os.unlink(p + "-shm")
    os.unlink(p + "-log")
    os.mkfifo(p + "-log")
    with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
        pyqstore.open(p, "w", lock_timeout=0)
    assert listing(tmp_path) == ["c.qs", "c.qs-log"]


def test_failed_open_keeps_files_others_use(tmp_path):
    """A failing opener removes only what it created: with another handle
    open, the region and log stay, and that handle keeps working."""
    p = str(tmp_path / "c.qs")
    with pyqstore.open(p, "c") as c:
        with pytest.raises(pyqstore.LockedError):
            pyqstore.open(p, "n", lock_timeout=0)
        assert listing(tmp_path) == ["c.qs", "c.qs-log", "c.qs-shm"]
        c.put(b"k", b"v")
    assert read_all(p)[0] == {b"k": b"v"}


def test_empty_file_is_refused_by_c(tmp_path):
    """Opening someone's empty file with "c" turned it into a casket."""
    p = tmp_path / "empty"
    p.write_bytes(b"")
    with pytest.raises(pyqstore.CorruptError, match="not a pyqstore casket"):
        pyqstore.open(str(p), "c")
    assert listing(tmp_path) == ["empty"] and p.read_bytes() == b""
    with pyqstore.open(str(p), "n") as c:   # "n" may overwrite it
        c.put(b"k", b"v")
    assert read_all(str(p))[0] == {b"k": b"v"}
