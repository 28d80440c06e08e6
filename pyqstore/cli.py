"""The ``qstore`` command line: inspect, check, compact, dump and load
caskets.

    qstore info data.qs
    qstore queues data.qs --json
    qstore peek data.qs jobs -n 5 --format utf8
    qstore check data.qs
    qstore compact data.qs
    qstore dump data.qs -o data.jsonl
    qstore load copy.qs data.jsonl
    qstore backup data.qs copy.qs
    qstore flow status run/

The commands are thin: each calls the library.  Library errors
(:class:`pyqstore.Error`) and operating system errors (a missing file, ...)
become an ``Error: ...`` message and exit status 1 in one place,
:meth:`_Group.invoke`; no command catches them itself (``check`` alone
turns :class:`pyqstore.CorruptError` into its "damaged" answer).

Dump format (JSON lines, UTF-8), one object per line::

    {"kind": "record", "key": BYTES, "value": BYTES}
    {"kind": "item", "queue": "name", "payload": BYTES}

BYTES is a JSON string when the bytes are valid UTF-8 (the string is their
UTF-8 decoding), and otherwise an object ``{"b64": "<standard base64>"}``.
Records come first, in key order with a key's duplicates in insertion
order; then each queue's items (queues in name order, items oldest first).
``load`` is the exact inverse and also accepts ``{"b64": ...}`` for any
bytes.  Blank lines are ignored.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import stat
import sys
import threading
import time
from typing import IO, Any, Callable, Iterator, Optional, TypeVar, Union

import click

import pyqstore
from pyqstore import Casket, CorruptError, Error

__all__ = ["main", "encode_bytes", "decode_bytes"]

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# Fields of Casket.stats() shown by `info`, in order, with their labels.
_INFO_FIELDS = (
    ("format_version", "format version"),
    ("page_size", "page size"),
    ("records", "user records"),
    ("queues", "queues"),
    ("queue_items", "queue items"),
    ("file_bytes", "file size"),
    ("log_file_bytes", "log size"),
    ("log_bytes", "log not checkpointed"),
    ("pages", "pages"),
    ("free_pages", "free pages"),
    ("depth", "tree depth"),
)
_BYTE_FIELDS = {"page_size", "file_bytes", "log_file_bytes", "log_bytes"}

# Page memory of the snapshot a dump reads through: the dump streams, so a
# small cache bounds its memory whatever the casket's size.
_DUMP_CACHE = 8 << 20

T = TypeVar("T")


# --------------------------------------------------------------- encoding


def encode_bytes(b: bytes) -> Union[str, dict[str, str]]:
    """The dump encoding of b: its text when valid UTF-8, else
    ``{"b64": ...}``."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(b).decode("ascii")}


def decode_bytes(x: Any, what: str) -> bytes:
    """Inverse of :func:`encode_bytes`; ValueError for anything else."""
    if isinstance(x, str):
        try:
            return x.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what}: string holds a lone surrogate; "
                             "use {\"b64\": ...} for non-UTF-8 bytes") from None
    if isinstance(x, dict) and set(x) == {"b64"} and isinstance(x["b64"], str):
        try:
            return base64.b64decode(x["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{what}: invalid base64") from None
    raise ValueError(f"{what} must be a string or {{\"b64\": \"...\"}}, "
                     f"not {json.dumps(x)[:60]}")


def _json_line(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def _fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n} ({size:.1f} {unit})"
        size /= 1024
    return str(n)  # pragma: no cover



# --------------------------------------------------------------- progress

_PROGRESS_OPTION = click.option(
    "--progress/--no-progress", default=None,
    help="Report progress on stderr (default: when stderr is a terminal).")


class _Progress:
    """Progress of a long command on stderr: at most every half second and
    once at the end, "LABEL: DONE/TOTAL UNIT (P%)".  On a terminal each
    report overwrites the last; elsewhere each is a line."""

    def __init__(self, label: str, unit: str, total: int, enabled: Optional[bool]) -> None:
        self.tty = sys.stderr.isatty()
        self.enabled = self.tty if enabled is None else enabled
        self.label, self.unit, self.total = label, unit, total
        self.done = 0
        self.last = 0.0
        self.shown = ""

    def add(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            now = time.monotonic()
            if now - self.last >= 0.5:
                self.last = now
                self._show()

    def set(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.add(0)

    def _show(self, end: str = "") -> None:
        pct = f" ({100 * self.done // self.total}%)" if self.total else ""
        text = f"{self.label}: {self.done}/{self.total} {self.unit}{pct}"
        if text == self.shown and not end:
            return
        self.shown = text
        click.echo(("\r" + text + end) if self.tty else text, err=True, nl=not self.tty)

    def finish(self) -> None:
        if self.enabled and (self.tty or not self.shown.startswith(f"{self.label}: {self.done}/{self.total} ")):
            self._show("\n" if self.tty else "")


def _watch(c: Casket, label: str, enabled: Optional[bool], fn: Callable[[], T]) -> T:
    """fn() (a compaction or backup of c) in a thread, with its copy
    progress (Casket.copy_progress) reported meanwhile."""
    p = _Progress(label, "records", 0, enabled)
    if not p.enabled:
        return fn()
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # re-raised in the calling thread
            failure.append(e)

    t = threading.Thread(target=run, name=f"qstore {label}")
    t.start()
    while t.is_alive():
        t.join(0.1)
        p.set(*c.copy_progress())
    if failure:
        raise failure[0]
    p.done, p.total = c.copy_progress()
    p.finish()
    return result[0]


# ------------------------------------------------------------- error boundary


def _describe(e: BaseException) -> str:
    """One-line message for a library or OS error, always in the library's
    form "OPERATION 'FILE': WHAT WENT WRONG"."""
    if isinstance(e, Error) and e.where:
        return f"{e.where}: {e.reason}"
    if isinstance(e, OSError) and e.filename is not None:
        # the command's own files (dump -o): opening them is what fails
        return f"open {os.fsdecode(e.filename)!r}: {e.strerror or e}"
    return str(e) or type(e).__name__


class _Group(click.Group):
    """The one place where errors become messages: pyqstore.Error and
    OSError raised by any command turn into a click error (``Error: ...``
    on stderr, exit status 1) instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise  # click's own handling of a closed stdout (`| head`)
        except (Error, OSError) as e:
            raise click.ClickException(_describe(e)) from None


_FILE = click.Path(dir_okay=False, path_type=str)


def _open_read(path: str) -> Casket:
    return pyqstore.open(path, "r")


@click.group(cls=_Group, context_settings=_CONTEXT)
@click.version_option(pyqstore.__version__, prog_name="qstore")
def main() -> None:
    """Inspect and maintain pyqstore caskets.

    Errors (a missing file, a locked or damaged casket) are reported as a
    one-line message with exit status 1.

    \b
    Example:
        qstore info data.qs
    """


# ------------------------------------------------------------------- info


def _info(c: Casket) -> dict[str, Any]:
    st = c.stats()
    lengths = c.queue_lengths()
    st["queues"] = len(lengths)
    st["queue_items"] = sum(lengths.values())
    out: dict[str, Any] = {"path": os.fsdecode(c.path)}
    out.update((k, st[k]) for k, _ in _INFO_FIELDS)
    return out


@main.command()
@click.argument("file", type=_FILE)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(file: str, as_json: bool) -> None:
    """Show a casket's format and size statistics.

    Shows the format version, page size, user records (each duplicate
    counted), number of queues and their items, main file and log sizes,
    pages, free pages and the depth of the record tree.  The file is
    opened read-only.  With --json the keys are path, format_version,
    page_size, records, queues, queue_items, file_bytes, log_file_bytes,
    log_bytes, pages, free_pages and depth (sizes in bytes).

    \b
    Example:
        qstore info data.qs --json
    """
    with _open_read(file) as c:
        d = _info(c)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    width = max(len(label) for _, label in _INFO_FIELDS)
    click.echo(f"{'path':<{width}}  {d['path']}")
    for key, label in _INFO_FIELDS:
        v = d[key]
        shown = _fmt_bytes(v) if key in _BYTE_FIELDS else str(v)
        click.echo(f"{label:<{width}}  {shown}")


# ----------------------------------------------------------------- queues


@main.command()
@click.argument("file", type=_FILE)
@click.option("--json", "as_json", is_flag=True,
              help='Print a JSON list of {"name": ..., "length": ...}.')
def queues(file: str, as_json: bool) -> None:
    """List the queues of a casket and their lengths.

    A queue exists while it holds an item; its length counts the items
    available to get (reserved ones are not counted).  Queues are listed
    in name order.  The file is opened read-only.

    \b
    Example:
        qstore queues data.qs --json
    """
    with _open_read(file) as c:
        lengths = c.queue_lengths()
    if as_json:
        click.echo(json.dumps([{"name": n, "length": ln} for n, ln in lengths.items()],
                              indent=2))
        return
    if not lengths:
        click.echo("(no queues)")
        return
    width = max(len("QUEUE"), *(len(n) for n in lengths))
    lwidth = max(len("LENGTH"), *(len(str(v)) for v in lengths.values()))
    click.echo(f"{'QUEUE':<{width}}  {'LENGTH':>{lwidth}}")
    for name, ln in lengths.items():
        click.echo(f"{name:<{width}}  {ln:>{lwidth}}")


# ------------------------------------------------------------------- peek

def _utf8_shown(b: bytes) -> str:
    """b decoded as UTF-8 for a terminal: bad bytes as \\xNN, and control
    characters escaped (as repr does) so a payload cannot move the cursor,
    clear the screen or split its line; a backslash is doubled so the
    escapes stay unambiguous."""
    text = b.decode("utf-8", "backslashreplace")
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in b.decode("utf-8", "surrogateescape"):
        if "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


_PEEK_FORMATS: dict[str, Callable[[bytes], str]] = {
    "repr": repr,
    "utf8": _utf8_shown,
    "hex": lambda b: b.hex(),
    "base64": lambda b: base64.b64encode(b).decode("ascii"),
    "json": lambda b: json.dumps(encode_bytes(b), ensure_ascii=False),
}


@main.command()
@click.argument("file", type=_FILE)
@click.argument("queue")
@click.option("-n", "count", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many items to show.")
@click.option("-f", "--format", "fmt", type=click.Choice(list(_PEEK_FORMATS)),
              default="repr", show_default=True,
              help="How to print each payload.")
def peek(file: str, queue: str, count: int, fmt: str) -> None:
    """Show the first items of a queue without consuming them.

    Prints up to N of the oldest available items of QUEUE, one per line,
    oldest first.  The file is opened read-only, so nothing is removed.

    \b
    Formats:
        repr    Python bytes literal, e.g. b'job\\x001' (default)
        utf8    the payload decoded as UTF-8, bad bytes as \\xNN and
                control characters as \\n, \\x1b ... escapes
        hex     lowercase hexadecimal
        base64  standard base64
        json    the dump encoding: a JSON string, or {"b64": ...} when
                the payload is not valid UTF-8

    An empty or unknown queue prints nothing (a note goes to stderr).

    \b
    Example:
        qstore peek data.qs jobs -n 5 --format utf8
    """
    show = _PEEK_FORMATS[fmt]
    with _open_read(file) as c:
        try:
            q = c.queue(queue)
        except (TypeError, ValueError) as e:  # a bad name, before any I/O
            raise click.BadParameter(str(e), param_hint="QUEUE") from None
        payloads = q.peek_many(count)
    for p in payloads:
        click.echo(show(p))
    if not payloads and count:
        click.echo(f"queue {queue!r} is empty", err=True)


# ------------------------------------------------------------------ check


@main.command()
@click.argument("file", type=_FILE)
def check(file: str) -> None:
    """Verify the integrity of a whole casket.

    Prints "ok" and exits with status 0 when the file is sound; prints the
    description of the first damage found and exits with status 1 when it
    is not (also when it is too damaged to open, or is not a casket).
    Other failures (e.g. a missing file) are reported as errors, also with
    status 1.  The file is opened read-only.

    \b
    Example:
        qstore check data.qs && echo sound
    """
    try:
        with _open_read(file) as c:
            c.check()
    except CorruptError as e:
        click.echo(f"damaged: {e}")
        raise click.exceptions.Exit(1) from None
    click.echo("ok")


# ---------------------------------------------------------------- compact


@main.command()
@click.argument("file", type=_FILE)
@_PROGRESS_OPTION
def compact(file: str, progress: Optional[bool]) -> None:
    """Rewrite a casket compactly, returning free space to the file system.

    The file must exist; it is opened read-write.  Prints the size of the
    main file (and its page counts) before and after.  With --progress
    (default: when stderr is a terminal) reports records copied on stderr.

    \b
    Example:
        qstore compact data.qs
    """
    with pyqstore.open(file, "w") as c:
        before = c.stats()
        _watch(c, "compact", progress, c.compact)
        after = c.stats()
    b, a = before["file_bytes"], after["file_bytes"]
    click.echo(f"before: {_fmt_bytes(b)}, {before['pages']} pages "
               f"({before['free_pages']} free)")
    click.echo(f"after:  {_fmt_bytes(a)}, {after['pages']} pages "
               f"({after['free_pages']} free)")
    click.echo(f"saved:  {b - a} bytes")


# ------------------------------------------------------------------- dump


def _dump_lines(s: Casket, progress: _Progress) -> Iterator[bytes]:
    """Every record and queue item of s (a snapshot), as dump lines, read
    in batches: memory stays bounded whatever the casket holds."""
    for k, v in s.items():
        yield _json_line({"kind": "record", "key": encode_bytes(k),
                          "value": encode_bytes(v)})
        progress.add()
    for name in s.queues():
        for p in s.queue(name).iter():
            yield _json_line({"kind": "item", "queue": name, "payload": encode_bytes(p)})
            progress.add()


@main.command()
@click.argument("file", type=_FILE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              default="-", help="Write here instead of stdout.")
@_PROGRESS_OPTION
def dump(file: str, output: str, progress: Optional[bool]) -> None:
    """Write every record and queue item of a casket as JSON lines.

    \b
    One JSON object per line (UTF-8):
        {"kind": "record", "key": BYTES, "value": BYTES}
        {"kind": "item", "queue": "NAME", "payload": BYTES}

    BYTES is a JSON string when the bytes are valid UTF-8, otherwise
    {"b64": "<base64>"}; so the dump is lossless.  Records come first in
    key order, a key's duplicates in insertion order; then the items of
    each queue (in name order), oldest first, reserved ones included (they
    are still in the queue).  An item published to several queues appears
    once per queue.  `qstore load` reads this format back.

    The dump is of one commit: it reads a snapshot, so processes writing
    meanwhile change nothing in it (and are not held up; the casket's log
    grows until the dump ends).  It streams, in bounded memory.  With
    --progress (default: when stderr is a terminal) it reports on stderr
    how many records and items it has written.  The file is opened
    read-only.

    \b
    Example:
        qstore dump data.qs -o data.jsonl
    """
    with _open_read(file) as c, c.snapshot(cache_size=_DUMP_CACHE) as s:
        total = len(s) + sum(s.queue_lengths().values())
        p = _Progress("dump", "records and items", total, progress)
        with click.open_file(output, "wb") as out:
            for line in _dump_lines(s, p):
                out.write(line)
        p.total = max(p.total, p.done)  # reserved items are not in the lengths
        p.finish()


# ------------------------------------------------------------------- load


class _Loader:
    """Applies parsed dump lines to a casket (inside its transaction)."""

    def __init__(self, c: Casket) -> None:
        self.c = c
        self.queues: dict[str, pyqstore.Queue[bytes]] = {}
        self.records = 0
        self.items = 0

    def apply(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        kind = obj.get("kind")
        if kind == "record":
            self._fields(obj, {"kind", "key", "value"})
            self.c.putdup(decode_bytes(obj["key"], "key"),
                          decode_bytes(obj["value"], "value"))
            self.records += 1
        elif kind == "item":
            self._fields(obj, {"kind", "queue", "payload"})
            name = obj["queue"]
            if not isinstance(name, str):
                raise ValueError("queue must be a string")
            q = self.queues.get(name)
            if q is None:
                q = self.queues[name] = self.c.queue(name)
            q.put(decode_bytes(obj["payload"], "payload"))
            self.items += 1
        else:
            raise ValueError(f'"kind" must be "record" or "item", not {json.dumps(kind)}')

    @staticmethod
    def _fields(obj: dict[str, Any], want: set[str]) -> None:
        missing = want - obj.keys()
        if missing:
            raise ValueError(f"missing field(s): {', '.join(sorted(missing))}")
        extra = obj.keys() - want
        if extra:
            raise ValueError(f"unexpected field(s): {', '.join(sorted(extra))}")


def _input_size(src: IO[bytes]) -> int:
    """Bytes in src when it is a regular file, else 0 (unknown)."""
    try:
        st = os.fstat(src.fileno())
    except (AttributeError, OSError, ValueError):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _load_into(c: Casket, src: IO[bytes], name: str,
               progress: Optional[bool] = False) -> _Loader:
    loader = _Loader(c)
    p = _Progress("load", "bytes", _input_size(src), progress)
    with c.transaction():  # aborted by any exception below
        for lineno, raw in enumerate(src, 1):
            p.add(len(raw))
            try:
                text = raw.decode("utf-8")
                if not text.strip():
                    continue
                loader.apply(json.loads(text))
            except (ValueError, TypeError) as e:
                # json.JSONDecodeError, UnicodeError and the library's
                # TooBigError / InvalidArgumentError are all ValueErrors.
                raise click.ClickException(
                    f"{name}: line {lineno}: {e}; nothing was loaded") from None
    p.total = max(p.total, p.done)
    p.finish()
    return loader


@main.command()
@click.argument("file", type=_FILE)
@click.argument("input", type=click.File("rb"), default="-", required=False)
@_PROGRESS_OPTION
def load(file: str, input: IO[bytes], progress: Optional[bool]) -> None:
    """Add the records and queue items of a dump to a casket.

    Reads JSON lines as written by `qstore dump` from INPUT (default:
    stdin) and adds them to FILE, which is created if missing, in a single
    transaction: records are added with putdup (after any values their
    keys already have), items are appended to their queues in input order.
    On a malformed line the error names the line number, the transaction
    is aborted so nothing is loaded, and the exit status is 1 (a FILE
    created by this command is removed again when it is still empty).
    With --progress (default: when stderr is a terminal) it reports the
    bytes of INPUT read so far on stderr.

    \b
    Example:
        qstore dump old.qs | qstore load new.qs
        qstore load new.qs data.jsonl
    """
    existed = os.path.lexists(file)
    name = getattr(input, "name", "-")
    name = "<stdin>" if not isinstance(name, str) or name in ("<stdin>", "-") else name
    c = pyqstore.open(file, "c")
    try:
        loader = _load_into(c, input, name, progress)
    except BaseException:
        _discard_if_new(c, existed)
        raise
    c.close()
    click.echo(f"loaded {loader.records} records and {loader.items} queue items "
               f"into {file}", err=True)


@main.command()
@click.argument("file", type=_FILE)
@click.argument("dest", type=_FILE)
@_PROGRESS_OPTION
def backup(file: str, dest: str, progress: Optional[bool]) -> None:
    """Copy a casket consistently to DEST while others go on writing.

    A casket is up to three files (FILE, FILE-log, FILE-shm), and the main
    file alone may not hold the latest commits: copying it is not a
    backup.  This writes DEST as one self-contained, compacted casket
    holding exactly the records and queue items of one commit (reserved
    items included, as ordinary items), synced, with no -log or -shm file.
    DEST must not exist; a failed backup leaves none.  With --progress
    (default: when stderr is a terminal) reports records copied on stderr.

    \b
    Example:
        qstore backup data.qs /backups/data-$(date +%F).qs
    """
    with _open_read(file) as c:
        _watch(c, "backup", progress, lambda: c.backup(dest))
        n = c.copy_progress()[0]
    click.echo(f"backed up {n} records and queue entries to {dest}", err=True)


def _discard_if_new(c: Casket, existed: bool) -> None:
    """Close c; remove its files when this command created them and they
    hold nothing."""
    try:
        empty = not existed and c.stats()["records"] == 0 and not c.queues()
    finally:
        c.close()
    if empty:
        for p in (c.path, os.fsdecode(c.path) + "-log"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


# ------------------------------------------------------------------- flow


@main.group()
def flow() -> None:
    """Inspect the runs of pyqstore.flow flows."""


@flow.command("status")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--no-state", is_flag=True, help="Skip the state's size (a scan of its records).")
def flow_status(directory: str, as_json: bool, no_state: bool) -> None:
    """Show a flow run's nodes: per instance its items in and out, failed
    items, state size, whether it finished and when it last fired; per
    input port the items available, reserved and delayed and its bound;
    per node its dead letters and their newest reasons.

    Reads the run's caskets read-only: it works on a running flow (each
    number as of the newest commit) and on a stopped one.  With --json one
    object: flow, layout, directory, finished, and nodes by name, each
    with kind, parallelism, items_in, items_out, failed, finished, ports
    (port, direction, instance, queue, available, reserved, delayed,
    maxsize), dead_letters (count, last_reasons) and instances (instance,
    items_in, items_out, failed, finished, last_firing as Unix time or
    null, state_records, state_bytes).

    \b
    Example:
        qstore flow status run/ --json
    """
    from pyqstore.flow.status import status
    st = status(directory, with_state=not no_state)
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2))
    else:
        click.echo(str(st))


if __name__ == "__main__":
    main(prog_name="qstore")
