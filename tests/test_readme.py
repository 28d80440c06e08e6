"""The README's examples run as written.

Every ```python block runs on its own, in a fresh directory, in a child
process, as a user who pastes it would run it.  A line ``EXPR  # -> VALUE``
states what EXPR gives: it is run as ``assert (EXPR) == VALUE``, so a
result the README shows is a result the code gives.  A block preceded by
``<!-- readme: needs MODULE -->`` runs only where MODULE imports (an
optional extra); ```sh blocks preceded by ``<!-- readme: run -->`` run
under bash, the package's commands on PATH.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import pyqstore

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
MARK = re.compile(r"<!-- readme: (needs (\w+)|run) -->\s*$")
RESULT = re.compile(r"^(?P<indent>\s*)(?P<expr>\S.*?)\s+# -> (?P<value>.+?)(?: \(.*\))?\s*$")


def blocks(text: str) -> list[tuple[str, str, str | None, int]]:
    """(language, code, mark, line) of every fenced block."""
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        line = text.count("\n", 0, m.start()) + 1
        out.append((m.group(1), m.group(2), mark.group(1) if mark else None, line))
    return out


def with_asserts(code: str, line: int) -> str:
    """Each ``EXPR  # -> VALUE`` line becomes an assertion of it."""
    out = []
    for n, text in enumerate(code.splitlines(), start=line + 1):
        m = RESULT.match(text)
        if m:
            value = m.group("value")
            ast.literal_eval(value)        # a result is a literal, or a typo
            text = (f"{m.group('indent')}assert ({m.group('expr')}) == {value}, "
                    f"'README line {n}: ' + repr({m.group('expr')})")
        out.append(text)
    return "\n".join(out) + "\n"


ALL = blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in ALL if b[0] == "python"]
SHELL = [b for b in ALL if b[0] == "sh" and b[2] == "run"]


def test_the_readme_has_examples_to_run():
    assert len(PYTHON) >= 5 and SHELL
    asserted = sum(bool(RESULT.match(t)) for _, code, _, _ in PYTHON for t in code.splitlines())
    assert asserted >= 10


def test_result_comments_are_checked():
    src = with_asserts("x = [1, 2]\nlen(x)   # -> 3\n", 0)
    done = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True)
    assert done.returncode != 0 and "README line 2" in done.stderr


def _run(argv, tmp_path, line):
    # Each example must finish on its own: one that blocks (a get on an empty
    # queue, a reserve that times out) is a broken example.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, (
        f"README block at line {line} failed ({done.returncode}):\n"
        f"{done.stdout}\n{done.stderr}")
    return done


@pytest.mark.parametrize("lang,code,mark,line", PYTHON, ids=[f"line{b[3]}" for b in PYTHON])
def test_python_example(lang, code, mark, line, tmp_path):
    if mark and mark.startswith("needs "):
        module = mark.split()[1]
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs the optional {module!r}, not installed here")
    _run([sys.executable, "-c", with_asserts(code, line)], tmp_path, line)


@pytest.mark.parametrize("lang,code,mark,line", SHELL, ids=[f"line{b[3]}" for b in SHELL])
def test_shell_example(lang, code, mark, line, tmp_path):
    bindir = os.path.dirname(sys.executable)
    assert shutil.which("qstore", path=bindir), "the qstore command is not installed beside python"
    script = f'export PATH="{bindir}:$PATH"\nset -euo pipefail\n{code}'
    _run(["bash", "-c", script], tmp_path, line)


def test_copying_only_the_main_file_of_a_killed_casket_loses_the_log(tmp_path):
    """What "Backups and copies" says: after a crash the commits since the
    last checkpoint are only in NAME-log, and a copy of NAME alone opens,
    without error, without them."""
    src = tmp_path / "node.qdb"
    child = subprocess.run([sys.executable, "-c", (
        "import os, signal, pyqstore\n"
        f"db = pyqstore.open({str(src)!r})\n"
        "for i in range(100): db.put(b'k%d' % i, b'v')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")])
    assert child.returncode == -signal.SIGKILL
    alone, both = tmp_path / "alone", tmp_path / "both"
    alone.mkdir()
    both.mkdir()
    shutil.copy(src, alone / "node.qdb")
    shutil.copy(src, both / "node.qdb")
    shutil.copy(str(src) + "-log", both / "node.qdb-log")
    with pyqstore.open(alone / "node.qdb", "r") as db:
        assert len(db) == 0
    with pyqstore.open(both / "node.qdb", "r") as db:
        assert len(db) == 100
