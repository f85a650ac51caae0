"""O(n) checkers for the structure of a :class:`FreeBlockQueue`; they end on any damage.

The checkers test I1 to I4 of ``verified_queue.queue``, restated below in the form
a checker tests them; ``InvariantViolation.invariant`` carries the family each
is reported under (the map is ``verified_queue.errors.INVARIANT_FAMILY``), and
``InvariantViolation.clause`` the I-number:

I1 ``sentinel_linkage``: the head sentinel's ``prev_free_block`` is ``None``
   and the tail's ``next_free_block`` is ``None``; following
   ``next_free_block`` from this queue's head reaches this queue's tail; for
   every adjacent pair ``a -> b``, ``b.prev_free_block is a``; no sentinel (of
   this or any other queue) appears between the two; a walk backwards from
   the tail meets the same blocks in reverse.
I2 ``count_consistency``: ``num_free_blocks`` equals the number of blocks
   between the sentinels.
I3 ``no_duplicates``: no block appears twice between the sentinels.
I4 ``detached_outside``: a block of the queue's pool that is not in the queue is
   detached (both links ``None``; see :func:`check_detached_outside`).

How the checkers stay total
---------------------------
A damaged queue can hold anything in a link: ``None``, an unset slot, a
non-block object, another queue's sentinel, a block of a ring. Every link read
here tolerates all of those, every walk is bounded, and no checker recurses, so
a checker either returns ``None`` or raises :class:`InvariantViolation`, never
``AttributeError``, ``TypeError`` or ``RecursionError``. A checker returns
``None`` only when it walked the whole queue and its own invariant holds; if
damage of another family stops its walk (a cleared link stops the count), it
raises that family's violation instead of guessing.

* The linkage walk (I1) needs no bound of its own: while every back link it has
  met agrees, no block can come round twice, because a block met at steps
  ``i < j`` has one predecessor, so steps ``i - 1`` and ``j - 1`` hold the same
  block, and so on down to the head appearing inside the walk, which the
  sentinel test rejects first. A cycle therefore shows as a disagreeing back
  link where it closes, at most ``n + 1`` steps in. The same argument makes
  the backward walk of I1 redundant: it follows exactly the back links the
  forward walk has checked, so it meets the same blocks in reverse.
* The duplicate walk (I3) follows ``next_free_block`` alone, so it detects
  cycles with Brent's algorithm: O(n) time, O(1) memory, which matters for a
  million-block pool checked in a serving process.
* The count walk (I2) stops after ``num_free_blocks + 1`` blocks; only then does
  it walk again to tell an overlong chain from a cycle.

Blocks are compared by identity only (``is``); no checker calls a block's
``__eq__`` or ``__hash__``, and membership sets hold ``id()`` values, which
are stable for the length of a walk because every block walked is still linked
and so still alive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Final, ParamSpec, TypeVar

from verified_queue._messages import has_links
from verified_queue.block import Block, Sentinel
from verified_queue.errors import INVARIANT_FAMILY, InvariantViolation

__all__ = [
    "COUNT_CONSISTENCY",
    "DETACHED_OUTSIDE",
    "NO_DUPLICATES",
    "NO_LINK",
    "SENTINEL_LINKAGE",
    "check_count_consistency",
    "check_detached_outside",
    "check_invariants",
    "check_no_duplicates",
    "check_sentinel_linkage",
    "describe",
    "is_block",
    "violation",
]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def _total(checker: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """Make ``checker`` raise only :class:`InvariantViolation`, even if the queue changes under it.

    Each checker reads every link defensively once, but naming a fault re-walks part
    of the chain it has just read (to find where a repeated block first appeared, or
    where a cycle starts). If another thread changed the chain in between, that
    re-walk can meet ``None``; and a link may hold an object whose attribute lookup
    raises anything at all. Either way the raw error is reported as a violation.
    """

    @functools.wraps(checker)
    def total(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        try:
            return checker(*args, **kwargs)
        except InvariantViolation:
            raise
        except Exception as error:  # a lookup that raises (a proxy), not only a None read
            raise violation(
                "I1",
                "the walk",
                "the links the check read",
                "the same links when read again",
                f"{type(error).__name__}: {error} (the queue changed while it was being "
                "checked: another thread, or a finalizer?)",
            ) from error

    return total


SENTINEL_LINKAGE: Final = "sentinel_linkage"
COUNT_CONSISTENCY: Final = "count_consistency"
NO_DUPLICATES: Final = "no_duplicates"
DETACHED_OUTSIDE: Final = "detached_outside"


class _Unset:
    """The value a link read yields when the slot was deleted or the object has no links."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "an unset link slot"


_UNSET: Final = _Unset()

#: The expected value of a sentinel's outer link, as a diagnostic prints it.
NO_LINK: Final = "None"


def violation(
    clause: str,
    where: str,
    what: str,
    expected: str,
    found: str,
    *,
    blocks: tuple[object, ...] = (),
) -> InvariantViolation:
    """Build the violation of invariant ``clause`` (``"I1"`` to ``"I4"``, ``"P1"`` to ``"P5"``).

    The message cites the invariant and its family, then the place
    (``where``: a position in a walk, or a sentinel), the value looked at
    (``what``), and what was expected versus found; the violation carries
    each part as a field of the same name, and ``blocks``, the blocks it is
    about, if the caller names them.

    Runtime complexity: O(1)

    >>> str(violation("I2", "the tail", "num_free_blocks", "2", "3"))
    'I2 (count_consistency) broken at the tail: num_free_blocks: expected 2, found 3'
    """
    family = INVARIANT_FAMILY[clause]
    return InvariantViolation(
        f"{clause} ({family}) broken at {where}: {what}: expected {expected}, found {found}",
        family,
        clause=clause,
        where=where,
        what=what,
        expected=expected,
        found=found,
        blocks=blocks,
    )


def describe(value: object, head: object = None, tail: object = None) -> str:
    """Name ``value`` for a diagnostic without following its links or trusting its ``repr``.

    A block's own ``repr`` is used (it names type, identity and link state),
    but one that raises falls back to the type and identity; this queue's
    sentinels are named as such.

    Runtime complexity: O(1)

    >>> describe(None), describe(Block()).endswith("detached>")
    ('None', True)
    """
    if value is None or value is _UNSET:
        return repr(value)
    if not is_block(value):
        return f"a non-block {object.__repr__(value)}"
    try:
        text = repr(value)
    except Exception:  # a user block's repr must not turn a diagnostic into a crash
        text = f"<{type(value).__qualname__} at {id(value):#x}>"
    if value is head or value is tail:
        return f"this queue's {text}"
    if isinstance(value, Sentinel):
        return f"another queue's {text}"
    return text


def is_block(value: object) -> bool:
    """Whether ``value`` is something the queue links: a Block, or any object with both links.

    The pure-Python queue takes a block type that declares the two links itself
    (vLLM's ``KVCacheBlock``), so the checkers do too.

    Runtime complexity: O(1)

    >>> is_block(Block()), is_block(object())
    (True, False)
    """
    # The type itself, not isinstance: a proxy's __class__ may lie, or raise.
    return issubclass(type(value), Block) or has_links(value)


def _at(position: int) -> str:
    return f"position {position} of the forward walk (head = 0)"


def _ends(queue: Any) -> tuple[Sentinel, Sentinel]:
    """Return the queue's two sentinels after checking they are two distinct sentinels (I1)."""
    head = getattr(queue, "fake_free_list_head", _UNSET)
    tail = getattr(queue, "fake_free_list_tail", _UNSET)
    for name, end in (("fake_free_list_head", head), ("fake_free_list_tail", tail)):
        if not isinstance(end, Sentinel):
            raise violation("I1", "the queue", name, "a Sentinel", describe(end))
    if head is tail:
        raise violation("I1", "the queue", "fake_free_list_tail", "a second sentinel", "the head")
    return head, tail  # type: ignore[return-value]  # both passed isinstance(_, Sentinel) above


def _check_outer_links(head: Sentinel, tail: Sentinel) -> None:
    """I1: nothing precedes the head and nothing follows the tail."""
    before_head: object = getattr(head, "prev_free_block", _UNSET)  # _UNSET: a deleted slot
    if before_head is not None:
        raise violation(
            "I1",
            "the head sentinel",
            f"prev_free_block of {describe(head, head)}",
            NO_LINK,
            describe(before_head, head, tail),
        )
    after_tail: object = getattr(tail, "next_free_block", _UNSET)  # _UNSET: a deleted slot
    if after_tail is not None:
        raise violation(
            "I1",
            "the tail sentinel",
            f"next_free_block of {describe(tail, tail=tail)}",
            NO_LINK,
            describe(after_tail, head, tail),
        )


def _reject_non_block(node: object, previous: object, position: int, head: Block) -> None:
    """I1: the node reached at ``position`` must be a block that is not a sentinel.

    Only the head is passed to name sentinels: the walk stops at this queue's
    tail before it gets here, and ``previous`` is the head or a block.
    """
    if isinstance(node, Sentinel) or not is_block(node):
        raise violation(
            "I1",
            _at(position),
            f"next_free_block of {describe(previous, head)} (position {position - 1})",
            "a block or this queue's tail sentinel",
            describe(node, head),
        )


def _first_position(head: Block, block: object, limit: int) -> int:
    """Position of ``block`` among the first ``limit`` positions after ``head``, or 0.

    Only called on positions the caller has already walked and checked, so
    every link read here is a block's.
    """
    node = head.next_free_block
    for position in range(1, limit + 1):
        if node is block:
            return position
        node = node.next_free_block  # type: ignore[union-attr]  # checked by the caller's walk
    return 0


def _linked_length(
    queue: Any, classify_repeats: bool = False, members: set[int] | None = None
) -> int:
    """Walk the queue checking I1 and return the number of blocks between the sentinels.

    With ``classify_repeats``, a back link that disagrees because the walk has
    come round to a block it already met is reported as I3 rather than I1.
    ``members``, if given, receives the ``id()`` of every block walked.
    """
    head, tail = _ends(queue)
    _check_outer_links(head, tail)
    previous: Block = head
    node: object = getattr(head, "next_free_block", _UNSET)  # _UNSET: a deleted slot
    position = 1
    while node is not tail:
        _reject_non_block(node, previous, position, head)
        try:
            back: object = node.prev_free_block  # type: ignore[attr-defined]  # a Block, checked above
        except AttributeError:  # a deleted slot
            back = _UNSET
        if back is not previous:
            first = _first_position(head, node, position - 1) if classify_repeats else 0
            if first:
                raise _repeat(node, first, position)
            raise violation(
                "I1",
                _at(position),
                f"prev_free_block of {describe(node)}",  # a block, checked above
                f"{describe(previous, head)} (position {position - 1})",  # the head or a block
                describe(back, head, tail),
            )
        if members is not None:
            members.add(id(node))
        previous = node  # type: ignore[assignment]  # a Block, checked above
        try:
            node = previous.next_free_block
        except AttributeError:  # a deleted slot
            node = _UNSET
        position += 1
    before_tail: object = getattr(tail, "prev_free_block", _UNSET)  # _UNSET: a deleted slot
    if before_tail is not previous:
        raise violation(
            "I1",
            _at(position),
            f"prev_free_block of {describe(tail, tail=tail)}",
            f"{describe(previous, head)} (position {position - 1})",  # the head or a block
            describe(before_tail, head, tail),
        )
    return position - 1


def _repeat(block: object, first: int, again: int) -> InvariantViolation:
    """I3: ``block`` met at ``first`` and again at ``again`` on the forward walk.

    ``block`` is one the walk accepted, so never a sentinel: it is named by its own ``repr``.
    """
    return violation(
        "I3",
        _at(again),
        f"{describe(block)} met a second time",
        "every block once, then the tail",
        f"the same block at position {first} (a cycle of {again - first} "
        f"block{'s' if again - first != 1 else ''} that never reaches the tail)",
    )


def _forward_length(queue: Any) -> int:
    """Follow ``next_free_block`` alone from the head; return the blocks before the tail.

    Raises I3 on a cycle, found with Brent's algorithm in O(n) time and O(1)
    memory, and I1 if the walk meets anything but a block before the tail.
    """
    head, tail = _ends(queue)
    anchor: object = head  # Brent's tortoise: jumps to the hare at each power of two
    power = span = 1
    previous: object = head
    node: object = getattr(head, "next_free_block", _UNSET)  # _UNSET: a deleted slot
    position = 1
    while node is not tail:
        _reject_non_block(node, previous, position, head)
        if node is anchor:
            # The cycle has ``span`` blocks; the first repeated block is where a
            # walker started ``span`` steps ahead first meets one from the head.
            lead: object = head
            for _ in range(span):
                lead = lead.next_free_block  # type: ignore[attr-defined]  # walked above
            trail: object = head
            first = 0
            while trail is not lead:
                trail = trail.next_free_block  # type: ignore[attr-defined]  # walked above
                lead = lead.next_free_block  # type: ignore[attr-defined]  # walked above
                first += 1
            raise _repeat(trail, first, first + span)
        if span == power:
            anchor = node
            power *= 2
            span = 0
        previous = node
        try:
            node = node.next_free_block  # type: ignore[attr-defined]  # a Block, checked above
        except AttributeError:  # a deleted slot
            node = _UNSET
        span += 1
        position += 1
    return position - 1


def _counted(queue: Any, head: Block, tail: Block) -> int:
    """Return ``num_free_blocks`` after checking it can be a count at all (I2)."""
    count = getattr(queue, "num_free_blocks", _UNSET)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise violation(
            "I2",
            "the queue",
            "num_free_blocks",
            "a non-negative int",
            describe(count, head, tail) if not isinstance(count, int) else repr(count),
        )
    return count


def _count_mismatch(count: int, length: int) -> InvariantViolation:
    return violation(
        "I2",
        f"the tail, reached at {_at(length + 1)}",
        "num_free_blocks",
        f"{length} (the blocks between the sentinels)",
        f"{count}",
    )


@_total
def check_sentinel_linkage(queue: Any) -> None:
    """Check I1: the sentinels bracket a chain whose links agree both ways.

    Raises :class:`InvariantViolation` with ``invariant == "sentinel_linkage"``
    on a cleared, skewed or outward-pointing link, or a sentinel in the wrong
    place (a cycle shows as a skewed back link where it closes).

    Runtime complexity: O(n)

    >>> from verified_queue.queue import FreeBlockQueue
    >>> queue = FreeBlockQueue([Block(), Block()])
    >>> check_sentinel_linkage(queue)
    >>> queue.fake_free_list_tail.prev_free_block = None
    >>> check_sentinel_linkage(queue)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.InvariantViolation: I1 (sentinel_linkage) broken at position 3 of the...
    """
    _linked_length(queue)


@_total
def check_count_consistency(queue: Any) -> None:
    """Check I2: ``num_free_blocks`` is the number of blocks between the sentinels.

    Counts along ``next_free_block`` only, so it judges the count even when a
    back link is skewed. Raises :class:`InvariantViolation` with
    ``invariant == "count_consistency"`` when the count differs from the walk
    (or is not a count at all); if the walk cannot reach the tail, the
    violation names the family that stops it.

    Runtime complexity: O(n)

    >>> from verified_queue.queue import FreeBlockQueue
    >>> queue = FreeBlockQueue([Block(), Block()])
    >>> check_count_consistency(queue)
    >>> queue.num_free_blocks = 3
    >>> check_count_consistency(queue)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.InvariantViolation: I2 (count_consistency) ... expected 2 ...
    """
    head, tail = _ends(queue)
    count = _counted(queue, head, tail)
    previous: object = head
    node: object = getattr(head, "next_free_block", _UNSET)  # _UNSET: a deleted slot
    length = 0
    while node is not tail:
        _reject_non_block(node, previous, length + 1, head)
        length += 1
        if length > count:
            # More blocks than counted, or a cycle: a second walk tells which.
            raise _count_mismatch(count, _forward_length(queue))
        previous = node
        try:
            node = node.next_free_block  # type: ignore[attr-defined]  # a Block, checked above
        except AttributeError:  # a deleted slot
            node = _UNSET
    if length != count:
        raise _count_mismatch(count, length)


@_total
def check_no_duplicates(queue: Any) -> None:
    """Check I3: following ``next_free_block`` from the head meets no block twice.

    Raises :class:`InvariantViolation` with ``invariant == "no_duplicates"`` on
    a ring, a self-loop or a block spliced in twice, naming the first block
    met again and both positions; if the walk meets something other than a
    block before the tail, the violation is I1.

    Runtime complexity: O(n), with O(1) extra memory

    >>> from verified_queue.queue import FreeBlockQueue
    >>> blocks = [Block(), Block()]
    >>> queue = FreeBlockQueue(blocks)
    >>> check_no_duplicates(queue)
    >>> blocks[1].next_free_block = blocks[0]
    >>> check_no_duplicates(queue)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.InvariantViolation: I3 (no_duplicates) broken at position 3 ...
    """
    _forward_length(queue)


@_total
def check_detached_outside(queue: Any, blocks: Iterable[object]) -> None:
    """Check I4: each block of ``blocks`` not in ``queue`` is detached.

    Raises :class:`InvariantViolation` with ``invariant == "detached_outside"``
    on a block outside the queue with a link set.

    Pass the blocks of this queue's pool only: a block legitimately linked in
    another queue would be flagged. Walks the queue first (checking I1, and
    I3 for repeats) to learn its members by ``id()``.

    Runtime complexity: O(n + len(blocks)), with O(n) extra memory

    >>> from verified_queue.queue import FreeBlockQueue
    >>> pool = [Block(), Block()]
    >>> queue = FreeBlockQueue(pool[:1])
    >>> check_detached_outside(queue, pool)
    >>> pool[1].next_free_block = pool[0]
    >>> check_detached_outside(queue, pool)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.InvariantViolation: I4 (detached_outside) broken at item 1 ...
    """
    members: set[int] = set()
    _linked_length(queue, classify_repeats=True, members=members)
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    for index, block in enumerate(blocks):
        if id(block) in members:
            continue
        before = getattr(block, "prev_free_block", _UNSET)
        after = getattr(block, "next_free_block", _UNSET)
        if before is not None or after is not None:
            raise violation(
                "I4",
                f"item {index} of the given blocks",
                f"the links of {describe(block, head, tail)}, which is not in this queue",
                "both None (detached)",
                f"prev_free_block {describe(before, head, tail)}, "
                f"next_free_block {describe(after, head, tail)}",
            )


@_total
def check_invariants(queue: Any, pool: Iterable[object] | None = None) -> None:
    """Check I1 to I3 of ``queue``, and I4 given its ``pool``; return ``None`` if it is healthy.

    One forward walk covers all three: it checks the linkage (I1), reports a
    block met twice as I3, and its length is compared with the count (I2).
    Where one fault breaks several families, the first found wins, in walk
    order. With ``pool`` (the blocks of this queue's pool) it also checks that
    every pool block outside the queue is detached.

    Raises :class:`InvariantViolation`, and nothing else, on any damage.

    Runtime complexity: O(n), plus O(len(pool)) with O(n) memory if ``pool`` is given

    >>> from verified_queue.queue import FreeBlockQueue
    >>> blocks = [Block() for _ in range(3)]
    >>> queue = FreeBlockQueue(blocks)
    >>> check_invariants(queue, pool=blocks)
    >>> blocks[1].prev_free_block = blocks[2]
    >>> check_invariants(queue)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.InvariantViolation: I1 (sentinel_linkage) broken at position 2 of the...
    """
    length = _linked_length(queue, classify_repeats=True)
    head, tail = _ends(queue)
    count = _counted(queue, head, tail)
    if count != length:
        raise _count_mismatch(count, length)
    if pool is not None:
        check_detached_outside(queue, pool)
