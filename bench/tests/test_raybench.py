"""qstore-bench flow ray at tiny sizes: the command re-executes itself in a
loopback-only namespace, runs both chains and the kill, checks each item
arrived once, and reports (not speed: the machine is busy)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess

import pytest

from qstore_bench.raybench import kill_cost

needs_netns = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None or os.geteuid() != 0
    or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs Ray (pip install 'pyqstore[ray]') and root for unshare -n")


@needs_netns
def test_flow_ray_runs_both_chains_and_a_kill(tmp_path):
    out = tmp_path / "ray.json"
    res = subprocess.run(["qstore-bench", "flow", "ray", "--items", "3000", "--batch", "100",
                          "--reps", "1", "--kill-items", "20000", "--no-sync",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["experiment"] == "flow-ray" and data["items"] == 3000
    assert data["baseline"]["items_per_s"] > 0 and data["flow"]["flowing_items_per_s"] > 0
    assert data["ratio"] == pytest.approx(data["flow"]["flowing_items_per_s"]
                                          / data["baseline"]["items_per_s"])
    assert len(data["round_ratios"]) == 1 and data["round_ratios"][0] == pytest.approx(
        data["ratio"])      # one round: its ratio is the best-of one
    assert "each round's ratio" in res.stdout
    k = data["kill"]
    assert k["items"] == 20000 and 0 < k["killed_at"] < k["seconds"]
    assert k["replacement_join_s"] > 0
    assert "required 0.5" in res.stdout and "a node kill" in res.stdout


@needs_netns
def test_flow_ray_kills_mid_run_however_small_the_run(tmp_path):
    # 100 items would finish between two 0.2 s samples; the source holds
    # at 60 until the worker is gone, so the kill still lands mid-run and
    # every item still arrives once (run_flow checks the tally)
    out = tmp_path / "ray.json"
    res = subprocess.run(["qstore-bench", "flow", "ray", "--items", "100", "--batch", "10",
                          "--reps", "1", "--kill-items", "100", "--no-sync",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    k = json.loads(out.read_text())["kill"]
    at_kill = [seen for t, seen in k["samples"] if t == k["killed_at"]]
    assert len(at_kill) == 1 and 30 <= at_kill[0] <= 60, k["samples"]
    assert k["samples"][-1][1] == 100


def test_kill_cost_reads_the_dip_and_the_recovery():
    # 100 items/s, nothing for 2 s after the kill at t=2, then 100 again
    samples = [(0, 0), (1, 100), (2, 200), (3, 200), (4, 200), (5, 300), (6, 400)]
    got = kill_cost(samples, 2.0)
    assert got["rate_before"] == 100 and got["lowest_after"] == 0
    assert got["recovery_s"] == 3.0
    assert kill_cost([(0, 0), (1, 100), (2, 100), (3, 100)], 1.0)["recovery_s"] is None


def test_flow_ray_without_root_or_ray_says_why(tmp_path):
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("Ray is installed: the command runs")
    res = subprocess.run(["qstore-bench", "flow", "ray", "--items", "10"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1 and "pip install 'pyqstore[ray]'" in res.stderr
