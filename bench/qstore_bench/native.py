"""The `native` driver: seed 000's transaction run in C (native_seed.c)
by the bench's own extension, on a casket that extension opened.  What it
costs against the `pyqstore` row is what the Python binding costs."""
from __future__ import annotations

from pyqstore.errors import error_for

from ._native import ffi, lib  # type: ignore[import-not-found, unused-ignore]

QUEUE_KEY = b"QUEUE"


class NativeCasket:
    """One casket opened by the driver's copy of the engine ("n": a new
    file).  Errors raise pyqstore's exceptions (the codes are the engine's)."""

    def __init__(self, path: str, sync: bool = True) -> None:
        self.path = path
        opts = ffi.new("qs_options *")
        lib.qs_options_init(opts)
        opts.flag = lib.QS_OPEN_NEW
        opts.sync = 1 if sync else 0
        out = ffi.new("qs_casket **")
        rc = lib.qs_open(path.encode(), opts, out)
        if rc:
            raise error_for(rc, "open", path)
        self._c = out[0]

    def seed(self, ids: list[bytes], queue_key: bytes = QUEUE_KEY) -> None:
        """One transaction: putdup(queue_key, id) and putdup(id, id) for
        each id; the ids must all have the same length."""
        width = len(ids[0]) if ids else 0
        blob = b"".join(ids)
        if len(blob) != width * len(ids):
            raise ValueError("the native driver takes ids of one length")
        rc = lib.qsb_seed(self._c, queue_key, len(queue_key), blob, width, len(ids))
        if rc:
            raise error_for(rc, "seed", self.path)

    def stats(self) -> dict[str, int]:
        st = ffi.new("qs_stat *")
        rc = lib.qs_stat_get(self._c, st)
        if rc:
            raise error_for(rc, "stats", self.path)
        return {"records": st.records, "syncs": st.syncs, "commits": st.commits,
                "spilled_pages": st.spilled_pages, "pages": st.pages}

    def close(self) -> None:
        if self._c is None:
            return
        c, self._c = self._c, None
        rc = lib.qs_close(c)
        if rc:
            raise error_for(rc, "close", self.path)
