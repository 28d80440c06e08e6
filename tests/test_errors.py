"""The error table: every C code has a text (qs_strerror) and an exception
class (pyqstore/errors.py), every exception class is in both __all__s, and
the names that mean different things (IOFailure and the built-in IOError,
FullError and ReservationsFullError) stay apart."""
from __future__ import annotations

import subprocess
import sys
import traceback

import pytest

import pyqstore
import pyqstore.errors as errors
from pyqstore._qstore import ffi, lib

# The codes qstore.h names.  The range from QS_NOTFOUND to QS_LAST_ERRCODE
# has gaps: issue 13 gave each feature a block of numbers, not all used.
_NAMES = {name for name in dir(lib) if name.startswith("QS_") and name != "QS_LAST_ERRCODE"
          and isinstance(getattr(lib, name), int)
          and lib.QS_LAST_ERRCODE <= getattr(lib, name) <= lib.QS_NOTFOUND}
CODES = sorted({getattr(lib, name) for name in _NAMES}, reverse=True)
UNNAMED = sorted(set(range(lib.QS_NOTFOUND, lib.QS_LAST_ERRCODE - 1, -1)) - set(CODES))


def _strerror(rc: int) -> str:
    return ffi.string(lib.qs_strerror(rc)).decode()


def test_every_code_has_a_text_and_a_class():
    """A code added to qstore.h without an entry in errors.py's table (or
    without a text in errors.c, if the build let it through) fails here."""
    unknown = _strerror(lib.QS_LAST_ERRCODE - 1)
    assert unknown == "unknown error"
    table = errors._table()
    missing = [rc for rc in CODES if rc not in table]
    assert not missing, f"codes without an exception class in errors._CODE_TABLE: {missing}"
    textless = [rc for rc in CODES if _strerror(rc) in (unknown, "")]
    assert not textless, f"codes without a text in csrc/errors.c: {textless}"
    named_text = [rc for rc in UNNAMED if _strerror(rc) != unknown]
    assert not named_text, f"numbers qstore.h does not name with a text in errors.c: {named_text}"
    for rc in CODES:
        e = errors.error_for(rc, "op")
        assert type(e) is not errors.Error and e.code == rc and str(e).startswith("op: ")


def test_the_table_names_exactly_the_codes_of_qstore_h():
    """Every QS_* constant in the error range is in the table under its
    name, and the table names nothing else (a stale or misspelt name)."""
    assert _NAMES == set(errors._CODE_TABLE)
    assert len(_NAMES) == len(CODES)
    assert lib.QS_LAST_ERRCODE in CODES


def _exception_classes() -> set[str]:
    return {name for name, v in vars(errors).items()
            if isinstance(v, type) and issubclass(v, BaseException)
            and v.__module__ == errors.__name__ and v.__name__ == name}


@pytest.mark.parametrize("module", [pyqstore, errors], ids=lambda m: m.__name__)
def test_all_lists_every_exception_class(module):
    exported = {name for name in module.__all__
                if isinstance(getattr(module, name), type)
                and issubclass(getattr(module, name), BaseException)}
    assert exported == _exception_classes()
    for name in exported:
        assert getattr(module, name) is getattr(errors, name)


def test_ioerror_is_the_old_name_of_iofailure():
    assert pyqstore.IOError is pyqstore.IOFailure is errors.IOError
    e = errors.error_for(28, "commit", "/p")
    assert type(e) is pyqstore.IOFailure and isinstance(e, OSError) and e.errno == 28
    with pytest.raises(pyqstore.IOError):
        raise e
    text = "".join(traceback.format_exception_only(type(e), e))
    assert text.startswith("pyqstore.errors.IOFailure: [Errno 28]"), text
    for module in (pyqstore, errors):
        assert "IOError" not in module.__all__


def test_star_imports_leave_the_builtin_ioerror_alone():
    code = ("from pyqstore import *\nfrom pyqstore.errors import *\n"
            "import builtins\nassert IOError is builtins.OSError, IOError\n"
            "assert IOFailure.__name__ == 'IOFailure'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_full_and_reservations_full_are_apart():
    """QS_FULL spoils the transaction, QS_RESFULL is a retryable refusal:
    an ``except FullError`` written for the first must not catch the
    second."""
    full = errors.error_for(lib.QS_FULL, "put")
    assert type(full) is pyqstore.FullError and "2^32 pages" in str(full)
    refused = errors.error_for(lib.QS_RESFULL, "reserve")
    assert type(refused) is pyqstore.ReservationsFullError
    assert not isinstance(refused, pyqstore.FullError)
    assert not isinstance(full, pyqstore.ReservationsFullError)
    assert "reserved" in str(refused)
