"""Synced commits per second under concurrency, from
bench/scripts/commit_rate.py, as functions so that the script and
`qstore-bench goals` time the same code:

  pyqstore(d, seconds, threads)      T threads doing autocommit puts with
                                     sync=True on one shared Casket
  floor_threads(d, seconds, threads) T threads, each a 4 KiB pwrite at its
                                     own offset of one file + fdatasync: no
                                     database at all, the reference for
                                     group commit
  ideal(d, seconds, threads)         bench/scripts/group_commit_ideal.c,
                                     compiled with cc: T threads sharing
                                     each fdatasync, no database at all,
                                     what group commit can reach here

Each returns {"ops", "seconds", "per_s", ...}.
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Optional

VALUE = b"v" * 36
WARMUP_OPS = 10


def fdatasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def _run_threads(threads: int, seconds: float, worker: Callable[[int], None],
                 start: threading.Barrier, stop: threading.Event) -> float:
    """Runs worker(0 .. threads-1) in threads of their own, each waiting on
    start and looping until stop; stops them `seconds` after they are
    released and returns the seconds from the release to the last join."""
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def floor_threads(d: str, seconds: float, threads: int) -> dict[str, Any]:
    """T threads, each a 4 KiB pwrite at its own offset + fdatasync of one
    shared file: what the device gives to concurrent syncers (a flush can
    serve several of them), the reference for group commit."""
    path = os.path.join(d, "floor.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"\0" * max(1 << 20, threads * 4096))
        os.fsync(fd)
        buf = os.urandom(4096)
        counts = [0] * threads
        start = threading.Barrier(threads + 1)
        stop = threading.Event()

        def worker(t: int) -> None:
            off = t * 4096
            i = 0
            start.wait()
            while not stop.is_set():
                os.pwrite(fd, buf, off)
                fdatasync(fd)
                i += 1
            counts[t] = i

        elapsed = _run_threads(threads, seconds, worker, start, stop)
    finally:
        os.close(fd)
    n = sum(counts)
    return {"ops": n, "seconds": elapsed, "per_s": n / elapsed,
            "threads": threads}


def _stats_delta(c: Any, before: dict[str, Any]) -> dict[str, Any]:
    try:
        st = c.stats()
    except Exception as e:
        return {"stats_error": repr(e)}
    out: dict[str, Any] = {}
    for k in ("commits", "syncs", "checkpoints"):
        if k in st:
            out[k] = st[k] - before.get(k, 0)
    if out.get("commits"):
        out["syncs_per_commit"] = out.get("syncs", 0) / out["commits"]
    return out


def _stats(c: Any) -> dict[str, Any]:
    try:
        return dict(c.stats())
    except Exception:
        return {}


def pyqstore(d: str, seconds: float, threads: int) -> dict[str, Any]:
    import pyqstore as pq
    c = pq.open(os.path.join(d, "commit.qdb"), "n", sync=True)
    try:
        for i in range(WARMUP_OPS):
            c.put(b"warm%d" % i, VALUE)
        before = _stats(c)
        counts = [0] * threads
        errors: list[BaseException] = []
        start = threading.Barrier(threads + 1)
        stop = threading.Event()

        def worker(t: int) -> None:
            put = c.put
            prefix = b"t%02d-" % t
            i = 0
            try:
                start.wait()
                while not stop.is_set():
                    put(prefix + b"%010d" % i, VALUE)
                    i += 1
            except BaseException as e:
                errors.append(e)
                stop.set()
            counts[t] = i

        if threads == 1:
            # No thread hand-off in the single-writer figure.
            put = c.put
            n = 0
            t0 = time.perf_counter()
            deadline = t0 + seconds
            while True:
                put(b"k%010d" % n, VALUE)
                n += 1
                if (n & 7) == 0 and time.perf_counter() >= deadline:
                    break
            elapsed = time.perf_counter() - t0
            counts = [n]
        else:
            elapsed = _run_threads(threads, seconds, worker, start, stop)
            if errors:
                raise errors[0]
        res: dict[str, Any] = {"ops": sum(counts), "seconds": elapsed,
                               "per_s": sum(counts) / elapsed, "threads": threads}
        res.update(_stats_delta(c, before))
    finally:
        c.close()
    return res


IDEAL_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "scripts", "group_commit_ideal.c")
IDEAL_GATHER_US = 400      # the source's best measured gathering wait


def ideal_unavailable() -> Optional[str]:
    """None when ideal() can run here, else why not."""
    if not os.path.exists(IDEAL_SOURCE):
        return f"{IDEAL_SOURCE} is not here (an installed, not editable, qstore-bench)"
    if not shutil.which("cc"):
        return "no C compiler (cc) to build group_commit_ideal.c"
    return None


@functools.cache
def _ideal_binary() -> str:
    """group_commit_ideal.c compiled once per process, removed at exit."""
    d = tempfile.mkdtemp(prefix="qstore-gci-")
    atexit.register(shutil.rmtree, d, True)
    binary = os.path.join(d, "gci")
    subprocess.run(["cc", "-O2", "-pthread", IDEAL_SOURCE, "-o", binary], check=True,
                   capture_output=True, timeout=120)
    return binary


def ideal(d: str, seconds: float, threads: int,
          gather_us: int = IDEAL_GATHER_US) -> dict[str, Any]:
    """group_commit_ideal.c's synced commits per second: `threads` threads
    appending 100-byte records whose fdatasyncs are shared, in d."""
    out = subprocess.run([_ideal_binary(), str(threads), str(seconds), str(gather_us), d],
                         check=True, capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"([0-9.]+) synced commits/s", out.stdout)
    if not m:
        raise RuntimeError(f"group_commit_ideal printed no rate: {out.stdout!r}")
    return {"per_s": float(m.group(1)), "threads": threads, "gather_us": gather_us}
