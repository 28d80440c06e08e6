"""A MariaDB server the benchmark starts itself: a fresh data directory made
by mariadb-install-db in a temp dir, its own socket and pid file there,
listening on a free port of 127.0.0.1 only, no option file read
(--no-defaults), and stopped (SIGTERM, a clean InnoDB shutdown, SIGKILL
after STOP_TIMEOUT) with the directory removed."""
from __future__ import annotations

import os
import shutil
import subprocess

from . import servers

START_TIMEOUT = 60.0    # seconds for a fresh server to listen, on a loaded machine
STOP_TIMEOUT = 60.0     # seconds for its clean shutdown before SIGKILL
# Debian puts the server in /usr/sbin, which a user's PATH may lack
_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


def find(exe: str) -> str:
    """The path of a MariaDB program, or RuntimeError naming the package."""
    path = shutil.which(exe, path=_SEARCH)
    if not path:
        raise RuntimeError(f"{exe} is not installed (apt-get install mariadb-server)")
    return path


class MariaDB(servers.Server):
    """InnoDB with innodb_flush_log_at_trx_commit=1 when synced (the log is
    flushed and synced at every commit), 2 otherwise (written at every
    commit, synced about once a second).  root connects over TCP with an
    empty password."""

    exe = "mariadbd"
    stop_timeout = STOP_TIMEOUT

    def __init__(self, sync: bool) -> None:
        super().__init__()
        self.sync = sync
        self.datadir = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "error.log")

    def _user(self) -> list[str]:
        # mariadbd refuses to run as root unless told to
        return ["--user=root"] if os.geteuid() == 0 else []

    def args(self) -> list[str]:
        return ["--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--socket={os.path.join(self.dir, 'sock')}",
                f"--pid-file={os.path.join(self.dir, 'pid')}", f"--log-error={self.log}",
                "--skip-name-resolve", "--max-allowed-packet=64M",
                f"--innodb-flush-log-at-trx-commit={1 if self.sync else 2}"] + self._user()

    def start(self) -> "MariaDB":
        try:
            inst = subprocess.run(
                [find("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}",
                 "--auth-root-authentication-method=normal", "--skip-test-db"] + self._user(),
                cwd=self.dir, capture_output=True, text=True, timeout=START_TIMEOUT)
            if inst.returncode:
                raise RuntimeError(f"mariadb-install-db failed ({inst.returncode}): "
                                   f"{(inst.stderr or inst.stdout)[-500:]}")
            self.proc = subprocess.Popen([find(self.exe)] + self.args(), cwd=self.dir,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            servers._wait_port(self.port, self.proc, START_TIMEOUT)
        except BaseException as e:
            said = self._errors()
            self.stop()
            if isinstance(e, Exception):
                raise RuntimeError(f"MariaDB did not start: {e}\n{said}") from e
            raise
        return self

    def _errors(self) -> str:
        """The [ERROR] lines of the server's log (else its end): why it stopped."""
        try:
            with open(self.log, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return ""
        errors = [line for line in lines if "[ERROR]" in line]
        return "\n".join((errors or lines)[-6:])


def version() -> str:
    out = subprocess.run([find("mariadbd"), "--version"], capture_output=True, text=True,
                         timeout=30)
    words = out.stdout.split()
    return words[words.index("Ver") + 1] if "Ver" in words else out.stdout.strip()
