"""qstore-bench at small sizes, through click's CliRunner, asserting on the
JSON it writes."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from qstore_bench import backends as bk
from qstore_bench.cli import main

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
        assert r["warmup"]["write_ms"] > 0 and r["warmup"]["read_ms"] > 0
    assert data["threads"] == 2 and data["requests"] == 400


def test_unknown_backend_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["sweep", "-b", "nosuchdb", "--dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "nosuchdb" in res.output


@pytest.mark.parametrize("cmd", ["sweep", "correctness", "perf", "tune", "drain", "codecs", "report",
                                 "streams"])
def test_help_has_an_example(cmd):
    res = CliRunner().invoke(main, [cmd, "--help"])
    assert res.exit_code == 0 and "Example:" in res.output


# ---------------------------------------------------------------- regression

# R's `cars` data set and its published summary(lm(dist ~ speed)).
CARS_SPEED = [4, 4, 7, 7, 8, 9, 10, 10, 10, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14,
              14, 15, 15, 15, 16, 16, 17, 17, 17, 18, 18, 18, 18, 19, 19, 19, 20, 20, 20, 20,
              20, 22, 23, 24, 24, 24, 24, 25]
CARS_DIST = [2, 10, 4, 22, 16, 10, 18, 26, 34, 17, 28, 14, 20, 24, 28, 26, 34, 34, 46, 26, 36,
             60, 80, 20, 26, 54, 32, 40, 32, 40, 50, 42, 56, 76, 84, 36, 46, 68, 32, 48, 52, 56,
             64, 66, 54, 70, 92, 93, 120, 85]


def test_regression_matches_r_on_cars():
    from qstore_bench.regression import ols

    f = ols("dist ~ speed", [{"speed": s, "dist": d} for s, d in zip(CARS_SPEED, CARS_DIST)])
    assert f.names == ["(Intercept)", "speed"]
    assert f.coef == pytest.approx([-17.5791, 3.9324], abs=1e-4)
    assert f.se == pytest.approx([6.7584, 0.4155], abs=1e-4)
    assert f.t == pytest.approx([-2.601, 9.464], abs=1e-3)
    assert f.p[0] == pytest.approx(0.0123, abs=1e-4)
    assert f.p[1] == pytest.approx(1.49e-12, rel=1e-2)
    assert f.rse == pytest.approx(15.38, abs=5e-3) and f.df_resid == 48
    assert f.r2 == pytest.approx(0.6511, abs=1e-4)
    assert f.adj_r2 == pytest.approx(0.6438, abs=1e-4)
    assert f.f == pytest.approx(89.57, abs=5e-3) and f.f_df == (1, 48)
    assert f.f_p == pytest.approx(1.49e-12, rel=1e-2)
    text = f.summary()
    # R's own lines for this fit (summary(lm(dist ~ speed, cars)))
    assert "lm(formula = dist ~ speed)" in text
    assert "Residual standard error: 15.38 on 48 degrees of freedom" in text
    assert "Multiple R-squared:  0.6511,  Adjusted R-squared:  0.6438" in text
    assert "F-statistic: 89.57 on 1 and 48 DF,  p-value: 1.49e-12" in text


def _summary_parts(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    res = lines[lines.index("Residuals:") + 1:lines.index("Coefficients:") - 1]
    coef = lines[lines.index("Coefficients:") + 1:lines.index("---")]
    return {"residuals": res, "coefficients": coef}


@pytest.mark.parametrize("n_obs", [6, 7, 10, 11, 30])
def test_summary_follows_rs_layout(n_obs):
    """R's summary(lm) rules: every residual, numbered, when the residual
    degrees of freedom are 5 or fewer, else Min 1Q Median 3Q Max; each
    coefficient row ends with its significance stars; one number format per
    column; R², adjusted R², F and its p value."""
    from qstore_bench.regression import ols, stars

    rows = [{"x": float(i), "z": float((i * 7) % 5),
             "y": 3.0 + 2.0 * i + 0.5 * ((i * 7) % 5) + (0.3 if i % 2 else -0.3) * (i % 3)}
            for i in range(n_obs)]
    f = ols("y ~ x + I(x**2) + z + I(z**2)", rows)
    assert f.names == ["(Intercept)", "x", "I(x^2)", "z", "I(z^2)"]
    assert f.df_resid == n_obs - 5
    parts = _summary_parts(f.summary())
    res = parts["residuals"]
    if f.df_resid <= 5:
        labels = " ".join(res[0::2]).split()
        values = [float(v) for v in " ".join(res[1::2]).split()]
        assert labels == [str(i + 1) for i in range(n_obs)]
        assert values == pytest.approx(f.residuals, abs=10 ** -3 * max(map(abs, f.residuals)))
    else:
        assert res[0].split() == ["Min", "1Q", "Median", "3Q", "Max"] and len(res) == 2
        q = [float(v) for v in res[1].split()]
        assert q == sorted(q) and q[0] == pytest.approx(min(f.residuals), rel=1e-2)
    head, *body = parts["coefficients"]
    assert head.split() == ["Estimate", "Std.", "Error", "t", "value", "Pr(>|t|)"]
    assert [r.split()[0] for r in body] == f.names
    for row, p in zip(body, f.p):
        assert row.endswith(" " + stars(p)), row
    # one format per column: every estimate has as many decimals
    decimals = {len(r.split()[1].partition(".")[2]) for r in body}
    assert len(decimals) == 1
    tail = f.summary().splitlines()[-3:]
    assert tail[0].startswith("Residual standard error: ") and tail[0].endswith(
        f" on {f.df_resid} degrees of freedom")
    assert f"Multiple R-squared:  {f.r2:.4g},  Adjusted R-squared:  {f.adj_r2:.4g}" == tail[1]
    assert tail[2].startswith(f"F-statistic: {f.f:.4g} on 4 and {f.df_resid} DF,  p-value: ")


def test_significance_stars_are_rs():
    from qstore_bench.regression import stars

    assert [stars(p) for p in (0.0001, 0.005, 0.03, 0.07, 0.5)] == ["***", "**", "*", ".", " "]


def test_too_few_observations_are_refused_with_the_reason():
    from qstore_bench.regression import ols

    with pytest.raises(ValueError, match="4 observations cannot fit the 5 coefficients"):
        ols("y ~ x + I(x**2) + z + I(z**2)",
            [{"x": i, "z": i % 2, "y": i} for i in range(4)])
    with pytest.raises(ValueError, match="collinear"):
        ols("y ~ x + I(x**2) + z + I(z**2)",
            [{"x": i, "z": 1.0, "y": i * i} for i in range(9)])


def test_tune_finds_the_known_optimum_of_a_synthetic_surface():
    from qstore_bench.experiments import fit_models

    # a concave quadratic surface peaking at 5 writers, batch 300
    def surface(w, b):
        return 100_000 - 2_000 * (w - 5) ** 2 - 0.5 * (b - 300) ** 2

    cells = [{"writers": w, "batch": b, "items_per_s": surface(w, b)}
             for w in (1, 2, 4, 8, 16) for b in (10, 100, 300, 1000)]
    m = fit_models(cells)
    assert m["quadratic"]["r2"] == pytest.approx(1.0, abs=1e-9)
    assert m["joint_optimum"]["writers"] == pytest.approx(5, abs=1e-3)
    assert m["joint_optimum"]["batch"] == pytest.approx(300, abs=0.05)
    assert m["joint_optimum"]["predicted"] == pytest.approx(100_000, abs=1e-3)
    assert m["one_at_a_time"]["writers"]["best_writers"] == pytest.approx(5, abs=1e-3)
    assert m["best_measured"]["writers"] == 4 and m["best_measured"]["batch"] == 300
    # the linear model cannot see a peak: a worse fit
    assert m["linear"]["r2"] < m["quadratic"]["r2"]


def test_an_optimum_on_the_grids_edge_is_called_an_extrapolation():
    from qstore_bench.experiments import fit_models

    # the peak (7 writers) lies beyond the grid's writers 1..4
    cells = [{"writers": w, "batch": b,
              "items_per_s": 50_000 - 900 * (w - 7) ** 2 - 0.2 * (b - 60) ** 2}
             for w in (1, 2, 3, 4) for b in (10, 40, 80, 120)]
    m = fit_models(cells)
    j, free = m["joint_optimum"], m["unconstrained_optimum"]
    assert j["extrapolation"] and j["on_edge"] == ["writers"]
    assert j["writers"] == pytest.approx(4, abs=1e-3) and j["batch"] == pytest.approx(60, abs=0.1)
    assert free["writers"] == pytest.approx(7, abs=1e-2) and free["batch"] == pytest.approx(60, abs=0.5)
    assert free["predicted"] == pytest.approx(50_000, rel=1e-6)
    # a peak inside the grid is no extrapolation
    inside = fit_models([{**c, "items_per_s": 50_000 - 900 * (c["writers"] - 2.5) ** 2
                          - 0.2 * (c["batch"] - 60) ** 2} for c in cells])
    assert not inside["joint_optimum"]["extrapolation"]
    # a surface that grows without end has no unconstrained optimum
    bowl = fit_models([{**c, "items_per_s": 1000 + 50 * c["writers"] ** 2 + c["batch"] ** 2}
                       for c in cells])
    assert bowl["joint_optimum"]["extrapolation"] and bowl["unconstrained_optimum"] is None


def test_fix_holds_the_other_knob_where_the_user_says():
    from qstore_bench.experiments import fit_models

    def surface(w, b):
        return 100_000 - 2_000 * (w - 5) ** 2 - 0.5 * (b - 300) ** 2

    cells = [{"writers": w, "batch": b, "items_per_s": surface(w, b)}
             for w in (1, 2, 4, 8, 16) for b in (10, 100, 300, 1000)]
    m = fit_models(cells, {"batch": 20, "writers": 3})
    oat = m["one_at_a_time"]
    assert oat["writers"]["batch_fixed"] == 20 and oat["batch"]["writers_fixed"] == 3
    assert oat["writers"]["predicted"] == pytest.approx(surface(5, 20), abs=1e-3)
    assert oat["batch"]["predicted"] == pytest.approx(surface(3, 300), abs=1e-3)


SEED_TABLE = "writers,batch,items_per_s\n1,10,1200\n2,10,2100\n4,50,2900\n1,20,1900\n" \
             "2,20,3300\n4,20,4100\n8,20,3600\n"


def test_tune_fits_the_users_own_observations(tmp_path):
    obs = tmp_path / "runs.csv"
    obs.write_text(SEED_TABLE)
    code, data, out = run(["tune", "--observations", str(obs), "--fix", "batch=20"], tmp_path)
    assert code == 0, out
    assert data["observations"] == str(obs) and len(data["cells"]) == 7
    q = data["models"]["quadratic"]
    assert q["df"] == 2 and len(q["residuals"]) == 7
    assert data["models"]["one_at_a_time"]["writers"]["batch_fixed"] == 20
    # residual df 2 <= 5: R lists every residual, numbered 1..7
    lines = out.splitlines()
    i = lines.index("lm(formula = items_per_s ~ writers + I(writers^2) + batch + I(batch^2))")
    assert lines[i + 3].split() == [str(k) for k in range(1, 8)]
    assert "batch fixed at 20:" in out and "e-10" not in out


@pytest.mark.parametrize("text,message", [
    ("writers,batch\n1,2\n", "missing: items_per_s"),
    ("writers,batch,items_per_s\n1,2,fast\n", "line 2: items_per_s is 'fast', not a number"),
    ("writers,batch,items_per_s\n", "no observations"),
    ("writers,batch,items_per_s\n1,1,1\n2,2,2\n3,3,3\n", "3 observations cannot fit"),
])
def test_bad_observations_are_refused_naming_the_problem(tmp_path, text, message):
    obs = tmp_path / "runs.csv"
    obs.write_text(text)
    res = CliRunner().invoke(main, ["tune", "--observations", str(obs)])
    assert res.exit_code == 1 and message in res.output, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("fix", ["batch", "nope=3", "batch=many"])
def test_a_bad_fix_is_a_usage_error(fix, tmp_path):
    obs = tmp_path / "runs.csv"
    obs.write_text(SEED_TABLE)
    res = CliRunner().invoke(main, ["tune", "--observations", str(obs), "--fix", fix])
    assert res.exit_code == 2 and "--fix" in res.output, res.output


def test_tune_command(tmp_path):
    code, data, out = run(["tune", "--batches", "1,4,16", "--writers", "1,2,3", "--duration",
                           "0.05", "--no-sync", "--plot", str(tmp_path / "t.png")], tmp_path)
    assert code == 0, out
    assert len(data["cells"]) == 9 and all(c["items_per_s"] > 0 for c in data["cells"])
    assert {(c["writers"], c["batch"]) for c in data["cells"]} == {
        (w, b) for w in (1, 2, 3) for b in (1, 4, 16)}
    q = data["models"]["quadratic"]
    assert set(q["coefficients"]) == {"(Intercept)", "writers", "I(writers^2)", "batch",
                                      "I(batch^2)"}
    assert q["df"] == 9 - 5 and "Residual standard error" in q["summary"]
    j = data["models"]["joint_optimum"]
    assert 1 <= j["writers"] <= 3 and 1 <= j["batch"] <= 16
    assert "joint optimum" in out and "Estimate" in out
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def _expected_top10(n: int) -> list[tuple[str, int]]:
    from collections import Counter

    from qstore_bench.experiments import _HIT, make_log_lines

    want = Counter(m.group(1).decode() for line in make_log_lines(n)
                   if (m := _HIT.search(line)))
    return sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def test_drain_command_counts_right_everywhere(tmp_path):
    code, data, out = run(["drain", "--lines", "3000", "--consumers", "1,3", "--blocks",
                           "7,500"], tmp_path)
    assert code == 0, out
    assert len(data["cells"]) == 3 * 2 * 2 and data["processes"] is False
    assert data["all_top10_identical"] is True
    assert all(c["top_matches"] and c["lines_per_s"] > 0 for c in data["cells"])
    assert [tuple(x) for x in data["top10"]] == _expected_top10(3000)


def test_drain_with_consumer_processes(tmp_path):
    # every strategy with two consumer processes on one casket, each opened
    # by path; locked keeps its counter in the casket, agent adds a process
    code, data, out = run(["drain", "--processes", "--lines", "3000", "--consumers", "2",
                           "--blocks", "7,500"], tmp_path)
    assert code == 0, out
    assert data["processes"] is True and "consumers as processes" in out
    assert {(c["strategy"], c["block"]) for c in data["cells"]} == {
        (s, b) for s in ("mapreduce", "locked", "agent") for b in (7, 500)}
    assert all(c["top_matches"] and c["lines_per_s"] > 0 for c in data["cells"])
    assert data["all_top10_identical"] is True and data["baseline"]["lines_per_s"] > 0
    assert [tuple(x) for x in data["top10"]] == _expected_top10(3000)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("qstore-bench-")]


def test_tune_with_writer_processes(tmp_path):
    code, data, out = run(["tune", "--processes", "--batches", "1,4,16", "--writers", "1,2,3",
                           "--duration", "0.05", "--no-sync"], tmp_path)
    assert code == 0, out
    assert data["processes"] is True and "processes" in out
    assert {(c["writers"], c["batch"]) for c in data["cells"]} == {
        (w, b) for w in (1, 2, 3) for b in (1, 4, 16)}
    assert all(c["items_per_s"] > 0 for c in data["cells"])
    assert data["models"]["quadratic"]["df"] == 9 - 5


@pytest.mark.parametrize("name", ["redis", "memcached", "tokyocabinet", "persist-queue"])
def test_tune_with_processes_refuses_what_cannot_share(tmp_path, name):
    res = CliRunner().invoke(main, ["tune", "-b", name, "--processes", "--dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "cannot have writers as processes" in res.output
    assert "Traceback" not in res.output


def test_a_failing_child_is_reported_not_waited_for(tmp_path):
    import time

    from qstore_bench import experiments as ex

    good = str(tmp_path / "good")
    os.mkdir(good)
    bk.by_name(["pyqstore"])[0].open(good, False).close()
    t0 = time.monotonic()
    with pytest.raises(ex.ProcessFailed) as e:
        # the second writer's casket does not exist: the first must not wait
        # for it at the start line, and the error named is the real one
        ex._in_processes(ex._tune_child, [("pyqstore", good, False, 1, b"x", 0.1),
                                          ("pyqstore", str(tmp_path / "none"), False, 1,
                                           b"x", 0.1)], timeout=30)
    assert "process 1 of 2" in str(e.value) and "BrokenBarrier" not in str(e.value)
    assert time.monotonic() - t0 < 20


def test_codecs_command(tmp_path):
    import importlib.util

    out_json = tmp_path / "c.json"
    res = CliRunner().invoke(main, ["codecs", "--max", "400", "--step", "200", "--reps", "2",
                                    "--json", str(out_json)])
    assert res.exit_code == 0, res.output
    data = json.loads(out_json.read_text())
    names = {r["codec"] for r in data["results"]}
    assert {"pickle", "marshal", "json", "xml"} <= names
    for opt, module in (("msgpack", "msgpack"), ("protobuf", "google.protobuf")):
        try:
            present = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:     # "google" itself is missing
            present = False
        assert (opt in names) == present
        assert data["codecs"][opt]["available"] == present
    for r in data["results"]:
        assert r["n"] in (200, 400) and r["bytes"] > 0
        assert r["relative"] == pytest.approx(r["bytes"] / (r["n"] * 14))
    # json spells every element out: bigger than the raw data
    assert all(r["relative"] > 1 for r in data["results"] if r["codec"] == "json")


def test_report_writes_a_page_with_every_experiment(tmp_path):
    outdir = tmp_path / "rep"
    res = CliRunner().invoke(main, ["report", str(outdir), "--small", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    page = (outdir / "index.html").read_text()
    for part in ("Seed 000", "Seed 001", "Seed 002", "Seed 004", "serialization"):
        assert part in page
    for png in ("sweep.png", "sweep-queue.png", "tune.png", "drain.png", "codecs.png"):
        assert (outdir / png).read_bytes()[:4] == b"\x89PNG" and png in page


def test_the_report_formats_numbers_like_the_text_tables(tmp_path):
    from qstore_bench.cli import _num

    assert [_num(v) for v in (True, False, None, 12345, 0.000123456, 2.5, 123456.7)] == [
        "yes", "no", "-", "12,345", "0.0001235", "2.5", "123,457"]
    outdir = tmp_path / "rep"
    res = CliRunner().invoke(main, ["report", str(outdir), "--small", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    page = (outdir / "index.html").read_text()
    assert ">0.00<" not in page and "True" not in page and "False" not in page
    assert "{'" not in page                       # no raw Python dict
    assert page.count("<figcaption>") == page.count("<img ") == 5
    assert "Residual standard error" in page and "lm(formula = items_per_s ~ writers + batch)" in page
