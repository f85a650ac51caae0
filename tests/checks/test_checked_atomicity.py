"""Check mode raises before writing anything, names the operation, and walks no further."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

import pytest

from tests.checks.support import World, adaptive_default_only, checked, make_world, parts
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
    where, start = caught.value.where or "", f"the start of {operation}()"
    assert where == start or where.startswith(f"{start}, ")
    assert snapshot(queue, nodes) == before


@pytest.mark.parametrize("operation", ["append", "append_n", "prepend_n"])
def test_relinking_cleared_member_writes_nothing(operation: str) -> None:
    """Linking again a member whose links outside code cleared raises before writing anything."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[1].prev_free_block = blocks[1].next_free_block = None
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *blocks]
    before = snapshot(queue, nodes)
    with pytest.raises(InvariantViolation) as caught:
        OPERATIONS[operation](Scene(queue, blocks, new=blocks[1]))
    assert parts(caught.value) == (
        (
            "I1",
            f"the start of {operation}()",
            f"the links of {blocks[1]!r}, one of this queue's blocks",
            "both set",
            "both None (cleared by outside code while the block was in the queue)",
        )
    )
    assert snapshot(queue, nodes) == before


@pytest.mark.parametrize("count", [0, 1, 3])
def test_popleft_n_checks_front_first(count: int) -> None:
    """popleft_n of 0 up to all blocks names a damaged front as the start of popleft_n()."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    head = queue.fake_free_list_head
    head.prev_free_block = blocks[2]
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(count)
    assert parts(caught.value) == (
        (
            "I1",
            "the start of popleft_n()",
            f"prev_free_block of this queue's {head!r}",
            "None",
            repr(blocks[2]),
        )
    )


@pytest.mark.parametrize("size", [0, 1, 2])
def test_sound_operations_pass_every_check(size: int) -> None:
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
def test_batch_junction_names_its_sentinels(
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
    assert parts(caught.value) == (
        (
            "I1",
            f"the end of {method}()",
            f"the links between {before} and {after}",
            "each naming the other",
            f"{forward} and {back}",
        )
    )


@pytest.mark.parametrize("value", [HEAD, TAIL])
def test_append_names_tail_back_sentinel(value: str) -> None:
    """append() whose tail was left linking back to a sentinel names it as this queue's."""
    queue = _faulty("append", TAIL, "prev_free_block", value)(full_check_every=0)
    new = Block()
    tail = queue.fake_free_list_tail
    with pytest.raises(InvariantViolation) as caught:
        queue.append(new)
    assert parts(caught.value) == (
        (
            "I1",
            "the end of append(), the tail sentinel",
            f"prev_free_block of this queue's {tail!r}",
            f"the appended {new!r}",
            f"this queue's {getattr(queue, value)!r}",
        )
    )


@pytest.mark.parametrize("method", sorted(OPERATIONS))
def test_type_error_on_sound_queue_is_violation(method: str) -> None:
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
    assert parts(caught.value) == (
        (
            "I1",
            f"{method}()",
            "the links and the count the operation read",
            "blocks, sentinels and an int",
            "TypeError: broken link code",
        )
    )


def test_explicit_none_period_is_default(monkeypatch: Any) -> None:
    """full_check_every=None given explicitly takes the configured default, as omitting it does."""
    monkeypatch.setattr(checked_module, "DEFAULT_FULL_CHECK_EVERY", 5)
    assert CheckedFreeBlockQueue(full_check_every=None).full_check_every == 5
    assert CheckedFreeBlockQueue().full_check_every == 5
    assert CheckedFreeBlockQueue(full_check_every=0).full_check_every == 0


UNEXPLAINED = (
    "I1",
    "here",
    "the links and the count an O(1) check read",
    "a fault its diagnosis can name",
    "none: check mode's inline test and its diagnosis disagree",
)


def test_full_check_whose_diagnosis_finds_nothing_reports_itself() -> None:
    """A full check whose one walk fails while its diagnosis names nothing says so, by name."""
    cls: type[Any] = type(
        "Disagreeing",
        (CheckedFreeBlockQueue,),
        {"__slots__": (), "_chain_is_membership": lambda _self: False},
    )
    queue = cls([Block() for _ in range(2)], full_check_every=0)
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    assert parts(caught.value) == ("I1", "the full check", *UNEXPLAINED[2:])


@pytest.mark.parametrize("method", ["append_n", "prepend_n"])
def test_a_bad_batch_the_base_class_links_is_reported(method: str) -> None:
    """Should the linking code ever take a batch holding a non-block, check mode names the call."""
    cls: type[Any] = type("Lenient", (CheckedFreeBlockQueue,), {"__slots__": ()})
    blocks = [Block()]
    queue = cls(blocks, full_check_every=0)
    # Set once the queue is built (its __init__ links with append_n), and after the class
    # exists: __init_subclass__ binds the _super_* methods itself.
    setattr(cls, f"_super_{method}", lambda _self, _batch: None)
    with pytest.raises(InvariantViolation) as caught:
        getattr(queue, method)([Block(), None])
    assert parts(caught.value) == ("I1", f"{method}()", *UNEXPLAINED[2:])
    assert queue.get_all_free_blocks() == blocks


@pytest.mark.parametrize("size", [0, 1, 3])
def test_front_diagnosis_raises_when_sound(size: int) -> None:
    """check_front, called only once an inline test failed, reports a sound queue unexplained."""
    queue = CheckedFreeBlockQueue([Block() for _ in range(size)], full_check_every=0)
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, queue._members, "here")
    assert parts(caught.value) == UNEXPLAINED


def test_front_diagnosis_names_first_fault() -> None:
    """check_front walks from the head to the first fault, however far, and names it exactly."""
    blocks = [Block() for _ in range(4)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[1].next_free_block = blocks[3]  # b1 -> b3, skipping b2, every back link agreeing
    blocks[3].prev_free_block = blocks[1]
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, queue._members, "here")
    assert parts(caught.value) == (
        (
            "I2",
            "here, position 4 of the forward walk (head = 0)",
            "num_free_blocks",
            "3 (the walk reached the tail)",
            "4",
        )
    )
    blocks[3].prev_free_block = None
    with pytest.raises(InvariantViolation) as caught:
        _diagnosis.check_front(queue, queue._members, "here")
    assert parts(caught.value) == (
        (
            "I1",
            "here, position 3 of the forward walk (head = 0)",
            f"prev_free_block of {blocks[3]!r}",
            repr(blocks[1]),
            "None",
        )
    )


@pytest.mark.parametrize("fault", ["foreign second", "second cut out", "tail successor"])
def test_popleft_names_fault_past_front(fault: str) -> None:
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
            "I1",
            f"{start}, {walk}",
            f"next_free_block of {b0!r}",
            "one of this queue's blocks or its tail",
            repr(stray),
        )
    elif fault == "second cut out":  # the links agree, but a member is missing from them
        b0.next_free_block, tail.prev_free_block = tail, b0
        expected = (
            "I2",
            f"{start}, {walk}",
            "num_free_blocks",
            "1 (the walk reached the tail)",
            "2",
        )
    else:  # one block left, and the tail has a successor
        queue.remove(b1)
        tail.next_free_block = stray
        expected = (
            "I1",
            f"{start}",
            f"next_free_block of this queue's {tail!r}",
            "None",
            repr(stray),
        )
    nodes = [queue.fake_free_list_head, tail, *blocks, stray]
    before = snapshot(queue, nodes)
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft()
    assert parts(caught.value) == expected
    assert snapshot(queue, nodes) == before


# ------------------------------------------------- every operation, every single fault


def _by_index(world: World, value: object) -> object:
    """``value`` with every node of ``world`` replaced by its index: comparable across worlds."""
    nodes = world.nodes()
    if isinstance(value, (list, tuple)):
        return [_by_index(world, item) for item in value]
    return next((i for i, node in enumerate(nodes) if node is value), value)


def _outcome_by_index(world: World, result: object) -> object:
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


def _damages() -> Iterable[tuple[str, Callable[[World], None]]]:
    """Single faults outside code could plant: every link to every value, counts, splices."""
    names = ["head", "tail", "b0", "b1", "b2", "b3"]

    def node(world: World, index: int) -> Block:
        return world.nodes()[index]

    targets: list[tuple[str, Callable[[World], object]]] = [
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
                    world: World, i: int = owner_index, name: str = link, to: Any = target
                ) -> None:
                    setattr(node(world, i), name, to(world))

                yield f"{owner}.{link} = {label}", write
    for drift in (-1, 1, 2):

        def move(world: World, by: int = drift) -> None:
            world.queue.num_free_blocks += by

        yield f"count {drift:+}", move

    def clear(world: World) -> None:
        world.blocks[1].prev_free_block = world.blocks[1].next_free_block = None
        world.blocks[0].next_free_block = world.blocks[2]
        world.blocks[2].prev_free_block = world.blocks[0]

    yield "b1 unlinked by hand", clear

    def splice(world: World) -> None:
        intruder = world.spare[1]
        intruder.prev_free_block, intruder.next_free_block = world.blocks[1], world.blocks[2]
        world.blocks[1].next_free_block = world.blocks[2].prev_free_block = intruder
        world.queue.num_free_blocks += 1

    yield "a spare block spliced in by hand", splice


#: Every checked operation, each on arguments the damage may have touched.
_CHECKED_OPERATIONS: dict[str, Callable[[World], object]] = {
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
def test_every_operation_raises_before_writing() -> None:
    """On every single fault, an operation that raises leaves links, count and members as found.

    The periodic full check is off, so the O(1) checks of each operation are the
    ones under test.
    """
    raised = dict.fromkeys(_CHECKED_OPERATIONS, 0)
    for label, damage in _damages():
        for name, operation in _CHECKED_OPERATIONS.items():
            world = make_world()
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
            twin = make_world(checked_queue=False)
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


def test_walk_outlasting_membership_runs_on() -> None:
    """Appending under a walk takes it past the first full check, and it goes on to the end."""
    queue, blocks = checked(2, full_check_every=0)
    seen = 0
    for _ in queue.iter_blocks_after(None):
        seen += 1
        if seen < 10:
            queue.append(Block())
    assert seen == 11  # the 2 blocks and the 9 appended under the walk
    assert queue.get_all_free_blocks()[:2] == blocks


# ------------------------------------------------------------------------- walks


def test_member_ring_reported_past_membership() -> None:
    """A walk in a ring of members with agreeing links yields n + 1 blocks, then raises."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[2].next_free_block = blocks[0]  # b0 -> b1 -> b2 -> b0, every back link agreeing
    blocks[0].prev_free_block = blocks[2]
    walked: list[Block] = []
    with pytest.raises(InvariantViolation) as caught:
        walked.extend(queue.iter_blocks_after(blocks[0]))
    assert [id(block) for block in walked] == [id(blocks[i]) for i in (1, 2, 0, 1)]
    assert caught.value.invariant == "sentinel_linkage"


def test_growing_walk_rechecks_past_membership(
    monkeypatch: Any,
) -> None:
    """A walk that outlasts the membership checks it all, then again after that many steps."""
    queue = CheckedFreeBlockQueue([Block()], full_check_every=0)
    walked: list[Block] = []
    checked_at: list[int] = []
    full_check = CheckedFreeBlockQueue.full_check

    def counting(self: CheckedFreeBlockQueue[Block]) -> None:
        checked_at.append(len(walked) + 1)
        full_check(self)

    monkeypatch.setattr(CheckedFreeBlockQueue, "full_check", counting)
    for block in queue.iter_blocks_after(None):
        walked.append(block)
        if len(walked) <= 7:
            queue.append(Block())  # one block more per step, 8 blocks in all
    assert len(walked) == 8
    # The walk started with 1 block, so step 3 is past that membership and runs the check;
    # the membership is 3 by then, so the walk may take 3 + 1 steps more (4 to 7) before
    # the next check, at step 8.
    assert checked_at == [3, 8]
