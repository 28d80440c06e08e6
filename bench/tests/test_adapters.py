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


@pytest.mark.parametrize("name", ["lmdb", "berkeleydb", "persist-queue", "pyqstore",
                                  "sqlite3", "diskcache"])
def test_per_thread_handles_commit_every_item_once(name, tmp_path):
    """Writer threads with their own handles and transactions: every item
    of every transaction is in the queue afterwards, none twice."""
    import threading

    b = _need(name)
    first = b.open(str(tmp_path), False)
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


# ------------------------------------------------------------- perf --sync

SYNC_CALLS = ("fsync", "fdatasync", "msync", "sync_file_range")


def _syncs(strace_summary: str) -> int:
    """Calls of the sync system calls in strace -c's table."""
    total = 0
    for line in strace_summary.splitlines():
        f = line.split()
        if f and f[-1] in SYNC_CALLS and len(f) >= 5:
            total += int(f[3])
    return total


@pytest.mark.parametrize("name", KV_BACKENDS)
def test_perf_sync_does_a_durable_sync_per_write(name, tmp_path):
    """strace counts the fsync/fdatasync/msync/sync_file_range calls of a
    perf --sync run (its servers included, -f): at least one per write.
    Tokyo Cabinet made 0 over 1,000 puts (OTSYNC syncs transactions only)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")
    b = _need(name)
    n = 300
    out = tmp_path / "p.json"
    summary = tmp_path / "strace.txt"
    cmd = ["strace", "-f", "-c", "-o", str(summary), "-e",
           "trace=" + ",".join(SYNC_CALLS), sys.executable, "-m", "qstore_bench.cli", "perf",
           "--sync", "-x", "1", "-n", str(n), "--reps", "1", "-b", name, "--dir", str(tmp_path),
           "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(r for r in json.loads(out.read_text())["results"] if r["backend"] == name)
    if b.cannot_sync:
        # the table says so instead of pretending
        assert row["sync"] == f"cannot: {b.cannot_sync}"
        assert f"# {name} cannot: {b.cannot_sync}" in done.stdout
        return
    assert row["sync"] == "yes"
    writes = 2 * n          # the warm-up run and one timed run
    got = _syncs(summary.read_text())
    assert got >= writes, f"{name}: {got} syncs over {writes} synced writes"


def test_sync_counting_sees_a_store_that_does_not_sync(tmp_path):
    """The counter is not blind: perf --no-sync on pyqstore makes far fewer
    syncs than writes."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed (apt-get install strace)")
    summary = tmp_path / "strace.txt"
    done = subprocess.run(
        ["strace", "-f", "-c", "-o", str(summary), "-e", "trace=" + ",".join(SYNC_CALLS),
         sys.executable, "-m", "qstore_bench.cli", "perf", "--no-sync", "-x", "1", "-n", "300",
         "--reps", "1", "-b", "pyqstore", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _syncs(summary.read_text()) < 100


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
