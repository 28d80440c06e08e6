"""Writes format3.tar.gz: a casket as a format-3 build (pyqstore before
format 4, e.g. commit 488ee7d) leaves it after a crash.  Its main file holds
checkpointed records and a queue; its log holds later commits, most of them
delta frames, that no checkpoint has copied.  Every page and frame carries
the version-3 checksum.  Run it with a format-3 build on sys.path:

    PYTHONPATH=<format-3 checkout> python tests/data/make_format3.py

tests/test_format_compat.py opens the result with the build under test and
expects what format3_expected() below describes."""
import io
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format3_expected import CHECKPOINTED, LOGGED, QUEUE, QUEUE_ITEMS, QUEUE_TAKEN  # noqa: E402

import pyqstore  # noqa: E402
from pyqstore._qstore import lib  # noqa: E402

assert lib.QS_FORMAT_VERSION == 3, "run with a format-3 build on sys.path"

d = tempfile.mkdtemp()
path = os.path.join(d, "f3.qs")
c = pyqstore.open(path)
with c.transaction():
    for k, v in CHECKPOINTED.items():
        c.put(k, v)
q = c.queue(QUEUE)
q.put_many(QUEUE_ITEMS)
c.close()   # checkpoints: all of the above is in the main file

c = pyqstore.open(path)
for k, v in LOGGED.items():
    c.put(k, v)     # one synced commit each: delta frames on their leaves
q = c.queue(QUEUE)
for _ in range(QUEUE_TAKEN):
    q.get()
out = io.BytesIO()
with tarfile.open(fileobj=out, mode="w:gz") as tar:
    for name in ("f3.qs", "f3.qs-log"):     # copied under the open handle
        tar.add(os.path.join(d, name), arcname=name)
c.close()
shutil.rmtree(d)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "format3.tar.gz"), "wb") as f:
    f.write(out.getvalue())
