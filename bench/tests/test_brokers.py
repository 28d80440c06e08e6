"""qstore-bench brokers (and streams' levels): pyqstore against Redis
Streams, Redis lists, persist-queue's SQLiteAckQueue and litequeue, at
tiny sizes: each line runs, checks what came back, and says at which
durability both sides ran (not speed)."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

import pyqstore
from qstore_bench import ackqueues, brokers, lists, servers
from qstore_bench.cli import main

redis = pytest.importorskip("redis")
persistqueue = pytest.importorskip("persistqueue")
litequeue = pytest.importorskip("litequeue")
pytestmark = pytest.mark.skipif(not shutil.which("redis-server"),
                                reason="redis-server is not installed")


def test_every_line_in_one_run_with_its_durability(tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["brokers", "--batches", "3,10", "--ack-batch", "7",
                                    "--rounds", "2", "--json", str(out), "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    got = [(x["peer"], x["batch"], x["sync"], x["peer_durability"]) for x in data["lines"]]
    redis_lines = [(peer, b, sync, d) for sync, d in [(True, "appendfsync always"),
                                                      (False, "appendfsync no"),
                                                      (False, "redis default (RDB)")]
                   for peer in ("Redis Streams", "Redis lists") for b in (3, 10)]
    ack_lines = [("persist-queue SQLiteAckQueue", 7, True, "synchronous=FULL (its default)"),
                 ("litequeue LiteQueue", 7, True, "synchronous=FULL (set by the bench)"),
                 ("persist-queue SQLiteAckQueue", 7, False,
                  "synchronous=NORMAL (set by the bench)"),
                 ("litequeue LiteQueue", 7, False, "synchronous=NORMAL (its default)")]
    assert got == redis_lines + ack_lines
    for x in data["lines"]:
        assert x["items"] == 2 * x["batch"] and x["rounds"] == 2
        assert x["pyqstore_items_per_s"] > 0 and x["peer_items_per_s"] > 0
        assert x["ratio"] == pytest.approx(x["pyqstore_items_per_s"] / x["peer_items_per_s"])
        assert x["meets"] == (x["ratio"] >= x["required"])
        assert x["required"] == (10 if x["family"] == "ack" else 1)
        # only Redis's default loses more than the pyqstore side it faces
        assert x["equal_durability"] == (x["peer_durability"] != "redis default (RDB)")
        assert x["pyqstore_loses"] == servers.PYQSTORE_LOSES[x["sync"]]
    assert data["all_meet"] == all(x["meets"] for x in data["lines"])
    assert set(data["peers"]) == {"redis", "persist-queue", "litequeue"}
    assert all(p["available"] for p in data["peers"].values())
    for text in ("ratio", "required", "what a crash loses", "every line meets its requirement",
                 "redis default (RDB)", "synchronous=NORMAL"):
        assert text in res.output


def test_only_picks_families_and_bad_ones_are_usage_errors(tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["brokers", "--only", "ack", "--sync", "sync",
                                    "--ack-batch", "4", "--rounds", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    lines = json.loads(out.read_text())["lines"]
    assert [(x["family"], x["sync"], x["items"]) for x in lines] == [("ack", True, 4)] * 2
    res = CliRunner().invoke(main, ["brokers", "--only", "stream,kafka"])
    assert res.exit_code == 2 and "give some of stream, list, ack" in res.output
    res = CliRunner().invoke(main, ["brokers", "--batches", "0"])
    assert res.exit_code == 2 and "batch sizes" in res.output


@pytest.mark.parametrize("level, appendonly, fsync, save", [
    ("always", "yes", "always", ""),
    ("no", "yes", "no", ""),
    ("default", "no", "everysec", "3600 1 300 100 60 10000"),
])
def test_redis_runs_at_the_level_its_lines_name(level, appendonly, fsync, save):
    # the "default" line is redis-server's own configuration: RDB
    # snapshots and no append-only file, not the bench's AOF settings
    with servers.Redis(level) as server:
        r = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
        try:
            cfg = r.config_get("*")
            assert (cfg["appendonly"], cfg["appendfsync"], cfg["save"]) == (appendonly, fsync,
                                                                             save)
        finally:
            r.close()
    with pytest.raises(ValueError, match="redis durability 'sometimes'"):
        servers.Redis("sometimes")


@pytest.mark.parametrize("sync", [True, False])
def test_the_ack_queues_run_at_the_pyqstore_lines_level(tmp_path, sync):
    level = {True: 2, False: 1}[sync]           # PRAGMA synchronous: FULL, NORMAL
    q, close = ackqueues._persist_queue(str(tmp_path / "pq"), ackqueues.SYNCHRONOUS[sync])
    try:
        assert q._getter.execute("PRAGMA synchronous").fetchone()[0] == level
        assert q._putter.execute("PRAGMA synchronous").fetchone()[0] == level
    finally:
        close()
    lq = ackqueues._litequeue(str(tmp_path / "lq.sqlite"), ackqueues.SYNCHRONOUS[sync])
    try:
        assert lq.conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert lq.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        lq.close()


def test_the_peers_own_settings_are_what_the_lines_say(tmp_path):
    # the "(its default)" labels: read from the installed versions
    pq = persistqueue.SQLiteAckQueue(str(tmp_path / "pq"))
    lq = litequeue.LiteQueue(str(tmp_path / "lq.sqlite"))
    try:
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        assert names[pq._putter.execute("PRAGMA synchronous").fetchone()[0]] == \
            ackqueues.PEER_DEFAULT_SYNCHRONOUS["persist-queue"]
        assert names[lq.conn.execute("PRAGMA synchronous").fetchone()[0]] == \
            ackqueues.PEER_DEFAULT_SYNCHRONOUS["litequeue"]
        assert pq.auto_commit is True           # its ack queue commits every statement
    finally:
        pq.close()
        lq.close()


def test_a_side_that_loses_an_item_stops_the_run(tmp_path, monkeypatch):
    real = pyqstore.Queue.get_many

    def lossy(self, n, *a, **k):
        return real(self, n, *a, **k)[1:]

    monkeypatch.setattr(pyqstore.Queue, "get_many", lossy)
    with pytest.raises(AssertionError, match="pyqstore round 0"):
        lists.ours(str(tmp_path), 5, 2, 16, False)

    real_ack = persistqueue.SQLiteAckQueue.ack
    seen = []

    def skips_one(self, item=None, id=None):
        seen.append(item)
        return real_ack(self, item) if len(seen) != 3 else item["pqid"]

    monkeypatch.setattr(persistqueue.SQLiteAckQueue, "ack", skips_one)
    with pytest.raises(AssertionError, match="persist-queue: items left or not acknowledged"):
        ackqueues.persist_queue(str(tmp_path), 4, 2, 16, False)


def test_steps_counts_the_lines_run_measures(tmp_path):
    res = brokers.run([2, 3], 1, 16, ["list", "ack"], ack_batch=2, syncs=[False],
                      base=str(tmp_path))
    assert len(res["lines"]) == brokers.steps(["list", "ack"], 2, [False]) == 2 * 2 + 2
