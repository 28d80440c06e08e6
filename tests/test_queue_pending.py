"""Batches of reservations, the pending list and claims.

* ``q.reserve_many(n, timeout=None, lease=None)`` returns a :class:`Batch`
  reserved in one call: iterable, ``len()``, ``ack()`` / ``release()`` of
  all of it in one call, a context manager (ack on success, release on an
  exception), usable inside ``casket.transaction()``.
* ``q.ack_many(items)`` / ``q.release_many(items)``: items of one batch.
* ``q.pending()``: the reservations of every handle in every process,
  with the holder's pid and handle, reserve time and lease end.
* ``q.claim(min_idle, n)`` takes over items held for at least min_idle
  seconds; the former holder's ack of them raises NotReservedError.
"""
from __future__ import annotations

import math
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyqstore
from _procs import start_python


def test_reserve_many_batch(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b", b"c", b"d"])
    b = q.reserve_many(3, timeout=0)
    assert isinstance(b, pyqstore.Batch)
    assert len(b) == 3 and [it.payload for it in b] == [b"a", b"b", b"c"]
    assert b.payloads == [b"a", b"b", b"c"] and b[0].id < b[1].id < b[2].id
    assert len(q) == 1
    b.release()
    assert len(q) == 4
    with pytest.raises(pyqstore.NotReservedError, match="nothing was done"):
        b.ack()
    b = q.reserve_many(10, timeout=0)
    assert len(b) == 4
    b.ack()
    assert len(q) == 0 and list(q.iter()) == []
    with pytest.raises(pyqstore.Empty):
        q.reserve_many(2, timeout=0)


def test_batch_context_manager(casket):
    q = casket.queue("q", codec="json")
    q.put_many([1, 2, 3])
    with q.reserve_many(2, timeout=0) as b:
        assert b.payloads == [1, 2]
    assert q.get_many(5) == [3]
    q.put_many([4, 5])
    with pytest.raises(RuntimeError):
        with q.reserve_many(2, timeout=0) as b:
            raise RuntimeError("boom")
    assert q.get_many(5) == [4, 5]      # released, back in place


def test_batch_in_transaction(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b", b"c"])
    with casket.transaction():
        with q.reserve_many(2) as b:
            assert len(b) == 2
        assert len(q) == 1
    assert q.get_many(5) == [b"c"]
    q.put_many([b"x", b"y"])
    with pytest.raises(KeyError):
        with casket.transaction():
            b = q.reserve_many(2)
            b.ack()
            raise KeyError("abort")
    assert q.get_many(5) == [b"x", b"y"]   # the abort undid reserve and ack


def test_ack_many_release_many(casket):
    q = casket.queue("q")
    q.put_many([b"%d" % i for i in range(6)])
    b1 = q.reserve_many(3, timeout=0)
    b2 = q.reserve_many(3, timeout=0)
    q.release_many(b1.items[:2])
    assert len(q) == 2
    q.ack_many(reversed([b1[2]]))
    q.ack_many(b2)
    assert q.get_many(9) == [b"0", b"1"]


def test_ack_many_bad_input(casket, tmp_path):
    q = casket.queue("q")
    other = casket.queue("other")
    q.put_many([b"1", b"2", b"3"])
    other.put(b"o")
    b1 = q.reserve_many(2, timeout=0)
    b2 = q.reserve_many(1, timeout=0)
    ob = other.reserve_many(1, timeout=0)
    with pytest.raises(ValueError, match=f"item {b2[0].id} is of another batch"):
        q.ack_many([b1[0], b2[0]])
    with pytest.raises(ValueError, match="belongs to queue 'other'"):
        q.ack_many([b1[0], ob[0]])
    with pytest.raises(ValueError, match="given twice"):
        q.release_many([b1[0], b1[0]])
    with pytest.raises(TypeError, match="takes Items"):
        q.ack_many([b1[0].id])
    assert len(q) == 0 and len(other) == 0      # nothing was done
    b1[0].ack()
    with pytest.raises(pyqstore.NotReservedError, match=r"one of items \[1, 2\]"):
        q.ack_many(b1)
    assert [p.id for p in q.pending()] == [2, 3]    # all or none
    q.ack_many([])  # nothing to do


@pytest.mark.parametrize("n", [0, -1])
def test_reserve_many_bad_counts(casket, n):
    q = casket.queue("q")
    q.put(b"x")
    with pytest.raises(ValueError, match="n must"):
        q.reserve_many(n)
    with pytest.raises(ValueError, match="n must"):
        q.claim(0, n)
    with pytest.raises(TypeError):
        q.reserve_many("2")
    with pytest.raises(ValueError, match="lease"):
        q.reserve_many(1, lease=-1)
    with pytest.raises(ValueError, match="lease"):
        q.reserve_many(1, lease=math.nan)


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, -math.inf])
def test_claim_bad_min_idle(casket, bad):
    q = casket.queue("q")
    q.put(b"x")
    q.reserve(timeout=0)
    with pytest.raises(ValueError, match="min_idle must be a non-negative number"):
        q.claim(min_idle=bad)
    with pytest.raises(TypeError, match="min_idle must be a number"):
        q.claim(min_idle="1")
    assert len(q.pending()) == 1


def test_pending_fields(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    assert q.pending() == []
    t0 = time.monotonic()
    it = q.reserve(timeout=0, lease=30)
    b = q.reserve_many(1, timeout=0)
    p = q.pending()
    assert [x.id for x in p] == [it.id, b[0].id]
    assert all(x.pid == os.getpid() and x.mine for x in p)
    assert p[0].handle == p[1].handle
    assert t0 <= p[0].reserved_at <= time.monotonic()
    assert p[0].lease_ends is not None and 29 < p[0].lease_ends - p[0].reserved_at <= 30.01
    assert p[1].lease_ends is None
    assert p[0].idle >= 0
    assert [x.deliveries for x in p] == [1, 1]
    it.release()
    again = q.reserve(timeout=0)
    assert again.id == it.id
    assert [x.deliveries for x in q.pending()] == [2, 1]   # counted per reserve
    it = again
    it.release()
    assert [x.id for x in q.pending()] == [b[0].id]


def test_pending_in_transaction_shows_committed(casket):
    q = casket.queue("q")
    q.put_many([b"a", b"b"])
    with casket.transaction():
        b = q.reserve_many(1)
        assert q.pending() == []
    assert [x.id for x in q.pending()] == [b[0].id]


def test_claim_between_handles(path):
    a = pyqstore.open(path, "n", sync=False)
    c = pyqstore.open(path, "w", sync=False)
    try:
        qa, qc = a.queue("q"), c.queue("q")
        qa.put_many([b"1", b"2", b"3"])
        held = qa.reserve_many(3, timeout=0)
        assert len(qc.claim(min_idle=60)) == 0
        time.sleep(0.05)
        got = qc.claim(min_idle=0.04, n=2)
        assert got.payloads == [b"1", b"2"]
        p = qc.pending()
        assert [x.mine for x in p] == [True, True, False]
        assert p[0].handle != p[2].handle
        with pytest.raises(pyqstore.NotReservedError):
            held[0].ack()
        with pytest.raises(pyqstore.NotReservedError):
            held.release()
        held[2].ack()
        got.ack()
        assert qa.pending() == [] and len(qa) == 0
        # a claim inside a transaction that aborts leaves the holder its items
        qa.put(b"4")
        it = qa.reserve(timeout=0)
        with pytest.raises(ZeroDivisionError):
            with c.transaction():
                assert qc.claim(0).payloads == [b"4"]
                1 / 0
        it.ack()
    finally:
        c.close()
        a.close()


def test_claim_of_priority_and_released_delayed_items(casket):
    # Priority items live in their own runs (qorder.c): a claim must find
    # them there, as ack does, not only in the plain run.
    q = casket.queue("q")
    q.put(b"plain")
    q.put(b"urgent", priority=5)
    held = q.reserve_many(2, timeout=0)
    assert held.payloads == [b"urgent", b"plain"]
    got = q.claim(min_idle=0, n=2)
    assert sorted(got.payloads) == [b"plain", b"urgent"]
    got.ack()
    assert len(q) == 0 and q.pending() == []


def test_claim_then_ack_in_transaction(path):
    """A claimed item acknowledged in the claiming transaction leaves no
    reservation behind: the holder's entry goes with the item."""
    a = pyqstore.open(path, "n", sync=False)
    c = pyqstore.open(path, "w", sync=False)
    try:
        qa, qc = a.queue("q"), c.queue("q")
        qa.put_many([b"1", b"2"])
        held = qa.reserve_many(2, timeout=0)
        with c.transaction():
            got = qc.claim(0, n=1)
            got.ack()
        assert [p.id for p in qa.pending()] == [held[1].id]
        assert len(qa) == 0 and len(qc) == 0
        with pytest.raises(pyqstore.NotReservedError):
            held[0].ack()
        held[1].release()
        assert qa.get_many(5) == [b"2"]
    finally:
        c.close()
        a.close()


HOLDER = r"""
import sys, pyqstore
c = pyqstore.open(sys.argv[1], "w", sync=False)
q = c.queue("q")
b = q.reserve_many(2, timeout=5)
print(" ".join(str(i.id) for i in b), flush=True)
sys.stdin.readline()
out = []
for it in b:
    try:
        it.ack()
        out.append("acked")
    except pyqstore.NotReservedError as e:
        out.append("NotReserved")
print(" ".join(out), flush=True)
c.close()
"""


def test_pending_and_claim_across_processes(path):
    c = pyqstore.open(path, "n", sync=False)
    q = c.queue("q")
    q.put_many([b"a", b"b", b"c"])
    proc = start_python(HOLDER, path, stdin=True, text=True)
    try:
        ids = [int(x) for x in proc.stdout.readline().split()]
        assert len(ids) == 2, proc.stderr.read()
        p = q.pending()
        assert [x.id for x in p] == ids
        assert all(x.pid == proc.pid and not x.mine for x in p)
        time.sleep(0.05)
        got = q.claim(min_idle=0.04, n=1)
        assert got.ids == ids[:1] and got.payloads == [b"a"]
        assert [(x.id, x.mine) for x in q.pending()] == [(ids[0], True), (ids[1], False)]
        out, err = proc.communicate("go\n", timeout=30)
        assert out.split() == ["NotReserved", "acked"], err
        got.ack()
        assert q.pending() == [] and q.get_many(5) == [b"c"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        c.close()


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12),
       payload=st.integers(1, 300), in_txn=st.booleans(), rounds=st.integers(1, 3))
def test_reserves_across_many_leaves_count_each_delivery_once(tmp_path_factory, sizes,
                                                               payload, in_txn, rounds):
    # A reserve rewrites each item's record (its count) and walks on from
    # where the rewrite left the path: batches that cross leaf boundaries,
    # items reserved again after a release, payloads that fill leaves.
    c = pyqstore.open(str(tmp_path_factory.mktemp("rl") / "r.qs"), "n", sync=False)
    try:
        q = c.queue("q")
        want = [b"%06d" % i + b"x" * payload for i in range(sum(sizes))]
        q.put_many(want)
        for r in range(1, rounds + 1):
            batches = []
            for n in sizes:
                if in_txn:
                    with c.transaction():
                        batches.append(q.reserve_many(n))
                else:
                    batches.append(q.reserve_many(n))
            got = [p for b in batches for p in b.payloads]
            assert got == want
            assert [it.deliveries for b in batches for it in b] == [r] * len(want)
            c.check()
            for b in batches:
                b.release()
        assert [it.deliveries for it in q.reserve_many(len(want))] == [rounds + 1] * len(want)
        c.check()
    finally:
        c.close()


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12),
       payload=st.integers(1, 300), held=st.integers(0, 300))
def test_takes_in_a_transaction_walk_past_reserved_items_across_leaves(tmp_path_factory, sizes,
                                                                       payload, held):
    # get_many inside a transaction reserves without counting and steps on
    # to the next record itself; reserved items ahead must be skipped
    c = pyqstore.open(str(tmp_path_factory.mktemp("tl") / "t.qs"), "n", sync=False)
    try:
        q = c.queue("q")
        want = [b"%06d" % i + b"y" * payload for i in range(held + sum(sizes))]
        q.put_many(want)
        hold = q.reserve_many(held) if held else None
        with c.transaction():
            got = [p for n in sizes for p in q.get_many(n)]
        assert got == want[held:]
        assert len(q) == 0 and len(q.pending()) == held   # len counts what is available
        c.check()
        if hold is not None:
            hold.release()
            assert q.get_many(held + 1) == want[:held]
        c.check()
    finally:
        c.close()


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from(["plain", "shared", "prio"]), min_size=1, max_size=600),
       picks=st.data(), payload=st.integers(1, 200))
def test_ack_many_of_any_subset_removes_exactly_those(tmp_path_factory, kinds, picks, payload):
    # ack_many walks on from the record after the last acked one when that
    # is the next id; a subset with gaps, shared payloads (publish) and
    # priority runs make it seek instead
    c = pyqstore.open(str(tmp_path_factory.mktemp("am") / "a.qs"), "n", sync=False)
    try:
        q = c.queue("q")
        for i, kind in enumerate(kinds):
            p = b"%06d" % i + b"z" * payload
            if kind == "shared":
                c.publish(p, ["q", "other"])
            elif kind == "prio":
                q.put(p, priority=1)
            else:
                q.put(p)
        batch = q.reserve_many(len(kinds))
        items = list(batch)
        chosen = picks.draw(st.lists(st.booleans(), min_size=len(items), max_size=len(items)))
        acked = [it for it, yes in zip(items, chosen) if yes]
        if acked:
            q.ack_many(acked)
        rest = [it for it, yes in zip(items, chosen) if not yes]
        if rest:
            q.release_many(rest)
            assert sorted(q.get_many(len(kinds) + 1)) == sorted(it.payload for it in rest)
        assert len(q) == 0 and not q.pending()
        assert len(c.queue("other")) == kinds.count("shared")
        c.check()
    finally:
        c.close()


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["reserve", "ack", "release", "get", "peek",
                                                 "put"]),
                                st.integers(1, 60), st.integers(0, 10 ** 6)),
                      min_size=1, max_size=40),
       levels=st.integers(1, 3))
def test_takes_behind_runs_of_reservations_match_a_model(tmp_path_factory, steps, levels):
    """Reservations by another handle, in long ascending batches with holes
    acked or released out of order, are sought past as runs (qres.h), in
    one priority or across several: every get and peek sees what a model
    sees, the unreserved items highest priority first and then by id, none
    skipped and none reserved."""
    path = str(tmp_path_factory.mktemp("runs") / "r.qs")
    with pyqstore.open(path, "n", sync=False) as mine, pyqstore.open(path, sync=False) as other:
        q, oq = mine.queue("q"), other.queue("q")
        prio: dict[int, int] = {}      # the model: id -> priority of the items there
        payload: dict[int, bytes] = {}
        held: dict[int, object] = {}   # id -> the other handle's Item

        def put(n: int) -> None:
            for k in range(n):
                p, body = k % levels, b"%d/%d" % (len(payload), k)
                i = q.put(body, priority=p)
                prio[i], payload[i] = p, body

        def free() -> list[int]:
            return sorted((i for i in prio if i not in held), key=lambda i: (-prio[i], i))

        put(200)
        for what, n, pick in steps:
            want = free()[:n]
            if what == "reserve":
                got = oq.reserve_many(n, timeout=0) if want else []
                assert [it.id for it in got] == want
                held.update((it.id, it) for it in got)
            elif what in ("ack", "release") and held:
                keys = sorted(held)
                for i in dict.fromkeys(keys[(pick + 7 * k) % len(keys)]
                                       for k in range(min(n, len(keys)))):
                    it = held.pop(i)
                    if what == "ack":
                        it.ack()
                        del prio[i]
                    else:
                        it.release()
            elif what == "get":
                assert q.get_many(n) == [payload[i] for i in want]
                for i in want:
                    del prio[i]
            elif what == "peek":
                assert q.peek_many(n) == [payload[i] for i in want]
            elif what == "put":
                put(n)
            assert len(q) == len(prio) - len(held)
