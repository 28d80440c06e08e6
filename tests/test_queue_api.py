"""Direct tests of the documented queue API (pyqstore/_queue.py, the
"queues" section of csrc/qstore.h) and of its handling of bad input."""
from __future__ import annotations

import importlib.util
import json
import queue as stdlib_queue
import threading
import time
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore
from pyqstore._qstore import ffi, lib


def queue_records(c: pyqstore.Casket) -> int:
    """Records in the casket's queue namespace (qs_queue_records)."""
    out = ffi.new("uint64_t *")
    rc = lib.qs_queue_records(c._c, out)
    assert rc == 0, rc
    return int(out[0])


def run_in_thread(fn, limit: float):
    """Run fn() in a thread; returns (finished, result or exception,
    elapsed seconds).  The thread is a daemon so a hang cannot wedge the
    test run."""
    box: dict = {}

    def target():
        t0 = time.monotonic()
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["result"] = e
        box["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    return (not t.is_alive()), box.get("result"), box.get("elapsed"), t


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("bad", [b"a", bytearray(b"a"), 1, None, ["a"]])
def test_name_not_str_is_type_error(casket, bad):
    with pytest.raises(TypeError):
        casket.queue(bad)
    with pytest.raises(TypeError):
        casket.publish(b"x", [bad])
    assert casket.queues() == []
    assert queue_records(casket) == 0


def test_empty_name_is_value_error(casket):
    with pytest.raises(ValueError):
        casket.queue("")
    with pytest.raises(ValueError):
        casket.publish(b"x", ["a", ""])
    assert casket.queues() == []
    assert queue_records(casket) == 0


def test_name_length_limit_in_utf8_bytes(casket):
    longest_ascii = "n" * 4096
    longest_utf8 = "é" * 2048  # 2 bytes each: 4096 bytes
    for name in (longest_ascii, longest_utf8):
        q = casket.queue(name)
        q.put(b"v")
        assert len(q) == 1
    assert casket.queues() == sorted([longest_ascii, longest_utf8], key=str.encode)
    for name in ("n" * 4097, "é" * 2049, "€" * 1366):  # 4097, 4098, 4098 bytes
        with pytest.raises(ValueError):
            casket.queue(name)
        with pytest.raises(ValueError):
            casket.publish(b"x", [name])
    assert casket.queue(longest_ascii).get_nowait() == b"v"
    assert casket.queue(longest_utf8).get_nowait() == b"v"
    assert casket.queues() == []


def test_non_ascii_names_round_trip(casket, path):
    names = ["队列", "äöü", "emoji-\U0001F600", "plain"]
    for i, n in enumerate(names):
        casket.queue(n).put(str(i))
    assert casket.queues() == sorted(names, key=str.encode)
    casket.close()
    with pyqstore.open(path, "w", sync=False) as c:
        assert c.queues() == sorted(names, key=str.encode)
        for i, n in enumerate(names):
            assert c.queue(n).get_nowait() == str(i).encode()


# --------------------------------------------------------------- payloads


@pytest.mark.parametrize("bad", [123, None, 1.5, [b"a"], {"a": 1}, object()])
def test_payload_not_bytes_like_is_type_error(casket, bad):
    q = casket.queue("q")
    with pytest.raises(TypeError):
        q.put(bad)
    with pytest.raises(TypeError):
        q.put_many([b"fine", bad, b"also fine"])
    with pytest.raises(TypeError):
        casket.publish(bad, ["q", "r"])
    assert len(q) == 0
    assert q.peek() is None
    assert casket.queues() == []
    assert queue_records(casket) == 0


@pytest.mark.parametrize("n", [1023, 1024, 1025, 5000])
def test_put_many_long_lists_mixed_payloads(casket, n):
    """A list with str in it is refused by the framed call and packed a
    chunk at a time instead: every kind of payload, at every position across
    chunk edges, comes back whole and in order."""
    def make(i: int):
        body = b"%d:" % i + b"x" * (i % 37)
        kind = i % 5
        if kind == 1:
            return bytearray(body)
        if kind == 2:
            return memoryview(body)
        if kind == 3:
            return memoryview(array("I", [i, i + 1]))   # 4-byte items
        if kind == 4:
            return body.decode()
        return body

    items = [make(i) for i in range(n)]
    q = casket.queue("q")
    assert q.put_many(items) == n
    want = [bytes(x) if not isinstance(x, str) else x.encode() for x in items]
    assert len(q) == n
    assert q.get_many(n + 1) == want


def _count_framed_calls(monkeypatch) -> list[int]:
    """Make put_many's framed C call record its return codes."""
    import pyqstore._queue as qmod

    real = qmod._qs_put_framed
    rcs: list[int] = []

    def counted(*args):
        rc = real(*args)
        rcs.append(rc)
        return rc

    monkeypatch.setattr(qmod, "_qs_put_framed", counted)
    return rcs


@pytest.mark.parametrize("n", [1, 1024, 5000])
def test_put_many_bytes_like_lists_go_in_one_framed_call(casket, monkeypatch, n):
    """The fast path is real: a list of bytes-like payloads (of any buffer
    format, empty ones and ones too big for a leaf among them) is packed by
    marshal and stored by one qs_queue_put_framed call that accepts it.  If a
    Python release changed marshal's layout, this fails instead of put_many
    silently taking the slow path."""
    rcs = _count_framed_calls(monkeypatch)

    def make(i: int):
        body = b"%d:" % i + b"y" * (i % 41)
        return [body, bytearray(body), memoryview(body)[1:], b"",
                memoryview(array("H", [i, 7, 9])), b"z" * 3000][i % 6]

    items = [make(i) for i in range(n)]
    q = casket.queue("q")
    assert q.put_many(items) == n
    assert rcs == [0]
    assert q.get_many(n + 1) == [bytes(x) for x in items]


def test_put_many_with_str_falls_back_after_one_refused_framed_call(casket, monkeypatch):
    rcs = _count_framed_calls(monkeypatch)
    q = casket.queue("q")
    assert q.put_many([b"a", "b", b"c"]) == 3
    assert rcs == [lib.QS_INVAL]
    assert q.get_many(5) == [b"a", b"b", b"c"]


def _parse_frames(buf: bytes, n: int):
    """The reference reading of qs_queue_put_framed's input: the n payloads,
    or None when buf is not exactly n well-formed records."""
    out, at = [], 0
    for _ in range(n):
        if len(buf) - at < 5 or buf[at] != lib.QS_FRAME_BYTES:
            return None
        size = int.from_bytes(buf[at + 1:at + 5], "little")
        if size > len(buf) - at - 5:
            return None
        out.append(buf[at + 5:at + 5 + size])
        at += 5 + size
    return out if at == len(buf) else None


_framing_case = st.tuples(
    st.lists(st.binary(max_size=1200), max_size=12),
    st.sampled_from(["none", "byte", "length", "cut", "extra", "n+1", "n-1"]),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=255),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_framing_case)
def test_put_framed_stores_exactly_well_formed_input(casket, case):
    """Every record is checked before anything is stored: damaged framing
    (a wrong leading byte, a length that overruns or leaves bytes over, a
    wrong count) is QS_INVAL with the queue unchanged, and whatever reads as
    n good records is stored as exactly those payloads."""
    payloads, damage, where, byte = case
    buf = bytearray(b"".join(b"s" + len(p).to_bytes(4, "little") + p for p in payloads))
    n = len(payloads)
    if damage == "byte" and buf:
        buf[where % len(buf)] = byte
    elif damage == "length" and buf:
        at = where % len(buf)
        buf[at:at + 4] = (where * 7919 & 0xFFFFFFFF).to_bytes(4, "little")[:len(buf) - at]
    elif damage == "cut" and buf:
        del buf[where % len(buf):]
    elif damage == "extra":
        buf += bytes([byte])
    elif damage == "n+1":
        n += 1
    elif damage == "n-1" and n:
        n -= 1
    buf = bytes(buf)
    q = casket.queue("f")
    q.clear()
    want = _parse_frames(buf, n)
    rc = lib.qs_queue_put_framed(casket._c, b"f", 1, n, buf, len(buf), ffi.NULL)
    if want is None:
        assert rc == lib.QS_INVAL
        assert len(q) == 0
    else:
        assert rc == 0
        assert q.get_many(n + 1) == want
    assert queue_records(casket) == 0


@pytest.mark.parametrize("at", [0, 1023, 1024, 2999])
def test_put_many_long_list_bad_item_stores_nothing(casket, at):
    items = [b"%d" % i for i in range(3000)]
    items[at] = 12345
    q = casket.queue("q")
    q.put(b"before")
    with pytest.raises(TypeError):
        q.put_many(items)
    assert len(q) == 1
    assert q.get_many(10) == [b"before"]


def test_str_payload_stored_as_utf8(casket):
    q = casket.queue("q")
    q.put("héllo wörld €")
    q.put_many(["ä", "b"])
    casket.publish("ü", ["q"])
    assert q.get_many(10) == ["héllo wörld €".encode(), "ä".encode(), b"b", "ü".encode()]


def test_bytes_like_payloads_come_back_as_bytes(casket):
    q = casket.queue("q")
    q.put(bytearray(b"ba"))
    q.put(memoryview(b"xmvx")[1:3])
    q.put(b"")
    got = q.get_many(3)
    assert got == [b"ba", b"mv", b""]
    assert all(type(x) is bytes for x in got)


def test_pickle_codec(casket):
    q = casket.queue("p", codec="pickle")
    objs = [{"a": [1, 2.5, None]}, (1, "two", b"three"), set([3]), 10**30, None]
    for o in objs:
        q.put(o)
    assert q.peek() == objs[0]
    assert q.peek_many(2) == objs[:2]
    item = q.reserve(timeout=0)
    assert item.payload == objs[0]
    item.ack()
    assert q.get_nowait() == objs[1]
    assert q.get_many(10) == objs[2:]


def test_json_codec(casket):
    q = casket.queue("j", codec="json")
    objs = [{"a": [1, 2, {"b": None}]}, "ünïcode", 3, [True, False]]
    assert q.put_many(objs) == len(objs)
    # stored as UTF-8 JSON: a raw view of the same queue sees the text
    raw = casket.queue("j")
    assert json.loads(raw.peek().decode("utf-8")) == objs[0]
    assert q.get_many(10) == objs
    casket.publish({"x": 1}, ["j", "k"], codec="json")
    assert q.get_nowait() == {"x": 1}
    assert json.loads(casket.queue("k").get_nowait()) == {"x": 1}


def test_msgpack_codec_or_clear_error(casket):
    if importlib.util.find_spec("msgpack") is None:
        with pytest.raises(ValueError, match="msgpack"):
            casket.queue("m", codec="msgpack")
        with pytest.raises(ValueError, match="msgpack"):
            casket.publish({"a": 1}, ["m"], codec="msgpack")
        assert casket.queues() == []
    else:
        q = casket.queue("m", codec="msgpack")
        objs = [{"a": [1, 2]}, "s", b"bin", 7]
        q.put_many(objs)
        assert q.get_many(10) == objs


class Rot13ish:
    """A custom codec: reversible and visible in the raw bytes."""

    def encode(self, obj):
        return ("X" + obj).encode("utf-8")[::-1]

    def decode(self, data):
        s = data[::-1].decode("utf-8")
        assert s[0] == "X"
        return s[1:]


def test_custom_codec_object(casket):
    q = casket.queue("c", codec=Rot13ish())
    q.put("hello")
    q.put_many(["a", "b"])
    assert casket.queue("c").peek() == b"ollehX"  # the raw bytes
    assert q.peek() == "hello"
    assert q.get_many(5) == ["hello", "a", "b"]


class BadCodec:
    def encode(self, obj):
        if obj == "bad":
            raise RuntimeError("cannot encode")
        return obj.encode()

    def decode(self, data):
        return data.decode()


def test_codec_encode_error_propagates_and_stores_nothing(casket):
    q = casket.queue("q", codec=BadCodec())
    q.put("ok")
    with pytest.raises(RuntimeError, match="cannot encode"):
        q.put("bad")
    with pytest.raises(RuntimeError, match="cannot encode"):
        q.put_many(["x", "y", "bad", "z"])
    with pytest.raises(RuntimeError, match="cannot encode"):
        casket.publish("bad", ["q", "r"], codec=BadCodec())
    assert len(q) == 1
    assert casket.queues() == ["q"]
    assert q.get_many(10) == ["ok"]


def test_codec_returning_non_bytes_is_type_error(casket):
    class Wrong:
        def encode(self, obj):
            return 42

        def decode(self, data):
            return data

    q = casket.queue("q", codec=Wrong())
    with pytest.raises(TypeError):
        q.put("x")
    assert len(q) == 0


def test_unknown_codec_name_is_value_error(casket):
    with pytest.raises(ValueError):
        casket.queue("q", codec="yaml")
    with pytest.raises(ValueError):
        casket.publish(b"x", ["q"], codec="yaml")
    with pytest.raises(TypeError):
        casket.queue("q", codec=object())
    assert casket.queues() == []


# ------------------------------------------------------------------- gets


def test_empty_is_stdlib_empty_and_pyqstore_error(casket):
    q = casket.queue("q")
    for call in (lambda: q.get(block=False), q.get_nowait, lambda: q.get(timeout=0),
                 lambda: q.reserve(timeout=0)):
        with pytest.raises(pyqstore.Empty) as ei:
            call()
        assert isinstance(ei.value, stdlib_queue.Empty)
        assert isinstance(ei.value, pyqstore.Error)
    with pytest.raises(stdlib_queue.Empty):
        q.get_nowait()


def test_get_timeout_waits_at_least_the_timeout(casket):
    q = casket.queue("q")
    t0 = time.monotonic()
    with pytest.raises(pyqstore.Empty):
        q.get(timeout=0.2)
    elapsed = time.monotonic() - t0
    assert 0.19 <= elapsed < 3.0, elapsed
    t0 = time.monotonic()
    assert q.get_many(5, block=True, timeout=0.2) == []
    elapsed = time.monotonic() - t0
    assert 0.19 <= elapsed < 3.0, elapsed


def test_negative_timeout_is_value_error(casket):
    q = casket.queue("q")
    q.put(b"x")
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    assert len(q) == 1


def test_blocking_get_woken_by_put_from_another_thread(casket):
    q = casket.queue("q")
    box = {}

    def consumer():
        box["got"] = q.get(timeout=10)

    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    time.sleep(0.1)
    q.put(b"wake")
    t.join(8)
    assert not t.is_alive()
    assert box["got"] == b"wake"
    assert len(q) == 0


def test_get_many_edge_cases(casket):
    q = casket.queue("q")
    assert q.get_many(0) == []
    assert q.get_many(5) == []
    with pytest.raises(ValueError):
        q.get_many(-1)
    with pytest.raises(ValueError):
        q.peek_many(-1)
    q.put_many([b"1", b"2", b"3"])
    assert q.get_many(0) == []
    with pytest.raises(ValueError):
        q.get_many(-3)
    assert len(q) == 3
    assert q.get_many(2) == [b"1", b"2"]
    assert q.get_many(10) == [b"3"]
    assert q.get_many(10) == []


def test_peek(casket):
    q = casket.queue("q")
    assert q.peek() is None
    assert q.peek_many(3) == []
    assert q.peek_many(0) == []
    q.put_many([b"a", b"b"])
    assert q.peek() == b"a"
    assert q.peek_many(5) == [b"a", b"b"]
    assert len(q) == 2


def test_get_inside_transaction_never_waits(casket):
    q = casket.queue("q")

    def in_txn(call):
        def fn():
            casket.begin()
            try:
                return call()
            except pyqstore.Empty:
                return "raised Empty"
            finally:
                casket.abort()
        return fn

    cases = [
        (lambda: q.get(), "raised Empty"),
        (lambda: q.get(block=True, timeout=None), "raised Empty"),
        (lambda: q.get(timeout=30), "raised Empty"),
        (lambda: q.reserve(timeout=None), "raised Empty"),
        (lambda: q.get_many(3, block=True, timeout=None), []),
    ]
    for call, expected in cases:
        finished, result, elapsed, t = run_in_thread(in_txn(call), 5.0)
        if not finished:
            casket.close()  # wakes the waiter with ClosedError
            t.join(5)
        assert finished, "a get inside a transaction waited"
        assert result == expected, result
        assert elapsed < 2.0, elapsed


def test_flow_step_is_atomic(casket):
    inq = casket.queue("in")
    outq = casket.queue("out")
    inq.put_many([b"1", b"2"])

    def f(x):
        return b"f(" + x + b")"

    with pytest.raises(RuntimeError):
        with casket.transaction():
            x = inq.get_nowait()
            outq.put(f(x))
            raise RuntimeError("step failed")
    assert len(inq) == 2 and len(outq) == 0
    assert inq.peek_many(5) == [b"1", b"2"]

    with casket.transaction():
        x = inq.get_nowait()
        outq.put(f(x))
    assert inq.peek_many(5) == [b"2"]
    assert outq.peek_many(5) == [b"f(1)"]

    with casket.transaction():
        x = inq.get_nowait()
        outq.put(f(x))
    # an Empty inside the step aborts it too
    with pytest.raises(pyqstore.Empty):
        with casket.transaction():
            outq.put(b"partial")
            inq.get_nowait()
    assert len(inq) == 0
    assert outq.get_many(5) == [b"f(1)", b"f(2)"]


def test_abort_puts_consumed_items_back_at_the_front(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b", b"c"])
    casket.begin()
    assert q.get_many(2) == [b"a", b"b"]
    q.put(b"d")
    assert len(q) == 2
    assert q.peek_many(5) == [b"c", b"d"]
    casket.abort()
    assert q.get_many(10) == [b"a", b"b", b"c"]


# -------------------------------------------------------------------- ids


def test_ids_are_increasing_ints(casket):
    a, b = casket.queue("a"), casket.queue("b")
    ids = [a.put(b"1"), b.put(b"2"), a.put(b"3")]
    assert a.put_many([b"4", b"5"]) == 2
    ids.append(casket.publish(b"6", ["a", "b"]))
    ids.append(b.put(b"7"))
    assert all(type(i) is int for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    got = []
    for q in (a, b):
        while True:
            try:
                item = q.reserve(timeout=0)
            except pyqstore.Empty:
                break
            got.append((q.name, item.id, item.payload))
            item.ack()
    by_payload = {p: i for _, i, p in got}
    assert by_payload[b"1"] == ids[0]
    assert by_payload[b"2"] == ids[1]
    assert by_payload[b"3"] == ids[2]
    assert ids[2] < by_payload[b"4"] < by_payload[b"5"] < ids[3]
    assert [i for n, i, _ in got if n == "a"] == sorted(i for n, i, _ in got if n == "a")
    # the published item has the same id in both queues
    assert [i for n, i, p in got if p == b"6"] == [ids[3], ids[3]]


@pytest.mark.parametrize("ret, code", [(-28, 28), (-5, 5), (lib.QS_READONLY, lib.QS_READONLY),
                                       (lib.QS_CLOSED, lib.QS_CLOSED)])
@pytest.mark.parametrize("through", ["cffi", "_heldcalls.append"])
def test_put_maps_the_returned_error_to_its_code(casket, monkeypatch, ret, code, through):
    """qs_queue_put_id (and _heldcalls.append, which makes it) returns an
    errno e as -e and QS_* codes as they are; put raises the exception of
    the original code (ENOSPC is an OSError with errno 28, not whatever -28
    might be taken for)."""
    import pyqstore._queue as qmod

    q = casket.queue("q")
    if through == "cffi":
        monkeypatch.setattr(qmod, "_append", None)      # as where the extension is absent
        monkeypatch.setattr(qmod, "_qs_put_id", lambda *a: ret)
    else:
        monkeypatch.setattr(qmod, "_append", lambda *a: ret)
    with pytest.raises(pyqstore.Error) as info:
        q.put(b"x")
    assert info.value.code == code
    assert type(info.value) is type(pyqstore.errors.error_for(code, "put"))
    if code > 0:
        assert info.value.errno == code


def test_put_returns_id_and_put_many_count(casket):
    q = casket.queue("q")
    i1 = q.put(b"x")
    i2 = q.put(b"y")
    assert isinstance(i1, int) and i2 > i1
    assert q.put_many([]) == 0
    assert q.put_many(iter([])) == 0
    assert q.put_many(b"%d" % i for i in range(5)) == 5
    assert q.put_many([bytearray(b"ba"), memoryview(b"mv"), "s", b"b"]) == 4
    assert q.put_many((x for x in [bytearray(b"g1"), memoryview(b"g2")])) == 2
    wide = array("H", [1, 2, 3])
    assert q.put_many([memoryview(wide), b"end"]) == 2
    assert len(q) == 15
    assert q.get_many(100) == (
        [b"x", b"y"] + [b"%d" % i for i in range(5)]
        + [b"ba", b"mv", b"s", b"b", b"g1", b"g2", wide.tobytes(), b"end"]
    )


# ---------------------------------------------------------------- publish


@pytest.mark.parametrize("size", [0, 10, 3000, 20000])
def test_publish_shares_payload_and_frees_it(casket, size):
    payload = bytes(range(256)) * (size // 256) + b"p" * (size % 256)
    a, b, c = casket.queue("a"), casket.queue("b"), casket.queue("c")
    base = queue_records(casket)
    assert base == 0
    pid = casket.publish(payload, ["a", "b", "c"])
    assert isinstance(pid, int)
    assert queue_records(casket) > 0
    assert casket.queue_lengths() == {"a": 1, "b": 1, "c": 1}
    assert a.get_nowait() == payload
    assert queue_records(casket) > 0
    item = b.reserve(timeout=0)
    assert item.id == pid and item.payload == payload
    item.ack()
    assert queue_records(casket) > 0
    assert c.peek() == payload
    assert c.clear() == 1
    assert queue_records(casket) == 0
    assert casket.queues() == []
    casket.check()


def test_publish_then_abort_frees_everything(casket):
    with pytest.raises(RuntimeError):
        with casket.transaction():
            casket.publish(b"z" * 5000, ["a", "b"])
            raise RuntimeError
    assert queue_records(casket) == 0
    assert casket.queues() == []


def test_publish_bad_name_lists(casket):
    with pytest.raises(ValueError):
        casket.publish(b"x", ["a", "b", "a"])
    with pytest.raises(ValueError):
        casket.publish(b"x", [])
    with pytest.raises(ValueError):
        casket.publish(b"x", iter([]))
    assert casket.queues() == []
    assert queue_records(casket) == 0
    # a single str is one name, not its characters
    casket.publish(b"x", "abc")
    assert casket.queues() == ["abc"]


# ------------------------------------------------------------ reservations


def test_len_does_not_count_reserved_items(casket):
    q = casket.queue("q")
    q.put_many([b"1", b"2", b"3"])
    i1 = q.reserve(timeout=0)
    assert len(q) == 2
    assert casket.queue_lengths() == {"q": 2}
    assert q.peek() == b"2"
    i2 = q.reserve(timeout=0)
    i3 = q.reserve(timeout=0)
    assert [i1.payload, i2.payload, i3.payload] == [b"1", b"2", b"3"]
    assert len(q) == 0
    assert q.peek() is None
    assert q.get_many(5) == []
    # all reserved: the queue still holds items, so it is listed
    assert casket.queues() == ["q"]
    assert casket.queue_lengths() == {"q": 0}
    i2.release()
    assert len(q) == 1
    i1.release()
    assert q.peek_many(5) == [b"1", b"2"]
    i3.ack()
    assert q.get_many(5) == [b"1", b"2"]
    assert casket.queues() == []


def test_ack_and_release_twice_is_not_reserved(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    ia = q.reserve(timeout=0)
    ia.ack()
    with pytest.raises(pyqstore.NotReservedError):
        ia.ack()
    with pytest.raises(pyqstore.NotReservedError):
        ia.release()
    ib = q.reserve(timeout=0)
    ib.release()
    with pytest.raises(pyqstore.NotReservedError):
        ib.release()
    with pytest.raises(pyqstore.NotReservedError):
        ib.ack()
    # another consumer's reservation of the same item is not touched
    ib2 = q.reserve(timeout=0)
    assert ib2.id == ib.id
    with pytest.raises(pyqstore.NotReservedError):
        ib.ack()
    assert len(q) == 0
    ib2.ack()
    assert casket.queues() == []


def test_refused_ack_inside_transaction_leaves_it_usable(casket):
    """A failed call changes nothing (qstore.h): a NotReservedError inside a
    transaction must not spoil it."""
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    item = q.reserve(timeout=0)
    with casket.transaction():
        item.ack()
        with pytest.raises(pyqstore.NotReservedError):
            item.ack()
        # documented: release of an item acknowledged in the open transaction
        with pytest.raises(pyqstore.NotReservedError):
            item.release()
        q.put(b"c")
    assert q.get_many(5) == [b"b", b"c"]
    assert casket.queues() == []


def test_reservation_inside_transaction(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    pre = q.reserve(timeout=0)
    casket.begin()
    inner = q.reserve(timeout=0)
    assert inner.payload == b"b"
    pre.ack()
    assert len(q) == 0
    casket.abort()
    # reservation made inside is undone; the ack inside is undone (still reserved)
    assert len(q) == 1
    assert q.peek() == b"b"
    with pytest.raises(pyqstore.NotReservedError):
        inner.ack()
    pre.ack()
    assert q.get_many(5) == [b"b"]
    assert casket.queues() == []


def test_reservations_of_one_transaction_share_one_room(path):
    """The shared reservation table has room for 49,152 entries; a
    transaction reserving in many queues must count all of them against it
    (it once counted each queue's alone, and what did not fit was dropped at
    commit, leaving held items gettable).  Each reserve past the room is
    refused with ReservationsFullError (not a FullError: nothing is
    spoiled) and the transaction goes on; every reservation
    granted is in force after the commit, and another handle gets exactly
    the items nobody holds."""
    room = 65536 // 4 * 3
    queues, per_queue = 100, 500
    c = pyqstore.open(path, "n", sync=False)
    qs = [c.queue("q%d" % k) for k in range(queues)]
    with c.transaction():
        for q in qs:
            q.put_many([b"%s:%d" % (q.name.encode(), i) for i in range(per_queue)])
    held, refused = [], 0
    with c.transaction():
        for q in qs:
            for _ in range(per_queue):
                try:
                    held.append(q.reserve(timeout=0))
                except pyqstore.ReservationsFullError as e:
                    assert not isinstance(e, pyqstore.FullError)
                    assert e.code == lib.QS_RESFULL and "reserved" in str(e)
                    refused += 1
    assert len(held) == room and refused == queues * per_queue - room
    other = pyqstore.open(path, "w", sync=False)
    try:
        got = [p for k in range(queues) for p in other.queue("q%d" % k).get_many(per_queue)]
        assert len(got) == refused
        assert not set(got) & {i.payload for i in held}
    finally:
        other.close()
        c.close()


def test_lease_expiry(casket):
    q = casket.queue("q")
    q.put(b"leased")
    old = q.reserve(lease=0.2)
    assert len(q) == 0
    assert q.peek() is None
    time.sleep(0.4)
    assert len(q) == 1
    assert q.peek() == b"leased"
    with pytest.raises(pyqstore.NotReservedError):
        old.ack()
    with pytest.raises(pyqstore.NotReservedError):
        old.release()
    new = q.reserve(timeout=0)
    assert new.id == old.id and new.payload == b"leased"
    with pytest.raises(pyqstore.NotReservedError):
        old.ack()
    new.ack()
    assert len(q) == 0 and casket.queues() == []


def test_lease_expiry_wakes_a_waiting_get(casket):
    q = casket.queue("q")
    q.put(b"x")
    t0 = time.monotonic()       # before the lease starts: a late clock read
    q.reserve(lease=0.2)        # would make a slow reserve look like an early wake
    assert q.get(timeout=10) == b"x"
    assert 0.195 <= time.monotonic() - t0 < 8


@pytest.mark.parametrize("lease", [0, 0.0, -1, -0.5])
def test_nonpositive_lease_is_value_error(casket, lease):
    q = casket.queue("q")
    q.put(b"x")
    with pytest.raises(ValueError):
        q.reserve(timeout=0, lease=lease)
    assert len(q) == 1


def test_item_context_manager(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    with q.reserve(timeout=0) as item:
        assert item.payload == b"a"
        assert len(q) == 1
    assert q.peek_many(5) == [b"b"]
    with pytest.raises(NotImplementedError):
        with q.reserve(timeout=0) as item:
            assert item.payload == b"b"
            raise NotImplementedError
    assert q.peek_many(5) == [b"b"]
    with pytest.raises(pyqstore.NotReservedError):
        item.ack()
    assert q.get_nowait() == b"b"


def test_reservations_come_back_after_reopen_in_order(casket, path):
    q = casket.queue("q")
    q.put_many([b"%d" % i for i in range(6)])
    items = [q.reserve(timeout=0) for _ in range(4)]
    items[1].ack()
    assert q.peek_many(10) == [b"4", b"5"]
    casket.close()
    with pyqstore.open(path, "w", sync=False) as c:
        q2 = c.queue("q")
        assert len(q2) == 5
        assert q2.get_many(10) == [b"0", b"2", b"3", b"4", b"5"]


def test_closed_error_after_close(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    item = q.reserve(timeout=0)
    casket.close()
    calls = [
        lambda: q.put(b"x"), lambda: q.put_many([b"x"]), lambda: q.get_nowait(),
        lambda: q.get(timeout=0.1), lambda: q.get_many(2), lambda: q.peek(),
        lambda: q.peek_many(2), lambda: len(q), lambda: q.clear(),
        lambda: q.reserve(timeout=0), item.ack, item.release,
        lambda: casket.queue("q"), casket.queues, casket.queue_lengths,
        lambda: casket.publish(b"x", ["q"]),
    ]
    for call in calls:
        with pytest.raises(pyqstore.ClosedError):
            call()


def test_close_wakes_a_waiting_get_with_closed_error(casket):
    q = casket.queue("q")

    finished_box = {}

    def waiter():
        try:
            q.get(timeout=30)
        except pyqstore.ClosedError:
            finished_box["r"] = "closed"
        except BaseException as e:  # noqa: BLE001
            finished_box["r"] = e

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.1)
    casket.close()
    t.join(10)
    assert not t.is_alive()
    assert finished_box["r"] == "closed"


def test_read_only_casket(path):
    with pyqstore.open(path, "n", sync=False) as c:
        c.queue("q").put_many([b"a", b"b"])
    with pyqstore.open(path, "r") as c:
        q = c.queue("q")
        assert len(q) == 2
        assert q.peek() == b"a"
        assert q.peek_many(5) == [b"a", b"b"]
        assert c.queues() == ["q"]
        assert c.queue_lengths() == {"q": 2}
        with pytest.raises(pyqstore.ReadOnlyError):
            q.put(b"c")
        with pytest.raises(pyqstore.ReadOnlyError):
            q.put_many([b"c"])
        with pytest.raises(pyqstore.ReadOnlyError):
            c.publish(b"c", ["q", "r"])
        with pytest.raises(pyqstore.ReadOnlyError):
            q.get_nowait()
        with pytest.raises(pyqstore.ReadOnlyError):
            q.clear()
        assert q.peek_many(5) == [b"a", b"b"]
        assert c.queues() == ["q"]


def test_queue_data_survives_reopen(casket, path):
    casket.queue("a").put_many([b"a1", b"a2" * 3000])
    casket.queue("b").put(b"b1")
    casket.publish(b"shared", ["a", "b", "c"])
    casket.queue("a").get_nowait()
    casket.close()
    with pyqstore.open(path, "w", sync=False) as c:
        assert c.queue_lengths() == {"a": 2, "b": 2, "c": 1}
        assert c.queue("a").get_many(10) == [b"a2" * 3000, b"shared"]
        assert c.queue("b").get_many(10) == [b"b1", b"shared"]
        c.queue("c").put(b"c2")
        assert c.queue("c").get_many(10) == [b"shared", b"c2"]
        assert queue_records(c) == 0
        assert c.queues() == []
        c.check()


def test_user_records_unaffected(casket):
    q = casket.queue("q")
    q.put(b"x")
    casket.publish(b"y", ["q", "r"])
    assert len(casket) == 0
    assert list(casket.items()) == []
    assert casket.stats()["records"] == 0
    casket.put(b"q", b"user")
    assert len(q) == 2
    assert list(casket.items()) == [(b"q", b"user")]
    assert q.get_many(5) == [b"x", b"y"]
    assert casket[b"q"] == b"user"


def test_check_after_heavy_use(path):
    c = pyqstore.open(path, "n", sync=False, cache_size=64 * 4096,
                      checkpoint_size=128 * 1024)
    try:
        qs = [c.queue(n) for n in ("a", "bb", "ß", "d" * 500)]
        expected = {q.name: [] for q in qs}
        for rnd in range(30):
            for k, q in enumerate(qs):
                batch = [bytes([rnd, k]) * ((rnd * 37 + k * 101) % 2500)
                         for _ in range(20)]
                q.put_many(batch)
                expected[q.name] += batch
            big = bytes([rnd]) * (5000 + rnd * 300)
            c.publish(big, [q.name for q in qs[: 1 + rnd % 4]])
            for q in qs[: 1 + rnd % 4]:
                expected[q.name].append(big)
            with c.transaction():
                for q in qs:
                    got = q.get_many(7)
                    assert got == expected[q.name][:7]
                    del expected[q.name][:7]
            items = [qs[rnd % 4].reserve(timeout=0) for _ in range(3)]
            items[0].ack()
            items[1].release()
            del expected[qs[rnd % 4].name][0]
            items[2].release()
            if rnd % 5 == 4:
                with pytest.raises(ZeroDivisionError):
                    with c.transaction():
                        for q in qs:
                            q.get_many(50)
                            q.put(b"gone")
                        1 / 0
            if rnd % 10 == 9:
                c.check()
        c.check()
        for q in qs:
            assert len(q) == len(expected[q.name])
            assert q.peek_many(3) == expected[q.name][:3]
        qs[0].clear()
        for q in qs[1:]:
            assert q.get_many(10**6) == expected[q.name]
        assert c.queues() == []
        assert queue_records(c) == 0
        c.check()
    finally:
        c.close()


def test_hundred_thousand_items_in_order(casket):
    q = casket.queue("big")
    n = 100_000
    assert q.put_many(b"%08d" % i for i in range(n)) == n
    assert len(q) == n
    out = []
    while True:
        batch = q.get_many(1000)
        if not batch:
            break
        assert len(batch) <= 1000
        out.extend(batch)
    assert len(out) == n
    assert out == [b"%08d" % i for i in range(n)]
    assert len(q) == 0
    assert casket.queues() == []
    assert queue_records(casket) == 0
    casket.check()


@pytest.mark.parametrize("one", ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")])
@pytest.mark.parametrize("codec", [None, "json"])
def test_put_many_refuses_a_single_payload(casket, one, codec):
    """put_many("abc") stored three items, one per character."""
    q = casket.queue("q", codec=codec)
    with pytest.raises(TypeError, match="put_many takes an iterable of payloads"):
        q.put_many(one)
    assert len(q) == 0
    assert q.put_many(["abc"]) == 1


@pytest.mark.parametrize("bad", ["3", 2.0, True, None])
def test_batch_sizes_must_be_ints(casket, bad):
    """get_many("3") failed with "'<' not supported between 'str' and 'int'"."""
    q = casket.queue("q")
    q.put(b"x")
    for method in (q.get_many, q.peek_many):
        with pytest.raises(TypeError, match=r"^n must be an int, not "):
            method(bad)
    assert len(q) == 1


@pytest.mark.parametrize("bad", ["5", None, b"1"])
def test_seconds_must_be_numbers(casket, bad):
    q = casket.queue("q")
    q.put(b"x")
    with pytest.raises(TypeError, match=r"^timeout must be a number of seconds"):
        q.get(timeout=bad) if bad is not None else q.get(timeout=[1])
    with pytest.raises(TypeError, match=r"^lease must be a number of seconds"):
        q.reserve(timeout=0, lease=bad if bad is not None else "1")
    assert len(q) == 1
