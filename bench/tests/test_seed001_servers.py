"""Seed 001's servers as the seed measured them: redis-benchmark (C) beside
redis-py on the same server with the same n and l, the memcached server's
own version, and MemcacheDB said to be missing, not stood in for."""
from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from qstore_bench import redis_tool, servers
from qstore_bench.cli import main
from test_adapters import _need


def _perf(tmp_path, names: str, n: int = 300, value_size: int = 24) -> tuple[dict, str]:
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["perf", "-x", "2", "-n", str(n), "-l", str(value_size),
                                    "--reps", "1", "-b", names, "--dir", str(tmp_path),
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return json.loads(out.read_text()), res.output


# ------------------------------------------------------------ redis-benchmark

def test_redis_benchmark_rows_beside_redis_py(tmp_path):
    _need("redis")
    if redis_tool.unavailable():
        pytest.skip(redis_tool.unavailable())
    data, out = _perf(tmp_path, "redis")
    rows = [r for r in data["results"] if r["backend"] != "null"]
    assert [(r["label"], r["handles"]) for r in rows] == [
        ("redis (redis-py)", "per-thread"), ("redis-benchmark (C)", "-c 1"),
        ("redis-benchmark (C)", "-c 2")]
    for r in rows:
        assert r["writes_per_s"] > 0 and r["reads_per_s"] > 0
        assert r["write_ms"]["median"] == pytest.approx(300 / r["writes_per_s"] * 1e3)
        assert r["sync"] == "no"
    assert data["backends"]["redis-benchmark (C)"]["version"] == redis_tool.version()
    table = [line.split("  ")[0] for line in out.splitlines() if line.startswith("redis")]
    assert table == ["redis (redis-py)", "redis-benchmark (C)", "redis-benchmark (C)"]


def test_redis_benchmark_drives_the_server_it_is_given():
    """The C tool's SETs and GETs land on the server at that port: n of
    each, keys from the -r key space, values of l bytes."""
    _need("redis")
    if redis_tool.unavailable():
        pytest.skip(redis_tool.unavailable())
    import redis

    with servers.Redis(False) as server:
        r = redis.Redis(host="127.0.0.1", port=server.port)
        rates = redis_tool.run(server.port, 500, 40, 2)
        assert rates["SET"] > 0 and rates["GET"] > 0
        calls = r.info("commandstats")
        assert calls["cmdstat_set"]["calls"] == 500
        assert calls["cmdstat_get"]["calls"] == 500
        keys = r.keys("key:*")
        assert 0 < len(keys) <= 500
        assert len(r.get(keys[0]) or b"") == 40
        r.close()


def test_redis_benchmark_csv_is_parsed_or_refused():
    new = ('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",'
           '"p95_latency_ms","p99_latency_ms","max_latency_ms"\n'
           '"SET","32786.89","0.026","0.016","0.031","0.031","0.071","0.271"\n'
           '"GET","31746.03","0.029","0.016","0.031","0.031","0.087","0.231"\n')
    assert redis_tool.parse_csv(new) == {"SET": 32786.89, "GET": 31746.03}
    old = '"SET","28194.37"\n"GET","26525.20"\n'      # redis 5's output: no header
    assert redis_tool.parse_csv(old) == {"SET": 28194.37, "GET": 26525.20}
    with pytest.raises(ValueError, match="no GET row"):
        redis_tool.parse_csv('"SET","1.0"\n')
    with pytest.raises(ValueError, match="not a rate"):
        redis_tool.parse_csv('"SET","fast"\n"GET","1"\n')


def test_a_redis_benchmark_test_within_one_tick_of_its_clock_reads_as_requests_per_tick():
    """redis-benchmark prints "inf" for a test that ended within its
    millisecond clock's tick (seen in CI: the report's perf row then divided
    by zero seconds)."""
    tiny = '"test","rps"\n"SET","inf"\n"GET","20000.00"\n'
    rates = redis_tool.measurable(redis_tool.parse_csv(tiny), 20)
    assert rates == {"SET": 20 / redis_tool.TICK, "GET": 20000.0}


# ------------------------------------------------------------------ memcached

def _protocol_version(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"version\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(256)
            assert chunk, "memcached closed the connection"
            reply += chunk
    word, version = reply.decode().split()
    assert word == "VERSION"
    return version


def test_memcached_version_is_the_servers(tmp_path):
    b = _need("memcached")
    with servers.Memcached() as server:
        served = _protocol_version(server.port)
    data, out = _perf(tmp_path, "memcached", n=100)
    reported = data["backends"]["memcached"]["version"]
    assert reported.startswith(f"server {served} (memory only)"), reported
    assert f"server {served}" in out
    assert b.version() == reported
    row = next(r for r in data["results"] if r["backend"] == "memcached")
    assert row["label"] == "memcached (memory only)"


def test_memcachedb_is_reported_missing_and_the_neighbours_say_what_they_are(tmp_path):
    _need("memcached")
    _need("berkeleydb")
    data, out = _perf(tmp_path, "memcached,berkeleydb", n=100)
    why = data["backends"]["memcachedb"]
    assert why["available"] is False
    assert why["reason"].startswith("not packaged in Debian")
    assert "memcachedb     unavailable: not packaged in Debian" in out
    labels = {r["backend"]: r["label"] for r in data["results"]}
    assert labels["memcached"] == "memcached (memory only)"
    assert labels["berkeleydb"] == "berkeleydb (Berkeley DB, C library)"
    assert "memcachedb" not in labels
    # a run without either neighbour has no reason to mention it
    data, _ = _perf(tmp_path, "pyqstore", n=50)
    assert "memcachedb" not in data["backends"]
