"""What opening a casket does to the files around it: a full file system
(the region NAME-shm must not be a sparse mapping that raises SIGBUS),
a casket the caller may only read, and failed opens, which must leave the
directory as they found it.

Several tests run their subject in a forked child, so that a signal kills
the child and is reported, not the test run; the permission tests run it
as the user ``nobody`` (root bypasses file modes)."""
from __future__ import annotations

import errno
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest
from click.testing import CliRunner

import pyqstore
from pyqstore.cli import main
from _procs import in_forked_child

ROOT = os.geteuid() == 0
need_root = pytest.mark.skipif(
    not ROOT, reason="needs root: mounts a tmpfs, or runs a child as another user")


def become(user):
    """Drops this (forked) process's groups and ids to those of user."""
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


def in_child(fn, *, user=None):
    """Runs fn() in a forked child (as user, if given) and returns its
    result; fails the test if the child died of a signal or raised."""
    return in_forked_child(fn, setup=None if user is None else lambda: become(user))


def listing(d):
    return sorted(os.listdir(d))


def make_casket(path):
    with pyqstore.open(path, "c") as c:
        c.put(b"k", b"v")
        c.queue("jobs").put_many([b"a", b"b"])


def read_all(path):
    with pyqstore.open(path, "r") as c:
        return dict(c.items()), c.queue("jobs").peek_many(10), len(c.queue("jobs"))


# ------------------------------------------------------------- a full disk


@pytest.fixture
def small_fs():
    """A 6 MiB tmpfs (it allocates a page when it is first touched, as the
    issue's 20 MiB one did), unmounted afterwards."""
    if not ROOT:
        pytest.skip("mounting a tmpfs needs root")
    d = tempfile.mkdtemp(prefix="qs-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", d], check=True)
        os.rmdir(d)


def fill(d):
    """Fills the file system at d to its last byte; returns the filler."""
    filler = os.path.join(d, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            buf = b"\xaa" * chunk
            while True:
                try:
                    os.write(fd, buf)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    st = os.statvfs(d)
    assert st.f_bavail == 0
    return filler


def disk_full(e):
    return isinstance(e, OSError) and e.errno == errno.ENOSPC


class Model:
    """What the casket must hold: records (key -> values) and the queue's
    items in order, changed only by calls that succeeded."""

    def __init__(self):
        self.kv = {}
        self.q = []
        self.outcomes = []

    def call(self, name, fn, *args, effect=None):
        """fn(*args): must return or fail with ENOSPC; effect(result) runs
        when it returned."""
        try:
            res = fn(*args)
        except Exception as e:  # noqa: BLE001 - judged below
            assert disk_full(e), f"{name}: {type(e).__name__}: {e}"
            self.outcomes.append((name, "ENOSPC"))
            return None
        self.outcomes.append((name, "ok"))
        if effect:
            effect(res)
        return res


def every_call(c, m, big):
    """Every public call of a casket and its queue, on a full disk."""
    q = c.queue("jobs")
    kv = m.kv
    m.call("put big", c.put, b"big", big, effect=lambda _: kv.__setitem__(b"big", [big]))
    m.call("len(queue)", len, q, effect=lambda n: None)
    m.call("put", c.put, b"k1", b"v", effect=lambda _: kv.__setitem__(b"k1", [b"v"]))
    m.call("putkeep", c.putkeep, b"k2", b"w",
           effect=lambda r: r and kv.__setitem__(b"k2", [b"w"]))
    m.call("putdup", c.putdup, b"a", b"dup",
           effect=lambda _: kv.setdefault(b"a", []).append(b"dup"))
    m.call("putdup_many", c.putdup_many, [(b"m", b"1"), (b"m", b"2")],
           effect=lambda _: kv.setdefault(b"m", []).extend([b"1", b"2"]))
    m.call("out", c.out, b"b", effect=lambda r: r and kv.pop(b"b", None))
    m.call("outlist", c.outlist, b"c", effect=lambda r: r and kv.pop(b"c", None))
    for name, fn, args in [("get", c.get, (b"a",)), ("getdup", c.getdup, (b"a",)),
                           ("count", c.count, (b"a",)), ("len", len, (c,)),
                           ("contains", c.__contains__, (b"a",)),
                           ("items", lambda: list(c.items()), ()),
                           ("keys", lambda: list(c.keys(reverse=True)), ()),
                           ("values", lambda: list(c.values(start=b"a")), ()),
                           ("queues", c.queues, ()), ("queue_lengths", c.queue_lengths, ()),
                           ("stats", c.stats, ()), ("check", c.check, ()),
                           ("peek", q.peek, ()), ("peek_many", q.peek_many, (3,)),
                           ("in_transaction", lambda: c.in_transaction, ())]:
        m.call(name, fn, *args)
    m.call("queue.put", q.put, b"j-new", effect=lambda _: m.q.append(b"j-new"))
    m.call("queue.put_many", q.put_many, [b"j-x", b"j-y"],
           effect=lambda _: m.q.extend([b"j-x", b"j-y"]))

    def took(v):
        assert v == m.q.pop(0)
    m.call("get_nowait", q.get_nowait, effect=took)
    m.call("get_many", q.get_many, 1, effect=lambda vs: [took(v) for v in vs])
    item = m.call("reserve", q.reserve, 0.1)
    if item is not None:
        m.call("len(queue) reserved", len, q)
        m.call("release", item.release)
    item = m.call("reserve again", q.reserve, 0.1)
    if item is not None:
        m.call("ack", item.ack, effect=lambda _: took(item.payload))
    m.call("publish", c.publish, b"p", ["jobs", "other"],
           effect=lambda _: m.q.append(b"p"))

    def txn():
        with c.transaction():
            c.put(b"t", b"1")
            q.put(b"j-t")
    m.call("transaction", txn,
           effect=lambda _: (kv.__setitem__(b"t", [b"1"]), m.q.append(b"j-t")))
    try:
        c.begin()
        c.put(b"u", big)
        c.commit()
    except Exception as e:  # noqa: BLE001
        assert disk_full(e), e
        if c.in_transaction:
            c.abort()
    else:
        kv[b"u"] = [big]
    m.call("sync", c.sync)
    m.call("compact", c.compact)
    m.call("clear", q.clear, effect=lambda _: m.q.clear())
    m.call("len(queue) at the end", len, q)


def test_full_disk_every_call_fails_cleanly(small_fs):
    """Before the fix the child died of SIGBUS: len(queue) read a page of
    the sparse region the full tmpfs could not allocate."""
    path = os.path.join(small_fs, "full.qs")
    big = os.urandom(1 << 20)

    def on_full_disk():
        m = Model()
        c = pyqstore.open(path, "c")
        for i in range(20):
            c.putdup(b"a", b"%d" % i)
            m.kv.setdefault(b"a", []).append(b"%d" % i)
        c.put(b"b", b"1")
        c.put(b"c", b"2")
        m.kv.update({b"b": [b"1"], b"c": [b"2"]})
        c.queue("jobs").put_many([b"j%d" % i for i in range(10)])
        m.q = [b"j%d" % i for i in range(10)]
        fill(small_fs)
        every_call(c, m, big)
        # A second handle attaching to the live region, and one that fails
        # to make a new casket beside it.
        m.call("open again", lambda: pyqstore.open(path, "w").close())
        m.call("open new", lambda: pyqstore.open(os.path.join(small_fs, "new.qs"), "c"))
        m.call("close", c.close)
        # Alone now: this open rebuilds the region on the full disk.
        c = m.call("reopen alone", pyqstore.open, path, "w")
        if c is not None:
            every_call(c, m, big)
            m.call("close", c.close)
        return m.kv, m.q, m.outcomes

    kv, q, outcomes = in_child(on_full_disk)
    assert ("put big", "ENOSPC") in outcomes, outcomes
    assert ("open new", "ENOSPC") in outcomes, outcomes
    assert not any(n.startswith("new.qs") for n in os.listdir(small_fs))
    os.unlink(os.path.join(small_fs, "filler"))
    with pyqstore.open(path, "w") as c:
        got = {}
        for k, v in c.items():
            got.setdefault(k, []).append(v)
        assert got == kv
        assert c.queue("jobs").peek_many(1000) == q
        c.check()


def test_full_disk_new_casket(small_fs):
    """Creating a casket on a full file system fails with ENOSPC and leaves
    nothing behind (before: SIGBUS in sh_open)."""
    fill(small_fs)

    def create():
        try:
            pyqstore.open(os.path.join(small_fs, "x.qs"), "c")
        except OSError as e:
            return e.errno, isinstance(e, pyqstore.IOFailure)
        return None

    assert in_child(create) == (errno.ENOSPC, True)
    assert listing(small_fs) == ["filler"]


# ------------------------------------------------ a casket one may only read


@pytest.fixture
def shared_dir():
    """A directory root owns that nobody can enter but not write."""
    if not ROOT:
        pytest.skip("the permission tests run a child as 'nobody': needs root")
    d = tempfile.mkdtemp(prefix="qs-perm-")
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


@need_root
@pytest.mark.parametrize("case", ["region left behind", "no region", "mode 0444"])
def test_read_only_open_without_write_access(shared_dir, case):
    """Before the fix: PermissionDenied naming the main file (the region
    was opened for writing)."""
    path = os.path.join(shared_dir, "c.qs")
    make_casket(path)
    if case == "no region":
        os.unlink(path + "-shm")       # nobody may create it in this directory
    if case == "mode 0444":
        for f in os.listdir(shared_dir):
            os.chmod(os.path.join(shared_dir, f), 0o444)
    before = listing(shared_dir)
    assert in_child(lambda: read_all(path), user="nobody") == ({b"k": b"v"}, [b"a", b"b"], 2)
    assert listing(shared_dir) == before


@need_root
def test_read_only_open_while_others_attached_names_the_region(shared_dir):
    path = os.path.join(shared_dir, "c.qs")
    make_casket(path)
    with pyqstore.open(path, "w"):
        def try_open():
            try:
                pyqstore.open(path, "r")
            except pyqstore.PermissionDenied as e:
                return str(e)
            return None
        msg = in_child(try_open, user="nobody")
    assert msg is not None and path + "-shm" in msg and "other processes" in msg, msg


@need_root
def test_writer_waits_for_a_reader_without_region(shared_dir):
    """A reader without a region cannot follow commits or checkpoints, so
    a writer may not open the casket while it reads (LockedError), and can
    once it closed."""
    path = os.path.join(shared_dir, "c.qs")
    make_casket(path)
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            become("nobody")
            with pyqstore.open(path, "r") as c:
                os.write(go_w, b"x")
                os.read(done_r, 1)
                code = 0 if c[b"k"] == b"v" and c.queue("jobs").peek_many(5) == [b"a", b"b"] \
                    else 2
        finally:
            os._exit(code)
    os.close(go_w)      # so that a child that died is seen as end of file
    os.close(done_r)
    try:
        assert os.read(go_r, 1) == b"x", "the reader could not open the casket"
        with pytest.raises(pyqstore.LockedError):
            pyqstore.open(path, "w", lock_timeout=0.2)
        with pytest.raises(pyqstore.LockedError):
            pyqstore.open(path, "r", lock_timeout=0.2)
    finally:
        try:
            os.write(done_w, b"x")
        except BrokenPipeError:
            pass
        os.close(done_w)
        os.close(go_r)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    with pyqstore.open(path, "w") as c:
        c.put(b"k", b"w")
    assert read_all(path)[0] == {b"k": b"w"}


@need_root
def test_reader_does_not_create_another_users_region(shared_dir):
    """A reader who may not write the casket does not create its region: in
    a directory anyone may write (sticky, like /tmp) the region it left,
    owned by it, locked the owner out for good (PermissionDenied at "w")."""
    os.chmod(shared_dir, 0o1777)
    path = os.path.join(shared_dir, "c.qs")
    in_child(lambda: make_casket(path), user="daemon")
    os.unlink(path + "-shm")
    assert in_child(lambda: read_all(path), user="nobody")[0] == {b"k": b"v"}
    assert listing(shared_dir) == ["c.qs", "c.qs-log"]

    def write():
        with pyqstore.open(path, "w") as c:
            c.put(b"k", b"w")
    in_child(write, user="daemon")
    assert in_child(lambda: read_all(path), user="nobody")[0] == {b"k": b"w"}


@need_root
@pytest.mark.parametrize("command", [["info"], ["check"], ["peek", "{}", "jobs"],
                                     ["dump", "{}"], ["info", "--json"]])
def test_cli_reads_a_casket_it_may_not_write(shared_dir, command):
    path = os.path.join(shared_dir, "c.qs")
    make_casket(path)
    for f in os.listdir(shared_dir):
        os.chmod(os.path.join(shared_dir, f), 0o444)
    args = [a.format(path) for a in command]
    if "{}" not in command:
        args.insert(1, path)

    def run():   # in this process: nobody may not run the interpreter
        r = CliRunner().invoke(main, args)
        return r.exit_code, r.output

    rc, out = in_child(run, user="nobody")
    assert rc == 0 and out, out


# ------------------------------------------- failed opens leave nothing


@pytest.mark.parametrize("flag", ["r", "w"])
def test_open_missing_creates_nothing(tmp_path, flag):
    with pytest.raises(FileNotFoundError):
        pyqstore.open(str(tmp_path / "missing.qs"), flag)
    assert listing(tmp_path) == []


@pytest.mark.parametrize("flag", ["r", "w", "c"])
def test_text_file_is_refused_and_nothing_created(tmp_path, flag):
    p = tmp_path / "notes.txt"
    p.write_text("not a casket\n" * 400)
    with pytest.raises(pyqstore.CorruptError, match="not a pyqstore casket"):
        pyqstore.open(str(p), flag)
    assert listing(tmp_path) == ["notes.txt"]
    assert p.read_text() == "not a casket\n" * 400


def test_cli_info_on_text_file_creates_nothing(tmp_path):
    p = tmp_path / "notacasket.txt"
    p.write_text("hello\n" * 1000)
    r = subprocess.run([sys.executable, "-m", "pyqstore.cli", "info", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "not a pyqstore casket" in r.stderr
    assert listing(tmp_path) == ["notacasket.txt"]


@pytest.mark.parametrize("flag", ["r", "w", "c", "n"])
def test_not_a_regular_file_is_refused_first(tmp_path, flag):
    """/dev/null opened "c" became a casket beside /dev/null-log and
    /dev/null-shm; a pipe would block the open.  Both are refused before
    anything is created (a symlink to /dev/null here, so no file appears
    in /dev whatever happens)."""
    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (null, fifo):
        with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
            pyqstore.open(str(p), flag, lock_timeout=0)
    assert listing(tmp_path) == ["fifo", "null"]


def test_side_file_not_regular_is_refused(tmp_path):
    p = str(tmp_path / "c.qs")
    make_casket(p)
    os.unlink(p + "-shm")
    os.mkfifo(p + "-shm")
    with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
        pyqstore.open(p, "w", lock_timeout=0)
    os.unlink(p + "-shm")
    os.unlink(p + "-log")
    os.mkfifo(p + "-log")
    with pytest.raises(pyqstore.CorruptError, match="not a regular file"):
        pyqstore.open(p, "w", lock_timeout=0)
    assert listing(tmp_path) == ["c.qs", "c.qs-log"]


def test_failed_open_keeps_files_others_use(tmp_path):
    """A failing opener removes only what it created: with another handle
    open, the region and log stay, and that handle keeps working."""
    p = str(tmp_path / "c.qs")
    with pyqstore.open(p, "c") as c:
        with pytest.raises(pyqstore.LockedError):
            pyqstore.open(p, "n", lock_timeout=0)
        assert listing(tmp_path) == ["c.qs", "c.qs-log", "c.qs-shm"]
        c.put(b"k", b"v")
    assert read_all(p)[0] == {b"k": b"v"}


def test_empty_file_is_refused_by_c(tmp_path):
    """Opening someone's empty file with "c" turned it into a casket."""
    p = tmp_path / "empty"
    p.write_bytes(b"")
    with pytest.raises(pyqstore.CorruptError, match="not a pyqstore casket"):
        pyqstore.open(str(p), "c")
    assert listing(tmp_path) == ["empty"] and p.read_bytes() == b""
    with pyqstore.open(str(p), "n") as c:   # "n" may overwrite it
        c.put(b"k", b"v")
    assert read_all(str(p))[0] == {b"k": b"v"}
