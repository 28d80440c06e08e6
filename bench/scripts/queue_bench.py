#!/usr/bin/env python3
"""Queue work from Python, side by side: pyqstore, py-lmdb, sqlite3.

Four lines, 36-byte payloads (uuid4 strings, made before any clock starts),
each backend on a fresh file in the same run:

  put_many   one synced transaction adding n items in one batch call
             (pyqstore Queue.put_many; lmdb cursor.putmulti(append=True) of
             8-byte big-endian sequence keys; sqlite3 executemany), for each n
             in --sizes: the per-item time must stay flat
  put        per-item puts inside one synced transaction (Queue.put;
             txn.put(append=True); execute(INSERT))
  drain      removing --drain items in batches of 1000, each batch its own
             transaction, sync off (Queue.get_many(1000); a cursor reading and
             deleting; SELECT ... LIMIT 1000 then DELETE WHERE id <= last);
             --drain-sync syncs every batch instead
  churn      one put then one get, each committed on its own, sync off
             (Queue.put + get_nowait; two write transactions; INSERT, then
             SELECT + DELETE in one BEGIN IMMEDIATE transaction)

Every line reports items (or pairs) per second and pyqstore's ratio to each
peer, then the issue's requirements as PASS/FAIL, then a breakdown of where
pyqstore's time goes (Python packing, the cffi crossing, the tree, the log
write and sync).  Exit status 0 unless pyqstore itself failed to run.

    python bench/queue_bench.py                      # 10^5, 10^6
    python bench/queue_bench.py --sizes 5,6,7        # the full requirement
    python bench/queue_bench.py --json out.json

The lines' functions live in qstore_bench/queue_lines.py, where
`qstore-bench goals` times them too.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

import pyqstore  # noqa: E402
from pyqstore._qstore import ffi, lib  # noqa: E402
from pyqstore._queue import _LIST_HDR, _framed  # noqa: E402
from qstore_bench import queue_lines as ql  # noqa: E402
from qstore_bench.queue_lines import BACKENDS, PEERS, RUNNERS, Timer, lmdb, payloads  # noqa: E402

# requirement: items/s floor for pyqstore, and whether it must beat the peers
FLOORS = {"put_many": 4e6, "put": 1e6, "drain": 2e6, "churn": 2e5}
MUST_LEAD = {"drain", "churn"}


def measure(line: str, backend: str, pay: list[bytes], base: str, reps: int) -> float:
    """Best items/s over reps runs, each on a fresh directory."""
    best = 0.0
    for _ in range(reps):
        d = tempfile.mkdtemp(dir=base)
        # Every run starts with no dirty pages of an earlier one: otherwise
        # its syncs also pay for writing back the previous cell's gigabytes.
        os.sync()
        try:
            s = RUNNERS[line][backend](d, pay)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        best = max(best, len(pay) / s)
    return best


# --------------------------------------------------------------- breakdown

def breakdown(pay: list[bytes], base: str) -> dict[str, float]:
    """Nanoseconds per item of the parts of pyqstore's put_many, put and
    drain, measured separately."""
    n = len(pay)
    out: dict[str, float] = {}
    d = tempfile.mkdtemp(dir=base)
    try:
        with Timer() as t:
            framed = _framed(pay)
        out["put_many: packing in Python (marshal)"] = t.s / n * 1e9
        c = pyqstore.open(os.path.join(d, "b.qs"), "n", sync=True)
        h = c._c
        with Timer() as t:
            lib.qs_begin(h)
            rc = lib.qs_queue_put_framed(h, b"port", 4, n, ffi.from_buffer(framed) + _LIST_HDR,
                                         len(framed) - _LIST_HDR, ffi.NULL)
            assert rc == 0, rc
        out["put_many: the tree (C, in the transaction)"] = t.s / n * 1e9
        st0 = c.stats()
        with Timer() as t:
            assert lib.qs_commit(h) == 0
        st1 = c.stats()
        out["put_many: commit (log write, sync, checkpoint)"] = t.s / n * 1e9
        out["put_many: checkpoints in that commit"] = st1["checkpoints"] - st0["checkpoints"]
        with Timer() as t:
            f = lib.qs_in_transaction
            for _ in range(n):
                f(h)
        out["cffi crossing, a no-op call"] = t.s / n * 1e9
        qh = ffi.new("qs_queue **")
        assert lib.qs_queue_new(h, b"p2", 2, qh) == 0
        qh = ffi.gc(qh[0], lib.qs_queue_free)
        lib.qs_begin(h)
        with Timer() as t:
            put = lib.qs_queue_put_id
            for p in pay:
                put(qh, p, 36)
        lib.qs_commit(h)
        out["put: C call per item (qs_queue_put_id, no Python method)"] = t.s / n * 1e9
        pp = ffi.new("qs_items **")
        with Timer() as t:
            get, free = lib.qs_queue_get, lib.qs_items_free
            while get(h, b"port", 4, 1000, 0.0, pp) == 0:
                free(pp[0])
        out["drain: C calls only (get_many(1000), synced batches)"] = t.s / n * 1e9
        c.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5,6", help="put_many: exponents of 10 (default 5,6)")
    ap.add_argument("--put", type=int, default=10**6, help="items for the per-item put line")
    ap.add_argument("--drain", type=int, default=10**6, help="items drained")
    ap.add_argument("--churn", type=int, default=10**5, help="put+get pairs")
    ap.add_argument("--drain-sync", action="store_true",
                    help="sync every drain batch (default: sync off, for every backend)")
    ap.add_argument("--reps", type=int, default=2, help="runs per cell; the best counts")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    sizes = [10 ** int(x) for x in args.sizes.split(",")]
    ql.DRAIN_SYNC = args.drain_sync
    base = tempfile.mkdtemp(dir=args.dir, prefix="qbench-")
    unavailable = {} if lmdb else {"lmdb": "py-lmdb is not installed: pip install lmdb"}
    for b, why in unavailable.items():
        print(f"# {b}: unavailable ({why})")
    backends = [b for b in BACKENDS if b not in unavailable]
    results: list[dict] = []
    pay_all = payloads(max(sizes + [args.put, args.drain, args.churn]))
    plan = [("put_many", n) for n in sizes] + [("put", args.put), ("drain", args.drain),
                                                ("churn", args.churn)]
    hdr = f"{'line':<10}{'n':>10}" + "".join(f"{b:>14}" for b in backends) + \
        "".join(f"{'÷' + p:>12}" for p in PEERS if p in backends)
    print("items/s (churn: pairs/s), best of", args.reps)
    print(hdr)
    try:
        for line, n in plan:
            pay = pay_all[:n]
            row = {"line": line, "n": n}
            for b in backends:
                row[b] = measure(line, b, pay, base, args.reps)
            results.append(row)
            print(f"{line:<10}{n:>10}" + "".join(f"{row[b]:>14,.0f}" for b in backends) +
                  "".join(f"{row['pyqstore'] / row[p]:>11.2f}x" for p in PEERS if p in backends),
                  flush=True)
        print("\nrequirements:")
        ok_all = True

        def check(ok: bool, text: str) -> None:
            nonlocal ok_all
            ok_all &= ok
            print(f"  {'PASS' if ok else 'FAIL'}  {text}")

        for row in results:
            line, v = row["line"], row["pyqstore"]
            check(v >= FLOORS[line], f"{line} n={row['n']}: {v:,.0f}/s >= {FLOORS[line]:,.0f}/s")
            if "sqlite3" in row:
                check(v >= 2 * row["sqlite3"], f"{line} n={row['n']}: >= 2x sqlite3 "
                      f"({v / row['sqlite3']:.2f}x)")
            if line in MUST_LEAD and "lmdb" in row:
                check(v > row["lmdb"], f"{line}: ahead of lmdb ({v / row['lmdb']:.2f}x)")
        pm = [r for r in results if r["line"] == "put_many"]
        if len(pm) > 1:
            flat = pm[0]["pyqstore"] / pm[-1]["pyqstore"]
            check(flat <= 1.5, f"put_many flat: per-item time at n={pm[-1]['n']} is "
                  f"{flat:.2f}x that at n={pm[0]['n']} (<= 1.5)")
        print("\nwhere pyqstore's time goes (ns per item, n=%d):" % min(10**6, args.put))
        bd = breakdown(pay_all[:min(10**6, args.put)], base)
        for k, v in bd.items():
            print(f"  {k:<50}{v:>10.1f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"results": results, "breakdown": bd, "unavailable": unavailable,
                           "all_requirements_met": ok_all}, f, indent=2)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
