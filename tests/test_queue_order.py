"""Priorities and delays of queue items (csrc/qorder.c, "Priorities and
delays" in csrc/qstore.h): put(priority=, delay=), release(delay=),
delayed(), their bad input, transactions, other processes and a crash."""
from __future__ import annotations

import math
import os
import signal
import time

import pytest

import pyqstore
from pyqstore._qstore import lib
from _procs import kill_after, start_python


@pytest.fixture
def clock():
    """The delay clock of this process, fixed at a time the test moves."""
    class Clock:
        now = 1_000_000_000.0

        def set(self, t: float) -> None:
            self.now = t
            lib.qs_queue_test_clock(t)

        def advance(self, s: float) -> None:
            self.set(self.now + s)

    c = Clock()
    c.set(c.now)
    try:
        yield c
    finally:
        lib.qs_queue_test_clock(0.0)


def drain(q) -> list[bytes]:
    return q.get_many(10_000)


# ------------------------------------------------------------ priorities


def test_highest_priority_first_fifo_within(casket):
    q = casket.queue("jobs")
    for i, p in enumerate([0, 5, 9, 5, 0, 1, 9, 3]):
        q.put(b"%d:%d" % (p, i), priority=p)
    assert len(q) == 8
    assert drain(q) == [b"9:2", b"9:6", b"5:1", b"5:3", b"3:7", b"1:5", b"0:0", b"0:4"]
    assert len(q) == 0


def test_priority_order_across_get_reserve_peek(casket):
    q = casket.queue("jobs")
    q.put(b"low")
    q.put_many([b"h1", b"h2"], priority=7)
    assert q.peek_many(3) == [b"h1", b"h2", b"low"]
    it = q.reserve()
    assert it.payload == b"h1"
    assert q.get() == b"h2"       # h1 is reserved: the next of priority 7
    it.release()
    assert q.get() == b"h1"       # back at its place, ahead of priority 0
    it = q.reserve()
    assert it.payload == b"low"
    it.ack()
    assert len(q) == 0


def test_none_is_the_default(casket):
    q = casket.queue("jobs")
    q.put(b"a", delay=None, priority=None)
    q.put(b"b", priority=1)
    q.put_many([b"c"], delay=None, priority=None)
    assert q.delayed() == 0
    assert drain(q) == [b"b", b"a", b"c"]


def test_ack_of_priority_item_and_clear(casket):
    q = casket.queue("jobs")
    q.put(b"a", priority=2)
    q.put(b"b", priority=4)
    q.put(b"c")
    it = q.reserve()
    assert it.payload == b"b"
    it.ack()
    assert len(q) == 2
    assert q.clear() == 2
    assert len(q) == 0 and q.get_many(5) == []


def test_priority_item_shows_its_deliveries(casket):
    """item_info looked for an item in the plain run only: a priority
    item's deliveries and reason raised NotFoundError, and pending() listed
    its count as None."""
    q = casket.queue("q")
    q.put(b"p", priority=4)
    it = q.reserve(timeout=0)
    assert (it.deliveries, it.reason) == (1, None)
    assert [p.deliveries for p in q.pending()] == [1]
    it.fail("flaky")
    it = q.reserve(timeout=0)
    assert (it.payload, it.deliveries, it.reason) == (b"p", 2, "flaky")
    it.ack()
    with pytest.raises(pyqstore.NotFoundError):
        it.deliveries


def test_delayed_item_shows_its_deliveries(casket, clock):
    """item_info did not look in the delayed index: an item released with
    a delay raised NotFoundError for its deliveries and reason."""
    q = casket.queue("q")
    q.put(b"x", priority=2)
    it = q.reserve(timeout=0)
    it.fail("slow")
    it = q.reserve(timeout=0)
    it.release(delay=10)
    assert (it.deliveries, it.reason) == (2, "slow")
    assert [p.deliveries for p in q.pending()] == []
    clock.advance(11)
    it = q.reserve(timeout=0)
    assert (it.payload, it.deliveries) == (b"x", 3)


def test_priority_survives_reopen(path):
    with pyqstore.open(path, "n") as c:
        q = c.queue("x")
        q.put(b"p0")
        q.put(b"p8", priority=8)
    with pyqstore.open(path) as c:
        q = c.queue("x")
        assert len(q) == 2
        assert drain(q) == [b"p8", b"p0"]


def test_priority_with_codec(casket):
    q = casket.queue("json", codec="json")
    q.put({"n": 1})
    q.put({"n": 2}, priority=1)
    assert q.get() == {"n": 2} and q.get() == {"n": 1}


def test_priority_in_transaction_abort_and_commit(casket):
    q = casket.queue("t")
    q.put(b"old")
    with pytest.raises(RuntimeError):
        with casket.transaction():
            q.put(b"hi", priority=9)
            assert len(q) == 2 and q.peek() == b"hi"
            raise RuntimeError("abort")
    assert len(q) == 1 and q.peek() == b"old"
    with casket.transaction():
        q.put(b"hi", priority=9)
        assert q.get() == b"hi"
        q.put(b"hi2", priority=9)
    assert drain(q) == [b"hi2", b"old"]


# ---------------------------------------------------------------- delays


def test_delayed_put_invisible_until_due(casket, clock):
    q = casket.queue("d")
    first = q.put(b"later", delay=10)
    q.put(b"now")
    assert len(q) == 2 and q.delayed() == 1
    assert q.peek_many(5) == [b"now"]
    assert q.get_nowait() == b"now"
    with pytest.raises(pyqstore.Empty):
        q.get_nowait()
    clock.advance(9.999)
    with pytest.raises(pyqstore.Empty):
        q.get_nowait()
    clock.advance(0.002)
    it = q.reserve(timeout=0)
    assert (it.id, it.payload) == (first, b"later")
    assert q.delayed() == 0
    it.ack()
    assert len(q) == 0


def test_due_items_come_in_id_order(casket, clock):
    q = casket.queue("d")
    ids = [q.put(b"a", delay=5), q.put(b"b"), q.put(b"c", delay=1), q.put(b"d")]
    assert q.get() == b"b"
    clock.advance(6)          # both due: they join the run at their ids
    got = [q.reserve(timeout=0) for _ in range(3)]
    assert [i.id for i in got] == [ids[0], ids[2], ids[3]]
    assert [i.payload for i in got] == [b"a", b"c", b"d"]


def test_delayed_priority_item_keeps_its_priority(casket, clock):
    q = casket.queue("d")
    q.put(b"plain")
    q.put(b"urgent", delay=2, priority=9)
    assert q.peek() == b"plain"
    clock.advance(3)
    assert drain(q) == [b"urgent", b"plain"]


def test_put_many_with_delay(casket, clock):
    q = casket.queue("d")
    assert q.put_many([b"x", b"y", b"z"], delay=1) == 3
    assert q.delayed() == 3 and q.get_many(5) == []
    clock.advance(1)
    assert q.get_many(5) == [b"x", b"y", b"z"]


def test_release_with_delay_keeps_id(casket, clock):
    q = casket.queue("r")
    i1 = q.put(b"one")
    q.put(b"two")
    it = q.reserve()
    it.release(delay=30)
    assert len(q) == 2 and q.delayed() == 1
    assert q.get() == b"two"
    with pytest.raises(pyqstore.Empty):
        q.get_nowait()
    clock.advance(30)
    it = q.reserve(timeout=0)
    assert (it.id, it.payload) == (i1, b"one")


def test_release_with_delay_of_priority_item(casket, clock):
    q = casket.queue("r")
    q.put(b"p0")
    q.put(b"p6", priority=6)
    it = q.reserve()
    assert it.payload == b"p6"
    it.release(delay=1)
    assert q.peek() == b"p0"
    clock.advance(1)
    assert drain(q) == [b"p6", b"p0"]


def test_release_delay_zero_is_a_release(casket):
    q = casket.queue("r")
    q.put(b"x")
    it = q.reserve()
    it.release(delay=0)
    assert q.delayed() == 0 and q.get() == b"x"


def test_release_delay_after_ack_is_not_reserved(casket):
    q = casket.queue("r")
    q.put(b"x")
    it = q.reserve()
    it.ack()
    with pytest.raises(pyqstore.NotReservedError):
        it.release(delay=5)


def test_delays_survive_reopen(path, clock):
    with pyqstore.open(path, "n") as c:
        q = c.queue("d")
        q.put(b"due-at-+100", delay=100)
        q.put(b"plain")
        it = q.reserve()
        it.release(delay=50)
    with pyqstore.open(path) as c:
        q = c.queue("d")
        assert len(q) == 2 and q.delayed() == 2
        clock.advance(50)
        assert drain(q) == [b"plain"]
        clock.advance(50)
        assert drain(q) == [b"due-at-+100"]


def test_delay_in_transaction_abort(casket, clock):
    q = casket.queue("d")
    with pytest.raises(RuntimeError):
        with casket.transaction():
            q.put(b"x", delay=1)
            assert len(q) == 1 and q.delayed() == 1
            raise RuntimeError("abort")
    assert len(q) == 0 and q.delayed() == 0
    q.put(b"y", delay=1)
    clock.advance(1)
    with pytest.raises(RuntimeError):
        with casket.transaction():
            assert q.get() == b"y"        # moved into the queue and taken
            raise RuntimeError("abort")
    assert len(q) == 1 and q.get() == b"y"


def test_clear_removes_delayed(casket):
    q = casket.queue("d")
    q.put(b"a", delay=100)
    q.put(b"b", delay=100, priority=3)
    q.put(b"c")
    assert q.clear() == 3
    assert len(q) == 0 and q.delayed() == 0


def test_blocked_get_wakes_when_due(casket):
    q = casket.queue("w")
    t0 = time.monotonic()       # before the put stamps its due time
    q.put(b"soon", delay=0.3)
    assert q.get(timeout=10) == b"soon"
    took = time.monotonic() - t0
    assert 0.295 <= took < 5, took


# ------------------------------------------------------------- bad input


@pytest.mark.parametrize("delay, exc, words", [
    (-1, ValueError, "delay must be a finite number"),
    (-0.001, ValueError, "delay must be a finite number"),
    (math.nan, ValueError, "delay must be a finite number"),
    (math.inf, ValueError, "delay must be a finite number"),
    ("1", TypeError, "delay must be a number of seconds, not str"),
    (True, TypeError, "delay must be a number of seconds, not bool"),
])
def test_bad_delay(casket, delay, exc, words):
    q = casket.queue("bad")
    q.put(b"x")
    it = q.reserve()
    with pytest.raises(exc, match=words):
        q.put(b"y", delay=delay)
    with pytest.raises(exc, match=words):
        q.put_many([b"y"], delay=delay)
    with pytest.raises(exc, match=words):
        it.release(delay=delay)
    assert len(q) == 0 and q.delayed() == 0     # nothing stored, x still reserved
    it.ack()


@pytest.mark.parametrize("priority, exc, words", [
    (10, ValueError, "priority must be 0..9, not 10"),
    (-1, ValueError, "priority must be 0..9, not -1"),
    (1.0, TypeError, "priority must be an int 0..9, not float"),
    ("1", TypeError, "priority must be an int 0..9, not str"),
    (True, TypeError, "priority must be an int 0..9, not bool"),
    (2.5, TypeError, "priority must be an int 0..9, not float"),
])
def test_bad_priority(casket, priority, exc, words):
    q = casket.queue("bad")
    with pytest.raises(exc, match=words):
        q.put(b"y", priority=priority)
    with pytest.raises(exc, match=words):
        q.put_many([b"y", b"z"], priority=priority)
    assert len(q) == 0


def test_bad_input_leaves_transaction_usable(casket):
    q = casket.queue("bad")
    with casket.transaction():
        q.put(b"kept")
        with pytest.raises(ValueError):
            q.put(b"no", priority=12)
        with pytest.raises(ValueError):
            q.put(b"no", delay=-3)
        q.put(b"kept2", priority=1)
    assert drain(q) == [b"kept2", b"kept"]


def test_c_refuses_bad_order_arguments(casket):
    """The C call checks too (for C callers): QS_INVAL, nothing stored."""
    import array
    from pyqstore._qstore import ffi
    lens = array.array("I", [1])
    out = ffi.new("uint64_t *")
    for delay, prio in [(-1.0, 0), (math.nan, 0), (math.inf, 0), (0.0, 10), (0.0, -1)]:
        rc = lib.qs_queue_put_order(casket._c, b"c", 1, 1, b"x", 1,
                                    ffi.from_buffer("uint32_t[]", lens), delay, prio, out)
        assert rc == lib.QS_INVAL, (delay, prio, rc)
    assert len(casket.queue("c")) == 0
    rc = lib.qs_queue_release_delay(casket._c, b"c", 1, 1, 1, -1.0)
    assert rc == lib.QS_INVAL


# ------------------------------------------------------ other processes


WAITER = r"""
import sys, time, pyqstore
c = pyqstore.open(sys.argv[1])
q = c.queue("x")
print("ready", flush=True)
t0 = time.time()
got = q.get(timeout=20)
print(got.decode(), repr(time.time()), flush=True)
"""


def test_delayed_put_from_another_process_wakes_waiter(path):
    """A consumer blocked (no timeout it chose) in process B is woken by
    process A's commit of a delayed item, sleeps until its due time and
    then takes it: no polling, no lateness beyond a loaded machine's."""
    pyqstore.open(path, "n").close()
    proc = start_python(WAITER, path)
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)       # let it block in its wait
        with pyqstore.open(path) as c:
            # the due time is stamped inside the put, before its sync: a
            # clock read after the put's return would make a slow sync look
            # like an early wake
            before = time.time()
            c.queue("x").put(b"hello", delay=0.5)
            put_at = time.time()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    word, when = out.split()
    assert word == b"hello"
    assert before + 0.5 - 0.01 <= float(when) < put_at + 3.5, (before, put_at, when)


CRASHER = r"""
import sys, pyqstore
c = pyqstore.open(sys.argv[1], sync=True)
q = c.queue("x")
q.put(b"far", delay=1000, priority=4)
q.put(b"plain")
it = q.reserve()
it.release(delay=2000)
print("done", flush=True)
import time; time.sleep(60)
"""


def test_delayed_items_survive_sigkill(path, clock):
    pyqstore.open(path, "n").close()
    real = time.time()                  # the child's delays are on the real clock
    kill_after(CRASHER, path, ready=b"done\n")
    with pyqstore.open(path) as c:
        q = c.queue("x")
        assert len(q) == 2 and q.delayed() == 2
        clock.set(real + 990)
        assert q.get_many(5) == []
        clock.set(real + 1010)
        assert q.get_many(5) == [b"far"]
        clock.set(real + 1990)
        assert q.get_many(5) == []
        clock.set(real + 2010)
        assert q.get_many(5) == [b"plain"]


def test_listing_names_queues_with_only_delayed_or_priority_items(casket):
    casket.queue("b-delayed").put(b"x", delay=100)
    casket.queue("a-prio").put_many([b"x", b"y"], priority=3)
    casket.queue("c-plain").put(b"x")
    casket.queue("c-plain").put(b"y", priority=1)
    casket.queue("ab").put(b"z", delay=5, priority=9)
    assert casket.queues() == ["a-prio", "ab", "b-delayed", "c-plain"]
    assert casket.queue_lengths() == {"a-prio": 2, "ab": 1, "b-delayed": 1, "c-plain": 2}


def test_iter_yields_every_item_in_id_order(casket, clock):
    q = casket.queue("it")
    ids = {
        q.put(b"plain1"): b"plain1",
        q.put(b"p5", priority=5): b"p5",
        q.put(b"late", delay=50): b"late",
        q.put(b"late9", delay=10, priority=9): b"late9",
        q.put(b"plain2"): b"plain2",
        q.put(b"p1", priority=1): b"p1",
    }
    want = sorted(ids.items())
    assert list(q.iter(with_ids=True)) == want
    # resumed after any id (the batches of iter): the rest, in order
    from pyqstore._qstore import ffi
    for k, (after, _) in enumerate(want):
        out = ffi.new("qs_items **")
        assert lib.qs_queue_scan(casket._c, b"it", 2, after, 2, 1 << 20, out) == 0
        got = [out[0].ids[i] for i in range(out[0].count)]
        lib.qs_items_free(out[0])
        assert got == [i for i, _ in want[k + 1:k + 3]]
    clock.advance(10)
    assert q.get() == b"late9"      # moved in and taken
    assert [p for _, p in q.iter(with_ids=True)] == [p for i, p in want if p != b"late9"]
