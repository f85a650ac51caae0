"""The wording of each kind of invariant violation, pinned once, in full.

Every other test asserts a violation's fields (``clause``, ``where``, ``what``,
``expected``, ``found``); these pin how one diagnostic of each kind reads, so
a change of wording changes this file and nothing else. The blocks are
numbered so the messages read as a user sees them; a sentinel's identity is
filled in as ``{head}`` or ``{tail}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.checks.support import WALK, AppendForgetsCount, error_of, over_faulty
from tests.helpers import NumberedBlock, numbered
from verified_queue import CheckedFreeBlockQueue, InvariantViolation, QueueError, _diagnosis
from verified_queue.invariants import (
    check_count_consistency,
    check_detached_outside,
    check_invariants,
    check_no_duplicates,
)
from verified_queue.queue import FreeBlockQueue


def _queue(size: int) -> tuple[FreeBlockQueue[NumberedBlock], list[NumberedBlock]]:
    blocks = numbered(size)
    return FreeBlockQueue(blocks), blocks


def _checked(size: int) -> tuple[CheckedFreeBlockQueue[NumberedBlock], list[NumberedBlock]]:
    blocks = numbered(size)
    return CheckedFreeBlockQueue(blocks, full_check_every=0), blocks


def back_link() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _queue(3)
    blocks[2].prev_free_block = blocks[0]
    return queue, error_of(lambda: check_invariants(queue))


def outer_link() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _queue(2)
    queue.fake_free_list_tail.next_free_block = blocks[0]
    return queue, error_of(lambda: check_invariants(queue))


def not_a_block_in_the_chain() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _queue(2)
    blocks[0].next_free_block = None
    return queue, error_of(lambda: check_no_duplicates(queue))


def not_a_sentinel() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = _queue(1)
    queue.fake_free_list_tail = queue.fake_free_list_head
    return queue, error_of(lambda: check_invariants(queue))


def cycle() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _queue(4)
    blocks[3].next_free_block = blocks[1]
    return queue, error_of(lambda: check_no_duplicates(queue))


def count_mismatch() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = _queue(2)
    queue.num_free_blocks = 3
    return queue, error_of(lambda: check_count_consistency(queue))


def count_not_a_count() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = _queue(2)
    queue.num_free_blocks = -1
    return queue, error_of(lambda: check_invariants(queue))


def not_detached() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _queue(1)
    outsider = NumberedBlock(7)
    outsider.next_free_block = blocks[0]
    return queue, error_of(lambda: check_detached_outside(queue, [blocks[0], outsider]))


def count_in_check_mode() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = _checked(4)
    queue.num_free_blocks = 5
    return queue, error_of(lambda: len(queue))


def cleared_member() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _checked(3)
    blocks[1].prev_free_block = blocks[1].next_free_block = None
    return queue, error_of(lambda: queue.append(blocks[1]))


def spliced_in() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, blocks = _checked(2)
    intruder = NumberedBlock(9)
    intruder.prev_free_block, intruder.next_free_block = blocks[0], blocks[1]
    blocks[0].next_free_block = blocks[1].prev_free_block = intruder
    return queue, error_of(lambda: queue.remove(intruder))


def count_after_operation() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = over_faulty(AppendForgetsCount, 3)
    return queue, error_of(lambda: queue.append(NumberedBlock(5)))


def raw_error() -> tuple[FreeBlockQueue[Any], QueueError]:
    # A caller's own raw error is raised as production raises it; what is left is a raw
    # error of the operation's own reads that the full check cannot explain.
    queue, _ = _checked(1)
    return queue, _diagnosis.damaged(queue, "remove()", TypeError("no links here"))


def unexplained() -> tuple[FreeBlockQueue[Any], QueueError]:
    queue, _ = _checked(2)
    return queue, error_of(lambda: _diagnosis.check_back(queue, queue._members, "here"))


#: One violation of each kind, and its message in full.
MESSAGES: dict[str, tuple[Callable[[], tuple[FreeBlockQueue[Any], QueueError]], str]] = {
    "skewed back link": (
        back_link,
        f"I1 (sentinel_linkage) broken at position 3 {WALK}: prev_free_block of "
        "NumberedBlock(2): expected NumberedBlock(1) (position 2), found NumberedBlock(0)",
    ),
    "sentinel's outer link": (
        outer_link,
        "I1 (sentinel_linkage) broken at the tail sentinel: next_free_block of this queue's "
        "{tail}: expected None, found NumberedBlock(0)",
    ),
    "no block in the chain": (
        not_a_block_in_the_chain,
        f"I1 (sentinel_linkage) broken at position 2 {WALK}: next_free_block of "
        "NumberedBlock(0) (position 1): expected a block or this queue's tail sentinel, "
        "found None",
    ),
    "no sentinel": (
        not_a_sentinel,
        "I1 (sentinel_linkage) broken at the queue: fake_free_list_tail: "
        "expected a second sentinel, found the head",
    ),
    "cycle": (
        cycle,
        f"I3 (no_duplicates) broken at position 5 {WALK}: NumberedBlock(1) met a second time: "
        "expected every block once, then the tail, found the same block at position 2 "
        "(a cycle of 3 blocks that never reaches the tail)",
    ),
    "count mismatch": (
        count_mismatch,
        f"I2 (count_consistency) broken at the tail, reached at position 3 {WALK}: "
        "num_free_blocks: expected 2 (the blocks between the sentinels), found 3",
    ),
    "count that is no count": (
        count_not_a_count,
        "I2 (count_consistency) broken at the queue: num_free_blocks: "
        "expected a non-negative int, found -1",
    ),
    "pool block not detached": (
        not_detached,
        "I4 (detached_outside) broken at item 1 of the given blocks: the links of "
        "NumberedBlock(7), which is not in this queue: expected both None (detached), "
        "found prev_free_block None, next_free_block NumberedBlock(0)",
    ),
    "check mode count": (
        count_in_check_mode,
        "I2 (count_consistency) broken at len(): num_free_blocks: "
        "expected 4 (the blocks this queue holds), found 5",
    ),
    "check mode cleared member": (
        cleared_member,
        "I1 (sentinel_linkage) broken at the start of append(): the links of NumberedBlock(1), "
        "one of this queue's blocks: expected both set, found both None (cleared by outside "
        "code while the block was in the queue)",
    ),
    "check mode spliced block": (
        spliced_in,
        "I3 (no_duplicates) broken at the start of remove(NumberedBlock(9)): membership of "
        "NumberedBlock(9): expected a block this queue linked itself, found a block linked in "
        "by outside code",
    ),
    "check mode end of operation": (
        count_after_operation,
        "I2 (count_consistency) broken at the end of append(): num_free_blocks: "
        "expected 4 (the blocks this queue holds), found 3",
    ),
    "check mode raw error": (
        raw_error,
        "I1 (sentinel_linkage) broken at remove(): the links and the count the operation read: "
        "expected blocks, sentinels and an int, found TypeError: no links here",
    ),
    "check mode disagreeing with itself": (
        unexplained,
        "I1 (sentinel_linkage) broken at here: the links and the count an O(1) check read: "
        "expected a fault its diagnosis can name, found none: check mode's inline test and "
        "its diagnosis disagree",
    ),
}


@pytest.mark.parametrize("kind", MESSAGES)
def test_violation_message_reads_in_full(kind: str) -> None:
    """One violation of each kind reads, word for word, as its template says."""
    build, template = MESSAGES[kind]
    queue, error = build()
    assert isinstance(error, InvariantViolation)
    expected = template.format(
        head=repr(queue.fake_free_list_head), tail=repr(queue.fake_free_list_tail)
    )
    assert str(error) == expected
