"""The self-check that ``python -m verified_queue`` runs is not vacuous: it reports planted bugs.

Each planted bug of ``specs/planted_bugs/`` replaces the queue the self-check drives, and the
report must name the first difference from the list model, of the kind the bug causes. Every
planted bug the self-check reaches is run by ``tests/verification/test_planted_bugs.py``; the
one out of its reach, ``contains_compares_by_value``, is explained in
``specs.bug_matrix.MISSES`` (its blocks compare by identity, so ``==`` and ``is`` agree on them).
"""

from __future__ import annotations

from typing import Any

import pytest

from specs.planted_bugs import PLANTED_BUGS
from verified_queue import FreeBlockQueue
from verified_queue.cli import selfcheck

# The planted bug, and the words the self-check's report must contain for it.
CAUGHT = {
    "popleft_leaves_links": "is not in the queue but still has links",
    "remove_forgets_count": "queue holds",
    "append_n_wrong_neighbour": "queue holds",
    "popleft_n_off_by_one": "raised EmptyQueueError",
    "sentinel_returned": "succeeded, the list expected EmptyQueueError",
    "append_skips_double_free_check": "succeeded, the list expected AlreadyInQueueError",
}


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_self_check_reports_the_planted_bug(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-check stops at the planted bug and says how the queue differs from the list."""
    buggy: type[FreeBlockQueue[Any]] = PLANTED_BUGS[name]
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", buggy)
    report = selfcheck.run_self_check(operations=20_000)
    assert report.mismatch is not None
    assert CAUGHT[name] in report.mismatch
    assert report.operations < 20_000  # it stopped at the first difference


@pytest.mark.parametrize("name", ["append_n_not_atomic", "prepend_n_not_atomic"])
def test_self_check_reports_a_non_atomic_batch(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-check reports the broken chain a non-atomic batch leaves, instead of crashing."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", PLANTED_BUGS[name])
    report = selfcheck.run_self_check(operations=20_000)
    assert report.mismatch is not None
    assert "the chain from the head reaches None" in report.mismatch


def test_the_production_queue_passes_the_same_run() -> None:
    """The run that catches each planted bug finds nothing on the production queue."""
    assert selfcheck.run_self_check(operations=20_000).mismatch is None
