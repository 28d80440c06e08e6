"""qstore-bench at small sizes, through click's CliRunner, asserting on the
JSON it writes."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from pyqstore.qbench import backends as bk
from pyqstore.qbench.cli import main

PEERS = "pyqstore,native,sqlite3,lmdb"


def run(args: list[str], tmp_path, name: str = "out.json") -> tuple[int, dict, str]:
    out = os.path.join(str(tmp_path), name)
    res = CliRunner().invoke(main, args + ["--json", out, "--dir", str(tmp_path)])
    data = json.load(open(out)) if os.path.exists(out) else {}
    return res.exit_code, data, res.output


def test_sweep_casket_layer(tmp_path):
    code, data, out = run(["sweep", "--max", "2", "--reps", "2", "--no-sync", "-b", PEERS,
                           "--csv", str(tmp_path / "s.csv")], tmp_path)
    assert code == 0, out
    assert data["experiment"] == "sweep" and data["layer"] == "casket"
    got = {(r["backend"], r["n"]) for r in data["results"]}
    assert got == {(b, n) for b in PEERS.split(",") for n in (1, 10, 100)}
    for r in data["results"]:
        s = r["seconds"]
        assert 0 < s["min"] <= s["median"] <= s["max"]
        assert r["runs"] == 2 and r["warmup_seconds"] > 0
        assert r["us_per_item"] == pytest.approx(s["median"] / r["n"] * 1e6)
    assert data["backends"]["pyqstore"]["available"] is True
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert lines[0].startswith("backend,n,") and len(lines) == 1 + len(data["results"])
    # the scratch directory is cleaned up
    assert not [p for p in os.listdir(tmp_path) if p.startswith("qstore-bench-")]


def test_sweep_queue_layer_lists_unfit_backends(tmp_path):
    code, data, out = run(["sweep", "--max", "1", "--reps", "1", "--no-sync", "--layer",
                           "queue", "-b", "pyqstore,native,sqlite3"], tmp_path)
    assert code == 0, out
    assert {r["backend"] for r in data["results"]} == {"pyqstore", "sqlite3"}
    # native has no queue driver: listed with the reason, not dropped
    assert data["backends"]["native"]["available"] is False
    assert "queue" in data["backends"]["native"]["reason"]
    assert "unavailable" in out


def test_sweep_plot(tmp_path):
    png = tmp_path / "s.png"
    code, _, out = run(["sweep", "--max", "1", "--reps", "1", "--no-sync", "-b", "pyqstore",
                        "--plot", str(png)], tmp_path)
    assert code == 0, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_correctness_passes_on_real_backends(tmp_path):
    code, data, out = run(["correctness", "--count", "40", "--max-value", "70000", "-b",
                           "pyqstore,sqlite3,lmdb"], tmp_path)
    assert code == 0, out
    assert data["ok"] is True
    by = {r["backend"]: r for r in data["results"]}
    assert set(by) == {"pyqstore", "sqlite3", "lmdb"}
    assert all(r["mismatches"] == 0 for r in by.values())
    assert by["pyqstore"]["checks"]["duplicate order"] == "checked"
    assert by["pyqstore"]["checks"]["queue FIFO"] == "checked"
    assert "sorted" in by["lmdb"]["checks"]["duplicate order"]


class _Broken(bk.Pyqstore):
    """pyqstore with a binding that drops the last byte of what it reads."""

    name = "broken"

    def open(self, directory, sync):
        store = super().open(directory, sync)
        real_get = store.get
        store.get = lambda k: (lambda v: v[:-1] if v else v)(real_get(k))
        return store


def test_correctness_fails_on_a_broken_backend(tmp_path, monkeypatch):
    monkeypatch.setattr(bk, "BACKENDS", bk.BACKENDS + [_Broken()])
    code, data, out = run(["correctness", "--count", "30", "--max-value", "5000", "-b",
                           "broken"], tmp_path)
    assert code == 1
    assert data["ok"] is False
    r = data["results"][0]
    assert r["backend"] == "broken" and r["mismatches"] > 0 and r["details"]
    assert "MISMATCHES" in out


def test_perf_reports_overhead_and_phases(tmp_path):
    code, data, out = run(["perf", "-x", "2", "-n", "400", "-l", "16", "--reps", "1", "-b",
                           "pyqstore,sqlite3"], tmp_path)
    assert code == 0, out
    names = [r["backend"] for r in data["results"]]
    assert names == ["null", "pyqstore", "sqlite3"]
    for r in data["results"]:
        assert r["writes_per_s"] > 0 and r["reads_per_s"] > 0
        assert r["write_ms"]["median"] == pytest.approx(400 / r["writes_per_s"] * 1e3)
    assert data["threads"] == 2 and data["requests"] == 400


def test_unknown_backend_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["sweep", "-b", "nosuchdb", "--dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "nosuchdb" in res.output


@pytest.mark.parametrize("cmd", ["sweep", "correctness", "perf"])
def test_help_has_an_example(cmd):
    res = CliRunner().invoke(main, [cmd, "--help"])
    assert res.exit_code == 0 and "Example:" in res.output
