"""qstore-bench at small sizes, through click's CliRunner, asserting on the
JSON it writes."""
from __future__ import annotations

import json
import os
import traceback
from collections import Counter

import pytest
from click.testing import CliRunner

from qstore_bench import backends as bk
from qstore_bench import drain as dr
from qstore_bench import widefinder as wf
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
                                 "streams", "brokers"])
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


def _independent_counts(path) -> Counter:
    """Wide Finder's answer the slow obvious way: line by line."""
    import re

    hit = re.compile(r"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) ")
    with open(path, encoding="ascii") as f:
        return Counter(m.group(1) for line in f if (m := hit.search(line)))


def test_the_log_generator_is_deterministic(tmp_path):
    a, b, c = (str(tmp_path / n) for n in "abc")
    n = wf.generate(a, 50_000, seed=4)
    assert wf.generate(b, 50_000, seed=4) == n
    wf.generate(c, 50_000, seed=5)
    data = open(a, "rb").read()
    assert data == open(b, "rb").read() and data != open(c, "rb").read()
    assert 50_000 - 200 < len(data) <= 50_000 and data.endswith(b"\n")
    assert data.count(b"\n") == n
    # a longer log begins with the shorter one: one stream of lines
    wf.generate(c, 80_000, seed=4)
    assert open(c, "rb").read().startswith(data)
    counts = wf.count_baseline(a)
    assert counts == _independent_counts(a) and 0 < sum(counts.values()) < n
    assert not any(k.endswith(".jpg") for k in counts)     # the image is not an article


@pytest.mark.parametrize("block", [1, 97, 1000, 1 << 20])
@pytest.mark.parametrize("parts", [1, 2, 5, 300])
def test_blocks_are_whole_lines_and_cover_the_file(tmp_path, block, parts):
    path = str(tmp_path / "a.log")
    wf.generate(path, 20_000)
    data = open(path, "rb").read()
    ranges = wf.split(path, parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data) and len(ranges) == parts
    got = [list(wf.blocks(path, block, a, z)) for a, z in ranges]
    assert b"".join(b"".join(bs) for bs in got) == data
    for bs in got:
        for x in bs:
            assert x.endswith(b"\n") and (len(x) <= block or x.count(b"\n") == 1)


QUEUE_BACKENDS = [b for b in bk.BACKENDS if "queue" in b.kinds]


@pytest.mark.parametrize("backend", QUEUE_BACKENDS, ids=lambda b: b.name)
def test_drain_counts_what_the_baseline_counts_on_every_backend(tmp_path, backend):
    why = backend.unavailable()
    if why:
        pytest.skip(f"{why}; install: {backend.hint}")
    log = str(tmp_path / "access.log")
    wf.generate(log, 96 << 10, seed=7)
    want = _independent_counts(log)
    consumers = [1, 4]
    res = dr.drain([backend], consumers, [2 << 10, 32 << 10], list(dr.STRATEGIES),
                   producers=2, log=log, base=str(tmp_path))
    assert res["backends"][backend.name]["available"], res["backends"]
    assert len(res["cells"]) == 3 * len(consumers) * 2
    assert res["all_correct"] and all(c["correct"] and c["seconds"] > 0 for c in res["cells"])
    assert res["matches"] == sum(want.values()) and res["top10"] == wf.top(Counter(want))
    g = res["extremes"][0]
    assert g["best"]["seconds"] <= g["worst"]["seconds"] and g["worst_over_best"] >= 1


def test_a_cell_that_counts_wrong_is_reported(tmp_path, monkeypatch):
    # a consumer that drops one hit per block: the cell must say so and the
    # command must fail, not print a table that looks right
    real = wf.count_block

    def lossy(block: bytes) -> Counter:
        c = real(block)
        if c:
            c[next(iter(c))] -= 1
        return c

    monkeypatch.setattr(wf, "count_block", lossy)
    monkeypatch.setattr(dr.wf, "count_baseline", lambda p, b=0: Counter(
        {k: v for k, v in _independent_counts(p).items()}))
    code, data, out = run(["drain", "-b", "pyqstore", "--size", "32K", "--blocks", "4K",
                           "--consumers", "2", "--strategies", "mapreduce"], tmp_path)
    assert code == 1 and data["all_correct"] is False
    assert "WRONG COUNTS: pyqstore mapreduce 2 x 4K" in out


def test_drain_command_picks_backends_and_lists_the_rest(tmp_path):
    png = tmp_path / "drain.png"
    code, data, out = run(["drain", "-b", "pyqstore,native,sqlite3", "--scale", "0.0001",
                           "--consumers", "1,2", "--blocks", "16M,64M", "--plot", str(png)],
                          tmp_path)
    assert code == 0, out
    assert {c["backend"] for c in data["cells"]} == {"pyqstore", "sqlite3"}
    assert set(data["backends"]) == {"pyqstore", "native", "sqlite3"}
    assert "native" in out and "unavailable: has no queue layer" in out
    # --scale shrinks the log and the seed's block sizes together
    assert data["blocks"] == [int((16 << 20) * 0.0001), int((64 << 20) * 0.0001)]
    assert (1 << 30) * 0.0001 - 300 < data["log"]["bytes"] <= (1 << 30) * 0.0001
    assert "the seed's baseline" in out and "best and worst combination" in out
    assert "every cell counted what the baseline counted: yes" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    # the default is every backend, the unavailable ones with the reason
    res = CliRunner().invoke(main, ["drain", "-b", "nosuch"])
    assert res.exit_code == 2 and "unknown backend(s) nosuch" in res.output


def test_drain_plot_panels_share_one_colour_scale(tmp_path, monkeypatch):
    import matplotlib.figure

    from qstore_bench import cli

    code, data, _ = run(["drain", "-b", "pyqstore,lmdb", "--scale", "0.0001", "--consumers",
                         "1,2", "--blocks", "16M,64M"], tmp_path)
    assert code == 0
    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: saved.append(fig))
    cli._plot_drain(data, str(tmp_path / "x.png"))
    fig = saved[0]
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 2 * 3                      # a panel per backend and strategy
    assert len({im.get_clim() for im in images}) == 1
    secs = [c["seconds"] for c in data["cells"]]
    assert images[0].get_clim() == (min(secs), max(secs))
    assert len(fig.axes) == 6 + 1                    # one colour bar
    assert all(ax.get_title() for ax in fig.axes[:6])


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
    # the seed's remark, deserialize over serialize time, in the JSON and the table
    for r in data["results"]:
        assert r["decode_over_encode"] == pytest.approx(r["decode_us"] / r["encode_us"])
    head = next(line for line in res.output.splitlines() if line.startswith("codec "))
    assert head.split() == ["codec", "n", "bytes", "x", "raw", "ser", "us", "deser", "us",
                            "deser/ser"]


def test_python_protobuf_is_the_seeds_unpacked_message():
    pytest.importorskip("google.protobuf")
    from qstore_bench import codecs as cd

    enc, dec = cd.codecs()["protobuf"]
    for n in (1, 100, 300):
        b = enc(cd.target(n))
        # unpacked: a tag byte and a one-byte varint per zero (packed would be
        # one tag, a length and n bytes), a tag, a length and 10 bytes per string
        assert len(b) == 2 * n + 12 * n
        assert dec(b) == cd.target(n)
    assert enc({"ia": [0, 0], "sa": []}) == b"\x08\x00\x08\x00"


def test_codecs_plot_has_a_titled_panel_each(tmp_path, monkeypatch):
    import matplotlib.figure

    from qstore_bench import cli
    from qstore_bench import codecs as cd

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: saved.append(fig))
    cli._plot_codecs(cd.run(200, 100, 1), str(tmp_path / "c.png"))
    titles = [ax.get_title() for ax in saved[0].axes]
    assert titles == ["size", "serialize time", "deserialize time",
                      "deserialize / serialize time"]
    assert all(ax.get_lines() for ax in saved[0].axes)


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    """One `report --small` for the tests that read it (it runs every
    experiment on every backend: the bench's longest test)."""
    tmp = tmp_path_factory.mktemp("report")
    outdir = tmp / "rep"
    res = CliRunner().invoke(main, ["report", str(outdir), "--small", "--dir", str(tmp)])
    # the traceback says which experiment and backend failed
    assert res.exit_code == 0, (res.output, "".join(traceback.format_exception(*res.exc_info))
                                if res.exc_info else None)
    return outdir, (outdir / "index.html").read_text()


def test_report_writes_a_page_with_every_experiment(small_report):
    outdir, page = small_report
    for part in ("Seed 000", "Seed 001", "Seed 002", "Seed 004", "serialization",
                 "the runner&#39;s cost", "Seed 004 as a flow", "Seed 001 as a flow: WordCount",
                 "Seed 002 on a flow", "lm(formula = items_per_s ~ parallelism + batch)",
                 "flow, layout shared", "where the time goes",
                 "against the brokers"):
        assert part in page
    for png in ("sweep.png", "sweep-queue.png", "tune.png", "drain.png", "codecs.png"):
        assert (outdir / png).read_bytes()[:4] == b"\x89PNG" and png in page


def test_the_report_formats_numbers_like_the_text_tables(small_report):
    from qstore_bench.cli import _num

    assert [_num(v) for v in (True, False, None, 12345, 0.000123456, 2.5, 123456.7)] == [
        "yes", "no", "-", "12,345", "0.0001235", "2.5", "123,457"]
    _, page = small_report
    assert ">0.00<" not in page and "True" not in page and "False" not in page
    assert "{'" not in page                       # no raw Python dict
    assert page.count("<figcaption>") == page.count("<img ") == 5
    assert "Residual standard error" in page and "lm(formula = items_per_s ~ writers + batch)" in page
    # every flow answered what its reference answers
    assert page.count("counted what the single-threaded baseline counted: yes") == 2
    assert "the flow's counts equal collections.Counter's: yes" in page    # template text
    # drain's and codecs' text tables, cell for cell
    for title in ("the seed&#39;s baseline", "best and worst combination",
                  "pyqstore, mapreduce: seconds", "the 10 most fetched articles"):
        assert title in page
    assert "<th>deser/ser</th>" in page and "<td class=\"text\">java-serialization</td>" in page
