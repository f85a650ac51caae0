"""The planted bugs themselves: each shows its one symptom, which the real queue does not.

The layers' own tests (``test_stateful_*``, ``test_exhaustive``, ``test_contracts``) show that
every layer reports every planted bug. These tests pin down what each bug *is*, so that a
layer reporting it is reporting that defect, and a bug that stopped misbehaving (after a change
to the production queue it copies from) would be noticed here first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from specs.bug_matrix import MISSES
from specs.model import SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from verified_queue.block import Block
from verified_queue.cli import selfcheck
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
)
from verified_queue.queue import FreeBlockQueue

Queue = type[FreeBlockQueue[Any]]


def blocks(count: int) -> list[SpecBlock]:
    return [SpecBlock(number) for number in range(count)]


def popleft_leaves_links(queue_type: Queue) -> bool:
    """A popped block still has links."""
    first, second = blocks(2)
    popped = queue_type([first, second]).popleft()
    return popped.prev_free_block is not None or popped.next_free_block is not None


def remove_forgets_count(queue_type: Queue) -> bool:
    """The count does not drop after a remove."""
    first, second = blocks(2)
    queue = queue_type([first, second])
    queue.remove(first)
    return len(queue) != 1


def append_n_wrong_neighbour(queue_type: Queue) -> bool:
    """The last block of a batch links back past its predecessor."""
    first, second, third = blocks(3)
    queue = queue_type([first])
    queue.append_n([second, third])
    return third.prev_free_block is not second


def popleft_n_off_by_one(queue_type: Queue) -> bool:
    """Popping exactly every block is refused."""
    queue = queue_type(blocks(2))
    try:
        queue.popleft_n(2)
    except EmptyQueueError:
        return True
    return False


def sentinel_returned(queue_type: Queue) -> bool:
    """An empty queue hands out a sentinel instead of raising."""
    try:
        queue_type().popleft()
    except EmptyQueueError:
        return False
    return True


def append_skips_double_free_check(queue_type: Queue) -> bool:
    """Freeing a block that is already free is accepted."""
    (block,) = blocks(1)
    queue = queue_type([block])
    try:
        queue.append(block)
    except AlreadyInQueueError:
        return False
    return True


def append_n_not_atomic(queue_type: Queue) -> bool:
    """A refused batch leaves its first blocks linked into the chain."""
    first, second = blocks(2)
    queue = queue_type([first])
    try:
        queue.append_n([second, first])
    except AlreadyInQueueError:
        return second.prev_free_block is not None and first.next_free_block is second
    return True


def remove_accepts_sentinel(queue_type: Queue) -> bool:
    """Removing the tail sentinel is not refused with NotInQueueError."""
    queue = queue_type(blocks(1))
    try:
        queue.remove(queue.fake_free_list_tail)
    except NotInQueueError:
        return False
    except Exception:  # the wrong exception is the symptom too
        return True
    return True


def prepend_n_reversed(queue_type: Queue) -> bool:
    """A prepended batch of two starts the queue in the opposite order."""
    first, second, third = blocks(3)
    queue = queue_type([third])
    queue.prepend_n([first, second])
    front = queue.get_all_free_blocks()[:2]
    return front[0] is not first or front[1] is not second


def prepend_n_not_atomic(queue_type: Queue) -> bool:
    """A refused prepended batch leaves its first blocks linked."""
    first, second = blocks(2)
    queue = queue_type([first])
    try:
        queue.prepend_n([second, first])
    except AlreadyInQueueError:
        return second.prev_free_block is not None
    return True


def iter_blocks_after_yields_cursor(queue_type: Queue) -> bool:
    """Iterating after a block yields that block itself first."""
    first, second = blocks(2)
    queue = queue_type([first, second])
    return next(queue.iter_blocks_after(first), None) is first


def iter_blocks_after_checks_lazily(queue_type: Queue) -> bool:
    """A detached cursor is not refused by the call itself."""
    (block,) = blocks(1)
    queue = queue_type()
    try:
        queue.iter_blocks_after(block)
    except NotInQueueError:
        return False
    return True


def popleft_n_allows_negative(queue_type: Queue) -> bool:
    """A negative count is not refused with NegativeCountError."""
    queue = queue_type(blocks(1))
    try:
        queue.popleft_n(-1)
    except NegativeCountError:
        return False
    return True


def append_guard_reads_next_only(queue_type: Queue) -> bool:
    """Another queue's tail sentinel is appended, though a double free is refused."""
    (block,) = blocks(1)
    queue = queue_type([block])
    tail = FreeBlockQueue[SpecBlock]().fake_free_list_tail
    if not _refused(AlreadyInQueueError, lambda: queue.append(block)):
        return False
    return not _refused(AlreadyInQueueError, lambda: queue.append(tail))


def prepend_n_guard_reads_prev_only(queue_type: Queue) -> bool:
    """A batch holding another queue's head sentinel is prepended."""
    queue = queue_type(blocks(1))
    head = FreeBlockQueue[SpecBlock]().fake_free_list_head
    return not _refused(AlreadyInQueueError, lambda: queue.prepend_n([head]))


def iter_blocks_after_guard_reads_next_only(queue_type: Queue) -> bool:
    """Another queue's head is taken as a cursor, though a detached block is refused."""
    (detached,) = blocks(1)
    queue = queue_type(blocks(1))
    head = FreeBlockQueue[SpecBlock]().fake_free_list_head
    if not _refused(NotInQueueError, lambda: queue.iter_blocks_after(detached)):
        return False
    return not _refused(NotInQueueError, lambda: queue.iter_blocks_after(head))


def append_n_undo_clears_next_only(queue_type: Queue) -> bool:
    """After a refused batch the chain is whole again, but a block of the batch links back."""
    first, second = blocks(2)
    queue = queue_type([first])
    if not _refused(AlreadyInQueueError, lambda: queue.append_n([second, first])):
        return False
    rejoined = first.next_free_block is queue.fake_free_list_tail
    return rejoined and second.prev_free_block is not None


def prepend_n_undo_leaves_tail_link(queue_type: Queue) -> bool:
    """After a refused prepended batch the tail's outer link still names a block of it."""
    first, second = blocks(2)
    queue = queue_type([first])
    if not _refused(AlreadyInQueueError, lambda: queue.prepend_n([second, first])):
        return False
    detached = second.prev_free_block is None and second.next_free_block is None
    return queue.fake_free_list_tail.next_free_block is second and detached


def prepend_n_counts_before_linking(queue_type: Queue) -> bool:
    """A refused prepended batch changes the count."""
    first, second = blocks(2)
    queue = queue_type([first])
    if not _refused(AlreadyInQueueError, lambda: queue.prepend_n([second, first])):
        return False
    return len(queue) != 1


def popleft_n_shares_empty_result(queue_type: Queue) -> bool:
    """A list a caller extended comes back from a later ``popleft_n(0)``."""
    block, first_kept, second_kept = blocks(3)
    first = queue_type([first_kept]).popleft_n(0)
    first.append(block)
    again = queue_type([second_kept]).popleft_n(0)
    shared = again is first and len(again) == 1
    first.clear()  # the shared list, if it is one, is empty again for later callers
    return shared


def popleft_n_reuses_buffer(queue_type: Queue) -> bool:
    """The list an earlier ``popleft_n`` returned changes at the next call."""
    first, second, third = blocks(3)
    queue = queue_type([first, second, third])
    taken = queue.popleft_n(1)
    queue.popleft_n(1)
    return len(taken) != 1 or taken[0] is not first


def get_all_free_blocks_reuses_list(queue_type: Queue) -> bool:
    """A listing taken earlier changes at the next ``get_all_free_blocks``."""
    queue = queue_type(blocks(2))
    listing = queue.get_all_free_blocks()
    queue.popleft()
    queue.get_all_free_blocks()
    return len(listing) != 2


def constructor_not_atomic_for_iterables(queue_type: Queue) -> bool:
    """Refused from an iterator, not from a list, a queue leaves a block of its batch linked."""
    listed, iterated = blocks(2)
    if not _refused(AlreadyInQueueError, lambda: queue_type([listed, listed])):
        return False
    if not _refused(AlreadyInQueueError, lambda: queue_type(iter([iterated, iterated]))):
        return False
    return listed.prev_free_block is None and iterated.prev_free_block is not None


def constructor_skips_link_check(queue_type: Queue) -> bool:
    """A queue is built from a list that names one block twice."""
    (block,) = blocks(1)
    return not _refused(AlreadyInQueueError, lambda: queue_type([block, block]))


def iter_yields_head_sentinel(queue_type: Queue) -> bool:
    """Iteration yields the head sentinel first."""
    queue = queue_type(blocks(1))
    return next(iter(queue)) is queue.fake_free_list_head


def _refused(error: type[Exception], call: Callable[[], object]) -> bool:
    """Whether ``call`` raises ``error`` (any other exception counts as not refused)."""
    try:
        call()
    except error:
        return True
    except Exception:  # a crash instead of the refusal is a symptom too
        return False
    return False


@dataclass(eq=True, slots=True)
class ValueBlock(Block):
    """A block with a generated ``__eq__``, like vLLM's dataclass blocks: equal by value."""

    block_id: int


def contains_compares_by_value(queue_type: Queue) -> bool:
    """A different block with equal fields is reported as in the queue."""
    queue = queue_type([ValueBlock(1)])
    return ValueBlock(1) in queue


SYMPTOMS: dict[str, Callable[[Queue], bool]] = {
    "popleft_leaves_links": popleft_leaves_links,
    "remove_forgets_count": remove_forgets_count,
    "append_n_wrong_neighbour": append_n_wrong_neighbour,
    "popleft_n_off_by_one": popleft_n_off_by_one,
    "sentinel_returned": sentinel_returned,
    "append_skips_double_free_check": append_skips_double_free_check,
    "append_n_not_atomic": append_n_not_atomic,
    "remove_accepts_sentinel": remove_accepts_sentinel,
    "contains_compares_by_value": contains_compares_by_value,
    "prepend_n_reversed": prepend_n_reversed,
    "prepend_n_not_atomic": prepend_n_not_atomic,
    "iter_blocks_after_yields_cursor": iter_blocks_after_yields_cursor,
    "iter_blocks_after_checks_lazily": iter_blocks_after_checks_lazily,
    "popleft_n_allows_negative": popleft_n_allows_negative,
    "append_guard_reads_next_only": append_guard_reads_next_only,
    "prepend_n_guard_reads_prev_only": prepend_n_guard_reads_prev_only,
    "iter_blocks_after_guard_reads_next_only": iter_blocks_after_guard_reads_next_only,
    "append_n_undo_clears_next_only": append_n_undo_clears_next_only,
    "prepend_n_undo_leaves_tail_link": prepend_n_undo_leaves_tail_link,
    "prepend_n_counts_before_linking": prepend_n_counts_before_linking,
    "popleft_n_shares_empty_result": popleft_n_shares_empty_result,
    "popleft_n_reuses_buffer": popleft_n_reuses_buffer,
    "get_all_free_blocks_reuses_list": get_all_free_blocks_reuses_list,
    "constructor_not_atomic_for_iterables": constructor_not_atomic_for_iterables,
    "constructor_skips_link_check": constructor_skips_link_check,
    "iter_yields_head_sentinel": iter_yields_head_sentinel,
}


def test_every_planted_bug_has_a_symptom() -> None:
    """There are at least the six required planted bugs, and each has a symptom test here."""
    assert set(SYMPTOMS) == set(PLANTED_BUGS)
    assert len(PLANTED_BUGS) >= 6


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_shows_its_symptom(bug: str) -> None:
    """Each planted bug misbehaves in exactly the way its name says."""
    assert SYMPTOMS[bug](PLANTED_BUGS[bug])


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_real_queue_does_not_show_the_symptom(bug: str) -> None:
    """The production queue passes every symptom check, so each symptom is a real defect."""
    assert not SYMPTOMS[bug](FreeBlockQueue)


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_shows_no_other_symptom(bug: str) -> None:
    """A planted bug has one defect: it passes the symptom checks of every other bug."""
    for other, symptom in SYMPTOMS.items():
        if other != bug:
            assert not symptom(PLANTED_BUGS[bug]), f"{bug} also shows {other}"


# The self-check's blocks compare by identity, so ``==`` and ``is`` agree on them: the bugs
# out of its reach are listed, with the reason, in specs.bug_matrix.MISSES.
SELF_CHECK_BUGS = sorted(
    set(PLANTED_BUGS) - {bug for layer, bug in MISSES if layer == "self-check"}
)


@pytest.mark.parametrize("bug", SELF_CHECK_BUGS)
def test_self_check_catches_planted_bug(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m verified_queue``'s self-check reports every bug in an operation it runs."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", PLANTED_BUGS[bug])
    assert selfcheck.run_self_check(operations=2000).mismatch is not None
