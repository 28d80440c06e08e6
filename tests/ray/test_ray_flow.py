"""The Ray runner: exactly once while the machine hosting the reduce stage
is replaced, and a driver that dies while a new one reattaches by name.
(conftest.py: loopback only, one cluster for the session.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# a submodule: without Ray, "ray" would be this directory as a namespace package
pytest.importorskip("ray.cloudpickle", reason="Ray is not installed (pip install 'pyqstore[ray]')")
import ray  # noqa: E402

import ray_flows  # noqa: E402
from pyqstore.flow import rayrunner  # noqa: E402

ray_flows.by_value()
HERE = os.path.dirname(os.path.abspath(__file__))


def _wait_for(cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def _check(directory, n):
    got = ray_flows.result(directory)
    keys = [k for k, _, _ in got]
    assert len(keys) == len(set(keys)), f"a key came out twice: {sorted(keys)}"
    assert {k: (c, s) for k, c, s in got} == ray_flows.reference(n)


def test_exactly_once_while_the_reduce_machine_is_replaced(cluster, tmp_path):
    n = 6000
    d = str(tmp_path)
    hold = tmp_path / "hold"
    hold.touch()        # the second half of the items waits in the map
    run = rayrunner.start(ray_flows.flow(n, "replace", str(hold)), d, name="replace",
                          namespace="pyqstore-tests", volumes=ray_flows.VOLUMES, sync=False)
    try:
        old = cluster.node_id("b")
        _wait_for(lambda: run.progress()["reduce"].items_in >= n // 5, 120,
                  "the reduce stage got a fifth of the items")
        before = run.progress()
        assert not before["reduce"].finished and not before["sink"].finished
        cluster.replace("b")
        hold.unlink()
        summary = run.wait(timeout=150)
        assert summary.finished
        info = run._poll(5.0)
        for i in range(2):
            moved = info[("reduce", i)]
            assert moved["node_id"] == cluster.node_id("b") != old
            # reopened and claimed again (Ray may have tried more than once)
            assert moved["starts"] >= 2 and moved["epoch"] >= moved["starts"]
        assert summary.nodes["reduce"].restarts >= 2
        assert summary.nodes["reduce"].items_in == n
        assert summary.nodes["sink"].items_in == ray_flows.KEYS
        assert summary.nodes["map"].restarts == 0 and summary.nodes["reduce"].dead_letters == 0
    finally:
        run.shutdown()
    _check(d, n)


DRIVER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    import ray, ray_flows
    from pyqstore.flow import rayrunner
    ray.init(address={address!r}, namespace="pyqstore-tests", log_to_driver=False)
    ray_flows.by_value()
    run = rayrunner.start(ray_flows.flow({n}, "orphan", {hold!r}), {d!r}, name="orphan",
                          namespace="pyqstore-tests", volumes=ray_flows.VOLUMES, sync=False)
    while run.progress()["reduce"].items_in == 0:
        time.sleep(0.05)
    print("running", flush=True)
    time.sleep(600)
""")


def test_a_new_driver_reattaches_by_name_after_the_first_died(cluster, tmp_path):
    n = 4000
    d = str(tmp_path)
    hold = tmp_path / "hold"
    hold.touch()        # the second half of the items waits in the map
    script = DRIVER.format(here=HERE, address=cluster.address, n=n, d=d, hold=str(hold))
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline()
        assert line == "running\n", f"the first driver printed {line!r}"
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        with pytest.raises(Exception, match="no Ray run 'nobody'"):
            rayrunner.attach("nobody", namespace="pyqstore-tests")
        run = rayrunner.attach("orphan", namespace="pyqstore-tests")
        try:
            assert not run.progress()["sink"].finished    # it was still running
            hold.unlink()
            summary = run.wait(timeout=150)
            assert summary.finished and summary.nodes["source"].items_out == n
        finally:
            run.shutdown()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    _check(d, n)


def test_flow_run_with_runner_ray_returns_the_summary_and_removes_its_actors(cluster, tmp_path):
    n = 500
    d = str(tmp_path)
    summary = ray_flows.flow(n, "whole").run(d, runner="ray", name="whole",
                                             namespace="pyqstore-tests",
                                             volumes=ray_flows.VOLUMES, sync=False,
                                             display=None, timeout=120)
    assert summary.finished and summary.nodes["reduce"].items_in == n
    with pytest.raises(Exception, match="no Ray run 'whole'"):
        _wait_for(lambda: _gone("whole"), 30, "the run's actors are removed")
        rayrunner.attach("whole", namespace="pyqstore-tests")
    _check(d, n)


def _gone(name):
    try:
        ray.get_actor(name, namespace="pyqstore-tests")
    except ValueError:
        return True
    return False
