"""Streams under SIGKILL.

A child process (sync=True) appends batches to a stream, reads batches as
a consumer of a group and acknowledges some of what it read, printing each
step once its call has returned.  The parent kills it at a random moment
(seeded), reopens the casket and checks, round after round on one casket:

* qs_check passes;
* every append that returned is there (or was acknowledged by the group
  and removed), and the batch whose append was cut off is there whole or
  not at all;
* every group read that returned stays pending until acknowledged (a crash
  loses no delivery), an acknowledgement that returned is never pending
  again, and nothing is pending that was not delivered;
* the survivors can be claimed by another consumer.
"""
from __future__ import annotations

import os
import random

import pyqstore
from _procs import complete_lines, kill_after, kill_moment

ROUNDS = 24

CHILD = r"""
import random, sys
import pyqstore

path, seed = sys.argv[1], int(sys.argv[2])
out = sys.stdout
c = pyqstore.open(path, sync=True)
s = c.stream("s")
g = s.group("g")
out.write("open\n"); out.flush()
rnd = random.Random(seed)
k = 0
while True:
    n = rnd.randint(1, 12)
    out.write("try %d %d\n" % (k, k + n)); out.flush()
    ids = s.append_many([b"%d-%d" % (seed, k + i) for i in range(n)])
    out.write("app %s\n" % " ".join(map(str, ids))); out.flush()
    k += n
    got = g.read(rnd.randint(1, 10), consumer="c%d" % seed)
    out.write("read %s\n" % " ".join(str(x.id) for x in got)); out.flush()
    ack = [x.id for x in got if rnd.random() < 0.7]
    if ack:
        out.write("tryack %s\n" % " ".join(map(str, ack))); out.flush()
        g.ack(ack)
        out.write("ack %s\n" % " ".join(map(str, ack))); out.flush()
"""


def test_stream_sigkill(tmp_path):
    path = os.path.join(str(tmp_path), "scrash.qs")
    with pyqstore.open(path, "n") as c:
        c.stream("s").group("g")
    rnd = random.Random(977)
    appended: set[int] = set()      # ids whose append returned (or was found committed)
    read: set[int] = set()          # ids delivered to the group
    acked: set[int] = set()         # ids the group acknowledged
    cut_appends = cut_acks = 0
    for rnd_no in range(ROUNDS):
        delay, wait_open = kill_moment(rnd, rnd_no, 6, [0.0, 0.005, 0.02, 0.05, 0.1],
                                       in_open=(0.02, 0.3))
        out = kill_after(CHILD, path, str(rnd_no), delay=delay,
                         ready=b"open\n" if wait_open else None)
        trying = None
        trying_ack: list[int] = []
        for ln in complete_lines(out):
            word, *rest = ln.split()
            nums = [int(x) for x in rest]
            if word == b"try":
                trying = (nums[0], nums[1])
            elif word == b"app":
                appended |= set(nums)
                trying = None
            elif word == b"read":
                read |= set(nums)
            elif word == b"tryack":
                trying_ack = nums
            elif word == b"ack":
                acked |= set(nums)
                trying_ack = []
            else:
                assert word == b"open", ln
        with pyqstore.open(path, "w") as c:
            c.check()
            s = c.stream("s")
            g = s.group("g")
            present = {x.id: x.payload for x in s.read(0, 1 << 20)}
            pending = {e.id for e in g.pending()}
            assert len(s) == len(present)
            lost = appended - set(present) - acked - set(trying_ack)
            assert not lost, f"round {rnd_no}: appended items lost {sorted(lost)[:10]}"
            if trying is not None:
                tags = {b"%d-%d" % (rnd_no, i) for i in range(*trying)}
                found = {i for i, p in present.items() if p in tags}
                assert len(found) in (0, len(tags)), (
                    f"round {rnd_no}: append cut off partly committed: {sorted(found)}")
                appended |= found
                cut_appends += 1
            again = pending & acked
            assert not again, f"round {rnd_no}: acknowledged ids pending again {sorted(again)}"
            dropped = read - acked - set(trying_ack) - pending
            assert not dropped, f"round {rnd_no}: delivered ids no longer pending {sorted(dropped)}"
            # the read cut off by the kill committed whole or not at all:
            # what is pending beyond the known reads is that read's batch
            extra = pending - read
            assert extra <= appended, f"round {rnd_no}: pending ids never appended {extra}"
            read |= extra
            if trying_ack:
                done = not (set(trying_ack) & pending)
                assert done or set(trying_ack) <= pending, (
                    f"round {rnd_no}: ack cut off partly committed")
                if done:
                    acked |= set(trying_ack)
                cut_acks += 1
            # every retained item above the group's acknowledged horizon
            horizon = min(pending) - 1 if pending else max(read, default=0)
            assert all(i > horizon for i in present), f"round {rnd_no}: retention missed"
    with pyqstore.open(path, "w") as c:
        g = c.stream("s").group("g")
        want = sorted(e.id for e in g.pending())
        assert [x.id for x in g.claim(0, consumer="rescuer", n=1 << 20)] == want
        assert {e.consumer for e in g.pending()} <= {"rescuer"}
        c.check()
    assert cut_appends + cut_acks > 0
