"""Hypothesis stateful machine: several queues sharing one pool never lose or duplicate a block.

:class:`SharedPool` moves blocks between several queues of one pool; the union of the
queues and the blocks handed out is always the whole pool, each block exactly once.

The machine is also run against each planted bug and must fail. What the machines share is
in ``stateful_support.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import methodcaller
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specs.model import ListModel, Membership, SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import Outcome, iterate_after, mismatch
from tests.verification.stateful_support import (
    BATCH,
    BUG_HUNT,
    _agree,
    _held_and_maybe_free,
    _machine_for,
    _pick,
    _pick_distinct,
    construct_and_empty,
    run_machine,
)
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue


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


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_shared_pool_machine_catches_planted_bug(bug: str) -> None:
    """The shared-pool machine fails on every planted bug."""
    machine = _machine_for(SharedPool, PLANTED_BUGS[bug])
    with pytest.raises((AssertionError, InvariantViolation)):
        run_machine(machine, settings=BUG_HUNT)
