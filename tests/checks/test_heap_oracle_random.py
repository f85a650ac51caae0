"""The checkers against the definitional oracle on random damaged heaps of up to six blocks.

Random damaged heaps of up to six blocks are checked on real ``Block`` objects
and a real ``CheckedFreeBlockQueue``, with random pools and, now and then, a
membership record changed behind the queue's back. The oracle is in
``tests/checks/heap_oracle_support.py``.

``python tests/checks/test_heap_oracle_random.py`` prints the time and the verdicts met.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.checks.heap_oracle_support import (
    COUNTS,
    PAIRS,
    _NotABlock,
    full_check_oracle,
    oracle,
    verdict,
)
from verified_queue.block import LINK_FIELDS, Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue


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
        queue = CheckedFreeBlockQueue(rng.sample(pool, rng.randint(0, 6)), full_check_every=0)
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


def main() -> None:
    """Print the time of the comparison on random damaged heaps, and the verdicts met."""
    start = time.process_time()
    seen = compare_on_random_heaps(14, RANDOM_HEAPS)
    print(
        f"{RANDOM_HEAPS} random damaged heaps, {len(PAIRS)} checkers: "
        f"{time.process_time() - start:.2f} s; verdicts {seen}"
    )


if __name__ == "__main__":
    main()
