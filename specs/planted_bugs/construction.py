"""Constructors: planted bugs that build a queue differently from ``append_n``.

The bugs of kind ``"constructor"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specs.planted_bugs._common import B, BlockT
from verified_queue.block import Block, Sentinel
from verified_queue.queue import FreeBlockQueue

__all__ = ["ConstructorNotAtomicForIterables", "ConstructorSkipsLinkCheck"]


class ConstructorNotAtomicForIterables(FreeBlockQueue[B]):
    """The constructor links an iterator's blocks one by one with ``append``, not as one batch.

    A list goes through ``append_n``, all or none; an iterator (a generator, a tuple) is
    linked as it is drained, so a refused block leaves the blocks before it linked to a queue
    the caller never gets.
    """

    __slots__ = ()

    def __init__(self, blocks: Iterable[B] = ()) -> None:
        """Link ``blocks``: a list as a batch, anything else block by block."""
        head = Sentinel("head")
        tail = Sentinel("tail")
        # I1: an empty queue is the two sentinels linked to each other.
        head.next_free_block = tail
        tail.prev_free_block = head
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail
        self.num_free_blocks = 0
        if type(blocks) is list:
            self.append_n(blocks)
        else:
            for block in blocks:  # should be one append_n, which undoes a refused batch
                self.append(block)


class ConstructorSkipsLinkCheck(FreeBlockQueue[BlockT]):
    """The constructor links its blocks directly, as vLLM's does, without ``append_n``'s checks.

    A new queue's blocks are taken to be fresh, so a repeated block or one linked in another
    queue is linked anyway, corrupting both.
    """

    __slots__ = ()

    def __init__(self, blocks: Iterable[BlockT] = ()) -> None:
        """Link ``blocks`` front to back without checking that they are detached."""
        head = Sentinel("head")
        tail = Sentinel("tail")
        last: Block = head
        count = 0
        for node in blocks:  # no detached check: should go through append_n
            node.prev_free_block = last
            last.next_free_block = node
            last = node
            count += 1
        last.next_free_block = tail
        tail.prev_free_block = last
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail
        self.num_free_blocks = count
