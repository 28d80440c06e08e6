"""Real servers the benchmark starts itself (redis-server, memcached) on a
free loopback port, and stops afterwards."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Optional


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        result: int = s.getsockname()[1]
        return result


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server did not listen on 127.0.0.1:{port} within {timeout} s")


class Server:
    """A server process on 127.0.0.1:port, in its own scratch directory."""

    exe = ""
    stop_timeout = 5.0      # seconds from SIGTERM to SIGKILL

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix=f"qbench-{self.exe}-")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> "Server":
        path = shutil.which(self.exe)
        if not path:
            raise RuntimeError(f"{self.exe} is not installed")
        self.proc = subprocess.Popen([path] + self.args(), cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_port(self.port, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Redis's durability levels the bench runs: the server's arguments and what
# a crash loses, by kill -9 of the server / by a power cut.  "default" is
# redis-server with no config file: RDB snapshots (save 3600 1 300 100 60
# 10000), no append-only file.  With the append-only file, Redis writes it
# before it answers a command (beforeSleep), so only a power cut can lose
# what appendfsync no has not synced; the OS flushes it within ~30 s.
REDIS_LEVELS: dict[str, tuple[list[str], str]] = {
    "always": (["--save", "", "--appendonly", "yes", "--appendfsync", "always"],
               "nothing"),
    "no": (["--save", "", "--appendonly", "yes", "--appendfsync", "no"],
           "kill -9: nothing; power cut: writes the OS had not flushed"),
    "default": ([], "kill -9 or power cut: every write since the last RDB snapshot "
                    "(60 s after 10,000 writes, 300 s after 100, 3600 s after 1)"),
}
# the pairs the Redis lines compare: our sync setting, the redis level
LEVELS: list[tuple[bool, str]] = [(True, "always"), (False, "no"), (False, "default")]
# pyqstore's at each sync setting (README "Durability")
PYQSTORE_LOSES = {True: "nothing",
                  False: "kill -9: nothing; power cut: the last commits"}


class Redis(Server):
    """redis-server at one of REDIS_LEVELS: "always" (append-only file,
    fsync on every write) when given True, "no" (append-only file, flushed
    by the OS) when given False, or "default" (its default configuration,
    RDB snapshots only)."""

    exe = "redis-server"

    def __init__(self, level: "bool | str") -> None:
        super().__init__()
        if isinstance(level, bool):
            level = "always" if level else "no"
        if level not in REDIS_LEVELS:
            raise ValueError(f"redis durability {level!r}: not one of {', '.join(REDIS_LEVELS)}")
        self.level = level

    def __enter__(self) -> "Redis":
        self.start()
        return self

    @staticmethod
    def durability_of(level: str) -> str:
        return "redis default (RDB)" if level == "default" else f"appendfsync {level}"

    @property
    def durability(self) -> str:
        return self.durability_of(self.level)

    @property
    def loses(self) -> str:
        return REDIS_LEVELS[self.level][1]

    def args(self) -> list[str]:
        return ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                *REDIS_LEVELS[self.level][0], "--protected-mode", "no", "--daemonize", "no"]


class Memcached(Server):
    exe = "memcached"

    def args(self) -> list[str]:
        return ["-p", str(self.port), "-l", "127.0.0.1", "-U", "0", "-m", "1024",
                "-u", os.environ.get("USER", "root") or "root"]
