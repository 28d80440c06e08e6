"""Damage to the log (NAME-log) of a casket whose writer was killed.

A writer that is SIGKILLed before a checkpoint leaves all its commits in the
log only.  Damage to a frame that a later commit frame of the same
generation declares synced must fail the open (and check()) with
CorruptError naming the log and the frame; damage no later frame vouches
for is a torn tail and recovers silently, everything before it intact.

The tests read the log's frames with a small parser of their own (_logfmt.py,
the reference model of the format: DESIGN.md "Log (NAME-log)", csrc/pagefmt.h),
so each damage position has an expected outcome computed independently of
the C scan.
"""
from __future__ import annotations

import os
import random
import shutil

import pytest

import pyqstore
from pyqstore import CorruptError
from _logfmt import PG_SIZE, Frame, log_frames
from _procs import kill_after

TXNS = 300  # transactions of the writer in the record workload
PER_TXN = 100  # records each


WRITER = """
import sys, time, pyqstore
path, queues = sys.argv[1], sys.argv[2] == "1"
c = pyqstore.open(path, "c", sync=True, checkpoint_size=1 << 30)
for t in range({txns}):
    with c.transaction():
        for r in range({per}):
            i = t * {per} + r
            c.put(b"k%06d" % i, b"value %d " % i * 4)
if queues:
    q = c.queue("jobs")
    for t in range(200):
        q.put_many([b"item %d" % (t * 100 + j) for j in range(100)])
print("done", flush=True)
time.sleep(600)
""".format(txns=TXNS, per=PER_TXN)


def killed_writer(directory: str, queues: bool) -> str:
    """Runs the writer to the end of its work, SIGKILLs it before any
    checkpoint, and returns the casket's path (the log holds everything)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "c.qs")
    kill_after(WRITER, path, "1" if queues else "0", ready=b"done\n")
    return path


@pytest.fixture(scope="module")
def record_casket(tmp_path_factory) -> tuple[str, bytes]:
    path = killed_writer(str(tmp_path_factory.mktemp("writer")), queues=False)
    with open(path + "-log", "rb") as f:
        return path, f.read()


def damaged_copy(src: str, directory: str, log: bytes) -> str:
    """A copy of the casket at src whose log is replaced by log (no region
    file: the copy is opened alone, as after a reboot)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "c.qs")
    shutil.copyfile(src, path)
    with open(path + "-log", "wb") as f:
        f.write(log)
    return path


def flip_bit(log: bytes, pos: int, bit: int) -> bytes:
    b = bytearray(log)
    b[pos] ^= 1 << bit
    return bytes(b)


def declared_synced_after(frames: list[Frame], intact_from: int) -> int:
    """The furthest offset an intact commit frame (one starting at or after
    intact_from) declares synced: damage is provable iff it lies below."""
    return max((f.synced for f in frames if f.commit and f.off >= intact_from), default=0)


def commits_before(frames: list[Frame], pos: int) -> int:
    """Transactions whose commit frame ends at or before pos."""
    return sum(1 for f in frames if f.commit and f.end <= pos)


def assert_records(path: str, txns: int) -> None:
    with pyqstore.open(path, "r") as c:
        assert len(c) == txns * PER_TXN
        for i in (0, txns * PER_TXN // 2, txns * PER_TXN - 1) if txns else ():
            assert c.get(b"k%06d" % i) == b"value %d " % i * 4
        c.check()


def test_writer_log_is_what_the_model_reads(record_casket):
    """The parser the other tests trust reads all commits, and the commits
    of a synced writer declare their predecessors durable."""
    _, log = record_casket
    frames = log_frames(log)
    commits = [f for f in frames if f.commit]
    assert len(commits) == TXNS
    # commit k was synced before commit k+1 was written, and no frame
    # declares itself or anything after its own start durable
    for prev, cur in zip(commits, commits[1:]):
        assert cur.synced >= prev.end
    for f in commits:
        assert f.synced <= f.off


def test_issue_scenario_bit_flip_mid_log_raises(tmp_path):
    """The hardening issue's report: a killed writer, one bit flipped in the
    middle of NAME-log.  The open used to succeed and lose every commit after
    the frame (24,000 of 30,000 records, all 20,000 queue items)."""
    path = killed_writer(str(tmp_path / "w"), queues=True)
    with open(path + "-log", "rb") as f:
        log = f.read()
    frames = log_frames(log)
    mid = (frames[0].off + frames[-1].end) // 2
    bad = next(f for f in frames if f.off <= mid < f.end)
    copy = damaged_copy(path, str(tmp_path / "d"), flip_bit(log, mid, 3))
    with pytest.raises(CorruptError) as ei:
        pyqstore.open(copy, "w")
    msg = str(ei.value)
    assert copy + "-log" in msg
    assert f"frame {frames.index(bad) + 1} (offset {bad.off})" in msg
    # a read-only open judges the log the same way
    with pytest.raises(CorruptError):
        pyqstore.open(copy, "r")
    # and the undamaged log recovers everything
    clean = damaged_copy(path, str(tmp_path / "clean"), log)
    with pyqstore.open(clean, "w") as c:
        assert len(c) == TXNS * PER_TXN
        assert len(c.queue("jobs")) == 20000
        c.check()


def test_torn_tail_recovers_everything_synced(record_casket, tmp_path):
    """The last commit half written (torn) or garbled: nothing declares it
    synced, so it is dropped silently and every earlier commit survives."""
    path, log = record_casket
    frames = log_frames(log)
    last = frames[-1]
    assert last.commit
    cases = {
        "cut": log[: last.off + last.length // 2],
        "flip": flip_bit(log, last.off + last.length // 2, 0),
        "zero": log[: last.off] + bytes(len(log) - last.off),
    }
    for name, damaged in cases.items():
        copy = damaged_copy(path, str(tmp_path / name), damaged)
        assert_records(copy, TXNS - 1)
        with pyqstore.open(copy, "w") as c:
            assert len(c) == (TXNS - 1) * PER_TXN


def test_truncation_at_every_commit_boundary_is_a_clean_prefix(record_casket, tmp_path):
    """A log cut at a frame boundary holds no declaration past the cut: it
    recovers exactly the commits before it, silently."""
    path, log = record_casket
    frames = log_frames(log)
    rng = random.Random(7)
    cuts = sorted({f.end for f in frames} | {PG_SIZE})
    for n, cut in enumerate(rng.sample(cuts, 40) + [cuts[0], cuts[-1]]):
        copy = damaged_copy(path, str(tmp_path / str(n)), log[:cut])
        assert_records(copy, commits_before(frames, cut))


@pytest.mark.parametrize("seed", range(15))
def test_bit_flips_anywhere_against_the_model(record_casket, tmp_path, seed):
    """A bit flipped anywhere in the frames: CorruptError naming the frame
    exactly when a later commit frame declares the position synced, else a
    silent recovery of every commit before the damaged frame."""
    path, log = record_casket
    frames = log_frames(log)
    rng = random.Random(seed)
    for n in range(4):
        pos = rng.randrange(frames[0].off, frames[-1].end)
        damaged = flip_bit(log, pos, rng.randrange(8))
        frame = next(f for f in frames if f.off <= pos < f.end)
        copy = damaged_copy(path, str(tmp_path / str(n)), damaged)
        if declared_synced_after(frames, frame.end) > frame.off:
            with pytest.raises(CorruptError) as ei:
                pyqstore.open(copy, "w")
            assert f"frame {frames.index(frame) + 1} (offset {frame.off})" in str(ei.value)
        else:
            assert_records(copy, commits_before(frames, frame.off))


def test_zeroed_pages_against_the_model(record_casket, tmp_path):
    """A page of the file zeroed (a lost write of a whole block): the same
    rule, for the first frame it touches."""
    path, log = record_casket
    frames = log_frames(log)
    rng = random.Random(11)
    pages = range(1, (frames[-1].end + PG_SIZE - 1) // PG_SIZE)
    for n, pg in enumerate(rng.sample(pages, 12) + [pages[-1]]):
        damaged = log[: pg * PG_SIZE] + bytes(PG_SIZE) + log[(pg + 1) * PG_SIZE:]
        frame = next(f for f in frames if f.end > pg * PG_SIZE)
        copy = damaged_copy(path, str(tmp_path / str(n)), damaged)
        if declared_synced_after(frames, (pg + 1) * PG_SIZE) > frame.off:
            with pytest.raises(CorruptError) as ei:
                pyqstore.open(copy, "r")
            assert "-log: frame" in str(ei.value)
        else:
            assert_records(copy, commits_before(frames, frame.off))


def test_check_verifies_the_log(tmp_path):
    """check() on an open casket reads its log: a synced frame damaged
    under a live read-only handle is reported, naming the log."""
    path = killed_writer(str(tmp_path / "w"), queues=False)
    with open(path + "-log", "rb") as f:
        log = f.read()
    frames = log_frames(log)
    copy = damaged_copy(path, str(tmp_path / "d"), log)
    with pyqstore.open(copy, "r") as c:
        c.check()
        mid = frames[len(frames) // 2]
        with open(copy + "-log", "r+b") as f:
            f.seek(mid.off + mid.length // 2)
            byte = f.read(1)
            f.seek(mid.off + mid.length // 2)
            f.write(bytes([byte[0] ^ 0x10]))
        with pytest.raises(CorruptError) as ei:
            c.check()
        assert copy + "-log: " in str(ei.value)


def test_damaged_header_of_a_synced_log_raises(record_casket, tmp_path):
    """A bit flipped in the log's header: the commit frames after it declare
    synced frames, so the header was durable and is damaged (it used to be
    taken for a torn header and the whole log dropped: every commit lost)."""
    path, log = record_casket
    copy = damaged_copy(path, str(tmp_path / "d"), flip_bit(log, 20, 1))
    with pytest.raises(CorruptError) as ei:
        pyqstore.open(copy, "w")
    assert copy + "-log: the header is damaged" in str(ei.value)


def test_torn_header_of_an_unsynced_log_is_silent(tmp_path):
    """A log whose commits were never synced (sync=False, writer killed)
    declares nothing: a garbled header is a torn one, recovered silently
    from the main file (which holds what the last checkpoint wrote)."""
    directory = tmp_path / "w"
    directory.mkdir()
    path = str(directory / "c.qs")
    with pyqstore.open(path, "c", sync=False, checkpoint_size=1 << 30) as c:
        c.put(b"checkpointed", b"1")
    kill_after("import sys, time, pyqstore\n"
               "c = pyqstore.open(sys.argv[1], 'w', sync=False, checkpoint_size=1 << 30)\n"
               "for i in range(50):\n"
               "    c.put(b'k%d' % i, b'v')\n"
               "print('done', flush=True)\n"
               "time.sleep(600)\n", path, ready=b"done\n")
    with open(path + "-log", "rb") as f:
        log = f.read()
    assert all(f.synced == 0 for f in log_frames(log) if f.commit)
    copy = damaged_copy(path, str(tmp_path / "d"), flip_bit(log, 20, 1))
    with pyqstore.open(copy, "w") as c:
        assert c.get(b"checkpointed") == b"1"
        assert len(c) == 1
        c.check()
