"""The embedded acknowledging queues persist-queue and litequeue against
pyqstore's reserve/ack (issue 13: at least 10x on each, at equal
durability).

One round of batch size B: put B items, take them, acknowledge them.

  pyqstore       put_many(B) + reserve_many(B) + ack_many(batch): three
                 commits.
  persist-queue  SQLiteAckQueue: B put, B get, B ack, each its own commit
                 (its ack queue cannot batch: it forces auto_commit=True
                 and warns "disable auto commit is not supported in ack
                 queue").  Payloads pickled (its default serializer).
  litequeue      LiteQueue: the B put in one transaction (its
                 transaction() context manager, the library's way to
                 group statements), B pop (each pop is its own IMMEDIATE
                 transaction: UPDATE ... RETURNING, so it cannot be
                 grouped), the B done in one transaction.  Its data column
                 is TEXT: payloads are str of the same length.

Durability, read from their source (persistqueue/sqlbase.py,
litequeue.py), both SQLite in WAL mode:

  persist-queue sets only journal_mode=WAL; synchronous stays SQLite's
  default, FULL, which in WAL mode syncs the log at every commit.
  litequeue sets synchronous=NORMAL: in WAL mode no sync at commit (a
  power cut loses the last commits, the file stays whole).

So each line sets the one pragma that brings the peer to our level:
synced (sync=True: every commit fsynced before it returns) is FULL,
unsynced (sync=False: a kill -9 loses nothing, a power cut the last
commits) is NORMAL; the JSON and the table say which side was changed.
Every round checks that the items taken are the items put, once each in
order, and the end that nothing is left unacknowledged.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from . import lists
from .streams import payloads

REQUIRED = 10.0     # issue 13: ahead of each by at least 10x

# the peers' own settings (see above), and what a crash loses at each
PEER_DEFAULT_SYNCHRONOUS = {"persist-queue": "FULL", "litequeue": "NORMAL"}
SYNCHRONOUS = {True: "FULL", False: "NORMAL"}
SQLITE_LOSES = {"FULL": "nothing", "NORMAL": "kill -9: nothing; power cut: the last commits"}


def ours(directory: str, batch: int, rounds: int, size: int, sync: bool) -> float:
    """Seconds for rounds of put_many + reserve_many + ack_many."""
    return lists.ours(directory, batch, rounds, size, sync, acked=True)


def _persist_queue(directory: str, synchronous: str) -> tuple[Any, Callable[[], None]]:
    import persistqueue

    q: Any = persistqueue.SQLiteAckQueue(directory, multithreading=False)
    # its two connections (one and the same without multithreading)
    for conn in {id(q._getter): q._getter, id(q._putter): q._putter}.values():
        conn.execute(f"PRAGMA synchronous={synchronous}")
    return q, q.close


def _litequeue(path: str, synchronous: str) -> Any:
    import litequeue  # type: ignore[import-untyped, unused-ignore]

    q = litequeue.LiteQueue(path)
    q.conn.execute(f"PRAGMA synchronous={synchronous}")
    return q


def persist_queue(directory: str, batch: int, rounds: int, size: int, sync: bool) -> float:
    """Seconds for rounds of B put + B get + B ack on SQLiteAckQueue."""
    import persistqueue

    q, close = _persist_queue(os.path.join(directory, f"pq-{batch}-{int(sync)}"),
                              SYNCHRONOUS[sync])
    try:
        t0 = time.perf_counter()
        for r in range(rounds):
            want = payloads(batch, size, r)
            for p in want:
                q.put(p)
            got = [q.get(block=False, raw=True) for _ in want]
            if [x["data"] for x in got] != want:
                raise AssertionError(f"persist-queue round {r}: got other items")
            for x in got:
                if q.ack(x) != x["pqid"]:
                    raise AssertionError(f"persist-queue round {r}: ack missed {x['pqid']}")
        seconds = time.perf_counter() - t0
        try:
            extra = q.get(block=False)
        except persistqueue.Empty:
            extra = None
        if extra is not None or q.unack_count() or q.acked_count() != batch * rounds:
            raise AssertionError("persist-queue: items left or not acknowledged")
        return seconds
    finally:
        close()


def litequeue_side(directory: str, batch: int, rounds: int, size: int, sync: bool) -> float:
    """Seconds for rounds of B put (one transaction) + B pop + B done (one
    transaction) on LiteQueue."""
    import litequeue  # type: ignore[import-untyped, unused-ignore]

    q = _litequeue(os.path.join(directory, f"lq-{batch}-{int(sync)}.sqlite"), SYNCHRONOUS[sync])
    try:
        t0 = time.perf_counter()
        for r in range(rounds):
            want = [p.decode() for p in payloads(batch, size, r)]
            with q.transaction():
                for p in want:
                    q.put(p)
            got = [q.pop() for _ in want]
            if [m.data if m else None for m in got] != want:
                raise AssertionError(f"litequeue round {r}: popped other items")
            with q.transaction():
                for m in got:
                    q.done(m.message_id)
        seconds = time.perf_counter() - t0
        done = q.conn.execute(f"SELECT COUNT(*) FROM {q.table} WHERE status = ?",
                              (litequeue.MessageStatus.DONE.value,)).fetchone()[0]
        if q.pop() is not None or q.qsize() or done != batch * rounds:
            raise AssertionError("litequeue: items left or not done")
        return seconds
    finally:
        q.close()


PEERS: dict[str, Callable[[str, int, int, int, bool], float]] = {
    "persist-queue": persist_queue, "litequeue": litequeue_side}
PEER_LABELS = {"persist-queue": "persist-queue SQLiteAckQueue", "litequeue": "litequeue LiteQueue"}
PEER_WORK = {"persist-queue": "B put + B get + B ack, a commit each",
             "litequeue": "B put (one transaction) + B pop + B done (one transaction)"}
PEER_MODULES = {"persist-queue": "persistqueue", "litequeue": "litequeue"}
