"""Tests of the `qstore` command line (pyqstore/cli.py), through click's
CliRunner."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import pyqstore
from pyqstore._qstore import lib
from pyqstore.cli import decode_bytes, encode_bytes, main

RECORDS = [
    (b"", b""),                      # empty key and value
    (b"alpha", b"1"),
    (b"dup", b"first"),
    (b"dup", b"\xff\x00\xfe"),       # not UTF-8
    (b"dup", b""),                   # empty duplicate
    (b"dup", b"first"),              # equal duplicate
    (b"\x80bin\x00key", b"v"),       # non-UTF-8 key
    ("ключ".encode(), "значение".encode()),
]
JOBS = [b"job-1", b"\x00\x01\x02\xff", b"", "задача".encode(), b"job-5"]
OTHER = [b"o1", b"o2"]


def run(*args: str, input=None):
    """Invoke the CLI; never lets an exception other than click's exit
    through (that would be a traceback for the user)."""
    result = CliRunner().invoke(main, list(args), input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output
    return result


def sorted_records(recs):
    """Records in the order the casket keeps them: memcmp key order, a key's
    duplicates in insertion order (sorted() is stable)."""
    return sorted(recs, key=lambda kv: kv[0])


def fill(path, records=RECORDS, queues=(("jobs", JOBS), ("other", OTHER))):
    with pyqstore.open(path, "c", sync=False) as c:
        for k, v in records:
            c.putdup(k, v)
        for name, items in queues:
            c.queue(name).put_many(items)


def contents(path):
    """(records, {queue: items}) of a casket, read without changing it."""
    with pyqstore.open(path, "r") as c:
        recs = list(c.items())
        qs = {name: c.queue(name).peek_many(n) for name, n in c.queue_lengths().items()}
    return recs, qs


@pytest.fixture
def sample(path):
    fill(path)
    return path


@pytest.fixture
def missing(tmp_path):
    return str(tmp_path / "no-such.qs")


# ------------------------------------------------------------------- info


def test_info_text(sample):
    r = run("info", sample)
    assert r.exit_code == 0, r.output
    lines = {line.split("  ")[0]: line.split("  ", 1)[1].strip()
             for line in r.stdout.splitlines()}
    assert lines["format version"] == str(lib.QS_FORMAT_VERSION)
    assert lines["page size"].startswith("4096")
    assert lines["user records"] == str(len(RECORDS))
    assert lines["queues"] == "2"
    assert lines["queue items"] == str(len(JOBS) + len(OTHER))
    for label in ("file size", "log size", "pages", "free pages", "tree depth"):
        assert label in lines
    assert lines["path"] == sample


def test_info_json(sample):
    r = run("info", sample, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    with pyqstore.open(sample, "r") as c:
        st = c.stats()
    for key in ("format_version", "page_size", "records", "file_bytes", "pages",
                "free_pages", "depth", "log_bytes", "log_file_bytes"):
        assert d[key] == st[key], key
    assert d["records"] == len(RECORDS)
    assert d["queues"] == 2
    assert d["queue_items"] == len(JOBS) + len(OTHER)
    assert d["file_bytes"] == os.path.getsize(sample)
    assert d["depth"] >= 1
    assert d["path"] == sample


def test_info_empty_casket(path):
    pyqstore.open(path, "n").close()
    d = json.loads(run("info", path, "--json").stdout)
    assert (d["records"], d["queues"], d["queue_items"], d["depth"]) == (0, 0, 0, 0)


# ----------------------------------------------------------------- queues


def test_queues_table(sample):
    r = run("queues", sample)
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows == [["QUEUE", "LENGTH"], ["jobs", str(len(JOBS))], ["other", str(len(OTHER))]]


def test_queues_json(sample):
    r = run("queues", sample, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"name": "jobs", "length": len(JOBS)},
                                    {"name": "other", "length": len(OTHER)}]


def test_queues_none(path):
    fill(path, queues=())
    assert run("queues", path).stdout.strip() == "(no queues)"
    assert json.loads(run("queues", path, "--json").stdout) == []


# ------------------------------------------------------------------- peek


def test_peek_default_repr_and_not_consumed(sample):
    r = run("peek", sample, "jobs")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [repr(p) for p in JOBS]
    r2 = run("peek", sample, "jobs")
    assert r2.stdout == r.stdout
    assert contents(sample)[1]["jobs"] == JOBS


def test_peek_n(sample):
    r = run("peek", sample, "jobs", "-n", "2")
    assert r.stdout.splitlines() == [repr(JOBS[0]), repr(JOBS[1])]
    r = run("peek", sample, "jobs", "-n", "0")
    assert r.exit_code == 0 and r.stdout == ""
    assert run("peek", sample, "jobs", "-n", "-1").exit_code == 2


@pytest.mark.parametrize("fmt, show", [
    ("hex", lambda b: b.hex()),
    ("base64", lambda b: base64.b64encode(b).decode()),
    # control characters escaped like bad bytes (this payload's are all
    # of one or the other; test_peek_utf8_escapes_control_characters has more)
    ("utf8", lambda b: b.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
     .replace("\x01", "\\x01").replace("\x02", "\\x02")),
    ("json", lambda b: json.dumps(encode_bytes(b), ensure_ascii=False)),
])
def test_peek_formats(sample, fmt, show):
    r = run("peek", sample, "jobs", "--format", fmt, "-n", "4")
    assert r.exit_code == 0, r.output
    # Splitting on "\n" keeps the empty payload's empty line.
    assert r.stdout.split("\n")[:-1] == [show(p) for p in JOBS[:4]]


def test_peek_json_format_decodes_back(sample):
    r = run("peek", sample, "jobs", "-f", "json")
    assert [decode_bytes(json.loads(line), "x") for line in r.stdout.splitlines()] == JOBS


def test_peek_empty_or_unknown_queue(sample):
    r = run("peek", sample, "nosuchqueue")
    assert r.exit_code == 0
    assert r.stdout == ""
    assert "empty" in r.stderr


def test_peek_bad_queue_name(sample):
    r = run("peek", sample, "")
    assert r.exit_code == 2
    assert "queue name" in r.stderr


# ------------------------------------------------------------------ check


def test_check_ok(sample):
    r = run("check", sample)
    assert r.exit_code == 0
    assert r.stdout.strip() == "ok"


def test_check_damaged(path):
    fill(path, records=[(b"k%05d" % i, b"v" * 100) for i in range(300)])
    assert run("check", path).exit_code == 0
    with open(path, "r+b") as f:
        f.seek(4096 + 100)
        f.write(b"\xa5" * 32)
    r = run("check", path)
    assert r.exit_code == 1
    assert "ok" not in r.stdout.split()
    assert "page 1" in r.stdout


def test_check_not_a_casket(tmp_path):
    p = tmp_path / "junk.qs"
    p.write_bytes(b"this is not a casket" * 500)
    r = run("check", str(p))
    assert r.exit_code == 1
    assert "not a pyqstore casket" in r.output


# ---------------------------------------------------------------- compact


def test_compact(path):
    fill(path, records=[(b"k%05d" % i, b"v" * 200) for i in range(2000)], queues=())
    with pyqstore.open(path, "w", sync=False) as c:
        with c.transaction():
            for i in range(0, 2000):
                if i % 50:
                    c.out(b"k%05d" % i)
    before = os.path.getsize(path)
    r = run("compact", path)
    assert r.exit_code == 0, r.output
    after = os.path.getsize(path)
    assert after < before
    out = r.stdout.splitlines()
    assert out[0].startswith(f"before: {before} ")
    assert out[1].startswith(f"after:  {after} ")
    assert out[2] == f"saved:  {before - after} bytes"
    recs, _ = contents(path)
    assert recs == [(b"k%05d" % i, b"v" * 200) for i in range(0, 2000, 50)]
    assert run("check", path).exit_code == 0


# ------------------------------------------------------------------- dump


def test_dump_format(sample):
    r = run("dump", sample)
    assert r.exit_code == 0, r.output
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    recs = [o for o in objs if o["kind"] == "record"]
    items = [o for o in objs if o["kind"] == "item"]
    assert len(objs) == len(recs) + len(items)
    # records first, then items
    assert [o["kind"] for o in objs] == ["record"] * len(recs) + ["item"] * len(items)
    assert [(decode_bytes(o["key"], "k"), decode_bytes(o["value"], "v")) for o in recs] \
        == sorted_records(RECORDS)
    assert [(o["queue"], decode_bytes(o["payload"], "p")) for o in items] \
        == [("jobs", p) for p in JOBS] + [("other", p) for p in OTHER]
    # the encoding: text when UTF-8, {"b64": ...} otherwise
    assert {"kind": "record", "key": "dup", "value": {"b64": "/wD+"}} in objs
    assert {"kind": "record", "key": "", "value": ""} in objs
    assert {"kind": "record", "key": "ключ", "value": "значение"} in objs
    assert {"kind": "item", "queue": "jobs", "payload": {"b64": "AAEC/w=="}} in objs
    assert {"kind": "item", "queue": "jobs", "payload": ""} in objs


def test_dump_output_file(sample, tmp_path):
    out = tmp_path / "out.jsonl"
    r = run("dump", sample, "-o", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert out.read_bytes() == run("dump", sample).stdout_bytes


def test_dump_does_not_consume(sample):
    before = contents(sample)
    run("dump", sample)
    assert contents(sample) == before


# ------------------------------------------------------------------- load


def test_round_trip(sample, tmp_path):
    dumped = run("dump", sample).stdout_bytes
    target = str(tmp_path / "copy.qs")
    r = run("load", target, input=dumped)
    assert r.exit_code == 0, r.output
    assert f"loaded {len(RECORDS)} records and {len(JOBS) + len(OTHER)} queue items" in r.stderr
    recs, qs = contents(target)
    assert recs == sorted_records(RECORDS)
    assert qs == {"jobs": JOBS, "other": OTHER}
    assert run("dump", target).stdout_bytes == dumped
    assert run("check", target).exit_code == 0


def test_round_trip_all_byte_values(path, tmp_path):
    blobs = [bytes([i]) for i in range(256)] + [bytes(range(256)), b"\xed\xa0\x80", b"a\r\nb"]
    fill(path, records=[(b"k%03d" % i, b) for i, b in enumerate(blobs)],
         queues=[("q", blobs)])
    dump_file = tmp_path / "d.jsonl"
    assert run("dump", path, "-o", str(dump_file)).exit_code == 0
    target = str(tmp_path / "copy.qs")
    r = run("load", target, str(dump_file))   # INPUT given as a file
    assert r.exit_code == 0, r.output
    assert contents(target) == contents(path)


def test_load_adds_to_existing(sample, tmp_path):
    target = str(tmp_path / "t.qs")
    fill(target, records=[(b"dup", b"already")], queues=[("jobs", [b"old"])])
    r = run("load", target, input=run("dump", sample).stdout_bytes)
    assert r.exit_code == 0, r.output
    recs, qs = contents(target)
    dups = [v for k, v in recs if k == b"dup"]
    assert dups == [b"already"] + [v for k, v in RECORDS if k == b"dup"]
    assert qs["jobs"] == [b"old"] + JOBS


def test_load_skips_blank_lines(tmp_path):
    target = str(tmp_path / "t.qs")
    text = '\n{"kind": "record", "key": "a", "value": {"b64": "AA=="}}\n   \n' \
           '{"kind": "item", "queue": "q", "payload": "p"}\n'
    assert run("load", target, input=text).exit_code == 0
    assert contents(target) == ([(b"a", b"\x00")], {"q": [b"p"]})


GOOD = '{"kind": "record", "key": "good", "value": "line"}\n'


@pytest.mark.parametrize("bad, why", [
    ("{not json\n", "Expecting"),
    ("[1, 2]\n", "JSON object"),
    ('{"kind": "blob", "key": "a", "value": "b"}\n', '"kind"'),
    ('{"key": "a", "value": "b"}\n', '"kind"'),
    ('{"kind": "record", "key": "a"}\n', "missing field(s): value"),
    ('{"kind": "record", "key": "a", "value": "b", "x": 1}\n', "unexpected field(s): x"),
    ('{"kind": "record", "key": 5, "value": "b"}\n', "key must be"),
    ('{"kind": "record", "key": {"b64": "!!!"}, "value": "b"}\n', "invalid base64"),
    ('{"kind": "record", "key": {"b64": "AA==", "x": 1}, "value": "b"}\n', "key must be"),
    ('{"kind": "record", "key": "\\udcff", "value": "b"}\n', "surrogate"),
    ('{"kind": "item", "queue": 3, "payload": "p"}\n', "queue must be a string"),
    ('{"kind": "item", "queue": "", "payload": "p"}\n', "queue name"),
    ('{"kind": "record", "key": "' + "k" * 20000 + '", "value": "b"}\n', "too long"),
    (b'{"kind": "record", "key": "\xff", "value": "b"}\n', "utf-8"),
], ids=lambda x: x[:40] if isinstance(x, (str, bytes)) else None)
def test_load_malformed_changes_nothing(sample, bad, why):
    before_dump = run("dump", sample).stdout_bytes
    before = contents(sample)
    if isinstance(bad, str):
        bad = bad.encode()
    data = GOOD.encode() + b'{"kind": "item", "queue": "jobs", "payload": "new"}\n' + bad + GOOD.encode()
    r = run("load", sample, input=data)
    assert r.exit_code != 0
    assert "line 3" in r.stderr
    assert why in r.stderr
    assert "nothing was loaded" in r.stderr
    assert contents(sample) == before
    assert run("dump", sample).stdout_bytes == before_dump


def test_load_malformed_into_new_file_leaves_nothing(tmp_path):
    target = tmp_path / "new.qs"
    r = run("load", str(target), input=GOOD + "oops\n")
    assert r.exit_code == 1
    assert "line 2" in r.stderr
    assert not target.exists()
    assert not (tmp_path / "new.qs-log").exists()


def test_load_missing_input_file(tmp_path):
    target = tmp_path / "new.qs"
    r = run("load", str(target), str(tmp_path / "nope.jsonl"))
    assert r.exit_code == 2
    assert "nope.jsonl" in r.stderr
    assert not target.exists()


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize("args", [
    ["info"], ["info", "--json"], ["queues"], ["peek", "@", "q"], ["check"],
    ["compact"], ["dump"],
])
def test_missing_file(missing, args):
    args = [missing if a == "@" else a for a in args]
    if "@" not in args and missing not in args:
        args.insert(1, missing)
    r = run(*args)
    assert r.exit_code == 1
    assert isinstance(r.exception, SystemExit)
    assert r.stderr.startswith("Error: ")
    assert "no-such.qs" in r.stderr
    assert "No such file" in r.stderr
    assert not os.path.exists(missing)  # read commands never create it


def test_not_a_casket_is_clean_error(tmp_path):
    p = tmp_path / "junk.qs"
    p.write_bytes(b"x" * 10000)
    for cmd in ("info", "queues", "dump", "compact"):
        r = run(cmd, str(p))
        assert r.exit_code == 1
        assert "not a pyqstore casket" in r.stderr


def test_dump_to_unwritable_output_is_clean_error(sample, tmp_path):
    target = tmp_path / "no-such-dir" / "out.jsonl"
    r = run("dump", sample, "-o", str(target))
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: ")
    assert "out.jsonl" in r.stderr and "No such file" in r.stderr


def test_directory_is_clean_error(tmp_path):
    r = run("info", str(tmp_path))
    assert r.exit_code == 2
    assert "is a directory" in r.stderr


COMMANDS = {
    "info": "qstore info data.qs --json",
    "queues": "qstore queues data.qs --json",
    "peek": "qstore peek data.qs jobs -n 5 --format utf8",
    "check": "qstore check data.qs",
    "compact": "qstore compact data.qs",
    "dump": "qstore dump data.qs -o data.jsonl",
    "load": "qstore load new.qs data.jsonl",
}


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_help_has_example(cmd):
    r = run(cmd, "--help")
    assert r.exit_code == 0
    assert "Example" in r.stdout
    assert COMMANDS[cmd] in r.stdout


def test_group_help_lists_commands():
    r = run("--help")
    assert r.exit_code == 0
    for cmd in COMMANDS:
        assert cmd in r.stdout
    assert "Example" in r.stdout


def test_encode_decode_inverse():
    for b in [b"", b"abc", b"\xff", "ü".encode(), b"\x00" * 3, bytes(range(256))]:
        e = encode_bytes(b)
        assert decode_bytes(json.loads(json.dumps(e)), "x") == b
    assert encode_bytes(b"\xff") == {"b64": "/w=="}
    assert decode_bytes({"b64": "aGk="}, "x") == b"hi"  # b64 accepted for text too
    with pytest.raises(ValueError):
        decode_bytes(None, "x")


def test_python_m_entry_point(sample):
    r = subprocess.run([sys.executable, "-m", "pyqstore.cli", "queues", sample, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0] == {"name": "jobs", "length": len(JOBS)}
    r = subprocess.run([sys.executable, "-m", "pyqstore.cli", "info", sample + ".nope"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("Error: ")


def test_peek_utf8_escapes_control_characters(tmp_path):
    """A payload cannot drive the terminal or split its line: ESC, CR, LF,
    TAB, DEL and C1 controls come out escaped, a backslash doubled (so an
    escape is never ambiguous), printable text as it is."""
    p = str(tmp_path / "t.qs")
    payload = "a\x1b[2Jb\r\nc\td\x7f\u009b\\x80é".encode() + b"\xfe"
    with pyqstore.open(p, "n") as c:
        c.queue("q").put(payload)
    r = run("peek", p, "q", "-f", "utf8")
    assert r.exit_code == 0, r.output
    assert r.stdout == "a\\x1b[2Jb\\r\\nc\\td\\x7f\\x9b\\\\x80é\\xfe\n"
    assert all(ch.isprintable() for ch in r.stdout[:-1])


def test_errors_have_one_format(tmp_path, missing):
    """A missing file and a file that is not a casket read alike:
    "Error: OPERATION 'FILE': WHAT"."""
    junk = tmp_path / "junk.qs"
    junk.write_bytes(b"x" * 10000)
    r1 = run("info", missing)
    r2 = run("info", str(junk))
    assert r1.stderr == f"Error: open {missing!r}: No such file or directory\n"
    assert r2.stderr == f"Error: open {str(junk)!r}: not a pyqstore casket\n"
    out = tmp_path / "no-dir" / "out.jsonl"
    fill(str(tmp_path / "ok.qs"))
    r3 = run("dump", str(tmp_path / "ok.qs"), "-o", str(out))
    assert r3.stderr == f"Error: open {str(out)!r}: No such file or directory\n"


def test_dump_of_a_damaged_casket_names_the_queue_and_the_page(tmp_path):
    """A page of the queue's items fails its checksum: the error says
    which queue was being read and which page is damaged."""
    p = str(tmp_path / "d.qs")
    with pyqstore.open(p, "n") as c:
        c.put(b"k", b"v")
        c.queue("jobs").put_many([b"ITEM-%05d" % i + b"." * 100 for i in range(500)])
        c.queue("zzz").put(b"last")
        c.sync()                      # every page in the main file
    with open(p, "r+b") as f:
        data = f.read()
        off = data.find(b"ITEM-00250")  # a leaf in the middle of "jobs"
        f.seek(off)
        f.write(b"JUNK")
    page = off // pyqstore._qstore.lib.QS_PAGE_SIZE
    r = run("dump", p)
    assert r.exit_code == 1
    assert r.stderr == (f"Error: iter queue 'jobs' of {p!r}: casket is corrupt: "
                        f"page {page} is damaged (see qstore check)\n")
    r = run("check", p)
    assert f"page {page}:" in r.stdout
