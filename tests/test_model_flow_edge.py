"""Property test: two outboxes and one inbox joined by a channel
that loses, duplicates, reorders and delays both the batches and the
answers, against a reference model.

The model is plain Python:

* ``put``: sender -> every payload of its committed firings, in order (the
  reference: what must arrive, exactly once, in this order);
* ``mark``: sender -> the sequence number of the last batch the receiver
  applied (what each accept must answer follows from it);
* ``received``: every payload the inbox applied, in the order applied (the
  input queue must hold exactly this);
* ``channel`` / ``answers``: the calls and the replies in flight; a call
  carries a run of one to three of a sender's batches (more than one: one
  ``accept_many``, whose verdicts follow the mark batch by batch and stop
  at the first GAP).

Any in-flight message may be delivered (and kept, as a duplicate), lost, or
left for later; the sender may offer any of its unsent batches, not only the
oldest, so early batches (GAP) arrive too.  Firings may abort or find the
outbox full; either side's casket may be closed and reopened by a new owner
(a new epoch) at any step.  At the end transfer() drains every outbox and
the input queue must hold each sender's payloads exactly as put.

The steps are a list drawn whole and played by EdgeModel (rather than a
RuleBasedStateMachine, whose runs stayed too short to send, duplicate and
reorder in one example often enough: a receiver that applied duplicates
went unnoticed in 80 examples).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore
from pyqstore.flow import Inbox, Outbox, Verdict, claim, transfer

EDGE = "a.out->r.in"
SENDERS = ["a#0", "a#1"]
MAX_BATCHES = 3

senders = st.sampled_from(SENDERS)
indexes = st.integers(0, 1000)
batches = st.one_of(st.just([]), st.lists(st.binary(max_size=12), min_size=1, max_size=4),
                    st.lists(st.binary(max_size=12), min_size=1, max_size=4))


class EdgeModel:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="qs-flow-edge-")
        self.caskets: dict[str, pyqstore.Casket] = {}
        self.outboxes: dict[str, Outbox] = {}
        for s in SENDERS:
            self._open_sender(s)
        self._open_receiver()
        self.put: dict[str, list[bytes]] = {s: [] for s in SENDERS}
        self.mark = {s: 0 for s in SENDERS}
        self.received: list[bytes] = []
        self.channel: list[tuple[str, list[tuple[int, list[bytes]]]]] = []
        self.answers: list[tuple[str, list[tuple[int, Verdict]]]] = []

    # ------------------------------------------------------------ helpers

    def _open_sender(self, s: str) -> None:
        c = pyqstore.open(os.path.join(self.dir, s + ".qs"), sync=False)
        self.caskets[s] = c
        self.outboxes[s] = Outbox(c, EDGE, s, claim(c), max_batches=MAX_BATCHES)

    def _open_receiver(self) -> None:
        c = pyqstore.open(os.path.join(self.dir, "r.qs"), sync=False)
        self.caskets["r"] = c
        self.inbox = Inbox(c, claim(c), {EDGE: "in"})

    @staticmethod
    def _tagged(s: str, payloads: list[bytes]) -> list[bytes]:
        return [s.encode() + b":" + p for p in payloads]

    # -------------------------------------------------------------- steps

    def fire(self, s: str, payloads: list[bytes], commit: bool) -> None:
        c, box = self.caskets[s], self.outboxes[s]
        items = self._tagged(s, payloads)
        c.begin()
        try:
            seq = box.put(items, c)
        except pyqstore.OutboxFull:
            c.abort()
            assert len(box.pending(100)) == MAX_BATCHES
            return
        except BaseException:
            c.abort()
            raise
        if not commit:
            c.abort()
            return
        c.commit()
        if items:
            self.put[s].extend(items)
            assert seq is not None
        else:
            assert seq is None

    def send(self, s: str, i: int, n: int = 1) -> None:
        pending = self.outboxes[s].pending(100)
        if pending:
            start = i % len(pending)
            self.channel.append((s, pending[start:start + n]))

    def deliver(self, j: int, keep: bool) -> None:
        if not self.channel:
            return
        s, run = self.channel[j % len(self.channel)]
        if not keep:
            del self.channel[j % len(self.channel)]
        if len(run) == 1:
            verdicts = [self.inbox.accept(EDGE, s, *run[0])]
        else:
            verdicts = self.inbox.accept_many(EDGE, s, run)
        want = []
        for seq, payloads in run:
            mark = self.mark[s]
            if seq == mark + 1:
                want.append(Verdict.ACCEPTED)
                self.mark[s] = seq
                self.received.extend(payloads)
            elif seq <= mark:
                want.append(Verdict.DUPLICATE)
            else:
                want.append(Verdict.GAP)
                break
        assert verdicts == want
        self.answers.append((s, [(seq, v) for (seq, _), v in zip(run, verdicts)]))

    def lose(self, j: int) -> None:
        if not self.channel:
            return
        del self.channel[j % len(self.channel)]

    def answer(self, k: int, keep: bool) -> None:
        if not self.answers:
            return
        s, verdicts = self.answers[k % len(self.answers)]
        if not keep:
            del self.answers[k % len(self.answers)]
        held = [seq for seq, v in verdicts if v is not Verdict.GAP]
        if held:
            self.outboxes[s].sent(held[-1])

    def lose_answer(self, k: int) -> None:
        if not self.answers:
            return
        del self.answers[k % len(self.answers)]

    def restart(self, who: str) -> None:
        self.caskets[who].close()
        if who == "r":
            self._open_receiver()
        else:
            self._open_sender(who)

    # ---------------------------------------------------------- invariants

    def the_port_holds_what_was_applied_each_senders_prefix(self) -> None:
        got = list(self.caskets["r"].queue("in").iter())
        assert got == self.received
        for s in SENDERS:
            mine = [p for p in got if p.startswith(s.encode() + b":")]
            assert mine == self.put[s][:len(mine)]
            assert self.inbox.mark(EDGE, s) == self.mark[s]

    def unsent_batches_are_the_tail_of_what_was_put(self) -> None:
        for s in SENDERS:
            pending = self.outboxes[s].pending(100)
            assert len(pending) <= MAX_BATCHES
            flat = [p for _, ps in pending for p in ps]
            assert self.put[s][len(self.put[s]) - len(flat):] == flat
            seqs = [seq for seq, _ in pending]
            if seqs:
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
                # only a batch the receiver holds is ever removed
                assert seqs[0] <= self.mark[s] + 1

    def check(self) -> None:
        self.the_port_holds_what_was_applied_each_senders_prefix()
        self.unsent_batches_are_the_tail_of_what_was_put()

    def drain(self) -> None:
        """transfer() empties every outbox: then each sender's payloads are
        in the port exactly once, in order."""
        for s in SENDERS:
            # one sender's outbox in windows of calls to accept_many
            many = self.no_gap_accept_many if s == SENDERS[0] else None
            transfer(self.outboxes[s], self.no_gap_accept, window=MAX_BATCHES,
                     accept_many=many)
            assert self.outboxes[s].next() is None
        got = list(self.caskets["r"].queue("in").iter())
        for s in SENDERS:
            assert [p for p in got if p.startswith(s.encode() + b":")] == self.put[s]
        assert len(got) == sum(len(v) for v in self.put.values())

    def no_gap_accept(self, edge: str, s: str, seq: int, payloads: list[bytes]) -> Verdict:
        # a direct call offering the oldest unsent batch: a GAP here means
        # the outbox dropped a batch the receiver never applied (retrying
        # it would never end)
        verdict = self.inbox.accept(edge, s, seq, payloads)
        assert verdict is not Verdict.GAP, f"batch {seq} of {s}: the batches before it are lost"
        return verdict

    def no_gap_accept_many(self, edge: str, s: str,
                           run: list[tuple[int, list[bytes]]]) -> list[Verdict]:
        verdicts = self.inbox.accept_many(edge, s, run)
        assert Verdict.GAP not in verdicts, f"{run[0][0]} of {s}: the batches before it are lost"
        assert len(verdicts) == len(run)
        return verdicts

    def close(self) -> None:
        for c in self.caskets.values():
            c.close()
        shutil.rmtree(self.dir, ignore_errors=True)


steps = st.lists(st.one_of(
    st.tuples(st.just("fire"), senders, batches, st.booleans()),
    st.tuples(st.just("fire"), senders, batches, st.just(True)),
    st.tuples(st.just("send"), senders, indexes, st.integers(1, 3)),
    st.tuples(st.just("send"), senders, indexes, st.just(1)),
    st.tuples(st.just("deliver"), indexes, st.booleans()),
    st.tuples(st.just("deliver"), indexes, st.booleans()),
    st.tuples(st.just("lose"), indexes),
    st.tuples(st.just("answer"), indexes, st.booleans()),
    st.tuples(st.just("answer"), indexes, st.booleans()),
    st.tuples(st.just("lose_answer"), indexes),
    st.tuples(st.just("restart"), st.sampled_from(SENDERS + ["r"])),
), min_size=40, max_size=160)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=steps)
def test_every_payload_arrives_once_in_order_over_a_bad_channel(steps) -> None:
    model = EdgeModel()
    try:
        for name, *args in steps:
            getattr(model, name)(*args)
            model.check()
        model.drain()
    finally:
        model.close()
