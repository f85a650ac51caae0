"""Weakened checkers disagree with the definitional oracle: each extension catches one.

Weakened checkers (one test deleted from ``invariants.py``'s or ``checked.py``'s own
source, or a planted checker bug of ``specs.planted_bugs.checkers``) are shown to disagree
with the oracle of ``tests/checks/heap_oracle_support.py`` on the heaps of 3 blocks: each
extension of the oracle catches one.

``python tests/checks/test_heap_oracle_weakened.py`` prints how many heaps each disagrees on.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from specs.planted_bugs.checkers import CHECKER_CATALOGUE, planted
from tests.checks.heap_oracle_support import (
    PAIRS,
    PURE_ONLY,
    Checker,
    Exploration,
    Pair,
    _total_heaps,
    explore,
    full_check,
    settings,
)
from verified_queue import _diagnosis, checked, invariants
from verified_queue.checked import CheckedFreeBlockQueue


@dataclass(frozen=True)
class Weakening:
    """One test deleted from a checker module's source, and the pair whose oracle judges it."""

    module: ModuleType
    deleted: str
    stand_in: str
    pair: str


#: One test deleted from the checkers' source each.
WEAKENINGS: dict[str, Weakening] = {
    "no tail back-link test": Weakening(
        invariants, "    if before_tail is not previous:\n", "    if False:\n", "check_invariants"
    ),
    "a bool passes as a count": Weakening(
        invariants,
        " or isinstance(count, bool) or count < 0:",
        " or count < 0:",
        "check_invariants",
    ),
    "another queue's sentinel passes as a block": Weakening(
        invariants,
        "    if isinstance(node, Sentinel) or not is_block(node):\n",
        "    if not is_block(node):\n",
        "check_invariants",
    ),
    "check_invariants ignores its pool": Weakening(
        invariants,
        "    if pool is not None:\n        check_detached_outside(queue, pool)\n",
        "",
        "check_invariants with a pool",
    ),
    "a pool block in the queue is not skipped": Weakening(
        invariants,
        "        if id(block) in members:\n            continue\n",
        "",
        "check_invariants with a pool",
    ),
    "the one-walk check trusts the chain": Weakening(
        checked,
        "            for _ in range(count):\n"
        "                if id(node) not in members or node.prev_free_block is not previous:",
        "            for _ in range(count):\n"
        "                if node.prev_free_block is not previous:",
        "full_check",
    ),
    "a non-member reported at the wrong position": Weakening(
        _diagnosis,
        "        block = block.next_free_block  # type: ignore[union-attr]  # checked above\n"
        "        position += 1\n",
        "        block = block.next_free_block  # type: ignore[union-attr]  # checked above\n",
        "full_check",
    ),
}

#: Planted checker bugs of ``specs.planted_bugs.checkers`` in what the extensions cover,
#: each with the pair whose oracle judges it.
PLANTED = {
    "detached_outside_reads_prev_only": "check_invariants with a pool",
    "full_check_skips_membership": "full_check",
    "full_check_counts_by_value": "full_check",
}


def weakened_module(weakening: str) -> dict[str, Any]:
    """The namespace of the weakened module's source, compiled with one test deleted."""
    spec = WEAKENINGS[weakening]
    source = inspect.getsource(spec.module)
    if "__mutmut_" in source:
        pytest.skip("under mutmut, the module's source holds every mutant as well")
    assert source.count(spec.deleted) == 1, f"the test to delete is not there: {spec.deleted!r}"
    namespace: dict[str, Any] = {"__name__": f"weakened_{spec.module.__name__.rsplit('.')[-1]}"}
    exec(compile(source.replace(spec.deleted, spec.stand_in), "<weakened>", "exec"), namespace)
    if spec.module is _diagnosis:
        # Check mode's full check calls the diagnosis through the name ``_diagnosis``: a copy
        # of checked.py whose name is the weakened diagnosis.
        diagnosis = namespace
        namespace = {"__name__": "checked_with_weakened_diagnosis"}
        exec(compile(inspect.getsource(checked), "<checked>", "exec"), namespace)
        namespace["_diagnosis"] = SimpleNamespace(**diagnosis)
    return namespace


def disagreements_at_three(
    pair: Pair, checker: Checker, checked_class: type[CheckedFreeBlockQueue[Any]]
) -> Exploration:
    """Explore every heap of 3 blocks in every setting of ``pair``; add up what was found."""
    total = Exploration()
    for setting in settings(pair, 3).values():
        found = explore(3, checker, pair.reference, setting=setting, checked_class=checked_class)
        assert found.heaps == _total_heaps(3)
        total.heaps += found.heaps
        total.leaves += found.leaves
        total.disagreements += found.disagreements
        total.examples += found.examples[: 3 - len(total.examples)]
    return total


def weakened_run(weakening: str) -> Exploration:
    """The weakened checker against its pair's oracle over every heap and setting of 3 blocks."""
    pair = PAIRS[WEAKENINGS[weakening].pair]
    namespace = weakened_module(weakening)
    if pair.takes == "members":
        return disagreements_at_three(pair, full_check, namespace["CheckedFreeBlockQueue"])
    checker: Checker = namespace["check_invariants"]
    return disagreements_at_three(pair, checker, CheckedFreeBlockQueue)


def planted_run(bug: str) -> Exploration:
    """The planted checker bug, installed, against its pair's oracle over heaps of 3 blocks."""
    pair = PAIRS[PLANTED[bug]]
    with planted(CHECKER_CATALOGUE[bug]):
        return disagreements_at_three(pair, pair.checker, CheckedFreeBlockQueue)


@PURE_ONLY
@pytest.mark.parametrize("weakening", WEAKENINGS)
def test_oracle_catches_a_weakened_checker(weakening: str) -> None:
    """A checker missing one test disagrees with the oracle on some heaps of 3 blocks."""
    assert weakened_run(weakening).disagreements > 0, weakening


@PURE_ONLY
@pytest.mark.parametrize("bug", PLANTED)
def test_oracle_catches_a_planted_checker_bug(bug: str) -> None:
    """A planted bug of the pool check or of full_check disagrees with the oracle at 3 blocks."""
    assert planted_run(bug).disagreements > 0, bug


def main() -> None:
    """Print, for each weakened checker and planted bug, the heaps of 3 blocks it disagrees on."""
    runs = {**dict.fromkeys(WEAKENINGS, weakened_run), **dict.fromkeys(PLANTED, planted_run)}
    for label, run in runs.items():
        found = run(label)
        print(
            f"weakened ({label}): disagrees on {found.disagreements:.3e} of "
            f"{found.heaps:.3e} heaps of 3 blocks, e.g. {found.examples[:1]}"
        )


if __name__ == "__main__":
    main()
