"""Check mode raises before writing, names the operation, and names sentinels at a junction."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from verified_queue import (
    Block,
    CheckedFreeBlockQueue,
    EmptyQueueError,
    InvariantViolation,
    QueueError,
    _diagnosis,
)
from verified_queue import checked as checked_module
from verified_queue.queue import FreeBlockQueue


@dataclass
class Scene:
    """A checked queue of blocks ``b0, b1, b2``, a fresh block at hand and a stray one."""

    queue: Any
    blocks: list[Block]
    new: Block = field(default_factory=Block)
    stray: Block = field(default_factory=Block)


#: Each checked operation, run on a scene.
OPERATIONS: dict[str, Callable[[Scene], object]] = {
    "popleft": lambda scene: scene.queue.popleft(),
    "popleft_n": lambda scene: scene.queue.popleft_n(2),
    "remove": lambda scene: scene.queue.remove(scene.blocks[1]),
    "append": lambda scene: scene.queue.append(scene.new),
    "append_n": lambda scene: scene.queue.append_n([scene.new]),
    "prepend_n": lambda scene: scene.queue.prepend_n([scene.new]),
}

#: Damage each operation's start-of-operation check must see, by the part of the queue it reads.
DAMAGES: dict[str, Callable[[Scene], None]] = {
    "count": lambda scene: setattr(scene.queue, "num_free_blocks", 4),
    "front": lambda scene: setattr(scene.queue.fake_free_list_head, "prev_free_block", scene.stray),
    "back": lambda scene: setattr(scene.queue.fake_free_list_tail, "next_free_block", scene.stray),
    "around": lambda scene: setattr(scene.blocks[0], "next_free_block", scene.stray),
}

#: The damages each operation reads at its start (every operation reads the count).
SEEN: dict[str, tuple[str, ...]] = {
    "popleft": ("count", "front"),
    "popleft_n": ("count", "front"),
    "remove": ("count", "around"),
    "append": ("count", "back"),
    "append_n": ("count", "back"),
    "prepend_n": ("count", "front"),
}


def snapshot(queue: Any, nodes: list[Any]) -> list[object]:
    """Every link of ``nodes`` and the queue's count and membership, by identity."""
    links = [(id(node.prev_free_block), id(node.next_free_block)) for node in nodes]
    return [*links, queue.num_free_blocks, sorted(queue._members)]


@pytest.mark.parametrize(
    ("operation", "damage"),
    [(operation, damage) for operation, seen in SEEN.items() for damage in seen],
)
def test_a_failed_start_check_writes_nothing(operation: str, damage: str) -> None:
    """A start-of-operation check that fails raises before any block or the queue changes."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    scene = Scene(queue, blocks)
    DAMAGES[damage](scene)
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *blocks, scene.new, scene.stray]
    before = snapshot(queue, nodes)
    with pytest.raises(InvariantViolation) as caught:
        OPERATIONS[operation](scene)
    assert re.match(
        rf"invariant \d \(\w+\) broken at the start of {operation}\(\)[:,] ", str(caught.value)
    )
    assert snapshot(queue, nodes) == before


@pytest.mark.parametrize("operation", ["append", "append_n", "prepend_n"])
def test_relinking_a_cleared_member_writes_nothing(operation: str) -> None:
    """Linking again a member whose links outside code cleared raises before writing anything."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[1].prev_free_block = blocks[1].next_free_block = None
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *blocks]
    before = snapshot(queue, nodes)
    with pytest.raises(InvariantViolation) as caught:
        OPERATIONS[operation](Scene(queue, blocks, new=blocks[1]))
    assert str(caught.value) == (
        f"invariant 1 (sentinel_linkage) broken at the start of {operation}(): the links of "
        f"{blocks[1]!r}, one of this queue's blocks: expected both set, found both None "
        "(cleared by outside code while the block was in the queue)"
    )
    assert snapshot(queue, nodes) == before


@pytest.mark.parametrize("count", [0, 1, 3])
def test_popleft_n_of_any_count_checks_the_front_first(count: int) -> None:
    """popleft_n of 0 up to all blocks names a damaged front as the start of popleft_n()."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    head = queue.fake_free_list_head
    head.prev_free_block = blocks[2]
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(count)
    assert str(caught.value) == (
        "invariant 1 (sentinel_linkage) broken at the start of popleft_n(): prev_free_block "
        f"of this queue's {head!r}: expected None, found {blocks[2]!r}"
    )


@pytest.mark.parametrize("size", [0, 1, 2])
def test_sound_operations_down_to_empty_pass_every_check(size: int) -> None:
    """Each operation on a sound queue of 0 to 2 blocks, emptied at the end, raises no violation."""
    blocks = [Block() for _ in range(size)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    queue.prepend_n([])
    queue.append_n([])
    assert queue.popleft_n(0) == []
    if size:
        assert queue.popleft() is blocks[0]
        queue.prepend_n([blocks[0]])
        assert queue.popleft_n(size) == blocks
    with pytest.raises(EmptyQueueError):
        queue.popleft()
    queue.append(blocks[0] if blocks else Block())
    queue.popleft()
    queue.prepend_n([])
    assert len(queue) == 0
    assert not queue


def _faulty(method: str, owner: str, link: str, value: str) -> type[Any]:
    """A check-mode class over a production class whose ``method`` then writes a sentinel link."""

    def operation(self: FreeBlockQueue[Block], *args: Any) -> object:
        result = getattr(FreeBlockQueue, method)(self, *args)
        setattr(getattr(self, owner), link, getattr(self, value))
        return result

    base = type(f"Faulty_{method}", (FreeBlockQueue,), {"__slots__": (), method: operation})
    return type("CheckedFaulty", (CheckedFreeBlockQueue, base), {"__slots__": ()})


HEAD, TAIL = "fake_free_list_head", "fake_free_list_tail"


@pytest.mark.parametrize(
    ("method", "owner", "link", "value", "names"),
    [
        ("append_n", HEAD, "next_free_block", TAIL, ("head", "new", "tail", "head")),
        ("append_n", HEAD, "next_free_block", HEAD, ("head", "new", "head", "head")),
        ("prepend_n", TAIL, "prev_free_block", HEAD, ("new", "tail", "tail", "head")),
        ("prepend_n", TAIL, "prev_free_block", TAIL, ("new", "tail", "tail", "tail")),
    ],
)
def test_a_batch_junction_names_the_sentinels_it_found(
    method: str, owner: str, link: str, value: str, names: tuple[str, ...]
) -> None:
    """A junction a faulty link left wrong names each sentinel in it as this queue's."""
    queue = _faulty(method, owner, link, value)(full_check_every=0)
    new = Block()
    with pytest.raises(InvariantViolation) as caught:
        getattr(queue, method)([new])
    named = {
        "new": repr(new),
        "head": f"this queue's {queue.fake_free_list_head!r}",
        "tail": f"this queue's {queue.fake_free_list_tail!r}",
    }
    before, after, forward, back = (named[name] for name in names)
    assert str(caught.value) == (
        f"invariant 1 (sentinel_linkage) broken at the end of {method}(): the links between "
        f"{before} and {after}: expected each naming the other, found {forward} and {back}"
    )


@pytest.mark.parametrize("value", [HEAD, TAIL])
def test_append_names_the_sentinel_the_tail_links_back_to(value: str) -> None:
    """append() whose tail was left linking back to a sentinel names it as this queue's."""
    queue = _faulty("append", TAIL, "prev_free_block", value)(full_check_every=0)
    new = Block()
    tail = queue.fake_free_list_tail
    with pytest.raises(InvariantViolation) as caught:
        queue.append(new)
    assert str(caught.value) == (
        "invariant 1 (sentinel_linkage) broken at the end of append(), the tail sentinel: "
        f"prev_free_block of this queue's {tail!r}: expected the appended {new!r}, "
        f"found this queue's {getattr(queue, value)!r}"
    )


@pytest.mark.parametrize("method", sorted(OPERATIONS))
def test_a_type_error_on_a_sound_queue_is_a_violation_naming_the_operation(method: str) -> None:
    """A TypeError from the linking code on a sound queue is a violation naming call and error."""

    def broken(self: Any, *args: object) -> object:
        if self._members:  # its own __init__ links with append_n first
            raise TypeError("broken link code")
        return getattr(FreeBlockQueue, method)(self, *args)

    base = type("Broken", (FreeBlockQueue,), {"__slots__": (), method: broken})
    cls: type[Any] = type("CheckedBroken", (CheckedFreeBlockQueue, base), {"__slots__": ()})
    blocks = [Block() for _ in range(2)]
    queue = cls(blocks, full_check_every=0)
    with pytest.raises(QueueError) as caught:
        OPERATIONS[method](Scene(queue, blocks))
    assert str(caught.value) == (
        f"invariant 1 (sentinel_linkage) broken at {method}(): the links and the count the "
        "operation read: expected blocks, sentinels and an int, found TypeError: broken link code"
    )


def test_an_explicit_none_period_takes_the_configured_default(monkeypatch: Any) -> None:
    """full_check_every=None given explicitly takes the configured default, as omitting it does."""
    monkeypatch.setattr(checked_module, "DEFAULT_FULL_CHECK_EVERY", 5)
    assert CheckedFreeBlockQueue(full_check_every=None).full_check_every == 5
    assert CheckedFreeBlockQueue().full_check_every == 5
    assert CheckedFreeBlockQueue(full_check_every=0).full_check_every == 0


UNEXPLAINED = (
    "invariant 1 (sentinel_linkage) broken at here: the links and the count an O(1) check "
    "read: expected a fault its diagnosis can name, found none: check mode's inline test and "
    "its diagnosis disagree"
)


@pytest.mark.parametrize("size", [0, 1, 3])
def test_the_front_diagnosis_raises_even_on_a_sound_queue(size: int) -> None:
    """check_front, called only once an inline test failed, reports a sound queue unexplained."""
    queue = CheckedFreeBlockQueue([Block() for _ in range(size)], full_check_every=0)
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, "here")
    assert str(caught.value) == UNEXPLAINED


def test_the_front_diagnosis_names_the_first_fault_wherever_it_is() -> None:
    """check_front walks from the head to the first fault, however far, and names it exactly."""
    blocks = [Block() for _ in range(4)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[1].next_free_block = blocks[3]  # b1 -> b3, skipping b2, every back link agreeing
    blocks[3].prev_free_block = blocks[1]
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, "here")
    assert str(caught.value) == (
        "invariant 2 (count_consistency) broken at here, position 4 of the forward walk "
        "(head = 0): num_free_blocks: expected 3 (the walk reached the tail), found 4"
    )
    blocks[3].prev_free_block = None
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, "here")
    assert str(caught.value) == (
        "invariant 1 (sentinel_linkage) broken at here, position 3 of the forward walk "
        f"(head = 0): prev_free_block of {blocks[3]!r}: expected {blocks[1]!r}, found None"
    )


@pytest.mark.parametrize("fault", ["foreign second", "second cut out", "tail successor"])
def test_popleft_names_a_fault_past_its_front_block_before_writing(fault: str) -> None:
    """popleft finds a fault at the node after the front block, or at the tail, before writing."""
    blocks = [Block() for _ in range(2)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    b0, b1 = blocks
    tail, stray = queue.fake_free_list_tail, Block()
    start = "the start of popleft()"
    walk = "position 2 of the forward walk (head = 0)"
    if fault == "foreign second":  # a block of no queue, linked in both ways
        b0.next_free_block, stray.prev_free_block = stray, b0
        expected = (
            f"invariant 1 (sentinel_linkage) broken at {start}, {walk}: next_free_block of "
            f"{b0!r}: expected one of this queue's blocks or its tail, found {stray!r}"
        )
    elif fault == "second cut out":  # the links agree, but a member is missing from them
        b0.next_free_block, tail.prev_free_block = tail, b0
        expected = (
            f"invariant 2 (count_consistency) broken at {start}, {walk}: num_free_blocks: "
            "expected 1 (the walk reached the tail), found 2"
        )
    else:  # one block left, and the tail has a successor
        queue.remove(b1)
        tail.next_free_block = stray
        expected = (
            f"invariant 1 (sentinel_linkage) broken at {start}: next_free_block of this "
            f"queue's {tail!r}: expected None, found {stray!r}"
        )
    nodes = [queue.fake_free_list_head, tail, *blocks, stray]
    before = snapshot(queue, nodes)
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft()
    assert str(caught.value) == expected
    assert snapshot(queue, nodes) == before
