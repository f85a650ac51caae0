"""Check mode gives the production queue's API and results, and runs its full check on time."""

from __future__ import annotations

import copy as copy_module
import pickle
from collections.abc import Callable, Iterable
from functools import partial
from typing import SupportsIndex

import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_queue
from tests.checks.support import (
    CountingQueue,
    adaptive_default_only,
    checked,
    same,
)
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    QueueError,
    TracedFreeBlockQueue,
)
from verified_queue.checked import MIN_FULL_CHECK_PERIOD
from verified_queue.invariants import (
    SENTINEL_LINKAGE,
    check_invariants,
)
from verified_queue.queue import FreeBlockQueue

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
def test_check_mode_gives_production_results(
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


def test_constructor_rejects_linked_block() -> None:
    """A linked block in the constructor's batch raises AlreadyInQueueError, as in production."""
    linked = FreeBlockQueue([Block()]).popleft()
    owner = FreeBlockQueue([linked])
    with pytest.raises(AlreadyInQueueError):
        CheckedFreeBlockQueue([Block(), linked])
    check_invariants(owner)


def test_checked_queue_slots_and_repr() -> None:
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


def test_period_must_be_none_or_int_at_least_0() -> None:
    """Negative, fractional, boolean and string periods are refused."""
    for period in (-1, 1.5, True, False, "3"):
        with pytest.raises(ValueError, match="full_check_every"):
            CheckedFreeBlockQueue(full_check_every=period)  # type: ignore[arg-type]  # the misuse under test


def test_full_check_runs_every_k_operations() -> None:
    """With full_check_every=3 the full check runs every third operation, the constructor's too."""
    queue = CountingQueue([Block()], full_check_every=3)
    for _ in range(10):  # with the constructor's append_n, 11 operations
        queue.append(queue.popleft())  # two operations each
    assert queue.full_checks == 21 // 3


@adaptive_default_only
def test_default_period_is_max_1000_and_length() -> None:
    """By default the full check runs every 1000 operations, or every len(queue) if longer."""
    small = CountingQueue([Block() for _ in range(10)], full_check_every=None)
    for _ in range(MIN_FULL_CHECK_PERIOD):
        small.append(small.popleft())
    assert small.full_checks == 2  # operations 1000 and 2000 of 2001
    large = CountingQueue([Block() for _ in range(3000)], full_check_every=None)
    for _ in range(3000):
        large.append(large.popleft())
    assert large.full_checks == 2  # at operation 1000, then 3000 operations later


def test_period_zero_never_runs_full_check() -> None:
    """With full_check_every=0 the full check never runs by itself, even when the countdown ends."""
    queue = CountingQueue([Block() for _ in range(10)], full_check_every=0)
    for _ in range(2 * MIN_FULL_CHECK_PERIOD):
        queue.append(queue.popleft())
    queue._until_full_check[0] = 1  # the countdown runs out at the next operation
    for _ in range(3):
        queue.append(queue.popleft())
    assert queue.full_checks == 0
    assert queue._until_full_check[0] > MIN_FULL_CHECK_PERIOD  # rewound, not acted on


def test_period_zero_keeps_o1_checks() -> None:
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


def test_period_after_zero_starts_at_full_check() -> None:
    """Turning the periodic check on from 0 takes effect after a full check run by hand."""
    queue = CountingQueue([Block() for _ in range(10)], full_check_every=0)
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


def test_links_through_super_class() -> None:
    """Each checked operation links with the next class in the MRO, as a super() call would."""
    blocks = [Block() for _ in range(4)]
    queue = _CheckedRecordingQueue(blocks)
    queue.remove(blocks[1])
    queue.append(queue.popleft())
    queue.append_n(queue.popleft_n(2))
    assert queue.calls == ["append_n", "remove", "popleft", "append", "popleft_n", "append_n"]
    assert same(queue.get_all_free_blocks(), [blocks[0], blocks[2], blocks[3]])
    assert CountingQueue._super_popleft is FreeBlockQueue.popleft


def test_membership_keeps_member_ids_unique() -> None:
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


def test_iteration_live_refuses_current_removal() -> None:
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


@pytest.mark.parametrize("period", [None, 0, 7])
def test_copies_keep_period_and_own_blocks(period: int | None) -> None:
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
def test_each_operation_counts_once(operation: str) -> None:
    """With full_check_every=3, the third operation of any kind after a full check runs the next."""
    blocks = [Block() for _ in range(6)]
    queue = CountingQueue(blocks, full_check_every=3)
    queue.full_check()  # a fresh period
    queue.full_checks = 0
    seen = []
    for block in blocks:
        _COUNTED_OPERATIONS[operation](queue, block)
        seen.append(queue.full_checks)
    assert seen == [0, 0, 1, 1, 1, 2]


#: The batches the production joins of the queues below were handed, in order.
HANDED: list[object] = []


class _NotingProduction(FreeBlockQueue[Block]):
    """The production queue, noting the batch each of its joins is handed."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        HANDED.append(blocks)
        super().append_n(blocks)

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        HANDED.append(blocks)
        super().prepend_n(blocks)


# Check mode's production methods are the next class's in the MRO (its __init_subclass__).
class _CheckedNotingJoins(CheckedFreeBlockQueue[Block], _NotingProduction):
    __slots__ = ()


class _TracedNotingJoins(TracedFreeBlockQueue[Block], _NotingProduction):
    __slots__ = ()


@pytest.mark.parametrize(
    "queue_class", [_CheckedNotingJoins, _TracedNotingJoins], ids=["checked", "traced"]
)
@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_list_batch_is_handed_on_as_it_is(
    operation: str, queue_class: type[CheckedFreeBlockQueue[Block]]
) -> None:
    """A batch given as a list reaches the production join itself: no copy of n blocks is made.

    Any other iterable is listed first, once.
    """
    blocks = [Block() for _ in range(4)]
    queue = queue_class(blocks[:1])
    HANDED.clear()
    batch = blocks[1:3]
    getattr(queue, operation)(batch)
    assert len(HANDED) == 1
    assert HANDED[0] is batch
    getattr(queue, operation)(iter(blocks[3:]))
    assert len(HANDED) == 2
    assert type(HANDED[1]) is list
    assert HANDED[1] == blocks[3:]
