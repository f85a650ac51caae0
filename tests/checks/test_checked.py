"""Check mode: the production queue's results, and each misuse caught where it happens."""

from __future__ import annotations

import contextlib
import copy as copy_module
import itertools
import pickle
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Any, SupportsIndex

import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_queue
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    QueueError,
    _diagnosis,
)
from verified_queue.checked import DEFAULT_FULL_CHECK_EVERY, MIN_FULL_CHECK_PERIOD
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    NO_DUPLICATES,
    SENTINEL_LINKAGE,
    check_invariants,
)
from verified_queue.queue import FreeBlockQueue

# Tests that pin what the adaptive default period lets through until its next full check;
# VERIFIED_QUEUE_CHECKS=full makes the default a full check before every operation instead.
adaptive_default_only = pytest.mark.skipif(
    DEFAULT_FULL_CHECK_EVERY is not None,
    reason="VERIFIED_QUEUE_CHECKS=full replaces the adaptive default period",
)


def same(left: list[Block], right: list[Block]) -> bool:
    """Whether two lists hold the same blocks in the same order, by identity."""
    return len(left) == len(right) and all(a is b for a, b in zip(left, right, strict=True))


def checked(size: int, **options: int | None) -> tuple[CheckedFreeBlockQueue[Block], list[Block]]:
    """A check-mode queue of ``size`` fresh blocks, and the blocks."""
    blocks = [Block() for _ in range(size)]
    return CheckedFreeBlockQueue(blocks, **options), blocks


# ------------------------------------------------------ same API, same results

OPERATION_CODES = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10), st.integers(min_value=0, max_value=15)),
    max_size=60,
)


def _remove(queue: FreeBlockQueue[Block], universe: list[Block], pick: int) -> object:
    queue.remove(universe[pick])
    return None


def _append(queue: FreeBlockQueue[Block], universe: list[Block], pick: int) -> object:
    queue.append(universe[pick])
    return None


def _append_n(queue: FreeBlockQueue[Block], universe: list[Block], pick: int) -> object:
    queue.append_n([universe[pick], universe[(pick * 7) % len(universe)]])
    return None


def _prepend_n(queue: FreeBlockQueue[Block], universe: list[Block], pick: int) -> object:
    queue.prepend_n(iter([universe[pick], universe[(pick * 5) % len(universe)]]))
    return None


def _iter_after(queue: FreeBlockQueue[Block], universe: list[Block], pick: int) -> object:
    """The blocks after a cursor that is in the queue, or after None when the pick is not."""
    cursor = universe[pick] if universe[pick] in queue else None
    return list(queue.iter_blocks_after(cursor))


#: Operation codes for generated call sequences; each takes (queue, universe, pick).
ACTIONS: list[Callable[[FreeBlockQueue[Block], list[Block], int], object]] = [
    lambda queue, _universe, _pick: queue.popleft(),
    lambda queue, _universe, pick: queue.popleft_n(pick % 4 - 1),
    _remove,
    _remove,
    _append,
    _append,
    _append_n,
    _prepend_n,
    _iter_after,
    lambda queue, universe, pick: universe[pick] in queue,
    lambda queue, _universe, _pick: (len(queue), bool(queue), list(queue)),
]


def _apply(queue: FreeBlockQueue[Block], universe: list[Block], code: int, pick: int) -> object:
    """Run operation ``code`` on ``queue``, naming blocks of ``universe`` by index ``pick``."""
    return ACTIONS[code](queue, universe, pick)


def _outcome(call: Callable[[], object], universe: list[Block]) -> object:
    """The result as block indexes, or the error's type: comparable across two universes."""

    def index(value: object) -> object:
        if isinstance(value, Block):
            return next(i for i, b in enumerate(universe) if b is value)
        if isinstance(value, list):
            return [index(item) for item in value]
        if isinstance(value, tuple):
            return tuple(index(item) for item in value)
        return value

    try:
        return index(call())
    except QueueError as error:
        return type(error)


@given(OPERATION_CODES, st.integers(min_value=0, max_value=16))
def test_check_mode_gives_the_production_queue_s_results(
    operations: list[tuple[int, int]], initial: int
) -> None:
    """Any sequence of calls, misuse included, returns and raises alike in both queues."""
    production_blocks = [Block() for _ in range(16)]
    checked_blocks = [Block() for _ in range(16)]
    production = FreeBlockQueue(production_blocks[:initial])
    queue = CheckedFreeBlockQueue(checked_blocks[:initial], full_check_every=3)
    for code, pick in operations:
        expected = _outcome(
            partial(_apply, production, production_blocks, code, pick), production_blocks
        )
        got = _outcome(partial(_apply, queue, checked_blocks, code, pick), checked_blocks)
        assert got == expected, (code, pick)
    check_invariants(queue, pool=checked_blocks)
    queue.full_check()


def test_constructor_rejects_a_linked_block_and_keeps_no_membership() -> None:
    """A linked block in the constructor's batch raises AlreadyInQueueError, as in production."""
    linked = FreeBlockQueue([Block()]).popleft()
    owner = FreeBlockQueue([linked])
    with pytest.raises(AlreadyInQueueError):
        CheckedFreeBlockQueue([Block(), linked])
    check_invariants(owner)


def test_checked_queue_declares_slots_and_names_its_class_in_repr() -> None:
    """The subclass adds its state in __slots__ (no __dict__) and reprs like the production one."""
    queue, _ = checked(2)
    assert repr(queue) == "<CheckedFreeBlockQueue with 2 free blocks>"
    assert "__slots__" in vars(CheckedFreeBlockQueue)
    with pytest.raises(AttributeError):
        queue.full_chek_every = 5  # type: ignore[attr-defined]  # a typo is refused
    # mypyc gives a native class with a Generic base an instance dict (exposed as __dict__
    # from 3.12), which the compiled build keeps empty (tests/queue/test_attributes.py).
    assert not verified_queue.COMPILED or getattr(queue, "__dict__", {}) == {}
    assert verified_queue.COMPILED or not hasattr(queue, "__dict__")


def test_full_check_every_must_be_a_non_negative_int_or_none() -> None:
    """Negative, fractional, boolean and string periods are refused."""
    for period in (-1, 1.5, True, False, "3"):
        with pytest.raises(ValueError, match="full_check_every"):
            CheckedFreeBlockQueue(full_check_every=period)  # type: ignore[arg-type]  # the misuse under test


class _CountingQueue(CheckedFreeBlockQueue[Block]):
    """A checked queue that counts its full checks."""

    __slots__ = ("full_checks",)

    def __init__(self, blocks: list[Block], full_check_every: int | None) -> None:
        self.full_checks = 0
        super().__init__(blocks, full_check_every=full_check_every)

    def full_check(self) -> None:
        self.full_checks += 1
        super().full_check()


def test_full_check_runs_every_k_operations() -> None:
    """With full_check_every=3 the full check runs every third operation, the constructor's too."""
    queue = _CountingQueue([Block()], full_check_every=3)
    for _ in range(10):  # with the constructor's append_n, 11 operations
        queue.append(queue.popleft())  # two operations each
    assert queue.full_checks == 21 // 3


@adaptive_default_only
def test_default_period_is_max_of_1000_and_the_length() -> None:
    """By default the full check runs every 1000 operations, or every len(queue) if longer."""
    small = _CountingQueue([Block() for _ in range(10)], full_check_every=None)
    for _ in range(MIN_FULL_CHECK_PERIOD):
        small.append(small.popleft())
    assert small.full_checks == 2  # operations 1000 and 2000 of 2001
    large = _CountingQueue([Block() for _ in range(3000)], full_check_every=None)
    for _ in range(3000):
        large.append(large.popleft())
    assert large.full_checks == 2  # at operation 1000, then 3000 operations later


def test_full_check_every_zero_never_runs_the_full_check_by_itself() -> None:
    """With full_check_every=0 the full check never runs by itself, even when the countdown ends."""
    queue = _CountingQueue([Block() for _ in range(10)], full_check_every=0)
    for _ in range(2 * MIN_FULL_CHECK_PERIOD):
        queue.append(queue.popleft())
    queue._until_full_check = 1  # the countdown runs out at the next operation
    for _ in range(3):
        queue.append(queue.popleft())
    assert queue.full_checks == 0
    assert queue._until_full_check > MIN_FULL_CHECK_PERIOD  # rewound, not acted on


def test_full_check_every_zero_keeps_the_o1_checks_and_the_full_check_on_demand() -> None:
    """With the periodic check off, far damage waits for full_check(); near damage still raises."""
    queue, blocks = checked(10, full_check_every=0)
    blocks[5].prev_free_block = blocks[2]  # far from both ends
    for _ in range(3 * MIN_FULL_CHECK_PERIOD):  # operations at the back only
        extra = Block()
        queue.append(extra)
        queue.remove(extra)
    with pytest.raises(InvariantViolation):
        queue.full_check()
    near, near_blocks = checked(10, full_check_every=0)
    near_blocks[1].prev_free_block = near_blocks[3]
    with pytest.raises(InvariantViolation):
        near.popleft()


def test_a_period_set_after_zero_starts_at_the_next_full_check() -> None:
    """Turning the periodic check on from 0 takes effect after a full check run by hand."""
    queue = _CountingQueue([Block() for _ in range(10)], full_check_every=0)
    queue.full_check_every = 3
    queue.full_check()
    for _ in range(3):
        queue.append(queue.popleft())  # six operations: two periods of three
    assert queue.full_checks == 3


class _RecordingQueue(FreeBlockQueue[Block]):
    """A production queue subclass that records each linking method it runs (a mixin)."""

    __slots__ = ()

    calls: list[str]  # the slot is the concrete class's: two bases may not both add slots

    def popleft(self) -> Block:
        self.calls.append("popleft")
        return super().popleft()

    def popleft_n(self, n: SupportsIndex) -> list[Block]:
        self.calls.append("popleft_n")
        return super().popleft_n(n)

    def remove(self, block: Block) -> None:
        self.calls.append("remove")
        super().remove(block)

    def append(self, block: Block) -> None:
        self.calls.append("append")
        super().append(block)

    def append_n(self, blocks: Iterable[Block]) -> None:
        self.calls.append("append_n")
        super().append_n(blocks)


class _CheckedRecordingQueue(CheckedFreeBlockQueue[Block], _RecordingQueue):
    """Check mode whose MRO puts the recording subclass between it and the production queue."""

    __slots__ = ("calls",)

    def __init__(self, blocks: list[Block]) -> None:
        self.calls = []
        super().__init__(blocks)


def test_check_mode_links_through_the_class_super_would_reach() -> None:
    """Each checked operation links with the next class in the MRO, as a super() call would."""
    blocks = [Block() for _ in range(4)]
    queue = _CheckedRecordingQueue(blocks)
    queue.remove(blocks[1])
    queue.append(queue.popleft())
    queue.append_n(queue.popleft_n(2))
    assert queue.calls == ["append_n", "remove", "popleft", "append", "popleft_n", "append_n"]
    assert same(queue.get_all_free_blocks(), [blocks[0], blocks[2], blocks[3]])
    assert _CountingQueue._super_popleft is FreeBlockQueue.popleft


def test_membership_holds_its_blocks_so_no_new_block_takes_a_member_s_id() -> None:
    """A member unlinked by hand and dropped stays held: no new block gets its id or passes."""
    queue, blocks = checked(3)
    dropped = blocks.pop(1)
    blocks[0].next_free_block, blocks[1].prev_free_block = blocks[1], blocks[0]
    dropped_id = id(dropped)
    del dropped
    newcomers = [Block() for _ in range(1000)]
    assert all(id(block) != dropped_id for block in newcomers)
    assert not any(block in queue for block in newcomers)


def test_iteration_and_listing_run_the_full_check() -> None:
    """Iterating or listing a damaged check-mode queue raises before yielding a block."""
    for read in (list, CheckedFreeBlockQueue.get_all_free_blocks):
        queue, blocks = checked(4)
        blocks[2].prev_free_block = blocks[0]
        with pytest.raises(InvariantViolation) as caught:
            read(queue)
        assert caught.value.invariant == SENTINEL_LINKAGE


def test_iteration_stays_live_and_rejects_removing_the_current_block() -> None:
    """Appending during iteration is seen, as in production; removing the current block raises."""
    queue, blocks = checked(2)
    extra = Block()
    seen = []
    for block in queue:
        seen.append(block)
        if block is blocks[0]:
            queue.append(extra)
    assert same(seen, [*blocks, extra])

    def remove_while_iterating() -> None:
        for block in queue:
            queue.remove(block)

    with pytest.raises(NotInQueueError, match="left the queue while an iteration"):
        remove_while_iterating()


def test_contains_answers_from_the_membership() -> None:
    """``in`` is true for members only, not for detached blocks, sentinels or foreign blocks."""
    queue, blocks = checked(3)
    _other, other_blocks = checked(1)
    assert all(block in queue for block in blocks)
    assert Block() not in queue
    assert other_blocks[0] not in queue
    assert queue.fake_free_list_head not in queue
    assert None not in queue


# -------------------------------------------------------------- misuse classes


def test_foreign_remove_is_rejected_in_check_mode_with_both_queues_unchanged() -> None:
    """remove() of a block linked in another queue raises NotInQueueError and changes nothing."""
    queue, blocks = checked(3)
    other, other_blocks = checked(3)
    with pytest.raises(NotInQueueError, match="linked in another queue"):
        queue.remove(other_blocks[1])
    assert same(queue.get_all_free_blocks(), blocks)
    assert same(other.get_all_free_blocks(), other_blocks)
    assert (len(queue), len(other)) == (3, 3)


def test_foreign_remove_silently_corrupts_the_production_queue() -> None:
    """The same call on production queues succeeds and leaves both counts wrong."""
    blocks = [Block() for _ in range(3)]
    other_blocks = [Block() for _ in range(3)]
    queue, other = FreeBlockQueue(blocks), FreeBlockQueue(other_blocks)
    queue.remove(other_blocks[1])
    for damaged in (queue, other):
        with pytest.raises(InvariantViolation) as caught:
            check_invariants(damaged)
        assert caught.value.invariant == COUNT_CONSISTENCY


def test_double_free_is_rejected_and_leaves_the_queue_unchanged() -> None:
    """Appending a block that is already linked, alone or in a batch, raises AlreadyInQueueError."""
    queue, blocks = checked(3)
    fresh = Block()
    misuses: list[Callable[[], None]] = [
        lambda: queue.append(blocks[1]),
        lambda: queue.append_n([fresh, blocks[2]]),
        lambda: queue.append_n([fresh, fresh]),
    ]
    for misuse in misuses:
        with pytest.raises(AlreadyInQueueError):
            misuse()
        assert same(queue.get_all_free_blocks(), blocks)
        assert fresh.prev_free_block is None
        assert fresh.next_free_block is None


@adaptive_default_only
def test_double_free_of_a_block_whose_links_were_cleared_is_caught() -> None:
    """A member whose links outside code cleared is refused by append, not linked a second time."""
    appends: list[Callable[[CheckedFreeBlockQueue[Block], Block], None]] = [
        lambda q, b: q.append(b),
        lambda q, b: q.append_n([b]),
    ]
    for append in appends:
        queue, blocks = checked(3)
        blocks[1].prev_free_block = blocks[1].next_free_block = None
        with pytest.raises(InvariantViolation, match="cleared by outside code") as caught:
            append(queue, blocks[1])
        assert caught.value.invariant == SENTINEL_LINKAGE
    # Production accepts it and ends up with the block twice in the walk's reach.
    blocks = [Block() for _ in range(3)]
    production = FreeBlockQueue(blocks)
    blocks[1].prev_free_block = blocks[1].next_free_block = None
    production.append(blocks[1])
    with pytest.raises(InvariantViolation):
        check_invariants(production)


@dataclass(frozen=True)
class _Corruption:
    """A hand-written link, and an operation that touches it next."""

    label: str
    write: Callable[[CheckedFreeBlockQueue[Block], list[Block]], None]
    operation: Callable[[CheckedFreeBlockQueue[Block], list[Block]], object]


CORRUPTIONS = [
    _Corruption(
        "front block's prev cleared",
        lambda _q, b: setattr(b[0], "prev_free_block", None),
        lambda q, _b: q.popleft(),
    ),
    _Corruption(
        "second block's prev skewed",
        lambda _q, b: setattr(b[1], "prev_free_block", b[3]),
        lambda q, _b: q.popleft(),
    ),
    _Corruption(
        "last block's next into another queue",
        lambda _q, b: setattr(
            b[4], "next_free_block", FreeBlockQueue([Block()]).fake_free_list_tail
        ),
        lambda q, _b: q.append(Block()),
    ),
    _Corruption(
        "tail's prev skipping a block",
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", b[3]),
        lambda q, _b: q.append_n([Block()]),
    ),
    _Corruption(
        "neighbour's next cleared",
        lambda _q, b: setattr(b[1], "next_free_block", None),
        lambda q, b: q.remove(b[2]),
    ),
    _Corruption(
        "run crosses a skewed link",
        lambda _q, b: setattr(b[3], "prev_free_block", b[0]),
        lambda q, _b: q.popleft_n(4),
    ),
    _Corruption(
        "front block's prev skewed before a prepend",
        lambda _q, b: setattr(b[0], "prev_free_block", b[2]),
        lambda q, _b: q.prepend_n([Block()]),
    ),
    _Corruption(
        "head's next into another queue before a prepend",
        lambda q, _b: setattr(
            q.fake_free_list_head, "next_free_block", FreeBlockQueue([Block()]).popleft()
        ),
        lambda q, _b: q.prepend_n([Block()]),
    ),
    _Corruption(
        "walk after a cursor crosses a skewed link",
        lambda _q, b: setattr(b[3], "prev_free_block", b[0]),
        lambda q, b: list(q.iter_blocks_after(b[1])),
    ),
    _Corruption(
        "ring closed from the back",
        lambda _q, b: setattr(b[4], "next_free_block", b[2]),
        lambda q, _b: q.append(Block()),
    ),
]


@adaptive_default_only
@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.label)
def test_outside_link_corruption_is_caught_by_the_next_operation_that_touches_it(
    corruption: _Corruption,
) -> None:
    """A hand-written link raises a violation at the next operation near it, writing nothing."""
    queue, blocks = checked(5)
    corruption.write(queue, blocks)
    links = [(b.prev_free_block, b.next_free_block) for b in blocks]
    with pytest.raises(InvariantViolation) as caught:
        corruption.operation(queue, blocks)
    assert caught.value.invariant == SENTINEL_LINKAGE
    assert all(
        (b.prev_free_block, b.next_free_block) == link
        for b, link in zip(blocks, links, strict=True)
    )


def test_corruption_far_from_the_operations_is_caught_by_the_periodic_full_check() -> None:
    """Damage beyond the O(1) checks' reach is caught within full_check_every operations."""
    queue, blocks = checked(10, full_check_every=50)
    queue.full_check()  # start a fresh period
    blocks[5].prev_free_block = blocks[2]
    family = None
    operations = 0
    while operations < 100 and family is None:
        try:
            queue.append(Block())  # the back is healthy: only the full check sees the damage
        except InvariantViolation as violation:
            family = violation.invariant
        else:
            operations += 1
    assert family == SENTINEL_LINKAGE
    assert operations == 49  # the 50th operation since the last full check runs it first


def test_full_check_every_operation_catches_far_corruption_at_the_next_operation() -> None:
    """With full_check_every=1 the next operation of any kind raises, before it acts."""
    queue, blocks = checked(10, full_check_every=1)
    blocks[5].prev_free_block = blocks[2]
    with pytest.raises(InvariantViolation):
        queue.append(Block())
    assert len(queue) == 10


@pytest.mark.parametrize("drift", [-1, 1, 5])
def test_count_drift_is_caught_at_the_next_operation(drift: int) -> None:
    """An overwritten count raises count_consistency at the next operation, even len()."""
    operations: list[Callable[[CheckedFreeBlockQueue[Block], list[Block]], object]] = [
        lambda q, _b: len(q),
        lambda q, _b: bool(q),
        lambda q, _b: q.popleft(),
        lambda q, _b: q.popleft_n(1),
        lambda q, b: q.remove(b[2]),
        lambda q, _b: q.append(Block()),
        lambda q, _b: q.append_n([]),
        lambda q, _b: list(q),
    ]
    for operation in operations:
        queue, blocks = checked(4)
        queue.num_free_blocks += drift
        with pytest.raises(InvariantViolation, match="num_free_blocks") as caught:
            operation(queue, blocks)
        assert caught.value.invariant == COUNT_CONSISTENCY


@adaptive_default_only
def test_a_block_spliced_in_by_outside_code_is_named_on_remove_and_by_the_full_check() -> None:
    """A block linked in by hand, count adjusted, is no member: remove and full_check say so."""
    queue, blocks = checked(3)
    intruder = Block()
    intruder.prev_free_block, intruder.next_free_block = blocks[0], blocks[1]
    blocks[0].next_free_block = blocks[1].prev_free_block = intruder
    with pytest.raises(InvariantViolation, match="linked in by outside code") as caught:
        queue.remove(intruder)
    assert caught.value.invariant == NO_DUPLICATES
    queue.num_free_blocks += 1
    placeholder = Block()
    queue._members[id(placeholder)] = placeholder  # keeps the O(1) count check quiet
    with pytest.raises(InvariantViolation, match="linked in by outside code") as caught:
        queue.full_check()
    assert caught.value.invariant == NO_DUPLICATES


def test_cursor_linked_in_another_queue_is_rejected_in_check_mode() -> None:
    """iter_blocks_after refuses another queue's block in O(1); production walks into it."""
    queue, _ = checked(3)
    other, foreign = checked(2)
    with pytest.raises(NotInQueueError, match="linked in another queue"):
        queue.iter_blocks_after(foreign[0])
    # Production cannot tell in O(1): it walks the other queue and stops at its tail.
    walk = FreeBlockQueue.iter_blocks_after(queue, foreign[0])
    assert next(walk) is foreign[1]
    with pytest.raises(NotInQueueError, match="changed during iteration"):
        next(walk)
    other.full_check()


def test_prepend_n_double_free_is_rejected_with_both_queues_unchanged() -> None:
    """A batch holding a block of another queue is refused whole, as in production."""
    queue, blocks = checked(2)
    other, foreign = checked(1)
    fresh = Block()
    with pytest.raises(AlreadyInQueueError, match=r"^prepend_n\("):
        queue.prepend_n([fresh, foreign[0]])
    assert fresh.prev_free_block is None
    assert fresh.next_free_block is None
    assert queue.get_all_free_blocks() == blocks
    assert other.get_all_free_blocks() == foreign


def test_check_mode_takes_a_block_that_declares_its_own_links() -> None:
    """Check mode and the checkers accept vLLM's block shape (not a Block) in the pure build."""

    @dataclass(slots=True)
    class OwnLinks:
        block_id: int
        prev_free_block: OwnLinks | None = None
        next_free_block: OwnLinks | None = None

    if verified_queue.COMPILED:
        pytest.skip("the compiled queue takes Block subclasses only")
    blocks = [OwnLinks(i) for i in range(4)]
    queue = CheckedFreeBlockQueue(blocks[:3], full_check_every=1)
    queue.prepend_n([blocks[3]])
    queue.remove(blocks[1])
    assert list(queue.iter_blocks_after(blocks[0])) == [blocks[2]]
    check_invariants(queue, pool=[b for b in blocks if b is not blocks[1]])
    blocks[2].prev_free_block = blocks[3]
    with pytest.raises(InvariantViolation):
        queue.full_check()


# ------------------------------------------- only QueueError, whatever the damage


def _every_operation(
    queue: CheckedFreeBlockQueue[Block], blocks: list[Block]
) -> list[Callable[[], object]]:
    """One call of each method, on blocks the damage may have touched."""
    return [
        lambda: len(queue),
        lambda: bool(queue),
        queue.popleft,
        lambda: queue.popleft_n(1),
        lambda: queue.remove(blocks[1]),
        lambda: queue.append(Block()),
        lambda: queue.append_n([Block()]),
        lambda: queue.prepend_n([Block()]),
        lambda: list(queue.iter_blocks_after(blocks[0])),
        lambda: list(queue),
        queue.get_all_free_blocks,
        queue.full_check,
    ]


class _IntLike(int):
    """An int subclass, as numpy's integer scalars are int-like but not int."""


DAMAGE: dict[str, Callable[[CheckedFreeBlockQueue[Block], list[Block]], None]] = {
    "float count": lambda q, _b: setattr(q, "num_free_blocks", 3.0),
    "int-like count": lambda q, _b: setattr(q, "num_free_blocks", _IntLike(3)),
    "bool count": lambda q, _b: setattr(q, "num_free_blocks", True),
    "head replaced by None": lambda q, _b: setattr(q, "fake_free_list_head", None),
    "tail replaced by None": lambda q, _b: setattr(q, "fake_free_list_tail", None),
    "deleted link slot": lambda _q, b: delattr(b[1], "prev_free_block"),
    "deleted tail link slot": lambda q, _b: delattr(q.fake_free_list_tail, "prev_free_block"),
    "deleted head link slot": lambda q, _b: delattr(q.fake_free_list_head, "next_free_block"),
    "deleted count": lambda q, _b: delattr(q, "num_free_blocks"),
    "deleted head": lambda q, _b: delattr(q, "fake_free_list_head"),
    "string count": lambda q, _b: setattr(q, "num_free_blocks", "3"),
    "non-block member": lambda _q, b: setattr(b[0], "next_free_block", object()),
    "non-block before the tail": lambda q, _b: setattr(q.fake_free_list_tail, "prev_free_block", 7),
    "head replaced by a block": lambda q, _b: setattr(q, "fake_free_list_head", Block()),
    "tail replaced by the head": lambda q, _b: setattr(
        q, "fake_free_list_tail", q.fake_free_list_head
    ),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_every_method_raises_only_queue_errors_on_a_damaged_queue(damage: str) -> None:
    """Each method of a damaged checked queue returns or raises a QueueError, never a raw error."""
    raised = 0
    for index in range(len(_every_operation(*checked(3)))):
        queue, blocks = checked(3, full_check_every=0)
        try:
            DAMAGE[damage](queue, blocks)
        except (AttributeError, TypeError):
            pytest.skip("this build's typed slots refuse the damage")
        if damage == "int-like count" and type(queue.num_free_blocks) is int:
            pytest.skip("this build's typed count stores a plain int, so the damage cannot happen")
        try:
            _every_operation(queue, blocks)[index]()
        except QueueError:  # anything else fails the test
            raised += 1
    assert raised >= 1
    queue, blocks = checked(3)
    with contextlib.suppress(AttributeError, TypeError):  # skipped above if refused
        DAMAGE[damage](queue, blocks)
    with pytest.raises(InvariantViolation):
        queue.full_check()


def test_removing_the_queue_s_own_sentinel_names_it_as_its_own() -> None:
    """remove() of this queue's own sentinel says it is a sentinel, not another queue's."""
    queue, _ = checked(2)
    with pytest.raises(NotInQueueError, match="it is a queue sentinel, which never leaves"):
        queue.remove(queue.fake_free_list_tail)


@pytest.mark.parametrize("period", ["10", -5, 2.0, True])
def test_full_check_every_setter_refuses_a_bad_period_at_once(period: object) -> None:
    """Setting a bad period raises ValueError then, and later operations still work."""
    queue, blocks = checked(3)
    with pytest.raises(ValueError, match="expected None or an int >= 0"):
        queue.full_check_every = period  # type: ignore[assignment]  # deliberate
    assert queue.popleft() is blocks[0]
    assert queue.full_check_every is DEFAULT_FULL_CHECK_EVERY


class _AppendForgetsCount(FreeBlockQueue[Block]):
    """Links the block but leaves the count as it was."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        super().append(block)
        self.num_free_blocks -= 1


class _RemoveLeavesBackLink(FreeBlockQueue[Block]):
    """Bridges the neighbours but leaves the successor's back link on the removed block."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        after = block.next_free_block
        super().remove(block)
        if after is not None:
            after.prev_free_block = block


class _PrependNLeavesOldFront(FreeBlockQueue[Block]):
    """Links the batch but points the old front's back link at the head again."""

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        old_front = self.fake_free_list_head.next_free_block
        super().prepend_n(blocks)
        if old_front is not None:
            old_front.prev_free_block = self.fake_free_list_head


class _PopleftNKeepsHead(FreeBlockQueue[Block]):
    """Pops the run but leaves the head pointing at the first popped block."""

    __slots__ = ()

    def popleft_n(self, n: SupportsIndex) -> list[Block]:
        old_front = self.fake_free_list_head.next_free_block
        popped = super().popleft_n(n)
        self.fake_free_list_head.next_free_block = old_front
        return popped


class _PopleftReturnsTail(FreeBlockQueue[Block]):
    """Hands out the tail sentinel of an empty queue instead of raising."""

    __slots__ = ()

    def popleft(self) -> Block:
        if not self.num_free_blocks:
            return self.fake_free_list_tail
        return super().popleft()


#: Faults written for these tests, apart from specs/planted_bugs.py: each breaks what only
#: the check at the end of its operation reads, so the start-of-operation checks pass.
END_OF_OPERATION_FAULTS: dict[
    str, tuple[type[FreeBlockQueue[Block]], int, str, Callable[[Any, list[Block]], object]]
] = {
    "append forgets count": (
        _AppendForgetsCount,
        3,
        "the end of append()",
        lambda q, _b: q.append(Block()),
    ),
    "remove leaves back link": (
        _RemoveLeavesBackLink,
        3,
        "the end of remove()",
        lambda q, b: q.remove(b[1]),
    ),
    "prepend_n leaves old front": (
        _PrependNLeavesOldFront,
        3,
        "the end of prepend_n()",
        lambda q, _b: q.prepend_n([Block()]),
    ),
    "popleft_n keeps head": (
        _PopleftNKeepsHead,
        3,
        "the end of popleft_n()",
        lambda q, _b: q.popleft_n(2),
    ),
    "popleft returns tail": (
        _PopleftReturnsTail,
        0,
        "the end of popleft()",
        lambda q, _b: q.popleft(),
    ),
}


@pytest.mark.parametrize("fault", END_OF_OPERATION_FAULTS)
def test_end_of_operation_checks_catch_a_faulty_base_class(fault: str) -> None:
    """Check mode over a faulty production class reports the fault as its operation ends."""
    base, size, where, operation = END_OF_OPERATION_FAULTS[fault]
    faulty: type[CheckedFreeBlockQueue[Block]] = type(
        "CheckedFaulty", (CheckedFreeBlockQueue, base), {"__slots__": ()}
    )
    blocks = [Block() for _ in range(size)]
    queue = faulty(blocks, full_check_every=0)
    with pytest.raises(InvariantViolation, match=re.escape(where)):
        operation(queue, blocks)


# ------------------------------------------------- raises before writing anything


@dataclass
class _World:
    """A checked queue of four blocks, two detached blocks, and another queue to point at."""

    queue: CheckedFreeBlockQueue[Block]
    blocks: list[Block]
    spare: list[Block]
    other: CheckedFreeBlockQueue[Block]
    other_blocks: list[Block]

    def nodes(self) -> list[Block]:
        """Every object whose links an operation could write, sentinels included."""
        return [
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            *self.blocks,
            *self.spare,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
            *self.other_blocks,
        ]

    def snapshot(self) -> tuple[list[tuple[object, object]], object, list[tuple[int, Block]]]:
        """Every link, the count and the membership, to compare by identity."""
        return (
            [(node.prev_free_block, node.next_free_block) for node in self.nodes()],
            self.queue.num_free_blocks,
            list(self.queue._members.items()),
        )


def _world(checked_queue: bool = True) -> _World:
    """The world of the raises-before-writing test; with ``checked_queue=False``, production's."""
    blocks = [Block() for _ in range(4)]
    other_blocks = [Block()]

    def make(members: list[Block]) -> Any:
        if checked_queue:
            return CheckedFreeBlockQueue(members, full_check_every=0)
        return FreeBlockQueue(members)

    return _World(make(blocks), blocks, [Block(), Block()], make(other_blocks), other_blocks)


def _by_index(world: _World, value: object) -> object:
    """``value`` with every node of ``world`` replaced by its index: comparable across worlds."""
    nodes = world.nodes()
    if isinstance(value, (list, tuple)):
        return [_by_index(world, item) for item in value]
    return next((i for i, node in enumerate(nodes) if node is value), value)


def _outcome_by_index(world: _World, result: object) -> object:
    """The result, every link of the world and the count, as indexes."""
    links = [(n.prev_free_block, n.next_free_block) for n in world.nodes()]
    return _by_index(world, [result, *links]), world.queue.num_free_blocks


def _identical(left: object, right: object) -> bool:
    """Equal structure with every leaf the same object (links compared by identity)."""
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(
            _identical(a, b) for a, b in zip(left, right, strict=True)
        )
    return left is right or (type(left) is type(right) is int and left == right)


def _damages() -> Iterable[tuple[str, Callable[[_World], None]]]:
    """Single faults outside code could plant: every link to every value, counts, splices."""
    names = ["head", "tail", "b0", "b1", "b2", "b3"]

    def node(world: _World, index: int) -> Block:
        return world.nodes()[index]

    targets: list[tuple[str, Callable[[_World], object]]] = [
        ("None", lambda _w: None),
        ("a detached block", lambda w: w.spare[0]),
        ("another queue's head", lambda w: w.other.fake_free_list_head),
        ("another queue's tail", lambda w: w.other.fake_free_list_tail),
        ("another queue's block", lambda w: w.other_blocks[0]),
    ] + [(name, partial(node, index=i)) for i, name in enumerate(names)]
    for owner_index, owner in enumerate(names):
        for link in ("prev_free_block", "next_free_block"):
            for label, target in targets:

                def write(
                    world: _World, i: int = owner_index, name: str = link, to: Any = target
                ) -> None:
                    setattr(node(world, i), name, to(world))

                yield f"{owner}.{link} = {label}", write
    for drift in (-1, 1, 2):

        def move(world: _World, by: int = drift) -> None:
            world.queue.num_free_blocks += by

        yield f"count {drift:+}", move

    def clear(world: _World) -> None:
        world.blocks[1].prev_free_block = world.blocks[1].next_free_block = None
        world.blocks[0].next_free_block = world.blocks[2]
        world.blocks[2].prev_free_block = world.blocks[0]

    yield "b1 unlinked by hand", clear

    def splice(world: _World) -> None:
        intruder = world.spare[1]
        intruder.prev_free_block, intruder.next_free_block = world.blocks[1], world.blocks[2]
        world.blocks[1].next_free_block = world.blocks[2].prev_free_block = intruder
        world.queue.num_free_blocks += 1

    yield "a spare block spliced in by hand", splice


#: Every checked operation, each on arguments the damage may have touched.
_CHECKED_OPERATIONS: dict[str, Callable[[_World], object]] = {
    "popleft": lambda w: w.queue.popleft(),
    "popleft_n(1)": lambda w: w.queue.popleft_n(1),
    "popleft_n(3)": lambda w: w.queue.popleft_n(3),
    "popleft_n(4)": lambda w: w.queue.popleft_n(4),
    "remove(b0)": lambda w: w.queue.remove(w.blocks[0]),
    "remove(b1)": lambda w: w.queue.remove(w.blocks[1]),
    "remove(b3)": lambda w: w.queue.remove(w.blocks[3]),
    "remove(another queue's block)": lambda w: w.queue.remove(w.other_blocks[0]),
    "append(spare)": lambda w: w.queue.append(w.spare[0]),
    "append(b1)": lambda w: w.queue.append(w.blocks[1]),
    "append_n(spares)": lambda w: w.queue.append_n(w.spare),
    "append_n(iterator)": lambda w: w.queue.append_n(iter(w.spare)),
    "prepend_n(spares)": lambda w: w.queue.prepend_n(w.spare),
    "prepend_n(iterator)": lambda w: w.queue.prepend_n(iter(w.spare)),
    # Bounded: a walk after a cursor does not count its steps (see test_fault_matrix).
    "iter_blocks_after(b1)": lambda w: list(islice(w.queue.iter_blocks_after(w.blocks[1]), 9)),
    "iter_blocks_after(None)": lambda w: list(islice(w.queue.iter_blocks_after(None), 9)),
    "iterate": lambda w: list(w.queue),
    "get_all_free_blocks": lambda w: w.queue.get_all_free_blocks(),
    "len": lambda w: len(w.queue),
    "bool": lambda w: bool(w.queue),
    "full_check": lambda w: w.queue.full_check(),
}


@adaptive_default_only
def test_every_checked_operation_raises_before_writing_anything() -> None:
    """On every single fault, an operation that raises leaves links, count and members as found.

    The periodic full check is off, so the O(1) checks of each operation are the
    ones under test.
    """
    raised = dict.fromkeys(_CHECKED_OPERATIONS, 0)
    for label, damage in _damages():
        for name, operation in _CHECKED_OPERATIONS.items():
            world = _world()
            damage(world)
            before = world.snapshot()
            try:
                result = operation(world)
            except QueueError:
                raised[name] += 1
                assert _identical(world.snapshot(), before), (label, name)
                continue
            if name == "full_check":
                continue
            # Damage out of the operation's reach: it acts exactly as production does.
            twin = _world(checked_queue=False)
            damage(twin)
            expected = _outcome_by_index(twin, operation(twin))
            assert _outcome_by_index(world, result) == expected, (label, name)
    # How many of the 137 faults each operation's O(1) checks meet. A change here changes
    # what check mode catches where, and must be looked at (len() and bool() read the count).
    assert raised == {
        "popleft": 54,
        "popleft_n(1)": 54,
        "popleft_n(3)": 95,
        "popleft_n(4)": 115,
        "remove(b0)": 44,
        "remove(b1)": 45,
        "remove(b3)": 44,
        "remove(another queue's block)": 137,
        "append(spare)": 34,
        "append(b1)": 137,
        "append_n(spares)": 34,
        "append_n(iterator)": 34,
        "prepend_n(spares)": 34,
        "prepend_n(iterator)": 34,
        "iter_blocks_after(b1)": 73,
        "iter_blocks_after(None)": 90,
        "iterate": 125,
        "get_all_free_blocks": 125,
        "len": 4,
        "bool": 4,
        "full_check": 125,
    }


# ----------------------------------------------------- every diagnostic, word for word

_WALK = "of the forward walk (head = 0)"


def _error(call: Callable[[], object]) -> QueueError:
    """The QueueError ``call`` raises."""
    with pytest.raises(QueueError) as caught:
        call()
    return caught.value


#: Where each operation's start-of-operation count check reports, and the call that reaches it.
_COUNT_SITES: dict[str, Callable[[_World], object]] = {
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
def test_each_count_check_names_its_operation_word_for_word(where: str) -> None:
    """A drifted count is reported at the start of each operation, naming it and both numbers."""
    world = _world()
    world.queue.num_free_blocks = 5
    error = _error(lambda: _COUNT_SITES[where](world))
    assert isinstance(error, InvariantViolation)
    assert error.invariant == COUNT_CONSISTENCY
    assert str(error) == (
        f"invariant 2 (count_consistency) broken at {where}: num_free_blocks: "
        "expected 4 (the blocks this queue holds), found 5"
    )
    world = _world()
    if not _writes(world.queue, "num_free_blocks", 4.0):
        return
    assert str(_error(lambda: _COUNT_SITES[where](world))) == (
        f"invariant 2 (count_consistency) broken at {where}: num_free_blocks: expected an int, "
        f"found a non-block {object.__repr__(world.queue.num_free_blocks)}"
    )


def _writes(obj: object, attribute: str, value: object) -> bool:
    """Write ``obj.attribute = value`` if the build lets it; whether it did."""
    try:
        setattr(obj, attribute, value)
    except TypeError:
        return False
    return True


def test_an_int_subclass_count_is_caught_by_the_full_check_word_for_word() -> None:
    """A count of an int subclass passes check_invariants but not check mode's exact type test."""
    world = _world()
    if not _writes(world.queue, "num_free_blocks", _IntLike(4)):
        pytest.skip("this build's typed count refuses the value")
    if type(world.queue.num_free_blocks) is int:
        pytest.skip("this build's typed count stores a plain int")
    check_invariants(world.queue)
    assert str(_error(world.queue.full_check)) == (
        "invariant 2 (count_consistency) broken at the full check: num_free_blocks: "
        f"expected an int, found a non-block {object.__repr__(world.queue.num_free_blocks)}"
    )


def _front_and_back_cases(
    world: _World,
) -> list[tuple[Callable[[], object], str, str]]:
    """(damage-and-call, family, message) for each diagnostic of the O(1) checks."""
    q, (b0, b1, b2, b3), (spare, _) = world.queue, world.blocks, world.spare
    head, tail = q.fake_free_list_head, q.fake_free_list_tail
    own_head, own_tail = f"this queue's {head!r}", f"this queue's {tail!r}"
    cases: list[tuple[Callable[[], object], str, str]] = []

    def case(
        damage: Callable[[], None], call: Callable[[], object], family: str, text: str
    ) -> None:
        def run() -> object:
            damage()
            return call()

        cases.append((run, family, text))

    for stray, shown in ((head, own_head), (tail, own_tail)):
        case(
            partial(setattr, head, "prev_free_block", stray),
            q.popleft,
            SENTINEL_LINKAGE,
            f"invariant 1 (sentinel_linkage) broken at the start of popleft(): prev_free_block "
            f"of {own_head}: expected None, found {shown}",
        )
    case(
        lambda: setattr(head, "prev_free_block", b2),
        q.popleft,
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft(): prev_free_block of "
        f"{own_head}: expected None, found {b2!r}",
    )
    case(
        lambda: setattr(b0, "prev_free_block", None),
        q.popleft,
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft(), position 1 {_WALK}: "
        f"prev_free_block of {b0!r}: expected {own_head}, found None",
    )
    case(
        lambda: setattr(head, "next_free_block", spare),
        lambda: q.popleft_n(2),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft_n(), position 1 {_WALK}: "
        f"next_free_block of {own_head}: expected one of this queue's blocks or its tail, "
        f"found {spare!r}",
    )
    case(
        lambda: setattr(b2, "prev_free_block", b0),
        lambda: q.popleft_n(3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft_n(), position 3 {_WALK}: "
        f"prev_free_block of {b2!r}: expected {b1!r}, found {b0!r}",
    )
    case(
        lambda: setattr(b0, "prev_free_block", b3),
        lambda: q.prepend_n([spare]),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of prepend_n(), position 1 {_WALK}: "
        f"prev_free_block of {b0!r}: expected {own_head}, found {b3!r}",
    )
    case(
        lambda: setattr(tail, "next_free_block", b0),
        lambda: q.append(spare),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append(), the tail sentinel: "
        f"next_free_block of {own_tail}: expected None, found {b0!r}",
    )
    case(
        lambda: setattr(tail, "prev_free_block", spare),
        lambda: q.append_n([Block()]),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append_n(), the tail sentinel: "
        f"prev_free_block of {own_tail}: expected one of this queue's blocks or its head, "
        f"found {spare!r}",
    )
    case(
        lambda: setattr(tail, "prev_free_block", b1),
        lambda: q.append(spare),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append(), the tail sentinel: "
        f"prev_free_block of {own_tail}: expected a block followed by the tail, found {b1!r}",
    )

    def empty_chain() -> None:
        head.next_free_block = tail
        tail.prev_free_block = head

    case(
        empty_chain,
        lambda: q.append(spare),
        COUNT_CONSISTENCY,
        "invariant 2 (count_consistency) broken at the start of append(), the tail sentinel: "
        "num_free_blocks: expected 0 (the tail follows the head), found 4",
    )
    case(
        empty_chain,
        q.popleft,
        COUNT_CONSISTENCY,
        f"invariant 2 (count_consistency) broken at the start of popleft(), position 1 {_WALK}: "
        f"num_free_blocks: expected 0 (the walk reached the tail), found 4",
    )
    case(
        lambda: setattr(b0, "next_free_block", None),
        lambda: q.remove(b1),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{b0!r}, the prev_free_block of {b1!r}: expected {b1!r}, found None",
    )
    case(
        lambda: setattr(b2, "next_free_block", spare),
        lambda: q.remove(b2),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{b2!r}: expected one of this queue's blocks or its sentinel, found {spare!r}",
    )

    other_tail = world.other.fake_free_list_tail
    case(
        lambda: setattr(b1, "prev_free_block", spare),
        lambda: q.remove(b1),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): prev_free_block of "
        f"{b1!r}: expected one of this queue's blocks or its sentinel, found {spare!r}",
    )
    case(
        lambda: setattr(b0, "next_free_block", b2),
        lambda: q.remove(b1),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{b0!r}, the prev_free_block of {b1!r}: expected {b1!r}, found {b2!r}",
    )
    case(
        lambda: setattr(head, "next_free_block", b1),
        lambda: q.remove(b0),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{own_head}, the prev_free_block of {b0!r}: expected {b0!r}, found {b1!r}",
    )
    case(
        lambda: setattr(b3, "next_free_block", other_tail),
        lambda: q.remove(b3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{b3!r}: expected one of this queue's blocks or its sentinel, found another queue's "
        f"{other_tail!r}",
    )
    case(
        lambda: setattr(b0, "prev_free_block", tail),
        lambda: q.remove(b0),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): prev_free_block of "
        f"{b0!r}: expected one of this queue's blocks or its sentinel, found {own_tail}",
    )
    case(
        lambda: setattr(b3, "prev_free_block", b1),
        lambda: q.remove(b2),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): prev_free_block of "
        f"{b3!r}, the next_free_block of {b2!r}: expected {b2!r}, found {b1!r}",
    )
    case(
        lambda: setattr(tail, "prev_free_block", b2),
        lambda: q.remove(b3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): prev_free_block of "
        f"{own_tail}, the next_free_block of {b3!r}: expected {b3!r}, found {b2!r}",
    )

    def clear_b1() -> None:
        b1.prev_free_block = b1.next_free_block = None

    appends: dict[str, Callable[[], object]] = {
        "append": lambda: q.append(b1),
        "append_n": lambda: q.append_n([spare, b1]),
        "prepend_n": lambda: q.prepend_n([spare, b1]),
    }
    for name, append in appends.items():
        case(
            clear_b1,
            append,
            SENTINEL_LINKAGE,
            f"invariant 1 (sentinel_linkage) broken at the start of {name}(): the links of "
            f"<Block at {id(b1):#x}, detached>, one of this queue's blocks: expected both set, "
            "found both None (cleared by outside code while the block was in the queue)",
        )
    case(
        lambda: setattr(b1, "prev_free_block", head),
        lambda: q.popleft_n(3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft_n(), position 2 {_WALK}: "
        f"prev_free_block of {b1!r}: expected {b0!r}, found {own_head}",
    )
    case(
        lambda: setattr(tail, "prev_free_block", tail),
        lambda: q.append(spare),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append(), the tail sentinel: "
        f"prev_free_block of {own_tail}: expected one of this queue's blocks or its head, "
        f"found {own_tail}",
    )
    case(
        lambda: setattr(b2, "next_free_block", head),
        lambda: q.remove(b2),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
        f"{b2!r}: expected one of this queue's blocks or its sentinel, found {own_head}",
    )
    for stray, shown in ((head, own_head), (tail, own_tail)):
        case(
            partial(setattr, b0, "next_free_block", stray),
            lambda: q.remove(b1),
            SENTINEL_LINKAGE,
            f"invariant 1 (sentinel_linkage) broken at the start of remove(): next_free_block of "
            f"{b0!r}, the prev_free_block of {b1!r}: expected {b1!r}, found {shown}",
        )
    case(
        lambda: setattr(b1, "next_free_block", head),
        lambda: q.popleft_n(3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft_n(), position 3 {_WALK}: "
        f"next_free_block of {b1!r}: expected one of this queue's blocks or its tail, "
        f"found {own_head}",
    )
    case(
        lambda: setattr(b1, "prev_free_block", tail),
        lambda: q.popleft_n(3),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of popleft_n(), position 2 {_WALK}: "
        f"prev_free_block of {b1!r}: expected {b0!r}, found {own_tail}",
    )
    case(
        lambda: setattr(tail, "next_free_block", head),
        lambda: q.append_n([spare]),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append_n(), the tail sentinel: "
        f"next_free_block of {own_tail}: expected None, found {own_head}",
    )
    case(
        lambda: setattr(tail, "prev_free_block", head),
        lambda: q.append(spare),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at the start of append(), the tail sentinel: "
        f"prev_free_block of {own_tail}: expected a block followed by the tail, found {own_head}",
    )
    case(
        lambda: setattr(b1, "prev_free_block", None),
        lambda: q.iter_blocks_after(b1),
        SENTINEL_LINKAGE,
        "invariant 1 (sentinel_linkage) broken at the start of iter_blocks_after(): "
        f"prev_free_block of {b1!r}: expected one of this queue's blocks or its sentinel, "
        "found None",
    )
    case(
        lambda: setattr(b0, "next_free_block", b2),
        lambda: q.iter_blocks_after(b1),
        SENTINEL_LINKAGE,
        "invariant 1 (sentinel_linkage) broken at the start of iter_blocks_after(): "
        f"next_free_block of {b0!r}, the prev_free_block of {b1!r}: expected {b1!r}, "
        f"found {b2!r}",
    )
    case(
        lambda: setattr(b3, "prev_free_block", b1),
        lambda: list(q.iter_blocks_after(b1)),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at iteration after a cursor, position 2 {_WALK}: "
        f"prev_free_block of {b3!r}: expected {b2!r}, found {b1!r}",
    )
    case(
        lambda: setattr(b1, "next_free_block", spare),
        lambda: list(q.iter_blocks_after(None)),
        SENTINEL_LINKAGE,
        f"invariant 1 (sentinel_linkage) broken at iteration, position 3 {_WALK}: "
        f"next_free_block of {b1!r}: expected one of this queue's blocks or its tail, "
        f"found {spare!r}",
    )
    return cases


def test_each_o1_check_diagnostic_word_for_word() -> None:
    """Each O(1) check of check mode reports family, place, value, expected and found exactly."""
    count = len(_front_and_back_cases(_world()))
    for index in range(count):
        run, family, text = _front_and_back_cases(_world())[index]
        error = _error(run)
        assert isinstance(error, InvariantViolation), text
        assert (error.invariant, str(error)) == (family, text)


def test_an_empty_queue_whose_tail_has_a_successor_is_named_by_popleft() -> None:
    """popleft() on an empty queue checks the tail's own outer link before calling it empty."""
    queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    for stray, shown in ((Block(), None), (head, "this queue's"), (tail, "this queue's")):
        tail.next_free_block = stray
        assert str(_error(queue.popleft)) == (
            "invariant 1 (sentinel_linkage) broken at the start of popleft(): next_free_block of "
            f"this queue's {tail!r}: expected None, found {f'{shown} ' if shown else ''}{stray!r}"
        )


def test_each_membership_diagnostic_word_for_word() -> None:
    """Detached, foreign, sentinel and spliced-in arguments get their exact errors."""
    world = _world()
    q, (b0, b1, _, _), (spare, intruder) = world.queue, world.blocks, world.spare
    foreign = world.other_blocks[0]
    assert (type(_error(lambda: q.remove(spare))), str(_error(lambda: q.remove(spare)))) == (
        NotInQueueError,
        f"remove({spare!r}): the block is not linked in a queue",
    )
    assert str(_error(lambda: q.iter_blocks_after(spare))) == (
        f"iter_blocks_after({spare!r}): the block is not linked in a queue"
    )
    assert str(_error(lambda: q.remove(foreign))) == (
        f"remove({foreign!r}): it is linked in another queue"
    )
    half = Block()
    half.next_free_block = b1  # one link set: not detached, so not "not linked"
    assert str(_error(lambda: q.remove(half))) == f"remove({half!r}): it is linked in another queue"
    half.next_free_block, half.prev_free_block = None, b1
    assert str(_error(lambda: q.remove(half))) == f"remove({half!r}): it is linked in another queue"
    other_head = world.other.fake_free_list_head
    assert str(_error(lambda: q.remove(other_head))).endswith(
        "it is a queue sentinel, which never leaves its queue"
    )
    assert str(_error(lambda: q.iter_blocks_after(other_head))).endswith(
        "it is another queue's sentinel"
    )
    assert list(q.iter_blocks_after(q.fake_free_list_tail)) == []
    assert same(list(q.iter_blocks_after(q.fake_free_list_head)), world.blocks)
    intruder.prev_free_block, intruder.next_free_block = b0, b1
    b0.next_free_block = b1.prev_free_block = intruder
    error = _error(lambda: q.remove(intruder))
    assert isinstance(error, InvariantViolation)
    assert (error.invariant, str(error)) == (
        NO_DUPLICATES,
        f"invariant 3 (no_duplicates) broken at the start of remove({intruder!r}): membership "
        f"of {intruder!r}: expected a block this queue linked itself, found a block linked in "
        "by outside code",
    )
    q.num_free_blocks += 1
    q._members[id(world.spare[0])] = world.spare[0]  # keeps the O(1) count check quiet
    assert str(_error(q.full_check)) == (
        f"invariant 3 (no_duplicates) broken at position 2 {_WALK}: membership of "
        f"{intruder!r}: expected a block this queue linked itself, found a block linked in by "
        "outside code"
    )


def test_a_block_whose_links_point_elsewhere_is_not_taken_for_a_spliced_one() -> None:
    """A non-member whose predecessor does not link to it is another queue's, not an intruder."""
    world = _world()
    q, (b0, b1, _, _), (spare, _) = world.queue, world.blocks, world.spare
    spare.prev_free_block, spare.next_free_block = b0, b1  # links in, but nobody links to it
    assert str(_error(lambda: q.remove(spare))) == (
        f"remove({spare!r}): it is linked in another queue"
    )
    try:
        spare.prev_free_block = _NotLinkable()  # type: ignore[assignment]  # damage
    except TypeError:
        pytest.skip("this build's typed slots refuse a non-block link")
    assert str(_error(lambda: q.remove(spare))) == (
        f"remove({spare!r}): it is linked in another queue"
    )


class _NotLinkable:
    """Something with neither link, to stand where a block's neighbour should be."""


def test_leaving_the_queue_under_an_iteration_is_named_word_for_word() -> None:
    """Removing the block an iteration stands on names the block and the iteration."""
    queue, blocks = checked(3)
    walk = iter(queue)
    assert next(walk) is blocks[0]
    queue.remove(blocks[0])
    error = _error(lambda: next(walk))
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


class _IndexRaisesAttributeError:
    """A count whose ``__index__`` fails with AttributeError, as a broken wrapper's might."""

    def __index__(self) -> int:
        raise AttributeError("no index here")


#: Calls whose argument raises a raw error that no damage of the queue explains.
_RAW_ERRORS: dict[str, tuple[Callable[[CheckedFreeBlockQueue[Any]], object], str]] = {
    "remove()": (lambda q: q.remove(_RaisingLinks()), "TypeError: no links here"),
    "append()": (lambda q: q.append(_RaisingLinks()), "TypeError: no links here"),
    "append_n()": (lambda q: q.append_n([_RaisingLinks()]), "TypeError: no links here"),
    "prepend_n()": (lambda q: q.prepend_n([_RaisingLinks()]), "TypeError: no links here"),
    "iter_blocks_after()": (
        lambda q: q.iter_blocks_after(_RaisingLinks()),
        "TypeError: no links here",
    ),
    "popleft_n()": (
        lambda q: q.popleft_n(_IndexRaisesAttributeError()),
        "AttributeError: no index here",
    ),
}


@pytest.mark.parametrize("where", _RAW_ERRORS)
def test_a_raw_error_that_the_full_check_cannot_explain_is_named_as_such(where: str) -> None:
    """A raw error from an argument becomes a violation naming the error and the operation."""
    if verified_queue.COMPILED and where != "popleft_n()":
        pytest.skip("the compiled queue refuses a block that is no Block before reading it")
    queue, blocks = checked(2)
    call, found = _RAW_ERRORS[where]
    error = _error(lambda: call(queue))
    assert isinstance(error, InvariantViolation)
    assert str(error) == (
        f"invariant 1 (sentinel_linkage) broken at {where}: the links and the count the "
        f"operation read: expected blocks, sentinels and an int, found {found}"
    )
    assert same(queue.get_all_free_blocks(), blocks)


def test_a_raw_error_that_the_full_check_explains_is_reported_as_the_damage() -> None:
    """A head replaced by None makes each operation reading it report the full check's finding."""
    if not _writes(_world().queue, "fake_free_list_head", None):
        pytest.skip("this build's typed slot refuses the damage")
    expected = (
        "invariant 1 (sentinel_linkage) broken at the queue: fake_free_list_head: "
        "expected a Sentinel, found None"
    )
    operations: dict[str, Callable[[CheckedFreeBlockQueue[Block]], object]] = {
        "popleft": lambda q: q.popleft(),
        "popleft_n": lambda q: q.popleft_n(1),
        "prepend_n": lambda q: q.prepend_n([Block()]),
        "iter_blocks_after": lambda q: list(q.iter_blocks_after(None)),
    }
    for name, operation in operations.items():
        queue, _ = checked(2)
        queue.fake_free_list_head = None  # type: ignore[assignment]  # the damage
        assert str(_error(partial(operation, queue))) == expected, name


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


def _faulty(base: type[FreeBlockQueue[Block]], size: int) -> tuple[Any, list[Block]]:
    """A check-mode queue over a faulty production class, and its blocks."""
    cls = type("CheckedFaulty", (CheckedFreeBlockQueue, base), {"__slots__": ()})
    blocks = [Block() for _ in range(size)]
    return cls(blocks, full_check_every=0), blocks


def test_end_of_operation_diagnostics_word_for_word() -> None:
    """Each end-of-operation check names the fault a faulty base class left, exactly."""
    violation_of = "invariant {} broken at the end of {}: "

    queue, _ = _faulty(_AppendForgetsCount, 3)
    assert str(_error(lambda: queue.append(Block()))) == (
        violation_of.format("2 (count_consistency)", "append()")
        + "num_free_blocks: expected 4 (the blocks this queue holds), found 3"
    )

    queue, (b0, b1, b2) = _faulty(_RemoveLeavesBackLink, 3)
    message = str(_error(lambda: queue.remove(b1)))
    assert message == (
        violation_of.format("1 (sentinel_linkage)", "remove()")
        + f"the links between {b0!r} and {b2!r}: expected each naming the other, "
        f"found {b2!r} and {b1!r}"
    )

    queue, (b0, _, _) = _faulty(_PrependNLeavesOldFront, 3)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    new = Block()
    message = str(_error(lambda: queue.prepend_n([new])))
    assert message == (
        violation_of.format("1 (sentinel_linkage)", "prepend_n()")
        + f"the links between {new!r} and {b0!r}: expected each naming the other, "
        f"found {b0!r} and this queue's {head!r}"
    )

    queue, (_, _, b2) = _faulty(_AppendNLeavesOldLast, 3)
    tail = queue.fake_free_list_tail
    new = Block()
    message = str(_error(lambda: queue.append_n([new])))
    assert message == (
        violation_of.format("1 (sentinel_linkage)", "append_n()")
        + f"the links between {b2!r} and {new!r}: expected each naming the other, "
        f"found this queue's {tail!r} and {b2!r}"
    )

    queue, (b0, _, _) = _faulty(_PopleftNKeepsHead, 3)
    head = queue.fake_free_list_head
    assert str(_error(lambda: queue.popleft_n(2))) == (
        "invariant 1 (sentinel_linkage) broken at the end of popleft_n(), position 1 "
        f"{_WALK}: next_free_block of this queue's {head!r}: expected one of this queue's "
        f"blocks or its tail, found {b0!r}"
    )

    queue, _ = _faulty(_PopleftReturnsTail, 0)
    tail = queue.fake_free_list_tail
    assert str(_error(queue.popleft)) == (
        violation_of.format("3 (no_duplicates)", "popleft()")
        + f"a block the operation returned: expected one of this queue's blocks, "
        f"found this queue's {tail!r}"
    )

    queue, _ = _faulty(_PopleftNHandsOutAStranger, 3)
    message = str(_error(lambda: queue.popleft_n(1)))
    assert message.startswith(
        violation_of.format("3 (no_duplicates)", "popleft_n()")
        + "a block the operation returned: expected one of this queue's blocks, found <Block at "
    )

    queue, (_, _, b2) = _faulty(_AppendLinksAtFront, 3)
    tail = queue.fake_free_list_tail
    new = Block()
    assert str(_error(lambda: queue.append(new))) == (
        "invariant 1 (sentinel_linkage) broken at the end of append(), the tail sentinel: "
        f"prev_free_block of this queue's {tail!r}: expected the appended {new!r}, "
        f"found {b2!r}"
    )


@pytest.mark.parametrize("period", [None, 0, 7])
def test_copies_and_pickles_keep_the_period_and_own_their_blocks(period: int | None) -> None:
    """A deep copy or pickle is a checked queue with the same period, holding its own copies."""
    queue, blocks = checked(3, full_check_every=period)
    for copy in (copy_module.deepcopy(queue), pickle.loads(pickle.dumps(queue))):
        assert type(copy) is CheckedFreeBlockQueue
        assert copy.full_check_every == queue.full_check_every
        copied = copy.get_all_free_blocks()
        assert len(copied) == 3
        assert not any(a is b for a, b in zip(copied, blocks, strict=True))
        copy.remove(copied[1])  # a member of the copy: its membership holds the copies
        with pytest.raises(NotInQueueError):
            copy.remove(blocks[0])
        copy.full_check()
    assert same(queue.get_all_free_blocks(), blocks)


#: One operation of each kind that counts toward the periodic full check, repeatable.
_COUNTED_OPERATIONS: dict[str, Callable[[CheckedFreeBlockQueue[Block], Block], object]] = {
    "popleft": lambda q, _b: q.popleft(),
    "popleft_n": lambda q, _b: q.popleft_n(1),
    "remove": lambda q, b: q.remove(b),
    "append": lambda q, _b: q.append(Block()),
    "append_n": lambda q, _b: q.append_n([Block()]),
    "prepend_n": lambda q, _b: q.prepend_n([Block()]),
    "iter_blocks_after": lambda q, _b: q.iter_blocks_after(None),
}


@pytest.mark.parametrize("operation", _COUNTED_OPERATIONS)
def test_each_operation_counts_once_toward_the_full_check(operation: str) -> None:
    """With full_check_every=3, the third operation of any kind after a full check runs the next."""
    blocks = [Block() for _ in range(6)]
    queue = _CountingQueue(blocks, full_check_every=3)
    queue.full_check()  # a fresh period
    queue.full_checks = 0
    seen = []
    for block in blocks:
        _COUNTED_OPERATIONS[operation](queue, block)
        seen.append(queue.full_checks)
    assert seen == [0, 0, 1, 1, 1, 2]


@pytest.mark.parametrize("argument", [None, 5, "block", object()], ids=repr)
def test_a_non_block_argument_gets_the_production_queue_s_error(argument: object) -> None:
    """remove, iter_blocks_after, append and the batches refuse a non-block as production does."""
    calls: list[Callable[[FreeBlockQueue[Any]], object]] = [
        lambda q: q.remove(argument),
        lambda q: q.iter_blocks_after(argument),
        lambda q: q.append(argument),
        lambda q: q.append_n([Block(), argument]),
        lambda q: q.prepend_n([argument]),
        lambda q: q.popleft_n(argument),  # type: ignore[arg-type]  # the misuse under test
    ]
    for call in calls:
        if argument is None and call is calls[1]:
            continue  # None is the front cursor
        errors = []
        for queue_class in (FreeBlockQueue, CheckedFreeBlockQueue):
            blocks = [Block(), Block()]
            queue: FreeBlockQueue[Any] = queue_class(blocks)
            errors.append(_error(partial(call, queue)))
            assert same(queue.get_all_free_blocks(), blocks)
        production, check_mode = errors
        assert type(check_mode) is type(production)
        assert str(check_mode) == str(production)


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
    queue, _ = _faulty(base, 0)
    blocks = [Block() for _ in range(size)]
    FreeBlockQueue.append_n(queue, blocks)
    queue._members.update((id(block), block) for block in blocks)
    return queue, blocks


@pytest.mark.parametrize("operation", _MUTATIONS)
def test_each_end_of_operation_count_check_word_for_word(operation: str) -> None:
    """A base class that moves the count is caught as each operation ends, by name and numbers."""
    call, size = _MUTATIONS[operation]
    queue, blocks = _faulty_started(_count_drifting(operation), 3)
    assert str(_error(lambda: call(queue, blocks))) == (
        f"invariant 2 (count_consistency) broken at the end of {operation}(): num_free_blocks: "
        f"expected {size} (the blocks this queue holds), found {size + 1}"
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


def test_the_end_of_operation_front_and_back_checks_word_for_word() -> None:
    """A front or back end left unsound by the base class is named as its operation ends."""
    queue, (b0, _, _) = _faulty(_PopleftKeepsHead, 3)
    head = queue.fake_free_list_head
    assert str(_error(queue.popleft)) == (
        f"invariant 1 (sentinel_linkage) broken at the end of popleft(), position 1 {_WALK}: "
        f"next_free_block of this queue's {head!r}: expected one of this queue's blocks or "
        f"its tail, found {b0!r}"
    )
    queue, _ = _faulty(_PrependNClearsNewFront, 3)
    head = queue.fake_free_list_head
    new = Block()
    assert str(_error(lambda: queue.prepend_n([new]))) == (
        f"invariant 1 (sentinel_linkage) broken at the end of prepend_n(), position 1 {_WALK}: "
        f"prev_free_block of {new!r}: expected this queue's {head!r}, found None"
    )
    queue, blocks = _faulty_started(_AppendNLeavesTail, 3)
    tail = queue.fake_free_list_tail
    assert str(_error(lambda: queue.append_n([Block()]))) == (
        "invariant 1 (sentinel_linkage) broken at the end of append_n(), the tail sentinel: "
        f"prev_free_block of this queue's {tail!r}: expected a block followed by the tail, "
        f"found {blocks[2]!r}"
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
    queue, _ = _faulty(_PopleftReturnsHead, 0)
    head = queue.fake_free_list_head
    assert str(_error(queue.popleft)) == (
        "invariant 3 (no_duplicates) broken at the end of popleft(): a block the operation "
        f"returned: expected one of this queue's blocks, found this queue's {head!r}"
    )


def test_damage_met_in_the_middle_of_an_iteration_word_for_word() -> None:
    """A link damaged while an iteration is under way is named with the iteration's position."""
    queue, (b0, b1, _, b3) = checked(4)
    walk = iter(queue)
    assert next(walk) is b0
    b1.prev_free_block = b3
    assert str(_error(lambda: next(walk))) == (
        f"invariant 1 (sentinel_linkage) broken at iteration, position 2 {_WALK}: "
        f"prev_free_block of {b1!r}: expected {b0!r}, found {b3!r}"
    )


def test_a_deleted_count_is_named_by_len_and_bool() -> None:
    """len() and bool() of a queue whose count was deleted raise a count violation, not an error."""
    for read, size in itertools.product((len, bool), (0, 1, 2)):
        queue, _ = checked(size)
        try:
            del queue.num_free_blocks
        except (AttributeError, TypeError):
            pytest.skip("this build's queue refuses to delete its count")
        assert str(_error(partial(read, queue))) == (
            f"invariant 2 (count_consistency) broken at {read.__name__}(): num_free_blocks: "
            "expected an int, found None"
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
def test_each_end_of_operation_count_type_check_word_for_word(operation: str) -> None:
    """A base class that leaves a float count is caught as each operation ends."""
    if not _writes(checked(0)[0], "num_free_blocks", 1.0):
        pytest.skip("this build's typed count refuses a float")
    call = _MUTATIONS[operation][0]
    queue, blocks = _faulty_started(_count_floating(operation), 3)
    assert str(_error(lambda: call(queue, blocks))) == (
        f"invariant 2 (count_consistency) broken at the end of {operation}(): num_free_blocks: "
        f"expected an int, found a non-block {object.__repr__(queue.num_free_blocks)}"
    )


def test_a_diagnosis_that_finds_nothing_says_check_mode_disagrees_with_itself() -> None:
    """The always-raising diagnostic helpers, called on a sound queue, report the disagreement."""
    queue, blocks = checked(3)
    helpers: list[Callable[[str], None]] = [
        partial(_diagnosis.check_around, queue, blocks[1]),
        partial(_diagnosis.check_back, queue),
        partial(_diagnosis.expect_count, queue),
    ]
    for helper in helpers:
        error = _error(partial(helper, "here"))
        assert isinstance(error, InvariantViolation)
        assert str(error) == (
            "invariant 1 (sentinel_linkage) broken at here: the links and the count an O(1) "
            "check read: expected a fault its diagnosis can name, found none: check mode's "
            "inline test and its diagnosis disagree"
        )
    queue.full_check()


def test_a_walk_that_outlasts_the_membership_runs_on_while_the_queue_grows() -> None:
    """Appending under a walk takes it past the first full check, and it goes on to the end."""
    queue, blocks = checked(2, full_check_every=0)
    seen = 0
    for _ in queue.iter_blocks_after(None):
        seen += 1
        if seen < 10:
            queue.append(Block())
    assert seen == 11  # the 2 blocks and the 9 appended under the walk
    assert queue.get_all_free_blocks()[:2] == blocks
