"""An exception raised by a signal handler in the middle of a batch operation loses nothing."""

from __future__ import annotations

import random
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from verified_queue import Block, FreeBlockQueue
from verified_queue.invariants import check_invariants

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)"
)


class TimerFired(Exception):
    """Raised by the SIGALRM handler, as KeyboardInterrupt is by SIGINT's."""


def _fire(_signum: int, _frame: FrameType | None) -> None:
    raise TimerFired


@pytest.fixture
def alarm() -> Iterator[None]:
    """Install the raising SIGALRM handler for the test, and restore the old one after."""
    previous = signal.signal(signal.SIGALRM, _fire)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Check mode's own membership record is not rolled back when a signal cuts an operation
# short, so after an interrupt it reports the queue as damaged: a debugging aid, not a guarantee.
@pytest.mark.production_only
@pytest.mark.usefixtures("alarm")
def test_batches_interrupted_at_random_points_leave_a_sound_queue() -> None:
    """popleft_n, append_n and prepend_n cut short by a signal leave the queue and blocks sound."""
    blocks = [Block() for _ in range(20_000)]
    queue = FreeBlockQueue(blocks)
    rng = random.Random(1)
    held: list[Block] = []
    interrupted = 0
    # Enough rounds to hit every kind of point many times; the deadline only bounds a
    # slow run (under coverage tracing, a loaded machine), which needs fewer rounds.
    deadline = time.monotonic() + 30
    while interrupted < 100 and time.monotonic() < deadline:
        try:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00005, 0.002))
            while True:
                choice = rng.randrange(3)
                if choice == 0 and len(queue) >= 2_000:
                    held += queue.popleft_n(2_000)
                elif held:
                    batch = held[-2_000:]
                    if choice == 1:
                        queue.append_n(batch)
                    else:
                        queue.prepend_n(batch)
                    del held[-len(batch) :]
        except TimerFired:
            interrupted += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        # Whatever the signal cut short: the queue is sound, and every block outside it is
        # detached (a batch the handler interrupted is either all in or all out).
        check_invariants(queue, pool=blocks)
        held = [block for block in blocks if block.next_free_block is None]
    assert interrupted >= 20, f"only {interrupted} interrupts in the time allowed"
    print(f"{interrupted} interrupts, queue sound after each", file=sys.stderr)
