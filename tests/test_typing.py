"""The package's types as a user sees them: mypy --strict, run the way a
user would (from a directory outside this tree, so it finds pyqstore where
pip installed it -- for `pip install -e .` through the editable install's
.pth file), on a typed example program and on the package itself."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy", reason="mypy is in the [test] extra")

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "typed", "example.py")


def mypy(tmp_path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def user_file(tmp_path, source: str) -> str:
    p = tmp_path / "user.py"
    p.write_text(textwrap.dedent(source))
    return str(p)


def test_typed_example_passes_mypy_strict_and_runs(tmp_path):
    rc, out = mypy(tmp_path, EXAMPLE)
    assert (rc, out) == (0, "")
    r = subprocess.run([sys.executable, EXAMPLE], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, "ok\n"), r.stderr


def test_the_types_a_user_sees(tmp_path):
    f = user_file(tmp_path, """\
        import pyqstore
        from typing import Any

        class C:
            def encode(self, obj: int) -> bytes: return b""
            def decode(self, data: bytes) -> int: return 0

        c = pyqstore.open("x.qs")
        reveal_type(c.get("k"))
        reveal_type(c.get("k", b"0"))
        reveal_type(c.queue("q"))
        reveal_type(c.queue("q").get())
        reveal_type(c.queue("q", codec="json"))
        reveal_type(c.queue("q", codec=C()).get_many(2))
        reveal_type(c.queue("q", codec=C()).reserve())
        """)
    rc, out = mypy(tmp_path, f)
    revealed = [line.split("Revealed type is ")[1] for line in out.splitlines()
                if "Revealed type is" in line]
    assert revealed == [
        '"bytes | None"',
        '"bytes"',
        '"pyqstore._queue.Queue[bytes]"',
        '"bytes"',
        '"pyqstore._queue.Queue[Any]"',
        '"list[int]"',
        '"pyqstore._queue.Item[int]"',
    ], out
    assert rc == 0, out


def test_mypy_catches_misuse(tmp_path):
    f = user_file(tmp_path, """\
        import pyqstore

        class C:
            def encode(self, obj: int) -> bytes: return b""
            def decode(self, data: bytes) -> int: return 0

        c = pyqstore.open("x.qs", "x")
        c.queue("q").put(1)
        c.queue("q", codec="yaml")
        c.queue("q", codec=C()).put("s")
        """)
    rc, out = mypy(tmp_path, f)
    assert rc == 1
    lines = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert lines == {7, 8, 9, 10}, out


def test_the_package_passes_mypy_strict(tmp_path):
    rc, out = mypy(tmp_path, "-p", "pyqstore")
    assert (rc, out) == (0, ""), out
