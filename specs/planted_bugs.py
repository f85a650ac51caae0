"""Deliberately wrong free-block queues, for showing that no checker is vacuous.

Each class overrides one method of :class:`~verified_queue.FreeBlockQueue` with a small,
realistic mistake: the kind a refactor or a "harmless" speed-up introduces. Everything else,
error messages included, is the production code's, so a checker that reports a planted bug
reports the bug, not a difference in wording. Every
verification layer (the stateful machines, the exhaustive check, the CrossHair contracts) is
run against every one of them in the tests and must report each.

:data:`PLANTED_BUGS` maps a short name to each class; ``VERIFIED_QUEUE_SPEC_TARGET`` in
:mod:`specs.contracts` takes the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, SupportsIndex, TypeVar, cast

from verified_queue.block import Block
from verified_queue.errors import (
    EmptyQueueError,
    NegativeCountError,
)
from verified_queue.queue import (
    EMPTY_QUEUE_MESSAGE,
    FreeBlockQueue,
    _already_linked,
    _count_argument,
    _not_linked,
)

__all__ = [
    "PLANTED_BUGS",
    "AppendNNotAtomic",
    "AppendNWrongNeighbour",
    "AppendSkipsDoubleFreeCheck",
    "ContainsComparesByValue",
    "IterBlocksAfterChecksLazily",
    "IterBlocksAfterYieldsCursor",
    "PopleftLeavesLinks",
    "PopleftNOffByOne",
    "PrependNNotAtomic",
    "PrependNReversed",
    "RemoveAcceptsSentinel",
    "RemoveForgetsCount",
    "SentinelReturned",
]

B = TypeVar("B", bound=Block)


def _linked(node: Block | None) -> Block:
    """Return ``node``, which the queue's invariants say is set; raise if they were broken."""
    if node is None:
        raise RuntimeError("a link the queue's invariants promise is None")
    return node


class PopleftLeavesLinks(FreeBlockQueue[B]):
    """``popleft`` splices the block out but leaves its own links set (I4 broken).

    The popped block still looks linked, so freeing it back is refused as a double free, and
    ``remove`` of it would corrupt the queue.
    """

    __slots__ = ()

    def popleft(self) -> B:
        """Splice out the front block without clearing its links."""
        head = self.fake_free_list_head
        block = _linked(head.next_free_block)
        following = block.next_free_block
        if following is None:
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        head.next_free_block = following
        following.prev_free_block = head
        self.num_free_blocks -= 1
        return cast(B, block)


class RemoveForgetsCount(FreeBlockQueue[B]):
    """``remove`` unlinks the block but never decrements ``num_free_blocks`` (I2 broken)."""

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block`` and forget to count it."""
        before = block.prev_free_block
        after = block.next_free_block
        if before is None or after is None:
            raise _not_linked("remove", block)
        before.next_free_block = after
        after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None


class AppendNWrongNeighbour(FreeBlockQueue[B]):
    """``append_n`` links each block back to the old last block, not to its real predecessor.

    Right for a batch of one, so a test that only frees single blocks passes; from the second
    block of a batch on, the back links (I1) skip over the batch.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back, with every back link pointing at the old last block."""
        batch = list(blocks)
        tail = self.fake_free_list_tail
        attach_to = last = _linked(tail.prev_free_block)
        linked: list[Block] = []
        for block in batch:
            if block.next_free_block is not None or block.prev_free_block is not None:
                for undo in linked:
                    undo.prev_free_block = undo.next_free_block = None
                attach_to.next_free_block = tail
                raise _already_linked("append_n", block)
            block.prev_free_block = attach_to  # should be ``last``
            last.next_free_block = block
            last = block
            linked.append(block)
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(batch)


class PopleftNOffByOne(FreeBlockQueue[B]):
    """``popleft_n`` refuses ``n == len(queue)``: the guard says ``>=`` where it means ``>``."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, wrongly refusing to empty the queue."""
        n = n if type(n) is int else _count_argument("popleft_n", n)
        if n >= self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({n}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        if n < 0:
            raise NegativeCountError(f"popleft_n({n}): the count must not be negative")
        return super().popleft_n(n)


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


class AppendNNotAtomic(FreeBlockQueue[B]):
    """``append_n`` links the batch block by block and does not roll back when one is refused.

    The blocks before the refused one stay linked, but the count is never updated and the
    chain is left open after them, so a rejected call changes the queue.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[B]) -> None:
        """Append ``blocks`` one at a time, keeping the ones before a refused block."""
        tail = self.fake_free_list_tail
        last = _linked(tail.prev_free_block)
        batch = list(blocks)
        for block in batch:
            if block.next_free_block is not None or block.prev_free_block is not None:
                raise _already_linked("append_n", block)
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(batch)


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
            raise _not_linked("remove", block)
        if before is not None:
            before.next_free_block = after
        if after is not None:
            after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1


class ContainsComparesByValue(FreeBlockQueue[B]):
    """``in`` compares blocks with ``==`` (I5 broken): wrong for dataclass blocks, and slow."""

    __slots__ = ()

    def __contains__(self, block: object) -> bool:
        """Look ``block`` up by value."""
        return any(candidate == block for candidate in self)


class PrependNReversed(FreeBlockQueue[B]):
    """``prepend_n`` puts each block in front of the queue in turn, so the batch ends up reversed.

    Right for a batch of one, and every link is consistent, so only the order gives it away:
    after ``prepend_n([a, b])`` the queue starts ``b, a``.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link each block of ``blocks`` right after the head sentinel, one after another."""
        batch = list(blocks)
        head = self.fake_free_list_head
        linked: list[Block] = []
        try:
            for block in batch:
                if block.next_free_block is not None or block.prev_free_block is not None:
                    raise _already_linked("prepend_n", block)
                first = _linked(head.next_free_block)
                block.prev_free_block = head
                block.next_free_block = first
                first.prev_free_block = block
                head.next_free_block = block  # in front of the block linked before it
                linked.append(block)
        except BaseException:
            for undone in reversed(linked):
                before = _linked(undone.prev_free_block)
                after = _linked(undone.next_free_block)
                before.next_free_block = after
                after.prev_free_block = before
                undone.prev_free_block = undone.next_free_block = None
            raise
        self.num_free_blocks += len(batch)


class PrependNNotAtomic(FreeBlockQueue[B]):
    """``prepend_n`` links the batch block by block and does not roll back when one is refused.

    The blocks before the refused one stay linked behind the head, but the chain is left open
    after them and the count is never updated, so a rejected call changes the queue.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Prepend ``blocks`` one at a time, keeping the ones before a refused block."""
        head = self.fake_free_list_head
        after = _linked(head.next_free_block)
        last: Block = head
        batch = list(blocks)
        for block in batch:
            if block.next_free_block is not None or block.prev_free_block is not None:
                raise _already_linked("prepend_n", block)
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = after
        after.prev_free_block = last
        self.num_free_blocks += len(batch)


class IterBlocksAfterYieldsCursor(FreeBlockQueue[B]):
    """``iter_blocks_after(cursor)`` starts the walk at the cursor instead of the block after it.

    From ``None`` it is right; from a block, the first block yielded is the cursor itself, so a
    walk resumed from a saved cursor visits that block twice.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the cursor and the blocks after it (or every block for ``None``)."""
        if cursor is None or cursor is self.fake_free_list_head:
            return iter(self)
        if cursor is self.fake_free_list_tail:
            return iter(())
        if cursor.next_free_block is None or cursor.prev_free_block is None:
            raise _not_linked("iter_blocks_after", cursor)
        return self._walk(cursor)  # should start at cursor.next_free_block


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


#: Every planted bug by a short name, in the order the reports list them.
PLANTED_BUGS: dict[str, type[FreeBlockQueue[Any]]] = {
    "popleft_leaves_links": PopleftLeavesLinks,
    "remove_forgets_count": RemoveForgetsCount,
    "append_n_wrong_neighbour": AppendNWrongNeighbour,
    "popleft_n_off_by_one": PopleftNOffByOne,
    "sentinel_returned": SentinelReturned,
    "append_skips_double_free_check": AppendSkipsDoubleFreeCheck,
    "append_n_not_atomic": AppendNNotAtomic,
    "remove_accepts_sentinel": RemoveAcceptsSentinel,
    "contains_compares_by_value": ContainsComparesByValue,
    "prepend_n_reversed": PrependNReversed,
    "prepend_n_not_atomic": PrependNNotAtomic,
    "iter_blocks_after_yields_cursor": IterBlocksAfterYieldsCursor,
    "iter_blocks_after_checks_lazily": IterBlocksAfterChecksLazily,
}
