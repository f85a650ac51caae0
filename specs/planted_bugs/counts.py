"""Counts: planted bugs whose ``num_free_blocks`` drifts from the number of linked blocks.

The bugs of kind ``"count"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B
from verified_queue._messages import (
    already_linked,
    batch_argument,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
    not_linked,
)
from verified_queue._undo import finish_unstage, means_not_a_block, unstage
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["PrependNCountsBeforeLinking", "RemoveForgetsCount"]


class RemoveForgetsCount(FreeBlockQueue[B]):
    """``remove`` unlinks the block but never decrements ``num_free_blocks`` (I2 broken)."""

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block`` and forget to count it."""
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            before = node.prev_free_block
            after = node.next_free_block
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            raise not_a_block("remove", block) from None
        if before is None or after is None:
            # I4: a detached block has neither link, a sentinel only one.
            raise not_linked("remove", block)
        # Bridge the neighbours over the block.
        before.next_free_block = after
        after.prev_free_block = before
        # I4: the removed block leaves detached.
        node.prev_free_block = node.next_free_block = None
        # should decrement num_free_blocks (I2)


class PrependNCountsBeforeLinking(FreeBlockQueue[B]):
    """``prepend_n`` adds the batch to the count before linking it, so a refused batch is counted.

    The production code takes the batch's length first and adds it after the loop; here the
    addition moved up with it, and the undo does not take it back.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Count ``blocks``, then link them at the front, all or none (but the count stays)."""
        batch: list[B] = blocks if type(blocks) is list else batch_argument("prepend_n", blocks)  # type: ignore[assignment]  # checked as it is linked
        added = len(batch)  # before the links close, as in append_n
        self.num_free_blocks += added  # should come after the join
        head = self.fake_free_list_head
        tail = self.fake_free_list_tail
        if head.next_free_block is None:
            raise lost_inner_link("prepend_n", "head")
        last: Block = tail  # staged off the tail's outer link, as in append_n
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes, each
        # outer one finishes what an interrupt cut short of the one inside.
        undone = False
        try:
            try:
                try:
                    node: Block
                    for node in batch:  # type: ignore[assignment]  # compiled: each a Block, checked here
                        if node.next_free_block is not None or node.prev_free_block is not None:
                            # I4: only a detached block may join.
                            raise already_linked("prepend_n", node, last, tail)
                        node.prev_free_block = last
                        last.next_free_block = node
                        last = node
                    after = head.next_free_block  # after the loop, as in append_n
                    if after is None:
                        raise lost_inner_link("prepend_n", "head")
                except BaseException as error:
                    unstage(tail, last)
                    undone = True
                    if means_not_a_block(error, batch, last, tail):
                        raise not_a_block("prepend_n", first_unlinkable(batch)) from None
                    raise
            except BaseException as arrived:
                if undone:
                    raise
                raise finish_unstage(batch, tail, arrived)  # noqa: B904 -- the queue is kept
        except BaseException as arrived:
            if undone:
                raise
            raise finish_unstage(batch, tail, arrived)  # noqa: B904 -- the queue is kept
        if last is not tail:  # a batch was staged
            # Join the staged chain between the head and the old front, as in append_n.
            first: Block = batch[0]  # type: ignore[assignment]  # a Block: the loop took it as one
            tail.next_free_block = None  # I1: the tail's outer link is free again
            first.prev_free_block = head
            head.next_free_block = first
            last.next_free_block = after
            after.prev_free_block = last
