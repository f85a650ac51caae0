"""Compare a linked queue with its list model, link by link.

:func:`mismatch` is the refinement check every layer shares: the queue's order and count equal
the model's, every link of every block of the universe is exactly what the model's order
implies (the queue's invariants I1..I4, stated against the model), the queue's sentinels are
still its own, and every list a query returns is a new one, which the caller owns. It reads
links directly and walks at most ``len(universe) + 1`` steps, so a corrupted queue (a cycle,
a dangling link) is reported rather than looped over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specs.model import ListModel
from verified_queue.block import Block, Sentinel
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "LateError",
    "Outcome",
    "iterate_after",
    "mismatch",
    "order_of",
    "outcome_difference",
    "outcome_of",
    "same_result",
    "shared_result",
]


def order_of(  # noqa: PLR0911 -- one early return per way the chain can be broken
    queue: FreeBlockQueue[Any], limit: int
) -> list[Block] | str:
    """Walk ``queue`` from the head sentinel; return its blocks, or what is broken.

    Stops after ``limit + 1`` blocks, so a cycle is reported, not followed forever.

    Runtime complexity: O(min(n, limit))
    """
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    if head.prev_free_block is not None:
        return "the head sentinel has a predecessor"
    if tail.next_free_block is not None:
        return "the tail sentinel has a successor"
    found: list[Block] = []
    previous: Block = head
    node = head.next_free_block
    while node is not tail:
        if node is None:
            return f"the chain ends at {previous!r} before the tail sentinel"
        if isinstance(node, Sentinel):
            return f"a sentinel {node!r} sits between the head and the tail"
        if node.prev_free_block is not previous:
            return f"{node!r} links back to {node.prev_free_block!r}, not to {previous!r}"
        if len(found) > limit:
            return f"more than {limit} blocks between the sentinels (a cycle?)"
        found.append(node)
        previous = node
        node = node.next_free_block
    if tail.prev_free_block is not previous:
        return f"the tail sentinel links back to {tail.prev_free_block!r}, not {previous!r}"
    return found


def mismatch(  # noqa: PLR0911 -- one early return per observable that can differ
    queue: FreeBlockQueue[Any],
    model: ListModel[Any],
    universe: Sequence[Block],
    *,
    queries: bool = True,
) -> str | None:
    """Describe the first way ``queue`` differs from ``model``, or return ``None``.

    Checks the order (by identity) as linked, ``num_free_blocks``, and that every block of
    ``universe`` that is in no queue of the model's membership is detached (I4); with
    ``queries`` also ``iter``, ``get_all_free_blocks``, ``len`` and ``bool``, and that
    ``get_all_free_blocks()`` and ``popleft_n(0)`` hand out a new list on every call (see
    :func:`shared_result`).

    Runtime complexity: O(len(universe) + n)
    """
    expected = model.get_all_free_blocks()
    walked = order_of(queue, len(universe) + len(expected))
    if isinstance(walked, str):
        return walked
    if len(walked) != len(expected) or any(
        got is not want for got, want in zip(walked, expected, strict=False)
    ):
        return f"queue holds {walked!r}, model {expected!r}"
    listings: tuple[tuple[str, list[Any]], ...] = ()
    if queries:
        listings = (("iter()", list(queue)), ("get_all_free_blocks()", queue.get_all_free_blocks()))
    for label, listed in listings:
        if len(listed) != len(expected) or any(
            got is not want for got, want in zip(listed, expected, strict=False)
        ):
            return f"{label} gives {listed!r}, model {expected!r}"
    if queue.num_free_blocks != len(expected):
        return f"num_free_blocks is {queue.num_free_blocks}, model holds {len(expected)}"
    if queries and len(queue) != len(expected):
        return f"len() is {len(queue)}, model holds {len(expected)}"
    if queries and bool(queue) != bool(expected):
        return f"bool() is {bool(queue)}, model holds {len(expected)}"
    if queries and (shared := shared_result(queue)) is not None:
        return shared
    for block in universe:
        if not model.membership.is_linked(block) and (
            block.prev_free_block is not None or block.next_free_block is not None
        ):
            return f"{block!r} is in no queue but still has links"
    return None


def shared_result(queue: FreeBlockQueue[Any]) -> str | None:
    """Describe a list result ``queue`` hands out twice, or a caller's change it keeps; or ``None``.

    The lists the queue returns belong to the caller: two calls of ``get_all_free_blocks()``,
    or of ``popleft_n(0)`` (which must return ``[]``), give two different lists, and a list
    the caller emptied or extended does not change what the next call returns. A queue that
    reuses a list (a shared constant, a buffer it refills) fails this.

    Runtime complexity: O(n)
    """
    calls: tuple[tuple[str, Callable[[], object]], ...] = (
        ("get_all_free_blocks()", queue.get_all_free_blocks),
        ("popleft_n(0)", lambda: queue.popleft_n(0)),
    )
    for label, call in calls:
        first = outcome_of(call)
        if not isinstance(first.result, list):
            return f"{label} gave {first.result!r} {first.error!r}, not a list"
        held = list(first.result)
        first.result.append(None)  # the caller's own list: it may change it
        try:
            second = outcome_of(call)
        finally:
            first.result[:] = held  # a shared list is put back as it was
        problem = _second_result_problem(label, first.result, second)
        if problem is not None:
            return problem
    return None


def _second_result_problem(label: str, first: list[Any], second: Outcome) -> str | None:
    """What is wrong with ``second``, the next result after a caller changed ``first``."""
    if not isinstance(second.result, list):
        return f"{label} gave {second.result!r} {second.error!r}, not a list"
    if second.result is first:
        return f"{label} returned the same list object twice, not a new list each time"
    if any(item is None for item in second.result):
        return f"{label} returned a list holding what a caller added to an earlier result"
    if label == "popleft_n(0)" and second.result:
        return f"popleft_n(0) returned {second.result!r}, not []"
    return None


class LateError(Exception):
    """An error raised while an ``iter_blocks_after`` iterator was drained, not by the call."""


def iterate_after(
    cursor: Block | None, head: Block, tail: Block
) -> Callable[[FreeBlockQueue[Any] | ListModel[Any]], list[Any]]:
    """A call that drains ``iter_blocks_after(cursor)`` of a queue or of its model.

    A cursor must be refused by the call itself, not once the iteration starts: an error
    raised while draining becomes :class:`LateError`, which the model never raises. The model
    has no sentinels, so for it the queue's own ``head`` means ``None`` (from the front) and
    its own ``tail`` means the end (nothing after).

    Runtime complexity: O(1), and O(n) for the call it returns

    >>> call = iterate_after(None, Block(), Block())
    >>> call(ListModel())
    []
    """

    def call(target: FreeBlockQueue[Any] | ListModel[Any]) -> list[Any]:
        start = cursor
        if isinstance(target, ListModel):
            if cursor is head:
                start = None
            elif cursor is tail:
                return []
        iterator = target.iter_blocks_after(start)
        try:
            return list(iterator)
        except Exception as error:  # the call, not the iteration, must refuse a cursor
            raise LateError(f"{type(error).__name__} while iterating: {error}") from error

    return call


@dataclass
class Outcome:
    """What a call did: its result, or the exception it raised."""

    result: object = None
    error: BaseException | None = None


def outcome_of(call: Callable[..., object], *args: object) -> Outcome:
    """Call ``call(*args)`` and capture its result or its exception.

    Runtime complexity: O(1) plus the call

    >>> outcome_of(int, "x").error
    ValueError("invalid literal for int() with base 10: 'x'")
    """
    try:
        return Outcome(result=call(*args))
    except Exception as error:  # any exception is an outcome to compare with the model's
        return Outcome(error=error)


def same_result(got: object, want: object) -> bool:
    """Compare results by identity: a block, a list of blocks, or ``None``.

    Runtime complexity: O(len(want))
    """
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(a is b for a, b in zip(got, want, strict=True))
        )
    return got is want


def outcome_difference(got: Outcome, want: Outcome, *, messages: bool = False) -> str | None:
    """Describe how the queue's outcome ``got`` differs from the model's ``want``, or ``None``.

    Errors must be of exactly the model's type, and with ``messages`` say exactly what the
    model's say; results must be the same objects.

    Runtime complexity: O(len(result))
    """
    if want.error is not None:
        return _error_difference(got, want.error, messages)
    if got.error is not None:
        return f"raised {got.error!r}, the model returned {want.result!r}"
    if not same_result(got.result, want.result):
        return f"returned {got.result!r}, the model returned {want.result!r}"
    return None


def _error_difference(got: Outcome, wanted: BaseException, messages: bool) -> str | None:
    if got.error is None:
        return f"returned {got.result!r}, the model raised {type(wanted).__name__}"
    if type(got.error) is not type(wanted):
        return f"raised {got.error!r}, the model raised {type(wanted).__name__}"
    if messages and str(got.error) != str(wanted):
        return f"raised {got.error!r}, the model raised {wanted!r}"
    return None
