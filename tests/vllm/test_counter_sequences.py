"""vLLM's counter in check mode through every short history: ``specs/exhaustive_counter.py``."""

from __future__ import annotations

import pytest

from specs.exhaustive_counter import actions, check_counter
from specs.planted_bugs.new_code import NEW_CODE_CATALOGUE, planted
from verified_queue import COMPILED


def test_every_short_history_follows_the_model() -> None:
    """Every sequence of up to 3 actions, on both queues, full and empty: as the model says."""
    report = check_counter(depth=3, blocks=3)
    assert report.counterexample is None, report.counterexample
    assert report.sequences > 4 * len(actions(3)) ** 2


@pytest.mark.skipif(
    COMPILED, reason="a planted bug swaps Python code, which the compiled build lacks"
)
@pytest.mark.parametrize(
    "name", [name for name, bug in NEW_CODE_CATALOGUE.items() if bug.area == "adapter"]
)
def test_every_planted_counter_bug_is_found(name: str) -> None:
    """Each planted bug of vLLM's counter fails some sequence of two actions."""
    with planted(NEW_CODE_CATALOGUE[name]):
        assert check_counter(depth=2).counterexample is not None
