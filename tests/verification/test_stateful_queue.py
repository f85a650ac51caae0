"""Hypothesis stateful machines: the queue against the list model, and across changes.

:class:`QueueAgainstModel` drives a :class:`FreeBlockQueue` and a :class:`ListModel` with
every operation and every rejected misuse; results, errors and the whole link structure
must agree after every step. :class:`QueueAcrossChanges` adds walks held across a change
and copies of a user's subclass.

Each machine is also run against each planted bug and must fail. What the stateful machines
share is in ``stateful_support.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specs.model import ListModel, SpecBlock, position
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import Outcome, iterate_after, mismatch, outcome_difference, outcome_of
from tests.verification.stateful_support import (
    BATCH,
    BUG_HUNT,
    _agree,
    _machine_for,
    _pick,
    _pick_distinct,
    construct_and_empty,
    run_machine,
)
from verified_queue._messages import changed_during_iteration
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue


class BatchInterrupted(Exception):
    """Raised part-way through a batch by a caller's failing generator."""


def _interrupted(blocks: Sequence[Block]) -> Iterator[Block]:
    yield from blocks
    raise BatchInterrupted("the caller's generator failed")


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


# ----------------------------------------------------------------- planted bugs


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_queue_machine_catches_planted_bug(bug: str) -> None:
    """The queue-against-model machine fails on every planted bug."""
    machine = _machine_for(QueueAgainstModel, PLANTED_BUGS[bug])
    with pytest.raises((AssertionError, InvariantViolation)):
        run_machine(machine, settings=BUG_HUNT)


def test_planted_bugs_are_not_the_real_queue() -> None:
    """Each planted bug overrides a method of the production queue, so a caught bug is real."""
    methods = {name for name, value in vars(FreeBlockQueue).items() if callable(value)}
    for name, bug in PLANTED_BUGS.items():
        assert issubclass(bug, FreeBlockQueue), name
        assert set(vars(bug)) & methods, name
