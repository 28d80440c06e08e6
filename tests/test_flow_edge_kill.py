"""Exactly once across SIGKILL: a sender process and a receiver process,
each with its own casket, joined by an edge whose calls go over a Unix
socket; the test kills the sender, the receiver or both at random moments,
restarts them, and at the end the receiver's input port holds every payload
the sender produced, once, in order.

The sender is a replayable source: its position is state in its casket,
committed with the batch it produced (so a restarted sender neither skips
nor repeats); a producer thread fills the bounded outbox, waiting for room,
while the main thread runs transfer() to the receiver.  It holds at HOLD
until the test has made its kills (a gate file): on a fast machine it
would otherwise finish before the first kill.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import threading
import time
from multiprocessing.connection import Client, Listener
from typing import Any

import pyqstore
from pyqstore.flow import Inbox, Outbox, Verdict, claim, transfer

EDGE = "source.out->sink.in"
SENDER = "source#0"
TOTAL = 3000
HOLD = TOTAL // 2  # the sender produces no further until the gate exists
POSITION = b"source/position"  # the sender's state: the next item to produce
ROUNDS = 12
DEADLINE = 60.0  # seconds for the whole test, kills and the final run


def item(i: int) -> bytes:
    return b"item-%06d" % i


def batch_size(position: int) -> int:
    return 1 + position % 11


class SocketAccept:
    """Inbox.accept of the receiver process, called over its socket; any
    failure closes the connection and is raised as a transport error."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.conn: Any = None

    def __call__(self, edge: str, sender: str, seq: int, payloads: list[bytes]) -> Verdict:
        try:
            if self.conn is None:
                self.conn = Client(self.address, family="AF_UNIX")
            self.conn.send((edge, sender, seq, payloads))
            if not self.conn.poll(5.0):
                raise TimeoutError(f"no answer to batch {seq} within 5 s")
            return Verdict(self.conn.recv())
        except (OSError, EOFError):
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def sender_main(path: str, address: str, gate: str) -> None:
    with pyqstore.open(path) as c:
        box = Outbox(c, EDGE, SENDER, claim(c), max_batches=4)
        produced = threading.Event()

        def produce() -> None:
            while True:
                if not box.wait_for_room(timeout=1.0):
                    continue
                with c.transaction() as txn:
                    raw = c.get(POSITION)
                    position = int(raw) if raw is not None else 0
                    if position >= TOTAL:
                        break
                    held = position >= HOLD and not os.path.exists(gate)
                    if not held:
                        end = min(TOTAL, position + batch_size(position))
                        box.put([item(i) for i in range(position, end)], txn)
                        c.put(POSITION, b"%d" % end)
                if held:
                    time.sleep(0.01)
            produced.set()

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        accept = SocketAccept(address)
        while not (produced.is_set() and box.next() is None):
            transfer(box, accept, wait=0.2, backoff=0.005, max_backoff=0.2)
        accept.close()
        producer.join()


def receiver_main(path: str, address: str, gate: str) -> None:
    with pyqstore.open(path) as c:
        inbox = Inbox(c, claim(c), {EDGE: "in"})
        if os.path.exists(address):  # left by the receiver killed before
            os.unlink(address)
        with Listener(address, family="AF_UNIX") as listener:
            while True:
                conn = listener.accept()
                try:
                    while True:
                        edge, sender, seq, payloads = conn.recv()
                        conn.send(inbox.accept(edge, sender, seq, payloads).value)
                except (EOFError, OSError):
                    conn.close()  # the sender died or gave up; wait for the next


def test_every_payload_once_across_kills_of_sender_receiver_or_both(tmp_path):
    seed = int(os.environ.get("QS_KILL_SEED", time.time_ns() % 10**6))
    rnd = random.Random(seed)
    ctx = mp.get_context("spawn")
    spath, rpath = str(tmp_path / "sender.qs"), str(tmp_path / "receiver.qs")
    address = str(tmp_path / "receiver.sock")
    gate = str(tmp_path / "kills-made")
    mains = {"sender": (sender_main, spath), "receiver": (receiver_main, rpath)}
    procs: dict[str, Any] = {}
    killed_alive = {"sender": 0, "receiver": 0}

    def start(who: str) -> None:
        fn, path = mains[who]
        procs[who] = ctx.Process(target=fn, args=(path, address, gate), name=who, daemon=True)
        procs[who].start()

    start_time = time.monotonic()
    try:
        start("receiver")
        start("sender")
        for r in range(ROUNDS):
            time.sleep(rnd.uniform(0.05, 0.8))
            victims = [["sender"], ["receiver"], ["sender", "receiver"]][r % 3]
            for who in victims:
                p = procs[who]
                assert p.exitcode is None, f"seed {seed}: {who} ended before the gate opened"
                os.kill(p.pid, signal.SIGKILL)
                p.join(30)
                assert p.exitcode == -signal.SIGKILL, f"{who}: exit code {p.exitcode}"
                killed_alive[who] += 1
            for who in victims:
                start(who)
        open(gate, "wb").close()
        procs["sender"].join(max(1.0, DEADLINE - (time.monotonic() - start_time)))
        assert procs["sender"].exitcode == 0, (
            f"seed {seed}: the sender did not finish in {DEADLINE} s "
            f"(exit code {procs['sender'].exitcode})")
    finally:
        for p in procs.values():
            if p.exitcode is None:
                p.kill()
                p.join(30)

    assert killed_alive == {"sender": 8, "receiver": 8}, (seed, killed_alive)
    with pyqstore.open(rpath) as r, pyqstore.open(spath) as s:
        got = list(r.queue("in").iter())
        want = [item(i) for i in range(TOTAL)]
        assert len(got) == len(want), f"seed {seed}: {len(got)} items, {len(want)} put"
        assert got == want, f"seed {seed}: the port differs from what was put"
        assert s.get(POSITION) == b"%d" % TOTAL
        assert Outbox(s, EDGE, SENDER, claim(s)).next() is None
