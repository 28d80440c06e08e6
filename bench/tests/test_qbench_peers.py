"""qstore-bench's peers (bench/qstore_bench/peers_*.py) against their real
components: a tiny run of every experiment each adapter supports and the
correctness experiment.  A missing component skips with its install
command; .ci/run installs them all."""
from __future__ import annotations

import collections
import contextlib
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from qstore_bench import backends as bk
from test_qbench import run


def _backend(name: str) -> bk.Backend:
    return bk.by_name([name])[0]


def needs(*names: str) -> pytest.MarkDecorator:
    """Skips unless every named backend is usable here, saying how to install it."""
    missing = [f"{n}: {why}; install: {_backend(n).hint}"
               for n in names if (why := _backend(n).unavailable())]
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing))


def _sweep(tmp_path: object, names: str, *extra: str) -> dict:
    code, data, out = run(["sweep", "--max", "2", "--reps", "1", "-b", names, *extra], tmp_path)
    assert code == 0, out
    got = {(r["backend"], r["n"]) for r in data["results"]}
    assert got == {(b, n) for b in names.split(",") for n in (1, 10, 100)}, out
    assert all(r["seconds"]["min"] > 0 for r in data["results"])
    return data


def _correct(tmp_path: object, names: str, checks: dict[str, str]) -> None:
    code, data, out = run(["correctness", "--count", "60", "--max-value", "70000", "-b", names],
                          tmp_path)
    assert code == 0, out
    assert data["ok"] is True
    by = {r["backend"]: r for r in data["results"]}
    assert set(by) == set(names.split(","))
    for r in by.values():
        assert r["mismatches"] == 0 and r["checks"] == checks, r


def _perf(tmp_path: object, names: str) -> None:
    code, data, out = run(["perf", "-x", "2", "-n", "200", "-l", "16", "--reps", "1", "-b",
                           names], tmp_path)
    assert code == 0, out
    assert [r["backend"] for r in data["results"]] == ["null"] + names.split(",")
    assert all(r["writes_per_s"] > 0 and r["reads_per_s"] > 0 for r in data["results"])


def _tune(tmp_path: object, name: str, duration: float = 0.2) -> None:
    """duration: long enough for every writer to commit once on a loaded machine"""
    code, data, out = run(["tune", "-b", name, "--batches", "1,4,16", "--writers", "1,2,3",
                           "--duration", str(duration)], tmp_path)
    assert code == 0, out
    assert {(c["writers"], c["batch"]) for c in data["cells"]} == {
        (w, b) for w in (1, 2, 3) for b in (1, 4, 16)}
    assert all(c["items_per_s"] > 0 for c in data["cells"])


ALL_CHECKS = {"key-value": "checked", "duplicate order": "checked", "queue FIFO": "checked"}

# ------------------------------------------------------------ rocksdb, leveldb

LSM = "rocksdb,leveldb"


@needs("rocksdb", "leveldb")
def test_lsm_sweep_both_layers(tmp_path):
    _sweep(tmp_path, LSM)
    _sweep(tmp_path, LSM, "--layer", "queue", "--no-sync")


@needs("rocksdb", "leveldb")
def test_lsm_correctness(tmp_path):
    _correct(tmp_path, LSM, ALL_CHECKS)


@needs("rocksdb", "leveldb")
def test_lsm_perf(tmp_path):
    _perf(tmp_path, LSM)


@needs("rocksdb")
def test_rocksdb_tune(tmp_path):
    _tune(tmp_path, "rocksdb")


@needs("leveldb")
def test_leveldb_tune(tmp_path):
    _tune(tmp_path, "leveldb")


@needs("rocksdb", "leveldb")
@pytest.mark.parametrize("name", LSM.split(","))
def test_lsm_transaction_is_one_batch_and_survives_reopen(tmp_path, name):
    from qstore_bench import peers_lsm

    b = _backend(name)
    s = b.open(str(tmp_path), True)
    s.begin()
    s.putdup(b"q", b"1")
    s.qput("port", b"a")
    # nothing is written before commit: the batch is applied at once
    assert s.getdup(b"q") == [] and s.qlen("port") == 0
    s.commit()
    assert s.getdup(b"q") == [b"1"] and s.qlen("port") == 1
    s.close()
    again = peers_lsm._LsmStore(peers_lsm._Shared(b.engine(os.path.join(str(tmp_path), name),
                                                           True)))
    try:
        assert again.getdup(b"q") == [b"1"] and again.qget_many("port", 5) == [b"a"]
    finally:
        again.close()


_ops = st.lists(st.one_of(
    st.tuples(st.just("putdup"), st.binary(max_size=6), st.binary(max_size=8)),
    st.tuples(st.just("put"), st.binary(max_size=6), st.binary(max_size=8)),
    st.tuples(st.just("qput"), st.sampled_from(["a", "ab", "b", "a "]), st.binary(max_size=8)),
    st.tuples(st.just("qget"), st.sampled_from(["a", "ab", "b", "a "]), st.integers(0, 4))),
    max_size=40)


@pytest.fixture(scope="module")
def sessions():
    """One entered session (a server) per backend for the module's tests."""
    import contextlib

    with contextlib.ExitStack() as stack:
        opened: dict[str, bk.Session] = {}

        def get(b: bk.Backend) -> bk.Session:
            if b.name not in opened:
                opened[b.name] = stack.enter_context(b.session(False))
            return opened[b.name]
        yield get


_MODELLED = ("rocksdb", "leveldb", "hdf5", "mysql", "derby", "bdb-je", "sqlite-jdbc")


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(n)) for n in _MODELLED])
@settings(max_examples=15, deadline=None)
@given(ops=_ops)
# SQL pads strings with spaces to compare them (Derby bit data too): a key
# or a name that differs only by trailing spaces must stay apart
@example(ops=[("putdup", b"", b""), ("putdup", b" ", b""), ("put", b"k", b"1"),
              ("put", b"k ", b"2"), ("qput", "a", b"x"), ("qput", "a ", b"y"),
              ("qget", "a", 2), ("qget", "a ", 2)])
def test_layout_matches_a_model(tmp_path_factory, sessions, name, ops):
    """Keys that are prefixes of each other ("a", "ab", b"" and b"\\0")
    never see each other's duplicates or items; queues are FIFO; a key's
    duplicates come back in insertion order (sorted where the product
    sorts them: every value is distinct, as sorted duplicates require)."""
    b = _backend(name)
    if "casket" not in b.kinds:
        ops = [op for op in ops if op[0] in ("qput", "qget")]
    s = bk.open_store(b, str(tmp_path_factory.mktemp(name)), False, sessions(b))
    dups: dict[bytes, list[bytes]] = collections.defaultdict(list)
    kv: dict[bytes, bytes] = {}
    queues: dict[str, collections.deque[bytes]] = collections.defaultdict(collections.deque)
    try:
        for i, (op, k, v) in enumerate(ops):
            if op == "putdup":
                v = b"%s%03d" % (v, i)
                s.putdup(k, v)
                dups[k].append(v)
            elif op == "put":
                s.put(k, v)
                kv[k] = v
            elif op == "qput":
                s.qput(k, v)
                queues[k].append(v)
            else:
                want = [queues[k].popleft() for _ in range(min(v, len(queues[k])))]
                assert s.qget_many(k, v) == want
        for k, vs in dups.items():
            assert s.getdup(k) == (vs if b.dup_order else sorted(vs))
        for k, v in kv.items():
            assert s.get(k) == v
        for name_, q in queues.items():
            assert s.qlen(name_) == len(q)
    finally:
        s.close()


# ---------------------------------------------------------------------- mysql

def _mariadb_processes(datadir: str) -> list[int]:
    """Pids of processes whose command line names datadir."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if datadir.encode() in f.read():
                    pids.append(int(pid))
        except (OSError, ValueError):
            pass
    return pids


def _listening_on(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* spell them) of the
    listening sockets on port."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    found.add(addr)
    return found


@needs("mysql")
def test_mysql_sweep_both_layers(tmp_path):
    _sweep(tmp_path, "mysql")
    _sweep(tmp_path, "mysql", "--layer", "queue", "--no-sync")


@needs("mysql")
def test_mysql_correctness(tmp_path):
    _correct(tmp_path, "mysql", ALL_CHECKS)


@needs("mysql")
def test_mysql_perf(tmp_path):
    _perf(tmp_path, "mysql")


@needs("mysql")
def test_mysql_tune(tmp_path):
    _tune(tmp_path, "mysql")


@needs("mysql")
def test_mysql_is_driven_by_mysqlclient_when_it_is_installed():
    """PyMySQL parses the protocol in Python: a MariaDB row driven by it
    pays that per statement, which mysqlclient (C, libmariadb), the driver
    MariaDB's Python users pick for speed, does not."""
    pytest.importorskip("MySQLdb", reason="install: apt-get install libmariadb-dev "
                        "pkg-config && pip install mysqlclient")
    from qstore_bench import peers_sql

    b = _backend("mysql")
    assert " mysqlclient " in b.version() + " ", b.version()
    with b.session(False) as session:
        s = b.open("", False, session)
        try:
            assert type(s.con).__module__.startswith("MySQLdb")
            s.put(b"k\x00\xff", b"\x00v\xff")
            assert s.get(b"k\x00\xff") == b"\x00v\xff"
        finally:
            s.close()
    assert peers_sql.driver()[1] == "mysqlclient"


@needs("mysql")
def test_mysql_server_is_loopback_only_and_leaves_nothing_behind(tmp_path):
    import socket
    import time

    b = _backend("mysql")
    session = b.session(True)
    with session:
        server = session.server
        pid, datadir, port = server.proc.pid, server.datadir, server.port
        assert _mariadb_processes(datadir) == [pid]
        assert "--innodb-flush-log-at-trx-commit=1" in server.args()
        # it listens on 127.0.0.1 and on no other address
        assert _listening_on(port) == {"0100007F"}
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        s = bk.open_store(b, str(tmp_path), True, session)
        s.put(b"k", b"v")
        assert s.get(b"k") == b"v"
        s.close()
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 90     # a bounded stop (STOP_TIMEOUT, then SIGKILL)
    assert _mariadb_processes(datadir) == []
    assert not os.path.exists(server.dir)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@needs("mysql")
def test_mysql_server_that_cannot_start_says_why_and_leaves_nothing(tmp_path):
    import socket

    from qstore_bench import servers_mariadb

    server = servers_mariadb.MariaDB(False)
    with socket.socket() as taken:      # bound, not listening: its bind fails, ours holds
        taken.bind(("127.0.0.1", server.port))
        with pytest.raises(RuntimeError) as e:
            server.start()
    assert "MariaDB did not start" in str(e.value) and "exited with status" in str(e.value)
    assert "[ERROR]" in str(e.value) and "Address already in use" in str(e.value)
    assert "[Note]" not in str(e.value)
    assert server.proc is None and not os.path.exists(server.dir)
    assert _mariadb_processes(server.datadir) == []


@needs("mysql")
def test_mysql_synced_commits_survive_killing_the_server(tmp_path):
    import signal
    import subprocess

    from qstore_bench import servers, servers_mariadb

    b = _backend("mysql")
    session = b.session(True)
    with session:
        server = session.server
        s = bk.open_store(b, str(tmp_path), True, session)
        s.queue_transaction([b"item-%d" % i for i in range(50)])
        s.put(b"k", b"committed")
        s.close()
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        # the same data directory, a new server: InnoDB recovers from its log
        server.proc = subprocess.Popen([servers_mariadb.find("mariadbd")] + server.args(),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers._wait_port(server.port, server.proc, servers_mariadb.START_TIMEOUT)
        from qstore_bench import peers_sql

        r = peers_sql._MariaDBStore(server.port)
        try:
            assert r.qlen("port") == 50 and r.get(b"k") == b"committed"
            assert r.qget_many("port", 3) == [b"item-0", b"item-1", b"item-2"]
        finally:
            r.close()


# ----------------------------------------------------------------------- hdf5

@needs("hdf5")
def test_hdf5_sweep_queue_layer_and_refuses_the_casket_layer(tmp_path):
    _sweep(tmp_path, "hdf5", "--layer", "queue")
    code, data, out = run(["sweep", "--max", "1", "--reps", "1", "-b", "hdf5,pyqstore"],
                          tmp_path)
    assert code == 0, out
    assert data["backends"]["hdf5"] == {"available": False, "reason": "has no casket layer"}
    assert "flush" in _backend("hdf5").version()


@needs("hdf5")
def test_hdf5_tune(tmp_path):
    _tune(tmp_path, "hdf5")


_H5_CHILD = """
import os, signal, sys
from qstore_bench import backends as bk
s = bk.by_name(["hdf5"])[0].open(sys.argv[1], True)
s.queue_transaction([b"item-%d" % i for i in range(100)])
assert s.qget_many("port", 10) == [b"item-%d" % i for i in range(10)]
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@needs("hdf5")
def test_hdf5_flushed_items_survive_a_killed_writer(tmp_path):
    import subprocess
    import sys

    from qstore_bench import peers_hdf5

    p = subprocess.run([sys.executable, "-c", _H5_CHILD, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -9 and p.stdout == "committed\n", p.stderr
    s = peers_hdf5.reopen(str(tmp_path / "bench.h5"), True)
    try:
        assert s.qlen("port") == 90
        assert s.qget_many("port", 100) == [b"item-%d" % i for i in range(10, 100)]
    finally:
        s.close()


# ---------------------------------------------------- JVM peers (one JVM here)

JVM = "derby,bdb-je,sqlite-jdbc"


@needs(*JVM.split(","))
def test_jvm_sweep_both_layers(tmp_path):
    _sweep(tmp_path, JVM)
    _sweep(tmp_path, JVM, "--layer", "queue", "--no-sync")


@needs(*JVM.split(","))
def test_jvm_correctness(tmp_path):
    code, data, out = run(["correctness", "--count", "60", "--max-value", "70000", "-b", JVM],
                          tmp_path)
    assert code == 0 and data["ok"] is True, out
    by = {r["backend"]: r for r in data["results"]}
    assert by["derby"]["checks"] == ALL_CHECKS and by["sqlite-jdbc"]["checks"] == ALL_CHECKS
    # JE keeps a key's duplicates sorted (setSortedDuplicates): checked as a set
    assert "sorted" in by["bdb-je"]["checks"]["duplicate order"]
    assert all(r["mismatches"] == 0 for r in by.values())


@needs(*JVM.split(","))
def test_jvm_perf(tmp_path):
    _perf(tmp_path, JVM)


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(n)) for n in JVM.split(",")])
def test_jvm_tune(tmp_path, name):
    # at 50 ms a derby cell once came out at 0 items/s on the loaded 2-core
    # machine (no writer's transaction ended inside the window)
    _tune(tmp_path, name, duration=0.5)


@needs("sqlite-jdbc")
def test_sqlite_jdbc_tune_with_writer_processes_each_its_own_jvm(tmp_path):
    # one cell of tune --processes (the grid would start a JVM per writer per cell)
    from qstore_bench import experiments as ex

    b = _backend("sqlite-jdbc")
    with ex.Workdir(str(tmp_path)) as wd, b.session(False) as session:
        rate = ex.tune_cell(b, 4, 2, 0.2, False, True, wd, session)
    assert rate > 0


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(n)) for n in (
    "mysql", "derby", "bdb-je", "hdf5", "rocksdb", "leveldb")])
def test_peers_that_cannot_share_refuse_writer_processes(tmp_path, name):
    from click.testing import CliRunner

    from qstore_bench.cli import main

    res = CliRunner().invoke(main, ["tune", "-b", name, "--processes", "--dir", str(tmp_path)])
    assert res.exit_code == 1 and "cannot have writers as processes" in res.output
    assert "Traceback" not in res.output


@needs("derby")
def test_derby_leaves_no_log_in_the_working_directory(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "qstore_bench.cli", "sweep", "--max", "0",
                        "--reps", "1", "-b", "derby", "--dir", str(tmp_path)],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path) == []


@contextlib.contextmanager
def _derby_pair(tmp_path):
    """Two handles on one Derby database whose lock waits time out after 1 s."""
    a = _backend("derby").open(str(tmp_path), False)
    b = a.connect()
    try:
        st = a.con.createStatement()
        st.execute("CALL SYSCS_UTIL.SYSCS_SET_DATABASE_PROPERTY('derby.locks.waitTimeout', '1')")
        st.close()
        yield a, b
    finally:
        b.close()
        a.close()


@needs("derby")
def test_a_derby_take_rolled_back_on_a_lock_timeout_is_run_again(tmp_path):
    """A take that waits on another transaction's lock past Derby's wait
    timeout is rolled back by Derby (SQLState 40XL1); the take rolls back
    its side, runs again, and gets the item after the one the other
    transaction took -- nothing lost, nothing taken twice."""
    import threading
    import time

    with _derby_pair(tmp_path) as (a, b):
        for i in range(3):
            a.qput("log", b"item-%d" % i)
        a.begin()
        assert a._take("log", 1) == [b"item-0"]    # its delete holds the row's lock
        taken: list[bytes] = []
        t = threading.Thread(target=lambda: taken.extend(b.qget_many("log", 1)))
        t.start()
        # until b's first attempt waited past the 1 s timeout and was rolled
        # back (a fixed sleep would be too short for a slow JVM start)
        end = time.monotonic() + 60
        while b.retried < 1 and time.monotonic() < end:
            time.sleep(0.05)
        a.commit()
        t.join(60)
        assert taken == [b"item-1"] and b.retried >= 1
        assert a.qget_many("log", 5) == [b"item-2"]


@needs("derby")
@pytest.mark.parametrize("table, write, read", [
    ("q", lambda s: s.qput("log", b"v"), lambda s: s.qget_many("log", 5)),
    ("kv", lambda s: s.put(b"k", b"v"), lambda s: [s.get(b"k")]),
    ("dup", lambda s: s.putdup(b"k", b"v"), lambda s: s.getdup(b"k")),
    ("q", lambda s: s.queue_transaction([b"v"]), lambda s: s.qget_many("port", 5)),
])
def test_a_derby_write_rolled_back_on_a_lock_timeout_is_run_again(tmp_path, table, write, read):
    """A write of its own (autocommit, or the store's own transaction) that
    Derby rolls back with 40XL1 -- here a wait past the lock timeout on a
    table another transaction locked; under concurrent writers, the
    identity column's contended catalog row, which fails at once -- runs
    again and is stored exactly once."""
    import threading
    import time

    with _derby_pair(tmp_path) as (a, b):
        lock = a.con.createStatement()
        a.begin()
        lock.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        errors: list[BaseException] = []

        def run() -> None:
            try:
                write(b)
            except BaseException as e:
                errors.append(e)
        t = threading.Thread(target=run)
        t.start()
        # until b's first attempt waited past the 1 s timeout and was rolled
        # back (a fixed sleep would be too short for a slow JVM start)
        end = time.monotonic() + 60
        while b.retried < 1 and time.monotonic() < end:
            time.sleep(0.05)
        a.commit()
        lock.close()
        t.join(60)
        assert not errors and b.retried >= 1
        assert read(a) == [b"v"]


@needs("bdb-je")
def test_bdb_je_refuses_an_equal_duplicate_instead_of_dropping_it(tmp_path):
    s = _backend("bdb-je").open(str(tmp_path), False)
    try:
        s.putdup(b"k", b"v")
        with pytest.raises(bk.Unsupported, match="one copy of equal values"):
            s.putdup(b"k", b"v")
        s.putdup(b"k", b"w")
        assert s.getdup(b"k") == [b"v", b"w"]
    finally:
        s.close()


_JVM_CHILD = """
import os, signal, sys
from qstore_bench import backends as bk
s = bk.by_name([sys.argv[1]])[0].open(sys.argv[2], True)
s.queue_transaction([b"item-%d" % i for i in range(50)])
s.put(b"k", b"committed")
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _jvm_reopen(name: str, directory: str) -> bk.Store:
    """A handle on the store the child made, without creating it anew."""
    from qstore_bench import peers_jvm as pj

    if name == "derby":
        return pj._DerbyStore(pj._DerbyDialect(), os.path.join(directory, "derby"), True, [])
    if name == "sqlite-jdbc":
        return pj._JdbcStore(pj._SqliteJdbcDialect(), os.path.join(directory, "bench.sqlite"),
                             True, [])
    return pj._JeStore(pj._JeShared(os.path.join(directory, "je"), True))


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(n)) for n in JVM.split(",")])
def test_jvm_synced_commits_survive_a_killed_process(tmp_path, name):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _JVM_CHILD, name, str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == -9 and p.stdout == "committed\n", p.stderr[-2000:]
    s = _jvm_reopen(name, str(tmp_path))
    try:
        assert s.get(b"k") == b"committed" and s.qlen("port") == 50
        assert s.qget_many("port", 2) == [b"item-0", b"item-1"]
    finally:
        s.close()


# ---------------------------------------------------------- codecs in the JVM

def _jvm_codecs_missing() -> str:
    from qstore_bench import codecs_jvm

    return "; ".join(f"{n}: {why}" for n in codecs_jvm._CODECS
                     if (why := codecs_jvm._why_not(n)))


jvm_codecs = pytest.mark.skipif(bool(_jvm_codecs_missing()), reason=_jvm_codecs_missing())


@jvm_codecs
def test_jvm_codecs_rows(tmp_path):
    import json

    from click.testing import CliRunner

    from qstore_bench.cli import main

    out_json = tmp_path / "c.json"
    res = CliRunner().invoke(main, ["codecs", "--max", "400", "--step", "200", "--reps", "2",
                                    "--json", str(out_json)])
    assert res.exit_code == 0, res.output
    data = json.loads(out_json.read_text())
    rows = {(r["codec"], r["n"]): r for r in data["results"]}
    # the table keeps its columns with the longer names: every line as wide as the header
    lines = res.output.splitlines()      # after the progress bar's line
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("codec ")):]
    table = [line for line in lines if not line.startswith("#")]
    assert table[0].startswith("codec") and len(table) == 1 + len(rows)
    assert {len(line) for line in table} == {len(table[0])}
    for name in ("java-serialization", "protobuf-java", "xstream"):
        assert data["codecs"][name] == {"available": True}
        for n in (200, 400):
            r = rows[(name, n)]
            assert r["encode_us"] > 0 and r["decode_us"] > 0
    for n in (200, 400):
        # the seed's proto2 message: unpacked, a tag and a one-byte varint per
        # zero, a tag, a length and 10 bytes per string
        assert rows[("protobuf-java", n)]["bytes"] == 14 * n
        # Python's protobuf row has the same proto2 message: the same bytes
        if ("protobuf", n) in rows:
            assert rows[("protobuf", n)]["bytes"] == 14 * n
        # XStream's XML is the biggest, as the seed found
        assert rows[("xstream", n)]["bytes"] == max(r["bytes"] for (c, m), r in rows.items()
                                                    if m == n)


@jvm_codecs
@pytest.mark.parametrize("name", ["java-serialization", "protobuf-java", "xstream"])
def test_jvm_codec_round_trip_compares_every_element(name):
    from qstore_bench import codecs as cd

    enc, dec = cd.codecs()[name]
    obj = cd.target(3)
    back = dec(enc(obj))
    assert back == obj
    assert back != cd.target(4)
    assert back != {"ia": [0, 0, 1], "sa": obj["sa"]}
    assert back != {"ia": obj["ia"], "sa": ["Dummy text", "Dummy text", "dummy text"]}
    other = {"ia": [1, -2, 2**31 - 1], "sa": ["a", "", "é"]}
    assert dec(enc(other)) == other


@jvm_codecs
def test_jvm_codec_classes_are_removed_at_exit(tmp_path):
    import subprocess
    import sys

    code = ("import tempfile; from qstore_bench import codecs_jvm as c; c.codecs(); "
            "print(c._loaded[0].getURLs()[0].getPath())")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert str(p.stdout).startswith(str(tmp_path)) and os.listdir(tmp_path) == []
