#!/usr/bin/env python3
"""A producer thread and a consumer thread on one queue, in one process.

The producer put()s --items 36-byte items, each its own commit; the
consumer get()s them with a timeout (blocking when it runs dry), each its
own commit; sync off, as a flow node's in-process port would run.  Three
layouts, each on a fresh casket:

  one-thread   no threads: put then get in turn from the main thread, the
               same commits without any hand-over (what the pair costs)
  one-handle   the two threads share one Casket
  two-handles  each thread has a Casket of its own on the same file

and, as a reference with no storage at all, queue.Queue between the same
two threads.  Every layout checks that each item arrived once, in order.
The layouts take turns --reps times; the median and the range are printed
per layout, in items per second (one-thread: put+get pairs per second).

  python bench/scripts/thread_queue.py [--items N] [--reps R] [--dir D]
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import tempfile
import threading
import time
from typing import Callable

import pyqstore


def payloads(n: int) -> list[bytes]:
    return [b"%036d" % i for i in range(n)]


def one_thread(path: str, pay: list[bytes]) -> float:
    with pyqstore.open(path, "n", sync=False) as c:
        q = c.queue("port")
        put, get = q.put, q.get_nowait
        got = []
        t0 = time.perf_counter()
        for p in pay:
            put(p)
            got.append(get())
        seconds = time.perf_counter() - t0
    assert got == pay
    return seconds


def threads(path: str, pay: list[bytes], handles: int) -> float:
    c = pyqstore.open(path, "n", sync=False)
    c2 = c if handles == 1 else pyqstore.open(path, sync=False)
    got: list[bytes] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            put = c.queue("port").put
            for p in pay:
                put(p)
        except BaseException as e:
            errors.append(e)

    def consume() -> None:
        try:
            get = c2.queue("port").get
            for _ in pay:
                got.append(get(timeout=60))
        except BaseException as e:
            errors.append(e)

    try:
        return _run(produce, consume, errors, got, pay)
    finally:
        if c2 is not c:
            c2.close()
        c.close()


def in_memory(path: str, pay: list[bytes]) -> float:
    q: queue.Queue[bytes] = queue.Queue()
    got: list[bytes] = []
    errors: list[BaseException] = []

    def produce() -> None:
        for p in pay:
            q.put(p)

    def consume() -> None:
        for _ in pay:
            got.append(q.get(timeout=60))

    return _run(produce, consume, errors, got, pay)


def _run(produce: Callable[[], None], consume: Callable[[], None],
         errors: list[BaseException], got: list[bytes], pay: list[bytes]) -> float:
    ts = [threading.Thread(target=produce), threading.Thread(target=consume)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    assert got == pay, "items lost, repeated or out of order"
    return seconds


LAYOUTS: dict[str, Callable[[str, list[bytes]], float]] = {
    "one-thread": one_thread,
    "one-handle": lambda path, pay: threads(path, pay, 1),
    "two-handles": lambda path, pay: threads(path, pay, 2),
    "queue.Queue": in_memory,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the caskets go (default: a temp dir)")
    args = ap.parse_args()
    pay = payloads(args.items)
    rates: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    d = tempfile.mkdtemp(prefix="thread-queue-", dir=args.dir)
    try:
        for _ in range(args.reps):
            for name, run in LAYOUTS.items():
                path = os.path.join(d, name + ".qs")
                rates[name].append(args.items / run(path, pay))
                for f in os.listdir(d):
                    os.unlink(os.path.join(d, f))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{args.items:,} items of 36 B, sync off, {args.reps} reps, layouts taking turns")
    for name, r in rates.items():
        print(f"  {name:12s} {statistics.median(r):10,.0f} items/s "
              f"({min(r):,.0f}-{max(r):,.0f})")


if __name__ == "__main__":
    main()
