"""Delta log frames (format 3, csrc/wal.c) seen from outside: what a writer
of small commits leaves in its log, what a reopen after SIGKILL makes of
it, and a second process following those commits.

The log is read with the reference parser (_logfmt.py): a delta frame is
based on its page's previous frame of the generation, no chain is longer
than WAL_DELTA_DEPTH (8), and a page's first frame in a generation is
whole (a page torn in the main file by a cut checkpoint is rebuilt from
the log alone).
"""
from __future__ import annotations

import random

import pyqstore
from _logfmt import log_frames
from _procs import kill_after, start_python

DELTA_DEPTH = 8

WRITER = """
import random, sys, time, pyqstore
path = sys.argv[1]
rnd = random.Random(7)
c = pyqstore.open(path, "c", sync=True, checkpoint_size=1 << 30)
with c.transaction():                       # a tree some pages deep
    for i in range(3000):
        c.put(b"key %05d" % i, b"first %d" % i)
c.sync()                                    # checkpointed: a new generation
for n in range(1500):                       # then one put a commit
    i = rnd.randrange(3000)
    c.put(b"key %05d" % i, b"put %d" % n)
print("done", flush=True)
time.sleep(600)
"""


def expected() -> dict[bytes, bytes]:
    """The writer's records, computed the way it made them."""
    want = {b"key %05d" % i: b"first %d" % i for i in range(3000)}
    rnd = random.Random(7)
    for n in range(1500):
        want[b"key %05d" % rnd.randrange(3000)] = b"put %d" % n
    return want


def test_small_commits_log_deltas_and_a_reopen_rebuilds_them(tmp_path):
    path = str(tmp_path / "c.qs")
    kill_after(WRITER, path, ready=b"done\n")
    with open(path + "-log", "rb") as f:
        frames = log_frames(f.read())
    assert sum(f.commit for f in frames) == 1500  # all in this generation

    last: dict[int, object] = {}
    deltas = restarts = 0
    for f in frames:
        prev = last.get(f.pgno)
        if f.delta:
            deltas += 1
            # on the page's previous frame, one deeper, never too deep
            assert prev is not None, f"page {f.pgno}: a delta as its first frame"
            assert f.base == prev.off, (f, prev)
            assert f.depth == (prev.depth if prev.delta else 0) + 1, (f, prev)
            assert f.depth <= DELTA_DEPTH
        elif prev is not None and prev.delta and prev.depth == DELTA_DEPTH:
            restarts += 1   # a full chain: the page goes whole again
        last[f.pgno] = f
    # the root changes in every commit, so its chains fill up and restart
    assert restarts > 0
    # each commit rewrites a leaf and the counts above it: most of those
    # pages were logged before in this generation
    assert deltas > len(frames) // 2, (deltas, len(frames))
    delta_bytes = sum(f.length for f in frames if f.delta) / deltas
    whole_bytes = sum(f.length for f in frames if not f.delta) / (len(frames) - deltas)
    assert delta_bytes < whole_bytes / 4, (delta_bytes, whole_bytes)

    # the reopen replays every chain; the records are the writer's
    with pyqstore.open(path, "r") as c:
        got = dict(c.items())
    assert got == expected()
    with pyqstore.open(path, "w") as c:  # and a read-write open folds them in
        assert dict(c.items()) == expected()
        c.check()


FOLLOWED = """
import sys, pyqstore
c = pyqstore.open(sys.argv[1], "w", sync=False, checkpoint_size=1 << 30)
for line in sys.stdin:
    n = int(line)
    c.put(b"key %03d" % (n % 50), b"value %d" % n)
    print(n, flush=True)
c.close()
"""


def test_a_reader_process_follows_deltas_without_rereading(tmp_path):
    """Another process's small commits arrive as delta frames; the reader's
    cached pages take them in place instead of being read again."""
    path = str(tmp_path / "c.qs")
    with pyqstore.open(path, "c") as c:
        for i in range(50):
            c.put(b"key %03d" % i, b"value -1")
    reader = pyqstore.open(path, "r")
    writer = start_python(FOLLOWED, path, stdin=True, text=True, unbuffered=False)
    try:
        want = {b"key %03d" % i: b"value -1" for i in range(50)}
        assert dict(reader.items()) == want
        before = reader.stats()
        for n in range(300):
            writer.stdin.write(f"{n}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == str(n)
            want[b"key %03d" % (n % 50)] = b"value %d" % n
            assert reader.get(b"key %03d" % (n % 50)) == b"value %d" % n
        assert dict(reader.items()) == want
        after = reader.stats()
        # 300 commits followed; pages read again from the file: a handful
        # (the first frames of pages, whole), not one a commit
        assert after["log_frames_read"] - before["log_frames_read"] >= 300
        assert after["pages_read"] - before["pages_read"] < 30, (before, after)
    finally:
        writer.stdin.close()
        assert writer.wait(30) == 0, writer.stderr.read()
        reader.close()
