"""The calls made from pyqstore/_heldcalls.c rather than through cffi:
Casket.get's over qs_get_nowait and put over qs_queue_put_held, which keep
the GIL and hand over to the cffi call where they would have waited;
Casket.put's store over qs_put_held, Queue.put's append over
qs_queue_put_held and Queue.get's take over qs_queue_get_held, held where
the call waits for nobody (inside the caller's transaction, or with sync
off and the write lock free) and with the GIL released once elsewhere.
They are built where cffi's module is and answer what the cffi call
answers."""
from __future__ import annotations

import collections
import os
import platform
import signal
import sys
import sysconfig
import threading

import pytest
from hypothesis import given, settings, strategies as st

import pyqstore
from pyqstore import _casket, _queue
from pyqstore._qstore import lib

LIMITED_API = (platform.python_implementation() == "CPython"
               and not hasattr(sys, "gettotalrefcount")
               and not sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_built_where_the_limited_api_is():
    # setup.py builds it exactly where cffi's module uses the limited API;
    # a build that lost it would pass every other test, only slower
    assert (_casket._held_get is not None) == LIMITED_API
    assert (_casket._store is not None) == LIMITED_API
    assert (_queue._append is not None) == LIMITED_API
    assert (_queue._take is not None) == LIMITED_API


needs_held = pytest.mark.skipif(not LIMITED_API, reason="no _heldcalls on this interpreter")


@needs_held
def test_answers_like_the_cffi_call(casket):
    from pyqstore import _heldcalls
    values = {b"empty": b"", b"small": b"v", b"fits": b"x" * 4096,
              b"one over": b"y" * 4097, b"overflow": bytes(range(256)) * 400}
    for k, v in values.items():
        casket[k] = v
    h = casket._addr
    for k, v in values.items():
        got = _heldcalls.get(h, k)
        if len(v) <= 4096:
            assert got == v
        else:
            assert got == _heldcalls.TOO_LONG
        assert casket.get(k) == v               # the longer ones through cffi
    assert _heldcalls.get(h, b"missing") == lib.QS_NOTFOUND
    assert casket.get(b"missing", 7) == 7
    assert _heldcalls.get(h, b"k" * 20000) == lib.QS_TOOBIG
    with pytest.raises(pyqstore.TooBigError):
        casket.get(b"k" * 20000)
    assert _heldcalls.get(0, b"small") == lib.QS_INVAL
    with pytest.raises(TypeError, match="bytes"):
        _heldcalls.get(h, "small")
    with pytest.raises(TypeError):
        _heldcalls.get(h)


@needs_held
def test_a_closed_casket_raises(path):
    c = pyqstore.open(path, "n", sync=False)
    c[b"k"] = b"v"
    c.close()
    assert _casket._held_get(c._addr, b"k") == lib.QS_CLOSED
    with pytest.raises(pyqstore.ClosedError):
        c.get(b"k")


@needs_held
def test_waits_through_cffi_while_another_thread_writes(casket, monkeypatch):
    """A get issued while another thread's put_many holds the handle: the
    held call refuses (QS_WOULDBLOCK), the cffi call waits, and every get
    returns the right value."""
    codes: list[object] = []
    held = _casket._held_get

    def recording(h, k):
        r = held(h, k)
        codes.append(r if type(r) is int else "bytes")
        return r

    monkeypatch.setattr(_casket, "_held_get", recording)
    keys = [b"k%d" % i for i in range(200)]
    for k in keys:
        casket[k] = k + b"-value"
    batch = [b"x" * 100] * 200_000
    for _ in range(20):
        writer = threading.Thread(target=lambda: casket.queue("q").put_many(batch))
        writer.start()
        while writer.is_alive():
            for k in keys:
                assert casket.get(k) == k + b"-value"
        writer.join()
        if lib.QS_WOULDBLOCK in codes:
            break
    assert lib.QS_WOULDBLOCK in codes
    assert "bytes" in codes


@needs_held
def test_reads_the_committed_state_during_another_threads_transaction(casket):
    casket[b"k"] = b"old"
    began, done = threading.Event(), threading.Event()

    def writer():
        with casket.transaction():
            casket[b"k"] = b"new"
            began.set()
            done.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert began.wait(10)
    try:
        # the transaction holds the write lock, not the handle: no wait
        assert _casket._held_get(casket._addr, b"k") == b"old"
        assert casket.get(b"k") == b"old"
    finally:
        done.set()
        t.join()
    assert casket.get(b"k") == b"new"


keys = st.binary(min_size=0, max_size=24)
sizes = st.sampled_from([0, 1, 100, 4095, 4096, 4097, 9000])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(keys, sizes, st.booleans()), max_size=40))
def test_get_matches_a_dict(tmp_path_factory, ops):
    """Puts and deletes against a dict: get (held call or cffi, whichever
    answers) returns what the dict holds, for keys as bytes and as
    bytearray (which always takes the cffi call)."""
    path = str(tmp_path_factory.mktemp("held") / "c.qs")
    model: dict[bytes, bytes] = {}
    with pyqstore.open(path, "n", sync=False) as c:
        for i, (k, size, delete) in enumerate(ops):
            if delete:
                c.pop(k, None)
                model.pop(k, None)
            else:
                v = bytes([i % 256]) * size
                c[k] = v
                model[k] = v
            for mk in set(model) | {k}:
                assert c.get(mk) == model.get(mk)
                assert c.get(bytearray(mk)) == model.get(mk)


@needs_held
def test_a_transactions_buffered_putdups_are_read_through_cffi(casket):
    """Inside a transaction a putdup is buffered until something reads:
    applying the buffer is work the held call leaves to the cffi call."""
    with casket.transaction():
        casket.putdup(b"d", b"first")
        assert _casket._held_get(casket._addr, b"d") == lib.QS_WOULDBLOCK
        assert casket.get(b"d") == b"first"         # applied, then read
        assert _casket._held_get(casket._addr, b"d") == b"first"
    assert casket.get(b"d") == b"first"


@needs_held
def test_a_held_put_commits_alone_only_with_sync_off(casket):
    from pyqstore import _heldcalls
    q = casket.queue("q")
    lib.qs_set_sync(casket._c, 1)
    assert _heldcalls.put(q._qaddr, b"x") == lib.QS_WOULDBLOCK     # it would sync
    assert len(q) == 0
    lib.qs_set_sync(casket._c, 0)
    alone = _heldcalls.put(q._qaddr, b"alone")                      # its own commit
    assert alone >= 1 and q.get_nowait() == b"alone"
    with casket.transaction():
        first = _heldcalls.put(q._qaddr, b"a")
        assert first >= 1 and q.put(b"b") == first + 1 and len(q) == 2
    assert q.get_many(10) == [b"a", b"b"]
    with pytest.raises(TypeError, match="bytes"):
        _heldcalls.put(q._qaddr, "a")
    with pytest.raises(TypeError):
        _heldcalls.put(q._qaddr)
    c = pyqstore.open(casket.path, sync=False)
    q2 = c.queue("q")
    c.begin()
    c.close()                                   # the transaction goes with it
    assert _heldcalls.put(q2._qaddr, b"x") == lib.QS_CLOSED
    with pytest.raises(pyqstore.ClosedError):
        q2.put(b"x")


@needs_held
def test_append_commits_outside_a_transaction_and_joins_one_inside(casket):
    from pyqstore import _heldcalls
    q = casket.queue("q")
    other = pyqstore.open(casket.path, sync=False)
    try:
        first = _heldcalls.append(q._qaddr, b"alone")     # its own commit
        assert first >= 1 and other.queue("q").peek() == b"alone"
        with casket.transaction():
            ids = [_heldcalls.append(q._qaddr, b"in%d" % i) for i in range(5)]
            assert len(other.queue("q")) == 1             # not committed yet
        assert ids == list(range(first + 1, first + 6))
        casket.begin()
        _heldcalls.append(q._qaddr, b"dropped")
        casket.abort()                                    # goes with its transaction
        assert other.queue("q").get_many(10) == [b"alone"] + [b"in%d" % i for i in range(5)]
    finally:
        other.close()
    bounded = casket.queue("b", maxsize=1)
    assert _heldcalls.append(bounded._qaddr, b"1") >= 1
    assert _heldcalls.append(bounded._qaddr, b"2") == lib.QS_QFULL    # outside: no wait here
    with casket.transaction():
        assert _heldcalls.append(bounded._qaddr, b"2") == lib.QS_QFULL
        with pytest.raises(pyqstore.Full):
            bounded.put(b"2", block=False)
        q.put(b"after the refusal")                       # the transaction goes on
    assert len(bounded) == 1 and q.get() == b"after the refusal"
    with pytest.raises(TypeError, match="bytes"):
        _heldcalls.append(q._qaddr, "a")
    with pytest.raises(TypeError):
        _heldcalls.append(q._qaddr)


@needs_held
def test_take_answers_like_the_cffi_get(casket):
    from pyqstore import _heldcalls
    q = casket.queue("q")
    h = casket._addr
    want = [os.urandom(n) for n in (0, 1, 4096, 4097, 300_000)]
    for p in want:
        q.put(p)
    assert [_heldcalls.take(h, q._key, 0.0) for _ in want] == want
    assert _heldcalls.take(h, q._key, 0.0) == lib.QS_NOTFOUND
    with pytest.raises(pyqstore.Empty):
        q.get_nowait()
    assert _heldcalls.take(h, b"", 0.0) == lib.QS_INVAL               # a bad name
    assert _heldcalls.take(h, q._key, float("nan")) == lib.QS_INVAL
    assert _heldcalls.take(0, q._key, 0.0) == lib.QS_INVAL
    with pytest.raises(TypeError):
        _heldcalls.take(h, q._key, "soon")
    with pytest.raises(TypeError, match="bytes"):
        _heldcalls.take(h, "q", 0.0)
    with pytest.raises(TypeError):
        _heldcalls.take(h, q._key)


@needs_held
def test_take_holds_the_gil_where_it_waits_for_nobody(path):
    """take's held get commits alone with sync off (another handle sees the
    item gone), joins the caller's transaction (an abort puts it back), and
    with sync on falls back to the cffi get, which takes it all the same."""
    from pyqstore import _heldcalls
    c = pyqstore.open(path, "n", sync=False)
    other = pyqstore.open(path)
    try:
        q, oq = c.queue("q"), other.queue("q")
        for p in (b"a", b"b", b"c", b"d"):
            oq.put(p)
        items = lib.qs_queue_get_held
        out = pyqstore._qstore.ffi.new("qs_items **")
        assert items(c._c, b"q", 1, 1, out) == 0 and out[0].count == 1
        lib.qs_items_free(out[0])
        assert len(oq) == 3                                   # committed alone
        c.begin()
        assert _heldcalls.take(c._addr, q._key, 0.0) == b"b"
        assert len(oq) == 3                                   # not yet
        c.abort()
        assert len(oq) == 3 and q.peek() == b"b"
        lib.qs_set_sync(c._c, 1)
        assert items(c._c, b"q", 1, 1, out) == lib.QS_WOULDBLOCK
        assert out[0] == pyqstore._qstore.ffi.NULL and len(oq) == 3
        assert _heldcalls.take(c._addr, q._key, 0.0) == b"b"   # the fallback
        assert _heldcalls.take(c._addr, q._key, 1.0) == b"c"
        lib.qs_set_sync(c._c, 0)
        assert q.get(timeout=1) == b"d"
        assert _heldcalls.take(c._addr, q._key, 0.0) == lib.QS_NOTFOUND
        assert len(oq) == 0
    finally:
        other.close()
        c.close()


@needs_held
@pytest.mark.parametrize("handles", ["one", "two"])
def test_a_producer_and_a_consumer_thread_pass_every_item_once_in_order(path, handles):
    """A producer thread's puts and a consumer thread's blocking gets on one
    queue, sync off, with a log small enough that checkpoints fall due
    along the way (the held calls refuse and the fallbacks run them): each
    item arrives once, in order, and the queue is empty after."""
    n = 3000
    c = pyqstore.open(path, "n", sync=False, checkpoint_size=64 << 10)
    c2 = c if handles == "one" else pyqstore.open(path, sync=False, checkpoint_size=64 << 10)
    got: list[bytes] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            q = c.queue("q")
            for i in range(n):
                q.put(b"%06d" % i + b"x" * (i % 200))
        except BaseException as e:
            errors.append(e)

    def consume() -> None:
        try:
            q = c2.queue("q")
            for _ in range(n):
                got.append(q.get(timeout=30))
        except BaseException as e:
            errors.append(e)

    try:
        stats = c.stats()
        ts = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors and not any(t.is_alive() for t in ts)
        assert got == [b"%06d" % i + b"x" * (i % 200) for i in range(n)]
        assert len(c.queue("q")) == 0
        assert c.stats()["checkpoints"] > stats["checkpoints"]
    finally:
        if c2 is not c:
            c2.close()
        c.close()


@needs_held
def test_take_releases_the_gil_while_it_waits(casket):
    """A get waiting for an item: another Python thread must run (it puts
    the item), which it could not if take held the GIL through the wait."""
    q = casket.queue("q")
    t = threading.Timer(0.2, lambda: q.put(b"late"))
    t.start()
    try:
        assert q.get(timeout=10) == b"late"
    finally:
        t.cancel()
        t.join()


@needs_held
def test_take_goes_on_waiting_after_a_signal_handler(casket):
    q = casket.queue("q")
    ran: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda *a: ran.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        threading.Timer(0.5, lambda: q.put(b"after")).start()
        assert q.get(timeout=10) == b"after"        # QS_INTR, then on waiting
        assert ran == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@needs_held
def test_a_closed_casket_refuses_take_and_append(path):
    from pyqstore import _heldcalls
    c = pyqstore.open(path, "n", sync=False)
    q = c.queue("q")
    q.put(b"x")
    c.close()
    assert _heldcalls.take(q._caddr, q._key, 0.0) == lib.QS_CLOSED
    assert _heldcalls.append(q._qaddr, b"y") == lib.QS_CLOSED
    with pytest.raises(pyqstore.ClosedError):
        q.get_nowait()
    with pytest.raises(pyqstore.ClosedError):
        q.put(b"y")


ops = st.lists(st.one_of(st.tuples(st.just("put"), st.binary(max_size=5000)),
                         st.tuples(st.sampled_from(["get", "get_many", "begin", "commit",
                                                    "abort"]), st.none())),
               max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_put_and_get_match_a_deque(tmp_path_factory, ops):
    """Queue.put (append) and get_nowait (take), mixed with get_many (the
    cffi path) and transactions that commit or abort, against a deque:
    every get returns the model's oldest item, ids rise, and an abort
    restores the queue."""
    path = str(tmp_path_factory.mktemp("take") / "c.qs")
    model: collections.deque[bytes] = collections.deque()
    saved: collections.deque[bytes] | None = None
    last_id = saved_id = 0
    with pyqstore.open(path, "n", sync=False) as c:
        q = c.queue("q")
        for op, arg in ops:
            if op == "put":
                i = q.put(arg)
                assert i > last_id
                last_id = i
                model.append(arg)
            elif op == "get":
                if model:
                    assert q.get_nowait() == model.popleft()
                else:
                    with pytest.raises(pyqstore.Empty):
                        q.get_nowait()
            elif op == "get_many":
                want = [model.popleft() for _ in range(min(3, len(model)))]
                assert q.get_many(3) == want
            elif op == "begin" and saved is None:
                c.begin()
                saved, saved_id = collections.deque(model), last_id
            elif op in ("commit", "abort") and saved is not None:
                if op == "commit":
                    c.commit()
                else:
                    c.abort()           # its ids are given again
                    model, last_id = saved, saved_id
                saved = None
        if saved is not None:
            c.abort()
            model = saved
        assert q.get_many(len(model) + 1) == list(model)


@needs_held
def test_a_put_beside_another_threads_transaction_waits_through_cffi(casket):
    """Another thread's transaction is open (the hint says try): the held
    call refuses this thread (not its transaction) and the cffi put waits
    for the write lock, landing after the commit."""
    q = casket.queue("q")
    began, done = threading.Event(), threading.Event()

    def writer():
        with casket.transaction():
            q.put(b"first")
            began.set()
            done.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert began.wait(10)
    got: list[int] = []
    putter = threading.Thread(target=lambda: got.append(q.put(b"second")))
    putter.start()
    putter.join(0.3)
    assert putter.is_alive() and not got       # waiting for the write lock
    done.set()
    t.join()
    putter.join(10)
    assert got and q.get_many(10) == [b"first", b"second"]


@needs_held
def test_store_commits_held_with_sync_off_and_through_the_fallback_with_it_on(path):
    from pyqstore import _heldcalls
    c = pyqstore.open(path, "n", sync=False)
    other = pyqstore.open(path)
    try:
        h = c._addr
        assert lib.qs_put_held(c._c, b"a", 1, b"1", 1) == 0     # its own commit
        assert other.get(b"a") == b"1"
        lib.qs_set_sync(c._c, 1)
        assert lib.qs_put_held(c._c, b"b", 1, b"2", 1) == lib.QS_WOULDBLOCK
        assert other.get(b"b") is None                          # nothing done
        assert _heldcalls.store(h, b"b", b"2") == 0             # the fallback commits
        assert other.get(b"b") == b"2"
        lib.qs_set_sync(c._c, 0)
        with c.transaction():
            assert _heldcalls.store(h, b"t", b"3") == 0
            assert other.get(b"t") is None                      # not committed yet
        assert other.get(b"t") == b"3"
        c.begin()
        _heldcalls.store(h, b"gone", b"4")
        c.abort()
        assert other.get(b"gone") is None
        assert _heldcalls.store(h, b"k" * 20000, b"v") == lib.QS_TOOBIG
        with pytest.raises(pyqstore.TooBigError):
            c.put(b"k" * 20000, b"v")
        assert _heldcalls.store(0, b"k", b"v") == lib.QS_INVAL
        with pytest.raises(TypeError, match="bytes"):
            _heldcalls.store(h, b"k", "v")
        with pytest.raises(TypeError, match="bytes"):
            _heldcalls.store(h, "k", b"v")
        with pytest.raises(TypeError):
            _heldcalls.store(h, b"k")
    finally:
        other.close()
        c.close()
    assert _heldcalls.store(c._addr, b"k", b"v") == lib.QS_CLOSED
    with pytest.raises(pyqstore.ClosedError):
        c.put(b"k", b"v")
    c = pyqstore.open(path, "r")
    try:
        assert dict(c.items()) == {b"a": b"1", b"b": b"2", b"t": b"3"}
    finally:
        c.close()


@needs_held
def test_a_put_beside_another_threads_transaction_waits_for_its_commit(casket):
    """The held put refuses beside another thread's open transaction, and
    the fallback waits for the write lock with the GIL released (the
    transaction's thread runs Python meanwhile), landing after it."""
    began, done = threading.Event(), threading.Event()

    def writer():
        with casket.transaction():
            casket.put(b"k", b"first")
            began.set()
            done.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert began.wait(10)
    putter = threading.Thread(target=lambda: casket.put(b"k", b"second"))
    putter.start()
    putter.join(0.3)
    assert putter.is_alive()                   # waiting for the write lock
    done.set()
    t.join()
    putter.join(10)
    assert not putter.is_alive() and casket.get(b"k") == b"second"


@needs_held
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "sync", "txn", "reopen"]),
                          st.binary(max_size=6), st.binary(max_size=40)), max_size=60))
def test_puts_through_store_match_a_dict(tmp_path_factory, ops):
    """Puts made by store (held with sync off, the fallback with it on, in
    and out of transactions, across checkpoints of a small log) read back
    as a dict of the same puts does, also after a reopen."""
    path = os.path.join(str(tmp_path_factory.mktemp("store")), "s.qs")
    c = pyqstore.open(path, "n", sync=False, checkpoint_size=16 << 10)
    model: dict[bytes, bytes] = {}
    synced = False
    try:
        for op, k, v in ops:
            if op == "put":
                c.put(k, v)
                model[k] = v
            elif op == "sync":
                synced = not synced
                lib.qs_set_sync(c._c, int(synced))
            elif op == "txn":
                with c.transaction():
                    c.put(k, v)
                    c.put(k + b"+", v)
                model[k] = v
                model[k + b"+"] = v
            else:
                c.close()
                c = pyqstore.open(path, sync=False, checkpoint_size=16 << 10)
                synced = False
            assert c.get(k) == model.get(k)
        assert dict(c.items()) == model
    finally:
        c.close()
    c = pyqstore.open(path, "r")
    try:
        assert dict(c.items()) == model
    finally:
        c.close()
