"""The `native` driver (qstore_bench/native_seed.c): seed 000's transaction
in C over the public API, on the driver's own copy of the engine; what it
writes is what pyqstore reads."""
from __future__ import annotations

import pytest

import pyqstore
from qstore_bench.native import NativeCasket


def _ids(n: int, width: int = 36) -> list[bytes]:
    return [(b"id-%032d" % i)[:width].ljust(width, b".") for i in range(n)]


def test_one_transaction_of_putdup_pairs_that_pyqstore_reads(tmp_path):
    path = str(tmp_path / "seed.qs")
    ids = _ids(1000)
    c = NativeCasket(path, sync=True)
    c.seed(ids)
    st = c.stats()
    c.close()
    assert st["records"] == 2000 and st["commits"] == 1 and st["syncs"] >= 1
    with pyqstore.open(path, "r") as db:
        assert db.getdup(b"QUEUE") == ids
        assert db.count(ids[5]) == 1 and db.get(ids[999]) == ids[999]
        assert len(db) == 2000          # records: the n queue values and n ids


def test_a_failing_putdup_aborts_the_whole_transaction(tmp_path):
    path = str(tmp_path / "seed.qs")
    c = NativeCasket(path)
    c.seed(_ids(3))
    too_long = [b"k" * 20000]           # over QS_MAX_KEY as a key
    with pytest.raises(pyqstore.Error) as e:
        c.seed(_ids(10, 20000)[:9] + too_long)
    assert "seed" in str(e.value)
    assert c.stats()["records"] == 6    # the first transaction only
    c.close()
    c.close()                           # a second close is a no-op


def test_ids_of_different_lengths_are_refused_before_any_write(tmp_path):
    c = NativeCasket(str(tmp_path / "seed.qs"))
    with pytest.raises(ValueError, match="one length"):
        c.seed([b"a", b"bb"])
    assert c.stats()["records"] == 0
    c.close()


def test_an_open_that_fails_raises_the_stores_exception(tmp_path):
    missing = str(tmp_path / "no" / "such" / "dir" / "seed.qs")
    with pytest.raises(FileNotFoundError) as e:
        NativeCasket(missing)
    assert isinstance(e.value, pyqstore.Error) and "open" in str(e.value)
