"""Aliasing: planted bugs that share a returned list with the queue or with other callers.

The bugs of kind ``"aliasing"`` in :data:`specs.planted_bugs.CATALOGUE`.
"""

from __future__ import annotations

from typing import Any, SupportsIndex

from specs.planted_bugs._common import B
from verified_queue._messages import count_argument, ran_off_the_chain, too_few_blocks
from verified_queue._undo import relink_taken
from verified_queue.block import Block
from verified_queue.errors import NegativeCountError
from verified_queue.queue import _COLLECTS_AT_CHECKPOINTS, FreeBlockQueue, _checkpoint

__all__ = ["GetAllFreeBlocksReusesList", "PopleftNReusesBuffer", "PopleftNSharesEmptyResult"]


#: The list ``PopleftNSharesEmptyResult`` hands every caller of ``popleft_n(0)``.
_NO_BLOCKS: list[Any] = []

#: The one list ``GetAllFreeBlocksReusesList`` refills on every call.
_LISTING: list[Any] = []

#: The one list ``PopleftNReusesBuffer`` refills on every call.
_POPPED: list[Any] = []


class PopleftNSharesEmptyResult(FreeBlockQueue[B]):
    """``popleft_n(0)`` returns one shared empty list instead of a new one (a "free" fast path).

    A caller that extends the list it got (``taken = queue.popleft_n(k); taken.append(b)``)
    changes what every later ``popleft_n(0)``, on any queue, returns.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks; for ``n == 0``, return the shared empty list."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count == 0:
            return _NO_BLOCKS  # should be a new list: the caller owns the list it gets
        if count > self.num_free_blocks:
            raise too_few_blocks(count, self.num_free_blocks)
        if count < 0:
            raise NegativeCountError(f"popleft_n({count}): the count must not be negative")
        head = self.fake_free_list_head
        # One pass detaches the run block by block; the head and the first kept block
        # are rewired only after it. Filled by index, which is cheaper per block than
        # list.append in CPython.
        popped: list[B] = [None] * count  # type: ignore[list-item]  # every slot is filled below
        # The allocation may set off a garbage collection, whose finalizers may take
        # blocks from this queue: count again, once it has run, and read the front only
        # then. Python 3.12+ runs it at the next call or loop, not in the allocation.
        if _COLLECTS_AT_CHECKPOINTS:
            _checkpoint()
        if count > self.num_free_blocks:
            raise too_few_blocks(count, self.num_free_blocks)
        following: Block | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes, each
        # outer one finishes what an interrupt cut short of the one inside.
        undone = False
        try:
            try:
                try:
                    block: Block = head.next_free_block  # type: ignore[assignment]  # I1
                    for index in range(count):
                        popped[index] = block  # type: ignore[assignment]  # I2: count <= n, never the tail
                        following = block.next_free_block
                        # I4: each popped block leaves detached.
                        block.prev_free_block = block.next_free_block = None
                        block = following  # type: ignore[assignment]  # I1: set on every linked block
                    # The first kept block's back link first, inside: a count written from outside
                    # (I2) runs the walk past the tail, and then there is none to set.
                    block.prev_free_block = head
                except BaseException as error:
                    # A signal between two blocks, or a None link inside the counted run (I1
                    # broken by outside code): put every block taken so far back where it was.
                    arrived = relink_taken(head, popped, following)
                    undone = True
                    if arrived is not None:
                        raise arrived  # noqa: B904 -- it carries the first error as its __context__
                    if isinstance(error, (AttributeError, TypeError)):
                        raise ran_off_the_chain(
                            "popleft_n",
                            self.fake_free_list_tail,
                            popped,
                            count,
                            self.num_free_blocks,
                        ) from None
                    raise
            except BaseException as arrived:
                if undone:
                    raise
                raise relink_taken(head, popped, following) or arrived  # noqa: B904 -- as above
        except BaseException as arrived:
            if undone:
                raise
            raise relink_taken(head, popped, following) or arrived  # noqa: B904 -- as above
        # The splice's last write: the first kept block (or the tail) follows the head.
        head.next_free_block = block
        self.num_free_blocks -= count  # I2
        return popped


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
            raise too_few_blocks(count, self.num_free_blocks)
        if count < 0:
            raise NegativeCountError(f"popleft_n({count}): the count must not be negative")
        head = self.fake_free_list_head
        # One pass detaches the run block by block; the head and the first kept block
        # are rewired only after it. Filled by index, which is cheaper per block than
        # list.append in CPython.
        popped: list[B] = _POPPED  # should be a new list
        popped.clear()
        popped.extend([None] * count)  # type: ignore[list-item]  # every slot is filled below
        # The allocation may set off a garbage collection, whose finalizers may take
        # blocks from this queue: count again, once it has run, and read the front only
        # then. Python 3.12+ runs it at the next call or loop, not in the allocation.
        if _COLLECTS_AT_CHECKPOINTS:
            _checkpoint()
        if count > self.num_free_blocks:
            raise too_few_blocks(count, self.num_free_blocks)
        following: Block | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes, each
        # outer one finishes what an interrupt cut short of the one inside.
        undone = False
        try:
            try:
                try:
                    block: Block = head.next_free_block  # type: ignore[assignment]  # I1
                    for index in range(count):
                        popped[index] = block  # type: ignore[assignment]  # I2: count <= n, never the tail
                        following = block.next_free_block
                        # I4: each popped block leaves detached.
                        block.prev_free_block = block.next_free_block = None
                        block = following  # type: ignore[assignment]  # I1: set on every linked block
                    # The first kept block's back link first, inside: a count written from outside
                    # (I2) runs the walk past the tail, and then there is none to set.
                    block.prev_free_block = head
                except BaseException as error:
                    # A signal between two blocks, or a None link inside the counted run (I1
                    # broken by outside code): put every block taken so far back where it was.
                    arrived = relink_taken(head, popped, following)
                    undone = True
                    if arrived is not None:
                        raise arrived  # noqa: B904 -- it carries the first error as its __context__
                    if isinstance(error, (AttributeError, TypeError)):
                        raise ran_off_the_chain(
                            "popleft_n",
                            self.fake_free_list_tail,
                            popped,
                            count,
                            self.num_free_blocks,
                        ) from None
                    raise
            except BaseException as arrived:
                if undone:
                    raise
                raise relink_taken(head, popped, following) or arrived  # noqa: B904 -- as above
        except BaseException as arrived:
            if undone:
                raise
            raise relink_taken(head, popped, following) or arrived  # noqa: B904 -- as above
        # The splice's last write: the first kept block (or the tail) follows the head.
        head.next_free_block = block
        self.num_free_blocks -= count  # I2
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
        block: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        found: list[B] = _LISTING  # should be a new list
        found.clear()
        while block is not tail:
            found.append(block)  # type: ignore[arg-type]  # I1: a B
            block = block.next_free_block  # type: ignore[assignment]  # I1
        return found
