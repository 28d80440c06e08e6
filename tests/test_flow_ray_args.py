"""The Ray runner's bad input, the netns rule's check, and Ray missing:
what needs no cluster (tests/ray has the cluster tests)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pyqstore.errors import FlowError
from pyqstore.flow import Flow, IterableSource, QueueSink, rayrunner, run
from pyqstore.flow.netns import loopback_command, only_loopback


def double(batch):
    return [2 * x for x in batch]


def _flow():
    f = Flow("args")
    f.source("src", IterableSource(range(3)))
    f.node("double", double)
    f.sink("out", QueueSink("out"))
    f.edge("src", "double")
    f.edge("double", "out")
    return f


def test_volumes_naming_a_node_the_flow_lacks_is_a_flow_error(tmp_path):
    with pytest.raises(FlowError, match="volumes name nodes the flow does not have: dubble"):
        rayrunner.start(_flow(), str(tmp_path), volumes={"dubble": "a"})


@pytest.mark.parametrize("vol", ["", "a/b", "..", 3])
def test_a_volume_name_that_is_no_directory_name_is_a_flow_error(tmp_path, vol):
    with pytest.raises(FlowError, match="volume .* must be a non-empty name without '/'"):
        rayrunner.start(_flow(), str(tmp_path), volumes={"double": vol})


def test_a_run_name_with_a_slash_is_a_flow_error(tmp_path):
    with pytest.raises(FlowError, match="run name 'a/b'"):
        rayrunner.start(_flow(), str(tmp_path), name="a/b")


def test_an_unknown_runner_and_ray_options_for_the_local_one_are_refused(tmp_path):
    with pytest.raises(ValueError, match="runner must be 'local' or 'ray', not 'spark'"):
        run(_flow(), str(tmp_path), runner="spark")
    with pytest.raises(TypeError, match="the local runner takes no volumes"):
        run(_flow(), str(tmp_path), volumes={"double": "a"})


def test_without_ray_the_ray_runner_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)      # import ray raises ImportError
    with pytest.raises(FlowError, match=r"needs Ray: pip install 'pyqstore\[ray\]'"):
        run(_flow(), str(tmp_path), runner="ray", display=None)


def test_loopback_command_runs_in_a_namespace_with_only_lo():
    argv = loopback_command([sys.executable, "-c", "print(1)"])
    assert argv[0] == "unshare" and argv[1] == ("-n" if os.geteuid() == 0 else "-rn")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("creating a network namespace needs root here")
    probe = "from pyqstore.flow.netns import only_loopback; print(only_loopback())"
    out = subprocess.run(loopback_command([sys.executable, "-c", probe]), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
    # lo down (no "ip link set lo up"): not a namespace Ray can use
    down = subprocess.run(["unshare", "-n", sys.executable, "-c", probe], capture_output=True,
                          text=True, timeout=60)
    assert down.stdout.strip() == "False", down.stderr

