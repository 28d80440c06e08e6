"""Stateful property test: asyncio waiters (get_async) against a model.

One event loop lives through the whole run.  The model is plain Python:

* ``queues``: queue name -> list of the payloads put, in order;
* ``taken``: queue name -> how many of them were consumed (by a waiter or
  a get_nowait): consumption always takes from the front, so the consumed
  payloads are exactly ``queues[name][:taken[name]]``;
* ``waiting``: the tasks not yet done, by queue name.

After every step the loop runs until it is quiet, and then: no queue holds
an item while a coroutine waits on it (a put woke it), every payload was
taken at most once and only from the front, the waiters armed in C are
exactly the coroutines still waiting, and a cancelled coroutine took
nothing.  Closing the casket fails every waiter with ClosedError; the
reopened casket holds what the model says.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore
from pyqstore import _aio
from test_queue_model import NAMES, names, small_payloads

QUIET = 10.0    # seconds a settle may take on a loaded machine


class AioMachine(RuleBasedStateMachine):

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-aiomodel-")
        self.path = os.path.join(self.dir, "q.qs")
        self.loop = asyncio.new_event_loop()
        self.c = pyqstore.open(self.path, "n", sync=False)
        self.qs = {n: self.c.queue(n) for n in NAMES}
        self.queues: dict[str, list[bytes]] = {n: [] for n in NAMES}
        self.taken: dict[str, int] = {n: 0 for n in NAMES}
        self.waiting: dict[str, list[asyncio.Task]] = {n: [] for n in NAMES}
        self.got: Counter = Counter()       # payload -> times consumed
        self.n = 0

    def teardown(self) -> None:
        try:
            self.c.close()
            self.settle()
            left = [t for ts in self.waiting.values() for t in ts]
            for t in left:
                t.cancel()
            if left:
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------- helpers

    def pending(self) -> int:
        return sum(len(ts) for ts in self.waiting.values())

    def quiet(self) -> bool:
        return all(not (self.waiting[n] and len(self.queues[n]) > self.taken[n])
                   for n in NAMES) and _aio.stats()["armed"] == self.pending()

    def settle(self) -> None:
        """Runs the loop until every woken waiter has taken its item."""
        deadline = time.monotonic() + QUIET
        while True:
            self.loop.run_until_complete(asyncio.sleep(0.001))
            self.reap()
            if self.quiet() or time.monotonic() > deadline:
                return

    def reap(self) -> None:
        for name, tasks in self.waiting.items():
            for t in [t for t in tasks if t.done()]:
                tasks.remove(t)
                if t.cancelled():
                    continue
                exc = t.exception()
                if isinstance(exc, pyqstore.ClosedError):
                    continue
                assert exc is None, exc
                self.took(name, t.result())

    def took(self, name: str, payload: bytes) -> None:
        assert self.taken[name] < len(self.queues[name]), (name, payload)
        assert self.queues[name][self.taken[name]] == payload
        self.taken[name] += 1
        self.got[payload] += 1

    # --------------------------------------------------------------- rules

    @rule(name=names, payload=small_payloads)
    def put(self, name: str, payload: bytes) -> None:
        self.n += 1
        p = b"%d:" % self.n + payload     # unique, so a double take shows
        self.qs[name].put(p)
        self.queues[name].append(p)
        self.settle()

    @rule(name=names)
    def wait(self, name: str) -> None:
        self.waiting[name].append(self.loop.create_task(self.qs[name].get_async()))
        self.settle()

    @rule(name=names)
    def get_nowait(self, name: str) -> None:
        try:
            p = self.qs[name].get_nowait()
        except pyqstore.Empty:
            assert self.taken[name] == len(self.queues[name])
            return
        self.took(name, p)

    @precondition(lambda self: self.pending() > 0)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        tasks = [(n, t) for n in NAMES for t in self.waiting[n]]
        name, task = data.draw(st.sampled_from(tasks))
        task.cancel()
        self.settle()
        assert task.done()

    @rule()
    def close_reopen(self) -> None:
        waiters = [t for ts in self.waiting.values() for t in ts]
        self.c.close()
        self.settle()
        for t in waiters:
            assert t.done() and isinstance(t.exception(), pyqstore.ClosedError)
        assert _aio.stats()["armed"] == 0 and _aio.stats()["handles"] == 0
        self.c = pyqstore.open(self.path, "w", sync=False)
        self.qs = {n: self.c.queue(n) for n in NAMES}

    # ---------------------------------------------------------- invariants

    @invariant()
    def quiet_after_each_step(self) -> None:
        assert self.quiet(), ({n: (len(self.waiting[n]), len(self.queues[n]) - self.taken[n])
                               for n in NAMES}, _aio.stats())

    @invariant()
    def lengths_match(self) -> None:
        for n in NAMES:
            assert len(self.qs[n]) == len(self.queues[n]) - self.taken[n]

    @invariant()
    def nothing_taken_twice(self) -> None:
        assert all(v == 1 for v in self.got.values())


TestAio = AioMachine.TestCase
TestAio.settings = settings(
    max_examples=int(os.environ.get("QS_MODEL_EXAMPLES", "25")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_machine_notices_a_lost_wakeup(monkeypatch):
    """The machine's quiet check is what catches a waiter that was never
    woken: with the notifier's collection of fired waiters switched off,
    a wait followed by a put does not settle."""
    m = AioMachine()
    try:
        monkeypatch.setattr(_aio._Notifier, "_ready", lambda self: None)
        monkeypatch.setattr("test_model_aio.QUIET", 0.3)
        m.wait("a")
        m.put("a", b"x")
        with pytest.raises(AssertionError):
            m.quiet_after_each_step()
    finally:
        monkeypatch.undo()
        m.teardown()
