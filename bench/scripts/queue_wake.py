#!/usr/bin/env python3
"""How fast a blocked Queue.get wakes, and how exactly a get times out.

Wake-up: a consumer thread sits in ``q.get()`` (blocking, no timeout); an
otherwise idle producer thread waits a random 1-5 ms, notes the time and
puts one item (its own commit, sync off).  The latency is from just before
the put call to the consumer's get returning: it includes the put's own
commit.  Requirement: median under 1 ms.

Timeouts: ``q.get(timeout=t)`` on an empty queue for several t; the error
is the elapsed time minus t.  Requirement: within +-20 ms.

    python bench/queue_wake.py [--n 1000] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

import pyqstore  # noqa: E402


def wake_latencies(q: pyqstore.Queue, n: int, seed: int) -> list[float]:
    got: list[float] = []
    sent: list[float] = []
    ready = threading.Event()

    def consume() -> None:
        ready.set()
        for _ in range(n):
            q.get()
            got.append(time.perf_counter())

    th = threading.Thread(target=consume)
    th.start()
    ready.wait()
    rnd = random.Random(seed)
    for i in range(n):
        time.sleep(rnd.uniform(0.001, 0.005))  # the consumer is asleep by now
        sent.append(time.perf_counter())
        q.put(b"%d" % i)
    th.join()
    return [(g - s) * 1e3 for s, g in zip(sent, got)]


def timeout_errors(q: pyqstore.Queue, timeouts: list[float], reps: int) -> dict[float, list[float]]:
    out: dict[float, list[float]] = {}
    for t in timeouts:
        errs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            try:
                q.get(timeout=t)
            except pyqstore.Empty:
                pass
            else:
                raise AssertionError("the queue was meant to be empty")
            errs.append((time.perf_counter() - t0 - t) * 1e3)
        out[t] = errs
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="wake-ups measured")
    ap.add_argument("--reps", type=int, default=5, help="gets per timeout value")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="qwake-")
    try:
        c = pyqstore.open(os.path.join(d, "w.qs"), "n", sync=False)
        lat = wake_latencies(c.queue("port"), args.n, args.seed)
        lat.sort()
        med = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(f"wake-up after a put, {len(lat)} samples: median {med:.3f} ms, "
              f"p90 {lat[int(0.9 * len(lat))]:.3f} ms, p99 {p99:.3f} ms, max {lat[-1]:.3f} ms")
        errs = timeout_errors(c.queue("empty"), [0.01, 0.05, 0.2, 1.0], args.reps)
        worst = 0.0
        for t, e in errs.items():
            worst = max(worst, max(abs(x) for x in e))
            print(f"get(timeout={t}): raised Empty after timeout "
                  f"{min(e):+.3f} .. {max(e):+.3f} ms")
        c.close()
        ok_wake, ok_to = med < 1.0, worst <= 20.0
        print(f"{'PASS' if ok_wake else 'FAIL'}  median wake-up {med:.3f} ms < 1 ms")
        print(f"{'PASS' if ok_to else 'FAIL'}  timeouts within +-20 ms (worst {worst:.3f} ms)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"wake_ms": {"median": med, "p99": p99, "max": lat[-1]},
                           "timeout_error_ms": {str(k): v for k, v in errs.items()}}, f,
                          indent=2)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
