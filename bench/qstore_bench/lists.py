"""Redis lists against pyqstore's plain queue (issue 13).

One round of batch size B, the same work on both sides: on a real
redis-server (started by the caller, on 127.0.0.1) one ``LPUSH`` of the B
payloads (the command takes many values: a batch is one command) and B
``BRPOP`` in one redis-py pipeline (BRPOP takes one element per call; a
pipeline sends the batch in one round trip); on pyqstore ``put_many`` of
the B payloads and ``get_many(B)`` (two commits).  LPUSH + BRPOP is
Redis's FIFO queue, so every round checks that the B payloads came back
once each, in order, on both sides, and the end that both are empty.
"""
from __future__ import annotations

import os
import time
from typing import Any

from .streams import payloads


def ours(directory: str, batch: int, rounds: int, size: int, sync: bool,
         acked: bool = False) -> float:
    """Seconds for rounds of put_many(B) + get_many(B) on a fresh casket;
    acked: put_many(B) + reserve_many(B) + ack_many (the ack queues' work)."""
    import pyqstore

    path = os.path.join(directory, f"{'ack' if acked else 'list'}-{batch}-{int(sync)}.qs")
    with pyqstore.open(path, "n", sync=sync) as c:
        q = c.queue("bench")
        t0 = time.perf_counter()
        for r in range(rounds):
            want = payloads(batch, size, r)
            q.put_many(want)
            if acked:
                got = q.reserve_many(batch, timeout=0)
                ok = [x.payload for x in got] == want
                q.ack_many(got)
            else:
                ok = q.get_many(batch) == want
            if not ok:
                raise AssertionError(f"pyqstore round {r}: the queue gave back other items")
        seconds = time.perf_counter() - t0
        if len(q) or q.pending():
            raise AssertionError("pyqstore: items left in the queue")
    return seconds


def redis_side(port: int, batch: int, rounds: int, size: int) -> float:
    """Seconds for rounds of LPUSH (B values) + B pipelined BRPOP."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    try:
        r.flushall()
        t0 = time.perf_counter()
        for n in range(rounds):
            want = payloads(batch, size, n)
            if r.lpush("bench", *want) != batch:
                raise AssertionError(f"redis round {n}: LPUSH stored another count")
            pipe = r.pipeline(transaction=False)
            for _ in range(batch):
                pipe.brpop("bench", timeout=5)
            got: Any = pipe.execute()
            if [x[1] if x else None for x in got] != want:
                raise AssertionError(f"redis round {n}: BRPOP gave back other items")
        seconds = time.perf_counter() - t0
        if r.llen("bench"):
            raise AssertionError("redis: items left in the list")
        return seconds
    finally:
        r.close()
