"""Queues used from many threads of one process.

Producers and consumers on several queues (every item delivered exactly
once), and the wake-ups of blocked consumers: by a committed put, never by
an uncommitted or aborted one, by close(), by a release and by a lease that
runs out; and reservations acknowledged from other threads.

Timing asserts are only generous upper bounds that catch a consumer that
was never woken (it would wait for its whole timeout or forever).
"""
from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable, Optional

import pytest

import pyqstore
from pyqstore import ClosedError, Empty, NotReservedError

JOIN = 30.0  # seconds: a thread not done by then is hung


class Runner(threading.Thread):
    """Runs fn() in a thread, keeping its result or exception and the
    monotonic time at which it returned."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.exc: Optional[BaseException] = None
        self.started_at = 0.0
        self.ended_at: Optional[float] = None
        self.entered = threading.Event()

    def run(self) -> None:
        self.started_at = time.monotonic()
        self.entered.set()
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.exc = e
        finally:
            self.ended_at = time.monotonic()

    def finish(self) -> Any:
        """Join (failing on a hang) and return the result or raise."""
        self.join(JOIN)
        assert not self.is_alive(), "thread hung"
        if self.exc is not None:
            raise self.exc
        return self.result


def start(fn: Callable[[], Any]) -> Runner:
    r = Runner(fn)
    r.start()
    r.entered.wait(JOIN)
    return r


# ------------------------------------------------------------ (a) many threads


def test_producers_consumers_exactly_once(casket):
    names = ["q0", "q1", "q2"]
    queues = [casket.queue(n) for n in names]
    n_producers, per_producer = 4, 4000
    total = n_producers * per_producer
    consumed: list[list[bytes]] = [[] for _ in range(4)]
    count_lock = threading.Lock()
    n_consumed = [0]
    producers_done = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(pid: int) -> None:
        rnd = random.Random(pid)
        seq = 0

        def payload() -> bytes:
            nonlocal seq
            p = b"p%d-%d|" % (pid, seq) + b"x" * rnd.choice([0, 10, 100, 2000])
            seq += 1
            return p

        try:
            while seq < per_producer:
                left = per_producer - seq
                mode = rnd.randrange(3)
                if mode == 0:  # a batch
                    k = min(left, rnd.randint(1, 40))
                    rnd.choice(queues).put_many([payload() for _ in range(k)])
                elif mode == 1:  # single puts
                    for _ in range(min(left, rnd.randint(1, 5))):
                        rnd.choice(queues).put(payload())
                else:  # several queues in one transaction
                    with casket.transaction():
                        for _ in range(min(left, rnd.randint(1, 10))):
                            rnd.choice(queues).put(payload())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def record(cid: int, items: list[bytes]) -> None:
        consumed[cid].extend(items)
        with count_lock:
            n_consumed[0] += len(items)
            if n_consumed[0] >= total:
                stop.set()

    def consume(cid: int) -> None:
        rnd = random.Random(100 + cid)
        try:
            while not stop.is_set():
                q = rnd.choice(queues)
                if cid == 0:  # blocking single gets
                    try:
                        record(cid, [q.get(timeout=0.05)])
                    except Empty:
                        pass
                elif cid == 1:  # batches
                    record(cid, q.get_many(rnd.randint(1, 64)))
                    if not producers_done.is_set():
                        time.sleep(0.001)
                elif cid == 2:  # reserve then ack
                    try:
                        item = q.reserve(timeout=0.05)
                    except Empty:
                        continue
                    if rnd.random() < 0.1:
                        item.release()  # given back: someone takes it later
                    else:
                        item.ack()
                        record(cid, [item.payload])
                else:  # blocking batches, and reserve + ack in a transaction
                    if rnd.random() < 0.5:
                        record(cid, q.get_many(rnd.randint(1, 16), block=True, timeout=0.05))
                    else:
                        try:
                            item = q.reserve(timeout=0.05)
                        except Empty:
                            continue
                        with casket.transaction():
                            item.ack()
                        record(cid, [item.payload])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            stop.set()

    consumers = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(4)]
    producers = [threading.Thread(target=produce, args=(i,), daemon=True)
                 for i in range(n_producers)]
    for t in consumers + producers:
        t.start()
    deadline = time.monotonic() + 120
    for t in producers:
        t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), "producer hung"
    producers_done.set()
    assert not errors, errors
    stop.wait(max(0.0, deadline - time.monotonic()))
    stop.set()
    for t in consumers:
        t.join(JOIN)
        assert not t.is_alive(), "consumer hung"
    assert not errors, errors

    got = [p for lst in consumed for p in lst]
    ids = [p.split(b"|", 1)[0] for p in got]
    assert len(ids) == len(set(ids)), "an item was delivered twice"
    expect = {b"p%d-%d" % (pid, s) for pid in range(n_producers) for s in range(per_producer)}
    assert set(ids) == expect, (len(expect - set(ids)), "lost")
    assert len(got) == total
    # payload bodies intact
    for p in got:
        head, body = p.split(b"|", 1)
        assert body == b"x" * len(body)
    for q in queues:
        assert len(q) == 0
        assert q.get_many(10) == []
    assert casket.queues() == []
    casket.check()


# ---------------------------------------------------- (b) a put wakes a get


def test_blocking_get_woken_by_put(casket):
    q = casket.queue("wake")
    r = start(lambda: q.get(timeout=10))
    time.sleep(0.2)
    assert r.ended_at is None, "get returned from an empty queue"
    t0 = time.monotonic()
    q.put(b"hello")
    assert r.finish() == b"hello"
    assert r.ended_at - t0 < 5
    assert len(q) == 0


def test_blocking_get_many_woken_by_put_many(casket):
    q = casket.queue("wake")
    r = start(lambda: q.get_many(10, block=True, timeout=10))
    time.sleep(0.2)
    assert r.ended_at is None
    t0 = time.monotonic()
    q.put_many([b"a", b"b", b"c"])
    got = r.finish()
    assert r.ended_at - t0 < 5
    # woken by the commit: at least the first item, in order, none twice
    assert 1 <= len(got) <= 3 and got == [b"a", b"b", b"c"][:len(got)]
    assert got + q.get_many(10) == [b"a", b"b", b"c"]


# --------------------------------------- (c) uncommitted and aborted puts


def test_put_in_open_transaction_not_delivered_until_commit(casket):
    q = casket.queue("t")
    may_commit = threading.Event()
    put_done = threading.Event()

    def writer() -> None:
        with casket.transaction():
            q.put(b"in-txn")
            assert len(q) == 1  # the writer's own view
            put_done.set()
            assert may_commit.wait(JOIN)

    w = start(writer)
    assert put_done.wait(JOIN)
    consumer = start(lambda: q.get(timeout=10))
    time.sleep(0.4)
    assert consumer.ended_at is None, "delivered before the commit"
    assert len(q) == 0  # other threads read the committed state
    assert q.peek() is None
    t0 = time.monotonic()
    may_commit.set()
    w.finish()
    assert consumer.finish() == b"in-txn"
    assert consumer.ended_at - t0 < 5
    assert len(q) == 0


def test_aborted_put_never_delivered(casket):
    q = casket.queue("t")
    may_abort = threading.Event()
    put_done = threading.Event()

    class Abort(Exception):
        pass

    def writer() -> None:
        try:
            with casket.transaction():
                q.put(b"aborted")
                q.put_many([b"aborted-2", b"aborted-3"])
                put_done.set()
                assert may_abort.wait(JOIN)
                raise Abort
        except Abort:
            pass

    w = start(writer)
    assert put_done.wait(JOIN)
    consumer = start(lambda: q.get(timeout=1.5))
    time.sleep(0.3)
    may_abort.set()
    w.finish()
    with pytest.raises(Empty):
        consumer.finish()
    assert len(q) == 0
    with pytest.raises(Empty):
        q.get_nowait()
    assert casket.queues() == []
    # a later committed put is delivered, and only it
    q.put(b"real")
    assert q.get_many(10) == [b"real"]


# --------------------------------------------------- (d) close while blocked


def test_close_wakes_blocked_get(path):
    c = pyqstore.open(path, "n", sync=False)
    q = c.queue("never")
    r = start(lambda: q.get(timeout=None))
    r2 = start(lambda: q.reserve(timeout=None))
    time.sleep(0.3)
    assert r.ended_at is None and r2.ended_at is None
    t0 = time.monotonic()
    c.close()
    with pytest.raises(ClosedError):
        r.finish()
    with pytest.raises(ClosedError):
        r2.finish()
    assert r.ended_at - t0 < 5
    assert r2.ended_at - t0 < 5
    with pytest.raises(ClosedError):
        q.get(timeout=None)
    with pytest.raises(ClosedError):
        q.put(b"x")


# -------------------------------------------- (e) a release wakes a reserve


def test_release_wakes_blocked_reserve(casket):
    q = casket.queue("r")
    q.put(b"only")
    mine = q.reserve(timeout=0)
    assert mine.payload == b"only"
    r = start(lambda: q.reserve(timeout=10))
    time.sleep(0.3)
    assert r.ended_at is None, "reserved an item already reserved"
    t0 = time.monotonic()
    mine.release()
    theirs = r.finish()
    assert r.ended_at - t0 < 5
    assert (theirs.id, theirs.payload) == (mine.id, b"only")
    with pytest.raises(NotReservedError):
        mine.ack()
    theirs.ack()
    assert len(q) == 0
    assert casket.queues() == []


# ---------------------------------------------- (f) lease expiry wakes a get


def test_lease_expiry_wakes_blocked_get(casket):
    q = casket.queue("lease")
    q.put(b"leased")
    reserved = threading.Event()
    holder: list[pyqstore.Item] = []

    def a() -> None:
        holder.append(q.reserve(timeout=0, lease=0.3))
        reserved.set()
        # never acks

    ta = start(a)
    assert reserved.wait(JOIN)
    ta.finish()
    t0 = time.monotonic()
    b = start(lambda: q.get(timeout=5))
    assert b.finish() == b"leased"
    assert b.ended_at - t0 < 4.5  # woken by the lease (0.3 s), not the timeout
    with pytest.raises(NotReservedError):
        holder[0].ack()
    with pytest.raises(NotReservedError):
        holder[0].release()
    assert len(q) == 0
    assert casket.queues() == []


# ------------------------------------- (g) stale and cross-thread acks


def test_stale_ack_after_lease_and_rereserve(casket):
    q = casket.queue("g")
    q.put(b"contested")
    a_has = threading.Event()
    b_has = threading.Event()
    items: dict[str, pyqstore.Item] = {}

    def consumer_a() -> None:
        items["a"] = q.reserve(timeout=0, lease=0.2)
        a_has.set()

    def consumer_b() -> None:
        items["b"] = q.reserve(timeout=10)  # gets it once A's lease ends
        b_has.set()

    start(consumer_a).finish()
    assert a_has.is_set()
    tb = start(consumer_b)
    tb.finish()
    assert b_has.is_set()
    ia, ib = items["a"], items["b"]
    assert ia.id == ib.id and ia.payload == ib.payload == b"contested"

    # A's Item acked from a third thread: stale, refused; B's from a fourth
    stale = start(ia.ack)
    with pytest.raises(NotReservedError):
        stale.finish()
    assert len(q) == 0  # still B's
    stale_release = start(ia.release)
    with pytest.raises(NotReservedError):
        stale_release.finish()
    assert len(q) == 0
    start(ib.ack).finish()
    with pytest.raises(NotReservedError):
        ib.ack()
    assert len(q) == 0
    assert casket.queues() == []
    with pytest.raises(Empty):
        q.get_nowait()


def test_ack_after_lease_ran_out_refused(casket):
    """A reservation whose lease ran out is over even when nobody has
    re-reserved the item (or otherwise touched the queue) since: an ack or
    release from another thread is refused and the item stays queued."""
    q = casket.queue("late")
    q.put(b"one")
    q.put(b"two")
    ia = start(lambda: q.reserve(timeout=0, lease=0.1)).finish()
    ib = start(lambda: q.reserve(timeout=0, lease=0.1)).finish()
    time.sleep(0.4)
    with pytest.raises(NotReservedError):
        start(ia.ack).finish()
    with pytest.raises(NotReservedError):
        start(ib.release).finish()
    assert len(q) == 2
    assert q.get_many(10) == [b"one", b"two"]
    assert casket.queues() == []


def test_leases_acks_from_other_threads_exactly_once(casket):
    """Workers reserve with short leases and hand each Item to an acker
    thread, waiting until it is dealt with; some are acked too late (after
    the lease ran out, by when another worker may hold the item).  Every
    item is acknowledged exactly once."""
    import queue as stdqueue

    q = casket.queue("work")
    n = 120
    lease, late = 0.4, 0.6
    q.put_many([b"w%d" % i for i in range(n)])
    handoff: stdqueue.Queue = stdqueue.Queue()
    acked: list[bytes] = []
    stale = [0]
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def worker(wid: int) -> None:
        rnd = random.Random(wid)
        try:
            while not done.is_set():
                try:
                    item = q.reserve(timeout=0.05, lease=lease)
                except Empty:
                    continue
                handled = threading.Event()
                # one in eight is acked late, after its lease
                handoff.put((item, late if rnd.random() < 0.125 else 0.0, handled))
                handled.wait(JOIN)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def acker() -> None:
        try:
            while not done.is_set():
                try:
                    item, delay, handled = handoff.get(timeout=0.05)
                except stdqueue.Empty:
                    continue
                time.sleep(delay)
                try:
                    item.ack()
                except NotReservedError:
                    with lock:
                        stale[0] += 1
                else:
                    with lock:
                        acked.append(item.payload)
                        if len(acked) >= n:
                            done.set()
                handled.set()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
    threads += [threading.Thread(target=acker, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    done.wait(120)
    done.set()
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive(), "thread hung"
    assert not errors, errors
    assert len(acked) == len(set(acked)), "an item acknowledged twice"
    assert sorted(acked) == sorted(b"w%d" % i for i in range(n))
    assert stale[0] > 0  # the late acks were refused
    assert len(q) == 0
    assert casket.queues() == []
    casket.check()
