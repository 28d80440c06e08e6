"""Each adapter drives its real peer the way the peer's documentation says:
every queue backend runs `tune` with writer threads, every `perf --sync`
row syncs once per write (counted with strace), `perf --handles` does what
it says and labels the rows, and the text tables keep their columns."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from qstore_bench import backends as bk
from qstore_bench import cli
from qstore_bench.cli import main


def _need(name: str) -> bk.Backend:
    b = bk.by_name([name])[0]
    why = b.unavailable()
    if why:
        pytest.skip(f"{name} unavailable here: {why}; install: {b.hint}")
    return b


QUEUE_BACKENDS = [b.name for b in bk.BACKENDS if "queue" in b.kinds]
KV_BACKENDS = [b.name for b in bk.BACKENDS if "kv" in b.kinds]


@pytest.mark.parametrize("name", QUEUE_BACKENDS)
def test_tune_runs_with_writer_threads(name, tmp_path):
    """lmdb, berkeleydb and persist-queue crashed here (a transaction
    shared by the writer threads; a queue made anew per transaction)."""
    _need(name)
    out = tmp_path / "t.json"
    res = CliRunner().invoke(main, ["tune", "-b", name, "--batches", "1,4,16", "--writers",
                                    "1,2,3", "--duration", "0.05", "--no-sync", "--dir",
                                    str(tmp_path), "--json", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == 9 and all(c["items_per_s"] > 0 for c in cells)


@pytest.mark.parametrize("name", [b.name for b in bk.BACKENDS
                                  if "queue" in b.kinds and not b.no_thread_handles])
def test_per_thread_handles_commit_every_item_once(name, tmp_path):
    """Writer threads with their own handles and transactions: every item
    of every transaction is in the queue afterwards, none twice."""
    b = _need(name)
    with b.session(False) as session:     # a server's backends need it
        _commit_from_threads(bk.open_store(b, str(tmp_path), False, session))


def _commit_from_threads(first: bk.Store) -> None:
    import threading

    stores = [first] + [first.connect() for _ in range(2)]
    try:
        def write(i: int) -> None:
            for t in range(20):
                stores[i].queue_transaction([b"%d-%d-%d" % (i, t, k) for k in range(5)])

        ths = [threading.Thread(target=write, args=(i,)) for i in range(3)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        got = first.qget_many("port", 1000)
    finally:
        for s in {id(s): s for s in stores}.values():
            s.close()
    assert sorted(got) == sorted(b"%d-%d-%d" % (i, t, k) for i in range(3) for t in range(20)
                                 for k in range(5))


@pytest.mark.parametrize("name", [b.name for b in bk.BACKENDS
                                  if "queue" in b.kinds and not b.no_thread_handles])
def test_consumer_threads_take_every_item_once(name, tmp_path):
    """Four consumer threads, a handle each, taking while a producer puts:
    every item taken once (derby's and persist-queue's select-then-delete
    takes handed one item to two consumers; drain refused them)."""
    import threading

    b = _need(name)
    items = [b"item-%d" % i for i in range(300)]
    with b.session(False) as session:
        first = bk.open_store(b, str(tmp_path), False, session)
        stores = [first.connect() for _ in range(5)]
        taken: list[list[bytes]] = [[] for _ in range(4)]
        start, produced = threading.Barrier(5), threading.Event()
        try:
            def produce() -> None:
                start.wait()
                for p in items:
                    stores[4].qput("port", p)
                produced.set()

            failures: list[BaseException] = []

            def consume(i: int) -> None:
                start.wait()
                try:
                    while True:
                        got = stores[i].qget_many("port", 3)
                        taken[i].extend(got)
                        if not got and produced.is_set() and not stores[i].qlen("port"):
                            return
                except BaseException as e:      # a consumer that died fails the test
                    failures.append(e)

            ths = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
            ths.append(threading.Thread(target=produce))
            for t in ths:
                t.start()
            for t in ths:
                t.join(120)
            assert not any(t.is_alive() for t in ths)
            assert not failures, f"consumers failed: {failures!r}"
        finally:
            for st in [first, *stores]:
                st.close()
    got = [p for part in taken for p in part]
    assert len(got) == len(items) and sorted(got) == sorted(items), \
        f"{len(got)} taken for {len(items)} put, {len(got) - len(set(got))} twice"


# ------------------------------------------------------------- perf --sync

SYNC_CALLS = ("fsync", "fdatasync", "msync", "sync_file_range")
WRITE_CALLS = ("write", "pwrite64", "writev", "pwritev", "pwritev2")


def _count_syncs(trace: str) -> int:
    """Durable writes in an `strace -f -y` log: the sync calls, and the
    writes to files opened O_SYNC or O_DSYNC (Derby's log is such a file:
    strace -c's table of sync calls saw none of its syncs)."""
    synced_paths: set[str] = set()
    n = 0
    call = re.compile(r"^\d+\s+(\w+)\((.*)")
    for line in open(trace, errors="replace"):
        m = call.match(line)
        if not m:
            continue
        name, rest = m.groups()
        if name in SYNC_CALLS:
            n += 1
        elif name == "openat" and ("O_DSYNC" in rest or "O_SYNC" in rest):
            path = re.search(r'"([^"]*)"', rest)
            if path:
                synced_paths.add(path.group(1))
        elif name in WRITE_CALLS:
            fd = re.match(r"\d+<([^>]*)>", rest)
            if fd and fd.group(1) in synced_paths:
                n += 1
    return n


def _traced(tmp_path, args: list[str], tag: str) -> tuple[int, subprocess.CompletedProcess]:
    """A qstore-bench run under strace -f (its servers and JVM threads
    included): its durable writes, and the run."""
    return _strace(tmp_path, ["-m", "qstore_bench.cli"] + args + ["--dir", str(tmp_path)], tag)


def _strace(tmp_path, python_args: list[str], tag: str) -> tuple[int, subprocess.CompletedProcess]:
    """Python with python_args under strace -f: its durable writes, and the run."""
    trace = str(tmp_path / f"strace-{tag}.txt")
    done = subprocess.run(["strace", "-f", "-qq", "-y", "-o", trace, "-e",
                           "trace=" + ",".join(SYNC_CALLS + WRITE_CALLS + ("openat",)),
                           sys.executable] + python_args, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return _count_syncs(trace), done


# hdf5 has no kv layer: its synced writes are the queue layer's transactions
SYNC_ROWS = [(name, "perf") for name in KV_BACKENDS] + [("hdf5", "sweep")]


@pytest.mark.parametrize("name,experiment", SYNC_ROWS)
def test_sync_rows_do_a_durable_sync_per_write(name, experiment, tmp_path):
    """strace counts the durable writes of a --sync run: at least one per
    write, and at least 90% of the writes more than the same run without
    --sync (background flushes do not count).  Tokyo Cabinet made 0 over
    1,000 puts (OTSYNC syncs transactions only).  A backend that cannot
    sync says so in the table instead of pretending."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")
    b = _need(name)
    out = tmp_path / "p.json"
    if experiment == "perf":
        n = 100
        args = ["perf", "-x", "1", "-n", str(n), "--reps", "1", "-b", name]
        writes = 2 * n          # the warm-up run and one timed run
    else:
        args = ["sweep", "--max", "1", "--reps", "1", "--layer", "queue", "-b", name]
        writes = 4              # one transaction each: n = 1 and 10, warm-up and timed
    synced, done = _traced(tmp_path, args + ["--sync", "--json", str(out)], "sync")
    row = next(r for r in json.loads(out.read_text())["results"] if r["backend"] == name)
    if b.cannot_sync:
        assert row["sync"] == f"cannot: {b.cannot_sync}"
        assert f"# {name} cannot: {b.cannot_sync}" in done.stdout
        return
    assert row.get("sync", "yes") == "yes"
    unsynced, _ = _traced(tmp_path, args + ["--no-sync"], "nosync")
    assert synced >= writes, f"{name}: {synced} syncs over {writes} synced writes"
    assert synced - unsynced >= 0.9 * writes, (name, synced, unsynced)


@pytest.mark.parametrize("side", ["ours", "persist_queue", "litequeue_side"])
def test_the_ack_queue_lines_sync_every_commit_when_they_say_so(side, tmp_path):
    """Each side of brokers' ack lines, synced: one durable sync per commit
    (pyqstore 3 a round; persist-queue 3 an item: its ack queue commits
    each put, get and ack; litequeue 2 a round and 1 a pop), and at least
    90% of those more than unsynced: each ran at the level its line
    states (litequeue's own synchronous=NORMAL made none)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")
    pytest.importorskip({"persist_queue": "persistqueue", "litequeue_side": "litequeue"}
                        .get(side, "pyqstore"))
    batch, rounds = 5, 8
    commits = rounds * {"ours": 3, "persist_queue": 3 * batch,
                        "litequeue_side": 2 + batch}[side]

    def run(sync: bool) -> int:
        d = tmp_path / str(sync)
        d.mkdir()
        code = (f"from qstore_bench import ackqueues; "
                f"ackqueues.{side}({str(d)!r}, {batch}, {rounds}, 64, {sync})")
        return _strace(tmp_path, ["-c", code], f"{side}-{sync}")[0]

    synced, unsynced = run(True), run(False)
    assert synced >= commits, f"{side}: {synced} syncs over {commits} synced commits"
    assert synced - unsynced >= 0.9 * commits, (side, synced, unsynced, commits)


def test_sync_counting_sees_a_store_that_does_not_sync(tmp_path):
    """The counter is not blind: perf --no-sync on pyqstore makes far fewer
    syncs than writes."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")
    got, _ = _traced(tmp_path, ["perf", "--no-sync", "-x", "1", "-n", "300", "--reps", "1",
                                "-b", "pyqstore"], "nosync")
    assert got < 100


# ---------------------------------------------------------- perf --handles

@pytest.mark.parametrize("handles", ["shared", "per-thread"])
def test_perf_handles_are_what_the_rows_say(handles, tmp_path):
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["perf", "-x", "2", "-n", "200", "--reps", "1", "--handles",
                                    handles, "-b", "pyqstore,sqlite3,lmdb", "--dir",
                                    str(tmp_path), "--json", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    data = json.loads(out.read_text())
    assert data["handles"] == handles
    rows = {r["backend"]: r for r in data["results"]}
    for name in ("pyqstore", "sqlite3", "lmdb"):
        assert rows[name]["handles"] == handles
        assert rows[name]["distinct_handles"] == (1 if handles == "shared" else 2)
    table = [line for line in res.output.splitlines() if line.startswith("pyqstore")]
    assert table and handles in table[0]


@pytest.mark.parametrize("handles", ["shared", "per-thread"])
@pytest.mark.parametrize("name", KV_BACKENDS)
def test_every_backend_runs_the_handles_it_can_and_refuses_the_others(name, handles, tmp_path):
    """Two threads with a handle each or one between them: the row says
    which and has that many handles, or the backend is refused with the
    reason its flag gives (a PyMySQL connection or a JDBC connection shared
    by threads would interleave their statements)."""
    b = _need(name)
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["perf", "-x", "2", "-n", "100", "--reps", "1", "--handles",
                                    handles, "-b", name, "--dir", str(tmp_path),
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    data = json.loads(out.read_text())
    why = b.no_thread_handles if handles == "per-thread" else b.no_shared_handle
    rows = {r["backend"]: r for r in data["results"]}
    if why:
        assert name not in rows
        assert data["backends"][name]["reason"] == f"cannot run with {handles} handles: {why}"
        return
    assert rows[name]["handles"] == handles
    assert rows[name]["distinct_handles"] == (1 if handles == "shared" else 2)
    assert rows[name]["writes_per_s"] > 0 and rows[name]["reads_per_s"] > 0


def test_a_backend_without_per_thread_handles_is_refused_with_the_reason(tmp_path):
    _need("tokyocabinet")
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["perf", "-x", "2", "-n", "100", "--reps", "1", "--handles",
                                    "per-thread", "-b", "tokyocabinet", "--dir", str(tmp_path),
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [r["backend"] for r in data["results"]] == ["null"]
    assert "one handle" in data["backends"]["tokyocabinet"]["reason"]


# ---------------------------------------------------------- text tables

def test_sweep_table_keeps_its_columns_at_any_size(monkeypatch, tmp_path):
    """sweep --max 7 printed Tokyo Cabinet's s/txn, min and max run
    together (134.419917134.419917134.419917)."""
    big = {"median": 134.419917, "mean": 134.419917, "min": 134.419917, "max": 134.419917}
    result = {"machine": {"cpu": "cpu", "cores": 2, "python": "3", "filesystem": "ext4",
                          "dir": str(tmp_path)},
              "backends": {"tokyocabinet": {"available": True, "version": "1.4"}},
              "results": [{"backend": "tokyocabinet", "n": 10 ** 7, "seconds": big,
                           "us_per_item": 13.4419917, "items_per_s": 74395.0,
                           "warmup_seconds": None, "runs": 1, "times": [134.419917]}]}
    monkeypatch.setattr(cli.ex, "sweep", lambda *a, **k: result)
    res = CliRunner().invoke(main, ["sweep", "--max", "7", "--reps", "1"])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stdout.splitlines() if not line.startswith("#")]
    head, row = lines[0].split(), lines[1].split()
    assert len(row) == len(head), lines
    assert row[2:5] == ["134.419917"] * 3


# ---------------------------------------------------------- sweep --seed-method

def test_sweep_seed_method_times_uuid_making_and_keeps_every_time(tmp_path):
    out, csv_path = tmp_path / "s.json", tmp_path / "s.csv"
    res = CliRunner().invoke(main, ["sweep", "--seed-method", "--max", "1", "--reps", "4",
                                    "--no-sync", "-b", "pyqstore,sqlite3", "--dir",
                                    str(tmp_path), "--json", str(out), "--csv", str(csv_path)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    data = json.loads(out.read_text())
    assert data["method"] == "seed"
    for r in data["results"]:
        times = r["times"]
        assert len(times) == 4 and all(t > 0 for t in times)
        assert r["seconds"]["mean"] == pytest.approx(sum(times) / 4)
        assert r["seconds"]["median"] == pytest.approx(sorted(times)[1] / 2 + sorted(times)[2] / 2)
    rows = csv_path.read_text().splitlines()
    assert "times" in rows[0] and "seconds_mean" in rows[0]
    assert len(rows) == 1 + len(data["results"])
    assert "mean" in res.stdout and "median" in res.stdout


def test_seed_method_defaults_to_the_seeds_ten_runs(tmp_path):
    out = tmp_path / "s.json"
    res = CliRunner().invoke(main, ["sweep", "--seed-method", "--max", "0", "--no-sync", "-b",
                                    "pyqstore", "--dir", str(tmp_path), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert [len(r["times"]) for r in json.loads(out.read_text())["results"]] == [10]


def test_berkeleydb_reruns_an_autocommitted_put_its_deadlock_detector_undid(tmp_path):
    """Seed 001's threaded writes meet DB_LOCK_DEADLOCK (a full goals run
    died of one): an auto-committed put, put or putdup or qput, that the
    detector chose is undone and runs again; inside a transaction the
    error goes to the caller, who reruns the whole transaction."""
    b = _need("berkeleydb")
    store = b.open(str(tmp_path), False)
    try:
        victims = {"left": 2}

        class Chosen:
            """The real table, its first puts chosen as deadlock victims."""

            def __init__(self, table):
                self.table = table

            def put(self, key, value, txn=None):
                if victims["left"]:
                    victims["left"] -= 1
                    raise store.dbm.DBLockDeadlockError(-30993, "chosen")
                return self.table.put(key, value, txn=txn)

            def __getattr__(self, name):
                return getattr(self.table, name)

        real_kv, real_dups = store.kv, store.dups
        store.kv, store.dups = Chosen(real_kv), Chosen(real_dups)
        store.put(b"k", b"v")
        assert victims["left"] == 0 and real_kv.get(b"k") == b"v"
        victims["left"] = 1
        store.putdup(b"d", b"1")
        assert victims["left"] == 0 and store.getdup(b"d") == [b"1"]
        victims["left"] = 1
        store.begin()
        with pytest.raises(store.dbm.DBLockDeadlockError):
            store.put(b"in-txn", b"v")
        store.txn.abort()
        store.txn = None
        # a put the detector chooses every time: the error after
        # DEADLOCK_RERUNS runs, not a loop without end
        from qstore_bench.backends import DEADLOCK_RERUNS
        victims["left"] = 10 ** 6
        with pytest.raises(store.dbm.DBLockDeadlockError):
            store.put(b"always", b"v")
        assert 10 ** 6 - victims["left"] == DEADLOCK_RERUNS
        victims["left"] = 0
        store.kv, store.dups = real_kv, real_dups
        assert store.get(b"in-txn") is None and store.get(b"always") is None
    finally:
        store.close()
