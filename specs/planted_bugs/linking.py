"""Linking: planted bugs whose successful calls leave wrong links or a wrong order.

The bugs of kind ``"linking"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B, BlockT, _linked
from verified_queue._messages import (
    already_linked,
    lost_inner_link,
)
from verified_queue.block import Block
from verified_queue.errors import EmptyQueueError
from verified_queue.queue import EMPTY_QUEUE_MESSAGE, FreeBlockQueue

__all__ = ["AppendNWrongNeighbour", "PopleftLeavesLinks", "PrependNReversed"]


class PopleftLeavesLinks(FreeBlockQueue[B]):
    """``popleft`` splices the block out but leaves its own links set (I4 broken).

    The popped block still looks linked, so freeing it back is refused as a double free, and
    ``remove`` of it would corrupt the queue.
    """

    __slots__ = ()

    def popleft(self) -> B:
        """Splice out the front block without clearing its links."""
        head = self.fake_free_list_head
        try:
            block: Block = head.next_free_block  # type: ignore[assignment]  # I1: the head has a successor
            following = block.next_free_block
        except (AttributeError, TypeError):
            raise lost_inner_link("popleft", "head") from None
        if following is None:
            # I1: only the tail has no successor, so the queue is empty.
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        # Splice the front block out.
        head.next_free_block = following
        following.prev_free_block = head
        # should clear the popped block's links (I4)
        self.num_free_blocks -= 1  # I2
        return block  # type: ignore[return-value]  # I1: not a sentinel, so a B


class AppendNWrongNeighbour(FreeBlockQueue[BlockT]):
    """``append_n`` links each block back to the old last block, not to its real predecessor.

    Right for a batch of one, so a test that only frees single blocks passes; from the second
    block of a batch on, the back links (I1) skip over the batch.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[BlockT]) -> None:
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
                raise already_linked("append_n", block)
            block.prev_free_block = attach_to  # should be ``last``
            last.next_free_block = block
            last = block
            linked.append(block)
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(batch)


class PrependNReversed(FreeBlockQueue[BlockT]):
    """``prepend_n`` puts each block in front of the queue in turn, so the batch ends up reversed.

    Right for a batch of one, and every link is consistent, so only the order gives it away:
    after ``prepend_n([a, b])`` the queue starts ``b, a``.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[BlockT]) -> None:
        """Link each block of ``blocks`` right after the head sentinel, one after another."""
        batch = list(blocks)
        head = self.fake_free_list_head
        linked: list[Block] = []
        try:
            for block in batch:
                if block.next_free_block is not None or block.prev_free_block is not None:
                    raise already_linked("prepend_n", block)
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
