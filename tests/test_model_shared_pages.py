"""Stateful property test: several handles of one casket in one process,
which share the committed pages they read (csrc/pshare.c), against a
reference model.

Any handle writes, any handle reads; checkpoints start new log
generations, small caches evict, a snapshot keeps reading its commit while
the others move on, handles close and reopen.  Whatever a handle took from
another, every read must be what the model holds for the view it reads:
the newest commit for a handle, the snapshot's commit for a snapshot.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyqstore

HANDLES = 3
# Enough keys and long enough values that the tree has many pages, so
# that images are shared, replaced and evicted page by page.
KEYS = [b"k%04d" % i for i in range(600)]

keys = st.sampled_from(KEYS)
key_sets = st.lists(keys, min_size=1, max_size=120)
values = st.builds(lambda n, b: bytes([b]) * n, st.integers(1, 300), st.integers(0, 255))
handle_ids = st.integers(0, HANDLES - 1)


class SharedPagesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pyqstore-shared-")
        self.path = os.path.join(self.dir, "s.qs")
        # the smallest caches (64 pages) and a checkpoint every 64 KiB
        self.open_kw = dict(sync=False, cache_size=1, checkpoint_size=64 * 1024)
        self.handles: list[pyqstore.Casket] = [
            pyqstore.open(self.path, "n" if i == 0 else "w", **self.open_kw)
            for i in range(HANDLES)]
        self.model: dict[bytes, bytes] = {}
        self.snap: pyqstore.Snapshot | None = None
        self.snap_model: dict[bytes, bytes] = {}

    def teardown(self) -> None:
        try:
            if self.snap is not None:
                self.snap.close()
            for h in self.handles:
                h.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(h=handle_ids, ks=key_sets, v=values)
    def write_batch(self, h, ks, v):
        with self.handles[h].transaction():
            for k in ks:
                self.handles[h].put(k, v + k)
        for k in ks:
            self.model[k] = v + k

    @rule(h=handle_ids, k=keys, v=values)
    def put_one(self, h, k, v):
        # its own commit: the others follow it from the commits the
        # handles of this process filed (pshare.h, ps_catch_up)
        self.handles[h].put(k, v)
        self.model[k] = v

    @rule(h=handle_ids, ks=key_sets)
    def delete_some(self, h, ks):
        c = self.handles[h]
        with c.transaction():
            for k in set(ks):
                if k in self.model:
                    del c[k]
                    del self.model[k]

    @rule(h=handle_ids)
    def checkpoint(self, h):
        if self.snap is None:   # a snapshot holds checkpoints off
            self.handles[h].sync()

    @rule(h=handle_ids, ks=key_sets)
    def read_some(self, h, ks):
        c = self.handles[h]
        for k in ks:
            assert c.get(k) == self.model.get(k), (h, k)

    @rule(h=handle_ids)
    def reopen(self, h):
        self.handles[h].close()
        self.handles[h] = pyqstore.open(self.path, "w", **self.open_kw)

    @precondition(lambda self: self.snap is None)
    @rule(h=handle_ids)
    def take_snapshot(self, h):
        self.snap = self.handles[h].snapshot()
        self.snap_model = dict(self.model)

    @precondition(lambda self: self.snap is not None)
    @rule(ks=key_sets)
    def read_snapshot(self, ks):
        assert self.snap is not None
        for k in ks:
            assert self.snap.get(k) == self.snap_model.get(k), k

    @precondition(lambda self: self.snap is not None)
    @rule()
    def drop_snapshot(self):
        assert self.snap is not None
        self.snap.close()
        self.snap = None

    @invariant()
    def every_handle_reads_the_model(self):
        for h, c in enumerate(self.handles):
            got = dict(c.items())
            assert got == self.model, h


SharedPagesMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSharedPages = SharedPagesMachine.TestCase


def test_handles_share_what_they_read(tmp_path):
    """A second handle takes the pages the first read (stats() counts
    them), and both read the same records."""
    path = str(tmp_path / "c.qs")
    with pyqstore.open(path, "n", sync=False) as w:
        with w.transaction():
            for k in KEYS:
                w.put(k, k * 20)
    with pyqstore.open(path, "r") as a, pyqstore.open(path, "r") as b:
        assert [a.get(k) for k in KEYS] == [k * 20 for k in KEYS]
        assert [b.get(k) for k in KEYS] == [k * 20 for k in KEYS]
        sa, sb = a.stats(), b.stats()
        assert sa["pages_read"] > 10
        assert sb["pages_read"] == 0
        assert sb["pages_shared"] >= sa["pages_read"]
