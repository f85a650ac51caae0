"""What check mode costs: ``CheckedFreeBlockQueue`` against the production queue, same workload.

Run from a checkout: ``python bench/check_mode_cost.py`` (``--quick`` for a
short run). The workload is a block pool's steady state on a queue of ``n``
blocks: evict the front block and free it again, then take a block from the
middle (a prefix-cache hit) and free it again, so four queue operations per
step and the queue stays at ``n`` blocks. Every subject runs the very same
sequence of blocks.

A floor row times the production queue with check mode's membership dict
kept up to date and no check at all (``MembershipOnlyQueue``): no check mode
built on that dict can cost less.

Method: the subjects are timed interleaved in one process (each repetition
times every subject once, in rotating order), with the garbage collector off
during each timing; the table gives the median time per operation over the
repetitions and its ratio to the production queue. Check mode is timed with
the periodic full check off (``full_check_every=0``: the O(1) checks of every
operation alone), with its default period, and with a full check before every
operation (small queues only), and in the trace level
(``TracedFreeBlockQueue``: the default period plus a record of every operation's
caller). Separate rows time one ``check_invariants``
walk and one ``full_check()`` (one walk over links and membership, which runs
``check_invariants`` only on a fault), the O(n) work the default period
amortizes over ``max(1000, n)`` operations, and
another the memory check mode's membership dict adds per block (traced with
``tracemalloc``). The last table judges check mode with its default settings
against its budget (at most 2x the production queue) at its worst n.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import verified_queue
from verified_queue import Block, CheckedFreeBlockQueue
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue

OPERATIONS_PER_STEP = 4


class MembershipOnlyQueue(FreeBlockQueue[Block]):
    """The production queue plus check mode's membership dict and nothing else: a floor.

    Each operation calls the production method and keeps ``id(block) -> block``
    up to date, as ``CheckedFreeBlockQueue`` does, with no check at all: what
    one interpreted call per operation and that dict cost by themselves, so
    the table shows how much of check mode's price its membership alone sets.
    """

    __slots__ = ("_members",)

    _members: dict[int, Block]

    def __init__(self, blocks: list[Block]) -> None:
        """Link ``blocks`` as the production queue does and record them."""
        super().__init__(blocks)
        self._members = {id(block): block for block in blocks}

    def popleft(self) -> Block:
        """Pop the front block and drop it from the membership."""
        block = FreeBlockQueue.popleft(self)
        del self._members[id(block)]
        return block

    def append(self, block: Block) -> None:
        """Append ``block`` and record it."""
        FreeBlockQueue.append(self, block)
        self._members[id(block)] = block

    def remove(self, block: Block) -> None:
        """Refuse a block that is not recorded (check mode's one O(1) guard), then remove it."""
        members = self._members
        block_id = id(block)
        if block_id not in members:
            raise KeyError(block_id)
        FreeBlockQueue.remove(self, block)
        del members[block_id]


@dataclass(frozen=True)
class Subject:
    """A named way to build the queue under test."""

    name: str
    build: Callable[[list[Block]], FreeBlockQueue[Block]]
    max_n: int | None = None  # skipped above this size (the O(n)-per-operation mode)
    max_steps: int | None = None  # fewer steps per sample for a slow subject


SUBJECTS = [
    Subject("production FreeBlockQueue", FreeBlockQueue),
    Subject("membership dict alone, no check (a floor)", MembershipOnlyQueue),
    Subject(
        "check mode, no periodic full check",
        lambda blocks: CheckedFreeBlockQueue(blocks, full_check_every=0),
    ),
    Subject("check mode (default period)", CheckedFreeBlockQueue),
    Subject("trace level (default period)", TracedFreeBlockQueue),
    Subject(
        "check mode, full check every op",
        lambda blocks: CheckedFreeBlockQueue(blocks, full_check_every=1),
        max_n=1_000,
        max_steps=1_000,
    ),
]


#: The subject issue 22's budget is for (check mode as a user switches it on), and the budget.
JUDGED = "check mode (default period)"
BUDGET = 2.0


def steady_state(queue: FreeBlockQueue[Block], hits: Sequence[Block]) -> float:
    """Run one evict-and-free plus one hit-and-free per block of ``hits``; return seconds."""
    popleft, append, remove = queue.popleft, queue.append, queue.remove
    started = time.perf_counter()
    for block in hits:
        append(popleft())
        remove(block)
        append(block)
    return time.perf_counter() - started


def time_subjects(n: int, steps: int, repetitions: int, seed: int) -> dict[str, list[float]]:
    """Seconds per operation for each subject at size ``n``, one sample per repetition."""
    samples: dict[str, list[float]] = {}
    subjects = [subject for subject in SUBJECTS if subject.max_n is None or n <= subject.max_n]
    prepared = []
    for subject in subjects:
        blocks = [Block() for _ in range(n)]
        queue = subject.build(blocks)
        # The same positions for every subject, so every subject does identical work.
        length = min(steps, subject.max_steps or steps)
        hits = [blocks[index] for index in random.Random(seed).sample(range(n), min(n, length))]
        hits = (hits * (length // len(hits) + 1))[:length]
        prepared.append((subject, queue, hits))
        samples[subject.name] = []
    for repetition in range(repetitions):
        shift = repetition % len(prepared)
        for subject, queue, hits in prepared[shift:] + prepared[:shift]:
            gc.collect()
            gc.disable()
            try:
                seconds = steady_state(queue, hits)
            finally:
                gc.enable()
            samples[subject.name].append(seconds / (len(hits) * OPERATIONS_PER_STEP))
    return samples


def time_full_check(n: int, repetitions: int) -> tuple[float, float]:
    """Median seconds of one ``check_invariants`` walk and of one ``full_check()``, ``n`` blocks.

    ``full_check()`` is what the periodic check runs: on a healthy queue, one
    walk comparing the links and the chain with the membership.
    """
    queue = CheckedFreeBlockQueue([Block() for _ in range(n)], full_check_every=0)
    medians = []
    for check in (check_invariants, CheckedFreeBlockQueue.full_check):
        times = []
        for _ in range(repetitions):
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                check(queue)
                times.append(time.perf_counter() - started)
            finally:
                gc.enable()
        medians.append(statistics.median(times))
    return medians[0], medians[1]


def membership_bytes_per_block(n: int) -> float:
    """Extra bytes per block a checked queue holds over a production queue of the same blocks."""
    blocks = [Block() for _ in range(n)]
    held = []
    for build in (FreeBlockQueue, CheckedFreeBlockQueue):
        for block in blocks:
            block.prev_free_block = block.next_free_block = None
        gc.collect()
        tracemalloc.start()
        queue = build(blocks)
        held.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        del queue
    return (held[1] - held[0]) / n


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cost table; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--steps", type=int, default=50_000, help="steps per sample (4 ops each)")
    parser.add_argument("--repetitions", type=int, default=7, help="samples per subject (>= 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="sizes 1000 and 100000, 10000 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.steps = [1_000, 100_000], 10_000
    if args.repetitions < 5:
        parser.error("--repetitions must be at least 5 for a meaningful median")
    print(
        f"verified_queue {verified_queue.__version__}, queue compiled: {verified_queue.COMPILED}, "
        f"Python {platform.python_version()} ({platform.machine()}), "
        f"{args.repetitions} repetitions of {args.steps * OPERATIONS_PER_STEP} operations, "
        "interleaved, GC off, median"
    )
    print()
    print("| n | subject | ns per operation | ratio to production |")
    print("| ---: | --- | ---: | ---: |")
    judged: dict[int, float] = {}
    for n in args.sizes:
        samples = time_subjects(n, args.steps, args.repetitions, args.seed)
        baseline = statistics.median(samples[SUBJECTS[0].name])
        for name, values in samples.items():
            median = statistics.median(values)
            print(f"| {n:,} | {name} | {median * 1e9:,.0f} | {median / baseline:.2f}x |")
            if name == JUDGED:
                judged[n] = median / baseline
        period = max(1_000, n)
        for label, walk in zip(
            ("one check_invariants walk", "one full_check()"),
            time_full_check(n, args.repetitions),
            strict=True,
        ):
            print(
                f"| {n:,} | {label} | {walk * 1e9:,.0f} total, "
                f"{walk / n * 1e9:.0f} per block | amortized {walk / period * 1e9:,.0f} ns "
                f"per op over {period:,} ops |"
            )
        print(
            f"| {n:,} | check mode's membership | {membership_bytes_per_block(n):.0f} bytes "
            "per block | on top of the production queue |"
        )
    print()
    print("| target | measured | met |")
    print("| --- | --- | --- |")
    n, ratio = max(judged.items(), key=lambda item: item[1])
    print(
        f"| {JUDGED}: at most {BUDGET:g}x the production queue on remove + append, every n "
        f"| worst {ratio:.2f}x (n={n:,}) | {'yes' if ratio <= BUDGET else 'NO'} |"
    )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
