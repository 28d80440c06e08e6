"""Tests of the Casket API: every method, edge cases, errors, threads."""
from __future__ import annotations

import gc
import importlib.metadata
import os
import pathlib
import random
import textwrap
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore
from pyqstore import (
    ClosedError,
    CorruptError,
    Error,
    LockedError,
    ReadOnlyError,
    TooBigError,
    TransactionError,
)
from pyqstore._qstore import lib
from _procs import start_python

MAX_KEY = lib.QS_MAX_KEY
PAGE = lib.QS_PAGE_SIZE


def model_items(model: dict[bytes, list[bytes]]) -> list[tuple[bytes, bytes]]:
    """What items() should give for a dict of key -> values."""
    return [(k, v) for k in sorted(model) for v in model[k]]


# --------------------------------------------------------------- open / flags


def test_version():
    """__version__ is the version of the installed distribution (one
    number, in pyproject.toml; a stale copy in __init__.py fails here)."""
    assert pyqstore.__version__ == importlib.metadata.version("pyqstore")


def test_open_create_and_reopen(path):
    with pyqstore.open(path) as c:
        c.put(b"k", b"v")
        assert c.path == path
        assert not c.closed
    assert c.closed
    assert os.path.exists(path)
    with pyqstore.open(path, "w") as c:
        assert c[b"k"] == b"v"
    with pyqstore.open(path, "r") as c:
        assert c[b"k"] == b"v"
        assert len(c) == 1


def test_open_pathlike(tmp_path):
    p = pathlib.Path(tmp_path) / "p.qs"
    with pyqstore.open(p) as c:
        c[b"a"] = b"1"
        assert os.fspath(c.path) == str(p)
    with pyqstore.open(str(p), "r") as c:
        assert c[b"a"] == b"1"


@pytest.mark.parametrize("flag", ["x", "rw", "", "C", None, 1])
def test_bad_flag(path, flag):
    with pytest.raises(ValueError):
        pyqstore.open(path, flag)
    assert not os.path.exists(path)


@pytest.mark.parametrize("flag", ["r", "w"])
def test_open_missing(path, flag):
    with pytest.raises(pyqstore.Error) as ei:
        pyqstore.open(path, flag)
    assert isinstance(ei.value, FileNotFoundError)
    assert isinstance(ei.value, pyqstore.FileNotFound)
    assert ei.value.errno == 2
    assert ei.value.filename == path
    assert not os.path.exists(path)


def test_flag_n_truncates(path):
    with pyqstore.open(path) as c:
        for i in range(100):
            c.put(b"%d" % i, b"x" * 100)
    with pyqstore.open(path, "n") as c:
        assert len(c) == 0
        assert list(c.items()) == []
        assert c.get(b"1") is None
    with pyqstore.open(path, "r") as c:
        assert len(c) == 0


def test_flag_c_keeps(path):
    with pyqstore.open(path, "c") as c:
        c.put(b"a", b"1")
    with pyqstore.open(path, "c") as c:
        assert c[b"a"] == b"1"


def test_read_only(path):
    with pyqstore.open(path) as c:
        c.putdup(b"a", b"1")
        c.putdup(b"a", b"2")
    with pyqstore.open(path, "r") as c:
        for fn, args in [
            (c.put, (b"a", b"x")),
            (c.putkeep, (b"b", b"x")),
            (c.putdup, (b"a", b"x")),
            (c.putdup_many, ([(b"a", b"x")],)),
            (c.out, (b"a",)),
            (c.outlist, (b"a",)),
            (c.begin, ()),
            (c.compact, ()),
        ]:
            with pytest.raises(ReadOnlyError):
                fn(*args)
        with pytest.raises(ReadOnlyError):
            c[b"z"] = b"1"
        with pytest.raises(ReadOnlyError):
            del c[b"a"]
        assert c.getdup(b"a") == [b"1", b"2"]
        assert list(c.items()) == [(b"a", b"1"), (b"a", b"2")]
        c.check()
    assert issubclass(ReadOnlyError, Error)


def test_random_file_is_not_a_casket(path):
    rnd = random.Random(1)
    with open(path, "wb") as f:
        f.write(bytes(rnd.getrandbits(8) for _ in range(3 * PAGE)))
    with pytest.raises(CorruptError) as ei:
        with pyqstore.open(path, "w") as c:
            c.check()
    assert "not a pyqstore casket" in str(ei.value)


def test_empty_file_is_not_a_casket(path):
    open(path, "wb").close()
    with pytest.raises(CorruptError):
        with pyqstore.open(path, "w") as c:
            c.check()


def _fill(c, n=300, vlen=1000):
    expect = {}
    with c.transaction():
        for i in range(n):
            k = b"key-%05d" % i
            v = (b"MARKER-%05d-" % i) * (vlen // 13 + 1)
            v = v[:vlen]
            c.put(k, v)
            expect[k] = [v]
    return expect


def test_truncated_casket(path):
    with pyqstore.open(path) as c:
        _fill(c)
        c.sync()
    size = os.path.getsize(path)
    assert size > 10 * PAGE
    with open(path, "r+b") as f:
        f.truncate(size // 2 + 100)
    with pytest.raises(CorruptError):
        with pyqstore.open(path, "w") as c:
            c.check()


def test_check_sound(casket):
    assert casket.check() is None
    _fill(casket)
    assert casket.check() is None
    for i in range(0, 300, 3):
        casket.out(b"key-%05d" % i)
    assert casket.check() is None


def test_check_detects_flipped_bytes(path):
    with pyqstore.open(path) as c:
        _fill(c)
        c.sync()
        c.check()
    with open(path, "rb") as f:
        data = f.read()
    # Damage every copy of one record's bytes in the main file.
    offs = []
    off = data.find(b"MARKER-00150-")
    while off != -1:
        offs.append(off)
        off = data.find(b"MARKER-00150-", off + 1)
    assert offs and min(offs) > PAGE, "the record should be in a data page"
    with open(path, "r+b") as f:
        for off in offs:
            f.seek(off)
            f.write(bytes(b ^ 0x5A for b in data[off:off + 16]))
    with pytest.raises(CorruptError) as ei:
        with pyqstore.open(path, "w") as c:
            c.check()
    assert str(ei.value)


def test_write_lock_held_by_other_process(path):
    """Another process in a transaction: opening works, reading sees the
    last commit at once, writing waits lock_timeout and raises."""
    with pyqstore.open(path) as c:
        c.put(b"a", b"1")
    code = textwrap.dedent(
        f"""
        import sys, pyqstore
        c = pyqstore.open({path!r}, "w")
        with c.transaction():
            c.put(b"a", b"child")
            print("ready", flush=True)
            sys.stdin.read()
        c.close()
        """
    )
    child = start_python(code, stdin=True)
    try:
        assert child.stdout.readline() == b"ready\n"
        with pyqstore.open(path, "w", lock_timeout=0) as c:
            assert c[b"a"] == b"1"
            with pytest.raises(LockedError):
                c.put(b"b", b"2")
            with pytest.raises(LockedError):
                with c.transaction():
                    pass
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    with pyqstore.open(path, "w", lock_timeout=0) as c:
        assert c[b"a"] == b"child"
        c.put(b"b", b"2")


# ------------------------------------------------------------ records / types


def test_put_get(casket):
    assert casket.get(b"a") is None
    assert casket.get(b"a", b"dflt") == b"dflt"
    casket.put(b"a", b"1")
    assert casket.get(b"a") == b"1"
    assert casket[b"a"] == b"1"
    casket[b"a"] = b"2"
    assert casket[b"a"] == b"2"
    with pytest.raises(KeyError):
        casket[b"missing"]
    assert type(casket.get(b"a")) is bytes


def test_empty_key_and_value(casket):
    casket.put(b"", b"")
    assert casket.get(b"") == b""
    assert b"" in casket
    assert casket.count(b"") == 1
    casket.putdup(b"", b"x")
    assert casket.getdup(b"") == [b"", b"x"]
    assert list(casket.items()) == [(b"", b""), (b"", b"x")]
    casket.put(b"k", b"")
    assert casket[b"k"] == b""
    assert casket.get(b"k", None) == b""


def test_input_types(casket):
    casket.put("ключ", "значение")
    assert casket.get("ключ".encode()) == "значение".encode()
    assert casket.get("ключ") == "значение".encode()
    casket.put(bytearray(b"ba"), bytearray(b"v1"))
    assert casket[memoryview(b"ba")] == b"v1"
    big = memoryview(b"0123456789")[2:8]
    casket.put(big, big)
    assert casket[b"234567"] == b"234567"
    strided = memoryview(b"abcdef")[::2]
    casket.put(strided, strided)
    assert casket[b"ace"] == b"ace"
    casket.putdup(b"ba", memoryview(bytearray(b"v2")))
    assert casket.getdup("ba") == [b"v1", b"v2"]
    assert "ba" in casket and bytearray(b"ba") in casket


@pytest.mark.parametrize("bad", [1, None, 1.5, ["a"], object()])
def test_type_errors(casket, bad):
    for fn, args in [
        (casket.put, (bad, b"v")),
        (casket.put, (b"k", bad)),
        (casket.putkeep, (bad, b"v")),
        (casket.putdup, (b"k", bad)),
        (casket.get, (bad,)),
        (casket.getdup, (bad,)),
        (casket.count, (bad,)),
        (casket.out, (bad,)),
        (casket.outlist, (bad,)),
        (casket.putdup_many, ([(bad, b"v")],)),
    ] + ([(casket.items, (bad,))] if bad is not None else []):
        with pytest.raises(TypeError) as ei:
            fn(*args)
        assert type(bad).__name__ in str(ei.value)
    assert len(casket) == 0


def test_long_keys_and_values(casket):
    k4 = bytes(range(256)) * 16  # 4 KiB
    assert len(k4) == 4096
    casket.put(k4, b"four")
    casket.put(k4 + b"\x00", b"four+")
    rnd = random.Random(7)
    v8 = rnd.randbytes(8 << 20)
    casket.put(b"big", v8)
    assert casket.get(k4) == b"four"
    assert casket.get(k4 + b"\x00") == b"four+"
    assert casket.get(b"big") == v8
    casket.putdup(b"big", b"small")
    assert casket.getdup(b"big") == [v8, b"small"]
    kmax = b"m" * MAX_KEY
    casket.put(kmax, b"max")
    assert casket[kmax] == b"max"
    with pytest.raises(TooBigError) as ei:
        casket.put(b"m" * (MAX_KEY + 1), b"x")
    assert isinstance(ei.value, ValueError)
    casket.check()
    items = list(casket.items())
    assert [k for k, _ in items] == [k4, k4 + b"\x00", b"big", b"big", kmax]
    assert items[2][1] == v8


def test_big_values_persist(path):
    v = random.Random(3).randbytes(8 << 20)
    with pyqstore.open(path) as c:
        c.put(b"v", v)
    with pyqstore.open(path, "r") as c:
        assert c[b"v"] == v
        c.check()


def test_putkeep(casket):
    assert casket.putkeep(b"k", b"1") is True
    assert casket.putkeep(b"k", b"2") is False
    assert casket.getdup(b"k") == [b"1"]
    casket.putdup(b"k", b"3")
    assert casket.putkeep(b"k", b"4") is False
    assert casket.getdup(b"k") == [b"1", b"3"]
    casket.outlist(b"k")
    assert casket.putkeep(b"k", b"5") is True
    assert casket.getdup(b"k") == [b"5"]


def test_put_replaces_all_dups(casket):
    for i in range(50):
        casket.putdup(b"k", b"%d" % i)
    casket.putdup(b"j", b"j")
    assert casket.count(b"k") == 50
    casket.put(b"k", b"only")
    assert casket.getdup(b"k") == [b"only"]
    assert casket.count(b"k") == 1
    assert len(casket) == 2


_PUT_KEYS = [b"a", b"k", b"k\x00", b"z"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["put", "putdup", "out"]), st.sampled_from(_PUT_KEYS),
                          st.integers(0, 40), st.integers(0, 400)), max_size=120))
def test_put_against_a_model(tmp_path_factory, ops):
    """put removes a key's values from the back, one seek each, and appends
    where its one seek landed: against a dict of lists, with values long
    enough that a key's duplicates span leaves (so the record before the
    seek's landing place is often on the previous leaf), and with neighbour
    keys that share the key's prefix on both sides."""
    path = str(tmp_path_factory.mktemp("put") / "m.qdb")
    model: dict[bytes, list[bytes]] = {}
    with pyqstore.open(path, "n", sync=False) as c:
        for op, key, dups, size in ops:
            value = bytes([dups % 251]) * size
            if op == "put":
                c.put(key, value)
                model[key] = [value]
            elif op == "putdup":
                with c.transaction():
                    for i in range(dups):
                        c.putdup(key, value + b"%d" % i)
                model.setdefault(key, []).extend(value + b"%d" % i for i in range(dups))
            else:
                assert c.outlist(key) == len(model.pop(key, []))
        for key in _PUT_KEYS:
            assert c.getdup(key) == model.get(key, [])
        assert len(c) == sum(map(len, model.values()))
        c.check()


def test_getdup_order_and_count(casket):
    rnd = random.Random(5)
    model: dict[bytes, list[bytes]] = {}
    for i in range(2000):
        k = b"k%d" % rnd.randrange(20)
        v = b"%d" % i + b"." * rnd.randrange(0, 300)
        casket.putdup(k, v)
        model.setdefault(k, []).append(v)
    for k, vs in model.items():
        assert casket.getdup(k) == vs
        assert casket.count(k) == len(vs)
        assert casket.get(k) == vs[0]
    assert casket.getdup(b"none") == []
    assert casket.count(b"none") == 0
    assert len(casket) == 2000
    assert list(casket.items()) == model_items(model)


def test_out_and_outlist(casket):
    for v in (b"1", b"2", b"3"):
        casket.putdup(b"k", v)
    casket.put(b"other", b"o")
    assert casket.out(b"k") is True
    assert casket.getdup(b"k") == [b"2", b"3"]
    assert casket.out(b"missing") is False
    assert casket.outlist(b"k") == 2
    assert casket.outlist(b"k") == 0
    assert b"k" not in casket
    assert casket.getdup(b"k") == []
    assert casket.out(b"k") is False
    assert len(casket) == 1
    casket.putdup(b"d", b"1")
    casket.putdup(b"d", b"2")
    del casket[b"d"]
    assert b"d" not in casket
    with pytest.raises(KeyError):
        del casket[b"d"]
    assert list(casket.items()) == [(b"other", b"o")]


def test_len_and_contains(casket):
    assert len(casket) == 0
    assert b"a" not in casket
    casket.putdup(b"a", b"1")
    casket.putdup(b"a", b"2")
    casket.put(b"b", b"1")
    assert len(casket) == 3
    assert b"a" in casket and "b" in casket
    assert b"c" not in casket


def test_putdup_many(casket):
    casket.putdup(b"a", b"0")
    n = casket.putdup_many(
        [(b"a", b"1"), ("b", "x"), (bytearray(b"a"), memoryview(b"2")), (b"", b"")]
    )
    assert n == 4
    assert casket.getdup(b"a") == [b"0", b"1", b"2"]
    assert casket.getdup(b"b") == [b"x"]
    assert casket.getdup(b"") == [b""]
    assert casket.putdup_many([]) == 0
    assert casket.putdup_many(iter([(b"g%d" % i, b"%d" % i) for i in range(1000)])) == 1000
    assert len(casket) == 1005
    assert casket[b"g999"] == b"999"
    with pytest.raises(TypeError):
        casket.putdup_many([b"notapair"])
    with pytest.raises(TypeError):
        casket.putdup_many([(b"a", b"1", b"2")])


def test_putdup_many_is_atomic(casket):
    casket.put(b"a", b"0")
    with pytest.raises(TooBigError):
        casket.putdup_many([(b"a", b"1"), (b"x" * (MAX_KEY + 1), b"2"), (b"b", b"3")])
    assert list(casket.items()) == [(b"a", b"0")]
    with casket.transaction():
        casket.put(b"t", b"1")
        with pytest.raises(TooBigError):
            casket.putdup_many([(b"c", b"1"), (b"y" * (MAX_KEY + 1), b"2")])
        assert casket.in_transaction
        assert list(casket.items()) == [(b"a", b"0"), (b"t", b"1")]
    assert list(casket.items()) == [(b"a", b"0"), (b"t", b"1")]


# ------------------------------------------------------------------ iteration


def _populate_iter(c):
    model: dict[bytes, list[bytes]] = {}
    rnd = random.Random(11)
    keys = [b"", b"a", b"ab", b"abc", b"b", b"\x00", b"\x00\x00", b"\xff", b"\xff\xff",
            b"\x7f", b"\x80", b"ba", b"z" * 300]
    for i in range(600):
        k = rnd.choice(keys)
        v = b"v%d" % i
        c.putdup(k, v)
        model.setdefault(k, []).append(v)
    return model


def test_iteration_order(casket):
    model = _populate_iter(casket)
    expect = model_items(model)
    assert list(casket.items()) == expect
    # keys and iteration: each key once, however many values it has
    assert list(casket.keys()) == sorted(model)
    assert list(casket.values()) == [v for _, v in expect]
    assert list(casket) == sorted(model)
    assert list(casket.items(reverse=True)) == expect[::-1]
    assert list(casket.keys(reverse=True)) == sorted(model, reverse=True)
    assert list(casket.values(reverse=True)) == [v for _, v in expect[::-1]]
    # memcmp order: shorter prefix first, bytes unsigned
    ks = [k for k in sorted(model)]
    assert ks[0] == b"" and ks[-1] == b"\xff\xff"
    assert ks.index(b"\x7f") < ks.index(b"\x80")


@pytest.mark.parametrize(
    "start",
    [b"", b"\x00", b"\x00\x00\x00", b"a", b"aa", b"ab", b"abd", b"b", b"c", b"\x7f", b"\xfe",
     b"\xff", b"\xff\xff", b"\xff\xff\xff", "a", bytearray(b"b")],
)
def test_iteration_start(casket, start):
    model = _populate_iter(casket)
    expect = model_items(model)
    s = bytes(start.encode() if isinstance(start, str) else start)
    assert list(casket.items(start=start)) == [r for r in expect if r[0] >= s]
    assert list(casket.items(start, reverse=True)) == [r for r in expect if r[0] <= s][::-1]
    assert list(casket.keys(start)) == [k for k in sorted(model) if k >= s]
    assert list(casket.keys(start, True)) == [k for k in sorted(model, reverse=True) if k <= s]
    assert list(casket.values(start, True)) == [r[1] for r in expect if r[0] <= s][::-1]


def test_iteration_empty(casket):
    assert list(casket.items()) == []
    assert list(casket.items(reverse=True)) == []
    assert list(casket.items(b"a")) == []
    assert list(casket.items(b"a", reverse=True)) == []
    casket.put(b"m", b"1")
    assert list(casket.items(b"n")) == []
    assert list(casket.items(b"l", reverse=True)) == []
    assert list(casket.items(b"m", reverse=True)) == [(b"m", b"1")]


def test_reverse_start_at_max_length_key(casket):
    kmax = b"\xff" * MAX_KEY
    casket.putdup(kmax, b"1")
    casket.putdup(kmax, b"2")
    casket.put(b"a", b"a")
    assert list(casket.items(kmax, reverse=True)) == [(kmax, b"2"), (kmax, b"1"), (b"a", b"a")]
    kmid = b"\xfe" * MAX_KEY
    assert list(casket.items(kmid, reverse=True)) == [(b"a", b"a")]
    assert list(casket.items(kmid)) == [(kmax, b"1"), (kmax, b"2")]


def test_iteration_large(casket):
    expect = []
    with casket.transaction():
        for i in range(5000):
            k = b"%08d" % i
            v = b"x" * (i % 50)
            casket.put(k, v)
            expect.append((k, v))
    assert list(casket.items()) == expect
    assert list(casket.items(reverse=True)) == expect[::-1]
    assert list(casket.items(b"00002500")) == expect[2500:]
    assert list(casket.items(b"000025005", reverse=True)) == expect[:2501][::-1]


def test_iteration_big_values(casket):
    vals = [bytes([i]) * (300_000 + i) for i in range(12)]
    for i, v in enumerate(vals):
        casket.putdup(b"k", v)
        casket.put(b"j%02d" % i, v)
    assert list(casket.values(start=b"k")) == vals
    assert list(casket.values(start=b"k", reverse=True)) == vals[::-1] * 2
    assert list(casket.values(start=b"j99", reverse=True)) == vals[::-1]
    assert list(casket.values()) == vals + vals


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dups", [1, 3])
def test_remove_while_iterating(casket, reverse, dups):
    keys = [b"%04d" % i for i in range(300)]
    for k in keys:
        for d in range(dups):
            casket.putdup(k, b"%d" % d)
    seen = []
    for k in casket.keys(reverse=reverse):
        seen.append(k)
        casket.outlist(k)
    assert seen == (keys[::-1] if reverse else keys)
    assert len(casket) == 0


def test_cursor_read_reverse_after_last_key_removed(casket):
    # Minimal form of a C-level case: a reverse iterator whose C cursor is
    # on the last key when that key is removed must go on with the keys
    # before it.  The iterator fetches 4 records first (f e d c), leaving
    # its cursor on b; removing c..f and then b leaves b the last key.
    for k in (b"a", b"b", b"c", b"d", b"e", b"f"):
        casket.put(k, b"v")
    it = casket.keys(reverse=True)
    got = [next(it) for _ in range(4)]
    assert got == [b"f", b"e", b"d", b"c"]
    for k in got + [b"b"]:
        assert casket.out(k)
    assert list(it) == [b"a"]


def test_abandoned_iterators(casket):
    """Iterators dropped half-way, or closed, give their C cursor back:
    stats()["open_cursors"] counts the cursors of the handle, so one that
    stays open after its iterator is gone shows as a count above 0."""
    _populate_iter(casket)
    assert casket.stats()["open_cursors"] == 0
    its = [casket.items() for _ in range(20)]
    for it in its:
        next(it)
    assert casket.stats()["open_cursors"] == 20
    del its, it
    gc.collect()
    assert casket.stats()["open_cursors"] == 0
    it = casket.keys(reverse=True)
    next(it)
    assert casket.stats()["open_cursors"] == 1
    it.close()
    assert casket.stats()["open_cursors"] == 0
    assert len(list(casket.items())) == 600
    assert casket.stats()["open_cursors"] == 0


def test_close_closes_iterators(path):
    c = pyqstore.open(path, "n", sync=False)
    for i in range(1000):
        c.put(b"%04d" % i, b"v")
    it = c.items()
    assert next(it) == (b"0000", b"v")
    c.close()
    with pytest.raises(ClosedError):
        for _ in it:
            pass
    with pyqstore.open(path, "r") as c2:
        assert len(c2) == 1000


# --------------------------------------------------------------- transactions


def test_transaction_commit(path):
    with pyqstore.open(path) as c:
        assert not c.in_transaction
        c.begin()
        assert c.in_transaction
        c.put(b"a", b"1")
        c.putdup(b"a", b"2")
        assert c.getdup(b"a") == [b"1", b"2"]
        assert list(c.items()) == [(b"a", b"1"), (b"a", b"2")]
        assert len(c) == 2
        c.commit()
        assert not c.in_transaction
    with pyqstore.open(path, "r") as c:
        assert c.getdup(b"a") == [b"1", b"2"]


def test_transaction_abort_restores(casket):
    model = _populate_iter(casket)
    before = list(casket.items())
    assert before == model_items(model)
    stats_before = casket.stats()
    casket.begin()
    casket.put(b"a", b"new")
    casket.outlist(b"b")
    casket.out(b"")
    for i in range(3000):
        casket.putdup(b"new%d" % (i % 7), b"x" * (i % 5000))
    casket.put(b"big", b"y" * 100_000)
    assert list(casket.items()) != before
    casket.abort()
    assert not casket.in_transaction
    assert list(casket.items()) == before
    assert len(casket) == len(before)
    assert casket.stats()["records"] == stats_before["records"]
    casket.check()


def test_transaction_context_manager(casket):
    with casket.transaction() as c:
        assert c is casket
        c.put(b"a", b"1")
    assert casket[b"a"] == b"1"

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with casket.transaction():
            casket.put(b"a", b"2")
            casket.put(b"b", b"2")
            raise Boom()
    assert not casket.in_transaction
    assert list(casket.items()) == [(b"a", b"1")]


def test_transaction_misuse(casket):
    with pytest.raises(TransactionError):
        casket.commit()
    with pytest.raises(TransactionError):
        casket.abort()
    casket.begin()
    with pytest.raises(TransactionError):
        casket.begin()
    assert casket.in_transaction
    with pytest.raises(TransactionError):
        casket.sync()
    with pytest.raises(TransactionError):
        casket.compact()
    with pytest.raises(TransactionError):
        with casket.transaction():
            pass
    # the failed nested begin aborted nothing but the outer one still holds
    casket.put(b"x", b"1")
    casket.commit()
    assert casket[b"x"] == b"1"
    with pytest.raises(TransactionError):
        casket.commit()


def test_nested_transaction_context_aborts_outer(casket):
    casket.put(b"keep", b"1")
    with pytest.raises(TransactionError):
        with casket.transaction():
            casket.put(b"a", b"1")
            with casket.transaction():
                casket.put(b"b", b"1")
    assert not casket.in_transaction
    assert list(casket.items()) == [(b"keep", b"1")]


def test_close_aborts_transaction(path):
    c = pyqstore.open(path)
    c.put(b"a", b"1")
    c.begin()
    c.put(b"a", b"2")
    c.put(b"b", b"2")
    c.close()
    with pyqstore.open(path) as c:
        assert list(c.items()) == [(b"a", b"1")]


# ----------------------------------------------------------- closed / upkeep


def test_closed_handle(path):
    c = pyqstore.open(path)
    c.put(b"a", b"1")
    c.close()
    c.close()  # idempotent
    assert c.closed
    calls = [
        (c.put, (b"a", b"1")), (c.putkeep, (b"a", b"1")), (c.putdup, (b"a", b"1")),
        (c.putdup_many, ([(b"a", b"1")],)), (c.get, (b"a",)), (c.getdup, (b"a",)),
        (c.count, (b"a",)), (c.out, (b"a",)), (c.outlist, (b"a",)), (c.__len__, ()),
        (c.__contains__, (b"a",)), (c.__getitem__, (b"a",)), (c.__setitem__, (b"a", b"1")),
        (c.__delitem__, (b"a",)), (c.items, ()), (c.keys, ()), (c.values, ()),
        (c.__iter__, ()), (c.begin, ()), (c.commit, ()), (c.abort, ()), (c.check, ()),
        (c.compact, ()), (c.stats, ()), (c.sync, ()), (lambda: c.transaction().__enter__(), ()),
    ]
    for fn, args in calls:
        with pytest.raises(ClosedError):
            fn(*args)
        with pytest.raises(pyqstore.Error):
            fn(*args)
    with pytest.raises(ClosedError):
        c.in_transaction
    with pytest.raises(ClosedError):
        c.putdup_many([])


def test_del_closes(path):
    c = pyqstore.open(path)
    c.put(b"a", b"1")
    del c
    with pyqstore.open(path, "w", lock_timeout=0) as c2:
        assert c2[b"a"] == b"1"


def test_stats(casket):
    casket.putdup(b"a", b"1")
    casket.putdup(b"a", b"2")
    st = casket.stats()
    for name in ["page_size", "format_version", "pages", "free_pages", "records",
                 "file_bytes", "log_bytes", "log_file_bytes", "depth",
                 "in_transaction", "commits", "syncs", "checkpoints", "spilled_pages",
                 "open_cursors", "pages_read", "pages_shared", "log_frames_read"]:
        assert name in st and isinstance(st[name], int)
    assert st["path"] == casket.path
    assert st["page_size"] == PAGE
    assert st["format_version"] == lib.QS_FORMAT_VERSION
    assert st["records"] == 2
    assert st["depth"] >= 1
    assert st["commits"] >= 2
    assert not st["in_transaction"]
    casket.begin()
    assert casket.stats()["in_transaction"]
    casket.abort()


def test_a_commit_without_sync_is_visible_at_once_and_made_durable_by_the_next(path):
    """commit(sync=False) on a synced casket: no fdatasync of its own, the
    change visible to another handle at once; the next synced commit
    syncs the log once, for both."""
    with pyqstore.open(path, "n", sync=True) as c, pyqstore.open(path, "w") as other:
        syncs = c.stats()["syncs"]
        with c.transaction(sync=False):
            c.put(b"a", b"1")
        c.begin()
        c.put(b"b", b"2")
        c.commit(sync=False)
        assert c.stats()["syncs"] == syncs
        assert (other.get(b"a"), other.get(b"b")) == (b"1", b"2")
        with pytest.raises(pyqstore.TransactionError):
            c.commit(sync=False)           # no transaction: as commit()
        with c.transaction():
            c.put(b"c", b"3")
        assert c.stats()["syncs"] == syncs + 1
    with pyqstore.open(path, "w") as c:
        assert [c.get(k) for k in (b"a", b"b", b"c")] == [b"1", b"2", b"3"]


def test_sync_moves_data_to_main_file(path):
    with pyqstore.open(path) as c:
        c.put(b"k", b"SYNCMARK" * 10)
        c.sync()
        assert c.stats()["log_bytes"] == 0
        with open(path, "rb") as f:
            assert b"SYNCMARK" * 10 in f.read()


def test_compact(path):
    with pyqstore.open(path, sync=False) as c:
        expect = {}
        with c.transaction():
            for i in range(3000):
                k = b"c%05d" % i
                c.put(k, bytes([i % 256]) * 1000)
                expect[k] = [bytes([i % 256]) * 1000]
        c.put(b"ov", b"o" * 50_000)
        c.sync()
        size_before = os.path.getsize(path)
        with c.transaction():
            for i in range(3000):
                if i % 10:
                    k = b"c%05d" % i
                    c.outlist(k)
                    del expect[k]
        c.outlist(b"ov")
        c.sync()
        c.compact()
        size_after = os.path.getsize(path)
        assert size_after < size_before // 3
        assert list(c.items()) == model_items(expect)
        c.check()
        c.put(b"after", b"1")
    with pyqstore.open(path, "r") as c:
        expect[b"after"] = [b"1"]
        assert list(c.items()) == model_items(expect)
        c.check()


def test_persistence(path):
    model: dict[bytes, list[bytes]] = {}
    rnd = random.Random(9)
    for rounds in range(4):
        with pyqstore.open(path) as c:
            assert list(c.items()) == model_items(model)
            for i in range(300):
                k = b"p%d" % rnd.randrange(40)
                op = rnd.random()
                if op < 0.5:
                    v = b"%d-%d" % (rounds, i)
                    c.putdup(k, v)
                    model.setdefault(k, []).append(v)
                elif op < 0.7:
                    c.put(k, b"put")
                    model[k] = [b"put"]
                elif op < 0.85:
                    if c.out(k):
                        model[k].pop(0)
                        if not model[k]:
                            del model[k]
                    else:
                        assert k not in model
                else:
                    assert c.outlist(k) == len(model.pop(k, []))
    with pyqstore.open(path, "r") as c:
        assert list(c.items()) == model_items(model)
        c.check()


def test_million_duplicates(path):
    n = 1_000_000
    key = b"the-one-key"
    with pyqstore.open(path, "n") as c:
        c.put(b"a-before", b"b")
        c.put(b"z-after", b"z")
        with c.transaction():
            assert c.putdup_many((key, b"%07d" % i) for i in range(n)) == n
        assert c.count(key) == n
    with pyqstore.open(path, "r") as c:
        assert len(c) == n + 2
        assert c.count(key) == n
        vals = c.getdup(key)
        assert len(vals) == n
        assert vals == [b"%07d" % i for i in range(n)]
        del vals
        it = c.items(start=key)
        assert [next(it) for _ in range(3)] == [(key, b"0000000"), (key, b"0000001"), (key, b"0000002")]
        it.close()
        it = c.items(start=key, reverse=True)
        assert [next(it) for _ in range(2)] == [(key, b"%07d" % (n - 1)), (key, b"%07d" % (n - 2))]
        it.close()
        assert c.get(key) == b"0000000"
        c.check()


# --------------------------------------------------------------------- errors


def test_error_table():
    from pyqstore.errors import error_for

    e = error_for(lib.QS_NOTCASKET, "open", "/x")
    assert isinstance(e, CorruptError) and "not a pyqstore casket" in str(e) and "/x" in str(e)
    e = error_for(lib.QS_VERSION, "open", "/x")
    assert isinstance(e, CorruptError) and "unsupported format version" in str(e)
    assert isinstance(error_for(lib.QS_CORRUPT, "check"), CorruptError)
    assert isinstance(error_for(lib.QS_LOCKED, "open"), LockedError)
    assert isinstance(error_for(lib.QS_READONLY, "put"), ReadOnlyError)
    assert isinstance(error_for(lib.QS_TXN, "commit"), TransactionError)
    assert isinstance(error_for(lib.QS_CLOSED, "put"), ClosedError)
    e = error_for(lib.QS_TOOBIG, "put")
    assert isinstance(e, pyqstore.TooBigError) and isinstance(e, ValueError)
    e = error_for(lib.QS_INVAL, "put")
    assert isinstance(e, pyqstore.InvalidArgumentError) and isinstance(e, ValueError)
    e = error_for(lib.QS_NOMEM, "put")
    assert isinstance(e, pyqstore.NoMemoryError) and isinstance(e, MemoryError)
    assert type(error_for(lib.QS_FULL, "put")) is pyqstore.FullError
    e = error_for(2, "open", "/nope")
    assert isinstance(e, FileNotFoundError) and isinstance(e, Error)
    assert e.errno == 2 and e.filename == "/nope" and e.strerror
    e = error_for(13, "open", "/p")
    assert isinstance(e, PermissionError) and isinstance(e, Error)
    e = error_for(28, "commit", "/p")
    assert isinstance(e, OSError) and isinstance(e, pyqstore.IOFailure) and e.errno == 28
    for code in range(lib.QS_LAST_ERRCODE, lib.QS_NOTFOUND + 1):
        e = error_for(code, "op")
        assert isinstance(e, Error) and e.code == code and str(e)


# -------------------------------------------------------------------- threads


def _run_threads(targets):
    errors = []

    def wrap(fn, *args):
        def run():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(fn, *args)) for fn, *args in targets]
    for t in threads:
        t.start()
    return threads, errors


def test_threads_writers_and_readers(path):
    W, T, R = 4, 40, 5
    c = pyqstore.open(path, "n", sync=False)

    def value(k):
        return b"v:" + k * 3

    def writer(w):
        for t in range(T):
            with c.transaction():
                for r in range(R):
                    k = b"w%d-t%03d-r%d" % (w, t, r)
                    c.put(k, value(k))
                c.putdup(b"log", b"%d-%03d" % (w, t))

    done = threading.Event()

    def reader(seed):
        rnd = random.Random(seed)
        while not done.is_set():
            logs = c.getdup(b"log")
            for entry in logs[-10:]:
                w, t = entry.split(b"-")
                for r in range(R):
                    k = b"w%s-t%s-r%d" % (w, t, r)
                    assert c.get(k) == value(k), k
            k = b"w%d-t%03d-r%d" % (rnd.randrange(W), rnd.randrange(T), rnd.randrange(R))
            v = c.get(k)
            assert v is None or v == value(k)
            for k2, v2 in c.items(start=b"w%d" % rnd.randrange(W)):
                assert v2 == value(k2)
                if rnd.random() < 0.05:
                    break

    writers, werr = _run_threads([(writer, w) for w in range(W)])
    readers, rerr = _run_threads([(reader, s) for s in range(3)])
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert werr == [] and rerr == []
    assert len(c) == W * T * R + W * T
    logs = c.getdup(b"log")
    for w in range(W):
        mine = [e for e in logs if e.startswith(b"%d-" % w)]
        assert mine == [b"%d-%03d" % (w, t) for t in range(T)]
    c.check()
    c.close()


def test_uncommitted_invisible_to_other_thread(casket):
    casket.put(b"x", b"old")
    written = threading.Event()
    checked = threading.Event()
    seen = {}

    def writer():
        with casket.transaction():
            casket.put(b"x", b"new")
            casket.put(b"y", b"1")
            seen["own"] = (casket.get(b"x"), casket.get(b"y"), casket.in_transaction)
            written.set()
            checked.wait()

    threads, errs = _run_threads([(writer,)])
    written.wait()
    try:
        assert not casket.in_transaction
        assert casket.get(b"x") == b"old"
        assert casket.get(b"y") is None
        assert casket.count(b"y") == 0
        assert b"y" not in casket
        assert casket.getdup(b"x") == [b"old"]
        assert list(casket.items()) == [(b"x", b"old")]
        assert list(casket.items(reverse=True)) == [(b"x", b"old")]
        assert len(casket) == 1
    finally:
        checked.set()
        threads[0].join()
    assert errs == []
    assert seen["own"] == (b"new", b"1", True)
    assert list(casket.items()) == [(b"x", b"new"), (b"y", b"1")]


def test_commit_from_other_thread(casket):
    casket.begin()
    casket.put(b"a", b"1")
    results = []

    def other():
        results.append(casket.in_transaction)
        for fn in (casket.commit, casket.abort):
            try:
                fn()
            except TransactionError:
                results.append("TransactionError")

    threads, errs = _run_threads([(other,)])
    threads[0].join()
    assert errs == []
    assert results == [False, "TransactionError", "TransactionError"]
    assert casket.in_transaction
    casket.commit()
    assert casket[b"a"] == b"1"


def test_writer_waits_for_other_transaction(casket):
    casket.begin()
    casket.put(b"a", b"mine")

    def other():
        casket.put(b"b", b"theirs")
        casket.putdup(b"a", b"theirs")

    threads, errs = _run_threads([(other,)])
    casket.put(b"c", b"mine")
    casket.commit()
    threads[0].join()
    assert errs == []
    assert casket.getdup(b"a") == [b"mine", b"theirs"]
    assert casket[b"b"] == b"theirs"
    assert casket[b"c"] == b"mine"


def test_close_while_other_thread_waits(path):
    c = pyqstore.open(path)
    c.begin()
    c.put(b"a", b"aborted")
    outcome = []

    def other():
        try:
            c.put(b"b", b"committed")
            outcome.append("ok")
        except ClosedError:
            outcome.append("closed")

    threads, errs = _run_threads([(other,)])
    c.close()  # aborts our transaction, waits for the other thread's call
    threads[0].join()
    assert errs == []
    with pyqstore.open(path, "r") as c2:
        assert c2.get(b"a") is None
        if outcome == ["ok"]:
            assert c2[b"b"] == b"committed"
        else:
            assert outcome == ["closed"]
            assert c2.get(b"b") is None


def test_close_while_threads_busy(path):
    c = pyqstore.open(path, "n", sync=False)
    for i in range(200):
        c.put(b"%03d" % i, b"v%d" % i)
    warmed = threading.Barrier(5)
    outcomes = []

    def worker(seed):
        rnd = random.Random(seed)
        n = 0
        try:
            while True:
                op = rnd.randrange(6)
                k = b"%03d" % rnd.randrange(300)
                if op == 0:
                    c.put(k, b"w")
                elif op == 1:
                    v = c.get(k)
                    assert v is None or v in (b"w", b"v%d" % int(k)), v
                elif op == 2:
                    for _ in zip(range(50), c.items(start=k, reverse=rnd.random() < 0.5)):
                        pass
                elif op == 3:
                    with c.transaction():
                        c.putdup(k, b"w")
                        c.out(k)
                elif op == 4:
                    c.count(k)
                else:
                    len(c)
                n += 1
                if n == 200:
                    warmed.wait()
        except ClosedError:
            outcomes.append("closed")

    threads, errs = _run_threads([(worker, s) for s in range(4)])
    warmed.wait()
    c.close()
    for t in threads:
        t.join()
    assert errs == []
    assert outcomes == ["closed"] * 4
    with pyqstore.open(path, "r") as c2:
        c2.check()
        assert len(c2) >= 200


def test_spilled_transaction_abort_and_commit(path):
    with pyqstore.open(path, "n", sync=False, cache_size=64 * 1024) as c:
        base = {b"base%03d" % i: [b"b" * 500] for i in range(100)}
        with c.transaction():
            for k, vs in base.items():
                c.put(k, vs[0])
        before = list(c.items())
        c.begin()
        for i in range(2000):
            c.putdup(b"spill%02d" % (i % 37), b"s%d" % i * 60)
        for i in range(0, 100, 2):
            c.outlist(b"base%03d" % i)
        assert c.stats()["spilled_pages"] > 0
        assert c.count(b"spill00") == len(range(0, 2000, 37))
        c.abort()
        assert list(c.items()) == before
        c.check()
        expect = {k: list(v) for k, v in base.items()}
        with c.transaction():
            for i in range(2000):
                k = b"spill%02d" % (i % 37)
                c.putdup(k, b"s%d" % i * 60)
                expect.setdefault(k, []).append(b"s%d" % i * 60)
        assert list(c.items()) == model_items(expect)
        c.check()
    with pyqstore.open(path, "r") as c:
        assert list(c.items()) == model_items(expect)
        c.check()


def test_compact_with_concurrent_readers(path):
    c = pyqstore.open(path, "n", sync=False)
    expect = {}
    with c.transaction():
        for i in range(2000):
            k = b"r%05d" % i
            c.put(k, k * 20)
            expect[k] = [k * 20]
    with c.transaction():
        for i in range(0, 2000, 3):
            k = b"r%05d" % i
            c.outlist(k)
            del expect[k]
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for k, v in c.items():
                assert v == k * 20
            assert c.get(b"r00001") == b"r00001" * 20

    readers, errs = _run_threads([(reader,) for _ in range(2)])
    try:
        for _ in range(3):
            c.compact()
            c.put(b"r00001", b"r00001" * 20)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert errs == []
    assert list(c.items()) == model_items(expect)
    c.check()
    c.close()


@pytest.mark.parametrize("kw, match", [
    ({"lock_timeout": "5"}, r"^lock_timeout must be a number of seconds, not str"),
    ({"lock_timeout": None}, r"^lock_timeout must be a number of seconds, not NoneType"),
    ({"cache_size": "1"}, r"^cache_size must be an int or None, not str"),
    ({"checkpoint_size": 1.5}, r"^checkpoint_size must be an int or None, not float"),
])
def test_open_names_the_argument_of_the_wrong_type(path, kw, match):
    """open(lock_timeout="5") failed with "'<' not supported between
    instances of 'str' and 'int'", naming no argument."""
    with pytest.raises(TypeError, match=match):
        pyqstore.open(path, "c", **kw)
    assert not os.path.exists(path)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 100_000])
def test_get_returns_values_either_side_of_the_scratch_buffer(casket, size):
    # get copies a value that fits into its thread's buffer, and asks the
    # library for its own copy of one that does not
    value = bytes(random.Random(size).getrandbits(8) for _ in range(size))
    casket[b"k"] = value
    assert casket.get(b"k") == value and casket[b"k"] == value
    assert casket.get(memoryview(b"k")) == value and casket.get("k") == value
    assert casket.get(b"gone", b"default") == b"default"


def test_gets_in_threads_each_see_their_own_values(casket):
    # each thread has its own buffer: values read at once in several threads
    # (the GIL is released while the library copies) never mix
    values = {b"k%d" % i: bytes([i]) * (1 + 997 * i) for i in range(8)}
    with casket.transaction():
        for k, v in values.items():
            casket[k] = v
    wrong: list[bytes] = []

    def read(keys: list[bytes]) -> None:
        for _ in range(3000):
            for k in keys:
                if casket.get(k) != values[k]:
                    wrong.append(k)

    threads = [threading.Thread(target=read, args=([k for k in values if k[-1] % 4 == j],))
               for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
