#!/usr/bin/env python3
"""Writes the seed corpus of csrc/fuzz_open.c into this directory.

    python csrc/fuzz_corpus/make_corpus.py [--out DIR]

Each seed is one fuzz input in fuzz_open.c's layout:

    byte 0      flags (1 FIX_MAIN, 2 FIX_LOG, 4 NO_LOG, 8 FIX_SALT, 16 WRITES)
    bytes 1..4  u32 little-endian: length of the main file
    then        the main file NAME, then the log NAME-log

The caskets are made with the pyqstore package: records, duplicates,
overflow keys and values, queues (plain, shared payloads), a free list, a
log holding committed transactions (files copied while the casket is still
open, with a checkpoint size large enough that nothing was checkpointed),
then damaged variants (truncations, flipped bytes, a foreign log, a bad
version).  Logs are cut after their last non-zero byte: the zero-filled
tail the engine reserves ahead of use carries nothing, and the corpus stays
small.  Salts are random, so two runs give different bytes.

Only files named seed-* are rewritten; crash-* files and inputs merged in by
`make -f fuzz.mk fuzz-merge` are kept.
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repo, for an in-place import

import pyqstore  # noqa: E402
from pyqstore._qstore import lib  # noqa: E402

PAGE = 4096
FIX_MAIN, FIX_LOG, NO_LOG, FIX_SALT, WRITES = 1, 2, 4, 8, 16
FIX = FIX_MAIN | FIX_LOG


def pack(main: bytes, log: bytes | None, flags: int) -> bytes:
    if log is None:
        flags |= NO_LOG
        log = b""
    return bytes([flags]) + struct.pack("<I", len(main)) + main + log


def trim_log(log: bytes) -> bytes:
    end = len(log.rstrip(b"\0"))
    end = max(PAGE, (end + 7) // 8 * 8)
    return log[:end]


def read_pair(path: str) -> tuple[bytes, bytes | None]:
    with open(path, "rb") as f:
        main = f.read()
    try:
        with open(path + "-log", "rb") as f:
            log = trim_log(f.read())
    except FileNotFoundError:
        log = None
    return main, log


class Maker:
    def __init__(self, out: str, tmp: str) -> None:
        self.out = out
        self.tmp = tmp
        self.n = 0
        self.seeds: dict[str, tuple[bytes, bytes | None]] = {}
        self.stats: dict[str, dict] = {}

    def path(self, name: str) -> str:
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, "c")

    def emit(self, name: str, main: bytes, log: bytes | None, flags: int) -> None:
        data = pack(main, log, flags)
        with open(os.path.join(self.out, f"seed-{name}"), "wb") as f:
            f.write(data)
        self.n += 1

    def closed(self, name: str, fill, **kw) -> tuple[bytes, bytes | None]:
        """A casket filled by fill(c), closed (so checkpointed)."""
        p = self.path(name)
        with pyqstore.open(p, "n", sync=False, **kw) as c:
            fill(c)
            c.check()
            c.sync()
            self.stats[name] = c.stats()
        pair = read_pair(p)
        self.seeds[name] = pair
        return pair

    def live(self, name: str, fill, sync: bool = False) -> tuple[bytes, bytes | None]:
        """A casket filled by fill(c) whose files are copied while it is
        open: its commits are still in the log (with sync, each commit
        frame declares the ones before it synced)."""
        p = self.path(name)
        with pyqstore.open(p, "n", sync=sync, checkpoint_size=64 << 20) as c:
            fill(c)
            c.check()
            self.stats[name] = c.stats()
            pair = read_pair(p)
        self.seeds[name] = pair
        return pair


def fill_records(c) -> None:
    for i in range(40):
        c.put(b"key%03d" % i, b"value-%d" % i)


def fill_dups(c) -> None:
    for i in range(60):
        c.putdup(b"dup", b"v%02d" % i)
    c.putdup(b"a", b"1")
    c.putdup(b"z", b"2")


def fill_tree(c) -> None:
    # Enough records for several leaves under an interior root.
    c.putdup_many((b"k%05d" % i, b"x" * (i % 23)) for i in range(150))


def fill_overflow(c) -> None:
    c.put(b"big", bytes(range(256)) * 20)            # 5120 bytes: 2 overflow pages
    c.put(b"small", b"s")
    c.put(b"K" * 1500, b"long key")                  # key spills past the inline prefix


def fill_queues(c) -> None:
    q = c.queue("jobs")
    for i in range(20):
        q.put(b"job-%d" % i)
    c.queue("other").put(b"o" * 4500)                # an item with an overflow payload
    c.publish(b"shared payload", ["jobs", "fan1", "fan2"])
    q.get()
    q.get()
    c.put(b"rec", b"beside the queues")


def fill_keys(c) -> None:
    """Dedup keys: live ones, keys whose item went (the expiry index), a
    window in the config."""
    q = c.queue("keyed", dedup_window=3600)
    q.put_many([b"k-%d" % i for i in range(12)], keys=[b"key-%d" % i for i in range(12)])
    q.put(b"dup", key=b"key-3")
    q.get_many(5)
    c.queue("nowin").put(b"x", key=b"only while held")


def fill_freelist(c) -> None:
    c.putdup_many((b"f%05d" % i, b"y" * 40) for i in range(200))
    for i in range(0, 200):
        if i % 7:
            c.out(b"f%05d" % i)
    c.put(b"ov", b"o" * 6000)
    del c[b"ov"]


def fill_live(c) -> None:
    for i in range(5):
        with c.transaction():
            c.put(b"t%d" % i, b"committed %d" % i)
            c.putdup(b"dup", b"%d" % i)
    c.put(b"big", b"B" * 5000)
    c.queue("q").put(b"in the log")
    c.out(b"t0")


def fill_live_queues(c) -> None:
    q = c.queue("work")
    q.put_many([b"w%d" % i for i in range(30)])
    q.get_many(5)
    c.publish(b"pub", ["work", "w2"])


def frame_starts(log: bytes) -> list[int]:
    """Offsets after the header where the frame magic "QSFR" occurs: every
    frame's start (and, rarely, a few bytes inside a page that look alike:
    one more cut does no harm)."""
    starts, at = [], log.find(b"QSFR", PAGE)
    while at >= 0:
        starts.append(at)
        at = log.find(b"QSFR", at + 1)
    return starts


def flip(data: bytes, at: int, mask: int = 0x01) -> bytes:
    b = bytearray(data)
    at %= len(b)
    b[at] ^= mask
    return bytes(b)


def put_u32(data: bytes, at: int, v: int) -> bytes:
    b = bytearray(data)
    b[at:at + 4] = struct.pack("<I", v)
    return bytes(b)


def fill_semantics(c) -> None:
    """Issue 13's records: a config with dead letters ('m'), delivery
    counts and a reason, priority runs ('r'), delayed items ('d'), a
    stream "s" with group "g" and a pending entry ('s', 't', 'g', 'e')."""
    q = c.queue("jobs", maxsize=50, max_deliveries=1, dead_letter="dead")
    q.put_many([b"p%d" % i for i in range(4)], priority=6)
    q.put(b"later", delay=1e6)
    q.put(b"plain")
    q.reserve(timeout=0).fail("first try")
    q.reserve(timeout=0).release(delay=1e6)
    q.get()                                          # moves the failed one to "dead"
    s = c.stream("s")
    g = s.group("g", start="first")
    s.append_many([b"s%d" % i for i in range(6)])
    g.ack([x.id for x in g.read(2)])
    g.read(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.startswith("seed-"):
            os.unlink(os.path.join(args.out, f))
    tmp = tempfile.mkdtemp(prefix="qs-corpus-")
    try:
        m = Maker(args.out, tmp)
        empty = m.closed("empty", lambda c: None)
        m.emit("empty", *empty, FIX)
        m.emit("empty-nolog", empty[0], None, FIX)
        rec = m.closed("records", fill_records)
        m.emit("records", *rec, FIX)
        m.emit("records-writes", *rec, FIX | WRITES)
        m.emit("records-nofix", *rec, 0)
        dups = m.closed("dups", fill_dups)
        m.emit("dups", *dups, FIX)
        tree = m.closed("tree", fill_tree)
        m.emit("tree", *tree, FIX)
        ovf = m.closed("overflow", fill_overflow)
        m.emit("overflow", *ovf, FIX)
        qs = m.closed("queues", fill_queues)
        m.emit("queues", *qs, FIX)
        sem = m.closed("semantics", fill_semantics)
        m.emit("semantics", *sem, FIX)
        m.emit("semantics-writes", *sem, FIX | WRITES)
        lsem = m.live("live-semantics", fill_semantics)
        m.emit("live-semantics", *lsem, FIX | FIX_SALT)
        ks = m.closed("keys", fill_keys)
        m.emit("keys", *ks, FIX)
        m.emit("keys-writes", *ks, FIX | WRITES)
        fl = m.closed("freelist", fill_freelist)
        m.emit("freelist", *fl, FIX)
        live = m.live("live", fill_live)
        m.emit("live", *live, FIX | FIX_SALT)
        m.emit("live-writes", *live, FIX | FIX_SALT | WRITES)
        lq = m.live("live-queues", fill_live_queues)
        m.emit("live-queues", *lq, FIX | FIX_SALT)

        # ---- damaged variants
        rmain, rlog = rec
        m.emit("trunc-main-half-page", rmain[: PAGE + PAGE // 2], rlog, 0)
        m.emit("trunc-main-one-page", rmain[:PAGE], rlog, FIX)
        m.emit("trunc-main-tiny", rmain[:100], rlog, 0)
        m.emit("bad-magic", flip(rmain, 0), rlog, FIX)
        # newer than we read
        m.emit("bad-version", put_u32(rmain, 8, lib.QS_FORMAT_VERSION + 1), rlog, FIX)
        m.emit("bad-pagesize", put_u32(rmain, 12, 8192), rlog, FIX)
        m.emit("bad-checksum", flip(rmain, PAGE + 40), rlog, 0)
        # Meta fields (page 0 trailer, resealed): npages huge, a root past
        # the end, a free head past the end.
        m.emit("meta-npages", put_u32(rmain, 4028, 0xFFFFFFF0), rlog, FIX)
        m.emit("meta-root", put_u32(rmain, 4028 + 12, len(rmain) // PAGE + 3), rlog, FIX)
        tmain = tree[0]
        m.emit("root-is-page0", put_u32(rmain, 4028 + 12, 0), rlog, FIX)
        m.emit("tree-cell-count", put_u32(tmain, PAGE + 2, 0xFFFF), tree[1], FIX)
        # Page 1's type byte flipped between leaf (1) and interior (2).
        m.emit("tree-page1-type", tmain[:PAGE] + bytes([tmain[PAGE] ^ 3]) + tmain[PAGE + 1:],
               tree[1], FIX)
        omain = ovf[0]
        for i in range(1, len(omain) // PAGE):
            if omain[i * PAGE] == 3:            # first overflow page: break its chain link
                m.emit("overflow-chain", put_u32(omain, i * PAGE + 4, 0xFFFF), ovf[1], FIX)
                break
        lmain, llog = live
        if llog and len(llog) > PAGE:
            m.emit("live-trunc-log-midframe", lmain, llog[: PAGE + (len(llog) - PAGE) // 2], FIX | FIX_SALT)
            m.emit("live-trunc-log-header", lmain, llog[: PAGE // 2], 0)
            m.emit("live-log-flip-frame", lmain, flip(llog, PAGE + 100), 0)
            m.emit("live-log-flip-frame-fixed", lmain, flip(llog, PAGE + 100, 0x40), FIX | FIX_SALT)
            m.emit("live-foreign-log", lmain, m.seeds["live-queues"][1], FIX)
        # A synced log: each commit frame declares the earlier ones synced,
        # so damage before the last commit is CorruptError, not a torn tail.
        # Not resealed (no FIX_LOG): the damage has to stay damage.
        smain, slog = m.live("live-synced", fill_live, sync=True)
        starts = frame_starts(slog)
        assert len(starts) >= 8, starts
        mid = starts[len(starts) // 2]
        m.emit("synced-log-flip-mid", smain, flip(slog, mid + 40, 0x08), FIX_MAIN)
        m.emit("synced-log-flip-frame-header", smain, flip(slog, mid + 5), FIX_MAIN)
        m.emit("synced-log-flip-header", smain, flip(slog, 40), FIX_MAIN)
        zp = mid // PAGE * PAGE
        m.emit("synced-log-zero-page", smain,
               slog[:zp] + bytes(PAGE) + slog[zp + PAGE:], FIX_MAIN)
        for i, cut in enumerate(starts + [len(slog)]):
            m.emit(f"synced-log-cut-{i:02d}", smain, slog[:cut], FIX_MAIN)
        m.emit("records-empty-log", rmain, b"", 0)
        m.emit("tiny", b"qstore\0\x1a", None, 0)
        # The seeds hold what they are meant to (the engine may change).
        st = m.stats
        assert st["tree"]["depth"] >= 2, st["tree"]
        assert st["freelist"]["free_pages"] > 0, st["freelist"]
        assert st["live"]["log_bytes"] > 0 and st["live-queues"]["log_bytes"] > 0
        total = sum(os.path.getsize(os.path.join(args.out, f))
                    for f in os.listdir(args.out) if f.startswith("seed-"))
        print(f"wrote {m.n} seeds ({total} bytes) to {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
