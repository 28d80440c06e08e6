"""Queues under SIGKILL.

A child process (sync=True) moves items between three queues in atomic
steps -- get from one queue and put on another in one transaction, some
through reserve + ack, some in batches -- holds a few reservations outside
any transaction, and now and then put_many's a batch of new unique items
into the first queue, printing the batch once put_many has returned.  The
parent kills it at a random moment (seeded), reopens the casket and checks:

* qs_check passes;
* the items across all queues are exactly the items ever committed, each
  once: every acknowledged batch is present, nothing is duplicated (a move
  is atomic), nothing is lost; a batch whose commit was not acknowledged
  is present whole or not at all;
* reservations held at the kill are back: every item is available
  (len() counts all of them) and the ones the child held can be got.

Rounds go on with the same casket, so recovery after recovery is tested;
some rounds kill the child while it is still opening (recovering) it.
"""
from __future__ import annotations

import os
import random
import time

import pyqstore
from _procs import complete_lines, kill_after, kill_moment

ROUNDS = 50
QUEUES = ("a", "b", "c")

CHILD = r"""
import random, sys
import pyqstore
from pyqstore import Empty

path, seed, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout

def payload(n):
    # unique head, then a body the parent can verify
    size = 6000 if n % 17 == 0 else n % 200
    return b"%d|" % n + bytes((n + j) % 251 for j in range(size))

c = pyqstore.open(path, "w", sync=True, cache_size=256 * 1024,
                  checkpoint_size=128 * 1024)
qa, qb, qc = c.queue("a"), c.queue("b"), c.queue("c")
qs = (qa, qb, qc)
out.write("open\n"); out.flush()
rnd = random.Random(seed)
nxt = first
held = []
while True:
    r = rnd.random()
    try:
        if r < 0.15 or len(qa) + len(qb) + len(qc) < 5:
            k = rnd.randint(1, 30)
            out.write("try %d %d\n" % (nxt, nxt + k)); out.flush()
            qa.put_many([payload(n) for n in range(nxt, nxt + k)])
            out.write("put %d %d\n" % (nxt, nxt + k)); out.flush()
            nxt += k
        elif r < 0.35:
            with c.transaction():
                x = qa.get_nowait()
                qb.put(x)
        elif r < 0.50:
            with c.transaction():
                xs = qb.get_many(rnd.randint(1, 8))
                qc.put_many(xs)
        elif r < 0.62:
            with c.transaction():
                it = qc.reserve(timeout=0)
                qa.put(it.payload)
                it.ack()
        elif r < 0.72:
            src, dst = rnd.sample(qs, 2)
            with c.transaction():
                for _ in range(rnd.randint(1, 4)):
                    dst.put(src.get_nowait())
        elif r < 0.80:
            # a move whose transaction aborts: nothing changes
            try:
                with c.transaction():
                    qb.put(qa.get_nowait())
                    raise KeyError
            except KeyError:
                pass
        elif r < 0.90:
            # a reservation held outside any transaction
            if len(held) < 6:
                it = rnd.choice(qs).reserve(timeout=0)
                held.append(it)
                out.write("held %s\n" % it.payload.split(b"|")[0].decode()); out.flush()
        else:
            # give a held reservation back, or move it atomically
            if held:
                it = held.pop(rnd.randrange(len(held)))
                if rnd.random() < 0.5:
                    it.release()
                else:
                    with c.transaction():
                        rnd.choice(qs).put(it.payload)
                        it.ack()
                out.write("unheld %s\n" % it.payload.split(b"|")[0].decode()); out.flush()
    except Empty:
        pass
"""


def payload(n: int) -> bytes:
    size = 6000 if n % 17 == 0 else n % 200
    return b"%d|" % n + bytes((n + j) % 251 for j in range(size))


def run_child(path: str, seed: int, first: int, delay: float, wait_open: bool):
    """Run the child, SIGKILL it after delay (counted from its "open" line
    when wait_open); return (acknowledged batches, the unacknowledged batch
    or None, ids of reservations held at the kill)."""
    out = kill_after(CHILD, path, str(seed), str(first), delay=delay,
                     ready=b"open\n" if wait_open else None)
    acked: list[tuple[int, int]] = []
    pending = None
    held: set[int] = set()
    for ln in complete_lines(out):
        word, *rest = ln.split()
        if word == b"try":
            pending = (int(rest[0]), int(rest[1]))
        elif word == b"put":
            batch = (int(rest[0]), int(rest[1]))
            assert batch == pending, (batch, pending)
            acked.append(batch)
            pending = None
        elif word == b"held":
            held.add(int(rest[0]))
        elif word == b"unheld":
            held.discard(int(rest[0]))
        else:
            assert word == b"open", ln
    return acked, pending, held


def contents(c: pyqstore.Casket) -> list[int]:
    """Ids of every item in every queue (checking each payload whole)."""
    ids = []
    for name in QUEUES:
        q = c.queue(name)
        n = len(q)
        items = q.peek_many(n + 10)
        assert len(items) == n, (name, len(items), n)
        for p in items:
            i = int(p.split(b"|", 1)[0])
            assert p == payload(i), f"item {i} damaged"
            ids.append(i)
    return ids


def test_queue_sigkill(tmp_path):
    path = os.path.join(str(tmp_path), "qcrash.qs")
    with pyqstore.open(path, "n") as c:
        c.check()
    rnd = random.Random(4321)
    committed: set[int] = set()  # items known to be in the casket
    next_item = 0
    acked_batches = killed_mid_batch = held_at_kill = 0
    t_start = time.monotonic()
    for rnd_no in range(ROUNDS):
        delay, wait_open = kill_moment(rnd, rnd_no, 5, [0.0, 0.003, 0.01, 0.03, 0.06, 0.1, 0.2],
                                       in_open=(0.02, 0.3))
        acked, pending, held = run_child(path, rnd_no, next_item, delay, wait_open)
        with pyqstore.open(path, "w") as c:
            c.check()
            ids = contents(c)
            found = set(ids)
            assert len(ids) == len(found), f"round {rnd_no}: duplicated items"
            for lo, hi in acked:
                batch = set(range(lo, hi))
                assert batch <= found, f"round {rnd_no}: acknowledged batch {lo}..{hi} lost"
                committed |= batch
            acked_batches += len(acked)
            if pending is not None:
                batch = set(range(*pending))
                part = batch & found
                assert not part or part == batch, (
                    f"round {rnd_no}: batch {pending} partly committed: {sorted(part)}")
                committed |= part
                killed_mid_batch += 1
            lost = committed - found
            assert not lost, f"round {rnd_no}: lost items {sorted(lost)[:10]}"
            extra = found - committed
            assert not extra, f"round {rnd_no}: items never committed {sorted(extra)[:10]}"
            # reservations held at the kill are back and can be got
            assert held <= found, f"round {rnd_no}: held items lost"
            held_at_kill += len(held)
            # every item is available and can be got: take them all in a
            # transaction, then abort it
            try:
                with c.transaction():
                    got = []
                    for name in QUEUES:
                        q = c.queue(name)
                        got += [int(p.split(b"|", 1)[0]) for p in q.get_many(len(ids) + 10)]
                        assert len(q) == 0
                    assert sorted(got) == sorted(ids)
                    raise KeyError
            except KeyError:
                pass
            assert sorted(contents(c)) == sorted(ids)
        next_item = max([next_item] + [hi for _, hi in acked] + ([pending[1]] if pending else []))
    # the child really committed work, and kills landed mid-batch
    assert acked_batches > ROUNDS
    assert len(committed) > ROUNDS
    assert killed_mid_batch > 0
    assert held_at_kill > 0
    # finally drain everything: every committed item, once
    with pyqstore.open(path, "w") as c:
        got = []
        for name in QUEUES:
            q = c.queue(name)
            while True:
                batch = q.get_many(1000)
                if not batch:
                    break
                got.extend(int(p.split(b"|", 1)[0]) for p in batch)
        assert sorted(got) == sorted(committed)
        assert c.queues() == []
        c.check()
    assert time.monotonic() - t_start < 300  # a hang guard, not a speed test
