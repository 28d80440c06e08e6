"""redis-benchmark, the C tool that ships with Redis (Debian's redis-tools),
run against the server a perf session started: seed 001 ran it beside its
Java client and put the gap down to "the language and/or the client"."""
from __future__ import annotations

import csv
import io
import math
import shutil
import subprocess
from typing import Optional

EXE = "redis-benchmark"
HINT = "apt-get install redis-tools"


def unavailable() -> Optional[str]:
    return None if shutil.which(EXE) else f"{EXE} is not installed; install: {HINT}"


def version() -> str:
    out = subprocess.run([EXE, "--version"], capture_output=True, text=True, timeout=30)
    words = out.stdout.split()
    return words[1] if len(words) > 1 else "?"


def command(port: int, requests: int, value_size: int, clients: int) -> list[str]:
    """SET then GET, `requests` each, values of value_size bytes, keys drawn
    from as many as the Python rows write (-r), `clients` connections, one
    request in flight per connection (-P 1: no pipelining, as redis-py's
    rows)."""
    return [EXE, "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-n", str(requests),
            "-d", str(value_size), "-r", str(requests), "-c", str(clients), "-P", "1", "--csv"]


def parse_csv(text: str) -> dict[str, float]:
    """{"SET": requests/s, "GET": requests/s} from --csv output: a header
    line ("test","rps",...) in redis 6 and later, none in older ones."""
    rates: dict[str, float] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 2 or row[0] == "test":
            continue
        try:
            rates[row[0].upper()] = float(row[1])
        except ValueError:
            raise ValueError(f"{EXE}: not a rate in {row!r}") from None
    missing = {"SET", "GET"} - set(rates)
    if missing:
        raise ValueError(f"{EXE}: no {', '.join(sorted(missing))} row in its output {text!r}")
    return rates


#: redis-benchmark times each test with a millisecond clock
TICK = 0.001


def measurable(rates: dict[str, float], requests: int) -> dict[str, float]:
    """The rates with "inf" replaced by requests per TICK.  The tool prints
    inf for a test that ended within one tick of its clock (a --small run
    of 20 requests on a fast machine), and the report's rows divide by the
    seconds it implies: the most the tool can tell is that many per tick
    (a lower bound)."""
    return {k: requests / TICK if math.isinf(v) else v for k, v in rates.items()}


def run(port: int, requests: int, value_size: int, clients: int,
        timeout: float = 600.0) -> dict[str, float]:
    out = subprocess.run(command(port, requests, value_size, clients), capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{EXE} exited with status {out.returncode}: {out.stderr.strip()}")
    return measurable(parse_csv(out.stdout), requests)
