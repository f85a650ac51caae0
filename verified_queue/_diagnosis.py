"""Check mode's diagnosis: what exactly is wrong, once an inline test has failed.

``CheckedFreeBlockQueue``'s operations test the healthy case with inline conditions
and call one of these functions only when a condition fails; each finds the exact
fault (the invariant, where, what it read, what it expected) and raises, or
returns, the :class:`~verified_queue.errors.QueueError` to raise. None runs on the
happy path, so keeping them apart from the operations costs nothing.

The names say which: a noun returns the error for the caller to raise
(:func:`damaged`, :func:`unexplained`, :func:`not_a_member`,
:func:`not_taken_from_here`); a verb raises. The verbs ``check_*`` (:func:`check_full`
included) and
:func:`expect_count` run only once an inline test has failed, so they always raise
(``NoReturn``); :func:`expect_joined`, :func:`expect_linked_member` and
:func:`reject_cleared_member` raise only if they find the fault they test.

Each function is given what it reads: the queue, for its public attributes (the
sentinels, the count, :meth:`~verified_queue.checked.CheckedFreeBlockQueue.full_check`),
and the queue's membership, ``id(block) -> block``, where it needs to know a member.

A docstring's I1, I2, I3 is the invariant of ``verified_queue.queue`` it finds
broken. Check mode reads I3 (no block in two queues at once) through its
membership: a block in the chain that this queue did not link breaks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from verified_queue._messages import can_link, is_sentinel, not_a_block, not_linked
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation, NotInQueueError, QueueError
from verified_queue.invariants import (
    NO_LINK,
    check_invariants,
    describe,
    is_block,
    violation,
)

if TYPE_CHECKING:
    from verified_queue.checked import CheckedFreeBlockQueue

__all__ = [
    "Members",
    "check_around",
    "check_back",
    "check_front",
    "check_full",
    "damaged",
    "expect_count",
    "expect_joined",
    "expect_linked_member",
    "not_a_member",
    "not_taken_from_here",
    "reject_cleared_member",
    "unexplained",
]

#: This module's frames are the library's: the trace level records the first frame outside
#: the library as an operation's caller (see ``verified_queue._trace_records``).
__trace_library__ = True

#: A checked queue's membership, ``id(block) -> block``.
Members = Mapping[int, object]


def damaged(queue: CheckedFreeBlockQueue[Any], where: str, error: Exception) -> QueueError:
    """The QueueError for an exception that damage raised in an operation.

    A deleted link slot, a sentinel replaced by ``None``, a count that is
    no int, a link to an object whose attribute lookup raises (a proxy):
    reading them fails in plain Python. The full check, which is total,
    names the damage. If it finds none, an ``AttributeError`` or ``TypeError``
    is named as the fault; any other exception was no damage and is raised
    again as it is, so check mode reports damage only where there is some.
    """
    try:
        queue.full_check()
    except QueueError as found:
        return found
    if not isinstance(error, (AttributeError, TypeError)):
        # Only those can come from damage the full check cannot see; anything else did
        # not (a signal handler's exception, say): it is raised again, as it is.
        raise error
    return violation(
        "I1",
        where,
        "the links and the count the operation read",
        "blocks, sentinels and an int",
        f"{type(error).__name__}: {error}",
    )


def unexplained(where: str) -> InvariantViolation:
    """The violation for an inline test that failed where its diagnostic helper finds nothing.

    The two test the same links, so this is a fault in check mode itself; it is
    still reported as a violation, so that check mode raises only ``QueueError``.
    """
    return violation(
        "I1",
        where,
        "the links and the count an O(1) check read",
        "a fault its diagnosis can name",
        "none: check mode's inline test and its diagnosis disagree",
    )


def expect_joined(queue: CheckedFreeBlockQueue[Any], before: Any, after: Any, where: str) -> None:
    """I1: a batch's junction with the old chain links both ways.

    ``before`` and ``after`` are blocks or sentinels: the start-of-operation
    checks passed on the end they come from.
    """
    if before.next_free_block is not after or after.prev_free_block is not before:
        head = queue.fake_free_list_head
        tail = queue.fake_free_list_tail
        raise violation(
            "I1",
            where,
            f"the links between {describe(before, head)} "  # the head or a block
            f"and {describe(after, tail=tail)}",  # a block or the tail
            "each naming the other",
            f"{describe(before.next_free_block, head, tail)} and "
            f"{describe(after.prev_free_block, head, tail)}",
        )


def not_taken_from_here(
    queue: CheckedFreeBlockQueue[Any], block: object, where: str
) -> InvariantViolation:
    """I3: the base class handed out something that was not one of this queue's blocks."""
    return violation(
        "I3",
        where,
        "a block the operation returned",
        "one of this queue's blocks",
        describe(block, queue.fake_free_list_head, queue.fake_free_list_tail),
    )


def expect_count(queue: CheckedFreeBlockQueue[Any], members: Members, where: str) -> NoReturn:
    """I2: ``num_free_blocks`` equals the size of ``members`` (a deleted count reads None).

    Called only once an inline test has found the count wrong, so it always raises.
    """
    count = getattr(queue, "num_free_blocks", None)
    if count.__class__ is not int:
        raise violation("I2", where, "num_free_blocks", "an int", describe(count))
    if count != len(members):
        raise violation(
            "I2",
            where,
            "num_free_blocks",
            f"{len(members)} (the blocks this queue holds)",
            repr(count),
        )
    raise unexplained(where)


def check_full(
    queue: CheckedFreeBlockQueue[Any], members: Members, error: Exception | None = None
) -> NoReturn:
    """Find and raise the fault the one-walk test of the full check found, or ``error``.

    Runs :func:`~verified_queue.invariants.check_invariants`, the count, then the walk
    against ``members``. If all of that passes, the one-walk test's fault is
    unexplained, or, when the walk raised ``error`` (no ``AttributeError`` or
    ``TypeError``, which it turns into a fault itself), it was no damage: an
    exception from outside (a signal handler's), raised again as it is.
    """
    where = "the full check"
    check_invariants(queue)
    count = queue.num_free_blocks
    if count.__class__ is not int or count != len(members):
        expect_count(queue, members, where)
    tail = queue.fake_free_list_tail
    # check_invariants passed, so the chain is n distinct blocks ending at the tail,
    # and n == len(members): the chain is the membership iff each block is a member.
    block = queue.fake_free_list_head.next_free_block
    position = 1
    while block is not tail:
        if id(block) not in members:
            raise violation(
                "I3",
                f"position {position} of the forward walk (head = 0)",
                f"membership of {describe(block)}",
                "a block this queue linked itself",
                "a block linked in by outside code",
            )
        block = block.next_free_block  # type: ignore[union-attr]  # checked above
        position += 1
    if error is not None:
        raise error
    raise unexplained(where)


def check_front(queue: CheckedFreeBlockQueue[Any], members: Members, where: str) -> NoReturn:
    """I1, I2: find the fault an inline test of the front found, walking from the head.

    Each node must be a member whose back link names the node before it, up
    to the tail, which must have no successor and follow exactly the
    members. Called only once an inline test of the first blocks has failed,
    so it always raises, at the first fault, which is no further than the
    blocks that test read. The walk needs no bound: while the back links
    agree, no member can come round twice (the argument of the linkage walk in
    ``verified_queue.invariants``).
    """
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    if head.prev_free_block is not None:
        raise violation(
            "I1",
            where,
            f"prev_free_block of {describe(head, head)}",
            NO_LINK,
            describe(head.prev_free_block, head, tail),
        )
    previous: Block = head
    position = 1
    while True:
        node = previous.next_free_block
        if node is tail:
            break
        expect_linked_member(queue, members, node, previous, position, where)
        previous = node  # type: ignore[assignment]  # a member, so a Block
        position += 1
    if tail.next_free_block is not None:
        # popleft tells an empty queue by the tail's missing successor.
        raise violation(
            "I1",
            where,
            f"next_free_block of {describe(tail, tail=tail)}",
            NO_LINK,
            describe(tail.next_free_block, head, tail),
        )
    if position - 1 != len(members):
        # The links agree up to the tail, but the chain is not the membership.
        raise violation(
            "I2",
            f"{where}, position {position} of the forward walk (head = 0)",
            "num_free_blocks",
            f"{position - 1} (the walk reached the tail)",
            f"{queue.num_free_blocks}",
        )
    raise unexplained(where)


def expect_linked_member(  # noqa: PLR0917 -- one step of a walk: queue, membership, link, place
    queue: CheckedFreeBlockQueue[Any],
    members: Members,
    node: object,
    previous: Block,
    position: int,
    where: str,
) -> None:
    """I1: ``node``, the successor of ``previous``, is a member linking back to it."""
    if id(node) not in members:
        head = queue.fake_free_list_head
        raise violation(
            "I1",
            f"{where}, position {position} of the forward walk (head = 0)",
            f"next_free_block of {describe(previous, head)}",  # the head or a member
            "one of this queue's blocks or its tail",
            describe(node, head),  # the callers stop at this queue's tail first
        )
    back = node.prev_free_block  # type: ignore[attr-defined]  # a member, so a Block
    if back is not previous:
        head = queue.fake_free_list_head
        tail = queue.fake_free_list_tail
        raise violation(
            "I1",
            f"{where}, position {position} of the forward walk (head = 0)",
            f"prev_free_block of {describe(node)}",  # a member
            describe(previous, head),  # the head or a member
            describe(back, head, tail),
        )


def check_back(queue: CheckedFreeBlockQueue[Any], members: Members, where: str) -> NoReturn:
    """I1, I2: check the tail and the block before it, in O(1).

    Called only once an inline test has found the back end wrong, so it always raises.
    """
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    after_tail = tail.next_free_block
    last = tail.prev_free_block
    found: object
    if after_tail is not None:
        what, expected, found = "next_free_block", "None", after_tail
    elif last is not head and id(last) not in members:
        what, expected, found = (
            "prev_free_block",
            "one of this queue's blocks or its head",
            last,
        )
    elif last.next_free_block is not tail:  # type: ignore[union-attr]  # head or a member
        what, expected, found = "prev_free_block", "a block followed by the tail", last
    elif last is head and members:
        # A member before the tail needs no count test here: it proves members exist.
        raise violation(
            "I2",
            f"{where}, the tail sentinel",
            "num_free_blocks",
            "0 (the tail follows the head)",
            f"{queue.num_free_blocks}",
        )
    else:
        raise unexplained(where)
    raise violation(
        "I1",
        f"{where}, the tail sentinel",
        f"{what} of {describe(tail, tail=tail)}",
        expected,
        describe(found, head, tail),
    )


def check_around(
    queue: CheckedFreeBlockQueue[Any], members: Members, block: Block, where: str
) -> NoReturn:
    """I1: a member's two neighbours are this queue's and link back to it.

    Called only once an inline test has found one of them wrong, so it always raises.
    """
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    before = block.prev_free_block
    after = block.next_free_block
    for side, neighbour, end, back in (
        ("prev_free_block", before, head, "next_free_block"),
        ("next_free_block", after, tail, "prev_free_block"),
    ):
        if neighbour is not end and id(neighbour) not in members:
            raise violation(
                "I1",
                where,
                f"{side} of {describe(block)}",  # a member
                "one of this queue's blocks or its sentinel",
                describe(neighbour, head, tail),
            )
        back_link = getattr(neighbour, back)  # a member or a sentinel: a Block
        if back_link is not block:
            raise violation(
                "I1",
                where,
                f"{back} of {describe(neighbour, head, tail)}, the {side} of {describe(block)}",
                describe(block),
                describe(back_link, head, tail),
            )
    raise unexplained(where)


def reject_cleared_member(members: Members, block: Any, where: str) -> None:
    """I1: a member whose links outside code cleared must not be linked a second time."""
    if block.prev_free_block is None and block.next_free_block is None and id(block) in members:
        raise violation(
            "I1",
            where,
            f"the links of {describe(block)}, one of this queue's blocks",
            "both set",
            "both None (cleared by outside code while the block was in the queue)",
        )


def not_a_member(
    queue: CheckedFreeBlockQueue[Any], members: Members, block: object, operation: str = "remove"
) -> QueueError:
    """The error for a non-member where a member is needed (foreign, detached, spliced in)."""
    if is_sentinel(block):  # not isinstance: a hostile proxy's __class__ may raise
        return not_linked(operation, block)
    if not can_link(block):
        return not_a_block(operation, block)  # the production queue's WrongTypeError
    operation = f"{operation}({describe(block)})"
    # can_link() accepted it, so both links exist.
    before: object = block.prev_free_block  # type: ignore[attr-defined]
    after: object = block.next_free_block  # type: ignore[attr-defined]
    if before is None and after is None:
        return NotInQueueError(f"{operation}: it is not linked in a queue")  # as not_linked says
    if (
        is_block(before)
        and (before is queue.fake_free_list_head or id(before) in members)
        and before.next_free_block is block  # type: ignore[attr-defined]  # is_block
    ):
        # Linked into this queue's chain, but never by this queue.
        return violation(
            "I3",
            f"the start of {operation}",
            f"membership of {describe(block)}",
            "a block this queue linked itself",
            "a block linked in by outside code",
        )
    return NotInQueueError(f"{operation}: it is linked in another queue")
