"""A payload its queue's codec cannot decode is never consumed: get,
get_many, reserve and peek raise DecodeError (a pyqstore.Error and a
ValueError, with the item's id and raw bytes) and the item stays in the
queue at its place -- outside a transaction, and inside one with the
transaction's view unchanged.  An encoding failure stores nothing."""
from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore

BAD = b"\x80not json"


def bad_then_good(c: pyqstore.Casket):
    raw = c.queue("jobs")
    bad = raw.put(BAD)
    good = raw.put(b'{"n": 1}')
    return raw, c.queue("jobs", codec="json"), bad, good


def test_get_nowait_outside_a_transaction_keeps_the_item(path):
    with pyqstore.open(path, "n") as c:
        raw, q, bad, _ = bad_then_good(c)
        with pytest.raises(pyqstore.DecodeError) as ei:
            q.get_nowait()
        e = ei.value
        assert isinstance(e, pyqstore.Error) and isinstance(e, ValueError)
        assert (e.queue, e.id, e.payload) == ("jobs", bad, BAD)
        assert f"item {bad}" in str(e) and "json" in str(e)
        assert isinstance(e.__cause__, UnicodeDecodeError)
        assert len(q) == 2
    # durably so: the casket as reopened still has it first
    with pyqstore.open(path, "w") as c:
        assert c.queue("jobs").get_nowait() == BAD
        assert c.queue("jobs", codec="json").get_nowait() == {"n": 1}


def test_blocking_get_raises_at_once_and_keeps_the_item(casket):
    raw, q, bad, _ = bad_then_good(casket)
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.get(timeout=30)
    assert ei.value.id == bad
    assert raw.peek_many(5) == [BAD, b'{"n": 1}']


def test_reserve_leaves_the_item_available(casket):
    raw, q, bad, good = bad_then_good(casket)
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.reserve(timeout=0)
    assert (ei.value.id, ei.value.payload) == (bad, BAD)
    assert len(q) == 2                      # not hidden as reserved
    # another consumer (raw bytes) gets it at once, in its place
    assert raw.get_nowait() == BAD
    item = q.reserve(timeout=0)
    assert (item.id, item.payload) == (good, {"n": 1})
    item.ack()
    assert len(q) == 0


def test_inside_a_transaction_its_view_is_unchanged(casket):
    raw, q, bad, _ = bad_then_good(casket)
    casket.begin()
    raw.put(b"3")
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.get()
    assert ei.value.id == bad
    assert len(q) == 3 and raw.peek_many(5) == [BAD, b'{"n": 1}', b"3"]
    with pytest.raises(pyqstore.DecodeError):
        q.reserve(timeout=0)
    assert len(q) == 3
    # the transaction is still usable and commits what it did
    assert raw.get() == BAD
    assert q.get() == {"n": 1}
    casket.commit()
    assert raw.peek_many(5) == [b"3"]


def test_abort_after_a_decode_error_restores_everything(casket):
    raw, q, _, _ = bad_then_good(casket)
    with pytest.raises(pyqstore.DecodeError):
        with casket.transaction():
            raw.put(b"3")
            q.get()
    assert raw.peek_many(5) == [BAD, b'{"n": 1}']


@pytest.mark.parametrize("in_txn", [False, True])
def test_get_many_consumes_nothing_of_a_batch_with_a_bad_item(casket, in_txn):
    raw = casket.queue("jobs")
    ids = [raw.put(b"1"), raw.put(b"2"), raw.put(BAD), raw.put(b"\xff"), raw.put(b"5")]
    q = casket.queue("jobs", codec="json")
    if in_txn:
        casket.begin()
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.get_many(10)
    assert ei.value.id == ids[2]            # the first bad one is named
    assert raw.peek_many(10) == [b"1", b"2", BAD, b"\xff", b"5"]
    assert q.get_many(2) == [1, 2]          # a batch that decodes is taken
    if in_txn:
        casket.commit()
    assert raw.peek_many(10) == [BAD, b"\xff", b"5"]


def test_peek_names_the_bad_item(casket):
    raw, q, bad, _ = bad_then_good(casket)
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.peek()
    assert ei.value.id == bad and ei.value.payload == BAD


def test_a_decode_error_of_another_consumer_leaves_the_item_to_others(casket):
    """The item a failed decode gave back is gettable by another thread."""
    raw, q, bad, _ = bad_then_good(casket)
    got = []
    with pytest.raises(pyqstore.DecodeError):
        q.get_nowait()
    t = threading.Thread(target=lambda: got.append(raw.get(timeout=10)))
    t.start()
    t.join(30)
    assert got == [BAD]


class _Strict:
    """A codec whose decode refuses b"bad"."""

    name = "strict"

    @staticmethod
    def encode(obj):
        if obj == "unencodable":
            raise TypeError("cannot encode that")
        return obj.encode()

    @staticmethod
    def decode(b):
        if b == b"bad":
            raise ValueError("bad payload")
        return b.decode()


def test_encoding_failures_store_nothing(casket):
    q = casket.queue("q", codec=_Strict())
    with pytest.raises(TypeError):
        q.put("unencodable")
    with pytest.raises(TypeError):
        q.put_many(["a", "b", "unencodable", "c"])
    assert len(q) == 0 and casket.queue_lengths() == {}
    j = casket.queue("j", codec="json")
    with pytest.raises(TypeError):
        j.put_many([1, {2}])
    assert len(j) == 0


# ------------------------------------------------------- against a model

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(["ok", "bad"])),
        st.tuples(st.just("get"), st.integers(1, 4)),
        st.tuples(st.just("reserve"), st.booleans()),
        st.tuples(st.just("txn"), st.sampled_from(["begin", "commit", "abort"])),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_model(casket, program):
    """Items as (id, payload); a take succeeds only when every item it
    would take decodes, and then removes exactly those."""
    raw = casket.queue("m")
    raw.clear()
    q = casket.queue("m", codec=_Strict())
    model: list[tuple[int, bytes]] = []
    saved = None        # the model at begin, for abort
    n = 0
    for op, arg in program:
        if op == "put":
            n += 1
            p = b"bad" if arg == "bad" else b"p%d" % n
            model.append((raw.put(p), p))
        elif op == "get":
            batch = model[:arg]
            bad = [i for i, p in batch if p == b"bad"]
            if bad:
                with pytest.raises(pyqstore.DecodeError) as ei:
                    q.get_many(arg)
                assert ei.value.id == bad[0]
            else:
                assert q.get_many(arg) == [p.decode() for _, p in batch]
                del model[:arg]
        elif op == "reserve":
            if not model:
                with pytest.raises(pyqstore.Empty):
                    q.reserve(timeout=0)
            elif model[0][1] == b"bad":
                with pytest.raises(pyqstore.DecodeError):
                    q.reserve(timeout=0)
            else:
                item = q.reserve(timeout=0)
                assert (item.id, item.payload) == (model[0][0], model[0][1].decode())
                if arg:
                    item.ack()
                    del model[0]
                else:
                    item.release()
        elif arg == "begin" and saved is None:
            casket.begin()
            saved = list(model)
        elif arg in ("commit", "abort") and saved is not None:
            if arg == "commit":
                casket.commit()
            else:
                casket.abort()
                model = saved
            saved = None
        assert raw.peek_many(100) == [p for _, p in model]
        assert len(q) == len(model)
    if saved is not None:
        casket.abort()


def test_a_pickle_batch_names_its_first_bad_item_and_decodes_the_rest_once(casket, monkeypatch):
    """The pickle codec decodes a batch in one pass; when a payload in the
    middle fails, the payloads before it are not decoded a second time to
    find it, and the error names that payload, not a later bad one."""
    import pickle

    raw = casket.queue("jobs")
    good = [pickle.dumps(i) for i in range(5)]
    ids = [raw.put(p) for p in good[:3]] + [raw.put(BAD), raw.put(good[3]), raw.put(b"\xff")]
    q = casket.queue("jobs", codec="pickle")
    seen: list[bytes] = []
    real_loads = pickle.loads

    def counting_loads(data: bytes, *args: object, **kwargs: object) -> object:
        seen.append(bytes(data))
        return real_loads(data, *args, **kwargs)

    monkeypatch.setattr(pickle, "loads", counting_loads)
    with pytest.raises(pyqstore.DecodeError) as ei:
        q.get_many(10)
    assert (ei.value.id, ei.value.payload) == (ids[3], BAD)
    assert seen.count(good[0]) == 1 and seen.count(good[2]) == 1
    assert len(q) == 6
