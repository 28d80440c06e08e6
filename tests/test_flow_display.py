"""The local runner's live display: the frame made from two looks at a run,
the redraw on a terminal, and nothing but the summary off one."""
from __future__ import annotations

import io

from pyqstore.flow import Flow, IterableSource, QueueSink, run
from pyqstore.flow.display import LiveDisplay, render
from pyqstore.flow.status import (DeadLetters, FlowStatus, InstanceStatus, NodeStatus,
                                  PortStatus)


def look(at: float, items_in: int, items_out: int, waiting: int, dead: int,
         done: bool) -> FlowStatus:
    inst = [InstanceStatus(i, items_in // 2, items_out // 2, 0, done, None, None, None)
            for i in range(2)]
    port = PortStatus("in", "in", None, "flow/in/map/in", waiting - 1, 1, 0, 100)
    nodes = {"map": NodeStatus("map", "node", 2, [port], DeadLetters(dead, ["x"]), inst),
             "src": NodeStatus("src", "source", 1, [], DeadLetters(0),
                               [InstanceStatus(0, 0, items_in, 0, True, None, None, None)])}
    return FlowStatus("f", "shared", "/d", at, nodes)


def test_a_frame_shows_rates_totals_queues_dead_letters_and_done():
    a = look(10.0, 1000, 800, 40, 0, False)
    b = look(12.0, 5000, 4800, 12, 3, True)
    lines = render(b, a, elapsed=7.4)
    assert lines[0] == "flow 'f'  7 s"
    assert lines[1].split() == ["NODE", "IN/S", "OUT/S", "IN", "OUT", "QUEUED", "DEAD"]
    assert lines[2].split() == ["map", "2,000", "2,000", "5,000", "4,800", "12", "3", "DONE"]
    assert lines[3].split() == ["src", "0", "2,000", "0", "5,000", "0", "0", "DONE"]
    first = render(a)                        # no earlier look: no rate yet
    assert first[0] == "flow 'f'" and first[2].split()[:3] == ["map", "-", "-"]
    assert first[2].split()[-1] == "0"       # not finished: no DONE
    assert lines[1].index("DEAD") + 4 == lines[2].rindex("3") + 1   # right-aligned
    assert lines[2].index("DONE") == lines[3].index("DONE")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_frames_are_drawn_over_each_other_on_a_terminal_only():
    tty = Tty()
    d = LiveDisplay(tty)
    assert d.live
    d.update(look(1.0, 10, 10, 5, 0, False))
    d.update(look(2.0, 20, 20, 5, 0, False))
    d.end("the summary")
    frames = tty.getvalue().split("\x1b[4F\x1b[J")  # up over the 4 lines, clear
    assert len(frames) == 3
    assert frames[0].startswith("flow 'f'") and "map" in frames[1] and "10" in frames[1]
    assert frames[2] == "the summary\n"
    pipe = io.StringIO()
    d = LiveDisplay(pipe)
    assert not d.live
    d.update(look(1.0, 10, 10, 5, 0, False))
    d.end("the summary")
    assert pipe.getvalue() == "the summary\n"


def double(batch):
    return [2 * x for x in batch]


def flow() -> Flow:
    f = Flow("shown")
    f.source("src", IterableSource(range(20)))
    f.node("map", double)
    f.sink("out", QueueSink("r"))
    f.edge("src", "map")
    f.edge("map", "out")
    return f


def test_run_off_a_terminal_prints_the_summary_only_and_nothing_with_display_false(
        tmp_path, capsys):
    summary = run(flow(), str(tmp_path / "a"), display=True)
    out = capsys.readouterr().out
    assert out == str(summary) + "\n" and "\x1b" not in out
    assert summary.finished and "map" in out
    summary = run(flow(), str(tmp_path / "b"), display=False)
    assert summary.finished and capsys.readouterr().out == ""
    tty = Tty()
    summary = run(flow(), str(tmp_path / "c"), display=tty)
    assert tty.getvalue().endswith(str(summary) + "\n")
