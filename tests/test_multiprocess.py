"""Several processes on one casket, read-write, at the same time.

The behaviour specified here:

* Any number of processes open the same casket read-write at once, by
  default (``pyqstore.open(path)``, no flag).  Writers take turns for a
  write transaction (an autocommit write is a transaction): a writer waits
  up to ``lock_timeout`` for another process's transaction, then gets
  ``LockedError``.  Readers never wait for a writer's transaction; they
  read the last commit.  Every process sees the others' commits -- records
  and queues -- at its next operation, without reopening.
* ``len(queue)`` is exact in every process at all times: after puts, gets,
  reservations (not counted), releases, acks, aborts, expired leases made
  by any process, and once a dead process's reservations are back.  A
  reservation hides the item from every process.
* A get, ``get_many(block=True)`` or reserve blocked in one process wakes
  when another process commits a put (not before the commit).
* A process that dies holding the write lock (SIGKILL inside a
  transaction) does not block the others beyond ``lock_timeout``; its
  transaction is never visible.  Items it held reserved come back at the
  front of their queue, in order (when their lease ends, or sooner once the
  death is noticed), and a blocked reserve in another process gets them.
* Files the engine keeps beside the casket for sharing (``NAME-shm`` and
  any other sibling that is not ``NAME`` or ``NAME-log``) are validated at
  open and rebuilt when stale, damaged, empty or huge: no hang, no crash,
  the data intact.
* multiprocessing with "fork" and "spawn": children open the casket by
  path and work, also when the parent had it open when it forked.  A
  Casket inherited through fork and used in the child raises a
  ``pyqstore.Error`` subclass (``pyqstore.ForkedError``) whose message
  mentions fork; the child neither writes through it nor releases the
  parent's locks or reservations, whatever it does with it.  Pickling a
  Casket is a TypeError telling to open the casket by path in the child.
* Consumers moving items between queues in transactions deliver every item
  exactly once, across 4 producer and 4 consumer processes, also when
  consumers are SIGKILLed at random moments and restarted.
* ``compact()`` while another process has the casket open raises
  ``LockedError`` (and leaves that process working); alone it works.

Children are started through explicit multiprocessing contexts and always
open the casket by path.  Every wait has a timeout, and the ``kids``
fixture kills whatever is still running, so a broken engine fails these
tests rather than hanging them.  Timing asserts are generous upper bounds
that catch a waiter never woken (it would sit out its whole timeout).
"""
from __future__ import annotations

import gc
import glob
import multiprocessing as mp
import os
import pickle
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

import pyqstore
from pyqstore import Empty, LockedError, NotReservedError
from _procs import ANSWER, Kids, child_error, exc_info, join_ok, kill_child, qualname, recv

# The engine adds pyqstore.ForkedError; until then any pyqstore.Error (with
# "fork" in its message) is what is asked for.
ForkedError = getattr(pyqstore, "ForkedError", pyqstore.Error)

LONG_LOCK = 10.0  # lock_timeout where a process must never give up

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or "fork" not in mp.get_all_start_methods(),
    reason="needs POSIX processes (fork and spawn)",
)


# ------------------------------------------------- a casket in another process


def _serve(conn: Any, path: str, open_kw: dict) -> None:
    """Open the casket by path, then run the parent's requests on it, one at
    a time, in this process's main thread (so a begin() by the parent makes
    the following requests part of that transaction)."""
    t0 = time.monotonic()
    try:
        c = pyqstore.open(path, **open_kw)
    except pyqstore.Error as e:
        conn.send(("open-failed", exc_info(e), time.monotonic() - t0))
        return
    held: dict[int, Any] = {}  # reserved Items by id
    conn.send(("ready", os.getpid()))
    while True:
        req = conn.recv()
        if req is None:
            break
        kind, target, name, args, kwargs = req
        t0 = time.monotonic()
        try:
            if kind == "c":
                obj = c
            elif kind == "q":
                obj = c.queue(target)
            else:
                obj = held[target]
            if kind == "q" and name == "reserve":
                it = obj.reserve(*args, **kwargs)
                held[it.id] = it
                value: Any = (it.id, it.payload)
            else:
                value = getattr(obj, name)(*args, **kwargs)
                if kind == "item":
                    del held[target]
                if isinstance(value, Iterator):  # items(), keys(), values()
                    value = list(value)
            out = ("ok", value, t0, time.monotonic())
        except Exception as e:  # noqa: BLE001 - handed to the parent
            out = ("exc", exc_info(e), t0, time.monotonic())
        conn.send(out)
    c.close()
    conn.send(("closed",))


@dataclass
class Res:
    """What a request to a Remote did: its value or the exception it raised,
    and when it started and returned (CLOCK_MONOTONIC, shared by every
    process of the host)."""

    ok: bool
    value: Any
    exc: Optional[tuple[str, tuple[str, ...], str]]
    t0: float
    t1: float

    @property
    def elapsed(self) -> float:
        return self.t1 - self.t0

    def raised(self, cls: type) -> bool:
        return not self.ok and qualname(cls) in self.exc[1]

    def __str__(self) -> str:
        if self.ok:
            return f"returned {self.value!r} after {self.elapsed:.3f} s"
        return f"raised {self.exc[0]}: {self.exc[2]} after {self.elapsed:.3f} s"


class Remote:
    """A casket opened by path in a child process, driven by the parent one
    request at a time.  ``r.c(name, *args)`` calls a Casket method there,
    ``r.q(queue, name, *args)`` a Queue method, ``r.item(id, "ack")`` a
    method of an item it reserved (``r.q(queue, "reserve")`` returns (id,
    payload)).  Those fail the test when the call raises; ``try_c`` /
    ``try_q`` return a :class:`Res` instead; ``send`` + ``wait`` run a call
    asynchronously."""

    def __init__(self, kids: Kids, path: str, method: str = "spawn",
                 name: str = "remote", **open_kw: Any) -> None:
        self.name = name
        self.proc, self.conn = kids.start(_serve, path, open_kw, method=method, name=name)
        msg = recv(self.conn, self.proc, what="'opened'")
        if msg[0] == "open-failed":
            cls, _, text = msg[1]
            raise AssertionError(
                f"{name}: a second process could not open the casket read-write "
                f"while another process has it open: {cls}: {text} "
                f"(after {msg[2]:.2f} s)")
        assert msg[0] == "ready", msg
        self.pid = msg[1]
        self.pending = False

    def send(self, kind: str, target: Any, name: str, *args: Any, **kwargs: Any) -> None:
        assert not self.pending, "one request at a time"
        self.conn.send((kind, target, name, args, kwargs))
        self.pending = True

    def poll(self) -> bool:
        """True when the pending request has returned."""
        return self.conn.poll(0)

    def wait(self, timeout: float = ANSWER) -> Res:
        msg = recv(self.conn, self.proc, timeout, what="the result of its request")
        self.pending = False
        if msg[0] == "ok":
            return Res(True, msg[1], None, msg[2], msg[3])
        assert msg[0] == "exc", msg
        return Res(False, None, msg[1], msg[2], msg[3])

    def call(self, kind: str, target: Any, name: str, *args: Any, **kwargs: Any) -> Res:
        self.send(kind, target, name, *args, **kwargs)
        return self.wait()

    def _value(self, what: str, res: Res) -> Any:
        if not res.ok:
            raise AssertionError(f"{self.name}: {what} {res}")
        return res.value

    def try_c(self, name: str, *args: Any, **kwargs: Any) -> Res:
        return self.call("c", None, name, *args, **kwargs)

    def try_q(self, queue: str, name: str, *args: Any, **kwargs: Any) -> Res:
        return self.call("q", queue, name, *args, **kwargs)

    def c(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._value(f"casket.{name}{args}", self.try_c(name, *args, **kwargs))

    def q(self, queue: str, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._value(f"queue({queue!r}).{name}{args}", self.try_q(queue, name, *args, **kwargs))

    def item(self, item_id: int, name: str) -> Any:
        return self._value(f"item {item_id}.{name}()", self.call("item", item_id, name))

    def close(self) -> None:
        """Close the casket in the child and let it exit."""
        assert not self.pending
        self.conn.send(None)
        msg = recv(self.conn, self.proc, what="'closed'")
        assert msg == ("closed",), msg
        join_ok(self.proc, self.conn)

    def kill(self) -> float:
        """SIGKILL the child; returns the monotonic time of the kill."""
        t = time.monotonic()
        exitcode = kill_child(self.proc)
        assert exitcode == -signal.SIGKILL, exitcode
        return t


def run_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    """fn() in a daemon thread; the dict gets "value" or "exc" and "t1"."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["exc"] = e
        box["t1"] = time.monotonic()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def wait_until(cond: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step)


# ==================================================== opening and visibility


def test_processes_open_read_write_at_once_by_default(kids, path):
    """Three processes, every one opened with plain pyqstore.open(path),
    write records and queue items in turn; each sees the others' commits
    at its very next operation."""
    c = pyqstore.open(path)
    try:
        a = Remote(kids, path, name="a")
        b = Remote(kids, path, name="b")
        q = c.queue("q")

        c["k"] = b"parent"
        assert a.c("get", "k") == b"parent"
        assert b.c("__getitem__", "k") == b"parent"
        a.c("put", "k", b"a")
        assert c["k"] == b"a"
        assert b.c("get", "k") == b"a"
        b.c("putdup", "k", b"b")
        assert c.getdup("k") == [b"a", b"b"]
        assert a.c("getdup", "k") == [b"a", b"b"]
        assert a.c("count", "k") == 2
        a.c("putdup_many", [("m", b"1"), ("m", b"2")])
        for n in (len(c), a.c("__len__"), b.c("__len__")):
            assert n == 4
        assert b.c("items") == [(b"k", b"a"), (b"k", b"b"), (b"m", b"1"), (b"m", b"2")]
        assert b.c("out", "m")
        assert c.getdup("m") == [b"2"]

        q.put(b"1")
        a.q("q", "put", b"2")
        b.q("q", "put_many", [b"3", b"4"])
        assert q.peek_many(10) == [b"1", b"2", b"3", b"4"]
        assert a.q("q", "peek_many", 10) == [b"1", b"2", b"3", b"4"]
        assert b.c("queues") == ["q"]
        assert a.q("q", "get_nowait") == b"1"
        assert len(q) == 3
        assert b.q("q", "get_many", 2) == [b"2", b"3"]
        assert q.get_nowait() == b"4"
        assert a.q("q", "__len__") == 0 and b.q("q", "__len__") == 0
        assert a.c("queues") == []

        # transactions: whole, at commit, in every process
        with c.transaction():
            c["t"] = b"1"
            q.put(b"5")
        assert a.c("get", "t") == b"1"
        assert a.q("q", "peek") == b"5"
        a.c("begin")
        a.c("put", "t", b"2")
        a.q("q", "put", b"6")
        assert a.c("get", "t") == b"2"  # its own view
        assert a.q("q", "__len__") == 2
        assert c["t"] == b"1" and b.c("get", "t") == b"1"  # the others': the last commit
        assert len(q) == 1 and b.q("q", "__len__") == 1
        a.c("commit")
        assert c["t"] == b"2"
        assert b.c("get", "t") == b"2"
        assert b.q("q", "peek_many", 10) == [b"5", b"6"]
        assert q.get_many(10) == [b"5", b"6"]

        a.close()
        b.close()
        c.check()
    finally:
        c.close()
    with pyqstore.open(path) as c:
        assert c.getdup("k") == [b"a", b"b"]
        assert c["t"] == b"2"
        assert c.queues() == []


def test_each_process_sees_commits_at_its_next_operation(kids, path):
    """Ping-pong between the parent and a child: every step is checked by
    the other process's next call, with no reopen in between."""
    c = pyqstore.open(path, sync=False)
    try:
        r = Remote(kids, path, sync=False)
        q = c.queue("q")
        for i in range(20):
            c[b"n"] = b"%d" % (2 * i)
            q.put(b"p%d" % i)
            assert r.c("get", b"n") == b"%d" % (2 * i)
            assert r.q("q", "__len__") == 1
            assert r.q("q", "get_nowait") == b"p%d" % i
            r.c("put", b"n", b"%d" % (2 * i + 1))
            r.q("q", "put", b"c%d" % i)
            assert c[b"n"] == b"%d" % (2 * i + 1)
            assert len(q) == 1
            assert q.get_nowait() == b"c%d" % i
        assert len(q) == 0 and r.q("q", "__len__") == 0
        r.close()
        c.check()
    finally:
        c.close()


# ====================================================== writers take turns


def test_writers_take_turns_and_time_out(kids, path):
    """A write in another process waits for our transaction: up to its
    lock_timeout, then LockedError; a patient one goes through once we
    commit, after our transaction.  Reads meanwhile never wait.  And the
    other way round: our write waits for the child's transaction."""
    c = pyqstore.open(path, sync=False, lock_timeout=1.0)
    try:
        c["n"] = b"0"
        fast = Remote(kids, path, name="fast", sync=False, lock_timeout=0.5)
        patient = Remote(kids, path, name="patient", sync=False, lock_timeout=LONG_LOCK)

        c.begin()
        c["n"] = b"parent"
        c.queue("q").put(b"from parent")

        for res in (fast.try_c("put", "x", b"1"),
                    fast.try_q("q", "put", b"x"),
                    fast.try_c("begin")):
            assert res.raised(LockedError), f"a write while another process's transaction is open {res}"
            assert 0.3 <= res.elapsed < 5.0, f"lock_timeout=0.5 not honoured: {res}"
        res = fast.try_c("get", "n")
        assert res.ok and res.value == b"0" and res.elapsed < 0.5, res

        patient.send("c", None, "put", "n", b"patient")
        time.sleep(1.0)
        assert not patient.poll(), "a write did not wait for another process's transaction"
        t_commit = time.monotonic()
        c.commit()
        res = patient.wait()
        assert res.ok, f"the waiting writer {res}"
        assert res.t1 >= t_commit, "the waiting write returned before our commit"
        assert res.t1 - t_commit < 3.0, f"the waiting write was not let in promptly: {res}"
        assert c["n"] == b"patient"  # its write came after our transaction
        assert fast.c("get", "n") == b"patient"
        assert fast.q("q", "peek") == b"from parent"
        fast.c("put", "x", b"1")  # the handle that timed out works
        assert c["x"] == b"1"

        # the other way round: the child holds a transaction
        fast.c("begin")
        fast.c("put", "n", b"fast")
        t0 = time.monotonic()
        with pytest.raises(LockedError):
            c["y"] = b"1"
        assert 0.7 <= time.monotonic() - t0 < 6.0
        with pytest.raises(LockedError):
            c.queue("q").get_nowait()  # consuming is a write
        assert c["n"] == b"patient"  # reading is not
        assert len(c.queue("q")) == 1
        fast.c("abort")
        c["y"] = b"1"
        assert c["n"] == b"patient"
        assert patient.c("get", "y") == b"1"
        fast.close()
        patient.close()
        c.check()
    finally:
        c.close()


def _incrementer(conn: Any, path: str, n: int, tag: int) -> None:
    c = pyqstore.open(path, sync=False, lock_timeout=LONG_LOCK)
    conn.send("ready")
    assert conn.recv() == "go"
    q = c.queue("log")
    for _ in range(n):
        with c.transaction():
            v = int(c["n"])
            c["n"] = b"%d" % (v + 1)
            c.putdup("seen", b"%d" % v)
            q.put(b"%d:%d" % (tag, v))
    c.close()
    conn.send("done")


def test_read_modify_write_transactions_are_serialized(kids, path):
    """Three processes increment one counter in transactions (read, then
    write): no update is lost, every transaction read a distinct value, and
    the queue saw the increments in order."""
    n, workers = 300, 3
    with pyqstore.open(path, "n", sync=False) as c:
        c["n"] = b"0"
    started = [kids.start(_incrementer, path, n, i, name=f"inc{i}") for i in range(workers)]
    for p, conn in started:
        assert recv(conn, p, what="'ready'") == "ready"
    for p, conn in started:
        conn.send("go")
    for p, conn in started:
        assert recv(conn, p, timeout=60, what="'done'") == "done"
        join_ok(p, conn)
    with pyqstore.open(path, sync=False) as c:
        total = n * workers
        assert int(c["n"]) == total, "lost updates"
        assert sorted(int(v) for v in c.getdup("seen")) == list(range(total))
        log = c.queue("log").get_many(total + 1)
        assert [int(x.split(b":")[1]) for x in log] == list(range(total))
        tags = [int(x.split(b":")[0]) for x in log]
        assert all(tags.count(i) == n for i in range(workers))
        c.check()


# ================================================== readers never wait


def test_reader_never_waits_for_writer_transaction(kids, path):
    """While we hold a transaction with changes to records and queues
    (longer than the reader's lock_timeout), another process reads the old
    committed state at once; after our commit its next reads see the new."""
    c = pyqstore.open(path, sync=False)
    try:
        q = c.queue("q")
        c["k"] = b"old"
        c.putdup("d", b"1")
        q.put_many([b"a", b"b", b"c"])
        r = Remote(kids, path, sync=False, lock_timeout=1.0)
        old = {
            ("c", "get", ("k",)): b"old",
            ("c", "get", ("k2",)): None,
            ("c", "getdup", ("d",)): [b"1"],
            ("c", "count", ("d",)): 1,
            ("c", "__len__", ()): 2,
            ("c", "__contains__", ("k2",)): False,
            ("c", "items", ()): [(b"d", b"1"), (b"k", b"old")],
            ("c", "queues", ()): ["q"],
            ("q", "__len__", ()): 3,
            ("q", "peek_many", (10,)): [b"a", b"b", b"c"],
        }
        with c.transaction():
            c["k"] = b"new"
            c["k2"] = b"x"
            c.putdup("d", b"2")
            q.put(b"d")
            assert q.get_nowait() == b"a"
            c.queue("other").put(b"o")
            t_end = time.monotonic() + 1.5  # past the reader's lock_timeout
            rounds = 0
            while rounds < 2 or time.monotonic() < t_end:
                rounds += 1
                for (kind, name, args), want in old.items():
                    res = r.call(kind, "q" if kind == "q" else None, name, *args)
                    assert res.ok, f"a read during another process's transaction {res}"
                    assert res.value == want, (name, args, res.value)
                    assert res.elapsed < 0.5, f"a read waited for a writer: {name} {res}"
        assert r.c("get", "k") == b"new"
        assert r.c("get", "k2") == b"x"
        assert r.c("getdup", "d") == [b"1", b"2"]
        assert r.q("q", "peek_many", 10) == [b"b", b"c", b"d"]
        assert r.c("queues") == ["other", "q"]
        r.close()
    finally:
        c.close()


# ===================================================== exact queue lengths


def test_queue_length_exact_across_processes(kids, path):
    """Three processes work one queue -- puts, gets, reservations with and
    without a lease, releases, acks, transactions committed and aborted, a
    lease running out, a handle closed while holding a reservation -- and
    after every step each of them reports the same exact len(queue) and
    hands out the expected item."""
    P = pyqstore.open(path, sync=False)
    try:
        q = P.queue("q")
        A = Remote(kids, path, name="A", sync=False)
        B = Remote(kids, path, name="B", sync=False)

        def lens(n: int, front: Any = "skip") -> None:
            got = {"P": len(q), "A": A.q("q", "__len__"), "B": B.q("q", "__len__")}
            assert got == {"P": n, "A": n, "B": n}, got
            if front != "skip":
                assert q.peek() == front
                assert A.q("q", "peek") == front

        item = [b"i%d" % i for i in range(12)]
        lens(0, None)
        q.put_many(item[0:5])
        lens(5, item[0])
        A.q("q", "put", item[5])
        lens(6)
        assert B.q("q", "get_nowait") == item[0]
        lens(5, item[1])
        ida, pa = A.q("q", "reserve", timeout=0)  # no lease
        assert pa == item[1]
        lens(4, item[2])
        idb, pb = B.q("q", "reserve", timeout=0, lease=60)
        assert pb == item[2]
        lens(3, item[3])
        assert q.get_many(2) == [item[3], item[4]]  # reserved ones are skipped
        lens(1, item[5])
        A.item(ida, "release")  # back in front, in its place
        lens(2, item[1])
        B.item(idb, "ack")
        lens(2, item[1])
        it = q.reserve(timeout=0)
        assert it.payload == item[1]
        lens(1, item[5])
        assert A.q("q", "get_nowait") == item[5]
        lens(0, None)
        assert B.try_q("q", "get_nowait").raised(Empty)

        # a transaction: its own view counts its changes, the others not
        A.c("begin")
        A.q("q", "put_many", [item[6], item[7]])
        assert A.q("q", "__len__") == 2
        assert len(q) == 0 and B.q("q", "__len__") == 0
        A.c("abort")
        lens(0, None)
        B.c("begin")
        B.q("q", "put_many", [item[6], item[7], item[8]])
        assert B.q("q", "get_nowait") == item[6]
        assert B.q("q", "__len__") == 2
        assert len(q) == 0
        B.c("commit")
        lens(2, item[7])
        it.release()
        lens(3, item[1])
        # a consuming transaction that aborts gives its items back
        A.c("begin")
        assert A.q("q", "get_many", 2) == [item[1], item[7]]
        assert A.q("q", "__len__") == 1
        assert len(q) == 3
        A.c("abort")
        lens(3, item[1])

        # a lease that runs out: the item is back, for everybody
        ida, pa = A.q("q", "reserve", timeout=0, lease=1.0)
        assert pa == item[1]
        lens(2, item[7])
        assert wait_until(lambda: len(q) == 3, 5.0), "an expired lease did not return the item"
        lens(3, item[1])
        assert A.call("item", ida, "ack").raised(NotReservedError)

        # a handle closed while holding reservations: they are back at once
        idb, pb = B.q("q", "reserve", timeout=0)
        B.q("q", "reserve", timeout=0, lease=60)
        lens(1, item[8])
        B.close()
        got = {"P": len(q), "A": A.q("q", "__len__")}
        assert got == {"P": 3, "A": 3}, got
        assert A.q("q", "peek_many", 10) == [item[1], item[7], item[8]]

        assert A.q("q", "clear") == 3
        assert len(q) == 0 and A.q("q", "__len__") == 0
        assert A.c("queues") == []
        A.close()
        P.check()
    finally:
        P.close()


# ====================================================== blocking waits


@pytest.mark.parametrize("how", ["get", "get_many", "reserve"])
def test_blocked_consumer_wakes_on_other_process_commit(kids, path, how):
    """A consumer blocked in another process (timeout 10 s) is not woken by
    our uncommitted put, and returns the item within 2 s of our commit; and
    a consumer blocked in a thread of ours wakes on the child's put."""
    c = pyqstore.open(path, sync=False)
    try:
        q = c.queue("q")
        r = Remote(kids, path, sync=False)
        if how == "get":
            r.send("q", "q", "get", timeout=10)
        elif how == "get_many":
            r.send("q", "q", "get_many", 5, block=True, timeout=10)
        else:
            r.send("q", "q", "reserve", timeout=10)
        time.sleep(0.5)
        assert not r.poll(), "the consumer did not wait on an empty queue"
        c.queue("other").put(b"elsewhere")  # another queue: nothing for it
        with c.transaction():
            q.put(b"x")
            time.sleep(0.5)
            assert not r.poll(), "a consumer got an item before its commit"
            t_commit = time.monotonic()
        res = r.wait(15)
        assert res.ok, f"the blocked {how} {res}"
        want = {"get": b"x", "get_many": [b"x"]}.get(how)
        if how == "reserve":
            assert res.value[1] == b"x"
            r.item(res.value[0], "ack")
        else:
            assert res.value == want
        assert res.t1 >= t_commit - 0.01
        assert res.t1 - t_commit < 2.0, f"woken {res.t1 - t_commit:.2f} s after the commit"
        assert len(q) == 0

        # the other way round: we block in a thread, the child puts
        if how == "get":
            fn = lambda: q.get(timeout=10)  # noqa: E731
        elif how == "get_many":
            fn = lambda: q.get_many(5, block=True, timeout=10)  # noqa: E731
        else:
            fn = lambda: q.reserve(timeout=10)  # noqa: E731
        th, box = run_thread(fn)
        time.sleep(0.5)
        assert th.is_alive(), "our consumer did not wait"
        t_put = time.monotonic()
        r.q("q", "put", b"y")
        th.join(15)
        assert not th.is_alive(), "our consumer hung"
        assert "exc" not in box, box.get("exc")
        assert box["t1"] - t_put < 2.0, f"woken {box['t1'] - t_put:.2f} s after the put"
        v = box["value"]
        if how == "reserve":
            assert v.payload == b"y"
            v.ack()
        else:
            assert v == (b"y" if how == "get" else [b"y"])
        assert r.q("q", "__len__") == 0
        r.close()
    finally:
        c.close()


# ======================================================= death under SIGKILL


def test_sigkill_holding_write_lock(kids, path):
    """A process killed inside a transaction: a writer of ours already
    waiting for it (lock_timeout 10 s) gets in soon after the kill, the dead
    transaction never shows, and new processes open and write."""
    c = pyqstore.open(path, sync=False, lock_timeout=LONG_LOCK)
    try:
        q = c.queue("q")
        c["k"] = b"committed"
        q.put(b"before")
        holder = Remote(kids, path, name="holder", sync=False)
        holder.c("begin")
        holder.c("put", "k", b"never")
        holder.c("put", "ghost", b"never")
        holder.q("q", "put", b"ghost")
        assert holder.q("q", "get_nowait") == b"before"

        th, box = run_thread(lambda: c.put("k", b"parent"))
        time.sleep(0.5)
        assert th.is_alive(), "our write did not wait for the other process's transaction"
        t_kill = holder.kill()
        th.join(LONG_LOCK + 5)
        assert not th.is_alive(), "our write hung"
        assert "exc" not in box, f"our write failed after the lock holder died: {box.get('exc')!r}"
        assert box["t1"] - t_kill < LONG_LOCK

        assert c["k"] == b"parent"
        assert c.get("ghost") is None
        assert q.peek_many(10) == [b"before"]
        with c.transaction():
            q.put(b"after")
        other = Remote(kids, path, name="other", sync=False)
        assert other.c("get", "k") == b"parent"
        assert other.q("q", "get_many", 10) == [b"before", b"after"]
        other.c("put", "k", b"other")
        assert c["k"] == b"other"
        other.close()
        c.check()
    finally:
        c.close()


@pytest.mark.parametrize("lease", [None, 1.0], ids=["no-lease", "lease"])
def test_sigkill_holding_reservations(kids, path, lease):
    """Items reserved by a process that is then SIGKILLed come back at the
    front of the queue in their order (at the lease's end or sooner, once
    the death is noticed), and a reserve blocked in another process gets
    them."""
    c = pyqstore.open(path, sync=False)
    try:
        q = c.queue("q")
        q.put_many([b"a0", b"a1", b"a2"])
        holder = Remote(kids, path, name="holder", sync=False)
        assert holder.q("q", "reserve", timeout=0, lease=lease)[1] == b"a0"
        assert holder.q("q", "reserve", timeout=0, lease=lease)[1] == b"a1"
        assert len(q) == 1
        assert q.peek() == b"a2"
        q.put(b"a3")
        holder.kill()
        want = [b"a0", b"a1", b"a2", b"a3"]
        if not wait_until(lambda: len(q) == 4 and q.peek_many(10) == want, 10.0):
            n, front = len(q), q.peek_many(10)
            got = q.get_many(10)
            raise AssertionError(
                f"reservations of a killed process not back after 10 s: len {n}, "
                f"peek_many {front}; get_many then returned {got}")
        assert q.get_many(10) == [b"a0", b"a1", b"a2", b"a3"]

        # a reserve blocked in a survivor gets the dead process's item
        q.put(b"b0")
        waiter = Remote(kids, path, name="waiter", sync=False)
        holder = Remote(kids, path, name="holder2", sync=False)
        assert holder.q("q", "reserve", timeout=0, lease=lease)[1] == b"b0"
        waiter.send("q", "q", "reserve", timeout=8)
        time.sleep(0.3)
        assert not waiter.poll()
        holder.kill()
        res = waiter.wait(15)
        assert res.ok, f"the survivor's reserve {res}"
        assert res.value[1] == b"b0"
        waiter.item(res.value[0], "ack")
        assert len(q) == 0 and q.peek() is None
        waiter.close()
        c.check()
    finally:
        c.close()


# ============================================ stale or damaged shared files


def _siblings(path: str) -> list[str]:
    """The files the engine keeps beside the casket other than NAME and
    NAME-log (its shared region NAME-shm and any other), plus NAME-shm
    whether or not it exists."""
    found = {f for f in glob.glob(glob.escape(path) + "*") if not os.path.isdir(f)}
    found -= {path, path + "-log"}
    found.add(path + "-shm")
    return sorted(found)


def _damage(files: list[str], mode: str, rnd: random.Random) -> None:
    for f in files:
        exists = os.path.exists(f)
        if mode == "stale":
            continue  # as the killed process left it
        if mode == "random":
            size = os.path.getsize(f) if exists else 0
            with open(f, "wb") as fh:
                fh.write(rnd.randbytes(max(size, 64 * 1024)))
        elif mode == "empty":
            with open(f, "wb"):
                pass
        elif mode == "truncated":
            head = b""
            if exists:
                with open(f, "rb") as fh:
                    head = fh.read(13)
            with open(f, "wb") as fh:
                fh.write(head or rnd.randbytes(13))
        elif mode == "huge":
            with open(f, "ab"):
                pass
            os.truncate(f, 1 << 31)  # sparse, 2 GiB
        else:
            raise ValueError(mode)


@pytest.mark.parametrize("mode", ["stale", "random", "empty", "truncated", "huge"])
def test_stale_or_damaged_shared_files_are_rebuilt(kids, path, mode):
    """A process dies (SIGKILL) holding a reservation and an open
    transaction; with no process attached, the shared files beside the
    casket are left as they are, or overwritten with random bytes, emptied,
    cut short or made huge.  Opening (in children, so a hang fails the test)
    then works: nothing hangs or crashes, the committed data is intact, the
    reservation is back, and two processes share the casket normally."""
    records = [(b"k%03d" % i, bytes([i % 251]) * (i * 7 % 900)) for i in range(200)]
    items = [b"item%d" % i for i in range(50)]
    with pyqstore.open(path, "n") as c:
        c.putdup_many(records)
        c.queue("q").put_many(items)
    holder = Remote(kids, path, name="holder")
    assert holder.q("q", "reserve", timeout=0)[1] == items[0]
    holder.c("begin")
    holder.c("put", "k000", b"uncommitted")
    holder.q("q", "put", b"uncommitted")
    holder.kill()

    files = _siblings(path)
    _damage(files, mode, random.Random(f"{mode}-7"))

    v1 = Remote(kids, path, name="v1", sync=False, lock_timeout=2.0)
    assert v1.c("check") is None
    assert v1.c("items") == sorted(records, key=lambda kv: kv[0])
    assert v1.q("q", "__len__") == len(items)
    assert v1.q("q", "peek_many", 100) == items
    v2 = Remote(kids, path, name="v2", sync=False, lock_timeout=0.5)
    assert v2.q("q", "__len__") == len(items)
    v2.c("put", "after", b"1")
    assert v1.c("get", "after") == b"1"
    assert v1.q("q", "get_nowait") == items[0]
    assert v2.q("q", "__len__") == len(items) - 1
    rid, payload = v2.q("q", "reserve", timeout=0)
    assert payload == items[1]
    assert v1.q("q", "__len__") == len(items) - 2
    # the write lock works after the rebuild
    v1.c("begin")
    v1.c("put", "x", b"1")
    assert v2.try_c("put", "y", b"1").raised(LockedError)
    v1.c("commit")
    v2.c("put", "y", b"1")
    v2.item(rid, "release")
    assert v1.q("q", "peek") == items[1]
    v1.close()
    v2.close()

    with pyqstore.open(path, sync=False) as c:
        c.check()
        assert c["k000"] == records[0][1]
        assert c["after"] == b"1" and c["x"] == b"1" and c["y"] == b"1"
        assert c.queue("q").peek_many(100) == items[1:]


# ================================================== fork, spawn, pickling


def _worker(conn: Any, path: str, idx: int) -> None:
    c = pyqstore.open(path, sync=False, lock_timeout=LONG_LOCK)
    assert c["parent"] == b"here"
    conn.send("open")
    assert conn.recv() == "go"
    jobs, results = c.queue("jobs"), c.queue("results")
    n = 0
    while True:
        with c.transaction():
            try:
                job = jobs.get_nowait()
            except Empty:
                break
            results.put(job + b"/%d" % idx)
        n += 1
    c["worker%d" % idx] = b"%d" % n
    c.close()
    conn.send(("done", n))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_children_open_by_path(kids, path, method):
    """With the parent holding the casket open (so a forked child inherits
    its handle, unused), three children open it by path, all at once, and
    share the jobs of a queue; the parent's handle sees their work and keeps
    working after they exit."""
    c = pyqstore.open(path, sync=False)
    try:
        jobs = [b"job%d" % i for i in range(60)]
        c.queue("jobs").put_many(jobs)
        c["parent"] = b"here"
        started = [kids.start(_worker, path, i, method=method, name=f"worker{i}")
                   for i in range(3)]
        for p, conn in started:
            assert recv(conn, p, what="'open'") == "open"
        for p, conn in started:
            conn.send("go")
        counts = []
        for p, conn in started:
            msg = recv(conn, p, what="'done'")
            counts.append(msg[1])
            join_ok(p, conn)
        assert sum(counts) == len(jobs)
        for i, n in enumerate(counts):
            assert c["worker%d" % i] == b"%d" % n
        results = c.queue("results").get_many(1000)
        assert sorted(r.split(b"/")[0] for r in results) == sorted(jobs)
        assert len(c.queue("jobs")) == 0
        c["after"] = b"1"
        c.queue("jobs").put(b"more")
        assert c.queue("jobs").get_nowait() == b"more"
        c.check()
    finally:
        c.close()
    with pyqstore.open(path) as c:
        assert c["after"] == b"1"


def _use_inherited(conn: Any, box: list) -> None:
    """In a forked child: use the parent's Casket, Queue and reserved Item;
    each use must fail with a fork error.  Then close the handle and
    finalise it as the garbage collector would."""
    c, q, item = box

    def txn() -> None:
        with c.transaction():
            pass

    ops: list[tuple[str, Callable[[], Any]]] = [
        ("get", lambda: c.get("base")),
        ("getitem", lambda: c["base"]),
        ("len", lambda: len(c)),
        ("count", lambda: c.count("base")),
        ("items", lambda: list(c.items())),
        ("queues", lambda: c.queues()),
        ("len(queue)", lambda: len(q)),
        ("peek", lambda: q.peek()),
        ("stats", lambda: c.stats()),
        ("put", lambda: c.put("child", b"x")),
        ("putdup", lambda: c.putdup("child", b"x")),
        ("out", lambda: c.out("base")),
        ("queue put", lambda: q.put(b"child")),
        ("queue put_many", lambda: q.put_many([b"child"])),
        ("new queue put", lambda: c.queue("other").put(b"child")),
        ("get_nowait", lambda: q.get_nowait()),
        ("get_many", lambda: q.get_many(5)),
        ("reserve", lambda: q.reserve(timeout=0)),
        ("ack the parent's item", lambda: item.ack()),
        ("release the parent's item", lambda: item.release()),
        ("sync", lambda: c.sync()),
        ("compact", lambda: c.compact()),
        ("commit the parent's transaction", lambda: c.commit()),
        ("abort the parent's transaction", lambda: c.abort()),
        ("begin", lambda: c.begin()),
        ("transaction()", txn),
    ]
    for label, fn in ops:
        try:
            v = fn()
            conn.send((label, "ok", repr(v)[:200]))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            conn.send((label, "exc", exc_info(e)))
    try:
        c.close()
        conn.send(("close", "ok", None))
    except BaseException as e:  # noqa: BLE001
        conn.send(("close", "exc", exc_info(e)))
    c.__del__()  # what the garbage collector does with the handle
    gc.collect()
    conn.send(("end",))


def test_casket_inherited_through_fork(kids, path):
    """A Casket (and its Queue and a reserved Item) inherited by a forked
    child while the parent has an open transaction and a reservation: every
    use in the child raises a pyqstore.Error subclass (ForkedError) whose
    message mentions fork, and neither that nor the child closing and
    finalising the handle writes anything or releases the parent's write
    lock or reservation.  The parent's handle keeps working; its data is
    intact."""
    c = pyqstore.open(path, sync=False)
    try:
        q = c.queue("q")
        c["base"] = b"1"
        q.put_many([b"i0", b"i1", b"i2"])
        item = q.reserve(timeout=0)
        assert item.payload == b"i0"
        c.begin()
        c["txn"] = b"pending"
        q.put(b"i3")

        p, conn = kids.start(_use_inherited, [c, q, item], method="fork", name="forked")
        while True:
            msg = recv(conn, p, timeout=10, what="the next result")
            if msg == ("end",):
                break
            label, outcome, info = msg
            if label == "close" and outcome == "ok":
                continue  # closing the inherited handle may be a no-op
            assert outcome == "exc", f"{label} on an inherited casket worked in the child: {info}"
            name, mro, text = info
            assert qualname(pyqstore.Error) in mro, f"{label}: {name}: {text}"
            assert qualname(ForkedError) in mro, f"{label}: {name}: {text}"
            assert "fork" in text.lower(), f"{label}: message does not mention fork: {text!r}"
        join_ok(p, conn)

        # the parent still holds its write lock and its reservation
        assert c.in_transaction
        third = Remote(kids, path, name="third", sync=False, lock_timeout=0.5)
        assert third.try_c("put", "third", b"1").raised(LockedError), (
            "the forked child released the parent's write lock")
        assert third.c("get", "base") == b"1"
        assert third.c("get", "txn") is None
        assert third.c("get", "child") is None
        assert third.q("q", "peek_many", 10) == [b"i1", b"i2"]  # i0 still reserved
        assert third.c("queues") == ["q"]

        # the parent's handle works, its transaction and reservation intact
        assert c["txn"] == b"pending"
        c.commit()
        assert c["base"] == b"1"
        assert c.get("child") is None
        assert q.peek_many(10) == [b"i1", b"i2", b"i3"]
        item.ack()
        assert len(q) == 3
        assert third.q("q", "peek_many", 10) == [b"i1", b"i2", b"i3"]
        third.c("put", "third", b"1")
        assert c["third"] == b"1"
        assert c.queues() == ["q"]
        third.close()
        c.check()
    finally:
        c.close()
    with pyqstore.open(path) as c:
        assert [k for k in c.keys()] == [b"base", b"third", b"txn"]
        assert c.queue("q").get_many(10) == [b"i1", b"i2", b"i3"]


def _never_run(conn: Any, c: Any) -> None:  # pragma: no cover - must not start
    conn.send("started")


def test_pickling_a_casket_is_a_type_error(kids, path):
    """A Casket cannot be pickled -- so not handed to a spawned child
    either -- and the message says to open the casket by path there."""
    with pyqstore.open(path, sync=False) as c:
        c["k"] = b"v"
        for proto in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TypeError) as ei:
                pickle.dumps(c, protocol=proto)
            msg = str(ei.value).lower()
            assert "open" in msg and "path" in msg, f"protocol {proto}: {ei.value}"
        with pytest.raises(TypeError):
            pickle.dumps(c.queue("q"))
        with pytest.raises(TypeError) as ei:
            kids.start(_never_run, c, method="spawn", name="never")
        msg = str(ei.value).lower()
        assert "open" in msg and "path" in msg, str(ei.value)
        assert c["k"] == b"v"
        c["k2"] = b"v2"


# =================================== producers and consumers, exactly once

N_ITEMS = 100_000
N_QUEUES = 3
PRODUCERS = 4
CONSUMERS = 4
MAX_KILLS = 20
GIVE_UP = 50.0  # seconds a consumer keeps trying before it fails


def _payload(prod: int, j: int) -> bytes:
    return b"%d:%d:" % (prod, j) + b"." * ((prod * 7 + j) % 40)


def _producer(conn: Any, path: str, prod: int, n: int, seed: int) -> None:
    c = pyqstore.open(path, sync=False, lock_timeout=LONG_LOCK)
    qs = [c.queue("work%d" % i) for i in range(N_QUEUES)]
    rnd = random.Random(seed)
    j = 0
    while j < n:
        r = rnd.random()
        k = min(n - j, rnd.randint(1, 500) if r < 0.97 else rnd.randint(1, 3))
        batch = [_payload(prod, x) for x in range(j, j + k)]
        if r < 0.6:
            qs[rnd.randrange(N_QUEUES)].put_many(batch)
        elif r < 0.97:
            with c.transaction():  # one transaction over every queue
                for i in range(N_QUEUES):
                    qs[i].put_many(batch[i::N_QUEUES])
        else:
            for x in batch:
                qs[rnd.randrange(N_QUEUES)].put(x)
        j += k
    c.close()
    conn.send(("done", n))


class _Abort(Exception):
    pass


def _consumer(conn: Any, path: str, cid: int, total: int, seed: int) -> None:
    """Moves items from the work queues to "done", each move one
    transaction, until "done" holds every item."""
    c = pyqstore.open(path, sync=False, lock_timeout=LONG_LOCK)
    qs = [c.queue("work%d" % i) for i in range(N_QUEUES)]
    done = c.queue("done")
    rnd = random.Random(seed)
    give_up = time.monotonic() + GIVE_UP
    while True:
        n_done = len(done)
        if n_done >= total:
            break
        if time.monotonic() > give_up:
            raise AssertionError(f"consumer {cid}: only {n_done} of {total} items delivered "
                                 f"after {GIVE_UP} s")
        q = qs[rnd.randrange(N_QUEUES)]
        r = rnd.random()
        moved = 0
        if r < 0.75:
            with c.transaction():
                got = q.get_many(rnd.randint(1, 50))
                done.put_many(got)
            moved = len(got)
        elif r < 0.95:
            try:
                it = q.reserve(timeout=0.01)
            except Empty:
                it = None
            if it is not None:
                with c.transaction():
                    done.put(it.payload)
                    it.ack()
                moved = 1
        else:
            try:
                with c.transaction():  # consumed, then given back
                    done.put_many(q.get_many(10))
                    raise _Abort
            except _Abort:
                pass
        if not moved:  # nothing to do here now: let the others have the lock
            time.sleep(rnd.uniform(0.002, 0.02))
    c.close()
    conn.send(("done", cid))


@pytest.mark.parametrize("method,kill", [("spawn", False), ("fork", True)],
                         ids=["spawn", "fork-sigkill"])
def test_producers_consumers_exactly_once(kids, path, method, kill):
    """4 producers put 100,000 unique items over 3 queues; 4 consumers move
    them to a "done" queue in transactions (get_many + put_many, reserve +
    ack, some aborted).  With kill, consumers are SIGKILLed at random moments
    and replaced.  Every item ends up in "done" exactly once."""
    with pyqstore.open(path, "n", sync=False) as c:
        c.check()
    per = N_ITEMS // PRODUCERS
    producers = [kids.start(_producer, path, i, per, 100 + i, method=method, name=f"producer{i}")
                 for i in range(PRODUCERS)]
    consumers: list[tuple[Any, Any]] = []
    killed: set[str] = set()

    def start_consumer() -> None:
        n = len(consumers)
        consumers.append(kids.start(_consumer, path, n, N_ITEMS, 1000 + n,
                                    method=method, name=f"consumer{n}"))

    def check_failures() -> None:
        for p, conn in producers + consumers:
            if p.name in killed or p.exitcode in (None, 0):
                continue
            raise AssertionError(f"{p.name} exited with code {p.exitcode}\n{child_error(conn)}")

    for _ in range(CONSUMERS):
        start_consumer()
    t0 = time.monotonic()
    rnd = random.Random(4242)
    while kill and len(killed) < MAX_KILLS and time.monotonic() - t0 < 30:
        time.sleep(rnd.uniform(0.005, 0.03) if len(killed) < 3 else rnd.uniform(0.01, 0.1))
        check_failures()
        if any(p.exitcode == 0 for p, _ in consumers):
            break  # everything delivered
        live = [p for p, _ in consumers if p.name not in killed and p.exitcode is None]
        if not live:
            break
        victim = rnd.choice(live)
        assert kill_child(victim) is not None, f"{victim.name} survived SIGKILL"
        killed.add(victim.name)
        start_consumer()

    deadline = time.monotonic() + GIVE_UP + 10
    while any(p.exitcode is None and p.name not in killed for p, _ in producers + consumers):
        check_failures()
        assert time.monotonic() < deadline, "producers or consumers hung"
        time.sleep(0.05)
    check_failures()
    elapsed = time.monotonic() - t0

    with pyqstore.open(path, sync=False) as c:
        for i in range(N_QUEUES):
            w = c.queue("work%d" % i)
            assert len(w) == 0 and w.peek() is None, f"work{i} not drained"
        done = c.queue("done")
        assert len(done) == N_ITEMS
        got: list[bytes] = []
        while True:
            batch = done.get_many(20000)
            if not batch:
                break
            got.extend(batch)
        distinct = set(got)
        assert len(got) == len(distinct), f"{len(got) - len(distinct)} items delivered twice"
        expected = {_payload(p, j) for p in range(PRODUCERS) for j in range(per)}
        missing, extra = expected - distinct, distinct - expected
        assert not missing, f"{len(missing)} items lost, e.g. {sorted(missing)[:3]}"
        assert not extra, f"{len(extra)} unknown items, e.g. {sorted(extra)[:3]}"
        assert c.queues() == []
        c.check()
    if kill:
        assert len(killed) >= 3, f"only {len(killed)} kills landed in {elapsed:.1f} s"


# ============================================================== compaction


def test_compact_refused_while_another_process_has_it_open(kids, path):
    """compact() while another process has the casket open raises
    LockedError with a clear message and leaves that process working; once
    it has closed, compact() works."""
    c = pyqstore.open(path, sync=False, lock_timeout=1.0)
    try:
        c.putdup_many([(b"r%05d" % i, b"v" * 500) for i in range(3000)])
        with c.transaction():
            for i in range(2900):
                c.out(b"r%05d" % i)
        c.queue("q").put_many([b"a", b"b"])
        other = Remote(kids, path, name="other", sync=False, lock_timeout=1.0)
        assert other.q("q", "get_nowait") == b"a"

        with pytest.raises(LockedError) as ei:
            c.compact()
        msg = str(ei.value).lower()
        assert "compact" in msg and ("process" in msg or "open" in msg), str(ei.value)
        res = other.try_c("compact")
        assert res.raised(LockedError), f"compact in the other process {res}"

        # nothing broke: both processes read, write and see each other
        assert other.c("__len__") == 100
        assert other.c("get", b"r02999") == b"v" * 500
        other.c("put", "after", b"1")
        assert c["after"] == b"1"
        c["mine"] = b"2"
        assert other.c("get", "mine") == b"2"
        assert other.q("q", "peek_many", 10) == [b"b"]
        assert other.c("check") is None
        other.close()

        c.compact()  # alone now
        st = c.stats()
        assert st["free_pages"] == 0
        assert len(c) == 102
        assert c[b"r02999"] == b"v" * 500 and c["after"] == b"1" and c["mine"] == b"2"
        assert c.queue("q").peek_many(10) == [b"b"]
        c.check()
        again = Remote(kids, path, name="again", sync=False)
        assert again.c("get", "after") == b"1"
        assert again.c("__len__") == 102
        again.close()
    finally:
        c.close()
