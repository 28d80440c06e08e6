"""A Ray cluster on this machine, for the Ray tests and benchmark: a head
and worker nodes on 127.0.0.1, each worker offering volume resources
(``{"vol:NAME": 1}``), started and removed with ``ray.cluster_utils.Cluster``.

It refuses to start outside a network namespace holding only loopback
(:mod:`pyqstore.flow.netns`): on a machine with a real interface Ray binds
to that interface's address even when told 127.0.0.1.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from .netns import only_loopback

__all__ = ["LocalCluster"]


class LocalCluster:
    """A head node (no volume) and one worker per entry of ``volumes``,
    each offering ``{"vol:NAME": 1}`` for its names.  :meth:`replace`
    removes the worker offering a volume and adds one that offers the
    same volumes (the same directories: one machine), as a replacement
    machine that took the volume over would.  Use it as a context manager:
    it always shuts every Ray process down."""

    def __init__(self, volumes: Sequence[Sequence[str]], *, head_cpus: int = 1,
                 worker_cpus: int = 1, object_store_memory: int = 80 * 1024 * 1024,
                 timeout: float = 120.0) -> None:
        if not only_loopback():
            raise RuntimeError("LocalCluster runs only in a network namespace with loopback alone "
                               "(unshare -n sh -c 'ip link set lo up; exec ...'): Ray would bind "
                               "to this machine's interface address")
        from ray.cluster_utils import Cluster  # type: ignore[import-not-found, unused-ignore]

        self._node_args: dict[str, Any] = dict(node_ip_address="127.0.0.1", num_cpus=worker_cpus,
                                               object_store_memory=object_store_memory)
        self.timeout = timeout
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            self._node_args, num_cpus=head_cpus, include_dashboard=False))
        self.workers: dict[tuple[str, ...], Any] = {}
        try:
            for vols in volumes:
                self.add(tuple(vols))
        except BaseException:
            self.shutdown()
            raise

    @property
    def address(self) -> str:
        """The head's GCS address, for ``ray.init(address=...)``."""
        return str(self.cluster.address)

    def add(self, vols: Sequence[str]) -> None:
        """Start a worker offering vols and wait until the cluster has it."""
        vols = tuple(vols)
        self.workers[vols] = self.cluster.add_node(
            **self._node_args, resources={f"vol:{v}": 1 for v in vols})
        self.cluster.wait_for_nodes(self.timeout)

    def node_id(self, volume: str) -> str:
        """The Ray node id of the worker offering volume now."""
        return str(self._worker(volume)[1].node_id)

    def _worker(self, volume: str) -> tuple[tuple[str, ...], Any]:
        for vols, node in self.workers.items():
            if volume in vols:
                return vols, node
        raise KeyError(f"no worker offers volume {volume!r}")

    def remove(self, volume: str) -> tuple[str, ...]:
        """Remove (kill every process of) the worker offering volume;
        returns the volumes it offered."""
        vols, node = self._worker(volume)
        self.cluster.remove_node(node, allow_graceful=False)
        del self.workers[vols]
        return vols

    def replace(self, volume: str, pause: float = 0.0,
                removed: Optional[Callable[[], None]] = None) -> float:
        """Remove the worker offering volume, call removed (if given: what
        must happen while no worker offers the volume), and after pause
        seconds add a replacement offering the same volumes; returns the
        seconds the replacement took to join."""
        vols = self.remove(volume)
        if removed is not None:
            removed()
        time.sleep(pause)
        t = time.monotonic()
        self.add(vols)
        return time.monotonic() - t

    def shutdown(self) -> None:
        """Disconnect this process's driver (if any) and stop every node."""
        import ray  # type: ignore[import-not-found, unused-ignore]

        try:
            ray.shutdown()
        finally:
            self.cluster.shutdown()  # type: ignore[no-untyped-call, unused-ignore]

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Optional[object]) -> None:
        self.shutdown()
