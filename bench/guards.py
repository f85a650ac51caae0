"""What each misuse guard of the pure-Python queue costs: ``python -m bench.guards``.

Each variant below is the production method with one guard taken out and
nothing else changed; timing it against the production queue (interleaved,
GC off, median of the repetitions, as in :mod:`bench.workloads`) isolates
that guard's cost. The variants exist for this measurement only: without
their guards they corrupt a queue on the misuse the guard refuses. When
vLLM's wheel is found (as for ``tox -e bench``), vLLM's own queue is timed
in the same rotation, and both the production queue and the variant are
also given as ratios to it: what taking the guard out would buy against
the target of at most 1.00x.

The compiled build is not measured here: an interpreted variant of a compiled
class would measure the interpreter, not the guard.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import verified_queue
from bench.baselines import PostChangeBlock, PostChangeQueue
from bench.subjects import BenchBlock, QueueLike, vllm_release_subject
from bench.workloads import collector_off, time_batch, time_single
from verified_queue._messages import already_linked
from verified_queue._undo import unstage
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["main"]


class NoEmptyGuard(FreeBlockQueue[Any]):
    """``popleft`` without the empty-queue check (it would hand out the tail)."""

    __slots__ = ()

    def popleft(self) -> Any:
        """Production ``popleft`` minus ``if following is None: raise``."""
        head = self.fake_free_list_head
        block: Block = head.next_free_block  # type: ignore[assignment]  # as in production
        following: Block = block.next_free_block  # type: ignore[assignment]  # unguarded
        head.next_free_block = following
        following.prev_free_block = head
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1
        return block


class NoCountGuards(FreeBlockQueue[Any]):
    """``popleft_n`` without the two count checks (``n > len`` and ``n < 0``)."""

    __slots__ = ()

    def popleft_n(self, n: int) -> list[Any]:  # type: ignore[override]  # timed with ints only
        """Production ``popleft_n`` minus its two guards."""
        head = self.fake_free_list_head
        block: Block = head.next_free_block  # type: ignore[assignment]  # as in production
        popped: list[Any] = [None] * n
        for index in range(n):
            popped[index] = block
            following: Block = block.next_free_block  # type: ignore[assignment]  # unguarded
            block.prev_free_block = block.next_free_block = None
            block = following
        head.next_free_block = block
        block.prev_free_block = head
        self.num_free_blocks -= n
        return popped


class NoDoubleFreeGuard(FreeBlockQueue[Any]):
    """``append`` without the detached-block check (a double free would corrupt the list)."""

    __slots__ = ()

    def append(self, block: Any) -> None:
        """Production ``append`` minus its guard."""
        tail = self.fake_free_list_tail
        last: Block = tail.prev_free_block  # type: ignore[assignment]  # as in production
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1


class NoBatchGuard(FreeBlockQueue[Any]):
    """``append_n`` without the per-block detached check; still atomic on other errors."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Any]) -> None:
        """Production ``append_n`` minus the two link reads per block."""
        batch: list[Any] = blocks if type(blocks) is list else list(blocks)
        added = len(batch)
        tail = self.fake_free_list_tail
        last: Block = tail
        try:
            for block in batch:
                block.prev_free_block = last
                last.next_free_block = block
                last = block
            before: Block = tail.prev_free_block  # type: ignore[assignment]  # as in production
        except BaseException:
            unstage(tail, last)
            raise
        if last is not tail:
            first: Block = batch[0]
            tail.next_free_block = None
            first.prev_free_block = before
            before.next_free_block = first
            last.next_free_block = tail
            tail.prev_free_block = last
            self.num_free_blocks += added


class OneReadBatchGuard(FreeBlockQueue[Any]):
    """``append_n`` reading one link per block: what a head sentinel with ``prev`` set would allow.

    ``prev_free_block`` alone refuses a linked block, a tail sentinel and a
    repeat in the batch, but not a head sentinel, whose ``prev`` is ``None``:
    this is the guard that a representation with a non-``None`` outer link on
    the head would make sufficient, timed here before anyone pays for the change.
    """

    __slots__ = ()

    def append_n(self, blocks: Iterable[Any]) -> None:
        """Production ``append_n`` with the ``next_free_block`` read of its guard taken out."""
        batch: list[Any] = blocks if type(blocks) is list else list(blocks)
        added = len(batch)
        tail = self.fake_free_list_tail
        last: Block = tail
        try:
            for block in batch:
                if block.prev_free_block is not None:
                    raise already_linked("append_n", block, last, tail)
                block.prev_free_block = last
                last.next_free_block = block
                last = block
            before: Block = tail.prev_free_block  # type: ignore[assignment]  # as in production
        except BaseException:
            unstage(tail, last)
            raise
        if last is not tail:
            first: Block = batch[0]
            tail.next_free_block = None
            first.prev_free_block = before
            before.next_free_block = first
            last.next_free_block = tail
            tail.prev_free_block = last
            self.num_free_blocks += added


class NoBatchGuardNoAtomicity(FreeBlockQueue[Any]):
    """``append_n`` as the post-change design writes it: no guard, no copy, no undo."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Any]) -> None:
        """Link the batch in one unchecked pass."""
        tail = self.fake_free_list_tail
        last: Block = tail.prev_free_block  # type: ignore[assignment]  # as in production
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(blocks)  # type: ignore[arg-type]  # lists only, here


#: guard -> (the variant without it, the workload that exercises it, how often it runs)
VARIANTS: dict[str, tuple[type[FreeBlockQueue[Any]], str, str]] = {
    "popleft: empty-queue check": (NoEmptyGuard, "single", "call"),
    "append: double-free check (2 link reads)": (NoDoubleFreeGuard, "single", "call"),
    "popleft_n: n > len and n < 0 checks": (NoCountGuards, "batch", "step"),
    "append_n: double-free check (2 link reads per block)": (NoBatchGuard, "batch", "block"),
    "append_n: its second link read (next_free_block)": (OneReadBatchGuard, "batch", "block"),
    "append_n: that check, the list copy and the undo path": (
        NoBatchGuardNoAtomicity,
        "batch",
        "block",
    ),
}

TIMERS: dict[str, Callable[[QueueLike, int, int], float]] = {
    "single": time_single,
    "batch": time_batch,
}


def _median_times(
    builders: dict[str, tuple[Callable[[list[Any]], QueueLike], Callable[[int], Any]]],
    workload: str,
    n: int,
    repetitions: int,
    queue_size: int,
) -> dict[str, float]:
    timer = TIMERS[workload]
    loops = max(1, 20_000 // n)
    queues = {
        name: build([new_block(i) for i in range(queue_size)])
        for name, (build, new_block) in builders.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in builders}
    names = list(builders)
    with collector_off():
        for repetition in range(repetitions):
            shift = repetition % len(names)
            for name in names[shift:] + names[:shift]:
                timer(queues[name], n, 1)
                samples[name].append(timer(queues[name], n, loops))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cost of each guard, in ns per operation and per step, at each n."""
    parser = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__)
    parser.add_argument("--repetitions", type=int, default=11)
    parser.add_argument("--sizes", default="10,1000")
    parser.add_argument("--queue-size", type=int, default=100_000)
    args = parser.parse_args(argv)
    if verified_queue.COMPILED:
        print("the compiled queue is loaded: guard costs are measured on the pure-Python build")
        return 2
    sizes = [int(part) for part in args.sizes.split(",")]
    print(
        f"Python guard costs, median of {args.repetitions} interleaved repetitions, "
        f"queue of {args.queue_size:,} blocks; 'production' is verified_queue.FreeBlockQueue"
    )
    release = vllm_release_subject()
    reference = "post-change" if release is None else release.name
    print(
        "\n| guard | workload | n | production µs | without the guard µs "
        f"| guard cost per step | per call or block | share of {reference}'s step "
        f"| production / {reference} | without / {reference} |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for guard, (variant, workload, unit) in VARIANTS.items():
        builders: dict[str, tuple[Callable[[list[Any]], QueueLike], Callable[[int], Any]]] = {
            "production": (FreeBlockQueue, BenchBlock),
            "variant": (variant, BenchBlock),
            "post-change": (PostChangeQueue, PostChangeBlock),
        }
        if release is not None:
            # vLLM's own queue, from its wheel, with its own block class.
            builders[reference] = (release.new_queue, release.new_block)
        for n in sizes:
            times = _median_times(builders, workload, n, args.repetitions, args.queue_size)
            cost = times["production"] - times["variant"]
            each = cost if unit == "step" else cost / n
            print(
                f"| {guard} | {workload} | {n} | {times['production'] * 1e6:,.2f} "
                f"| {times['variant'] * 1e6:,.2f} | {cost * 1e9:+,.0f} ns "
                f"| {each * 1e9:+.1f} ns per {unit} "
                f"| {cost / times[reference] * 100:+.1f}% "
                f"| {times['production'] / times[reference]:.2f}x "
                f"| {times['variant'] / times[reference]:.2f}x |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
