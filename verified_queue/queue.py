"""The production free-block queue: O(1) popleft, append and remove, no ``==``.

Representation
--------------
The queue is an intrusive doubly linked list threaded through the blocks'
own ``prev_free_block`` and ``next_free_block`` slots, between two sentinels
that belong to the queue and never leave it::

    head <-> b1 <-> b2 <-> ... <-> bn <-> tail

Invariants (cited as I1..I5 throughout the package; the checkers in
``verified_queue.invariants`` verify I1..I4 in O(n) and report each under the
family name that ``verified_queue.errors.INVARIANT_FAMILY`` maps it to):

I1. ``head.prev_free_block`` and ``tail.next_free_block`` are ``None``; every
    other link between ``head`` and ``tail`` is set, for each adjacent pair
    ``a -> b``, ``b.prev_free_block is a``, and no sentinel (of this or any
    other queue) appears between them.
I2. ``num_free_blocks`` is the number of blocks strictly between the sentinels.
I3. No block appears twice between the sentinels, nor in two queues at once.
I4. A block that is in no queue is detached: both links are ``None``. So a
    linked block has both links set, a detached one neither, and a sentinel
    exactly one; one or two link reads tell them apart in O(1). (While a
    batch operation runs, its staged blocks and the tail's outer link are set:
    see "Batches".)
I5. Blocks are compared by identity only: no method calls a block's
    ``__eq__`` or ``__hash__``.

Because the sentinels never leave, every real block has a predecessor and a
successor, and no method needs a special case for the ends. The guards in the
methods are plain ``if ...: raise`` (they hold under ``python -O``) and read at
most the links the method needs anyway, plus one. The one misuse they cannot
see in O(1) is ``remove`` of a block linked in a *different* queue: the
``CheckedFreeBlockQueue`` of check mode catches that.

Arguments of the wrong type (``append(None)``, a compiled queue handed a block
that is not a :class:`Block`, ``popleft_n(2.5)``) raise
:class:`WrongTypeError` with nothing changed. The happy path pays nothing for
it: the link reads that fail anyway are wrapped in ``try`` blocks, which cost
nothing until they raise. A sentinel whose inner link was destroyed by
outside code makes an operation raise :class:`InvariantViolation` (an
``AssertionError``, as in vLLM's queue), again with nothing changed.

Batches
-------
``append_n`` and ``prepend_n`` do not link a batch into the chain block by
block. They stage it first: chained behind the tail's outer link (``tail ->
b1 <-> ... <-> bk``, ``b1.prev_free_block is tail``), which I1 keeps ``None``
and no operation reads, and join it to the queue with six writes once every
block has been checked. Nothing in those writes calls or allocates, so nothing
can run in between: the queue is whole at every point where other code can run
(a signal handler, a garbage collection and the finalizers it calls, which on
Python 3.12+ run at a call or a loop's back edge). A finalizer may therefore
take or free blocks of the queue while a batch is staged or refused; it sees
the staged blocks as linked (freeing one again is a double free), and a
checker it runs sees the tail's outer link set. A refused batch is undone by
detaching the staged blocks: the queue itself was never written. The undo's
states and what each handler level keeps are argued in :mod:`verified_queue._undo`;
what it promises is the package's fault contract (``docs/usage.md``, "Faults").

Iteration (``iter(queue)``, :meth:`FreeBlockQueue.iter_blocks_after`) is live:
it follows the links as they are when it resumes. A block the iteration stands
on that leaves the queue makes it raise :class:`NotInQueueError`, like a dict
changed during iteration; it never yields ``None`` or a sentinel.

This module is the hot path and, with the Block it links, the only code worth
compiling; it imports no checker, and its methods allocate nothing but the
lists they return (and a batch's copy when it is not a list).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Generic, SupportsIndex, TypeVar

from verified_queue._compat import mypyc_attr
from verified_queue._messages import (
    already_linked,
    batch_argument,
    changed_during_iteration,
    count_argument,
    first_unlinkable,
    lost_inner_link,
    not_a_block,
    not_linked,
    ran_off_the_chain,
    too_few_blocks,
)
from verified_queue._undo import finish_unstage, means_not_a_block, relink_taken, unstage
from verified_queue.block import COMPILED, Block, Linkable, Sentinel
from verified_queue.errors import EmptyQueueError, NegativeCountError, QueueError

__all__ = ["EMPTY_QUEUE_MESSAGE", "FreeBlockQueue"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

# Bound to the protocol, not to Block: vLLM's own KVCacheBlock declares the two links
# itself and fits. Inside the methods every node is declared Block, so the compiled
# build reads the links as C fields (and refuses, with WrongTypeError, what is not one).
B = TypeVar("B", bound=Linkable)

#: What ``popleft()`` on an empty queue says: vLLM's words, which its callers match.
EMPTY_QUEUE_MESSAGE: Final = "No free blocks available"

#: Whether a garbage collection that an allocation sets off waits for the interpreter's
#: next checkpoint (a call, a loop's back edge) instead of running inside the allocation:
#: interpreted code on Python 3.12+. Compiled code has no checkpoints of its own.
_COLLECTS_AT_CHECKPOINTS: Final = not COMPILED and sys.version_info >= (3, 12)


def _checkpoint() -> None:
    """Return at once: the call is a checkpoint, where pending collections run (3.12+)."""


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

        Raises :class:`NotInQueueError` if the block the iteration stands on
        leaves the queue before the next step (see the module docstring).

        Runtime complexity: O(n)

        >>> blocks = [Block(), Block()]
        >>> [b is orig for b, orig in zip(FreeBlockQueue(blocks), blocks)]
        [True, True]
        """
        return self._walk(self.fake_free_list_head.next_free_block)

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the free blocks after ``cursor`` in eviction order; all of them if ``None``.

        A walk can be resumed from the last block it saw, as vLLM's offload
        manager does. The cursor is checked when this is called, not when the
        iteration starts: a detached cursor, or a sentinel of another queue,
        raises :class:`NotInQueueError` (this queue's own head and tail mean
        "from the front" and "nothing after"). A cursor linked in another
        queue cannot be told apart in O(1); ``CheckedFreeBlockQueue`` rejects
        it. The iteration is live, like ``iter(queue)``.

        Runtime complexity: O(1) to start, O(1) per block yielded

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks)
        >>> [b is blocks[2] for b in queue.iter_blocks_after(blocks[1])]
        [True]
        >>> len(list(queue.iter_blocks_after(None)))
        3
        """
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
        return self._walk(following)

    def _walk(self, start: Block | None) -> Iterator[B]:
        """Yield from ``start`` up to this queue's tail, following the links live."""
        tail = self.fake_free_list_tail
        if start is None:
            raise changed_during_iteration()
        block: Block = start
        while block is not tail:
            # Links are read into a local and tested there, never tested in place:
            # compiled, a narrowed ``block.next_free_block`` would stay narrowed across
            # the yield, and the read after it would refuse the None it tests for.
            following: Block | None = block.next_free_block
            if following is None:
                # Another queue's tail, or a block detached before the walk reached it.
                raise changed_during_iteration()
            yield block  # type: ignore[misc]  # I1: every block between the sentinels is a B
            following = block.next_free_block
            if following is None:
                # The block yielded last left the queue while the caller held it.
                raise changed_during_iteration()
            block = following

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

    def __reduce__(
        self,
    ) -> tuple[Callable[..., FreeBlockQueue[B]], tuple[object, ...], list[B]]:
        """Pickle and deep-copy as the class, then the free blocks, front first, without recursion.

        Blocks are saved without their links (``Block.__getstate__``), so the
        chain is never followed recursively. The queue is rebuilt empty first
        and the blocks are linked into it afterwards (:meth:`__setstate__`):
        pickle and deepcopy record the new queue before they copy the blocks,
        so a block that refers back to the queue, itself or through an owner
        such as a block pool, gets the new queue, not a second copy. A subclass
        with state of its own overrides this (``CheckedFreeBlockQueue`` does).

        Runtime complexity: O(n)

        >>> import copy
        >>> queue = FreeBlockQueue([Block(), Block()])
        >>> twin = copy.deepcopy(queue)
        >>> len(twin), twin.popleft() is queue.get_all_free_blocks()[0]
        (2, False)
        """
        return type(self), (), self.get_all_free_blocks()

    def __setstate__(self, blocks: list[B]) -> None:
        """Link the blocks a pickle or a deep copy saved into this queue, which was built empty.

        Runtime complexity: O(n)
        """
        self.append_n(blocks)

    def __copy__(self) -> FreeBlockQueue[B]:
        """Refuse: a shallow copy would share the blocks, which can be linked in one queue only.

        Raises ``TypeError``; ``copy.deepcopy`` copies the blocks too.

        >>> import copy
        >>> copy.copy(FreeBlockQueue())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: a FreeBlockQueue cannot be shallow-copied: its blocks can be linked in ...
        """
        raise TypeError(
            f"a {type(self).__qualname__} cannot be shallow-copied: its blocks can be linked "
            "in one queue only; use copy.deepcopy, which copies them"
        )

    def __repr__(self) -> str:
        """Name the class and the count, never the blocks (a queue may hold millions).

        Runtime complexity: O(1)
        """
        return f"<{type(self).__qualname__} with {self.num_free_blocks} free blocks>"

    def popleft(self) -> B:
        """Detach and return the front block (the next one to evict).

        Raises :class:`EmptyQueueError` (a ``ValueError``) saying
        ``No free blocks available`` if the queue is empty.

        Runtime complexity: O(1)

        >>> blocks = [Block(), Block()]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.popleft() is blocks[0], len(queue)
        (True, 1)
        """
        head = self.fake_free_list_head
        try:
            block: Block = head.next_free_block  # type: ignore[assignment]  # I1: the head has a successor
            following = block.next_free_block
        except (AttributeError, TypeError):
            raise lost_inner_link("popleft", "head") from None
        if following is None:
            # I1: only the tail has no successor, so the queue is empty.
            raise EmptyQueueError(EMPTY_QUEUE_MESSAGE)
        # Splice the front block out.
        head.next_free_block = following
        following.prev_free_block = head
        # I4: the popped block leaves detached.
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1  # I2
        return block  # type: ignore[return-value]  # I1: not a sentinel, so a B

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Detach and return the first ``n`` blocks, front first.

        ``popleft_n(0)`` returns ``[]``. ``n`` may be any integer type
        (``operator.index``), but not a ``bool``. Raises
        :class:`EmptyQueueError` if ``n > len(self)``,
        :class:`NegativeCountError` if ``n < 0`` and :class:`WrongTypeError`
        if ``n`` is not an integer; in each case the queue is unchanged. An
        exception raised in the middle (``KeyboardInterrupt`` from a signal)
        puts every block back where it was.

        Runtime complexity: O(n)

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.popleft_n(2) == blocks[:2], len(queue)
        (True, 1)
        """
        count: int = n if type(n) is int else count_argument("popleft_n", n)
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

    def remove(self, block: B) -> None:
        """Detach ``block`` from anywhere in the queue (a prefix-cache hit).

        Raises :class:`NotInQueueError` (also a ``RuntimeError``, as vLLM's
        queue raises) if ``block`` is detached or a sentinel. A block linked
        in a *different* queue cannot be told apart in O(1) from one linked in
        this queue: ``CheckedFreeBlockQueue`` catches that.

        Runtime complexity: O(1)

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks)
        >>> queue.remove(blocks[1])
        >>> queue.get_all_free_blocks() == [blocks[0], blocks[2]]
        True
        """
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            before = node.prev_free_block
            after = node.next_free_block
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            raise not_a_block("remove", block) from None
        if before is None or after is None:
            # I4: a detached block has neither link, a sentinel only one.
            raise not_linked("remove", block)
        # Bridge the neighbours over the block.
        before.next_free_block = after
        after.prev_free_block = before
        # I4: the removed block leaves detached.
        node.prev_free_block = node.next_free_block = None
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
        tail = self.fake_free_list_tail
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            if node.next_free_block is not None or node.prev_free_block is not None:
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

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back in order, all or none (``list.extend``).

        Raises :class:`AlreadyInQueueError` if a block is linked, repeated in
        the batch, or a sentinel, and :class:`WrongTypeError` if an item is
        not a block; the queue and every block are then exactly as before.
        Any other error (an iterator that raises, a signal) also leaves them
        as before.

        Runtime complexity: O(len(blocks))

        >>> blocks = [Block(), Block()]
        >>> queue = FreeBlockQueue()
        >>> queue.append_n(blocks)
        >>> queue.get_all_free_blocks() == blocks
        True
        """
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
                    unstage(tail, last)
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

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front in order, all or none (``list[0:0] = blocks``).

        After ``prepend_n([a, b])`` the queue starts ``a, b`` and then the old
        front, so ``a`` is the next block to evict: vLLM's block pool frees
        blocks without a cached hash this way, to reuse them first. Raises as
        :meth:`append_n` does, with the queue and every block exactly as
        before.

        Runtime complexity: O(len(blocks))

        >>> blocks = [Block() for _ in range(3)]
        >>> queue = FreeBlockQueue(blocks[2:])
        >>> queue.prepend_n(blocks[:2])
        >>> queue.get_all_free_blocks() == blocks
        True
        """
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
            found.append(block)  # type: ignore[arg-type]  # I1: a B
            block = block.next_free_block  # type: ignore[assignment]  # I1
        return found


if COMPILED:
    # mypyc gives the generic native class an instance dict: refuse what slots would refuse.
    from verified_queue._slotted import set_declared_attribute

    # setattr: mypy refuses assigning to a method of a class.
    setattr(FreeBlockQueue, "__setattr__", set_declared_attribute)  # noqa: B010
