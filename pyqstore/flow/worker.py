"""The process of one node instance under the local runner: open the
shared casket (or, on the per-node layout, the instance's own, and start
its sender loop), fire until the inputs are exhausted (per-node: and the
outboxes delivered) or the runner says stop.  Its exit status tells the
supervisor what happened."""
from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, Optional

from .. import open as open_casket
from ..errors import StaleOwner
from . import names
from .firing import Instance
from .loop import serve
from .pernode import NodeInstance, Sender
from .transport import local_transports

#: the instance finished: its inputs are exhausted and its finish committed
EXIT_DONE = 0
#: stopped by the runner (SIGTERM) after a firing; run again to resume
EXIT_STOPPED = 75
#: another owner took the casket over (a second runner on the directory)
EXIT_STALE = 76


def _stop_with_parent() -> None:
    """Ask Linux for a SIGTERM when the runner dies (prctl
    PR_SET_PDEATHSIG), so a killed runner leaves no node running on its
    own; elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
        if os.getppid() == 1:                    # the runner died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)


def main(directory: str, node: str, instance: int, epoch: int, sync: bool,
         layout: str = "shared", epochs: Optional[dict[tuple[str, int], int]] = None,
         max_batches: int = 0) -> None:
    """The process's body (the target of a spawned process).  layout
    "per-node": the instance's own casket, epochs the runner's claim of
    every instance's casket (its own and its receivers'), max_batches the
    bound of each outbox."""
    stop = []
    # Ctrl-C goes to the whole process group: the runner alone decides, and
    # tells each node with SIGTERM, which ends it after its current firing
    # (a flag, since an exception raised from a handler could land between
    # the statements of a transaction).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    _stop_with_parent()
    with open(os.path.join(directory, names.FLOW), "rb") as f:
        flow: Any = pickle.load(f)
    per_node = layout == "per-node"
    path = names.node_casket(node, instance) if per_node else names.CASKET
    sender = None
    with open_casket(os.path.join(directory, path), sync=sync) as casket:
        try:
            if per_node:
                assert epochs is not None
                inst: Any = NodeInstance(casket, flow, node, instance, epoch,
                                         should_stop=lambda: bool(stop), max_batches=max_batches)
                sender = Sender(inst, local_transports(directory, flow, epochs, sync))
                sender.start()
            else:
                inst = Instance(casket, flow, node, instance, epoch,
                                should_stop=lambda: bool(stop))
            sys.exit(EXIT_DONE if serve(inst, lambda: bool(stop), sender) else EXIT_STOPPED)
        except StaleOwner as e:
            print(f"pyqstore.flow: node {node}[{instance}]: {e}", file=sys.stderr)
            sys.exit(EXIT_STALE)
        finally:
            if sender is not None:
                sender.stop()
