"""asyncio: Queue.get_async, reserve_async, put_async and ``async for``.

Waiting coroutines cost no thread: one notifier (an eventfd) per event
loop, fired by this process's commits directly and by one C watcher
thread per process for other processes' commits (pyqstore/_aio.py,
csrc/qaio.c).  The counters of qs_aio_stats tell which path fired a
waiter, so the tests can say which one they exercised.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

import pyqstore
from pyqstore import _aio
from _procs import recv

N_QUEUES = 1000


def run(coro):
    return asyncio.run(coro)


def threads_now() -> tuple[int, int]:
    """(Python threads, kernel tasks of this process)."""
    return len(threading.enumerate()), len(os.listdir("/proc/self/task"))


async def until(cond, what: str, limit: float = 30.0) -> None:
    """Lets the loop run until cond() holds; fails after limit seconds."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting for {what}: {_aio.stats()}")
        await asyncio.sleep(0.005)


def armed() -> int:
    return _aio.stats()["armed"]


# ------------------------------------------------------------ one process


def test_get_async_returns_what_is_there(casket):
    q = casket.queue("a")
    q.put(b"x")
    assert run(q.get_async()) == b"x"
    assert armed() == 0


def test_same_process_put_wakes_without_the_watcher(casket):
    q = casket.queue("a")

    async def one_try(payload):
        task = asyncio.create_task(q.get_async())
        await until(lambda: armed() == 1, "the waiter to arm")
        await asyncio.sleep(0.01)   # arming kicked the watcher: let it sleep
        before = _aio.stats()
        q.put(payload)              # fires the waiter inside this commit
        mid = _aio.stats()
        got = await asyncio.wait_for(task, 10)
        return before, mid, got

    # Which side counts the fire is a race only when the watcher is awake
    # at the put (a loaded machine may not have run it since arming kicked
    # it): it finds the word moved and fires first, which is as good.  A
    # commit that did not tell its own process's waiters would never count
    # a local fire, so some try of a few must.
    local = False
    for i in range(20):
        payload = b"hello %d" % i
        before, mid, got = run(one_try(payload))
        assert got == payload
        assert mid["armed"] == 0        # told by the time the put returned
        assert (mid["fired_local"] + mid["fired_watcher"]
                == before["fired_local"] + before["fired_watcher"] + 1)
        if mid["fired_local"] == before["fired_local"] + 1:
            local = True
            break
    assert local


def test_put_in_a_thread_wakes_the_loop(casket):
    q = casket.queue("a")

    async def main():
        task = asyncio.create_task(q.get_async(timeout=20))
        await until(lambda: armed() == 1, "the waiter to arm")
        t = threading.Thread(target=q.put, args=(b"from a thread",))
        t.start()
        got = await task
        t.join()
        return got

    assert run(main()) == b"from a thread"


def test_timeout_raises_empty_and_leaves_no_waiter(casket):
    q = casket.queue("a")

    async def main():
        t0 = time.monotonic()
        with pytest.raises(pyqstore.Empty):
            await q.get_async(timeout=0.2)
        return time.monotonic() - t0

    took = run(main())
    assert 0.2 <= took < 10
    assert armed() == 0


def test_cancel_leaves_no_waiter_and_takes_nothing(casket):
    q = casket.queue("a")

    async def main():
        tasks = [asyncio.create_task(q.get_async()) for _ in range(10)]
        await until(lambda: armed() == 10, "ten waiters")
        for t in tasks:
            t.cancel()
        res = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in res)
        assert armed() == 0
        q.put(b"kept")              # nobody is left to take it
        await asyncio.sleep(0.05)
        assert len(q) == 1
        with pytest.raises(asyncio.TimeoutError):   # wait_for cancels it
            await asyncio.wait_for(casket.queue("b").get_async(), 0.1)
        assert armed() == 0

    run(main())
    assert q.get_nowait() == b"kept"


def test_close_while_waiting_raises_closed(path):
    c = pyqstore.open(path, "n", sync=False)
    q = c.queue("a")

    async def main():
        tasks = [asyncio.create_task(q.get_async()) for _ in range(5)]
        await until(lambda: armed() == 5, "five waiters")
        before = _aio.stats()
        assert before["watcher"] == 1
        c.close()
        res = await asyncio.gather(*tasks, return_exceptions=True)
        return before, res

    before, res = run(main())
    assert all(isinstance(r, pyqstore.ClosedError) for r in res), res
    after = _aio.stats()
    assert after["fired_closed"] == before["fired_closed"] + 5
    assert after["armed"] == 0 and after["handles"] == 0
    assert after["watcher"] == 0    # stopped with the last handle


def test_inside_a_transaction_it_does_not_wait(casket):
    q = casket.queue("a")

    async def main():
        with casket.transaction():
            t0 = time.monotonic()
            with pytest.raises(pyqstore.Empty):
                await q.get_async(timeout=30)
            return time.monotonic() - t0

    assert run(main()) < 5
    assert armed() == 0


def test_reserve_async_and_ack(casket):
    q = casket.queue("a")

    async def main():
        task = asyncio.create_task(q.reserve_async(lease=30))
        await until(lambda: armed() == 1, "the waiter")
        q.put(b"job")
        item = await asyncio.wait_for(task, 10)
        assert len(q) == 0          # reserved: hidden
        item.ack()

    run(main())
    assert len(q) == 0 and q.get_many(10) == []


def test_reserve_async_bad_lease_fails_before_waiting(casket):
    q = casket.queue("a")
    with pytest.raises(ValueError, match="lease"):
        run(q.reserve_async(lease=-1))
    with pytest.raises(TypeError, match="lease"):
        run(q.reserve_async(lease="1"))
    assert armed() == 0


def test_bad_timeout(casket):
    q = casket.queue("a")
    with pytest.raises(ValueError, match="timeout"):
        run(q.get_async(timeout=-1))
    with pytest.raises(TypeError, match="timeout"):
        run(q.get_async(timeout="1"))


def test_put_async_normal_path(casket):
    # Only the path with room: waiting for room needs bounded queues
    # (pyqstore.Full), which come from another branch of issue 13.
    q = casket.queue("a")
    ids = [run(q.put_async(b"p%d" % i)) for i in range(3)]
    assert ids == sorted(ids)
    assert q.get_many(10) == [b"p0", b"p1", b"p2"]


def test_async_for_yields_in_order(casket):
    q = casket.queue("a")

    async def main():
        got = []

        async def consume():
            async for item in q:
                got.append(item)
                if len(got) == 5:
                    return

        task = asyncio.create_task(consume())
        for i in range(5):
            await until(lambda: armed() == 1 or len(got) == 5, "the consumer to wait")
            q.put(b"%d" % i)
        await asyncio.wait_for(task, 10)
        return got

    assert run(main()) == [b"0", b"1", b"2", b"3", b"4"]
    assert armed() == 0


def test_codec_queue(casket):
    q = casket.queue("j", codec="json")

    async def main():
        task = asyncio.create_task(q.get_async())
        await until(lambda: armed() == 1, "the waiter")
        await q.put_async({"k": [1, 2]})
        return await asyncio.wait_for(task, 10)

    assert run(main()) == {"k": [1, 2]}


def test_two_loops_in_two_threads(casket):
    # A notifier per loop: each thread's loop is woken for its own waiter.
    qa, qb = casket.queue("a"), casket.queue("b")
    out = {}

    def loop_thread(q, key):
        out[key] = asyncio.run(q.get_async(timeout=20))

    ts = [threading.Thread(target=loop_thread, args=(qa, "a")),
          threading.Thread(target=loop_thread, args=(qb, "b"))]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 20
    while armed() < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    qb.put(b"B")
    qa.put(b"A")
    for t in ts:
        t.join(30)
    assert out == {"a": b"A", "b": b"B"}


# ------------------------------------------------------- other processes


def _put_one_each(conn, path, n):
    c = pyqstore.open(path, "w", sync=False)
    conn.send("open")
    assert conn.recv() == "go"
    for i in range(n):
        c.queue(f"q{i}").put(b"%d" % i)
    c.close()
    conn.send("done")


def test_thousand_waiters_woken_by_another_process(path, kids):
    c = pyqstore.open(path, "n", sync=False)
    queues = [c.queue(f"q{i}") for i in range(N_QUEUES)]
    proc, conn = kids.start(_put_one_each, path, N_QUEUES)
    assert recv(conn, proc) == "open"
    base_py, base_tasks = threads_now()

    async def main():
        tasks = [asyncio.create_task(q.get_async(timeout=120)) for q in queues]
        await until(lambda: armed() == N_QUEUES, "every waiter to arm")
        during = threads_now()
        before = _aio.stats()
        conn.send("go")
        got = await asyncio.gather(*tasks)
        return during, before, got

    try:
        during, before, got = run(main())
        assert recv(conn, proc) == "done"
    finally:
        c.close()
    assert got == [b"%d" % i for i in range(N_QUEUES)]
    # one watcher thread (a kernel task, not a Python thread) for them all
    assert during[0] == base_py
    assert base_tasks <= during[1] <= base_tasks + 2
    after = _aio.stats()
    assert after["fired_watcher"] - before["fired_watcher"] >= 1
    assert after["armed"] == 0 and after["watcher"] == 0


def _put_after_go(conn, path, name):
    c = pyqstore.open(path, "w", sync=False)
    conn.send("open")
    assert conn.recv() == "go"
    # Two items in one commit: the take leaves one, so its own commit does
    # not wake the queue's word (a take that empties a queue does, for
    # join) and fired_local below counts only what the put caused.
    c.queue(name).put_many([b"cross", b"left"])
    c.close()
    conn.send("done")


def test_other_process_put_goes_through_the_watcher(path, kids):
    c = pyqstore.open(path, "n", sync=False)
    q = c.queue("x")
    proc, conn = kids.start(_put_after_go, path, "x")
    assert recv(conn, proc) == "open"

    async def main():
        task = asyncio.create_task(q.get_async(timeout=60))
        await until(lambda: armed() == 1, "the waiter")
        before = _aio.stats()
        conn.send("go")
        return before, await task

    try:
        before, got = run(main())
        assert recv(conn, proc) == "done"
        after = _aio.stats()
    finally:
        c.close()
    assert got == b"cross"
    # at least once: on a loaded machine the wake-up can come before the
    # other process's commit is readable here, the take finds nothing and
    # the waiter arms again for the next change of the word (seen in a full
    # run: two fires); the local path must not have fired at all
    assert after["fired_watcher"] >= before["fired_watcher"] + 1
    assert after["fired_local"] == before["fired_local"]
