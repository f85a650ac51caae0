"""Guards: planted bugs where a check lets misuse through, or refuses correct use.

The bugs of kind ``"guard"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import SupportsIndex, cast

from specs.planted_bugs._common import B, _linked, _undo_staged
from verified_queue._messages import (
    already_linked,
    count_argument,
    lost_inner_link,
    not_linked,
)
from verified_queue._undo import relink_taken
from verified_queue.block import Block
from verified_queue.errors import EmptyQueueError, NegativeCountError
from verified_queue.queue import EMPTY_QUEUE_MESSAGE, FreeBlockQueue

__all__ = [
    "AppendGuardReadsNextOnly",
    "AppendSkipsDoubleFreeCheck",
    "IterBlocksAfterChecksLazily",
    "IterBlocksAfterGuardReadsNextOnly",
    "PopleftNAllowsNegative",
    "PopleftNOffByOne",
    "PrependNGuardReadsPrevOnly",
    "RemoveAcceptsSentinel",
    "SentinelReturned",
]


class PopleftNOffByOne(FreeBlockQueue[B]):
    """``popleft_n`` refuses ``n == len(queue)``: the guard says ``>=`` where it means ``>``."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, wrongly refusing to empty the queue."""
        n = n if type(n) is int else count_argument("popleft_n", n)
        if n >= self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({n}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        if n < 0:
            raise NegativeCountError(f"popleft_n({n}): the count must not be negative")
        return super().popleft_n(n)


class PopleftNAllowsNegative(FreeBlockQueue[B]):
    """``popleft_n`` lost its negative-count guard: ``range(n)`` is empty anyway, it seemed.

    ``popleft_n(-2)`` returns ``[]`` instead of raising, and subtracts ``-2`` from the count.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, without refusing a negative ``n``."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count > self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({count}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        # should raise NegativeCountError here for count < 0
        head = self.fake_free_list_head
        popped: list[B] = [None] * count  # type: ignore[list-item]  # every slot is filled below
        following: Block | None = None
        try:
            block: Block = head.next_free_block  # type: ignore[assignment]  # I1
            for index in range(count):
                popped[index] = block  # type: ignore[assignment]  # never the tail
                following = block.next_free_block
                block.prev_free_block = block.next_free_block = None
                block = following  # type: ignore[assignment]  # I1: set on every linked block
        except BaseException as error:
            relink_taken(head, popped, following)
            if isinstance(error, (AttributeError, TypeError)):
                raise lost_inner_link("popleft_n", "head") from None
            raise
        head.next_free_block = block
        block.prev_free_block = head
        self.num_free_blocks -= count
        return popped


class SentinelReturned(FreeBlockQueue[B]):
    """``popleft`` on an empty queue hands out the tail sentinel instead of raising.

    The emptiness guard tests the wrong link (``block is None``, never true) so the tail
    sentinel is spliced out and returned, and the queue's count goes negative.
    """

    __slots__ = ()

    def popleft(self) -> B:
        """Pop the front block, or, wrongly, the tail sentinel of an empty queue."""
        head = self.fake_free_list_head
        block = head.next_free_block
        if block is None:
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        following = block.next_free_block
        head.next_free_block = following
        if following is not None:
            following.prev_free_block = head
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1
        return cast(B, block)


class AppendSkipsDoubleFreeCheck(FreeBlockQueue[B]):
    """``append`` links a block without checking that it is detached (a double free is accepted).

    Appending a block that is already linked cuts it out of its old place without fixing its
    neighbours, so the chain and the count are both corrupted.
    """

    __slots__ = ()

    def append(self, block: B) -> None:
        """Link ``block`` at the back, whatever its links say."""
        tail = self.fake_free_list_tail
        last = _linked(tail.prev_free_block)
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1


class AppendGuardReadsNextOnly(FreeBlockQueue[B]):
    """``append``'s double-free guard reads only ``next_free_block``.

    A linked block has both links, so a double free is still refused; but a tail sentinel
    (its only link is the back one) gets through and is linked into the queue.
    """

    __slots__ = ()

    def append(self, block: B) -> None:
        """Link ``block`` at the back, refusing it only if its forward link is set."""
        tail = self.fake_free_list_tail
        if block.next_free_block is not None:  # should also test prev_free_block
            raise already_linked("append", block)
        last = _linked(tail.prev_free_block)
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1


class PrependNGuardReadsPrevOnly(FreeBlockQueue[B]):
    """``prepend_n``'s guard reads only ``prev_free_block``.

    A linked block, or one repeated in the batch, is still refused; a head sentinel (its only
    link is the forward one) is linked into the queue.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front, refusing a block only if its back link is set."""
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        added = len(batch)
        head = self.fake_free_list_head
        tail = self.fake_free_list_tail
        last: Block = tail
        try:
            node: Block
            for node in batch:
                if node.prev_free_block is not None:  # should also test next_free_block
                    raise already_linked("prepend_n", node, last, tail)
                node.prev_free_block = last
                last.next_free_block = node
                last = node
            after = head.next_free_block
            if after is None:
                raise lost_inner_link("prepend_n", "head")
        except BaseException as error:
            raise _undo_staged("prepend_n", batch, tail, last, error=error) from None
        if last is not tail:  # a batch was staged
            first: Block = batch[0]
            tail.next_free_block = None
            first.prev_free_block = head
            head.next_free_block = first
            last.next_free_block = after
            after.prev_free_block = last
            self.num_free_blocks += added


class RemoveAcceptsSentinel(FreeBlockQueue[B]):
    """``remove`` guards with ``and`` where it needs ``or``, so a sentinel (one link) gets through.

    Removing the tail sentinel cuts the last block's forward link and then fails on the
    missing one: a corrupted queue and the wrong exception.
    """

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block``, letting a sentinel past the guard."""
        before = block.prev_free_block
        after = block.next_free_block
        if before is None and after is None:
            raise not_linked("remove", block)
        if before is not None:
            before.next_free_block = after
        if after is not None:
            after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1


class IterBlocksAfterChecksLazily(FreeBlockQueue[B]):
    """``iter_blocks_after`` is written as a generator, so it checks its cursor only when the
    iteration starts.

    A detached cursor or another queue's sentinel is accepted by the call; the caller learns
    of it later, wherever the iterator is first advanced.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the blocks after ``cursor``, deferring every check to the first ``next()``."""
        yield from super().iter_blocks_after(cursor)


class IterBlocksAfterGuardReadsNextOnly(FreeBlockQueue[B]):
    """``iter_blocks_after`` takes a cursor whose forward link is set for a linked block.

    A detached block is still refused, and this queue's own sentinels are right; another
    queue's head sentinel is taken as a linked cursor, and the refusal comes only when the
    walk runs into that queue's tail.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the blocks after ``cursor``, testing only its forward link."""
        if cursor is None:
            return self._walk(self.fake_free_list_head.next_free_block)
        following = cursor.next_free_block
        if following is None:  # should also test prev_free_block
            if cursor is self.fake_free_list_tail:
                following = cursor
            else:
                raise not_linked("iter_blocks_after", cursor)
        return self._walk(following)
