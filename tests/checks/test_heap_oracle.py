"""``check_invariants`` against a definitional oracle on arbitrary heaps, reachable or not.

The oracle below is written straight from the definitions of I1..I4 in
``verified_queue.queue``, as ``verified_queue.invariants`` restates them: it
walks from the head with a set of visited blocks, and says which family breaks
first in walk order (the checker's documented priority), or ``None``.

Every heap of three blocks
--------------------------
A heap of three blocks is the ten links of the head, the tail and three blocks
(each ``None``, one of the blocks, either sentinel, another queue's sentinel or
a non-block object: 8 values) and the queue's count (12 values, wrong types
included): 8**10 * 12, about 1.3e10 heaps. They are not built one by one.
The exploration builds *partial* heaps whose links are read through properties:
a read of a link (or of the count) not yet assigned stops the run, and the
exploration branches on every value of that link. A partial heap on which the
oracle and the checker both finish without reading an unassigned link stands
for all of its completions, because both are deterministic and never saw the
rest: that is the reads argument, and
``test_a_leaf_stands_for_every_completion_of_it`` checks it on random
completions built from real blocks. The leaves partition the whole space (the
test adds up the heaps each leaf stands for), so agreeing on every leaf is
agreeing on every heap.

On top of that, the blocks are interchangeable until a link names one: the
checker compares by identity and never looks at a block's label. So a link
takes only the blocks already named plus the first fresh one (Korat's
isomorphism breaking), and each leaf stands for as many labelled heaps as
there are ways to name its fresh blocks. ``test_relabelling_never_changes_a_verdict``
checks that symmetry on random heaps, by running the checker on all six
relabellings.

Random damaged heaps of up to six blocks are checked on real ``Block`` objects
and a real queue, and a checker weakened by one deleted test, derived from
``check_invariants``'s own source, is shown to disagree with the oracle.

``python tests/checks/test_heap_oracle.py`` prints the heap and leaf counts and times.
"""

from __future__ import annotations

import inspect
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import verified_queue
from verified_queue import invariants
from verified_queue.block import LINK_FIELDS, Block, Sentinel
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    NO_DUPLICATES,
    SENTINEL_LINKAGE,
    check_count_consistency,
    check_detached_outside,
    check_invariants,
    check_no_duplicates,
    check_sentinel_linkage,
)
from verified_queue.queue import FreeBlockQueue

PURE_ONLY = pytest.mark.skipif(
    verified_queue.COMPILED,
    reason="the exploration hooks Block's link slots, which the compiled build reads as C fields",
)

Checker = Callable[..., None]


# ---------------------------------------------------------------- the oracles


def _is_block(value: object) -> bool:
    """A block is a Block, or any object with both links (vLLM's shape)."""
    return isinstance(value, Block) or all(hasattr(value, name) for name in LINK_FIELDS)


def _ends(queue: Any) -> tuple[Any, Any] | None:
    """The queue's head and tail if they are two distinct sentinels, else ``None``."""
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    if not isinstance(head, Sentinel) or not isinstance(tail, Sentinel) or head is tail:
        return None
    return head, tail


def _walk(  # noqa: PLR0911 -- one return per definition it checks reads plainest
    queue: Any, back_links: bool, repeat: str
) -> tuple[str | None, set[int]]:
    """Walk from the head to the tail; return the first broken family and the blocks met.

    Checks I1 (with ``back_links``: the sentinels' outer links, each block's back
    link, the tail's back link) and I3 (a visited set; a block met again is
    ``repeat``'s family). Only a block that is no sentinel may sit between the ends.
    """
    ends = _ends(queue)
    if ends is None:
        return SENTINEL_LINKAGE, set()
    head, tail = ends
    if back_links and (head.prev_free_block is not None or tail.next_free_block is not None):
        return SENTINEL_LINKAGE, set()
    visited: set[int] = set()
    previous: Any = head
    node: Any = head.next_free_block
    while node is not tail:
        if node is None or isinstance(node, Sentinel) or not _is_block(node):
            return SENTINEL_LINKAGE, visited
        if id(node) in visited:
            return repeat, visited
        if back_links and node.prev_free_block is not previous:
            return SENTINEL_LINKAGE, visited
        visited.add(id(node))
        previous, node = node, node.next_free_block
    if back_links and tail.prev_free_block is not previous:
        return SENTINEL_LINKAGE, visited
    return None, visited


def _is_count(count: object) -> bool:
    """I2's count is a non-negative int (a bool is no count; an int subclass is, by value)."""
    return isinstance(count, int) and not isinstance(count, bool) and count >= 0


def _outsider_linked(pool: list[Any] | None, members: set[int]) -> bool:
    """I4: some block of the pool that is not in the queue has a link set."""
    return any(
        id(block) not in members
        and (block.prev_free_block is not None or block.next_free_block is not None)
        for block in pool or ()
    )


def oracle(queue: Any, pool: list[Any] | None = None) -> str | None:
    """``check_invariants``: the family of the first broken invariant in walk order, or ``None``.

    I1 and I3 along the walk, then I2 (the count), then I4 for the pool.
    """
    family, members = _walk(queue, back_links=True, repeat=NO_DUPLICATES)
    if family is not None:
        return family
    count = queue.num_free_blocks
    if not _is_count(count) or count != len(members):
        return COUNT_CONSISTENCY
    return NO_DUPLICATES if _outsider_linked(pool, members) else None


def linkage_oracle(queue: Any) -> str | None:
    """``check_sentinel_linkage``: I1 alone; a ring shows as a back link that disagrees."""
    return _walk(queue, back_links=True, repeat=SENTINEL_LINKAGE)[0]


def duplicates_oracle(queue: Any) -> str | None:
    """``check_no_duplicates``: the forward links alone meet no block twice before the tail."""
    return _walk(queue, back_links=False, repeat=NO_DUPLICATES)[0]


def count_oracle(queue: Any) -> str | None:
    """``check_count_consistency``: a count, equal to the forward walk's length.

    The count is judged first; a forward walk that cannot reach the tail is
    reported as the family that stops it.
    """
    if _ends(queue) is None:
        return SENTINEL_LINKAGE
    count = queue.num_free_blocks
    if not _is_count(count):
        return COUNT_CONSISTENCY
    family, members = _walk(queue, back_links=False, repeat=NO_DUPLICATES)
    if family is not None:
        return family
    return COUNT_CONSISTENCY if count != len(members) else None


def detached_oracle(queue: Any, pool: list[Any]) -> str | None:
    """``check_detached_outside``: I1 and I3 along the walk, then I4; the count is not read."""
    family, members = _walk(queue, back_links=True, repeat=NO_DUPLICATES)
    if family is not None:
        return family
    return NO_DUPLICATES if _outsider_linked(pool, members) else None


def verdict(checker: Checker, queue: Any, pool: list[Any] | None = None) -> str | None:
    """The family ``checker`` reports, or ``None`` if it passes; any other exception propagates."""
    try:
        if pool is None:
            checker(queue)
        else:
            checker(queue, pool)
    except InvariantViolation as violation:
        return violation.invariant
    return None


# ------------------------------------------------- partial heaps read lazily


class Unassigned(BaseException):
    """A run read a link or count the partial heap has not assigned yet.

    A ``BaseException``, so neither the checker's ``except AttributeError`` nor
    its ``except Exception`` around a block's repr can swallow it.
    """

    def __init__(self, item: tuple[object, str]) -> None:
        super().__init__(item)
        self.item = item


def _lazy_link(name: str) -> property:
    def read(self: Any) -> object:
        try:
            return self.assigned[name]
        except KeyError:
            raise Unassigned((self, name)) from None

    return property(read)


class LazyBlock(Block):
    """A block whose two links are read from ``assigned``; a missing one raises Unassigned."""

    __slots__ = ("assigned", "label")

    assigned: dict[str, object]
    label: str

    def __new__(cls, *_args: object) -> LazyBlock:
        # Block.__new__ writes both links, which the read-only properties refuse.
        return object.__new__(cls)

    def __init__(self, label: str) -> None:
        self.label = label
        self.assigned = {}

    def __repr__(self) -> str:
        return f"<{self.label}>"


class LazySentinel(Sentinel):
    """A sentinel whose two links are read from ``assigned``, like LazyBlock's."""

    __slots__ = ("assigned",)

    assigned: dict[str, object]

    def __new__(cls, *_args: object) -> LazySentinel:
        return object.__new__(cls)

    def __init__(self, role: str) -> None:
        self.role = role
        self.block_id = -1
        self.assigned = {}


# Block refuses a subclass that declares the links when the class is created; added
# afterwards, the properties take precedence over Block's slots for these classes only.
for _cls in (LazyBlock, LazySentinel):
    for _name in LINK_FIELDS:
        setattr(_cls, _name, _lazy_link(_name))


class LazyQueue:
    """The queue's three attributes; ``num_free_blocks`` read lazily like a link."""

    def __init__(self, head: Sentinel, tail: Sentinel) -> None:
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail
        self.assigned: dict[str, object] = {}

    def __repr__(self) -> str:
        return "<the queue>"

    @property
    def num_free_blocks(self) -> object:
        try:
            return self.assigned["num_free_blocks"]
        except KeyError:
            raise Unassigned((self, "num_free_blocks")) from None


class IntLike(int):
    """An int subclass (as numpy's integer scalars behave): a count the checker takes by value."""


class _NotABlock:
    """Something outside code might write into a link."""

    def __repr__(self) -> str:
        return "<not a block>"


#: The count's values: right and wrong sizes, and wrong types.
COUNTS: tuple[object, ...] = (0, 1, 2, 3, 4, -1, True, False, 2.0, None, "2", IntLike(2))


@dataclass
class Heap:
    """A partial heap of ``size`` lazy blocks, this queue's sentinels, and two outsiders."""

    size: int
    blocks: list[LazyBlock] = field(init=False)
    head: LazySentinel = field(init=False)
    tail: LazySentinel = field(init=False)
    queue: LazyQueue = field(init=False)
    foreign: LazySentinel = field(init=False)
    fixed: list[object] = field(init=False)

    def __post_init__(self) -> None:
        self.blocks = [LazyBlock(f"b{i}") for i in range(self.size)]
        self.head, self.tail = LazySentinel("head"), LazySentinel("tail")
        self.queue = LazyQueue(self.head, self.tail)
        # Values a link can take besides the blocks: the interchangeable blocks come last.
        self.foreign = LazySentinel("head")  # another queue's; its links are the heap's too
        self.fixed = [None, self.head, self.tail, self.foreign, _NotABlock()]

    def owners(self) -> list[LazySentinel | LazyBlock]:
        """Everything whose two links are part of the heap."""
        return [self.head, self.tail, self.foreign, *self.blocks]


@dataclass
class Exploration:
    """What exploring every heap found: leaves, heaps covered, disagreements."""

    leaves: int = 0
    runs: int = 0
    heaps: int = 0
    disagreements: int = 0
    examples: list[tuple[str | None, str | None, str]] = field(default_factory=list)


def _domain(heap: Heap, name: str, named: int) -> Iterator[tuple[object, int]]:
    """The values an unassigned item takes, each with how many labelled values it stands for.

    ``named`` blocks are already named by some link; the first fresh block stands
    for all ``size - named`` fresh ones (they are interchangeable).
    """
    if name == "num_free_blocks":
        for count in COUNTS:
            yield count, 1
        return
    for value in heap.fixed:
        yield value, 1
    yield from ((block, 1) for block in heap.blocks[:named])
    if named < heap.size:
        yield heap.blocks[named], heap.size - named


def _named_after(heap: Heap, value: object, named: int) -> int:
    """How many blocks are named once ``value`` is written somewhere."""
    if named < heap.size and value is heap.blocks[named]:
        return named + 1
    return named


def explore(
    size: int,
    checker: Checker,
    reference: Callable[..., str | None],
    with_pool: bool,
    on_leaf: Callable[[Heap, str | None], None] | None = None,
) -> Exploration:
    """Compare ``checker`` with ``reference`` on every heap of ``size`` blocks, leaf by leaf.

    Depth-first: run both on the partial heap; a read of an unassigned item
    branches on its values; a run that finishes is a leaf, which stands for
    ``weight * (values per unassigned item)`` labelled heaps. Without a pool the
    runs reach blocks through links only, so a block whose link is read has been
    named by then; with a pool, which lists the blocks in a fixed order, no
    block is interchangeable and every block is named from the start.
    """
    heap = Heap(size)
    found = Exploration()
    pool: list[Any] | None = list(heap.blocks) if with_pool else None
    values_per_link = len(heap.fixed) + size
    owners = heap.owners()

    def step(named: int, weight: int) -> None:
        found.runs += 1
        try:
            expected = reference(heap.queue) if pool is None else reference(heap.queue, pool)
            got = verdict(checker, heap.queue, pool)
        except Unassigned as missing:
            owner, name = missing.item
            if isinstance(owner, LazyBlock) and heap.blocks.index(owner) >= named:
                raise AssertionError(f"{owner!r} was read before any link named it") from None
            store = owner.assigned  # type: ignore[attr-defined]  # a lazy object
            for value, multiplicity in _domain(heap, name, named):
                store[name] = value
                step(_named_after(heap, value, named), weight * multiplicity)
            del store[name]
            return
        found.leaves += 1
        free_links = 2 * len(owners) - sum(len(owner.assigned) for owner in owners)
        free_counts = len(COUNTS) if "num_free_blocks" not in heap.queue.assigned else 1
        covered = weight * values_per_link**free_links * free_counts
        found.heaps += covered
        if expected != got:
            found.disagreements += covered
            if len(found.examples) < 3:
                found.examples.append((expected, got, _describe_leaf(heap)))
        if on_leaf is not None:
            on_leaf(heap, expected)

    step(size if with_pool else 0, 1)
    return found


def _describe_leaf(heap: Heap) -> str:
    """The assigned items of a partial heap, for a failure message."""
    return ", ".join(
        f"{owner!r}.{name}={value!r}"
        for owner in (*heap.owners(), heap.queue)
        for name, value in owner.assigned.items()
    )


#: Each checker, the oracle that defines it, and whether it takes the pool.
PAIRS: dict[str, tuple[Checker, Callable[..., str | None], bool]] = {
    "check_invariants": (check_invariants, oracle, False),
    "check_invariants with a pool": (check_invariants, oracle, True),
    "check_sentinel_linkage": (check_sentinel_linkage, linkage_oracle, False),
    "check_no_duplicates": (check_no_duplicates, duplicates_oracle, False),
    "check_count_consistency": (check_count_consistency, count_oracle, False),
    "check_detached_outside": (check_detached_outside, detached_oracle, True),
}

#: Blocks per heap in the exhaustive comparison; a pool makes every block distinguishable
#: (no symmetry), so its tree grows faster.
EXHAUSTIVE_SIZES = range(7)
EXHAUSTIVE_SIZES_WITH_POOL = range(5)


def _total_heaps(size: int) -> int:
    """Every heap of ``size`` blocks: each of ``2 * (size + 3)`` links over its values, a count."""
    values = len(Heap(size).fixed) + size
    return int(values ** (2 * (size + 3))) * len(COUNTS)


@PURE_ONLY
@pytest.mark.parametrize("pair", PAIRS)
def test_checkers_agree_with_oracle_everywhere(pair: str) -> None:
    """On every heap of up to 6 blocks (4 with a pool), the checker reports the oracle's family."""
    checker, reference, with_pool = PAIRS[pair]
    for size in EXHAUSTIVE_SIZES_WITH_POOL if with_pool else EXHAUSTIVE_SIZES:
        found = explore(size, checker, reference, with_pool)
        assert found.heaps == _total_heaps(size), "the leaves must cover every heap once"
        assert found.disagreements == 0, (size, found.examples)
        assert found.leaves > size  # the walk went somewhere


# ------------------------------------------------------ the two arguments, checked


def _concrete(heap: Heap, rng: random.Random) -> tuple[FreeBlockQueue[Block], list[Block]]:
    """A real queue and real blocks with the leaf's links, the unread ones filled at random."""
    queue: FreeBlockQueue[Block] = FreeBlockQueue()
    blocks = [Block() for _ in heap.blocks]
    foreign = FreeBlockQueue[Block]().fake_free_list_head
    real: dict[int, object] = {
        id(lazy): block for lazy, block in zip(heap.blocks, blocks, strict=True)
    }
    real[id(heap.head)] = queue.fake_free_list_head
    real[id(heap.tail)] = queue.fake_free_list_tail
    real[id(heap.fixed[3])] = foreign
    values = [*heap.fixed, *heap.blocks]
    pairs: list[tuple[LazyBlock | LazySentinel, Block]] = [
        (heap.head, queue.fake_free_list_head),
        (heap.tail, queue.fake_free_list_tail),
        (heap.foreign, foreign),
        *zip(heap.blocks, blocks, strict=True),
    ]
    for lazy, owner in pairs:
        for name in LINK_FIELDS:
            value = lazy.assigned[name] if name in lazy.assigned else rng.choice(values)
            setattr(owner, name, real.get(id(value), value))
    count = heap.queue.assigned.get("num_free_blocks", _UNREAD)
    queue.num_free_blocks = rng.choice(COUNTS) if count is _UNREAD else count  # type: ignore[assignment]  # a damaged count
    return queue, blocks


_UNREAD = object()

#: Random completions built for each leaf of the three-block exploration.
COMPLETIONS_PER_LEAF = 8


@PURE_ONLY
@pytest.mark.parametrize("pair", PAIRS)
def test_a_leaf_stands_for_every_completion_of_it(pair: str) -> None:
    """Random completions of each leaf, on real blocks, get the leaf's verdict from both sides."""
    checker, reference, with_pool = PAIRS[pair]
    rng = random.Random(pair)
    completions = 0

    def complete(heap: Heap, expected: str | None) -> None:
        nonlocal completions
        for _ in range(COMPLETIONS_PER_LEAF):
            queue, blocks = _concrete(heap, rng)
            pool = blocks if with_pool else None
            got = reference(queue) if pool is None else reference(queue, pool)
            assert got == expected, _describe_leaf(heap)
            assert verdict(checker, queue, pool) == expected, _describe_leaf(heap)
            completions += 1

    found = explore(3, checker, reference, with_pool, on_leaf=complete)
    assert completions == COMPLETIONS_PER_LEAF * found.leaves > 200


@dataclass(frozen=True)
class Links:
    """A heap of real objects named by index: the head, the tail, the blocks, two outsiders."""

    links: tuple[int, ...]  # (head.prev, head.next, tail.prev, tail.next, b0.prev, b0.next, ...)
    count: int  # an index into COUNTS

    def build(self, order: tuple[int, ...]) -> tuple[FreeBlockQueue[Block], list[Block]]:
        """Build it with block ``i`` played by ``order[i]``'s object (a relabelling)."""
        queue: FreeBlockQueue[Block] = FreeBlockQueue()
        blocks = [Block() for _ in order]
        named = [blocks[order[i]] for i in range(len(order))]
        values: list[object] = [
            None,
            queue.fake_free_list_head,
            queue.fake_free_list_tail,
            FreeBlockQueue[Block]().fake_free_list_head,
            _NotABlock(),
            *named,
        ]
        owners: list[object] = [queue.fake_free_list_head, queue.fake_free_list_tail, *named]
        for index, value in enumerate(self.links):
            setattr(owners[index // 2], LINK_FIELDS[index % 2], values[value])
        queue.num_free_blocks = COUNTS[self.count]  # type: ignore[assignment]  # a damaged count
        return queue, blocks


def random_links(rng: random.Random, size: int, healthy_first: bool) -> Links:
    """A random heap: mostly a healthy chain with a few links rewritten, or any links at all."""
    values = 5 + size
    if not healthy_first:
        links = [rng.randrange(values) for _ in range(2 * (size + 2))]
        return Links(tuple(links), rng.randrange(len(COUNTS)))
    chain = rng.sample(range(size), rng.randint(0, size))
    order = [1, *(5 + block for block in chain), 2]  # head, the chain, tail
    links = [0] * (2 * (size + 2))
    owner = {1: 0, 2: 1, **{5 + block: 2 + block for block in range(size)}}
    for before, after in itertools.pairwise(order):
        links[2 * owner[before] + 1] = after
        links[2 * owner[after]] = before
    for _ in range(rng.randint(1, 2)):
        links[rng.randrange(len(links))] = rng.randrange(values)
    count = len(chain) if rng.random() < 0.5 else rng.randrange(len(COUNTS))
    return Links(tuple(links), min(count, len(COUNTS) - 1))


def test_relabelling_never_changes_a_verdict() -> None:
    """The checkers judge a heap and each of its relabellings alike (the exploration's symmetry)."""
    rng = random.Random(3)
    built = 0
    for trial in range(600):
        heap = random_links(rng, 3, healthy_first=trial % 2 == 0)
        try:
            heap.build((0, 1, 2))
        except TypeError:  # a compiled build's typed slots refuse a non-block or a non-int
            continue
        built += 1
        for name, (checker, _reference, with_pool) in PAIRS.items():
            verdicts = set()
            for order in itertools.permutations(range(3)):
                queue, blocks = heap.build(order)
                verdicts.add(verdict(checker, queue, blocks if with_pool else None))
            assert len(verdicts) == 1, (name, heap)
    assert built >= 200, f"only {built} of the random heaps could be built in this build"


# --------------------------------------------------------- random damaged heaps


def _writable(value: object) -> bool:
    try:
        Block().next_free_block = value  # type: ignore[assignment]  # probing the slot's type
    except TypeError:
        return False
    return True


def damaged_heaps(seed: int, count: int) -> Iterator[tuple[FreeBlockQueue[Block], list[Block]]]:
    """``count`` healthy queues of 0 to 6 blocks of a pool of 6, each damaged by 1 to 3 writes.

    A write points a link of a sentinel or pool block at ``None``, a block of
    the pool, a sentinel of this or another queue, another queue's block or a
    non-block, or sets the count to a wrong value.
    """
    rng = random.Random(seed)
    outsiders: list[object] = [None] + ([_NotABlock()] if _writable(_NotABlock()) else [])
    counts = [c for c in COUNTS if _count_writable(c)]
    for _ in range(count):
        pool = [Block() for _ in range(6)]
        queue = FreeBlockQueue(rng.sample(pool, rng.randint(0, 6)))
        other = FreeBlockQueue([Block(), Block()])
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        values = [*outsiders, *pool, head, tail, other.fake_free_list_head]
        values += [other.fake_free_list_tail, other.fake_free_list_head.next_free_block]
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.15:
                drifted = queue.num_free_blocks
                choices = [*counts] if type(drifted) is not int else [*counts, drifted + 1]
                queue.num_free_blocks = rng.choice(choices)  # type: ignore[assignment]  # damage
            else:
                owner = rng.choice([head, tail, *pool])
                setattr(owner, rng.choice(LINK_FIELDS), rng.choice(values))
        yield queue, pool


def _count_writable(count: object) -> bool:
    try:
        FreeBlockQueue().num_free_blocks = count  # type: ignore[assignment]  # probing the type
    except TypeError:
        return False
    return True


#: Random damaged heaps compared in the default run (under a second of CPU).
RANDOM_HEAPS = 10_000


def test_checkers_agree_on_random_heaps() -> None:
    """On 10,000 random damaged heaps of up to 6 blocks each checker reports its oracle's family."""
    families: dict[str | None, int] = {}
    for queue, pool in damaged_heaps(14, RANDOM_HEAPS):
        for name, (checker, reference, with_pool) in PAIRS.items():
            expected = reference(queue, pool) if with_pool else reference(queue)
            assert verdict(checker, queue, pool if with_pool else None) == expected, name
        family = oracle(queue, pool)
        families[family] = families.get(family, 0) + 1
    # The damage reaches every family, and some damage happens to leave a healthy queue.
    assert set(families) == {None, SENTINEL_LINKAGE, COUNT_CONSISTENCY, NO_DUPLICATES}


# ------------------------------------------------------------ weakened checkers


#: One test deleted from the checkers' source each: (what is deleted, the text, its stand-in).
WEAKENINGS: dict[str, tuple[str, str]] = {
    "no tail back-link test": (
        "    if before_tail is not previous:\n",
        "    if False:\n",
    ),
    "a bool passes as a count": (
        " or isinstance(count, bool) or count < 0:",
        " or count < 0:",
    ),
    "another queue's sentinel passes as a block": (
        "    if isinstance(node, Sentinel) or not is_block(node):\n",
        "    if not is_block(node):\n",
    ),
}


def weakened_checker(weakening: str) -> Checker:
    """``check_invariants`` compiled from the module's own source with one test deleted."""
    deleted, stand_in = WEAKENINGS[weakening]
    source = inspect.getsource(invariants)
    if "__mutmut_" in source:
        pytest.skip("under mutmut, invariants.py's source holds every mutant as well")
    assert source.count(deleted) == 1, f"the test to delete is not in invariants.py: {deleted!r}"
    namespace: dict[str, Any] = {"__name__": "weakened_invariants"}
    exec(compile(source.replace(deleted, stand_in), "<weakened>", "exec"), namespace)
    checker: Checker = namespace["check_invariants"]
    return checker


@PURE_ONLY
@pytest.mark.parametrize("weakening", WEAKENINGS)
def test_oracle_catches_a_weakened_checker(weakening: str) -> None:
    """A copy of check_invariants missing one test disagrees with the oracle on some heaps of 3."""
    found = explore(3, weakened_checker(weakening), oracle, False)
    assert found.heaps == _total_heaps(3)
    assert found.disagreements > 0, weakening


def main() -> None:
    """Print, for each checker, the heaps, leaves and runs of the exhaustive comparison."""
    for name, (checker, reference, with_pool) in PAIRS.items():
        for size in EXHAUSTIVE_SIZES_WITH_POOL if with_pool else EXHAUSTIVE_SIZES:
            start = time.process_time()
            found = explore(size, checker, reference, with_pool)
            print(
                f"{name}, {size} blocks: {found.heaps:.3e} heaps in {found.leaves} leaves "
                f"({found.runs} runs), {found.disagreements} disagreements, "
                f"{time.process_time() - start:.2f} s"
            )
    start = time.process_time()
    for queue, pool in damaged_heaps(14, RANDOM_HEAPS):
        for checker, reference, with_pool in PAIRS.values():
            expected = reference(queue, pool) if with_pool else reference(queue)
            assert verdict(checker, queue, pool if with_pool else None) == expected
    print(f"{RANDOM_HEAPS} random damaged heaps, 6 checkers: {time.process_time() - start:.2f} s")
    for weakening in WEAKENINGS:
        found = explore(3, weakened_checker(weakening), oracle, False)
        print(
            f"weakened ({weakening}): disagrees on {found.disagreements:.3e} of "
            f"{found.heaps:.3e} heaps of 3 blocks, e.g. {found.examples[0]}"
        )


if __name__ == "__main__":
    main()
