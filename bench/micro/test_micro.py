"""pyqstore's micro-benchmarks (pytest-benchmark): the operations a flow
node repeats, each also checked for its result so that a run with
--benchmark-disable (CI) is a test that they still work.

    python -m pytest bench/micro                        # measure, print
    python -m pytest bench/micro --benchmark-storage=file://bench/micro/baseline \\
        --benchmark-compare --benchmark-compare-fail=median:25%
                                                        # against the baseline

(bench/README.md, "Micro-benchmarks").  Timings are never asserted: the
CI regression guard is the instruction count (bench/callgrind_check.py)."""
from __future__ import annotations

import os

import pytest

import pyqstore
from pyqstore._qstore import lib

PAYLOAD = b"x" * 36


@pytest.fixture
def casket(tmp_path):
    c = pyqstore.open(os.path.join(str(tmp_path), "micro.qs"), "n", sync=False)
    yield c
    c.close()


@pytest.fixture
def synced(tmp_path):
    c = pyqstore.open(os.path.join(str(tmp_path), "synced.qs"), "n", sync=True)
    yield c
    c.close()


def test_put(benchmark, casket):
    """One autocommitted put, sync off."""
    benchmark(casket.put, b"key", PAYLOAD)
    assert casket.get(b"key") == PAYLOAD


def test_put_many(benchmark, casket):
    """put_many of 1000 items: one transaction."""
    q = casket.queue("port")
    batch = [PAYLOAD] * 1000
    benchmark(q.put_many, batch)
    assert len(q) % 1000 == 0 and len(q) >= 1000


def test_get_many(benchmark, casket):
    """get_many(1000) from a queue of 1000 items (refilled, untimed)."""
    q = casket.queue("port")
    got: list[list[bytes]] = []

    def fill():
        q.put_many([PAYLOAD] * 1000)
        return (), {}

    benchmark.pedantic(lambda: got.append(q.get_many(1000)), setup=fill, rounds=50)
    assert got and all(len(g) == 1000 for g in got) and len(q) == 0


def test_reserve_ack(benchmark, casket):
    """reserve an item and ack it (two commits)."""
    q = casket.queue("port")

    def fill():
        q.put(PAYLOAD)
        return (), {}

    def reserve_ack():
        item = q.reserve(timeout=0)
        item.ack()
        return item

    item = benchmark.pedantic(reserve_ack, setup=fill, rounds=200)
    assert item.payload == PAYLOAD and len(q) == 0


def test_one_synced_commit(benchmark, synced):
    """One put committed with sync on: one fdatasync."""
    before = synced.stats()["syncs"]
    calls = []

    def put():
        synced.put(b"key", PAYLOAD)
        calls.append(1)

    benchmark.pedantic(put, rounds=30)
    assert calls and synced.stats()["syncs"] - before >= len(calls)


def test_cursor_scan(benchmark, casket):
    """Iterate 10,000 records in key order."""
    with casket.transaction():
        for i in range(10_000):
            casket.put(b"k%06d" % i, PAYLOAD)
    n = benchmark(lambda: sum(1 for _ in casket.items()))
    assert n == 10_000


def test_cffi_crossing(benchmark, casket):
    """A C call that does no work: what crossing into the extension costs."""
    h = casket._c
    assert benchmark(lib.qs_in_transaction, h) == 0


def _get_one(benchmark, q):
    got: list[bytes] = []

    def fill():
        q.put(PAYLOAD)
        return (), {}

    benchmark.pedantic(lambda: got.append(q.get(timeout=0)), setup=fill, rounds=400)
    return got


def test_get_none_reserved(benchmark, casket):
    """get of one item from a queue with nothing reserved: the reference
    for the next."""
    q = casket.queue("port")
    got = _get_one(benchmark, q)
    assert got and all(g == PAYLOAD for g in got) and len(q) == 0


def test_get_behind_reserved(benchmark, casket):
    """get of one item behind 5,000 reserved 10 KB items (issue 17's line:
    at most 3x the get with none reserved): the run of reserved ids is
    sought past, not stepped over."""
    q = casket.queue("port")
    q.put_many([b"r" * 10240] * 5000)
    held = q.reserve_many(5000, timeout=0)
    got = _get_one(benchmark, q)
    assert got and all(g == PAYLOAD for g in got)
    assert len(held) == 5000 and len(q.pending()) == 5000 and len(q) == 0
