"""qstore dump streams from a snapshot, shows progress; qstore backup.

* ``qstore dump`` reads in bounded memory: its peak RSS while it writes the
  first lines of a 100 MB queue stays far below the queue's size (it used to
  load the whole queue with ``peek_many(length)`` first).
* ``--progress`` prints "LABEL: DONE/TOTAL ..." lines on stderr for dump,
  load, compact and backup; without it (stderr not a terminal) nothing.
* ``qstore backup FILE DEST`` writes a copy that opens on its own, refuses
  an existing DEST, and reports errors as one line with status 1.
* A dump taken while another process writes holds one commit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from click.testing import CliRunner

import pyqstore
from pyqstore.cli import main

QSTORE = [sys.executable, "-m", "pyqstore.cli"]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _vm(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_dump_streams_a_big_queue_in_bounded_memory(path):
    size = 100 << 20
    with pyqstore.open(path, "n", sync=False) as c:
        q = c.queue("big")
        for _ in range(10):
            q.put_many([os.urandom(500).hex().encode()] * (size // 10 // 1000))
    p = subprocess.Popen(QSTORE + ["dump", path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        first = p.stdout.readline()
        assert json.loads(first)["queue"] == "big"
        # The pipe is full now and the dump blocked on it: what it holds is
        # all it ever held, before reading further.
        time.sleep(1.0)
        peak = _vm(p.pid, "VmHWM")
        assert peak < size // 2, f"dump holds {peak >> 20} MiB for a {size >> 20} MiB queue"
        lines = 1 + sum(1 for _ in p.stdout)
    finally:
        p.kill() if p.poll() is None else None
        p.wait(60)
    assert p.returncode == 0, p.stderr.read().decode()
    assert lines == 10 * (size // 10 // 1000)


def test_progress_on_stderr_with_the_flag(path, tmp_path):
    with pyqstore.open(path, "n", sync=False) as c:
        c.putdup_many((b"k%d" % i, b"v") for i in range(500))
        c.queue("q").put_many([b"i"] * 20)
    out = str(tmp_path / "d.jsonl")
    r = run("dump", path, "-o", out, "--progress")
    assert r.exit_code == 0
    assert "dump: 520/520 records and items (100%)" in r.stderr
    r = run("dump", path, "-o", out)
    assert r.stderr == ""
    copy = str(tmp_path / "copy.qs")
    r = run("load", copy, out, "--progress")
    assert r.exit_code == 0
    size = os.path.getsize(out)
    assert f"load: {size}/{size} bytes (100%)" in r.stderr
    r = run("compact", copy, "--progress")
    assert r.exit_code == 0 and r.stderr.splitlines()[-1] == "compact: 520/520 records (100%)"
    r = run("backup", copy, str(tmp_path / "b.qs"), "--progress")
    assert r.exit_code == 0 and "backup: 520/520 records (100%)" in r.stderr
    r = run("backup", copy, str(tmp_path / "b2.qs"))
    assert "backup:" not in r.stderr


def test_backup_command(path, tmp_path):
    with pyqstore.open(path, "n", sync=False) as c:
        c.put(b"k", b"v")
        c.queue("jobs").put(b"j")
        c.queue("jobs").reserve()   # held while the backup runs: copied anyway
        dest = str(tmp_path / "b.qs")
        r = subprocess.run(QSTORE + ["backup", path, dest], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("b.qs")) == ["b.qs"]
    with pyqstore.open(dest, "r") as b:
        b.check()
        assert b[b"k"] == b"v" and list(b.queue("jobs").iter()) == [b"j"]
    r = subprocess.run(QSTORE + ["backup", path, dest], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and "File exists" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_dump_while_another_process_writes_holds_one_commit(path, tmp_path):
    with pyqstore.open(path, "n", sync=False) as c:
        c.putdup_many((b"a%06d" % i, b"v" * 20) for i in range(50_000))
    code = (
        "import pyqstore, sys\n"
        f"c = pyqstore.open({path!r}, sync=False)\n"
        "n = 0\n"
        "while True:\n"
        "    c.putdup_many((b'w%09d' % (n * 100 + i), b'x') for i in range(100))\n"
        "    n += 1\n"
        "    if n == 1: print('go', flush=True)\n"
    )
    w = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().strip() == "go"
        out = str(tmp_path / "d.jsonl")
        # Without a snapshot the dump chased the writer and never ended.
        r = subprocess.run(QSTORE + ["dump", path, "-o", out], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
    finally:
        w.kill()
        w.wait(30)
    with open(out, encoding="utf-8") as f:
        keys = [json.loads(line)["key"] for line in f]
    ws = [k for k in keys if k.startswith("w")]
    assert len(ws) % 100 == 0 and ws == ["w%09d" % i for i in range(len(ws))]
    assert len(keys) - len(ws) == 50_000
