"""What the check-mode and checker tests share: a violation's parts, and check-mode worlds."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, SupportsIndex

import pytest

from verified_queue import Block, CheckedFreeBlockQueue, InvariantViolation, QueueError
from verified_queue.checked import DEFAULT_FULL_CHECK_EVERY
from verified_queue.queue import FreeBlockQueue

# Tests that pin what the adaptive default period lets through until its next full check;
# VERIFIED_QUEUE_CHECKS=full makes the default a full check before every operation instead.
adaptive_default_only = pytest.mark.skipif(
    DEFAULT_FULL_CHECK_EVERY is not None,
    reason="VERIFIED_QUEUE_CHECKS=full replaces the adaptive default period",
)

#: How a diagnostic names a position of the forward walk, after the position's number.
WALK = "of the forward walk (head = 0)"


def parts(error: BaseException) -> tuple[str | None, ...]:
    """A violation's ``(clause, where, what, expected, found)``; fails on any other error.

    Tests compare these fields rather than the message, whose wording
    ``tests/checks/test_messages.py`` pins once per kind of diagnostic.
    """
    assert isinstance(error, InvariantViolation), f"not a violation: {error!r}"
    return error.clause, error.where, error.what, error.expected, error.found


def error_of(call: Callable[[], object]) -> QueueError:
    """The QueueError ``call`` raises."""
    with pytest.raises(QueueError) as caught:
        call()
    return caught.value


def writes(obj: object, attribute: str, value: object) -> bool:
    """Write ``obj.attribute = value`` if the build lets it; whether it did."""
    try:
        setattr(obj, attribute, value)
    except TypeError:
        return False
    return True


def same(left: list[Block], right: list[Block]) -> bool:
    """Whether two lists hold the same blocks in the same order, by identity."""
    return len(left) == len(right) and all(a is b for a, b in zip(left, right, strict=True))


def checked(size: int, **options: int | None) -> tuple[CheckedFreeBlockQueue[Block], list[Block]]:
    """A check-mode queue of ``size`` fresh blocks, and the blocks."""
    blocks = [Block() for _ in range(size)]
    return CheckedFreeBlockQueue(blocks, **options), blocks


class IntLike(int):
    """An int subclass, as numpy's integer scalars are int-like but not int."""


class CountingQueue(CheckedFreeBlockQueue[Block]):
    """A checked queue that counts its full checks."""

    __slots__ = ("full_checks",)

    def __init__(self, blocks: list[Block], full_check_every: int | None) -> None:
        self.full_checks = 0
        super().__init__(blocks, full_check_every=full_check_every)

    def full_check(self) -> None:
        self.full_checks += 1
        super().full_check()


def over_faulty(base: type[FreeBlockQueue[Block]], size: int) -> tuple[Any, list[Block]]:
    """A check-mode queue over a faulty production class, and its blocks."""
    cls = type("CheckedFaulty", (CheckedFreeBlockQueue, base), {"__slots__": ()})
    blocks = [Block() for _ in range(size)]
    return cls(blocks, full_check_every=0), blocks


@dataclass
class World:
    """A checked queue of four blocks, two detached blocks, and another queue to point at."""

    queue: CheckedFreeBlockQueue[Block]
    blocks: list[Block]
    spare: list[Block]
    other: CheckedFreeBlockQueue[Block]
    other_blocks: list[Block]

    def nodes(self) -> list[Block]:
        """Every object whose links an operation could write, sentinels included."""
        return [
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            *self.blocks,
            *self.spare,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
            *self.other_blocks,
        ]

    def snapshot(self) -> tuple[list[tuple[object, object]], object, list[tuple[int, Block]]]:
        """Every link, the count and the membership, to compare by identity."""
        return (
            [(node.prev_free_block, node.next_free_block) for node in self.nodes()],
            self.queue.num_free_blocks,
            list(self.queue._members.items()),
        )


def make_world(checked_queue: bool = True) -> World:
    """A fresh world, its queues in check mode; with ``checked_queue=False``, production's."""
    blocks = [Block() for _ in range(4)]
    other_blocks = [Block()]

    def make(members: list[Block]) -> Any:
        if checked_queue:
            return CheckedFreeBlockQueue(members, full_check_every=0)
        return FreeBlockQueue(members)

    return World(make(blocks), blocks, [Block(), Block()], make(other_blocks), other_blocks)


# Faulty production classes: each breaks what only the check at the end of its operation
# reads, so check mode over them must catch the fault as the operation ends.


class AppendForgetsCount(FreeBlockQueue[Block]):
    """Links the block but leaves the count as it was."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        super().append(block)
        self.num_free_blocks -= 1


class RemoveLeavesBackLink(FreeBlockQueue[Block]):
    """Bridges the neighbours but leaves the successor's back link on the removed block."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        after = block.next_free_block
        super().remove(block)
        if after is not None:
            after.prev_free_block = block


class PrependNLeavesOldFront(FreeBlockQueue[Block]):
    """Links the batch but points the old front's back link at the head again."""

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        old_front = self.fake_free_list_head.next_free_block
        super().prepend_n(blocks)
        if old_front is not None:
            old_front.prev_free_block = self.fake_free_list_head


class PopleftNKeepsHead(FreeBlockQueue[Block]):
    """Pops the run but leaves the head pointing at the first popped block."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[Block]:
        old_front = self.fake_free_list_head.next_free_block
        popped = super().popleft_n(n)
        self.fake_free_list_head.next_free_block = old_front
        return popped


class PopleftReturnsTail(FreeBlockQueue[Block]):
    """Hands out the tail sentinel of an empty queue instead of raising."""

    __slots__ = ()

    def popleft(self) -> Block:
        if not self.num_free_blocks:
            return self.fake_free_list_tail
        return super().popleft()
