"""Deliberately wrong free-block queues, for showing that no checker is vacuous.

Each class overrides one method of :class:`~verified_queue.FreeBlockQueue` with a small,
realistic mistake: the kind a refactor or a "harmless" speed-up introduces. Everything else,
error messages included, is the production code's, so a checker that reports a planted bug
reports the bug, not a difference in wording. Where the method is one the all-sizes proof
translates, the bug is the production method copied with the one defect.

:data:`CATALOGUE` records each bug's kind (:data:`KINDS`: guards, undo paths, aliasing,
constructors, linking, counts, iteration, identity) and the method it overrides;
:data:`PLANTED_BUGS` maps the same short names to the classes alone, and
``VERIFIED_QUEUE_SPEC_TARGET`` in :mod:`specs.contracts` takes them too. Every verification
layer is run against every bug (:mod:`specs.bug_matrix`, published in
``docs/bug-matrix.md``); a layer that cannot see a bug says why in
:data:`specs.bug_matrix.MISSES`, and every bug is caught by at least three layers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, SupportsIndex, TypeVar, cast

from verified_queue._messages import (
    already_linked,
    count_argument,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
    not_linked,
)
from verified_queue.block import Block, Sentinel
from verified_queue.errors import (
    EmptyQueueError,
    NegativeCountError,
)
from verified_queue.queue import (
    EMPTY_QUEUE_MESSAGE,
    FreeBlockQueue,
    _relink_taken,
    _undo_batch,
)

__all__ = [
    "CATALOGUE",
    "KINDS",
    "PLANTED_BUGS",
    "AppendGuardReadsNextOnly",
    "AppendNNotAtomic",
    "AppendNUndoClearsNextOnly",
    "AppendNWrongNeighbour",
    "AppendSkipsDoubleFreeCheck",
    "ConstructorNotAtomicForIterables",
    "ConstructorSkipsLinkCheck",
    "ContainsComparesByValue",
    "GetAllFreeBlocksReusesList",
    "IterBlocksAfterChecksLazily",
    "IterBlocksAfterGuardReadsNextOnly",
    "IterBlocksAfterYieldsCursor",
    "IterYieldsHeadSentinel",
    "PlantedBug",
    "PopleftLeavesLinks",
    "PopleftNAllowsNegative",
    "PopleftNOffByOne",
    "PopleftNReusesBuffer",
    "PopleftNSharesEmptyResult",
    "PrependNCountsBeforeLinking",
    "PrependNGuardReadsPrevOnly",
    "PrependNNotAtomic",
    "PrependNReversed",
    "PrependNUndoSkipsRejoin",
    "RemoveAcceptsSentinel",
    "RemoveForgetsCount",
    "SentinelReturned",
]

B = TypeVar("B", bound=Block)


def _linked(node: Block | None) -> Block:
    """Return ``node``, which the queue's invariants say is set; raise if they were broken."""
    if node is None:
        raise RuntimeError("a link the queue's invariants promise is None")
    return node


class PopleftLeavesLinks(FreeBlockQueue[B]):
    """``popleft`` splices the block out but leaves its own links set (I4 broken).

    The popped block still looks linked, so freeing it back is refused as a double free, and
    ``remove`` of it would corrupt the queue.
    """

    __slots__ = ()

    def popleft(self) -> B:
        """Splice out the front block without clearing its links."""
        head = self.fake_free_list_head
        block = _linked(head.next_free_block)
        following = block.next_free_block
        if following is None:
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        head.next_free_block = following
        following.prev_free_block = head
        self.num_free_blocks -= 1
        return cast(B, block)


class RemoveForgetsCount(FreeBlockQueue[B]):
    """``remove`` unlinks the block but never decrements ``num_free_blocks`` (I2 broken)."""

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block`` and forget to count it."""
        before = block.prev_free_block
        after = block.next_free_block
        if before is None or after is None:
            raise not_linked("remove", block)
        before.next_free_block = after
        after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None


class AppendNWrongNeighbour(FreeBlockQueue[B]):
    """``append_n`` links each block back to the old last block, not to its real predecessor.

    Right for a batch of one, so a test that only frees single blocks passes; from the second
    block of a batch on, the back links (I1) skip over the batch.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back, with every back link pointing at the old last block."""
        batch = list(blocks)
        tail = self.fake_free_list_tail
        attach_to = last = _linked(tail.prev_free_block)
        linked: list[Block] = []
        for block in batch:
            if block.next_free_block is not None or block.prev_free_block is not None:
                for undo in linked:
                    undo.prev_free_block = undo.next_free_block = None
                attach_to.next_free_block = tail
                raise already_linked("append_n", block)
            block.prev_free_block = attach_to  # should be ``last``
            last.next_free_block = block
            last = block
            linked.append(block)
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(batch)


class PopleftNOffByOne(FreeBlockQueue[B]):
    """``popleft_n`` refuses ``n == len(queue)``: the guard says ``>=`` where it means ``>``."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, wrongly refusing to empty the queue."""
        n = n if type(n) is int else count_argument("popleft_n", n)
        if n >= self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({n}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        if n < 0:
            raise NegativeCountError(f"popleft_n({n}): the count must not be negative")
        return super().popleft_n(n)


class SentinelReturned(FreeBlockQueue[B]):
    """``popleft`` on an empty queue hands out the tail sentinel instead of raising.

    The emptiness guard tests the wrong link (``block is None``, never true) so the tail
    sentinel is spliced out and returned, and the queue's count goes negative.
    """

    __slots__ = ()

    def popleft(self) -> B:
        """Pop the front block, or, wrongly, the tail sentinel of an empty queue."""
        head = self.fake_free_list_head
        block = head.next_free_block
        if block is None:
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        following = block.next_free_block
        head.next_free_block = following
        if following is not None:
            following.prev_free_block = head
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1
        return cast(B, block)


class AppendSkipsDoubleFreeCheck(FreeBlockQueue[B]):
    """``append`` links a block without checking that it is detached (a double free is accepted).

    Appending a block that is already linked cuts it out of its old place without fixing its
    neighbours, so the chain and the count are both corrupted.
    """

    __slots__ = ()

    def append(self, block: B) -> None:
        """Link ``block`` at the back, whatever its links say."""
        tail = self.fake_free_list_tail
        last = _linked(tail.prev_free_block)
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1


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


class RemoveAcceptsSentinel(FreeBlockQueue[B]):
    """``remove`` guards with ``and`` where it needs ``or``, so a sentinel (one link) gets through.

    Removing the tail sentinel cuts the last block's forward link and then fails on the
    missing one: a corrupted queue and the wrong exception.
    """

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block``, letting a sentinel past the guard."""
        before = block.prev_free_block
        after = block.next_free_block
        if before is None and after is None:
            raise not_linked("remove", block)
        if before is not None:
            before.next_free_block = after
        if after is not None:
            after.prev_free_block = before
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1


class ContainsComparesByValue(FreeBlockQueue[B]):
    """``in`` compares blocks with ``==`` (I5 broken): wrong for dataclass blocks, and slow."""

    __slots__ = ()

    def __contains__(self, block: object) -> bool:
        """Look ``block`` up by value."""
        return any(candidate == block for candidate in self)


class PrependNReversed(FreeBlockQueue[B]):
    """``prepend_n`` puts each block in front of the queue in turn, so the batch ends up reversed.

    Right for a batch of one, and every link is consistent, so only the order gives it away:
    after ``prepend_n([a, b])`` the queue starts ``b, a``.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link each block of ``blocks`` right after the head sentinel, one after another."""
        batch = list(blocks)
        head = self.fake_free_list_head
        linked: list[Block] = []
        try:
            for block in batch:
                if block.next_free_block is not None or block.prev_free_block is not None:
                    raise already_linked("prepend_n", block)
                first = _linked(head.next_free_block)
                block.prev_free_block = head
                block.next_free_block = first
                first.prev_free_block = block
                head.next_free_block = block  # in front of the block linked before it
                linked.append(block)
        except BaseException:
            for undone in reversed(linked):
                before = _linked(undone.prev_free_block)
                after = _linked(undone.next_free_block)
                before.next_free_block = after
                after.prev_free_block = before
                undone.prev_free_block = undone.next_free_block = None
            raise
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


class IterBlocksAfterYieldsCursor(FreeBlockQueue[B]):
    """``iter_blocks_after(cursor)`` starts the walk at the cursor instead of the block after it.

    From ``None`` it is right; from a block, the first block yielded is the cursor itself, so a
    walk resumed from a saved cursor visits that block twice.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the cursor and the blocks after it (or every block for ``None``)."""
        if cursor is None or cursor is self.fake_free_list_head:
            return iter(self)
        if cursor is self.fake_free_list_tail:
            return iter(())
        if cursor.next_free_block is None or cursor.prev_free_block is None:
            raise not_linked("iter_blocks_after", cursor)
        return self._walk(cursor)  # should start at cursor.next_free_block


class IterBlocksAfterChecksLazily(FreeBlockQueue[B]):
    """``iter_blocks_after`` is written as a generator, so it checks its cursor only when the
    iteration starts.

    A detached cursor or another queue's sentinel is accepted by the call; the caller learns
    of it later, wherever the iterator is first advanced.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the blocks after ``cursor``, deferring every check to the first ``next()``."""
        yield from super().iter_blocks_after(cursor)


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
        if type(n) is int and n == 0:
            return _NO_BLOCKS  # should be ``[]``: the caller owns the list it gets
        return super().popleft_n(n)


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


class ConstructorNotAtomicForIterables(FreeBlockQueue[B]):
    """The constructor links an iterator's blocks one by one with ``append``, not as one batch.

    A list goes through ``append_n``, all or none; an iterator (a generator, a tuple) is
    linked as it is drained, so a refused block leaves the blocks before it linked to a queue
    the caller never gets.
    """

    __slots__ = ()

    def __init__(self, blocks: Iterable[B] = ()) -> None:
        """Link ``blocks``: a list as a batch, anything else block by block."""
        super().__init__()
        if type(blocks) is list:
            self.append_n(blocks)
        else:
            for block in blocks:  # should be one append_n, which undoes a refused batch
                self.append(block)


class ConstructorSkipsLinkCheck(FreeBlockQueue[B]):
    """The constructor links its blocks directly, as vLLM's does, without ``append_n``'s checks.

    A new queue's blocks are taken to be fresh, so a repeated block or one linked in another
    queue is linked anyway, corrupting both.
    """

    __slots__ = ()

    def __init__(self, blocks: Iterable[B] = ()) -> None:
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


class AppendGuardReadsNextOnly(FreeBlockQueue[B]):
    """``append``'s double-free guard reads only ``next_free_block``.

    A linked block has both links, so a double free is still refused; but a tail sentinel
    (its only link is the back one) gets through and is linked into the queue.
    """

    __slots__ = ()

    def append(self, block: B) -> None:
        """Link ``block`` at the back, refusing it only if its forward link is set."""
        tail = self.fake_free_list_tail
        if block.next_free_block is not None:  # should also test prev_free_block
            raise already_linked("append", block)
        last = _linked(tail.prev_free_block)
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1


class PrependNGuardReadsPrevOnly(FreeBlockQueue[B]):
    """``prepend_n``'s guard reads only ``prev_free_block``.

    A linked block, or one repeated in the batch, is still refused; a head sentinel (its only
    link is the forward one) is linked into the queue.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front, refusing a block only if its back link is set."""
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
                if node.prev_free_block is not None:  # should also test next_free_block
                    raise already_linked("prepend_n", node)
                node.prev_free_block = last
                last.next_free_block = node
                last = node
        except BaseException as error:
            raise _undo_batch("prepend_n", batch, head, last, after, error=error) from None
        last.next_free_block = after
        after.prev_free_block = last
        self.num_free_blocks += added


class IterBlocksAfterGuardReadsNextOnly(FreeBlockQueue[B]):
    """``iter_blocks_after`` takes a cursor whose forward link is set for a linked block.

    A detached block is still refused, and this queue's own sentinels are right; another
    queue's head sentinel is taken as a linked cursor, and the refusal comes only when the
    walk runs into that queue's tail.
    """

    __slots__ = ()

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the blocks after ``cursor``, testing only its forward link."""
        if cursor is None:
            return self._walk(self.fake_free_list_head.next_free_block)
        following = cursor.next_free_block
        if following is None:  # should also test prev_free_block
            if cursor is self.fake_free_list_tail:
                following = cursor
            else:
                raise not_linked("iter_blocks_after", cursor)
        return self._walk(following)


class PopleftNAllowsNegative(FreeBlockQueue[B]):
    """``popleft_n`` lost its negative-count guard: ``range(n)`` is empty anyway, it seemed.

    ``popleft_n(-2)`` returns ``[]`` instead of raising, and subtracts ``-2`` from the count.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, without refusing a negative ``n``."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count > self.num_free_blocks:
            raise EmptyQueueError(
                f"popleft_n({count}) from a FreeBlockQueue with {self.num_free_blocks} free blocks"
            )
        # should raise NegativeCountError here for count < 0
        head = self.fake_free_list_head
        popped: list[B] = [None] * count  # type: ignore[list-item]  # every slot is filled below
        following: Block | None = None
        try:
            block: Block = head.next_free_block  # type: ignore[assignment]  # I1
            for index in range(count):
                popped[index] = block  # type: ignore[assignment]  # never the tail
                following = block.next_free_block
                block.prev_free_block = block.next_free_block = None
                block = following  # type: ignore[assignment]  # I1: set on every linked block
        except BaseException as error:
            _relink_taken(head, popped, following)
            if isinstance(error, (AttributeError, TypeError)):
                raise lost_inner_link("popleft_n", "head") from None
            raise
        head.next_free_block = block
        block.prev_free_block = head
        self.num_free_blocks -= count
        return popped


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


class PrependNCountsBeforeLinking(FreeBlockQueue[B]):
    """``prepend_n`` adds the batch to the count before linking it, so a refused batch is counted.

    The production code takes the batch's length first and adds it after the loop; here the
    addition moved up with it, and the undo does not take it back.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Count ``blocks``, then link them at the front, all or none (but the count stays)."""
        batch: list[B] = blocks if type(blocks) is list else list(blocks)
        head = self.fake_free_list_head
        after = head.next_free_block
        if after is None:
            raise lost_inner_link("prepend_n", "head")
        self.num_free_blocks += len(batch)  # should come after the loop
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
            raise _undo_batch("prepend_n", batch, head, last, after, error=error) from None
        last.next_free_block = after
        after.prev_free_block = last


class IterYieldsHeadSentinel(FreeBlockQueue[B]):
    """``iter(queue)`` starts its walk at the head sentinel instead of the block after it.

    The first item yielded is the head sentinel; ``get_all_free_blocks`` walks by itself and
    is right.
    """

    __slots__ = ()

    def __iter__(self) -> Iterator[B]:
        """Yield the head sentinel, then the free blocks."""
        return self._walk(self.fake_free_list_head)  # should start at its next_free_block


class PlantedBug(NamedTuple):
    """A planted bug: its queue class, the kind of defect, and the method it overrides."""

    queue_type: type[FreeBlockQueue[Any]]
    kind: str
    operation: str


#: The kinds of defect, with what each gets wrong.
KINDS: dict[str, str] = {
    "guard": "a check that must refuse misuse lets it through, or refuses correct use",
    "undo": "the rollback of a refused or interrupted batch leaves something changed",
    "aliasing": "a returned list is shared with the queue or with other callers",
    "constructor": "building a queue links differently from append_n",
    "linking": "a successful call leaves wrong links or a wrong order",
    "count": "num_free_blocks drifts from the number of linked blocks",
    "iteration": "a walk yields the wrong blocks",
    "identity": "blocks are compared by value instead of by identity",
}

#: Every planted bug by name, with its kind and the method it overrides, grouped by kind.
CATALOGUE: dict[str, PlantedBug] = {
    # guards
    "popleft_n_off_by_one": PlantedBug(PopleftNOffByOne, "guard", "popleft_n"),
    "popleft_n_allows_negative": PlantedBug(PopleftNAllowsNegative, "guard", "popleft_n"),
    "sentinel_returned": PlantedBug(SentinelReturned, "guard", "popleft"),
    "append_skips_double_free_check": PlantedBug(AppendSkipsDoubleFreeCheck, "guard", "append"),
    "append_guard_reads_next_only": PlantedBug(AppendGuardReadsNextOnly, "guard", "append"),
    "prepend_n_guard_reads_prev_only": PlantedBug(PrependNGuardReadsPrevOnly, "guard", "prepend_n"),
    "remove_accepts_sentinel": PlantedBug(RemoveAcceptsSentinel, "guard", "remove"),
    "iter_blocks_after_checks_lazily": PlantedBug(
        IterBlocksAfterChecksLazily, "guard", "iter_blocks_after"
    ),
    "iter_blocks_after_guard_reads_next_only": PlantedBug(
        IterBlocksAfterGuardReadsNextOnly, "guard", "iter_blocks_after"
    ),
    # undo paths
    "append_n_not_atomic": PlantedBug(AppendNNotAtomic, "undo", "append_n"),
    "prepend_n_not_atomic": PlantedBug(PrependNNotAtomic, "undo", "prepend_n"),
    "append_n_undo_clears_next_only": PlantedBug(AppendNUndoClearsNextOnly, "undo", "append_n"),
    "prepend_n_undo_skips_rejoin": PlantedBug(PrependNUndoSkipsRejoin, "undo", "prepend_n"),
    # aliasing
    "popleft_n_shares_empty_result": PlantedBug(PopleftNSharesEmptyResult, "aliasing", "popleft_n"),
    "popleft_n_reuses_buffer": PlantedBug(PopleftNReusesBuffer, "aliasing", "popleft_n"),
    "get_all_free_blocks_reuses_list": PlantedBug(
        GetAllFreeBlocksReusesList, "aliasing", "get_all_free_blocks"
    ),
    # constructor
    "constructor_not_atomic_for_iterables": PlantedBug(
        ConstructorNotAtomicForIterables, "constructor", "__init__"
    ),
    "constructor_skips_link_check": PlantedBug(
        ConstructorSkipsLinkCheck, "constructor", "__init__"
    ),
    # linking
    "popleft_leaves_links": PlantedBug(PopleftLeavesLinks, "linking", "popleft"),
    "append_n_wrong_neighbour": PlantedBug(AppendNWrongNeighbour, "linking", "append_n"),
    "prepend_n_reversed": PlantedBug(PrependNReversed, "linking", "prepend_n"),
    # count
    "remove_forgets_count": PlantedBug(RemoveForgetsCount, "count", "remove"),
    "prepend_n_counts_before_linking": PlantedBug(
        PrependNCountsBeforeLinking, "count", "prepend_n"
    ),
    # iteration
    "iter_blocks_after_yields_cursor": PlantedBug(
        IterBlocksAfterYieldsCursor, "iteration", "iter_blocks_after"
    ),
    "iter_yields_head_sentinel": PlantedBug(IterYieldsHeadSentinel, "iteration", "__iter__"),
    # identity
    "contains_compares_by_value": PlantedBug(ContainsComparesByValue, "identity", "__contains__"),
}

#: Every planted bug by a short name (the queue class alone), in catalogue order.
PLANTED_BUGS: dict[str, type[FreeBlockQueue[Any]]] = {
    name: bug.queue_type for name, bug in CATALOGUE.items()
}
