"""The local runner's live display: one frame a second on a terminal, each
node's items in and out per second, the items waiting in its input ports,
its dead letters and whether it finished; the run's summary at the end.

:func:`render` makes a frame from two looks at the run
(:class:`~pyqstore.flow.status.FlowStatus`, a second apart), without the
terminal; :class:`LiveDisplay` draws frames over each other with plain
ANSI cursor movements, and draws nothing on a stream that is not a
terminal (a pipe, a log file), where only the summary is written."""
from __future__ import annotations

from typing import Any, Optional, TextIO

from .status import FlowStatus

__all__ = ["render", "LiveDisplay"]

_UP_AND_CLEAR = "\x1b[{n}F\x1b[J"     # to the start of the line n up, clear below


def _rate(now: int, before: Optional[int], dt: float) -> str:
    if before is None or dt <= 0:
        return "-"
    return f"{(now - before) / dt:,.0f}"


def render(now: FlowStatus, before: Optional[FlowStatus] = None,
           elapsed: Optional[float] = None) -> list[str]:
    """The lines of one frame: per node its rates in and out (items per
    second between before and now; "-" without before), its totals, the
    items in its input ports (available, reserved and delayed), its dead
    letters and DONE once every instance finished."""
    dt = now.taken_at - before.taken_at if before is not None else 0.0
    head = ["NODE", "IN/S", "OUT/S", "IN", "OUT", "QUEUED", "DEAD", ""]
    rows = []
    for name, n in now.nodes.items():
        b = before.nodes.get(name) if before is not None else None
        rows.append([name,
                     _rate(n.items_in, b.items_in if b else None, dt),
                     _rate(n.items_out, b.items_out if b else None, dt),
                     f"{n.items_in:,}", f"{n.items_out:,}", f"{n.depth:,}",
                     f"{n.dead_letters.count:,}", "DONE" if n.finished else ""])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"flow {now.flow!r}" + (f"  {elapsed:.0f} s" if elapsed is not None else "")]
    for r in [head] + rows:
        lines.append("  ".join([r[0].ljust(widths[0])] +
                               [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])] +
                               [r[-1]]).rstrip())
    return lines


class LiveDisplay:
    """Frames on stream when it is a terminal, then the summary."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        isatty = getattr(stream, "isatty", None)
        self.live = bool(isatty and isatty())
        self._drawn = 0
        self._before: Optional[FlowStatus] = None

    def update(self, now: FlowStatus, elapsed: Optional[float] = None) -> None:
        """Draw the frame of now over the last one (nothing off a
        terminal)."""
        if not self.live:
            return
        lines = render(now, self._before, elapsed)
        self._before = now
        up = _UP_AND_CLEAR.format(n=self._drawn) if self._drawn else ""
        self.stream.write(up + "\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def end(self, summary: Any) -> None:
        """Replace the frame by the summary (its str)."""
        up = _UP_AND_CLEAR.format(n=self._drawn) if self._drawn else ""
        self.stream.write(up + str(summary) + "\n")
        self.stream.flush()
        self._drawn = 0
