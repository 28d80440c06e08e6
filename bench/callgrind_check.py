#!/usr/bin/env python3
"""Instruction counts under callgrind, kept as a CI-checked baseline.

Wall-clock benchmarks on a shared machine are noisy; the number of
instructions executed for a fixed, deterministic piece of work is not.
This script runs a small driver under ``valgrind --tool=callgrind`` and
reports *instructions per item* for each phase:

  casket_putdup_loop   seed 000 through the Casket layer: n ids, inside
                       ``with c.transaction()`` a loop of
                       ``putdup(b"QUEUE", id); putdup(id, id)`` (commit
                       included); per id
  casket_putdup_many   the same 2n pairs built as a list and given to one
                       ``putdup_many`` in a transaction (building the pair
                       list is counted, as in bench/scripts/seed000.py); per id
  queue_put_many       ``q.put_many(payloads)``: n items in one call; per item
  queue_put_txn        ``q.put(p)`` for each of n payloads inside one
                       transaction; per item
  queue_get_many       drain a queue of n items with ``get_many(1000)``
                       (the queue is filled before measuring); per item
  queue_churn          ``q.put(p); q.get()`` pairs, each call its own
                       commit, on an empty queue; per pair
  queue_reserve_ack    a flow node's firing: per transaction, ack the
                       batch reserved by the last one and reserve the next
                       ``reserve_many(1000)``, over n items filled before
                       measuring; per item
  casket_get           seed 001's read: ``get(id)`` of each of n ids put
                       (one transaction) before measuring, a 36-byte value
                       each, through the call that keeps the GIL
                       (pyqstore._heldcalls) where it is built; per get

n is 10**4 (``--n``), churn 10**3 pairs (``--churn``).  The inputs are
deterministic: 36-byte uuid-formatted ids from ``random.Random(seed)`` (no
uuid4), ``PYTHONHASHSEED=0``, fresh files with fixed names.

Measuring only the phase.  Each phase runs in its own callgrind process
started with ``--collect-atstart=no --toggle-collect=ffi_call``: Python
startup, imports, making the ids, opening the casket and filling the queue
run with collection off; the phase itself is called through a ctypes
callback (``ctypes.CFUNCTYPE(None)(phase)()``), so it runs inside libffi's
``ffi_call`` and is the only thing collected.  (Nothing in the phases calls
through libffi -- pyqstore's cffi binding is API mode -- so the toggle is
not nested; the ctypes round trip adds a few thousand instructions, which is
nothing next to a phase.)  A run whose profile does not show pyqstore's
extension (``_qstore*.so``) is rejected, so a marker that stopped working
cannot pass silently.

Caskets are opened with ``sync=False``: callgrind counts user-space
instructions only and never sees time spent waiting for the disk, and the
user-space work of a commit is the same either way apart from the
fdatasync calls themselves; sync off just keeps the run fast.

Two figures per phase: ``ir_per_item`` (every instruction of the phase:
interpreter, cffi, libc and the C core) and ``core_ir_per_item`` (the
instructions whose function lies in ``_qstore*.so``, i.e. the C core and
the cffi wrappers compiled into it -- self cost, not inclusive).

Usage (from the repository root):

  python bench/callgrind_check.py            run and print, compare to the
                                             baseline if there is one
  python bench/callgrind_check.py --check    exit 1 if any figure is more than
                                             10% (``--tolerance``) above
                                             bench/callgrind_baseline.json
  python bench/callgrind_check.py --update   rewrite the baseline

The baseline records the valgrind and Python versions it was made with
(and the extension's file name: a setuptools/pip build gives
``_qstore.abi3.so``, ``python pyqstore/_build.py`` a
``_qstore.cpython-3XX-*.so``); a different version is reported, but the
check still applies.  Counts shift a little with the interpreter build and
the compiler flags (Debian's python3 against a pyenv build of the same
3.11: within about 8%), so make the baseline in the environment CI uses
-- Debian's python3 in a venv with ``pip install -e .``, as .ci/run does --
not with another interpreter.  The phases run
``--jobs`` at a time (default: the number of CPUs).
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE = os.path.join(HERE, "callgrind_baseline.json")
PHASES = ["casket_putdup_loop", "casket_putdup_many", "queue_put_many",
          "queue_put_txn", "queue_get_many", "queue_churn", "queue_reserve_ack",
          "casket_get"]
FIGURES = ["ir_per_item", "core_ir_per_item"]
SEED = 1000
MARKER = "ffi_call"
CORE_RE = re.compile(r"_qstore[^/]*\.so$")


# --------------------------------------------------------------------------
# the driver: one phase, run under callgrind


def _ids(n, seed):
    import random
    import uuid
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
            for _ in range(n)]


def _child(phase, n, churn, d):
    import ctypes
    import gc
    import pyqstore

    QUEUE = b"QUEUE"
    path = os.path.join(d, "cg.qdb")
    c = pyqstore.open(path, "n", sync=False)
    items = n
    if phase == "casket_putdup_loop":
        ids = _ids(n, SEED)

        def run():
            putdup = c.putdup
            q = QUEUE
            with c.transaction():
                for u in ids:
                    putdup(q, u)
                    putdup(u, u)
    elif phase == "casket_putdup_many":
        ids = _ids(n, SEED)

        def run():
            q = QUEUE
            pairs = []
            append = pairs.append
            for u in ids:
                append((q, u))
                append((u, u))
            with c.transaction():
                c.putdup_many(pairs)
    elif phase == "queue_put_many":
        payloads = _ids(n, SEED)
        q = c.queue("q")

        def run():
            q.put_many(payloads)
    elif phase == "queue_put_txn":
        payloads = _ids(n, SEED)
        q = c.queue("q")

        def run():
            put = q.put
            with c.transaction():
                for p in payloads:
                    put(p)
    elif phase == "queue_get_many":
        q = c.queue("q")
        q.put_many(_ids(n, SEED))

        def run():
            get_many = q.get_many
            got = 0
            while True:
                b = get_many(1000)
                if not b:
                    break
                got += len(b)
            if got != n:
                raise AssertionError("drained %d of %d" % (got, n))
    elif phase == "queue_churn":
        payloads = _ids(churn, SEED)
        items = churn
        q = c.queue("q")

        def run():
            put = q.put
            get = q.get
            for p in payloads:
                put(p)
                if get() != p:
                    raise AssertionError("churn: wrong item")
    elif phase == "queue_reserve_ack":
        q = c.queue("q")
        q.put_many(_ids(n, SEED))

        def run():
            # the firing's transaction: the last batch acked, the next
            # reserved with it (a reserve in a transaction never waits)
            got = 0
            batch = q.reserve_many(1000)
            while batch is not None:
                got += len(batch)
                with c.transaction():
                    batch.ack()
                    batch = q.reserve_many(1000) if len(q) else None
            if got != n:
                raise AssertionError("reserved and acked %d of %d" % (got, n))
    elif phase == "casket_get":
        ids = _ids(n, SEED)
        with c.transaction():
            for u in ids:
                c.put(u, u)

        def run():
            get = c.get
            for u in ids:
                if get(u) != u:
                    raise AssertionError("get: wrong value")
    else:
        raise SystemExit("unknown phase %r" % phase)

    # The phase runs inside ffi_call (collection toggles on at its entry and
    # off at its exit).  An exception in a ctypes callback is only printed,
    # so it is carried out by hand.
    errors = []

    def guarded():
        try:
            run()
        except BaseException as e:  # noqa: B902 - re-raised below
            errors.append(e)

    cb = ctypes.CFUNCTYPE(None)(guarded)
    # Start from an empty young generation whatever the imports allocated
    # (whether .pyc files existed, say), so the cyclic GC runs at the same
    # points of the phase every time.
    gc.collect()
    cb()
    if errors:
        raise errors[0]
    c.close()
    print(json.dumps({"phase": phase, "items": items}))


# --------------------------------------------------------------------------
# the parent: run the phases under callgrind, read the profiles


def _valgrind_version():
    try:
        return subprocess.run(["valgrind", "--version"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def parse_profile(path):
    """(total Ir, self Ir in _qstore*.so, names of objects seen)."""
    total = None
    core = 0
    objs = {}
    cur_ob = None
    skip_next = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if skip_next:           # the inclusive cost line after calls=
                skip_next = False
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            ch = line[:1]
            if ch.isdigit() or ch in "+-*":
                if cur_ob is not None and CORE_RE.search(cur_ob):
                    parts = line.split()
                    if len(parts) > 1:
                        core += int(parts[1])
                continue
            if line.startswith("ob="):
                m = re.match(r"ob=(?:\((\d+)\))?\s*(.*)", line.rstrip("\n"))
                ident, name = m.group(1), m.group(2)
                if ident is not None:
                    if name:
                        objs[ident] = name
                    cur_ob = objs.get(ident, name)
                else:
                    cur_ob = name
                    objs[name] = name
            elif line.startswith("cob="):
                # cob= may define a compressed name too; record it
                m = re.match(r"cob=(?:\((\d+)\))?\s*(.*)", line.rstrip("\n"))
                if m.group(1) is not None and m.group(2):
                    objs[m.group(1)] = m.group(2)
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    return total, core, set(objs.values())


def run_phase(phase, n, churn, workdir, keep):
    d = tempfile.mkdtemp(prefix="cg-%s-" % phase, dir=workdir)
    out = os.path.join(d, "callgrind.out")
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               PYTHONMALLOC="pymalloc")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"]
                                if env.get("PYTHONPATH") else "")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
           "--collect-atstart=no", "--toggle-collect=" + MARKER,
           "--dump-instr=no", "--compress-strings=no",
           sys.executable, os.path.abspath(__file__),
           "--_phase", phase, str(n), str(churn), d]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError("phase %s failed (exit %d):\n%s\n%s" % (
            phase, p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    info = json.loads(p.stdout.strip().splitlines()[-1])
    total, core, objs = parse_profile(out)
    if not total or not any(CORE_RE.search(o) for o in objs) or core == 0:
        raise RuntimeError(
            "phase %s: the profile does not show pyqstore's extension "
            "(total=%r, core=%r): the %s marker did not collect the phase; "
            "profile kept in %s" % (phase, total, core, MARKER, d))
    if not keep:
        shutil.rmtree(d, ignore_errors=True)
    items = info["items"]
    ext = sorted(os.path.basename(o) for o in objs if CORE_RE.search(o))[0]
    return {"items": items, "ir": total, "core_ir": core, "extension": ext,
            "ir_per_item": round(total / items, 1),
            "core_ir_per_item": round(core / items, 1),
            "seconds": round(dt, 1)}


def run_all(args):
    workdir = tempfile.mkdtemp(prefix="callgrind-check-", dir=args.dir)
    phases = args.phases.split(",") if args.phases else PHASES
    for ph in phases:
        if ph not in PHASES:
            raise SystemExit("unknown phase %r (choose from %s)"
                             % (ph, ", ".join(PHASES)))
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ph: ex.submit(run_phase, ph, args.n, args.churn, workdir,
                                  args.keep) for ph in phases}
            results = {ph: futs[ph].result() for ph in phases}
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("profiles kept under", workdir)
    return results, time.monotonic() - t0


def meta(args):
    return {
        "valgrind": _valgrind_version(),
        "python": sys.version.split()[0],
        "python_build": " ".join(sys.version.split()[1:]),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "n": args.n,
        "churn": args.churn,
        "seed": SEED,
        "sync": False,
        "marker": "--collect-atstart=no --toggle-collect=" + MARKER,
    }


def print_table(results, base):
    print("%-20s %8s %14s %14s %16s %8s" % (
        "phase", "items", "Ir/item", "core Ir/item", "vs baseline", "secs"))
    for ph, r in results.items():
        cmp = ""
        b = (base or {}).get("phases", {}).get(ph)
        if b:
            cmp = "%+.2f%% / %+.2f%%" % (
                100.0 * (r["ir_per_item"] / b["ir_per_item"] - 1),
                100.0 * (r["core_ir_per_item"] / b["core_ir_per_item"] - 1))
        print("%-20s %8d %14.1f %14.1f %16s %8.1f" % (
            ph, r["items"], r["ir_per_item"], r["core_ir_per_item"], cmp,
            r["seconds"]))


def compare(results, base, tol):
    """Lines naming every figure more than tol above its baseline."""
    bad = []
    for ph, r in results.items():
        b = base.get("phases", {}).get(ph)
        if b is None:
            bad.append("%s: no baseline for this phase (run --update)" % ph)
            continue
        for fig in FIGURES:
            old, new = b[fig], r[fig]
            if new > old * (1.0 + tol):
                bad.append("%s.%s: baseline %.1f, now %.1f (%+.1f%%, limit "
                           "+%.0f%%)" % (ph, fig, old, new,
                                         100.0 * (new / old - 1), 100 * tol))
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true",
                   help="exit 1 if a figure is above the baseline by more "
                        "than --tolerance")
    g.add_argument("--update", action="store_true",
                   help="rewrite the baseline with this run")
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--n", type=int, default=10**4)
    ap.add_argument("--churn", type=int, default=10**3)
    ap.add_argument("--phases", help="comma-separated subset")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--dir", help="where the temporary files go")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind profiles")
    ap.add_argument("--json", help="also write this run's figures here")
    ap.add_argument("--_phase", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._phase:
        ph, n, churn, d = args._phase
        _child(ph, int(n), int(churn), d)
        return 0

    if shutil.which("valgrind") is None:
        print("callgrind_check: valgrind is not installed", file=sys.stderr)
        return 2

    base = None
    if os.path.exists(args.baseline):
        with open(args.baseline, encoding="utf-8") as f:
            base = json.load(f)
    if args.check and base is None:
        print("callgrind_check: no baseline at %s (run --update)"
              % args.baseline, file=sys.stderr)
        return 2

    m = meta(args)
    if base is not None and (args.check or not args.update):
        for k in ("n", "churn", "seed"):
            if base.get(k) != m[k]:
                print("callgrind_check: baseline was made with %s=%r, this "
                      "run uses %r" % (k, base.get(k), m[k]), file=sys.stderr)
                if args.check:
                    return 2
        for k in ("valgrind", "python"):
            if base.get(k) != m[k]:
                print("note: baseline made with %s %s, this run uses %s"
                      % (k, base.get(k), m[k]))

    results, elapsed = run_all(args)
    print("%s, Python %s, n=%d, churn=%d, sync off; %.0f s"
          % (m["valgrind"], m["python"], args.n, args.churn, elapsed))
    print_table(results, base)

    m["extension"] = sorted({r["extension"] for r in results.values()})
    doc = dict(m, phases={
        ph: {k: r[k] for k in ("items", "ir_per_item", "core_ir_per_item")}
        for ph, r in results.items()})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(doc, raw=results), f, indent=2)
            f.write("\n")

    if args.update:
        if base is not None and args.phases:
            # keep the phases this run did not touch
            merged = dict(base.get("phases", {}))
            merged.update(doc["phases"])
            doc["phases"] = merged
        doc["tolerance"] = args.tolerance
        with open(args.baseline, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print("baseline written to", args.baseline)
        return 0

    if args.check:
        bad = compare(results, base, args.tolerance)
        if bad:
            print("callgrind_check: FAIL, instruction counts above the "
                  "baseline:")
            for line in bad:
                print("  " + line)
            return 1
        print("callgrind_check: OK, every figure within +%.0f%% of the "
              "baseline" % (100 * args.tolerance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
