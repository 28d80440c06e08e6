"""Transactions whose owner is gone, and writers waiting inside a process.

* A writer of one thread waits for another thread's transaction up to
  ``lock_timeout``, then raises LockedError naming the owner thread.
* A thread that ends with its transaction open leaves it to the next writer
  of another thread, which aborts it and goes on; then other processes can
  write again too.
* A Casket garbage-collected with a transaction open aborts it and frees
  the lock.

Each case runs in a child process with a deadline: before the fix these
waits never ended, and the test fails (child killed) instead of hanging.
"""
from __future__ import annotations

import textwrap

import pyqstore
from _procs import run_python

CHILD_DEADLINE = 60.0

PRELUDE = textwrap.dedent("""
    import gc, os, sys, threading, time
    import pyqstore
    path = sys.argv[1]
""")


def run(path: str, body: str) -> str:
    """Runs body in a child; its stdout.  Fails when the child does not
    finish within CHILD_DEADLINE (a writer that waited forever)."""
    return run_python(PRELUDE + textwrap.dedent(body), path, timeout=CHILD_DEADLINE)


def test_writer_waits_lock_timeout_for_another_threads_transaction(path):
    """A thread's put, begin and queue get each wait lock_timeout for the
    transaction of a live thread, then raise LockedError whose message names
    that thread (name, ident, native id); after its commit they go through."""
    out = run(path, """
        c = pyqstore.open(path, "n", sync=False, lock_timeout=0.5)
        c.queue("q").put(b"item")
        began, done = threading.Event(), threading.Event()
        def hold():
            c.begin()
            c.put(b"held", b"1")
            began.set()
            done.wait()
            c.commit()
        t = threading.Thread(target=hold, name="holder")
        t.start()
        began.wait()
        for what, call in [("put", lambda: c.put(b"k", b"v")),
                           ("begin", c.begin),
                           ("get", lambda: c.queue("q").get(timeout=10))]:
            t0 = time.monotonic()
            try:
                call()
                print(what, "went through")
            except pyqstore.LockedError as e:
                el = time.monotonic() - t0
                msg = str(e)
                named = ("'holder'" in msg and str(t.ident) in msg
                         and str(t.native_id) in msg)
                print(what, "locked", 0.4 <= el < 5.0, named, flush=True)
        done.set()
        t.join()
        c.put(b"k", b"v")
        print("after", c.get(b"held"), c.get(b"k"), c.queue("q").get_nowait())
        c.close()
    """)
    assert out.splitlines() == [
        "put locked True True",
        "begin locked True True",
        "get locked True True",
        "after b'1' b'v' b'item'",
    ]


def test_zero_lock_timeout_refuses_at_once(path):
    """lock_timeout=0 refuses a write at once while another thread's
    transaction is open."""
    out = run(path, """
        c = pyqstore.open(path, "n", sync=False, lock_timeout=0)
        began, done = threading.Event(), threading.Event()
        def hold():
            c.begin(); began.set(); done.wait(); c.abort()
        t = threading.Thread(target=hold); t.start(); began.wait()
        t0 = time.monotonic()
        try:
            c.put(b"k", b"v")
        except pyqstore.LockedError:
            print("locked", time.monotonic() - t0 < 0.5)
        done.set(); t.join()
        c.put(b"k", b"v")
        print(c.get(b"k"))
    """)
    assert out.splitlines() == ["locked True", "b'v'"]


def test_dead_threads_transaction_is_aborted_by_the_next_writer(path):
    """A thread begins, writes records and queue operations, and ends
    without commit or abort.  The next write of another thread aborts that
    transaction (nothing of it stays: the item it took is back, the item it
    put is gone) and goes through; the next transaction works; and another
    process can write again."""
    with pyqstore.open(path, "n", sync=False) as c:
        c.queue("q").put(b"first")
    out = run(path, """
        c = pyqstore.open(path, sync=False, lock_timeout=30)
        def leave_open():
            c.begin()
            c.put(b"ghost", b"1")
            print("took", c.queue("q").get_nowait())
            c.queue("q").put(b"ghost-item")
        t = threading.Thread(target=leave_open)
        t.start()
        t.join()
        t0 = time.monotonic()
        c.put(b"k", b"v")
        print("put after", time.monotonic() - t0 < 10)
        print(c.get(b"ghost"), c.get(b"k"), len(c.queue("q")), c.in_transaction)
        with c.transaction():
            c.put(b"k2", b"v2")
        print(c.get(b"k2"))
        # another process, while this handle stays open
        import subprocess
        code = ("import pyqstore, sys; c = pyqstore.open(sys.argv[1], sync=False, "
                "lock_timeout=5); c.put(b'other', b'1'); print(len(c.queue('q')))")
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True,
                           text=True, timeout=30)
        print(r.stdout.strip() or r.stderr.strip().splitlines()[-1], c.get(b"other"))
        c.close()
    """)
    assert out.splitlines() == [
        "took b'first'",
        "put after True",
        "None b'v' 1 False",
        "b'v2'",
        "1 b'1'",
    ]
    with pyqstore.open(path, sync=False) as c:
        assert c.get(b"ghost") is None
        assert c.queue("q").get_many(10) == [b"first"]


def test_dead_thread_found_by_begin_and_by_queue_get(path):
    """begin() and a blocked queue get() in other threads find the dead
    owner too: the waiting get is woken by a put after the abort."""
    out = run(path, """
        c = pyqstore.open(path, "n", sync=False, lock_timeout=30)
        def leave_open():
            c.begin(); c.put(b"ghost", b"1")
        t = threading.Thread(target=leave_open); t.start(); t.join()
        got = []
        g = threading.Thread(target=lambda: got.append(c.queue("q").get(timeout=20)))
        g.start()
        c.begin()
        c.queue("q").put(b"x")
        c.commit()
        g.join()
        print(got, c.get(b"ghost"))
    """)
    assert out.splitlines() == ["[b'x'] None"]


def test_gc_of_casket_with_open_transaction_frees_the_lock(path):
    """A Casket collected with its transaction open (dropped by the thread
    that began it, the thread then ending) aborts it and lets go of the
    lock: another handle writes at once."""
    out = run(path, """
        pyqstore.open(path, "n", sync=False).close()
        def work():
            c1 = pyqstore.open(path, sync=False)
            c1.begin()
            c1.put(b"ghost", b"1")
            c1.queue("q").put(b"ghost-item")
        t = threading.Thread(target=work); t.start(); t.join()
        gc.collect()
        c2 = pyqstore.open(path, sync=False, lock_timeout=30)
        t0 = time.monotonic()
        c2.put(b"k", b"v")
        print(time.monotonic() - t0 < 5, c2.get(b"ghost"), len(c2.queue("q")))
        # the same in one thread, dropping the handle mid-transaction
        c3 = pyqstore.open(path, sync=False)
        c3.begin(); c3.put(b"ghost3", b"1")
        del c3
        gc.collect()
        c2.put(b"k3", b"v3")
        print(c2.get(b"ghost3"), c2.get(b"k3"))
        c2.close()
    """)
    assert out.splitlines() == ["True None 0", "None b'v3'"]
