"""What an open creates and how it refuses: the permission bits of the
casket, NAME-log and NAME-shm (the ``mode`` keyword, qs_options.perm), and
flag "n" while other handles have the casket open."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

import pyqstore


def _bits(p):
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture
def umask0():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _files(p):
    return [p, p + "-log", p + "-shm"]


def test_open_mode_sets_the_bits_of_every_file(tmp_path, umask0):
    p = str(tmp_path / "a.qs")
    with pyqstore.open(p, "c", mode=0o640) as c:
        c[b"k"] = b"v"
        assert [_bits(f) for f in _files(p)] == [0o640] * 3
    q = str(tmp_path / "b.qs")
    with pyqstore.open(q, "c") as c:              # the default, as before
        assert [_bits(f) for f in _files(q)] == [0o644] * 3
    r = str(tmp_path / "c.qs")
    with pyqstore.open(r, "c", mode=0o666) as db:
        assert [_bits(f) for f in _files(r)] == [0o666] * 3
    with pyqstore.open(r, "w", mode=0o600) as db:  # existing files keep theirs
        assert [_bits(f) for f in _files(r)] == [0o666] * 3
        db[b"k"] = b"v"
        db.compact()                              # the new main file keeps them too
        assert _bits(r) == 0o666 and db[b"k"] == b"v"
    with pyqstore.open(p, "w", mode=0o600) as c:
        c.backup(str(tmp_path / "copy.qs"))
    assert _bits(str(tmp_path / "copy.qs")) == 0o600


def test_open_mode_with_umask(tmp_path):
    old = os.umask(0o027)
    try:
        p = str(tmp_path / "a.qs")
        with pyqstore.open(p, "c", mode=0o666):
            assert [_bits(f) for f in _files(p)] == [0o640] * 3
    finally:
        os.umask(old)


@pytest.mark.parametrize("mode, exc", [(0o10000, ValueError), (-1, ValueError),
                                       ("0644", TypeError), (True, TypeError)])
def test_open_mode_checked(path, mode, exc):
    with pytest.raises(exc, match="mode must be"):
        pyqstore.open(path, "c", mode=mode)
    assert not os.path.exists(path)


# ---- flag "n" under other handles

def test_new_while_this_process_has_it_open_says_so(path):
    with pyqstore.open(path, "c") as a:
        with pytest.raises(pyqstore.LockedError) as e:
            pyqstore.open(path, "n")
        assert "flag 'n' cannot empty the casket while 1 other handle of this process " \
               "has it open" in str(e.value)
        assert "another process" not in str(e.value)
        with pyqstore.open(path, "r"):
            with pytest.raises(pyqstore.LockedError, match="2 other handles of this process"):
                pyqstore.open(path, "n")
        a[b"k"] = b"kept"
    with pyqstore.open(path, "n") as c:           # alone: it empties the casket
        assert len(c) == 0


def test_new_while_another_process_has_it_open_says_so(path):
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, pyqstore; c = pyqstore.open(sys.argv[1], 'c'); print('open', flush=True);"
         " sys.stdin.read()", path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "open\n"
        with pyqstore.open(path, "w") as a:
            with pytest.raises(pyqstore.LockedError,
                               match=r"while other handles have it open \(1 of this process, "
                                     r"1 of other processes\)"):
                pyqstore.open(path, "n")
            assert a.get(b"k") is None
    finally:
        child.communicate("", timeout=60)
    assert child.returncode == 0
