"""The gaps closed after issue 13's policy work: a full dead-letter queue
holds a dead item back instead of overfilling; a reserve's delivery count
survives the abort of the transaction it ran in and a SIGKILL of its
process with that transaction open; get on a codec queue counts no
delivery; a put with a priority or a delay waits for room like a plain
one."""
from __future__ import annotations

import signal
import time

import pytest

import pyqstore
from _procs import recv, start_python


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


# ------------------------------------------- counts that outlive a transaction


def test_count_survives_abort_then_reserve_again(casket):
    q = casket.queue("a")
    q.put(b"x")
    with pytest.raises(RuntimeError):
        with casket.transaction():
            it = q.reserve()
            assert it.deliveries == 1
            it.ack()
            raise RuntimeError("abort")
    assert len(q) == 1
    it = q.reserve()
    assert it.deliveries == 2
    it.release()
    c = pyqstore.open(casket.path, sync=False)      # committed, not cached
    try:
        assert c.queue("a").reserve().deliveries == 3
    finally:
        c.close()


_HOLD_IN_TXN = r"""
import sys, time, pyqstore
c = pyqstore.open(sys.argv[1], sync=True)
q = c.queue("jobs")
c.begin()
it = q.reserve(timeout=10)
print("reserved", it.deliveries, flush=True)
time.sleep(60)
"""


def _reserve_in_txn_then_kill(path: str, n: int) -> None:
    proc = start_python(_HOLD_IN_TXN, path, unbuffered=True)
    try:
        line = proc.stdout.readline()
        assert line == b"reserved %d\n" % n, (line, proc.stderr.read())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_inside_a_transaction_keeps_the_count(path):
    """A process SIGKILLed with a transaction open after a reserve: its
    count survives; the test's handle, finding the holder dead, writes it,
    and its own reserve counts on from it."""
    c = pyqstore.open(path, "n", sync=True)
    try:
        q = c.queue("jobs")
        q.put(b"work")
        _reserve_in_txn_then_kill(path, 1)
        it = q.reserve(timeout=10)      # hidden until a sweep finds it dead
        assert (it.payload, it.deliveries) == (b"work", 2)
        it.release()
    finally:
        c.close()
    c = pyqstore.open(path, sync=False)
    try:
        assert c.queue("jobs").reserve(timeout=0).deliveries == 3
    finally:
        c.close()


def test_sigkills_inside_transactions_dead_letter(path):
    """Three holders killed in turn, each inside a transaction (each one
    takes over the dead one's count before counting its own): the item is
    dead-lettered with its three deliveries."""
    c = pyqstore.open(path, "n", sync=True)
    try:
        q = c.queue("jobs", max_deliveries=3, dead_letter="dead")
        q.put(b"work")
        for n in (1, 2, 3):
            _reserve_in_txn_then_kill(path, n)
        dead = c.queue("dead")
        deadline = time.monotonic() + 10
        while len(dead) == 0 and time.monotonic() < deadline:
            with pytest.raises(pyqstore.Empty):
                q.get(timeout=0.2)      # moves it once the holder is found dead
        d = dead.reserve(timeout=0)
        assert (d.payload, d.deliveries) == (b"work", 4)
        assert len(q) == 0
    finally:
        c.close()


# ------------------------------------------------------- codec queue gets


def test_codec_get_then_reserve_counts_one(casket):
    """A codec queue's get counts no delivery (a plain get counts none):
    the get of an aborted transaction leaves the item at count 0."""
    q = casket.queue("j", codec="json")
    q.put([1])
    with pytest.raises(RuntimeError):
        with casket.transaction():
            assert q.get() == [1]
            raise RuntimeError("abort")
    assert q.reserve().deliveries == 1  # the get counted nothing


def test_undecodable_item_counts_and_dead_letters(casket):
    """An item that does not decode stays at its place, and each get that
    fails on it counts one delivery with the error as its reason: with
    max_deliveries it goes to the dead-letter queue; the items behind it
    are not counted."""
    q = casket.queue("j", codec="json", max_deliveries=2, dead_letter="dead")
    raw = casket.queue("j")
    raw.put(b"\xff not json")
    q.put({"ok": True})
    for n in (1, 2):
        with pytest.raises(pyqstore.DecodeError) as e:
            q.get_many(2)
        assert e.value.payload == b"\xff not json"
        assert len(q) == 2
    assert q.get() == {"ok": True}      # the bad one moved at this take
    d = casket.queue("dead").reserve()
    assert d.payload == b"\xff not json"
    assert d.deliveries == 3            # two failed gets, and this reserve
    assert "does not decode" in d.reason
