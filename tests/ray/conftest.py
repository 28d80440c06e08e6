"""The Ray tests' harness: loopback only, one cluster, bounded in time.

Ray binds to the machine's interface address (docs/DESIGN.md "Flows on
Ray"), so these tests run only in a network namespace holding ``lo``
alone.  ``python -m pytest tests/ray`` (every path given under tests/ray)
re-executes itself there with ``unshare -n`` (``-rn`` without root); in a
wider session (``pytest tests``) outside such a namespace they are skipped
with the command to run them, so nobody runs them on a real interface by
accident.  Without Ray installed they are skipped too.
"""
from __future__ import annotations

import faulthandler
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from pyqstore.flow.netns import only_loopback, reexec_in_loopback

HERE = Path(__file__).resolve().parent
#: the whole Ray session, cluster start and shutdown included, ends by then
SESSION_LIMIT = float(os.environ.get("QS_RAY_SESSION_LIMIT", "900"))

_refused: str | None = None


def _only_ray_paths(config: pytest.Config) -> bool:
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        p = (base / arg.split("::")[0]).resolve()
        if p != HERE and HERE not in p.parents:
            return False
    return True


def ray_installed() -> bool:
    """Ray itself is importable: without it, ``import ray`` would find this
    directory (tests/ray, on sys.path's tests/) as a namespace package."""
    spec = importlib.util.find_spec("ray")
    return spec is not None and spec.origin is not None


def pytest_configure(config: pytest.Config) -> None:
    global _refused
    if not ray_installed():
        return                          # the tests skip themselves: no ray
    if only_loopback():
        faulthandler.dump_traceback_later(SESSION_LIMIT, exit=True)
        return
    if not _only_ray_paths(config):
        _refused = ("the Ray tests run only in a network namespace with loopback alone; "
                    "run them on their own: python -m pytest tests/ray (it re-executes "
                    "itself under unshare -n)")
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    os.chdir(config.invocation_params.dir)
    try:
        reexec_in_loopback([sys.executable, "-m", "pytest", *config.invocation_params.args])
    except RuntimeError as e:
        raise pytest.UsageError(f"the Ray tests: {e}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _refused is None:
        return
    mark = pytest.mark.skip(reason=_refused)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def cluster() -> Iterator[object]:
    """A head and two workers on 127.0.0.1, offering the volumes ``a`` and
    ``b`` (``{"vol:a": 1}``, ``{"vol:b": 1}``); this process is the
    driver.  Shut down at the end of the session, whatever happened."""
    if not ray_installed():
        pytest.skip("Ray is not installed (pip install 'pyqstore[ray]')")
    import ray

    from pyqstore.flow.raycluster import LocalCluster

    with LocalCluster([("a",), ("b",)]) as c:
        ray.init(address=c.address, namespace="pyqstore-tests", log_to_driver=False)
        yield c
