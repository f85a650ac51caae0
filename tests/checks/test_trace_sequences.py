"""The trace level through every short history: ``specs/exhaustive_trace.py``."""

from __future__ import annotations

import pytest

from specs.exhaustive_trace import check_trace
from specs.planted_bugs.new_code import NEW_CODE_CATALOGUE, planted
from verified_queue import COMPILED


def test_every_short_history_follows_the_reference_recorder() -> None:
    """Every sequence of up to 3 traced calls, refused ones included: as the recorder says."""
    report = check_trace(depth=3)
    assert report.counterexample is None, report.counterexample
    assert report.sequences > 1000


@pytest.mark.skipif(
    COMPILED, reason="a planted bug swaps Python code, which the compiled build lacks"
)
@pytest.mark.parametrize(
    "name", [name for name, bug in NEW_CODE_CATALOGUE.items() if bug.area == "trace"]
)
def test_every_planted_trace_bug_is_found(name: str) -> None:
    """Each planted bug of the trace level fails some sequence of up to 3 calls."""
    with planted(NEW_CODE_CATALOGUE[name]):
        assert check_trace(depth=3).counterexample is not None
