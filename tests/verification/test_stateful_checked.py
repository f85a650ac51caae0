"""Hypothesis stateful machine: a buggy caller of check mode, caught at every misuse.

:class:`CheckedQueueMisuse` plays a buggy caller of ``CheckedFreeBlockQueue``: foreign
removes, double frees, links written from outside, a drifted count. Each must be caught at
the operation that meets it, with nothing changed.

The machine is also run over each planted bug that check mode can show and must fail.
What the machines share is in ``stateful_support.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from operator import methodcaller
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specs.bug_matrix import MISSED_BY_BUDGET as BUDGET
from specs.bug_matrix import MISSES
from specs.model import ListModel, Membership, SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import Outcome, iterate_after, mismatch, outcome_of
from tests.verification.stateful_support import (
    BATCH,
    BUG_HUNT,
    _agree,
    _held_and_maybe_free,
    _pick,
    _pick_distinct,
    construct_and_empty,
    run_machine,
)
from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import AlreadyInQueueError, InvariantViolation, NotInQueueError
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

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


# ----------------------------------------------------------------- planted bugs


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
