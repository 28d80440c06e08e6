"""bench/scripts/thread_queue.py: each layout moves every item once, in
order (the script asserts it), and times something."""
from __future__ import annotations

import importlib.util
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "scripts", "thread_queue.py")


def load():
    spec = importlib.util.spec_from_file_location("thread_queue", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("layout", ["one-thread", "one-handle", "two-handles", "queue.Queue"])
def test_every_layout_passes_each_item_once_in_order(tmp_path, layout):
    mod = load()
    pay = mod.payloads(2000)
    seconds = mod.LAYOUTS[layout](str(tmp_path / "q.qs"), pay)
    assert seconds > 0


def test_a_lost_item_fails_the_check(tmp_path):
    mod = load()
    with pytest.raises(AssertionError, match="lost"):
        mod._run(lambda: None, lambda: None, [], [b"x"], [b"x", b"y"])
