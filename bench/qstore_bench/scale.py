"""One large run in a process of its own, for the goals table's 10^7 lines:
seed 000's transaction (experiments.sweep_run) or one put_many
(queue_lines "put_many"), timed as those are, with what a run in the
benchmark's own process cannot measure beside it:

  peak RSS   the process's peak resident set while the work ran, less its
             resident set just before (the prepared inputs: 10^7 ids are
             about 800 MiB of Python objects, which are the benchmark's,
             not the store's).  VmHWM is reset first (/proc/self/clear_refs).
  written    bytes the run caused to be sent to storage: /proc/self/io's
             write_bytes, which the kernel counts as pages are dirtied
             (write(2), pwrite(2) and stores through a shared mapping alike;
             a page dirtied again before its writeback counts once).
  file       the bytes the store's files hold at the end (st_blocks, so a
             sparse map counts what it uses).

    python -m qstore_bench.scale --work sweep --backend pyqstore --n 10000000 --dir D

prints one JSON object: items, seconds, items_per_s, peak_rss_bytes,
written_bytes, file_bytes.  Exit status 0, or 1 with the error on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Callable

WORKS = ("sweep", "put_many")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _write_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes")


def _disk_bytes(d: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(d):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def measured(run: Callable[[Callable[[str], None]], float]) -> dict[str, Any]:
    """run(at_end) does the work and returns its seconds, calling at_end
    with the store's directory once the store is closed and before it is
    removed; the figures around it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")            # VmHWM := VmRSS
    before_rss = _status_kib("VmRSS") * 1024
    before_written = _write_bytes()
    files: list[int] = []
    seconds = run(lambda d: files.append(_disk_bytes(d)))
    written = _write_bytes() - before_written
    peak = _status_kib("VmHWM") * 1024 - before_rss
    if not files:
        raise RuntimeError("the run did not report its store's directory")
    return {"seconds": seconds, "peak_rss_bytes": peak, "written_bytes": written,
            "file_bytes": files[0]}


def run_sweep(backend: str, n: int, base: str, seed: int) -> dict[str, Any]:
    from . import backends as bk
    from .experiments import Workdir, make_ids, sweep_run
    b = bk.by_name([backend])[0]
    ids = make_ids(n, 36, random.Random(seed))
    with Workdir(base) as wd, b.session(True) as session:
        out = measured(lambda at_end: sweep_run(b, session, wd, True, "casket",
                                                lambda: ids, at_end=at_end))
    return {"items": n, **out}


def run_put_many(backend: str, n: int, base: str, seed: int) -> dict[str, Any]:
    from . import queue_lines
    from .experiments import Workdir
    del seed        # payloads are uuid4 strings, as the put_many line's
    put_many = queue_lines.RUNNERS["put_many"][backend]
    pay = queue_lines.payloads(n)
    with Workdir(base) as wd:
        d = wd.fresh()

        def run(at_end: Callable[[str], None]) -> float:
            seconds = put_many(d, pay)      # opens, puts, closes in d
            at_end(d)
            return seconds
        out = measured(run)
    return {"items": n, **out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", choices=WORKS, required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--dir", required=True, help="where the store's files go")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be at least 1")
    try:
        run = run_sweep if args.work == "sweep" else run_put_many
        out = run(args.backend, args.n, args.dir, args.seed)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises
        print(f"{args.work} {args.backend} n={args.n}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    out["items_per_s"] = out["items"] / out["seconds"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
