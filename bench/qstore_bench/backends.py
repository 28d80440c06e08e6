"""The stores qstore-bench compares, behind one interface per kind of store
(seed 001's adapter design): a Backend describes a product and opens
Stores; a Store is one handle (one per thread in the perf experiment).

Kinds a store may support:
  casket   ordered key -> several values, in transactions (seed 000's
           putdup workload); `dup_order` says whether duplicates come back
           in insertion order
  queue    named FIFO queues (put, get_many, len), in transactions when
           the product has them
  kv       plain set/get (seed 001)

A backend whose library or server is missing reports why and how to
install it; nothing is silently dropped.
"""
from __future__ import annotations

import importlib
import itertools
import os
import random
import struct
import threading
import time
from typing import Any, Callable, Iterator, Optional, TypeVar, cast

from . import redis_tool, servers

_be64 = struct.Struct(">Q").pack
QUEUE_KEY = b"QUEUE"
# seconds a handle of one of several processes waits for another's write lock
ATTACH_LOCK_TIMEOUT = 60.0


class Unsupported(Exception):
    """The product has no such operation (no transactions, no duplicates)."""


class Store:
    """One handle on a store.  Every method may raise Unsupported."""

    def begin(self) -> None:
        raise Unsupported("transactions")

    def commit(self) -> None:
        raise Unsupported("transactions")

    # casket / kv
    def put(self, key: bytes, value: bytes) -> None:
        raise Unsupported("put")

    def get(self, key: bytes) -> Optional[bytes]:
        raise Unsupported("get")

    def putdup(self, key: bytes, value: bytes) -> None:
        raise Unsupported("duplicate keys")

    def getdup(self, key: bytes) -> list[bytes]:
        raise Unsupported("duplicate keys")

    # queue
    def qput(self, name: str, payload: bytes) -> None:
        raise Unsupported("queues")

    def qget_many(self, name: str, n: int) -> list[bytes]:
        raise Unsupported("queues")

    def qlen(self, name: str) -> int:
        raise Unsupported("queues")

    # the seed-000 transaction, overridable by a faster native path
    def seed_transaction(self, ids: list[bytes]) -> None:
        self.begin()
        putdup = self.putdup
        for i in ids:
            putdup(QUEUE_KEY, i)
            putdup(i, i)
        self.commit()

    def queue_transaction(self, payloads: list[bytes]) -> None:
        self.begin()
        qput = self.qput
        for p in payloads:
            qput("port", p)
        self.commit()

    def connect(self) -> "Store":
        """The handle another thread uses, the way the product's
        documentation says threads use it: its own connection, or a view of
        the process's one environment with transactions of its own.  A
        product whose one handle is shared by threads returns self."""
        return self

    def close(self) -> None:
        pass


class Backend:
    """A product: name, what it supports, whether it is here."""

    name = ""
    kinds: frozenset[str] = frozenset()
    dup_order = True         # duplicates come back in insertion order
    hint = ""                # how to install it
    module: Optional[str] = None
    # why a --sync run cannot make each write durable (None: it can)
    cannot_sync: Optional[str] = None
    # why threads cannot have a handle each (connect() returns the one handle)
    no_thread_handles: Optional[str] = None
    # why threads cannot share one handle
    no_shared_handle: Optional[str] = None
    # what the rows say the backend is, when its -b name alone does not
    # (the client library driving a server, a server that keeps nothing on disk)
    label = ""
    # a tool in another language that perf runs beside this backend's rows on
    # the same server (tool_phases), e.g. redis-benchmark: its rows' label
    tool_label: Optional[str] = None

    def row_label(self) -> str:
        return self.label or self.name

    def tool_unavailable(self) -> Optional[str]:
        return "no such tool"

    def tool_version(self) -> str:
        return "?"

    def tool_phases(self, session: "Session", requests: int, value_size: int,
                    clients: int) -> tuple[float, float]:
        """Seconds of the tool's write phase and read phase, `requests`
        each of value_size bytes over `clients` connections, against the
        server of session."""
        raise Unsupported(f"{self.name} has no tool beside it")

    def unavailable(self) -> Optional[str]:
        """None when usable here, else the reason."""
        if self.module:
            try:
                importlib.import_module(self.module)
            except ImportError as e:
                return f"{self.module} is not importable ({e})"
        return None

    def version(self) -> str:
        if self.module:
            mod = importlib.import_module(self.module)
            return str(getattr(mod, "__version__", getattr(mod, "version", "?")))
        return "?"

    def open(self, directory: str, sync: bool) -> Store:
        """A new, empty store in directory (which the caller removes)."""
        raise NotImplementedError

    # Why several processes cannot each open the store by path and write to
    # it at once; None when they can (see attach).
    no_processes: Optional[str] = "no way to open one store from several processes here"

    def attach(self, directory: str, sync: bool) -> Store:
        """Another handle, opened by path in the calling process, on the
        store that open() made in directory, while other processes have
        theirs (qstore-bench's --processes)."""
        raise Unsupported(f"{self.name} in several processes: {self.no_processes}")

    def session(self, sync: bool) -> "Session":
        """Resources shared by the stores of one experiment (a server)."""
        return Session()


class Session:
    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


# ------------------------------------------------------------------ pyqstore

class _PyqStore(Store):
    def __init__(self, casket: Any, sync: bool = True) -> None:
        self.c = casket
        self.sync = sync
        self.queues: dict[str, Any] = {}

    def begin(self) -> None:
        self.c.begin()

    def commit(self) -> None:
        self.c.commit()

    def put(self, key: bytes, value: bytes) -> None:
        self.c.put(key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.c.get(key)
        return result

    def putdup(self, key: bytes, value: bytes) -> None:
        self.c.putdup(key, value)

    def getdup(self, key: bytes) -> list[bytes]:
        result: list[bytes] = self.c.getdup(key)
        return result

    def _q(self, name: str) -> Any:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = self.c.queue(name)
        return q

    def qput(self, name: str, payload: bytes) -> None:
        self._q(name).put(payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        result: list[bytes] = self._q(name).get_many(n)
        return result

    def qlen(self, name: str) -> int:
        return len(self._q(name))

    def queue_transaction(self, payloads: list[bytes]) -> None:
        self._q("port").put_many(payloads)

    def connect(self) -> Store:
        import pyqstore
        return _PyqStore(pyqstore.open(self.c.path, "w", sync=self.sync,
                                       lock_timeout=ATTACH_LOCK_TIMEOUT), self.sync)

    def close(self) -> None:
        self.c.close()


class Pyqstore(Backend):
    name = "pyqstore"
    kinds = frozenset({"casket", "queue", "kv"})
    module = "pyqstore"
    no_processes = None

    def version(self) -> str:
        import pyqstore
        return pyqstore.__version__

    def open(self, directory: str, sync: bool) -> Store:
        import pyqstore
        return _PyqStore(pyqstore.open(os.path.join(directory, "bench.qs"), "n", sync=sync),
                         sync)

    def attach(self, directory: str, sync: bool) -> Store:
        import pyqstore
        return _PyqStore(pyqstore.open(os.path.join(directory, "bench.qs"), "w", sync=sync,
                                       lock_timeout=ATTACH_LOCK_TIMEOUT), sync)


class _NativeStore(Store):
    def __init__(self, casket: Any) -> None:
        self.c = casket

    def seed_transaction(self, ids: list[bytes]) -> None:
        try:
            self.c.seed(ids, QUEUE_KEY)
        except ValueError as e:
            raise Unsupported(str(e)) from None

    def close(self) -> None:
        self.c.close()


class Native(Backend):
    """The same experiment driven from C by the bench's own driver
    (qstore_bench/native_seed.c over qstore.h): what the Python binding
    costs is the difference to `pyqstore`."""

    name = "native"
    kinds = frozenset({"casket"})
    module = "qstore_bench.native"
    hint = "pip install ./bench (builds the driver; needs a C compiler)"

    def version(self) -> str:
        import pyqstore
        return pyqstore.__version__

    def open(self, directory: str, sync: bool) -> Store:
        from .native import NativeCasket
        return _NativeStore(NativeCasket(os.path.join(directory, "bench.qs"), sync=sync))


# ----------------------------------------------------------------- Tokyo Cabinet

_TC_CDEF = """
void *tcbdbnew(void);
void tcbdbdel(void *bdb);
bool tcbdbsetmutex(void *bdb);
bool tcbdbopen(void *bdb, const char *path, int omode);
bool tcbdbclose(void *bdb);
bool tcbdbtranbegin(void *bdb);
bool tcbdbtrancommit(void *bdb);
bool tcbdbsync(void *bdb);
bool tcbdbput(void *bdb, const void *kbuf, int ksiz, const void *vbuf, int vsiz);
bool tcbdbputdup(void *bdb, const void *kbuf, int ksiz, const void *vbuf, int vsiz);
bool tcbdbout(void *bdb, const void *kbuf, int ksiz);
void *tcbdbget(void *bdb, const void *kbuf, int ksiz, int *sp);
void *tcbdbget4(void *bdb, const void *kbuf, int ksiz);
int tcbdbvnum(void *bdb, const void *kbuf, int ksiz);
int tclistnum(const void *list);
const void *tclistval(const void *list, int index, int *sp);
void tclistdel(void *list);
void tcfree(void *ptr);
int tcbdbecode(void *bdb);
const char *tcbdberrmsg(int ecode);
extern const char *tcversion;
"""
BDBOWRITER, BDBOCREAT, BDBOTRUNC, BDBOTSYNC = 1 << 1, 1 << 2, 1 << 3, 1 << 6

_tc: Any = None


def _tclib() -> Any:
    global _tc
    if _tc is None:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef(_TC_CDEF)
        last: Optional[OSError] = None
        for name in ("libtokyocabinet.so.9", "libtokyocabinet.so", "libtokyocabinet.dylib"):
            try:
                _tc = (ffi, ffi.dlopen(name))
                break
            except OSError as e:
                last = e
        else:
            raise ImportError(f"libtokyocabinet not found ({last})")
    return _tc


class _TCStore(Store):
    """Seed 000's exact calls: tcbdbopen(OWRITER|OCREAT[|OTSYNC]),
    tcbdbtranbegin, tcbdbputdup, tcbdbtrancommit.  OTSYNC syncs at a
    transaction's commit only: a write outside a transaction stays in the
    handle's cache, so with sync on each such write is followed by
    tcbdbsync (the library's call for making it durable)."""

    def __init__(self, path: str, sync: bool) -> None:
        self.ffi, self.lib = _tclib()
        self.bdb = self.lib.tcbdbnew()
        self.lib.tcbdbsetmutex(self.bdb)
        mode = BDBOWRITER | BDBOCREAT | BDBOTRUNC | (BDBOTSYNC if sync else 0)
        if not self.lib.tcbdbopen(self.bdb, path.encode(), mode):
            err = self._err()
            self.lib.tcbdbdel(self.bdb)
            raise OSError(f"tcbdbopen: {err}")
        self.next_id = 0
        self.sync = sync
        self.in_txn = False
        # The threads share this handle, and a queue operation is several
        # calls (the id's entry under the queue name, then its payload):
        # tcbdbsetmutex makes each call atomic, not the sequence, so
        # without this lock two consumers take the same head and one
        # removes an item nobody read.
        self.qlock = threading.Lock()

    def _err(self) -> str:
        result: str = self.ffi.string(self.lib.tcbdberrmsg(self.lib.tcbdbecode(self.bdb))).decode()
        return result

    def _ok(self, ok: bool, what: str) -> None:
        if not ok:
            raise OSError(f"{what}: {self._err()}")

    def begin(self) -> None:
        self._ok(self.lib.tcbdbtranbegin(self.bdb), "tcbdbtranbegin")
        self.in_txn = True

    def commit(self) -> None:
        self.in_txn = False
        self._ok(self.lib.tcbdbtrancommit(self.bdb), "tcbdbtrancommit")

    def _durable(self) -> None:
        if self.sync and not self.in_txn:
            self._ok(self.lib.tcbdbsync(self.bdb), "tcbdbsync")

    def put(self, key: bytes, value: bytes) -> None:
        self._ok(self.lib.tcbdbput(self.bdb, key, len(key), value, len(value)), "tcbdbput")
        self._durable()

    def putdup(self, key: bytes, value: bytes) -> None:
        self._ok(self.lib.tcbdbputdup(self.bdb, key, len(key), value, len(value)), "tcbdbputdup")
        self._durable()

    def get(self, key: bytes) -> Optional[bytes]:
        sp = self.ffi.new("int *")
        p = self.lib.tcbdbget(self.bdb, key, len(key), sp)
        if p == self.ffi.NULL:
            return None
        try:
            result: Optional[bytes] = self.ffi.unpack(self.ffi.cast("char *", p), sp[0])
            return result
        finally:
            self.lib.tcfree(p)

    def getdup(self, key: bytes) -> list[bytes]:
        lst = self.lib.tcbdbget4(self.bdb, key, len(key))
        if lst == self.ffi.NULL:
            return []
        try:
            sp = self.ffi.new("int *")
            out = []
            for i in range(self.lib.tclistnum(lst)):
                v = self.lib.tclistval(lst, i, sp)
                out.append(self.ffi.unpack(self.ffi.cast("char *", v), sp[0]))
            return out
        finally:
            self.lib.tclistdel(lst)

    # the seed's queue: queue name -> ids (duplicates), id -> payload
    def qput(self, name: str, payload: bytes) -> None:
        k = name.encode()
        with self.qlock:
            self.next_id += 1
            i = _be64(self.next_id)
            self._ok(self.lib.tcbdbputdup(self.bdb, k, len(k), i, len(i)), "tcbdbputdup")
            self.put(i, payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        with self.qlock:
            return self._take(name.encode(), n)

    def _take(self, k: bytes, n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            i = self.get(k)
            if i is None:
                break
            self._ok(self.lib.tcbdbout(self.bdb, k, len(k)), "tcbdbout")
            p = self.get(i)
            self._ok(self.lib.tcbdbout(self.bdb, i, len(i)), "tcbdbout")
            out.append(p if p is not None else b"")
        if out:
            self._durable()
        return out

    def qlen(self, name: str) -> int:
        k = name.encode()
        result: int = max(0, self.lib.tcbdbvnum(self.bdb, k, len(k)))
        return result

    def close(self) -> None:
        if self.bdb is not None:
            self.lib.tcbdbclose(self.bdb)
            self.lib.tcbdbdel(self.bdb)
            self.bdb = None


class TokyoCabinet(Backend):
    name = "tokyocabinet"
    kinds = frozenset({"casket", "queue", "kv"})
    hint = "apt-get install libtokyocabinet9"
    no_processes = ("a writer's handle truncates the file and locks it for as long as it is "
                    "open, so processes would write one after another")
    no_thread_handles = ("one handle per process and file: its documentation has threads "
                         "share one handle made thread-safe by tcbdbsetmutex")

    def unavailable(self) -> Optional[str]:
        try:
            _tclib()
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        ffi, lib = _tclib()
        result: str = ffi.string(lib.tcversion).decode()
        return result

    def open(self, directory: str, sync: bool) -> Store:
        return _TCStore(os.path.join(directory, "casket.tcb"), sync)


# ---------------------------------------------------------------------- lmdb

class _LmdbStore(Store):
    """py-lmdb as its documentation has it: one Environment per process,
    shared by its threads, each thread with transactions of its own
    (connect() gives a thread its view); a read is one read-only
    transaction, env.begin(db=...).get(), as in its examples."""

    def __init__(self, path: str, sync: bool, owner: Optional["_LmdbStore"] = None) -> None:
        if owner is None:
            import lmdb

            self.env = lmdb.open(path, map_size=1 << 34, sync=sync, metasync=sync, max_dbs=4,
                                 lock=True)
            self.dups = self.env.open_db(b"casket", dupsort=True)
            self.kv = self.env.open_db(b"kv")
            self.q = self.env.open_db(b"queues")
            # queue keys, unique over the threads of this process
            self.ids: Iterator[int] = itertools.count(1)
        else:
            self.env, self.dups, self.kv, self.q = owner.env, owner.dups, owner.kv, owner.q
            self.ids = owner.ids
        self.path, self.sync, self.owner = path, sync, owner
        self.txn: Any = None

    def _w(self) -> tuple[Any, bool]:
        if self.txn is not None:
            return self.txn, False
        return self.env.begin(write=True), True

    def begin(self) -> None:
        self.txn = self.env.begin(write=True)

    def commit(self) -> None:
        self.txn.commit()
        self.txn = None

    def _write(self, fn: Any) -> Any:
        txn, own = self._w()
        try:
            r = fn(txn)
        except BaseException:
            if own:
                txn.abort()
            raise
        if own:
            txn.commit()
        return r

    def put(self, key: bytes, value: bytes) -> None:
        self._write(lambda t: t.put(key, value, db=self.kv))

    def get(self, key: bytes) -> Optional[bytes]:
        if self.txn is not None:
            result: Optional[bytes] = self.txn.get(key, db=self.kv)
            return result
        # one read transaction, freed with its object (the context manager's
        # commit on exit cost 40% of a read)
        value: Optional[bytes] = self.env.begin(db=self.kv).get(key)
        return value

    def putdup(self, key: bytes, value: bytes) -> None:
        self._write(lambda t: t.put(key, value, db=self.dups, dupdata=True))

    def getdup(self, key: bytes) -> list[bytes]:
        with self.env.begin() as t:
            cur = t.cursor(db=self.dups)
            if not cur.set_key(key):
                return []
            return list(cur.iternext_dup())

    def qput(self, name: str, payload: bytes) -> None:
        k = name.encode() + b"\0" + _be64(next(self.ids))
        self._write(lambda t: t.put(k, payload, db=self.q))

    def qget_many(self, name: str, n: int) -> list[bytes]:
        prefix = name.encode() + b"\0"

        def take(t: Any) -> list[bytes]:
            cur = t.cursor(db=self.q)
            out: list[bytes] = []
            if not cur.set_range(prefix):
                return out
            while len(out) < n and cur.key().startswith(prefix):
                out.append(cur.value())
                if not cur.delete():
                    break
            return out

        result: list[bytes] = self._write(take)
        return result

    def qlen(self, name: str) -> int:
        prefix = name.encode() + b"\0"
        with self.env.begin() as t:
            cur = t.cursor(db=self.q)
            n = 0
            if cur.set_range(prefix):
                for k in cur.iternext(values=False):
                    if not k.startswith(prefix):
                        break
                    n += 1
            return n

    def connect(self) -> Store:
        return _LmdbStore(self.path, self.sync, self.owner or self)

    def close(self) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        if self.owner is None:
            self.env.close()


class Lmdb(Backend):
    name = "lmdb"
    kinds = frozenset({"casket", "queue", "kv"})
    dup_order = False        # dupsort keeps a key's values sorted
    module = "lmdb"
    hint = "pip install lmdb"
    no_processes = None

    def open(self, directory: str, sync: bool) -> Store:
        return _LmdbStore(os.path.join(directory, "lmdb"), sync)

    def attach(self, directory: str, sync: bool) -> Store:
        s = _LmdbStore(os.path.join(directory, "lmdb"), sync)
        s.ids = itertools.count(os.getpid() << 32)   # keys of processes never collide
        return s


# ------------------------------------------------------------------- sqlite3

class _SqliteStore(Store):
    """WAL; synchronous=FULL when synced, NORMAL (the faster honest setting:
    survives a crash of the process, not of the machine) when not."""

    def __init__(self, path: str, sync: bool) -> None:
        import sqlite3

        self.path, self.sync = path, sync
        self.con = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                   timeout=60)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
        self.con.executescript(
            "CREATE TABLE IF NOT EXISTS dup (k BLOB NOT NULL, v BLOB NOT NULL);"
            "CREATE INDEX IF NOT EXISTS dup_k ON dup (k);"
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL);"
            "CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " v BLOB NOT NULL);"
            "CREATE INDEX IF NOT EXISTS q_name ON q (name, id);")

    def begin(self) -> None:
        self.con.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.con.execute("COMMIT")

    def put(self, key: bytes, value: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    def get(self, key: bytes) -> Optional[bytes]:
        r = self.con.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return r[0] if r else None

    def putdup(self, key: bytes, value: bytes) -> None:
        self.con.execute("INSERT INTO dup VALUES (?, ?)", (key, value))

    def getdup(self, key: bytes) -> list[bytes]:
        return [r[0] for r in self.con.execute(
            "SELECT v FROM dup WHERE k = ? ORDER BY rowid", (key,))]

    def qput(self, name: str, payload: bytes) -> None:
        self.con.execute("INSERT INTO q (name, v) VALUES (?, ?)", (name, payload))

    def qget_many(self, name: str, n: int) -> list[bytes]:
        own = not self.con.in_transaction
        if own:
            self.con.execute("BEGIN IMMEDIATE")
        rows = self.con.execute("SELECT id, v FROM q WHERE name = ? ORDER BY id LIMIT ?",
                                (name, n)).fetchall()
        if rows:
            self.con.execute("DELETE FROM q WHERE name = ? AND id <= ?", (name, rows[-1][0]))
        if own:
            self.con.execute("COMMIT")
        return [r[1] for r in rows]

    def qlen(self, name: str) -> int:
        result: int = self.con.execute("SELECT count(*) FROM q WHERE name = ?", (name,)).fetchone()[0]
        return result

    def connect(self) -> Store:
        return _SqliteStore(self.path, self.sync)

    def close(self) -> None:
        self.con.close()


class Sqlite3(Backend):
    name = "sqlite3"
    kinds = frozenset({"casket", "queue", "kv"})
    module = "sqlite3"
    no_processes = None

    def version(self) -> str:
        import sqlite3
        return sqlite3.sqlite_version

    def open(self, directory: str, sync: bool) -> Store:
        return _SqliteStore(os.path.join(directory, "bench.sqlite"), sync)

    def attach(self, directory: str, sync: bool) -> Store:
        return self.open(directory, sync)


# --------------------------------------------------------------------- redis

class _RedisSession(Session):
    def __init__(self, sync: bool) -> None:
        self.server = servers.Redis(sync)

    def __enter__(self) -> "_RedisSession":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


class _RedisStore(Store):
    """MULTI/EXEC pipelines are the transactions; a queue is a list."""

    def __init__(self, port: int) -> None:
        import redis

        self.port = port
        self.r = redis.Redis(host="127.0.0.1", port=port)
        self.pipe: Any = None

    def _c(self) -> Any:
        return self.pipe if self.pipe is not None else self.r

    def begin(self) -> None:
        self.pipe = self.r.pipeline(transaction=True)

    def commit(self) -> None:
        self.pipe.execute()
        self.pipe = None

    def put(self, key: bytes, value: bytes) -> None:
        self._c().set(key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        # redis's stubs type replies bytes | str (decode_responses is off)
        return cast(Optional[bytes], self.r.get(key))

    def putdup(self, key: bytes, value: bytes) -> None:
        self._c().rpush(b"d:" + key, value)

    def getdup(self, key: bytes) -> list[bytes]:
        return cast(list[bytes], self.r.lrange(b"d:" + key, 0, -1))

    def qput(self, name: str, payload: bytes) -> None:
        self._c().rpush("q:" + name, payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        return cast(list[bytes], self.r.lpop("q:" + name, n) or [])

    def qlen(self, name: str) -> int:
        return self.r.llen("q:" + name)

    def connect(self) -> Store:
        return _RedisStore(self.port)

    def close(self) -> None:
        self.r.close()


class Redis(Backend):
    name = "redis"
    label = "redis (redis-py)"
    kinds = frozenset({"casket", "queue", "kv"})
    module = "redis"
    hint = "apt-get install redis-server && pip install redis"
    no_processes = "a server: its writers are client connections, run them as threads"
    tool_label = "redis-benchmark (C)"

    def tool_unavailable(self) -> Optional[str]:
        return redis_tool.unavailable()

    def tool_version(self) -> str:
        return redis_tool.version()

    def tool_phases(self, session: Session, requests: int, value_size: int,
                    clients: int) -> tuple[float, float]:
        port = cast(_RedisSession, session).server.port
        s = _RedisStore(port)
        try:
            s.r.flushall()
        finally:
            s.close()
        rates = redis_tool.run(port, requests, value_size, clients)
        return requests / rates["SET"], requests / rates["GET"]

    def unavailable(self) -> Optional[str]:
        import shutil

        if not shutil.which("redis-server"):
            return "redis-server is not installed"
        return super().unavailable()

    def version(self) -> str:
        import subprocess

        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        server = next((w[2:] for w in out.stdout.split() if w.startswith("v=")), "?")
        return f"server {server}, redis-py {super().version()}"

    def session(self, sync: bool) -> Session:
        return _RedisSession(sync)

    def open(self, directory: str, sync: bool, session: Any = None) -> Store:
        if session is None:
            raise RuntimeError("redis needs its session (the server)")
        s = _RedisStore(session.server.port)
        s.r.flushall()
        return s


# ---------------------------------------------------------------- Berkeley DB

#: runs of one write the deadlock detector may choose as its victim before
#: the error goes to the caller.  Not the MariaDB peer's 20: four drain
#: consumers taking the same head were chosen up to 25 times in a row
#: (report --small, rerun at once), and 20 failed a CI run.
DEADLOCK_RERUNS = 1000
T = TypeVar("T")


class _BdbStore(Store):
    """DB_BTREE with DB_DUP (duplicates in insertion order) in a
    transactional environment; with sync off, DB_TXN_NOSYNC.  As Berkeley
    DB's documentation has threads use it: one DB_THREAD environment and
    database handles per process, each thread with its own transactions
    (connect() gives a thread its view), the lock manager's deadlock
    detector on, and a transaction chosen as a deadlock's victim aborted and
    run again."""

    def __init__(self, path: str, sync: bool, owner: Optional["_BdbStore"] = None) -> None:
        from berkeleydb import db  # type: ignore[import-untyped, unused-ignore]

        self.dbm = db
        self.path, self.sync, self.owner = path, sync, owner
        self.txn: Any = None
        self.env: Any
        self.dups: Any
        self.kv: Any
        self.ids: Iterator[int]
        if owner is not None:
            self.env, self.dups, self.kv, self.ids = owner.env, owner.dups, owner.kv, owner.ids
            self.q = self.dups
            return
        os.makedirs(path, exist_ok=True)
        self.env = db.DBEnv()
        if not sync:
            self.env.set_flags(db.DB_TXN_NOSYNC, 1)
        self.env.set_cachesize(0, 64 << 20)
        self.env.set_lk_detect(db.DB_LOCK_DEFAULT)
        self.env.open(path, db.DB_CREATE | db.DB_INIT_MPOOL | db.DB_INIT_TXN | db.DB_INIT_LOG
                      | db.DB_INIT_LOCK | db.DB_THREAD | db.DB_RECOVER)
        self.dups = db.DB(self.env)
        self.dups.set_flags(db.DB_DUP)
        self.dups.open("casket.db", dbtype=db.DB_BTREE,
                       flags=db.DB_CREATE | db.DB_AUTO_COMMIT | db.DB_THREAD)
        self.kv = db.DB(self.env)
        self.kv.open("kv.db", dbtype=db.DB_BTREE,
                     flags=db.DB_CREATE | db.DB_AUTO_COMMIT | db.DB_THREAD)
        # queue keys, unique over the threads of this process
        self.ids = itertools.count(1)
        self.q = self.dups

    def begin(self) -> None:
        self.txn = self.env.txn_begin()

    def commit(self) -> None:
        self.txn.commit()
        self.txn = None

    def _rerun(self, run: Callable[[], T], undo: Callable[[], None]) -> T:
        """run(), and again after undo() each time the deadlock detector
        chose it as its victim (Berkeley DB undid it), up to
        DEADLOCK_RERUNS runs: threads putting random keys lock neighbouring
        pages in either order, so seed 001's 2- and 10-thread writes meet
        this, and consumers taking the same head meet it more.  A victim
        the detector chooses every time is an error, not a loop without
        end."""
        for attempt in range(1, DEADLOCK_RERUNS + 1):
            try:
                return run()
            except self.dbm.DBLockDeadlockError:
                undo()
                if attempt == DEADLOCK_RERUNS:
                    raise
            # run again at once, a victim meets the same holders: a random
            # pause, growing to 1 ms, lets one of them finish first
            time.sleep(random.random() * min(1e-3, 1e-5 * 2 ** attempt))
        raise AssertionError("unreachable")

    def _put(self, table: Any, key: bytes, value: bytes) -> None:
        """table.put in the open transaction (a deadlock goes to the caller,
        who reruns the whole transaction), or auto-committed and rerun."""
        if self.txn is not None:
            table.put(key, value, txn=self.txn)
            return
        self._rerun(lambda: table.put(key, value), lambda: None)

    def put(self, key: bytes, value: bytes) -> None:
        self._put(self.kv, key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.kv.get(key, txn=self.txn)
        return result

    def putdup(self, key: bytes, value: bytes) -> None:
        self._put(self.dups, key, value)

    def getdup(self, key: bytes) -> list[bytes]:
        cur = self.dups.cursor(txn=self.txn)
        try:
            out = []
            r = cur.set(key)
            while r is not None:
                out.append(r[1])
                r = cur.next_dup()
            return out
        finally:
            cur.close()

    def qput(self, name: str, payload: bytes) -> None:
        self._put(self.kv, b"q\0" + name.encode() + b"\0" + _be64(next(self.ids)), payload)

    def queue_transaction(self, payloads: list[bytes]) -> None:
        def abort() -> None:
            # the detector chose this transaction: abort it, run it again
            self.txn.abort()
            self.txn = None
        self._rerun(lambda: super(_BdbStore, self).queue_transaction(payloads), abort)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        prefix = b"q\0" + name.encode() + b"\0"
        if self.txn is not None:
            return self._take(self.txn, prefix, n)
        # concurrent consumers lock the same head: the detector may choose
        # this take's transaction, which is then taken again
        return self._rerun(lambda: self._take_committed(prefix, n), lambda: None)

    def _take_committed(self, prefix: bytes, n: int) -> list[bytes]:
        txn = self.env.txn_begin()
        try:
            out = self._take(txn, prefix, n)
        except BaseException:
            txn.abort()
            raise
        txn.commit()
        return out

    def _take(self, txn: Any, prefix: bytes, n: int) -> list[bytes]:
        cur = self.kv.cursor(txn=txn)
        out: list[bytes] = []
        try:
            r = cur.set_range(prefix)
            while r is not None and len(out) < n and r[0].startswith(prefix):
                out.append(r[1])
                cur.delete()
                r = cur.next()
        finally:
            cur.close()
        return out

    def qlen(self, name: str) -> int:
        prefix = b"q\0" + name.encode() + b"\0"
        cur = self.kv.cursor(txn=self.txn)
        n = 0
        try:
            r = cur.set_range(prefix)
            while r is not None and r[0].startswith(prefix):
                n += 1
                r = cur.next()
        finally:
            cur.close()
        return n

    def connect(self) -> Store:
        return _BdbStore(self.path, self.sync, self.owner or self)

    def close(self) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        if self.owner is None:
            self.dups.close()
            self.kv.close()
            self.env.close()


class BerkeleyDB(Backend):
    name = "berkeleydb"
    label = "berkeleydb (Berkeley DB, C library)"
    kinds = frozenset({"casket", "queue", "kv"})
    module = "berkeleydb"
    hint = "apt-get install libdb-dev && pip install berkeleydb"
    no_processes = ("every handle opens the environment with DB_RECOVER, which must not run "
                    "while another process uses it")

    def version(self) -> str:
        from berkeleydb import db
        return (f"Berkeley DB {'.'.join(map(str, db.version()))} (C library, on disk, no "
                f"server), berkeleydb {super().version()}")

    def open(self, directory: str, sync: bool) -> Store:
        return _BdbStore(os.path.join(directory, "bdb"), sync)


# ------------------------------------------------------------------ memcached

class _MemcachedSession(Session):
    def __init__(self) -> None:
        self.server = servers.Memcached()

    def __enter__(self) -> "_MemcachedSession":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


class _MemcachedStore(Store):
    def __init__(self, port: int) -> None:
        from pymemcache.client.base import Client  # type: ignore[import-untyped, unused-ignore]

        self.port = port
        self.c = Client(("127.0.0.1", port), no_delay=True)

    def put(self, key: bytes, value: bytes) -> None:
        if not self.c.set(key, value, noreply=False):
            raise OSError("memcached refused a set")

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.c.get(key)
        return result

    def connect(self) -> Store:
        return _MemcachedStore(self.port)

    def close(self) -> None:
        self.c.close()


class Memcached(Backend):
    """Seed 001's memcached-protocol row (MemcacheDB spoke it): a real
    memcached on loopback.  Keys are at most 250 bytes and values 1 MiB."""

    name = "memcached"
    label = "memcached (memory only)"
    kinds = frozenset({"kv"})
    module = "pymemcache"
    hint = "apt-get install memcached && pip install pymemcache"
    no_processes = Redis.no_processes
    max_key, max_value = 250, 1000 * 1000
    cannot_sync = ("memory only: memcached keeps nothing on disk (MemcacheDB, Berkeley DB "
                   "behind its protocol, is not packaged)")
    no_shared_handle = ("pymemcache's Client is not thread-safe (its documentation: one "
                        "client per thread)")

    def unavailable(self) -> Optional[str]:
        import shutil

        if not shutil.which("memcached"):
            return "memcached is not installed"
        return super().unavailable()

    def version(self) -> str:
        """The server's version (`memcached -V` of the executable the
        session starts), then the client library's."""
        import subprocess

        out = subprocess.run(["memcached", "-V"], capture_output=True, text=True, timeout=30)
        words = out.stdout.split()
        server = words[1] if len(words) > 1 and words[0] == "memcached" else "?"
        return f"server {server} (memory only), pymemcache {super().version()}"

    def session(self, sync: bool) -> Session:
        return _MemcachedSession()

    def open(self, directory: str, sync: bool, session: Any = None) -> Store:
        if session is None:
            raise RuntimeError("memcached needs its session (the server)")
        s = _MemcachedStore(session.server.port)
        s.c.flush_all()
        return s


# ------------------------------------------------------------------ diskcache

class _DiskcacheStore(Store):
    """diskcache's Cache is SQLite in WAL mode with synchronous=NORMAL, which
    syncs at checkpoints only; with sync on it is opened with
    sqlite_synchronous=2 (FULL: each write's commit syncs the WAL)."""

    def __init__(self, path: str, sync: bool = False) -> None:
        import diskcache  # type: ignore[import-untyped, unused-ignore]

        self.path, self.sync = path, sync
        self.cache = diskcache.Cache(path, sqlite_synchronous=2 if sync else 1)
        self.deques: dict[str, Any] = {}
        self.tx: Any = None

    def begin(self) -> None:
        self.tx = self.cache.transact()
        self.tx.__enter__()

    def commit(self) -> None:
        self.tx.__exit__(None, None, None)
        self.tx = None

    def put(self, key: bytes, value: bytes) -> None:
        self.cache.set(key, value)

    def get(self, key: bytes) -> Optional[bytes]:
        result: Optional[bytes] = self.cache.get(key)
        return result

    def _d(self, name: str) -> Any:
        import diskcache  # type: ignore[import-untyped, unused-ignore]

        d = self.deques.get(name)
        if d is None:
            d = self.deques[name] = diskcache.Deque.fromcache(diskcache.Cache(
                os.path.join(self.path, "q-" + name), sqlite_synchronous=2 if self.sync else 1))
        return d

    def qput(self, name: str, payload: bytes) -> None:
        self._d(name).append(payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        d = self._d(name)
        out = []
        for _ in range(n):
            try:
                out.append(d.popleft())
            except IndexError:
                break
        return out

    def qlen(self, name: str) -> int:
        return len(self._d(name))

    def queue_transaction(self, payloads: list[bytes]) -> None:
        d = self._d("port")
        with d.transact():
            for p in payloads:
                d.append(p)

    def connect(self) -> Store:
        return _DiskcacheStore(self.path, self.sync)

    def close(self) -> None:
        for d in self.deques.values():
            d.cache.close()
        self.cache.close()


class Diskcache(Backend):
    """diskcache's Cache (kv) and Deque (queue); no duplicate keys."""

    name = "diskcache"
    kinds = frozenset({"queue", "kv"})
    module = "diskcache"
    hint = "pip install diskcache"
    no_processes = None

    def open(self, directory: str, sync: bool) -> Store:
        return _DiskcacheStore(os.path.join(directory, "diskcache"), sync)

    def attach(self, directory: str, sync: bool) -> Store:
        return self.open(directory, sync)


# --------------------------------------------------------------- persist-queue

_PQ_OPEN_LOCK = threading.Lock()


class _PersistQueueShared:
    """The auto-commit SQLiteQueue objects of one store, one per queue name,
    shared by all its handles: persist-queue's documented way for threads
    (one queue object with multithreading=True, its README's "Multi-
    threading Usage").  Its get is a SELECT of the head then a DELETE, made
    atomic by the object's own action_lock, so only threads sharing the
    object take each item once; objects of their own handed one item to two
    threads (qstore-bench drain counted blocks twice)."""

    def __init__(self) -> None:
        self.queues: dict[str, Any] = {}
        self.handles = 0


class _PersistQueueStore(Store):
    """persist-queue's SQLiteQueue, one directory per queue name.  The
    handles of one store (connect(): one per thread) share its auto-commit
    queue objects (_PersistQueueShared) for single puts and gets; each
    handle has its own object with auto_commit=False, whose task_done()
    commits a transaction of puts (the library's documented way to batch),
    so one thread's transaction never commits another's puts."""

    def __init__(self, path: str, sync: bool,
                 shared: Optional[_PersistQueueShared] = None) -> None:
        self.path = path
        self.sync = sync
        self.shared = shared or _PersistQueueShared()
        self.shared.handles += 1
        self.own: dict[str, Any] = {}

    def _q(self, name: str, auto_commit: bool = True) -> Any:
        import persistqueue

        queues = self.shared.queues if auto_commit else self.own
        q = queues.get(name)
        if q is None:
            where = os.path.join(self.path, name)
            # Made one at a time: SQLiteQueue makes its directory unless it
            # exists (FileExistsError when another thread made it in
            # between), and its first connection switches the new file to
            # WAL, which fails at once ("database is locked") while another
            # connection holds the file.
            with _PQ_OPEN_LOCK:
                q = queues.get(name)
                if q is None:
                    q = queues[name] = persistqueue.SQLiteQueue(
                        where, auto_commit=auto_commit, multithreading=True)
        return q

    def qput(self, name: str, payload: bytes) -> None:
        self._q(name).put(payload)

    def qget_many(self, name: str, n: int) -> list[bytes]:
        import persistqueue

        q = self._q(name)
        out = []
        for _ in range(n):
            try:
                out.append(q.get(block=False))
            except persistqueue.Empty:
                break
        return out

    def qlen(self, name: str) -> int:
        result: int = self._q(name).qsize()
        return result

    def queue_transaction(self, payloads: list[bytes]) -> None:
        q = self._q("port", auto_commit=False)
        for p in payloads:
            q.put(p)
        q.task_done()           # its commit

    def connect(self) -> Store:
        return _PersistQueueStore(self.path, self.sync, self.shared)

    def close(self) -> None:
        for q in self.own.values():
            q.close()
        self.own.clear()
        with _PQ_OPEN_LOCK:
            self.shared.handles -= 1
            if self.shared.handles == 0:    # the last handle of the store
                for q in self.shared.queues.values():
                    q.close()
                self.shared.queues.clear()


class PersistQueue(Backend):
    """persist-queue's SQLiteQueue; queues only."""

    name = "persist-queue"
    kinds = frozenset({"queue"})
    module = "persistqueue"
    hint = "pip install persist-queue"
    no_processes = "its queues are documented as safe between threads, not processes"

    def open(self, directory: str, sync: bool) -> Store:
        return _PersistQueueStore(os.path.join(directory, "pq"), sync)


# ----------------------------------------------------------------------- null

class _NullStore(Store):
    def begin(self) -> None:
        pass

    def commit(self) -> None:
        pass

    def put(self, key: bytes, value: bytes) -> None:
        pass

    def get(self, key: bytes) -> Optional[bytes]:
        return None

    def putdup(self, key: bytes, value: bytes) -> None:
        pass

    def connect(self) -> Store:
        return _NullStore()


class Null(Backend):
    """Does nothing: the harness's own overhead (seed 001 measured it)."""

    name = "null"
    kinds = frozenset({"kv"})
    cannot_sync = "does nothing: the harness's own overhead"

    def version(self) -> str:
        return "-"

    def open(self, directory: str, sync: bool) -> Store:
        return _NullStore()


# the peers' modules import this one: imported here, once Store and Backend exist
from .peers import PEERS  # noqa: E402

# Seed systems that have no component here: name -> (the layer whose
# experiments they were in, why).  The report lists them beside the backends
# that stand nearest to them.
NOT_AVAILABLE: dict[str, tuple[str, str, frozenset[str]]] = {
    "memcachedb": ("kv", "not packaged in Debian (see bench/README.md, \"The seeds, "
                   "system by system\"): MemcacheDB is Berkeley DB behind the "
                   "memcached protocol; the memcached row is memory only, the berkeleydb row "
                   "is Berkeley DB without a server", frozenset({"memcached", "berkeleydb"})),
}

BACKENDS: list[Backend] = [Pyqstore(), Native(), TokyoCabinet(), Lmdb(), Sqlite3(), Redis(),
                           BerkeleyDB(), Memcached(), Diskcache(), PersistQueue()] + PEERS
NULL = Null()


def by_name(names: Optional[list[str]]) -> list[Backend]:
    """The backends named (all when None), in the canonical order."""
    if not names:
        return list(BACKENDS)
    known = {b.name: b for b in BACKENDS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    return [b for b in BACKENDS if b.name in names]


def open_store(backend: Backend, directory: str, sync: bool, session: Session) -> Store:
    if hasattr(session, "server"):     # a server's backends need its port
        return backend.open(directory, sync, session=session)  # type: ignore[call-arg]
    return backend.open(directory, sync)


def iter_available(backends: list[Backend], kind: str) -> Iterator[tuple[Backend, Optional[str]]]:
    """(backend, None) when it can run this kind here, else (backend, why)."""
    for b in backends:
        if kind not in b.kinds:
            yield b, f"has no {kind} layer"
            continue
        why = b.unavailable()
        yield b, (f"{why}; install: {b.hint}" if why and b.hint else why)
