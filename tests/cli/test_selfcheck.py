"""The self-check that ``python -m verified_queue`` runs is not vacuous: it reports planted bugs.

Each planted bug of ``specs/planted_bugs/`` replaces the queue the self-check drives, and the
report must name the first difference from the list model, of the kind the bug causes. Every
planted bug the self-check reaches is run by ``tests/verification/test_planted_bugs.py``; the
one out of its reach, ``contains_compares_by_value``, is explained in
``specs.bug_matrix.MISSES`` (its blocks compare by identity, so ``==`` and ``is`` agree on them).

The self-check also predicts each refusal's message word for word; the message bugs at
the end replace one builder of ``verified_queue._messages`` with a wrong one (the wrong
block, operation, numbers or reason) and leave every class and every link right.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import verified_queue
from specs.planted_bugs import PLANTED_BUGS
from verified_queue import FreeBlockQueue
from verified_queue import _messages as messages
from verified_queue import queue as queue_module
from verified_queue.cli import selfcheck
from verified_queue.errors import AlreadyInQueueError, EmptyQueueError, NotInQueueError

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


# ------------------------------------------------------------ planted message bugs


def _names_the_last_linked(
    operation: str, block: object, last: object = None, before: object = None
) -> AlreadyInQueueError:
    """already_linked naming the block the batch linked last instead of the one refused."""
    named = block if last is None or last is before else last
    return messages.already_linked(operation, named, last, before)


def _always_remove(operation: str, block: object) -> NotInQueueError:  # noqa: ARG001 -- the bug
    """not_linked naming ``remove`` whatever the operation was."""
    return messages.not_linked("remove", block)


def _swapped_counts(count: int, available: int) -> EmptyQueueError:
    """too_few_blocks with its two numbers passed in the wrong order."""
    return messages.too_few_blocks(available, count)


#: A builder of ``verified_queue._messages`` replaced in the module that calls it, by a
#: wrong one: (module, name, the wrong builder, the words the self-check's report must hold).
MESSAGE_BUGS: dict[str, tuple[ModuleType, str, Callable[..., object], str]] = {
    "already_linked names the wrong block": (
        queue_module,
        "already_linked",
        _names_the_last_linked,
        "it is repeated in the batch",
    ),
    "not_linked names the wrong operation": (
        queue_module,
        "not_linked",
        _always_remove,
        "iter_blocks_after(_Numbered(",
    ),
    "too_few_blocks swaps its numbers": (
        queue_module,
        "too_few_blocks",
        _swapped_counts,
        "raised EmptyQueueError('popleft_n(",
    ),
    "a sentinel refused as a double free": (
        messages,
        "is_sentinel",
        lambda value: False,  # noqa: ARG005 -- the bug: nothing is a sentinel
        "it is a queue sentinel",
    ),
}


@pytest.mark.parametrize("bug", sorted(MESSAGE_BUGS))
def test_self_check_reports_a_wrong_message(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder that words a refusal wrongly, class and all else right, fails the self-check."""
    module, name, wrong, words = MESSAGE_BUGS[bug]
    if module is queue_module and verified_queue.COMPILED:
        pytest.skip("compiled calls between module functions are bound, not looked up by name")
    monkeypatch.setattr(module, name, wrong)
    report = selfcheck.run_self_check(operations=20_000)
    assert report.mismatch is not None
    assert ", the list expected " in report.mismatch
    assert words in report.mismatch, report.mismatch
    assert report.operations < 20_000  # it stopped at the first difference
