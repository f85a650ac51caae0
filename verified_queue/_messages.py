"""The errors the queue raises, built off the hot path.

The production queue (``queue.py``), check mode (``checked.py``) and the planted bugs
of ``specs/`` raise the same errors for the same misuse, so the builders live here,
once. Each builds and returns an exception; none changes any state, and none may
raise while building (a user's ``__repr__`` that fails is replaced by the type and
identity). They are called only on a path that is about to raise.
"""

from __future__ import annotations

import operator
from typing import TypeVar

from verified_queue.block import COMPILED, LINK_FIELDS, Block, Sentinel
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    InvariantViolation,
    NotInQueueError,
    WrongTypeError,
)

__all__ = [
    "already_linked",
    "batch_argument",
    "can_link",
    "changed_during_iteration",
    "count_argument",
    "count_past_chain",
    "describe",
    "first_unlinkable",
    "has_links",
    "has_unlinkable",
    "is_sentinel",
    "lookup_error",
    "lost_inner_link",
    "not_a_block",
    "not_linked",
    "ran_off_the_chain",
    "too_few_blocks",
]

#: The two link fields, by name (has_links looks each up once).
_PREV, _NEXT = LINK_FIELDS

_Item = TypeVar("_Item")


def describe(block: object) -> str:
    """``repr(block)``, or its type and identity when that repr itself fails.

    Error messages are built from it, and building one must never raise: a
    user's ``__repr__`` may read a neighbour that is not what it expects.
    """
    try:
        return repr(block)
    except Exception:  # any failure of a user's __repr__ falls back
        return f"<{type(block).__qualname__} object at {id(block):#x}>"


def already_linked(
    operation: str, block: object, last: object = None, before: object = None
) -> AlreadyInQueueError:
    """Build the error for a block that may not join a queue (kept off the hot path).

    A batch operation passes the last block it linked and the block it links
    after: a block found walking back from ``last`` to ``before`` was linked by
    the batch itself, so it is repeated in the batch, not a double free.
    """
    if is_sentinel(block):
        reason = "it is a queue sentinel"
    elif _linked_since(block, last, before):
        reason = "it is repeated in the batch"
    else:
        reason = "it is already linked in a queue (a double free?)"
    return AlreadyInQueueError(f"{operation}({describe(block)}): {reason}")


def is_sentinel(value: object) -> bool:
    """``isinstance(value, Sentinel)``, or ``False`` if even that raises (a hostile proxy)."""
    try:
        return isinstance(value, Sentinel)
    except Exception:  # a __class__ that raises: not one of ours
        return False


def _linked_since(block: object, last: object, before: object) -> bool:
    """Whether ``block`` is among the blocks a batch linked: ``last`` back to ``before``."""
    node = last
    while node is not None and node is not before:
        if node is block:
            return True
        node = getattr(node, "prev_free_block", None)
    return False


def not_linked(operation: str, block: object) -> NotInQueueError:
    """Build the error for a block that is not linked where ``operation`` needs it."""
    if not is_sentinel(block):
        reason = "it is not linked in a queue"
    elif operation == "remove":
        reason = "it is a queue sentinel, which never leaves its queue"
    else:
        # iter_blocks_after takes this queue's own sentinels, so this one is foreign.
        reason = "it is another queue's sentinel"
    return NotInQueueError(f"{operation}({describe(block)}): {reason}")


def has_links(value: object) -> bool:
    """Whether ``value`` has both link attributes; ``False`` if looking them up raises.

    The package's one definition of "this object has the two links": the queue's
    guards, the checkers and check mode all ask it, so a proxy whose lookup raises
    (``KeyError``, say) is a non-block everywhere, never an error from a check.
    """
    try:
        # Two lookups, not a loop over LINK_FIELDS: check mode asks this of every block of
        # every batch, where a generator cost a third of the question.
        return hasattr(value, _PREV) and hasattr(value, _NEXT)
    except Exception:  # a proxy whose lookup raises (KeyError, say) has no links we can use
        return False


def lookup_error(value: object) -> type[Exception] | None:
    """The type of what looking up a link of ``value`` raises, other than ``AttributeError``.

    ``None`` if the lookups return or raise ``AttributeError``: a proxy whose
    lookup raises ``KeyError``, say, gives ``KeyError``.
    """
    try:
        for name in LINK_FIELDS:
            getattr(value, name, None)
    except Exception as error:  # what a hostile lookup raises is its own business
        return type(error)
    return None


def can_link(value: object) -> bool:
    """Whether this build can link ``value``: a Block, or (pure Python) anything with both links."""
    if issubclass(type(value), Block):  # the type itself: a proxy's __class__ may lie or raise
        return True
    return not COMPILED and has_links(value)


def first_unlinkable(batch: list[_Item]) -> object:
    """The first item of ``batch`` this build cannot link (the cause of a failed batch)."""
    return next((item for item in batch if not can_link(item)), None)


def has_unlinkable(batch: list[_Item]) -> bool:
    """Whether ``batch`` holds an item this build cannot link."""
    for item in batch:  # noqa: SIM110 -- a loop, not any() over a generator: a frame fewer a block
        # can_link's first test inline: a Block subclass needs no call at all.
        if not issubclass(type(item), Block) and not can_link(item):
            return True
    return False


def batch_argument(operation: str, blocks: object) -> list[object]:
    """``list(blocks)`` for a batch that is not a list; a non-iterable is a WrongTypeError.

    Only ``iter`` is guarded: an exception the iteration itself raises is the
    caller's, and propagates as it is.
    """
    try:
        items = iter(blocks)  # type: ignore[call-overload]  # anything else is refused just below
    except TypeError:
        raise WrongTypeError(
            f"{operation}({describe(blocks)}): expected an iterable of blocks, "
            f"got {type(blocks).__qualname__}"
        ) from None
    return list(items)


def not_a_block(operation: str, value: object) -> WrongTypeError:
    """Build the error for an argument that is not a block this build can link."""
    described = describe(value)
    kind = type(value).__qualname__
    if has_links(value):
        # It has the links, so only the compiled build refuses it.
        return WrongTypeError(
            f"{operation}({described}): the compiled verified_queue links only subclasses of "
            f"verified_queue.Block, and {kind} is not one; subclass verified_queue.Block and "
            "drop the class's own prev_free_block and next_free_block fields (Block has them)"
        )
    return WrongTypeError(
        f"{operation}({described}): expected a block (a verified_queue.Block, or an object "
        f"with prev_free_block and next_free_block), got {kind}"
    )


def count_argument(operation: str, n: object) -> int:
    """``n`` as an int, for a count that is not exactly one (kept off the hot path)."""
    if isinstance(n, bool):
        raise WrongTypeError(f"{operation}({n!r}): the count must be an integer, not a bool")
    try:
        return operator.index(n)  # type: ignore[arg-type]  # anything else is refused just below
    except TypeError:
        raise WrongTypeError(
            f"{operation}({describe(n)}): the count must be an integer, not {type(n).__qualname__}"
        ) from None


def changed_during_iteration() -> NotInQueueError:
    """Build the error for an iteration whose block left the queue under it."""
    return NotInQueueError(
        "the free queue changed during iteration: the block the iteration stood on left the queue"
    )


def lost_inner_link(operation: str, sentinel: str) -> InvariantViolation:
    """Build the error for a sentinel whose link into the chain outside code destroyed."""
    link = "next_free_block" if sentinel == "head" else "prev_free_block"
    return InvariantViolation(
        f"{operation}(): the {sentinel} sentinel's {link} is not a block (I1 broken by outside "
        "code); nothing was changed",
        invariant="sentinel_linkage",
        clause="I1",
    )


def count_past_chain(
    operation: str, count: int, counted: object, linked: int
) -> InvariantViolation:
    """Build the error for a count that ran past the tail: ``num_free_blocks`` written from outside.

    ``popleft_n(count)`` trusts the count (I2) to stop its walk before the tail; a
    count written higher than the chain is long (vLLM's own tests write
    ``num_free_blocks``) lets the walk reach the tail after ``linked`` blocks. The
    links are sound, so I2 is what is broken, not I1.

    >>> print(count_past_chain("popleft_n", 5, 5, 3))  # doctest: +NORMALIZE_WHITESPACE
    popleft_n(5): num_free_blocks is 5, but 3 blocks are linked (I2 broken by outside code:
    the count was written); nothing was changed
    """
    return InvariantViolation(
        f"{operation}({count}): num_free_blocks is {counted!r}, but {linked} blocks are linked "
        "(I2 broken by outside code: the count was written); nothing was changed",
        invariant="count_consistency",
        clause="I2",
        expected=str(linked),
        found=repr(counted),
    )


def ran_off_the_chain(
    operation: str, tail: object, taken: list[_Item], count: int, counted: object
) -> InvariantViolation:
    """Build the error for a walk from the head that met a node with no successor.

    The walk of ``popleft_n(count)`` took the nodes in ``taken`` (``None`` where it
    did not get to). If it took the ``tail`` sentinel, the chain is sound and the count
    is what is wrong (I2, :func:`count_past_chain`); otherwise a link inside the chain
    is (I1, :func:`lost_inner_link`).
    """
    # A plain loop, as the all-sizes proof (specs/proof) reads the builders the queue calls.
    index = 0
    for node in taken:
        if node is tail:
            return count_past_chain(operation, count, counted, index)
        index += 1  # noqa: SIM113 -- the proof's translator takes no tuple target (enumerate)
    return lost_inner_link(operation, "head")


def too_few_blocks(count: int, available: int) -> EmptyQueueError:
    """Build the error for ``popleft_n(count)`` from a queue with fewer free blocks."""
    return EmptyQueueError(f"popleft_n({count}) from a FreeBlockQueue with {available} free blocks")
