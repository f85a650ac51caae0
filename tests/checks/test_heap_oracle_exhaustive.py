"""The checkers against the definitional oracle on every heap of up to six blocks.

The oracle, the partial heaps and their exploration are in
``tests/checks/heap_oracle_support.py``, whose docstring says what the oracle covers.

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
comparison runs every pool shape the support module lists over every heap of up
to 3 blocks (and the whole pool up to 4), and every membership record (each
subset of the blocks) over every heap of up to 3 blocks; check mode's lazy queue
is a subclass of the checked class whose count, like the links, is read lazily.

``python tests/checks/test_heap_oracle_exhaustive.py`` prints the heap and leaf counts and
times.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass

import pytest

from tests.checks.heap_oracle_support import (
    COUNTS,
    PAIRS,
    PURE_ONLY,
    Exploration,
    Heap,
    LazyBlock,
    LazySentinel,
    Setting,
    _describe_leaf,
    _NotABlock,
    _total_heaps,
    explore,
    settings,
    sizes,
    verdict,
)
from verified_queue.block import LINK_FIELDS, Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue


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
    queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0)
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
        queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0)
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


if __name__ == "__main__":
    main()
