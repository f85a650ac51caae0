"""Large-queue tests: identity only at 100,000 blocks, 1,000,000 blocks in order, no allocation."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import pytest

from tests.helpers import TripwireBlock, numbered
from verified_queue import AlreadyInQueueError, FreeBlockQueue, NotInQueueError


def test_every_operation_on_100k_blocks_never_compares_blocks() -> None:
    """Every operation and error path runs on 100,000 blocks whose __eq__ and __hash__ raise."""
    blocks = [TripwireBlock(i) for i in range(100_000)]
    queue = FreeBlockQueue(blocks)
    assert queue.popleft() is blocks[0]
    taken = queue.popleft_n(1_000)
    assert taken[-1] is blocks[1_000]
    queue.remove(blocks[50_000])
    queue.remove(blocks[-1])
    queue.append(blocks[50_000])
    queue.append_n(taken)
    queue.append_n(block for block in [blocks[0]])
    with pytest.raises(AlreadyInQueueError):
        queue.append(blocks[2_000])
    with pytest.raises(AlreadyInQueueError):
        queue.append_n([blocks[-1], blocks[-1]])
    with pytest.raises(NotInQueueError):
        queue.remove(blocks[-1])
    assert blocks[0] in queue
    assert blocks[-1] not in queue
    contents = queue.get_all_free_blocks()
    assert len(contents) == len(queue) == 99_999
    assert contents[-1] is blocks[0]
    assert sum(1 for _ in queue) == 99_999


def test_million_blocks_built_and_drained_in_order() -> None:
    """A 1,000,000-block queue drains in exactly the order it was built."""
    blocks = numbered(1_000_000)
    queue = FreeBlockQueue(blocks)
    assert len(queue) == 1_000_000
    out_of_order = 0
    for expected in blocks:
        if queue.popleft() is not expected:
            out_of_order += 1
    assert out_of_order == 0
    assert not queue
    assert all(b.prev_free_block is None and b.next_free_block is None for b in blocks)


def allocated_bytes(operation: Callable[[], object], repeat: int) -> int:
    """Return the bytes still allocated after ``repeat`` more calls of ``operation``.

    One call runs before the first snapshot, so the count (a fresh ``int`` above
    256) is in both snapshots and only memory that grows with the calls shows.
    """
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        operation()
        calls = [None] * repeat  # range() would allocate ints above 256
        before = tracemalloc.take_snapshot()
        for _ in calls:
            operation()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    finally:
        gc.enable()
    # Everything this process allocated, except tracemalloc's own bookkeeping and the
    # messages a pytest-xdist worker's channel thread receives meanwhile: a compiled queue
    # has no Python frames, so its allocations could not be told apart by file.
    ignore_tracer = [
        tracemalloc.Filter(inclusive=False, filename_pattern=tracemalloc.__file__),
        tracemalloc.Filter(inclusive=False, filename_pattern="*/execnet/*"),
    ]
    stats = after.filter_traces(ignore_tracer).compare_to(
        before.filter_traces(ignore_tracer), "filename"
    )
    return sum(stat.size_diff for stat in stats)


@pytest.mark.production_only  # check mode keeps a membership dict by design
def test_popleft_append_remove_allocate_nothing() -> None:
    """popleft, append and remove keep no memory per call.

    The bound is under one byte per call, not zero: Python 3.10 keeps one frame per function
    and may reallocate it once during the loop (430 bytes once, seen when this test runs
    alone), while one object kept per call would be at least 16 bytes a call.
    """
    blocks = numbered(20_000)
    queue = FreeBlockQueue(blocks)
    middle = iter(blocks[5_000:16_000])

    def popleft_then_append() -> None:
        queue.append(queue.popleft())

    def remove_then_append() -> None:
        block = next(middle)
        queue.remove(block)
        queue.append(block)

    assert allocated_bytes(popleft_then_append, 10_000) < 10_000
    assert allocated_bytes(remove_then_append, 10_000) < 10_000


def test_allocation_probe_sees_a_leak() -> None:
    """The allocation probe sees memory a queue call keeps, so its bound above means something."""
    queue = FreeBlockQueue(numbered(10))
    kept: list[object] = []
    assert allocated_bytes(lambda: kept.append(queue.get_all_free_blocks()), 10_000) >= 10_000
