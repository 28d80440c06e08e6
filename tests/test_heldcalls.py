"""The calls that keep the GIL (pyqstore/_heldcalls.c): Casket.get's over
qs_get_nowait and Queue.put's over qs_queue_put_held.  They are built where
cffi's module is, answer what the cffi call answers, and hand over to the
cffi call where they would have waited."""
from __future__ import annotations

import platform
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
    assert (_queue._held_put is not None) == LIMITED_API


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
def test_a_held_put_goes_in_only_inside_the_callers_transaction(casket):
    from pyqstore import _heldcalls
    q = casket.queue("q")
    assert _heldcalls.put(q._qaddr, b"x") == lib.QS_WOULDBLOCK     # no transaction
    assert len(q) == 0
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
def test_puts_in_a_transaction_take_the_held_call_and_match_the_cffi_ones(casket, monkeypatch):
    codes: list[int] = []
    held = _queue._held_put

    def recording(qa, payload):
        r = held(qa, payload)
        codes.append(r)
        return r

    monkeypatch.setattr(_queue, "_held_put", recording)
    q = casket.queue("q", "pickle")
    outside = [q.put(("out", i)) for i in range(3)]
    assert codes == []                          # no transaction open: not tried
    with casket.transaction():
        inside = [q.put(("in", i)) for i in range(50)]
    assert codes == inside                      # every one went in held
    casket.begin()
    q.put("dropped")
    casket.abort()                              # a held put goes with its transaction
    assert inside == list(range(outside[-1] + 1, outside[-1] + 51))
    assert q.get_many(100) == [("out", i) for i in range(3)] + [("in", i) for i in range(50)]
    bounded = casket.queue("b", maxsize=1)
    with casket.transaction():
        bounded.put(b"1")
        with pytest.raises(pyqstore.Full):
            bounded.put(b"2", block=False)
        q.put("after the refusal")              # the transaction goes on
    assert len(bounded) == 1 and q.get() == "after the refusal"


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
