#!/usr/bin/env python3
"""check_layers.py -- csrc/'s layers: who includes whom; calls only go down.

    python3 .ci/check_layers.py           the include graph, the layer table
                                          with line counts, then the check
    python3 .ci/check_layers.py -q        only what is wrong, and the verdict
    python3 .ci/check_layers.py --strict  the known upward includes and calls
                                          fail too (for the work removing them)
    python3 .ci/check_layers.py --csrc D  another tree (as the tests do)

Every .c and .h file of csrc/ has a layer in LAYERS, lowest first in
LAYER_ORDER.  The check fails (exit status 1), naming the file and line, when

  - a file includes (#include "...") a file of a higher layer;
  - a library .c file (any layer but "top") calls a function whose prefix
    (PREFIXES) belongs to a higher layer -- what grep can tell: a call
    through a pointer or an ops table (x->fn(...), x.fn(...)) is how a lower
    layer is meant to call up, and is not counted;
  - a file of csrc/ has no layer, or LAYERS names a file that is gone;
  - KNOWN_UPWARD_INCLUDES / KNOWN_UPWARD_CALLS, the violations of the tree
    as it was when this check came, lists one that is no longer there (the
    lists only shrink: delete the entry) -- a new one fails as above.

A new file gets one line in LAYERS; a new prefix one line in PREFIXES.
Only the standard library is used.
"""

import argparse
import os
import re
import sys

# Lowest first.  A file may include, and its functions may call, files of
# its own layer and of the layers below.
LAYER_ORDER = ["base", "wal", "pager", "btree", "shm", "casket", "queue",
               "top"]

# One line per file.  qstore.h is in "base", not above "queue": it is the
# public API's declaration and also the project's vocabulary (the QS_*
# codes, the limits, the option and stat structs) that the lowest layers
# return and use; cffi reads it as one file, so the codes cannot move to a
# lower header.  What keeps the lower layers off the API it declares is the
# call check: qs_* belongs to the casket layer (PREFIXES).
LAYERS = {
    "qstore.h": "base",
    "osdep.h": "base",
    "pagefmt.h": "base",
    "fi_alloc.h": "base",
    "checksum.h": "base",
    "checksum.c": "base",
    "errors.c": "base",
    "hmap.h": "base",
    "hmap.c": "base",
    "pshare.h": "pager",
    "pshare.c": "pager",
    "wal.h": "wal",
    "wal.c": "wal",
    "pager.h": "pager",
    "pager.c": "pager",
    "btree.h": "btree",
    "btree.c": "btree",
    "shm.h": "shm",
    "shm.c": "shm",
    "casket.h": "casket",
    "casket.c": "casket",
    "handle.h": "casket",
    "txn.h": "casket",
    "txn.c": "casket",
    "group.h": "casket",
    "group.c": "casket",
    "batchsort.h": "casket",
    "batchsort.c": "casket",
    "records.h": "casket",
    "records.c": "casket",
    "cursor.c": "casket",
    "maint.c": "casket",
    "qres.h": "queue",
    "qres.c": "queue",
    "qaio.h": "queue",
    "qaio.c": "queue",
    "queue.h": "queue",
    "queue.c": "queue",
    "qorder.h": "queue",
    "qorder.c": "queue",
    "qconf.h": "queue",
    "qconf.c": "queue",
    "qdedup.h": "queue",
    "qdedup.c": "queue",
    "qdeliv.h": "queue",
    "qdeliv.c": "queue",
    "qkit.h": "queue",
    "stream.c": "queue",
    "fuzz_open.c": "top",
    "leak_harness.c": "top",
    "leak_seed.c": "top",
    "test_*.c": "top",
    "test_*.h": "top",
}

# A function name's prefix -> the layer whose functions carry it (the
# longest matching prefix wins).
PREFIXES = {
    "os_": "base",
    "ck_": "base",
    "hm_": "base",
    "ps_": "pager",
    "err_": "base",
    "qs_strerror": "base",
    "wal_": "wal",
    "pg_": "pager",
    "bt_": "btree",
    "sh_": "shm",
    "cs_": "casket",
    "qs_": "casket",
    "qq_": "queue",
    "qr_": "queue",
    "qa_": "queue",
    "qs_aio_": "queue",
    "qo_": "queue",
    "qc_": "queue",
    "qk_": "queue",
    "qd_": "queue",
    "qs_queue_": "queue",
    "qs_stream_": "queue",
    "st_": "queue",
}

# (file, included file): upward includes the tree had when this check came.
KNOWN_UPWARD_INCLUDES = set()

# (file, called function): upward calls the tree had when this check came
# (issue 16: the casket layer calls up into the queue registry at commit,
# abort, catch-up and close).
KNOWN_UPWARD_CALLS = set()

# Headers private to the files that own what they declare: included by any
# other file (of any layer), they fail the check.  handle.h is struct
# qs_casket's body: the queue layer reads the handle through casket.h's
# accessors, so its fields can change without the queue knowing.
PRIVATE = {
    "handle.h": {"casket.c", "txn.c", "txn.h", "group.c", "records.c",
                 "cursor.c", "maint.c",
                 # faking a reused thread id needs the owner's fields
                 "test_transactions.c"},
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
CALL_RE = re.compile(r"(->|\.)?\s*\b([a-z][a-z0-9_]*)\s*\(")


def layer_of(name):
    """The layer LAYERS gives a file name (exact line first, then a
    pattern), or None."""
    if name in LAYERS:
        return LAYERS[name]
    for pat, layer in LAYERS.items():
        if "*" in pat:
            head, tail = pat.split("*", 1)
            if (name.startswith(head) and name.endswith(tail)
                    and len(name) >= len(head) + len(tail)):
                return layer
    return None


def prefix_layer(func):
    """The layer owning func by PREFIXES, or None."""
    best = None
    for pre in PREFIXES:
        if func.startswith(pre) and (best is None or len(pre) > len(best)):
            best = pre
    return PREFIXES[best] if best else None


def strip_code(text):
    """text with comments and string and character literals blanked out
    (newlines kept, so line numbers stay), for finding calls."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def csrc_files(csrc):
    return sorted(f for f in os.listdir(csrc)
                  if f.endswith((".c", ".h"))
                  and os.path.isfile(os.path.join(csrc, f)))


def analyse(csrc):
    """The graph, the line counts, the upward includes and calls found, and
    the problems that are not about direction (files without a layer, stale
    lines of LAYERS, includes of files not in csrc/)."""
    files = csrc_files(csrc)
    graph, lines, problems = {}, {}, []
    # (file, line number, target, its layer, the target's, the line)
    ups_inc, ups_call = [], []
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    for f in files:
        if layer_of(f) is None:
            problems.append(f"csrc/{f} has no layer: add it to LAYERS in "
                            f".ci/check_layers.py")
    for name in LAYERS:
        if "*" not in name and name not in files:
            problems.append(f"LAYERS names {name}, which is not in csrc/: "
                            f"remove its line")
    for f in files:
        with open(os.path.join(csrc, f), encoding="utf-8",
                  errors="replace") as fh:
            text = fh.read()
        src = text.splitlines()
        lines[f] = len(src)
        graph[f] = []
        mine = layer_of(f)
        for no, line in enumerate(src, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            inc = m.group(1)
            graph[f].append(inc)
            if inc not in files:
                problems.append(f"csrc/{f}:{no}: includes \"{inc}\", which is "
                                f"not a file of csrc/")
                continue
            if inc in PRIVATE and f not in PRIVATE[inc]:
                problems.append(f"csrc/{f}:{no}: includes {inc}, which is "
                                f"private to {', '.join(sorted(PRIVATE[inc]))}")
            theirs = layer_of(inc)
            if mine and theirs and rank[theirs] > rank[mine]:
                ups_inc.append((f, no, inc, mine, theirs, line.strip()))
        if not f.endswith(".c") or mine in (None, "top"):
            continue
        for no, line in enumerate(strip_code(text).splitlines(), 1):
            for m in CALL_RE.finditer(line):
                if m.group(1):
                    continue    # through a pointer or an ops table
                func = m.group(2)
                theirs = prefix_layer(func)
                if theirs and rank[theirs] > rank[mine]:
                    ups_call.append((f, no, func, mine, theirs,
                                     src[no - 1].strip()))
    return files, graph, lines, ups_inc, ups_call, problems


def judge(found, known, what, strict):
    """Problems among the upward includes or calls found: new ones (all of
    them under strict), and known ones that are gone."""
    problems = []
    keys = {(u[0], u[2]) for u in found}
    verb = {"include": "includes", "call": "calls"}[what]
    for f, no, target, mine, theirs, text in found:
        if strict or (f, target) not in known:
            problems.append(f"csrc/{f}:{no}: {f} ({mine}) {verb} {target} "
                            f"of the higher layer {theirs}: {text}")
    for f, target in sorted(known - keys):
        problems.append(f"KNOWN_UPWARD_{what.upper()}S lists ({f!r}, "
                        f"{target!r}), which is gone: delete it from the "
                        f"list")
    return problems


def report(csrc, quiet=False, strict=False, out=sys.stdout):
    """Prints the graph, the table and the verdict; the number of
    problems."""
    files, graph, lines, ups_inc, ups_call, problems = analyse(csrc)
    problems += judge(ups_inc, KNOWN_UPWARD_INCLUDES, "include", strict)
    problems += judge(ups_call, KNOWN_UPWARD_CALLS, "call", strict)
    p = lambda s="": print(s, file=out)
    if not quiet:
        p('include graph of csrc/ (#include "..."):')
        for f in files:
            p(f"  {f}: {' '.join(graph[f])}".rstrip())
        p()
        p("layers, lowest first (a file includes and calls only its own "
          "layer and those below):")
        p("  rank  layer    lines  files (lines)")
        for i, layer in enumerate(LAYER_ORDER):
            mine = [f for f in files if layer_of(f) == layer]
            total = sum(lines[f] for f in mine)
            p(f"  {i:<4}  {layer:<7} {total:>6}  "
              + ", ".join(f"{f} ({lines[f]})" for f in mine))
        nolayer = [f for f in files if layer_of(f) is None]
        if nolayer:
            p("  -     (none)  " + ", ".join(nolayer))
        p(f"  total {sum(lines.values())} lines in {len(files)} files")
        p()
        known = ([u for u in ups_inc if (u[0], u[2]) in KNOWN_UPWARD_INCLUDES]
                 + [u for u in ups_call if (u[0], u[2]) in KNOWN_UPWARD_CALLS])
        if known:
            p("known upward includes and calls (KNOWN_UPWARD_INCLUDES, "
              "KNOWN_UPWARD_CALLS: to be removed, the lists only shrink):")
            for f, no, target, mine, theirs, text in known:
                p(f"  csrc/{f}:{no}: {mine} -> {theirs}: {text}")
            p()
    for s in problems:
        p(f"check_layers: {s}")
    nk = len(KNOWN_UPWARD_INCLUDES) + len(KNOWN_UPWARD_CALLS)
    if problems:
        p(f"check_layers: FAILED, {len(problems)} problem(s)")
    else:
        p(f"check_layers: OK, {len(files)} files, "
          f"{sum(len(g) for g in graph.values())} includes, no new upward "
          f"include or call ({nk} known left"
          f"{', not counted' if nk else ''})")
    return len(problems)


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csrc", default=os.path.join(here, "..", "csrc"))
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args(argv)
    return 1 if report(a.csrc, a.quiet, a.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
