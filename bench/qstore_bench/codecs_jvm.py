"""Seed 000's own codecs, in the JVM (jvm.py): Java serialization
(ObjectOutputStream on the seed's TargetObject, made Serializable as the
seed's TargetObjectSerializable), Protocol Buffers for Java with the seed's
.proto (proto2: `repeated int32` is unpacked) compiled by protoc, and
XStream's default XML.  The seed's classes are compiled by javac at run
time into a temp dir and loaded by a class loader of their own.

As in the seed, the object to encode is built once per size, outside the
timer (the Java object from the Python one, or the protobuf message from
it), and each timed call is the codec's own work plus one crossing into the
JVM and the copy of the bytes; a decoded object stays in the JVM (the
round-trip check converts it, the timer does not)."""
from __future__ import annotations

import shutil
from typing import Any, Callable, Optional

from . import jvm

PACKAGE = "qbench"

_TARGET = """package qbench;
/** Seed 000's TargetObject, and the constructor the bench fills it with. */
public class TargetObject {
    public String [] sa;
    public int [] ia;
    public TargetObject ( int iStringElements, int iIntegerElements ) {
        sa = new String[iStringElements];
        for ( int i=0 ; i<iStringElements ; i++ )
            sa[i] = "Dummy text";
        ia = new int[iIntegerElements];
    }
    public TargetObject ( String [] sa, int [] ia ) { this.sa = sa; this.ia = ia; }
}
"""

_SERIALIZABLE = """package qbench;
public class TargetObjectSerializable implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    public String [] sa;
    public int [] ia;
    public TargetObjectSerializable ( String [] sa, int [] ia ) { this.sa = sa; this.ia = ia; }
}
"""

_JAVA = """package qbench;
import java.io.*;
public final class JavaCodec {
    public static byte[] write(Object o) throws IOException {
        ByteArrayOutputStream baos = new ByteArrayOutputStream();
        ObjectOutputStream out = new ObjectOutputStream(baos);
        out.writeObject(o);
        out.close();
        return baos.toByteArray();
    }
    /* here, not from Python: ObjectInputStream resolves classes with the
       loader of the latest user-defined class on the stack, this one */
    public static Object read(byte[] b) throws IOException, ClassNotFoundException {
        return new ObjectInputStream(new ByteArrayInputStream(b)).readObject();
    }
}
"""

# the seed's file, as published
_PROTO = """package test;

option java_package = "org.meandre.tools.serialization.proto";
option java_outer_classname = "TargetObjectProtoOuter";

message TargetObjectProto {
  repeated int32 ia = 1;
  repeated string sa = 2;
}
"""

_PROTO_CODEC = """package qbench;
import java.util.Arrays;
import org.meandre.tools.serialization.proto.TargetObjectProtoOuter.TargetObjectProto;
public final class ProtoCodec {
    public static TargetObjectProto build(String[] sa, int[] ia) {
        TargetObjectProto.Builder b = TargetObjectProto.newBuilder();
        for (int v : ia) b.addIa(v);
        b.addAllSa(Arrays.asList(sa));
        return b.build();
    }
    public static byte[] write(TargetObjectProto m) { return m.toByteArray(); }
    public static TargetObjectProto read(byte[] b)
            throws com.google.protobuf.InvalidProtocolBufferException {
        return TargetObjectProto.parseFrom(b);
    }
    public static int[] ia(TargetObjectProto m) {
        int[] out = new int[m.getIaCount()];
        for (int i = 0; i < out.length; i++) out[i] = m.getIa(i);
        return out;
    }
    public static String[] sa(TargetObjectProto m) { return m.getSaList().toArray(new String[0]); }
}
"""

_XSTREAM_CODEC = """package qbench;
import java.nio.charset.StandardCharsets;
import com.thoughtworks.xstream.XStream;
public final class XStreamCodec {
    private static final XStream XS = make();
    private static XStream make() {
        XStream x = new XStream();
        x.allowTypes(new Class[] { TargetObject.class });   // its security framework
        x.setClassLoader(XStreamCodec.class.getClassLoader());
        return x;
    }
    public static byte[] write(TargetObject o) { return XS.toXML(o).getBytes(StandardCharsets.UTF_8); }
    public static TargetObject read(byte[] b) {
        return (TargetObject) XS.fromXML(new String(b, StandardCharsets.UTF_8));
    }
}
"""

# codec -> (jars, Java sources, protos)
_CODECS: dict[str, tuple[tuple[str, ...], dict[str, str], dict[str, str]]] = {
    "java-serialization": ((), {"JavaCodec.java": _JAVA,
                                "TargetObjectSerializable.java": _SERIALIZABLE}, {}),
    "protobuf-java": (("protobuf.jar",), {"ProtoCodec.java": _PROTO_CODEC},
                      {"target.proto": _PROTO}),
    "xstream": (("xstream.jar", "xpp3.jar"), {"XStreamCodec.java": _XSTREAM_CODEC}, {}),
}

_loaded: Optional[tuple[Any, dict[str, str]]] = None     # (class loader, codec -> reason)


def _why_not(name: str) -> Optional[str]:
    jars, _, protos = _CODECS[name]
    why = jvm.missing(*jars)
    if why:
        return why
    if not shutil.which("javac"):
        return "javac is not installed; install: apt-get install openjdk-17-jdk-headless"
    if protos and not shutil.which("protoc"):
        return "protoc is not installed; install: apt-get install protobuf-compiler"
    return None


def _load() -> tuple[Any, dict[str, str]]:
    """Compiles the classes of every codec that can run here, once per process."""
    global _loaded
    if _loaded is None:
        absent = {n: why for n in _CODECS if (why := _why_not(n))}
        loader = None
        if len(absent) < len(_CODECS):
            sources, protos = {"TargetObject.java": _TARGET}, {}
            jars: list[str] = []
            for n, (js, src, pr) in _CODECS.items():
                if n not in absent:
                    jars += js
                    sources.update(src)
                    protos.update(pr)
            out = jvm.compile_java(sources, [jvm.jar(j) for j in jars], protos)
            loader = jvm.load_compiled(out)
        _loaded = (loader, absent)
    return _loaded


class _InJvm:
    """A decoded object left in the JVM; equal to the Python object with
    the same elements."""

    def __init__(self, ia: Any, sa: Any) -> None:
        self.ia, self.sa = ia, sa

    def __eq__(self, other: object) -> bool:
        return other == {"ia": [int(v) for v in self.ia], "sa": [str(s) for s in self.sa]}

    __hash__ = None  # type: ignore[assignment]


def _codec(cls: Any, build: Callable[[Any], Any],
           fields: Callable[[Any], tuple[Any, Any]]) -> tuple[Callable[[Any], bytes],
                                                            Callable[[bytes], Any]]:
    """(encode, decode) for the codec class cls: build makes its Java
    object of a Python one (once per object: the last one is kept)."""
    last: list[Any] = [None, None]

    def enc(o: Any) -> bytes:
        if last[0] is not o:
            last[0], last[1] = o, build(o)
        return bytes(cls.write(last[1]))

    def dec(b: bytes) -> Any:
        return _InJvm(*fields(cls.read(b)))

    return enc, dec


def codecs() -> dict[str, Any]:
    """name -> (encode, decode), or name -> the reason it cannot run here."""
    out: dict[str, Any] = {}
    try:
        loader, absent = _load()
    except RuntimeError as e:
        return {n: str(e) for n in _CODECS}
    out.update(absent)
    if loader is None:
        return out
    jpype = jvm.start()

    def cls(name: str) -> Any:
        return jpype.JClass(f"{PACKAGE}.{name}", loader=loader)

    def arrays(o: Any) -> tuple[Any, Any]:
        return jpype.JArray(jpype.JString)(o["sa"]), jpype.JArray(jpype.JInt)(o["ia"])

    if "java-serialization" not in absent:
        ser = cls("TargetObjectSerializable")
        out["java-serialization"] = _codec(cls("JavaCodec"), lambda o: ser(*arrays(o)),
                                           lambda t: (t.ia, t.sa))
    if "protobuf-java" not in absent:
        proto = cls("ProtoCodec")
        out["protobuf-java"] = _codec(proto, lambda o: proto.build(*arrays(o)),
                                      lambda m: (proto.ia(m), proto.sa(m)))
    if "xstream" not in absent:
        target = cls("TargetObject")
        out["xstream"] = _codec(cls("XStreamCodec"), lambda o: target(*arrays(o)),
                                lambda t: (t.ia, t.sa))
    return out
