"""The scheduler fuzzer finds each planted allocator bug in vLLM's real Scheduler, and shrinks it.

``tox -e fuzz-vllm`` runs this file where vLLM 0.34.0 and torch's CPU build are
installed; elsewhere it skips. Each bug of :data:`tests.vllm.fuzz_scheduler.PLANTED`
is patched into vLLM's classes for one derandomized run of the machine with check
mode on (the plugin loaded as vLLM's engine loads it), which must fail within the
stated number of examples, under the stated clause, and shrink to at most the
stated number of rules.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the real vLLM and torch: tox -e fuzz-vllm", allow_module_level=True)

from tests.vllm.fuzz_scheduler import PLANTED, Vllm, load, run_planted
from verified_queue import InvariantViolation

# vLLM and torch warn as they import (deprecations of their own): shown, not errors here.
pytestmark = pytest.mark.filterwarnings("default")

#: Rules per example: as in the quick run.
STEPS = 50
#: For each planted bug: the pool clause check mode reports it under, the examples it must
#: be found within, and the most rules its shrunk example may take. Measured with the
#: derandomized runs (docs/measurements.md), then given room: a budget of about three
#: times the example that first failed, a length of about twice the shrunk one.
EXPECTED: dict[str, tuple[str, int, int]] = {
    "decrement-then-filter": ("P2", 10, 4),
    "listed-twice": ("P2", 10, 4),
    "touch-skips-remove": ("P2", 10, 26),
    "eviction-keeps-entry": ("P3", 20, 14),
    "null-block-freed": ("P1", 10, 4),
}


@pytest.fixture(scope="module")
def vllm() -> Vllm:
    """vLLM and its test helpers, loaded once, the plugin in check mode."""
    return load()


def test_every_planted_bug_has_an_expectation() -> None:
    """No planted bug goes untested, and no expectation names a bug that is not planted."""
    assert set(EXPECTED) == set(PLANTED)


@pytest.mark.parametrize("name", list(PLANTED))
def test_the_fuzzer_finds_the_planted_bug_and_shrinks_it(vllm: Vllm, name: str) -> None:
    """Found by check mode within its budget of examples, under its clause, shrunk short."""
    clause, budget, longest = EXPECTED[name]
    outcome = run_planted(vllm, PLANTED[name], budget, STEPS)
    print(
        f"{name}: first failing example {outcome.stats.first_failure}, shrunk to "
        f"{outcome.shrunk_length} rules\n{outcome.report}"
    )
    error: Any = outcome.error
    assert error is not None, f"{name}: nothing found in {budget} examples"
    assert isinstance(error, InvariantViolation), f"{name}: {error!r}"
    assert (error.invariant, error.clause) == ("block_pool", clause)
    assert outcome.stats.first_failure is not None
    assert outcome.stats.first_failure <= budget
    assert outcome.shrunk_length is not None
    assert 1 <= outcome.shrunk_length <= longest
