"""The seeds' experiments, as functions returning plain data (the CLI prints
and saves it).

  sweep        seed 000: one transaction of n items for n = 1, 10, ...
  correctness  seed 001 KeyValueCorrectness: write random keys and values,
               read them back; duplicate order and queue FIFO order
  perf         seed 001 KeyValuePerformance: x threads, n requests of l
               bytes, a write phase then a read phase, and the harness's own
               overhead measured with the null backend
  tune         seed 002: batch size x concurrent writers (threads or
               processes), the seed's regression models and optima
  drain        seed 004 is drain.py (its log file and baseline: widefinder.py)

With processes, every child is started by the "spawn" method and opens the
store by path (a Casket is never sent to another process); results come
back through a multiprocessing queue, and every wait has a timeout.
"""
from __future__ import annotations

import csv
import math
import multiprocessing
import os
import platform
import queue as _queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Optional

from . import backends as bk

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# ------------------------------------------------------------------- machine

def filesystem_of(path: str) -> str:
    """The file system type holding path (from /proc/mounts), or '?'."""
    best, fstype = "", "?"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (real == parts[1] or
                                        real.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) > len(best):
                        best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return fstype


def machine(directory: str) -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": sys.version.split()[0],
            "platform": platform.platform(), "dir": directory,
            "filesystem": filesystem_of(directory)}


def backend_report(backends: list[bk.Backend], kind: str) -> tuple[list[bk.Backend], dict[str, Any]]:
    """The usable backends for kind, and for every backend its status."""
    usable, report = [], {}
    for b, why in bk.iter_available(backends, kind):
        if why is None:
            try:
                version = b.version()
            except Exception as e:  # a broken install is unavailable too
                report[b.name] = {"available": False, "reason": f"version check failed: {e}"}
                continue
            usable.append(b)
            report[b.name] = {"available": True, "version": version}
        else:
            report[b.name] = {"available": False, "reason": why}
    chosen = {b.name for b in backends}
    for name, (layer, why, near) in bk.NOT_AVAILABLE.items():
        if layer == kind and chosen & near:
            report[name] = {"available": False, "reason": why}
    return usable, report


class Workdir:
    """A scratch directory under base (a temp dir by default), removed at
    the end; each measurement gets a fresh subdirectory."""

    def __init__(self, base: Optional[str]) -> None:
        self.root = tempfile.mkdtemp(prefix="qstore-bench-", dir=base)

    def fresh(self) -> str:
        return tempfile.mkdtemp(dir=self.root)

    def __enter__(self) -> "Workdir":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "mean": statistics.fmean(xs), "min": min(xs),
            "max": max(xs)}


# --------------------------------------------------------------------- sweep

def make_ids(n: int, size: int, rng: random.Random) -> list[bytes]:
    """n distinct uuid4 strings (seed 000's ids), cut or padded to size."""
    out = []
    for _ in range(n):
        u = str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
        out.append(u[:size] if size <= len(u) else u + b"." * (size - len(u)))
    return out


def seed_ids(n: int, size: int) -> list[bytes]:
    """n fresh uuid4 strings, as the seed made them (UUID.randomUUID), cut
    or padded to size."""
    out = []
    for _ in range(n):
        u = str(uuid.uuid4()).encode()
        out.append(u[:size] if size <= len(u) else u + b"." * (size - len(u)))
    return out


SWEEP_METHODS = ("prepared", "seed")


def sweep_run(b: bk.Backend, session: bk.Session, wd: Workdir, sync: bool, layer: str,
              make_ids: Callable[[], list[bytes]],
              at_end: Optional[Callable[[str], None]] = None) -> float:
    """One timed run of seed 000 on a fresh store: make_ids() (inside the
    clock, where the seed's method makes its uuids) and one transaction of
    them (casket layer: putdup(QUEUE, id) and putdup(id, id); queue layer:
    queue puts) up to the return of its commit.  Opening and closing are
    not timed.  at_end (if given) hears of the store's directory after a
    successful run's close, before it is removed (scale.py sizes it)."""
    d = wd.fresh()
    store = bk.open_store(b, d, sync, session)
    closed = False
    try:
        t0 = time.perf_counter()
        ids = make_ids()
        if layer == "casket":
            store.seed_transaction(ids)
        else:
            store.queue_transaction(ids)
        seconds = time.perf_counter() - t0
        store.close()
        closed = True
        if at_end is not None:
            at_end(d)
        return seconds
    finally:
        if not closed:
            store.close()
        shutil.rmtree(d, ignore_errors=True)


def sweep(backends: list[bk.Backend], max_exp: int, reps: int, sync: bool, payload_size: int,
          layer: str, base: Optional[str], progress: Progress = _quiet,
          seed: int = 1, method: str = "prepared") -> dict[str, Any]:
    """Seed 000: for n = 1, 10, ..., 10**max_exp, one transaction of n items
    per run (casket layer: putdup(QUEUE, id) and putdup(id, id); queue
    layer: n queue puts) on a fresh file.  method "prepared": the ids are
    made before the clock starts, `reps` timed runs plus one warm-up run
    (n <= 10**5) that is reported but not counted; "seed": the seed's
    method, the uuids made inside the timed region and every one of the
    `reps` runs counted (the seed averaged 10).  Each row keeps every run's
    time, their median and mean."""
    if method not in SWEEP_METHODS:
        raise ValueError(f"method must be one of {', '.join(SWEEP_METHODS)}, not {method!r}")
    warmups = method == "prepared"
    kind = "casket" if layer == "casket" else "queue"
    usable, report = backend_report(backends, kind)
    rng = random.Random(seed)
    results: list[dict[str, Any]] = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        for b in usable:
            try:
                with b.session(sync) as session:
                    for e in range(max_exp + 1):
                        n = 10 ** e
                        ids = make_ids(n, payload_size, rng) if warmups else []
                        progress(f"{b.name} n={n}")
                        times, warm = [], None
                        warmup = warmups and n <= 10 ** 5
                        for r in range(reps + (1 if warmup else 0)):
                            make = ((lambda: ids) if warmups else
                                    (lambda: seed_ids(n, payload_size)))
                            dt = sweep_run(b, session, wd, sync, layer, make)
                            if warmup and r == 0:
                                warm = dt
                            else:
                                times.append(dt)
                        st = _stats(times)
                        results.append({
                            "backend": b.name, "n": n, "seconds": st,
                            "us_per_item": st["median"] / n * 1e6,
                            "items_per_s": n / st["median"] if st["median"] > 0 else None,
                            "runs": len(times), "times": times, "warmup_seconds": warm})
            except bk.Unsupported as e:
                report[b.name] = {"available": False, "reason": f"cannot do this: {e}"}
                results = [r for r in results if r["backend"] != b.name]
    return {"experiment": "sweep", "method": method, "layer": layer, "sync": sync,
            "payload_size": payload_size,
            "reps": reps, "machine": info, "backends": report, "results": results}


# --------------------------------------------------------------- correctness

def _value_sizes(rng: random.Random, n: int, cap: int) -> Iterable[int]:
    """Mostly small values, some large, the extremes always: 0 and cap."""
    yield 0
    yield cap
    for _ in range(n - 2):
        r = rng.random()
        if r < 0.6:
            yield rng.randint(0, min(100, cap))
        elif r < 0.9:
            yield rng.randint(0, min(10_000, cap))
        else:
            yield rng.randint(min(10_000, cap), cap)


def correctness(backends: list[bk.Backend], count: int, max_value: int, base: Optional[str],
                progress: Progress = _quiet, seed: int = 1) -> dict[str, Any]:
    """Seed 001's KeyValueCorrectness on every kv-capable backend, plus
    duplicate order and queue FIFO order where the backend has them."""
    usable, report = backend_report(backends, "kv")
    results = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        for b in usable:
            progress(b.name)
            rng = random.Random(seed)
            cap = min(max_value, getattr(b, "max_value", max_value))
            mism: list[str] = []
            checks: dict[str, str] = {}
            d = wd.fresh()
            with b.session(False) as session:
                store = bk.open_store(b, d, False, session)
                try:
                    # keys: printable, unique, 1..200 bytes (memcached's limit is 250)
                    keys = [(f"k{i}-" + "".join(rng.choice("abcdefghij0123456789")
                                                for _ in range(rng.randint(0, 190)))).encode()
                            for i in range(count)]
                    vals = [rng.randbytes(s) for s in _value_sizes(rng, count, cap)]
                    for k, v in zip(keys, vals):
                        store.put(k, v)
                    for k, v in zip(keys, vals):
                        got = store.get(k)
                        if got != v:
                            mism.append(f"key {k[:20]!r}...: wrote {len(v)} bytes, read "
                                        f"{'nothing' if got is None else f'{len(got)} bytes'}"
                                        f"{'' if got is None or len(got) != len(v) else ' (different)'}")
                    checks["key-value"] = "checked"
                    if "casket" in b.kinds:
                        want = [b"dup-%03d" % i for i in range(50)]
                        for v in want:
                            store.putdup(b"dupkey", v)
                        dups = store.getdup(b"dupkey")
                        if b.dup_order:
                            checks["duplicate order"] = "checked"
                            if dups != want:
                                mism.append("duplicates: not read back in insertion order")
                        else:
                            checks["duplicate order"] = "not kept by this product (sorted)"
                            if sorted(dups) != sorted(want):
                                mism.append("duplicates: values lost or changed")
                    if "queue" in b.kinds:
                        want = [b"item-%04d" % i for i in range(300)]
                        for v in want:
                            store.qput("fifo", v)
                        items: list[bytes] = []
                        while True:
                            batch = store.qget_many("fifo", 64)
                            if not batch:
                                break
                            items += batch
                        checks["queue FIFO"] = "checked"
                        if items != want:
                            mism.append("queue: items not read back in FIFO order")
                finally:
                    store.close()
            results.append({"backend": b.name, "written": count, "max_value": cap,
                            "mismatches": len(mism), "details": mism[:20], "checks": checks})
    ok = all(r["mismatches"] == 0 for r in results)
    return {"experiment": "correctness", "count": count, "machine": info, "backends": report,
            "results": results, "ok": ok}


# ---------------------------------------------------------------------- perf

def _phase(stores: list[bk.Store], work: Callable[[bk.Store, int, int], None],
           threads: int, requests: int) -> float:
    """Runs work(store, start, stop) in `threads` threads over disjoint
    slices of range(requests); returns the wall time."""
    per = [requests // threads + (1 if i < requests % threads else 0) for i in range(threads)]
    starts = [sum(per[:i]) for i in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(stores[i], starts[i], starts[i] + per[i])
        except BaseException as e:  # reported after the join
            errors.append(e)

    ths = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ths:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ths:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return dt


HANDLES = ("per-thread", "shared")


def sync_label(b: bk.Backend, sync: bool) -> str:
    """What a row's sync setting is: yes, no, or why the backend cannot."""
    if not sync:
        return "no"
    return f"cannot: {b.cannot_sync}" if b.cannot_sync else "yes"


def _perf_row(name: str, label: str, handles: str, distinct: int, synced: str,
              w_times: list[float], r_times: list[float], requests: int) -> dict[str, Any]:
    """A perf row from the phases' seconds, the first of each a warm-up."""
    warm = {"write_ms": w_times[0] * 1e3, "read_ms": r_times[0] * 1e3}
    w, r = _stats(w_times[1:]), _stats(r_times[1:])
    return {"backend": name, "label": label, "handles": handles,
            "distinct_handles": distinct, "sync": synced,
            "write_ms": {k: v * 1e3 for k, v in w.items()},
            "read_ms": {k: v * 1e3 for k, v in r.items()},
            "writes_per_s": requests / w["median"],
            "reads_per_s": requests / r["median"], "warmup": warm}


def _tool_rows(b: bk.Backend, session: bk.Session, report: dict[str, Any],
               clients: list[int], requests: int, value_size: int, synced: str, reps: int,
               progress: Progress) -> list[dict[str, Any]]:
    """The backend's tool in another language (redis-benchmark) on the
    same server, with the same requests and value size, over one connection
    and over as many as the Python rows' threads: seed 001's language and
    client comparison.  Its status goes into the report under its label."""
    name = b.tool_label or ""
    why = b.tool_unavailable()
    if why:
        report[name] = {"available": False, "reason": why}
        return []
    report[name] = {"available": True, "version": b.tool_version()}
    rows = []
    for c in clients:
        progress(f"{name} -c {c}")
        runs = [b.tool_phases(session, requests, value_size, c) for _ in range(reps + 1)]
        rows.append(_perf_row(name, name, f"-c {c}", c, synced, [w for w, _ in runs],
                              [r for _, r in runs], requests))
    return rows


def perf_run(b: bk.Backend, session: bk.Session, wd: Workdir, sync: bool, threads: int,
             keys: list[bytes], value: bytes, handles: str = "per-thread"
             ) -> tuple[float, float, int]:
    """One run of seed 001's KeyValuePerformance on a fresh store: the
    write phase (a put of value under each key, each its own commit) and
    the read phase (a get of each key), the keys split over `threads`
    threads; (write seconds, read seconds, how many distinct handles)."""
    def write(s: bk.Store, a: int, z: int) -> None:
        put = s.put
        for k in keys[a:z]:
            put(k, value)

    def read(s: bk.Store, a: int, z: int) -> None:
        get = s.get
        for k in keys[a:z]:
            get(k)

    d = wd.fresh()
    first = bk.open_store(b, d, sync, session)
    stores = [first] + [first.connect() if handles == "per-thread" else first
                        for _ in range(threads - 1)]
    try:
        w = _phase(stores, write, threads, len(keys))
        r = _phase(stores, read, threads, len(keys))
        if b is not bk.NULL and first.get(keys[-1]) != value:
            raise RuntimeError(f"{b.name}: read back a wrong value")
        return w, r, len({id(s) for s in stores})
    finally:
        for s in {id(s): s for s in stores}.values():
            s.close()
        shutil.rmtree(d, ignore_errors=True)


def perf(backends: list[bk.Backend], threads: int, requests: int, value_size: int, sync: bool,
         reps: int, base: Optional[str], progress: Progress = _quiet,
         handles: str = "per-thread") -> dict[str, Any]:
    """Seed 001's KeyValuePerformance: a write phase (each put its own
    commit) then a read phase; with handles "per-thread" each thread has
    its own handle (Store.connect), with "shared" all threads use one; a
    backend that cannot do the chosen one is refused with the reason before
    it starts.  Median, min and max over reps after one warm-up run
    (reported, not counted); the null backend's times are the harness's own
    overhead."""
    if handles not in HANDLES:
        raise ValueError(f"handles must be one of {', '.join(HANDLES)}, not {handles!r}")
    usable, report = backend_report(backends, "kv")
    if threads > 1:
        for b in list(usable):
            why = b.no_thread_handles if handles == "per-thread" else b.no_shared_handle
            if why:
                usable.remove(b)
                report[b.name] = {"available": False,
                                  "reason": f"cannot run with {handles} handles: {why}"}
    keys = [b"key-%010d" % i for i in range(requests)]
    value = b"v" * value_size
    results = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        for b in [bk.NULL] + usable:
            progress(b.name)
            w_times, r_times = [], []
            with b.session(sync) as session:
                for _ in range(reps + 1):   # the first is a warm-up, reported apart
                    w, r, distinct = perf_run(b, session, wd, sync, threads, keys, value,
                                              handles)
                    w_times.append(w)
                    r_times.append(r)
                results.append(_perf_row(b.name, b.row_label(), handles, distinct,
                                         sync_label(b, sync), w_times, r_times, requests))
                if b.tool_label:
                    results += _tool_rows(b, session, report, sorted({1, threads}), requests,
                                          value_size, sync_label(b, sync), reps, progress)
    report["null"] = {"available": True, "version": "-"}
    return {"experiment": "perf", "threads": threads, "requests": requests,
            "value_size": value_size, "sync": sync, "handles": handles, "reps": reps, "machine": info,
            "backends": report, "results": results}


# ----------------------------------------------------------------- processes

SPAWN_TIMEOUT = 60.0   # seconds for a cell's processes to start and open their handles


class ProcessFailed(RuntimeError):
    """A child process of a measurement failed, died or did not answer."""


def _child_main(index: int, fn: Callable[..., tuple[Any, float]], args: tuple[Any, ...],
                barrier: Any, results: Any) -> None:
    """A spawned child: fn(*args, start) opens its handle, calls start()
    (every child waits there for the others, so the timed parts begin
    together), works and returns (result, end time); the child sends
    (index, error or None, (start time, end time, result)) to results.
    Times are time.monotonic(), one clock for every process here."""
    began = [0.0]

    def start() -> None:
        barrier.wait(SPAWN_TIMEOUT)
        began[0] = time.monotonic()

    try:
        out, end = fn(*args, start)
        results.put((index, None, (began[0], end, out)))
    except BaseException as e:
        barrier.abort()     # the others stop waiting for this one
        results.put((index, f"{type(e).__name__}: {e}", None))


def _in_processes(fn: Callable[..., tuple[Any, float]], arglists: list[tuple[Any, ...]],
                  timeout: float) -> list[tuple[float, float, Any]]:
    """Runs fn(*args, start) in one spawned process per args (see
    _child_main); returns their (start, end, result) in order, or raises
    ProcessFailed as soon as one fails or dies, or when all have not
    answered within timeout seconds.  No child outlives the call."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(arglists))
    results = ctx.Queue()
    procs = [ctx.Process(target=_child_main, args=(i, fn, args, barrier, results), daemon=True)
             for i, args in enumerate(arglists)]
    deadline = time.monotonic() + timeout
    got: dict[int, tuple[float, float, Any]] = {}
    errors: dict[int, str] = {}

    def failed() -> list[int]:
        """The children that failed on their own, not those another's
        failure let down at the start line."""
        return [i for i, e in errors.items() if not e.startswith("BrokenBarrierError")]

    try:
        for p in procs:
            p.start()
        dead_seen: set[int] = set()
        while len(got) + len(errors) < len(procs) and not failed():
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProcessFailed(f"{len(procs) - len(got) - len(errors)} of {len(procs)} "
                                    f"processes did not answer within {timeout:.0f} s")
            try:
                i, err, out = results.get(timeout=min(0.5, left))
            except _queue.Empty:
                # a child that exited without answering (a crash) is noticed
                # on the second look, once what it sent has surely arrived
                dead = {i for i, p in enumerate(procs)
                        if p.exitcode is not None and i not in got and i not in errors}
                for i in dead & dead_seen:
                    errors[i] = f"exited with code {procs[i].exitcode} without a result"
                dead_seen = dead
                continue
            if err is None:
                got[i] = out
            else:
                errors[i] = err
        if errors:
            i = min(failed() or errors)
            raise ProcessFailed(f"process {i} of {len(procs)}: {errors[i]}")
        return [got[i] for i in range(len(procs))]
    finally:
        for i, p in enumerate(procs):
            if p.pid is not None and (i in got or i in errors):
                p.join(5)       # it has answered: it is exiting
            if p.is_alive():
                p.kill()
                p.join(5)
        results.close()


# ---------------------------------------------------------------------- tune

def _writer_loop(store: bk.Store, batch: int, payload: bytes, deadline: float) -> int:
    """Transactions of `batch` queue items until deadline; items committed."""
    items = [payload] * batch
    done = 0
    while time.perf_counter() < deadline:
        store.queue_transaction(items)
        done += batch
    return done


def _tune_child(name: str, directory: str, sync: bool, batch: int, payload: bytes,
                duration: float, start: Callable[[], None]) -> tuple[int, float]:
    """A writer process: its own handle by path, then _writer_loop."""
    store = bk.by_name([name])[0].attach(directory, sync)
    try:
        start()
        done = _writer_loop(store, batch, payload, time.perf_counter() + duration)
        return done, time.monotonic()
    finally:
        store.close()


def tune_cell(backend: bk.Backend, batch: int, writers: int, duration: float, sync: bool,
              processes: bool, wd: Workdir, session: bk.Session) -> float:
    """Items per second committed by `writers` concurrent writers doing
    transactions of `batch` queue puts for `duration` seconds.  With
    processes, each writer is a spawned process with its own handle opened
    by path (Backend.attach); the clock starts once all have opened."""
    payload = b"x" * 36
    d = wd.fresh()
    try:
        if processes:
            bk.open_store(backend, d, sync, session).close()   # creates the store
            runs = _in_processes(_tune_child, [(backend.name, d, sync, batch, payload,
                                                duration)] * writers,
                                 SPAWN_TIMEOUT + 2 * duration)
            elapsed = max(r[1] for r in runs) - min(r[0] for r in runs)
            result: float = sum(r[2] for r in runs) / max(duration, elapsed)
            return result
        first = bk.open_store(backend, d, sync, session)
        stores = [first] + [first.connect() for _ in range(writers - 1)]
        try:
            counts = [0] * writers
            errors: list[BaseException] = []
            barrier = threading.Barrier(writers + 1)

            def run(i: int) -> None:
                barrier.wait()
                try:
                    counts[i] = _writer_loop(stores[i], batch, payload, deadline)
                except BaseException as e:
                    errors.append(e)

            deadline = 0.0
            ths = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
            for t in ths:
                t.start()
            deadline = time.perf_counter() + duration
            barrier.wait()
            t0 = time.perf_counter()
            for t in ths:
                t.join()
            if errors:
                raise errors[0]
            return sum(counts) / max(duration, time.perf_counter() - t0)
        finally:
            for s in {id(s): s for s in stores}.values():
                s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


KNOBS = ("writers", "batch")
LINEAR = "items_per_s ~ writers + batch"
QUADRATIC = "items_per_s ~ writers + I(writers**2) + batch + I(batch**2)"


def fit_models(cells: list[dict[str, float]],
               fix: Optional[dict[str, float]] = None, knob: str = "writers") -> dict[str, Any]:
    """The seed's two models of throughput (statsmodels, the seed's R
    formulas): linear in batch and writers, and with squared terms.  Then
    on the quadratic surface: one-variable-at-a-time optima, the other knob
    held at fix[knob] (default: its median grid value; the seed held batch
    size at 20), and the joint optimum within the grid; when that lies on
    the grid's edge it is an extrapolation, and the fit's unconstrained
    optimum (None if the surface has no maximum) says where the fit would
    go.  knob: the cells' name for the seed's reducers (writers; a flow
    node's parallelism), used in the formulas and the keys returned."""
    from . import regression as rg

    lin = rg.ols(LINEAR.replace("writers", knob), cells)
    quad = rg.ols(QUADRATIC.replace("writers", knob), cells)
    ws = sorted({c[knob] for c in cells})
    bs = sorted({c["batch"] for c in cells})
    fix = dict(fix or {})
    w_fix = fix.get(knob, statistics.median_low(ws))
    b_fix = fix.get("batch", statistics.median_low(bs))

    def pred(w: float, b: float) -> float:
        return quad.predict({knob: w, "batch": b})

    def surface(x: Any) -> float:
        return pred(float(x[0]), float(x[1]))

    w_opt = rg.maximize_1d(lambda w: pred(w, b_fix), ws[0], ws[-1])
    b_opt = rg.maximize_1d(lambda b: pred(w_fix, b), bs[0], bs[-1])
    best = max(cells, key=lambda c: c["items_per_s"])
    box = [(ws[0], ws[-1]), (bs[0], bs[-1])]
    jw, jb = (float(v) for v in rg.maximize(
        surface, box, [((ws[0] + ws[-1]) / 2, (bs[0] + bs[-1]) / 2),
                       (best[knob], best["batch"])]))
    span = [max(hi - lo, 1.0) for lo, hi in box]
    edge = [name for name, v, (lo, hi), sp in zip((knob, "batch"), (jw, jb), box, span)
            if lo < hi and min(v - lo, hi - v) <= 1e-4 * sp]
    free = rg.unconstrained_maximum(surface, (jw, jb), span)

    def fit_dict(f: Any) -> dict[str, Any]:
        return {"formula": f.formula, "coefficients": dict(zip(f.names, f.coef)),
                "std_errors": dict(zip(f.names, f.se)), "t": dict(zip(f.names, f.t)),
                "p": dict(zip(f.names, f.p)), "residuals": f.residuals, "r2": f.r2,
                "adj_r2": f.adj_r2, "rse": f.rse, "df": f.df_resid, "f": f.f,
                "f_df": list(f.f_df), "f_p": f.f_p, "summary": f.summary()}

    return {
        "knob": knob, "linear": fit_dict(lin), "quadratic": fit_dict(quad),
        "one_at_a_time": {
            knob: {"batch_fixed": b_fix, f"best_{knob}": w_opt,
                   "predicted": pred(w_opt, b_fix)},
            "batch": {f"{knob}_fixed": w_fix, "best_batch": b_opt,
                      "predicted": pred(w_fix, b_opt)}},
        "joint_optimum": {knob: jw, "batch": jb, "predicted": pred(jw, jb),
                          "on_edge": edge, "extrapolation": bool(edge)},
        "unconstrained_optimum": None if free is None else {
            knob: float(free[0]), "batch": float(free[1]),
            "predicted": surface(free)},
        "best_measured": best}


def read_observations(path: str) -> list[dict[str, float]]:
    """The user's own tune measurements (like the seed's table of 7 runs):
    a CSV file with a header naming writers, batch and items_per_s (other
    columns are ignored).  ValueError naming the file, line and column of
    anything else."""
    need = ("writers", "batch", "items_per_s")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: the header must name {', '.join(need)}; "
                             f"missing: {', '.join(missing)}")
        cells = []
        for row in reader:
            cell = {}
            for c in need:
                text = (row.get(c) or "").strip()
                try:
                    cell[c] = float(text)
                except ValueError:
                    raise ValueError(f"{path}, line {reader.line_num}: {c} is {text!r}, "
                                     f"not a number") from None
                if not math.isfinite(cell[c]):
                    raise ValueError(f"{path}, line {reader.line_num}: {c} is {text!r}")
            cells.append(cell)
    if not cells:
        raise ValueError(f"{path}: no observations")
    return cells


def tune_observations(cells: list[dict[str, float]], source: str,
                      fix: Optional[dict[str, float]] = None) -> dict[str, Any]:
    """Seed 002's models and optima fitted to given observations."""
    return {"experiment": "tune", "observations": source, "cells": cells,
            "models": fit_models(cells, fix)}


def tune(backend: bk.Backend, batches: list[int], writers: list[int], duration: float,
         sync: bool, processes: bool, base: Optional[str],
         progress: Progress = _quiet, fix: Optional[dict[str, float]] = None) -> dict[str, Any]:
    """Seed 002: throughput over a grid of batch size x concurrent writers,
    then the seed's regression models and optima (see fit_models)."""
    if processes and backend.no_processes:
        raise bk.Unsupported(f"{backend.name} cannot have writers as processes: "
                             f"{backend.no_processes}")
    usable, report = backend_report([backend], "queue")
    if not usable:
        raise bk.Unsupported(f"{backend.name}: {report[backend.name]['reason']}")
    cells = []
    with Workdir(base) as wd:
        info = machine(wd.root)
        with backend.session(sync) as session:
            for w in writers:
                for b in batches:
                    progress(f"writers={w} batch={b}")
                    cells.append({"writers": w, "batch": b, "items_per_s": tune_cell(
                        backend, b, w, duration, sync, processes, wd, session)})
    return {"experiment": "tune", "backend": backend.name, "sync": sync,
            "processes": processes, "duration": duration, "machine": info, "backends": report,
            "cells": cells, "models": fit_models(cells, fix)}
