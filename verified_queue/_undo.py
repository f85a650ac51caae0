"""The undo of a batch operation cut short: the one place the interrupt contract is argued.

``popleft_n``, ``append_n`` and ``prepend_n`` (in :mod:`verified_queue.queue`) call
these functions only when an exception cut a batch short; the happy path never does,
so they live apart from the list code and are compiled with it.

States
------
A batch method (``append_n``, ``prepend_n``) moves through these states; ``staging``
is the queue's tail, whose outer link I1 keeps ``None`` and no operation reads:

S0. clean: ``staging.next_free_block`` is ``None`` and every block of the batch is
    as the caller gave it. The queue is as before.
S1. staging k blocks: ``batch[0:k]`` hang off ``staging`` (``staging -> batch[0]
    <-> ... <-> batch[k-1]``, ``batch[0].prev_free_block is staging``), each a block
    that was detached. The queue itself is untouched.
S2. refused or cut at k: the batch loop stopped in S1, at a refusal (a
    :class:`~verified_queue.errors.QueueError` for ``batch[k]``), an item that is no
    block, or an exception from outside (an interrupt).
S3. unstaging from any cut: ``unstage`` walks back from ``batch[k-1]``, clearing
    each block's forward link before its back link. Cut anywhere, it leaves
    ``batch[0:j]`` still chained by back links and ``batch[j:k]`` detached (at most
    one of them, ``batch[j]``, with only its back link left), so the prefix that
    still chains back to ``staging`` is exactly what remains to detach.
S4. clean again: S0, reached from S2 or S3 by ``unstage`` or ``finish_unstage``.

From S1 with every block staged, the method joins the batch to the queue in six
writes with no call and no allocation between them: the after state. Nothing can
observe a half-done join.

``popleft_n`` has the mirror states: ``taken j`` (``popped[0:j]`` detached one by one,
the first kept block's back link written as the walk ends, the head's link only past
every handler) and its undo, ``relink_taken``, which links the taken blocks back
between the head and the rest.

The rule each handler level keeps
---------------------------------
Every batch method nests three handlers around its loop, and each names this
contract. The innermost runs the fast undo (``unstage``, or ``relink_taken``) and
sets ``undone``. Each outer handler, reached only if an exception escaped the level
inside it before ``undone`` was set (Python may run a signal handler at a call, at a
loop's back edge and, on 3.10, as a handler begins, before its first line), runs the
restartable undo (``finish_unstage`` or ``relink_taken``) instead. A restartable
undo makes every write idempotent (a link is written only if it does not hold its
value yet), keeps its progress in counters that never go back, and retries inside two
nested loops of its own until a pass completes; so whatever state a cut pass leaves is
one the next pass starts from. What arrived last is raised, with the earlier errors as
its ``__context__``: the undo completes, and the interrupt is not swallowed.

What is promised, in one sentence: the operation leaves the queue and every block as
before (or as after, if the join was reached) when at most three exceptions arrive in
all, the one that cuts the batch short (a refusal included) counted; a fourth can
escape the outermost handler and leave S2 or S3 behind, which
:mod:`verified_queue.invariants` then reports. That is the package's fault contract,
stated for users in ``docs/usage.md`` ("Faults") with what each operation guarantees;
``tests/queue/test_nested_interrupts.py`` shows it and pins where it stops.

Loops inside a try
------------------
Every loop inside a ``try`` of the undo (and of the pool's repairs, and of the batch
methods) is a ``for`` loop or a ``while True`` left by ``break``, never ``while
<condition>``: CPython 3.12 and 3.13 compile that loop's test again at its end, and
leave the back edge after it outside the ``try``'s exception-table range; 3.13 runs a
pending signal handler at that back edge before it jumps, so an interrupt there
escapes every handler of the frame at once (3.12 runs it after the jump, inside the
``try``). ``tests/queue/test_undo_nests.py`` reads the bytecode and fails on such a
back edge.

A finalizer that runs while a batch is staged sees the staged blocks as linked: it
freeing one again is a double free, refused; it *removing* one is the same misuse as
removing a block of another queue, which no O(1) guard can see (``num_free_blocks``
then drops for a block the queue never counted): check mode refuses it.
"""

from __future__ import annotations

from typing import TypeVar

from verified_queue._messages import can_link, lookup_error
from verified_queue.block import Block, Linkable
from verified_queue.errors import QueueError

__all__ = ["finish_unstage", "means_not_a_block", "relink_taken", "unstage"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

B = TypeVar("B", bound=Linkable)


def means_not_a_block(error: BaseException, batch: list[B], last: Block, staging: Block) -> bool:
    """Whether ``error``, which cut a batch short, means an item is not a block we can link.

    An ``AttributeError`` or ``TypeError`` from a link read or write does. So does
    another exception if it is what looking up a link of the item the loop stood
    on raises, again: the item after ``last`` (the last block staged, ``staging``
    if none was), a proxy whose lookup raises ``KeyError``, say. A refusal does
    not, nor an exception that arrived from outside (an interrupt), even just as
    the loop reached a bad item: the interrupt is raised, not swallowed.
    """
    if isinstance(error, (AttributeError, TypeError)):
        return True
    if isinstance(error, QueueError):
        # A refusal, of a block it read. (Answered here, not by the walk below: the proof
        # translates this path, and has no invariant for that loop.)
        return False
    # The staged blocks are the batch's first ones, each once: ``last`` ends them.
    reached = 0
    if last is not staging:
        while batch[reached] is not last:
            reached += 1
        reached += 1
    return reached < len(batch) and lookup_error(batch[reached]) is type(error)


def finish_unstage(batch: list[B], staging: Block, arrived: BaseException) -> BaseException:
    """Finish an undo that ``arrived`` cut short, retrying until done; return what arrived last.

    Restartable: a call cut short at its very start, before its retry loops,
    can be followed by another from the state it left.

    The blocks the batch staged and ``unstage`` has not detached yet are a
    prefix of the batch that still chains by back links: ``batch[0]`` names
    ``staging`` and each later block its predecessor in the batch (no block
    outside the batch names them: they were detached), so the first block
    that does not ends it. Detaching that prefix and clearing ``staging``'s
    outer link restores the old state from any point of the walk (and of the
    batch loop): the queue itself was never written.
    """
    linked = 0
    while True:
        try:
            while True:
                try:
                    # A retry counts on from where the last pass stopped, and stops at once
                    # if the detaching below has begun: it detaches batch[linked] before it
                    # lowers ``linked``, and a detached block names no predecessor.
                    while True:  # not ``while linked < len(batch)``: "Loops inside a try" above
                        if linked >= len(batch):
                            break
                        candidate: object = batch[linked]
                        if not can_link(candidate):
                            # Never staged. (Not read: a proxy's lookup may raise, and this
                            # loop would retry on that error for ever.)
                            break
                        staged: Block = candidate  # type: ignore[assignment]  # can_link: a Block, or has links
                        expected: object = staging if linked == 0 else batch[linked - 1]
                        if staged.prev_free_block is not expected:
                            break
                        linked += 1
                    # Back to front, as unstage walks, so that a call cut short leaves
                    # a shorter prefix, still chained, for the next call to find.
                    while True:
                        if linked == 0:
                            break
                        node: Block = batch[linked - 1]  # type: ignore[assignment]  # linked: a Block
                        # I4: every block of the failed batch leaves detached again.
                        if node.next_free_block is not None:
                            node.next_free_block = None
                        if node.prev_free_block is not None:
                            node.prev_free_block = None
                        linked -= 1
                    # I1: the tail's outer link is None again. (Read with a default: a
                    # queue whose tail outside code replaced must not make this loop retry
                    # for ever on the same error.)
                    if getattr(staging, "next_free_block", None) is not None:
                        staging.next_free_block = None
                    break
                except BaseException as later:
                    arrived = later
            break
        except BaseException as later:
            arrived = later
    return arrived


def unstage(staging: Block, last: Block) -> None:
    """Undo a staged batch: detach ``staging.next .. last`` and clear ``staging``'s outer link.

    Walks back from ``last`` over the blocks this batch staged, so it ends. Each
    block's forward link is cleared before its back link, so a walk cut short
    leaves every block it has not finished chained by its back link, which is
    how ``finish_unstage`` finds them to finish the work.
    """
    block = last
    while block is not staging:
        previous = block.prev_free_block
        # I4: every block of the failed batch leaves detached again.
        block.next_free_block = block.prev_free_block = None
        block = previous  # type: ignore[assignment]  # set by the batch loop
    # I1: the tail's outer link is None again.
    staging.next_free_block = None


def relink_taken(head: Block, popped: list[B], following: Block | None) -> BaseException | None:
    """Undo an interrupted ``popleft_n``, whatever arrives meanwhile; return what arrived.

    Links the blocks taken so far back between ``head`` and the rest. The
    head's link is written only past the handlers, so it still holds; the first
    kept block's back link, written as the walk ends, is set again here if a
    failing setter cut that write short. The last block taken still names its
    successor unless the loop already cleared it, and then ``following``, read
    just before, does. Returns the last exception that arrived while it ran,
    or ``None``.
    """
    # Slots the loop did not reach still hold the None they were created with. (No call
    # before the retry loops: a handler may run at any call.)
    slots: list[Block | None] = popped  # type: ignore[assignment]
    arrived: BaseException | None = None
    taken = 0
    relinked = 0
    while True:
        try:
            while True:
                try:
                    # A retry recounts and rereads to the same values: nothing below writes
                    # a slot, and ``last``'s forward link is written last, to ``successor``.
                    while True:  # not ``while taken < ...``: "Loops inside a try" above
                        if taken >= len(slots) or slots[taken] is None:
                            break
                        taken += 1
                    if taken == 0:
                        break
                    last: Block = slots[taken - 1]  # type: ignore[assignment]  # taken
                    successor = last.next_free_block
                    if successor is None:
                        successor = following
                    while True:
                        if relinked >= taken:
                            break
                        block: Block = slots[relinked]  # type: ignore[assignment]  # taken
                        previous: Block = head if relinked == 0 else slots[relinked - 1]  # type: ignore[assignment]  # taken
                        if block.prev_free_block is not previous:
                            block.prev_free_block = previous
                        if previous.next_free_block is not block:
                            previous.next_free_block = block
                        relinked += 1
                    if last.next_free_block is not successor:
                        last.next_free_block = successor
                    if successor is not None and successor.prev_free_block is not last:
                        successor.prev_free_block = last
                    break
                except BaseException as later:
                    arrived = later
            break
        except BaseException as later:
            arrived = later
    return arrived
