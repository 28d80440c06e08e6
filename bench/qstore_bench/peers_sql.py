"""MySQL (seed 000's "MySQL" row) as MariaDB from Debian, a server the
benchmark starts on loopback for each experiment (servers_mariadb), driven
by mysqlclient (MySQLdb, the C driver over libmariadb that Django and most
users pick for speed; PyMySQL, pure Python, when mysqlclient is not
installed, and the version line says which) the way its documentation
advises: one connection per thread, autocommit for the single puts, and a
transaction of multi-row INSERTs (cursor.executemany, which both drivers
fold into INSERT ... VALUES (..),(..) statements) for the seed's
transaction and for tune's batches.  Tables are InnoDB; with --sync
innodb_flush_log_at_trx_commit=1 syncs every commit."""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Optional

from . import backends as bk
from . import servers_mariadb

_SCHEMA = [
    "CREATE TABLE dup (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARBINARY(255) NOT NULL,"
    " v LONGBLOB NOT NULL, KEY (k, id)) ENGINE=InnoDB",
    "CREATE TABLE kv (k VARBINARY(255) PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE=InnoDB",
    # binary: a VARCHAR's collation ignores trailing spaces ("a" = "a ")
    "CREATE TABLE q (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARBINARY(256) NOT NULL,"
    " v LONGBLOB NOT NULL, KEY (name, id)) ENGINE=InnoDB",
]
DATABASE = "qbench"


class _MariaDBSession(bk.Session):
    def __init__(self, sync: bool) -> None:
        self.server = servers_mariadb.MariaDB(sync)

    def __enter__(self) -> "_MariaDBSession":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


# (module, distribution) of each driver, the faster first
DRIVERS = (("MySQLdb", "mysqlclient"), ("pymysql", "PyMySQL"))


def driver() -> tuple[Any, str]:
    """The driver module and its distribution's name: mysqlclient when it
    is installed (PyMySQL's pure-Python protocol code costs a MariaDB row
    several times mysqlclient's per statement), else PyMySQL."""
    last: Optional[ImportError] = None
    for module, dist in DRIVERS:
        try:
            return importlib.import_module(module), dist
        except ImportError as e:
            last = e
    raise ImportError(f"neither mysqlclient nor PyMySQL is importable ({last})")


def _connect(port: int, database: Optional[str]) -> Any:
    mod, _ = driver()
    kw = {"database": database} if database else {}
    return mod.connect(host="127.0.0.1", port=port, user="root", password="",
                       autocommit=True, **kw)


#: InnoDB's "Deadlock found when trying to get lock", and how many times a
#: take that lost one is run again before the error is let through
ER_LOCK_DEADLOCK = 1213
DEADLOCK_RETRIES = 20


class _MariaDBStore(bk.Store):
    def __init__(self, port: int) -> None:
        self.port = port
        self.con = _connect(port, DATABASE)
        self.cur = self.con.cursor()
        # Under REPEATABLE READ (InnoDB's default) a locking read keeps a
        # lock on every row it examines until commit, matching or not: a
        # take polling one queue ('hits') could hold rows of another
        # ('log'), and that queue's take, skipping locked rows, handed out
        # the END behind them, so its consumer stopped with a block left
        # (drain's agent cells miscounted in 3 of 10 runs on a busy
        # machine, 0 of 10 with this).  READ COMMITTED releases the rows
        # that do not match.
        self.cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.in_txn = False

    def begin(self) -> None:
        self.con.begin()
        self.in_txn = True

    def commit(self) -> None:
        self.con.commit()
        self.in_txn = False

    def put(self, key: bytes, value: bytes) -> None:
        self.cur.execute("INSERT INTO kv VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
                         (key, value))

    def get(self, key: bytes) -> Optional[bytes]:
        self.cur.execute("SELECT v FROM kv WHERE k = %s", (key,))
        r = self.cur.fetchone()
        return bytes(r[0]) if r else None

    def putdup(self, key: bytes, value: bytes) -> None:
        self.cur.execute("INSERT INTO dup (k, v) VALUES (%s, %s)", (key, value))

    def getdup(self, key: bytes) -> list[bytes]:
        self.cur.execute("SELECT v FROM dup WHERE k = %s ORDER BY id", (key,))
        return [bytes(r[0]) for r in self.cur.fetchall()]

    def seed_transaction(self, ids: list[bytes]) -> None:
        rows = [(k, i) for i in ids for k in (bk.QUEUE_KEY, i)]
        self.con.begin()
        if rows:
            self.cur.executemany("INSERT INTO dup (k, v) VALUES (%s, %s)", rows)
        self.con.commit()

    def qput(self, name: str, payload: bytes) -> None:
        self.cur.execute("INSERT INTO q (name, v) VALUES (%s, %s)", (name, payload))

    def queue_transaction(self, payloads: list[bytes]) -> None:
        self.con.begin()
        if payloads:
            self.cur.executemany("INSERT INTO q (name, v) VALUES (%s, %s)",
                                 [("port", p) for p in payloads])
        self.con.commit()

    def qget_many(self, name: str, n: int) -> list[bytes]:
        if self.in_txn:
            return self._take(name, n)
        # InnoDB may pick a take as a deadlock's victim (1213, seen with 4
        # consumer threads) and roll it back whole: its own transaction is
        # simply run again, as InnoDB's manual tells applications to
        attempts = 0
        while True:
            self.con.begin()
            try:
                rows = self._take(name, n)
                self.con.commit()
                return rows
            except driver()[0].OperationalError as e:
                self.con.rollback()
                attempts += 1
                if e.args[0] != ER_LOCK_DEADLOCK or attempts >= DEADLOCK_RETRIES:
                    raise

    def _take(self, name: str, n: int) -> list[bytes]:
        # SKIP LOCKED: concurrent consumers take different items, none waits
        self.cur.execute("SELECT id, v FROM q WHERE name = %s ORDER BY id LIMIT %s"
                         " FOR UPDATE SKIP LOCKED", (name, n))
        rows = self.cur.fetchall()
        if rows:
            self.cur.execute("DELETE FROM q WHERE id IN (%s)" % ",".join(["%s"] * len(rows)),
                             [r[0] for r in rows])
        return [bytes(r[1]) for r in rows]

    def qlen(self, name: str) -> int:
        self.cur.execute("SELECT COUNT(*) FROM q WHERE name = %s", (name,))
        return int(self.cur.fetchone()[0])

    def connect(self) -> bk.Store:
        return _MariaDBStore(self.port)

    def close(self) -> None:
        self.con.close()


class MySQL(bk.Backend):
    name = "mysql"
    kinds = frozenset({"casket", "queue", "kv"})
    hint = ("apt-get install mariadb-server libmariadb-dev pkg-config && "
            "pip install mysqlclient (or PyMySQL)")
    no_processes = "a server: its writers are client connections, run them as threads"
    no_shared_handle = ("a mysqlclient or PyMySQL connection is not thread-safe (their "
                        "threadsafety is 1: threads share the module, each needs its own "
                        "connection)")

    def unavailable(self) -> Optional[str]:
        for exe in ("mariadbd", "mariadb-install-db"):
            try:
                servers_mariadb.find(exe)
            except RuntimeError as e:
                return str(e)
        try:
            driver()
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        _, dist = driver()
        return f"server {servers_mariadb.version()}, {dist} {importlib.metadata.version(dist)}"

    def session(self, sync: bool) -> bk.Session:
        return _MariaDBSession(sync)

    def open(self, directory: str, sync: bool, session: Any = None) -> bk.Store:
        if session is None:
            raise RuntimeError("mysql needs its session (the server)")
        admin = _connect(session.server.port, None)
        try:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
                cur.execute(f"CREATE DATABASE {DATABASE}")
                cur.execute(f"USE {DATABASE}")
                for ddl in _SCHEMA:
                    cur.execute(ddl)
        finally:
            admin.close()
        return _MariaDBStore(session.server.port)
