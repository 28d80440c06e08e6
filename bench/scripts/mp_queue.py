#!/usr/bin/env python3
"""Queue throughput across processes: pyqstore against sqlite3.

--producers processes (default 4) put --items items (default 200,000) of
--payload bytes (default 36) in batches of --batch (default 100), and
--consumers processes (default 4) take them out in batches of --batch,
all on one file, sync off, in the same run for each backend:

  pyqstore   producers: ``q.put_many(batch)`` (one call, one transaction);
             consumers: ``q.get_many(batch, block=True, timeout=--get-timeout)``
  sqlite3    table (id INTEGER PRIMARY KEY, payload BLOB), WAL,
             synchronous=OFF, busy_timeout 60 s; producers insert a batch in
             BEGIN IMMEDIATE ... COMMIT; consumers BEGIN IMMEDIATE, SELECT id,
             payload ... ORDER BY id LIMIT batch, DELETE ... WHERE id <= the
             last id, COMMIT, sleeping --sqlite-poll when the table is empty
             (SQLite cannot block); "database is locked" is retried

Every process opens the store and builds its payloads before the clock
starts; the parent then releases them all at once.  Throughput is items /
(last get returning items - first put), both read from CLOCK_MONOTONIC,
which every process on the host shares.  Each payload carries its item
number, so after the clock stops every consumer marks what it got and the
parent checks that each item arrived exactly once and that the store is
empty.  Consumers stop when a shared count of consumed items reaches
--items; every wait has a timeout, so a failed run ends with an error
(after --deadline at worst), never a hang.

Each backend runs --reps times on a fresh file, alternating, and the median
items/s counts.  Requirement: pyqstore >= 2x sqlite3, printed as PASS/FAIL.
--profile prints where each backend's time went (time in the get calls
that returned a full batch, a partial batch or nothing; time per put call;
pyqstore's commit/sync/checkpoint counters).  Exit status 0 unless pyqstore
itself failed to run (then one line says why; sqlite3 is still measured).

    python bench/mp_queue.py
    python bench/mp_queue.py --items 20000 --reps 1 --backends sqlite3
    python bench/mp_queue.py --profile --json mp_queue.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root
sys.path.insert(0, HERE)

# pyqstore is imported only where it is used (here and in _mproc), so that
# the sqlite3 half still runs when the package cannot even be imported (a
# half-built engine).
from _mproc import (Crew, RunFailed, add_limits, attempt,  # noqa: E402
                    create_pyqstore, create_sqlite, describe, fresh_store, now_ns,
                    open_pyqstore, open_sqlite, serve)

BACKENDS = ["pyqstore", "sqlite3"]
QNAME = "work"
BAR = 2.0  # pyqstore items/s >= BAR x sqlite3's
_u64 = struct.Struct(">Q")


def payload(i: int, size: int) -> bytes:
    """Item i: its number (8 bytes, big-endian), then filler."""
    return _u64.pack(i) + b"\xa5" * (size - 8)


def share(total: int, parts: int, k: int) -> range:
    """The k-th of parts contiguous slices of range(total)."""
    q, r = divmod(total, parts)
    start = k * q + min(k, r)
    return range(start, start + q + (1 if k < r else 0))


# ------------------------------------------------------------------ stores

class PQStore:
    """pyqstore: one Casket per process, the queue QNAME."""

    create = staticmethod(create_pyqstore)

    def __init__(self, path: str, cfg: dict) -> None:
        self.c, self.q = open_pyqstore(path, cfg, QNAME)
        self.put_batch = self.q.put_many
        self.stats0 = self.c.stats() if cfg["profile"] else None
        self.retries = 0

    def get_batch(self, n: int, timeout: float) -> list:
        return self.q.get_many(n, block=True, timeout=timeout)

    def counters(self) -> dict:
        if self.stats0 is None:
            return {}
        s1 = self.c.stats()
        return {k: s1[k] - v for k, v in self.stats0.items()
                if isinstance(v, int) and k in ("commits", "syncs", "checkpoints",
                                                "spilled_pages")}

    def close(self) -> None:
        self.c.close()

    @staticmethod
    def leftover(path: str) -> int:
        import pyqstore
        with pyqstore.open(path, "w", sync=False) as c:
            return len(c.queue(QNAME))


def _locked(e: sqlite3.OperationalError) -> bool:
    m = str(e).lower()
    return "locked" in m or "busy" in m


class SQStore:
    """sqlite3: table q, WAL, synchronous=OFF, explicit BEGIN IMMEDIATE."""

    create = staticmethod(create_sqlite)

    def __init__(self, path: str, cfg: dict) -> None:
        self.con = open_sqlite(path)
        mode = self.con.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            raise RuntimeError(f"sqlite3 journal_mode is {mode}, not wal")
        self.poll = cfg["sqlite_poll"]
        self.retries = 0

    def _txn(self, body):
        """Run body() inside BEGIN IMMEDIATE ... COMMIT, retrying on
        'database is locked' (busy_timeout makes that rare)."""
        ex = self.con.execute
        while True:
            try:
                ex("BEGIN IMMEDIATE")
                r = body()
                ex("COMMIT")
                return r
            except sqlite3.OperationalError as e:
                if self.con.in_transaction:
                    self.con.rollback()
                if not _locked(e):
                    raise
                self.retries += 1

    def put_batch(self, batch: list) -> None:
        self._txn(lambda: self.con.executemany(
            "INSERT INTO q(payload) VALUES (?)", [(p,) for p in batch]))

    def _take(self, n: int) -> list:
        ex = self.con.execute
        rows = ex("SELECT id, payload FROM q ORDER BY id LIMIT ?", (n,)).fetchall()
        if rows:
            ex("DELETE FROM q WHERE id <= ?", (rows[-1][0],))
        return [p for _, p in rows]

    def get_batch(self, n: int, timeout: float) -> list:
        end = time.monotonic() + timeout
        while True:
            got = self._txn(lambda: self._take(n))
            if got or time.monotonic() >= end:
                return got
            time.sleep(self.poll)

    def counters(self) -> dict:
        return {"locked_retries": self.retries}

    def close(self) -> None:
        self.con.close()

    @staticmethod
    def leftover(path: str) -> int:
        con = sqlite3.connect(path, isolation_level=None, timeout=60.0)
        try:
            return con.execute("SELECT count(*) FROM q").fetchone()[0]
        finally:
            con.close()


STORES = {"pyqstore": PQStore, "sqlite3": SQStore}


# ----------------------------------------------------------------- workers

def produce(store, batches: list, abort) -> dict:
    put = store.put_batch
    clock = time.perf_counter_ns
    durs = []
    t_first = now_ns()
    for b in batches:
        if abort.is_set():
            raise RuntimeError("aborted")
        t0 = clock()
        put(b)
        durs.append(clock() - t0)
    t_last = now_ns()
    return {"first_put": t_first, "last_put": t_last, "items": sum(map(len, batches)),
            "calls": len(durs), "put_ns": durs}


def consume(store, cfg: dict, stop, abort, counter) -> dict:
    n, total, timeout = cfg["batch"], cfg["items"], cfg["get_timeout"]
    get = store.get_batch
    clock = time.perf_counter_ns
    got: list = []
    first = last = None
    calls = full = partial = empty = 0
    t_full = t_partial = t_empty = 0
    start = clock()
    end_by = time.monotonic() + cfg["deadline"]
    while not stop.is_set():
        if abort.is_set():
            raise RuntimeError("aborted")
        if time.monotonic() > end_by:
            raise RuntimeError(f"deadline: {counter.value} of {total} items consumed")
        t0 = clock()
        b = get(n, timeout)
        t1 = clock()
        calls += 1
        if not b:
            empty += 1
            t_empty += t1 - t0
            continue
        last = now_ns()
        if first is None:
            first = last
        if len(b) == n:
            full += 1
            t_full += t1 - t0
        else:
            partial += 1
            t_partial += t1 - t0
        got.append(b)
        with counter.get_lock():
            counter.value += len(b)
            done = counter.value >= total
        if done:
            stop.set()
    wall = clock() - start
    # The clock has stopped: mark what arrived (checked by the parent).
    marks = bytearray(total)
    bad = count = 0
    unpack = _u64.unpack_from
    for b in got:
        for p in b:
            count += 1
            i = unpack(p)[0]
            if i >= total or marks[i] or len(p) != cfg["payload"]:
                bad += 1
            else:
                marks[i] = 1
    return {"first_get": first, "last_get": last, "items": count, "bad": bad,
            "marks": bytes(marks), "calls": calls, "full": full, "partial": partial,
            "empty": empty, "t_full": t_full, "t_partial": t_partial, "t_empty": t_empty,
            "wall": wall}


def worker(role: str, k: int, backend: str, path: str, cfg: dict,
           go, stop, abort, counter, out) -> None:
    batches: list = []

    def prepare() -> None:
        if role == "producer":
            ids = share(cfg["items"], cfg["producers"], k)
            b, size = cfg["batch"], cfg["payload"]
            batches.extend([payload(i, size) for i in ids[j:j + b]]
                           for j in range(0, len(ids), b))

    def body(store) -> dict:
        if role == "producer":
            res = produce(store, batches, abort)
        else:
            res = consume(store, cfg, stop, abort, counter)
        res["counters"] = store.counters()
        return res

    serve(f"{role} {k}", out, lambda: STORES[backend](path, cfg), body,
          waits=(go,), abort=abort, timeout=cfg["deadline"], prepare=prepare)


# ------------------------------------------------------------------ parent

def run_once(ctx, backend: str, base: str, cfg: dict) -> dict:
    store = STORES[backend]
    with fresh_store(base, "q.qs" if backend == "pyqstore" else "q.sqlite",
                     store.create) as path:
        crew = Crew(ctx)
        stop = crew.event()
        counter = ctx.Value("q", 0)
        for role, count in (("consumer", cfg["consumers"]), ("producer", cfg["producers"])):
            for k in range(count):
                crew.add(f"{role} {k}", worker, role, k, backend, path, cfg,
                         crew.go, stop, crew.abort, counter, crew.out)
        done = crew.run(cfg["open_timeout"], cfg["deadline"])
        try:
            left = store.leftover(path)
        except BaseException as e:
            raise RunFailed(f"reopening to check it is empty: {describe(e)}") from None
    return summarize(backend, cfg, done, left)


def summarize(backend: str, cfg: dict, done: dict, left: int) -> dict:
    total = cfg["items"]
    prods = [v for k, v in done.items() if k.startswith("producer")]
    cons = [v for k, v in done.items() if k.startswith("consumer")]
    first_put = min(p["first_put"] for p in prods)
    last_put = max(p["last_put"] for p in prods)
    last_get = max(c["last_get"] for c in cons if c["last_get"] is not None)
    # exactly once: the marks of different consumers never overlap and
    # together cover every item
    union = 0
    overlap = False
    for c in cons:
        m = int.from_bytes(c.pop("marks"), "little")
        overlap |= bool(union & m)
        union |= m
    all_once = union == int.from_bytes(b"\x01" * total, "little")
    got = sum(c["items"] for c in cons)
    bad = sum(c["bad"] for c in cons)
    exact = got == total and bad == 0 and not overlap and all_once and left == 0
    put_ns = sorted(x for p in prods for x in p.pop("put_ns"))
    secs = (last_get - first_put) / 1e9
    return {
        "backend": backend,
        "items_per_s": total / secs,
        "seconds": secs,
        "put_side_items_per_s": total / ((last_put - first_put) / 1e9),
        "drain_tail_s": (last_get - last_put) / 1e9,
        "consumed": got, "bad_or_duplicate": bad + (1 if overlap else 0),
        "left_in_store": left, "exactly_once": exact,
        "put_call_us": {"median": put_ns[len(put_ns) // 2] / 1e3,
                        "p99": put_ns[min(len(put_ns) - 1, int(0.99 * len(put_ns)))] / 1e3,
                        "max": put_ns[-1] / 1e3,
                        "mean": sum(put_ns) / len(put_ns) / 1e3},
        "producers": prods, "consumers": cons,
    }


def print_profile(r: dict, cfg: dict) -> None:
    cons, prods = r["consumers"], r["producers"]
    wall = sum(c["wall"] for c in cons) / 1e9
    t_full = sum(c["t_full"] for c in cons) / 1e9
    t_part = sum(c["t_partial"] for c in cons) / 1e9
    t_empty = sum(c["t_empty"] for c in cons) / 1e9
    calls = sum(c["calls"] for c in cons)
    full = sum(c["full"] for c in cons)
    part = sum(c["partial"] for c in cons)
    empty = sum(c["empty"] for c in cons)
    pct = (lambda x: 100 * x / wall) if wall else (lambda x: 0.0)
    b = cfg["batch"]
    print(f"\n{r['backend']}: where the time went (one run, {r['seconds']:.2f} s, "
          f"{len(cons)} consumers, {len(prods)} producers)")
    print(f"  consumers, summed over processes ({wall:.2f} s from release to stop):")
    print(f"    get calls returning a full batch ({b})   {full:>8}  {t_full:8.3f} s "
          f"{pct(t_full):5.1f}%  {t_full / full * 1e6 if full else 0:9.1f} us/call")
    print(f"    get calls returning a partial batch     {part:>8}  {t_part:8.3f} s "
          f"{pct(t_part):5.1f}%  {t_part / part * 1e6 if part else 0:9.1f} us/call "
          "(waited for items)")
    print(f"    get calls returning nothing (timed out) {empty:>8}  {t_empty:8.3f} s "
          f"{pct(t_empty):5.1f}%  (idle before the first or after the last item,"
          " or waiting for a lock)")
    print("    items per consumer: " + ", ".join(f"{c['items']:,}" for c in cons))
    rest = wall - t_full - t_part - t_empty
    print(f"    outside the get calls (Python, count)   {calls:>8}  {rest:8.3f} s "
          f"{pct(rest):5.1f}%")
    pc = r["put_call_us"]
    pw = sum((p["last_put"] - p["first_put"]) for p in prods) / 1e9
    pt = pc["mean"] * sum(p["calls"] for p in prods) / 1e6
    print(f"  producers: {sum(p['calls'] for p in prods)} put calls of {b}, "
          f"{pt:.3f} s of {pw:.3f} s in them; per call median {pc['median']:.1f} us, "
          f"p99 {pc['p99']:.1f} us, max {pc['max']:.1f} us")
    print(f"  put side done after {r['seconds'] - r['drain_tail_s']:.3f} s, "
          f"last get {r['drain_tail_s'] * 1e3:+.1f} ms after the last put")
    ctr: dict[str, int] = {}
    for w in cons + prods:
        for k, v in w.get("counters", {}).items():
            ctr[k] = ctr.get(k, 0) + v
    if ctr:
        print("  counters, summed over processes: " +
              ", ".join(f"{k} {v}" for k, v in ctr.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--items", type=int, default=200_000, help="items through the queue")
    ap.add_argument("--batch", type=int, default=100, help="items per put / get call")
    ap.add_argument("--payload", type=int, default=36, help="payload bytes (>= 8)")
    ap.add_argument("--reps", type=int, default=5, help="runs per backend; the median counts")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--start-method", default="spawn", choices=mp.get_all_start_methods())
    ap.add_argument("--get-timeout", type=float, default=0.05,
                    help="consumers' get timeout in s (they recheck the stop flag after it)")
    ap.add_argument("--sqlite-poll", type=float, default=0.001,
                    help="sqlite3 consumers' sleep when the table is empty (s)")
    add_limits(ap, "every process", 300.0, "seconds a run may take before it is abandoned")
    ap.add_argument("--profile", action="store_true", help="print where the time went")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.payload < 8 or args.batch < 1 or args.items < 1 or args.producers < 1 \
            or args.consumers < 1:
        ap.error("need --payload >= 8 and positive --batch, --items, --producers, --consumers")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r}: {', '.join(BACKENDS)}")
    cfg = {k: getattr(args, k) for k in ("producers", "consumers", "items", "batch", "payload",
                                         "get_timeout", "sqlite_poll", "lock_timeout",
                                         "open_timeout", "deadline", "profile")}
    ctx = mp.get_context(args.start_method)
    base = tempfile.mkdtemp(dir=args.dir, prefix="mpq-")
    runs: dict[str, list[dict]] = {b: [] for b in backends}
    failed: dict[str, str] = {}
    print(f"{args.producers} producers, {args.consumers} consumers, {args.items:,} items of "
          f"{args.payload} B, batches of {args.batch}, sync off, start method "
          f"{args.start_method}, {os.cpu_count()} CPUs", flush=True)
    try:
        for rep in range(args.reps):
            for b in backends:
                r = attempt(failed, b, run_once, ctx, b, base, cfg)
                if r is None:
                    continue
                runs[b].append(r)
                print(f"  rep {rep + 1} {b:<9} {r['items_per_s']:>12,.0f} items/s  "
                      f"({r['seconds']:.2f} s, exactly once: "
                      f"{'yes' if r['exactly_once'] else 'NO'})", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    med = {b: statistics.median(r["items_per_s"] for r in rs) for b, rs in runs.items() if rs}
    print(f"\n{'backend':<10}{'items/s':>14}{'min':>12}{'max':>12}{'put side/s':>14}"
          f"{'exactly once':>14}")
    for b in backends:
        rs = runs[b]
        if not rs:
            print(f"{b:<10}{'failed':>14}")
            continue
        v = [r["items_per_s"] for r in rs]
        ok = all(r["exactly_once"] for r in rs)
        print(f"{b:<10}{med[b]:>14,.0f}{min(v):>12,.0f}{max(v):>12,.0f}"
              f"{statistics.median(r['put_side_items_per_s'] for r in rs):>14,.0f}"
              f"{'yes' if ok else 'NO':>14}")
    ratio = med["pyqstore"] / med["sqlite3"] if "pyqstore" in med and "sqlite3" in med else None
    if ratio is not None:
        print(f"ratio pyqstore/sqlite3: {ratio:.2f}x")
    print("\nrequirements:")
    if ratio is not None:
        print(f"  {'PASS' if ratio >= BAR else 'FAIL'}  pyqstore >= {BAR:g}x sqlite3 "
              f"({ratio:.2f}x, median of {args.reps})")
    else:
        why = failed.get("pyqstore") or failed.get("sqlite3") or "not run"
        print(f"  FAIL  pyqstore >= {BAR:g}x sqlite3 (no ratio: {why})")
    for b in backends:
        if runs[b]:
            ok = all(r["exactly_once"] for r in runs[b])
            print(f"  {'PASS' if ok else 'FAIL'}  {b}: every item delivered exactly once, "
                  "store empty after")
    if args.profile:
        for b in backends:
            if runs[b]:
                print_profile(runs[b][-1], cfg)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {**cfg, "start_method": args.start_method, "reps": args.reps,
                                  "cpus": os.cpu_count()},
                       "median_items_per_s": med, "ratio": ratio,
                       "bar_met": ratio is not None and ratio >= BAR,
                       "failed": failed, "runs": runs}, f, indent=2)
    return 1 if "pyqstore" in failed else 0


if __name__ == "__main__":
    sys.exit(main())
