"""The Ray runner: every node instance a Ray actor with its own casket on a
volume, pinned to the machine that has the volume, and the exactly-once
edges between them as actor calls.

``run(flow, directory, runner="ray")`` (or :func:`start` and then
:meth:`RayRun.wait`) creates, in a Ray namespace, one named, detached actor
per node instance, ``NAME/NODE/I``, and one for the run, ``NAME``, that
holds the flow.  An instance's actor asks for a sliver of the custom
resource ``vol:V`` of its node's volume V (``volumes=``), so Ray places it
on a machine that offers ``{"vol:V": 1}``; its casket lives in
``DIRECTORY/V``, where that machine has the volume.  Each actor has
``max_restarts=-1`` and ``max_task_retries=-1``: when its process or
machine dies, Ray starts it again on a machine offering the volume (a
replacement that took the volume over), where it reopens its casket,
raises the owner epoch and carries on from what the casket holds.  Every
method is safe to run again: ``accept`` is the edge's
``Inbox.accept``, whose mark drops a repeated batch, and the others read.

The driver keeps nothing: another driver reattaches with
:func:`attach` (the run's name and namespace) and waits for the end.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..errors import FlowError
from .edge import Verdict
from .graph import Flow
from .runner import NodeSummary, Summary

__all__ = ["start", "attach", "run", "RayRun", "RayTransport", "DEFAULT_NAMESPACE",
           "VOLUME_SHARE", "actor_name"]

#: the Ray namespace of a run unless the caller names one
DEFAULT_NAMESPACE = "pyqstore.flow"
#: the part of a volume's resource one node instance takes: a machine
#: offering ``{"vol:V": 1}`` hosts up to 1000 instances of that volume
VOLUME_SHARE = 0.001
#: how long one wait for an actor call's answer lasts before the caller
#: looks at its stop flag and waits again (the call itself stays pending)
POLL = 0.5


def _ray() -> Any:
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise FlowError("the Ray runner needs Ray: pip install 'pyqstore[ray]'") from None
    return ray


def actor_name(run: str, node: str, instance: int) -> str:
    """The name of a node instance's actor in the run's namespace."""
    return f"{run}/{node}/{instance}"


def _volumes(flow: Flow, volumes: Optional[Mapping[str, str]]) -> dict[str, str]:
    """node -> volume; a node not named keeps a volume of its own name."""
    vols = dict(volumes or {})
    unknown = sorted(set(vols) - set(flow.nodes))
    if unknown:
        raise FlowError(f"volumes name nodes the flow does not have: {', '.join(unknown)} "
                        f"(nodes: {', '.join(sorted(flow.nodes))})")
    for node, v in vols.items():
        if not isinstance(v, str) or not v or "/" in v or v in (".", ".."):
            raise FlowError(f"node {node!r}: volume {v!r} must be a non-empty name without '/'")
    return {n: vols.get(n, n) for n in flow.nodes}


class RayTransport:
    """The edge's transport between actors: :meth:`accept_many` is one
    actor call to the receiving instance's ``accept_many`` for every
    batch the sender offers at a time (:meth:`accept`, for one batch).  A
    call that does not
    answer (the receiver is down, restarting, or on a machine being
    replaced) is waited for in steps of POLL seconds, the same call: Ray
    retries it on the restarted actor (``max_task_retries=-1``), so no
    second copy piles up behind it.  It raises ConnectionError, one of the
    edge's TRANSPORT_ERRORS, when the receiver is gone for good or stop is
    set, and the sender offers the batch again later."""

    def __init__(self, run: str, namespace: str, node: str, instance: int,
                 stop: Optional[threading.Event] = None) -> None:
        self.run, self.namespace = run, namespace
        self.receiver = actor_name(run, node, instance)
        self.stop = stop or threading.Event()
        self._handle: Any = None
        # the call in flight: (edge, sender, its first seq) and its object ref
        self._pending: Optional[tuple[tuple[str, str, int], Any]] = None

    def __repr__(self) -> str:
        return f"<pyqstore.flow.RayTransport to {self.receiver!r} in {self.namespace!r}>"

    def _actor(self) -> Any:
        ray = _ray()
        if self._handle is None:
            try:
                self._handle = ray.get_actor(self.receiver, namespace=self.namespace)
            except ValueError as e:      # not created yet, or killed for good
                raise ConnectionError(f"{self!r}: no actor {self.receiver!r} ({e})") from None
        return self._handle

    def accept(self, edge: str, sender: str, seq: int, payloads: list[bytes]) -> Verdict:
        return self.accept_many(edge, sender, [(seq, payloads)])[0]

    def accept_many(self, edge: str, sender: str,
                    batches: Sequence[tuple[int, list[bytes]]]) -> list[Verdict]:
        ray = _ray()
        from ray.exceptions import RayActorError  # type: ignore[import-not-found, unused-ignore]

        key = (edge, sender, batches[0][0])
        if self._pending is not None and self._pending[0] == key:
            # offered again from the same first batch: wait for the call
            # still in flight (its verdicts cover a prefix; the next offer
            # carries the rest)
            ref = self._pending[1]
        else:
            ref = self._actor().accept_many.remote(edge, sender, list(batches))
            self._pending = (key, ref)
        while True:
            ready, _ = ray.wait([ref], timeout=POLL)
            if ready:
                break
            if self.stop.is_set():
                raise ConnectionError(f"{self!r}: stopped while batches from {batches[0][0]} "
                                      f"of {sender!r} on {edge!r} waited for an answer")
        self._pending = None
        try:
            return [Verdict(v) for v in ray.get(ref)]
        except RayActorError as e:
            self._handle = None          # dead for good: look it up again next time
            raise ConnectionError(f"{self!r}: {type(e).__name__}: {e}") from None

    def close(self) -> None:
        """Forget the handle and the call in flight (nothing to close)."""
        self._handle = None
        self._pending = None


class NodeActor:
    """The body of a node instance's actor (wrapped by ``ray.remote`` in
    :func:`_actor_classes`).  Made again by Ray after every restart: it
    opens the instance's casket at path, claims it (the old owner, if it
    still runs somewhere, is fenced off), and runs the per-node layout's
    loop in a thread: fire, finish, until everything it sent was
    delivered; its Sender threads offer the outboxes' batches to the
    receiving actors.  Ray calls :meth:`accept` from the senders of other
    actors meanwhile."""

    def __init__(self, flow: Flow, node: str, instance: int, path: str, run: str,
                 namespace: str, sync: bool, max_batches: int) -> None:
        import os

        from .. import open as open_casket
        from . import names
        from ._records import read_counter, write_counter
        from .owner import claim
        from .pernode import NodeInstance, Sender, configure_inputs

        self.node, self.instance = node, instance
        self._stop = threading.Event()
        self.error: Optional[str] = None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.casket = open_casket(path, sync=sync)
        self.epoch = claim(self.casket)
        starts = names.meta_key(node, instance, "starts")
        with self.casket.transaction():
            write_counter(self.casket, starts, read_counter(self.casket, starts) + 1)
        configure_inputs(self.casket, flow, node, instance)
        self.inst = NodeInstance(self.casket, flow, node, instance, self.epoch,
                                 should_stop=self._stop.is_set, max_batches=max_batches)
        self.sender = Sender(self.inst, lambda n, j: RayTransport(run, namespace, n, j,
                                                                   self._stop))
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"flow {node}[{instance}]")
        self._thread.start()

    def _loop(self) -> None:
        # the local runner's loop, in a thread: the actor's methods keep
        # answering while it fires
        from .loop import serve

        try:
            self.sender.start()
            serve(self.inst, self._stop.is_set, self.sender)
        except BaseException as e:
            self.error = f"{type(e).__name__}: {e}"
            self.sender.stop()

    def accept_many(self, edge: str, sender: str,
                    batches: list[tuple[int, list[bytes]]]) -> list[str]:
        """The receiving end of the RayTransport: the instance's
        Inbox.accept_many; the verdicts' values (strs) travel back."""
        return [v.value for v in self.inst.accept_many(edge, sender, batches)]

    def progress(self) -> dict[str, Any]:
        """The instance's counters, read from its casket, and its state."""
        from . import names
        from ._records import read_counter
        from .chunks import count_items

        def count(what: str) -> int:
            return read_counter(self.casket, names.meta_key(self.node, self.instance, what))

        done = bool(count("done"))
        return {"in": count("in"), "out": count("out"), "failed": count("failed"),
                "dead": count_items(self.casket.queue(names.dead_queue(self.node)),
                                    self.inst.inbox is not None),
                "starts": count("starts"), "epoch": self.epoch,
                "node_id": _ray().get_runtime_context().get_node_id(),
                "finished": done and self.inst.drained(), "error": self.error}

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop after the current firing; True once the loop ended."""
        self._stop.set()
        self._thread.join(timeout)
        self.sender.stop()
        return not self._thread.is_alive()


class RunActor:
    """The run's own actor, ``NAME``: what a driver needs to reattach."""

    def __init__(self, flow: Flow, directory: str, volumes: dict[str, str], sync: bool,
                 max_batches: int) -> None:
        self._info = (flow, directory, volumes, sync, max_batches)

    def info(self) -> tuple[Flow, str, dict[str, str], bool, int]:
        return self._info


_classes: Optional[tuple[Any, Any]] = None


def _actor_classes() -> tuple[Any, Any]:
    """The two actor classes, made once per process (Ray is imported only
    by a process that runs on Ray)."""
    global _classes
    if _classes is None:
        ray = _ray()
        # max_concurrency: accept calls from several senders and the
        # driver's progress calls run beside each other, in threads, while
        # the instance's own loop fires in its thread
        _classes = (ray.remote(max_restarts=-1, max_task_retries=-1, max_concurrency=8,
                               num_cpus=0)(NodeActor),
                    ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(RunActor))
    return _classes


def _node_path(directory: str, volume: str, node: str, instance: int) -> str:
    import os

    from . import names
    return os.path.join(directory, volume, names.node_casket(node, instance))


@dataclass
class RayRun:
    """A flow running on Ray under a name: :meth:`progress`, :meth:`wait`,
    :meth:`summary`, :meth:`stop`, :meth:`shutdown`.  Get one with
    :func:`start` or, from any driver, :func:`attach`."""

    name: str
    namespace: str
    flow: Flow
    directory: str
    volumes: dict[str, str]
    run_actor: Any
    actors: dict[tuple[str, int], Any]

    def __post_init__(self) -> None:
        self._last: dict[tuple[str, int], dict[str, Any]] = {}
        # an unanswered progress call per instance (one restarting): asked
        # again only once it answered, so calls do not pile up behind it
        self._asked: dict[tuple[str, int], Any] = {}

    def _poll(self, timeout: float) -> dict[tuple[str, int], dict[str, Any]]:
        ray = _ray()
        for key, a in self.actors.items():
            if key not in self._asked:
                self._asked[key] = a.progress.remote()
        refs = {ref: key for key, ref in self._asked.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in ready:
            key = refs[ref]
            del self._asked[key]
            try:
                self._last[key] = ray.get(ref)
            except Exception:   # the actor died in the call: its last answer stands
                pass
        return self._last

    def progress(self, timeout: float = 2.0) -> dict[str, NodeSummary]:
        """Per node its counters (over every run on the directory), from
        each instance's casket; an instance that does not answer within
        timeout (restarting) counts with its last answer."""
        got = self._poll(timeout)
        out = {}
        for n in self.flow.nodes.values():
            ps = [got.get((n.name, i)) for i in range(n.parallelism)]
            known = [p for p in ps if p is not None]
            out[n.name] = NodeSummary(
                n.name, sum(p["in"] for p in known), sum(p["out"] for p in known),
                sum(p["failed"] for p in known), sum(p["dead"] for p in known),
                sum(max(0, p["starts"] - 1) for p in known),
                len(known) == n.parallelism and all(p["finished"] for p in known))
        return out

    def errors(self) -> dict[tuple[str, int], str]:
        """The instances whose loop stopped with an error, and the error."""
        return {k: p["error"] for k, p in self._last.items() if p.get("error")}

    def summary(self) -> Summary:
        nodes = self.progress()
        return Summary(all(n.finished for n in nodes.values()), nodes)

    def wait(self, timeout: Optional[float] = None, poll: float = 0.2,
             display: Optional[Any] = None) -> Summary:
        """Block until every instance finished (its inputs exhausted, its
        finish committed, all it sent delivered) and return the summary.
        FlowError when an instance's loop stopped with an error;
        TimeoutError after timeout seconds (the run goes on)."""
        end = None if timeout is None else time.monotonic() + timeout
        shown = time.monotonic()
        while True:
            s = self.summary()
            errors = self.errors()
            if errors:
                raise FlowError("the Ray run %r stopped: %s" % (self.name, "; ".join(
                    f"{k[0]}[{k[1]}]: {e}" for k, e in sorted(errors.items()))))
            if s.finished:
                return s
            if display is not None and time.monotonic() - shown >= 1.0:
                shown = time.monotonic()
                print("  ".join(f"{n.name}: {n.items_in}>{n.items_out}"
                                for n in s.nodes.values()), file=display, flush=True)
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"the Ray run {self.name!r} did not finish in {timeout} s")
            time.sleep(poll)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every instance after its current firing (run it again with
        :func:`start` on the same directory to resume) and remove the
        actors."""
        ray = _ray()
        try:
            ray.get([a.stop.remote(timeout) for a in self.actors.values()], timeout=timeout + 5)
        except Exception:
            pass                # a dead one has nothing to stop
        self.shutdown()

    def shutdown(self) -> None:
        """Remove the run's actors for good (no restart); the caskets stay."""
        ray = _ray()
        for a in [*self.actors.values(), self.run_actor]:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass


def _connect(namespace: str, address: Optional[str]) -> Any:
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    return ray


def start(flow: Flow, directory: str, *, name: Optional[str] = None,
          namespace: str = DEFAULT_NAMESPACE, volumes: Optional[Mapping[str, str]] = None,
          sync: bool = True, max_batches: Optional[int] = None,
          address: Optional[str] = None) -> RayRun:
    """Start flow on Ray (connecting with ``ray.init(address)`` unless this
    process is connected already) under name (default: the flow's name)
    and return the :class:`RayRun`; the call does not wait.  volumes maps
    each node to the volume its caskets live on (default: a volume named
    after the node): every instance of node N runs on a machine offering
    the resource ``vol:V`` of its volume V, with its casket in
    ``directory/V/nodes/N.I.qdb`` there.  A run of that name that exists
    already in the namespace is reattached (its actors kept), and a run on
    a directory that holds a stopped one resumes it.  FlowError for an
    invalid flow or volumes, or a run of that name on another directory."""
    from .pernode import DEFAULT_MAX_BATCHES

    flow.validate()
    vols = _volumes(flow, volumes)
    name = name or flow.name
    if not isinstance(name, str) or not name or "/" in name:
        raise FlowError(f"run name {name!r} must be a non-empty str without '/'")
    mb = DEFAULT_MAX_BATCHES if max_batches is None else max_batches
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise FlowError(f"max_batches must be an int >= 1, not {max_batches!r}")
    ray = _connect(namespace, address)
    node_cls, run_cls = _actor_classes()
    directory = str(directory)
    run_actor = run_cls.options(name=name, namespace=namespace, lifetime="detached",
                                get_if_exists=True).remote(flow, directory, vols, sync, mb)
    found = ray.get(run_actor.info.remote())
    if found[1] != directory:
        raise FlowError(f"a Ray run {name!r} on {found[1]!r} exists in namespace {namespace!r}; "
                        f"attach to it, or name this one differently")
    actors = {}
    for n in flow.nodes.values():
        for i in range(n.parallelism):
            actors[(n.name, i)] = node_cls.options(
                name=actor_name(name, n.name, i), namespace=namespace, lifetime="detached",
                get_if_exists=True, resources={f"vol:{vols[n.name]}": VOLUME_SHARE},
            ).remote(flow, n.name, i, _node_path(directory, vols[n.name], n.name, i), name,
                     namespace, sync, mb)
    return RayRun(name, namespace, flow, directory, vols, run_actor, actors)


def attach(name: str, *, namespace: str = DEFAULT_NAMESPACE,
           address: Optional[str] = None) -> RayRun:
    """The running flow called name in namespace, for a driver that did
    not start it (the first one died, or another process wants to watch).
    FlowError when there is no such run."""
    ray = _connect(namespace, address)
    try:
        run_actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise FlowError(f"no Ray run {name!r} in namespace {namespace!r}") from None
    flow, directory, vols, _, _ = ray.get(run_actor.info.remote())
    actors = {}
    for n in flow.nodes.values():
        for i in range(n.parallelism):
            try:
                actors[(n.name, i)] = ray.get_actor(actor_name(name, n.name, i),
                                                    namespace=namespace)
            except ValueError:
                raise FlowError(f"the Ray run {name!r} has no actor for {n.name}[{i}]: "
                                f"it was shut down") from None
    return RayRun(name, namespace, flow, directory, vols, run_actor, actors)


def run(flow: Flow, directory: str, *, display: Optional[Any] = None,
        timeout: Optional[float] = None, **kw: Any) -> Summary:
    """Start flow on Ray (:func:`start`'s arguments), wait until it
    finished, remove its actors and return the summary.  Ctrl-C stops
    every instance after its current firing (run again to resume)."""
    r = start(flow, directory, **kw)
    try:
        summary = r.wait(timeout=timeout, display=display)
    except KeyboardInterrupt:
        r.stop()
        raise
    r.shutdown()
    if display is not None:
        print(summary, file=display)
    return summary
