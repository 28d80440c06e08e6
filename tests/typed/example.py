"""A user program typed against pyqstore: tests/test_typing.py runs
`mypy --strict` on it (against the installed package) and then runs it."""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from typing import Any

import pyqstore


@dataclasses.dataclass
class Point:
    x: int
    y: int


class PointCodec:
    """A Codec[Point]: the queue it is given to is a Queue[Point]."""

    def encode(self, obj: Point) -> bytes:
        return json.dumps([obj.x, obj.y]).encode()

    def decode(self, data: bytes) -> Point:
        x, y = json.loads(data)
        return Point(int(x), int(y))


def raw(c: pyqstore.Casket) -> bytes:
    q: pyqstore.Queue[bytes] = c.queue("raw")
    q.put(b"a")
    q.put("b")                        # str is stored as UTF-8
    q.put_many([bytearray(b"c"), memoryview(b"d")])
    first: bytes = q.get()
    rest: list[bytes] = q.get_many(3)
    return first + b"".join(rest)


def points(c: pyqstore.Casket) -> int:
    q = c.queue("points", codec=PointCodec())
    q.put(Point(1, 2))
    q.put_many([Point(3, 4)])
    p: Point = q.get()
    item: pyqstore.Item[Point] = q.reserve(timeout=0)
    with item:
        return p.x + item.payload.y


def records(c: pyqstore.Casket) -> bytes:
    c.put("k", b"v")
    v: bytes = c.get("k", b"0")       # a bytes default: never None
    maybe: bytes | None = c.get("missing")
    return v + (maybe or b"")


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        with pyqstore.open(f"{d}/example.qs", "n", sync=False) as c:
            assert raw(c) == b"abcd"
            assert points(c) == 5
            assert records(c) == b"v"
            jobs = c.queue("jobs", codec="json")
            jobs.put({"n": 1})
            job: Any = jobs.get()
            assert job == {"n": 1}
            try:
                c.queue("raw").get_nowait()
            except pyqstore.Empty:
                pass
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
