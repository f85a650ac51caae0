"""Undo paths: planted bugs whose rollback of a refused or interrupted batch leaves a change.

The bugs of kind ``"undo"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B, _linked
from verified_queue._messages import (
    already_linked,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
)
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "AppendNNotAtomic",
    "AppendNUndoClearsNextOnly",
    "PrependNNotAtomic",
    "PrependNUndoSkipsRejoin",
]


def _unlink_run_next_only(before_run: Block, last: Block, after_run: Block) -> None:
    """``_unlink_run`` clearing only each block's forward link."""
    block = last
    while block is not before_run:
        previous = block.prev_free_block
        block.next_free_block = None  # should clear prev_free_block too
        block = previous  # type: ignore[assignment]  # set by the batch loop
    before_run.next_free_block = after_run
    after_run.prev_free_block = before_run


def _unlink_run_without_rejoin(before_run: Block, last: Block, after_run: Block) -> None:
    """``_unlink_run`` that detaches the run but does not point ``before_run`` past it."""
    block = last
    while block is not before_run:
        previous = block.prev_free_block
        block.prev_free_block = block.next_free_block = None
        block = previous  # type: ignore[assignment]  # set by the batch loop
    after_run.prev_free_block = before_run  # should set before_run.next_free_block = after_run too


def _error_of_batch(operation: str, batch: list[B], error: BaseException) -> BaseException:
    """The error a refused batch raises, once it is undone (``_undo_batch``'s second half)."""
    if isinstance(error, (AttributeError, TypeError)):
        return not_a_block(operation, first_unlinkable(batch))
    return error


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
                raise already_linked("append_n", block)
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
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
                raise already_linked("prepend_n", block)
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = after
        after.prev_free_block = last
        self.num_free_blocks += len(batch)


class AppendNUndoClearsNextOnly(FreeBlockQueue[B]):
    """The undo of a refused ``append_n`` clears each block's forward link but not its back link.

    The queue's chain is restored, but the blocks the batch had linked keep a back link, so
    they look linked: freeing them again is refused as a double free.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back; a refused batch is undone on one side only."""
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        tail = self.fake_free_list_tail
        before = tail.prev_free_block
        if before is None:
            raise lost_inner_link("append_n", "tail")
        added = len(batch)
        last: Block = before
        try:
            node: Block
            for node in batch:
                if node.next_free_block is not None or node.prev_free_block is not None:
                    raise already_linked("append_n", node)
                node.prev_free_block = last
                last.next_free_block = node
                last = node
        except BaseException as error:
            _unlink_run_next_only(before, last, tail)
            raise _error_of_batch("append_n", batch, error) from None
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += added


class PrependNUndoSkipsRejoin(FreeBlockQueue[B]):
    """The undo of a refused ``prepend_n`` detaches the batch but leaves the head pointing at it.

    The old front's back link (never rewritten) names the head again, but the head's forward
    link names the first block of the refused batch, now detached: the chain is cut.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front; a refused batch is undone without rejoining the head."""
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        head = self.fake_free_list_head
        after = head.next_free_block
        if after is None:
            raise lost_inner_link("prepend_n", "head")
        added = len(batch)
        last: Block = head
        try:
            node: Block
            for node in batch:
                if node.next_free_block is not None or node.prev_free_block is not None:
                    raise already_linked("prepend_n", node)
                node.prev_free_block = last
                last.next_free_block = node
                last = node
        except BaseException as error:
            _unlink_run_without_rejoin(head, last, after)
            raise _error_of_batch("prepend_n", batch, error) from None
        last.next_free_block = after
        after.prev_free_block = last
        self.num_free_blocks += added
