"""Process plumbing shared by bench/mp_queue.py and bench/mp_wake.py.

Worker processes open the store, report ("opened", name, None), wait for the
parent's go, do their part and report ("done", name, result) -- or
("error", name, "Type: message") on any exception.  The parent's Crew starts
them, collects the messages with every wait bounded, and always shuts them
down.  The stores' open/create helpers live here too; pyqstore is imported
only inside them, so that the sqlite3 half of a benchmark still runs when
the package cannot even be imported (a half-built engine).

Not a benchmark itself: the scripts put this directory on sys.path and
``import _mproc``.
"""
from __future__ import annotations

import contextlib
import os
import queue as pyqueue
import shutil
import sqlite3
import tempfile
import time


def now_ns() -> int:
    """CLOCK_MONOTONIC: one clock for every process on the host."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class RunFailed(Exception):
    pass


def add_limits(ap, openers: str, deadline: float, deadline_help: str) -> None:
    """The options this module reads from cfg: --lock-timeout (open_pyqstore),
    --open-timeout and --deadline (the Crew's bounds)."""
    ap.add_argument("--lock-timeout", type=float, default=None,
                    help="pyqstore.open lock_timeout (default: the library's)")
    ap.add_argument("--open-timeout", type=float, default=60.0,
                    help=f"seconds for {openers} to open the store")
    ap.add_argument("--deadline", type=float, default=deadline, help=deadline_help)


# ------------------------------------------------------------------ stores

def open_pyqstore(path: str, cfg: dict, qname: str):
    """(casket, queue qname) on path, sync off, cfg["lock_timeout"] if set."""
    import pyqstore
    kw = {} if cfg["lock_timeout"] is None else {"lock_timeout": cfg["lock_timeout"]}
    c = pyqstore.open(path, "w", sync=False, **kw)
    return c, c.queue(qname)


def create_pyqstore(path: str) -> None:
    import pyqstore
    pyqstore.open(path, "n", sync=False).close()


def open_sqlite(path: str) -> sqlite3.Connection:
    """Autocommit connection, busy_timeout 60 s, synchronous=OFF."""
    con = sqlite3.connect(path, isolation_level=None, timeout=60.0)
    con.execute("PRAGMA busy_timeout=60000")
    con.execute("PRAGMA synchronous=OFF")
    return con


def create_sqlite(path: str) -> None:
    """WAL file with table q (id INTEGER PRIMARY KEY, payload BLOB)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    con.close()


@contextlib.contextmanager
def fresh_store(base: str, name: str, create):
    """Path of a new store `name` made by create(path) in a fresh directory
    under base (RunFailed if that fails); the directory goes afterwards."""
    d = tempfile.mkdtemp(dir=base)
    path = os.path.join(d, name)
    try:
        try:
            create(path)
        except BaseException as e:
            raise RunFailed(f"creating the store: {describe(e)}") from None
        yield path
    finally:
        shutil.rmtree(d, ignore_errors=True)


def attempt(failed: dict, backend: str, run, *args):
    """run(*args) for backend; None, without running, once backend has
    failed, and None after a RunFailed, which is recorded in failed and
    printed as one line."""
    if backend in failed:
        return None
    try:
        return run(*args)
    except RunFailed as e:
        failed[backend] = str(e)
        print(f"{backend} failed: {e}", flush=True)
        return None


# ----------------------------------------------------------------- workers

def serve(name: str, out, open_store, body, waits, abort, timeout: float,
          prepare=None) -> None:
    """One worker's life, in its process: prepare() (if given), open the
    store, report "opened", wait for each event of waits (up to timeout;
    returning quietly if one does not come or abort is set), then body(store).
    A result other than None is reported as "done" once the store is closed;
    None means the worker gave up (aborted) and reports nothing.  Any
    exception is reported as "error"; the parent decides."""
    store = None
    try:
        if prepare is not None:
            prepare()
        store = open_store()
        out.put(("opened", name, None))
        for ev in waits:
            if not ev.wait(timeout) or abort.is_set():
                return
        res = body(store)
        if res is None:
            return
        s, store = store, None
        s.close()
        out.put(("done", name, res))
    except BaseException as e:  # reported; the parent decides
        out.put(("error", name, describe(e)))
    finally:
        if store is not None:
            try:
                store.close()
            except BaseException:
                pass


# ------------------------------------------------------------------ parent

class Crew:
    """The worker processes of one run and their messages.

    crew.go and crew.abort always exist; crew.event() makes more, which
    shutdown() sets too (after abort).  Add the workers with add(), passing
    crew.out, crew.go, crew.abort and any events in their args; then run()."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.abort = ctx.Event()
        self.go = ctx.Event()
        self.events = [self.go]
        self.out = ctx.Queue()
        self.procs: dict = {}
        self.seen: dict[str, dict] = {"opened": {}, "done": {}}

    def event(self):
        ev = self.ctx.Event()
        self.events.append(ev)
        return ev

    def add(self, name: str, target, *args) -> None:
        self.procs[name] = self.ctx.Process(target=target, name=name, daemon=True,
                                            args=args)

    def run(self, open_timeout: float, timeout: float) -> dict:
        """Start every worker, release them together once all have opened
        the store, and return their "done" results by name; RunFailed as
        collect() says.  The workers are shut down either way."""
        try:
            for p in self.procs.values():
                p.start()
            self.collect("opened", open_timeout)
            self.go.set()
            return self.collect("done", timeout)
        finally:
            self.shutdown()

    def collect(self, kind: str, timeout: float) -> dict:
        """Wait until every worker has sent `kind`; RunFailed on an error
        message, a worker that died silently, or the timeout."""
        end = time.monotonic() + timeout
        box = self.seen[kind]
        dead_since: dict[str, float] = {}
        while len(box) < len(self.procs):
            try:
                what, name, data = self.out.get(timeout=0.2)
            except pyqueue.Empty:
                t = time.monotonic()
                for name, p in self.procs.items():
                    if name not in box and p.exitcode is not None:
                        if t - dead_since.setdefault(name, t) > 2.0:
                            raise RunFailed(f"{name} exited (code {p.exitcode}) without "
                                            "reporting")
                if t > end:
                    missing = sorted(set(self.procs) - set(box))
                    raise RunFailed(f"timed out after {timeout:.0f} s waiting for "
                                    f"{', '.join(missing)} ({kind})")
                continue
            if what == "error":
                raise RunFailed(f"{name}: {data}")
            self.seen.setdefault(what, {})[name] = data
        return box

    def shutdown(self) -> None:
        self.abort.set()
        for ev in self.events:
            ev.set()
        end = time.monotonic() + 10.0
        for p in self.procs.values():
            p.join(max(0.1, end - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
                p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        self.out.close()
        self.out.cancel_join_thread()
