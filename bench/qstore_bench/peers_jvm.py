"""Seed 000's JVM stores, in this process's one JVM (jvm.py) through JPype:
Apache Derby embedded and SQLite through JDBC (xerial sqlite-jdbc), and
Berkeley DB Java Edition with its transactional API, all from Debian.

JDBC is driven as its tutorials say: a connection per thread, prepared
statements, autocommit for single puts, and for a transaction of many
rows setAutoCommit(false), addBatch/executeBatch, commit.  Every call
crosses from Python into the JVM: the cost of that crossing is part of
these rows (seed 000 ran them from Java), beside Python's own sqlite3."""
from __future__ import annotations

import os
import struct
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from . import backends as bk
from . import jvm

_T = TypeVar("_T")
_be64 = struct.Struct(">Q").pack
_be32 = struct.Struct(">I").pack


class _Dialect:
    """How one SQL engine spells the tables and the queue's head."""

    url = ""
    schema: list[str] = []
    upsert: Optional[str] = None            # else UPDATE, then INSERT when no row was there
    head = ""                               # SELECT id, v of the first ? items of queue ?
    # whether a take must claim its rows one by one (see _JdbcStore.qget_many)
    claim_each = False

    def properties(self, sync: bool) -> dict[str, str]:
        return {}

    def setup(self, stmt: Any, sync: bool) -> None:
        pass

    @staticmethod
    def key(k: bytes) -> bytes:
        """A key as the dialect stores it (one that compares exactly)."""
        return k

    @staticmethod
    def name(n: str) -> str:
        """A queue name as the dialect stores it."""
        return n


class _DerbyDialect(_Dialect):
    url = "jdbc:derby:{path};create=true"
    schema = [
        "CREATE TABLE dup (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " k VARCHAR(256) FOR BIT DATA NOT NULL, v BLOB NOT NULL)",
        "CREATE INDEX dup_k ON dup (k, id)",
        "CREATE TABLE kv (k VARCHAR(256) FOR BIT DATA PRIMARY KEY, v BLOB NOT NULL)",
        "CREATE TABLE q (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " name VARCHAR(65) NOT NULL, v BLOB NOT NULL)",
        "CREATE INDEX q_name ON q (name, id)",
    ]
    head = "SELECT id, v FROM q WHERE name = ? ORDER BY id FETCH FIRST ? ROWS ONLY"
    # Derby's READ COMMITTED lets go of a row's shared lock once the SELECT
    # has read it, so two connections read the same head; Derby has no
    # DELETE ... RETURNING.  A DELETE of one id waits on the exclusive lock
    # of a transaction deleting it and then finds no row: its update count
    # (1 or 0) says who took the item.  SERIALIZABLE would keep the shared
    # locks instead, and two takes upgrading them deadlock (resolved only
    # after derby.locks.deadlockTimeout, 20 s).
    claim_each = True

    # Derby compares strings, bit data too, padded with spaces to the same
    # length: b"" equals b" " and "q" equals "q ".  A last byte that is not a
    # space makes equality exact (hypothesis found the pair).
    @staticmethod
    def key(k: bytes) -> bytes:
        return k + b"\x00"

    @staticmethod
    def name(n: str) -> str:
        return n + "|"


class _SqliteJdbcDialect(_Dialect):
    """The same settings as the sqlite3 backend: WAL, synchronous FULL when
    synced, NORMAL otherwise; writers take the lock at BEGIN (IMMEDIATE)."""

    url = "jdbc:sqlite:{path}"
    schema = [
        "CREATE TABLE IF NOT EXISTS dup (k BLOB NOT NULL, v BLOB NOT NULL)",
        "CREATE INDEX IF NOT EXISTS dup_k ON dup (k)",
        "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)",
        "CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " v BLOB NOT NULL)",
        "CREATE INDEX IF NOT EXISTS q_name ON q (name, id)",
    ]
    upsert = "INSERT OR REPLACE INTO kv VALUES (?, ?)"
    head = "SELECT id, v FROM q WHERE name = ? ORDER BY id LIMIT ?"

    def properties(self, sync: bool) -> dict[str, str]:
        return {"journal_mode": "WAL", "synchronous": "FULL" if sync else "NORMAL",
                "transaction_mode": "IMMEDIATE", "busy_timeout": "60000"}


class _JdbcStore(bk.Store):
    """family: the open handles on this database (a list shared by them)."""

    def __init__(self, dialect: _Dialect, path: str, sync: bool,
                 family: Optional[list["_JdbcStore"]] = None) -> None:
        jpype = jvm.start()
        self.jpype, self.dialect, self.path, self.sync = jpype, dialect, path, sync
        create = family is None
        self.family = [] if family is None else family
        props = jpype.java.util.Properties()
        for k, v in dialect.properties(sync).items():
            props.setProperty(k, v)
        self.con = jpype.java.sql.DriverManager.getConnection(dialect.url.format(path=path),
                                                              props)
        if create:
            st = self.con.createStatement()
            for ddl in dialect.schema:
                st.execute(ddl)
            st.close()
        p = self.con.prepareStatement
        self.ins_dup = p("INSERT INTO dup (k, v) VALUES (?, ?)")
        self.get_dup = p("SELECT v FROM dup WHERE k = ? ORDER BY " +
                         ("rowid" if dialect.upsert else "id"))
        self.ins_kv = p(dialect.upsert or "INSERT INTO kv VALUES (?, ?)")
        self.upd_kv = p("UPDATE kv SET v = ? WHERE k = ?")
        self.get_kv = p("SELECT v FROM kv WHERE k = ?")
        self.ins_q = p("INSERT INTO q (name, v) VALUES (?, ?)")
        self.len_q = p("SELECT COUNT(*) FROM q WHERE name = ?")
        self.del_q = p("DELETE FROM q WHERE name = ? AND id <= ?")
        self.del_id = p("DELETE FROM q WHERE id = ?")
        # one head for every n, compiled here: Derby compiles in the
        # connection's transaction, reading the catalog, which a take's
        # transaction is not to do while the writers draw ids from it
        self.head = p(dialect.head)
        self.in_txn = False
        self.retried = 0        # statements the engine rolled back and this ran again
        self.family.append(self)

    def begin(self) -> None:
        self.con.setAutoCommit(False)
        self.in_txn = True

    def commit(self) -> None:
        self.con.commit()
        self.con.setAutoCommit(True)
        self.in_txn = False

    def rollback(self) -> None:
        self.con.rollback()
        self.con.setAutoCommit(True)
        self.in_txn = False

    def _retry(self, e: Any, attempt: int) -> bool:
        """Whether a transaction that failed with SQLException e on its
        attempt-th run (from 0) is to be run again: the engine rolled it back
        to break a wait, as Derby's manual tells applications to handle."""
        if str(e.getSQLState()) not in _RETRY_STATES or attempt + 1 == _ATTEMPTS:
            return False
        self.retried += 1
        # the holder of the contended lock is another short transaction:
        # an immediate rerun would find it still there
        time.sleep(_BACKOFF * 2 ** attempt)
        return True

    def _update(self, ps: Any) -> int:
        """ps.executeUpdate(), its parameters set.  Outside a transaction the
        statement is one of its own (autocommit), which the engine may roll
        back under concurrent writers even without a lock cycle: Derby's
        identity column draws its next block of ids in a nested transaction
        and gives up at once when another holds the catalog row
        (SequenceUpdater's "too much contention", 40XL1).  Then it runs
        again; inside the caller's transaction the caller decides."""
        if self.in_txn:
            return int(ps.executeUpdate())
        return self._retrying(lambda: int(ps.executeUpdate()))

    def _transaction(self, work: Callable[[], _T]) -> _T:
        """work() in a transaction of its own, committed; run again when the
        engine rolled it back (see _retry).  Any failure rolls back, so that
        no failed transaction keeps its locks."""
        def once() -> _T:
            self.begin()
            try:
                out = work()
                self.commit()
                return out
            except BaseException:
                self.rollback()
                raise
        return self._retrying(once)

    def _retrying(self, once: Callable[[], _T]) -> _T:
        """once(), run again while it fails with an SQLException that
        _retry says to run again, up to _ATTEMPTS runs."""
        for attempt in range(_ATTEMPTS):
            try:
                return once()
            except self.jpype.java.sql.SQLException as e:
                if not self._retry(e, attempt):
                    raise
        raise AssertionError("unreachable")

    def put(self, key: bytes, value: bytes) -> None:
        if self.dialect.upsert is None:
            self.upd_kv.setBytes(1, value)
            self.upd_kv.setBytes(2, self.dialect.key(key))
            if self._update(self.upd_kv):
                return
        self.ins_kv.setBytes(1, self.dialect.key(key))
        self.ins_kv.setBytes(2, value)
        self._update(self.ins_kv)

    def _rows(self, ps: Any) -> list[list[bytes]]:
        rs = ps.executeQuery()
        width = rs.getMetaData().getColumnCount()
        out = []
        while rs.next():
            out.append([rs.getBytes(i + 1) for i in range(width)])
        rs.close()
        return out

    def get(self, key: bytes) -> Optional[bytes]:
        self.get_kv.setBytes(1, self.dialect.key(key))
        rows = self._rows(self.get_kv)
        return bytes(rows[0][0]) if rows else None

    def putdup(self, key: bytes, value: bytes) -> None:
        self.ins_dup.setBytes(1, self.dialect.key(key))
        self.ins_dup.setBytes(2, value)
        self._update(self.ins_dup)

    def getdup(self, key: bytes) -> list[bytes]:
        self.get_dup.setBytes(1, self.dialect.key(key))
        return [bytes(r[0]) for r in self._rows(self.get_dup)]

    def _batch(self, ps: Any, rows: list[tuple[Any, bytes]]) -> None:
        def insert() -> None:
            ps.clearBatch()     # a rolled-back attempt may have left its rows
            for a, b in rows:
                if isinstance(a, str):
                    ps.setString(1, self.dialect.name(a))
                else:
                    ps.setBytes(1, self.dialect.key(a))
                ps.setBytes(2, b)
                ps.addBatch()
            if rows:
                ps.executeBatch()
        self._transaction(insert)

    def seed_transaction(self, ids: list[bytes]) -> None:
        self._batch(self.ins_dup, [(k, i) for i in ids for k in (bk.QUEUE_KEY, i)])

    def queue_transaction(self, payloads: list[bytes]) -> None:
        self._batch(self.ins_q, [("port", p) for p in payloads])

    def qput(self, name: str, payload: bytes) -> None:
        self.ins_q.setString(1, self.dialect.name(name))
        self.ins_q.setBytes(2, payload)
        self._update(self.ins_q)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        if n <= 0:      # Derby refuses FETCH FIRST 0 ROWS
            return []
        if self.in_txn:
            return self._take(name, n)
        return self._transaction(lambda: self._take(name, n))

    def _take(self, name: str, n: int) -> list[bytes]:
        ps = self.head
        ps.setString(1, self.dialect.name(name))
        ps.setInt(2, n)
        rs = ps.executeQuery()
        rows = []
        while rs.next():
            rows.append((rs.getLong(1), bytes(rs.getBytes(2))))
        rs.close()
        if rows and self.dialect.claim_each:
            # in id order, as every take: no two takes wait on each other
            # in a cycle
            for i, _ in rows:
                self.del_id.setLong(1, i)
                self.del_id.addBatch()
            counts = self.del_id.executeBatch()
            rows = [r for r, c in zip(rows, counts) if c == 1]
        elif rows:
            # SQLite's IMMEDIATE transaction held the write lock from the
            # SELECT on: no other take read this head
            self.del_q.setString(1, self.dialect.name(name))
            self.del_q.setLong(2, rows[-1][0])
            self.del_q.executeUpdate()
        return [v for _, v in rows]

    def qlen(self, name: str) -> int:
        self.len_q.setString(1, self.dialect.name(name))
        rs = self.len_q.executeQuery()
        rs.next()
        n = int(rs.getLong(1))
        rs.close()
        return n

    def connect(self) -> bk.Store:
        return type(self)(self.dialect, self.path, self.sync, self.family)

    def close(self) -> None:
        self.con.close()
        self.family.remove(self)


class _DerbyStore(_JdbcStore):
    def __init__(self, dialect: _Dialect, path: str, sync: bool,
                 family: Optional[list[_JdbcStore]] = None) -> None:
        # read when a database boots: "test" skips the sync at commit
        jpype = jvm.start()
        # Derby's log of boots and shutdowns would be derby.log in the working
        # directory; its errors reach us as SQLExceptions anyway
        jpype.java.lang.System.setProperty("derby.stream.error.file", os.devnull)
        if sync:
            jpype.java.lang.System.clearProperty("derby.system.durability")
        else:
            jpype.java.lang.System.setProperty("derby.system.durability", "test")
        super().__init__(dialect, path, sync, family)

    def close(self) -> None:
        super().close()
        if not self.family:     # the last handle: shut the database down, which
            try:                # Derby answers with SQLState 08006 on success
                self.jpype.java.sql.DriverManager.getConnection(
                    f"jdbc:derby:{self.path};shutdown=true")
            except self.jpype.java.sql.SQLException as e:
                if str(e.getSQLState()) != "08006":
                    raise


class _Jvm(bk.Backend):
    kinds = frozenset({"casket", "queue", "kv"})
    jars: tuple[str, ...] = ()
    hint = jvm.JRE_HINT

    def unavailable(self) -> Optional[str]:
        return jvm.missing(*self.jars)


# SQLStates of a transaction the engine rolled back to break a wait: a
# deadlock victim (40001), a lock wait past derby.locks.waitTimeout or an
# identity column's contended catalog row (40XL1)
_RETRY_STATES = frozenset({"40001", "40XL1"})
_ATTEMPTS = 8
_BACKOFF = 0.001        # seconds before the first rerun, doubled for each next one

# why JDBC's rows need a connection per thread
_JDBC_NOT_SHARED = ("a JDBC connection's prepared statements hold their parameters from "
                    "setBytes to execute: threads sharing one would run each other's "
                    "(JDBC's tutorials: a connection per thread)")


class Derby(_Jvm):
    name = "derby"
    jars = ("derby.jar",)
    hint = f"apt-get install libderby-java; {jvm.JRE_HINT}"
    no_processes = "embedded Derby: one JVM boots a database at a time"
    no_shared_handle = _JDBC_NOT_SHARED

    def version(self) -> str:
        return f"Derby embedded (libderby-java {jvm.jar_version('derby.jar')}), {jvm.version()}"

    def open(self, directory: str, sync: bool) -> bk.Store:
        return _DerbyStore(_DerbyDialect(), os.path.join(directory, "derby"), sync)


class SqliteJdbc(_Jvm):
    name = "sqlite-jdbc"
    jars = ("sqlite-jdbc.jar",)
    hint = f"apt-get install libxerial-sqlite-jdbc-java; {jvm.JRE_HINT}"
    no_processes = None         # SQLite's file locks serve processes, each its own JVM
    no_shared_handle = _JDBC_NOT_SHARED

    def version(self) -> str:
        return (f"xerial sqlite-jdbc (libxerial-sqlite-jdbc-java "
                f"{jvm.jar_version('sqlite-jdbc.jar')}), {jvm.version()}")

    def open(self, directory: str, sync: bool) -> bk.Store:
        return _JdbcStore(_SqliteJdbcDialect(), os.path.join(directory, "bench.sqlite"), sync)

    def attach(self, directory: str, sync: bool) -> bk.Store:
        return _JdbcStore(_SqliteJdbcDialect(), os.path.join(directory, "bench.sqlite"), sync,
                          family=[])


# -------------------------------------------------------- Berkeley DB JE

class _JeShared:
    """One environment and its databases, shared by the handles of threads."""

    def __init__(self, path: str, sync: bool) -> None:
        jpype = jvm.start()
        je = jpype.JPackage("com").sleepycat.je
        self.je = je
        os.makedirs(path, exist_ok=True)
        ec = je.EnvironmentConfig()
        ec.setAllowCreate(True)
        ec.setTransactional(True)
        ec.setTxnNoSync(not sync)           # the auto-commit puts' durability
        self.env = je.Environment(jpype.java.io.File(path), ec)
        self.sync = sync

        def db(name: str, dups: bool) -> Any:
            dc = je.DatabaseConfig()
            dc.setAllowCreate(True)
            dc.setTransactional(True)
            dc.setSortedDuplicates(dups)
            return self.env.openDatabase(None, name, dc)

        self.dups, self.kv, self.q = db("casket", True), db("kv", False), db("queues", False)
        self.seq = 0
        self.lock = threading.Lock()
        self.handles = 0

    def next_seq(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq


class _JeStore(bk.Store):
    """The transactional API: a Transaction per transaction, committed with
    commitSync() or commitNoSync() by --sync; duplicates are JE's sorted
    duplicates (DatabaseConfig.setSortedDuplicates(true))."""

    def __init__(self, shared: _JeShared) -> None:
        self.s, self.je = shared, shared.je
        self.txn: Any = None
        with shared.lock:
            shared.handles += 1

    def _entry(self, b: Optional[bytes] = None) -> Any:
        return self.je.DatabaseEntry() if b is None else self.je.DatabaseEntry(b)

    def begin(self) -> None:
        self.txn = self.s.env.beginTransaction(None, None)

    def commit(self) -> None:
        txn, self.txn = self.txn, None
        if self.s.sync:
            txn.commitSync()
        else:
            txn.commitNoSync()

    def _put(self, db: Any, key: bytes, value: bytes) -> None:
        st = db.put(self.txn, self._entry(key), self._entry(value))
        if st != self.je.OperationStatus.SUCCESS:
            raise OSError(f"bdb-je put: {st}")

    def put(self, key: bytes, value: bytes) -> None:
        self._put(self.s.kv, key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        d = self._entry()
        st = self.s.kv.get(self.txn, self._entry(key), d, self.je.LockMode.DEFAULT)
        return bytes(d.getData()) if st == self.je.OperationStatus.SUCCESS else None

    def putdup(self, key: bytes, value: bytes) -> None:
        # put() would keep one copy of an equal pair and say SUCCESS: a lost value
        st = self.s.dups.putNoDupData(self.txn, self._entry(key), self._entry(value))
        if st == self.je.OperationStatus.KEYEXIST:
            raise bk.Unsupported("the same value twice under one key (JE's sorted "
                                 "duplicates hold one copy of equal values)")
        if st != self.je.OperationStatus.SUCCESS:
            raise OSError(f"bdb-je putNoDupData: {st}")

    def getdup(self, key: bytes) -> list[bytes]:
        cur = self.s.dups.openCursor(self.txn, None)
        ok, lm = self.je.OperationStatus.SUCCESS, self.je.LockMode.DEFAULT
        k, d = self._entry(key), self._entry()
        out = []
        try:
            st = cur.getSearchKey(k, d, lm)
            while st == ok:
                out.append(bytes(d.getData()))
                st = cur.getNextDup(k, d, lm)
        finally:
            cur.close()
        return out

    def _prefix(self, name: str) -> bytes:
        n = name.encode()
        return _be32(len(n)) + n

    def qput(self, name: str, payload: bytes) -> None:
        self._put(self.s.q, self._prefix(name) + _be64(self.s.next_seq()), payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        prefix = self._prefix(name)
        if self.txn is not None:
            return self._take(prefix, n)
        while True:
            self.begin()
            try:
                out = self._take(prefix, n)
            except self.je.DeadlockException:
                # consumers lock the same head and JE's lock timeout chose
                # this one: abort its transaction and take again
                self._abort()
                continue
            except BaseException:
                self._abort()
                raise
            self.commit()
            return out

    def _abort(self) -> None:
        txn: Any = self.txn
        self.txn = None
        txn.abort()

    def _take(self, prefix: bytes, n: int) -> list[bytes]:
        cur = self.s.q.openCursor(self.txn, None)
        ok, lm = self.je.OperationStatus.SUCCESS, self.je.LockMode.RMW
        k, d = self._entry(prefix), self._entry()
        out: list[bytes] = []
        try:
            st = cur.getSearchKeyRange(k, d, lm)
            while st == ok and len(out) < n and bytes(k.getData()).startswith(prefix):
                out.append(bytes(d.getData()))
                cur.delete()
                st = cur.getNext(k, d, lm)
        finally:
            cur.close()
        return out

    def qlen(self, name: str) -> int:
        prefix = self._prefix(name)
        cur = self.s.q.openCursor(self.txn, None)
        ok, lm = self.je.OperationStatus.SUCCESS, self.je.LockMode.READ_UNCOMMITTED
        k, d = self._entry(prefix), self._entry()
        n = 0
        try:
            st = cur.getSearchKeyRange(k, d, lm)
            while st == ok and bytes(k.getData()).startswith(prefix):
                n += 1
                st = cur.getNext(k, d, lm)
        finally:
            cur.close()
        return n

    def connect(self) -> bk.Store:
        return _JeStore(self.s)

    def close(self) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        with self.s.lock:
            self.s.handles -= 1
            last = self.s.handles == 0
        if last:
            for db in (self.s.dups, self.s.kv, self.s.q):
                db.close()
            self.s.env.close()


class BdbJe(_Jvm):
    name = "bdb-je"
    jars = ("db-je.jar",)
    dup_order = False        # sorted duplicates
    hint = f"apt-get install libdb-je-java; {jvm.JRE_HINT}"
    no_processes = "JE lets one process write an environment"

    def version(self) -> str:
        je = jvm.start().JPackage("com").sleepycat.je
        return f"Berkeley DB JE {je.JEVersion.CURRENT_VERSION.getVersionString()}, {jvm.version()}"

    def open(self, directory: str, sync: bool) -> bk.Store:
        return _JeStore(_JeShared(os.path.join(directory, "je"), sync))
