"""A casket written by a format-3 build (tests/data/make_format3.py) opens
under this build: its pages and frames carry the version-3 checksum, which
format 4 still verifies.  Read-only it is read unchanged; read-write it is
converted (page 0 and the log header say version 4), its logged commits
replayed, and what this build writes next survives a reopen."""
import hashlib
import os
import struct
import sys
import tarfile

import pytest

import pyqstore
from pyqstore._qstore import lib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "data"))
from format3_expected import QUEUE, QUEUE_ITEMS, QUEUE_TAKEN, expected_records  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "format3.tar.gz")
HDR_VERSION = 8     # pagefmt.h: the version's offset in page 0 and the log header
TR_FLAGS = 4004
TR_FLAG_CRC = 2


def _unpack(tmp_path) -> str:
    with tarfile.open(FIXTURE) as tar:   # our own two regular files
        for member in tar.getmembers():
            assert member.isfile() and "/" not in member.name
            with open(tmp_path / member.name, "wb") as out:
                out.write(tar.extractfile(member).read())
    return str(tmp_path / "f3.qs")


def _header(path: str) -> tuple[int, int]:
    """(format version, trailer flags) of the file's first page."""
    with open(path, "rb") as f:
        page = f.read(4096)
    return struct.unpack_from("<I", page, HDR_VERSION)[0], struct.unpack_from("<I", page, TR_FLAGS)[0]


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _has_crc32c_instruction() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return os.uname().machine == "x86_64" and " sse4_2" in f.read()
    except OSError:
        return False


def _check_contents(c) -> None:
    assert dict(c.items()) == expected_records()
    assert c.queue(QUEUE).peek_many(len(QUEUE_ITEMS)) == QUEUE_ITEMS[QUEUE_TAKEN:]


def test_fixture_is_format3_with_the_old_checksum(tmp_path):
    path = _unpack(tmp_path)
    for p in (path, path + "-log"):
        version, flags = _header(p)
        assert version == 3
        assert not flags & TR_FLAG_CRC


def test_read_only_open_reads_it_unchanged(tmp_path):
    path = _unpack(tmp_path)
    before = (_digest(path), _digest(path + "-log"))
    c = pyqstore.open(path, "r")
    try:
        assert c.stats()["format_version"] == 3
        _check_contents(c)
    finally:
        c.close()
    assert (_digest(path), _digest(path + "-log")) == before


def test_read_write_open_converts_and_keeps_every_commit(tmp_path):
    path = _unpack(tmp_path)
    c = pyqstore.open(path, "w")
    try:
        assert c.stats()["format_version"] == lib.QS_FORMAT_VERSION == 4
        _check_contents(c)
        for i in range(50):
            c.put(b"new-%03d" % i, b"v%d" % i)
        c.queue(QUEUE).get()
    finally:
        c.close()
    for p in (path, path + "-log"):
        assert _header(p)[0] == 4
    # the close checkpointed: page 0 was sealed by this build
    assert bool(_header(path)[1] & TR_FLAG_CRC) == _has_crc32c_instruction()
    c = pyqstore.open(path, "r")
    try:
        want = expected_records()
        want.update({b"new-%03d" % i: b"v%d" % i for i in range(50)})
        assert dict(c.items()) == want
        assert c.queue(QUEUE).peek_many(len(QUEUE_ITEMS)) == QUEUE_ITEMS[QUEUE_TAKEN + 1:]
    finally:
        c.close()


def test_a_flipped_checksum_flag_is_damage(tmp_path):
    """A flipped checksum-flag bit is damage like any other byte: the page
    fails to verify.  (That the flag, not the format version, picks the
    function is csrc/test_checksum.c's check; this one would also pass if
    the flag were a plain checksummed byte.)"""
    path = _unpack(tmp_path)
    os.remove(path + "-log")
    with open(path, "r+b") as f:
        f.seek(TR_FLAGS)
        flags = struct.unpack("<I", f.read(4))[0]
        f.seek(TR_FLAGS)
        f.write(struct.pack("<I", flags ^ TR_FLAG_CRC))
    with pytest.raises(pyqstore.CorruptError):
        pyqstore.open(path, "r")
