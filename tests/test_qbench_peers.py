"""qstore-bench's peers (pyqstore/qbench/peers_*.py) against their real
components: a tiny run of every experiment each adapter supports and the
correctness experiment.  A missing component skips with its install
command; .ci/run installs them all."""
from __future__ import annotations

import collections
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyqstore.qbench import backends as bk
from test_qbench import run


def _backend(name: str) -> bk.Backend:
    return bk.by_name([name])[0]


def needs(*names: str) -> pytest.MarkDecorator:
    """Skips unless every named backend is usable here, saying how to install it."""
    missing = [f"{n}: {why}; install: {_backend(n).hint}"
               for n in names if (why := _backend(n).unavailable())]
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing))


def _sweep(tmp_path: object, names: str, *extra: str) -> dict:
    code, data, out = run(["sweep", "--max", "2", "--reps", "1", "-b", names, *extra], tmp_path)
    assert code == 0, out
    got = {(r["backend"], r["n"]) for r in data["results"]}
    assert got == {(b, n) for b in names.split(",") for n in (1, 10, 100)}, out
    assert all(r["seconds"]["min"] > 0 for r in data["results"])
    return data


def _correct(tmp_path: object, names: str, checks: dict[str, str]) -> None:
    code, data, out = run(["correctness", "--count", "60", "--max-value", "70000", "-b", names],
                          tmp_path)
    assert code == 0, out
    assert data["ok"] is True
    by = {r["backend"]: r for r in data["results"]}
    assert set(by) == set(names.split(","))
    for r in by.values():
        assert r["mismatches"] == 0 and r["checks"] == checks, r


def _perf(tmp_path: object, names: str) -> None:
    code, data, out = run(["perf", "-x", "2", "-n", "200", "-l", "16", "--reps", "1", "-b",
                           names], tmp_path)
    assert code == 0, out
    assert [r["backend"] for r in data["results"]] == ["null"] + names.split(",")
    assert all(r["writes_per_s"] > 0 and r["reads_per_s"] > 0 for r in data["results"])


def _tune(tmp_path: object, name: str) -> None:
    code, data, out = run(["tune", "-b", name, "--batches", "1,4,16", "--writers", "1,2,3",
                           "--duration", "0.05"], tmp_path)
    assert code == 0, out
    assert {(c["writers"], c["batch"]) for c in data["cells"]} == {
        (w, b) for w in (1, 2, 3) for b in (1, 4, 16)}
    assert all(c["items_per_s"] > 0 for c in data["cells"])


ALL_CHECKS = {"key-value": "checked", "duplicate order": "checked", "queue FIFO": "checked"}

# ------------------------------------------------------------ rocksdb, leveldb

LSM = "rocksdb,leveldb"


@needs("rocksdb", "leveldb")
def test_lsm_sweep_both_layers(tmp_path):
    _sweep(tmp_path, LSM)
    _sweep(tmp_path, LSM, "--layer", "queue", "--no-sync")


@needs("rocksdb", "leveldb")
def test_lsm_correctness(tmp_path):
    _correct(tmp_path, LSM, ALL_CHECKS)


@needs("rocksdb", "leveldb")
def test_lsm_perf(tmp_path):
    _perf(tmp_path, LSM)


@needs("rocksdb")
def test_rocksdb_tune(tmp_path):
    _tune(tmp_path, "rocksdb")


@needs("leveldb")
def test_leveldb_tune(tmp_path):
    _tune(tmp_path, "leveldb")


@needs("rocksdb", "leveldb")
@pytest.mark.parametrize("name", LSM.split(","))
def test_lsm_transaction_is_one_batch_and_survives_reopen(tmp_path, name):
    from pyqstore.qbench import peers_lsm

    b = _backend(name)
    s = b.open(str(tmp_path), True)
    s.begin()
    s.putdup(b"q", b"1")
    s.qput("port", b"a")
    # nothing is written before commit: the batch is applied at once
    assert s.getdup(b"q") == [] and s.qlen("port") == 0
    s.commit()
    assert s.getdup(b"q") == [b"1"] and s.qlen("port") == 1
    s.close()
    again = peers_lsm._LsmStore(peers_lsm._Shared(b.engine(os.path.join(str(tmp_path), name),
                                                           True)))
    try:
        assert again.getdup(b"q") == [b"1"] and again.qget_many("port", 5) == [b"a"]
    finally:
        again.close()


_ops = st.lists(st.one_of(
    st.tuples(st.just("putdup"), st.binary(max_size=6), st.binary(max_size=8)),
    st.tuples(st.just("put"), st.binary(max_size=6), st.binary(max_size=8)),
    st.tuples(st.just("qput"), st.sampled_from(["a", "ab", "b"]), st.binary(max_size=8)),
    st.tuples(st.just("qget"), st.sampled_from(["a", "ab", "b"]), st.integers(0, 4))),
    max_size=40)


@needs("rocksdb", "leveldb")
@pytest.mark.parametrize("name", LSM.split(","))
@settings(max_examples=25, deadline=None)
@given(ops=_ops)
def test_lsm_layout_matches_a_model(tmp_path_factory, name, ops):
    """Keys that are prefixes of each other ("a", "ab", b"" and b"\\0")
    never see each other's duplicates or items."""
    s = _backend(name).open(str(tmp_path_factory.mktemp(name)), False)
    dups: dict[bytes, list[bytes]] = collections.defaultdict(list)
    kv: dict[bytes, bytes] = {}
    queues: dict[str, collections.deque[bytes]] = collections.defaultdict(collections.deque)
    try:
        for op, k, v in ops:
            if op == "putdup":
                s.putdup(k, v)
                dups[k].append(v)
            elif op == "put":
                s.put(k, v)
                kv[k] = v
            elif op == "qput":
                s.qput(k, v)
                queues[k].append(v)
            else:
                want = [queues[k].popleft() for _ in range(min(v, len(queues[k])))]
                assert s.qget_many(k, v) == want
        for k, vs in dups.items():
            assert s.getdup(k) == vs
        for k, v in kv.items():
            assert s.get(k) == v
        for name_, q in queues.items():
            assert s.qlen(name_) == len(q)
    finally:
        s.close()
