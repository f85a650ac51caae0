"""The checkers against a definitional oracle on arbitrary heaps, reachable or not.

The oracle below is written straight from the definitions of I1..I4 in
``verified_queue.queue``, as ``verified_queue.invariants`` restates them, and of
check mode's full check in ``verified_queue.checked``: it walks from the head
with a set of visited blocks, and says which invariant breaks first in walk
order (the checkers' documented priority), or ``None``. A verdict is the
clause a checker reports (``I1`` to ``I4``: I3 and I4 share a family, so the
family alone could not tell a repeated block from a linked outsider), with
the one number the definitions fix where they fix one: the count a wrong
count should have been, the pool item that is not detached, the walk position
of the block check mode did not link.

What the oracle covers
----------------------
* ``check_invariants(queue)`` and the four single-family checkers: I1 and I3
  along the walk, then I2 (a count that is a non-negative int, not a bool,
  equal to the walk's length).
* ``check_invariants(queue, pool=...)`` and ``check_detached_outside``: then
  I4, "every block of the pool that is not in the queue is detached, both
  links ``None``", reported at the first such pool item in the pool's order.
  The pool is an iterable, read once: the exploration hands it over as a
  list and as an iterator, in order, reversed, as any subset, with a block
  repeated, with another queue's sentinel (one link set, so never detached)
  and with a non-block (no links at all, so not "both ``None``" either).
* ``CheckedFreeBlockQueue.full_check()``: what ``check_invariants`` finds
  first; then the count against check mode's membership record (an exact
  ``int``: the queue only ever writes one, so an ``int`` subclass is damage,
  where ``check_invariants`` takes it by value; and equal to the number of
  recorded members, else I2 naming that number); then the chain against the
  record, which must be the same blocks. When they differ (outside code
  linked a block in, or unlinked a member and fixed the count), full_check
  must report I3 at the walk position of the first block in the chain that
  check mode did not link. (With the count equal to both the chain's length
  and the record's size, a chain of distinct blocks that are all members is
  the whole record, so a member missing from the chain always shows as one of
  the two reports before.)

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
relabellings. A pool or a membership record names blocks by label, so with
either every block is named from the start and the tree is larger.

The pool and the membership record are inputs of their own: the exhaustive
comparison runs every pool shape above over every heap of up to 3 blocks (and
the whole pool up to 4), and every membership record (each subset of the
blocks) over every heap of up to 3 blocks; check mode's lazy queue is a
subclass of the checked class whose count, like the links, is read lazily.

Random damaged heaps of up to six blocks are checked on real ``Block`` objects
and a real ``CheckedFreeBlockQueue``, with random pools and, now and then, a
membership record changed behind the queue's back. Weakened checkers (one test
deleted from ``invariants.py``'s or ``checked.py``'s own source, or a planted
checker bug of ``specs.planted_bugs.checkers``) are shown to disagree with the
oracle: each extension catches one.

``python tests/checks/test_heap_oracle.py`` prints the heap and leaf counts and times.
"""

from __future__ import annotations

import inspect
import itertools
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

import verified_queue
from specs.planted_bugs.checkers import CHECKER_CATALOGUE, planted
from verified_queue import checked, invariants
from verified_queue.block import LINK_FIELDS, Block, Sentinel
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import (
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
Oracle = Callable[..., "str | None"]


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
) -> tuple[str | None, list[Any]]:
    """Walk from the head to the tail; return the first broken clause and the blocks met.

    Checks I1 (with ``back_links``: the sentinels' outer links, each block's back
    link, the tail's back link) and I3 (a visited set; a block met again is
    ``repeat``'s clause). Only a block that is no sentinel may sit between the ends.
    The blocks come in walk order.
    """
    ends = _ends(queue)
    if ends is None:
        return "I1", []
    head, tail = ends
    if back_links and (head.prev_free_block is not None or tail.next_free_block is not None):
        return "I1", []
    visited: set[int] = set()
    chain: list[Any] = []
    previous: Any = head
    node: Any = head.next_free_block
    while node is not tail:
        if node is None or isinstance(node, Sentinel) or not _is_block(node):
            return "I1", chain
        if id(node) in visited:
            return repeat, chain
        if back_links and node.prev_free_block is not previous:
            return "I1", chain
        visited.add(id(node))
        chain.append(node)
        previous, node = node, node.next_free_block
    if back_links and tail.prev_free_block is not previous:
        return "I1", chain
    return None, chain


def _is_count(count: object) -> bool:
    """I2's count is a non-negative int (a bool is no count; an int subclass is, by value)."""
    return isinstance(count, int) and not isinstance(count, bool) and count >= 0


def _count_verdict(count: object, length: int) -> str | None:
    """I2: no count at all, or a count that should have been ``length``."""
    if not _is_count(count):
        return "I2"
    return f"I2 expected {length}" if count != length else None


_NO_LINK = object()


def _outsider(pool: Iterable[Any], chain: list[Any]) -> str | None:
    """I4: the first item of the pool that is not in the queue and not detached.

    Detached is both links ``None``; an item without one of the links is not.
    """
    members = {id(block) for block in chain}
    for index, item in enumerate(pool):
        if id(item) in members:
            continue
        links = (getattr(item, name, _NO_LINK) for name in LINK_FIELDS)
        if any(link is not None for link in links):
            return f"I4 at item {index}"
    return None


def oracle(queue: Any, pool: Iterable[Any] | None = None) -> str | None:
    """``check_invariants``: the first broken invariant in walk order, or ``None``.

    I1 and I3 along the walk, then I2 (the count), then I4 for the pool.
    """
    clause, chain = _walk(queue, back_links=True, repeat="I3")
    if clause is not None:
        return clause
    found = _count_verdict(queue.num_free_blocks, len(chain))
    if found is not None or pool is None:
        return found
    return _outsider(pool, chain)


def linkage_oracle(queue: Any) -> str | None:
    """``check_sentinel_linkage``: I1 alone; a ring shows as a back link that disagrees."""
    return _walk(queue, back_links=True, repeat="I1")[0]


def duplicates_oracle(queue: Any) -> str | None:
    """``check_no_duplicates``: the forward links alone meet no block twice before the tail."""
    return _walk(queue, back_links=False, repeat="I3")[0]


def count_oracle(queue: Any) -> str | None:
    """``check_count_consistency``: a count, equal to the forward walk's length.

    The count is judged first; a forward walk that cannot reach the tail is
    reported as the clause that stops it.
    """
    if _ends(queue) is None:
        return "I1"
    count = queue.num_free_blocks
    if not _is_count(count):
        return "I2"
    clause, chain = _walk(queue, back_links=False, repeat="I3")
    if clause is not None:
        return clause
    return _count_verdict(count, len(chain))


def detached_oracle(queue: Any, pool: Iterable[Any]) -> str | None:
    """``check_detached_outside``: I1 and I3 along the walk, then I4; the count is not read."""
    clause, chain = _walk(queue, back_links=True, repeat="I3")
    if clause is not None:
        return clause
    return _outsider(pool, chain)


def full_check_oracle(queue: Any) -> str | None:
    """``full_check``: ``check_invariants``, then the count and the chain against the record.

    The record is check mode's membership, ``id(block) -> block``. See the
    module docstring for the three steps and why the last one names a position.
    """
    found = oracle(queue)
    if found is not None:
        return found
    count = queue.num_free_blocks
    members = queue._members
    if type(count) is not int:
        return "I2"
    if count != len(members):
        return f"I2 expected {len(members)}"
    chain = _walk(queue, back_links=True, repeat="I3")[1]
    if {id(block) for block in chain} == set(members):
        return None
    for position, block in enumerate(chain, start=1):
        if id(block) not in members:
            return f"I3 at position {position}, not a member"
    return "I3, a member missing from the chain"  # excluded by I2 above; see the docstring


def _reported(violation: InvariantViolation) -> str:
    """The verdict a violation carries: its clause, and the number the oracle predicts."""
    clause = violation.clause or f"no clause ({violation.invariant})"
    if clause == "I2":
        number = re.match(r"(\d+) ", violation.expected or "")
        return f"I2 expected {number[1]}" if number else "I2"
    if clause == "I4":
        item = re.fullmatch(r"item (\d+) of the given blocks", violation.where or "")
        return f"I4 at item {item[1]}" if item else f"I4 at {violation.where}"
    if clause == "I3" and (violation.what or "").startswith("membership of "):
        at = re.fullmatch(r"position (\d+) of the forward walk \(head = 0\)", violation.where or "")
        return f"I3 at position {at[1]}, not a member" if at else f"I3 at {violation.where}"
    return clause


def verdict(checker: Checker, queue: Any, pool: Iterable[Any] | None = None) -> str | None:
    """What ``checker`` reports, or ``None`` if it passes; any other exception propagates."""
    try:
        if pool is None:
            checker(queue)
        else:
            checker(queue, pool)
    except InvariantViolation as violation:
        return _reported(violation)
    return None


def full_check(queue: Any) -> None:
    """Check mode's full check of ``queue``, a checked queue, as a checker function."""
    queue.full_check()


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


_LAZY_CHECKED: dict[type[Any], type[Any]] = {}


def lazy_checked_class(base: type[CheckedFreeBlockQueue[Any]]) -> type[Any]:
    """A subclass of the checked class ``base`` whose count is read lazily, like a link.

    Its head, tail and membership record are the base's own slots, set by :class:`Heap`.
    """
    if base not in _LAZY_CHECKED:

        def read_count(self: Any) -> object:
            try:
                return self.assigned["num_free_blocks"]
            except KeyError:
                raise Unassigned((self, "num_free_blocks")) from None

        _LAZY_CHECKED[base] = type(
            "LazyCheckedQueue",
            (base,),
            {
                "__slots__": ("assigned",),
                "num_free_blocks": property(read_count),
                "__repr__": LazyQueue.__repr__,
            },
        )
    return _LAZY_CHECKED[base]


class IntLike(int):
    """An int subclass (as numpy's integer scalars behave): a count the checker takes by value."""


class _NotABlock:
    """Something outside code might write into a link."""

    def __repr__(self) -> str:
        return "<not a block>"


#: The count's values: right and wrong sizes, and wrong types.
COUNTS: tuple[object, ...] = (0, 1, 2, 3, 4, -1, True, False, 2.0, None, "2", IntLike(2))


#: Pool items that are not among the heap's blocks: another queue's sentinel, a non-block.
FOREIGN, NON_BLOCK = -1, -2


@dataclass(frozen=True)
class Setting:
    """What one comparison hands over besides the queue.

    ``pool``: the pool, as block indices (or :data:`FOREIGN`, :data:`NON_BLOCK`),
    handed over as a one-shot iterator if ``iterator``; ``members``: check mode's
    membership record, as block indices, for a checked queue.
    """

    pool: tuple[int, ...] | None = None
    iterator: bool = False
    members: tuple[int, ...] | None = None


def pool_settings(size: int) -> dict[str, Setting]:
    """Every pool shape over ``size`` blocks that the module docstring lists."""
    blocks = tuple(range(size))
    shapes = {
        f"subset {subset}": Setting(pool=subset)
        for length in range(size + 1)
        for subset in itertools.combinations(blocks, length)
    }
    shapes["reversed"] = Setting(pool=blocks[::-1])
    shapes["first block repeated"] = Setting(pool=blocks + blocks[:1])
    shapes["and another queue's sentinel"] = Setting(pool=(*blocks, FOREIGN))
    shapes["and a non-block"] = Setting(pool=(*blocks, NON_BLOCK))
    shapes["as an iterator"] = Setting(pool=blocks, iterator=True)
    return shapes


def membership_settings(size: int) -> dict[str, Setting]:
    """Every membership record over ``size`` blocks: each subset of them."""
    return {
        f"members {subset}": Setting(members=subset)
        for length in range(size + 1)
        for subset in itertools.combinations(range(size), length)
    }


@dataclass
class Heap:
    """A partial heap of ``size`` lazy blocks, this queue's sentinels, and two outsiders.

    With ``members``, the queue is a lazy check-mode queue of ``checked_class``
    holding that membership record.
    """

    size: int
    members: tuple[int, ...] | None = None
    checked_class: type[CheckedFreeBlockQueue[Any]] = CheckedFreeBlockQueue
    blocks: list[LazyBlock] = field(init=False)
    head: LazySentinel = field(init=False)
    tail: LazySentinel = field(init=False)
    queue: Any = field(init=False)
    foreign: LazySentinel = field(init=False)
    fixed: list[object] = field(init=False)

    def __post_init__(self) -> None:
        self.blocks = [LazyBlock(f"b{i}") for i in range(self.size)]
        self.head, self.tail = LazySentinel("head"), LazySentinel("tail")
        if self.members is None:
            self.queue = LazyQueue(self.head, self.tail)
        else:
            queue = object.__new__(lazy_checked_class(self.checked_class))
            queue.assigned = {}
            queue.fake_free_list_head = self.head
            queue.fake_free_list_tail = self.tail
            queue._members = {id(self.blocks[i]): self.blocks[i] for i in self.members}
            queue.full_check_every = 0  # the period is never reached: full_check runs by hand
            queue._until_full_check = [0]
            self.queue = queue
        # Values a link can take besides the blocks: the interchangeable blocks come last.
        self.foreign = LazySentinel("head")  # another queue's; its links are the heap's too
        self.fixed = [None, self.head, self.tail, self.foreign, _NotABlock()]

    def owners(self) -> list[LazySentinel | LazyBlock]:
        """Everything whose two links are part of the heap."""
        return [self.head, self.tail, self.foreign, *self.blocks]

    def pool(self, setting: Setting) -> list[object] | None:
        """The setting's pool, as this heap's objects."""
        if setting.pool is None:
            return None
        outsiders = {FOREIGN: self.foreign, NON_BLOCK: self.fixed[4]}
        return [self.blocks[i] if i >= 0 else outsiders[i] for i in setting.pool]


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
    reference: Oracle,
    *,
    setting: Setting = Setting(),
    checked_class: type[CheckedFreeBlockQueue[Any]] = CheckedFreeBlockQueue,
    on_leaf: Callable[[Heap, str | None], None] | None = None,
) -> Exploration:
    """Compare ``checker`` with ``reference`` on every heap of ``size`` blocks, leaf by leaf.

    Depth-first: run both on the partial heap; a read of an unassigned item
    branches on its values; a run that finishes is a leaf, which stands for
    ``weight * (values per unassigned item)`` labelled heaps. Without a pool or
    a membership record the runs reach blocks through links only, so a block
    whose link is read has been named by then; with either, which name blocks
    by label, no block is interchangeable and every block is named from the start.
    The checker gets the pool as an iterator if the setting says so, the oracle
    always as a list.
    """
    heap = Heap(size, setting.members, checked_class)
    found = Exploration()
    pool = heap.pool(setting)
    values_per_link = len(heap.fixed) + size
    owners = heap.owners()

    def step(named: int, weight: int) -> None:
        found.runs += 1
        try:
            expected = reference(heap.queue) if pool is None else reference(heap.queue, pool)
            handed = iter(pool) if pool is not None and setting.iterator else pool
            got = verdict(checker, heap.queue, handed)
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

    named_from_start = setting.pool is not None or setting.members is not None
    step(size if named_from_start else 0, 1)
    return found


def _describe_leaf(heap: Heap) -> str:
    """The assigned items of a partial heap, for a failure message."""
    return ", ".join(
        f"{owner!r}.{name}={value!r}"
        for owner in (*heap.owners(), heap.queue)
        for name, value in owner.assigned.items()
    )


@dataclass(frozen=True)
class Pair:
    """A checker, the oracle that defines it, and what it takes besides the queue.

    ``takes`` is ``"queue"``, ``"pool"`` (a pool after the queue) or ``"members"``
    (a check-mode queue with its membership record).
    """

    checker: Checker
    reference: Oracle
    takes: str = "queue"


PAIRS: dict[str, Pair] = {
    "check_invariants": Pair(check_invariants, oracle),
    "check_invariants with a pool": Pair(check_invariants, oracle, "pool"),
    "check_sentinel_linkage": Pair(check_sentinel_linkage, linkage_oracle),
    "check_no_duplicates": Pair(check_no_duplicates, duplicates_oracle),
    "check_count_consistency": Pair(check_count_consistency, count_oracle),
    "check_detached_outside": Pair(check_detached_outside, detached_oracle, "pool"),
    "full_check": Pair(full_check, full_check_oracle, "members"),
}

#: Blocks per heap in the exhaustive comparison. A pool or a membership record makes every
#: block distinguishable (no symmetry), and there are many of them, so their trees grow faster:
#: every pool shape and every record up to 3 blocks, and the whole pool up to 4.
EXHAUSTIVE_SIZES = range(7)
EXHAUSTIVE_SIZES_EVERY_SETTING = range(4)
EXHAUSTIVE_SIZE_WHOLE_POOL = 4


def settings(pair: Pair, size: int) -> dict[str, Setting]:
    """The settings ``pair`` is compared in over heaps of ``size`` blocks."""
    if pair.takes == "pool":
        if size in EXHAUSTIVE_SIZES_EVERY_SETTING:
            return pool_settings(size)
        return {"every block": Setting(pool=tuple(range(size)))}
    if pair.takes == "members":
        return membership_settings(size)
    return {"": Setting()}


def sizes(pair: Pair) -> range:
    """The heap sizes ``pair`` is compared over exhaustively."""
    if pair.takes == "queue":
        return EXHAUSTIVE_SIZES
    if pair.takes == "pool":
        return range(EXHAUSTIVE_SIZE_WHOLE_POOL + 1)
    return EXHAUSTIVE_SIZES_EVERY_SETTING


def _total_heaps(size: int) -> int:
    """Every heap of ``size`` blocks: each of ``2 * (size + 3)`` links over its values, a count."""
    values = len(Heap(size).fixed) + size
    return int(values ** (2 * (size + 3))) * len(COUNTS)


@PURE_ONLY
@pytest.mark.parametrize("name", PAIRS)
def test_checkers_agree_with_oracle_everywhere(name: str) -> None:
    """On every heap and setting of the module docstring, the checker gives the oracle's verdict."""
    pair = PAIRS[name]
    for size in sizes(pair):
        for label, setting in settings(pair, size).items():
            found = explore(size, pair.checker, pair.reference, setting=setting)
            assert found.heaps == _total_heaps(size), "the leaves must cover every heap once"
            assert found.disagreements == 0, (size, label, found.examples)
            assert found.leaves > size  # the walk went somewhere


# ------------------------------------------------------ the two arguments, checked


def _concrete(
    heap: Heap, setting: Setting, rng: random.Random
) -> tuple[CheckedFreeBlockQueue[Block], list[object] | None]:
    """A real checked queue and real blocks with the leaf's links, the unread ones at random.

    Returns the queue and the setting's pool of real objects; the queue's
    membership record is the setting's (empty without one).
    """
    queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0, trace=False)
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
    queue._members = {id(blocks[i]): blocks[i] for i in setting.members or ()}
    lazy_pool = heap.pool(setting)
    pool = None if lazy_pool is None else [real.get(id(item), item) for item in lazy_pool]
    return queue, pool


_UNREAD = object()

#: Random completions built for each leaf of the three-block exploration.
COMPLETIONS_PER_LEAF = 8

#: The one setting of each kind whose leaves are completed: the whole pool of three blocks,
#: and a membership record that holds two of them.
COMPLETED_SETTINGS = {
    "queue": Setting(),
    "pool": Setting(pool=(0, 1, 2)),
    "members": Setting(members=(0, 2)),
}


@PURE_ONLY
@pytest.mark.parametrize("name", PAIRS)
def test_a_leaf_stands_for_every_completion_of_it(name: str) -> None:
    """Random completions of each leaf, on real blocks, get the leaf's verdict from both sides."""
    pair = PAIRS[name]
    setting = COMPLETED_SETTINGS[pair.takes]
    rng = random.Random(name)
    completions = 0

    def complete(heap: Heap, expected: str | None) -> None:
        nonlocal completions
        for _ in range(COMPLETIONS_PER_LEAF):
            queue, pool = _concrete(heap, setting, rng)
            got = pair.reference(queue) if pool is None else pair.reference(queue, pool)
            assert got == expected, _describe_leaf(heap)
            assert verdict(pair.checker, queue, pool) == expected, _describe_leaf(heap)
            completions += 1

    found = explore(3, pair.checker, pair.reference, setting=setting, on_leaf=complete)
    assert completions == COMPLETIONS_PER_LEAF * found.leaves > 200


@dataclass(frozen=True)
class Links:
    """A heap of real objects named by index: the head, the tail, the blocks, two outsiders."""

    links: tuple[int, ...]  # (head.prev, head.next, tail.prev, tail.next, b0.prev, b0.next, ...)
    count: int  # an index into COUNTS
    members: tuple[int, ...] = ()  # check mode's membership record, by block name

    def build(self, order: tuple[int, ...]) -> tuple[CheckedFreeBlockQueue[Block], list[Block]]:
        """Build it with block ``i`` played by ``order[i]``'s object (a relabelling).

        Returns the queue and its blocks by name, the pool the pool checkers get.
        """
        queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0, trace=False)
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
        queue._members = {id(named[i]): named[i] for i in self.members}
        return queue, named


def random_links(rng: random.Random, size: int, healthy_first: bool) -> Links:
    """A random heap: mostly a healthy chain with a few links rewritten, or any links at all.

    The membership record is the chain's blocks, or a random set of blocks.
    """
    values = 5 + size
    if not healthy_first:
        links = [rng.randrange(values) for _ in range(2 * (size + 2))]
        members = tuple(b for b in range(size) if rng.random() < 0.5)
        return Links(tuple(links), rng.randrange(len(COUNTS)), members)
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
    members = tuple(sorted(chain)) if rng.random() < 0.5 else tuple(rng.sample(range(size), 1))
    return Links(tuple(links), min(count, len(COUNTS) - 1), members)


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
        for name, pair in PAIRS.items():
            verdicts = set()
            for order in itertools.permutations(range(3)):
                queue, named = heap.build(order)
                verdicts.add(verdict(pair.checker, queue, named if pair.takes == "pool" else None))
            assert len(verdicts) == 1, (name, heap)
    assert built >= 200, f"only {built} of the random heaps could be built in this build"


# --------------------------------------------------------- random damaged heaps


def _writable(value: object) -> bool:
    try:
        Block().next_free_block = value  # type: ignore[assignment]  # probing the slot's type
    except TypeError:
        return False
    return True


@dataclass
class Damaged:
    """A damaged checked queue, its pool of six blocks, and objects of another queue."""

    queue: CheckedFreeBlockQueue[Block]
    pool: list[Block]
    elsewhere: list[object]


def damaged_heaps(seed: int, count: int) -> Iterator[Damaged]:
    """``count`` healthy checked queues of 0 to 6 blocks of a pool of 6, each damaged.

    Up to three writes: a write points a link of a sentinel or pool block at
    ``None``, a block of the pool, a sentinel of this or another queue, another
    queue's block or a non-block, or sets the count to a wrong value. One queue
    in five first has a pool block linked in, or a member taken out, behind check
    mode's back, so that its membership record disagrees with the chain; it may
    then take no damaging write at all.
    """
    rng = random.Random(seed)
    outsiders: list[object] = [None] + ([_NotABlock()] if _writable(_NotABlock()) else [])
    counts = [c for c in COUNTS if _count_writable(c)]
    for _ in range(count):
        pool = [Block() for _ in range(6)]
        queue = CheckedFreeBlockQueue(
            rng.sample(pool, rng.randint(0, 6)), full_check_every=0, trace=False
        )
        other = FreeBlockQueue([Block(), Block()])
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        elsewhere: list[object] = [other.fake_free_list_head, other.fake_free_list_tail]
        elsewhere.append(other.fake_free_list_head.next_free_block)
        values = [*outsiders, *pool, head, tail, *elsewhere]
        behind = rng.random() < 0.2
        if behind:
            _behind_its_back(rng, queue, pool)
        for _ in range(rng.randint(0 if behind else 1, 3)):
            if rng.random() < 0.15:
                drifted = queue.num_free_blocks
                choices = [*counts] if type(drifted) is not int else [*counts, drifted + 1]
                queue.num_free_blocks = rng.choice(choices)  # type: ignore[assignment]  # damage
            else:
                owner = rng.choice([head, tail, *pool])
                setattr(owner, rng.choice(LINK_FIELDS), rng.choice(values))
        yield Damaged(queue, pool, elsewhere)


def _behind_its_back(
    rng: random.Random, queue: CheckedFreeBlockQueue[Block], pool: list[Block]
) -> None:
    """Link a detached pool block in, take a member out, or both, with the base class's methods.

    The chain and the count stay consistent; only check mode's membership record
    now disagrees with them (with both, in the blocks it names but not in their number).
    """
    members = [block for block in pool if id(block) in queue._members]
    detached = [block for block in pool if id(block) not in queue._members]
    way = rng.choice(["in", "out", "both"])
    if way != "in" and members:
        FreeBlockQueue.remove(queue, rng.choice(members))
    if way != "out" and detached:
        FreeBlockQueue.append(queue, rng.choice(detached))


def random_pool(rng: random.Random, heap: Damaged) -> tuple[list[object], bool]:
    """A random pool for ``heap``: the whole pool or part of it, in any order, and more.

    Sometimes a block repeated, another queue's sentinel or block, or a non-block;
    and whether to hand it over as a one-shot iterator.
    """
    pool: list[object] = list(heap.pool)
    if rng.random() < 0.5:
        pool = rng.sample(pool, rng.randint(0, len(pool)))
    if pool and rng.random() < 0.2:
        pool.insert(rng.randrange(len(pool) + 1), rng.choice(pool))
    if rng.random() < 0.2:
        pool.insert(rng.randrange(len(pool) + 1), rng.choice([*heap.elsewhere, _NotABlock()]))
    return pool, rng.random() < 0.3


def _count_writable(count: object) -> bool:
    try:
        FreeBlockQueue().num_free_blocks = count  # type: ignore[assignment]  # probing the type
    except TypeError:
        return False
    return True


#: Random damaged heaps compared in the default run (about a second of CPU).
RANDOM_HEAPS = 10_000


def compare_on_random_heaps(seed: int, count: int) -> dict[str, int]:
    """Compare every pair on ``count`` random damaged heaps; return how often each verdict came.

    The verdicts counted are the oracle's for ``check_invariants`` with a random
    pool and for ``full_check``, by their first word and, for check mode's
    membership report, ``"I3 not a member"``.
    """
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    for heap in damaged_heaps(seed, count):
        pool, as_iterator = random_pool(rng, heap)
        for name, pair in PAIRS.items():
            if pair.takes == "pool":
                expected = pair.reference(heap.queue, pool)
                got = verdict(pair.checker, heap.queue, iter(pool) if as_iterator else pool)
            else:
                expected = pair.reference(heap.queue)
                got = verdict(pair.checker, heap.queue)
            assert got == expected, (name, expected, got)
        for found in (oracle(heap.queue, pool), full_check_oracle(heap.queue)):
            key = "None" if found is None else found.split()[0]
            if found is not None and found.endswith("not a member"):
                key = "I3 not a member"
            seen[key] = seen.get(key, 0) + 1
    return seen


def test_checkers_agree_on_random_heaps() -> None:
    """On 10,000 random damaged heaps of up to 6 blocks each checker gives its oracle's verdict."""
    seen = compare_on_random_heaps(14, RANDOM_HEAPS)
    # The damage reaches every clause and check mode's membership report, and some damage
    # happens to leave a healthy queue.
    assert set(seen) == {"None", "I1", "I2", "I3", "I4", "I3 not a member"}, seen


# ------------------------------------------------------------ weakened checkers


@dataclass(frozen=True)
class Weakening:
    """One test deleted from a checker module's source, and the pair whose oracle judges it."""

    module: ModuleType
    deleted: str
    stand_in: str
    pair: str


#: One test deleted from the checkers' source each.
WEAKENINGS: dict[str, Weakening] = {
    "no tail back-link test": Weakening(
        invariants, "    if before_tail is not previous:\n", "    if False:\n", "check_invariants"
    ),
    "a bool passes as a count": Weakening(
        invariants,
        " or isinstance(count, bool) or count < 0:",
        " or count < 0:",
        "check_invariants",
    ),
    "another queue's sentinel passes as a block": Weakening(
        invariants,
        "    if isinstance(node, Sentinel) or not is_block(node):\n",
        "    if not is_block(node):\n",
        "check_invariants",
    ),
    "check_invariants ignores its pool": Weakening(
        invariants,
        "    if pool is not None:\n        check_detached_outside(queue, pool)\n",
        "",
        "check_invariants with a pool",
    ),
    "a pool block in the queue is not skipped": Weakening(
        invariants,
        "        if id(block) in members:\n            continue\n",
        "",
        "check_invariants with a pool",
    ),
    "the one-walk check trusts the chain": Weakening(
        checked,
        "            for _ in range(count):\n"
        "                if id(node) not in members or node.prev_free_block is not previous:",
        "            for _ in range(count):\n"
        "                if node.prev_free_block is not previous:",
        "full_check",
    ),
    "a non-member reported at the wrong position": Weakening(
        checked,
        "            block = block.next_free_block  # type: ignore[union-attr]  # checked above\n"
        "            position += 1\n",
        "            block = block.next_free_block  # type: ignore[union-attr]  # checked above\n",
        "full_check",
    ),
}

#: Planted checker bugs of ``specs.planted_bugs.checkers`` in what the extensions cover,
#: each with the pair whose oracle judges it.
PLANTED = {
    "detached_outside_reads_prev_only": "check_invariants with a pool",
    "full_check_skips_membership": "full_check",
    "full_check_counts_by_value": "full_check",
}


def weakened_module(weakening: str) -> dict[str, Any]:
    """The namespace of the weakened module's source, compiled with one test deleted."""
    spec = WEAKENINGS[weakening]
    source = inspect.getsource(spec.module)
    if "__mutmut_" in source:
        pytest.skip("under mutmut, the module's source holds every mutant as well")
    assert source.count(spec.deleted) == 1, f"the test to delete is not there: {spec.deleted!r}"
    namespace: dict[str, Any] = {"__name__": f"weakened_{spec.module.__name__.rsplit('.')[-1]}"}
    exec(compile(source.replace(spec.deleted, spec.stand_in), "<weakened>", "exec"), namespace)
    return namespace


def disagreements_at_three(
    pair: Pair, checker: Checker, checked_class: type[CheckedFreeBlockQueue[Any]]
) -> Exploration:
    """Explore every heap of 3 blocks in every setting of ``pair``; add up what was found."""
    total = Exploration()
    for setting in settings(pair, 3).values():
        found = explore(3, checker, pair.reference, setting=setting, checked_class=checked_class)
        assert found.heaps == _total_heaps(3)
        total.heaps += found.heaps
        total.leaves += found.leaves
        total.disagreements += found.disagreements
        total.examples += found.examples[: 3 - len(total.examples)]
    return total


def weakened_run(weakening: str) -> Exploration:
    """The weakened checker against its pair's oracle over every heap and setting of 3 blocks."""
    pair = PAIRS[WEAKENINGS[weakening].pair]
    namespace = weakened_module(weakening)
    if pair.takes == "members":
        return disagreements_at_three(pair, full_check, namespace["CheckedFreeBlockQueue"])
    checker: Checker = namespace["check_invariants"]
    return disagreements_at_three(pair, checker, CheckedFreeBlockQueue)


def planted_run(bug: str) -> Exploration:
    """The planted checker bug, installed, against its pair's oracle over heaps of 3 blocks."""
    pair = PAIRS[PLANTED[bug]]
    with planted(CHECKER_CATALOGUE[bug]):
        return disagreements_at_three(pair, pair.checker, CheckedFreeBlockQueue)


@PURE_ONLY
@pytest.mark.parametrize("weakening", WEAKENINGS)
def test_oracle_catches_a_weakened_checker(weakening: str) -> None:
    """A checker missing one test disagrees with the oracle on some heaps of 3 blocks."""
    assert weakened_run(weakening).disagreements > 0, weakening


@PURE_ONLY
@pytest.mark.parametrize("bug", PLANTED)
def test_oracle_catches_a_planted_checker_bug(bug: str) -> None:
    """A planted bug of the pool check or of full_check disagrees with the oracle at 3 blocks."""
    assert planted_run(bug).disagreements > 0, bug


def main() -> None:
    """Print, for each checker, the heaps, leaves and runs of the exhaustive comparison."""
    for name, pair in PAIRS.items():
        for size in sizes(pair):
            start = time.process_time()
            total = Exploration()
            cases = settings(pair, size)
            for setting in cases.values():
                found = explore(size, pair.checker, pair.reference, setting=setting)
                total.heaps += found.heaps
                total.leaves += found.leaves
                total.runs += found.runs
                total.disagreements += found.disagreements
            print(
                f"{name}, {size} blocks, {len(cases)} setting(s): {total.heaps:.3e} heaps in "
                f"{total.leaves} leaves ({total.runs} runs), {total.disagreements} "
                f"disagreements, {time.process_time() - start:.2f} s"
            )
    start = time.process_time()
    seen = compare_on_random_heaps(14, RANDOM_HEAPS)
    print(
        f"{RANDOM_HEAPS} random damaged heaps, {len(PAIRS)} checkers: "
        f"{time.process_time() - start:.2f} s; verdicts {seen}"
    )
    runs = {**dict.fromkeys(WEAKENINGS, weakened_run), **dict.fromkeys(PLANTED, planted_run)}
    for label, run in runs.items():
        found = run(label)
        print(
            f"weakened ({label}): disagrees on {found.disagreements:.3e} of "
            f"{found.heaps:.3e} heaps of 3 blocks, e.g. {found.examples[:1]}"
        )


if __name__ == "__main__":
    main()
