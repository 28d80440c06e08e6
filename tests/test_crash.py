"""Durability under SIGKILL.

A child process commits numbered transactions (every third with
``commit(sync=False)``) and prints each number once its commit has returned; the parent kills it at a random moment, reopens the
casket and checks that the state is exactly the state after transaction j
for some j >= the last number printed: every committed transaction is
present in full and no transaction is present in part.

The child runs with a small page cache (big transactions spill dirty pages
before commit) and a small checkpoint threshold (checkpoints run while it
commits), and some rounds kill it while it is still opening (recovering)
the casket.  Rounds continue on the same casket, so recovery after
recovery is exercised too.
"""
from __future__ import annotations

import os
import random

import pyqstore
from _procs import complete_lines, kill_after, kill_moment

# CI runs 200 (QS_CRASH_ROUNDS=200); 20 keep the everyday suite quick.
ROUNDS = int(os.environ.get("QS_CRASH_ROUNDS", "20"))
RECORDS = 4  # small records per transaction
BULK_EVERY = 7  # every 7th transaction also writes a bulk that spills
BULK = 150  # records in a bulk, ~1 KiB each


def value(i: int, m: int) -> bytes:
    n = 5000 if m == 0 and i % 3 == 0 else 10 + (i * 7 + m) % 300
    return (b"%d/%d|" % (i, m) * n)[:n]


def bulk_value(i: int, m: int) -> bytes:
    return (b"bulk %d %d;" % (i, m)) * 90


def apply_txn(model: dict[bytes, list[bytes]], i: int) -> None:
    """Transaction i, applied to a model (the child does the same)."""
    for m in range(RECORDS):
        model[b"k%d-%d" % (i, m)] = [value(i, m)]
    model.setdefault(b"dups", []).append(b"%d" % i)
    if i > 0:
        model.pop(b"gone%d" % (i - 1), None)
    model[b"gone%d" % i] = [b"x"]
    if i % BULK_EVERY == 0:
        model.pop(b"bulk%d" % (i - BULK_EVERY), None)
        model[b"bulk%d" % i] = [bulk_value(i, m) for m in range(BULK)]
    model[b"last"] = [b"%d" % i]


CHILD = f"""
import sys, pyqstore
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_crash import RECORDS, BULK, BULK_EVERY, value, bulk_value
path, first = sys.argv[1], int(sys.argv[2])
c = pyqstore.open(path, "w", sync=True, cache_size=128 * 1024,
                  checkpoint_size=256 * 1024)
print("open", flush=True)
i = first
while True:
    # every third commit does not wait for its sync: a kill must not lose
    # it either (it is in the log once commit returns)
    with c.transaction(sync=i % 3 != 1):
        for m in range(RECORDS):
            c.put(b"k%d-%d" % (i, m), value(i, m))
        c.putdup(b"dups", b"%d" % i)
        if i > 0:
            c.out(b"gone%d" % (i - 1))
        c.put(b"gone%d" % i, b"x")
        if i % BULK_EVERY == 0:
            c.outlist(b"bulk%d" % (i - BULK_EVERY))
            c.putdup_many((b"bulk%d" % i, bulk_value(i, m)) for m in range(BULK))
        c.put(b"last", b"%d" % i)
    print(i, flush=True)
    i += 1
"""


def run_child(path: str, first: int, delay: float, wait_open: bool) -> int | None:
    """Start the writer and SIGKILL it `delay` seconds after it has opened
    the casket (or after it started, when not wait_open); return the last
    transaction number it reported (None if none)."""
    out = kill_after(CHILD, path, str(first), delay=delay,
                     ready=b"open\n" if wait_open else None)
    last = None
    for ln in complete_lines(out):
        if ln != b"open":
            last = int(ln)
    return last


def items_of(model: dict[bytes, list[bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k in sorted(model) for v in model[k]]


def test_sigkill_durability(tmp_path):
    path = os.path.join(str(tmp_path), "crash.qs")
    with pyqstore.open(path, "n") as c:
        c.check()
    rnd = random.Random(1234)
    committed = -1  # highest transaction known to be in the casket
    model: dict[bytes, list[bytes]] = {}  # state after `committed`
    mid_stream = 0
    for rnd_no in range(ROUNDS):
        delay, wait_open = kill_moment(rnd, rnd_no, 4, [0.0, 0.002, 0.01, 0.03, 0.08, 0.15, 0.3],
                                       in_open=(0.02, 0.25))
        reported = run_child(path, committed + 1, delay, wait_open)
        with pyqstore.open(path, "w") as c:
            c.check()
            last = c.get(b"last")
            j = -1 if last is None else int(last)
            assert j >= committed, f"round {rnd_no}: lost transactions {j + 1}..{committed}"
            if reported is not None:
                assert j >= reported, f"round {rnd_no}: reported {reported}, found {j}"
                mid_stream += 1
            # At most the one transaction in flight at the kill is extra.
            assert j <= (reported if reported is not None else committed) + 1
            for i in range(committed + 1, j + 1):
                apply_txn(model, i)
            expect = items_of(model)
            got = list(c.items())
            if got != expect:
                gk = {k for k, _ in got}
                ek = {k for k, _ in expect}
                raise AssertionError(
                    f"round {rnd_no}: state is not that after transaction {j}: "
                    f"extra keys {sorted(gk - ek)[:5]}, missing {sorted(ek - gk)[:5]}"
                )
            assert len(c) == len(expect)
            committed = j
    assert committed > BULK_EVERY
    assert mid_stream > 0
