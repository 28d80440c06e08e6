"""Issue 13's broker comparisons in one run: every line pyqstore against
one peer doing the same work at a stated durability, and the ratio.

  stream  append + group read + ack against Redis Streams (streams.py)
  list    put_many + get_many against Redis lists, LPUSH + BRPOP (lists.py)
  ack     put + take + ack against persist-queue's SQLiteAckQueue and
          litequeue (ackqueues.py)

The Redis lines run at each of servers.LEVELS (appendfsync always beside
sync=True; appendfsync no and Redis's default, RDB snapshots, beside
sync=False), the ack lines synced and unsynced.  Each line carries both
sides' durability and what a crash loses on each, whether the two are
equal, and the issue's requirement (ahead of Redis; 10x the ack queues).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import tempfile
from typing import Any, Optional

from . import ackqueues, lists, servers, streams
from .experiments import Progress, _quiet

FAMILIES = ("stream", "list", "ack")
_REDIS_WORK = {"stream": ("Redis Streams", "XADD (pipelined) + XREADGROUP + XACK",
                          streams.ours, streams.redis_side),
               "list": ("Redis lists", "LPUSH (B values) + BRPOP (pipelined)",
                        lists.ours, lists.redis_side)}
_OUR_WORK = {"stream": "append_many + Group.read + Group.ack",
             "list": "put_many + get_many",
             "ack": "put_many + reserve_many + ack_many"}


def _line(family: str, peer: str, work: str, batch: int, rounds: int, sync: bool,
          ours_s: float, theirs_s: float, peer_durability: str, peer_loses: str,
          equal: bool, required: float) -> dict[str, Any]:
    items = batch * rounds
    ratio = theirs_s / ours_s
    return {"family": family, "peer": peer, "pyqstore_work": _OUR_WORK[family],
            "peer_work": work, "batch": batch, "rounds": rounds, "items": items,
            "sync": sync, "pyqstore_durability": "sync on" if sync else "sync off",
            "pyqstore_loses": servers.PYQSTORE_LOSES[sync],
            "peer_durability": peer_durability, "peer_loses": peer_loses,
            "equal_durability": equal,
            "pyqstore_items_per_s": items / ours_s, "peer_items_per_s": items / theirs_s,
            "ratio": ratio, "required": required, "meets": ratio >= required}


def _redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                         timeout=30)
    return out.stdout.strip()


def peers(families: list[str]) -> dict[str, dict[str, Any]]:
    """Each peer the families need: available (with its version) or why not."""
    report: dict[str, dict[str, Any]] = {}
    if {"stream", "list"} & set(families):
        if not shutil.which("redis-server"):
            report["redis"] = {"available": False, "reason": "redis-server is not installed; "
                               "install: apt-get install redis-server"}
        else:
            try:
                importlib.import_module("redis")
                report["redis"] = {"available": True, "version": _redis_version() +
                                   ", redis-py " + importlib.metadata.version("redis")}
            except ImportError:
                report["redis"] = {"available": False,
                                   "reason": "redis-py is not installed; install: pip install redis"}
    if "ack" in families:
        for name, module in ackqueues.PEER_MODULES.items():
            try:
                importlib.import_module(module)
                report[name] = {"available": True,
                                "version": importlib.metadata.version(name)}
            except ImportError:
                report[name] = {"available": False,
                                "reason": f"{module} is not installed; install: pip install {name}"}
    return report


def steps(families: list[str], batches: int, syncs: list[bool]) -> int:
    """How many lines run() measures (for a progress bar)."""
    levels = sum(1 for sync, _ in servers.LEVELS if sync in syncs)
    redis = sum(1 for f in families if f in _REDIS_WORK)
    return redis * levels * batches + ("ack" in families) * len(syncs) * len(ackqueues.PEERS)


def run(batches: list[int], rounds: int, size: int, families: list[str] = list(FAMILIES),
        ack_batch: int = 100, syncs: list[bool] = [True, False], base: Optional[str] = None,
        progress: Progress = _quiet) -> dict[str, Any]:
    """Every line of the chosen families, in one run."""
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        raise ValueError(f"families are {', '.join(FAMILIES)}; not {', '.join(bad)}")
    report = peers(families)
    directory = tempfile.mkdtemp(prefix="qstore-bench-brokers-", dir=base)
    lines: list[dict[str, Any]] = []
    try:
        redis_families = [f for f in families if f in _REDIS_WORK]
        if redis_families and report["redis"]["available"]:
            for sync, level in servers.LEVELS:
                if sync not in syncs:
                    continue
                with servers.Redis(level) as server:
                    for family in redis_families:
                        peer, work, ours, theirs = _REDIS_WORK[family]
                        for batch in batches:
                            progress(f"{family} {server.durability} batch={batch}")
                            o = ours(directory, batch, rounds, size, sync)
                            t = theirs(server.port, batch, rounds, size)
                            lines.append(_line(family, peer, work, batch, rounds, sync, o, t,
                                               server.durability, server.loses,
                                               level != "default", 1.0))
        if "ack" in families:
            for sync in syncs:
                for name, side in ackqueues.PEERS.items():
                    if not report[name]["available"]:
                        continue
                    progress(f"ack {name} sync={sync} batch={ack_batch}")
                    o = ackqueues.ours(directory, ack_batch, rounds, size, sync)
                    t = side(directory, ack_batch, rounds, size, sync)
                    level = ackqueues.SYNCHRONOUS[sync]
                    own = ackqueues.PEER_DEFAULT_SYNCHRONOUS[name] == level
                    lines.append(_line(
                        "ack", ackqueues.PEER_LABELS[name], ackqueues.PEER_WORK[name],
                        ack_batch, rounds, sync, o, t,
                        f"synchronous={level} ({'its default' if own else 'set by the bench'})",
                        ackqueues.SQLITE_LOSES[level], True, ackqueues.REQUIRED))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {"experiment": "brokers", "payload_size": size, "rounds": rounds,
            "peers": report, "lines": lines,
            "all_meet": all(x["meets"] for x in lines)}
