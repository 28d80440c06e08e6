"""Dedup keys (issue 13 item 5): put(key=...) and put_many(keys=...) store
nothing for a key whose item is still in the queue or was put within the
queue's dedup_window, and return the first item's id; inside transactions,
across processes, across a SIGKILL; bad keys."""
from __future__ import annotations

import threading
import time

import pytest

import pyqstore
from pyqstore._qstore import lib
from _procs import recv, start_python


@pytest.fixture
def clock():
    """The queue clock of this process, fixed at a time the test moves."""
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


def test_duplicate_put_returns_first_id_and_stores_nothing(casket):
    q = casket.queue("a")
    first = q.put(b"one", key=b"k")
    assert q.put(b"two", key=b"k") == first
    assert q.put_nowait(b"three", key=b"k") == first
    assert len(q) == 1
    other = q.put(b"other", key=b"j")
    assert other != first and len(q) == 2
    assert q.get_many(10) == [b"one", b"other"]


def test_key_held_while_item_reserved_delayed_or_prioritized(casket, clock):
    q = casket.queue("a")
    r = q.put(b"r", key=b"r")
    d = q.put(b"d", key=b"d", delay=10)
    p = q.put(b"p", key=b"p", priority=5)
    it = q.reserve(timeout=0)           # takes p (highest priority)
    assert it.id == p
    assert [q.put(b"x", key=k) for k in (b"r", b"d", b"p")] == [r, d, p]
    it.release()
    clock.advance(11)
    assert q.get_many(10) == [b"p", b"r", b"d"]     # priority first


def test_key_goes_with_the_item_after_the_window(casket, clock):
    q = casket.queue("a", dedup_window=5)
    first = q.put(b"one", key=b"k")
    assert q.get() == b"one"
    clock.advance(4)
    assert q.put(b"two", key=b"k") == first     # gone, but within the window
    assert len(q) == 0
    clock.advance(2)
    again = q.put(b"three", key=b"k")           # window passed, item gone
    assert again != first and q.get() == b"three"


def test_no_window_key_free_once_item_acked(casket):
    q = casket.queue("a")
    it = q.put(b"one", key=b"k")
    r = q.reserve(timeout=0)
    assert q.put(b"x", key=b"k") == it
    r.ack()
    assert q.put(b"two", key=b"k") != it


def test_window_passed_item_still_there_stays_duplicate(casket, clock):
    q = casket.queue("a", dedup_window=1)
    first = q.put(b"one", key=b"k")
    clock.advance(100)
    assert q.put(b"two", key=b"k") == first
    assert len(q) == 1


def test_put_many_keys_dedupe_against_queue_and_batch(casket):
    q = casket.queue("a")
    old = q.put(b"old", key=b"a")
    assert q.put_many([b"1", b"2", b"3", b"4", b"5"], keys=[b"a", b"b", None, b"b", None]) == 3
    assert q.get_many(10) == [b"old", b"2", b"3", b"5"]
    assert q.put_many([], keys=[]) == 0
    assert old


def test_expired_keys_are_pruned_without_growing(casket, clock):
    """Keys whose item went and whose window passed are dropped by later
    keyed puts: the queue's records stay bounded."""
    q = casket.queue("a", dedup_window=1)
    for i in range(200):
        q.put(b"x", key=b"k%d" % i)
        q.get()
        clock.advance(2)
    n = pyqstore._qstore.ffi.new("uint64_t *")
    assert lib.qs_queue_records(casket._c, n) == 0
    # the live 'w' record and key of the last put, its expiry record, the
    # config record: a handful, not 200 keys' worth
    assert n[0] < 10, n[0]


def test_abort_forgets_the_key(casket):
    q = casket.queue("a")
    with pytest.raises(RuntimeError):
        with casket.transaction():
            inside = q.put(b"in txn", key=b"k")
            assert q.put(b"again", key=b"k") == inside
            raise RuntimeError("abort")
    assert len(q) == 0
    first = q.put(b"after", key=b"k")
    with casket.transaction():
        assert q.put(b"dup", key=b"k") == first
        q.put(b"new", key=b"n")
    assert q.get_many(10) == [b"after", b"new"]


def test_dead_letter_keeps_key_in_source_queue(casket, clock):
    q = casket.queue("jobs", max_deliveries=1, dead_letter="dead", dedup_window=5)
    first = q.put(b"w", key=b"k")
    q.reserve(timeout=0).release()
    with pytest.raises(pyqstore.Empty):
        q.reserve(timeout=0)                # moved to "dead"
    assert len(casket.queue("dead")) == 1
    assert q.put(b"again", key=b"k") == first       # within the window
    clock.advance(6)
    assert q.put(b"again", key=b"k") != first


def test_bounded_queue_duplicate_needs_no_room(casket):
    q = casket.queue("a", maxsize=1)
    first = q.put(b"one", key=b"k")
    assert q.put(b"two", key=b"k", block=False) == first
    with pytest.raises(pyqstore.Full):
        q.put(b"three", key=b"j", block=False)
    with pytest.raises(pyqstore.Full):
        q.put_many([b"x", b"y"], keys=[b"k", b"z"])
    assert len(q) == 1


def test_keyed_put_waits_for_room_and_wakes_when_a_consumer_frees_it(casket):
    q = casket.queue("a", maxsize=1)
    q.put(b"one", key=b"k")
    t0 = time.monotonic()
    with pytest.raises(pyqstore.Full):
        q.put(b"two", key=b"j", timeout=0.2)
    assert time.monotonic() - t0 >= 0.19            # it waited its timeout
    got = []
    t = threading.Thread(target=lambda: got.append(q.put(b"two", key=b"j", timeout=30)))
    t.start()
    time.sleep(0.2)
    assert t.is_alive()                             # waiting, not failed
    assert q.get() == b"one"
    t.join(30)
    assert got and q.get(timeout=0) == b"two"
    with casket.transaction():                      # never waits holding the lock
        q.put(b"three")
        with pytest.raises(pyqstore.Full):
            q.put(b"four", key=b"x")


@pytest.mark.parametrize("key, exc, words", [
    ("str", TypeError, "key must be bytes, not str"),
    (bytearray(b"x"), TypeError, "key must be bytes, not bytearray"),
    (5, TypeError, "key must be bytes, not int"),
    (b"", ValueError, "key must be 1..512 bytes, not 0"),
    (b"x" * 513, ValueError, "key must be 1..512 bytes, not 513"),
])
def test_bad_key(casket, key, exc, words):
    q = casket.queue("a")
    with pytest.raises(exc, match=words):
        q.put(b"p", key=key)
    with pytest.raises(exc, match=words):
        q.put_many([b"p"], keys=[key])
    assert len(q) == 0


def test_bad_keys_list(casket):
    q = casket.queue("a")
    with pytest.raises(ValueError, match="keys has 1 keys for 2 payloads"):
        q.put_many([b"a", b"b"], keys=[b"k"])
    with pytest.raises(TypeError, match="keys must be an iterable of keys"):
        q.put_many([b"a"], keys=b"k")
    with pytest.raises(TypeError, match="keys must be an iterable of keys"):
        q.put_many([b"a"], keys=5)
    with casket.transaction():          # a refusal leaves it usable
        with pytest.raises(ValueError):
            q.put(b"a", key=b"")
        q.put(b"ok", key=b"k")
    assert len(q) == 1


def test_max_length_key_works(casket):
    q = casket.queue("a" * 4096)
    k = b"\xff" * 512
    assert q.put(b"x", key=k) == q.put(b"y", key=k)


def test_c_core_refuses_bad_keys(casket):
    ffi = pyqstore._qstore.ffi
    lens = ffi.new("uint32_t[]", [1])
    klens = ffi.new("uint32_t[]", [0])
    ids = ffi.new("uint64_t[]", 1)
    assert lib.qs_queue_put_keyed(casket._c, b"a", 1, 1, b"x", 1, lens, b"", 0, klens, 0.0, 0,
                                  ids, ffi.NULL) == lib.QS_INVAL
    klens[0] = 3    # more key bytes than given
    assert lib.qs_queue_put_keyed(casket._c, b"a", 1, 1, b"x", 1, lens, b"ab", 2, klens, 0.0, 0,
                                  ids, ffi.NULL) == lib.QS_INVAL
    assert len(casket.queue("a")) == 0


async def _aput(q, key):
    return await q.put_async(b"x", key=key)


def test_put_async_key(casket):
    import asyncio
    q = casket.queue("a")
    a = asyncio.run(_aput(q, b"k"))
    assert asyncio.run(_aput(q, b"k")) == a and len(q) == 1
    with pytest.raises(TypeError, match="key must be bytes"):
        asyncio.run(_aput(q, "k"))


# ------------------------------------------------------------ processes


def _keyed_producer(conn, path, n):
    c = pyqstore.open(path, sync=False)
    q = c.queue("p")
    conn.send("ready")
    assert conn.recv() == "go"
    ids = {}
    for i in range(n):
        ids[i] = q.put(b"%d" % i, key=b"key-%d" % i)
    conn.send(ids)
    c.close()


def test_two_processes_same_keys_each_stored_once(path, kids):
    n = 300
    c = pyqstore.open(path, "n", sync=False)
    try:
        kid = [kids.start(_keyed_producer, path, n) for _ in range(2)]
        for p, conn in kid:
            assert recv(conn, p) == "ready"
        for _, conn in kid:
            conn.send("go")
        got = [recv(conn, p, timeout=120) for p, conn in kid]
        q = c.queue("p")
        assert len(q) == n
        assert got[0] == got[1]             # both got the first item's id
        items = list(q.iter(with_ids=True))
        assert sorted(int(p) for _, p in items) == list(range(n))
        assert {i: id_ for id_, i in ((i, int(p)) for i, p in items)} == got[0]
    finally:
        c.close()


_CRASH = """
import sys, pyqstore
c = pyqstore.open(sys.argv[1], sync=True)
q = c.queue("c", dedup_window=3600)
with c.transaction():
    first = q.put(b"kept", key=b"k")
print(first, flush=True)
import time; time.sleep(60)
"""


def test_sigkill_after_commit_keeps_the_key(path):
    pyqstore.open(path, "n", sync=True).close()
    p = start_python(_CRASH, path, unbuffered=True)
    try:
        first = int(p.stdout.readline())
    finally:
        p.kill()
        p.wait(10)
    assert p.returncode == -9
    c = pyqstore.open(path, sync=False)
    try:
        q = c.queue("c")
        assert q.put(b"again", key=b"k") == first
        assert q.get() == b"kept"
        assert q.put(b"again", key=b"k") == first   # the window still holds it
        assert len(q) == 0
    finally:
        c.close()


def test_duplicate_after_a_put_in_one_transaction_still_wakes_getters(casket):
    """A transaction that put an item and then made a keyed put that was a
    duplicate wakes a getter blocked on the queue at its commit (the
    duplicate must not undo the put's wake-up)."""
    import threading
    import time
    q = casket.queue("a")
    q.put(b"first", key=b"k")
    assert q.get() == b"first"
    q.put(b"held", key=b"h")
    got = []
    reader = pyqstore.open(casket.path, sync=False)
    try:
        rq = reader.queue("a")
        assert rq.get() == b"held"      # the queue is empty again; "h" is gone
        t = threading.Thread(target=lambda: got.append(rq.get(timeout=20)))
        t.start()
        time.sleep(0.2)                 # let it block
        t0 = time.monotonic()
        with casket.transaction():
            q.put(b"new")
            q.put(b"again", key=b"new-key")
            assert q.put(b"dup", key=b"new-key") is not None
        t.join(30)
        assert got == [b"new"]
        # a behaviour bound: woken by the commit, not by the 20 s timeout
        assert time.monotonic() - t0 < 10
    finally:
        reader.close()
