#!/usr/bin/env python3
"""test_check_layers.py -- the layering check catches what it promises.

    python3 .ci/test_check_layers.py     (stdlib unittest; .ci/run runs it)

Each case copies csrc/'s .c and .h files to a temp dir, breaks one rule
there and asserts that check_layers names it (file, line, target); the
untouched copy must pass.  It lives beside the script, not in tests/: the
wheel check runs tests/ outside the tree, where csrc/ is not.
"""

import importlib.util
import io
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "..", "csrc")
_spec = importlib.util.spec_from_file_location(
    "check_layers", os.path.join(HERE, "check_layers.py"))
cl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cl)


class LayerCheck(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="check-layers-")
        for f in cl.csrc_files(CSRC):
            shutil.copy(os.path.join(CSRC, f), self.dir)
        saved = {k: getattr(cl, k) for k in (
            "LAYERS", "KNOWN_UPWARD_INCLUDES", "KNOWN_UPWARD_CALLS")}
        for k, v in saved.items():
            setattr(cl, k, type(v)(v))
        self.addCleanup(lambda: [setattr(cl, k, v) for k, v in saved.items()])
        self.addCleanup(shutil.rmtree, self.dir)

    def run_check(self, strict=False):
        out = io.StringIO()
        n = cl.report(self.dir, quiet=True, strict=strict, out=out)
        return n, out.getvalue()

    def one_problem(self, want):
        """Asserts the check finds exactly one problem, saying want."""
        n, out = self.run_check()
        self.assertEqual(n, 1, out)
        self.assertIn(want, out)

    def append(self, name, text):
        with open(os.path.join(self.dir, name), "a") as fh:
            fh.write(text)
        with open(os.path.join(self.dir, name)) as fh:
            return len(fh.read().splitlines())

    def edit(self, name, old, new):
        p = os.path.join(self.dir, name)
        with open(p) as fh:
            text = fh.read()
        self.assertIn(old, text)
        with open(p, "w") as fh:
            fh.write(text.replace(old, new))

    def test_tree_passes(self):
        n, out = self.run_check()
        self.assertEqual(n, 0, out)
        self.assertIn("check_layers: OK", out)

    def test_strict_fails_on_every_known_one(self):
        _, _, _, ups_inc, ups_call, _ = cl.analyse(self.dir)
        n, out = self.run_check(strict=True)
        self.assertEqual(n, len(ups_inc) + len(ups_call), out)

    def test_upward_include(self):
        line = self.append("pager.c", '#include "queue.h"\n')
        self.one_problem(f"csrc/pager.c:{line}: pager.c (pager) includes "
                         f"queue.h of the higher layer queue")

    def test_header_includes_higher_header(self):
        line = self.append("wal.h", '#include "btree.h"\n')
        self.one_problem(f"csrc/wal.h:{line}: wal.h (wal) includes btree.h")

    def test_include_of_a_missing_file(self):
        line = self.append("btree.c", '#include "nowhere.h"\n')
        self.one_problem(f'csrc/btree.c:{line}: includes "nowhere.h", which '
                         f"is not a file of csrc/")

    def test_private_header_included_elsewhere(self):
        line = self.append("queue.c", '#include "handle.h"\n')
        self.one_problem(f"csrc/queue.c:{line}: includes handle.h, which is "
                         f"private to ")

    def test_file_without_a_layer(self):
        self.append("newlayer.c", '#include "casket.h"\n')
        self.one_problem("csrc/newlayer.c has no layer: add it to LAYERS in "
                         ".ci/check_layers.py")
        cl.LAYERS["newlayer.c"] = "casket"
        self.assertEqual(self.run_check()[0], 0)

    def test_new_test_file_is_placed_by_its_pattern(self):
        self.append("test_new.c", '#include "casket.h"\n')
        self.assertEqual(self.run_check()[0], 0)

    def test_layers_line_for_a_gone_file(self):
        cl.LAYERS["gone.c"] = "btree"
        self.one_problem("LAYERS names gone.c, which is not in csrc/")

    def test_upward_call(self):
        line = self.append("btree.c", "static void f(void *c)\n{\n"
                           "    qq_refresh(c);\n}\n") - 1
        self.one_problem(f"csrc/btree.c:{line}: btree.c (btree) calls "
                         f"qq_refresh of the higher layer queue")

    def test_public_api_call_from_below(self):
        # qs_* is the casket layer's (qs_strerror, in errors.c, excepted)
        line = self.append("shm.c", "static void g(void *c)\n{\n"
                           "    qs_sync(c); (void)qs_strerror(0);\n}\n") - 1
        self.one_problem(f"csrc/shm.c:{line}: shm.c (shm) calls qs_sync of "
                         f"the higher layer casket")

    def test_what_is_not_a_call_up(self):
        # an ops table call, a comment, a string: not counted
        self.append("pager.c", "static void h(struct x *o)\n{\n"
                    "    o->qq_refresh(o); o->ops.cs_close(o);\n"
                    "    /* qq_refresh(c) */ // qq_close(c)\n"
                    '    puts("qq_txn_end(c)");\n}\n')
        n, out = self.run_check()
        self.assertEqual(n, 0, out)

    def test_tests_call_anything(self):
        self.append("test_api.c", "static void t(void *c) { qq_close(c); }\n")
        self.assertEqual(self.run_check()[0], 0)

    def test_known_list_only_shrinks(self):
        line = self.append("btree.c", "static void f(void *c)\n{\n"
                           "    qq_close(c);\n}\n") - 1
        cl.KNOWN_UPWARD_CALLS.add(("btree.c", "qq_close"))
        n, out = self.run_check()
        self.assertEqual(n, 0, out)
        n, out = self.run_check(strict=True)
        self.assertIn(f"csrc/btree.c:{line}: btree.c (btree) calls qq_close",
                      out)
        # the call removed but still listed: the list must shrink
        self.edit("btree.c", "    qq_close(c);\n", "")
        self.one_problem("KNOWN_UPWARD_CALLS lists ('btree.c', 'qq_close'), "
                         "which is gone: delete it from the list")

    def test_known_include_only_shrinks(self):
        self.append("pager.c", '#include "queue.h"\n')
        cl.KNOWN_UPWARD_INCLUDES.add(("pager.c", "queue.h"))
        self.assertEqual(self.run_check()[0], 0)
        self.edit("pager.c", '#include "queue.h"\n', "")
        self.one_problem("KNOWN_UPWARD_INCLUDES lists ('pager.c', "
                         "'queue.h'), which is gone")

    def test_strip_code_keeps_lines(self):
        src = 'a /* x\ny */ b "q(\\"" c // d(\ne(\n'
        got = cl.strip_code(src)
        self.assertEqual(got.count("\n"), src.count("\n"))
        self.assertEqual([m.group(2) for m in cl.CALL_RE.finditer(got)],
                         ["e"])


if __name__ == "__main__":
    unittest.main()
