"""Guards: planted bugs where a check lets misuse through, or refuses correct use.

The bugs of kind ``"guard"`` in :data:`specs.planted_bugs.CATALOGUE`. Most are the production
method copied with its guard changed; :data:`specs.planted_bugs.copies.NOT_COPIES` says why
the others are not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import SupportsIndex, cast

from specs.planted_bugs._common import B, BlockT
from verified_queue._messages import (
    already_linked,
    batch_argument,
    count_argument,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
    not_linked,
    ran_off_the_chain,
    too_few_blocks,
)
from verified_queue._undo import finish_unstage, means_not_a_block, relink_taken, unstage
from verified_queue.block import Block
from verified_queue.errors import EmptyQueueError, QueueError
from verified_queue.queue import (
    _COLLECTS_AT_CHECKPOINTS,
    EMPTY_QUEUE_MESSAGE,
    FreeBlockQueue,
    _checkpoint,
)

__all__ = [
    "AppendGuardReadsNextOnly",
    "AppendSkipsDoubleFreeCheck",
    "IterBlocksAfterChecksLazily",
    "IterBlocksAfterGuardReadsNextOnly",
    "PopleftNAllowsNegative",
    "PopleftNOffByOne",
    "PrependNGuardReadsPrevOnly",
    "RemoveAcceptsSentinel",
    "SentinelReturned",
]


class PopleftNOffByOne(FreeBlockQueue[B]):
    """``popleft_n`` refuses ``n == len(queue)``: the guard says ``>=`` where it means ``>``."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, wrongly refusing to empty the queue."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count >= self.num_free_blocks:  # should be >
            raise too_few_blocks(count, self.num_free_blocks)
        return super().popleft_n(count)


class PopleftNAllowsNegative(FreeBlockQueue[B]):
    """``popleft_n`` lost its negative-count guard: ``range(n)`` is empty anyway, it seemed.

    ``popleft_n(-2)`` returns ``[]`` instead of raising, and subtracts ``-2`` from the count.
    """

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, without refusing a negative ``n``."""
        count: int = n if type(n) is int else count_argument("popleft_n", n)
        if count > self.num_free_blocks:
            raise too_few_blocks(count, self.num_free_blocks)
        # should raise NegativeCountError here for count < 0
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
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            # should refuse a block with a link set (I4)
            last: Block = tail.prev_free_block  # type: ignore[assignment]  # I1: the tail has a predecessor
            # Link the block between the old last block and the tail.
            last.next_free_block = node
        except QueueError:
            raise
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            # Nothing was written: the first write is the one that failed, if any did.
            if tail.prev_free_block is None:
                raise lost_inner_link("append", "tail") from None
            raise not_a_block("append", block) from None
        node.prev_free_block = last
        node.next_free_block = tail
        tail.prev_free_block = node
        self.num_free_blocks += 1  # I2


class AppendGuardReadsNextOnly(FreeBlockQueue[B]):
    """``append``'s double-free guard reads only ``next_free_block``.

    A linked block has both links, so a double free is still refused; but a tail sentinel
    (its only link is the back one) gets through and is linked into the queue.
    """

    __slots__ = ()

    def append(self, block: B) -> None:
        """Link ``block`` at the back, refusing it only if its forward link is set."""
        tail = self.fake_free_list_tail
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            if node.next_free_block is not None:  # should also test prev_free_block
                # I4: only a detached block may join.
                raise already_linked("append", block)
            last: Block = tail.prev_free_block  # type: ignore[assignment]  # I1: the tail has a predecessor
            # Link the block between the old last block and the tail.
            last.next_free_block = node
        except QueueError:
            raise
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            # Nothing was written: the first write is the one that failed, if any did.
            if tail.prev_free_block is None:
                raise lost_inner_link("append", "tail") from None
            raise not_a_block("append", block) from None
        node.prev_free_block = last
        node.next_free_block = tail
        tail.prev_free_block = node
        self.num_free_blocks += 1  # I2


class PrependNGuardReadsPrevOnly(FreeBlockQueue[B]):
    """``prepend_n``'s guard reads only ``prev_free_block``.

    A linked block, or one repeated in the batch, is still refused; a head sentinel (its only
    link is the forward one) is linked into the queue.
    """

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front, refusing a block only if its back link is set."""
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
                        if node.prev_free_block is not None:  # should also test next_free_block
                            # I4: only a detached block may join.
                            raise already_linked("prepend_n", node, last, tail)
                        node.prev_free_block = last
                        last.next_free_block = node
                        last = node
                    after = head.next_free_block  # after the loop, as in append_n
                    if after is None:
                        raise lost_inner_link("prepend_n", "head")
                except BaseException as error:
                    unstage(tail, last)
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


class RemoveAcceptsSentinel(FreeBlockQueue[BlockT]):
    """``remove`` guards with ``and`` where it needs ``or``, so a sentinel (one link) gets through.

    Removing the tail sentinel cuts the last block's forward link and then fails on the
    missing one: a corrupted queue and the wrong exception.
    """

    __slots__ = ()

    def remove(self, block: BlockT) -> None:
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
        try:
            node: Block = cursor  # type: ignore[assignment]  # compiled: a Block, checked here
            following = node.next_free_block
            linked = following is not None  # should also test prev_free_block
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            raise not_a_block("iter_blocks_after", cursor) from None
        if not linked:
            if node is self.fake_free_list_head:
                following = node.next_free_block
            elif node is self.fake_free_list_tail:
                following = node  # nothing after the tail
            else:
                raise not_linked("iter_blocks_after", cursor)
        return self._walk(following)
