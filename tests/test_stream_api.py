"""Streams with consumer groups (pyqstore/_stream.py, the "streams" section
of csrc/qstore.h): the API, retention, transactions, bad input, blocking
reads woken from another process, and consumers in several processes."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import pyqstore
from _procs import join_ok, kill_child, recv


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# ================================================================== the API


def test_append_read_len_keep_ids(casket):
    s = casket.stream("s")
    a = s.append(b"a")
    ids = s.append_many([b"b", bytearray(b"c"), memoryview(b"d"), "e"])
    assert ids == list(range(a + 1, a + 5))
    assert len(s) == 5
    items = s.read()
    assert [i.id for i in items] == [a] + ids
    assert [i.payload for i in items] == [b"a", b"b", b"c", b"d", b"e"]
    # reading does not consume; start_id and n select
    assert s.read(ids[1], 2) == [(ids[1], b"c"), (ids[2], b"d")]
    assert len(s) == 5
    # ids stay unique beside a queue's
    qid = casket.queue("q").put(b"x")
    assert qid not in [a] + ids
    assert s.append(b"f") > qid


def test_queue_puts_around_group_reads_keep_the_tree_sound(casket):
    """A stream's records share the queues' tree, but its writes did not
    tell queue.c: the position a queue remembers for its next put pointed
    into a page that a group read's pending entry had reshaped, and the
    put after it overwrote the queue's first item ("page 1: keys out of
    order" from check)."""
    s = casket.stream("log")
    q = casket.queue("jobs")
    s.append(b"")
    q.put(b"0")
    g = s.group("g", start="first")
    assert [x.payload for x in g.read(1)] == [b""]
    q.put(b"1")
    s.append(b"x")
    g.ack([1])
    q.put(b"2")
    assert list(q.iter()) == [b"0", b"1", b"2"]
    casket.check()


def test_each_group_sees_every_item_consumers_share(casket):
    s = casket.stream("s")
    ids = s.append_many([b"%d" % i for i in range(10)])
    g1, g2 = s.group("g1"), s.group("g2")
    a = g1.read(4, consumer="a")
    b = g1.read(100, consumer="b")
    assert [x.id for x in a] + [x.id for x in b] == ids       # shared, none twice
    assert g1.read(5, consumer="a") == []                       # nothing new
    assert [x.id for x in g2.read(100, consumer="z")] == ids    # the other group: all
    pend = g1.pending()
    assert [p.id for p in pend] == ids
    assert [p.consumer for p in pend] == ["a"] * 4 + ["b"] * 6
    assert all(p.deliveries == 1 for p in pend)


def test_group_start_first_last_and_id(casket):
    s = casket.stream("s")
    ids = s.append_many([b"1", b"2", b"3"])
    assert [x.id for x in s.group("f", start="first").read(10)] == ids
    last = s.group("l", start="last")
    assert last.read(10) == []
    new = s.append(b"4")
    assert [x.id for x in last.read(10)] == [new]
    assert [x.id for x in s.group("i", start=ids[1]).read(10)] == ids[1:] + [new]
    # an existing group keeps its position whatever start says
    assert s.group("l", start="first").read(10) == []


def test_ack_and_retention_by_every_group(casket):
    s = casket.stream("s")
    ids = s.append_many([b"a", b"b", b"c"])
    g1, g2 = s.group("g1"), s.group("g2")
    g1.read(3)
    g2.read(2)
    g1.ack(ids)
    assert len(s) == 3                       # g2 has not acknowledged any
    g2.ack([ids[1]])
    assert len(s) == 3                       # g2's oldest pending is ids[0]
    g2.ack(ids[0])
    assert [x.id for x in s.read()] == [ids[2]]   # g2 was never handed ids[2]
    assert g1.pending() == [] and g2.pending() == []
    with pytest.raises(pyqstore.TrimmedError, match=f"id {ids[0]} was removed"):
        s.read(ids[0])
    assert [x.id for x in s.read(0)] == [ids[2]]
    assert [x.id for x in s.read(ids[2])] == [ids[2]]


def test_stream_without_groups_keeps_items(casket):
    s = casket.stream("s")
    s.append_many([b"a", b"b"])
    assert len(s) == 2


def test_maxlen_and_max_age(casket):
    clock = FakeClock()
    s = casket.stream("s", maxlen=3, clock=clock)
    ids = s.append_many([b"%d" % i for i in range(5)])
    assert [x.id for x in s.read()] == ids[2:]
    # the settings are stored: another Stream object (another process) sees them
    s2 = casket.stream("s", clock=clock)
    s2.append(b"x")
    assert len(s2) == 3
    t = casket.stream("t", max_age=10, clock=clock)
    old = t.append(b"old")
    clock.t += 11
    new = t.append(b"new")
    assert [x.id for x in t.read()] == [new]
    with pytest.raises(pyqstore.TrimmedError):
        t.read(old)
    with pytest.raises(pyqstore.TrimmedError, match="start from 'first'"):
        t.group("late", start=old)


def test_claim_hands_idle_entries_over(casket):
    clock = FakeClock()
    s = casket.stream("s", clock=clock)
    ids = s.append_many([b"a", b"b"])
    g = s.group("g")
    g.read(2, consumer="dead")
    clock.t += 5
    assert g.claim(10, consumer="alive") == []
    got = g.claim(5, consumer="alive", n=1)
    assert got == [(ids[0], b"a")]
    p = g.pending()
    assert [(e.id, e.consumer, e.deliveries, e.delivered_at) for e in p] == [
        (ids[0], "alive", 2, 1005.0), (ids[1], "dead", 1, 1000.0)]


def test_claim_drops_entries_retention_removed(casket):
    s = casket.stream("s", maxlen=1)
    ids = s.append_many([b"a"])
    g = s.group("g")
    g.read(1)
    s.append(b"b")                       # maxlen removes ids[0], pending or not
    assert g.claim(0) == []
    assert [e.id for e in g.pending()] == []


def test_transaction_commit_and_abort(casket):
    s = casket.stream("s")
    g = s.group("g")
    with pytest.raises(RuntimeError):
        with casket.transaction():
            s.append(b"a")
            assert len(g.read(5)) == 1
            raise RuntimeError("abort")
    assert len(s) == 0 and g.pending() == []
    with casket.transaction():
        i = s.append(b"b")
        assert g.read(5) == [(i, b"b")]
        # a refusal leaves the transaction usable
        with pytest.raises(pyqstore.NotPendingError):
            g.ack([i + 1000])
        g.ack(i)
    assert g.pending() == []


def test_durable_across_reopen(path):
    with pyqstore.open(path, "n", sync=True) as c:
        s = c.stream("s", maxlen=100)
        ids = s.append_many([b"a", b"b", b"c"])
        g = s.group("g")
        g.read(2, consumer="c1")
        g.ack(ids[0])
    with pyqstore.open(path) as c:
        s = c.stream("s")
        g = s.group("g", start="last")      # exists: keeps its position
        assert [(p.id, p.consumer) for p in g.pending()] == [(ids[1], "c1")]
        assert g.read(5) == [(ids[2], b"c")]
        assert [x.id for x in s.read()] == ids[1:]
        c.check()


# ================================================================ bad input


def test_bad_input(casket):
    s = casket.stream("s")
    with pytest.raises(ValueError, match="must not be empty"):
        casket.stream("")
    with pytest.raises(ValueError, match="group name must not be empty"):
        s.group("")
    with pytest.raises(TypeError, match="group name must be str"):
        s.group(b"g")
    for bad in ("middle", 0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="start must be|start id must be"):
            s.group("g", start=bad)
    g = s.group("g")
    for n in (0, -1):
        with pytest.raises(ValueError, match="n must be"):
            g.read(n)
        with pytest.raises(ValueError, match="n must be"):
            s.read(0, n)
    with pytest.raises(TypeError, match="n must be an int"):
        g.read("3")
    for payload in (1, None, 2.5, [b"x"]):
        with pytest.raises(TypeError, match="payload must be bytes"):
            s.append(payload)
    with pytest.raises(TypeError, match="payload must be bytes"):
        s.append_many([b"ok", 7])
    with pytest.raises(TypeError, match="not one bytes"):
        s.append_many(b"abc")
    with pytest.raises(ValueError, match="consumer name must not be empty"):
        g.read(1, consumer="")
    with pytest.raises(ValueError, match="timeout"):
        g.read(1, block=True, timeout=-1)
    with pytest.raises(ValueError, match="min_idle"):
        g.claim(float("nan"))
    with pytest.raises(ValueError, match="max_age"):
        casket.stream("s", max_age=-1)
    with pytest.raises(TypeError, match="ids must be ints"):
        g.ack(["1"])
    with pytest.raises(ValueError, match="group name is 4097 bytes long"):
        s.group("g" * 4097)
    with pytest.raises(ValueError, match="consumer name is 4097 bytes long"):
        g.read(1, consumer="c" * 4097)
    assert len(s) == 0                  # nothing was stored by any of these


def test_ack_of_unread_id_names_it_and_changes_nothing(casket):
    s = casket.stream("s")
    ids = s.append_many([b"a", b"b", b"c"])
    g = s.group("g")
    g.read(2)
    with pytest.raises(pyqstore.NotPendingError, match=f"id {ids[2]} is not pending") as ei:
        g.ack([ids[0], ids[2]])
    assert ei.value.id == ids[2]
    assert [p.id for p in g.pending()] == ids[:2]        # ids[0] still pending
    assert len(s) == 3
    g.ack(ids[0])
    with pytest.raises(pyqstore.NotPendingError, match=f"id {ids[0]}"):
        g.ack(ids[0])                                     # acknowledged already


# ================================================== waits and other processes


def _append_later(conn, path, delay):
    with pyqstore.open(path, sync=False) as c:
        conn.send("ready")
        time.sleep(delay)
        conn.send(c.stream("s").append(b"from-child"))


def test_blocking_read_wakes_on_append_from_another_process(kids, path):
    with pyqstore.open(path, "n", sync=False) as c:
        g = c.stream("s").group("g")
        assert g.read(1, block=True, timeout=0.05) == []     # times out empty
        p, conn = kids.start(_append_later, path, 0.3, name="appender")
        assert recv(conn, p) == "ready"
        t0 = time.monotonic()
        got = g.read(1, block=True, timeout=30)
        waited = time.monotonic() - t0
        appended = recv(conn, p)
        assert got == [(appended, b"from-child")]
        assert waited < 20, "woken by the timeout, not by the append"
        join_ok(p, conn)


def test_blocking_read_ends_when_the_casket_closes(path):
    c = pyqstore.open(path, "n", sync=False)
    g = c.stream("s").group("g")
    box = {}

    def reader():
        try:
            box["r"] = g.read(1, block=True)
        except pyqstore.Error as e:
            box["r"] = e

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.2)
    c.close()
    t.join(20)
    assert not t.is_alive()
    assert isinstance(box["r"], pyqstore.ClosedError)


def _consume(conn, path, consumer, expect_total):
    with pyqstore.open(path, sync=True) as c:
        groups = [c.stream("s").group(name) for name in ("ga", "gb")]
        conn.send("ready")
        got = {"ga": [], "gb": []}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            busy = False
            for g in groups:
                items = g.read(7, consumer=consumer, block=True, timeout=0.05)
                if items:
                    busy = True
                    got[g.name] += [i.id for i in items]
                    g.ack([i.id for i in items])
            if not busy and c.stream("s").read(0, 1) == [] and _done(c, expect_total):
                break
        conn.send(got)


def _done(c, expect_total):
    return c.get("appended") == str(expect_total).encode()


def test_groups_read_by_consumers_in_several_processes_once_per_group(kids, path):
    total = 600
    with pyqstore.open(path, "n", sync=True) as c:
        s = c.stream("s")
        s.group("ga")
        s.group("gb")
    started = [kids.start(_consume, path, f"c{i}", total, name=f"consumer{i}")
               for i in range(3)]
    for p, conn in started:
        assert recv(conn, p) == "ready"
    ids = []
    with pyqstore.open(path, sync=True) as c:
        s = c.stream("s")
        for k in range(0, total, 50):
            ids += s.append_many([b"%d" % i for i in range(k, k + 50)])
        c["appended"] = str(total).encode()
    results = [recv(conn, p, timeout=90) for p, conn in started]
    for p, conn in started:
        join_ok(p, conn)
    for group in ("ga", "gb"):
        seen = sorted(i for r in results for i in r[group])
        assert seen == sorted(ids), f"group {group}: every item exactly once"
    with pyqstore.open(path) as c:
        assert len(c.stream("s")) == 0          # acknowledged by both groups
        c.check()


def _read_and_hang(conn, path):
    with pyqstore.open(path, sync=True) as c:
        got = c.stream("s").group("g").read(3, consumer="doomed")
        conn.send([i.id for i in got])
        time.sleep(60)                          # killed while holding them


def test_sigkilled_consumer_leaves_pending_entries_to_claim(kids, path):
    with pyqstore.open(path, "n", sync=True) as c:
        ids = c.stream("s").append_many([b"a", b"b", b"c", b"d"])
        c.stream("s").group("g")
    p, conn = kids.start(_read_and_hang, path, name="doomed")
    read = recv(conn, p)
    assert read == ids[:3]
    assert kill_child(p) == -signal.SIGKILL
    with pyqstore.open(path, sync=True) as c:
        g = c.stream("s").group("g")
        pend = g.pending()
        assert [(e.id, e.consumer, e.deliveries) for e in pend] == [
            (i, "doomed", 1) for i in ids[:3]]
        assert g.read(10, consumer="next") == [(ids[3], b"d")]   # never twice
        g.ack(ids[3])
        claimed = g.claim(0, consumer="next")
        assert claimed == [(i, p) for i, p in zip(ids[:3], [b"a", b"b", b"c"])]
        assert [(e.consumer, e.deliveries) for e in g.pending()] == [("next", 2)] * 3
        g.ack(ids[:3])
        assert len(c.stream("s")) == 0
        c.check()


def test_a_refusal_first_in_a_fresh_handle_leaves_the_transaction_usable(path):
    # The stream layer was registered on a handle's first change, so a
    # refusal before any (a fresh handle's first stream call) was taken
    # for a failure and spoiled the transaction.
    with pyqstore.open(path, "n", sync=False) as c:
        s = c.stream("s")
        i = s.append(b"a")
        s.group("g")
    with pyqstore.open(path, sync=False) as c:
        s = c.stream("s")
        with c.transaction():
            with pytest.raises(pyqstore.NotPendingError):
                s.group("g").ack(i)
            assert s.group("g").read(1) == [(i, b"a")]
        assert [e.id for e in s.group("g").pending()] == [i]
