"""Stateful property test: the queue semantics of issue 13 together, on
the same queues, against one reference model on a fake clock.

The per-feature machines (test_model_order, _policy, _pending, _stream)
each check one feature; this one checks how they combine: an item that is
put with a priority and a delay, on a bounded queue with max_deliveries,
reserved, failed, released with a delay, claimed, dead-lettered, while a
stream's groups read and acknowledge in the same transactions, which
commit or abort, and the casket is closed and reopened meanwhile.

The model is plain Python:

* ``q``: queue name -> {seq: entry} of every item the queue holds
  (reserved and delayed ones included), an entry being
  ``{"prio", "count", "reason", "due"}``; the payload is the seq's digits,
  so an item is known by what it carries (a dead-lettered one too);
* ``delayed``: queue name -> {seq: due time} of the items not yet moved in
  (a take of the queue moves the due ones first, as test_model_order
  describes); ``conf``: queue name -> (maxsize, max_deliveries), the dead
  letters going to DEAD;
* ``res``: handle -> (queue name, seq) of an outstanding reservation, its
  Item in ``items``;
* ``st``: the stream model of test_model_stream (its ``trim`` applies
  retention), stamped by the same fake clock;
* ``now``: the fake clock, the C core's delay clock (qs_queue_test_clock)
  and the stream's clock.  Multiples of 1/4 s, exact in a double.

A take (get or reserve) of a queue moves its due items in, then goes
through the available ones in (priority descending, id) order: one that
has been reserved max_deliveries times already goes to DEAD (its count,
reason and priority with it) and the take goes on; the first other one is
taken.  maxsize counts every item the queue holds.  A reserve counts one
delivery, and the count is not part of a transaction (qstore.h,
"deliveries"): an abort undoes the moves and puts of the transaction, the
reservations it made end, and their counts stay (except on an item the
abort put back among the delayed ones).  Reservations end (their
items back in place, their counts kept) at close.
"""
from __future__ import annotations

import copy
import os
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore
from pyqstore._qstore import lib
from test_model_order import T0, delays, priorities
from test_model_policy import reasons
from test_model_stream import GROUPS, StreamMachine
from test_queue_model import payload_lists

QUEUES = ["jobs", "mail"]
DEAD = "dead"
ALL = QUEUES + [DEAD]
qnames = st.sampled_from(QUEUES)
#: each queue's dedup window (a key is a duplicate while its item is in the
#: queue, or for this long after its put)
WINDOW = {"jobs": 1.0, "mail": 0.0}
dedup_keys = st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=1, max_size=3)


class _StreamModel:
    """test_model_stream's model of one stream, so that its trim applies
    retention here too."""

    trim = StreamMachine.trim

    def __init__(self) -> None:
        self.m: dict[str, Any] = {"items": [], "groups": {}, "first_kept": 0, "maxlen": 0,
                                  "max_age": 0.0, "last_id": 0}


class SemanticsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-semmodel-")
        self.path = os.path.join(self.dir, "s.qs")
        self.now = T0
        lib.qs_queue_test_clock(self.now)
        self.q: dict[str, dict[int, dict[str, Any]]] = {n: {} for n in ALL}
        self.delayed: dict[str, dict[int, float]] = {n: {} for n in ALL}
        self.conf = {n: (0, 0) for n in ALL}
        self.res: dict[int, tuple[str, int]] = {}
        self.items: dict[int, pyqstore.Item] = {}
        self.ids: dict[int, int] = {}       # seq -> real id, learned
        self.st = _StreamModel()
        self.seq = 0
        #: (queue, key) -> seq of the item first put with it, and when
        self.keys: dict[tuple[str, bytes], dict[str, Any]] = {}
        self.next_handle = 0
        self.txn: Optional[dict[str, Any]] = None
        self.open("n")
        for name, window in WINDOW.items():
            self.c.queue(name, dedup_window=window)

    def open(self, flag: str) -> None:
        self.c = pyqstore.open(self.path, flag, sync=False)
        self.s = self.c.stream("log", clock=lambda: self.now)

    def teardown(self) -> None:
        try:
            if not self.c.closed:
                if self.c.in_transaction:
                    self.c.abort()
                self.c.check()
                self.c.close()
        finally:
            lib.qs_queue_test_clock(0.0)
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ the model

    def queue(self, name: str) -> pyqstore.Queue:
        return self.c.queue(name)

    def reserved(self, name: str) -> set[int]:
        return {s for n, s in self.res.values() if n == name}

    def available(self, name: str) -> list[int]:
        hidden = self.reserved(name) | set(self.delayed[name])
        q = self.q[name]
        return sorted((s for s in q if s not in hidden), key=lambda s: (-q[s]["prio"], s))

    def take_model(self, name: str) -> Optional[int]:
        """What a get or reserve of name does before it hands out one:
        the due items moved in, spent ones dead-lettered; the seq taken."""
        self.delayed[name] = {s: d for s, d in self.delayed[name].items() if d > self.now}
        maxdel = self.conf[name][1]
        for s in self.available(name):
            if maxdel and self.q[name][s]["count"] >= maxdel:
                self.q[DEAD][s] = self.q[name].pop(s)
                continue
            return s
        return None

    def check_item(self, it: pyqstore.Item, name: str, seq: int) -> None:
        assert it.payload == b"%d" % seq, (it.payload, seq)
        e = self.q[name][seq]
        assert it.deliveries == e["count"], (seq, it.deliveries, e)
        assert it.reason == e["reason"], (seq, it.reason, e)
        if seq in self.ids:
            assert self.ids[seq] == it.id
        self.ids[seq] = it.id

    def room(self, name: str, n: int) -> bool:
        maxsize = self.conf[name][0]
        return not maxsize or len(self.q[name]) + n <= maxsize

    def abort_model(self) -> None:
        """Back to the state at begin, the reservations made since ended."""
        t = self.txn
        assert t is not None
        self.q, self.delayed, self.conf, self.st.m = t["q"], t["delayed"], t["conf"], t["st"]
        self.keys = t["keys"]
        # a reserve's count is not part of the transaction: the abort's
        # follow-up commits it again, for an item that was in that queue
        # before the transaction (not one the abort put back among the
        # delayed: qstore.h "deliveries", the recount's known limit)
        for name, seq in t["counted"]:
            if seq in self.q[name] and seq not in self.delayed[name]:
                self.q[name][seq]["count"] += 1
        for h in t["new_res"]:
            self.res.pop(h, None)
        for seq in [s for s in self.ids if s >= t["seq0"]]:
            del self.ids[seq]       # never existed: the ids may come again
        self.txn = None

    # ------------------------------------------------------------ producing

    @rule(name=qnames, n=st.integers(1, 3), delay=delays, priority=priorities,
          single=st.booleans())
    def put(self, name: str, n: int, delay: Optional[float], priority: Optional[int],
            single: bool) -> None:
        batch = [b"%d" % (self.seq + i) for i in range(n)]
        q = self.queue(name)
        try:
            if n == 1 and single:
                got = q.put(batch[0], block=False, delay=delay, priority=priority)
                if self.seq in self.ids:
                    assert got == self.ids[self.seq]
                self.ids[self.seq] = got
            else:
                assert q.put_many(batch, delay=delay, priority=priority) == n
        except pyqstore.Full:
            assert not self.room(name, n), (name, len(self.q[name]), n, self.conf[name])
            return
        assert self.room(name, n), (name, len(self.q[name]), n, self.conf[name])
        for _ in range(n):
            self.q[name][self.seq] = {"prio": priority or 0, "count": 0, "reason": None}
            if delay:
                self.delayed[name][self.seq] = self.now + delay
            self.seq += 1

    @rule(name=qnames, keys=dedup_keys, delay=delays, priority=priorities,
          single=st.booleans())
    def put_keyed(self, name: str, keys: list[Optional[bytes]], delay: Optional[float],
                  priority: Optional[int], single: bool) -> None:
        """Dedup keys: a key still in the queue, or put less than the
        queue's window ago, stores nothing (also a repeat within the batch)
        and answers the first item's id; the rest is a put."""
        first: dict[bytes, Optional[int]] = {}     # key -> seq it dedupes to, None: new
        fresh: list[int] = []
        for i, k in enumerate(keys):
            if k is not None and k in first:
                continue
            e = self.keys.get((name, k)) if k is not None else None
            if e is not None and (e["seq"] in self.q[name] or self.now < e["put"] + WINDOW[name]):
                first[k] = e["seq"]                 # type: ignore[index]
                continue
            if k is not None:
                first[k] = None
            fresh.append(i)
        seqs = {i: self.seq + j for j, i in enumerate(fresh)}
        payloads = [b"%d" % seqs[i] if i in seqs else b"dup" for i in range(len(keys))]
        q = self.queue(name)
        try:
            if len(keys) == 1 and single:
                got = q.put(payloads[0], False, None, delay, priority, keys[0])
                seq = seqs.get(0, first.get(keys[0]) if keys[0] is not None else None)
                if seq is not None and seq in self.ids:
                    assert got == self.ids[seq], (got, seq, self.ids[seq])
                elif 0 in seqs:
                    self.ids[seqs[0]] = got
            else:
                stored = q.put_many(payloads, delay=delay, priority=priority, keys=keys)
                assert stored == len(fresh), (stored, fresh, keys)
        except pyqstore.Full:
            assert fresh and not self.room(name, len(fresh)), (name, fresh, self.conf[name])
            return
        assert self.room(name, len(fresh)), (name, len(self.q[name]), fresh, self.conf[name])
        for i in fresh:
            seq = seqs[i]
            self.q[name][seq] = {"prio": priority or 0, "count": 0, "reason": None}
            if delay:
                self.delayed[name][seq] = self.now + delay
            if keys[i] is not None:
                self.keys[(name, keys[i])] = {"seq": seq, "put": self.now}
        self.seq += len(fresh)

    @rule(name=qnames, maxsize=st.sampled_from([0, 0, 2, 4, 7]),
          maxdel=st.sampled_from([0, 1, 2, 3]))
    def configure(self, name: str, maxsize: int, maxdel: int) -> None:
        try:
            self.c.queue(name, maxsize=maxsize, max_deliveries=maxdel,
                         dead_letter=DEAD if maxdel else "", dedup_window=WINDOW[name])
        except pyqstore.BoundError:
            assert maxsize and len(self.q[name]) > maxsize
            return
        assert not maxsize or len(self.q[name]) <= maxsize
        self.conf[name] = (maxsize, maxdel)

    # ------------------------------------------------------------ consuming

    @rule(name=st.sampled_from(ALL))
    def get(self, name: str) -> None:
        seq = self.take_model(name)
        try:
            got = self.queue(name).get(block=False)
        except pyqstore.Empty:
            assert seq is None, (name, seq)
            return
        assert seq is not None and got == b"%d" % seq, (name, got, seq)
        del self.q[name][seq]

    @rule(name=st.sampled_from(ALL))
    def reserve(self, name: str) -> None:
        seq = self.take_model(name)
        try:
            it = self.queue(name).reserve(timeout=0)
        except pyqstore.Empty:
            assert seq is None, (name, seq)
            return
        assert seq is not None, (name, it.payload)
        self.q[name][seq]["count"] += 1
        self.check_item(it, name, seq)
        h = self.next_handle
        self.next_handle += 1
        self.res[h] = (name, seq)
        self.items[h] = it
        if self.txn is not None:
            self.txn["new_res"].add(h)
            self.txn["counted"].append((name, seq))

    def pick(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.res)), label="handle")

    @precondition(lambda self: self.res and self.txn is None)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        h = self.pick(data)
        self.items.pop(h).ack()
        name, seq = self.res.pop(h)
        del self.q[name][seq]

    @precondition(lambda self: self.res and self.txn is None)
    @rule(data=st.data(), delay=st.sampled_from([None, 0.25, 1, 3]),
          reason=st.one_of(st.none(), reasons))
    def release(self, data: st.DataObject, delay: Optional[float], reason: Any) -> None:
        """release(delay) or fail(reason), then (for a fail) the delay: a
        failed item can only be given back at once."""
        h = self.pick(data)
        it = self.items.pop(h)
        name, seq = self.res.pop(h)
        if reason is not None:
            it.fail(reason)
            text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else reason
            self.q[name][seq]["reason"] = text or None
            return
        it.release(delay=delay)
        if delay:
            self.delayed[name][seq] = self.now + delay
        # the record keeps its count and reason, in the delayed index too
        e = self.q[name][seq]
        assert (it.deliveries, it.reason) == (e["count"], e["reason"]), (seq, e)

    @precondition(lambda self: self.txn is None)
    @rule(name=qnames, n=st.integers(1, 3), every=st.booleans())
    def claim(self, name: str, n: int, every: bool) -> None:
        """min_idle 0 takes every reservation (the held ones, oldest id
        first), an hour none: claim is on the real clock, not the fake."""
        b = self.queue(name).claim(min_idle=0 if every else 3600, n=n)
        if not every:
            assert len(b) == 0
            return
        held = sorted((s, h) for h, (nm, s) in self.res.items() if nm == name)[:n]
        assert [it.payload for it in b] == [b"%d" % s for s, _ in held]
        for it, (s, h) in zip(b, held):
            # the former holder's Item is over; the claimed one carries on
            self.check_item(it, name, s)
            with pytest.raises(pyqstore.NotReservedError):
                self.items[h].ack()
            self.items[h] = it

    # --------------------------------------------------------------- stream

    @rule(payloads=payload_lists)
    def append(self, payloads: list[bytes]) -> None:
        m = self.st.m
        ids = self.s.append_many(payloads)
        assert len(ids) == len(payloads)
        if ids:
            assert ids[0] > m["last_id"] and ids == list(range(ids[0], ids[0] + len(ids)))
            m["items"] += [[i, p, self.now] for i, p in zip(ids, payloads)]
            m["last_id"] = ids[-1]
            self.st.trim(self.now)

    @rule(name=st.sampled_from(GROUPS), n=st.integers(1, 4))
    def group_read(self, name: str, n: int) -> None:
        m = self.st.m
        if name not in m["groups"]:
            self.s.group(name, start="first")
            m["groups"][name] = {"last": m["first_kept"] - 1 if m["first_kept"] else 0,
                                 "pending": {}}
            self.st.trim(-1)
        g = m["groups"][name]
        new = [it for it in m["items"] if it[0] > g["last"]][:n]
        got = self.s.group(name, start="last").read(n, consumer="c")
        assert [(x.id, x.payload) for x in got] == [(i, p) for i, p, _ in new]
        for i, _, _ in new:
            g["pending"][i] = ["c", self.now, 1]
        if new:
            g["last"] = new[-1][0]

    @precondition(lambda self: any(g["pending"] for g in self.st.m["groups"].values()))
    @rule(data=st.data())
    def group_ack(self, data: st.DataObject) -> None:
        groups = self.st.m["groups"]
        name = data.draw(st.sampled_from(sorted(n for n, g in groups.items() if g["pending"])))
        g = groups[name]
        ids = data.draw(st.lists(st.sampled_from(sorted(g["pending"])), min_size=1,
                                 max_size=3, unique=True))
        self.s.group(name, start="last").ack(ids)
        for i in ids:
            del g["pending"][i]
        self.st.trim(-1)

    @rule(maxlen=st.sampled_from([None, 0, 2, 5]), max_age=st.sampled_from([None, 0, 2]))
    def stream_configure(self, maxlen: Optional[int], max_age: Optional[float]) -> None:
        self.s.configure(maxlen, max_age)
        self.st.m["maxlen"] = maxlen or 0
        self.st.m["max_age"] = float(max_age or 0)
        self.st.trim(self.now)

    # ---------------------------------------------------- time, transactions

    @rule(dt=st.sampled_from([0.25, 0.75, 1, 3]))
    def advance(self, dt: float) -> None:
        self.now += dt
        lib.qs_queue_test_clock(self.now)

    @precondition(lambda self: self.txn is None)
    @rule()
    def begin(self) -> None:
        self.c.begin()
        self.txn = {"q": copy.deepcopy(self.q), "delayed": copy.deepcopy(self.delayed),
                    "conf": dict(self.conf), "st": copy.deepcopy(self.st.m),
                    "keys": copy.deepcopy(self.keys),
                    "new_res": set(), "counted": [], "seq0": self.seq}

    @precondition(lambda self: self.txn is not None)
    @rule(abort=st.booleans(), ctx=st.booleans())
    def finish(self, abort: bool, ctx: bool) -> None:
        if not abort:
            self.c.commit()
            self.txn = None
            return
        if ctx:
            # the same through casket.transaction(): an exception aborts
            # what was done inside the block and begins nothing new
            self.c.abort()
            self.abort_model()
            with pytest.raises(RuntimeError):
                with self.c.transaction():
                    self.s.append(b"never")
                    self.queue("mail").get_many(5)
                    raise RuntimeError("abort me")
            return
        self.c.abort()
        self.abort_model()

    @rule()
    def reopen(self) -> None:
        self.c.close()
        if self.txn is not None:        # close abandons the transaction
            self.abort_model()
        for h, it in self.items.items():
            with pytest.raises(pyqstore.ClosedError):
                it.ack()
        self.res.clear()                # every reservation ends with its handle
        self.items.clear()
        self.open("w")

    # ----------------------------------------------------------- invariants

    @invariant()
    def queues_hold_the_model(self) -> None:
        for n in ALL:
            q = self.queue(n)
            assert list(q.iter()) == [b"%d" % s for s in sorted(self.q[n])], n
            assert len(q) == len(self.q[n]) - len(self.reserved(n)), n
            assert q.delayed() == len(self.delayed[n]), n
            if self.conf[n][0]:
                assert len(self.q[n]) <= self.conf[n][0], n

    @invariant()
    def config(self) -> None:
        for n in QUEUES:
            cfg = self.queue(n).config()
            assert (cfg.maxsize, cfg.max_deliveries) == self.conf[n], n
            assert cfg.dead_letter == (DEAD if self.conf[n][1] else None), n

    @invariant()
    def pending_and_counts(self) -> None:
        """The pending list of committed reservations, with each item's
        count; nobody holds an item twice, none is both in a queue and dead."""
        if self.txn is not None:
            return
        for n in ALL:
            pend = self.queue(n).pending()
            held = sorted(s for s in self.reserved(n))
            assert [p.id for p in pend] == [self.ids[s] for s in held], n
            assert [p.deliveries for p in pend] == [self.q[n][s]["count"] for s in held], n
            assert all(p.mine for p in pend)
        seen = [s for n in ALL for s in self.q[n]]
        assert len(seen) == len(set(seen))

    @invariant()
    def stream_holds_the_model(self) -> None:
        m = self.st.m
        assert [(x.id, x.payload) for x in self.s.read(0, 1000)] == [
            (i, p) for i, p, _ in m["items"]]
        for name, g in m["groups"].items():
            got = self.s.group(name, start="last").pending()
            assert [(e.id, e.deliveries) for e in got] == [
                (i, g["pending"][i][2]) for i in sorted(g["pending"])], name


# Each example opens a casket and runs up to 40 steps with four invariants
# after each: 60 examples stay within about a minute on a loaded CI core.
SemanticsMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("QS_SEMANTICS_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestQueueSemantics = SemanticsMachine.TestCase
