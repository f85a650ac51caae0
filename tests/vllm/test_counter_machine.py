"""vLLM's counter in check mode, against a model: outside writes offset it, damage is still damage.

vLLM's own tests write ``free_block_queue.num_free_blocks`` to fake a full pool, then write
it back. The queues the plugin installs in ``checked`` and ``trace`` mode take such a write
for vLLM's counter: an offset on what vLLM reads, moved by every link as vLLM's counter would
be, cleared when the true count is written back, never reported as damage; this package's
own code sees the true count. The machine interleaves those writes and reads with every
operation of the queue, refused ones included, and with damage to the links, against a
model that says what each read must give and what check mode must report: nothing while the
links are sound, an ``InvariantViolation`` from the full check once one is damaged. No vLLM
is needed: the blocks are the package's own.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from verified_queue import Block, InvariantViolation, QueueError
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

POOL = 8


class CounterMachine(RuleBasedStateMachine):
    """One vLLM-mode queue and a list model with the offset vLLM's reads must show."""

    queue_class: type[VllmCheckedFreeBlockQueue] | type[VllmTracedFreeBlockQueue]

    def __init__(self) -> None:
        super().__init__()
        self.pool = [Block() for _ in range(POOL)]
        self.model: list[Block] = self.pool[:4]
        self.queue = self.queue_class(list(self.model))
        self.offset = 0  # what an outside read adds to the true count
        self.damaged: tuple[Block, str, object] | None = None  # a link written by hand, to undo

    def detached(self) -> list[Block]:
        return [block for block in self.pool if all(block is not b for b in self.model)]

    def refused_unchanged(self, call: Callable[[], object], error: type[Exception]) -> None:
        """``call`` must raise ``error`` and leave the queue and the offset as they were."""
        before = self.queue.get_all_free_blocks()
        with pytest.raises(error):
            call()
        assert self.queue.get_all_free_blocks() == before
        assert self.queue.count_offset == self.offset

    # ---------------------------------------------------------------- vLLM's counter

    @precondition(lambda self: self.damaged is None)
    @rule(value=st.integers(0, 2 * POOL))
    def write_from_outside(self, value: int) -> None:
        """vLLM's test fakes a count: an offset, never damage."""
        self.queue.num_free_blocks = value
        self.offset = value - len(self.model)

    @precondition(lambda self: self.damaged is None)
    @rule()
    def write_the_true_count_back(self) -> None:
        self.queue.num_free_blocks = len(self.model)
        self.offset = 0

    @precondition(lambda self: self.damaged is None)
    @rule(value=st.one_of(st.integers(-3, -1), st.just(True), st.just(2.0), st.none()))
    def write_what_is_no_count(self, value: object) -> None:
        """Not an int >= 0: refused with TypeError, the counter as it was."""

        def write() -> None:
            self.queue.num_free_blocks = value

        self.refused_unchanged(write, TypeError)

    # ---------------------------------------------------------------- the queue's operations

    @precondition(lambda self: self.damaged is None)
    @rule(count=st.integers(0, POOL))
    def popleft_n(self, count: int) -> None:
        if count > len(self.model):  # the true count decides, whatever vLLM reads
            self.refused_unchanged(lambda: self.queue.popleft_n(count), QueueError)
            return
        assert self.queue.popleft_n(count) == self.model[:count]
        del self.model[:count]

    @precondition(lambda self: self.damaged is None and bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        block = data.draw(st.sampled_from(self.model))
        self.queue.remove(block)
        self.model.remove(block)

    @precondition(lambda self: self.damaged is None)
    @rule(data=st.data(), front=st.booleans())
    def link(self, data: st.DataObject, front: bool) -> None:
        """append_n or prepend_n of detached blocks, or of a linked one: refused whole."""
        detached = self.detached()
        batch: list[Block] = (
            data.draw(st.lists(st.sampled_from(detached), unique=True)) if detached else []
        )
        if bool(self.model) and data.draw(st.booleans(), label="with a linked block"):
            batch = [*batch, data.draw(st.sampled_from(self.model))]
            call = self.queue.prepend_n if front else self.queue.append_n
            self.refused_unchanged(lambda: call(batch), QueueError)
            return
        if front:
            self.queue.prepend_n(batch)
            self.model[:0] = batch
        else:
            self.queue.append_n(batch)
            self.model.extend(batch)

    # ---------------------------------------------------------------- damage

    @precondition(lambda self: self.damaged is None and bool(self.model))
    @rule(data=st.data(), side=st.sampled_from(["prev_free_block", "next_free_block"]))
    def damage_a_link(self, data: st.DataObject, side: str) -> None:
        """A link written by hand: the full check must report it, whatever the counter says."""
        block = data.draw(st.sampled_from(self.model))
        old = getattr(block, side)
        wrong = data.draw(st.sampled_from([None, *[b for b in self.pool if b is not old]]))
        setattr(block, side, wrong)
        self.damaged = (block, side, old)
        with pytest.raises(InvariantViolation):
            self.queue.full_check()

    @precondition(lambda self: self.damaged is not None)
    @rule()
    def repair(self) -> None:
        assert self.damaged is not None
        block, side, old = self.damaged
        setattr(block, side, old)
        self.damaged = None

    # ---------------------------------------------------------------- what must hold

    @invariant()
    def reads_follow_the_model(self) -> None:
        # An outside read (this test is outside the package): the true count plus the offset.
        assert self.queue.num_free_blocks == len(self.model) + self.offset
        assert self.queue.count_offset == self.offset
        if self.damaged is None:
            # The package's own reads see the true count, and a sound queue reports nothing.
            assert len(self.queue) == len(self.model)
            self.queue.full_check()
            assert self.queue.get_all_free_blocks() == self.model


@pytest.mark.parametrize(
    "queue_class", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue], ids=["checked", "trace"]
)
def test_the_counter_follows_the_model(
    queue_class: type[VllmCheckedFreeBlockQueue] | type[VllmTracedFreeBlockQueue],
) -> None:
    """Every read, write and operation as the model says; damage reported, writes never."""
    machine = type("Counter", (CounterMachine,), {"queue_class": queue_class})
    run_state_machine_as_test(machine)
