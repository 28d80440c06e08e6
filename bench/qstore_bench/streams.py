"""Streams with consumer groups against Redis Streams (issue 13).

One round of batch size B: append B payloads, read B as one consumer of a
group, acknowledge them -- on pyqstore ``append_many`` + ``Group.read`` +
``Group.ack`` (three commits; the ack also removes the items, every group
having acknowledged them), on a real redis-server (started here, on
127.0.0.1) B ``XADD`` in one pipeline + ``XREADGROUP COUNT B`` + one
``XACK`` of the B ids, through redis-py.  Durability is compared level
for level (servers.LEVELS): Redis's append-only file with ``appendfsync
always`` beside ``sync=True`` (each commit fsynced before it returns),
``appendfsync no`` beside ``sync=False`` (a kill -9 loses nothing on
either side, a power cut the last writes), and Redis's default
configuration (RDB snapshots, no append-only file: a crash loses every
write since the last snapshot) beside ``sync=False`` too.  Every round
checks what came back (every id once, in order), so a line that loses
items fails instead of looking fast.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Optional

from . import servers


def payloads(batch: int, size: int, round_no: int) -> list[bytes]:
    return [(b"%d:%d:" % (round_no, i)).ljust(size, b"x") for i in range(batch)]


def ours(directory: str, batch: int, rounds: int, size: int, sync: bool) -> float:
    import pyqstore

    path = os.path.join(directory, f"stream-{batch}-{int(sync)}.qs")
    with pyqstore.open(path, "n", sync=sync) as c:
        s = c.stream("bench")
        g = s.group("g")
        t0 = time.perf_counter()
        for r in range(rounds):
            want = payloads(batch, size, r)
            ids = s.append_many(want)
            got = g.read(batch, consumer="c1")
            if [x.id for x in got] != ids or [x.payload for x in got] != want:
                raise AssertionError(f"pyqstore round {r}: the group read other items")
            g.ack(ids)
        seconds = time.perf_counter() - t0
        if len(s) or g.pending():
            raise AssertionError("pyqstore: items left after every ack")
    return seconds


def redis_side(port: int, batch: int, rounds: int, size: int) -> float:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    try:
        r.flushall()
        r.xgroup_create("bench", "g", id="0", mkstream=True)
        t0 = time.perf_counter()
        for n in range(rounds):
            want = payloads(batch, size, n)
            pipe = r.pipeline(transaction=False)
            for p in want:
                pipe.xadd("bench", {b"p": p})
            ids = pipe.execute()
            got: Any = r.xreadgroup("g", "c1", {"bench": ">"}, count=batch)
            entries: Any = got[0][1] if got else []
            if [e[0] for e in entries] != ids or [e[1][b"p"] for e in entries] != want:
                raise AssertionError(f"redis round {n}: the group read other items")
            if r.xack("bench", "g", *ids) != batch:
                raise AssertionError(f"redis round {n}: XACK acknowledged fewer")
        seconds = time.perf_counter() - t0
        pending: Any = r.xpending("bench", "g")
        if pending["pending"]:
            raise AssertionError("redis: entries pending after every ack")
        return seconds
    finally:
        r.close()


def run(batches: list[int], rounds: int, size: int,
        levels: list[tuple[bool, str]] = servers.LEVELS,
        base: Optional[str] = None) -> dict[str, Any]:
    """Items per second of both sides for each (durability, batch): levels
    are (our sync, the redis level of servers.REDIS_LEVELS); the ratio
    ours / redis."""
    directory = tempfile.mkdtemp(prefix="qstore-bench-streams-", dir=base)
    lines = []
    try:
        for sync, level in levels:
            with servers.Redis(level) as server:
                for batch in batches:
                    seconds = ours(directory, batch, rounds, size, sync)
                    theirs = redis_side(server.port, batch, rounds, size)
                    items = batch * rounds
                    lines.append({
                        "sync": sync, "batch": batch, "rounds": rounds, "items": items,
                        "pyqstore_items_per_s": items / seconds,
                        "redis_items_per_s": items / theirs,
                        "ratio": theirs / seconds,
                        "redis_durability": server.durability,
                        "pyqstore_loses": servers.PYQSTORE_LOSES[sync],
                        "redis_loses": server.loses,
                    })
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {"experiment": "streams", "payload_size": size, "lines": lines}
