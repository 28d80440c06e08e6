#!/usr/bin/env python3
"""Space reuse under steady put/remove churn.

Two workloads, each on a fresh casket, --rounds rounds (default 200):

  queue   a backlog of --backlog items is put on one queue key first; then
          each round putdup()s --batch (default 5000) 36-byte uuids on
          that key in one transaction, then out()s --batch of them from
          the front in another: the queue holds between backlog and
          backlog + batch items all along.
  random  the same with random keys: each round puts --batch new uuid keys
          (put(uuid, 36-byte value)) and removes --batch live keys picked
          at random.

After every round the main file and log sizes are read and set against the
peak live data (sum of key + value bytes of the records alive after the
round's puts, the most ever alive).  A file that reuses its free pages stays
at a constant multiple of the live data; a file that leaks grows every
round.  At the end compact() is called and the sizes after it reported.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid

QUEUE = b"QUEUE"
VLEN = 36


def sizes(c, path):
    st = {}
    try:
        st = dict(c.stats())
    except Exception:
        pass
    fb = st.get("file_bytes")
    lb = st.get("log_file_bytes")
    if fb is None:
        fb = os.path.getsize(path) if os.path.exists(path) else 0
    if lb is None:
        lp = path + "-log"
        lb = os.path.getsize(lp) if os.path.exists(lp) else 0
    return fb, lb, st


def new_ids(n):
    return [str(uuid.uuid4()).encode() for _ in range(n)]


def run(workload, d, args, rng):
    import pyqstore
    path = os.path.join(d, "churn-%s.qdb" % workload)
    c = pyqstore.open(path, "n", sync=not args.nosync)
    rows = []
    live = 0            # records alive
    live_bytes = 0      # their key + value bytes
    peak_bytes = 0
    keys = []           # random workload: the live keys
    t0 = time.perf_counter()
    try:
        # the standing backlog
        with c.transaction():
            if workload == "queue":
                for u in new_ids(args.backlog):
                    c.putdup(QUEUE, u)
                live_bytes += args.backlog * (len(QUEUE) + VLEN)
            else:
                for u in new_ids(args.backlog):
                    c.put(u, u)
                    keys.append(u)
                live_bytes += args.backlog * (36 + VLEN)
        live += args.backlog
        for rnd in range(1, args.rounds + 1):
            ids = new_ids(args.batch)
            with c.transaction():
                if workload == "queue":
                    for u in ids:
                        c.putdup(QUEUE, u)
                    live_bytes += args.batch * (len(QUEUE) + VLEN)
                else:
                    for u in ids:
                        c.put(u, u)
                    keys.extend(ids)
                    live_bytes += args.batch * (36 + VLEN)
            live += args.batch
            peak_bytes = max(peak_bytes, live_bytes)
            fb_peak, lb_peak, _ = sizes(c, path)
            with c.transaction():
                if workload == "queue":
                    for _ in range(args.batch):
                        c.out(QUEUE)
                    live_bytes -= args.batch * (len(QUEUE) + VLEN)
                else:
                    for _ in range(args.batch):
                        i = rng.randrange(len(keys))
                        keys[i], keys[-1] = keys[-1], keys[i]
                        c.out(keys.pop())
                    live_bytes -= args.batch * (36 + VLEN)
            live -= args.batch
            fb, lb, st = sizes(c, path)
            row = {"round": rnd, "file_bytes": fb, "log_file_bytes": lb,
                   "file_bytes_at_peak": fb_peak,
                   "log_file_bytes_at_peak": lb_peak,
                   "live_records": live, "live_bytes": live_bytes,
                   "peak_live_bytes": peak_bytes,
                   "ratio": (fb + lb) / peak_bytes,
                   "file_ratio": fb / peak_bytes,
                   "free_pages": st.get("free_pages"),
                   "pages": st.get("pages")}
            rows.append(row)
            if rnd == 1 or rnd % args.every == 0 or rnd == args.rounds:
                print("%-7s %6d %10.2f %10.2f %12.2f %8s %9.2fx %9.2fx" % (
                    workload, rnd, fb / 2**20, lb / 2**20,
                    peak_bytes / 2**20,
                    "-" if row["free_pages"] is None else row["free_pages"],
                    row["file_ratio"], row["ratio"]), flush=True)
        elapsed = time.perf_counter() - t0
        try:
            recs = len(c)
        except Exception:
            recs = None
        c.sync()
        fb_sync, lb_sync, _ = sizes(c, path)
        t1 = time.perf_counter()
        c.compact()
        t_compact = time.perf_counter() - t1
        fb_after, lb_after, _ = sizes(c, path)
        try:
            ok = c.check()
            check = "ok" if ok in (None, True, 0) else repr(ok)
        except Exception as e:
            check = "FAILED: %s" % e
        if recs is not None and recs != live:
            check += " (len %d != expected %d)" % (recs, live)
    finally:
        c.close()
    last = rows[-1]
    return {
        "workload": workload, "rounds": args.rounds, "batch": args.batch,
        "backlog": args.backlog, "elapsed_s": elapsed, "rows": rows,
        "final_ratio": last["ratio"],
        "final_file_ratio": last["file_ratio"],
        "max_file_ratio": max(r["file_ratio"] for r in rows),
        "max_ratio": max(r["ratio"] for r in rows),
        "peak_live_bytes": peak_bytes,
        "after_sync_bytes": fb_sync + lb_sync,
        "after_compact_file_bytes": fb_after,
        "after_compact_log_bytes": lb_after,
        "after_compact_ratio_to_live": (fb_after + lb_after) /
        max(live_bytes, 1),
        "compact_s": t_compact, "check": check,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--batch", type=int, default=5000,
                    help="items put then removed per round (default 5000)")
    ap.add_argument("--backlog", type=int, default=5000,
                    help="items kept alive throughout (default 5000)")
    ap.add_argument("--workloads", default="queue,random",
                    help="comma-separated: queue,random")
    ap.add_argument("--every", type=int, default=20,
                    help="print every EVERY rounds (all are in --json)")
    ap.add_argument("--nosync", action="store_true",
                    help="sync off (default: sync on)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    own_dir = args.dir is None
    base = tempfile.mkdtemp(prefix="churn-") if own_dir else args.dir
    os.makedirs(base, exist_ok=True)
    rng = random.Random(args.seed)
    results = []
    print("%-7s %6s %10s %10s %12s %8s %10s %10s" % (
        "load", "round", "file MiB", "log MiB", "peaklive MiB", "free pg",
        "file/live", "+log/live"))
    try:
        for w in [x.strip() for x in args.workloads.split(",") if x.strip()]:
            if w not in ("queue", "random"):
                ap.error("unknown workload %r" % w)
            d = tempfile.mkdtemp(prefix=w + "-", dir=base)
            try:
                results.append(run(w, d, args, rng))
            finally:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)

    print()
    for r in results:
        print("%s: %d rounds in %.1fs; file/peak live: final %.2fx, max "
              "%.2fx; (file+log)/peak live: final %.2fx, max %.2fx; after "
              "compact: file %.2f MiB + log %.2f MiB "
              "(%.2fx of live %s); check %s" % (
                  r["workload"], r["rounds"], r["elapsed_s"],
                  r["final_file_ratio"], r["max_file_ratio"],
                  r["final_ratio"], r["max_ratio"],
                  r["after_compact_file_bytes"] / 2**20,
                  r["after_compact_log_bytes"] / 2**20,
                  r["after_compact_ratio_to_live"],
                  "%.2f MiB" % (r["rows"][-1]["live_bytes"] / 2**20),
                  r["check"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "churn", "python": sys.version,
                       "results": results}, f, indent=1)
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
