"""Two threads on one queue break the one-thread-at-a-time contract; check mode must say so.

The queue, like vLLM's, is for one thread at a time. These tests race two
threads on one queue with a tiny switch interval, so that a thread switch falls
inside an operation, and look at what the race leaves behind.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

import verified_queue
from verified_queue import Block, CheckedFreeBlockQueue, QueueError
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

BLOCKS = 64
TRIALS = 20
ITERATIONS = 5_000  # per thread and trial: a trial ends in tens of milliseconds
TRIAL_SECONDS = 0.5  # and never lasts longer than this


@contextmanager
def tiny_switch_interval() -> Iterator[None]:
    """Ask the interpreter to switch threads as often as it can, and restore the interval."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def one_at_a_time(queue: FreeBlockQueue[Block]) -> None:
    """Take the front block and give it back at the end."""
    queue.append(queue.popleft())


def three_at_a_time(queue: FreeBlockQueue[Block]) -> None:
    """Take three blocks from the front and give them back at the end."""
    queue.append_n(queue.popleft_n(3))


@dataclass
class Race:
    """What two threads running ``step`` on one queue left behind."""

    errors: list[BaseException] = field(default_factory=list)
    invariant_violation: str | None = None

    @property
    def queue_error_raised(self) -> bool:
        """Whether some thread was stopped by a ``QueueError`` (an ``InvariantViolation``...)."""
        return any(isinstance(error, QueueError) for error in self.errors)

    @property
    def silent_corruption(self) -> bool:
        """The queue is broken and no thread was told: the outcome check mode must rule out."""
        return self.invariant_violation is not None and not self.queue_error_raised


def race(queue: FreeBlockQueue[Block], step: Callable[[FreeBlockQueue[Block]], None]) -> Race:
    """Run ``step`` in two threads at once until one raises or both are done; then check."""
    outcome = Race()
    stop = threading.Event()
    together = threading.Barrier(2)

    def work() -> None:
        together.wait()
        deadline = time.perf_counter() + TRIAL_SECONDS
        try:
            for _ in range(ITERATIONS):
                if stop.is_set() or time.perf_counter() > deadline:
                    return
                step(queue)
        except Exception as error:  # every kind is recorded, then judged
            outcome.errors.append(error)
            stop.set()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    with tiny_switch_interval():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10 * TRIAL_SECONDS)
    assert not any(thread.is_alive() for thread in threads), "a racing thread did not stop"
    try:
        check_invariants(queue)
    except QueueError as error:
        outcome.invariant_violation = str(error)
    return outcome


@pytest.mark.parametrize("step", [one_at_a_time, three_at_a_time])
@pytest.mark.parametrize("full_check_every", [None, 1])
def test_check_mode_reports_two_threads_never_a_silent_corruption(
    step: Callable[[FreeBlockQueue[Block]], None], full_check_every: int | None
) -> None:
    """Racing threads on a checked queue: a thread gets a QueueError, or the queue stays sound."""
    reported = 0
    for _ in range(TRIALS):
        queue = CheckedFreeBlockQueue(
            [Block() for _ in range(BLOCKS)], full_check_every=full_check_every
        )
        outcome = race(queue, step)
        assert not outcome.silent_corruption, (outcome.errors, outcome.invariant_violation)
        # Check mode raises only QueueError, even when the damage is another thread's doing.
        assert all(isinstance(error, QueueError) for error in outcome.errors), outcome.errors
        reported += outcome.queue_error_raised
    # The race is real: check mode reported concurrent use in some trial (in practice most).
    assert reported > 0


def test_the_race_detector_sees_a_silent_corruption() -> None:
    """A step that breaks the links without raising is judged a silent corruption."""

    def unlink_by_hand(queue: FreeBlockQueue[Block]) -> None:
        # A caller's "fast path" that skips the front block without telling the queue.
        queue.fake_free_list_head.next_free_block = queue.fake_free_list_tail

    outcome = race(FreeBlockQueue([Block() for _ in range(BLOCKS)]), unlink_by_hand)
    assert outcome.errors == []
    assert outcome.silent_corruption


@pytest.mark.skipif(
    verified_queue.COMPILED,
    reason="compiled methods run to the end without a thread switch (so do not race here)",
)
def test_the_same_race_breaks_a_production_queue() -> None:
    """Without check mode, racing batches corrupt a pure-Python queue: the contract matters."""
    deadline = time.perf_counter() + 10 * TRIAL_SECONDS
    outcomes: list[Race] = []
    while time.perf_counter() < deadline:
        outcomes.append(race(FreeBlockQueue([Block() for _ in range(BLOCKS)]), three_at_a_time))
        if outcomes[-1].invariant_violation is not None:
            break
    assert outcomes[-1].invariant_violation is not None, f"no damage in {len(outcomes)} races"
