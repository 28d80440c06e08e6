"""qstore-bench goals: issue 17's table in one run.  The --small run is
real (pyqstore and its peers, tiny sizes): every selected line is there
with figures for both sides, and its ratio and verdict follow from them;
the verdict logic itself is checked on made-up cells."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from qstore_bench import goals
from qstore_bench.cli import main
from qstore_bench.experiments import Workdir

pytest.importorskip("lmdb")

SELECTED = ["group-commit", "mp-queue", "reserved-get", "put_many", "kv-get", "sweep"]   # rows come in issue 17's order


def test_small_run_prints_every_line_with_its_ratio_and_verdict(tmp_path):
    out = tmp_path / "goals.json"
    res = CliRunner().invoke(main, ["goals", "--small", "--lines", ",".join(SELECTED),
                                    "--json", str(out), "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["reps"] == 1 and data["small"] is True
    assert [x["line"] for x in data["rows"]] == (
        ["sweep"] * len(goals.SMALL.sweep_ns) + ["kv-get"] * len(goals.SMALL.kv_threads)
        + ["put_many", "reserved-get", "mp-queue", "group-commit"])
    table = res.output.splitlines()
    for x in data["rows"]:
        ours = x["pyqstore"]["median"]
        assert ours > 0 and x["best_peer"] is not None and x["peer_median"] > 0
        assert x["peer_median"] == max(p["median"] for p in x["peers"].values())
        assert math.isclose(x["ratio"], ours / x["peer_median"], rel_tol=1e-12)
        assert x["met"] == (x["ratio"] >= x["goal"]
                            and (x["floor"] is None or ours >= x["floor"]))
        assert x["pyqstore_durability"] and x["peer_durability"]
        printed = [ln for ln in table if ln.startswith(x["row"] + " ")]
        assert len(printed) == 1, (x["row"], res.output)
        cells = printed[0].split()
        assert cells[-1] == "met" and (cells[-2] == "not") == (not x["met"])
        assert f"{x['ratio']:.2f}x" in cells
        assert x["best_peer"].split()[0] in cells
    assert data["all_met"] == all(x["met"] for x in data["rows"])
    assert ("every goal met: yes" if data["all_met"] else "every goal met: NO") in res.output


def test_verdict_is_the_median_over_the_best_peers_median(tmp_path):
    figures = {"ours": iter([2.0, 9.0, 3.0]), "slow": iter([1.0, 1.0, 1.0]),
               "fast": iter([4.0, 5.0, 6.0])}

    def cell(name: str) -> goals.Cell:
        return lambda wd: next(figures[name])

    row = goals.Row("test", "made up", "items/s", 0.5, cell("ours"),
                    {"slow": cell("slow"), "fast": cell("fast")}, "sync off", "sync off")
    with Workdir(str(tmp_path)) as wd:
        x = goals.measure(row, 3, wd)
    assert x["pyqstore"] == {"median": 3.0, "min": 2.0, "max": 9.0, "runs": [2.0, 9.0, 3.0]}
    assert x["best_peer"] == "fast" and x["peer_median"] == 5.0
    assert x["ratio"] == 0.6 and x["met"] is True
    row.goal = 0.61
    figures.update(ours=iter([3.0]), slow=iter([1.0]), fast=iter([5.0]))
    with Workdir(str(tmp_path)) as wd:
        assert goals.measure(row, 1, wd)["met"] is False
    # a floor pyqstore's median must reach as well as the ratio
    row.goal, row.floor = 0.5, 3.5
    figures.update(ours=iter([3.0]), slow=iter([1.0]), fast=iter([5.0]))
    with Workdir(str(tmp_path)) as wd:
        x = goals.measure(row, 1, wd)
    assert x["ratio"] == 0.6 and x["met"] is False


def test_beside_peers_are_reported_but_not_in_the_ratio(tmp_path):
    def fixed(x: float) -> goals.Cell:
        return lambda wd: x

    row = goals.Row("test", "made up", "writes/s", 1.2, fixed(10.0), {"btree": fixed(5.0)},
                    "sync off", "sync off", beside={"lsm": fixed(40.0)})
    with Workdir(str(tmp_path)) as wd:
        x = goals.measure(row, 2, wd)
    assert x["best_peer"] == "btree" and x["ratio"] == 2.0 and x["met"] is True
    assert set(x["peers"]) == {"btree"}
    assert x["beside"] == {"lsm": {"median": 40.0, "min": 40.0, "max": 40.0,
                                   "runs": [40.0, 40.0]}}


def test_kv_put_has_the_lsm_stores_beside_and_kv_get_counts_them():
    # The LSM stores expected are those usable here, found the way rows()
    # finds them, so a row that drops one (or counts it on the wrong side)
    # fails even on a machine where only one of them installs.
    threads = iter(goals.SMALL.kv_threads * 2)     # kv-put's rows, then kv-get's
    table = goals.rows(["kv-put", "kv-get", "drain", "churn"], goals.SMALL, {})
    queue_lsm = set(goals._usable(goals.LSM_PEERS, "queue", {}))
    for r in table:
        if r.line in ("kv-put", "kv-get"):
            lsm_here = set(goals._usable(goals.LSM_PEERS, "kv", {}, next(threads)))
        else:
            lsm_here = queue_lsm
        if r.line == "kv-put":
            assert set(r.beside) == lsm_here and not lsm_here & set(r.peers)
        else:
            assert not r.beside and lsm_here <= set(r.peers)
    assert next(threads, None) is None


def test_unknown_line_is_refused():
    res = CliRunner().invoke(main, ["goals", "--small", "--lines", "sweep,nosuch"])
    assert res.exit_code != 0 and "--lines" in res.output


def test_kv_put_and_get_rows_share_one_perf_run_per_cell(tmp_path, monkeypatch):
    calls: list[tuple[str, int]] = []
    figures = iter(range(1, 1000))

    def fake_perf_run(backend, session, wd, sync, threads, keys, value):
        # the write and read seconds of one run, told apart by their size
        calls.append((backend.name, threads))
        n = next(figures)
        return (1.0 * n, 1000.0 * n, threads)

    monkeypatch.setattr(goals, "perf_run", fake_perf_run)
    report: dict = {}
    table = goals.rows(["kv-put", "kv-get"], goals.SMALL, report)
    puts = [r for r in table if r.line == "kv-put"]
    gets = [r for r in table if r.line == "kv-get"]
    assert len(puts) == len(gets) == len(goals.SMALL.kv_threads)
    with Workdir(str(tmp_path)) as wd:
        put_results = [goals.measure(r, 2, wd) for r in puts]
        after_puts = len(calls)
        get_results = [goals.measure(r, 2, wd) for r in gets]
    assert len(calls) == after_puts     # the get row ran no perf_run of its own
    assert after_puts == 2 * sum(1 + len(r.peers) + len(r.beside) for r in puts)
    n = goals.SMALL.kv_requests
    runs_used = []
    for p, g in zip(put_results, get_results):
        # each get figure is the read phase of the run that gave a put
        # figure, on every side
        # (the LSM stores are beside the put row, but peers of the get row)
        for side in ["pyqstore", *p["peers"], *p["beside"]]:
            def of(r):
                return r["pyqstore"] if side == "pyqstore" else {**r["beside"], **r["peers"]}[side]
            write_runs = of(p)["runs"]
            assert of(g)["runs"] == pytest.approx([w / 1000 for w in write_runs])
            runs_used += [round(n / w) for w in write_runs]
    # every perf_run gave one put figure and its get figure, and no run's
    # figures were left untaken or taken twice
    assert sorted(runs_used) == list(range(1, after_puts + 1))
    # without the kv-put row, a get cell runs perf_run itself
    calls.clear()
    only = goals.rows(["kv-get"], goals.SMALL, {})
    with Workdir(str(tmp_path)) as wd:
        goals.measure(only[0], 1, wd)
    assert len(calls) == 1 + len(only[0].peers)


@pytest.mark.parametrize("name", ["rocksdb", "leveldb"])
@pytest.mark.parametrize("line", ["put_many", "put", "drain", "churn"])
def test_lsm_queue_lines_move_every_item_once(tmp_path, name, line):
    """Each LSM queue line on real RocksDB / LevelDB: the functions assert
    that every item went in (put_many, put) or came out exactly once and
    left the range empty (drain, churn); a drain of more than one batch
    seeks past the tombstones of the batches before it."""
    from qstore_bench import queue_lines
    pytest.importorskip({"rocksdb": "rocksdict", "leveldb": "plyvel"}[name])
    pay = queue_lines.payloads(2500)
    assert queue_lines.RUNNERS[line][name](str(tmp_path), pay) > 0


def test_lsm_drain_takes_the_items_in_order(tmp_path):
    from qstore_bench import queue_lines
    from qstore_bench import backends  # noqa: F401  (loads peers_lsm)
    from qstore_bench.peers_lsm import ENGINES, _after_prefix
    pytest.importorskip("plyvel")
    assert _after_prefix(b"q\x00\x00\x00\x04port") == b"q\x00\x00\x00\x04poru"
    assert _after_prefix(b"a\xff\xff") == b"b" and _after_prefix(b"\xff") is None
    e = ENGINES["leveldb"](str(tmp_path / "db"), False)
    queue = queue_lines._LSM_QUEUE
    for i in range(1, 6):
        e.put(queue + i.to_bytes(8, "big"), b"%d" % i)
    e.put(b"r", b"after the queue's range")
    e.delete(queue + (1).to_bytes(8, "big"))
    start = queue + (3).to_bytes(8, "big")
    assert [v for _, v in e.scan(queue, start)] == [b"3", b"4", b"5"]
    assert [v for _, v in e.scan(queue)] == [b"2", b"3", b"4", b"5"]
    e.close()


def test_get_behind_holds_its_reservations_through_the_timed_gets(tmp_path):
    from qstore_bench import queue_lines
    pay = queue_lines.payloads(300)
    seconds = queue_lines.pq_get_behind(str(tmp_path), pay, 40, held_size=64)
    assert seconds > 0
    # the held items are still in the file, reserved by nobody now (their
    # handle closed): the timed gets took only the payloads
    import pyqstore
    with pyqstore.open(str(tmp_path / "q.qs"), "r") as c:
        left = c.queue("port").peek_many(100)
    assert left == [b"r" * 64] * 40


def test_the_10m_lines_run_only_when_named():
    assert "sweep-10m" in goals.LINES and "put_many-10m" in goals.LINES
    assert not any(x.endswith("-10m") for x in goals.DEFAULT_LINES)
    assert set(goals.DEFAULT_LINES) | {"sweep-10m", "put_many-10m"} == set(goals.LINES)


def test_a_ceiling_row_and_a_peer_that_cannot_do_the_work(tmp_path):
    def fixed(x: float) -> goals.Cell:
        return lambda wd: x

    def cannot(wd):
        raise goals.Unavailable("MDB_TXN_FULL: too many dirty pages")

    row = goals.Row("test", "peak RSS", "MiB", None, fixed(500.0), {}, "sync on", "-",
                    ceiling=1024)
    with Workdir(str(tmp_path)) as wd:
        assert goals.measure(row, 2, wd)["met"] is True
        row.ceiling = 400
        x = goals.measure(row, 2, wd)
        assert x["met"] is False and x["ratio"] is None and x["best_peer"] is None
        # a peer that raises Unavailable is left out, with its reason
        row = goals.Row("test", "made up", "items/s", 1.3, fixed(10.0),
                        {"lmdb": cannot, "tc": fixed(5.0)}, "sync on", "sync on")
        x = goals.measure(row, 2, wd)
        assert x["unavailable"] == {"lmdb": "MDB_TXN_FULL: too many dirty pages"}
        assert x["best_peer"] == "tc" and x["ratio"] == 2.0 and x["met"] is True
        # pyqstore itself may not fail that way
        row = goals.Row("test", "made up", "items/s", 1.3, cannot, {}, "sync on", "sync on")
        with pytest.raises(RuntimeError, match="pyqstore failed: MDB_TXN_FULL"):
            goals.measure(row, 1, wd)


def test_scale_measures_what_the_run_wrote_and_held(tmp_path):
    """scale.measured around a run that allocates 64 MiB and writes 8 MiB
    (fsynced) into a directory: the figures show both, within reason."""
    import os
    from qstore_bench import scale

    def run(at_end):
        d = tmp_path / "store"
        d.mkdir()
        held = bytearray(64 << 20)
        held[::4096] = b"x" * len(held[::4096])     # touch every page
        with open(d / "f", "wb") as f:
            f.write(os.urandom(8 << 20))
            f.flush()
            os.fsync(f.fileno())
        at_end(str(d))
        del held
        return 0.5

    x = scale.measured(run)
    assert x["seconds"] == 0.5
    assert 60 << 20 <= x["peak_rss_bytes"] <= 200 << 20
    assert 8 << 20 <= x["written_bytes"] <= 64 << 20
    assert 8 << 20 <= x["file_bytes"] <= 9 << 20


def test_small_10m_lines_share_their_runs_and_judge_the_ceilings(tmp_path):
    out = tmp_path / "goals.json"
    res = CliRunner().invoke(main, ["goals", "--small", "--reps", "2", "--lines",
                                    "sweep-10m,put_many-10m", "--json", str(out),
                                    "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    n = goals.SMALL.scale_n
    assert [x["line"] for x in rows] == ["sweep-10m"] * 4 + ["put_many-10m"] * 2
    throughput, flat, rss, written, pm, pm_flat = rows
    assert throughput["best_peer"] in ("lmdb", "tokyocabinet")
    # one pair of pyqstore runs at n served all four sweep rows
    assert flat["pyqstore"]["runs"] == throughput["pyqstore"]["runs"]
    assert flat["best_peer"] == f"pyqstore at n={goals.SMALL.scale_sweep_ref:,}"
    assert pm_flat["pyqstore"]["runs"] == pm["pyqstore"]["runs"]
    for x in (rss, written):
        assert x["peers"] == {} and x["goal"] is None and x["ceiling"]
        assert x["met"] == (x["pyqstore"]["median"] <= x["ceiling"])
    assert 1 < rss["pyqstore"]["median"] < 1024                 # MiB, at n=10^5
    assert 0.2 < written["pyqstore"]["median"] < 4
    assert f"n={n:,}" in throughput["row"]
