"""Other processes for the tests: Python children run from a script (the
SIGKILL runner of the crash tests among them), multiprocessing children
that report through a pipe, and forked children that return a value.

Every wait here has a timeout, so a broken engine fails a test rather than
hanging it; a child that is left running is killed by whoever started it
(``Kids.cleanup``, the ``kids`` fixture of conftest.py, or the ``finally``
of the runner).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import random
import selectors
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Optional, Sequence

import pytest

ANSWER = 30.0  # seconds: a child that has not answered by then is hung


# ================================================ Python children by script


def start_python(script: str, *args: str, stdin: bool = False, text: bool = False,
                 unbuffered: bool = False) -> subprocess.Popen:
    """``python -c script args`` with stdout and stderr (and stdin when
    asked) on pipes.  unbuffered: the parent's pipe reads are not buffered,
    so a readline() never takes more than its line from the pipe (what
    communicate() reads later must still be there)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
        bufsize=0 if unbuffered else -1,
    )


def kill_after(script: str, *args: str, delay: float = 0.0,
               ready: Optional[bytes] = None) -> bytes:
    """The SIGKILL runner: starts ``python -c script args``, waits for its
    line ``ready`` when given (it must be the first line), lets it run
    ``delay`` more seconds and SIGKILLs it; returns everything it printed
    (bytes; the last line may be cut off by the kill)."""
    proc = start_python(script, *args, unbuffered=True)
    try:
        if ready is not None:
            line = proc.stdout.readline()
            assert line == ready, (line, proc.stderr.read())
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")
    return out


def kill_moment(rnd: random.Random, round_no: int, every: int,
                after_open: Sequence[float], in_open: tuple[float, float]) -> tuple[float, bool]:
    """When a crash round kills its child, as (delay, wait_open) for
    kill_after: every `every`-th round (the last of each `every`) counts a
    delay drawn uniformly from in_open from the child's start, so the kill
    may land inside open() (recovery); the others count one of after_open
    from the child's "open" line."""
    wait_open = round_no % every != every - 1
    if wait_open:
        return rnd.choice(after_open), True
    return rnd.uniform(*in_open), False


def complete_lines(out: bytes) -> list[bytes]:
    """The lines of a killed child's output that it finished writing."""
    return out.split(b"\n")[:-1]


def run_python(script: str, *args: str, timeout: float = ANSWER) -> str:
    """Runs ``python -c script args`` to its end; its stdout.  Fails when
    it does not finish within timeout seconds (a wait that never ended) or
    exits non-zero (its stderr is the message)."""
    try:
        res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"child still waiting after {timeout} s; stdout so far: {e.stdout!r}")
    assert res.returncode == 0, res.stderr
    return res.stdout


def read_line(proc: subprocess.Popen, deadline: float, late: str = "child gave no answer in time") -> str:
    """The child's next line (text mode), waiting until the monotonic
    deadline; kills the child and fails, saying `late`, when it takes
    longer, and fails when the child ended first."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    left = deadline - time.monotonic()
    if left <= 0 or not sel.select(left):
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{late}; stderr: {err}")
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate()
        pytest.fail(f"child ended early: rc {proc.returncode}, stderr: {err}")
    return line


def finish(proc: subprocess.Popen, timeout: float = ANSWER) -> None:
    """Waits for a child that is to exit cleanly by itself; fails (having
    killed it) when it is still running after timeout seconds, or when its
    exit code is not 0 (its stderr is the message)."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"child did not exit: {err}")
    assert proc.returncode == 0, err


# ====================================================== forked children


def in_forked_child(fn: Callable[[], Any], *, setup: Optional[Callable[[], None]] = None) -> Any:
    """Runs fn() in a forked child (after setup(), e.g. changing user) and
    returns its result; fails the test if the child died of a signal or
    raised (the child's traceback is the message)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(rfd)
            if setup is not None:
                setup()
            try:
                out = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                out = ("raised", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            with os.fdopen(wfd, "wb") as f:
                pickle.dump(out, f)
        except BaseException:  # noqa: BLE001
            code = 3
        os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), (
        f"child killed by {signal.Signals(os.WTERMSIG(status)).name}")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    kind, value = pickle.loads(data)
    assert kind == "ok", value
    return value


# ============================================== multiprocessing children


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def exc_info(e: BaseException) -> tuple[str, tuple[str, ...], str]:
    """(class name, qualified names of the classes in its MRO, message): an
    exception described in a form that always crosses a pipe."""
    return type(e).__name__, tuple(qualname(k) for k in type(e).__mro__), str(e)


def _entry(fn: Callable[..., None], conn: Any, args: tuple) -> None:
    """Every child of Kids.start runs fn(conn, *args) through this: an
    exception is sent to the parent as ("error", traceback) and gives exit
    code 1."""
    try:
        fn(conn, *args)
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:  # noqa: BLE001 - the pipe may be gone
            pass
        raise


class Kids:
    """Starts children through explicit contexts; kills and reaps whatever
    is left at the end of the test."""

    def __init__(self) -> None:
        self.procs: list[Any] = []

    def start(self, fn: Callable[..., None], *args: Any, method: str = "spawn",
              name: Optional[str] = None) -> tuple[Any, Any]:
        """fn(conn, *args) in a child; (process, the parent's end of conn)."""
        ctx = mp.get_context(method)
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=_entry, args=(fn, child_end, args), name=name, daemon=True)
        try:
            p.start()
        except BaseException:
            parent_end.close()
            child_end.close()
            raise
        child_end.close()
        self.procs.append(p)
        return p, parent_end

    def spawn(self, fn: Callable[..., None], *args: Any, method: str = "spawn") -> Any:
        """fn(*args) in a child that talks through what args hold (events,
        shared values) rather than a pipe; the process."""
        p = mp.get_context(method).Process(target=fn, args=args, daemon=True)
        p.start()
        self.procs.append(p)
        return p

    def join(self, timeout: float) -> None:
        """Gives every child up to timeout seconds to end by itself."""
        for p in self.procs:
            p.join(timeout)

    def cleanup(self) -> None:
        for p in self.procs:
            if p.exitcode is None and p.is_alive():
                p.kill()
        self.join(10)


def kill_child(proc: Any, timeout: float = 10.0) -> Optional[int]:
    """SIGKILL a multiprocessing child and join it; its exit code (None if
    it is somehow still there after timeout)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout)
    return proc.exitcode


def recv(conn: Any, proc: Any, timeout: float = ANSWER, what: str = "an answer") -> Any:
    """The next message from a child; fails (never hangs) when the child
    died or stayed silent for timeout seconds, or reported an error."""
    deadline = time.monotonic() + timeout
    while True:
        if conn.poll(0.02):
            try:
                msg = conn.recv()
            except EOFError:
                proc.join(5)
                raise AssertionError(
                    f"child {proc.name} exited (code {proc.exitcode}) before sending {what}"
                ) from None
            if isinstance(msg, tuple) and msg and msg[0] == "error":
                raise AssertionError(f"child {proc.name} failed:\n{msg[1]}")
            return msg
        if not proc.is_alive() and not conn.poll(0):
            proc.join(5)
            raise AssertionError(
                f"child {proc.name} exited (code {proc.exitcode}) before sending {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"child {proc.name} sent no {what} within {timeout} s (hung)")


def child_error(conn: Any) -> str:
    """The traceback a failed child sent (see _entry), or ""."""
    try:
        while conn.poll(0):
            msg = conn.recv()
            if isinstance(msg, tuple) and msg and msg[0] == "error":
                return msg[1]
    except (EOFError, OSError):
        pass
    return ""


def join_ok(proc: Any, conn: Any = None, timeout: float = ANSWER) -> None:
    """Join a child that is expected to finish cleanly."""
    proc.join(timeout)
    assert not proc.is_alive(), f"child {proc.name} still running after {timeout} s (hung)"
    if proc.exitcode != 0:
        detail = child_error(conn) if conn is not None else ""
        raise AssertionError(f"child {proc.name} exited with code {proc.exitcode}\n{detail}")

