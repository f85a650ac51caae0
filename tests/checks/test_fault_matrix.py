"""The fault-injection matrix: every checker fires on planted faults, and check mode contains them.

For queues of 0 to 4 blocks the matrix plants, one at a time: every single
link of every sentinel and block set to ``None``, to itself, to every other
node, to a detached block, to another queue's sentinels and first block, and
to a non-block object and to a proxy whose lookups raise ``KeyError`` (where the
build lets a link hold one); the count moved
by -1, +1, +2 and +1000; each block spliced in a second time after each node;
each ring that closes back on a block with consistent links; a detached block
spliced in by hand; a block unlinked by hand. A reference oracle, written
straight from the definitions with an ``id()`` set, says which families each
fault breaks.

``python tests/checks/test_fault_matrix.py`` prints the injected and flagged counts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from verified_queue import Block, CheckedFreeBlockQueue, QueueError
from verified_queue.block import Sentinel
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    DETACHED_OUTSIDE,
    NO_DUPLICATES,
    SENTINEL_LINKAGE,
    check_count_consistency,
    check_detached_outside,
    check_invariants,
    check_no_duplicates,
    check_sentinel_linkage,
)
from verified_queue.queue import FreeBlockQueue as ProductionQueue

SIZES = range(5)
COUNT_DRIFTS = (-1, +1, +2, +1000)
NOT_A_BLOCK = "not a block"


class LookupRaises:
    """A proxy whose every attribute lookup raises ``KeyError``: a non-block that is not quiet."""

    def __getattr__(self, name: str) -> Any:
        raise KeyError(name)


#: The proxy the matrix writes into links: reading its links raises, not AttributeError.
RAISING_PROXY = LookupRaises()


def _link_takes(value: object) -> bool:
    """Whether a link can hold ``value`` (a compiled Block's typed slots refuse non-blocks)."""
    try:
        Block().next_free_block = value  # type: ignore[assignment]  # probing the slot's type
    except TypeError:
        return False
    return True


#: Where a link can be pointed from outside the queue; a non-block only where a link can hold one.
OUTSIDERS = ["detached", "other head", "other tail", "other block"] + (
    ["non-block", "raising proxy"] if _link_takes(NOT_A_BLOCK) else []
)


@dataclass
class World:
    """A queue under test, a second queue, and a detached block to point links at."""

    queue: ProductionQueue[Block]
    blocks: list[Block]
    other: ProductionQueue[Block]
    detached: Block
    undo: list[tuple[object, str, object]] = field(default_factory=list)

    @property
    def nodes(self) -> list[Block]:
        """The queue's nodes from the head sentinel to the tail sentinel."""
        return [self.queue.fake_free_list_head, *self.blocks, self.queue.fake_free_list_tail]

    def target(self, name: str) -> object:
        """Resolve a target name (``node:i``, ``None``, ``detached``, ...) to an object."""
        kind, _, index = name.partition(":")
        targets: dict[str, object] = {
            "None": None,
            "detached": self.detached,
            "other head": self.other.fake_free_list_head,
            "other tail": self.other.fake_free_list_tail,
            "other block": self.other.fake_free_list_head.next_free_block,
            "non-block": NOT_A_BLOCK,
            "raising proxy": RAISING_PROXY,
        }
        return self.nodes[int(index)] if kind == "node" else targets[kind]

    def write(self, obj: object, attribute: str, value: object) -> None:
        """Overwrite ``obj.attribute`` as outside code would, remembering the old value."""
        self.undo.append((obj, attribute, getattr(obj, attribute)))
        setattr(obj, attribute, value)

    def restore(self) -> None:
        """Undo every write, newest first."""
        while self.undo:
            obj, attribute, value = self.undo.pop()
            setattr(obj, attribute, value)


def build_world(size: int, queue_class: type[ProductionQueue[Block]] = ProductionQueue) -> World:
    """A healthy queue of ``size`` blocks of class ``queue_class``, plus its surroundings."""
    blocks = [Block() for _ in range(size)]
    return World(queue_class(blocks), blocks, ProductionQueue([Block(), Block()]), Block())


@dataclass(frozen=True)
class Fault:
    """One planted corruption of a queue of ``size`` blocks."""

    size: int
    label: str
    plant: Callable[[World], None]

    def planted(self, queue_class: type[ProductionQueue[Block]] = ProductionQueue) -> World:
        """A fresh world of the right size with this fault planted."""
        world = build_world(self.size, queue_class)
        self.plant(world)
        return world


def _link_fault(size: int, node: int, link: str, target: str) -> Fault:
    def plant(world: World) -> None:
        world.write(world.nodes[node], link, world.target(target))

    return Fault(size, f"size {size}: node {node}.{link} = {target}", plant)


def _count_fault(size: int, drift: int) -> Fault:
    def plant(world: World) -> None:
        world.write(world.queue, "num_free_blocks", size + drift)

    return Fault(size, f"size {size}: count {drift:+d}", plant)


def _splice_twice(size: int, block: int, after: int) -> Fault:
    """Link node ``block`` in again after node ``after``, as a careless insert would."""

    def plant(world: World) -> None:
        nodes = world.nodes
        spliced, before = nodes[block], nodes[after]
        following = before.next_free_block
        world.write(spliced, "prev_free_block", before)
        world.write(spliced, "next_free_block", following)
        world.write(following, "prev_free_block", spliced)
        world.write(before, "next_free_block", spliced)
        world.write(world.queue, "num_free_blocks", size + 1)

    return Fault(size, f"size {size}: node {block} spliced in again after node {after}", plant)


def _ring(size: int, back_to: int) -> Fault:
    """Close the last block back onto node ``back_to`` with consistent links: never the tail."""

    def plant(world: World) -> None:
        nodes = world.nodes
        world.write(nodes[size], "next_free_block", nodes[back_to])
        world.write(nodes[back_to], "prev_free_block", nodes[size])

    return Fault(size, f"size {size}: ring from node {size} back to node {back_to}", plant)


def _splice_in_outsider(size: int, after: int) -> Fault:
    """Link the detached block in after node ``after`` by hand, links right, count untouched."""

    def plant(world: World) -> None:
        before = world.nodes[after]
        following = before.next_free_block
        world.write(world.detached, "prev_free_block", before)
        world.write(world.detached, "next_free_block", following)
        world.write(following, "prev_free_block", world.detached)
        world.write(before, "next_free_block", world.detached)

    return Fault(size, f"size {size}: detached block spliced in after node {after}", plant)


def _bridge_out(size: int, block: int) -> Fault:
    """Unlink a block by hand, leaving its own links and the count as they were."""

    def plant(world: World) -> None:
        nodes = world.nodes
        before, after = nodes[block - 1], nodes[block + 1]
        world.write(before, "next_free_block", after)
        world.write(after, "prev_free_block", before)

    return Fault(size, f"size {size}: node {block} bridged over by hand", plant)


def build_matrix() -> list[Fault]:
    """Every fault of the matrix, for every size."""
    faults: list[Fault] = []
    for size in SIZES:
        probe = build_world(size)
        node_count = size + 2
        targets = ["None", *(f"node:{index}" for index in range(node_count)), *OUTSIDERS]
        for node in range(node_count):
            for link in ("prev_free_block", "next_free_block"):
                current = getattr(probe.nodes[node], link)
                faults.extend(
                    _link_fault(size, node, link, target)
                    for target in targets
                    if probe.target(target) is not current
                )
        faults.extend(_count_fault(size, drift) for drift in COUNT_DRIFTS)
        for block in range(1, size + 1):
            faults.extend(_splice_twice(size, block, after) for after in range(size + 1))
            faults.append(_ring(size, block))
            faults.append(_bridge_out(size, block))
        faults.extend(_splice_in_outsider(size, after) for after in range(size + 1))
    return faults


MATRIX = build_matrix()


@dataclass(frozen=True)
class Oracle:
    """Which families a fault breaks, judged from the definitions with an ``id()`` set."""

    linkage_broken: bool
    repeat: bool
    reaches_tail: bool
    length: int
    count: object

    @property
    def count_broken(self) -> bool:
        """The walk reaches the tail with a length other than the count."""
        return self.reaches_tail and self.length != self.count

    @property
    def families(self) -> set[str]:
        """The families that can apply (a count is undefined when the walk never ends)."""
        broken = set()
        if self.linkage_broken:
            broken.add(SENTINEL_LINKAGE)
        if self.repeat:
            broken.add(NO_DUPLICATES)
        if self.count_broken or not self.reaches_tail:
            broken.add(COUNT_CONSISTENCY)
        return broken


def judge(queue: ProductionQueue[Block]) -> Oracle:
    """Evaluate the three definitions on ``queue`` the slow, obvious way."""
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    walk: list[Block] = []
    seen: set[int] = set()
    node: object = head.next_free_block
    repeat = reaches_tail = False
    while True:
        if node is tail:
            reaches_tail = True
            break
        if not isinstance(node, Block) or isinstance(node, Sentinel):
            break
        if id(node) in seen:
            repeat = True
            break
        seen.add(id(node))
        walk.append(node)
        node = node.next_free_block
    chain = [head, *walk, tail]
    links_agree = all(b.prev_free_block is a for a, b in itertools.pairwise(chain))
    linkage_ok = (
        head.prev_free_block is None
        and tail.next_free_block is None
        and reaches_tail
        and links_agree
    )
    return Oracle(not linkage_ok, repeat, reaches_tail, len(walk), queue.num_free_blocks)


def family_raised(checker: Callable[..., None], *args: Any) -> str | None:
    """Run ``checker``; return the family it raised, or ``None`` if it passed."""
    try:
        checker(*args)
    except InvariantViolation as violation:
        return violation.invariant
    return None


def matrix_summary() -> dict[str, int]:
    """Faults injected and flagged by ``check_invariants``, overall and where one family applies."""
    flagged = single = single_right = 0
    for fault in MATRIX:
        world = fault.planted()
        families = judge(world.queue).families
        raised = family_raised(check_invariants, world.queue)
        flagged += raised is not None
        if len(families) == 1:
            single += 1
            single_right += raised in families
    return {
        "injected": len(MATRIX),
        "flagged": flagged,
        "single_family": single,
        "single_family_named_right": single_right,
    }


def test_matrix_has_every_planned_fault() -> None:
    """The matrix holds exactly the faults the module docstring lists, for each size."""
    for size in SIZES:
        nodes = size + 2
        # Each link to None, to each node and to each outsider, except the value it holds.
        links = 2 * nodes * (nodes + len(OUTSIDERS))
        expected = links + len(COUNT_DRIFTS) + size * (size + 1) + size + size + (size + 1)
        assert sum(fault.size == size for fault in MATRIX) == expected, size
    assert len({fault.label for fault in MATRIX}) == len(MATRIX)


def test_every_planted_fault_is_a_real_fault() -> None:
    """The oracle finds at least one broken family in every planted fault, and none when healthy."""
    for size in SIZES:
        assert judge(build_world(size).queue).families == set()
    harmless = [fault.label for fault in MATRIX if not judge(fault.planted().queue).families]
    assert harmless == []


def test_check_invariants_flags_every_fault() -> None:
    """check_invariants raises InvariantViolation on every fault of the matrix."""
    summary = matrix_summary()
    assert summary["flagged"] == summary["injected"] == len(MATRIX)


def test_single_family_faults_name_their_family() -> None:
    """Where only one family can apply, check_invariants names exactly that family."""
    wrong = []
    for fault in MATRIX:
        world = fault.planted()
        families = judge(world.queue).families
        raised = family_raised(check_invariants, world.queue)
        if len(families) == 1 and raised not in families:
            wrong.append((fault.label, families, raised))
    assert wrong == []
    summary = matrix_summary()
    # The count drifts on healthy links are among them, and all are named right.
    assert summary["single_family"] >= len(SIZES) * len(COUNT_DRIFTS)
    assert summary["single_family_named_right"] == summary["single_family"]


def test_checker_flags_its_family_anywhere() -> None:
    """Each checker raises its own family wherever the oracle finds that family broken."""
    wrong = []
    for fault in MATRIX:
        world = fault.planted()
        oracle = judge(world.queue)
        for checker, family, broken in (
            (check_sentinel_linkage, SENTINEL_LINKAGE, oracle.linkage_broken),
            (check_no_duplicates, NO_DUPLICATES, oracle.repeat),
            (check_count_consistency, COUNT_CONSISTENCY, oracle.count_broken),
        ):
            if broken and family_raised(checker, world.queue) != family:
                wrong.append((fault.label, checker.__name__))
    assert wrong == []


def test_checker_passes_where_family_holds() -> None:
    """A checker that returns None has walked to the tail and found its own family intact."""
    wrong = []
    for fault in MATRIX:
        world = fault.planted()
        oracle = judge(world.queue)
        if family_raised(check_sentinel_linkage, world.queue) is None and oracle.linkage_broken:
            wrong.append((fault.label, "check_sentinel_linkage"))
        if family_raised(check_no_duplicates, world.queue) is None and not oracle.reaches_tail:
            wrong.append((fault.label, "check_no_duplicates"))
        if family_raised(check_count_consistency, world.queue) is None and (
            not oracle.reaches_tail or oracle.count_broken
        ):
            wrong.append((fault.label, "check_count_consistency"))
    assert wrong == []


def test_check_invariants_fires_with_any() -> None:
    """The fused check_invariants raises on a fault exactly when one of the three checkers does."""
    mismatched = []
    for fault in MATRIX:
        queue = fault.planted().queue
        separate = [
            family_raised(checker, queue)
            for checker in (check_sentinel_linkage, check_count_consistency, check_no_duplicates)
        ]
        fused = family_raised(check_invariants, queue)
        if (fused is None) != all(family is None for family in separate):
            mismatched.append((fault.label, fused, separate))
    assert mismatched == []


def test_restored_queue_passes_again() -> None:
    """Undoing each fault leaves a queue that every checker, and the pool check, accepts."""
    still_flagged = []
    for fault in MATRIX:
        world = fault.planted()
        world.restore()
        pool = [*world.blocks, world.detached]
        for checker, args in (
            (check_invariants, (world.queue, pool)),
            (check_sentinel_linkage, (world.queue,)),
            (check_count_consistency, (world.queue,)),
            (check_no_duplicates, (world.queue,)),
            (check_detached_outside, (world.queue, pool)),
        ):
            if family_raised(checker, *args) is not None:
                still_flagged.append((fault.label, checker.__name__))
    assert still_flagged == []


def test_pool_check_flags_linked_outsider() -> None:
    """A block bridged over by hand keeps its links, so the pool check names it (I4)."""
    for size in range(1, 5):
        for block in range(1, size + 1):
            world = _bridge_out(size, block).planted()
            world.write(world.queue, "num_free_blocks", size - 1)  # repair the count
            assert family_raised(check_invariants, world.queue) is None
            with pytest.raises(InvariantViolation, match=r"not in this queue") as caught:
                check_invariants(world.queue, pool=world.blocks)
            assert caught.value.invariant == DETACHED_OUTSIDE


def test_pool_check_ignores_members_detached() -> None:
    """The pool check passes a healthy queue whose pool also holds detached blocks."""
    world = build_world(3)
    check_detached_outside(world.queue, [*world.blocks, world.detached, Block()])
    world.write(world.detached, "next_free_block", world.blocks[0])
    assert family_raised(check_detached_outside, world.queue, [world.detached]) == DETACHED_OUTSIDE


# --------------------------------------------------------------- check mode

#: More steps than any queue of the matrix has blocks: a walk this long is going round a ring.
RING_BOUND = 4 * max(SIZES) + 8


NEEDS_A_BLOCK = {
    "remove(first)",
    "remove(middle)",
    "remove(last)",
    "contains",
    "iter_blocks_after(first)",
}
OPERATIONS: dict[str, Callable[[World], object]] = {
    "popleft": lambda w: w.queue.popleft(),
    "popleft_n(1)": lambda w: w.queue.popleft_n(1),
    "popleft_n(all)": lambda w: w.queue.popleft_n(w.queue.num_free_blocks),
    "remove(first)": lambda w: w.queue.remove(w.blocks[0]),
    "remove(middle)": lambda w: w.queue.remove(w.blocks[len(w.blocks) // 2]),
    "remove(last)": lambda w: w.queue.remove(w.blocks[-1]),
    "append(new)": lambda w: w.queue.append(Block()),
    "append(detached)": lambda w: w.queue.append(w.detached),
    "append_n(new)": lambda w: w.queue.append_n([Block(), Block()]),
    "prepend_n(new)": lambda w: w.queue.prepend_n([Block(), Block()]),
    "len": lambda w: len(w.queue),
    "bool": lambda w: bool(w.queue),
    "contains": lambda w: w.blocks[0] in w.queue,
    "iterate": lambda w: list(w.queue),
    "iter_blocks_after(None)": lambda w: list(w.queue.iter_blocks_after(None)),
    # Bounded all the same, so a regression of that test cannot hang the matrix.
    "iter_blocks_after(first)": lambda w: list(
        itertools.islice(w.queue.iter_blocks_after(w.blocks[0]), RING_BOUND)
    ),
    "get_all_free_blocks": lambda w: w.queue.get_all_free_blocks(),
}


def test_cursor_walk_ends_on_a_ring() -> None:
    """A ring of members closed by outside code makes iter_blocks_after(cursor) raise, not spin."""
    world = build_world(3, CheckedFreeBlockQueue)
    first, _, last = world.blocks
    world.write(last, "next_free_block", first)
    world.write(first, "prev_free_block", last)
    walk = world.queue.iter_blocks_after(first)
    with pytest.raises(InvariantViolation):
        list(itertools.islice(walk, RING_BOUND))


def applicable(fault: Fault) -> list[str]:
    """The operations that make sense on the fault's queue (an empty one has no block to name)."""
    return [name for name in OPERATIONS if fault.size or name not in NEEDS_A_BLOCK]


MUTATIONS = [name for name in OPERATIONS if name not in {"len", "bool", "contains"}]


def test_check_mode_raises_only_queue_errors() -> None:
    """On every fault, every check-mode operation returns or raises a QueueError, nothing else."""
    escaped = []
    outcomes = {"raised": 0, "returned": 0}
    for fault in MATRIX:
        for name in applicable(fault):
            world = fault.planted(CheckedFreeBlockQueue)
            try:
                OPERATIONS[name](world)
            except QueueError:
                outcomes["raised"] += 1
            except Exception as exc:  # the very thing this test exists to catch
                escaped.append((fault.label, name, repr(exc)))
            else:
                outcomes["returned"] += 1
    assert escaped == []
    # Most operations meet the damage; the rest run where the damage is out of reach.
    assert outcomes["raised"] > outcomes["returned"]


def test_full_mode_rejects_every_fault_first() -> None:
    """With full_check_every=1 every mutation raises InvariantViolation and writes nothing."""

    def checked_every_operation(blocks: list[Block]) -> CheckedFreeBlockQueue[Block]:
        return CheckedFreeBlockQueue(blocks, full_check_every=1)

    missed = []
    for fault in MATRIX:
        for name in (name for name in applicable(fault) if name in MUTATIONS):
            world = fault.planted(checked_every_operation)  # type: ignore[arg-type]  # a factory
            links = [(n.prev_free_block, n.next_free_block) for n in world.nodes]
            try:
                OPERATIONS[name](world)
            except InvariantViolation:
                after = [(n.prev_free_block, n.next_free_block) for n in world.nodes]
                if any(
                    a is not b
                    for pair in zip(links, after, strict=True)
                    for a, b in zip(*pair, strict=True)
                ):
                    missed.append((fault.label, name, "wrote links before raising"))
            else:
                missed.append((fault.label, name, "did not raise"))
    assert missed == []


def test_check_mode_catches_count_drift() -> None:
    """A moved count is reported as count_consistency by the very next operation of any kind."""
    for fault in (f for f in MATRIX if "count" in f.label):
        # contains is answered from the membership, which a drift does not touch.
        for name in (name for name in applicable(fault) if name != "contains"):
            world = fault.planted(CheckedFreeBlockQueue)
            with pytest.raises(InvariantViolation) as caught:
                OPERATIONS[name](world)
            assert caught.value.invariant == COUNT_CONSISTENCY, (fault.label, name)


def test_production_queue_is_production_class() -> None:
    """The matrix builds production queues unless it asks for the checked class."""
    assert type(build_world(1).queue) is ProductionQueue
    assert type(build_world(1, CheckedFreeBlockQueue).queue) is CheckedFreeBlockQueue
    # The production class, not verified_queue.FreeBlockQueue, which the switch rebinds (to
    # TracedFreeBlockQueue at the trace level, a subclass of check mode, not a base).
    assert issubclass(CheckedFreeBlockQueue, ProductionQueue)


if __name__ == "__main__":
    for key, value in matrix_summary().items():
        print(f"{key}: {value}")


def test_full_check_flags_every_fault() -> None:
    """Check mode's full check (one walk, then the checkers) raises on every planted fault."""
    passed = []
    for fault in MATRIX:
        queue = fault.planted(CheckedFreeBlockQueue).queue
        assert isinstance(queue, CheckedFreeBlockQueue)
        try:
            queue.full_check()
        except InvariantViolation:
            continue
        passed.append(fault.label)
    assert passed == []


def test_full_check_of_a_healthy_queue_is_one_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a healthy queue the full check passes on its one walk, without running the checkers."""

    def refuse(_queue: object) -> None:
        raise AssertionError("the checkers ran on a healthy queue")

    monkeypatch.setattr("verified_queue._diagnosis.check_invariants", refuse)
    for size in SIZES:
        CheckedFreeBlockQueue([Block() for _ in range(size)]).full_check()
