"""qstore-bench flow ... at tiny sizes: each command runs its flows on the
local runner and checks their answers; these tests check the checks and
what the JSON reports (never the speed)."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from click.testing import CliRunner

from qstore_bench import flowbench as fb
from qstore_bench import widefinder as wf
from qstore_bench.cli import main
from qstore_bench.experiments import Workdir


def run(args: list[str], tmp_path) -> tuple[int, dict, str]:
    out = os.path.join(str(tmp_path), "out.json")
    res = CliRunner().invoke(main, ["flow"] + args + ["--json", out, "--dir", str(tmp_path)])
    data = json.load(open(out)) if os.path.exists(out) else {}
    return res.exit_code, data, res.output


@pytest.mark.parametrize("cmd", ["chain", "widefinder", "wordcount", "tune"])
def test_help_has_an_example(cmd):
    res = CliRunner().invoke(main, ["flow", cmd, "--help"])
    assert res.exit_code == 0 and "Example:" in res.output


def test_chain_against_the_loop_on_every_layout_asked_for(tmp_path):
    code, data, out = run(["chain", "--items", "3000", "--batch", "1000", "--reps", "1",
                           "--layout", "shared,per-node"], tmp_path)
    assert code == 0, out
    assert data["items"] == 3000 and data["sync"] is True and data["batch"] == 1000
    assert data["loop"]["items_per_s"] == pytest.approx(3000 / data["loop"]["seconds"])
    rows = {r["layout"]: r for r in data["chain"]}
    assert "shared" in rows
    for r in rows.values():
        # the ratio is the flow's rate over the loop's, measured in this run
        assert r["ratio"] == pytest.approx(r["items_per_s"] / data["loop"]["items_per_s"])
        assert 0 < r["flowing_s"] <= r["wall_s"]
    assert set(rows) == {"shared", "per-node"} and data["faster"]["by"] >= 1.0
    assert "required 0.5" in out and "goal" in out


def test_a_layout_the_runner_does_not_have_is_listed_with_the_runners():
    res = fb.chain(100, 100, False, ["shared", "sideways"])
    assert [r["layout"] for r in res["chain"]] == ["shared"]
    st = res["layouts"]["sideways"]
    assert st["available"] is False and "shared, per-node" in st["reason"]


class DropFirst:
    """A chain stage that loses item 0: the count and sum check must see it."""

    def __call__(self, batch):
        return [x for x in batch if int(x) != 0]


class Twice:
    """A chain stage that delivers item 0 twice."""

    def __call__(self, batch):
        return batch + [x for x in batch if int(x) == 0]


@pytest.mark.parametrize("work", [DropFirst(), Twice()])
def test_a_chain_that_loses_or_repeats_an_item_is_caught(tmp_path, work):
    with Workdir(str(tmp_path)) as wd:
        with pytest.raises(AssertionError, match="delivered"):
            fb.run_chain(wd, 500, 100, False, None, 120, 1, work)
        # the same run with the identity passes
        wall, flowing = fb.run_chain(wd, 500, 100, False, None, 120)
        assert 0 < flowing <= wall


def test_the_loop_moves_every_item_once(tmp_path):
    dt, count, total = fb.chain_loop(str(tmp_path / "l.qdb"), 2500, 1000, False)
    assert (count, total) == (2500, 2500 * 2499 // 2) and dt > 0


def test_widefinder_every_strategy_counts_what_the_loop_counts(tmp_path):
    code, data, out = run(["widefinder", "--size", "300K", "--parsers", "1,2", "--blocks",
                           "32K"], tmp_path)
    assert code == 0, out
    assert data["all_correct"] is True
    assert {c["strategy"] for c in data["cells"]} == set(fb.STRATEGIES)
    assert {(c["parsers"], c["block"]) for c in data["cells"]} == {(1, 32768), (2, 32768)}
    lg = data["log"]
    for c in data["cells"]:
        assert c["correct"] is True
        assert c["lines_per_s"] == pytest.approx(lg["lines"] / c["seconds"])
        by = {r["node"]: r for r in c["breakdown"]}
        assert set(by) == {"log", "parse", "count", "result"}
        assert by["parse"]["instances"] == c["parsers"]
        # every block the source produced was parsed, once
        assert by["log"]["items_out"] == by["parse"]["items_in"] == by["log"]["firings"] > 1
        assert by["result"]["items_in"] == 1
        assert 0 <= by["parse"]["work_share"] <= 1
        if c["strategy"] == "refs":       # one item per hit
            assert by["parse"]["items_out"] == data["matches"]
        if c["strategy"] == "mapreduce":  # one Counter per parser, at its end
            assert by["parse"]["items_out"] == c["parsers"]
    log = tmp_path / "same.log"
    wf.generate(str(log), 300 << 10, 4)
    assert [list(x) for x in data["top10"]] == [list(x) for x in
                                                wf.top(wf.count_baseline(str(log)))]
    assert {g["strategy"] for g in data["extremes"]} == set(fb.STRATEGIES)
    assert "where the time goes" in out and "the 10 most fetched articles" in out


def test_widefinder_a_wrong_answer_exits_1(tmp_path, monkeypatch):
    # the flow's processes count with the real code; the parent's loop is
    # made to miscount, so every run disagrees with it
    real = wf.count_baseline

    def off_by_one(path, block_size=16 << 20):
        c = real(path, block_size)
        c["2003/01/01/Article0"] += 1
        return c

    monkeypatch.setattr(wf, "count_baseline", off_by_one)
    code, data, out = run(["widefinder", "--size", "64K", "--parsers", "1", "--blocks", "16K",
                           "--strategies", "agents"], tmp_path)
    assert code == 1, out
    assert data["all_correct"] is False and "NO" in out


def test_widefinder_refuses_bad_arguments(tmp_path):
    res = CliRunner().invoke(main, ["flow", "widefinder", "--strategies", "locked"])
    assert res.exit_code == 2 and "mapreduce" in res.output
    res = CliRunner().invoke(main, ["flow", "widefinder", "--parsers", "0"])
    assert res.exit_code == 2 and "positive" in res.output


def test_wordcount_equals_collections_counter(tmp_path):
    code, data, out = run(["wordcount", "--size", "200K", "--block", "16K", "--mappers", "2",
                           "--reducers", "2"], tmp_path)
    assert code == 0, out
    assert data["correct"] is True
    path = tmp_path / "t.txt"
    fb.generate_text(str(path), 200 << 10, 1)
    want = Counter(path.read_bytes().decode().split())
    assert data["words"] == sum(want.values()) and data["distinct"] == len(want)
    assert [list(x) for x in data["top10"]] == [list(x) for x in
                                                sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
    by = {r["node"]: r for r in data["runs"][0]["breakdown"]}
    assert by["reduce"]["items_out"] == len(want) == by["result"]["items_in"]


def test_generate_text_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert fb.generate_text(str(a), 5000, 3) == fb.generate_text(str(b), 5000, 3) > 0
    assert a.read_bytes() == b.read_bytes() and 5000 - 200 < len(a.read_bytes()) <= 5000


def test_tune_fits_parallelism_and_batch(tmp_path):
    png = tmp_path / "t.png"
    code, data, out = run(["tune", "--batches", "5,10,20", "--parallelism", "1,2,3", "--items",
                           "120", "--work-us", "0", "--plot", str(png)], tmp_path)
    assert code == 0, out
    assert {(c["parallelism"], c["batch"]) for c in data["cells"]} == \
        {(p, b) for p in (1, 2, 3) for b in (5, 10, 20)}
    m = data["models"]
    assert m["knob"] == "parallelism"
    assert m["quadratic"]["formula"] == \
        "items_per_s ~ parallelism + I(parallelism^2) + batch + I(batch^2)"
    assert set(m["quadratic"]["coefficients"]) == {"(Intercept)", "parallelism",
                                                   "I(parallelism^2)", "batch", "I(batch^2)"}
    assert 1 <= m["joint_optimum"]["parallelism"] <= 3
    assert "best parallelism" in out and "Residual standard error" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_tune_refuses_too_few_values():
    res = CliRunner().invoke(main, ["flow", "tune", "--parallelism", "1,2"])
    assert res.exit_code == 2 and "at least 3" in res.output
