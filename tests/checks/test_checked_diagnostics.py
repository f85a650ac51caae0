"""Check mode's every diagnostic: the invariant, place, value, expected and found it names."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, SupportsIndex

import pytest

from tests.checks.support import (
    WALK,
    AppendForgetsCount,
    IntLike,
    PopleftNKeepsHead,
    PopleftReturnsTail,
    PrependNLeavesOldFront,
    RemoveLeavesBackLink,
    World,
    checked,
    error_of,
    make_world,
    over_faulty,
    parts,
    same,
    writes,
)
from verified_queue import (
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    WrongTypeError,
    _diagnosis,
)
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    NO_DUPLICATES,
    check_invariants,
)
from verified_queue.queue import FreeBlockQueue

#: Where each operation's start-of-operation count check reports, and the call that reaches it.
_COUNT_SITES: dict[str, Callable[[World], object]] = {
    "len()": lambda w: len(w.queue),
    "bool()": lambda w: bool(w.queue),
    "the start of popleft()": lambda w: w.queue.popleft(),
    "the start of popleft_n()": lambda w: w.queue.popleft_n(1),
    "the start of remove()": lambda w: w.queue.remove(w.blocks[1]),
    "the start of append()": lambda w: w.queue.append(w.spare[0]),
    "the start of append_n()": lambda w: w.queue.append_n(w.spare),
    "the start of prepend_n()": lambda w: w.queue.prepend_n(w.spare),
    "the start of iter_blocks_after()": lambda w: w.queue.iter_blocks_after(None),
}


@pytest.mark.parametrize("where", _COUNT_SITES)
def test_count_check_names_its_operation(where: str) -> None:
    """A drifted count is reported at the start of each operation, naming it and both numbers."""
    world = make_world()
    world.queue.num_free_blocks = 5
    error = error_of(lambda: _COUNT_SITES[where](world))
    assert isinstance(error, InvariantViolation)
    assert error.invariant == COUNT_CONSISTENCY
    assert parts(error) == (
        ("I2", f"{where}", "num_free_blocks", "4 (the blocks this queue holds)", "5")
    )
    world = make_world()
    if not writes(world.queue, "num_free_blocks", 4.0):
        return
    assert parts(error_of(lambda: _COUNT_SITES[where](world))) == (
        (
            "I2",
            f"{where}",
            "num_free_blocks",
            "an int",
            f"a non-block {object.__repr__(world.queue.num_free_blocks)}",
        )
    )


def test_int_subclass_count_caught_by_full_check() -> None:
    """A count of an int subclass passes check_invariants but not check mode's exact type test."""
    world = make_world()
    if not writes(world.queue, "num_free_blocks", IntLike(4)):
        pytest.skip("this build's typed count refuses the value")
    if type(world.queue.num_free_blocks) is int:
        pytest.skip("this build's typed count stores a plain int")
    check_invariants(world.queue)
    assert parts(error_of(world.queue.full_check)) == (
        (
            "I2",
            "the full check",
            "num_free_blocks",
            "an int",
            f"a non-block {object.__repr__(world.queue.num_free_blocks)}",
        )
    )


def test_each_membership_diagnostic() -> None:
    """Detached, foreign, sentinel and spliced-in arguments get their exact errors."""
    world = make_world()
    q, (b0, b1, _, _), (spare, intruder) = world.queue, world.blocks, world.spare
    foreign = world.other_blocks[0]
    assert (type(error_of(lambda: q.remove(spare))), str(error_of(lambda: q.remove(spare)))) == (
        NotInQueueError,
        f"remove({spare!r}): it is not linked in a queue",
    )
    assert str(error_of(lambda: q.iter_blocks_after(spare))) == (
        f"iter_blocks_after({spare!r}): it is not linked in a queue"
    )
    assert str(error_of(lambda: q.remove(foreign))) == (
        f"remove({foreign!r}): it is linked in another queue"
    )
    half = Block()
    half.next_free_block = b1  # one link set: not detached, so not "not linked"
    assert (
        str(error_of(lambda: q.remove(half))) == f"remove({half!r}): it is linked in another queue"
    )
    half.next_free_block, half.prev_free_block = None, b1
    assert (
        str(error_of(lambda: q.remove(half))) == f"remove({half!r}): it is linked in another queue"
    )
    other_head = world.other.fake_free_list_head
    assert str(error_of(lambda: q.remove(other_head))).endswith(
        "it is a queue sentinel, which never leaves its queue"
    )
    assert str(error_of(lambda: q.iter_blocks_after(other_head))).endswith(
        "it is another queue's sentinel"
    )
    assert list(q.iter_blocks_after(q.fake_free_list_tail)) == []
    assert same(list(q.iter_blocks_after(q.fake_free_list_head)), world.blocks)
    intruder.prev_free_block, intruder.next_free_block = b0, b1
    b0.next_free_block = b1.prev_free_block = intruder
    error = error_of(lambda: q.remove(intruder))
    assert isinstance(error, InvariantViolation)
    assert (error.invariant, parts(error)) == (
        NO_DUPLICATES,
        (
            "I3",
            f"the start of remove({intruder!r})",
            f"membership of {intruder!r}",
            "a block this queue linked itself",
            "a block linked in by outside code",
        ),
    )
    q.num_free_blocks += 1
    q._members[id(world.spare[0])] = world.spare[0]  # keeps the O(1) count check quiet
    assert parts(error_of(q.full_check)) == (
        (
            "I3",
            f"position 2 {WALK}",
            f"membership of {intruder!r}",
            "a block this queue linked itself",
            "a block linked in by outside code",
        )
    )


def test_block_linking_elsewhere_not_spliced() -> None:
    """A non-member whose predecessor does not link to it is another queue's, not an intruder."""
    world = make_world()
    q, (b0, b1, _, _), (spare, _) = world.queue, world.blocks, world.spare
    spare.prev_free_block, spare.next_free_block = b0, b1  # links in, but nobody links to it
    assert str(error_of(lambda: q.remove(spare))) == (
        f"remove({spare!r}): it is linked in another queue"
    )
    try:
        spare.prev_free_block = _NotLinkable()  # type: ignore[assignment]  # damage
    except TypeError:
        pytest.skip("this build's typed slots refuse a non-block link")
    assert str(error_of(lambda: q.remove(spare))) == (
        f"remove({spare!r}): it is linked in another queue"
    )


class _NotLinkable:
    """Something with neither link, to stand where a block's neighbour should be."""


def test_leaving_under_iteration_is_named() -> None:
    """Removing the block an iteration stands on names the block and the iteration."""
    queue, blocks = checked(3)
    walk = iter(queue)
    assert next(walk) is blocks[0]
    queue.remove(blocks[0])
    error = error_of(lambda: next(walk))
    assert type(error) is NotInQueueError
    assert str(error) == f"{blocks[0]!r} left the queue while an iteration stood on it"


class _RaisingLinks:
    """vLLM's block shape, but reading a link raises TypeError (a broken property)."""

    @property
    def prev_free_block(self) -> None:
        raise TypeError("no links here")

    @property
    def next_free_block(self) -> None:
        raise TypeError("no links here")


#: Calls given a block whose link lookups raise: no block, in either mode.
_RAISING_LINKS: dict[str, Callable[[CheckedFreeBlockQueue[Any]], object]] = {
    "remove": lambda q: q.remove(_RaisingLinks()),
    "append": lambda q: q.append(_RaisingLinks()),
    "append_n": lambda q: q.append_n([_RaisingLinks()]),
    "prepend_n": lambda q: q.prepend_n([_RaisingLinks()]),
    "iter_blocks_after": lambda q: q.iter_blocks_after(_RaisingLinks()),
}


@pytest.mark.parametrize("where", _RAISING_LINKS)
def test_a_block_whose_links_raise_is_a_wrong_type_as_in_production(where: str) -> None:
    """Check mode raises the production queue's WrongTypeError for a block whose links raise."""
    queue, blocks = checked(2)
    error = error_of(lambda: _RAISING_LINKS[where](queue))
    assert isinstance(error, WrongTypeError)
    assert str(error).startswith(f"{where}(")
    assert same(queue.get_all_free_blocks(), blocks)


def test_explained_raw_error_names_damage() -> None:
    """A head replaced by None makes each operation reading it report the full check's finding."""
    if not writes(make_world().queue, "fake_free_list_head", None):
        pytest.skip("this build's typed slot refuses the damage")
    expected = ("I1", "the queue", "fake_free_list_head", "a Sentinel", "None")
    operations: dict[str, Callable[[CheckedFreeBlockQueue[Block]], object]] = {
        "popleft": lambda q: q.popleft(),
        "popleft_n": lambda q: q.popleft_n(1),
        "prepend_n": lambda q: q.prepend_n([Block()]),
        "iter_blocks_after": lambda q: list(q.iter_blocks_after(None)),
    }
    for name, operation in operations.items():
        queue, _ = checked(2)
        queue.fake_free_list_head = None  # type: ignore[assignment]  # the damage
        assert parts(error_of(partial(operation, queue))) == expected, name


class _AppendLinksAtFront(FreeBlockQueue[Block]):
    """Links an appended block at the front instead of the back."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        super().prepend_n([block])


class _PopleftNHandsOutAStranger(FreeBlockQueue[Block]):
    """Returns the run plus a block that was never in the queue."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[Block]:
        return [*super().popleft_n(n), Block()]


class _AppendNLeavesOldLast(FreeBlockQueue[Block]):
    """Links the batch but leaves the old last block pointing at the tail."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        old_last = self.fake_free_list_tail.prev_free_block
        super().append_n(blocks)
        if old_last is not None and old_last is not self.fake_free_list_head:
            old_last.next_free_block = self.fake_free_list_tail


@dataclass(frozen=True)
class EndCase:
    """A faulty base class, the call that meets its fault, and the violation's parts.

    The parts are templates naming the queue's blocks ``{b0}`` to ``{b2}``, the
    block handed to the call ``{new}``, and this queue's ``{head}`` and ``{tail}``,
    each as a diagnostic shows it after the call.
    """

    base: type[FreeBlockQueue[Block]]
    size: int
    call: Callable[[Any, list[Block], Block], object]
    clause: str
    where: str
    what: str
    expected: str
    found: str


NAMING_EACH_OTHER = "each naming the other"
RETURNED = "a block the operation returned"
OWN_BLOCK = "one of this queue's blocks"

# fmt: off
END_CASES: dict[str, EndCase] = {
    "append forgets count": EndCase(
        AppendForgetsCount, 3, lambda q, _b, new: q.append(new),
        "I2", "the end of append()", "num_free_blocks", "4 (the blocks this queue holds)", "3",
    ),
    "remove leaves back link": EndCase(
        RemoveLeavesBackLink, 3, lambda q, b, _new: q.remove(b[1]),
        "I1", "the end of remove()", "the links between {b0} and {b2}", NAMING_EACH_OTHER,
        "{b2} and {b1}",
    ),
    "prepend_n leaves old front": EndCase(
        PrependNLeavesOldFront, 3, lambda q, _b, new: q.prepend_n([new]),
        "I1", "the end of prepend_n()", "the links between {new} and {b0}", NAMING_EACH_OTHER,
        "{b0} and {head}",
    ),
    "append_n leaves old last": EndCase(
        _AppendNLeavesOldLast, 3, lambda q, _b, new: q.append_n([new]),
        "I1", "the end of append_n()", "the links between {b2} and {new}", NAMING_EACH_OTHER,
        "{tail} and {b2}",
    ),
    "popleft_n keeps head": EndCase(
        PopleftNKeepsHead, 3, lambda q, _b, _new: q.popleft_n(2),
        "I1", "the end of popleft_n(), position 1 {walk}", "next_free_block of {head}",
        "one of this queue's blocks or its tail", "{b0}",
    ),
    "popleft returns tail": EndCase(
        PopleftReturnsTail, 0, lambda q, _b, _new: q.popleft(),
        "I3", "the end of popleft()", RETURNED, OWN_BLOCK, "{tail}",
    ),
    "append links at front": EndCase(
        _AppendLinksAtFront, 3, lambda q, _b, new: q.append(new),
        "I1", "the end of append(), the tail sentinel", "prev_free_block of {tail}",
        "the appended {new}", "{b2}",
    ),
}
# fmt: on


@pytest.mark.parametrize("case", END_CASES.values(), ids=list(END_CASES))
def test_end_check_names_base_class_fault(case: EndCase) -> None:
    """Each end-of-operation check names the fault a faulty base class left, part by part."""
    queue, blocks = over_faulty(case.base, case.size)
    new = Block()
    error = error_of(lambda: case.call(queue, blocks, new))
    shown = {f"b{index}": repr(block) for index, block in enumerate(blocks)}
    shown.update(
        new=repr(new),
        head=f"this queue's {queue.fake_free_list_head!r}",
        tail=f"this queue's {queue.fake_free_list_tail!r}",
        walk=WALK,
    )
    expected = (case.clause, case.where, case.what, case.expected, case.found)
    assert parts(error) == tuple(text.format(**shown) for text in expected)


def test_end_check_names_a_stranger_returned() -> None:
    """popleft_n that hands out a block never in the queue is named as it ends (I3)."""
    queue, _ = over_faulty(_PopleftNHandsOutAStranger, 3)
    error = error_of(lambda: queue.popleft_n(1))
    clause, where, what, expected, found = parts(error)
    assert (clause, where, what, expected) == ("I3", "the end of popleft_n()", RETURNED, OWN_BLOCK)
    assert (found or "").startswith("<Block at ")


def _count_drifting(operation: str) -> type[FreeBlockQueue[Block]]:
    """A production class whose ``operation`` does its work, then moves the count up by one."""

    def drifting(self: FreeBlockQueue[Block], *args: Any) -> Any:
        result = getattr(FreeBlockQueue, operation)(self, *args)
        if args != ([],):  # an empty batch (the constructor's) is left alone
            self.num_free_blocks += 1
        return result

    return type(f"Drifting_{operation}", (FreeBlockQueue,), {"__slots__": (), operation: drifting})


#: Each mutating operation, on a queue of three blocks: the call, and the size it leaves.
_MUTATIONS: dict[str, tuple[Callable[[Any, list[Block]], object], int]] = {
    "popleft": (lambda q, _b: q.popleft(), 2),
    "popleft_n": (lambda q, _b: q.popleft_n(2), 1),
    "remove": (lambda q, b: q.remove(b[1]), 2),
    "append": (lambda q, _b: q.append(Block()), 4),
    "append_n": (lambda q, _b: q.append_n([Block(), Block()]), 5),
    "prepend_n": (lambda q, _b: q.prepend_n([Block()]), 4),
}


def _faulty_started(base: type[FreeBlockQueue[Block]], size: int) -> tuple[Any, list[Block]]:
    """Like ``_faulty``, but linked by the production append_n: a faulty one cannot start it."""
    queue, _ = over_faulty(base, 0)
    blocks = [Block() for _ in range(size)]
    FreeBlockQueue.append_n(queue, blocks)
    queue._members.update((id(block), block) for block in blocks)
    return queue, blocks


@pytest.mark.parametrize("operation", _MUTATIONS)
def test_end_count_check_names_operation(operation: str) -> None:
    """A base class that moves the count is caught as each operation ends, by name and numbers."""
    call, size = _MUTATIONS[operation]
    queue, blocks = _faulty_started(_count_drifting(operation), 3)
    assert parts(error_of(lambda: call(queue, blocks))) == (
        (
            "I2",
            f"the end of {operation}()",
            "num_free_blocks",
            f"{size} (the blocks this queue holds)",
            f"{size + 1}",
        )
    )


class _PopleftKeepsHead(FreeBlockQueue[Block]):
    """Pops the front block but leaves the head pointing at it."""

    __slots__ = ()

    def popleft(self) -> Block:
        block = super().popleft()
        self.fake_free_list_head.next_free_block = block
        return block


class _PrependNClearsNewFront(FreeBlockQueue[Block]):
    """Links the batch, then clears the new front block's link back to the head."""

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        super().prepend_n(blocks)
        front = self.fake_free_list_head.next_free_block
        if front is not None:
            front.prev_free_block = None


class _AppendNLeavesTail(FreeBlockQueue[Block]):
    """Links the batch but leaves the tail's back link on the old last block."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        old_last = self.fake_free_list_tail.prev_free_block
        super().append_n(blocks)
        self.fake_free_list_tail.prev_free_block = old_last


def test_end_front_and_back_checks_name_fault() -> None:
    """A front or back end left unsound by the base class is named as its operation ends."""
    queue, (b0, _, _) = over_faulty(_PopleftKeepsHead, 3)
    head = queue.fake_free_list_head
    assert parts(error_of(queue.popleft)) == (
        (
            "I1",
            f"the end of popleft(), position 1 {WALK}",
            f"next_free_block of this queue's {head!r}",
            "one of this queue's blocks or its tail",
            repr(b0),
        )
    )
    queue, _ = over_faulty(_PrependNClearsNewFront, 3)
    head = queue.fake_free_list_head
    new = Block()
    assert parts(error_of(lambda: queue.prepend_n([new]))) == (
        (
            "I1",
            f"the end of prepend_n(), position 1 {WALK}",
            f"prev_free_block of {new!r}",
            f"this queue's {head!r}",
            "None",
        )
    )
    queue, blocks = _faulty_started(_AppendNLeavesTail, 3)
    tail = queue.fake_free_list_tail
    assert parts(error_of(lambda: queue.append_n([Block()]))) == (
        (
            "I1",
            "the end of append_n(), the tail sentinel",
            f"prev_free_block of this queue's {tail!r}",
            "a block followed by the tail",
            repr(blocks[2]),
        )
    )


class _PopleftReturnsHead(FreeBlockQueue[Block]):
    """Hands out the head sentinel of an empty queue instead of raising."""

    __slots__ = ()

    def popleft(self) -> Block:
        if not self.num_free_blocks:
            return self.fake_free_list_head
        return super().popleft()


def test_a_returned_head_is_named_as_this_queue_s() -> None:
    """A base class that hands out the head sentinel is named as handing out this queue's head."""
    queue, _ = over_faulty(_PopleftReturnsHead, 0)
    head = queue.fake_free_list_head
    assert parts(error_of(queue.popleft)) == (
        (
            "I3",
            "the end of popleft()",
            "a block the operation returned",
            "one of this queue's blocks",
            f"this queue's {head!r}",
        )
    )


def test_damage_mid_iteration_is_named() -> None:
    """A link damaged while an iteration is under way is named with the iteration's position."""
    queue, (b0, b1, _, b3) = checked(4)
    walk = iter(queue)
    assert next(walk) is b0
    b1.prev_free_block = b3
    assert parts(error_of(lambda: next(walk))) == (
        ("I1", f"iteration, position 2 {WALK}", f"prev_free_block of {b1!r}", repr(b0), repr(b3))
    )


def test_a_deleted_count_is_named_by_len_and_bool() -> None:
    """len() and bool() of a queue whose count was deleted raise a count violation, not an error."""
    for read, size in itertools.product((len, bool), (0, 1, 2)):
        queue, _ = checked(size)
        try:
            del queue.num_free_blocks
        except (AttributeError, TypeError):
            pytest.skip("this build's queue refuses to delete its count")
        assert parts(error_of(partial(read, queue))) == (
            ("I2", f"{read.__name__}()", "num_free_blocks", "an int", "None")
        )


def _count_floating(operation: str) -> type[FreeBlockQueue[Block]]:
    """A production class whose ``operation`` does its work, then leaves the count a float."""

    def floating(self: FreeBlockQueue[Block], *args: Any) -> Any:
        result = getattr(FreeBlockQueue, operation)(self, *args)
        if args != ([],):  # an empty batch (the constructor's) is left alone
            self.num_free_blocks = float(self.num_free_blocks)  # type: ignore[assignment]  # the fault
        return result

    return type(f"Floating_{operation}", (FreeBlockQueue,), {"__slots__": (), operation: floating})


@pytest.mark.parametrize("operation", _MUTATIONS)
def test_end_count_type_check_names_operation(operation: str) -> None:
    """A base class that leaves a float count is caught as each operation ends."""
    if not writes(checked(0)[0], "num_free_blocks", 1.0):
        pytest.skip("this build's typed count refuses a float")
    call = _MUTATIONS[operation][0]
    queue, blocks = _faulty_started(_count_floating(operation), 3)
    assert parts(error_of(lambda: call(queue, blocks))) == (
        (
            "I2",
            f"the end of {operation}()",
            "num_free_blocks",
            "an int",
            f"a non-block {object.__repr__(queue.num_free_blocks)}",
        )
    )


def test_empty_diagnosis_reports_disagreement() -> None:
    """The always-raising diagnostic helpers, called on a sound queue, report the disagreement."""
    queue, blocks = checked(3)
    helpers: list[Callable[[str], None]] = [
        partial(_diagnosis.check_around, queue, queue._members, blocks[1]),
        partial(_diagnosis.check_back, queue, queue._members),
        partial(_diagnosis.expect_count, queue, queue._members),
    ]
    for helper in helpers:
        error = error_of(partial(helper, "here"))
        assert isinstance(error, InvariantViolation)
        assert parts(error) == (
            (
                "I1",
                "here",
                "the links and the count an O(1) check read",
                "a fault its diagnosis can name",
                "none: check mode's inline test and its diagnosis disagree",
            )
        )
    queue.full_check()
