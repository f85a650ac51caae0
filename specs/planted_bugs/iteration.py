"""Iteration: planted bugs whose walks yield the wrong blocks.

The bugs of kind ``"iteration"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterator

from specs.planted_bugs._common import B
from verified_queue._messages import not_a_block, not_linked
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["IterBlocksAfterYieldsCursor", "IterYieldsHeadSentinel"]


class IterBlocksAfterYieldsCursor(FreeBlockQueue[B]):
    """``iter_blocks_after(cursor)`` starts the walk at the cursor instead of the block after it.

    From ``None`` it is right; from a block, the first block yielded is the cursor itself, so a
    walk resumed from a saved cursor visits that block twice.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the cursor and the blocks after it (or every block for ``None``)."""
        if cursor is None:
            return self._walk(self.fake_free_list_head.next_free_block)
        try:
            node: Block = cursor  # type: ignore[assignment]  # compiled: a Block, checked here
            following = node.next_free_block
            linked = following is not None and node.prev_free_block is not None
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            raise not_a_block("iter_blocks_after", cursor) from None
        if not linked:
            if node is self.fake_free_list_head:
                following = node.next_free_block
            elif node is self.fake_free_list_tail:
                following = node  # nothing after the tail
            else:
                raise not_linked("iter_blocks_after", cursor)
        return self._walk(node)  # should start at following


class IterYieldsHeadSentinel(FreeBlockQueue[B]):
    """``iter(queue)`` starts its walk at the head sentinel instead of the block after it.

    The first item yielded is the head sentinel; ``get_all_free_blocks`` walks by itself and
    is right.
    """

    __slots__ = ()

    def __iter__(self) -> Iterator[B]:
        """Yield the head sentinel, then the free blocks."""
        return self._walk(self.fake_free_list_head)  # should start at its next_free_block
