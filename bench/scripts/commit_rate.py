#!/usr/bin/env python3
"""Synced commits per second: the physical floor, pyqstore, group commit.

  floor        a 4 KiB pwrite at a fixed offset of a preallocated file, then
               fdatasync (fsync where there is none), repeated
  pyqstore-1   one thread, ``c.put(key_i, 36-byte value)`` autocommit with
               sync=True: one durable commit per put
  pyqstore-T   T threads (default 8) doing the same on one shared Casket:
               commits may share one log sync (group commit)
  floor-T      T threads, each a 4 KiB pwrite at its own offset of one file
               + fdatasync: the device's own gain from concurrent syncs
  sqlite3      WAL, synchronous=FULL, one INSERT per autocommit
  lmdb         py-lmdb sync=True, one put per write transaction

Each measurement runs for --seconds on a fresh file in the bench directory
after a few untimed operations.  The whole list is run --rounds times,
alternating (floor, pyqstore-1, pyqstore-T, floor-T, sqlite3, lmdb,
floor, ...) so
that noise on the disk hits all of them; medians are reported.

Requirements printed as PASS/FAIL (the exit status is 0 unless pyqstore
could not run at all): pyqstore-1 >= 0.9 x floor; pyqstore-T > 4 x
pyqstore-1.

bench_pyqstore and bench_floor_threads live in qstore_bench/commit_rate.py,
where `qstore-bench goals` times them too.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from qstore_bench.commit_rate import VALUE, WARMUP_OPS, fdatasync
from qstore_bench.commit_rate import floor_threads as bench_floor_threads
from qstore_bench.commit_rate import pyqstore as bench_pyqstore


def bench_floor(d, seconds):
    path = os.path.join(d, "floor.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        size = 1 << 20
        os.write(fd, b"\0" * size)          # preallocated, really written
        os.fsync(fd)
        buf = os.urandom(4096)
        for _ in range(WARMUP_OPS):
            os.pwrite(fd, buf, 0)
            fdatasync(fd)
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            os.pwrite(fd, buf, 0)
            fdatasync(fd)
            n += 1
            if (n & 7) == 0 and time.perf_counter() >= deadline:
                break
        t1 = time.perf_counter()
    finally:
        os.close(fd)
    return {"ops": n, "seconds": t1 - t0, "per_s": n / (t1 - t0)}


def bench_sqlite3(d, seconds):
    import sqlite3
    db = sqlite3.connect(os.path.join(d, "commit.sqlite"),
                         isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (k BLOB PRIMARY KEY, v BLOB)")
        ins = "INSERT INTO t (k, v) VALUES (?, ?)"
        for i in range(WARMUP_OPS):
            db.execute(ins, (b"warm%d" % i, VALUE))
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            db.execute(ins, (b"k%010d" % n, VALUE))   # autocommit
            n += 1
            if (n & 7) == 0 and time.perf_counter() >= deadline:
                break
        t1 = time.perf_counter()
    finally:
        db.close()
    return {"ops": n, "seconds": t1 - t0, "per_s": n / (t1 - t0)}


def bench_lmdb(d, seconds):
    import lmdb
    env = lmdb.open(os.path.join(d, "lmdb"), map_size=1 << 30, sync=True,
                    metasync=True)
    try:
        for i in range(WARMUP_OPS):
            with env.begin(write=True) as txn:
                txn.put(b"warm%d" % i, VALUE)
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            with env.begin(write=True) as txn:
                txn.put(b"k%010d" % n, VALUE)
            n += 1
            if (n & 7) == 0 and time.perf_counter() >= deadline:
                break
        t1 = time.perf_counter()
    finally:
        env.close()
    return {"ops": n, "seconds": t1 - t0, "per_s": n / (t1 - t0)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="length of each measurement (default 2)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds; medians reported (default 3)")
    ap.add_argument("--threads", type=int, default=8,
                    help="writer threads for group commit (default 8)")
    ap.add_argument("--dir", default=None,
                    help="bench directory (default: a new temp dir)")
    ap.add_argument("--json", metavar="FILE", help="write all results here")
    args = ap.parse_args(argv)

    own_dir = args.dir is None
    base = tempfile.mkdtemp(prefix="commit_rate-") if own_dir else args.dir
    os.makedirs(base, exist_ok=True)
    pq_many = "pyqstore-%d" % args.threads
    plan = [
        ("floor", lambda d: bench_floor(d, args.seconds)),
        ("pyqstore-1", lambda d: bench_pyqstore(d, args.seconds, 1)),
        (pq_many, lambda d: bench_pyqstore(d, args.seconds, args.threads)),
        ("floor-%d" % args.threads,
         lambda d: bench_floor_threads(d, args.seconds, args.threads)),
        ("sqlite3", lambda d: bench_sqlite3(d, args.seconds)),
        ("lmdb", lambda d: bench_lmdb(d, args.seconds)),
    ]
    runs = {name: [] for name, _ in plan}
    errors = {}
    print("commit_rate: python %s, %s, dir %s, %d rounds of %.1fs each"
          % (platform.python_version(), platform.platform(), base,
             args.rounds, args.seconds), flush=True)
    try:
        for rnd in range(args.rounds):
            for name, fn in plan:
                if name in errors:
                    continue
                d = tempfile.mkdtemp(prefix=name + "-", dir=base)
                try:
                    r = fn(d)
                    runs[name].append(r)
                    print("  round %d %-12s %10.0f /s" % (rnd + 1, name,
                                                          r["per_s"]),
                          flush=True)
                except ImportError as e:
                    errors[name] = "skipped: %s" % e
                except Exception as e:
                    errors[name] = "ERROR: %s: %s" % (type(e).__name__, e)
                finally:
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)

    med = {}
    for name, rs in runs.items():
        if rs:
            med[name] = statistics.median(r["per_s"] for r in rs)
    floor = med.get("floor")

    print()
    hdr = "%-12s %12s %12s %12s %10s %10s" % (
        "what", "per_s med", "min", "max", "vs floor", "sync/commit")
    print(hdr)
    print("-" * len(hdr))
    for name, _ in plan:
        rs = runs[name]
        if not rs:
            print("%-12s %s" % (name, errors.get(name, "not measured")))
            continue
        vals = [r["per_s"] for r in rs]
        spc = [r["syncs_per_commit"] for r in rs if "syncs_per_commit" in r]
        print("%-12s %12.0f %12.0f %12.0f %10s %10s" % (
            name, med[name], min(vals), max(vals),
            "%.2fx" % (med[name] / floor) if floor else "-",
            "%.3f" % statistics.median(spc) if spc else "-"))
    print("(per_s: synced commits per second; floor: 4 KiB pwrite + "
          "fdatasync per second)")

    print()
    checks = []

    def check(name, ok, detail):
        word = "PASS" if ok else ("FAIL" if ok is not None else "SKIP")
        checks.append({"check": name, "result": word, "detail": detail})
        print("%s  %s: %s" % (word, name, detail))

    one = med.get("pyqstore-1")
    many = med.get(pq_many)
    if one and floor:
        check("pyqstore-1 commits/s >= 0.9 x floor", one >= 0.9 * floor,
              "%.0f vs %.0f (%.2fx)" % (one, floor, one / floor))
    else:
        check("pyqstore-1 commits/s >= 0.9 x floor", None,
              errors.get("pyqstore-1", "not measured"))
    if one and many:
        check("%s commits/s > 4 x pyqstore-1" % pq_many, many > 4 * one,
              "%.0f vs %.0f (%.2fx)" % (many, one, many / one))
    else:
        check("%s commits/s > 4 x pyqstore-1" % pq_many, None,
              errors.get(pq_many, "not measured"))

    floor_many = med.get("floor-%d" % args.threads)
    if many and floor_many:
        print("INFO  %s / floor-%d (concurrent syncs on this device): "
              "%.0f vs %.0f (%.2fx)" % (pq_many, args.threads, many,
                                        floor_many, many / floor_many))

    if args.json:
        out = {"benchmark": "commit_rate", "python": sys.version,
               "platform": platform.platform(), "seconds": args.seconds,
               "rounds": args.rounds, "threads": args.threads,
               "medians_per_s": med, "runs": runs, "errors": errors,
               "checks": checks}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote", args.json)

    ours_failed = [n for n in ("pyqstore-1", pq_many) if n in errors]
    if ours_failed:
        print("error: %s could not run" % ", ".join(ours_failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
