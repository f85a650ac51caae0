"""Identity: a planted bug that compares blocks by value instead of by identity.

The bugs of kind ``"identity"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from specs.planted_bugs._common import B
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["ContainsComparesByValue"]


class ContainsComparesByValue(FreeBlockQueue[B]):
    """``in`` compares blocks with ``==`` (I5 broken): wrong for dataclass blocks, and slow."""

    __slots__ = ()

    def __contains__(self, block: object) -> bool:
        """Look ``block`` up by value."""
        tail = self.fake_free_list_tail
        node: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        while node is not tail:
            if node == block:  # should be is
                return True
            node = node.next_free_block  # type: ignore[assignment]  # I1: set on every linked block
        return False
