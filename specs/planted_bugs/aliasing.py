"""Aliasing: planted bugs that share a returned list with the queue or with other callers.

The bugs of kind ``"aliasing"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from typing import Any, SupportsIndex, cast

from specs.planted_bugs._common import B, _linked
from verified_queue._messages import count_argument
from verified_queue.errors import EmptyQueueError, NegativeCountError
from verified_queue.queue import FreeBlockQueue

__all__ = ["GetAllFreeBlocksReusesList", "PopleftNReusesBuffer", "PopleftNSharesEmptyResult"]


#: The list ``PopleftNSharesEmptyResult`` hands every caller of ``popleft_n(0)``.
_NO_BLOCKS: list[Any] = []

#: The one list ``GetAllFreeBlocksReusesList`` refills on every call.
_LISTING: list[Any] = []

#: The one list ``PopleftNReusesBuffer`` refills on every call.
_POPPED: list[Any] = []


def _take_front(queue: FreeBlockQueue[B], count: int, into: list[B]) -> None:
    """Detach the first ``count`` blocks of ``queue`` into ``into`` and rejoin the head."""
    head = queue.fake_free_list_head
    block = _linked(head.next_free_block)
    for _ in range(count):
        into.append(cast(B, block))
        following = _linked(block.next_free_block)
        block.prev_free_block = block.next_free_block = None
        block = following
    head.next_free_block = block
    block.prev_free_block = head
    queue.num_free_blocks -= count


class PopleftNSharesEmptyResult(FreeBlockQueue[B]):
    """``popleft_n(0)`` returns one shared empty list instead of a new one (a "free" fast path).

    A caller that extends the list it got (``taken = queue.popleft_n(k); taken.append(b)``)
    changes what every later ``popleft_n(0)``, on any queue, returns.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks; for ``n == 0``, return the shared empty list."""
        if type(n) is int and n == 0:
            return _NO_BLOCKS  # should be ``[]``: the caller owns the list it gets
        return super().popleft_n(n)


class PopleftNReusesBuffer(FreeBlockQueue[B]):
    """``popleft_n`` fills one module-level buffer and returns it, so each call overwrites the last.

    The blocks a caller popped earlier are replaced, in the list it still holds, by the blocks
    of the next ``popleft_n``.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Detach and return the first ``n`` blocks, in the buffer every call shares."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count > self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({count}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        if count < 0:
            raise NegativeCountError(f"popleft_n({count}): the count must not be negative")
        popped: list[B] = _POPPED  # should be a new list
        popped.clear()
        _take_front(self, count, popped)
        return popped


class GetAllFreeBlocksReusesList(FreeBlockQueue[B]):
    """``get_all_free_blocks`` refills one module-level list instead of building a new one.

    Written to allocate nothing, it hands every caller the same list: a listing taken earlier
    changes under its holder at the next call, on this queue or any other.
    """

    __slots__ = ()

    def get_all_free_blocks(self) -> list[B]:
        """Return the free blocks, front first, in the list the previous call returned."""
        tail = self.fake_free_list_tail
        block = _linked(self.fake_free_list_head.next_free_block)
        found: list[B] = _LISTING  # should be a new list
        found.clear()
        while block is not tail:
            found.append(cast(B, block))
            block = _linked(block.next_free_block)
        return found
