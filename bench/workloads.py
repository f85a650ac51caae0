"""The five workloads and the timing method.

Method: every implementation in one process, interleaved (each repetition
times every implementation once, in an order rotated per repetition), the
garbage collector off while timing, and the median of the repetitions kept.
One sample repeats the workload ``loops`` times and reports the time of one,
so that the n = 10 samples are long enough to time reliably.

Every implementation performs the same operations on blocks with the same
ids; after each workload the free lists are compared id by id, so a run also
shows that all implementations computed the same result.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from bench.baselines import PostChangeBlock, PreChangeBlock
from bench.subjects import (
    VLLM_RELEASE,
    BenchBlock,
    QueueLike,
    Subject,
    detach_all,
    new_blocks,
    vllm_release_subject,
)
from verified_queue.block import Block

__all__ = [
    "APPEND",
    "BLOCK_WITH_VLLM_FIELDS",
    "POPLEFT",
    "RELEASE_BLOCK",
    "REMOVE",
    "Settings",
    "WorkloadResult",
    "block_memory",
    "collector_off",
    "mixed_stream",
    "run_build",
    "run_mixed",
    "run_stepped",
    "time_batch",
    "time_prepend",
    "time_single",
]

#: The memory rows that the block-size target compares: ours, then vLLM's own.
BLOCK_WITH_VLLM_FIELDS = f"Block subclass with {VLLM_RELEASE}'s fields (slotted dataclass)"
RELEASE_BLOCK = f"{VLLM_RELEASE}'s KVCacheBlock (slotted dataclass)"

# Operation codes of the mixed stream.
POPLEFT, REMOVE, APPEND = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure."""

    sizes: tuple[int, ...] = (10, 50, 100, 500, 1000)
    queue_size: int = 100_000
    build_size: int = 1_000_000
    repetitions: int = 5
    #: Block operations per timing sample; ``loops = max(1, ops_per_sample // n)``.
    ops_per_sample: int = 4_000
    seed: int = 0

    def loops(self, n: int) -> int:
        """Return how many times one sample repeats a workload of size ``n``."""
        return max(1, self.ops_per_sample // n)


@dataclass(slots=True)
class WorkloadResult:
    """Median seconds per workload step, by implementation name and then by n."""

    name: str
    unit: str
    medians: dict[str, dict[int, float]] = field(default_factory=dict)
    samples: dict[str, dict[int, list[float]]] = field(default_factory=dict)

    @property
    def ratio_title(self) -> str:
        """The title of a panel that plots this workload's ratios: the name and what one sample is.

        The ratios have no unit (a time over the reference's time), so the title names
        what was timed, not the unit of the tables' times: ``single (time per step, as a
        ratio)``, not ``single (µs per step)`` over a ratio axis.
        """
        timed = self.unit.split(" per ", 1)[-1]
        return f"{self.name} (time per {timed}, as a ratio)"

    def record(self, subject: str, n: int, seconds: float) -> None:
        """Add one sample."""
        self.samples.setdefault(subject, {}).setdefault(n, []).append(seconds)

    def finish(self) -> None:
        """Compute the medians of the recorded samples."""
        self.medians = {
            subject: {n: statistics.median(values) for n, values in by_n.items()}
            for subject, by_n in self.samples.items()
        }


@contextmanager
def collector_off() -> Iterator[None]:
    """Collect once, then keep the garbage collector off until the block ends."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _rotated(subjects: Sequence[Subject], turn: int) -> list[Subject]:
    """Return ``subjects`` starting at ``turn``, so no implementation always goes first."""
    shift = turn % len(subjects)
    return [*subjects[shift:], *subjects[:shift]]


def _free_ids(queue: QueueLike) -> list[int]:
    return [block.block_id for block in queue.get_all_free_blocks()]


def _same_results(name: str, results: dict[str, list[int]]) -> None:
    """Raise if the implementations ended a workload with different free lists."""
    expected_name, expected = next(iter(results.items()))
    for subject, ids in results.items():
        if ids != expected:
            raise RuntimeError(f"{name}: {subject} and {expected_name} disagree on the free list")


def time_single(queue: QueueLike, n: int, loops: int) -> float:
    """n x popleft, then n x append of the popped blocks: the per-block allocator."""
    popleft = queue.popleft
    append = queue.append
    start = time.perf_counter()
    for _ in range(loops):
        taken = [popleft() for _ in range(n)]
        for block in taken:
            append(block)
    return (time.perf_counter() - start) / loops


def time_batch(queue: QueueLike, n: int, loops: int) -> float:
    """popleft_n(n), then append_n of the result: the batched allocator."""
    popleft_n = queue.popleft_n
    append_n = queue.append_n
    start = time.perf_counter()
    for _ in range(loops):
        append_n(popleft_n(n))
    return (time.perf_counter() - start) / loops


class _PrependQueue(QueueLike, Protocol):
    """A queue that can also link a batch at the front (vLLM 0.33.0 and later)."""

    def prepend_n(self, blocks: list[Any]) -> None:
        """Link ``blocks`` at the front, in order."""
        ...


def time_prepend(queue: QueueLike, n: int, loops: int) -> float:
    """popleft_n(n), then prepend_n of the result: blocks freed without a hash go first (LIFO)."""
    popleft_n = queue.popleft_n
    prepend_n = cast("_PrependQueue", queue).prepend_n
    start = time.perf_counter()
    for _ in range(loops):
        prepend_n(popleft_n(n))
    return (time.perf_counter() - start) / loops


STEPPED: dict[str, Callable[[QueueLike, int, int], float]] = {
    "single": time_single,
    "batch": time_batch,
    "prepend": time_prepend,
}


def run_stepped(name: str, subjects: Sequence[Subject], settings: Settings) -> WorkloadResult:
    """Time the ``single``, ``batch`` or ``prepend`` workload on one queue per implementation.

    Each workload leaves the queue the same size, so one queue serves every
    repetition and every n. ``prepend`` measures only the implementations
    that have ``prepend_n``.
    """
    timer = STEPPED[name]
    result = WorkloadResult(name, "µs per step")
    queues = {s.name: s.new_queue(new_blocks(s, settings.queue_size)) for s in subjects}
    if name == "prepend":
        subjects = [s for s in subjects if hasattr(queues[s.name], "prepend_n")]
    with collector_off():
        for n in settings.sizes:
            loops = settings.loops(n)
            for repetition in range(settings.repetitions):
                for subject in _rotated(subjects, repetition):
                    queue = queues[subject.name]
                    timer(queue, n, 1)  # warm the blocks this sample touches
                    result.record(subject.name, n, timer(queue, n, loops))
    _same_results(name, {s.name: _free_ids(queues[s.name]) for s in subjects})
    result.finish()
    return result


def mixed_stream(queue_size: int, length: int, seed: int) -> list[tuple[int, int]]:
    """Return a seeded stream of ``(operation, block index)`` for the mixed workload.

    40% popleft, 20% remove of a random linked block (a prefix-cache hit),
    40% append of a random held block (a popleft when none is held). The
    stream is computed on a model of the queue, so it is valid for every
    implementation that starts with blocks ``0 .. queue_size - 1`` in order.
    """
    rng = random.Random(seed)
    order: OrderedDict[int, None] = OrderedDict.fromkeys(range(queue_size))
    linked = list(range(queue_size))  # the linked indices, for a uniform O(1) pick
    position = {index: index for index in linked}
    held: list[int] = []

    def unlink(index: int) -> None:
        spot = position.pop(index)
        last = linked.pop()
        if last != index:
            linked[spot] = last
            position[last] = spot
        held.append(index)

    stream: list[tuple[int, int]] = []
    for _ in range(length):
        draw = rng.random()
        if draw >= 0.6 and held:
            spot = rng.randrange(len(held))
            held[spot], held[-1] = held[-1], held[spot]
            index = held.pop()
            order[index] = None
            position[index] = len(linked)
            linked.append(index)
            stream.append((APPEND, index))
        elif 0.4 <= draw < 0.6:
            index = linked[rng.randrange(len(linked))]
            del order[index]
            unlink(index)
            stream.append((REMOVE, index))
        else:
            index, _ = order.popitem(last=False)
            unlink(index)
            stream.append((POPLEFT, index))
    return stream


def _replay(queue: QueueLike, operations: list[tuple[int, Any]]) -> float:
    popleft = queue.popleft
    remove = queue.remove
    append = queue.append
    start = time.perf_counter()
    for operation, block in operations:
        if operation == POPLEFT:
            popleft()
        elif operation == REMOVE:
            remove(block)
        else:
            append(block)
    return time.perf_counter() - start


def run_mixed(subjects: Sequence[Subject], settings: Settings) -> WorkloadResult:
    """Time the mixed workload: time per n operations of one seeded stream.

    Each sample starts from a freshly built queue (not timed) and replays
    ``loops * n`` operations of the same stream.
    """
    result = WorkloadResult("mixed", "µs per n operations")
    longest = max(settings.loops(n) * n for n in settings.sizes)
    stream = mixed_stream(settings.queue_size, longest, settings.seed)
    blocks = {s.name: new_blocks(s, settings.queue_size) for s in subjects}
    final: dict[str, list[int]] = {}
    with collector_off():
        for n in settings.sizes:
            loops = settings.loops(n)
            for repetition in range(settings.repetitions):
                for subject in _rotated(subjects, repetition):
                    own = blocks[subject.name]
                    operations = [(code, own[index]) for code, index in stream[: loops * n]]
                    detach_all(own)
                    queue = subject.new_queue(own)
                    result.record(subject.name, n, _replay(queue, operations) / loops)
                    final[subject.name] = _free_ids(queue)
                    del queue, operations
    _same_results("mixed", final)
    result.finish()
    return result


def run_build(subjects: Sequence[Subject], settings: Settings) -> WorkloadResult:
    """Time constructing a queue of ``build_size`` detached blocks."""
    result = WorkloadResult("build", "ms per queue")
    size = settings.build_size
    final: dict[str, list[int]] = {}
    for subject in subjects:
        blocks = new_blocks(subject, size)
        with collector_off():
            for _ in range(settings.repetitions):
                detach_all(blocks)
                start = time.perf_counter()
                queue = subject.new_queue(blocks)
                result.record(subject.name, size, time.perf_counter() - start)
                del queue
        detach_all(blocks)
        queue = subject.new_queue(blocks)
        final[subject.name] = _free_ids(queue)
        del queue, blocks
    _same_results("build", final)
    result.finish()
    return result


def block_memory(count: int = 100_000) -> dict[str, float]:
    """Return bytes per block (``tracemalloc``) of each block type, ids allocated beforehand."""
    ids = list(range(count))
    kinds: dict[str, Callable[[int], Any]] = {
        "Block (links only)": lambda _id: Block(),
        BLOCK_WITH_VLLM_FIELDS: BenchBlock,
        "vLLM-like slotted dataclass": PostChangeBlock,
        "pre-change @dataclass (instance __dict__)": PreChangeBlock,
    }
    release = vllm_release_subject()
    if release is not None:
        kinds[RELEASE_BLOCK] = release.new_block
    sizes: dict[str, float] = {}
    for label, make in kinds.items():
        blocks: list[Any] = [None] * count
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for block_id in ids:
            blocks[block_id] = make(block_id)
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        sizes[label] = (after - before) / count
        del blocks
    return sizes
