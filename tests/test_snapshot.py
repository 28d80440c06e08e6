"""Snapshots, Queue.iter and backups.

The behaviour specified here:

* ``with casket.snapshot() as s:`` reads one commit: every read and
  iteration through ``s`` sees the newest commit at the time it was taken,
  whatever this or other processes commit meanwhile (a model test against a
  copy of a reference dict, and 100,000 records iterated while another
  process commits).
* A snapshot never blocks writers.  It holds checkpoints off, so the log
  grows while it is open, up to its ``max_log_size``; then a checkpoint goes
  ahead and the snapshot's next read raises ``SnapshotTooOldError``.  The
  log never exceeds the limit by more than one commit.  Closed, it lets the
  next commit checkpoint again.
* ``queue.iter()`` yields every item in id order, reserved ones included,
  without consuming; on a snapshot it sees one commit.
* ``casket.backup(dest)`` writes a casket holding exactly one commit's state
  while another process writes; the copy's main file alone opens and checks
  sound; dest is never overwritten.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore
from _procs import kill_child

BATCH = 100     # records per commit of the writer process


def _writer(path: str, ready, stop, batches) -> None:
    """Commits batches of BATCH records ("w", n) until stop is set, trying
    to checkpoint every 64 KiB of log (so it meets the others' pins)."""
    c = pyqstore.open(path, sync=False, checkpoint_size=64 * 1024)
    n = 0
    try:
        while not stop.is_set():
            c.putdup_many((b"w%09d" % (n * BATCH + i), b"x" * 50) for i in range(BATCH))
            n += 1
            batches.value = n
            ready.set()
    finally:
        c.close()


@pytest.fixture
def writer(path, kids):
    """Starts _writer in another process on path; yields (ready, batches)."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    batches = ctx.Value("q", 0)

    def start():
        kids.spawn(_writer, path, ready, stop, batches)
        assert ready.wait(60), "the writer process did not commit"
        return batches

    yield start
    stop.set()
    kids.join(30)  # the kids fixture kills a writer that did not stop


def test_snapshot_iterates_one_commit_of_100k_records_while_another_process_commits(path, writer):
    with pyqstore.open(path, "n", sync=False) as c:
        c.putdup_many((b"a%06d" % i, b"v" * 20) for i in range(100_000))
        batches = writer()
        with c.snapshot() as s:
            n0 = len(s)
            b0 = batches.value
            keys = [k for k, _ in s.items()]
            b1 = batches.value
            assert len(s) == n0
            assert sum(1 for _ in s.keys()) == n0
            # the other process's checkpoints (every 64 KiB) were held off
            assert c.stats()["log_bytes"] > 256 * 1024
        assert b1 > b0, "the other process did not commit during the iteration"
        assert len(keys) == n0, f"snapshot iterated {len(keys)} records, its commit had {n0}"
        assert n0 % BATCH == 0 and n0 >= 100_000 + BATCH
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert len(c) > n0   # the writer went on while the snapshot was open


def test_iteration_without_snapshot_never_repeats_a_record(path, writer):
    """The documented view without a snapshot: each batch reads the newest
    commit, so records come in order and never twice, and every record
    present throughout is seen."""
    with pyqstore.open(path, "n", sync=False) as c:
        c.putdup_many((b"a%06d" % i, b"v") for i in range(20_000))
        writer()
        keys = [k for k, _ in c.items()]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert sum(1 for k in keys if k.startswith(b"a")) == 20_000


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 20), st.binary(max_size=30)),
        st.tuples(st.just("putdup"), st.integers(0, 20), st.binary(max_size=3000)),
        st.tuples(st.just("out"), st.integers(0, 20), st.just(b"")),
        st.tuples(st.just("qput"), st.integers(0, 2), st.binary(max_size=50)),
        st.tuples(st.just("qget"), st.integers(0, 2), st.just(b"")),
        st.tuples(st.just("snap"), st.just(0), st.just(b"")),
        st.tuples(st.just("close"), st.integers(0, 5), st.just(b"")),
    ),
    max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_snapshot_reads_match_a_copy_of_the_model(tmp_path, ops):
    path = str(tmp_path / "m.qs")
    records: dict[bytes, list[bytes]] = {}
    queues: dict[str, list[bytes]] = {}
    snaps: list[tuple[pyqstore.Snapshot, dict, dict]] = []

    def verify(s, rec, qs):
        want = [(k, v) for k in sorted(rec) for v in rec[k]]
        assert list(s.items()) == want
        assert len(s) == len(want)
        for k in rec:
            assert s.getdup(k) == rec[k]
        assert s.queues() == sorted(n for n in qs if qs[n])
        for n, items in qs.items():
            assert list(s.queue(n).iter()) == items
            assert len(s.queue(n)) == len(items)

    with pyqstore.open(path, "n", sync=False, checkpoint_size=16 * 1024) as c:
        for op, i, v in ops:
            k = b"k%02d" % i
            if op == "put":
                c.put(k, v)
                records[k] = [v]
            elif op == "putdup":
                c.putdup(k, v)
                records.setdefault(k, []).append(v)
            elif op == "out":
                if c.out(k):
                    records[k].pop(0)
                    if not records[k]:
                        del records[k]
                else:
                    assert k not in records
            elif op == "qput":
                c.queue(f"q{i}").put(v)
                queues.setdefault(f"q{i}", []).append(v)
            elif op == "qget":
                got = c.queue(f"q{i}").get_many(1, block=False)
                assert got == queues.get(f"q{i}", [])[:1]
                if got:
                    queues[f"q{i}"].pop(0)
            elif op == "snap":
                snaps.append((c.snapshot(), {k: list(v) for k, v in records.items()},
                              {n: list(v) for n, v in queues.items()}))
            elif op == "close" and snaps:
                s, rec, qs = snaps.pop(i % len(snaps))
                verify(s, rec, qs)
                s.close()
            for s, rec, qs in snaps:
                assert len(s) == sum(map(len, rec.values()))
        for s, rec, qs in snaps:
            verify(s, rec, qs)
            s.close()


def test_snapshot_is_read_only(casket):
    casket.put(b"k", b"v")
    with casket.snapshot() as s:
        with pytest.raises(pyqstore.ReadOnlyError):
            s.put(b"k", b"w")
        with pytest.raises(pyqstore.ReadOnlyError):
            s.queue("q").put(b"x")
        assert s[b"k"] == b"v"
    with pytest.raises(pyqstore.ClosedError):
        s.get(b"k")
    with pytest.raises(ValueError, match="max_log_size"):
        casket.snapshot(max_log_size=0)


def test_a_held_snapshot_does_not_block_writers_and_bounds_the_log(path):
    limit = 4 << 20
    with pyqstore.open(path, "n", sync=False, checkpoint_size=256 * 1024) as c:
        c.putdup_many((b"base%05d" % i, b"b" * 100) for i in range(1000))
        s = c.snapshot(max_log_size=limit)
        peak, worst, i = 0, 0.0, 0
        grew_past_checkpoint = False
        # Writers go on: every commit returns promptly while the snapshot
        # is held, and the snapshot reads its commit until the limit.
        while True:
            t0 = time.monotonic()
            c.putdup_many((b"new%07d" % (i * 20 + j), b"n" * 200) for j in range(20))
            worst = max(worst, time.monotonic() - t0)
            i += 1
            log = c.stats()["log_bytes"]
            peak = max(peak, log)
            grew_past_checkpoint |= log > 2 * 256 * 1024
            try:
                assert len(s) == 1000
            except pyqstore.SnapshotTooOldError:
                break
            assert i < 100_000, "the log never reached the snapshot's limit"
        assert grew_past_checkpoint, "checkpoints were not held off while the snapshot was open"
        # at most one commit (here < 64 KiB) beyond the limit
        assert peak <= limit + (64 << 10), f"log grew to {peak} bytes, limit {limit}"
        assert c.stats()["log_bytes"] < limit  # the checkpoint went ahead
        assert worst < 5.0, f"a commit took {worst:.2f} s while a snapshot was held"
        with pytest.raises(pyqstore.SnapshotTooOldError, match="snapshot too old"):
            list(s.items())
        s.close()
        # a closed snapshot holds nothing off
        with c.snapshot(max_log_size=limit) as s2:
            n = len(s2)
        c.putdup_many((b"z%04d" % j, b"z" * 4000) for j in range(100))
        assert c.stats()["log_bytes"] < 2 * 256 * 1024 + (1 << 20)
        assert len(c) == n + 100


def test_snapshot_held_in_another_thread_while_a_writer_thread_commits(path):
    """Readers of a snapshot and a writer run at once; the writer never
    waits for the snapshot's reads."""
    with pyqstore.open(path, "n", sync=False, checkpoint_size=128 * 1024) as c:
        c.putdup_many((b"a%05d" % i, b"v" * 30) for i in range(5000))
        stop = threading.Event()
        done = []

        def write():
            j = 0
            while not stop.is_set():
                c.putdup(b"w%06d" % j, b"x" * 100)
                j += 1
            done.append(j)

        t = threading.Thread(target=write)
        t.start()
        try:
            with c.snapshot() as s:
                n0 = len(s)
                for _ in range(5):
                    assert sum(1 for _ in s.items()) == n0
        finally:
            stop.set()
            t.join(30)
        assert done and done[0] > 0


def test_queue_iter_yields_every_item_without_consuming(casket):
    q = casket.queue("jobs")
    q.put_many([b"j%d" % i for i in range(1000)])
    item = q.reserve()
    assert item.payload == b"j0"
    got = list(q.iter(with_ids=True))
    assert [p for _, p in got] == [b"j%d" % i for i in range(1000)]
    ids = [i for i, _ in got]
    assert ids == sorted(ids) and ids[0] == item.id
    assert len(q) == 999   # reserved one not counted, nothing consumed
    item.ack()
    assert next(q.iter()) == b"j1"
    assert list(casket.queue("none").iter()) == []
    jq = casket.queue("json", codec="json")
    jq.put({"a": 1})
    assert list(jq.iter()) == [{"a": 1}]


def test_queue_iter_in_a_snapshot_sees_one_commit(casket):
    q = casket.queue("jobs")
    q.put_many([b"x" * 3000] * 2000)   # several scan batches
    with casket.snapshot() as s:
        it = s.queue("jobs").iter()
        first = [next(it) for _ in range(10)]
        q.put_many([b"late"] * 10)
        q.get_many(500)
        rest = list(it)
    assert len(first) + len(rest) == 2000
    assert b"late" not in rest


def test_queue_iter_without_snapshot_goes_on_after_the_last_id(casket):
    q = casket.queue("jobs")
    q.put_many([b"%d" % i for i in range(600)])
    it = q.iter()
    head = [next(it) for _ in range(300)]
    q.put(b"new")
    rest = list(it)
    assert head + rest == [b"%d" % i for i in range(600)] + [b"new"]


def _rows(c):
    return list(c.items()), {n: list(c.queue(n).iter()) for n in c.queues()}


def test_backup_while_another_process_writes_holds_one_commit(path, writer, tmp_path):
    dest = str(tmp_path / "copy.qs")
    with pyqstore.open(path, "n", sync=False) as c:
        c.putdup_many((b"a%05d" % i, b"v" * 40) for i in range(30_000))
        q = c.queue("jobs")
        q.put_many([b"job%d" % i for i in range(100)])
        held = q.reserve()
        batches = writer()
        b0 = batches.value
        c.backup(dest)
        assert batches.value > b0, "the other process did not commit during the backup"
        held.release()
    left = os.listdir(tmp_path)
    assert "copy.qs-backup" not in left and "copy.qs-log" not in left and "copy.qs-shm" not in left
    # The main file alone, elsewhere, is the whole casket.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(dest, alone / "only.qs")
    with pyqstore.open(str(alone / "only.qs"), "r") as b:
        b.check()
        records, queues = _rows(b)
    ws = [k for k, _ in records if k.startswith(b"w")]
    assert len(ws) % BATCH == 0, f"{len(ws)} writer records: not a whole number of commits"
    assert ws == [b"w%09d" % i for i in range(len(ws))]
    assert [k for k, _ in records if k.startswith(b"a")] == [b"a%05d" % i for i in range(30_000)]
    assert queues == {"jobs": [b"job%d" % i for i in range(100)]}   # the reserved one too


def test_backup_never_replaces_a_file(casket, tmp_path):
    casket.put(b"k", b"v")
    dest = tmp_path / "b.qs"
    dest.write_bytes(b"precious")
    with pytest.raises(pyqstore.FileExists):
        casket.backup(str(dest))
    assert dest.read_bytes() == b"precious"
    other = tmp_path / "c.qs"
    (tmp_path / "c.qs-log").write_bytes(b"stale log")
    with pytest.raises(FileExistsError):
        casket.backup(str(other))
    assert not other.exists()
    casket.backup(str(tmp_path / "d.qs"))
    assert not (tmp_path / "d.qs-backup").exists()
    assert not (tmp_path / "d.qs-log").exists()
    with pyqstore.open(str(tmp_path / "d.qs"), "r") as b:
        assert b[b"k"] == b"v"
    assert casket.copy_progress() == (1, 1)


def _hold_snapshot(path: str, ready) -> None:
    c = pyqstore.open(path, sync=False)
    s = c.snapshot()
    len(s)
    ready.set()
    time.sleep(600)


def test_a_killed_processes_snapshot_holds_nothing_off(path, kids):
    ready = mp.get_context("spawn").Event()
    with pyqstore.open(path, "n", sync=False, checkpoint_size=64 * 1024) as c:
        c.put(b"k", b"v")
        p = kids.spawn(_hold_snapshot, path, ready)
        try:
            assert ready.wait(60)
            for i in range(100):
                c.putdup_many((b"x%06d" % (i * 10 + j), b"y" * 1000) for j in range(10))
            assert c.stats()["log_bytes"] > 512 * 1024     # held off by the live pin
        finally:
            kill_child(p, 30)
        c.putdup_many((b"z%d" % j, b"y" * 1000) for j in range(10))
        assert c.stats()["log_bytes"] < 64 * 1024          # checkpointed at once
        assert len(c) == 1 + 1000 + 10
