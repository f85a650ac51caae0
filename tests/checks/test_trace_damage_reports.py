"""The trace level's reports of damage, and of blocks whose records it missed.

``TracedFreeBlockQueue`` explains damage found by a check with the damaged blocks'
records: a member whose neighbours do not link back, and a block that left but is
still linked next to this queue's nodes (a deleted sentinel matches nothing, a
deleted link slot reads as no link), at most ``DAMAGED_SHOWN`` of them. A call cut
short after it linked its block (the fault contract's "as after") leaves the trace
without that record: a double free then says the free was not recorded, a block
that sits in its queue is not called damaged, and another traced queue without a
record adds no line. On a queue damaged beyond what the trace can read, the error
keeps its own class and message and says why the history is missing.

``test_trace.py`` pins the common reports; these pin the edges of
``TracedFreeBlockQueue._damaged_blocks``, ``_block_lines`` and ``_explain``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pytest

from specs.interrupts import Faults, Interrupted, at_checkpoints
from specs.trace_model import DAMAGED_SHOWN
from tests.checks.support import writes
from tests.checks.test_trace import WeakBlock, history_of, shown
from verified_queue import AlreadyInQueueError, Block, InvariantViolation
from verified_queue.invariants import describe
from verified_queue.traced import TracedFreeBlockQueue

Queue = TracedFreeBlockQueue[Block]


def damage_report(queue: Queue, check: Callable[[], object]) -> tuple[set[str], list[str]]:
    """The blocks the report of ``check()``'s violation names as damaged, and its lines."""
    with pytest.raises(InvariantViolation) as caught:
        check()
    history = history_of(caught.value)
    named = {record.block for record in history.blocks}
    damaged_lines = [line for line in history.lines if line.startswith("damaged ")]
    assert len(damaged_lines) == len(history.blocks), history.lines
    assert (
        history.lines[-len(history.recent) - 1]
        == f"last {len(history.recent)} operations, oldest first:"
    )
    assert len(queue.recent_operations()) == len(history.recent)
    return named, damaged_lines


def count_written_from_outside(queue: Queue) -> Callable[[], object]:
    """Damage the count, which any call meets: ``len(queue)`` then raises I2."""
    queue.num_free_blocks += 1
    return lambda: len(queue)


def damaged_line(queue: Queue, block: Block) -> str:
    """The report line of ``block``, damaged, from the records the queue keeps of it."""
    history = queue.history_of(block)
    assert history is not None
    assert history.linked is not None
    assert history.unlinked is not None
    return (
        f"damaged {describe(block)}: last linked by {history.linked}; "
        f"last unlinked by {history.unlinked}"
    )


def append_cut_short(queue: Queue, block: Block) -> None:
    """``queue.append(block)``, interrupted once it linked, before the trace recorded it.

    The fault contract's "as after": the block is in the queue; the interrupt lands at
    the start of the trace level's ``_linked``, so the queue has no record of the link.
    """
    faults = Faults(at=frozenset({1}))
    with (
        pytest.raises(Interrupted),
        at_checkpoints(faults, {TracedFreeBlockQueue._linked.__code__}),
    ):
        queue.append(block)
    assert faults.fired
    assert block in queue


# ----------------------------------------------------------- blocks that left, linked again


#: The one link outside code writes on a block that left: which, and to what node.
HALF_LINKS: dict[str, Callable[[Queue, list[Block]], tuple[str, object]]] = {
    "prev to the head": lambda queue, _blocks: ("prev_free_block", queue.fake_free_list_head),
    "prev to a member": lambda _queue, blocks: ("prev_free_block", blocks[1]),
    "next to the tail": lambda queue, _blocks: ("next_free_block", queue.fake_free_list_tail),
    "next to a member": lambda _queue, blocks: ("next_free_block", blocks[3]),
}


@pytest.mark.parametrize("block_type", [Block, WeakBlock], ids=["slotted", "weak"])
@pytest.mark.parametrize("link", HALF_LINKS)
def test_a_block_that_left_with_one_link_into_the_queue_is_named_damaged(
    link: str, block_type: type[Block]
) -> None:
    """A block that left, one of its links written back to this queue's node: named, alone.

    Either link counts, to a sentinel or to a member, for a block held by its record
    (slotted) or by a weak reference; the members, untouched, are not named.
    """
    blocks = [block_type() for _ in range(4)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    departed = blocks[2]
    queue.remove(departed)
    side, node = HALF_LINKS[link](queue, blocks)
    setattr(departed, side, node)
    named, lines = damage_report(queue, count_written_from_outside(queue))
    assert named == {describe(departed)}
    assert lines == [damaged_line(queue, departed)]


def test_at_most_damaged_shown_blocks_that_left_are_named() -> None:
    """Five blocks that left, each linked back by hand: the report names four of them."""
    blocks = [Block() for _ in range(7)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    departed = blocks[1:6]
    for block in departed:
        queue.remove(block)
        block.prev_free_block = queue.fake_free_list_head
    named, lines = damage_report(queue, count_written_from_outside(queue))
    assert len(named) == DAMAGED_SHOWN
    assert named <= {describe(block) for block in departed}
    assert sorted(lines) == sorted(
        damaged_line(queue, block) for block in departed if describe(block) in named
    )


# --------------------------------------------------------------------- deleted attributes


@pytest.mark.parametrize(
    ("sentinel", "departs", "beside"),
    [("fake_free_list_head", 2, 0), ("fake_free_list_tail", 0, 2)],
    ids=["head", "tail"],
)
def test_a_deleted_sentinel_matches_no_link(sentinel: str, departs: int, beside: int) -> None:
    """A sentinel deleted: the block next to it is named; a detached block that left is not."""
    blocks = [Block() for _ in range(3)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    queue.remove(blocks[departs])
    try:
        delattr(queue, sentinel)
    except (AttributeError, TypeError):
        pytest.skip("this build's queue refuses to delete a sentinel")
    named, _lines = damage_report(queue, queue.full_check)
    assert named == {describe(blocks[beside])}


@pytest.mark.parametrize(
    ("slot", "neighbour"),
    [("prev_free_block", 0), ("next_free_block", 2)],
    ids=["prev", "next"],
)
def test_a_deleted_link_slot_reads_as_no_link(slot: str, neighbour: int) -> None:
    """A member's deleted slot names it and the neighbour it no longer links back to."""
    blocks = [Block() for _ in range(3)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    try:
        delattr(blocks[1], slot)
    except (AttributeError, TypeError):
        pytest.skip("this build's blocks refuse to delete a link slot")
    named, _lines = damage_report(queue, queue.full_check)
    assert named == {describe(blocks[1]), describe(blocks[neighbour])}


@pytest.mark.parametrize("slot", ["prev_free_block", "next_free_block"])
def test_a_block_that_left_with_a_deleted_slot_is_detached(slot: str) -> None:
    """A block that left, one link slot deleted and the other unset, is no damage."""
    blocks = [Block() for _ in range(3)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    queue.remove(blocks[1])
    try:
        delattr(blocks[1], slot)
    except (AttributeError, TypeError):
        pytest.skip("this build's blocks refuse to delete a link slot")
    named, _lines = damage_report(queue, count_written_from_outside(queue))
    assert named == set()


# -------------------------------------------------------------- records the trace missed


def test_a_free_the_trace_missed_is_reported_as_not_recorded() -> None:
    """A free cut short after its link: "not recorded", then where the block was taken since.

    The block, taken from the queue and freed into a second traced queue by a call cut
    short the same way, is freed here again: neither free was recorded, so no line names
    the second queue.
    """
    block = Block()
    queue: Queue = TracedFreeBlockQueue()
    append_cut_short(queue, block)
    assert queue.history_of(block) is None
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    assert history_of(caught.value).lines[1:] == (
        "freed before by: not recorded by this queue",
        "taken since: never, the block is still in this queue",
    )
    assert queue.popleft() is block
    taken = queue.recent_operations()[-1]
    other: Queue = TracedFreeBlockQueue()
    append_cut_short(other, block)
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    history = history_of(caught.value)
    assert history.lines[1:] == (
        "freed before by: not recorded by this queue",
        f"taken since by: {taken}",
    )
    (record,) = history.blocks
    assert (record.linked, record.unlinked) == (None, taken)
    assert "linked in another traced queue" not in shown(caught.value)
    assert len(other) == 1


def test_a_block_linked_again_unrecorded_is_not_called_damaged() -> None:
    """A block that left, linked again by a call cut short, sits in the queue: not damaged.

    Its record still says it left; its links say it is the last member, linked both ways,
    so damage elsewhere (the count) names no block.
    """
    blocks = [Block() for _ in range(3)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    queue.remove(blocks[1])
    append_cut_short(queue, blocks[1])
    kept = queue.history_of(blocks[1])
    assert kept is not None
    assert kept.unlinked is not None  # the record of its departure, not replaced
    assert queue.get_all_free_blocks() == [blocks[0], blocks[2], blocks[1]]
    named, _lines = damage_report(queue, count_written_from_outside(queue))
    assert named == set()


# -------------------------------------------------------------------- beyond reading


class LookupsRaise:
    """A proxy whose every attribute lookup raises: damage the trace cannot read."""

    def __getattribute__(self, name: str) -> NoReturn:
        """Fail."""
        raise RuntimeError(f"lookup of {name}")


def test_a_queue_the_trace_cannot_read_keeps_its_error_and_says_why() -> None:
    """The tail replaced by a raising proxy: check mode's violation, and why no history follows."""
    blocks = [Block() for _ in range(3)]
    queue: Queue = TracedFreeBlockQueue(blocks)
    proxy: Any = LookupsRaise()
    if not (
        writes(queue, "fake_free_list_tail", proxy) and writes(blocks[2], "next_free_block", proxy)
    ):
        pytest.skip("this build's typed fields refuse a non-block")
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    lines = shown(caught.value).splitlines()
    assert lines[0].startswith("I1 (sentinel_linkage) broken at ")
    assert len(lines) == 2, lines
    assert lines[1].startswith(
        "  no history: the trace could not be read (RuntimeError('lookup of "
    )
    assert getattr(caught.value, "history", None) is None
