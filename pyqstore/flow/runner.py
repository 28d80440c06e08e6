"""The local runner: every node instance its own spawned process on one
shared casket in the run's directory, and a supervisor that restarts a
process that died, stops them all on SIGINT/SIGTERM after their current
firing, and ends the run when every instance has finished.  Running the
flow again on the same directory resumes it: every position, queue and
state is in the casket."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TextIO, Union

from .. import open as open_casket
from ..errors import FlowError, StaleOwner
from . import names, worker
from ._records import read_counter
from .display import LiveDisplay
from .firing import configure_queues
from .graph import Flow
from .layout import Topology, write_topology
from .owner import claim
from .chunks import count_items
from .pernode import DEFAULT_MAX_BATCHES, configure_inputs
from .status import collect

#: the layouts of a run's caskets: one shared casket, or one per node instance
LAYOUTS = ("shared", "per-node")
#: a new directory's layout when the caller names none: per-node, since
#: `qstore-bench flow chain` measured it 2.3x the shared layout's rate
#: (712k against 309k items/s end to end, 3 stages, batches of 1000, sync)
DEFAULT_LAYOUT = "per-node"

__all__ = ["run", "Runner", "Summary", "NodeSummary"]


@dataclass
class NodeSummary:
    name: str
    items_in: int
    items_out: int
    failed: int
    dead_letters: int
    restarts: int
    finished: bool


@dataclass
class Summary:
    """What a run did: per node its counters (over every run on the
    directory: they are committed with the firings), and whether the
    flow finished (False: stopped, run again to resume)."""
    finished: bool
    nodes: dict[str, NodeSummary] = field(default_factory=dict)

    def __str__(self) -> str:
        rows = [f"{'node':<16} {'in':>10} {'out':>10} {'failed':>8} {'dead':>6} {'restarts':>8}"]
        for n in self.nodes.values():
            rows.append(f"{n.name:<16} {n.items_in:>10} {n.items_out:>10} {n.failed:>8} "
                        f"{n.dead_letters:>6} {n.restarts:>8}")
        rows.append("finished" if self.finished else "stopped: run again on the directory to resume")
        return "\n".join(rows)


def summarize(casket: Any, flow: Flow, restarts: dict[tuple[str, int], int]) -> Summary:
    """The counters of every node; casket is the shared casket, or on the
    per-node layout a mapping (node, instance) -> that instance's casket."""
    def of(node: str, i: int) -> Any:
        return casket[(node, i)] if isinstance(casket, dict) else casket
    nodes = {}
    for n in flow.nodes.values():
        def total(what: str) -> int:
            return sum(read_counter(of(n.name, i), names.meta_key(n.name, i, what))
                       for i in range(n.parallelism))
        holders = {id(c): c for c in (of(n.name, i) for i in range(n.parallelism))}
        # the per-node layout's dead letters are chunks of items (.chunks)
        chunked = isinstance(casket, dict) and bool(flow.edges_into(n.name))
        nodes[n.name] = NodeSummary(
            n.name, total("in"), total("out"), total("failed"),
            sum(count_items(c.queue(names.dead_queue(n.name)), chunked)
                for c in holders.values()),
            sum(v for (name, _), v in restarts.items() if name == n.name),
            total("done") == n.parallelism)
    return Summary(all(s.finished for s in nodes.values()), nodes)


class Runner:
    """One run of a flow on a directory.  :meth:`run` blocks until the flow
    finished or was stopped; :meth:`stop` (or SIGINT/SIGTERM to a runner
    in the main thread) stops it; :meth:`pids` lists the node processes."""

    def __init__(self, flow: Flow, directory: str, *, sync: bool = True,
                 display: Union[bool, TextIO, None] = None, restart_pause: float = 0.1,
                 max_crashes: int = 5, layout: Optional[str] = None,
                 max_batches: int = DEFAULT_MAX_BATCHES) -> None:
        flow.validate()
        self.directory = os.fspath(directory)
        if layout is None:
            layout = recorded_layout(self.directory) or DEFAULT_LAYOUT
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'shared' or 'per-node', not {layout!r}")
        if isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1:
            raise ValueError(f"max_batches must be an int >= 1, not {max_batches!r}")
        self.layout = layout
        self.max_batches = max_batches
        self._epochs: dict[tuple[str, int], int] = {}
        self.max_crashes = max_crashes
        self._crashes: dict[tuple[str, int], int] = {}
        self.crashed: Optional[str] = None
        self.flow = flow
        self.sync = sync
        # True: standard output; a stream: there; False or None: nowhere
        stream: Optional[TextIO] = sys.stdout if display is True else \
            None if isinstance(display, bool) else display
        self.display = LiveDisplay(stream) if stream is not None else None
        self.topology = Topology.of(flow, layout)
        self.restart_pause = restart_pause
        self.restarts: dict[tuple[str, int], int] = {}
        self._procs: dict[tuple[str, int], Any] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def pids(self) -> dict[tuple[str, int], int]:
        """(node, instance) -> pid of each live node process."""
        with self._lock:
            return {k: p.pid for k, p in self._procs.items() if p.is_alive()}

    def stop(self) -> None:
        self._stop.set()

    def _start(self, mp: Any, key: tuple[str, int], epoch: int) -> None:
        if self.layout == "per-node":
            args: tuple[Any, ...] = (self.directory, key[0], key[1], self._epochs[key], self.sync,
                                     self.layout, self._epochs, self.max_batches)
        else:
            args = (self.directory, key[0], key[1], epoch, self.sync)
        p = mp.Process(target=worker.main, name=f"flow-{key[0]}-{key[1]}", args=args)
        p.start()
        with self._lock:
            self._procs[key] = p

    def run(self) -> Summary:
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, names.CASKET)
        mp = multiprocessing.get_context("spawn")
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, lambda *_: self._stop.set())
        keys = [(n.name, i) for n in self.flow.nodes.values() for i in range(n.parallelism)]
        try:
            self._check_layout()
            with contextlib.ExitStack() as caskets:
                if self.layout == "per-node":
                    os.makedirs(os.path.join(self.directory, names.NODES), exist_ok=True)
                    casket: Any = {}
                    for key in keys:
                        c = casket[key] = caskets.enter_context(open_casket(
                            os.path.join(self.directory, names.node_casket(*key)), sync=self.sync))
                        self._epochs[key] = claim(c)
                        configure_inputs(c, self.flow, *key)
                    epoch = 0
                else:
                    casket = caskets.enter_context(open_casket(path, sync=self.sync))
                    epoch = claim(casket)
                    configure_queues(casket, self.flow)
                self._write_flow()
                for key in keys:
                    self._start(mp, key, epoch)
                stale = self._supervise(mp, keys, epoch, casket)
                summary = summarize(casket, self.flow, self.restarts)
        finally:
            self._end_children()
            for sig, h in handlers.items():
                signal.signal(sig, h)
        if self.crashed:
            raise FlowError(f"the run on {self.directory!r} stopped: {self.crashed}")
        if stale:
            raise StaleOwner(f"another runner took {self.directory!r} over; this run stopped")
        if self.display is not None:
            self.display.end(summary)
        return summary

    def _check_layout(self) -> None:
        """Record the layout in the directory at its first run; a later run
        with the other layout is refused (FlowError), since it would not
        see the first's caskets."""
        path = os.path.join(self.directory, names.LAYOUT)
        found = recorded_layout(self.directory)
        if found and found != self.layout:
            raise FlowError(f"{self.directory!r} holds a run with layout {found!r}: run it again "
                            f"with layout={found!r}, or use another directory for "
                            f"layout={self.layout!r}")
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                f.write(self.layout + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)

    def _write_flow(self) -> None:
        """The flow, pickled, in the directory, where each node process
        reads it.  Not through the spawn's pipe: the parent writes a
        process's arguments to it inside start() and waits until the child
        has read all but a pipe's buffer (64 KiB), so a child dying while
        it starts (Ctrl-C reaches it before it can ignore SIGINT) would
        block the runner for ever on a flow holding a big source.  Beside
        it the topology (flow.json), for readers without the flow's code
        (``qstore flow status``, a producer)."""
        write_topology(self.directory, self.topology)
        path = os.path.join(self.directory, names.FLOW)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(self.flow, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    def _end_children(self, grace: float = 10.0) -> None:
        """No node process outlives the run: after an error in the runner
        (a KeyboardInterrupt before its handler was set, a failed spawn)
        the live ones get SIGTERM (they stop after their firing), and
        SIGKILL after grace seconds."""
        with self._lock:
            procs = list(self._procs.values())
        live = [p for p in procs if p.is_alive()]
        for p in live:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        for p in live:
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()

    def _opened(self, casket: Any) -> Callable[[str], Any]:
        """The runner's open caskets by their path in the layout, for
        :func:`collect`: the one shared casket, or each instance's."""
        if self.layout == "per-node":
            by_path = {names.node_casket(*key): c for key, c in casket.items()}
            return by_path.__getitem__
        return lambda _: casket

    def _supervise(self, mp: Any, keys: list[tuple[str, int]], epoch: int, casket: Any) -> bool:
        finished: set[tuple[str, int]] = set()
        told = False
        stale = False
        started = shown = time.monotonic()
        while len(finished) < len(keys):
            if self._stop.is_set() and not told:
                told = True
                for k, p in self.pids().items():
                    try:
                        os.kill(p, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            for key in keys:
                if key in finished:
                    continue
                p = self._procs[key]
                if p.is_alive():
                    continue
                p.join()
                code = p.exitcode
                if code == worker.EXIT_DONE:
                    finished.add(key)
                elif code == worker.EXIT_STALE:
                    stale = True
                    self._stop.set()
                    finished.add(key)
                elif self._stop.is_set():
                    finished.add(key)       # stopped (or died while stopping)
                else:
                    # died: its firing did not commit, its reservations come
                    # back.  A kill (a signal) is always restarted; a Python
                    # error outside a firing (in setup, a source's produce)
                    # would come back every time, so after max_crashes in a
                    # row the run stops instead of looping.
                    if code is not None and code > 0:
                        self._crashes[key] = self._crashes.get(key, 0) + 1
                        if self._crashes[key] >= self.max_crashes:
                            self.crashed = (f"node {key[0]}[{key[1]}] failed {self._crashes[key]} "
                                            f"times in a row (exit status {code}; its error is "
                                            f"on stderr)")
                            self._stop.set()
                            finished.add(key)
                            continue
                    else:
                        self._crashes.pop(key, None)
                    self.restarts[key] = self.restarts.get(key, 0) + 1
                    time.sleep(self.restart_pause)
                    self._start(mp, key, epoch)
            if self.display is not None and self.display.live and \
                    time.monotonic() - shown >= 1.0:
                shown = time.monotonic()
                self.display.update(collect(self.topology, self._opened(casket), with_state=False,
                                            with_reasons=False), shown - started)
            time.sleep(0.02)
        return stale


def recorded_layout(directory: str) -> str:
    """The layout of the runs the directory holds ("" for none yet).  A
    directory holding the shared casket and no record is a shared run of
    before the record existed."""
    try:
        with open(os.path.join(directory, names.LAYOUT)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return "shared" if os.path.exists(os.path.join(directory, names.CASKET)) else ""


def run(flow: Flow, directory: str, *, sync: bool = True,
        display: Union[bool, TextIO, None] = True, restart_pause: float = 0.1,
        max_crashes: int = 5, layout: Optional[str] = None,
        max_batches: int = DEFAULT_MAX_BATCHES, runner: str = "local", **ray: Any) -> Summary:
    """Run flow on directory with the local runner (see :class:`Runner`)
    and return the :class:`Summary`; a second run on the same directory
    resumes where the first stopped.  display: True for standard output,
    or a stream: on a terminal a live display (each node's items in and
    out per second, the items in its input ports, its dead letters),
    redrawn every second, and the summary at the end; on a stream that is
    not a terminal only the summary; False or None: nothing.  layout
    "per-node": each node instance its own casket, ``DIR/nodes/NODE.I.qdb``,
    and every edge the exactly-once transfer, through outboxes of at most
    max_batches unsent batches; "shared": every node in one casket,
    ``DIR/flow.qdb``.  A directory keeps the layout of its first run
    (FlowError for the other); None (the default) takes the directory's,
    or per-node (:data:`DEFAULT_LAYOUT`) for a new one.  FlowError when a node process failed
    max_crashes times in a row with a Python error (not a kill);
    StaleOwner when another runner took the directory over.

    runner "ray": on a Ray cluster instead, every node instance an actor
    with its own casket (the per-node layout; restart_pause, max_crashes
    and layout do not apply), with :func:`pyqstore.flow.rayrunner.start`'s
    keywords (name, namespace, volumes, address) and timeout in ray."""
    if runner == "ray":
        from . import rayrunner
        stream = sys.stdout if display is True else None if isinstance(display, bool) else display
        return rayrunner.run(flow, directory, sync=sync, display=stream,
                             max_batches=max_batches, **ray)
    if runner != "local":
        raise ValueError(f"runner must be 'local' or 'ray', not {runner!r}")
    if ray:
        raise TypeError(f"the local runner takes no {', '.join(sorted(ray))}")
    return Runner(flow, directory, sync=sync, display=display, restart_pause=restart_pause,
                  max_crashes=max_crashes, layout=layout, max_batches=max_batches).run()
