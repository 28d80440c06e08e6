"""CPython's own generic dbm tests (test.test_dbm) run against pyqstore.dbm.

They need the standard library's test package, which some Pythons ship
apart (Debian: libpython3.X-testsuite; .ci/run installs it, so CI always
runs them); without it this module is skipped, saying so.  Our own tests
of the dbm convention are in test_dbm.py and need nothing extra."""
from __future__ import annotations

import dbm
import itertools
import os
import shutil
import tempfile
import types
import unittest

import pytest

import pyqstore
import pyqstore.dbm

cpython_dbm = pytest.importorskip(
    "test.test_dbm",
    reason="CPython's test package is not installed (Debian: libpython3.X-testsuite)")

# The generic tests that reopen a file through dbm.open: it asks dbm.whichdb
# which module made the file, and whichdb does not know caskets.
REOPENING = ("test_anydbm_modification", "test_anydbm_read", "test_anydbm_keys",
             "test_anydbm_access")


class _InScratchDir:
    """CPython's tests use relative names (os_helper.TESTFN): run each in a
    directory of its own."""

    def setUp(self):
        d = tempfile.mkdtemp(prefix="qs-dbm-")
        self.addCleanup(shutil.rmtree, d, True)
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(d)
        super().setUp()


class TestCPythonGenericThroughDbmOpen(_InScratchDir, cpython_dbm.AnyDBMTestCase,
                                       unittest.TestCase):
    """AnyDBMTestCase as CPython runs it for each dbm module: dbm.open with
    pyqstore.dbm as the default module (the one that makes new files)."""

    module = pyqstore.dbm

    # These reopen an existing casket through dbm.open, which refuses it
    # ("db type could not be determined", asserted below); they run in
    # TestCPythonGenericThroughPyqstoreOpen.
    locals().update(dict.fromkeys(REOPENING, None))

    def test_dbm_open_cannot_reopen_a_casket(self):
        with pyqstore.dbm.open(cpython_dbm._fname, "n") as db:
            db[b"a"] = b"1"
        self.assertEqual(dbm.whichdb(cpython_dbm._fname), "")
        self.assertEqual(pyqstore.dbm.whichdb(cpython_dbm._fname), "pyqstore.dbm")
        for flag in ("r", "w", "c"):
            with self.assertRaisesRegex(dbm.error[0], "db type could not be determined"):
                dbm.open(cpython_dbm._fname, flag)


class TestCPythonGenericThroughPyqstoreOpen(_InScratchDir, cpython_dbm.AnyDBMTestCase,
                                            unittest.TestCase):
    """Every test of AnyDBMTestCase, the reopening ones included, with the
    module's dbm.open being pyqstore.dbm.open."""

    module = pyqstore.dbm

    def setUp(self):
        shim = types.SimpleNamespace(open=pyqstore.dbm.open, error=pyqstore.dbm.error,
                                     whichdb=pyqstore.dbm.whichdb, _defaultmod=None)
        self.addCleanup(setattr, cpython_dbm, "dbm", cpython_dbm.dbm)
        cpython_dbm.dbm = shim
        super().setUp()


class TestCPythonWhichdb(_InScratchDir, cpython_dbm.WhichDBTestCase):
    """CPython's whichdb test with pyqstore.dbm.whichdb, over the standard
    modules and pyqstore.dbm: it names each one's files."""

    def setUp(self):
        super().setUp()
        self.dbm = pyqstore.dbm
        stdlib_modules = cpython_dbm.dbm_iterator
        self.addCleanup(setattr, cpython_dbm, "dbm_iterator", stdlib_modules)
        cpython_dbm.dbm_iterator = lambda: itertools.chain(stdlib_modules(), [pyqstore.dbm])


def test_the_generic_tests_ran():
    """The classes above hold CPython's tests (a renamed or emptied
    AnyDBMTestCase would otherwise pass unnoticed)."""
    names = [n for n in dir(cpython_dbm.AnyDBMTestCase) if n.startswith("test_")]
    assert set(REOPENING) <= set(names) and len(names) >= 13
    for n in names:
        assert callable(getattr(TestCPythonGenericThroughPyqstoreOpen, n))
