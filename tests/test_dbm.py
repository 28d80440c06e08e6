"""The dbm convention: pyqstore.dbm's interface, Casket as a
MutableMapping, the permission bits of the files an open creates, and the
errors dbm code expects.  CPython's own generic dbm tests are in
test_dbm_cpython.py."""
from __future__ import annotations

import dbm
import dbm.dumb
import os
import tempfile
from collections.abc import MutableMapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyqstore
import pyqstore.dbm

def test_whichdb_of_other_files(tmp_path):
    assert pyqstore.dbm.whichdb(tmp_path / "missing") is None
    (tmp_path / "text").write_bytes(b"qstore? no")
    assert pyqstore.dbm.whichdb(tmp_path / "text") == ""
    with dbm.dumb.open(str(tmp_path / "d"), "c") as d:
        d[b"k"] = b"v"
    assert pyqstore.dbm.whichdb(str(tmp_path / "d")) == "dbm.dumb"


def test_dbm_flag_checked(path):
    with pytest.raises(ValueError, match="flag must be one of"):
        pyqstore.dbm.open(path, "x")


def test_dbm_open_mode_defaults_to_0o666(tmp_path):
    old = os.umask(0)
    try:
        p = str(tmp_path / "a.qs")
        with pyqstore.dbm.open(p, "c"):
            assert [os.stat(f).st_mode & 0o7777 for f in (p, p + "-log", p + "-shm")] == \
                [0o666] * 3
        q = str(tmp_path / "b.qs")
        pyqstore.dbm.open(q, "n", 0o600).close()
        assert os.stat(q).st_mode & 0o7777 == 0o600
    finally:
        os.umask(old)


def test_dbm_keys_is_a_list_and_str_keys_are_utf8(path):
    with pyqstore.dbm.open(path, "c") as db:
        db["clé"] = b"1"
        db.putdup(b"k", b"2")
        db.putdup(b"k", b"3")
        assert db.keys() == ["clé".encode("utf-8"), b"k"]
        assert db["clé".encode("utf-8")] == b"1" and "clé" in db
        assert isinstance(db, pyqstore.Casket)


# ---- errors: what is I/O in nature is an OSError, caught by dbm.error

def test_io_errors_are_oserrors_caught_by_dbm_error(path, tmp_path):
    raised = []

    def catch(fn, *args):
        try:
            fn(*args)
        except dbm.error as e:      # the tuple (dbm.error, OSError)
            raised.append(e)
            assert isinstance(e, pyqstore.dbm.error) and isinstance(e, pyqstore.Error)
        else:
            raise AssertionError(f"{fn} raised nothing")

    catch(pyqstore.dbm.open, path, "r")                        # missing: FileNotFound
    (tmp_path / "text").write_bytes(b"x" * 8192)
    catch(pyqstore.dbm.open, str(tmp_path / "text"), "w")      # not a casket: CorruptError
    with pyqstore.dbm.open(path, "c") as db:
        db[b"k"] = b"v"
    with pyqstore.dbm.open(path, "r") as db:
        catch(db.__setitem__, b"k", b"w")                      # ReadOnlyError
    db2 = pyqstore.open(path, "w", lock_timeout=0)
    db2.begin()
    db2.put(b"k", b"held")

    def other_writer():
        with pyqstore.open(path, "w", lock_timeout=0) as o:
            o[b"k"] = b"w"
    import threading
    t = threading.Thread(target=lambda: catch(other_writer))   # LockedError
    t.start()
    t.join()
    db2.abort()
    db2.close()
    catch(db2.__getitem__, b"k")                               # ClosedError
    assert [type(e) for e in raised] == [pyqstore.FileNotFound, pyqstore.CorruptError,
                                         pyqstore.ReadOnlyError, pyqstore.LockedError,
                                         pyqstore.ClosedError]


def test_which_errors_are_oserrors():
    io = {pyqstore.StorageError, pyqstore.CorruptError, pyqstore.LockedError,
          pyqstore.ReadOnlyError, pyqstore.ClosedError, pyqstore.FullError,
          pyqstore.FileNotFound, pyqstore.PermissionDenied, pyqstore.FileExists,
          pyqstore.IOError, pyqstore.Interrupted, pyqstore.RemoteVolume,
          pyqstore.WouldBlockError}
    for name in pyqstore.__all__:
        obj = getattr(pyqstore, name)
        if isinstance(obj, type) and issubclass(obj, pyqstore.Error):
            assert issubclass(obj, OSError) == (obj in io), name
            assert issubclass(obj, pyqstore.StorageError) == (obj in io), name
    assert pyqstore.dbm.error is pyqstore.StorageError
    assert pyqstore.errors.ForkedError.__name__ in pyqstore.errors.__all__


# ---- Casket as a MutableMapping

def test_casket_is_a_mutable_mapping(casket):
    c = casket
    assert isinstance(c, MutableMapping)
    for k, v in ((b"b", b"1"), (b"b", b"2"), (b"a", b"0"), (b"c", b"3"), (b"b", b"4")):
        c.putdup(k, v)
    assert list(c) == [b"a", b"b", b"c"]
    assert list(c.keys()) == [b"a", b"b", b"c"]
    assert list(c.keys(reverse=True)) == [b"c", b"b", b"a"]
    assert list(c.keys(b"b")) == [b"b", b"c"]
    assert list(c.keys(b"b", reverse=True)) == [b"b", b"a"]
    assert len(c) == 5                          # records, each duplicate counted
    assert list(c.values()) == [b"0", b"1", b"2", b"4", b"3"]
    assert c.getdup(b"b") == [b"1", b"2", b"4"]
    assert c.setdefault(b"b", b"x") == b"1" and c.getdup(b"b") == [b"1", b"2", b"4"]
    assert c.setdefault("d", bytearray(b"new")) == b"new" and c[b"d"] == b"new"
    with pytest.raises(TypeError, match="cannot store None"):
        c.setdefault(b"e")
    assert b"e" not in c
    assert c.pop(b"b") == b"1" and b"b" not in c
    assert c.pop(b"b", None) is None
    with pytest.raises(KeyError):
        c.pop(b"b")
    c.update({b"a": b"A"}, c=b"C")
    c.update([(b"f", b"F")])
    assert dict(c.items()) == {b"a": b"A", b"c": b"C", b"d": b"new", b"f": b"F"}
    assert c.popitem() == (b"a", b"A")
    c.clear()
    assert len(c) == 0 and list(c) == []
    assert c == c and c != {} and hash(c) == object.__hash__(c)
    assert {c: 1}[c] == 1


OPS = st.lists(st.tuples(st.sampled_from(["put", "putdup", "pop", "setdefault", "del", "update"]),
                         st.binary(max_size=2), st.binary(max_size=3)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_mapping_against_a_model(tmp_path, ops):
    """Random mapping operations against a dict of value lists: keys and
    iteration once per key in order, len counts records, items every
    record, [] the first value."""
    p = tempfile.mktemp(dir=tmp_path)
    model: dict[bytes, list[bytes]] = {}
    with pyqstore.open(p, "n", sync=False) as c:
        for op, k, v in ops:
            if op == "put":
                c[k] = v
                model[k] = [v]
            elif op == "putdup":
                c.putdup(k, v)
                model.setdefault(k, []).append(v)
            elif op == "pop":
                got = c.pop(k, None)
                want = model.pop(k, [None])[0]
                assert got == want
            elif op == "setdefault":
                assert c.setdefault(k, v) == model.setdefault(k, [v])[0]
            elif op == "del":
                if k in model:
                    del c[k]
                    del model[k]
                else:
                    with pytest.raises(KeyError):
                        del c[k]
            else:
                c.update({k: v})
                model[k] = [v]
            keys = sorted(model)
            assert list(c) == keys == list(c.keys())
            assert list(c.keys(reverse=True)) == keys[::-1]
            assert len(c) == sum(map(len, model.values()))
            assert list(c.items()) == [(k2, v2) for k2 in keys for v2 in model[k2]]
            for k2 in keys:
                assert c[k2] == model[k2][0] and k2 in c
