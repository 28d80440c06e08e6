"""What format3.tar.gz holds (make_format3.py writes it)."""
import hashlib


def _value(i: int, tag: bytes) -> bytes:
    return hashlib.sha256(tag + i.to_bytes(4, "little")).digest() * (1 + i % 3)


CHECKPOINTED = {b"ck-%05d" % i: _value(i, b"c") for i in range(400)}
# keys among the checkpointed ones (overwrites) and new ones, spread over
# the leaves so that most commits change a leaf this generation logged
LOGGED = {b"ck-%05d" % (i * 7) if i % 2 else b"lg-%05d" % i: _value(i, b"l") for i in range(60)}
QUEUE = "jobs"
QUEUE_ITEMS = [b"item-%04d" % i for i in range(250)]
QUEUE_TAKEN = 40


def expected_records() -> dict:
    out = dict(CHECKPOINTED)
    out.update(LOGGED)
    return out
