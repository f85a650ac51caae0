"""An operation re-entered from a garbage-collector callback corrupts nothing.

A finalizer or a ``gc.callbacks`` entry runs whenever the collector does, which (with a
threshold of 1) is at every allocation of a tracked object, or at the next point where
the interpreter checks for pending work. Each case re-enters the queue from the k-th
collection inside an operation, for every k; whatever each call then returns or raises,
the queue must be sound and every block outside it detached.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

import pytest

from verified_queue import Block, FreeBlockQueue, TracedFreeBlockQueue
from verified_queue.block import COMPILED
from verified_queue.errors import EmptyQueueError, QueueError
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue as ProductionQueue


@contextmanager
def collecting_at_every_allocation(callback: Callable[[], None]) -> Iterator[None]:
    """Run the collector at every tracked allocation, calling ``callback`` as each starts.

    Only collections in this thread count: another thread's (a pytest-xdist worker's channel
    thread, say) would re-enter the queue concurrently, which it does not promise to survive.
    Under a trace function (coverage.py, a debugger) on Python 3.10 and 3.11 neither do
    collections at a function's first instruction: tracing makes each call allocate its frame
    object, which the code itself does not, the collection runs inside that allocation, and
    re-entry there is outside the promise (docs/usage.md, "Re-entry"). (From 3.12 a collection
    runs at a call's first instruction untraced too, as ``popleft_n``'s checkpoint relies on.)
    """
    thread = threading.get_ident()
    traced = sys.gettrace() is not None and sys.version_info < (3, 12)

    def on_collection(phase: str, _info: dict[str, Any]) -> None:
        if phase != "start" or threading.get_ident() != thread:
            return
        if traced and sys._getframe(1).f_lasti <= 0:
            return  # set off by the tracer, as it entered the function
        callback()

    threshold = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(on_collection)
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(on_collection)


def _remove_the_front(queue: FreeBlockQueue[Block], _spare: list[Block]) -> None:
    """Remove the front block, if any: on the compiled 3.12+ build a collection can run after
    the operation emptied the queue, and finding it empty is right there, not a failure."""
    linked = queue.get_all_free_blocks()
    if linked:
        queue.remove(linked[0])


#: What a callback does to the queue: free a spare block, take the front one, remove one.
REENTRIES: dict[str, Callable[[FreeBlockQueue[Block], list[Block]], object]] = {
    "append": lambda queue, spare: queue.append(spare[0]),
    "popleft": lambda queue, _spare: queue.popleft(),
    "remove": _remove_the_front,
    "append_n": lambda queue, spare: queue.append_n(spare[1:3]),
    "prepend_n": lambda queue, spare: queue.prepend_n(spare[1:3]),
    "popleft_n": lambda queue, _spare: queue.popleft_n(2),
}

#: The interrupted operations, each given the queue, its blocks (the first 4 linked) and spares.
OPERATIONS: dict[str, Callable[[FreeBlockQueue[Block], list[Block]], object]] = {
    "append_n refused": lambda queue, blocks: queue.append_n([*blocks[4:8], blocks[0]]),
    "prepend_n refused": lambda queue, blocks: queue.prepend_n([*blocks[4:8], blocks[4]]),
    "append_n refused, not a block": lambda queue, blocks: queue.append_n([*blocks[4:8], None]),  # type: ignore[list-item]  # the point
    "append_n": lambda queue, blocks: queue.append_n(list(blocks[4:8])),
    "prepend_n": lambda queue, blocks: queue.prepend_n(iter(blocks[4:8])),
    "popleft_n": lambda queue, _blocks: queue.popleft_n(3),
    "popleft_n of all": lambda queue, _blocks: queue.popleft_n(4),
}


#: The queues re-entered: the class the switch binds, and the trace level in every run, whose
#: ``__setattr__`` runs between the production queue's last link write and its count write.
QUEUES: dict[str, type[FreeBlockQueue[Block]]] = {"switched": FreeBlockQueue}
if FreeBlockQueue is not TracedFreeBlockQueue:
    QUEUES["traced"] = TracedFreeBlockQueue


@pytest.mark.parametrize("queue_class", sorted(QUEUES))
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("reentry", sorted(REENTRIES))
def test_reentry_from_a_collection_at_every_allocation(
    operation: str, reentry: str, queue_class: str
) -> None:
    """A queue operation run by a GC callback inside another, at each collection, harms nothing."""
    k = 1
    while _reenter_at(k, OPERATIONS[operation], REENTRIES[reentry], QUEUES[queue_class]):
        k += 1


def _reenter_at(
    k: int,
    operation: Callable[[FreeBlockQueue[Block], list[Block]], object],
    reentry: Callable[[FreeBlockQueue[Block], list[Block]], object],
    queue_class: type[FreeBlockQueue[Block]] = FreeBlockQueue,
) -> bool:
    """Run ``operation``, re-entering with ``reentry`` at the k-th collection; check the queue.

    Returns whether there was a k-th collection (whether a larger k is worth trying).
    """
    blocks = [Block() for _ in range(12)]
    spare = blocks[9:]
    queue = queue_class(blocks[:4])
    collections = 0

    def callback() -> None:
        nonlocal collections
        collections += 1
        if collections == k:
            with suppress(QueueError):  # refusing the re-entrant call is allowed
                reentry(queue, spare)

    with collecting_at_every_allocation(callback), suppress(QueueError):
        operation(queue, blocks)
    check_invariants(queue, pool=blocks)
    return collections >= k


def test_popleft_n_counts_again_after_a_collection_that_took_blocks() -> None:
    """A collection inside ``popleft_n``, past its first count, takes the front block: refused.

    The queue counts again once the collector may have run (verified_queue.queue), and the
    refusal names the count then. The callback takes a block only from a collection that
    runs inside ``popleft_n``'s own frame, so the first count cannot be what refuses. The
    pure build collects there on every version; the compiled one runs no Python frame for
    ``popleft_n``, and its call takes all four.
    """
    blocks = [Block() for _ in range(4)]
    queue: ProductionQueue[Block] = ProductionQueue(blocks)
    taken: list[Block] = []

    # Read when the test runs: a mutation run swaps a mutant's code into the function.
    popleft_n_code = getattr(ProductionQueue.popleft_n, "__code__", None)  # None: compiled

    def inside_popleft_n() -> bool:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code is popleft_n_code:
                return True
            frame = frame.f_back
        return False

    def callback() -> None:
        if not taken and inside_popleft_n():
            taken.append(queue.popleft())

    with collecting_at_every_allocation(callback):
        try:
            popped = queue.popleft_n(4)
        except EmptyQueueError as error:
            refused: EmptyQueueError | None = error
        else:
            refused = None
    if refused is None:
        assert COMPILED, "the pure build collects inside popleft_n"
        assert popped == blocks
        return
    assert str(refused) == "popleft_n(4) from a FreeBlockQueue with 3 free blocks"
    assert taken == blocks[:1]
    assert queue.get_all_free_blocks() == blocks[1:]
    check_invariants(queue, pool=blocks)
