"""The gaps closed after issue 13's policy work: a full dead-letter queue
holds a dead item back instead of overfilling; a reserve's delivery count
survives the abort of the transaction it ran in and a SIGKILL of its
process with that transaction open; get on a codec queue counts no
delivery; a put with a priority or a delay waits for room like a plain
one."""
from __future__ import annotations

import time

import pytest

import pyqstore
from _procs import kill_child, recv


# ------------------------------------------------------ full dead-letter queue


def test_full_dead_letter_queue_holds_the_item(casket):
    """The move never overfills the dead-letter queue: the spent item stays
    in its queue (counted by len, handed to nobody) and moves with the
    first take after the dead-letter queue has room."""
    dead = casket.queue("dead", maxsize=1)
    dead.put(b"occupant")
    q = casket.queue("jobs", max_deliveries=1, dead_letter="dead")
    q.put_many([b"a", b"b"])
    q.reserve().release()                       # a: its one delivery
    it = q.reserve()
    assert it.payload == b"b"                   # a held back, b delivered
    it.release()
    assert (len(q), len(dead)) == (2, 1)
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)                      # both spent, neither moves
    assert (len(q), len(dead)) == (2, 1)
    assert dead.get() == b"occupant"
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)                      # moves a, holds b back
    assert (len(q), len(dead)) == (1, 1)
    assert dead.get() == b"a"
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)
    assert (len(q), len(dead)) == (0, 1)
    assert dead.get() == b"b"


# ------------------------------------------- waiting puts with order


def test_put_with_priority_or_delay_waits_and_times_out(casket):
    q = casket.queue("b", maxsize=1)
    q.put(b"fill")
    t0 = time.monotonic()
    with pytest.raises(pyqstore.Full):
        q.put(b"p", priority=5, timeout=0.2)
    assert time.monotonic() - t0 >= 0.15          # it waited, then gave up
    with pytest.raises(pyqstore.Full):
        q.put(b"d", delay=1.0, block=False)
    with pytest.raises(ValueError):
        q.put(b"p", priority=10, timeout=0.2)     # bad input before any wait
    assert len(q) == 1
    with casket.transaction():
        with pytest.raises(pyqstore.Full):
            q.put(b"p", priority=1, timeout=5)    # inside one: Full at once


def _priority_producer(conn, path):
    c = pyqstore.open(path, sync=False)
    q = c.queue("b")
    conn.send("ready")
    t0 = time.monotonic()
    i = q.put(b"urgent", priority=9, timeout=30)
    conn.send((i, time.monotonic() - t0))
    c.close()


def test_blocked_priority_put_woken_by_consumer_in_other_process(path, kids):
    c = pyqstore.open(path, "n", sync=False)
    try:
        q = c.queue("b", maxsize=2)
        q.put_many([b"1", b"2"])
        p, conn = kids.start(_priority_producer, path)
        assert recv(conn, p) == "ready"
        time.sleep(0.3)                         # it is blocked on Full by now
        assert len(q) == 2
        assert q.get() == b"1"                  # frees room: wakes it
        i, waited = recv(conn, p, timeout=30)
        assert waited >= 0.2
        assert len(q) == 2
        assert q.get() == b"urgent"             # priority 9 first
        assert q.get() == b"2"
        p.join(10)
    finally:
        c.close()
