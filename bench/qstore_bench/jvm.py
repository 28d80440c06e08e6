"""The one JVM of a qstore-bench process, through JPype.

JPype starts a JVM once per process and cannot restart it or widen its
class path afterwards, so the first use starts it with every jar any JVM
peer needs that Debian has installed under /usr/share/java; classes built
at run time (the codecs' TargetObject) are loaded through a class loader
of their own (see load_compiled)."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Any, Optional

JAVA_DIR = "/usr/share/java"
# jar -> the Debian package that installs it
JARS = {
    "derby.jar": "libderby-java",
    "db-je.jar": "libdb-je-java",
    "sqlite-jdbc.jar": "libxerial-sqlite-jdbc-java",
    "xstream.jar": "libxstream-java",
    "xpp3.jar": "libxpp3-java",
    "protobuf.jar": "libprotobuf-java",
}
JRE_HINT = "apt-get install openjdk-17-jre-headless && pip install jpype1"
_lock = threading.Lock()


def jar(name: str) -> str:
    return os.path.join(JAVA_DIR, name)


def missing(*jars: str) -> Optional[str]:
    """Why the JVM or one of these jars cannot be used here, or None."""
    try:
        import jpype  # type: ignore[import-untyped, unused-ignore]
    except ImportError as e:
        return f"jpype is not importable ({e}); install: {JRE_HINT}"
    try:
        jpype.getDefaultJVMPath()
    except Exception as e:   # JVMNotFoundException and kin
        return f"no JVM found ({e}); install: {JRE_HINT}"
    for j in jars:
        if not os.path.exists(jar(j)):
            return f"{jar(j)} is not installed; install: apt-get install {JARS[j]}"
    if jpype.isJVMStarted():
        started = str(jpype.java.lang.System.getProperty("java.class.path"))
        absent = [j for j in jars if jar(j) not in started.split(os.pathsep)]
        if absent:
            return (f"the JVM of this process started without {', '.join(absent)} "
                    "(JPype cannot restart it)")
    return None


def start() -> Any:
    """The jpype module, with the JVM started (once) on every jar present."""
    import jpype  # type: ignore[import-untyped, unused-ignore]

    with _lock:
        if not jpype.isJVMStarted():
            present = [jar(j) for j in JARS if os.path.exists(jar(j))]
            # strings stay java.lang.String until asked: no conversion per call
            jpype.startJVM(classpath=present, convertStrings=False)
    return jpype


def version() -> str:
    jpype = start()
    return f"JVM {jpype.java.lang.System.getProperty('java.version')}"


def jar_version(name: str) -> str:
    """The version of the Debian package that installed the jar (the jars'
    own manifests do not agree on where to say it)."""
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", JARS[name]],
                           capture_output=True, text=True, timeout=30)
    except OSError:
        return "?"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "?"


def compile_java(sources: dict[str, str], classpath: list[str],
                 protos: Optional[dict[str, str]] = None) -> str:
    """Compiles Java sources (file name -> text), and the Java classes
    protoc makes of protos (file name -> text), into a new temp directory;
    returns it.  RuntimeError naming the tool when one is missing or fails.
    The directory is removed when the process exits (a class loader reads
    it lazily until then), or at once when compiling fails."""
    out = tempfile.mkdtemp(prefix="qbench-java-")
    try:
        _compile(out, sources, classpath, protos)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return out


def _compile(out: str, sources: dict[str, str], classpath: list[str],
             protos: Optional[dict[str, str]]) -> None:
    src = os.path.join(out, "src")
    os.makedirs(src)
    for name, text in {**sources, **(protos or {})}.items():
        with open(os.path.join(src, name), "w") as f:
            f.write(text)
    files = [os.path.join(src, n) for n in sources]
    if protos:
        protoc = shutil.which("protoc")
        if not protoc:
            raise RuntimeError("protoc is not installed; install: apt-get install "
                               "protobuf-compiler")
        _run([protoc, f"--proto_path={src}", f"--java_out={src}"] +
             [os.path.join(src, n) for n in protos])
        for root, _, names in os.walk(src):
            files += [os.path.join(root, n) for n in names if n.endswith(".java")
                      and os.path.join(root, n) not in files]
    javac = shutil.which("javac")
    if not javac:
        raise RuntimeError("javac is not installed; install: apt-get install "
                           "openjdk-17-jdk-headless")
    _run([javac, "-nowarn", "-encoding", "UTF-8", "-d", out, "-cp",
          os.pathsep.join(classpath)] + files)


def _run(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed ({p.returncode}): "
                           f"{(p.stderr or p.stdout)[-800:]}")


def load_compiled(directory: str) -> Any:
    """A class loader over directory (compiled after the JVM started),
    whose parent is the system loader with the jars; pass it to
    jpype.JClass(name, loader=...)."""
    jpype = start()
    url = jpype.java.io.File(directory).toURI().toURL()
    return jpype.java.net.URLClassLoader([url], jpype.java.lang.ClassLoader.getSystemClassLoader())
