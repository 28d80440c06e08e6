"""Signals during blocking queue waits.

A blocked ``get()``/``reserve()`` must return to Python when a signal
arrives, so its handler runs (KeyboardInterrupt for SIGINT, whatever a
handler raises for SIGTERM) with nothing taken; a handler that does not
raise lets the wait go on with the time that is left.

Each case runs in a child process: before the fix a wait without a
timeout never returns, and the child is killed at the deadline (the test
fails instead of hanging).  The parent stamps CLOCK_MONOTONIC just before
the kill; the child prints the same clock when the exception reaches it;
the difference is the latency, bounded at LATENCY (the issue asks for
100 ms on a quiet machine; the bound leaves room for a loaded 2-core
one, and stays far under every timeout used).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
import time

import pytest

import pyqstore
from _procs import finish, read_line, start_python

LATENCY = 1.0       # seconds from kill() to the exception in the child
CHILD_DEADLINE = 30.0

PRELUDE = textwrap.dedent("""
    import json, os, signal, sys, time
    import pyqstore
    path, mode = sys.argv[1], sys.argv[2]
    c = pyqstore.open(path, sync=False)
    q = c.queue("q")
    def say(**kw):
        print(json.dumps(kw), flush=True)
    def wait_for_parent():
        sys.stdin.readline()
""")


def run_child(path: str, body: str, mode: str = "") -> subprocess.Popen:
    return start_python(PRELUDE + textwrap.dedent(body), path, mode, stdin=True, text=True)


def read_msg(proc: subprocess.Popen, deadline: float) -> dict:
    """The child's next line as JSON; kills the child when it takes longer
    than the deadline (a wait that ignored the signal)."""
    return json.loads(read_line(proc, deadline,
                                late="child gave no answer in time (a wait ignored the signal?)"))


def signal_blocked(proc: subprocess.Popen, sig: int, deadline: float,
                   settle: float = 0.3) -> float:
    """Waits for the child's 'blocking' line, lets it settle into the wait
    (well inside the C wait after settle seconds), sends sig; returns the
    monotonic time of the kill."""
    msg = read_msg(proc, deadline)
    assert msg == {"state": "blocking"}
    time.sleep(settle)
    sent = time.monotonic()
    os.kill(proc.pid, sig)
    return sent


# Child bodies: the wait under test, chosen by mode.
WAITS = {
    "get": "q.get()",
    "get_timeout": "q.get(timeout=60)",
    "get_many": "q.get_many(5, block=True, timeout=60)",
    "reserve": "q.reserve()",
    "reserve_timeout": "q.reserve(timeout=60)",
    "get_codec": "c.queue('q', codec='json').get()",
}

INTERRUPTED = """
    say(state="blocking")
    try:
        got = WAIT()
        say(state="returned", got=repr(got))
    except KeyboardInterrupt:
        say(state="interrupted", at=time.monotonic())
    # the parent puts one item now; the interrupted wait took nothing
    wait_for_parent()
    say(state="after", length=len(q), item=q.get_nowait().decode())
"""


@pytest.mark.parametrize("mode", sorted(WAITS))
def test_sigint_interrupts_blocked_wait(path, mode):
    """SIGINT ends a blocked wait with KeyboardInterrupt within LATENCY;
    the interrupted wait consumed and reserved nothing: an item put after
    it is there for the next get."""
    pyqstore.open(path, "n", sync=False).close()
    proc = run_child(path, f"WAIT = lambda: {WAITS[mode]}\n" + textwrap.dedent(INTERRUPTED))
    deadline = time.monotonic() + CHILD_DEADLINE
    sent = signal_blocked(proc, signal.SIGINT, deadline)
    msg = read_msg(proc, min(deadline, time.monotonic() + 10.0))
    assert msg["state"] == "interrupted", msg
    latency = msg["at"] - sent
    assert 0 <= latency < LATENCY, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    with pyqstore.open(path, sync=False) as c:
        c.queue("q").put(b"later")
        # the child still holds its handle: a reservation it made would
        # hide the item from this count
        assert len(c.queue("q")) == 1
    proc.stdin.write("go\n")
    proc.stdin.flush()
    msg = read_msg(proc, deadline)
    assert msg == {"state": "after", "length": 1, "item": "later"}
    finish(proc, CHILD_DEADLINE)


# The waits of WAITS and a put into a full bounded queue, started once the
# parent holds the write lock; then INTERRUPTED's wait.
BEHIND_LOCK = """
    b = c.queue("b", maxsize=1)
    b.put(b"full")
    WAIT = eval("lambda: " + dict(WAITS_TEXT, put_full="b.put(b'more')")[mode])
    say(state="ready")
    wait_for_parent()
"""


@pytest.mark.parametrize("mode", sorted(WAITS) + ["put_full"])
def test_sigint_while_waiting_for_the_write_lock_ends_the_wait_after_it(path, mode):
    """Every blocking wait first takes the write lock (to take, or to put
    into a bounded queue), and the lock's wait retries when a signal
    interrupts it.  A SIGINT that arrives then must still end the wait that
    follows, once the lock is free: before the fix the signal's handler had
    run, the later sleep for an item began afterwards, and the child slept
    on until the deadline killed it.  (A put into a full queue returns to
    Python between its first try and its wait, so its handler already ran
    there; the case keeps that true.)"""
    pyqstore.open(path, "n", sync=False).close()
    proc = run_child(path, f"WAITS_TEXT = {WAITS!r}\n" + textwrap.dedent(BEHIND_LOCK)
                     + textwrap.dedent(INTERRUPTED), mode)
    deadline = time.monotonic() + CHILD_DEADLINE
    assert read_msg(proc, deadline) == {"state": "ready"}
    with pyqstore.open(path, sync=False) as holder:
        with holder.transaction():
            holder.put(b"held", b"by the parent")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert read_msg(proc, deadline) == {"state": "blocking"}
            time.sleep(0.5)         # the child's wait is waiting for the lock
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.3)
            releasing = time.monotonic()    # the commit lets go of the lock after this
        released = time.monotonic()         # ... and before this
        msg = read_msg(proc, min(deadline, released + 10.0))
        assert msg["state"] == "interrupted", msg
        assert releasing <= msg["at"] < released + LATENCY, (
            f"KeyboardInterrupt {msg['at'] - releasing:.3f} s after the lock began to be freed")
        holder.queue("q").put(b"later")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    # the interrupted wait took nothing and put nothing
    assert read_msg(proc, deadline) == {"state": "after", "length": 1, "item": "later"}
    finish(proc, CHILD_DEADLINE)
    with pyqstore.open(path, sync=False) as c:
        assert c.queue("b").get_many(5) == [b"full"]


def test_sigterm_handler_exception_propagates(path):
    """A SIGTERM handler's exception comes out of the blocked get."""
    pyqstore.open(path, "n", sync=False).close()
    proc = run_child(path, """
        class Stop(Exception):
            pass
        def on_term(signum, frame):
            raise Stop(signum)
        signal.signal(signal.SIGTERM, on_term)
        say(state="blocking")
        try:
            q.get()
        except Stop as e:
            say(state="stopped", signum=e.args[0], at=time.monotonic())
    """)
    deadline = time.monotonic() + CHILD_DEADLINE
    sent = signal_blocked(proc, signal.SIGTERM, deadline)
    msg = read_msg(proc, deadline)
    assert msg["state"] == "stopped" and msg["signum"] == signal.SIGTERM, msg
    assert 0 <= msg["at"] - sent < LATENCY
    finish(proc, CHILD_DEADLINE)


@pytest.mark.parametrize("mode", ["get", "reserve", "get_codec"])
def test_handler_that_returns_lets_the_wait_go_on(path, mode):
    """A handler that returns normally runs (promptly) and the wait goes on:
    it still gets the item put afterwards (a codec queue's get reserves,
    decodes and acks: its wait is reserve's)."""
    pyqstore.open(path, "n", sync=False).close()
    wait = {"get": "q.get()", "reserve": "q.reserve().payload",
            "get_codec": "c.queue('q', codec=Raw()).get()"}[mode]
    proc = run_child(path, f"""
        class Raw:
            encode = decode = staticmethod(bytes)
        ran = []
        def on_usr1(signum, frame):
            ran.append(time.monotonic())
            say(state="handled", at=ran[-1])
        signal.signal(signal.SIGUSR1, on_usr1)
        say(state="blocking")
        got = {wait}
        say(state="got", item=got.decode(), handled=len(ran))
    """)
    deadline = time.monotonic() + CHILD_DEADLINE
    sent = signal_blocked(proc, signal.SIGUSR1, deadline)
    msg = read_msg(proc, deadline)
    assert msg["state"] == "handled", msg
    assert 0 <= msg["at"] - sent < LATENCY
    time.sleep(0.2)
    assert proc.poll() is None, "the wait ended after a handler that returned"
    with pyqstore.open(path, sync=False) as c:
        c.queue("q").put(b"after-signal")
    msg = read_msg(proc, deadline)
    assert msg == {"state": "got", "item": "after-signal", "handled": 1}
    finish(proc, CHILD_DEADLINE)


def test_handler_that_returns_keeps_the_timeout(path):
    """After a handler that returns, a wait with a timeout goes on for the
    time that was left, not a fresh timeout, and then raises Empty."""
    pyqstore.open(path, "n", sync=False).close()
    proc = run_child(path, """
        signal.signal(signal.SIGUSR1, lambda s, f: None)
        say(state="blocking")
        t0 = time.monotonic()
        try:
            q.get(timeout=2.0)
            say(state="got")
        except pyqstore.Empty:
            say(state="empty", elapsed=time.monotonic() - t0)
    """)
    deadline = time.monotonic() + CHILD_DEADLINE
    signal_blocked(proc, signal.SIGUSR1, deadline, settle=1.0)
    msg = read_msg(proc, deadline)
    assert msg["state"] == "empty", msg
    # 2 s in all: not cut short by the signal (at 1 s or later), not
    # restarted from it (which would end at 3 s or later)
    assert 1.95 <= msg["elapsed"] < 2.6, msg
    finish(proc, CHILD_DEADLINE)


def test_interrupted_code_maps_to_interrupted_error():
    """QS_INTR has its place in the one error table."""
    from pyqstore._qstore import lib
    e = pyqstore.errors.error_for(lib.QS_INTR, "get")
    assert isinstance(e, pyqstore.Interrupted) and isinstance(e, InterruptedError)
    assert "signal" in str(e)


def test_an_untimed_get_comes_back_to_python_every_slice(casket, monkeypatch):
    """The binding sets qs_set_wait_slice: a wait returns to Python (which
    then runs any signal handler whose signal ended no sleep) every
    WAIT_SLICE seconds and goes on for the time left, so a get() with no
    timeout still takes the item a thread puts 0.8 s later, after several
    calls into C; a get with a timeout still waits all of it."""
    from pyqstore import _queue
    calls = []
    # get's call: _heldcalls.take (handle, name, timeout), or through cffi
    # where the extension is absent (qs_queue_get's fifth argument)
    name, at = ("_take", 2) if _queue._take is not None else ("_qs_get", 4)
    real = getattr(_queue, name)

    def counting(*args):
        calls.append(args[at])              # the timeout of each call
        return real(*args)

    monkeypatch.setattr(_queue, name, counting)
    q = casket.queue("q")
    putter = threading.Timer(0.8, lambda: q.put(b"late"))
    putter.start()
    try:
        assert q.get() == b"late"
    finally:
        putter.cancel()
    assert len(calls) >= int(0.8 / _queue.WAIT_SLICE), calls
    assert all(t == -1 for t in calls)      # no limit, every time
    calls.clear()
    t0 = time.monotonic()
    with pytest.raises(pyqstore.Empty):
        q.get(timeout=0.6)
    assert time.monotonic() - t0 >= 0.59
    assert len(calls) >= 2 and calls[0] == 0.6 and 0 < calls[-1] < 0.6, calls
