#!/usr/bin/env bash
# The Python side under valgrind memcheck.
#
# Runs a representative part of the Python test suite and the seed-000 sweep
# at small sizes under `valgrind --tool=memcheck` with PYTHONMALLOC=malloc
# (so every Python object is a malloc block memcheck can see), one XML report
# per process (children traced), then fails if any error -- or any definite
# or indirect leak -- has a frame in pyqstore's extension (_qstore*.so: the
# C core and its cffi wrappers) or in qstore-bench's native driver
# (qstore_bench/_native*.so: its own copy of the core).  Errors entirely inside the interpreter,
# libc or cffi's backend are counted and printed but do not fail the run;
# tests/valgrind-python.supp silences the known ones (it names only
# interpreter / libc / cffi-backend frames, never _qstore or csrc code).
#
# Usage (from anywhere; the active `python` is used, or $PYTHON):
#   bash .ci/valgrind_python.sh
# Environment:
#   PYTHON         interpreter to run (default: python on PATH)
#   VG_OUT         directory for the XML reports (default: a fresh temp dir,
#                  removed on success)
#   VG_JOBS        how many valgrind processes at once (default: nproc)
#   VG_EXTRA_ARGS  extra valgrind arguments (e.g. --track-origins=yes, or
#                  --gen-suppressions=all to draft suppressions: they appear
#                  in the XML, check that they name no _qstore frame)
#   VG_FULL=1      run the whole of the three test files (slower)
# Exit status: 0 clean; 1 errors in our frames, a command failed, or a
# report is missing or unreadable.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
# the interpreter itself, not a wrapper script (a pyenv shim is bash, which
# valgrind would run instead -- and bash is not traced)
PY=$("$PY" -c 'import sys; print(sys.executable)')
JOBS=${VG_JOBS:-$(nproc 2>/dev/null || echo 2)}
SUPP=$ROOT/tests/valgrind-python.supp
if [[ -n ${VG_OUT:-} ]]; then
    OUT=$VG_OUT
    mkdir -p "$OUT"
    KEEP=1
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/vg-python.XXXXXX")
    KEEP=0
fi
rm -f "$OUT"/vg.*.xml "$OUT"/*.log "$OUT"/*.rc

command -v valgrind >/dev/null || { echo "valgrind_python: valgrind is not installed" >&2; exit 2; }
"$PY" -c 'import pyqstore._qstore as q; print("extension:", q.__file__)'

export PYTHONMALLOC=malloc
export PYTHONDONTWRITEBYTECODE=1
export PYTHONHASHSEED=0

VG=(valgrind --tool=memcheck
    --xml=yes "--xml-file=$OUT/vg.%p.xml"
    --leak-check=full
    --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect
    --num-callers=40
    "--suppressions=$SUPP"
    --trace-children=yes
    # a forked child is silent until it execs (subprocess's fork+exec):
    # otherwise a child that execs an untraced program leaves a cut-off
    # report behind.  (No test in the subset forks without exec.)
    --child-silent-after-fork=yes
    # only Python processes matter; the tests' helpers (git, file, sh from
    # platform/subprocess) are not traced
    "--trace-children-skip=*/git,*/file,*/sh,*/dash,*/bash,*/uname,*/ldconfig*,*/gcc*,*/cc,*/ld,*/ld.bfd,*/x86_64-linux-gnu-*"
    ${VG_EXTRA_ARGS:-})

# Tests left out: test_million_duplicates (a million records: minutes under
# valgrind, and test_model / the C valgrind run cover big trees) and the
# longest thread stress test; everything else in the three files runs.
if [[ ${VG_FULL:-0} == 1 ]]; then
    KCASKET=""; KTHREADS=""
else
    KCASKET="not million"
    KTHREADS="not leases_acks_from_other_threads_exactly_once"
fi

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= --tb=short)
# name|command (run from the repository root)
jobs_list=(
    "casket|${PYTEST[*]} tests/test_casket.py -k '$KCASKET'"
    "queue_api|${PYTEST[*]} tests/test_queue_api.py"
    "queue_threads|${PYTEST[*]} tests/test_queue_threads.py -k '$KTHREADS'"
    "seed000|$PY bench/scripts/seed000.py --max 3 --reps 1 --backends pyqstore,pyqstore-batch,native --timeout 1200"
    "qstore_bench_sweep|$PY -m qstore_bench.cli sweep --max 3 --reps 1 -b pyqstore,native --no-sync"
)

t0=$(date +%s)
run_one() {
    local name=$1 cmd=$2
    local s=$(date +%s)
    set +e
    eval "${VG[*]@Q} $cmd" >"$OUT/$name.log" 2>&1
    echo $? >"$OUT/$name.rc"
    set -e
    echo "valgrind_python: $name finished (exit $(cat "$OUT/$name.rc"), $(( $(date +%s) - s )) s)"
}

running=0
for j in "${jobs_list[@]}"; do
    name=${j%%|*}; cmd=${j#*|}
    echo "valgrind_python: start $name: $cmd"
    run_one "$name" "$cmd" &
    running=$((running + 1))
    if (( running >= JOBS )); then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
elapsed=$(( $(date +%s) - t0 ))

status=0
for j in "${jobs_list[@]}"; do
    name=${j%%|*}
    rc=$(cat "$OUT/$name.rc" 2>/dev/null || echo missing)
    if [[ $rc != 0 ]]; then
        echo "valgrind_python: FAIL: $name exited $rc; its output:"
        tail -n 60 "$OUT/$name.log" | sed 's/^/    /'
        status=1
    else
        echo "valgrind_python: $name: $(tail -n 1 "$OUT/$name.log")"
    fi
done

# ---- read the reports
set +e
"$PY" - "$OUT" <<'EOF'
import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

OURS = re.compile(r"(^|/)(_qstore|qstore_bench/_native)[^/]*\.so$")
out = sys.argv[1]
files = sorted(glob.glob(os.path.join(out, "vg.*.xml")))
kinds = collections.Counter()
ours = []
bad_files = []
supp = collections.Counter()
procs = 0


def stacks(err):
    return [[(fr.findtext("obj") or "", fr.findtext("fn") or "",
              fr.findtext("file") or "", fr.findtext("line") or "")
             for fr in st.findall("frame")] for st in err.findall("stack")]


for f in files:
    try:
        root = ET.parse(f).getroot()
    except ET.ParseError as e:
        bad_files.append((f, "unreadable XML (%s): the process died under valgrind?" % e))
        continue
    procs += 1
    exe = root.findtext("./args/argv/exe") or "?"
    args = [a.text or "" for a in root.findall("./args/argv/arg")]
    cmd = " ".join([os.path.basename(exe)] + args)[:160]
    if root.find("status/state") is None or not any(
            s.findtext("state") == "FINISHED" for s in root.findall("status")):
        bad_files.append((f, "the report never finished (%s)" % cmd))
    for s in root.findall("./suppcounts/pair"):
        supp[s.findtext("name")] += int(s.findtext("count") or 0)
    for err in root.findall("error"):
        kind = err.findtext("kind") or "?"
        kinds[kind] += 1
        sts = stacks(err)
        if any(OURS.search(o) for st in sts for o, *_ in st):
            what = err.findtext("what") or err.findtext("xwhat/text") or ""
            aux = [a.text or "" for a in err.findall("auxwhat")]
            ours.append((f, cmd, kind, what, aux, sts))

leak = lambda k: k.startswith("Leak_")
total = sum(kinds.values())
n_leaks = sum(v for k, v in kinds.items() if leak(k))
ours_err = [o for o in ours if not leak(o[2])]
ours_leak = [o for o in ours if leak(o[2])]
print("valgrind_python: %d process reports; errors %d (%d definite/indirect "
      "leaks) of which in _qstore frames: %d errors, %d leaks; suppressed: %d"
      % (procs, total, n_leaks, len(ours_err), len(ours_leak),
         sum(supp.values())))
if kinds:
    print("  by kind: " + ", ".join("%s %d" % kv for kv in kinds.most_common()))
if supp:
    print("  suppressions used: " + ", ".join("%s x%d" % kv for kv in supp.most_common()))
for f, why in bad_files:
    print("  BAD REPORT %s: %s" % (os.path.basename(f), why))
for f, cmd, kind, what, aux, sts in ours:
    print("\n  %s in %s [%s]\n    %s" % (kind, os.path.basename(f), cmd, what))
    for i, st in enumerate(sts):
        if i:
            print("    %s" % (aux[i - 1] if i - 1 < len(aux) else "and:"))
        for obj, fn, fl, ln in st[:24]:
            where = "%s:%s" % (fl, ln) if fl else os.path.basename(obj)
            mark = "*" if OURS.search(obj) else " "
            print("     %s %s (%s)" % (mark, fn or "???", where))
sys.exit(1 if ours or bad_files or not files else 0)
EOF
check=$?
set -e
(( check == 0 )) || status=1

echo "valgrind_python: $elapsed s wall, reports in $OUT"
if (( status == 0 )); then
    echo "valgrind_python: OK, no memory errors or leaks in pyqstore's frames"
    (( KEEP )) || rm -rf "$OUT"
else
    echo "valgrind_python: FAIL (reports kept in $OUT)"
fi
exit $status
