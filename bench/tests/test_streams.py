"""qstore-bench streams: our stream and group against a real redis-server
(tiny sizes: this checks the line runs and checks itself, not speed)."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from qstore_bench import servers
from qstore_bench.cli import main

pytestmark = pytest.mark.skipif(not shutil.which("redis-server"),
                                reason="redis-server is not installed")


def test_streams_lines_at_both_durability_levels(tmp_path):
    out = tmp_path / "s.json"
    res = CliRunner().invoke(main, ["streams", "--batches", "3,10", "--rounds", "2",
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [(x["sync"], x["redis_durability"], x["batch"]) for x in data["lines"]] == [
        (True, "appendfsync always", 3), (True, "appendfsync always", 10),
        (False, "appendfsync no", 3), (False, "appendfsync no", 10),
        (False, "redis default (RDB)", 3), (False, "redis default (RDB)", 10)]
    level = {"appendfsync always": "always", "appendfsync no": "no",
             "redis default (RDB)": "default"}
    for x in data["lines"]:
        assert x["redis_loses"] == servers.REDIS_LEVELS[level[x["redis_durability"]]][1]
        assert x["pyqstore_loses"] == servers.PYQSTORE_LOSES[x["sync"]]
    for x in data["lines"]:
        assert x["items"] == 2 * x["batch"]
        assert x["pyqstore_items_per_s"] > 0 and x["redis_items_per_s"] > 0 and x["ratio"] > 0
    assert "ratio" in res.output


def test_bad_batches_are_a_usage_error():
    res = CliRunner().invoke(main, ["streams", "--batches", "0,x"])
    assert res.exit_code == 2 and "batch sizes" in res.output
