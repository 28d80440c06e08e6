"""Seed 000's serialization experiment: an object holding an array of n
integers (zeros) and an array of n strings ("Dummy text"), encoded and
decoded by each codec; size and time per object.  The codecs are the
seed's subjects (Protocol Buffers with the message defined at run time, an
XML encoding standing for XStream) and what Python users would reach for."""
from __future__ import annotations

import json
import marshal
import pickle
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Optional

Obj = dict[str, list[Any]]


def target(n: int) -> Obj:
    return {"ia": [0] * n, "sa": ["Dummy text"] * n}


def raw_size(n: int) -> int:
    """The data itself: 4 bytes per int, the string bytes."""
    return n * (4 + len("Dummy text"))


def _xml_encode(o: Obj) -> bytes:
    root = ET.Element("target")
    ia = ET.SubElement(root, "ia")
    for v in o["ia"]:
        ET.SubElement(ia, "int").text = str(v)
    sa = ET.SubElement(root, "sa")
    for s in o["sa"]:
        ET.SubElement(sa, "string").text = s
    return ET.tostring(root)


def _xml_decode(b: bytes) -> Obj:
    root = ET.fromstring(b)
    return {"ia": [int(e.text or 0) for e in root.find("ia") or []],
            "sa": [e.text or "" for e in root.find("sa") or []]}


def _protobuf() -> tuple[Callable[[Obj], bytes], Callable[[bytes], Obj]]:
    # no stubs unless types-protobuf is installed
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped, unused-ignore]

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="qbench_target.proto", package="qbench",
                                             syntax="proto2")
    m = fdp.message_type.add(name="Target")
    # the seed's proto2 message: its repeated int32 is unpacked (a tag per
    # element), as proto2 has it unless [packed=true] is given
    m.field.add(name="ia", number=1, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    m.field.add(name="sa", number=2, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("qbench.Target"))

    def enc(o: Obj) -> bytes:
        result: bytes = cls(ia=o["ia"], sa=o["sa"]).SerializeToString()
        return result

    def dec(b: bytes) -> Obj:
        msg = cls.FromString(b)
        return {"ia": list(msg.ia), "sa": list(msg.sa)}

    return enc, dec


def codecs() -> dict[str, Any]:
    """name -> (encode, decode), or name -> reason when unavailable."""
    out: dict[str, Any] = {
        "pickle": (lambda o: pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
        "marshal": (marshal.dumps, marshal.loads),
        "json": (lambda o: json.dumps(o, separators=(",", ":")).encode(), json.loads),
    }
    try:
        import msgpack
        out["msgpack"] = (msgpack.packb, lambda b: msgpack.unpackb(b, raw=False))
    except ImportError:
        out["msgpack"] = "msgpack is not installed: pip install msgpack"
    try:
        out["protobuf"] = _protobuf()
    except ImportError:
        out["protobuf"] = "protobuf is not installed: pip install protobuf"
    out["xml"] = (_xml_encode, _xml_decode)
    from .codecs_jvm import codecs as jvm_codecs    # seed 000's own, in the JVM
    out.update(jvm_codecs())
    return out


def run(max_n: int, step: int, reps: int, progress: Optional[Callable[[str], None]] = None
        ) -> dict[str, Any]:
    avail = codecs()
    rows = []
    sizes = list(range(step, max_n + 1, step))
    for name, c in avail.items():
        if isinstance(c, str):
            continue
        enc, dec = c
        if progress:
            progress(name)
        for n in sizes:
            obj = target(n)
            b = enc(obj)
            if dec(b) != obj:
                raise AssertionError(f"{name} does not round-trip an object of {n} elements")
            t0 = time.perf_counter()
            for _ in range(reps):
                enc(obj)
            t1 = time.perf_counter()
            for _ in range(reps):
                dec(b)
            t2 = time.perf_counter()
            rows.append({"codec": name, "n": n, "bytes": len(b),
                         "relative": len(b) / raw_size(n),
                         "encode_us": (t1 - t0) / reps * 1e6,
                         "decode_us": (t2 - t1) / reps * 1e6,
                         # the seed's remark: deserializing is the slower
                         # half, most of all for Protocol Buffers
                         "decode_over_encode": (t2 - t1) / (t1 - t0) if t1 > t0 else None})
    return {"experiment": "codecs", "max": max_n, "step": step, "reps": reps,
            "codecs": {k: ({"available": True} if not isinstance(v, str)
                           else {"available": False, "reason": v}) for k, v in avail.items()},
            "results": rows}
