"""qstore-bench: the seeds' experiments as one command, pyqstore beside the
stores its users would otherwise pick, in one run.  The command is thin:
experiments.py measures, this module prints and saves."""
from __future__ import annotations

import csv
import json
import sys
from typing import Any, Optional

import click

from . import backends as bk
from . import drain as dr
from . import experiments as ex
from .drain import STRATEGIES
from . import ackqueues as ack
from . import brokers as br
from . import goals as gl
from . import servers as sv
from . import streams as st

BACKEND_NAMES = [b.name for b in bk.BACKENDS]


def _backends_option(f: Any) -> Any:
    return click.option(
        "--backends", "-b", default=None, metavar="NAMES",
        help=f"comma-separated subset of: {', '.join(BACKEND_NAMES)} (default: all)")(f)


def _common(f: Any) -> Any:
    f = click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
                     default=None, help="also write the results as JSON to this file")(f)
    f = click.option("--dir", "base", type=click.Path(file_okay=False, exists=True),
                     default=None, help="where scratch files go (default: a temp dir)")(f)
    return _backends_option(f)


def _pick(names: Optional[str]) -> list[bk.Backend]:
    try:
        return bk.by_name(names.split(",") if names else None)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--backends") from None


def _header_machine(m: dict[str, Any]) -> None:
    click.echo(f"# {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
               f"{m['filesystem']} at {m['dir']}")


def _header(result: dict[str, Any]) -> None:
    _header_machine(result["machine"])
    for name, st in result["backends"].items():
        if st["available"]:
            click.echo(f"#   {name:<14} {st['version']}")
        else:
            click.echo(f"#   {name:<14} unavailable: {st['reason']}")


def _save(result: dict[str, Any], json_path: Optional[str]) -> None:
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
        click.echo(f"# results written to {json_path}")


def _table(head: list[str], rows: list[list[str]]) -> None:
    """A text table whose columns are as wide as their widest cell, two
    spaces apart, so that no size runs two columns together; the first
    column is left-aligned, the others right-aligned."""
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    click.echo(line(head))
    for r in rows:
        click.echo(line(r))


class _Bar:
    """A progress line for steps that may take more than a second."""

    def __init__(self, total: int, label: str) -> None:
        self.bar = click.progressbar(length=total, label=label, file=sys.stderr,
                                     show_eta=False, item_show_func=lambda s: s)
        self.bar.__enter__()

    def __call__(self, step: str) -> None:
        self.bar.current_item = step
        self.bar.update(1)

    def close(self) -> None:
        self.bar.__exit__(None, None, None)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The seeds' experiments on pyqstore and its peers, side by side.

    \b
    Example:
      qstore-bench sweep --max 5           # seed 000, n = 1 .. 10^5
      qstore-bench correctness             # seed 001's correctness test
      qstore-bench perf --threads 4        # seed 001's throughput test
      qstore-bench tune                    # seed 002's batch x writers fit
      qstore-bench drain                   # seed 004's parallel consumers
      qstore-bench codecs                  # seed 000's serialization test
      qstore-bench streams                 # stream + group vs Redis Streams
      qstore-bench brokers                 # Redis, persist-queue, litequeue
      qstore-bench goals                   # issue 17's table, every peer
      qstore-bench report out/             # all of it, quickly, as HTML
    """


@main.command()
@click.option("--max", "max_exp", type=click.IntRange(0, 7), default=5, show_default=True,
              help="largest n is 10^MAX")
@click.option("--reps", type=click.IntRange(1), default=None,
              help="timed runs per cell, median and mean shown with min and max "
                   "[default: 3; 10 with --seed-method]")
@click.option("--seed-method", is_flag=True,
              help="the seed's method: each uuid made inside the timed loop, no warm-up "
                   "run, the mean of --reps (10) runs")
@click.option("--sync/--no-sync", default=True, show_default=True,
              help="commits durable on return (fsync) or not")
@click.option("--payload-size", type=click.IntRange(1, 1 << 20), default=36, show_default=True,
              help="bytes per id/payload (36: a uuid string, as in the seed)")
@click.option("--layer", type=click.Choice(["casket", "queue"]), default="casket",
              show_default=True,
              help="casket: putdup(QUEUE, id) + putdup(id, id); queue: queue puts")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="also write the table as CSV")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="draw the seed's two figures into this PNG")
@_common
def sweep(max_exp: int, reps: Optional[int], seed_method: bool, sync: bool, payload_size: int,
          layer: str, csv_path: Optional[str], plot_path: Optional[str],
          backends: Optional[str], base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 000: one transaction of n items, n = 1, 10, ..., 10^MAX.

    Each run opens a fresh file (not timed), times the transaction up to
    the return of its commit, and closes (not timed).  A warm-up run
    (n <= 10^5) is reported apart and not counted.

    \b
    Example:
      qstore-bench sweep --max 4 --reps 3 --json sweep.json --plot sweep.png
      qstore-bench sweep --layer queue -b pyqstore,lmdb,redis --no-sync
      qstore-bench sweep --seed-method --max 5      # as the seed measured
    """
    chosen = _pick(backends)
    reps = reps or (10 if seed_method else 3)
    bar = _Bar(len(chosen) * (max_exp + 1), "sweep")
    try:
        result = ex.sweep(chosen, max_exp, reps, sync, payload_size, layer, base, bar,
                          method="seed" if seed_method else "prepared")
    finally:
        bar.close()
    _header(result)
    if seed_method:
        click.echo(f"# the seed's method: uuids made inside the timed loop, {reps} runs, "
                   "no warm-up")
    rows = []
    for r in result["results"]:
        s = r["seconds"]
        rows.append([r["backend"], str(r["n"]), f"{s['median']:.6f}", f"{s['mean']:.6f}",
                     f"{s['min']:.6f}", f"{s['max']:.6f}", f"{r['us_per_item']:.2f}",
                     f"{(r['items_per_s'] or 0):,.0f}"])
    click.echo("# seconds per transaction: median, mean, min and max over the runs")
    _table(["backend", "n", "median_s", "mean_s", "min_s", "max_s", "us/item", "items/s"], rows)
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["backend", "n", "seconds_median", "seconds_mean", "seconds_min",
                        "seconds_max", "us_per_item", "items_per_s", "warmup_seconds", "times"])
            for r in result["results"]:
                s = r["seconds"]
                w.writerow([r["backend"], r["n"], s["median"], s["mean"], s["min"], s["max"],
                            r["us_per_item"], r["items_per_s"], r["warmup_seconds"],
                            " ".join(repr(t) for t in r["times"])])
    if plot_path:
        _plot_sweep(result, plot_path)
        click.echo(f"# plot written to {plot_path}")
    _save(result, json_path)


def _pyplot() -> Any:
    """matplotlib.pyplot on a file-only backend, or a clear error."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException("--plot needs matplotlib: pip install matplotlib") from None
    return plt


def _plot_sweep(result: dict[str, Any], path: str) -> None:
    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in dict.fromkeys(r["backend"] for r in result["results"]):
        rows = [r for r in result["results"] if r["backend"] == name]
        ns = [r["n"] for r in rows]
        a.plot(ns, [r["us_per_item"] for r in rows], marker="o", label=name)
        b.plot(ns, [r["items_per_s"] for r in rows], marker="o", label=name)
    for ax, ylabel in ((a, "µs per item"), (b, "items per second")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("items in the transaction (n)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"seed 000 sweep, {result['layer']} layer, "
                 f"{'sync' if result['sync'] else 'no sync'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@main.command()
@click.option("--count", type=click.IntRange(2), default=1000, show_default=True,
              help="random keys written and read back")
@click.option("--max-value", type=click.IntRange(1, 1 << 20), default=1 << 20,
              show_default=True, help="largest value in bytes (memcached caps it at 1 MB)")
@_common
def correctness(count: int, max_value: int, backends: Optional[str], base: Optional[str],
                json_path: Optional[str]) -> None:
    """Seed 001's KeyValueCorrectness: random keys and values (0 bytes to
    1 MiB) written and read back, every mismatch reported; plus duplicate
    order and queue FIFO order where the backend has them.  Exit status 1
    on any mismatch.

    \b
    Example:
      qstore-bench correctness --count 500 -b pyqstore,tokyocabinet,redis
    """
    chosen = _pick(backends)
    bar = _Bar(len(chosen), "correctness")
    try:
        result = ex.correctness(chosen, count, max_value, base, bar)
    finally:
        bar.close()
    _header(result)
    for r in result["results"]:
        verdict = "Correctness OK!" if r["mismatches"] == 0 else \
            f"{r['mismatches']} MISMATCHES"
        checks = "; ".join(f"{k}: {v}" for k, v in r["checks"].items())
        click.echo(f"{r['backend']:<14} {verdict}  ({checks})")
        for line in r["details"]:
            click.echo(f"    {line}")
    _save(result, json_path)
    if not result["ok"]:
        sys.exit(1)


@main.command()
@click.option("--threads", "-x", type=click.IntRange(1, 256), default=2, show_default=True,
              help="writer/reader threads")
@click.option("--handles", type=click.Choice(list(ex.HANDLES)), default="per-thread",
              show_default=True,
              help="per-thread: each thread its own handle (connection, or a view of the "
                   "process's environment with its own transactions); shared: all threads "
                   "use one handle")
@click.option("--requests", "-n", type=click.IntRange(1), default=10000, show_default=True,
              help="requests per phase, over all threads")
@click.option("--value-size", "-l", type=click.IntRange(0, 1 << 20), default=32,
              show_default=True, help="bytes per value")
@click.option("--sync/--no-sync", default=False, show_default=True,
              help="every put durable on return, or not (seed 001's servers did not sync)")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True)
@_common
def perf(threads: int, handles: str, requests: int, value_size: int, sync: bool, reps: int,
         backends: Optional[str], base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 001's KeyValuePerformance: a write phase then a read phase of
    REQUESTS requests over THREADS threads, total ms and ops/s per phase.
    The null backend (does nothing) measures the harness's own overhead.

    \b
    Example:
      qstore-bench perf -x 2 -n 10000 -l 32 -b pyqstore,redis,memcached
      qstore-bench perf -x 4 --handles shared --sync
    """
    chosen = _pick(backends)
    bar = _Bar(len(chosen) + 1 + sum(len({1, threads}) for b in chosen if b.tool_label), "perf")
    try:
        result = ex.perf(chosen, threads, requests, value_size, sync, reps, base, bar, handles)
    finally:
        bar.close()
    _header(result)
    click.echo(f"{threads} threads, {handles} handles, {requests} requests of {value_size} "
               f"bytes, {'sync' if sync else 'no sync'}, median of {reps}")
    rows, notes = [], []
    for r in result["results"]:
        w, rd, wu = r["write_ms"], r["read_ms"], r["warmup"]
        synced = r["sync"]
        if synced.startswith("cannot: "):
            notes.append(f"# {r['backend']} {synced}")
            synced = "cannot"
        rows.append([r["label"], r["handles"], synced, f"{w['median']:.1f}",
                     f"({w['min']:.1f}-{w['max']:.1f})", f"{r['writes_per_s']:,.0f}",
                     f"{rd['median']:.1f}", f"({rd['min']:.1f}-{rd['max']:.1f})",
                     f"{r['reads_per_s']:,.0f}", f"{wu['write_ms']:.1f}/{wu['read_ms']:.1f}"])
    _table(["backend", "handles", "sync", "write ms", "(min-max)", "writes/s", "read ms",
            "(min-max)", "reads/s", "warm-up ms w/r"], rows)
    for line in notes:
        click.echo(line)
    _save(result, json_path)


def _int_list(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers") from None
    if len(out) < 3 or out[0] < 1:
        raise click.BadParameter("give at least 3 distinct positive values (a quadratic "
                                 "needs them)")
    return out


@main.command()
@click.option("--backend", "-b", "backend_name", default="pyqstore", show_default=True,
              type=click.Choice(BACKEND_NAMES), help="the store to tune")
@click.option("--batches", default="1,10,100,1000", show_default=True,
              help="batch sizes (items per transaction)")
@click.option("--writers", default="1,2,4,8", show_default=True,
              help="concurrent writers")
@click.option("--duration", type=click.FloatRange(0.05), default=2.0, show_default=True,
              help="seconds per cell (the seed ran each for five minutes)")
@click.option("--sync/--no-sync", default=True, show_default=True)
@click.option("--processes", is_flag=True,
              help="writers are processes (spawned), not threads, each opening the store "
                   "by path; for the stores several processes can write at once: "
                   + ", ".join(b.name for b in bk.BACKENDS
                               if not b.no_processes and "queue" in b.kinds))
@click.option("--observations", "observations", default=None, metavar="FILE.csv",
              type=click.Path(dir_okay=False, exists=True),
              help="fit these measurements instead of measuring: a CSV file whose header "
                   "names writers, batch and items_per_s (the seed's table of runs)")
@click.option("--fix", "fixes", multiple=True, metavar="KNOB=VALUE",
              help="hold KNOB (writers or batch) at VALUE while the other's optimum is "
                   "sought (default: its median grid value; the seed held batch=20)")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="heat map of the measurements with the fitted contours")
@click.option("--dir", "base", type=click.Path(file_okay=False, exists=True), default=None,
              help="where scratch files go (default: a temp dir)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="also write the results as JSON to this file")
def tune(backend_name: str, batches: str, writers: str, duration: float, sync: bool,
         processes: bool, observations: Optional[str], fixes: tuple[str, ...],
         plot_path: Optional[str], base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 002: throughput over batch size x concurrent writers, the
    seed's two regression models (statsmodels: items_per_s ~ writers +
    I(writers^2) + batch + I(batch^2)) printed like R's summary(lm), the
    one-variable-at-a-time optima, and the joint optimum of the fitted
    surface beside the best measured cell (an extrapolation when it is on
    the grid's edge: then the fit's unconstrained optimum is shown).

    \b
    Example:
      qstore-bench tune --batches 1,10,100,1000 --writers 1,2,4,8 --duration 2
      qstore-bench tune --processes --writers 1,2,4 --no-sync
      qstore-bench tune --observations runs.csv --fix batch=20
    """
    fix = _fixes(fixes)
    if observations:
        try:
            result = ex.tune_observations(ex.read_observations(observations), observations, fix)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        if plot_path and not _is_grid(result["cells"]):
            raise click.ClickException(f"--plot draws a heat map: {observations} must hold "
                                       "every writers x batch combination once")
        click.echo(f"items/s, observations from {observations}")
    else:
        b_list, w_list = _int_list(batches), _int_list(writers)
        backend = bk.by_name([backend_name])[0]
        bar = _Bar(len(b_list) * len(w_list), "tune")
        try:
            result = ex.tune(backend, b_list, w_list, duration, sync, processes, base, bar, fix)
        except (bk.Unsupported, ex.ProcessFailed, ValueError) as e:
            raise click.ClickException(str(e)) from None
        finally:
            bar.close()
        _header(result)
        click.echo(f"items/s, {backend_name}, {'processes' if processes else 'threads'}, "
                   f"{'sync' if sync else 'no sync'}, {duration} s per cell")
    _tune_table(result["cells"])
    _print_models(result["models"])
    if plot_path:
        _plot_tune(result, plot_path)
        click.echo(f"# plot written to {plot_path}")
    _save(result, json_path)


def _print_models(m: dict[str, Any]) -> None:
    """The seed's two fits as R prints them, the one-at-a-time optima, the
    joint optimum and the best measured cell; the knob is the seed's
    reducers (tune's writers, a flow node's parallelism)."""
    k = m.get("knob", "writers")
    for key in ("linear", "quadratic"):
        click.echo("")
        click.echo(m[key]["summary"])
    oat, joint, best = m["one_at_a_time"], m["joint_optimum"], m["best_measured"]
    click.echo("")
    click.echo(f"one at a time: batch fixed at {oat[k]['batch_fixed']:g}: best {k} "
               f"{oat[k]['best_' + k]:.2f} -> {oat[k]['predicted']:,.0f}/s")
    click.echo(f"               {k} fixed at {oat['batch'][k + '_fixed']:g}: best batch "
               f"{oat['batch']['best_batch']:.1f} -> {oat['batch']['predicted']:,.0f}/s")
    click.echo(f"joint optimum of the fitted surface within the grid: {k} "
               f"{joint[k]:.2f}, batch {joint['batch']:.1f} -> "
               f"{joint['predicted']:,.0f}/s")
    if joint["extrapolation"]:
        free = m["unconstrained_optimum"]
        where = ("the fitted surface has no maximum (it is not concave)" if free is None else
                 f"the fit's unconstrained optimum is {k} {free[k]:.2f}, batch "
                 f"{free['batch']:.1f} -> {free['predicted']:,.0f}/s")
        click.echo(f"  on the grid's edge ({', '.join(joint['on_edge'])}): an extrapolation; "
                   f"{where}")
    click.echo(f"best measured cell: {k} {best[k]:g}, batch {best['batch']:g} -> "
               f"{best['items_per_s']:,.0f}/s")


def _fixes(fixes: tuple[str, ...], knobs: tuple[str, ...] = ex.KNOBS) -> dict[str, float]:
    out = {}
    for text in fixes:
        name, eq, value = text.partition("=")
        name = name.strip()
        if not eq or name not in knobs:
            raise click.BadParameter(f"{text!r}: give KNOB=VALUE with KNOB one of "
                                     f"{', '.join(knobs)}", param_hint="--fix")
        try:
            out[name] = float(value)
        except ValueError:
            raise click.BadParameter(f"{text!r}: {value!r} is not a number",
                                     param_hint="--fix") from None
    return out


def _is_grid(cells: list[dict[str, float]], knob: str = "writers") -> bool:
    """Every knob x batch combination once."""
    pairs = {(c[knob], c["batch"]) for c in cells}
    return len(pairs) == len(cells) == (len({c[knob] for c in cells})
                                        * len({c["batch"] for c in cells}))


def _tune_table(cells: list[dict[str, float]], knob: str = "writers") -> None:
    """A grid table when the cells are a full grid, else one row each."""
    ws = sorted({c[knob] for c in cells})
    bs = sorted({c["batch"] for c in cells})
    at = {(c[knob], c["batch"]): c["items_per_s"] for c in cells}
    w0 = max(8, len(knob))
    if _is_grid(cells, knob):
        click.echo(f"{knob:>{w0}} | " + "".join(f"{'batch ' + format(b, 'g'):>14}"
                                                 for b in bs))
        for w in ws:
            click.echo(f"{w:>{w0}g} | " + "".join(f"{at[w, b]:>14,.0f}" for b in bs))
        return
    click.echo(f"{knob:>{w0}} {'batch':>8} {'items/s':>14}")
    for c in cells:
        click.echo(f"{c[knob]:>{w0}g} {c['batch']:>8g} {c['items_per_s']:>14,.0f}")


def _plot_tune(result: dict[str, Any], path: str) -> None:
    plt = _pyplot()
    cells = result["cells"]
    k = result["models"].get("knob", "writers")
    ws = sorted({c[k] for c in cells})
    bs = sorted({c["batch"] for c in cells})
    grid = [[next(c["items_per_s"] for c in cells if c[k] == w and c["batch"] == b)
             for b in bs] for w in ws]
    q = result["models"]["quadratic"]["coefficients"]

    def surface(w: float, b: float) -> float:
        result: float = (q["(Intercept)"] + q[k] * w + q[f"I({k}^2)"] * w * w
                         + q["batch"] * b + q["I(batch^2)"] * b * b)
        return result

    fig, ax = plt.subplots(figsize=(7, 5))
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis",
                   extent=(-0.5, len(bs) - 0.5, -0.5, len(ws) - 0.5))
    fig.colorbar(im, ax=ax, label="items/s (measured)")
    xs = [i / 20 * (len(bs) - 1) for i in range(21)]
    ys = [i / 20 * (len(ws) - 1) for i in range(21)]

    def interp(vals: list[int], t: float) -> float:
        i = min(int(t), len(vals) - 2)
        return vals[i] + (vals[i + 1] - vals[i]) * (t - i)

    z = [[surface(interp(ws, y), interp(bs, x)) for x in xs] for y in ys]
    cs = ax.contour(xs, ys, z, colors="white", linewidths=0.8)
    ax.clabel(cs, fmt=lambda v: f"{v:,.0f}", fontsize=7)
    ax.set_xticks(range(len(bs)), [str(b) for b in bs])
    ax.set_yticks(range(len(ws)), [str(w) for w in ws])
    ax.set_xlabel("batch size")
    ax.set_ylabel(k)
    ax.set_title(f"seed 002 tuning: {result.get('backend', 'a flow')} (contours: quadratic fit)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _size(text: str) -> int:
    """Bytes from 123, 64K, 8M or 1G (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if t[-1:] in "KMG" else t) * mult
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (like 4096, 64K, 8M, 1G)") from None
    if value < 1:
        raise click.BadParameter(f"{text!r}: a size is at least one byte")
    return int(value)


def _human(n: float) -> str:
    """A byte count as the options spell it: 8M, 64K, 1.5G, 100."""
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m:
            return f"{n / m:.1f}".rstrip("0").rstrip(".") + unit
    return f"{n:.0f}"


def _drain_grid(result: dict[str, Any], backend: str, strategy: str) -> list[list[float]]:
    """Seconds per cell: a row per consumer count, a column per block size."""
    at = {(c["consumers"], c["block"]): c["seconds"] for c in result["cells"]
          if c["backend"] == backend and c["strategy"] == strategy}
    return [[at[n, b] for b in result["blocks"]] for n in result["consumers"]]


def _cell_name(c: dict[str, Any]) -> str:
    return f"{c['consumers']} x {_human(c['block'])}"


def _drain_tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Every table drain prints, as (title, head, rows of text): the text
    output and the HTML report show the same cells."""
    blocks = [_human(b) for b in result["blocks"]]
    tables = [("the seed's baseline: one thread looping over the file, seconds",
               ["block", "seconds", "MiB/s"],
               [[_human(r["block"]), f"{r['seconds']:.3f}",
                 f"{result['log']['bytes'] / r['seconds'] / (1 << 20):,.1f}"]
                for r in result["baseline"]])]
    for g in result["extremes"]:
        grid = _drain_grid(result, g["backend"], g["strategy"])
        tables.append((f"{g['backend']}, {g['strategy']}: seconds, consumer threads x block",
                       ["consumers"] + blocks,
                       [[str(n)] + [f"{v:.3f}" for v in row]
                        for n, row in zip(result["consumers"], grid)]))
    base = min(r["seconds"] for r in result["baseline"])
    # ratios to 3 significant digits: derby's baseline/best, a hundredth of
    # the loop's speed at the report's small sizes, printed 0.00 with 2 decimals
    rows = [[g["backend"], g["strategy"], _cell_name(g["best"]), f"{g['best']['seconds']:.3f}",
             _cell_name(g["worst"]), f"{g['worst']['seconds']:.3f}",
             f"{g['worst_over_best']:.3g}", f"{base / g['best']['seconds']:.3g}"]
            for g in result["extremes"]]
    tables.append(("best and worst combination (consumers x block) per backend and strategy; "
                   "baseline/best > 1: faster than the single-threaded loop",
                   ["backend", "strategy", "best", "s", "worst", "s", "worst/best",
                    "baseline/best"], rows))
    tables.append(("the 10 most fetched articles (the baseline's count)", ["article", "hits"],
                   [[k, f"{v:,}"] for k, v in result["top10"]]))
    return tables


def _plot_drain(result: dict[str, Any], path: str) -> None:
    """A heat map per backend (rows) and strategy (columns) of seconds over
    consumers x block size, all on one colour scale with one colour bar."""
    plt = _pyplot()
    groups = result["extremes"]
    names = list(dict.fromkeys(g["backend"] for g in groups))
    ss = result["strategies"]
    secs = [c["seconds"] for c in result["cells"]]
    vmin, vmax = min(secs), max(secs)
    fig, axes = plt.subplots(len(names), len(ss), figsize=(4.2 * len(ss) + 1.5,
                                                           3.4 * len(names) + 0.8),
                             squeeze=False)
    im = None
    for i, name in enumerate(names):
        for j, s in enumerate(ss):
            ax = axes[i][j]
            grid = _drain_grid(result, name, s)
            im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis_r",
                           vmin=vmin, vmax=vmax)
            for y, row in enumerate(grid):
                for x, v in enumerate(row):
                    ax.text(x, y, f"{v:.3g}", ha="center", va="center", fontsize=8,
                            color="white" if v > (vmin + vmax) / 2 else "black")
            ax.set_xticks(range(len(result["blocks"])), [_human(b) for b in result["blocks"]])
            ax.set_yticks(range(len(result["consumers"])), [str(n) for n in result["consumers"]])
            ax.set_xlabel("block size")
            ax.set_ylabel("consumer threads")
            ax.set_title(f"{name}, {s}")
    fig.suptitle(f"seed 004: seconds to read {_human(result['log']['bytes'])} of log through "
                 f"the queue (baseline loop: {min(r['seconds'] for r in result['baseline']):.3g}"
                 " s)")
    fig.tight_layout(rect=(0, 0, 0.9, 0.97))
    fig.colorbar(im, ax=axes.ravel().tolist(), label="seconds (one scale for every panel)",
                 fraction=0.03)
    fig.savefig(path, dpi=110)
    plt.close(fig)


@main.command()
@click.option("--size", default="1G", show_default=True,
              help="bytes of log to generate (before --scale), e.g. 1G, 200M")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="read this log file instead of generating one (--size is then ignored)")
@click.option("--blocks", default="8M,16M,32M,64M", show_default=True,
              help="block sizes (before --scale): bytes of whole lines per queue item, "
                   "the seed's 8M to 64M")
@click.option("--scale", type=click.FloatRange(0, 1, min_open=True), default=1.0,
              show_default=True,
              help="multiplies --size and --blocks, for small runs (1/1024: a 1M log in 8K "
                   "to 64K blocks)")
@click.option("--consumers", default="1,2,4,8", show_default=True,
              help="consumer thread counts (the seed: 8 to 64 on 32 hardware threads)")
@click.option("--producers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="threads reading the file (each its own range of lines) and putting blocks")
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True,
              help="map/reduce (private counts merged at the end), locked (one shared "
                   "counter under a lock), agent (hits sent to one aggregator through the "
                   "store's queue)")
@click.option("--seed", type=int, default=4, show_default=True, help="the generator's seed")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="heat maps (a backend per row, a strategy per column) into "
                                 "this PNG")
@_common
def drain(size: str, log_path: Optional[str], blocks: str, scale: float, consumers: str,
          producers: int, strategies: str, seed: int, plot_path: Optional[str],
          backends: Optional[str], base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 004 (Wide Finder): a log file read in blocks of whole lines,
    producer threads putting the blocks on each backend's queue and
    consumer threads counting the most fetched articles, beside the seed's
    baseline (one thread looping over the file).  Seconds for consumers x
    block size per strategy, the best and the worst combination.  Every
    cell must count exactly what the baseline counts (exit status 1
    otherwise).

    \b
    Example:
      qstore-bench drain --scale 0.01 --consumers 1,2,4 -b pyqstore,sqlite3
      qstore-bench drain --log /var/log/apache2/access.log --blocks 1M,4M
    """
    chosen = _pick(backends)
    try:
        cs = sorted({int(x) for x in consumers.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(f"{consumers!r} is not a list of integers",
                                 param_hint="--consumers") from None
    if not cs or cs[0] < 1:
        raise click.BadParameter("give positive thread counts", param_hint="--consumers")
    bs = sorted({max(1, int(_size(x) * scale)) for x in blocks.split(",") if x.strip()})
    if not bs:
        raise click.BadParameter("give at least one block size", param_hint="--blocks")
    ss = [s for s in strategies.split(",") if s.strip()]
    if not ss or any(s not in STRATEGIES for s in ss):
        raise click.BadParameter(f"strategies are {', '.join(STRATEGIES)}",
                                 param_hint="--strategies")
    nbytes = int(_size(size) * scale)
    bar = _Bar(len(chosen) * len(cs) * len(bs) * len(ss) + len(bs), "drain")
    try:
        result = dr.drain(chosen, cs, bs, ss, producers, nbytes, log_path, seed, base, bar)
    except (bk.Unsupported, TimeoutError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        bar.close()
    _header(result)
    lg = result["log"]
    where = log_path if log_path else f"generated (seed {seed}, {lg['lines']:,} lines)"
    click.echo(f"log: {lg['bytes']:,} bytes, {where}; {result['matches']:,} article fetches of "
               f"{result['articles']:,} articles; {producers} producer thread(s), consumer "
               "threads with a handle each")
    for title, head, rows in _drain_tables(result):
        click.echo(f"\n# {title}")
        _table(head, rows)
    if result["overall"]:
        o = result["overall"]
        click.echo(f"\nbest of all: {o['best']['backend']} {o['best']['strategy']} "
                   f"{_cell_name(o['best'])}, {o['best']['seconds']:.3f} s; worst: "
                   f"{o['worst']['backend']} {o['worst']['strategy']} {_cell_name(o['worst'])}, "
                   f"{o['worst']['seconds']:.3f} s ({o['worst_over_best']:.2f}x)")
    click.echo("every cell counted what the baseline counted: "
               f"{'yes' if result['all_correct'] else 'NO'}")
    for c in result["cells"]:
        if not c["correct"]:
            click.echo(f"  WRONG COUNTS: {c['backend']} {c['strategy']} {_cell_name(c)}")
    if plot_path and result["cells"]:
        _plot_drain(result, plot_path)
        click.echo(f"# plot written to {plot_path}")
    _save(result, json_path)
    if not result["all_correct"]:
        sys.exit(1)


_SYNC_MODES = {"both": [True, False], "sync": [True], "no-sync": [False]}


def _sync_mode(f: Any) -> Any:
    return click.option(
        "--sync", "sync_mode", type=click.Choice(list(_SYNC_MODES)), default="both",
        show_default=True,
        help="sync: the lines beside sync=True (redis appendfsync always, SQLite "
             "synchronous=FULL); no-sync: beside sync=False (redis appendfsync no and its "
             "default, RDB; SQLite synchronous=NORMAL)")(f)


def _scratch_and_json(f: Any) -> Any:
    f = click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
                     default=None, help="also write the results as JSON to this file")(f)
    return click.option("--dir", "base", type=click.Path(file_okay=False, exists=True),
                        default=None, help="where scratch files go (default: a temp dir)")(f)


@main.command()
@click.option("--batches", default="100,1000", show_default=True,
              help="items per round (comma-separated)")
@click.option("--rounds", type=click.IntRange(1), default=20, show_default=True,
              help="rounds of append, group read and ack per batch size")
@click.option("--payload-size", type=click.IntRange(1, 1 << 20), default=64, show_default=True)
@_sync_mode
@_scratch_and_json
def streams(batches: str, rounds: int, payload_size: int, sync_mode: str, base: Optional[str],
            json_path: Optional[str]) -> None:
    """Issue 13: a stream and a consumer group against Redis Streams.

    Each round appends a batch, reads it as one consumer of a group and
    acknowledges it: append_many + Group.read + Group.ack against XADD
    (one pipeline) + XREADGROUP + XACK on a redis-server started on
    127.0.0.1: appendfsync always beside sync=True; appendfsync no and
    Redis's default (RDB snapshots, no append-only file) beside
    sync=False.  ratio = our items/s over Redis's.

    \b
    Example:
      qstore-bench streams --batches 100,1000 --rounds 50 --json streams.json
    """
    sizes = _batch_sizes(batches)
    syncs = _SYNC_MODES[sync_mode]
    result = st.run(sizes, rounds, payload_size, [x for x in sv.LEVELS if x[0] in syncs], base)
    rows = [["sync=True" if x["sync"] else "sync=False", x["redis_durability"], str(x["batch"]),
             f"{x['pyqstore_items_per_s']:,.0f}", f"{x['redis_items_per_s']:,.0f}",
             f"{x['ratio']:.2f}"] for x in result["lines"]]
    click.echo("# items per second through append + group read + ack, in rounds of a batch")
    _table(["pyqstore", "redis", "batch", "pyqstore/s", "redis/s", "ratio"], rows)
    _durability_notes()
    _save(result, json_path)


def _batch_sizes(text: str, hint: str = "--batches") -> list[int]:
    try:
        sizes = [int(b) for b in text.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{text!r}: give batch sizes >= 1, comma-separated",
                                 param_hint=hint) from None
    return sizes


def _durability_notes() -> None:
    """What a crash loses at each durability the broker lines name."""
    click.echo("# what a crash loses:")
    for sync, loses in sv.PYQSTORE_LOSES.items():
        click.echo(f"#   pyqstore sync {'on' if sync else 'off'} (sync={sync}): {loses}")
    for level, (_, loses) in sv.REDIS_LEVELS.items():
        click.echo(f"#   redis-server {sv.Redis.durability_of(level)}: {loses}")
    for level, loses in ack.SQLITE_LOSES.items():
        click.echo(f"#   SQLite WAL synchronous={level}: {loses}")


def brokers_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The brokers table, as the text output and the HTML report show it."""
    head = ["peer", "batch", "pyqstore", "peer durability", "equal", "pyqstore/s", "peer/s",
            "ratio", "required", "verdict"]
    rows = [[x["peer"], str(x["batch"]), x["pyqstore_durability"], x["peer_durability"],
             "yes" if x["equal_durability"] else "no (peer loses more)",
             f"{x['pyqstore_items_per_s']:,.0f}", f"{x['peer_items_per_s']:,.0f}",
             f"{x['ratio']:.2f}", f">= {x['required']:g}", "PASS" if x["meets"] else "FAIL"]
            for x in result["lines"]]
    return head, rows


@main.command()
@click.option("--batches", default="100,1000", show_default=True,
              help="items per round on the Redis lines (comma-separated)")
@click.option("--ack-batch", type=click.IntRange(1), default=100, show_default=True,
              help="items per round on the persist-queue and litequeue lines")
@click.option("--rounds", type=click.IntRange(1), default=20, show_default=True,
              help="rounds per line")
@click.option("--payload-size", type=click.IntRange(1, 1 << 20), default=64, show_default=True)
@click.option("--only", default=",".join(br.FAMILIES), show_default=True,
              help="the lines to run: stream (Redis Streams), list (Redis lists), ack "
                   "(persist-queue and litequeue)")
@_sync_mode
@_scratch_and_json
def brokers(batches: str, ack_batch: int, rounds: int, payload_size: int, only: str,
            sync_mode: str, base: Optional[str], json_path: Optional[str]) -> None:
    """Issue 13's broker lines in one run, one table: pyqstore's stream and
    group against Redis Streams, its plain queue against Redis lists
    (LPUSH + BRPOP), its reserve/ack against persist-queue's
    SQLiteAckQueue and litequeue; each line at a stated durability on both
    sides, the ratio (our items/s over the peer's) and the issue's
    requirement (ahead of Redis, 10x the ack queues) with PASS or FAIL.
    Every line checks that each item came back once, in order; a line that
    does not stops the run (exit status 1).  A FAIL is a measurement, not
    an error: the exit status stays 0.

    \b
    Example:
      qstore-bench brokers --rounds 50 --json brokers.json
      qstore-bench brokers --only ack --sync sync
    """
    families = [f for f in only.split(",") if f.strip()]
    if not families or any(f not in br.FAMILIES for f in families):
        raise click.BadParameter(f"give some of {', '.join(br.FAMILIES)}", param_hint="--only")
    sizes = _batch_sizes(batches)
    bar = _Bar(br.steps(families, len(sizes), _SYNC_MODES[sync_mode]), "brokers")
    try:
        result = br.run(sizes, rounds, payload_size, families, ack_batch,
                        _SYNC_MODES[sync_mode], base, bar)
    finally:
        bar.close()
    for name, p in result["peers"].items():
        click.echo(f"#   {name:<14} " + (p["version"] if p["available"]
                                         else "unavailable: " + p["reason"]))
    click.echo(f"# items per second, {rounds} rounds of a batch, {payload_size}-byte payloads; "
               "ratio = pyqstore/s over peer/s")
    _table(*brokers_table(result))
    click.echo("# work per round: " + "; ".join(
        f"{f}: pyqstore {br._OUR_WORK[f]}" for f in families))
    for peer, work in dict.fromkeys((x["peer"], x["peer_work"]) for x in result["lines"]):
        click.echo(f"#   {peer}: {work}")
    _durability_notes()
    click.echo("every line meets its requirement: " + ("yes" if result["all_meet"] else "NO"))
    _save(result, json_path)


def _rate(x: float) -> str:
    """A figure in three or four digits: 4.01M, 624.7k, 880, 3.71."""
    for unit, m in (("M", 1e6), ("k", 1e3)):
        if x >= m:
            return f"{x / m:.3g}{unit}" if x / m < 100 else f"{x / m:.0f}{unit}"
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def goals_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Issue 17's table: a row per line, pyqstore beside its best peer."""
    head = ["line", "unit", "pyqstore", "median (min-max)", "best peer", "peer", "median",
            "ratio", "goal", "result"]
    rows = []
    for x in result["rows"]:
        ours = x["pyqstore"]
        peer = x["best_peer"]
        rows.append([x["row"], x["unit"], x["pyqstore_durability"],
                     f"{_rate(ours['median'])} ({_rate(ours['min'])}-{_rate(ours['max'])})",
                     peer or "none available", x["peer_durability"] if peer else "-",
                     _rate(x["peer_median"]) if peer else "-",
                     f"{x['ratio']:.2f}x" if peer else "-",
                     _goal(x), "met" if x["met"] else "not met"])
    return head, rows


def _goal(row: dict[str, Any]) -> str:
    """A goals row's requirements: on the ratio, a floor, a ceiling."""
    parts = []
    if row["goal"] is not None:
        parts.append(f">= {row['goal']:.3g}x")
    if row.get("floor"):
        parts.append(f">= {_rate(row['floor'])}")
    if row.get("ceiling"):
        parts.append(f"<= {row['ceiling']:g}")
    return ", ".join(parts)


@main.command()
@click.option("--reps", type=click.IntRange(1), default=None,
              help="rounds per line, the sides taking turns; the median counts "
                   "[default: 3; 1 with --small]")
@click.option("--small", is_flag=True, help="small n and 1 rep: seconds, for a smoke test")
@click.option("--lines", "line_names", default=",".join(gl.DEFAULT_LINES), show_default=True,
              help="the lines to run (comma-separated); also sweep-10m and put_many-10m, "
                   "minutes and GiBs of disk each")
@_scratch_and_json
def goals(reps: Optional[int], small: bool, line_names: str, base: Optional[str],
          json_path: Optional[str]) -> None:
    """Issue 17's performance table in one run: every line on pyqstore and
    its peers side by side, pyqstore's median over the best peer's median,
    and the goal, met or not met.  Each row states both sides' durability.
    A "not met" is a measurement, not an error: the exit status stays 0.

    \b
    Example:
      qstore-bench goals --json goals.json
      qstore-bench goals --small --lines sweep,put_many
    """
    lines = [x.strip() for x in line_names.split(",") if x.strip()]
    if not lines or any(x not in gl.LINES for x in lines):
        raise click.BadParameter(f"give some of {', '.join(gl.LINES)}", param_hint="--lines")
    reps = reps or (1 if small else 3)
    result = gl.run(lines, reps, small, base,
                    lambda step: click.echo(f"# running {step}", err=True))
    _header(result)
    click.echo(f"# {reps} rep{'s' if reps > 1 else ''} per side, the sides taking turns; "
               "ratio = pyqstore's median over the best peer's median")
    _table(*goals_table(result))
    for x in result["rows"]:
        if x.get("beside"):
            click.echo(f"# {x['row']}, beside (measured, not in the ratio): " + ", ".join(
                f"{name} {_rate(b['median'])} ({_rate(b['min'])}-{_rate(b['max'])}), "
                f"{x['pyqstore']['median'] / b['median']:.2f}x"
                for name, b in x["beside"].items()))
        for name, why in x.get("unavailable", {}).items():
            click.echo(f"# {x['row']}: {name} could not do the work: {why}")
    click.echo("# work per cell, both sides:")
    for line in dict.fromkeys(x["line"] for x in result["rows"]):
        click.echo(f"#   {line}: {gl.WORK[line]}")
    click.echo("every goal met: " + ("yes" if result["all_met"] else "NO"))
    _save(result, json_path)


@main.command()
@click.option("--max", "max_n", type=click.IntRange(1), default=10_000, show_default=True,
              help="largest number of elements")
@click.option("--step", type=click.IntRange(1), default=100, show_default=True)
@click.option("--reps", type=click.IntRange(1), default=50, show_default=True,
              help="encodings and decodings timed per size")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="size and time vs elements into this PNG")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="also write the results as JSON to this file")
def codecs(max_n: int, step: int, reps: int, plot_path: Optional[str],
           json_path: Optional[str]) -> None:
    """Seed 000's serialization experiment: an object with n ints and n
    strings, n = STEP .. MAX; encoded size (and relative to the raw data)
    and encode/decode time per object for pickle, marshal, json, msgpack,
    Protocol Buffers (message defined at run time) and XML.

    \b
    Example:
      qstore-bench codecs --max 2000 --step 500 --reps 10 --plot codecs.png
    """
    from . import codecs as cd

    avail = sum(1 for _ in cd.codecs())
    bar = _Bar(avail, "codecs")
    try:
        result = cd.run(max_n, step, reps, bar)
    finally:
        bar.close()
    w = 1 + max(len(name) for name in ["codec", *result["codecs"]])    # java-serialization
    for name, st in result["codecs"].items():
        if not st["available"]:
            click.echo(f"#   {name:<{w}} unavailable: {st['reason']}")
    head, rows = _codecs_table(result)
    _table(head, rows)
    click.echo("# deser/ser: deserialize time over serialize time (the seed: above 1, "
               "most for Protocol Buffers)")
    if plot_path:
        _plot_codecs(result, plot_path)
        click.echo(f"# plot written to {plot_path}")
    _save(result, json_path)


def _codecs_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The codecs table (the smallest, middle and largest sizes), as the
    text output and the HTML report show it."""
    step, max_n = result["step"], result["max"]
    shown = {step, max_n - max_n % step, (max_n // step // 2) * step}
    # ratios to 3 significant digits: a fixed 2 decimals printed 0.00 for
    # a deser/ser below 0.005 (seen for a codec whose decode is a no-op)
    rows = [[r["codec"], str(r["n"]), str(r["bytes"]), f"{r['relative']:.3g}",
             f"{r['encode_us']:.1f}", f"{r['decode_us']:.1f}",
             "-" if r["decode_over_encode"] is None else f"{r['decode_over_encode']:.3g}"]
            for r in result["results"] if r["n"] in shown]
    return ["codec", "n", "bytes", "x raw", "ser us", "deser us", "deser/ser"], rows


# (row key, panel title, y label, whether 1 is a line to read against)
CODEC_PANELS = (("bytes", "size", "bytes per object", False),
                ("encode_us", "serialize time", "µs per object", False),
                ("decode_us", "deserialize time", "µs per object", False),
                ("decode_over_encode", "deserialize / serialize time",
                 "ratio (above 1: deserializing is slower)", True))


def _plot_codecs(result: dict[str, Any], path: str) -> None:
    """Seed 000's figures: size, serialize time, deserialize time and
    their ratio against the element count, a titled panel each."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    for ax, (key, title, ylabel, one) in zip(axes.ravel(), CODEC_PANELS):
        for name in dict.fromkeys(r["codec"] for r in result["results"]):
            rows = [r for r in result["results"] if r["codec"] == name and r[key] is not None]
            ax.plot([r["n"] for r in rows], [r[key] for r in rows], marker=".", label=name)
        ax.set_title(title)
        ax.set_xlabel("elements (ints and strings each)")
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        if one:
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("seed 000: serializing an object of n ints and n strings")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _num(v: Any) -> str:
    """A value as the HTML report shows it, like the text tables: yes/no,
    thousands grouped, 4 significant digits below 1000 (never a bare
    "0.00"), "-" for nothing."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def _render_report(context: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("qstore_bench", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]),
                             undefined=jinja2.StrictUndefined)
    env.filters["num"] = _num
    return env.get_template("report.html").render(**context)


@main.command()
@click.argument("outdir", type=click.Path(file_okay=False))
@click.option("--dir", "base", type=click.Path(file_okay=False, exists=True), default=None,
              help="where scratch files go (default: a temp dir)")
@click.option("--small", is_flag=True, help="tiny sizes (seconds, for a smoke test)")
def report(outdir: str, base: Optional[str], small: bool) -> None:
    """Run a quick version of every experiment and write OUTDIR/index.html
    with the tables and plots, to look at rather than read.

    \b
    Example:
      qstore-bench report out/ && xdg-open out/index.html
    """
    import os

    from . import codecs as cd

    from pyqstore.flow.runner import LAYOUTS

    from . import cli_flow as cf
    from . import flowbench as fb

    os.makedirs(outdir, exist_ok=True)
    steps = 8 + 2 + 7 + 2 + 9     # brokers; the flows: chain, widefinder, wordcount, tune
    bar = _Bar(steps, "report")
    try:
        k = 0.02 if small else 1.0
        sw = ex.sweep(bk.by_name(None), 1 if small else 3, 1 if small else 3, True, 36,
                      "casket", base, bar)
        _plot_sweep(sw, os.path.join(outdir, "sweep.png"))
        swq = ex.sweep(bk.by_name(None), 1 if small else 3, 1 if small else 3, False, 36,
                       "queue", base, bar)
        _plot_sweep(swq, os.path.join(outdir, "sweep-queue.png"))
        co = ex.correctness(bk.by_name(None), int(200 * k) + 2, int((1 << 20) * k), base, bar)
        pf = ex.perf(bk.by_name(None), 2, int(5000 * k), 32, False, 1, base, bar)
        tu = ex.tune(bk.by_name(["pyqstore"])[0], [1, 10, 100, 1000], [1, 2, 4], 0.5 * k,
                     not small, False, base, bar)
        _plot_tune(tu, os.path.join(outdir, "tune.png"))
        # the seed's 8M and 64M blocks, scaled down with the log
        scale = 1 / 4096 if small else 1 / 64
        drn = dr.drain(bk.by_name(None), [1, 4], [int((8 << 20) * scale),
                                                  int((64 << 20) * scale)],
                       list(STRATEGIES), 1, int((1 << 30) * scale), base=base, progress=bar)
        if drn["cells"]:
            _plot_drain(drn, os.path.join(outdir, "drain.png"))
        bar("codecs")
        cdr = cd.run(400, 200, 2) if small else cd.run(2000, 200, 10)
        _plot_codecs(cdr, os.path.join(outdir, "codecs.png"))
        # the flows (issue 14): every layout the runner has, one round each
        fch = fb.chain(2000 if small else 200_000, 1000, True,
                       list(LAYOUTS), 1, base, bar)
        fwf = fb.widefinder([1, 2], [64 << 10] if small else [1 << 20], list(fb.STRATEGIES),
                            (1 << 20) if small else (32 << 20), base=base, progress=bar)
        fwc = fb.wordcount(2, 2, 64 << 10, (1 << 20) if small else (16 << 20), base=base,
                           progress=bar)
        ftu = fb.tune([10, 100, 1000] if not small else [10, 30, 100], [1, 2, 3],
                      300 if small else 20_000, 20.0, True, base, bar)
        bar("brokers")
        bro = br.run([10] if small else [100, 1000], 2 if small else 20, 64,
                     ack_batch=10 if small else 100, base=base)
    finally:
        bar.close()
    tm = tu["models"]
    ws = sorted({c["writers"] for c in tu["cells"]})
    bs = sorted({c["batch"] for c in tu["cells"]})
    at = {(c["writers"], c["batch"]): c["items_per_s"] for c in tu["cells"]}
    j = tm["joint_optimum"]
    optima = [f"joint optimum of the fit within the grid: writers {j['writers']:.2f}, batch "
              f"{j['batch']:.1f} -> {j['predicted']:,.0f} items/s"
              + (" (on the grid's edge: an extrapolation)" if j["extrapolation"] else ""),
              f"best measured: writers {tm['best_measured']['writers']}, batch "
              f"{tm['best_measured']['batch']} -> {tm['best_measured']['items_per_s']:,.0f} "
              "items/s"]

    def sweep_rows(res: dict[str, Any]) -> list[list[Any]]:
        return [[r["backend"], r["n"], r["seconds"]["median"], r["seconds"]["min"],
                 r["seconds"]["max"], r["us_per_item"], r["items_per_s"]]
                for r in res["results"]]

    context = {
        "machine": sw["machine"],
        "backends": [[n, st.get("version", "-") if st["available"] else
                      "unavailable: " + st["reason"]] for n, st in sw["backends"].items()],
        "sweep_head": ["backend", "n", "s/txn (median)", "min", "max", "µs/item", "items/s"],
        "sweep": sweep_rows(sw), "sweep_queue": sweep_rows(swq),
        "correctness": [[r["backend"], r["mismatches"],
                         "; ".join(f"{k}: {_num(v)}" for k, v in r["checks"].items())]
                        for r in co["results"]],
        "perf_title": f"{pf['threads']} threads, {pf['requests']} requests of "
                      f"{pf['value_size']} bytes",
        "perf": [[r["label"], r["handles"], r["write_ms"]["median"], r["writes_per_s"],
                  r["read_ms"]["median"], r["reads_per_s"]] for r in pf["results"]],
        "tune_title": f"{tu['backend']}, {'synced' if tu['sync'] else 'no sync'}",
        "tune_head": ["writers"] + [f"batch {b}" for b in bs],
        "tune_grid": [[w] + [at[w, b] for b in bs] for w in ws],
        "tune_linear": tm["linear"]["summary"], "tune_quadratic": tm["quadratic"]["summary"],
        "tune_optima": optima,
        "drain_correct": drn["all_correct"],
        "drain_tables": _drain_tables(drn) if drn["cells"] else [],
        "drain_plot": bool(drn["cells"]),
        "codecs_table": _codecs_table(cdr),
        "flow_chain": cf.chain_tables(fch),
        "flow_widefinder": cf.widefinder_tables(fwf), "flow_widefinder_correct": fwf["all_correct"],
        "flow_wordcount": cf.wordcount_tables(fwc), "flow_wordcount_correct": fwc["correct"],
        "flow_tune": cf.tune_table(ftu), "flow_tune_linear": ftu["models"]["linear"]["summary"],
        "flow_tune_quadratic": ftu["models"]["quadratic"]["summary"],
        "brokers_title": f"{bro['rounds']} rounds, {bro['payload_size']}-byte payloads",
        "brokers_peers": [[n, p["version"] if p["available"] else "unavailable: " + p["reason"]]
                          for n, p in bro["peers"].items()],
        "brokers_table": brokers_table(bro),
    }
    page = _render_report(context)
    path = os.path.join(outdir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    click.echo(path)


# the `flow` group (and its `ray` command) registers itself on main
from . import cli_flow  # noqa: E402,F401

if __name__ == "__main__":
    # `python -m qstore_bench.cli`: this module runs as __main__ and the flow
    # commands registered on the package's qstore_bench.cli.main, imported
    # by cli_flow, so that is the group to run
    from qstore_bench.cli import main as _package_main
    _package_main(prog_name="qstore-bench")
