"""The production free-block queue: O(1) popleft, append and remove, no ``==``.

Representation
--------------
The queue is an intrusive doubly linked list threaded through the blocks'
own ``prev_free_block`` and ``next_free_block`` slots, between two sentinels
that belong to the queue and never leave it::

    head <-> b1 <-> b2 <-> ... <-> bn <-> tail

Invariants (cited as I1..I5 in the methods that maintain them; the checkers in
``verified_queue.invariants`` verify I1..I4 in O(n)):

I1. ``head.prev_free_block`` and ``tail.next_free_block`` are ``None``; every
    other link between ``head`` and ``tail`` is set, and for each adjacent pair
    ``a -> b``, ``b.prev_free_block is a``.
I2. ``num_free_blocks`` is the number of blocks strictly between the sentinels.
I3. No block appears twice between the sentinels, and no sentinel (of this or
    any other queue) appears there at all.
I4. A block that is in no queue is detached: both links are ``None``. So a
    linked block has both links set, a detached one neither, and a sentinel
    exactly one; one or two link reads tell them apart in O(1).
I5. Blocks are compared by identity only: no method calls a block's
    ``__eq__`` or ``__hash__``.

Because the sentinels never leave, every real block has a predecessor and a
successor, and no method needs a special case for the ends. The guards in the
methods are plain ``if ...: raise`` (they hold under ``python -O``) and read at
most the links the method needs anyway, plus one. The one misuse they cannot
see in O(1) is ``remove`` of a block linked in a *different* queue: the
``CheckedFreeBlockQueue`` of check mode catches that.

This module is the hot path and, with the Block it links, the only code worth
compiling; it imports no checker, and its methods allocate nothing but the
lists they return (and ``append_n``'s copy of a batch that is not a list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from verified_queue.block import Block, Sentinel
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
)

__all__ = ["FreeBlockQueue"]

B = TypeVar("B", bound=Block)

_Class = TypeVar("_Class")

try:
    # Only the compiled build needs it, and only while compiling (see block.py).
    from mypy_extensions import mypyc_attr
except ImportError:  # the pure-Python build has no runtime dependencies

    def mypyc_attr(*_names: str, **_options: object) -> Callable[[_Class], _Class]:
        """Stand in for mypyc's class options, which mean nothing to the interpreter."""
        return lambda cls: cls


# Compiled, interpreted subclasses (the checked queue, users' own) must still work.
@mypyc_attr(allow_interpreted_subclasses=True)
class FreeBlockQueue(Generic[B]):
    """A FIFO of free blocks: evict from the front, free to the back, hit in the middle.

    ``FreeBlockQueue(blocks)`` links ``blocks`` front to back in the given
    order. Iteration goes from the front (the next block to evict) to the back
    (the most recently freed).

    >>> blocks = [Block() for _ in range(3)]
    >>> queue = FreeBlockQueue(blocks)
    >>> queue.popleft() is blocks[0]
    True
    >>> queue.remove(blocks[2])
    >>> queue.append(blocks[0])
    >>> queue.get_all_free_blocks() == [blocks[1], blocks[0]]
    True
    >>> queue
    <FreeBlockQueue with 2 free blocks>
    """

    __slots__ = ("fake_free_list_head", "fake_free_list_tail", "num_free_blocks")

    fake_free_list_head: Block
    fake_free_list_tail: Block
    num_free_blocks: int

    def __init__(self, blocks: Iterable[B] = ()) -> None:
        """Link ``blocks`` front to back, all or none.

        Raises :class:`AlreadyInQueueError`, with every block left as it was,
        if a block is linked, repeated or a sentinel.

        Runtime complexity: O(n)
        """
        head = Sentinel("head")
        tail = Sentinel("tail")
        # I1: an empty queue is the two sentinels linked to each other.
        head.next_free_block = tail
        tail.prev_free_block = head
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail
        self.num_free_blocks = 0
        self.append_n(blocks)

    def __len__(self) -> int:
        """Return the number of free blocks.

        Runtime complexity: O(1)

        >>> len(FreeBlockQueue([Block(), Block()]))
        2
        """
        return self.num_free_blocks

    def __bool__(self) -> bool:
        """Return whether any block is free.

        Runtime complexity: O(1)

        >>> bool(FreeBlockQueue())
        False
        """
        return self.num_free_blocks != 0

    def __iter__(self) -> Iterator[B]:
        """Yield the free blocks from the front to the back.

        Runtime complexity: O(n)

        >>> blocks = [Block(), Block()]
        >>> [b is orig for b, orig in zip(FreeBlockQueue(blocks), blocks)]
        [True, True]
        """
        tail = self.fake_free_list_tail
        # The locals are declared Block (the links say Block | None) because I1
        # guarantees a successor: compiled, that makes every link a C field access.
        block: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        while block is not tail:
            yield block  # type: ignore[misc]  # I1, I3: every block between the sentinels is a B
            block = block.next_free_block  # type: ignore[assignment]  # I1: set on every linked block

    def __contains__(self, block: object) -> bool:
        """Return whether ``block`` itself (by identity, never ``==``) is in this queue.

        Runtime complexity: O(n)

        >>> block = Block()
        >>> queue = FreeBlockQueue([block])
        >>> block in queue, Block() in queue
        (True, False)
        """
        tail = self.fake_free_list_tail
        node: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        while node is not tail:
            if node is block:
                return True
            node = node.next_free_block  # type: ignore[assignment]  # I1: set on every linked block
        return False

    def __repr__(self) -> str:
        """Name the class and the count, never the blocks (a queue may hold millions).

        Runtime complexity: O(1)
        """
        return f"<{type(self).__qualname__} with {self.num_free_blocks} free blocks>"

    def popleft(self) -> B:
        """Detach and return the front block (the next one to evict).

        Raises :class:`EmptyQueueError` if the queue is empty.

        Runtime complexity: O(1)

        >>> blocks = [Block(), Block()]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.popleft() is blocks[0], len(queue)
        (True, 1)
        """
        head = self.fake_free_list_head
        block: Block = head.next_free_block  # type: ignore[assignment]  # I1: the head has a successor
        following = block.next_free_block
        if following is None:
            # I1: only the tail has no successor, so the queue is empty.
            raise EmptyQueueError("popleft() from an empty FreeBlockQueue")
        # Splice the front block out.
        head.next_free_block = following
        following.prev_free_block = head
        # I4: the popped block leaves detached.
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1  # I2
        return block  # type: ignore[return-value]  # I3: not a sentinel, so a B

    def popleft_n(self, n: int) -> list[B]:
        """Detach and return the first ``n`` blocks, front first.

        ``popleft_n(0)`` returns ``[]``. Raises :class:`EmptyQueueError` if
        ``n > len(self)`` and :class:`NegativeCountError` if ``n < 0``; either
        way the queue is unchanged.

        Runtime complexity: O(n)

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.popleft_n(2) == blocks[:2], len(queue)
        (True, 1)
        """
        if n > self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({n}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        if n < 0:
            raise NegativeCountError(f"popleft_n({n}): the count must not be negative")
        head = self.fake_free_list_head
        block: Block = head.next_free_block  # type: ignore[assignment]  # I1
        # Filled by index: cheaper per block than list.append in CPython.
        popped: list[B] = [None] * n  # type: ignore[list-item]  # every slot is filled below
        for index in range(n):
            popped[index] = block  # type: ignore[assignment]  # I2: n <= count, never the tail
            following: Block = block.next_free_block  # type: ignore[assignment]  # I1
            # I4: each popped block leaves detached.
            block.prev_free_block = block.next_free_block = None
            block = following
        # Splice the run out: the first kept block (or the tail) follows the head.
        head.next_free_block = block
        block.prev_free_block = head
        self.num_free_blocks -= n  # I2
        return popped

    def remove(self, block: B) -> None:
        """Detach ``block`` from anywhere in the queue (a prefix-cache hit).

        Raises :class:`NotInQueueError` if ``block`` is detached or a sentinel.
        A block linked in a *different* queue cannot be told apart in O(1)
        from one linked in this queue: ``CheckedFreeBlockQueue`` catches that.

        Runtime complexity: O(1)

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.remove(blocks[1])
        >>> queue.get_all_free_blocks() == [blocks[0], blocks[2]]
        True
        """
        before = block.prev_free_block
        after = block.next_free_block
        if before is None or after is None:
            # I4: a detached block has neither link, a sentinel only one.
            raise _not_linked(block)
        # Bridge the neighbours over the block.
        before.next_free_block = after
        after.prev_free_block = before
        # I4: the removed block leaves detached.
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1  # I2

    def append(self, block: B) -> None:
        """Link a detached ``block`` at the back (a block just freed).

        Raises :class:`AlreadyInQueueError` if ``block`` is linked (a double
        free) or a sentinel; the queue and the block are then unchanged.

        Runtime complexity: O(1)

        >>> queue = FreeBlockQueue()
        >>> block = Block()
        >>> queue.append(block)
        >>> queue.popleft() is block
        True
        """
        if block.next_free_block is not None or block.prev_free_block is not None:
            # I4: only a detached block may join.
            raise _already_linked("append", block)
        tail = self.fake_free_list_tail
        last: Block = tail.prev_free_block  # type: ignore[assignment]  # I1: the tail has a predecessor
        # Link the block between the old last block and the tail.
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1  # I2

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back in order, all or none (``list.extend``).

        Raises :class:`AlreadyInQueueError` if a block is linked, repeated in
        the batch, or a sentinel; the queue and every block are then exactly as
        before. Any other error (a non-block in the batch, an iterator that
        raises) also leaves them as before.

        Runtime complexity: O(len(blocks))

        >>> blocks = [Block(), Block()]
        >>> queue = FreeBlockQueue()
        >>> queue.append_n(blocks)
        >>> queue.get_all_free_blocks() == blocks
        True
        """
        # Anything but an exact list is copied into one first: draining an
        # iterator up front means it cannot fail half-way through, and an exact
        # type test is cheaper than isinstance (compiled, a list[B] is indexed
        # directly instead of iterated through the generic protocol).
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        tail = self.fake_free_list_tail
        first_last: Block = tail.prev_free_block  # type: ignore[assignment]  # I1
        last = first_last
        # One pass links the batch behind the old last block. A repeated block
        # is seen by the guard because its first copy is linked by then.
        try:
            for block in batch:
                if block.next_free_block is not None or block.prev_free_block is not None:
                    # I4: only a detached block may join.
                    raise _already_linked("append_n", block)
                block.prev_free_block = last
                last.next_free_block = block
                last = block
        except BaseException:
            _unlink_run(first_last, last, tail)
            raise
        # Close the chain on the tail.
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(batch)  # I2

    def get_all_free_blocks(self) -> list[B]:
        """Return a new list of the free blocks, front first (``list(queue)``).

        Runtime complexity: O(n)

        >>> blocks = [Block(), Block()]
        >>> FreeBlockQueue(blocks).get_all_free_blocks() == blocks
        True
        """
        tail = self.fake_free_list_tail
        block: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        found: list[B] = []
        while block is not tail:
            found.append(block)  # type: ignore[arg-type]  # I1, I3: a B
            block = block.next_free_block  # type: ignore[assignment]  # I1
        return found


def _already_linked(operation: str, block: Block) -> AlreadyInQueueError:
    """Build the error for a block that may not join a queue (kept off the hot path)."""
    if isinstance(block, Sentinel):
        reason = "it is a queue sentinel"
    else:
        reason = "it is already linked in a queue (a double free?)"
    return AlreadyInQueueError(f"{operation}({block!r}): {reason}")


def _not_linked(block: Block) -> NotInQueueError:
    """Build the error for a block that ``remove`` cannot take (kept off the hot path)."""
    if isinstance(block, Sentinel):
        reason = "it is a queue sentinel, which never leaves its queue"
    else:
        reason = "it is not linked in a queue"
    return NotInQueueError(f"remove({block!r}): {reason}")


def _unlink_run(before_run: Block, last: Block, tail: Block) -> None:
    """Undo a half-linked batch: detach ``before_run.next .. last`` and reconnect ``tail``.

    Walks back from ``last`` over the blocks this batch linked, so it ends.
    """
    block = last
    while block is not before_run:
        previous = block.prev_free_block
        # I4: every block of the failed batch leaves detached again.
        block.prev_free_block = block.next_free_block = None
        block = previous  # type: ignore[assignment]  # set by the batch loop
    # I1: the old last block is followed by the tail again.
    before_run.next_free_block = tail
