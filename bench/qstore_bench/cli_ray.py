"""`qstore-bench flow ray`: the chain on Ray (raybench.py measures, this
module prints and saves).  The command runs only in a network namespace
with loopback alone and re-executes itself there (pyqstore.flow.netns)."""
from __future__ import annotations

import importlib.util
import statistics
import sys
from typing import Any, Optional

import click

from pyqstore.flow.netns import only_loopback, reexec_in_loopback

from .cli import _header_machine, _save, _table
from .cli_flow import _out_options, _sync_option, flow


def _loopback_or_reexec() -> None:
    """Return in a loopback-only namespace; else run this command again in
    a new one (it never returns) or fail when that was tried already."""
    if only_loopback():
        return
    try:
        reexec_in_loopback([sys.executable, sys.argv[0], *sys.argv[1:]])
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None


def _rate(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f}"


@flow.command("ray")
@click.option("--items", "n", type=click.IntRange(1), default=2_000_000, show_default=True,
              help="36-byte items through each chain")
@click.option("--batch", type=click.IntRange(1), default=1000, show_default=True,
              help="items per batch (per firing of the flow, per actor call of the baseline)")
@click.option("--kill-items", type=click.IntRange(1), default=None,
              help="items of the run whose middle stage's worker is replaced at 30 %% "
                   "(default: --items)")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="rounds of baseline then flow; the best of each is reported")
@_sync_option
@_out_options
def ray_chain(n: int, batch: int, kill_items: Optional[int], reps: int, sync: bool,
              base: Optional[str], json_path: Optional[str]) -> None:
    """The 3-stage chain on Ray (a head and two workers on this machine,
    loopback only): pyqstore's flow (every node an actor with its own
    casket, exactly-once edges) against the same chain whose actors pass
    batches in memory with no store, what a Ray user writes today.
    Required: ratio >= 0.5.  Then the cost of a node kill: the worker
    hosting the middle stage is replaced mid-run; the tally's rate before,
    its lowest after, and the seconds until it is back to half.

    \b
    Example (a quiet machine; re-executes itself under unshare -n):
      qstore-bench flow ray --items 2000000 --batch 1000 --reps 3
    """
    if importlib.util.find_spec("ray") is None:
        raise click.ClickException("Ray is not installed: pip install 'pyqstore[ray]'")
    _loopback_or_reexec()
    from . import raybench as rb

    try:
        result = rb.measure(n, batch, kill_items or n, sync=sync, reps=reps, base=base)
    except (AssertionError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    _header_machine(result["machine"])
    for title, head, rows in ray_tables(result):
        click.echo(f"\n# {title}")
        _table(head, rows)
    rounds = result["round_ratios"]
    click.echo(f"each round's ratio (its flow over the baseline run beside it): median "
               f"{statistics.median(rounds):.3f}, min {min(rounds):.3f}, max {max(rounds):.3f}")
    click.echo(f"flow on Ray: {result['flow']['flowing_items_per_s']:,.0f} items/s flowing, "
               f"{result['ratio']:.2f}x the in-memory chain (required 0.5: "
               f"{'met' if result['ok'] else 'NOT MET'})")
    _save(result, json_path)


def ray_tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    b, f, k = result["baseline"], result["flow"], result["kill"]
    back = k["recovery_s"]
    return [
        (f"the chain on Ray: {result['items']:,} items of {result['item_bytes']} bytes, batches "
         f"of {result['batch']}, {'sync' if result['sync'] else 'no sync'}, best of "
         f"{result['reps']}; flowing: the source's first firing to the tally's last (the "
         f"baseline's clock starts once its actors answer, so it has no actor starts either); "
         f"ratio = flowing items/s over the in-memory chain's (required >= 0.5)",
         ["run", "seconds", "items/s", "flowing s", "flowing items/s", "ratio"],
         [["actors passing batches in memory, no store", f"{b['seconds']:.3f}",
           _rate(b["items_per_s"]), f"{b['seconds']:.3f}", _rate(b["items_per_s"]), "1"],
          ["pyqstore flow on Ray (a casket per node)", f"{f['seconds']:.3f}",
           _rate(f["items_per_s"]), f"{f['flowing_s']:.3f}", _rate(f["flowing_items_per_s"]),
           f"{result['ratio']:.3f}"]]),
        (f"a node kill: the worker hosting the middle stage replaced at {k['killed_at']:.1f} s "
         f"of a {k['items']:,}-item run ({k['seconds']:.1f} s)",
         ["items/s before", "lowest after", "seconds to half the rate again",
          "of which the replacement's join"],
         [[_rate(k["rate_before"]), _rate(k["lowest_after"]),
           "never" if back is None else f"{back:.2f}", f"{k['replacement_join_s']:.2f}"]]),
    ]
