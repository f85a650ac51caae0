"""Counts: planted bugs whose ``num_free_blocks`` drifts from the number of linked blocks.

The bugs of kind ``"count"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B, _undo_staged
from verified_queue._messages import (
    already_linked,
    lost_inner_link,
    not_linked,
)
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["PrependNCountsBeforeLinking", "RemoveForgetsCount"]


class RemoveForgetsCount(FreeBlockQueue[B]):
    """``remove`` unlinks the block but never decrements ``num_free_blocks`` (I2 broken)."""

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block`` and forget to count it."""
        before = block.prev_free_block
        after = block.next_free_block
        if before is None or after is None:
            raise not_linked("remove", block)
        before.next_free_block = after
        after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None


class PrependNCountsBeforeLinking(FreeBlockQueue[B]):
    """``prepend_n`` adds the batch to the count before linking it, so a refused batch is counted.

    The production code takes the batch's length first and adds it after the loop; here the
    addition moved up with it, and the undo does not take it back.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Count ``blocks``, then link them at the front, all or none (but the count stays)."""
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        head = self.fake_free_list_head
        tail = self.fake_free_list_tail
        added = len(batch)
        self.num_free_blocks += added  # should come after the loop
        last: Block = tail
        try:
            node: Block
            for node in batch:
                if node.next_free_block is not None or node.prev_free_block is not None:
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
