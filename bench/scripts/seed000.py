#!/usr/bin/env python3
"""Seed 000 reproduced: Tokyo Cabinet as a multi-queue store.

For n = 1, 10, ..., 10**max, one transaction of n items, each item
``putdup(b"QUEUE", uuid)`` and ``putdup(uuid, uuid)`` with random uuid4
strings, committed with sync on, on a fresh file.  Backends side by side:

  pyqstore        Casket: a putdup loop inside ``with c.transaction()``
  pyqstore-batch  Casket: one ``putdup_many`` of all 2n pairs
  native          qstore-bench's C driver (qstore_bench/native_seed.c over
                  qstore.h): the same work driven in C
  lmdb            py-lmdb, a dupsort sub-database, ``txn.put`` loop, sync
  sqlite3         WAL, synchronous=FULL, table (k BLOB, v BLOB) indexed on
                  k, ``executemany`` inside one transaction

Every measurement runs in a fresh subprocess (``--_one BACKEND N``) so that
its peak RSS (VmHWM) is its own.  The uuids are made before the clock
starts; the clock stops when the commit has returned.  Anything a backend
derives from the list of ids (the pair list, the joined buffer) is timed.
Opening the file (and creating the sqlite schema) is not timed; closing is
not timed.

The requirement checks are printed as PASS/FAIL; the exit status is 0 unless
a pyqstore backend could not run at all.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

QUEUE = b"QUEUE"
ID_LEN = 36
BACKENDS = ["pyqstore", "pyqstore-batch", "native", "lmdb", "sqlite3"]
OURS = {"pyqstore", "pyqstore-batch", "native"}


class Skip(Exception):
    """A peer that cannot run here (not installed, map full...)."""


# --------------------------------------------------------------------------
# the child: one measurement


def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    if field == "VmHWM":
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r // 1024 if sys.platform == "darwin" else r
    return None


def _dir_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def run_pyqstore(d, ids):
    import pyqstore
    c = pyqstore.open(os.path.join(d, "seed.qdb"), "n", sync=True)
    try:
        putdup = c.putdup
        q = QUEUE
        t0 = time.perf_counter()
        with c.transaction():
            for u in ids:
                putdup(q, u)
                putdup(u, u)
        t1 = time.perf_counter()
        extra = _pyqstore_stats(c)
    finally:
        c.close()
    return t1 - t0, extra


def run_pyqstore_batch(d, ids):
    import pyqstore
    c = pyqstore.open(os.path.join(d, "seed.qdb"), "n", sync=True)
    try:
        q = QUEUE
        t0 = time.perf_counter()
        pairs = []
        append = pairs.append
        for u in ids:
            append((q, u))
            append((u, u))
        with c.transaction():
            c.putdup_many(pairs)
        t1 = time.perf_counter()
        extra = _pyqstore_stats(c)
    finally:
        c.close()
    return t1 - t0, extra


def _pyqstore_stats(c):
    try:
        st = c.stats()
        keys = ("records", "syncs", "commits", "spilled_pages", "pages")
        return {k: st[k] for k in keys if k in st}
    except Exception as e:  # stats are a bonus, never a failure
        return {"stats_error": repr(e)}


def run_native(d, ids):
    try:
        from qstore_bench.native import NativeCasket
    except ImportError as e:
        raise Skip("qstore-bench's native driver is not built (pip install ./bench): %s" % e)
    c = NativeCasket(os.path.join(d, "seed.qdb"), sync=True)
    try:
        t0 = time.perf_counter()
        c.seed(ids, QUEUE)
        t1 = time.perf_counter()
        extra = c.stats()
    finally:
        c.close()
    return t1 - t0, extra


def run_lmdb(d, ids):
    try:
        import lmdb
    except ImportError:
        raise Skip("py-lmdb is not installed (pip install lmdb)")
    n = len(ids)
    map_size = (4 << 30) if n <= 10**6 else (32 << 30)
    env = lmdb.open(os.path.join(d, "lmdb"), map_size=map_size, max_dbs=2,
                    sync=True, metasync=True)
    try:
        db = env.open_db(b"seed", dupsort=True)
        q = QUEUE
        t0 = time.perf_counter()
        try:
            with env.begin(write=True, db=db) as txn:
                put = txn.put
                for u in ids:
                    put(q, u, dupdata=True)
                    put(u, u, dupdata=True)
        except lmdb.MapFullError as e:
            raise Skip("lmdb map full at map_size=%d GiB: %s"
                       % (map_size >> 30, e))
        t1 = time.perf_counter()
    finally:
        env.close()
    return t1 - t0, {"lmdb_version": lmdb.__version__}


def run_sqlite3(d, ids):
    import sqlite3
    db = sqlite3.connect(os.path.join(d, "seed.sqlite"), isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE q (k BLOB, v BLOB)")
        db.execute("CREATE INDEX q_k ON q(k)")
        q = QUEUE

        def rows():
            for u in ids:
                yield (q, u)
                yield (u, u)

        t0 = time.perf_counter()
        db.execute("BEGIN")
        db.executemany("INSERT INTO q (k, v) VALUES (?, ?)", rows())
        db.execute("COMMIT")
        t1 = time.perf_counter()
    finally:
        db.close()
    return t1 - t0, {"sqlite_version": sqlite3.sqlite_version}


RUNNERS = {
    "pyqstore": run_pyqstore,
    "pyqstore-batch": run_pyqstore_batch,
    "native": run_native,
    "lmdb": run_lmdb,
    "sqlite3": run_sqlite3,
}


def one(backend, n, base):
    """Runs one measurement in this process; returns a dict."""
    ids = [str(uuid.uuid4()).encode() for _ in range(n)]
    assert all(len(u) == ID_LEN for u in ids)
    d = tempfile.mkdtemp(prefix="seed000-%s-" % backend, dir=base)
    res = {"backend": backend, "n": n}
    try:
        res["rss_before_kb"] = _status_kb("VmRSS")
        try:
            secs, extra = RUNNERS[backend](d, ids)
        except Skip as e:
            res["skipped"] = str(e)
            return res
        res["seconds"] = secs
        res.update(extra)
        res["disk_bytes"] = _dir_bytes(d)
        res["peak_rss_kb"] = _status_kb("VmHWM")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return res


def child_main(backend, n, base):
    try:
        res = one(backend, n, base)
    except BaseException as e:  # reported to the parent, which goes on
        import traceback
        res = {"backend": backend, "n": n, "error": "%s: %s" % (
            type(e).__name__, e), "traceback": traceback.format_exc()}
    sys.stdout.write("\n" + json.dumps(res) + "\n")
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------
# the parent: drive the children, summarise


def measure(backend, n, base, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--_one", backend,
           str(n), "--dir", base]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"backend": backend, "n": n,
                "error": "timed out after %ss" % timeout}
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        res = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (p.stderr or p.stdout or "").strip().splitlines()[-5:]
        res = {"backend": backend, "n": n,
               "error": "child exited %d: %s" % (p.returncode,
                                                 " | ".join(tail))}
    return res


def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e3:
        return "%.1fk" % (x / 1e3)
    return "%.0f" % x


def summarise(runs, n):
    secs = [r["seconds"] for r in runs if "seconds" in r]
    if not secs:
        return None
    med = statistics.median(secs)
    peak = max((r.get("peak_rss_kb") or 0) for r in runs)
    before = max((r.get("rss_before_kb") or 0) for r in runs)
    return {
        "seconds_median": med, "seconds_min": min(secs),
        "seconds_max": max(secs), "reps": len(secs),
        "us_per_item": med / n * 1e6, "items_per_s": n / med,
        "peak_rss_mb": peak / 1024.0, "rss_before_mb": before / 1024.0,
        "disk_mb": statistics.median(r.get("disk_bytes", 0)
                                     for r in runs) / 2**20,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=6,
                    help="largest n is 10**MAX (default 6; up to 7)")
    ap.add_argument("--reps", type=int, default=3,
                    help="timed repetitions per (backend, n); default 3")
    ap.add_argument("--dir", default=None,
                    help="directory for the temporary files "
                         "(default: the system temp dir)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated subset of " + ",".join(BACKENDS))
    ap.add_argument("--json", metavar="FILE", help="write all results here")
    ap.add_argument("--timeout", type=float, default=3600,
                    help="seconds allowed for one measurement")
    ap.add_argument("--_one", nargs=2, metavar=("BACKEND", "N"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._one:
        backend, n = args._one[0], int(args._one[1])
        return child_main(backend, n, args.dir or tempfile.gettempdir())

    if not 0 <= args.max <= 7:
        ap.error("--max must be 0..7")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in RUNNERS:
            ap.error("unknown backend %r" % b)

    own_dir = args.dir is None
    base = tempfile.mkdtemp(prefix="seed000-") if own_dir else args.dir
    os.makedirs(base, exist_ok=True)
    ns = [10**i for i in range(args.max + 1)]
    results = {}       # (backend, n) -> list of runs
    warmups = {}       # (backend, n) -> the excluded warm-up run
    skipped = {}       # (backend, n) -> reason
    errors = {}        # (backend, n) -> message
    print("seed000: python %s, %s, dir %s, reps %d (+1 untimed warm-up each, "
          "excluded)" % (platform.python_version(), platform.platform(),
                         base, args.reps), flush=True)
    try:
        for n in ns:
            t_n = time.perf_counter()
            # Warm-up first for every backend, then the reps interleaved
            # across backends so that drift in the machine hits them all.
            for b in backends:
                r = measure(b, n, base, args.timeout)
                warmups[(b, n)] = r
                if "skipped" in r:
                    skipped[(b, n)] = r["skipped"]
                elif "error" in r:
                    errors[(b, n)] = r["error"]
            for _rep in range(args.reps):
                for b in backends:
                    if (b, n) in skipped or (b, n) in errors:
                        continue
                    r = measure(b, n, base, args.timeout)
                    if "skipped" in r:
                        skipped[(b, n)] = r["skipped"]
                    elif "error" in r:
                        errors[(b, n)] = r["error"]
                    else:
                        results.setdefault((b, n), []).append(r)
            print("  n=%-9d done in %.1fs" % (n, time.perf_counter() - t_n),
                  flush=True)
    finally:
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)

    summary = {}
    for (b, n), runs in results.items():
        s = summarise(runs, n)
        if s:
            summary[(b, n)] = s

    # ---- the table
    print()
    hdr = ("%-9s %-15s %11s %11s %11s %10s %10s %9s %9s"
           % ("n", "backend", "s/txn med", "min", "max", "us/item",
              "items/s", "peakRSS", "disk"))
    print(hdr)
    print("-" * len(hdr))
    for n in ns:
        for b in backends:
            s = summary.get((b, n))
            if s:
                print("%-9d %-15s %11.6f %11.6f %11.6f %10.2f %10s %8.0fM "
                      "%8.1fM" % (n, b, s["seconds_median"], s["seconds_min"],
                                  s["seconds_max"], s["us_per_item"],
                                  fmt_rate(s["items_per_s"]),
                                  s["peak_rss_mb"], s["disk_mb"]))
            elif (b, n) in skipped:
                print("%-9d %-15s skipped: %s" % (n, b, skipped[(b, n)]))
            elif (b, n) in errors:
                print("%-9d %-15s ERROR: %s" % (n, b, errors[(b, n)][:300]))
    print("(warm-up run at each n and backend: excluded from the figures; "
          "peakRSS = VmHWM of the measuring process, uuids included)")

    # ---- ratios of items/s
    peers = [p for p in ("lmdb", "sqlite3") if p in backends]
    ours = [b for b in backends if b in OURS]
    if peers and ours:
        print()
        cols = ["%s/%s" % (o, p) for o in ours for p in peers]
        print("%-9s " % "n" + " ".join("%22s" % c for c in cols))
        for n in ns:
            cells = []
            for o in ours:
                for p in peers:
                    a, z = summary.get((o, n)), summary.get((p, n))
                    cells.append("%21.2fx" % (a["items_per_s"] /
                                              z["items_per_s"])
                                 if a and z else "%22s" % "-")
            print("%-9d " % n + " ".join(cells))

    # ---- requirement checks
    print()
    checks = []

    def check(name, ok, detail):
        word = "PASS" if ok else ("FAIL" if ok is not None else "SKIP")
        checks.append({"check": name, "result": word, "detail": detail})
        print("%s  %s: %s" % (word, name, detail))

    big = [n for n in ns if n >= 1000]
    if not big:
        check("pyqstore >= lmdb and >= 2x sqlite3 items/s at n >= 1000",
              None, "no n >= 1000 in this run (--max >= 3)")
    for n in big:
        a = summary.get(("pyqstore", n))
        for peer, factor in (("lmdb", 1.0), ("sqlite3", 2.0)):
            z = summary.get((peer, n))
            name = "n=%d pyqstore items/s >= %s%s" % (
                n, "" if factor == 1 else "%gx " % factor, peer)
            if not a or not z:
                why = skipped.get((peer, n)) or errors.get((peer, n)) or \
                    errors.get(("pyqstore", n)) or "not measured"
                check(name, None, why)
                continue
            ratio = a["items_per_s"] / z["items_per_s"]
            check(name, ratio >= factor, "%s vs %s items/s (%.2fx)" % (
                fmt_rate(a["items_per_s"]), fmt_rate(z["items_per_s"]),
                ratio))
    a4, a6 = summary.get(("pyqstore", 10**4)), summary.get(("pyqstore", 10**6))
    name = "pyqstore us/item at 10^6 within 1.5x of 10^4"
    if a4 and a6:
        ratio = a6["us_per_item"] / a4["us_per_item"]
        check(name, ratio <= 1.5, "%.2f vs %.2f us/item (%.2fx)" % (
            a6["us_per_item"], a4["us_per_item"], ratio))
    else:
        check(name, None, "needs n = 10^4 and 10^6 (--max >= 6)")

    if args.json:
        out = {
            "benchmark": "seed000",
            "python": sys.version, "platform": platform.platform(),
            "reps": args.reps, "ns": ns, "backends": backends,
            "results": [dict(backend=b, n=n, **s)
                        for (b, n), s in sorted(summary.items(),
                                                key=lambda kv: (kv[0][1],
                                                                kv[0][0]))],
            "runs": [r for runs in results.values() for r in runs],
            "warmups_excluded": list(warmups.values()),
            "skipped": [{"backend": b, "n": n, "reason": r}
                        for (b, n), r in skipped.items()],
            "errors": [{"backend": b, "n": n, "error": r}
                       for (b, n), r in errors.items()],
            "checks": checks,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote", args.json)

    ours_failed = sorted({b for (b, _n) in errors if b in OURS})
    if ours_failed:
        print("error: %s could not run; see above" % ", ".join(ours_failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
