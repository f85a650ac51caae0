"""Undo paths: planted bugs whose rollback of a refused or interrupted batch leaves a change.

The bugs of kind ``"undo"`` in :data:`specs.planted_bugs.CATALOGUE`. Two are copies of
today's undo (:mod:`verified_queue._undo`, whose docstring states the contract): a copy of
``unstage`` with one defect, called by a copy of the batch method that is otherwise the
production method word for word (``tests/verification/test_planted_copies.py`` holds each to
one hunk). Every one of them shows on a refused batch, with no interrupt: a batch whose
second block is linked takes the undo path, so every layer that refuses a batch can see it.

The two ``NotAtomic`` bugs are written from scratch, not copied: the obvious loop that links
a batch straight onto the chain block by block, with no staging and no undo at all, the
design the staging replaced. ``tests/cli/test_selfcheck.py`` and
``tests/verification/test_proof.py`` pin the open chain they leave.

Not planted here: the defects only an interrupt between two writes can show (``unstage``
clearing the back link before the forward one, ``finish_unstage`` without its idempotence
tests, ``relink_taken`` not relinking the last block's successor, an outer handler that
undoes twice or an inner one that does not set ``undone``). No layer of the matrices injects
an exception between writes, so none could catch them; ``tests/queue/test_nested_interrupts.py``
does, at every checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B, BlockT, _linked
from verified_queue._messages import (
    already_linked,
    batch_argument,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
)
from verified_queue._undo import finish_unstage, means_not_a_block
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "AppendNNotAtomic",
    "AppendNUndoClearsNextOnly",
    "PrependNNotAtomic",
    "PrependNUndoLeavesTailLink",
]


def _unstage_clears_next_only(staging: Block, last: Block) -> None:
    """``unstage`` clearing each block's forward link only: the staged blocks keep a back link."""
    block = last
    while block is not staging:
        previous = block.prev_free_block
        # I4: every block of the failed batch leaves detached again.
        block.next_free_block = None  # should clear prev_free_block too
        block = previous  # type: ignore[assignment]  # set by the batch loop
    # I1: the tail's outer link is None again.
    staging.next_free_block = None


def _unstage_leaves_tail_link(staging: Block, last: Block) -> None:
    """``unstage`` that detaches the staged blocks but leaves ``staging``'s outer link set."""
    block = last
    while block is not staging:
        previous = block.prev_free_block
        # I4: every block of the failed batch leaves detached again.
        block.next_free_block = block.prev_free_block = None
        block = previous  # type: ignore[assignment]  # set by the batch loop
    # should clear staging.next_free_block too (I1)


class AppendNNotAtomic(FreeBlockQueue[BlockT]):
    """``append_n`` links the batch block by block and does not roll back when one is refused.

    The blocks before the refused one stay linked, but the count is never updated and the
    chain is left open after them, so a rejected call changes the queue.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[BlockT]) -> None:
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


class PrependNNotAtomic(FreeBlockQueue[BlockT]):
    """``prepend_n`` links the batch block by block and does not roll back when one is refused.

    The blocks before the refused one stay linked behind the head, but the chain is left open
    after them and the count is never updated, so a rejected call changes the queue.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[BlockT]) -> None:
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

    ``unstage`` walks back over the staged blocks clearing ``next_free_block`` only. The
    queue and the tail's outer link are as before, but the blocks the batch staged keep a
    back link (I4 broken), so they look linked: freeing them again is refused as a double free.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back; a refused batch is undone on one side only."""
        # Anything but an exact list is copied into one first: draining an
        # iterator up front means it cannot fail half-way through, and an exact
        # type test is cheaper than isinstance (compiled, a list is indexed
        # directly instead of iterated through the generic protocol).
        batch: list[B] = blocks if type(blocks) is list else batch_argument("append_n", blocks)  # type: ignore[assignment]  # checked as it is linked
        # Counted first: no call may come between closing the chain and the count, since
        # a signal handler can raise at a call, and nothing could then undo the links.
        added = len(batch)
        tail = self.fake_free_list_tail
        if tail.prev_free_block is None:
            raise lost_inner_link("append_n", "tail")
        # The batch is chained off the queue, hanging from the tail's outer link (see
        # "Batches" above), and joined to it only after the loop. The loop is written out
        # here and in prepend_n, not shared: a call per batch costs more than the loop
        # itself on the short batches a block pool frees.
        last: Block = tail
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
                            raise already_linked("append_n", node, last, tail)
                        node.prev_free_block = last
                        last.next_free_block = node
                        last = node
                    # Read after the loop: a call the loop let run (a collection's finalizer,
                    # say) may have changed the queue's back end meanwhile.
                    before = tail.prev_free_block
                    if before is None:
                        raise lost_inner_link("append_n", "tail")
                except BaseException as error:
                    _unstage_clears_next_only(tail, last)
                    undone = True
                    if means_not_a_block(error, batch, last, tail):
                        raise not_a_block("append_n", first_unlinkable(batch)) from None
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
            # Join the staged chain between the old back block and the tail: no call and no
            # allocation from the first write to the count, so nothing can see it half done.
            first: Block = batch[0]  # type: ignore[assignment]  # a Block: the loop took it as one
            tail.next_free_block = None  # I1: the tail's outer link is free again
            first.prev_free_block = before
            before.next_free_block = first
            last.next_free_block = tail
            tail.prev_free_block = last
            self.num_free_blocks += added  # I2


class PrependNUndoLeavesTailLink(FreeBlockQueue[B]):
    """The undo of a refused ``prepend_n`` detaches the staged blocks but not the tail's outer link.

    ``unstage`` forgets its last write, ``staging.next_free_block = None``: after a refused
    batch the tail's outer link still names the batch's first block, now detached (I1
    broken), until the next batch that succeeds rewrites it.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front; a refused batch leaves the tail's outer link set."""
        batch: list[B] = blocks if type(blocks) is list else batch_argument("prepend_n", blocks)  # type: ignore[assignment]  # checked as it is linked
        added = len(batch)  # before the links close, as in append_n
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
                    _unstage_leaves_tail_link(tail, last)
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
            self.num_free_blocks += added  # I2
