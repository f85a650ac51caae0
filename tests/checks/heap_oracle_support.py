"""What the heap-oracle tests share: a definitional oracle of the checkers, and lazy heaps.

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

The partial heaps read lazily, the exploration of every heap built from them
(:func:`explore`) and the pairs of checker and oracle are here too;
``test_heap_oracle_exhaustive.py`` says why the exploration covers every heap and
compares the checkers with the oracle on all of them, ``test_heap_oracle_random.py`` on
random damaged heaps, and ``test_heap_oracle_weakened.py`` shows weakened checkers
disagreeing with the oracle.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import verified_queue
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
