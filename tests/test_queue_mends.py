"""The gaps closed after issue 13's policy work: a full dead-letter queue
holds a dead item back instead of overfilling; a reserve's delivery count
survives the abort of the transaction it ran in and a SIGKILL of its
process with that transaction open; get on a codec queue counts no
delivery; a put with a priority or a delay waits for room like a plain
one."""
from __future__ import annotations

import time

import pytest

import pyqstore
from _procs import kill_child, recv


# ------------------------------------------------------ full dead-letter queue


def test_full_dead_letter_queue_holds_the_item(casket):
    """The move never overfills the dead-letter queue: the spent item stays
    in its queue (counted by len, handed to nobody) and moves with the
    first take after the dead-letter queue has room."""
    dead = casket.queue("dead", maxsize=1)
    dead.put(b"occupant")
    q = casket.queue("jobs", max_deliveries=1, dead_letter="dead")
    q.put_many([b"a", b"b"])
    q.reserve().release()                       # a: its one delivery
    it = q.reserve()
    assert it.payload == b"b"                   # a held back, b delivered
    it.release()
    assert (len(q), len(dead)) == (2, 1)
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)                      # both spent, neither moves
    assert (len(q), len(dead)) == (2, 1)
    assert dead.get() == b"occupant"
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)                      # moves a, holds b back
    assert (len(q), len(dead)) == (1, 1)
    assert dead.get() == b"a"
    with pytest.raises(pyqstore.Empty):
        q.get(block=False)
    assert (len(q), len(dead)) == (0, 1)
    assert dead.get() == b"b"
