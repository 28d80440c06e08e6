"""Issue 17's performance table in one run: each line's workload on
pyqstore and on the peers the issue names, side by side, --reps times,
and the ratio of pyqstore's median to the best peer's median against the
issue's goal.  Every workload is existing code, timed here as is:

  sweep         seed 000, one synced transaction of n items
                (experiments.sweep_run)                     vs lmdb, >= 1.3x
  kv-put        seed 001 autocommit puts, 32-byte values under random
                16-byte keys, sync off (experiments.perf_run) vs the best
                B-tree peer here (lmdb, sqlite3, tokyocabinet, berkeleydb),
                >= 1.2x; rocksdb and leveldb measured beside them, not in
                the ratio
  kv-get        seed 001 gets of those keys (perf_run)      vs the best of
                the same peers and rocksdb, leveldb, >= 1.0x
  drain         get_many(1000) until empty, sync off
                (queue_lines "drain")   vs lmdb, rocksdb, leveldb, >= 1.3x
  put_many      one put_many in a synced transaction
                (queue_lines "put_many")                    vs the same, >= 1.3x
  put           put per item in one synced transaction
                (queue_lines "put")                         vs the same, >= 1.3x
  churn         one put then one get, each its own commit, sync off
                (queue_lines "churn")      vs the same, >= 1.5x and >= 250k/s
  reserved-get  gets behind 5,000 reserved 10 KB items (queue_lines
                .pq_get_behind)                vs the same gets with none
                reserved, >= 1/3 (a get costs at most 3x)
  mp-queue      4 producer + 4 consumer processes through one queue,
                batches of 100, sync off (bench/scripts/mp_queue.py, run
                as it is, one rep per cell)   vs sqlite3 WAL, >= 3x
  group-commit  8 threads of synced one-put commits (commit_rate.pyqstore)
                vs the better of two no-database references: 8 threads each
                writing 4 KiB and fdatasync-ing (commit_rate.floor_threads,
                commit_rate.py's floor-T) and group_commit_ideal.c's shared
                syncs (commit_rate.ideal, when cc is here), >= 0.9x

Two more lines run only when named (--lines), since they take minutes and
GiBs of disk: the sweep and put_many at 10^7 items, each cell a process of
its own (scale.py) that also measures its peak RSS and the bytes it wrote:

  sweep-10m     seed 000 at 10^7 vs lmdb and tokyocabinet, >= 1.3x; vs
                pyqstore's own 10^4 figure, >= 0.5 (per-item time at most
                2x); peak RSS <= 1 GiB; bytes written <= 4x the files'
  put_many-10m  one put_many of 10^7 in a synced transaction vs lmdb,
                >= 1.3x; vs pyqstore's own 10^5 figure, >= 1/1.5 (flat)

Within a row the sides take turns, rep after rep, so that drift of the
machine hits all of them; before every cell the dirty pages are flushed
(os.sync()) so that an earlier cell's writeback does not land in it.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import backends as bk
from . import commit_rate
from . import queue_lines
from . import scale
from .experiments import (Progress, Workdir, _quiet, backend_report, machine, make_ids,
                          perf_run, sweep_run)

# A cell: one timed run of one side, returning its figure (per second).
Cell = Callable[[Workdir], float]

KV_PEERS = ("lmdb", "sqlite3", "tokyocabinet", "berkeleydb")   # the B-tree stores
# the log-structured stores users pick today: peers on every line they can
# do, but on seed 001's put only reported beside the B-tree stores (issue
# 17: an LSM appends a record where a B-tree logs pages; beating that needs
# a record-level log, which is not the requirement)
LSM_PEERS = ("rocksdb", "leveldb")
SYNC_ON, SYNC_OFF = "sync on", "sync off"


@dataclass(frozen=True)
class Sizes:
    """How much work each line does: the issue's sizes, or --small's."""
    sweep_ns: tuple[int, ...]
    kv_requests: int
    kv_threads: tuple[int, ...]
    drain: int
    put_many: int
    put: int
    churn: int
    mp_items: int
    behind: int
    behind_held: int
    commit_seconds: float
    commit_threads: int = 8
    scale_n: int = 10**7            # the 10^7 lines
    scale_sweep_ref: int = 10**4    # their references: the sweep's n ...
    scale_put_many_ref: int = 10**5     # ... and put_many's


FULL = Sizes(sweep_ns=(10**3, 10**4, 10**5, 10**6), kv_requests=10**5, kv_threads=(1, 2, 10),
             drain=10**6, put_many=10**5, put=10**6, churn=10**5,
             mp_items=200_000, behind=10**4, behind_held=5000, commit_seconds=2.0)
SMALL = Sizes(sweep_ns=(10**3, 10**4), kv_requests=2000, kv_threads=(1, 10), drain=10**4,
              put_many=10**4, put=10**4, churn=2000, mp_items=20_000, behind=1000, behind_held=500,
              commit_seconds=0.3, scale_n=10**5, scale_sweep_ref=10**3, scale_put_many_ref=10**4)


@dataclass
class Row:
    """One row of the table: pyqstore's cell and each peer's, the goal on
    pyqstore's median over the best peer's median."""
    line: str
    label: str
    unit: str
    goal: Optional[float]
    ours: Cell
    peers: dict[str, Cell]
    ours_durability: str
    peer_durability: str
    #: a figure pyqstore's median must reach too, whatever the peers do
    floor: Optional[float] = None
    #: a figure pyqstore's median must not exceed (a row where less is
    #: better: peak RSS, bytes written); such a row has no peers, goal None
    ceiling: Optional[float] = None
    #: measured in the same rounds and reported, but not in the ratio
    beside: dict[str, Cell] = field(default_factory=dict)


# ------------------------------------------------------------------- cells

def _sweep_cell(name: str, ids: list[bytes]) -> Cell:
    backend = bk.by_name([name])[0]
    n = len(ids)

    def cell(wd: Workdir) -> float:
        with backend.session(True) as session:
            return n / sweep_run(backend, session, wd, True, "casket", lambda: ids)
    return cell


class KvRuns:
    """Seed 001's runs, shared by the kv-put and kv-get rows: one perf_run
    gives both a write figure and a read figure, so a cell takes the figure
    an earlier cell's run left for its phase, or runs perf_run and leaves
    the other phase's figure for the other row.  With both lines chosen,
    each run serves both rows and the kv lines take half the time; with
    one, each cell runs its own."""

    def __init__(self) -> None:
        self.left: dict[tuple[str, int, int], list[float]] = {}

    def cell(self, name: str, threads: int, keys: list[bytes], value: bytes,
             phase: int) -> Cell:
        """phase 0: writes/s of perf_run's write phase; 1: reads/s of its
        read phase."""
        backend = bk.by_name([name])[0]

        def cell(wd: Workdir) -> float:
            waiting = self.left.get((name, threads, phase))
            if waiting:
                return waiting.pop(0)
            with backend.session(False) as session:
                seconds = perf_run(backend, session, wd, False, threads, keys, value)
            self.left.setdefault((name, threads, 1 - phase), []).append(
                len(keys) / seconds[1 - phase])
            return len(keys) / seconds[phase]
        return cell


class Unavailable(Exception):
    """A side that cannot do a row's work here (its reason in the
    message): measure() drops it from the row and says why."""


class ScaleRuns:
    """The 10^7 lines' runs, each in a process of its own (scale.py).  One
    run gives several figures (items/s, peak RSS in MiB, bytes written per
    byte of the files), so the rows of a line share runs: each row's cell
    for (work, backend, n) takes the figure it names from the k-th run the
    k-th time it is called, and a run is made only when no row has made
    it yet (as KvRuns does for seed 001's two phases)."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, str, int], list[dict[str, float]]] = {}

    def cell(self, work: str, name: str, n: int, figure: str) -> Cell:
        key = (work, name, n)
        calls = 0

        def cell(wd: Workdir) -> float:
            nonlocal calls
            runs = self.done.setdefault(key, [])
            if calls == len(runs):
                runs.append(self._run(wd, work, name, n))
            calls += 1
            return runs[calls - 1][figure]
        return cell

    @staticmethod
    def _run(wd: Workdir, work: str, name: str, n: int) -> dict[str, float]:
        d = wd.fresh()
        try:
            p = subprocess.run([sys.executable, "-m", "qstore_bench.scale", "--work", work,
                                "--backend", name, "--n", str(n), "--dir", d],
                               capture_output=True, text=True, timeout=3600,
                               cwd=os.path.dirname(os.path.dirname(scale.__file__)))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if p.returncode != 0:
            raise Unavailable(p.stderr.strip().splitlines()[-1] if p.stderr.strip()
                              else f"exit status {p.returncode}")
        got = json.loads(p.stdout.strip().splitlines()[-1])
        return {"items_per_s": float(got["items_per_s"]),
                "peak_rss_mib": got["peak_rss_bytes"] / 2**20,
                "written_per_file_byte": got["written_bytes"] / got["file_bytes"]}


def _in_fresh(run: Callable[[str], float]) -> Cell:
    """A cell that runs run(d) in a fresh directory of the workdir and
    removes it afterwards."""
    def cell(wd: Workdir) -> float:
        d = wd.fresh()
        try:
            return run(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return cell


def _queue_cell(line: str, name: str, pay: list[bytes]) -> Cell:
    run = queue_lines.RUNNERS[line][name]
    return _in_fresh(lambda d: len(pay) / run(d, pay))


def _behind_cell(pay: list[bytes], held: int) -> Cell:
    return _in_fresh(lambda d: len(pay) / queue_lines.pq_get_behind(d, pay, held))


# The multi-process line is a script of its own (its worker processes are
# spawned from its module); a cell runs it as is, one backend and one rep.
MP_QUEUE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "scripts", "mp_queue.py")


def mp_queue_unavailable() -> Optional[str]:
    """Why the mp-queue line cannot run here, or None."""
    if not os.path.isfile(MP_QUEUE):
        return (f"needs the repository's bench/scripts/mp_queue.py ({MP_QUEUE} is not "
                "there: qstore_bench is installed without its repository)")
    return None


def _mp_cell(backend: str, items: int) -> Cell:
    def run(d: str) -> float:
        out = os.path.join(d, "mp.json")
        p = subprocess.run([sys.executable, MP_QUEUE, "--backends", backend, "--reps", "1",
                            "--items", str(items), "--dir", d, "--json", out],
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"mp_queue.py --backends {backend} failed "
                               f"(exit {p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
        with open(out) as f:
            result = json.load(f)
        if backend in result["failed"]:
            raise RuntimeError(f"mp_queue.py: {backend}: {result['failed'][backend]}")
        got = result["runs"][backend][0]
        if not got["exactly_once"]:
            raise RuntimeError(f"mp_queue.py: {backend} did not deliver every item "
                               "exactly once")
        return float(got["items_per_s"])
    return _in_fresh(run)


def _commit_cell(measure: Callable[[str, float, int], dict[str, Any]], seconds: float,
                 threads: int) -> Cell:
    return _in_fresh(lambda d: float(measure(d, seconds, threads)["per_s"]))


# -------------------------------------------------------------------- rows

LINES = ("sweep", "kv-put", "kv-get", "drain", "put_many", "put", "churn", "reserved-get",
         "mp-queue", "group-commit", "sweep-10m", "put_many-10m")
#: the lines a run without --lines measures: all but the 10^7 ones, which
#: take minutes and GiBs of disk
DEFAULT_LINES = tuple(x for x in LINES if not x.endswith("-10m"))
# what each line's cells do, on both sides, for the notes under the table
WORK = {
    "sweep": "one transaction of n items, each putdup(QUEUE, uuid) + putdup(uuid, uuid), "
             "36-byte uuid4 strings, up to the return of the commit",
    "kv-put": "put(random 16-byte key, 32-byte value), each its own commit, keys split "
              "over the threads, a handle per thread",
    "kv-get": "get of each key kv-put wrote: the read phase of the runs whose write phase "
              "is the kv-put row (without that row, each cell runs both phases)",
    "drain": "get_many(1000) (lmdb: a write txn reading and deleting 1000; rocksdb, "
             "leveldb: a seek to the key after the last taken, 1000 read, a WriteBatch "
             "deleting them) until empty, each batch its own transaction",
    "put_many": "Queue.put_many of n 36-byte items (lmdb: cursor.putmulti(append=True); "
                "rocksdb, leveldb: one synced WriteBatch)",
    "put": "Queue.put per item (lmdb: txn.put(append=True); rocksdb, leveldb: a put into "
           "one synced WriteBatch) in one transaction",
    "churn": "Queue.put then get_nowait, each its own commit (lmdb: two write txns; "
             "rocksdb, leveldb: a put, then a seek and a delete)",
    "reserved-get": "get_nowait of each item, each its own commit, behind held reserved "
                    "10 KB items (reference: the same gets with none held)",
    "mp-queue": "4 producer processes put_many(100), 4 consumer processes "
                "get_many(100, block=True) (sqlite3: INSERT / SELECT+DELETE in BEGIN "
                "IMMEDIATE, WAL), one file; exactly-once checked after the clock",
    "sweep-10m": "the sweep's transaction at its largest n, each cell a process of its own "
                 "(scale.py); peak RSS above the prepared ids; bytes written (/proc/self/io "
                 "write_bytes) over the bytes of the store's files at the end",
    "put_many-10m": "put_many's transaction at its largest n, each cell a process of its own "
                    "(scale.py)",
    "group-commit": "8 threads of autocommit put(key, 36-byte value) on one Casket; "
                    "floor: 8 threads each pwrite 4 KiB at its own offset + fdatasync; "
                    "ideal: group_commit_ideal.c, 8 threads sharing each fdatasync",
}


def _usable(names: tuple[str, ...], kind: str, report: dict[str, Any],
            threads: int = 1) -> list[str]:
    """The backends named that can run here (threads > 1: with a handle
    per thread, as perf_run needs); the others' reasons go into report."""
    if not names:
        return []       # (bk.by_name of no names means every backend)
    usable, status = backend_report(bk.by_name(list(names)), kind)
    report.update(status)
    out = []
    for b in usable:
        if threads > 1 and b.no_thread_handles:
            report[f"{b.name} ({threads} threads)"] = {
                "available": False, "reason": f"no handle per thread: {b.no_thread_handles}"}
        else:
            out.append(b.name)
    return out


def _report_pyqstore(report: dict[str, Any]) -> None:
    """pyqstore's version (or why it cannot run) into report, whatever the
    lines: it heads the table."""
    report.update(backend_report(bk.by_name(["pyqstore"]), "kv")[1])


def rows(lines: list[str], sizes: Sizes, report: dict[str, Any], seed: int = 17) -> list[Row]:
    """The rows of the chosen lines, peers limited to those usable here."""
    out: list[Row] = []
    rng = random.Random(seed)
    if "sweep" in lines:
        peers = [p for p in _usable(("pyqstore", "lmdb"), "casket", report) if p != "pyqstore"]
        for n in sizes.sweep_ns:
            ids = make_ids(n, 36, rng)      # seed 000's uuid4 strings, made before the clock
            out.append(Row("sweep", f"seed 000 sweep, n={n:,}", "items/s", 1.3,
                           _sweep_cell("pyqstore", ids), {p: _sweep_cell(p, ids) for p in peers},
                           SYNC_ON, SYNC_ON))
    keys = [rng.randbytes(16) for _ in range(sizes.kv_requests)]
    value = rng.randbytes(32)
    kv = KvRuns()
    for line, peer_names, beside_names, phase, goal, unit in (
            ("kv-put", KV_PEERS, LSM_PEERS, 0, 1.2, "writes/s"),
            ("kv-get", KV_PEERS + LSM_PEERS, (), 1, 1.0, "reads/s")):
        if line not in lines:
            continue
        for t in sizes.kv_threads:
            peers = _usable(peer_names, "kv", report, t)
            beside = _usable(beside_names, "kv", report, t)
            verb = "put" if phase == 0 else "get"
            out.append(Row(line, f"seed 001 {verb}, {t} thread{'s' if t > 1 else ''}, "
                           f"n={len(keys):,}", unit, goal,
                           kv.cell("pyqstore", t, keys, value, phase),
                           {p: kv.cell(p, t, keys, value, phase) for p in peers},
                           SYNC_OFF, SYNC_OFF,
                           beside={p: kv.cell(p, t, keys, value, phase) for p in beside}))
    queue_peers = ["lmdb"] if queue_lines.HAVE_LMDB else []
    if not queue_lines.HAVE_LMDB:
        report["lmdb"] = {"available": False, "reason": "py-lmdb is not installed: "
                          "pip install lmdb"}
    if any(x in lines for x in ("drain", "put_many", "put", "churn")):
        queue_peers += _usable(LSM_PEERS, "queue", report)
    queue_durability = SYNC_ON if queue_lines.DRAIN_SYNC else SYNC_OFF
    for line, n, what, goal, floor, unit, durability in (
            ("drain", sizes.drain, "drain, get_many(1000)", 1.3, None, "items/s",
             queue_durability),
            ("put_many", sizes.put_many, "put_many, one transaction", 1.3, None, "items/s",
             SYNC_ON),
            ("put", sizes.put, "put per item, one transaction", 1.3, None, "items/s",
             SYNC_ON),
            ("churn", sizes.churn, "churn 1:1, put + get", 1.5, 250e3,
             "pairs/s", SYNC_OFF)):
        if line in lines:
            pay = queue_lines.payloads(n)
            out.append(Row(line, f"{what}, n={n:,}", unit, goal,
                           _queue_cell(line, "pyqstore", pay),
                           {p: _queue_cell(line, p, pay) for p in queue_peers},
                           durability, durability, floor))
    if "reserved-get" in lines:
        pay = queue_lines.payloads(sizes.behind)
        held = sizes.behind_held
        out.append(Row("reserved-get", f"get behind {held:,} reserved, n={sizes.behind:,}",
                       "gets/s", 1 / 3, _behind_cell(pay, held),
                       {"none reserved (pyqstore)": _behind_cell(pay, 0)},
                       SYNC_OFF, SYNC_OFF))
    if "mp-queue" in lines:
        why = mp_queue_unavailable()
        if why:
            report["mp_queue.py"] = {"available": False, "reason": why}
        else:
            n = sizes.mp_items
            out.append(Row("mp-queue", f"4 producers + 4 consumers, batches of 100, n={n:,}",
                           "items/s", 3.0, _mp_cell("pyqstore", n),
                           {"sqlite3": _mp_cell("sqlite3", n)}, SYNC_OFF,
                           f"{SYNC_OFF} (synchronous=OFF, WAL)"))
    if "group-commit" in lines:
        t, s = sizes.commit_threads, sizes.commit_seconds
        references = {f"floor-{t} (no database)": _commit_cell(commit_rate.floor_threads, s, t)}
        why = commit_rate.ideal_unavailable()
        if why:
            report["group_commit_ideal"] = {"available": False, "reason": why}
        else:
            report["group_commit_ideal"] = {
                "available": True, "version": f"bench/scripts/group_commit_ideal.c, gather "
                f"{commit_rate.IDEAL_GATHER_US} us"}
            references[f"ideal-{t} (no database)"] = _commit_cell(commit_rate.ideal, s, t)
        out.append(Row("group-commit", f"one-put commits, {t} threads, {s:g} s",
                       "commits/s", 0.9, _commit_cell(commit_rate.pyqstore, s, t), references,
                       SYNC_ON, f"{SYNC_ON} (fdatasync)"))
    scale_rows(lines, sizes, report, out)
    return out


def scale_rows(lines: list[str], sizes: Sizes, report: dict[str, Any], out: list[Row]) -> None:
    """The 10^7 lines' rows (sizes.scale_n items), appended to out."""
    runs = ScaleRuns()
    n = sizes.scale_n
    if "sweep-10m" in lines:
        peers = [p for p in _usable(("pyqstore", "lmdb", "tokyocabinet"), "casket", report)
                 if p != "pyqstore"]
        ref = sizes.scale_sweep_ref
        out.append(Row("sweep-10m", f"seed 000 sweep, n={n:,}", "items/s", 1.3,
                       runs.cell("sweep", "pyqstore", n, "items_per_s"),
                       {p: runs.cell("sweep", p, n, "items_per_s") for p in peers},
                       SYNC_ON, SYNC_ON))
        out.append(Row("sweep-10m", f"seed 000 sweep, n={n:,} against n={ref:,}", "items/s",
                       0.5, runs.cell("sweep", "pyqstore", n, "items_per_s"),
                       {f"pyqstore at n={ref:,}": runs.cell("sweep", "pyqstore", ref,
                                                            "items_per_s")},
                       SYNC_ON, SYNC_ON))
        out.append(Row("sweep-10m", f"seed 000 sweep, n={n:,}, peak RSS", "MiB", None,
                       runs.cell("sweep", "pyqstore", n, "peak_rss_mib"), {}, SYNC_ON, "-",
                       ceiling=1024))
        out.append(Row("sweep-10m", f"seed 000 sweep, n={n:,}, bytes written", "per file byte",
                       None, runs.cell("sweep", "pyqstore", n, "written_per_file_byte"), {},
                       SYNC_ON, "-", ceiling=4.0))
    if "put_many-10m" in lines:
        peers = ["lmdb"] if queue_lines.HAVE_LMDB else []
        ref = sizes.scale_put_many_ref
        out.append(Row("put_many-10m", f"put_many, one transaction, n={n:,}", "items/s", 1.3,
                       runs.cell("put_many", "pyqstore", n, "items_per_s"),
                       {p: runs.cell("put_many", p, n, "items_per_s") for p in peers},
                       SYNC_ON, SYNC_ON))
        out.append(Row("put_many-10m", f"put_many, one transaction, n={n:,} against n={ref:,}",
                       "items/s", 1 / 1.5, runs.cell("put_many", "pyqstore", n, "items_per_s"),
                       {f"pyqstore at n={ref:,}": runs.cell("put_many", "pyqstore", ref,
                                                            "items_per_s")},
                       SYNC_ON, SYNC_ON))


# --------------------------------------------------------------------- run

def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def measure(row: Row, reps: int, wd: Workdir, progress: Progress = _quiet) -> dict[str, Any]:
    """The row's cells, the sides taking turns in each of reps rounds; the
    result with pyqstore's figures, each peer's, the best peer's median,
    the ratio and whether it meets the goal."""
    sides: dict[str, Cell] = {"pyqstore": row.ours, **row.peers, **row.beside}
    runs: dict[str, list[float]] = {name: [] for name in sides}
    unavailable: dict[str, str] = {}
    for r in range(reps):
        for name, cell in sides.items():
            if name in unavailable:
                continue
            progress(f"{row.line} {name} {r + 1}/{reps}")
            os.sync()       # an earlier cell's dirty pages are not written back in this one
            try:
                runs[name].append(cell(wd))
            except Unavailable as e:
                if name == "pyqstore":
                    raise RuntimeError(f"{row.label}: pyqstore failed: {e}") from e
                unavailable[name] = str(e)
    for name in unavailable:
        del runs[name]
    ours = _stats(runs["pyqstore"])
    medians = {name: statistics.median(xs) for name, xs in runs.items() if name in row.peers}
    peers = {name: {**_stats(runs[name]), "runs": runs[name]} for name in medians}
    beside = {name: {**_stats(xs), "runs": xs} for name, xs in runs.items()
              if name in row.beside}
    best: Optional[str] = max(medians, key=lambda p: medians[p]) if medians else None
    peer_median = medians[best] if best else None
    ratio = ours["median"] / peer_median if peer_median else None
    return {"line": row.line, "row": row.label, "work": WORK.get(row.line, ""),
            "unit": row.unit, "goal": row.goal,
            "pyqstore": {**ours, "runs": runs["pyqstore"]}, "peers": peers, "beside": beside,
            "best_peer": best, "peer_median": peer_median, "ratio": ratio,
            "floor": row.floor, "ceiling": row.ceiling, "unavailable": unavailable,
            "met": ((row.goal is None or (ratio is not None and ratio >= row.goal))
                    and (row.floor is None or ours["median"] >= row.floor)
                    and (row.ceiling is None or ours["median"] <= row.ceiling)),
            "pyqstore_durability": row.ours_durability,
            "peer_durability": row.peer_durability}


def run(lines: list[str], reps: int, small: bool, base: Optional[str] = None,
        progress: Progress = _quiet) -> dict[str, Any]:
    """Every row of the chosen lines, in one run."""
    bad = [x for x in lines if x not in LINES]
    if bad or not lines:
        raise ValueError(f"lines are {', '.join(LINES)}; not {', '.join(bad)}")
    report: dict[str, Any] = {}
    _report_pyqstore(report)
    sizes = SMALL if small else FULL
    with Workdir(base) as wd:
        info = machine(wd.root)
        table = rows(lines, sizes, report)
        results = [measure(row, reps, wd, progress) for row in table]
    return {"experiment": "goals", "reps": reps, "small": small, "machine": info,
            "backends": report, "rows": results,
            "all_met": all(x["met"] for x in results)}
