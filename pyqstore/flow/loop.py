"""The loop of one node instance, on either layout: fire until its inputs
are exhausted and its finish committed (per-node: and everything it sent
delivered), or until told to stop.  The local runner's node process runs
it (:mod:`.worker`); so can any other host of an instance (a Ray actor)."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from .pernode import Sender

__all__ = ["serve"]


def serve(inst: Any, should_stop: Callable[[], bool], sender: Optional[Sender] = None) -> bool:
    """Run inst (a :class:`~pyqstore.flow.firing.Instance`, or a
    :class:`~pyqstore.flow.pernode.NodeInstance` with its started
    :class:`~pyqstore.flow.pernode.Sender`) until it finished (True) or
    should_stop() held between two firings (False: run it again to
    resume).  An error of the sender's threads (StaleOwner) is raised
    here; so is one of the instance outside its firings."""
    done = inst.done
    if not done:
        inst.setup()
    idle = 0.0
    while not should_stop():
        if sender is not None and sender.error is not None:
            raise sender.error
        if done:
            # per-node: finished once everything it sent is delivered
            if sender is None or inst.drained():
                return True
        elif inst.fire(timeout=0.05):
            idle = 0.0
            continue
        elif inst.try_finish():
            inst.close()
            done = True
            continue
        idle = min(idle * 2 or 0.001, 0.02)
        time.sleep(idle)
    if not done:
        inst.close()
    return False
