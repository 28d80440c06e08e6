"""Wide Finder's input and its plain answer (seed 004): a web-server log
file made up deterministically, the blocks of whole lines it is read in,
and the single-threaded loop over the file that is the seed's baseline.

This module is shared on purpose: `qstore-bench drain` uses it today, and
the flow layer's Wide Finder (issue 14) is to use the same generator and
the same baseline, so that its result can be checked against
count_baseline() and its time read against the same loop.  It depends on
nothing but the standard library.

The question asked of the log is Wide Finder's: which articles are fetched
most?  A line counts when it holds a GET of an article under
/ongoing/When/; its key is the article's date and name (KEY's group).
"""
from __future__ import annotations

import os
import random
import re
import time
from collections import Counter
from typing import Callable, Iterator, Optional

# Wide Finder's regular expression (Tim Bray's, as in every entry)
KEY = re.compile(rb"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) ")

_ARTICLES = [f"{2003 + i % 8}/{1 + i % 12:02d}/{1 + i % 28:02d}/Article{i}" for i in range(400)]
_WEIGHTS = [1.0 / (i + 1) ** 1.1 for i in range(len(_ARTICLES))]    # a few articles are hot
_OTHERS = ["/ongoing/ongoing.atom", "/favicon.ico", "/ongoing/picInfo.xml?o=http",
           "/robots.txt", "/ongoing/When/200x/2006/05/16/J1d0.jpg"]


def _lines(seed: int) -> Iterator[bytes]:
    """An endless deterministic stream of log lines (each ending in a
    newline): about 60% article fetches with a skewed popularity, the rest
    other requests (including an image under /ongoing/When/ that KEY must
    not count)."""
    rng = random.Random(seed)
    i = 0
    while True:
        ip = f"{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{i % 250}"
        if rng.random() < 0.6:
            a = rng.choices(_ARTICLES, _WEIGHTS)[0]
            path = f"/ongoing/When/{a[:3]}x/{a}"
        else:
            path = rng.choice(_OTHERS)
        yield (f'{ip} - - [14/Nov/2007:06:{i % 60:02d}:{i % 59:02d} -0800] "GET {path} '
               f'HTTP/1.1" 200 {rng.randint(100, 90000)} "-" "Mozilla/5.0"\n').encode()
        i += 1


def generate(path: str, size: int, seed: int = 4) -> int:
    """Writes a log of whole lines to path, as many as fit in size bytes
    (so within one line of it); the same (size, seed) always writes the
    same bytes.  Returns the number of lines."""
    if size < 0:
        raise ValueError(f"size must be >= 0, not {size}")
    written = n = 0
    buf: list[bytes] = []
    with open(path, "wb") as f:
        for line in _lines(seed):
            if written + len(line) > size:
                break
            buf.append(line)
            written += len(line)
            n += 1
            if len(buf) >= 4096:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return n


def split(path: str, parts: int) -> list[tuple[int, int]]:
    """The file cut into `parts` byte ranges [start, stop) of whole lines,
    in order, covering it (a range is empty when the lines are fewer or
    longer than the cut)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, not {parts}")
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            at = max(cuts[-1], size * k // parts)
            if at > 0:
                f.seek(at - 1)
                f.readline()        # to the start of the next line
                at = min(f.tell(), size)
            cuts.append(max(at, cuts[-1]))
    cuts.append(size)
    return list(zip(cuts, cuts[1:]))


def blocks(path: str, block_size: int, start: int = 0,
           stop: Optional[int] = None) -> Iterator[bytes]:
    """The bytes [start, stop) of the file (start at a line's start) in
    blocks of whole lines, each at most block_size bytes unless one line is
    longer (then that line is a block).  A last line without its newline
    ends the last block."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, not {block_size}")
    with open(path, "rb") as f:
        f.seek(start)
        left = (os.path.getsize(path) if stop is None else stop) - start
        carry = b""
        while left > 0:
            long_line = len(carry) >= block_size
            chunk = f.read(min(block_size if long_line else block_size - len(carry), left))
            if not chunk:
                break
            left -= len(chunk)
            data = carry + chunk
            # a long line ends at its first newline; else the block at its last
            cut = (data.find(b"\n", len(carry)) if long_line else data.rfind(b"\n")) + 1
            if cut == 0:
                carry = data
                continue
            carry = data[cut:]
            yield data[:cut]
        if carry:
            yield carry


def count_block(block: bytes) -> Counter[str]:
    """The article fetches in a block of whole lines, by key."""
    return Counter(k.decode() for k in KEY.findall(block))


def count_baseline(path: str, block_size: int = 16 << 20) -> Counter[str]:
    """The seed's baseline: one thread, a plain loop over the file's blocks,
    counting every key; the answer every parallel reading must equal."""
    total: Counter[str] = Counter()
    for block in blocks(path, block_size):
        total.update(count_block(block))
    return total


def timed_baselines(path: str, block_sizes: list[int],
                    progress: Callable[[str], None] = lambda _: None
                    ) -> tuple[list[dict[str, float]], Counter[str]]:
    """count_baseline at each block size, timed: ([{block, seconds}], the
    counts).  AssertionError when two block sizes count differently (the
    blocks would not be whole lines)."""
    if not block_sizes:
        raise ValueError("give at least one block size")
    timings: list[dict[str, float]] = []
    want: Optional[Counter[str]] = None
    for b in block_sizes:
        progress(f"baseline block={b}")
        t0 = time.perf_counter()
        counts = count_baseline(path, b)
        timings.append({"block": b, "seconds": time.perf_counter() - t0})
        if want is not None and counts != want:
            raise AssertionError(f"the baseline counts differently with blocks of {b} bytes")
        want = counts
    assert want is not None
    return timings, want


def top(counts: Counter[str], n: int = 10) -> list[tuple[str, int]]:
    """The n most fetched, ties broken by key (the same list every time)."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
