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


class Redis(Server):
    """redis-server with the append-only file: fsync on every write when
    synced, left to the OS otherwise; no RDB snapshots."""

    exe = "redis-server"

    def __init__(self, sync: bool) -> None:
        super().__init__()
        self.sync = sync

    def args(self) -> list[str]:
        return ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "yes",
                "--appendfsync", "always" if self.sync else "no",
                "--protected-mode", "no", "--daemonize", "no"]


class Memcached(Server):
    exe = "memcached"

    def args(self) -> list[str]:
        return ["-p", str(self.port), "-l", "127.0.0.1", "-U", "0", "-m", "1024",
                "-u", os.environ.get("USER", "root") or "root"]
