"""Checkers and check mode: planted bugs in the code that is meant to find bugs.

A checker that misses damage passes on a healthy queue, so the layers that use the checkers as
an oracle cannot see these; :mod:`specs.damage` and the machines of
``tests/verification/test_checker_layers.py`` are built to. Each bug here is one function of
``verified_queue/invariants.py`` or one method of ``CheckedFreeBlockQueue``, copied with one
defect and installed in place of the original by :func:`planted` for the length of a run
(every caller reaches it: the checkers look their helpers up in their module at each call).

The queue bugs of this module are subclasses of :class:`FreeBlockQueue`, as in the other
planted-bug modules, of the kinds the older catalogue has none of: a count of an integer-like
type refused or a ``bool`` accepted, a subclass lost by a copy, a walk that reads ahead across
a ``yield``, an ``in`` that stops one short, a refusal whose message names the wrong call.
Check mode answers ``in`` and iteration itself, so those two show only where the base class's
own answers are asked for.

:data:`CHECKER_CATALOGUE` lists them all; :mod:`specs.checker_matrix` runs each against every
layer that can see it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, SupportsIndex

from specs.planted_bugs._common import B
from verified_queue import invariants
from verified_queue._messages import (
    changed_during_iteration,
    not_a_block,
    not_linked,
    ran_off_the_chain,
    too_few_blocks,
)
from verified_queue._undo import relink_taken
from verified_queue.block import Block, Sentinel
from verified_queue.checked import CheckedFreeBlockQueue, _rebuild
from verified_queue.errors import InvariantViolation, NegativeCountError, WrongTypeError
from verified_queue.invariants import (
    _UNSET,
    NO_LINK,
    _at,
    _ends,
    _first_position,
    _reject_non_block,
    _repeat,
    _total,
    describe,
    violation,
)
from verified_queue.queue import _COLLECTS_AT_CHECKPOINTS, FreeBlockQueue, _checkpoint

__all__ = [
    "CHECKER_CATALOGUE",
    "CheckerBug",
    "ContainsStopsBeforeLast",
    "PopleftNAcceptsBool",
    "PopleftNRefusesIndexables",
    "ReduceLosesSubclass",
    "RemoveNamesWrongOperation",
    "WalkReadsAhead",
    "planted",
]


# ------------------------------------------------------------------ invariants.py


def outer_links_head_only(head: Sentinel, tail: Sentinel) -> None:
    """``_check_outer_links`` that checks the head's outer link and forgets the tail's."""
    before_head: object = getattr(head, "prev_free_block", _UNSET)  # _UNSET: a deleted slot
    if before_head is not None:
        raise violation(
            "I1",
            "the head sentinel",
            f"prev_free_block of {describe(head, head)}",
            NO_LINK,
            describe(before_head, head, tail),
        )
    # should check the tail's outer link too


def counted_accepts_bool(queue: Any, head: Block, tail: Block) -> int:
    """``_counted`` without the ``bool`` test: ``True`` passes as a count of one."""
    count = getattr(queue, "num_free_blocks", _UNSET)
    if not isinstance(count, int) or count < 0:  # should also refuse a bool
        raise violation(
            "I2",
            "the queue",
            "num_free_blocks",
            "a non-negative int",
            describe(count, head, tail) if not isinstance(count, int) else repr(count),
        )
    return count


def first_position_one_short(head: Block, block: object, limit: int) -> int:
    """``_first_position`` that searches one position too few: a self-loop reads as I1."""
    node = head.next_free_block
    for position in range(1, limit):  # should be limit + 1
        if node is block:
            return position
        node = node.next_free_block  # type: ignore[union-attr]
    return 0


def count_mismatch_one_position_early(count: int, length: int) -> InvariantViolation:
    """``_count_mismatch`` that names the last block's position instead of the tail's."""
    return violation(
        "I2",
        f"the tail, reached at {_at(length)}",  # should be _at(length + 1)
        "num_free_blocks",
        f"{length} (the blocks between the sentinels)",
        f"{count}",
    )


def linked_length_trusts_tail(
    queue: Any, classify_repeats: bool = False, members: set[int] | None = None
) -> int:
    """``_linked_length`` that never checks the tail's back link."""
    head, tail = _ends(queue)
    invariants._check_outer_links(head, tail)
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
    return position - 1  # should check tail.prev_free_block is previous first


@_total
def detached_outside_reads_prev_only(queue: Any, blocks: Iterable[object]) -> None:
    """``check_detached_outside`` that tests a block's back link only."""
    members: set[int] = set()
    invariants._linked_length(queue, classify_repeats=True, members=members)
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    for index, block in enumerate(blocks):
        if id(block) in members:
            continue
        before = getattr(block, "prev_free_block", _UNSET)
        if before is not None:  # should test next_free_block too
            raise violation(
                "I4",
                f"item {index} of the given blocks",
                f"the links of {describe(block, head, tail)}, which is not in this queue",
                "both None (detached)",
                f"prev_free_block {describe(before, head, tail)}",
            )


# -------------------------------------------------------------------- checked.py


def full_check_skips_membership(self: CheckedFreeBlockQueue[Any]) -> bool:
    """Check mode's one-walk test of ``full_check`` that trusts the links: no membership test."""
    members = self._members
    try:
        head = self.fake_free_list_head
        tail = self.fake_free_list_tail
        count = self.num_free_blocks
        if (
            count.__class__ is not int
            or count != len(members)
            or head.prev_free_block is not None
            or tail.next_free_block is not None
        ):
            return False
        previous: Block = head
        node = head.next_free_block
        for _ in range(count):
            if node.prev_free_block is not previous:  # type: ignore[union-attr]  # should test id(node) in members
                return False
            previous = node  # type: ignore[assignment]  # a member, so a Block
            node = node.next_free_block  # type: ignore[union-attr]  # a member
        return node is tail and tail.prev_free_block is previous
    except (AttributeError, TypeError):  # a deleted slot or sentinel, a count that is no int
        return False


def full_check_counts_by_value(self: CheckedFreeBlockQueue[Any]) -> bool:
    """Check mode's one-walk test of ``full_check``, comparing the count by value only."""
    members = self._members
    try:
        head = self.fake_free_list_head
        tail = self.fake_free_list_tail
        count = self.num_free_blocks
        if (
            count != len(members)  # should also require an exact int
            or head.prev_free_block is not None
            or tail.next_free_block is not None
        ):
            return False
        previous: Block = head
        node = head.next_free_block
        for _ in range(count):
            if id(node) not in members or node.prev_free_block is not previous:  # type: ignore[union-attr]  # a member
                return False
            previous = node  # type: ignore[assignment]  # a member, so a Block
            node = node.next_free_block  # type: ignore[union-attr]  # a member
        return node is tail and tail.prev_free_block is previous
    except (AttributeError, TypeError):  # a deleted slot or sentinel, a count that is no int
        return False


def checked_contains_by_value(self: CheckedFreeBlockQueue[Any], block: object) -> bool:
    """Check mode's ``in`` that looks the block up among the members' values (``==``)."""
    return block in self._members.values()  # should be id(block) in self._members


def checked_iter_skips_full_check(self: CheckedFreeBlockQueue[Any]) -> Iterator[Any]:
    """Check mode's ``iter()`` without the full check it promises first."""
    # should run self.full_check() first
    return self._iterate(self.fake_free_list_head, "iteration")


def checked_reduce_forgets_type(
    self: CheckedFreeBlockQueue[Any],
) -> tuple[Callable[..., Any], tuple[object, ...], list[Any]]:
    """Check mode's ``__reduce__`` that rebuilds a ``CheckedFreeBlockQueue``, not the subclass."""
    return (
        _rebuild,
        (CheckedFreeBlockQueue, [], self.full_check_every),  # should be type(self)
        self.get_all_free_blocks(),
    )


# ---------------------------------------------------------------------- queue.py


class PopleftNAcceptsBool(FreeBlockQueue[B]):
    """``popleft_n`` that converts its count with ``operator.index`` alone: ``True`` pops one."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``operator.index(n)`` blocks; a ``bool`` is taken for 0 or 1."""
        count: int = operator.index(n)  # should refuse a bool first
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


class PopleftNRefusesIndexables(FreeBlockQueue[B]):
    """``popleft_n`` that takes exact ints only: an ``int`` subclass or ``__index__`` is refused."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Pop ``n`` blocks, refusing any ``n`` that is not exactly an ``int``."""
        if type(n) is not int:  # should accept any __index__ but bool
            raise WrongTypeError(
                f"popleft_n({n!r}): the count must be an integer, not {type(n).__qualname__}"
            )
        count: int = n
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


class ReduceLosesSubclass(FreeBlockQueue[B]):
    """``__reduce__`` that names ``FreeBlockQueue``: a copy or pickle of a subclass loses it."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Callable[..., FreeBlockQueue[B]], tuple[object, ...], list[B]]:
        """Rebuild as the base class."""
        return FreeBlockQueue, (), self.get_all_free_blocks()  # should be type(self)


class ContainsStopsBeforeLast(FreeBlockQueue[B]):
    """``in`` whose walk stops at the last block instead of the tail: the last is not found."""

    __slots__ = ()

    def __contains__(self, block: object) -> bool:
        """Whether ``block`` is one of the blocks before the last."""
        tail = self.fake_free_list_tail
        node: Block = self.fake_free_list_head.next_free_block  # type: ignore[assignment]  # I1
        while node is not tail and node is not tail.prev_free_block:  # should stop at tail
            if node is block:
                return True
            node = node.next_free_block  # type: ignore[assignment]  # I1: set on every linked block
        return False


class WalkReadsAhead(FreeBlockQueue[B]):
    """A walk that reads the next link before it yields and trusts it after.

    A block appended while the walk stands on the last block is never reached, and a block
    removed while the walk stands on it does not stop the walk.
    """

    __slots__ = ()

    def _walk(self, start: Block | None) -> Iterator[B]:
        """Yield from ``start`` to the tail with the link read before each yield."""
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
            block = following  # should read block.next_free_block again


class RemoveNamesWrongOperation(FreeBlockQueue[B]):
    """``remove`` of a block in no queue that raises the right error naming ``append``."""

    __slots__ = ()

    def remove(self, block: B) -> None:
        """Unlink ``block``; a detached one is refused with another call's name."""
        try:
            node: Block = block  # type: ignore[assignment]  # compiled: a Block, checked here
            before = node.prev_free_block
            after = node.next_free_block
        except Exception:  # not a block: no link, or a lookup that raises (a proxy)
            raise not_a_block("remove", block) from None
        if before is None or after is None:
            # I4: a detached block has neither link, a sentinel only one.
            raise not_linked("append", block)  # should name "remove"
        # Bridge the neighbours over the block.
        before.next_free_block = after
        after.prev_free_block = before
        # I4: the removed block leaves detached.
        node.prev_free_block = node.next_free_block = None
        self.num_free_blocks -= 1  # I2


class CheckerBug(NamedTuple):
    """A planted bug of this module: where it lives, what it replaces, and with what.

    ``owner`` is the module or class whose attribute ``name`` the bug replaces with
    ``replacement`` (``None`` for a queue bug, whose class is ``queue_type``);
    ``source`` is the file of the original.
    """

    source: str
    kind: str
    operation: str
    owner: object = None
    replacement: object = None
    queue_type: type[FreeBlockQueue[Any]] = FreeBlockQueue


def _patch(owner: object, name: str, replacement: object, kind: str, source: str) -> CheckerBug:
    return CheckerBug(source, kind, name, owner, replacement)


def _queue(queue_type: type[FreeBlockQueue[Any]], kind: str, operation: str) -> CheckerBug:
    return CheckerBug("queue.py", kind, operation, queue_type=queue_type)


_INV, _CHK = "invariants.py", "checked.py"
_CHECKED = CheckedFreeBlockQueue

#: Every bug of this module by name: where it lives, its kind, and what it replaces.
CHECKER_CATALOGUE: dict[str, CheckerBug] = {
    "outer_links_head_only": _patch(
        invariants, "_check_outer_links", outer_links_head_only, "checker misses", _INV
    ),
    "counted_accepts_bool": _patch(
        invariants, "_counted", counted_accepts_bool, "checker misses", _INV
    ),
    "first_position_one_short": _patch(
        invariants, "_first_position", first_position_one_short, "checker misnames", _INV
    ),
    "count_mismatch_one_position_early": _patch(
        invariants,
        "_count_mismatch",
        count_mismatch_one_position_early,
        "checker misplaces",
        _INV,
    ),
    "linked_length_trusts_tail": _patch(
        invariants, "_linked_length", linked_length_trusts_tail, "checker misses", _INV
    ),
    "detached_outside_reads_prev_only": _patch(
        invariants,
        "check_detached_outside",
        detached_outside_reads_prev_only,
        "checker misses",
        _INV,
    ),
    "full_check_skips_membership": _patch(
        _CHECKED, "_chain_is_membership", full_check_skips_membership, "checker misses", _CHK
    ),
    "full_check_counts_by_value": _patch(
        _CHECKED, "_chain_is_membership", full_check_counts_by_value, "checker misses", _CHK
    ),
    "checked_contains_by_value": _patch(
        _CHECKED, "__contains__", checked_contains_by_value, "identity", _CHK
    ),
    "checked_iter_skips_full_check": _patch(
        _CHECKED, "__iter__", checked_iter_skips_full_check, "checker misses", _CHK
    ),
    "checked_reduce_forgets_type": _patch(
        _CHECKED, "__reduce__", checked_reduce_forgets_type, "copy", _CHK
    ),
    "popleft_n_accepts_bool": _queue(PopleftNAcceptsBool, "count type", "popleft_n"),
    "popleft_n_refuses_indexables": _queue(PopleftNRefusesIndexables, "count type", "popleft_n"),
    "reduce_loses_subclass": _queue(ReduceLosesSubclass, "copy", "__reduce__"),
    "contains_stops_before_last": _queue(ContainsStopsBeforeLast, "base hidden", "__contains__"),
    "walk_reads_ahead": _queue(WalkReadsAhead, "live iteration", "_walk"),
    "remove_names_wrong_operation": _queue(RemoveNamesWrongOperation, "message", "remove"),
}


@contextmanager
def planted(bug: CheckerBug) -> Iterator[type[FreeBlockQueue[Any]]]:
    """Install ``bug`` for the length of the block; yield the queue class to run.

    A function or method bug replaces its original on the owner and is undone on exit; a
    queue bug is its class, yielded as it is.
    """
    if bug.owner is None:
        yield bug.queue_type
        return
    saved = getattr(bug.owner, bug.operation)
    setattr(bug.owner, bug.operation, bug.replacement)
    try:
        yield bug.queue_type
    finally:
        setattr(bug.owner, bug.operation, saved)
