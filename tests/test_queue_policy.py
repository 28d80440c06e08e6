"""Queue policy (issue 13): the stored config (maxsize, max_deliveries,
dead_letter, dedup_window), bounded puts, delivery counts and dead letters,
across handles and processes, with bad input refused."""
from __future__ import annotations

import math
import os
import queue as stdqueue
import statistics
import threading
import time

import pytest

import pyqstore
from _procs import kill_child, recv


def _reopen(c: pyqstore.Casket) -> pyqstore.Casket:
    p = c.path
    c.close()
    return pyqstore.open(p, sync=False)


# ------------------------------------------------------------------ config


def test_config_defaults_and_stored(casket):
    q = casket.queue("a")
    assert q.config() == (0, 0, None, 0.0)
    casket.queue("a", maxsize=5, max_deliveries=3, dead_letter="dead", dedup_window=1.5)
    assert q.config() == (5, 3, "dead", 1.5)
    # another handle of this process sees it, and a reopen keeps it
    other = pyqstore.open(casket.path, sync=False)
    try:
        assert other.queue("a").config() == (5, 3, "dead", 1.5)
    finally:
        other.close()
    c = _reopen(casket)
    try:
        assert c.queue("a").maxsize == 5
        # arguments given replace the stored ones, the others are kept
        c.queue("a", maxsize=7)
        assert c.queue("a").config() == (7, 3, "dead", 1.5)
        # 0 / "" remove a setting
        c.queue("a", maxsize=0, max_deliveries=0, dead_letter="", dedup_window=0)
        assert c.queue("a").config() == (0, 0, None, 0.0)
    finally:
        c.close()


def test_config_seen_by_a_handle_that_cached_it(casket):
    """The config is cached per handle and reread when others commit."""
    other = pyqstore.open(casket.path, sync=False)
    try:
        oq = other.queue("a")
        oq.put(b"1")        # other's registry now has the queue, unbounded
        casket.queue("a", maxsize=1)
        with pytest.raises(pyqstore.Full):
            oq.put_nowait(b"2")
        assert len(oq) == 1
    finally:
        other.close()


def test_config_is_transactional(casket):
    casket.queue("a", maxsize=3)
    with pytest.raises(KeyError):
        with casket.transaction():
            casket.queue("a", maxsize=10)
            assert casket.queue("a").maxsize == 10
            raise KeyError
    assert casket.queue("a").maxsize == 3
    q = casket.queue("a")
    q.put_many([b"x"] * 3)
    with pytest.raises(pyqstore.Full):
        q.put_nowait(b"y")      # the aborted bound of 10 is gone from the cache too
    with casket.transaction():
        casket.queue("a", maxsize=4)
        q.put(b"y")
    assert len(q) == 4


@pytest.mark.parametrize("kw, exc, words", [
    ({"maxsize": -1}, ValueError, "maxsize must not be negative"),
    ({"maxsize": 1.5}, TypeError, "maxsize must be an int"),
    ({"maxsize": True}, TypeError, "maxsize must be an int"),
    ({"maxsize": 2**64}, ValueError, "maxsize must be at most"),
    ({"max_deliveries": -3, "dead_letter": "d"}, ValueError, "max_deliveries must not be negative"),
    ({"max_deliveries": 2**32, "dead_letter": "d"}, ValueError, "max_deliveries must be at most"),
    ({"max_deliveries": "3"}, TypeError, "max_deliveries must be an int"),
    ({"max_deliveries": 3}, ValueError, "needs a dead_letter queue"),
    ({"dead_letter": "d"}, ValueError, "needs max_deliveries"),
    ({"dead_letter": "a", "max_deliveries": 2}, ValueError, "not 'a' itself"),
    ({"dead_letter": 5, "max_deliveries": 2}, TypeError, "dead_letter must be a queue name"),
    ({"dedup_window": math.nan}, ValueError, "dedup_window must be a finite"),
    ({"dedup_window": -1}, ValueError, "dedup_window must be a finite"),
    ({"dedup_window": math.inf}, ValueError, "dedup_window must be a finite"),
    ({"dedup_window": "1"}, TypeError, "dedup_window must be a number"),
])
def test_config_bad_input_stores_nothing(casket, kw, exc, words):
    casket.queue("a", maxsize=9)
    with pytest.raises(exc, match=words):
        casket.queue("a", **kw)
    assert casket.queue("a").config() == (9, 0, None, 0.0)


def test_maxsize_below_length_is_refused(casket):
    """A bound below what the queue holds (reserved items included) raises
    BoundError and changes nothing: no item is dropped to meet it."""
    q = casket.queue("a")
    q.put_many([b"1", b"2", b"3"])
    held = q.reserve()
    assert len(q) == 2
    with pytest.raises(pyqstore.BoundError, match="maxsize 2 is below"):
        casket.queue("a", maxsize=2)
    assert q.maxsize == 0 and len(q) == 2
    casket.queue("a", maxsize=3)        # exactly what it holds: accepted
    with pytest.raises(pyqstore.Full):
        q.put_nowait(b"4")
    held.ack()
    q.put_nowait(b"4")


def test_config_in_a_read_only_casket(casket):
    casket.queue("a", maxsize=2)
    ro = pyqstore.open(casket.path, "r")
    try:
        assert ro.queue("a").maxsize == 2
        with pytest.raises(pyqstore.ReadOnlyError):
            ro.queue("a", maxsize=3)
    finally:
        ro.close()


# ------------------------------------------------------------------ bounded


def test_full_is_queue_full(casket):
    q = casket.queue("a", maxsize=2)
    assert q.put(b"1") and q.put(b"2")
    with pytest.raises(stdqueue.Full):
        q.put_nowait(b"3")
    with pytest.raises(pyqstore.Full, match="queue 'a' is full"):
        q.put(b"3", block=False)
    t = time.monotonic()
    with pytest.raises(pyqstore.Full):
        q.put(b"3", timeout=0.1)
    assert time.monotonic() - t >= 0.09
    assert q.get_many(5) == [b"1", b"2"]


def test_maxsize_counts_reserved_items(casket):
    q = casket.queue("a", maxsize=2)
    q.put_many([b"1", b"2"])
    it = q.reserve()
    with pytest.raises(pyqstore.Full):
        q.put_nowait(b"3")
    it.release()
    with pytest.raises(pyqstore.Full):
        q.put_nowait(b"3")
    q.reserve().ack()
    q.put_nowait(b"3")


def test_put_many_all_or_nothing(casket):
    q = casket.queue("a", maxsize=3)
    q.put(b"0")
    with pytest.raises(pyqstore.Full, match="no room for 3 more"):
        q.put_many([b"1", b"2", b"3"])
    with pytest.raises(pyqstore.Full):
        q.put_many(["s1", "s2", "s3"])     # the slow packing path too
    assert q.peek_many(10) == [b"0"]
    assert q.put_many([b"1", b"2"]) == 2
    assert len(q) == 3


def test_in_transaction_full_at_once(casket):
    q = casket.queue("a", maxsize=1)
    with casket.transaction():
        q.put(b"1")
        t = time.monotonic()
        with pytest.raises(pyqstore.Full):
            q.put(b"2", timeout=5)          # never waits holding the write lock
        assert time.monotonic() - t < 2
        q.get()
        q.put(b"3")                         # room freed in the same transaction
    assert q.get_many(5) == [b"3"]


def test_publish_to_a_full_queue_changes_nothing(casket):
    casket.queue("full", maxsize=1).put(b"x")
    with pytest.raises(pyqstore.Full):
        casket.publish(b"p", ["free", "full"])
    assert len(casket.queue("free")) == 0 and len(casket.queue("full")) == 1


def test_blocked_put_wakes_on_get_in_thread(casket):
    q = casket.queue("a", maxsize=1)
    q.put(b"1")
    done = []
    th = threading.Thread(target=lambda: done.append(q.put(b"2", timeout=10)))
    th.start()
    time.sleep(0.1)
    assert not done
    assert q.get() == b"1"
    th.join(10)
    assert done and q.get() == b"2"


def _producer_wake(conn, path, n):
    c = pyqstore.open(path, sync=False)
    q = c.queue("b")
    conn.send("ready")
    for i in range(n):
        q.put(b"%d" % i, timeout=20)
        conn.send(time.monotonic())
    c.close()


def test_blocked_producer_wakes_fast_across_processes(path, kids):
    """A producer in another process blocked on Full wakes when a consumer
    frees room: median of 20 under 5 ms (the futex word, no polling); a
    sample is only capped at 1 s, so a loaded machine does not fail it."""
    c = pyqstore.open(path, "n", sync=False)
    try:
        q = c.queue("b", maxsize=1)
        q.put(b"fill")
        n = 20
        p, conn = kids.start(_producer_wake, path, n)
        assert recv(conn, p) == "ready"
        lat = []
        for i in range(n):
            time.sleep(0.03)                    # let it block on the full queue
            assert len(q) == 1
            t0 = time.monotonic()
            q.get()
            t1 = recv(conn, p)
            lat.append(t1 - t0)
        p.join(10)
        assert max(lat) < 1.0, lat
        assert statistics.median(lat) < 0.005, sorted(lat)
    finally:
        c.close()


def _bounded_producer(conn, path, base, n):
    c = pyqstore.open(path, sync=False)
    q = c.queue("w")
    for i in range(n):
        q.put(b"%d" % (base + i), timeout=60)
    conn.send("done")
    c.close()


def _bounded_consumer(conn, path, stop_at):
    c = pyqstore.open(path, sync=False)
    q = c.queue("w")
    got = []
    while True:
        try:
            got.append(int(q.get(timeout=5)))
        except pyqstore.Empty:
            break
    conn.send(got)
    c.close()


def test_four_producers_four_consumers_bounded(path, kids):
    bound, per = 16, 300
    c = pyqstore.open(path, "n", sync=False)
    try:
        q = c.queue("w", maxsize=bound)
        prods = [kids.start(_bounded_producer, path, k * per, per) for k in range(4)]
        cons = [kids.start(_bounded_consumer, path, 4 * per) for _ in range(4)]
        seen_max = 0
        deadline = time.monotonic() + 120
        while any(p.is_alive() for p, _ in prods) and time.monotonic() < deadline:
            # length + reserved (none here) never above the bound
            seen_max = max(seen_max, len(q))
            time.sleep(0.001)
        for p, conn in prods:
            assert recv(conn, p, timeout=120) == "done"
        got = []
        for p, conn in cons:
            got += recv(conn, p, timeout=60)
        assert sorted(got) == list(range(4 * per))
        assert 0 < seen_max <= bound
    finally:
        c.close()


# ------------------------------------------------------------------ deliveries


def test_deliveries_counted_per_reserve(casket):
    q = casket.queue("a")
    q.put(b"x")
    for n in range(1, 4):
        it = q.reserve()
        assert it.deliveries == n and it.reason is None
        it.release()
    it = q.reserve()
    it.fail("bad payload")
    it = q.reserve()
    assert (it.deliveries, it.reason, it.payload) == (5, "bad payload", b"x")
    it.ack()
    with pytest.raises(pyqstore.NotFoundError):
        it.deliveries


def test_fail_bad_input(casket):
    q = casket.queue("a")
    q.put(b"x")
    it = q.reserve()
    with pytest.raises(TypeError, match="reason must be str or bytes"):
        it.fail(5)
    with pytest.raises(ValueError, match="limit is 1024"):
        it.fail("x" * 1025)
    it.fail(b"\xff raw")
    with pytest.raises(pyqstore.NotReservedError):
        it.fail("again")
    assert q.reserve().reason == "\ufffd raw"


def test_dead_letter_after_max_deliveries(casket):
    q = casket.queue("jobs", max_deliveries=2, dead_letter="dead")
    dead = casket.queue("dead")
    q.put_many([b"a", b"b"])
    for _ in range(2):
        it = q.reserve()
        assert it.payload == b"a"
        it.fail("timeout")
    # the third take reaches "a": it is moved, "b" handed out instead
    it = q.reserve()
    assert it.payload == b"b" and it.deliveries == 1
    assert len(dead) == 1
    d = dead.reserve()
    assert (d.payload, d.id, d.reason) == (b"a", d.id, "timeout")
    assert d.deliveries == 3        # its two in jobs, and this one
    it.ack()
    assert len(q) == 0


def test_get_moves_a_spent_item_too(casket):
    q = casket.queue("jobs", max_deliveries=1, dead_letter="dead")
    q.put(b"a")
    q.reserve().release()
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)
    assert casket.queue("dead").get() == b"a"


def test_reserve_count_survives_abort_outside(casket):
    """Outside a transaction the count is the reserve's own commit: a
    reopen (and another handle) sees it while the item is back."""
    q = casket.queue("a")
    q.put(b"x")
    q.reserve()
    c = _reopen(casket)
    try:
        it = c.queue("a").reserve()
        assert it.deliveries == 2
    finally:
        c.close()


def _hold_reservation(conn, path):
    c = pyqstore.open(path, sync=True)
    it = c.queue("jobs").reserve(timeout=10)
    conn.send((it.id, it.deliveries))
    time.sleep(60)


def test_sigkill_holder_counts_and_dead_letters(path, kids):
    c = pyqstore.open(path, "n", sync=True)
    c.queue("jobs", max_deliveries=3, dead_letter="dead").put(b"work")
    c.close()
    for n in range(1, 4):
        p, conn = kids.start(_hold_reservation, path)
        assert recv(conn, p)[1] == n
        assert kill_child(p) == -9
    c = pyqstore.open(path, sync=False)
    try:
        with pytest.raises(pyqstore.Empty):
            c.queue("jobs").reserve(timeout=0)
        d = c.queue("dead").reserve(timeout=0)
        assert d.payload == b"work" and d.deliveries == 4
    finally:
        c.close()


# ------------------------------------------------------------------ join


def test_join_waits_for_acks_not_just_gets(casket):
    q = casket.queue("a")
    assert q.join(timeout=0) is True            # empty already
    q.put_many([b"1", b"2"])
    assert q.join(timeout=0.05) is False
    q.get()
    it = q.reserve()
    assert len(q) == 0
    assert q.join(timeout=0.05) is False        # a reserved item is still held
    done = []
    th = threading.Thread(target=lambda: done.append(q.join(timeout=10)))
    th.start()
    time.sleep(0.05)
    assert not done
    it.ack()
    th.join(10)
    assert done == [True]


def test_join_inside_a_transaction_does_not_wait(casket):
    q = casket.queue("a")
    q.put(b"1")
    with casket.transaction():
        t = time.monotonic()
        assert q.join(timeout=5) is False
        assert time.monotonic() - t < 2
        q.get()
        assert q.join() is True                 # the transaction's view


def test_join_bad_timeout(casket):
    with pytest.raises(ValueError, match="timeout"):
        casket.queue("a").join(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        casket.queue("a").join(timeout="1")


def _drain_later(conn, path, delay):
    c = pyqstore.open(path, sync=False)
    q = c.queue("j")
    conn.send("ready")
    time.sleep(delay)
    while True:
        try:
            q.reserve(timeout=0).ack()
        except pyqstore.Empty:
            break
    conn.send("drained")
    c.close()


def test_join_across_processes(path, kids):
    c = pyqstore.open(path, "n", sync=False)
    try:
        q = c.queue("j")
        q.put_many([b"x"] * 50)
        p, conn = kids.start(_drain_later, path, 0.2)
        assert recv(conn, p) == "ready"
        t = time.monotonic()
        assert q.join(timeout=30) is True
        assert time.monotonic() - t >= 0.1
        assert recv(conn, p) == "drained"
        assert len(q) == 0
    finally:
        c.close()
