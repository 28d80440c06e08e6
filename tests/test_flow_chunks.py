"""The per-node layout's chunks (pyqstore.flow.chunks): the limit keeps a
port's bound exact in items, a chunk round-trips through every edge codec,
a payload that is not a chunk is a DecodeError naming it, a firing takes
one chunk of at most its batch, and status counts items, not chunks."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyqstore
from _flow_layouts import Fired
from pyqstore.flow import Flow, IterableSource, QueueSink, names
from pyqstore.flow.chunks import (chunk_count, chunk_limit, count_items, decode_chunk,
                                  encode_chunks, port_bound)
from pyqstore.flow.layout import PerNodeLayout, Topology
from pyqstore.flow.status import collect
from pyqstore._queue import resolve_codec


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5000).flatmap(lambda m: st.tuples(st.integers(1, m), st.just(m))))
def test_the_limit_is_the_largest_divisor_of_maxsize_within_the_batch(case):
    batch, maxsize = case
    limit = chunk_limit(batch, maxsize)
    assert 1 <= limit <= batch and maxsize % limit == 0
    assert not any(maxsize % d == 0 for d in range(limit + 1, batch + 1))
    bound = port_bound(maxsize, limit)
    # a full port holds at most maxsize items ...
    assert bound * limit <= maxsize
    # ... and any firing's output of at most maxsize items fits an empty one
    assert all(math.ceil(n / limit) <= bound for n in (1, limit, maxsize // 2 + 1, maxsize))


items = st.lists(st.one_of(st.integers(-2**40, 2**40), st.text(max_size=8),
                           st.lists(st.integers(0, 9), max_size=3)), max_size=60)


@pytest.mark.parametrize("codec", ["pickle", "json", "msgpack"])
@settings(max_examples=60, deadline=None)
@given(xs=items, limit=st.integers(1, 17))
def test_chunks_hold_the_items_in_order_at_most_limit_each(codec, xs, limit):
    c = resolve_codec(codec)
    chunks = encode_chunks(c, xs, limit)
    assert len(chunks) == math.ceil(len(xs) / limit)
    back = []
    for i, raw in enumerate(chunks):
        assert 1 <= chunk_count(raw) <= limit
        got = decode_chunk(c, raw, "q", i)
        assert len(got) == chunk_count(raw)
        back += got
    assert back == xs


@pytest.mark.parametrize("raw, says", [
    (b"\x00\x01", "is not a chunk of items"),                         # shorter than its count
    (b"\x00\x00\x00\x02" + resolve_codec("pickle").encode([1]), "header says 2 items, its "
                                                                "payload holds 1 items"),
    (b"\x00\x00\x00\x01" + resolve_codec("pickle").encode({"a": 1}), "holds a dict"),
    (b"\x00\x00\x00\x01not a pickle", "is not a chunk of items"),
])
def test_a_payload_that_is_not_a_chunk_is_a_decode_error_naming_it(raw, says):
    with pytest.raises(pyqstore.DecodeError, match=says) as e:
        decode_chunk(resolve_codec("pickle"), raw, "flow/in/n/in", 7)
    assert (e.value.queue, e.value.id, e.value.payload) == ("flow/in/n/in", 7, raw)
    assert "flow/in/n/in" in str(e.value) and "7" in str(e.value)


seen_batches: list[int] = []


def record_size(batch):
    seen_batches.append(len(batch))
    return batch


def always_fails(batch):
    raise RuntimeError("no")


def chunk_flow(work, max_deliveries=0) -> Flow:
    f = Flow("chunks")
    f.source("src", IterableSource(range(25)), batch=25)
    f.node("work", work, batch=10, maxsize=100, max_deliveries=max_deliveries)
    f.sink("out", QueueSink("result"), batch=10, maxsize=100)
    f.edge("src", "work")
    f.edge("work", "out")
    return f


def deliver_all(fired) -> None:
    while fired.deliver(random.Random(0)):
        pass


def test_a_firing_takes_one_chunk_of_at_most_its_batch(tmp_path):
    seen_batches.clear()
    fired = Fired(str(tmp_path), chunk_flow(record_size), "per-node")
    try:
        assert fired.insts[("src", 0)].fire()
        deliver_all(fired)
        port = fired.casket("work").queue(names.input_queue("work", "in", None))
        # one upstream firing of 25 items: chunks of the node's limit, 10
        assert [chunk_count(raw) for raw in port.peek_many(10)] == [10, 10, 5]
        while fired.insts[("work", 0)].fire(timeout=0):
            deliver_all(fired)
        assert seen_batches == [10, 10, 5]
        out = fired.input("out")
        assert out.get_many(100) == list(range(25))
    finally:
        fired.close()


def _status(fired, directory, flow):
    topology = Topology.of(flow, "per-node")
    by_path = {names.node_casket(*k): c for k, c in fired.caskets.items()}
    return collect(topology, by_path.__getitem__, directory=directory,
                   layout=PerNodeLayout(topology))


def test_status_counts_the_items_of_a_port_of_chunks(tmp_path):
    f = chunk_flow(record_size)
    fired = Fired(str(tmp_path), f, "per-node")
    try:
        assert fired.insts[("src", 0)].fire()
        deliver_all(fired)
        port = fired.casket("work").queue(names.input_queue("work", "in", None))
        held = port.reserve()                       # a chunk of 10, taken
        st = _status(fired, str(tmp_path), f).nodes["work"]
        (inp,) = [p for p in st.ports if p.direction == "in"]
        # in items: 25 in three chunks, one of 10 reserved; the bound is 10 chunks of 10
        assert (inp.available, inp.reserved, inp.delayed, inp.maxsize) == (15, 10, 0, 100)
        held.release()
    finally:
        fired.close()


def test_dead_letters_are_whole_chunks_and_counted_in_items(tmp_path):
    f = chunk_flow(always_fails, max_deliveries=1)
    fired = Fired(str(tmp_path), f, "per-node")
    try:
        assert fired.insts[("src", 0)].fire()
        deliver_all(fired)
        work = fired.insts[("work", 0)]
        # each firing fails a chunk once; the next take moves it to the
        # dead-letter port (max_deliveries 1) and fails the next chunk
        firings = 0
        while work.fire(timeout=0):
            firings += 1
        assert firings == 3
        st = _status(fired, str(tmp_path), f).nodes["work"]
        assert st.dead_letters.count == 25 and st.failed == 25
        assert st.dead_letters.last_reasons == ["RuntimeError: no"] * 3
        dq = fired.casket("work").queue(names.dead_queue("work"))
        assert count_items(dq, chunked=True) == 25 and len(dq) == 3
        dead = fired.dead("work")
        assert sorted(d.payload for d in dead) == list(range(25))
        assert {(d.deliveries, d.reason) for d in dead} == {(2, "RuntimeError: no")}
    finally:
        fired.close()
