"""The plugin machine's model through every short history: ``specs/exhaustive_plugin.py``.

The machine of ``test_plugin_machine.py`` samples long random histories; this runs the same
rules, model and checks through every sequence of up to 3 of its actions (2 with the derived
block, each of whose runs derives a class), each from a new process on the stand-in vLLM 0.34.0.
That it finds each planted bug of the plugin is ``docs/new-code-bug-matrix.md``'s business
(its "plugin sequences" column).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import verified_queue
from specs.exhaustive_plugin import ACTIONS, check_plugin
from tests.vllm.test_plugin_machine import machine, no_example_left, stand_in_layout


@pytest.fixture(autouse=True)
def _no_vllm() -> None:
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a real vllm is loaded in this process")


@pytest.mark.parametrize(
    ("derived", "depth"), [(False, 3), (True, 2)], ids=["vLLM's block", "derived block"]
)
def test_every_short_history_follows_the_model(tmp_path: Path, derived: bool, depth: int) -> None:
    """Every sequence of up to ``depth`` actions: every binding, status and finder as modelled."""
    if verified_queue.COMPILED and not derived:
        pytest.skip("the compiled queue takes Block subclasses only")
    layouts = (stand_in_layout(tmp_path, "0.34.0"),)
    report = check_plugin(machine(layouts, derived), "0.34.0", depth)
    assert report.counterexample is None, report.counterexample
    # Every action runs from the start; the deeper sequences are most of the run.
    assert report.sequences > len(ACTIONS) ** (depth - 1)
    no_example_left()
