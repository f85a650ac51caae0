"""The reference semantics of the free-block queue: a plain Python list, compared by identity.

:class:`ListModel` has the same API as :class:`~verified_queue.FreeBlockQueue` and raises the
same exceptions, with the same messages, in the same situations, but it keeps its blocks in a
``list`` and never touches their links. It is the definition of correct that every checker in
``specs/`` and ``tests/`` compares the linked queue against. (The messages are part of it
because a caller debugging a double free reads them; the exhaustive check compares them.)

Which blocks are linked anywhere is part of the state the model needs: ``append`` of a block
that sits in *another* queue is a double free too. Models of queues that share one pool of
blocks therefore share one :class:`Membership`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, NoReturn, TypeVar

from verified_queue import (
    AlreadyInQueueError,
    Block,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
    WrongTypeError,
)
from verified_queue.block import Sentinel

__all__ = ["ListModel", "Membership", "SpecBlock", "ValueComparisonError", "position"]

B = TypeVar("B", bound=Block)


class ValueComparisonError(TypeError):
    """A :class:`SpecBlock` was compared or hashed by value (invariant I5 forbids it).

    A ``TypeError``, as for any unhashable type, so tools that probe hashability cope.
    """


class SpecBlock(Block):
    """A block with a number for reports, whose ``__eq__`` and ``__hash__`` raise.

    Every checker runs on these, so a queue that compares blocks by value instead of identity
    fails the check that exercises it.

    >>> block = SpecBlock(3)
    >>> block
    SpecBlock(3)
    >>> block == block
    Traceback (most recent call last):
    ...
    specs.model.ValueComparisonError: SpecBlock(3) was compared by value
    """

    __slots__ = ("number",)

    number: int

    def __init__(self, number: int) -> None:
        """Create a detached block labelled ``number``."""
        self.number = number

    def __eq__(self, other: object) -> NoReturn:
        """Refuse: blocks compare by identity only (I5)."""
        raise ValueComparisonError(f"{self!r} was compared by value")

    def __hash__(self) -> NoReturn:
        """Refuse: blocks are keyed by ``id()`` only (I5)."""
        raise ValueComparisonError(f"{self!r} was hashed")

    def __repr__(self) -> str:
        """Name the block by its number."""
        return f"SpecBlock({self.number})"


def position(items: Iterable[object], item: object) -> int:
    """Return the index of ``item`` itself in ``items``, or -1 (``list.index`` would use ``==``).

    Runtime complexity: O(n)

    >>> a, b = SpecBlock(0), SpecBlock(1)
    >>> position([a, b], b), position([a], b)
    (1, -1)
    """
    for index, candidate in enumerate(items):
        if candidate is item:
            return index
    return -1


class Membership:
    """The ids of the blocks linked in any of a group of model queues that share blocks.

    >>> membership = Membership()
    >>> block = SpecBlock(0)
    >>> left, right = ListModel(membership=membership), ListModel(membership=membership)
    >>> left.append(block)
    >>> right.append(block)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.AlreadyInQueueError: append(SpecBlock(0)): it is already linked in ...
    """

    __slots__ = ("linked_ids",)

    def __init__(self) -> None:
        """Start with no block linked anywhere."""
        self.linked_ids: set[int] = set()

    def is_linked(self, block: Block) -> bool:
        """Return whether ``block`` is in one of the queues.

        Runtime complexity: O(1)
        """
        return id(block) in self.linked_ids


class ListModel(Generic[B]):
    """A free-block queue as a plain list: the front is index 0, the back is the end.

    >>> blocks = [SpecBlock(i) for i in range(3)]
    >>> model = ListModel(blocks)
    >>> model.popleft() is blocks[0]
    True
    >>> model.remove(blocks[2])
    >>> model.append(blocks[0])
    >>> model.get_all_free_blocks() == [blocks[1], blocks[0]]
    True
    >>> model.popleft_n(3)
    Traceback (most recent call last):
    ...
    verified_queue.errors.EmptyQueueError: popleft_n(3) from a FreeBlockQueue with 2 free blocks
    """

    __slots__ = ("blocks", "membership")

    def __init__(self, blocks: Iterable[B] = (), *, membership: Membership | None = None) -> None:
        """Hold ``blocks`` front to back; share ``membership`` with the models of sibling queues.

        Raises :class:`AlreadyInQueueError`, holding nothing, if a block is already in a
        queue, repeated, or a sentinel.

        Runtime complexity: O(n)
        """
        self.membership = Membership() if membership is None else membership
        self.blocks: list[B] = []
        self.append_n(blocks)

    def copy(self) -> ListModel[B]:
        """Return an independent model in the same state, with its own copy of the membership.

        Runtime complexity: O(n + linked blocks)

        >>> model = ListModel([SpecBlock(0)])
        >>> twin = model.copy()
        >>> twin.popleft()
        SpecBlock(0)
        >>> len(model), len(twin)
        (1, 0)
        """
        twin: ListModel[B] = ListModel(membership=Membership())
        twin.blocks = list(self.blocks)
        twin.membership.linked_ids = set(self.membership.linked_ids)
        return twin

    @property
    def num_free_blocks(self) -> int:
        """Return the number of free blocks, like the queue's attribute.

        Runtime complexity: O(1)
        """
        return len(self.blocks)

    def __len__(self) -> int:
        """Return the number of free blocks.

        Runtime complexity: O(1)
        """
        return len(self.blocks)

    def __bool__(self) -> bool:
        """Return whether any block is free.

        Runtime complexity: O(1)
        """
        return bool(self.blocks)

    def __iter__(self) -> Iterator[B]:
        """Yield the free blocks front first.

        Runtime complexity: O(n)
        """
        return iter(list(self.blocks))

    def __contains__(self, block: object) -> bool:
        """Return whether ``block`` itself is free here (identity, never ``==``).

        Runtime complexity: O(n)
        """
        return position(self.blocks, block) >= 0

    def popleft(self) -> B:
        """Remove and return the front block; :class:`EmptyQueueError` if there is none.

        Runtime complexity: O(n) (the model is not meant to be fast)
        """
        if not self.blocks:
            raise EmptyQueueError("No free blocks available")
        block = self.blocks.pop(0)
        self.membership.linked_ids.discard(id(block))
        return block

    def popleft_n(self, n: int) -> list[B]:
        """Remove and return the first ``n`` blocks, front first, all or none.

        :class:`EmptyQueueError` if ``n > len(self)``, :class:`NegativeCountError` if ``n < 0``,
        :class:`WrongTypeError` if ``n`` is a ``bool`` or no integer (``operator.index``).

        Runtime complexity: O(len(self))
        """
        if type(n) is not int:
            if isinstance(n, bool) or not hasattr(type(n), "__index__"):
                kind = "a bool" if isinstance(n, bool) else type(n).__qualname__
                raise WrongTypeError(f"popleft_n({n!r}): the count must be an integer, not {kind}")
            n = n.__index__()
        if n > len(self.blocks):
            raise EmptyQueueError(
                f"popleft_n({n}) from a FreeBlockQueue with {len(self.blocks)} free blocks"
            )
        if n < 0:
            raise NegativeCountError(f"popleft_n({n}): the count must not be negative")
        popped = self.blocks[:n]
        # Rebind rather than ``del self.blocks[:n]``: under CrossHair, a slice by a symbolic
        # ``n`` is a view of the list, which deleting from the list in place would corrupt.
        self.blocks = self.blocks[n:]
        for block in popped:
            self.membership.linked_ids.discard(id(block))
        return popped

    def remove(self, block: B) -> None:
        """Remove ``block`` itself from anywhere in the queue.

        :class:`NotInQueueError` if it is not here: detached, a sentinel, or in another queue.
        (The production queue cannot tell "in another queue" in O(1); calling it so is a
        precondition violation there, and ``CheckedFreeBlockQueue`` raises as the model does.)

        Runtime complexity: O(n)
        """
        index = position(self.blocks, block)
        if index < 0:
            if isinstance(block, Sentinel):
                reason = "it is a queue sentinel, which never leaves its queue"
            elif self.membership.is_linked(block):
                reason = "it is linked in another queue"
            else:
                reason = "it is not linked in a queue"
            raise NotInQueueError(f"remove({block!r}): {reason}")
        del self.blocks[index]
        self.membership.linked_ids.discard(id(block))

    def append(self, block: B) -> None:
        """Add a free ``block`` at the back.

        :class:`AlreadyInQueueError` if it is a sentinel or already in a queue (a double
        free), and then nothing changes.

        Runtime complexity: O(1)
        """
        if isinstance(block, Sentinel) or self.membership.is_linked(block):
            raise _refused("append", block)
        self.blocks.append(block)
        self.membership.linked_ids.add(id(block))

    def append_n(self, blocks: Iterable[B]) -> None:
        """Add ``blocks`` at the back in order, all or none (``list.extend``).

        :class:`AlreadyInQueueError` if one is a sentinel, already in a queue, or repeated in
        the batch. An error raised while iterating ``blocks`` propagates. Either way nothing
        changes.

        Runtime complexity: O(len(blocks))
        """
        batch = self._admissible("append_n", blocks)
        self.blocks.extend(batch)
        self.membership.linked_ids.update(map(id, batch))

    def _admissible(self, operation: str, blocks: Iterable[B]) -> list[B]:
        """Return ``blocks`` as a list, or raise for the first one that may not join."""
        batch = list(blocks)
        seen: set[int] = set()
        for block in batch:
            if isinstance(block, Sentinel) or self.membership.is_linked(block):
                raise _refused(operation, block)
            if id(block) in seen:
                raise AlreadyInQueueError(f"{operation}({block!r}): it is repeated in the batch")
            seen.add(id(block))
        return batch

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Add ``blocks`` at the front in order, all or none (``list[0:0] = blocks``).

        Refuses exactly what :meth:`append_n` refuses, with ``prepend_n`` in the message.

        Runtime complexity: O(len(self) + len(blocks))
        """
        batch = self._admissible("prepend_n", blocks)
        self.blocks[0:0] = batch
        self.membership.linked_ids.update(map(id, batch))

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the blocks after ``cursor`` itself, or all of them for ``None``.

        :class:`NotInQueueError` if ``cursor`` is not here: detached, another queue's
        sentinel (callers map this queue's own sentinels to ``None`` or to the end), or
        linked in another queue (the production queue cannot tell that one in O(1) and
        walks the other queue; ``CheckedFreeBlockQueue`` raises as the model does).

        Runtime complexity: O(n)
        """
        if cursor is None:
            return iter(list(self.blocks))
        index = position(self.blocks, cursor)
        if index < 0:
            if isinstance(cursor, Sentinel):
                reason = "it is another queue's sentinel"
            elif self.membership.is_linked(cursor):
                reason = "it is linked in another queue"
            else:
                reason = "it is not linked in a queue"
            raise NotInQueueError(f"iter_blocks_after({cursor!r}): {reason}")
        return iter(self.blocks[index + 1 :])

    def get_all_free_blocks(self) -> list[B]:
        """Return a new list of the free blocks, front first.

        Runtime complexity: O(n)
        """
        return list(self.blocks)


def _refused(operation: str, block: Block) -> AlreadyInQueueError:
    """The error for a block that may not join: a sentinel, or one already in a queue."""
    if isinstance(block, Sentinel):
        reason = "it is a queue sentinel"
    else:
        reason = "it is already linked in a queue (a double free?)"
    return AlreadyInQueueError(f"{operation}({block!r}): {reason}")
