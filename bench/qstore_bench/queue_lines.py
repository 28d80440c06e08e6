"""The queue lines of bench/scripts/queue_bench.py, each a function
(directory, payloads) -> seconds for pyqstore, py-lmdb, sqlite3, RocksDB
and LevelDB, so that the script and `qstore-bench goals` time the same
code:

  put_many   one synced transaction adding all items in one batch call
  put        per-item puts inside one synced transaction
  drain      removing the items in batches of 1000, each batch its own
             transaction, sync off unless DRAIN_SYNC
  churn      one put then one get, each committed on its own, sync off

and, on pyqstore alone (its own reference is the peer), get_behind: gets
of items queued behind held reserved ones.

The items are made before any clock starts (payloads); each function opens
a fresh store in the directory it is given and closes it, untimed.

RocksDB and LevelDB have neither queues nor a batch put: a queue is the
key range of peers_lsm.py's layout (tag, length-prefixed name, big-endian
sequence number), a transaction is a WriteBatch, so put_many and put are
one and the same loop for them.  A consumer remembers the key after the
last one it took and seeks there: scanning from the front of the range
would step over every tombstone earlier batches left until a compaction
drops them (the failure LSM queues are known for; a user who knows seeks).
"""
from __future__ import annotations

import gc
import itertools
import os
import sqlite3
import struct
import time
import uuid
from typing import Any, Callable

import pyqstore

try:
    import lmdb
except ImportError:  # reported as unavailable
    lmdb = None  # type: ignore[assignment]
HAVE_LMDB = lmdb is not None

PEERS = ["lmdb", "sqlite3"]
BACKENDS = ["pyqstore"] + PEERS
_be = struct.Struct(">Q").pack


def payloads(n: int) -> list[bytes]:
    return [str(uuid.uuid4()).encode() for _ in range(n)]


class Timer:
    def __enter__(self) -> "Timer":
        gc.collect()
        gc.disable()
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.s = time.perf_counter() - self.t
        gc.enable()


# ---------------------------------------------------------------- pyqstore

def pq_open(d: str, sync: bool) -> pyqstore.Casket:
    return pyqstore.open(os.path.join(d, "q.qs"), "n", sync=sync)


def pq_put_many(d: str, pay: list[bytes]) -> float:
    c = pq_open(d, True)
    q = c.queue("port")
    with Timer() as t:
        q.put_many(pay)
    assert len(q) == len(pay)
    c.close()
    return t.s


def pq_put(d: str, pay: list[bytes]) -> float:
    c = pq_open(d, True)
    q = c.queue("port")
    with Timer() as t:
        with c.transaction():
            put = q.put
            for p in pay:
                put(p)
    assert len(q) == len(pay)
    c.close()
    return t.s


# whether each drain batch is synced: queue_bench.py --drain-sync sets it
DRAIN_SYNC = False


def drain_time(take_batch: Callable[[], int], total: int) -> float:
    """Seconds to empty a store holding total items by calling take_batch
    (one transaction taking up to 1000 items, returning how many) until it
    takes none; every item must come out once."""
    n = 0
    with Timer() as t:
        while True:
            got = take_batch()
            if not got:
                break
            n += got
    assert n == total, (n, total)
    return t.s


def pq_drain(d: str, pay: list[bytes]) -> float:
    c = pq_open(d, DRAIN_SYNC)
    q = c.queue("port")
    q.put_many(pay)
    get_many = q.get_many
    seconds = drain_time(lambda: len(get_many(1000)), len(pay))
    assert len(q) == 0
    c.close()
    return seconds


def pq_churn(d: str, pay: list[bytes]) -> float:
    c = pq_open(d, False)
    q = c.queue("port")
    with Timer() as t:
        put, get = q.put, q.get_nowait
        for p in pay:
            put(p)
            get()
    assert len(q) == 0
    c.close()
    return t.s


# -------------------------------------------------------------------- lmdb

def lm_open(d: str, sync: bool, items: int) -> Any:
    return lmdb.open(os.path.join(d, "lmdb"), map_size=max(1 << 30, items * 200),
                     sync=sync, metasync=sync, lock=True)


def lm_put_many(d: str, pay: list[bytes]) -> float:
    env = lm_open(d, True, len(pay))
    with Timer() as t:
        with env.begin(write=True) as txn:
            txn.cursor().putmulti(zip(map(_be, range(1, len(pay) + 1)), pay), append=True)
    env.close()
    return t.s


def lm_put(d: str, pay: list[bytes]) -> float:
    env = lm_open(d, True, len(pay))
    with Timer() as t:
        with env.begin(write=True) as txn:
            put = txn.put
            i = 0
            for p in pay:
                i += 1
                put(_be(i), p, append=True)
    env.close()
    return t.s


def lm_fill(env: Any, pay: list[bytes]) -> None:
    with env.begin(write=True) as txn:
        txn.cursor().putmulti(zip(map(_be, range(1, len(pay) + 1)), pay), append=True)


def lm_drain(d: str, pay: list[bytes]) -> float:
    env = lm_open(d, DRAIN_SYNC, len(pay))
    lm_fill(env, pay)

    def take_batch() -> int:
        got: list[bytes] = []
        with env.begin(write=True) as txn:
            cur = txn.cursor()
            if cur.first():
                value, delete, append = cur.value, cur.delete, got.append
                for _ in range(1000):
                    append(value())
                    if not delete() or not cur.key():
                        break
        return len(got)
    seconds = drain_time(take_batch, len(pay))
    env.close()
    return seconds


def lm_churn(d: str, pay: list[bytes]) -> float:
    env = lm_open(d, False, len(pay))
    with Timer() as t:
        i = 0
        begin = env.begin
        for p in pay:
            i += 1
            with begin(write=True) as txn:
                txn.put(_be(i), p, append=True)
            with begin(write=True) as txn:
                cur = txn.cursor()
                cur.first()
                cur.value()
                cur.delete()
    env.close()
    return t.s


# ----------------------------------------------------------------- sqlite3

def sq_open(d: str, sync: bool) -> sqlite3.Connection:
    con = sqlite3.connect(os.path.join(d, "q.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
    con.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    return con


def sq_put_many(d: str, pay: list[bytes]) -> float:
    con = sq_open(d, True)
    with Timer() as t:
        con.execute("BEGIN")
        con.executemany("INSERT INTO q(v) VALUES (?)", zip(pay))
        con.execute("COMMIT")
    con.close()
    return t.s


def sq_put(d: str, pay: list[bytes]) -> float:
    con = sq_open(d, True)
    with Timer() as t:
        con.execute("BEGIN")
        ex = con.execute
        for p in pay:
            ex("INSERT INTO q(v) VALUES (?)", (p,))
        con.execute("COMMIT")
    con.close()
    return t.s


def sq_drain(d: str, pay: list[bytes]) -> float:
    con = sq_open(d, DRAIN_SYNC)
    con.execute("BEGIN")
    con.executemany("INSERT INTO q(v) VALUES (?)", zip(pay))
    con.execute("COMMIT")

    def take_batch() -> int:
        con.execute("BEGIN IMMEDIATE")
        rows = con.execute("SELECT id, v FROM q ORDER BY id LIMIT 1000").fetchall()
        if rows:
            con.execute("DELETE FROM q WHERE id <= ?", (rows[-1][0],))
        con.execute("COMMIT")
        return len(rows)
    seconds = drain_time(take_batch, len(pay))
    con.close()
    return seconds


def sq_churn(d: str, pay: list[bytes]) -> float:
    con = sq_open(d, False)
    with Timer() as t:
        ex = con.execute
        for p in pay:
            ex("INSERT INTO q(v) VALUES (?)", (p,))
            ex("BEGIN IMMEDIATE")
            row = ex("SELECT id, v FROM q ORDER BY id LIMIT 1").fetchone()
            ex("DELETE FROM q WHERE id = ?", (row[0],))
            ex("COMMIT")
    con.close()
    return t.s


# ------------------------------------------------------- RocksDB, LevelDB

def _lsm_open(name: str, d: str, sync: bool) -> Any:
    # through backends: it loads the peer modules, which import it back
    from . import backends  # noqa: F401
    from .peers_lsm import ENGINES
    return ENGINES[name](os.path.join(d, name), sync)


_LSM_QUEUE = b"q" + struct.pack(">I", 4) + b"port"


def _lsm_len(e: Any) -> int:
    return sum(1 for _ in e.scan(_LSM_QUEUE))


def lsm_batch(name: str, d: str, pay: list[bytes]) -> float:
    """put_many and put: the items in one synced WriteBatch."""
    e = _lsm_open(name, d, True)
    with Timer() as t:
        batch = e.batch()
        put, queue = batch.put, _LSM_QUEUE
        i = 0
        for p in pay:
            i += 1
            put(queue + _be(i), p)
        e.write(batch)
    assert _lsm_len(e) == len(pay)
    e.close()
    return t.s


def lsm_drain(name: str, d: str, pay: list[bytes]) -> float:
    e = _lsm_open(name, d, DRAIN_SYNC)
    batch = e.batch()
    for i, p in enumerate(pay, 1):
        batch.put(_LSM_QUEUE + _be(i), p)
    e.write(batch)
    head = _LSM_QUEUE + _be(1)

    def take_batch() -> int:
        nonlocal head
        got = list(itertools.islice(e.scan(_LSM_QUEUE, head), 1000))
        if got:
            batch = e.batch()
            for k, _ in got:
                batch.delete(k)
            e.write(batch)
            head = got[-1][0] + b"\0"
        return len(got)
    seconds = drain_time(take_batch, len(pay))
    assert _lsm_len(e) == 0
    e.close()
    return seconds


def lsm_churn(name: str, d: str, pay: list[bytes]) -> float:
    e = _lsm_open(name, d, False)
    with Timer() as t:
        put, delete, scan, queue = e.put, e.delete, e.scan, _LSM_QUEUE
        head = queue
        i = 0
        for p in pay:
            i += 1
            put(queue + _be(i), p)
            k, _ = next(scan(queue, head))
            delete(k)
            head = k + b"\0"
    assert _lsm_len(e) == 0
    e.close()
    return t.s


def _lsm_runner(run: Callable[[str, str, list[bytes]], float], name: str
                ) -> Callable[[str, list[bytes]], float]:
    return lambda d, pay: run(name, d, pay)


def pq_get_behind(d: str, pay: list[bytes], held: int, held_size: int = 10240) -> float:
    """Seconds for one get_nowait of each payload, each its own commit, sync
    off, with `held` reserved items of held_size bytes at the front of the
    queue all the while (issue 17: a get must seek past a run of reserved
    ids, not step over them)."""
    c = pq_open(d, False)
    q = c.queue("port")
    if held:
        q.put_many([b"r" * held_size] * held)
    reservations: Any = q.reserve_many(held, timeout=0) if held else []
    assert len(reservations) == held
    q.put_many(pay)
    with Timer() as t:
        get = q.get_nowait
        for _ in pay:
            get()
    assert len(q) == 0 and len(q.pending()) == held
    c.close()
    return t.s


RUNNERS: dict[str, dict[str, Callable[[str, list[bytes]], float]]] = {
    "put_many": {"pyqstore": pq_put_many, "lmdb": lm_put_many, "sqlite3": sq_put_many},
    "put": {"pyqstore": pq_put, "lmdb": lm_put, "sqlite3": sq_put},
    "drain": {"pyqstore": pq_drain, "lmdb": lm_drain, "sqlite3": sq_drain},
    "churn": {"pyqstore": pq_churn, "lmdb": lm_churn, "sqlite3": sq_churn},
}
LSM_PEERS = ["rocksdb", "leveldb"]
for _line, _run in (("put_many", lsm_batch), ("put", lsm_batch), ("drain", lsm_drain),
                    ("churn", lsm_churn)):
    for _name in LSM_PEERS:
        RUNNERS[_line][_name] = _lsm_runner(_run, _name)
