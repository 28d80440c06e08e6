"""The leak harness proves it catches a leak: its negative control
(csrc/leak_seed.c, seed 001's `leak()`, one malloc(1) per round of the
harness's bounded loop) must fail the harness's verdict and the valgrind
check, CI's own commands, while the real harness passes them."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

CSRC = os.path.join(os.path.dirname(__file__), "..", "..", "csrc")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-C", CSRC, "--no-print-directory", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def control() -> str:
    built = _make("leak-control-build", "leak-build")
    assert built.returncode == 0, built.stdout + built.stderr
    return os.path.join(CSRC, "build", "leak_control")


def test_verdict_fails_on_the_seeds_leak(control):
    """`make leak` (100,000 rounds: the bounds are enforced) on the control."""
    run = _make("leak", f"LEAK_PROG={os.path.relpath(control, CSRC)}")
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Error 1" in run.stderr, run.stderr
    # 99,000 measured rounds of one 32-byte chunk each
    m = re.search(r"heap in use after warm-up \d+ B, at end \d+ B: growth \+(\d+) B", run.stdout)
    assert m and int(m.group(1)) >= 99000 * 24, run.stdout
    assert "FAIL: heap in use grew" in run.stdout
    assert run.stdout.rstrip().endswith("leak_harness: FAILED")


@pytest.mark.skipif(not shutil.which("valgrind"), reason="install: apt-get install valgrind")
def test_valgrind_check_fails_on_the_seeds_leak(control):
    """The command of `make leak-valgrind`, on the control: valgrind's error
    status, and the lost blocks traced to the seed's leak()."""
    run = _make("leak-valgrind", f"LEAK_PROG={os.path.relpath(control, CSRC)}",
                "LEAK_VG_ROUNDS=50")
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Error 99" in run.stderr, run.stderr
    assert re.search(r"50 bytes in 50 blocks are definitely lost", run.stderr), run.stderr
    assert re.search(r"by 0x[0-9A-F]+: leak \(leak_seed\.c:\d+\)", run.stderr), run.stderr


def test_make_leak_control_passes_only_because_both_failed():
    run = _make("leak-control", "LEAK_VG_ROUNDS=50")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "leak-control: OK" in run.stdout
    assert "FAIL: heap in use grew" in run.stdout


def test_real_harness_passes_the_same_checks(control):
    """The same verdict and valgrind command on the store's own rounds (a few:
    CI's `make leak` runs the 100,000 that enforce the bounds)."""
    harness = os.path.join(CSRC, "build", "leak_harness")
    run = subprocess.run([harness, "-q", "-n", "40"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.rstrip().endswith("leak_harness: OK")
    if shutil.which("valgrind"):
        vg = _make("leak-valgrind", "LEAK_VG_ROUNDS=3")
        assert vg.returncode == 0, vg.stdout + vg.stderr
        assert "definitely lost" not in vg.stderr
