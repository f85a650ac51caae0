"""Hypothesis stateful machines: the queue against the list model, check mode, shared pools.

1. :class:`QueueAgainstModel` drives a :class:`FreeBlockQueue` and a :class:`ListModel` with
   every operation and every rejected misuse; results, errors and the whole link structure
   must agree after every step.
2. :class:`CheckedQueueMisuse` plays a buggy caller of ``CheckedFreeBlockQueue``: foreign
   removes, double frees, links written from outside, a drifted count. Each must be caught at
   the operation that meets it, with nothing changed.
3. :class:`SharedPool` moves blocks between several queues of one pool; the union of the
   queues and the blocks handed out is always the whole pool, each block exactly once.

Linked and detached blocks are drawn from the model's current state rather than from
Hypothesis bundles: ``popleft`` takes blocks out of the queue without the rule choosing them,
and a bundle cannot drop a value it did not hand out, so a bundle of linked blocks would go
stale. Every machine is also run against each planted bug and must fail.

The profile (``ci`` derandomized in CI, ``dev`` locally, ``thorough`` for long runs) comes
from ``conftest.py``; the planted-bug runs use fixed settings so they fail the same way on
every machine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from operator import methodcaller
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from hypothesis.stateful import (
    run_state_machine_as_test as _run_state_machine_as_test,
)

from specs.bug_matrix import MISSED_BY_BUDGET as BUDGET
from specs.bug_matrix import MISSES
from specs.model import ListModel, Membership, SpecBlock, position
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import (
    Outcome,
    iterate_after,
    mismatch,
    outcome_difference,
    outcome_of,
)
from verified_queue._messages import changed_during_iteration
from verified_queue.block import Block, Sentinel
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import (
    AlreadyInQueueError,
    InvariantViolation,
    NotInQueueError,
)
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

# Typed here because older Hypothesis releases leave it unannotated: a call through this
# name type-checks the same against every release the test extra admits.
run_machine: Callable[..., None] = _run_state_machine_as_test

#: The batch operations: they take the same batches and refuse the same misuse.
BATCH = st.sampled_from(["append_n", "prepend_n"])

# Fixed settings for the planted-bug runs: the same examples everywhere, no shrinking (only
# the failure matters), enough examples that every bug is met.
BUG_HUNT = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    stateful_step_count=40,
    phases=(Phase.explicit, Phase.generate),
    print_blob=False,
)


T = TypeVar("T")


class BatchInterrupted(Exception):
    """Raised part-way through a batch by a caller's failing generator."""


def _interrupted(blocks: Sequence[Block]) -> Iterator[Block]:
    yield from blocks
    raise BatchInterrupted("the caller's generator failed")


def _agree(
    label: str,
    queue_call: Callable[[], object],
    model_call: Callable[[], object],
    *,
    messages: bool = True,
) -> Outcome:
    """Run one call on the queue and on the model; fail unless both give the same outcome.

    An error must match in type and, with ``messages``, in message: a refusal that names the
    wrong call is a bug.

    Returns the queue's outcome (its ``error`` is set when both rejected the call).
    """
    want = outcome_of(model_call)
    got = outcome_of(queue_call)
    problem = outcome_difference(got, want, messages=messages)
    assert problem is None, f"{label}: {problem}"
    return got


def _pick(data: st.DataObject, items: Sequence[T], label: str) -> T:
    """Draw one of ``items`` by index (Hypothesis never hashes or compares the blocks)."""
    return items[data.draw(st.integers(0, len(items) - 1), label=f"{label} (index)")]


def _pick_distinct(
    data: st.DataObject, items: Sequence[T], label: str, *, min_size: int = 0, max_size: int
) -> list[T]:
    """Draw a list of distinct ``items`` (by position), in any order."""
    if not items:
        return []
    indices = data.draw(
        st.lists(st.integers(0, len(items) - 1), unique=True, min_size=min_size, max_size=max_size),
        label=f"{label} (indices)",
    )
    return [items[index] for index in indices]


def _held_and_maybe_free(
    data: st.DataObject,
    held: Sequence[Block],
    models: Sequence[ListModel[SpecBlock]],
    max_size: int,
) -> list[Block]:
    """Distinct held blocks and, maybe, the front block of one of the non-empty ``models``."""
    batch: list[Block] = list(_pick_distinct(data, held, "batch", max_size=max_size))
    holders = [model for model in models if model]
    with_free_block = data.draw(st.booleans(), label="with a free block")
    if holders and with_free_block:
        batch.append(_pick(data, holders, "holder").blocks[0])
    return batch


def construct_and_empty(
    queue_type: type[FreeBlockQueue[Any]],
    batch: list[Block],
    as_iterator: bool,
    membership: Membership,
    universe: Sequence[Block],
) -> None:
    """Build a queue from ``batch`` (a list, or an iterator) beside its model, then empty both.

    The constructor must refuse what the model refuses, leaving every block as it was, and
    otherwise hold the batch as the model does; the new queue is then emptied with
    ``popleft_n``, so every block it took is detached again.
    """
    label = f"{queue_type.__name__}({'iter(' if as_iterator else ''}{batch!r})"
    want = outcome_of(lambda: ListModel(batch, membership=membership))
    got = outcome_of(lambda: queue_type(iter(batch) if as_iterator else list(batch)))
    if want.error is not None or got.error is not None:
        problem = outcome_difference(got, want)
        assert problem is None, f"{label}: {problem}"
    if isinstance(got.result, FreeBlockQueue) and isinstance(want.result, ListModel):
        built, model = got.result, want.result
        problem = mismatch(built, model, universe)
        assert problem is None, f"{label}: {problem}"
        size = len(model)
        _agree(f"{label}.popleft_n", lambda: built.popleft_n(size), lambda: model.popleft_n(size))
    for block in batch:
        if not membership.is_linked(block) and not isinstance(block, Sentinel):
            assert block.prev_free_block is None, f"{label} left {block!r} linked"
            assert block.next_free_block is None, f"{label} left {block!r} linked"


# --------------------------------------------------------------------------- machine 1


class QueueAgainstModel(RuleBasedStateMachine):
    """Every operation and every rejected misuse on a queue and on its list model."""

    queue_type: ClassVar[type[FreeBlockQueue[Any]]] = FreeBlockQueue

    def __init__(self) -> None:
        super().__init__()
        self.universe: list[SpecBlock] = []
        self.queue: FreeBlockQueue[SpecBlock] = self.queue_type()
        self.model: ListModel[SpecBlock] = ListModel()
        # Another queue, for its sentinels: foreign objects this queue must refuse.
        self.other: FreeBlockQueue[SpecBlock] = FreeBlockQueue()

    def _new_blocks(self, count: int) -> list[SpecBlock]:
        blocks = [SpecBlock(len(self.universe) + offset) for offset in range(count)]
        self.universe.extend(blocks)
        return blocks

    def detached(self) -> list[SpecBlock]:
        return [block for block in self.universe if block not in self.model]

    def sentinels(self) -> list[Block]:
        return [
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
        ]

    def both(self, label: str, call: Callable[[Any], object]) -> Outcome:
        return _agree(label, lambda: call(self.queue), lambda: call(self.model))

    def refused(self, label: str, call: Callable[[Any], object]) -> None:
        """A misuse: the model refuses it, so the queue must refuse it the same way."""
        assert self.both(label, call).error is not None, f"{label} was accepted"

    @initialize(count=st.integers(0, 6), as_iterator=st.booleans())
    def build(self, count: int, as_iterator: bool) -> None:
        """Build the queue from ``count`` fresh blocks with its constructor, as a list or not."""
        blocks = self._new_blocks(count)
        self.queue = self.queue_type(iter(blocks) if as_iterator else blocks)
        self.model = ListModel(blocks)

    @rule(data=st.data(), as_iterator=st.booleans())
    def construct_another(self, data: st.DataObject, as_iterator: bool) -> None:
        """Build a second queue from detached blocks, maybe with misuse; then empty it again."""
        batch = _pick_distinct(data, self.detached(), "batch", max_size=3)
        misuse = data.draw(st.sampled_from(["none", "repeat", "linked", "sentinel"]), "misuse")
        extras: dict[str, list[Block]] = {
            "none": [],
            "repeat": [*batch[:1]],
            "linked": [*self.model.get_all_free_blocks()[:1]],
            "sentinel": self.sentinels()[1:2],
        }
        extra = extras[misuse]
        construct_and_empty(
            self.queue_type, [*batch, *extra], as_iterator, self.model.membership, self.universe
        )

    @rule(count=st.integers(1, 3))
    def new_blocks(self, count: int) -> None:
        self._new_blocks(count)

    @rule()
    def popleft(self) -> None:
        self.both("popleft()", lambda target: target.popleft())

    @rule(data=st.data())
    def popleft_n(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, len(self.model)), label="n")
        self.both(f"popleft_n({n})", lambda target: target.popleft_n(n))

    @rule(data=st.data())
    def popleft_n_too_many(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(len(self.model) + 1, len(self.model) + 3), label="n")
        self.refused(f"popleft_n({n})", lambda target: target.popleft_n(n))

    @rule(n=st.integers(-3, -1))
    def popleft_n_negative(self, n: int) -> None:
        self.refused(f"popleft_n({n})", lambda target: target.popleft_n(n))

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def remove_linked(self, data: st.DataObject) -> None:
        block = _pick(data, self.model.get_all_free_blocks(), "block")
        self.both(f"remove({block!r})", lambda target: target.remove(block))

    @precondition(lambda self: len(self.model) < len(self.universe))
    @rule(data=st.data())
    def remove_detached(self, data: st.DataObject) -> None:
        block = _pick(data, self.detached(), "block")
        self.refused(f"remove({block!r})", lambda target: target.remove(block))

    @rule(data=st.data())
    def remove_sentinel(self, data: st.DataObject) -> None:
        sentinel = _pick(data, self.sentinels(), "sentinel")
        self.refused(f"remove({sentinel!r})", lambda target: target.remove(sentinel))

    @precondition(lambda self: len(self.model) < len(self.universe))
    @rule(data=st.data())
    def append_detached(self, data: st.DataObject) -> None:
        block = _pick(data, self.detached(), "block")
        self.both(f"append({block!r})", lambda target: target.append(block))

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def append_linked(self, data: st.DataObject) -> None:
        """A double free: the block is still in the queue."""
        block = _pick(data, self.model.get_all_free_blocks(), "block")
        self.refused(f"append({block!r})", lambda target: target.append(block))

    @rule(data=st.data())
    def append_sentinel(self, data: st.DataObject) -> None:
        sentinel = _pick(data, self.sentinels(), "sentinel")
        self.refused(f"append({sentinel!r})", lambda target: target.append(sentinel))

    @rule(data=st.data(), name=BATCH, as_iterator=st.booleans())
    def batch_detached(self, data: st.DataObject, name: str, as_iterator: bool) -> None:
        """``append_n`` or ``prepend_n`` of detached blocks, as a list or as an iterator."""
        detached = self.detached()
        batch = _pick_distinct(data, detached, "batch", max_size=4)
        label = f"{name}({batch!r})"
        if as_iterator:
            self.both(label, lambda target: getattr(target, name)(iter(batch)))
        else:
            self.both(label, lambda target: getattr(target, name)(batch))

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data(), name=BATCH)
    def batch_with_linked(self, data: st.DataObject, name: str) -> None:
        """A batch in which one block is still in the queue: all or none, so none."""
        detached = self.detached()
        batch = _pick_distinct(data, detached, "detached part", max_size=3)
        linked = _pick(data, self.model.get_all_free_blocks(), "linked")
        batch.insert(data.draw(st.integers(0, len(batch)), label="at"), linked)
        self.refused(f"{name}({batch!r})", lambda target: getattr(target, name)(batch))

    @precondition(lambda self: len(self.model) < len(self.universe))
    @rule(data=st.data(), name=BATCH)
    def batch_repeated(self, data: st.DataObject, name: str) -> None:
        """A batch that names one detached block twice."""
        batch = _pick_distinct(data, self.detached(), "batch", min_size=1, max_size=3)
        batch.insert(data.draw(st.integers(0, len(batch)), label="at"), batch[0])
        self.refused(f"{name}({batch!r})", lambda target: getattr(target, name)(batch))

    @rule(data=st.data(), name=BATCH)
    def batch_with_sentinel(self, data: st.DataObject, name: str) -> None:
        """A batch that ends in a sentinel of this queue or of another."""
        detached = self.detached()[:2]
        sentinel = _pick(data, self.sentinels(), "sentinel")
        batch: list[Block] = [*detached, sentinel]
        self.refused(f"{name}({batch!r})", lambda target: getattr(target, name)(batch))

    @rule(data=st.data(), name=BATCH)
    def batch_interrupted(self, data: st.DataObject, name: str) -> None:
        """The caller's generator raises part-way: its error propagates and nothing changes."""
        detached = self.detached()
        size = data.draw(st.integers(0, len(detached)), label="yielded before failing")
        batch = detached[:size]
        self.refused(
            f"{name}(<generator failing after {batch!r}>)",
            lambda target: getattr(target, name)(_interrupted(batch)),
        )

    @rule(data=st.data())
    def iter_blocks_after(self, data: st.DataObject) -> None:
        """Walk from any cursor: None, a linked or detached block, any sentinel."""
        cursors: list[Block | None] = [None, *self.universe, *self.sentinels()]
        cursor = _pick(data, cursors, "cursor")
        walk = iterate_after(cursor, self.queue.fake_free_list_head, self.queue.fake_free_list_tail)
        self.both(f"iter_blocks_after({cursor!r})", walk)

    @rule(data=st.data())
    def contains(self, data: st.DataObject) -> None:
        candidates: list[Block] = [*self.universe, *self.sentinels()]
        block = _pick(data, candidates, "block")
        self.both(f"{block!r} in queue", lambda target: block in target)

    @invariant()
    def matches_model(self) -> None:
        check_invariants(self.queue, pool=self.universe)
        problem = mismatch(self.queue, self.model, self.universe)
        assert problem is None, problem


TestQueueAgainstModel = QueueAgainstModel.TestCase


class QueueAcrossChanges(QueueAgainstModel):
    """The queue machine, plus walks held across a change and copies of a user's subclass.

    A machine of its own, so that the queue machine's derandomized runs, which the bug matrix
    records, stay what they were.
    """

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data(), change=st.sampled_from(["remove", "popleft", "append", "prepend_n"]))
    def walk_across_a_change(self, data: st.DataObject, change: str) -> None:
        """Step a walk once, change the queue, drain it: the walk is live, as documented.

        It goes on from the block it stands on as linked now, and raises NotInQueueError
        (with its message) if that block left the queue.
        """
        blocks = self.model.blocks
        cursor = _pick(data, [None, *blocks[:-1]], "cursor")
        walk = iter(self.queue) if cursor is None else self.queue.iter_blocks_after(cursor)
        standing = next(walk)
        expected_first = blocks[0] if cursor is None else blocks[position(blocks, cursor) + 1]
        assert standing is expected_first, f"the walk from {cursor!r} began at {standing!r}"
        detached = self.detached()
        if change == "remove":
            target = _pick(data, blocks, "removed")
            call: Callable[[Any], object] = lambda q: q.remove(target)  # noqa: E731
        elif change == "popleft":
            call = lambda q: q.popleft()  # noqa: E731
        elif not detached:
            return
        else:
            spare = _pick(data, detached, "freed")
            call = (
                (lambda q: q.append(spare))
                if change == "append"
                else (lambda q: q.prepend_n([spare]))
            )
        self.both(f"{change} during a walk", call)
        now = self.model.blocks
        at = position(now, standing)
        want = (
            Outcome(result=now[at + 1 :]) if at >= 0 else Outcome(error=changed_during_iteration())
        )
        problem = outcome_difference(outcome_of(list, walk), want, messages=True)
        assert problem is None, f"the rest of a walk standing on {standing!r}: {problem}"

    @rule()
    def copy_of_a_subclass(self) -> None:
        """A deep copy and a pickle of a user's subclass keep the subclass and the order."""
        subclass: type[FreeBlockQueue[SpecBlock]] = type(
            f"User{self.queue_type.__name__}", (self.queue_type,), {"__slots__": ()}
        )
        original = subclass(SpecBlock(n) for n in range(3))
        twin = copy.deepcopy(original)
        assert type(twin) is subclass, f"a deep copy of a {subclass.__name__} is a {type(twin)}"
        assert [block.number for block in twin.get_all_free_blocks()] == [0, 1, 2]


TestQueueAcrossChanges = QueueAcrossChanges.TestCase


# --------------------------------------------------------------------------- machine 2

# A link a buggy caller might write: (node, "prev_free_block" or "next_free_block").
Link = tuple[Block, str]


class CheckedQueueMisuse(RuleBasedStateMachine):
    """A buggy caller of two ``CheckedFreeBlockQueue`` over one pool; every misuse is caught.

    Queue 0 runs the full O(n) check before every operation (``full_check_every=1``), so any
    damage is caught by whatever operation comes next. Queue 1 keeps the serving default (a
    full check every ``max(1000, n)`` operations) and relies on its O(1) checks, so damage is
    caught by the operation that touches the damaged links. Either way the operation raises
    before changing anything: after the caller's damage is undone, the queue equals its model.
    """

    base_type: ClassVar[type[FreeBlockQueue[Any]]] = FreeBlockQueue

    def __init__(self) -> None:
        super().__init__()
        checked_type: type[CheckedFreeBlockQueue[SpecBlock]] = CheckedFreeBlockQueue
        if self.base_type is not FreeBlockQueue:
            # Check mode over a planted bug: CheckedFreeBlockQueue's super() calls reach the bug.
            checked_type = type(
                f"CheckedOver{self.base_type.__name__}",
                (CheckedFreeBlockQueue, self.base_type),
                {"__slots__": ()},
            )
        self.checked_type = checked_type
        self.pool: list[SpecBlock] = []
        self.membership = Membership()
        self.queues: list[CheckedFreeBlockQueue[SpecBlock]] = []
        self.models: list[ListModel[SpecBlock]] = []
        self.in_use: list[SpecBlock] = []

    @initialize(sizes=st.lists(st.integers(0, 5), min_size=2, max_size=2))
    def build(self, sizes: list[int]) -> None:
        for period, size in zip((1, None), sizes, strict=True):
            blocks = [SpecBlock(len(self.pool) + offset) for offset in range(size)]
            self.pool.extend(blocks)
            self.queues.append(self.checked_type(blocks, full_check_every=period))
            self.models.append(ListModel(blocks, membership=self.membership))
        extra = [SpecBlock(len(self.pool) + offset) for offset in range(3)]
        self.pool.extend(extra)
        self.in_use.extend(extra)

    def both(self, index: int, label: str, call: Callable[[Any], object]) -> Outcome:
        # Types only: check mode words its own refusals (a foreign cursor, a cleared member).
        return _agree(
            f"checked queue {index}: {label}",
            lambda: call(self.queues[index]),
            lambda: call(self.models[index]),
            messages=False,
        )

    def caught(self, index: int, label: str, call: Callable[[Any], object]) -> None:
        """``call`` meets damage a caller did: it must raise InvariantViolation, nothing else."""
        outcome = outcome_of(call, self.queues[index])
        assert isinstance(outcome.error, InvariantViolation), (
            f"checked queue {index}: {label} after outside damage gave {outcome!r}"
        )

    def healthy(self, index: int) -> None:
        check_invariants(self.queues[index])
        problem = mismatch(self.queues[index], self.models[index], self.pool)
        assert problem is None, f"checked queue {index}: {problem}"

    # ---- what a correct caller does

    @rule(index=st.integers(0, 1))
    def allocate(self, index: int) -> None:
        outcome = self.both(index, "popleft()", lambda queue: queue.popleft())
        if isinstance(outcome.result, SpecBlock):
            self.in_use.append(outcome.result)

    @precondition(lambda self: len(self.in_use) > 0)
    @rule(index=st.integers(0, 1), name=BATCH, data=st.data())
    def free(self, index: int, name: str, data: st.DataObject) -> None:
        """Free held blocks to the back (cached, LRU) or to the front (reused first)."""
        batch = _pick_distinct(data, self.in_use, "batch", min_size=1, max_size=3)
        self.both(index, f"{name}({batch!r})", lambda queue: getattr(queue, name)(batch))
        self.in_use = [block for block in self.in_use if all(block is not b for b in batch)]

    @rule(index=st.integers(0, 1), data=st.data())
    def walk_after(self, index: int, data: st.DataObject) -> None:
        """Walk queue ``index`` from a cursor of its own: None, a member, a sentinel."""
        queue = self.queues[index]
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        cursor = _pick(data, [None, head, tail, *self.models[index].blocks], "cursor")
        self.both(index, f"iter_blocks_after({cursor!r})", iterate_after(cursor, head, tail))

    @rule(index=st.integers(0, 1), data=st.data())
    def foreign_cursor(self, index: int, data: st.DataObject) -> None:
        """A cursor held by a caller or linked in the other queue: refused by the call itself."""
        queue = self.queues[index]
        other = self.queues[1 - index]
        cursors: list[Block] = [
            *self.models[1 - index].blocks,
            *self.in_use,
            other.fake_free_list_head,
            other.fake_free_list_tail,
        ]
        cursor = _pick(data, cursors, "cursor")
        walk = iterate_after(cursor, queue.fake_free_list_head, queue.fake_free_list_tail)
        outcome = self.both(index, f"iter_blocks_after({cursor!r})", walk)
        assert isinstance(outcome.error, NotInQueueError)

    @rule(source=st.integers(0, 1), data=st.data())
    def move_hit(self, source: int, data: st.DataObject) -> None:
        if not self.models[source]:
            return
        block = _pick(data, self.models[source].blocks, "block")
        self.both(source, f"remove({block!r})", lambda queue: queue.remove(block))
        self.both(1 - source, f"append({block!r})", lambda queue: queue.append(block))

    @rule(source=st.integers(0, 1), data=st.data())
    def move_run(self, source: int, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, len(self.models[source])), label="n")
        outcome = self.both(source, f"popleft_n({n})", lambda queue: queue.popleft_n(n))
        assert isinstance(outcome.result, list)
        run: list[SpecBlock] = outcome.result
        name = data.draw(BATCH, label="batch operation")
        self.both(1 - source, f"{name}({run!r})", lambda queue: getattr(queue, name)(run))

    # ---- what a buggy caller does: each misuse is refused by the call that makes it

    @rule(index=st.integers(0, 1), data=st.data())
    def foreign_remove(self, index: int, data: st.DataObject) -> None:
        """Remove from one queue a block that sits in the other: NotInQueueError, both unchanged."""
        other = self.models[1 - index]
        if not other:
            return
        block = _pick(data, other.blocks, "block of the other queue")
        outcome = self.both(index, f"remove({block!r})", lambda queue: queue.remove(block))
        assert isinstance(outcome.error, NotInQueueError)

    @rule(index=st.integers(0, 1), holder=st.integers(0, 1), data=st.data())
    def double_free(self, index: int, holder: int, data: st.DataObject) -> None:
        """Free a block that is still free in some queue: AlreadyInQueueError, nothing moves."""
        if not self.models[holder]:
            return
        block = _pick(data, self.models[holder].blocks, "block")
        outcome = self.both(index, f"append({block!r})", lambda queue: queue.append(block))
        assert isinstance(outcome.error, AlreadyInQueueError)
        batch = [*self.in_use[:1], block]
        for name in ("append_n", "prepend_n"):
            outcome = self.both(index, f"{name}({batch!r})", methodcaller(name, batch))
            assert isinstance(outcome.error, AlreadyInQueueError)

    @rule(index=st.integers(0, 1), data=st.data())
    def free_sentinel(self, index: int, data: st.DataObject) -> None:
        """Free a sentinel of either queue, alone or in a batch: AlreadyInQueueError."""
        ends = [end for q in self.queues for end in (q.fake_free_list_head, q.fake_free_list_tail)]
        sentinel = _pick(data, ends, "sentinel")
        batch = [*self.in_use[:1], sentinel]
        for name, argument in (("append", sentinel), ("append_n", batch), ("prepend_n", batch)):
            outcome = self.both(index, f"{name}({argument!r})", methodcaller(name, argument))
            assert isinstance(outcome.error, AlreadyInQueueError)

    @rule(index=st.integers(0, 1), data=st.data())
    def popleft_n_out_of_range(self, index: int, data: st.DataObject) -> None:
        """A negative count or more than the queue holds: refused, nothing moves."""
        size = len(self.models[index])
        n = data.draw(st.one_of(st.integers(-3, -1), st.integers(size + 1, size + 3)), label="n")
        outcome = self.both(index, f"popleft_n({n})", methodcaller("popleft_n", n))
        assert outcome.error is not None

    @rule(data=st.data(), as_iterator=st.booleans())
    def construct_with_member(self, data: st.DataObject, as_iterator: bool) -> None:
        """Build a checked queue from held blocks and, maybe, a block free in one of the queues."""
        batch = _held_and_maybe_free(data, self.in_use, self.models, 2)
        construct_and_empty(self.checked_type, batch, as_iterator, self.membership, self.pool)

    @rule(data=st.data())
    def corrupt_any_link(self, data: st.DataObject) -> None:
        """Outside code writes a wrong link into queue 0; its next checked operation raises."""
        queue = self.queues[0]
        nodes: list[Block] = [queue.fake_free_list_head, *self.models[0].blocks]
        nodes.append(queue.fake_free_list_tail)
        node = _pick(data, nodes, "node")
        side = data.draw(st.sampled_from(["prev_free_block", "next_free_block"]), label="side")
        self.damage_then_operate(0, [(node, side)], data)

    @precondition(lambda self: len(self.models[1]) > 0)
    @rule(data=st.data())
    def corrupt_front_then_popleft(self, data: st.DataObject) -> None:
        """Damage a link next to the front of queue 1; popleft meets it in O(1) and raises."""
        queue, blocks = self.queues[1], self.models[1].blocks
        links: list[Link] = [
            (queue.fake_free_list_head, "next_free_block"),
            (blocks[0], "prev_free_block"),
            (blocks[0], "next_free_block"),
        ]
        if len(blocks) > 1:
            links.append((blocks[1], "prev_free_block"))
        self.damage_then_operate(1, [_pick(data, links, "link")], data, "popleft")

    @rule(data=st.data())
    def corrupt_back_then_append(self, data: st.DataObject) -> None:
        """Damage a link at the back of queue 1; append meets it in O(1) and raises."""
        queue, blocks = self.queues[1], self.models[1].blocks
        links: list[Link] = [
            (queue.fake_free_list_tail, "prev_free_block"),
            (queue.fake_free_list_tail, "next_free_block"),
        ]
        if blocks:
            links.append((blocks[-1], "next_free_block"))
        self.damage_then_operate(1, [_pick(data, links, "link")], data, "append")

    @precondition(lambda self: len(self.models[1]) > 0)
    @rule(data=st.data())
    def corrupt_front_then_prepend_n(self, data: st.DataObject) -> None:
        """Damage a link at the front of queue 1; prepend_n meets it in O(1) and raises."""
        queue, blocks = self.queues[1], self.models[1].blocks
        links: list[Link] = [
            (queue.fake_free_list_head, "prev_free_block"),
            (queue.fake_free_list_head, "next_free_block"),
            (blocks[0], "prev_free_block"),
        ]
        spare = self.in_use[:1]
        self.damage_then_operate(
            1, [_pick(data, links, "link")], data, "prepend_n", lambda q: q.prepend_n(spare)
        )

    @precondition(lambda self: len(self.models[1]) > 0)
    @rule(data=st.data())
    def corrupt_around_then_remove(self, data: st.DataObject) -> None:
        """Damage a link around a block of queue 1; remove of that block meets it and raises."""
        blocks = self.models[1].blocks
        at = data.draw(st.integers(0, len(blocks) - 1), label="position")
        queue = self.queues[1]
        before = blocks[at - 1] if at > 0 else queue.fake_free_list_head
        after = blocks[at + 1] if at + 1 < len(blocks) else queue.fake_free_list_tail
        links: list[Link] = [
            (blocks[at], "prev_free_block"),
            (blocks[at], "next_free_block"),
            (before, "next_free_block"),
            (after, "prev_free_block"),
        ]
        target = blocks[at]
        self.damage_then_operate(
            1, [_pick(data, links, "link")], data, "remove", lambda q: q.remove(target)
        )

    def damage_then_operate(
        self,
        index: int,
        links: list[Link],
        data: st.DataObject,
        operation: str | None = None,
        call: Callable[[Any], object] | None = None,
    ) -> None:
        """Write a wrong value into each link, run one operation, expect it caught, undo."""
        saved = [(node, side, getattr(node, side)) for node, side in links]
        others = self.queues[1 - index]
        candidates: list[Block | None] = [
            None,
            *self.pool,
            others.fake_free_list_head,
            others.fake_free_list_tail,
            self.queues[index].fake_free_list_head,
            self.queues[index].fake_free_list_tail,
        ]
        for node, side, old in saved:
            wrong = [value for value in candidates if value is not old]
            setattr(node, side, _pick(data, wrong, f"value for {side}"))
        if call is None:
            call = self.checked_operation(data, operation)
        self.caught(index, operation or "the next operation", call)
        for node, side, old in reversed(saved):
            setattr(node, side, old)
        self.healthy(index)

    def checked_operation(
        self, data: st.DataObject, operation: str | None
    ) -> Callable[[Any], object]:
        """An operation that meets damage anywhere in a fully checked queue (or ``operation``)."""
        spare = self.in_use[0] if self.in_use else SpecBlock(-1)
        calls: dict[str, Callable[[Any], object]] = {
            "popleft": lambda queue: queue.popleft(),
            "popleft_n": lambda queue: queue.popleft_n(0),
            "append": lambda queue: queue.append(spare),
            "append_n": lambda queue: queue.append_n([]),
            "prepend_n": lambda queue: queue.prepend_n([]),
            "get_all_free_blocks": lambda queue: queue.get_all_free_blocks(),
            "iter": list,
            "iter_blocks_after": lambda queue: list(queue.iter_blocks_after(None)),
        }
        name = operation or data.draw(st.sampled_from(sorted(calls)), label="next operation")
        return calls[name]

    @rule(index=st.integers(0, 1), drift=st.sampled_from([-2, -1, 1, 2]), data=st.data())
    def count_drift(self, index: int, drift: int, data: st.DataObject) -> None:
        """Outside code changes ``num_free_blocks``; the very next operation, even len(), raises."""
        queue = self.queues[index]
        queue.num_free_blocks += drift
        calls: list[Callable[[Any], object]] = [
            len,
            bool,
            lambda q: q.popleft(),
            lambda q: q.append_n([]),
            lambda q: q.prepend_n([]),
            lambda q: q.popleft_n(0),
            lambda q: q.iter_blocks_after(None),
        ]
        self.caught(index, "the next operation", _pick(data, calls, "next operation"))
        queue.num_free_blocks -= drift
        self.healthy(index)

    @precondition(lambda self: len(self.in_use) > 0 and len(self.models[1]) > 0)
    @rule(data=st.data())
    def splice_in_from_outside(self, data: st.DataObject) -> None:
        """Outside code links a held block into queue 1 by hand; removing it is refused."""
        block = _pick(data, self.in_use, "held block")
        blocks = self.models[1].blocks
        before = _pick(data, [self.queues[1].fake_free_list_head, *blocks[:-1]], "splice after")
        after = before.next_free_block
        assert after is not None
        before.next_free_block = block
        block.prev_free_block, block.next_free_block = before, after
        after.prev_free_block = block
        self.caught(1, f"remove({block!r})", lambda queue: queue.remove(block))
        before.next_free_block, after.prev_free_block = after, before
        block.prev_free_block = block.next_free_block = None
        self.healthy(1)

    @precondition(lambda self: len(self.models[0]) > 0)
    @rule(data=st.data())
    def clear_then_free_again(self, data: st.DataObject) -> None:
        """Outside code clears a free block's links, then frees it again: refused."""
        queue, blocks = self.queues[0], self.models[0].blocks
        block = _pick(data, blocks, "block")
        saved = block.prev_free_block, block.next_free_block
        block.prev_free_block = block.next_free_block = None
        self.caught(0, f"append({block!r})", lambda q: q.append(block))
        block.prev_free_block, block.next_free_block = saved
        self.healthy(0)
        assert queue.get_all_free_blocks() is not None

    @rule(index=st.integers(0, 1), data=st.data())
    def contains(self, index: int, data: st.DataObject) -> None:
        """Check mode's ``in`` of any block of the pool: by identity, as the model says."""
        block = _pick(data, self.pool, "block")
        self.both(index, f"{block!r} in queue", lambda target: block in target)

    @rule()
    def copy_of_a_subclass(self) -> None:
        """A deep copy of a user's subclass of check mode keeps the class and the period."""
        subclass: type[CheckedFreeBlockQueue[SpecBlock]] = type(
            "UserCheckedQueue", (self.checked_type,), {"__slots__": ()}
        )
        original = subclass([SpecBlock(n) for n in range(3)], full_check_every=5)
        twin = copy.deepcopy(original)
        assert type(twin) is subclass, f"a deep copy of a {subclass.__name__} is a {type(twin)}"
        assert twin.full_check_every == 5
        assert [block.number for block in twin.get_all_free_blocks()] == [0, 1, 2]

    @invariant()
    def queues_match_models(self) -> None:
        for index in range(len(self.queues)):
            self.healthy(index)


TestCheckedQueueMisuse = CheckedQueueMisuse.TestCase


# --------------------------------------------------------------------------- machine 3


class SharedPool(RuleBasedStateMachine):
    """Several queues over one pool of blocks; blocks move between them and out to callers."""

    queue_type: ClassVar[type[FreeBlockQueue[Any]]] = FreeBlockQueue
    QUEUES: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.pool: list[SpecBlock] = []
        self.membership = Membership()
        self.queues: list[FreeBlockQueue[SpecBlock]] = []
        self.models: list[ListModel[SpecBlock]] = []
        # Blocks handed out to callers (in use, so detached): the rest of the pool.
        self.in_use: list[SpecBlock] = []

    @initialize(sizes=st.lists(st.integers(0, 4), min_size=QUEUES, max_size=QUEUES))
    def build(self, sizes: list[int]) -> None:
        """Split a fresh pool between the queues, each built with its constructor."""
        for size in sizes:
            blocks = [SpecBlock(len(self.pool) + offset) for offset in range(size)]
            self.pool.extend(blocks)
            self.queues.append(self.queue_type(blocks))
            self.models.append(ListModel(blocks, membership=self.membership))
        extra = [SpecBlock(len(self.pool) + offset) for offset in range(2)]
        self.pool.extend(extra)
        self.in_use.extend(extra)

    def both(self, index: int, label: str, call: Callable[[Any], object]) -> Outcome:
        return _agree(
            f"queue {index}: {label}",
            lambda: call(self.queues[index]),
            lambda: call(self.models[index]),
        )

    def refused(self, index: int, label: str, call: Callable[[Any], object]) -> None:
        """A misuse: the model refuses it, so the queue must refuse it the same way."""
        assert self.both(index, label, call).error is not None, f"{label} was accepted"

    def queue_index(self) -> st.SearchStrategy[int]:
        return st.integers(0, self.QUEUES - 1)

    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        """Hand the front block of a queue out to a caller (EmptyQueueError if there is none)."""
        index = data.draw(self.queue_index(), label="from")
        outcome = self.both(index, "popleft()", lambda target: target.popleft())
        if isinstance(outcome.result, SpecBlock):
            self.in_use.append(outcome.result)

    @rule(data=st.data())
    def allocate_n(self, data: st.DataObject) -> None:
        index = data.draw(self.queue_index(), label="from")
        n = data.draw(st.integers(-2, len(self.models[index]) + 1), label="n")
        outcome = self.both(index, f"popleft_n({n})", lambda target: target.popleft_n(n))
        if isinstance(outcome.result, list):
            self.in_use.extend(outcome.result)

    @precondition(lambda self: len(self.in_use) > 0)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        """A caller frees a block it holds into some queue."""
        index = data.draw(self.queue_index(), label="into")
        block = _pick(data, self.in_use, "block")
        self.both(index, f"append({block!r})", lambda target: target.append(block))
        self.in_use = [held for held in self.in_use if held is not block]

    @rule(data=st.data(), reverse=st.booleans())
    def move_run(self, data: st.DataObject, reverse: bool) -> None:
        """Pop a run from one queue and append it, maybe reversed, to another."""
        source = data.draw(self.queue_index(), label="from")
        target = data.draw(self.queue_index(), label="to")
        n = data.draw(st.integers(0, len(self.models[source])), label="n")
        outcome = self.both(source, f"popleft_n({n})", lambda queue: queue.popleft_n(n))
        assert isinstance(outcome.result, list)
        run: list[SpecBlock] = outcome.result
        if reverse:
            run.reverse()
        name = data.draw(BATCH, label="batch operation")
        self.both(target, f"{name}({run!r})", lambda queue: getattr(queue, name)(run))

    @rule(data=st.data())
    def move_hit(self, data: st.DataObject) -> None:
        """A prefix-cache hit: remove a block from the middle of one queue, free it to another."""
        source = data.draw(self.queue_index(), label="from")
        if not self.models[source]:
            return
        block = _pick(data, self.models[source].blocks, "block")
        target = data.draw(self.queue_index(), label="to")
        self.both(source, f"remove({block!r})", lambda queue: queue.remove(block))
        self.both(target, f"append({block!r})", lambda queue: queue.append(block))

    @rule(data=st.data())
    def double_free(self, data: st.DataObject) -> None:
        """Free a block that sits in some queue into any queue: refused, nothing moves."""
        holders = [index for index, model in enumerate(self.models) if model]
        if not holders:
            return
        holder = _pick(data, holders, "held by")
        block = _pick(data, self.models[holder].blocks, "block")
        target = data.draw(self.queue_index(), label="into")
        batch = [*self.in_use[:1], block]
        self.refused(target, f"append({block!r})", lambda queue: queue.append(block))
        self.refused(target, f"append_n({batch!r})", lambda queue: queue.append_n(batch))
        self.refused(target, f"prepend_n({batch!r})", lambda queue: queue.prepend_n(batch))

    @precondition(lambda self: len(self.in_use) > 0)
    @rule(data=st.data())
    def free_to_front(self, data: st.DataObject) -> None:
        """A caller frees held blocks to the front of some queue, to be reused first."""
        index = data.draw(self.queue_index(), label="into")
        batch = _pick_distinct(data, self.in_use, "batch", min_size=1, max_size=3)
        self.both(index, f"prepend_n({batch!r})", lambda queue: queue.prepend_n(batch))
        self.in_use = [held for held in self.in_use if all(held is not b for b in batch)]

    @rule(data=st.data())
    def walk_after(self, data: st.DataObject) -> None:
        """Walk a queue from None, one of its blocks, its sentinels or a held block."""
        index = data.draw(self.queue_index(), label="queue")
        queue = self.queues[index]
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        cursors = [None, head, tail, *self.models[index].blocks, *self.in_use, *self.sentinels()]
        cursor = _pick(data, cursors, "cursor")
        self.both(index, f"iter_blocks_after({cursor!r})", iterate_after(cursor, head, tail))

    def sentinels(self) -> list[Block]:
        """Every queue's two sentinels."""
        return [end for q in self.queues for end in (q.fake_free_list_head, q.fake_free_list_tail)]

    @rule(data=st.data(), name=st.sampled_from(["append", "append_n", "prepend_n"]))
    def free_sentinel(self, data: st.DataObject, name: str) -> None:
        """A caller frees a sentinel of some queue, alone or in a batch: refused, nothing moves."""
        index = data.draw(self.queue_index(), label="into")
        sentinel = _pick(data, self.sentinels(), "sentinel")
        argument: object = sentinel if name == "append" else [*self.in_use[:1], sentinel]
        self.refused(index, f"{name}({argument!r})", methodcaller(name, argument))

    @rule(data=st.data(), as_iterator=st.booleans())
    def construct_from_held(self, data: st.DataObject, as_iterator: bool) -> None:
        """Build one more queue from held blocks, maybe with one still free; then empty it."""
        batch = _held_and_maybe_free(data, self.in_use, self.models, 3)
        construct_and_empty(self.queue_type, batch, as_iterator, self.membership, self.pool)

    @precondition(lambda self: len(self.in_use) > 0)
    @rule(data=st.data())
    def remove_in_use(self, data: st.DataObject) -> None:
        """Remove a block a caller holds: it is in no queue, so NotInQueueError."""
        index = data.draw(self.queue_index(), label="from")
        block = _pick(data, self.in_use, "block")
        self.refused(index, f"remove({block!r})", lambda queue: queue.remove(block))

    @rule(data=st.data())
    def remove_sentinel(self, data: st.DataObject) -> None:
        index = data.draw(self.queue_index(), label="from")
        owner = data.draw(self.queue_index(), label="sentinel of")
        ends = [self.queues[owner].fake_free_list_head, self.queues[owner].fake_free_list_tail]
        sentinel = _pick(data, ends, "sentinel")
        self.refused(index, f"remove({sentinel!r})", lambda queue: queue.remove(sentinel))

    @rule(data=st.data())
    def contains(self, data: st.DataObject) -> None:
        index = data.draw(self.queue_index(), label="queue")
        block = _pick(data, self.pool, "block")
        self.both(index, f"{block!r} in queue", lambda queue: block in queue)

    @invariant()
    def pool_is_partitioned(self) -> None:
        """Every block of the pool is in exactly one queue or held by a caller."""
        for queue, model in zip(self.queues, self.models, strict=True):
            check_invariants(queue)
            problem = mismatch(queue, model, self.pool)
            assert problem is None, problem
        seen: dict[int, int] = {}
        for queue in self.queues:
            for block in queue:
                seen[id(block)] = seen.get(id(block), 0) + 1
        for block in self.in_use:
            assert block.prev_free_block is None, f"{block!r} is in use but linked"
            assert block.next_free_block is None, f"{block!r} is in use but linked"
            seen[id(block)] = seen.get(id(block), 0) + 1
        lost = [block for block in self.pool if id(block) not in seen]
        duplicated = [block for block in self.pool if seen.get(id(block), 0) > 1]
        assert not lost, f"lost from every queue: {lost!r}"
        assert not duplicated, f"in two places at once: {duplicated!r}"
        assert len(seen) == len(self.pool), "a block from outside the pool got in"


TestSharedPool = SharedPool.TestCase


# ----------------------------------------------------------------- planted bugs


def _machine_for(
    machine: type[RuleBasedStateMachine], queue_type: type[FreeBlockQueue[Any]]
) -> type[RuleBasedStateMachine]:
    return type(
        f"{machine.__name__}On{queue_type.__name__}", (machine,), {"queue_type": queue_type}
    )


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_queue_machine_catches_planted_bug(bug: str) -> None:
    """The queue-against-model machine fails on every planted bug."""
    machine = _machine_for(QueueAgainstModel, PLANTED_BUGS[bug])
    with pytest.raises((AssertionError, InvariantViolation)):
        run_machine(machine, settings=BUG_HUNT)


# The planted bugs that cannot show through check mode, by its design (each with the reason in
# specs.bug_matrix.MISSES): it answers ``in`` from its own membership without calling the base
# ``__contains__``, its ``remove`` refuses a non-member (a sentinel included) before the base
# ``remove`` runs, and its ``__iter__`` and ``iter_blocks_after`` check the cursor and walk the
# links themselves, without the base methods.
CHECK_MODE_BUGS = sorted(
    set(PLANTED_BUGS)
    - {bug for layer, bug in MISSES if layer == "check mode" and (layer, bug) not in BUDGET}
)


@pytest.mark.parametrize("bug", CHECK_MODE_BUGS)
def test_checked_machine_catches_planted_bug(bug: str) -> None:
    """Check mode over each planted bug (its super() calls reach the bug) fails the machine."""
    machine = type(
        f"CheckedQueueMisuseOver{PLANTED_BUGS[bug].__name__}",
        (CheckedQueueMisuse,),
        {"base_type": PLANTED_BUGS[bug]},
    )
    with pytest.raises(AssertionError):
        run_machine(machine, settings=BUG_HUNT)


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_shared_pool_machine_catches_planted_bug(bug: str) -> None:
    """The shared-pool machine fails on every planted bug."""
    machine = _machine_for(SharedPool, PLANTED_BUGS[bug])
    with pytest.raises((AssertionError, InvariantViolation)):
        run_machine(machine, settings=BUG_HUNT)


def test_planted_bugs_are_not_the_real_queue() -> None:
    """Each planted bug overrides a method of the production queue, so a caught bug is real."""
    methods = {name for name, value in vars(FreeBlockQueue).items() if callable(value)}
    for name, bug in PLANTED_BUGS.items():
        assert issubclass(bug, FreeBlockQueue), name
        assert set(vars(bug)) & methods, name
