"""`qstore-bench flow ...`: the flow benchmarks (flowbench.py measures,
this module prints and saves; the tables are also the HTML report's).

Wide Finder as a flow is its own command rather than `drain --flow`:
drain's grid is backends x consumer threads fed by producer threads
through each backend's queue; the flow's is strategies x parser instances
(processes) fed by a file source, with no backend to choose and a
breakdown per node that drain has no counterpart for, so half of either
command's options would not apply to the other."""
from __future__ import annotations

import sys
from typing import Any, Optional

import click
from pyqstore.flow.runner import LAYOUTS

from . import flowbench as fb
from .cli import (_Bar, _fixes, _header_machine, _human, _int_list, _plot_tune, _print_models,
                  _save, _size, _table, _tune_table, main)

Table = tuple[str, list[str], list[list[str]]]


def _positive_list(text: str, what: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers",
                                 param_hint=what) from None
    if not out or out[0] < 1:
        raise click.BadParameter("give positive integers", param_hint=what)
    return out


def _opt(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _breakdown_table(title: str, rows: list[dict[str, Any]]) -> Table:
    return (title, ["node", "instances", "firings", "items in", "items out", "work s", "span s",
                    "work share", "ms/firing outside work"],
            [[r["node"], str(r["instances"]), _opt(r["firings"], ","), f"{r['items_in']:,}",
              f"{r['items_out']:,}", _opt(r["work_s"], ".3f"), _opt(r["span_s"], ".3f"),
              _opt(r["work_share"], ".1%"), _opt(r["outside_ms_per_firing"], ".3g")]
             for r in rows])


def chain_tables(result: dict[str, Any]) -> list[Table]:
    loop = result["loop"]
    rows = [["one process, one casket (the loop)", f"{loop['seconds']:.3f}",
             f"{loop['items_per_s']:,.0f}", "1", "-", "-", "-"]]
    for r in result["chain"]:
        rows.append([f"flow, layout {r['layout']}", f"{r['wall_s']:.3f}",
                     f"{r['items_per_s']:,.0f}", f"{r['ratio']:.3f}", f"{r['flowing_s']:.3f}",
                     f"{r['flowing_items_per_s']:,.0f}", f"{r['flowing_ratio']:.3f}"])
    tables: list[Table] = [(
        f"the runner's cost: {result['items']:,} items of {result['item_bytes']} bytes, batches "
        f"of {result['batch']}, {'sync' if result['sync'] else 'no sync'}, median of "
        f"{result['reps']}; ratio = items/s over the loop's (required >= 0.5, goal 1 M items/s)",
        ["run", "seconds", "items/s", "ratio", "flowing s", "flowing items/s", "flowing ratio"],
        rows)]
    gone = [[name, st["reason"]] for name, st in result["layouts"].items() if not st["available"]]
    if gone:
        tables.append(("layouts not measured", ["layout", "why"], gone))
    return tables


def widefinder_tables(result: dict[str, Any]) -> list[Table]:
    lg = result["log"]
    tables: list[Table] = [(
        "the seed's baseline: one thread looping over the file",
        ["block", "seconds", "lines/s", "MiB/s"],
        [[_human(r["block"]), f"{r['seconds']:.3f}", f"{lg['lines'] / r['seconds']:,.0f}",
          f"{lg['bytes'] / r['seconds'] / (1 << 20):,.1f}"] for r in result["baseline"]])]
    tables.append((
        "every run: seconds end to end (process starts included), flowing (first to last "
        "firing), lines/s end to end",
        ["strategy", "parsers", "block", "seconds", "flowing s", "lines/s", "MiB/s", "correct"],
        [[c["strategy"], str(c["parsers"]), _human(c["block"]), f"{c['seconds']:.3f}",
          f"{c['flowing_s']:.3f}", f"{c['lines_per_s']:,.0f}", f"{c['mib_per_s']:.1f}",
          "yes" if c["correct"] else "NO"] for c in result["cells"]]))
    base = min(r["seconds"] for r in result["baseline"])
    tables.append((
        "best and worst combination (parsers x block) per strategy; baseline/best > 1: faster "
        "than the single-threaded loop",
        ["strategy", "best", "s", "worst", "s", "worst/best", "baseline/best"],
        [[g["strategy"], f"{g['best']['parsers']} x {_human(g['best']['block'])}",
          f"{g['best']['seconds']:.3f}", f"{g['worst']['parsers']} x {_human(g['worst']['block'])}",
          f"{g['worst']['seconds']:.3f}", f"{g['worst_over_best']:.2f}",
          f"{base / g['best']['seconds']:.3g}"] for g in result["extremes"]]))
    for g in result["extremes"]:
        c = g["best"]
        tables.append(_breakdown_table(
            f"where the time goes, {g['strategy']} at its best ({c['parsers']} x "
            f"{_human(c['block'])}, {c['seconds']:.3f} s): work share = seconds in the node's "
            "work over its instances' time in the run; the rest is reserve, commit, waiting "
            "and process start; ms/firing outside work: inside the node's span, per firing", c["breakdown"]))
    tables.append(("the 10 most fetched articles (the baseline's count)", ["article", "hits"],
                   [[k, f"{v:,}"] for k, v in result["top10"]]))
    return tables


def wordcount_tables(result: dict[str, Any]) -> list[Table]:
    r = result
    tables: list[Table] = [(
        f"WordCount: {r['bytes']:,} bytes, {r['lines']:,} lines, {r['words']:,} words "
        f"({r['distinct']:,} distinct); {r['mappers']} mappers -> partitioned by word -> "
        f"{r['reducers']} reducers, blocks of {_human(r['block'])}, median of {r['reps']}",
        ["run", "seconds", "words/s", "correct"],
        [["collections.Counter over the input, one thread", f"{r['counter_seconds']:.3f}",
          f"{r['counter_words_per_s']:,.0f}", "-"],
         ["the flow", f"{r['seconds']:.3f}", f"{r['words_per_s']:,.0f}",
          "yes" if r["correct"] else "NO"]])]
    tables.append(_breakdown_table("where the time goes (the last run)",
                                   r["runs"][-1]["breakdown"]))
    return tables


def tune_table(result: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    ps = sorted({c["parallelism"] for c in result["cells"]})
    bs = sorted({c["batch"] for c in result["cells"]})
    at = {(c["parallelism"], c["batch"]): c["items_per_s"] for c in result["cells"]}
    return ["parallelism"] + [f"batch {b}" for b in bs], [[p] + [at[p, b] for b in bs]
                                                            for p in ps]


def _print(tables: list[Table]) -> None:
    for title, head, rows in tables:
        click.echo(f"\n# {title}")
        _table(head, rows)


def _sync_option(f: Any) -> Any:
    return click.option("--sync/--no-sync", default=True, show_default=True,
                        help="the flow's casket commits durable on return (fsync)")(f)


def _out_options(f: Any) -> Any:
    f = click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
                     default=None, help="also write the results as JSON to this file")(f)
    f = click.option("--dir", "base", type=click.Path(file_okay=False, exists=True),
                     default=None, help="where scratch files go (default: a temp dir)")(f)
    return f


@main.group()
def flow() -> None:
    """Issue 14's flow benchmarks on pyqstore.flow's local runner.

    \b
    Example:
      qstore-bench flow chain --items 2000000 --layout shared,per-node
      qstore-bench flow widefinder --size 256M --parsers 1,2,4
      qstore-bench flow wordcount --size 64M --mappers 2 --reducers 2
      qstore-bench flow tune --batches 10,100,1000 --parallelism 1,2,4
    """


@flow.command()
@click.option("--items", "n", type=click.IntRange(1), default=2_000_000, show_default=True,
              help="36-byte items through the chain")
@click.option("--batch", type=click.IntRange(1), default=1000, show_default=True,
              help="items per firing (and per transaction of the loop)")
@click.option("--layout", "layouts", default=",".join(LAYOUTS), show_default=True,
              help="comma-separated casket layouts of the runner, measured side by side "
                   "(shared, per-node: whichever the runner accepts; the others are listed "
                   "with the reason)")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="rounds (loop, then each layout), medians reported")
@_sync_option
@_out_options
def chain(n: int, batch: int, layouts: str, reps: int, sync: bool, base: Optional[str],
          json_path: Optional[str]) -> None:
    """The runner's cost: a 3-stage chain (source -> identity -> tally) of
    36-byte items in batches, end to end, against one process doing the
    same puts and gets on one casket in a loop, in the same run.  Required:
    ratio >= 0.5 (a line says met or NOT MET; the exit status is not the
    verdict, as for bench/scripts); the goal is 1 M items/s.

    \b
    Example:
      qstore-bench flow chain --items 2000000 --batch 1000 --layout shared,per-node
    """
    lays = [x.strip() for x in layouts.split(",") if x.strip()]
    if not lays:
        raise click.BadParameter("name at least one layout", param_hint="--layout")
    bar = _Bar(reps * (1 + len(lays)), "flow chain")
    try:
        result = fb.chain(n, batch, sync, lays, reps, base, bar)
    except (AssertionError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        bar.close()
    _header_machine(result["machine"])
    click.echo(f"# layouts: {result['layouts_found']}")
    _print(chain_tables(result))
    for r in result["chain"]:
        click.echo(f"layout {r['layout']}: {r['items_per_s']:,.0f} items/s end to end, "
                   f"{r['ratio']:.2f}x the loop (required 0.5: "
                   f"{'met' if r['ratio'] >= 0.5 else 'NOT MET'}), "
                   f"{r['items_per_s'] / 1e6:.0%} of the 1 M items/s goal")
    if result["faster"]:
        f = result["faster"]
        click.echo(f"faster layout: {f['layout']}, {f['by']:.2f}x {f['than']}")
    _save(result, json_path)


@flow.command()
@click.option("--size", default="256M", show_default=True,
              help="bytes of log to generate (widefinder.generate), e.g. 256M")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="read this log file instead of generating one")
@click.option("--parsers", default="1,2,4", show_default=True,
              help="parser instances (processes)")
@click.option("--blocks", default="1M,16M,64M", show_default=True,
              help="block sizes (bytes of whole lines per item), 1 byte to 64M")
@click.option("--strategies", default=",".join(fb.STRATEGIES), show_default=True,
              help="mapreduce (each parser's counts in its state, merged at the end), refs "
                   "(every hit an item to one shared counter node, a record per article "
                   "updated in its transactions), agents (each block's counts one message to "
                   "an aggregator node)")
@click.option("--seed", type=int, default=4, show_default=True, help="the generator's seed")
@_sync_option
@_out_options
def widefinder(size: str, log_path: Optional[str], parsers: str, blocks: str, strategies: str,
               seed: int, sync: bool, base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 004 as a flow: a log file -> parse lines in blocks (P parser
    instances) -> count the article fetches per key -> top 10, by the seed's
    three strategies, against the single-threaded loop over the file
    (widefinder.count_baseline).  Seconds and lines/s per run, best and
    worst per strategy, and where the time goes (per node: seconds in its
    work against its instances' time).  Every answer must equal the loop's
    (exit status 1 otherwise).

    \b
    Example:
      qstore-bench flow widefinder --size 256M --parsers 1,2,4 --blocks 1M,16M,64M
    """
    ps = _positive_list(parsers, "--parsers")
    bs = sorted({_size(x) for x in blocks.split(",") if x.strip()})
    if not bs:
        raise click.BadParameter("give at least one block size", param_hint="--blocks")
    ss = [s.strip() for s in strategies.split(",") if s.strip()]
    if not ss or any(s not in fb.STRATEGIES for s in ss):
        raise click.BadParameter(f"strategies are {', '.join(fb.STRATEGIES)}",
                                 param_hint="--strategies")
    bar = _Bar(len(ps) * len(bs) * len(ss) + len(bs), "flow widefinder")
    try:
        result = fb.widefinder(ps, bs, ss, _size(size), log_path, seed, sync, base, bar)
    except (AssertionError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        bar.close()
    _header_machine(result["machine"])
    lg = result["log"]
    click.echo(f"log: {lg['bytes']:,} bytes, {lg['lines']:,} lines, {result['matches']:,} "
               f"article fetches of {result['articles']:,} articles")
    _print(widefinder_tables(result))
    click.echo("every run counted what the baseline counted: "
               f"{'yes' if result['all_correct'] else 'NO'}")
    _save(result, json_path)
    if not result["all_correct"]:
        sys.exit(1)


@flow.command()
@click.option("--size", default="64M", show_default=True, help="bytes of text to generate")
@click.option("--mappers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--reducers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--block", default="1M", show_default=True,
              help="bytes of whole lines per item of the source")
@click.option("--reps", type=click.IntRange(1), default=1, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@_sync_option
@_out_options
def wordcount(size: str, mappers: int, reducers: int, block: str, reps: int, seed: int,
              sync: bool, base: Optional[str], json_path: Optional[str]) -> None:
    """Seed 001's Hadoop WordCount as a flow: map (a Counter per block: the
    reducer as combiner) -> partitioned by word -> reduce (a record per
    word in its state), against collections.Counter over the input; the
    answer must be the same, word for word (exit status 1 otherwise).

    \b
    Example:
      qstore-bench flow wordcount --size 64M --mappers 2 --reducers 2
    """
    bar = _Bar(2 * reps, "flow wordcount")
    try:
        result = fb.wordcount(mappers, reducers, _size(block), _size(size), seed, sync, reps,
                              base, bar)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None
    finally:
        bar.close()
    _header_machine(result["machine"])
    _print(wordcount_tables(result))
    click.echo(f"the flow's counts equal collections.Counter's: "
               f"{'yes' if result['correct'] else 'NO'}")
    _save(result, json_path)
    if not result["correct"]:
        sys.exit(1)


@flow.command("tune")
@click.option("--batches", default="10,100,1000", show_default=True,
              help="items per firing of every node (the edges' batch size)")
@click.option("--parallelism", "parallelism", default="1,2,4", show_default=True,
              help="instances of the work node")
@click.option("--items", "n", type=click.IntRange(1), default=100_000, show_default=True,
              help="items through the flow per cell")
@click.option("--work-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="CPU microseconds of work per item in the work node (seed 002's slow "
                   "writes)")
@click.option("--fix", "fixes", multiple=True, metavar="KNOB=VALUE",
              help="hold KNOB (parallelism or batch) at VALUE for the other's optimum")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="heat map of the measurements with the fitted contours")
@_sync_option
@_out_options
def tune_flow(batches: str, parallelism: str, n: int, work_us: float, fixes: tuple[str, ...],
              plot_path: Optional[str], sync: bool, base: Optional[str],
              json_path: Optional[str]) -> None:
    """Seed 002's two knobs on a flow: the batch size of the edges (items
    per firing) x the work node's parallelism, items/s from the first to
    the last firing, then the seed's models (items_per_s ~ parallelism +
    I(parallelism^2) + batch + I(batch^2)) and optima, as `tune` prints them.

    \b
    Example:
      qstore-bench flow tune --batches 10,100,1000 --parallelism 1,2,4 --work-us 20
    """
    fix = _fixes(fixes, ("parallelism", "batch"))
    b_list, p_list = _int_list(batches), _int_list(parallelism)
    bar = _Bar(len(b_list) * len(p_list), "flow tune")
    try:
        result = fb.tune(b_list, p_list, n, work_us, sync, base, bar, fix)
    except (AssertionError, RuntimeError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        bar.close()
    _header_machine(result["machine"])
    click.echo(f"items/s (first to last firing), source -> work x parallelism ({work_us:g} us "
               f"per item) -> tally, {n:,} items, {'sync' if sync else 'no sync'}")
    _tune_table(result["cells"], "parallelism")
    _print_models(result["models"])
    if plot_path:
        _plot_tune(result, plot_path)
        click.echo(f"# plot written to {plot_path}")
    _save(result, json_path)


# `flow ray` registers itself on the group, which is whole by now (cli_ray
# imports names from this module)
from . import cli_ray  # noqa: E402,F401
