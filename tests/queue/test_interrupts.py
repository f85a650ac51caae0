"""An exception raised by a signal handler in the middle of a batch operation loses nothing."""

from __future__ import annotations

import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import FrameType

import pytest

import verified_queue
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


#: The directory of the package under test: its frames may be interrupted.
_PACKAGE = str(Path(verified_queue.__file__).parent)


class RepeatingTimer:
    """The handler of a repeating timer: it raises TimerFired while armed, twice per call.

    Disarming is a plain assignment (no call, so no point where a handler could run
    first), so that nothing outside the measured call is interrupted. Two raises per
    call: the first cuts the batch short, the second the undo (as Ctrl-C pressed twice
    does). The pure build's undo is promised against two exceptions in a row, at any two
    points (test_nested_interrupts.py tries every pair), not against an unbounded burst:
    interpreted code gets no room to make progress when a handler raises at every
    checkpoint, and a loaded machine, or a long garbage collection, does pile a real
    timer's signals up into bursts.
    """

    def __init__(self) -> None:
        self.armed = False
        self.left = 0

    def arm(self) -> None:
        """Let the next two signals raise."""
        self.left = 2
        self.armed = True

    def fire(self, _signum: int, frame: FrameType | None) -> None:
        """The SIGALRM handler: raise while armed, twice at most, in the queue or this test.

        Not in a garbage collector's callback (another library's, say): the collector
        swallows what such a callback raises, as unraisable.
        """
        if frame is None or frame.f_code is RepeatingTimer.fire.__code__:
            return  # a signal that arrived while this handler ran: its caller decides
        where = frame.f_code.co_filename
        ours = where == __file__ or where.startswith(_PACKAGE)
        if self.armed and self.left > 0 and ours:
            self.left -= 1
            raise TimerFired


@pytest.mark.production_only
def test_batches_under_a_repeating_timer_stay_sound() -> None:
    """Batches hit by a raising signal every 30 us, their undos too, leave the queue sound."""
    timer = RepeatingTimer()
    previous = signal.signal(signal.SIGALRM, timer.fire)
    blocks = [Block() for _ in range(60_000)]
    queue = FreeBlockQueue(blocks)
    rng = random.Random(2)
    interrupted = calls = 0
    # At least 3 s and 10 interrupted calls, at most 60 s: a loaded machine serves the
    # handler so often that a call may take seconds, and the count must not depend on it.
    start = time.monotonic()
    try:
        while time.monotonic() - start < 60 and (time.monotonic() - start < 3 or interrupted < 10):
            held = [block for block in blocks if block.next_free_block is None]
            size = rng.randrange(5_000, 30_001)
            before = queue.get_all_free_blocks()
            call: Callable[[], object]
            if len(held) < size or rng.randrange(3) == 0:
                size = min(size, len(queue))
                call, after = partial(queue.popleft_n, size), before[size:]
            elif rng.randrange(2):
                call, after = partial(queue.append_n, held[:size]), before + held[:size]
            else:
                call, after = partial(queue.prepend_n, held[:size]), held[:size] + before
            try:
                try:
                    timer.arm()
                    signal.setitimer(signal.ITIMER_REAL, 30e-6, 30e-6)
                    call()
                finally:
                    timer.armed = False
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except TimerFired:
                interrupted += 1
            # All or nothing (the signal may also come just after the call returned).
            assert queue.get_all_free_blocks() in (before, after)
            calls += 1
            check_invariants(queue, pool=blocks)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted >= 1, f"none of {calls} calls interrupted"
