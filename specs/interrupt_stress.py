"""The fault model under a raising timer: batch operations cut short, again and again, lose nothing?

``python -I specs/__main__.py interrupt_stress [--period-us 15] [--calls 10000]``
(``tox -e interrupt-stress``) arms a repeating ``SIGALRM`` whose handler raises
while each call runs, the way a ``KeyboardInterrupt`` or a timeout handler arrives,
and counts, per operation, the calls it cut short and the ones it left damaged: the
queue's invariants broken (:func:`~verified_queue.invariants.check_invariants`, with
every block of the pool), the pool's P1-P5 broken (``check_consistency``), or a result
that is neither the state before the call nor the state after it. The operations are
the queue's ``popleft_n``, ``append_n`` and ``prepend_n`` and the block pool's
``get_new_blocks``, ``free_blocks`` and ``touch``, each on batches of ``--size`` blocks.

A last row measures the same timer against plain Python: a retry loop that catches the
timer's exception and tries again (``while True: try: ...; break; except Tick: pass``),
counting how often the exception escapes the loop anyway. That is the boundary every
interpreted undo shares: an exception can arrive at any checkpoint, a handler's own
included, so code that must finish after one needs room between two of them. The
contract it measures is stated in :mod:`verified_queue._undo`.

POSIX only (``signal.setitimer``), main thread only.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import verified_queue
from verified_queue import Block, FreeBlockQueue, QueueError
from verified_queue.invariants import check_invariants
from verified_queue.kvcache.pool import BlockPool

__all__ = ["Outcome", "main", "stress"]


class Tick(Exception):
    """What the timer's handler raises, as SIGINT's raises KeyboardInterrupt."""


#: The package's directory: the timer raises only in its frames (and the plain loop's).
_PACKAGE = str(Path(verified_queue.__file__).parent)


class _Timer:
    """A repeating SIGALRM that raises :class:`Tick` while armed, in the code under test only.

    Not in this module's own bookkeeping (a signal may still be pending as a call
    returns, and on Python 3.10 it is run as a ``finally`` begins, before the
    disarming assignment), nor in a garbage collector's callback, which would swallow it.
    """

    def __init__(self, period: float) -> None:
        self.period = period
        self.armed = False
        self.fired = 0
        self.targets: frozenset[object] = frozenset()

    def handle(self, _signum: int, frame: FrameType | None) -> None:
        if not self.armed or frame is None:
            return
        code = frame.f_code
        if code.co_filename.startswith(_PACKAGE) or code in self.targets:
            self.fired += 1
            raise Tick

    def run(self, call: Callable[[], object]) -> bool:
        """Call ``call`` under the timer; return whether a tick cut it short."""
        try:
            try:
                self.armed = True
                signal.setitimer(signal.ITIMER_REAL, self.period, self.period)
                call()
            finally:
                self.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Tick:
            return True
        return False


@dataclass
class Outcome:
    """What one operation's calls came to."""

    operation: str
    calls: int = 0
    interrupted: int = 0
    damaged: int = 0
    first_damage: str = ""


#: One operation's setup: a fresh world, the call, and a snapshot function and the snapshot
#: the call leaves if it completes.
_World = tuple[Callable[[], object], Callable[[], object], Callable[[], None], Any]


def _queue_world(operation: str, size: int) -> _World:
    blocks = [Block() for _ in range(3 * size)]
    queue: FreeBlockQueue[Block] = FreeBlockQueue(blocks[: 2 * size])
    spare = blocks[2 * size :]

    def snapshot() -> object:
        return [id(block) for block in queue.get_all_free_blocks()]

    def check() -> None:
        check_invariants(queue, pool=blocks)

    before = queue.get_all_free_blocks()
    call: Callable[[], object]
    if operation == "popleft_n":
        call, after = lambda: queue.popleft_n(size), before[size:]
    elif operation == "append_n":
        call, after = lambda: queue.append_n(spare), before + spare
    else:
        call, after = lambda: queue.prepend_n(spare), spare + before
    return call, snapshot, check, [id(block) for block in after]


def _pool_world(operation: str, size: int) -> _World:
    pool = BlockPool(num_blocks=3 * size + 1, enable_caching=False)
    held = pool.get_new_blocks(size)  # held by a request, to free or to touch again
    free_before = list(pool.free_block_queue)

    def snapshot() -> object:
        return (
            [block.block_id for block in pool.free_block_queue],
            [block.ref_cnt for block in pool.blocks],
        )

    def check() -> None:
        check_invariants(pool.free_block_queue, pool=pool.blocks[1:])
        pool.check_consistency()

    counts = [block.ref_cnt for block in pool.blocks]
    call: Callable[[], object]
    if operation == "get_new_blocks":
        call = lambda: pool.get_new_blocks(size)  # noqa: E731 -- one line per operation
        order = [block.block_id for block in free_before[size:]]
        for block in free_before[:size]:
            counts[block.block_id] = 1
    elif operation == "free_blocks":
        call = lambda: pool.free_blocks(reversed(held))  # noqa: E731
        order = [block.block_id for block in reversed(held)]
        order += [block.block_id for block in free_before]
        for block in held:
            counts[block.block_id] = 0
    else:  # touch: the free blocks are prefix-cache hits, taken from the middle
        hits = free_before[size // 2 : size // 2 + size]
        call = lambda: pool.touch(hits)  # noqa: E731
        taken = {id(block) for block in hits}
        order = [block.block_id for block in free_before if id(block) not in taken]
        for block in hits:
            counts[block.block_id] = 1
    return call, snapshot, check, (order, counts)


OPERATIONS: dict[str, Callable[[str, int], _World]] = {
    "popleft_n": _queue_world,
    "append_n": _queue_world,
    "prepend_n": _queue_world,
    "get_new_blocks": _pool_world,
    "free_blocks": _pool_world,
    "touch": _pool_world,
}


def stress(operation: str, timer: _Timer, calls: int, size: int, seconds: float) -> Outcome:
    """Run ``operation`` until ``calls`` calls were cut short (or ``seconds`` ran out)."""
    outcome = Outcome(operation)
    deadline = time.monotonic() + seconds
    while outcome.interrupted < calls and time.monotonic() < deadline:
        call, snapshot, check, after = OPERATIONS[operation](operation, size)
        before = snapshot()
        interrupted = timer.run(call)
        outcome.calls += 1
        outcome.interrupted += interrupted
        try:
            check()
            now = snapshot()
            if now not in (before, after):
                raise AssertionError("neither as before nor as after the call")
        except (AssertionError, QueueError) as damage:  # InvariantViolation, BlockPoolError
            outcome.damaged += 1
            outcome.first_damage = outcome.first_damage or str(damage).splitlines()[0][:160]
    return outcome


def _plain_retry_loop(timer: _Timer, calls: int, seconds: float) -> Outcome:
    """The same timer against a bare retry loop: how often does its exception escape?"""
    outcome = Outcome("plain try/except retry loop")
    deadline = time.monotonic() + seconds

    def retry() -> None:
        work = 0
        while True:
            try:
                while work < 2_000:  # the size of an undo's walk
                    work += 1
                break
            except Tick:
                pass

    timer.targets = frozenset({retry.__code__})
    while outcome.interrupted < calls and time.monotonic() < deadline:
        escaped = timer.run(retry)
        outcome.calls += 1
        outcome.interrupted += 1 if timer.fired else 0
        outcome.damaged += escaped
        timer.fired = 0
    timer.targets = frozenset()
    return outcome


def main(argv: list[str] | None = None) -> int:
    """Print one row per operation; exit 1 if any call was left damaged."""
    parser = argparse.ArgumentParser(prog="python -I specs/__main__.py interrupt_stress")
    parser.add_argument("--period-us", type=float, default=15.0, help="the timer's period")
    parser.add_argument("--calls", type=int, default=10_000, help="interrupted calls per row")
    parser.add_argument("--size", type=int, default=1_000, help="blocks per batch")
    parser.add_argument("--seconds", type=float, default=120.0, help="time limit per row")
    parser.add_argument("--operation", choices=sorted(OPERATIONS), action="append")
    arguments = parser.parse_args(argv)
    if not hasattr(signal, "setitimer"):
        print("interrupt_stress: needs signal.setitimer (POSIX)", file=sys.stderr)
        return 2
    timer = _Timer(arguments.period_us * 1e-6)
    previous = signal.signal(signal.SIGALRM, timer.handle)
    build = "compiled" if verified_queue.COMPILED else "pure"
    print(
        f"Python {sys.version.split()[0]}, {build} build, a raising timer every "
        f"{arguments.period_us:g} us, batches of {arguments.size}"
    )
    print("| operation | calls | cut short | damaged | first damage |")
    print("|---|---:|---:|---:|---|")
    damaged = 0
    try:
        for operation in arguments.operation or list(OPERATIONS):
            row = stress(operation, timer, arguments.calls, arguments.size, arguments.seconds)
            damaged += row.damaged
            print(
                f"| {row.operation} | {row.calls} | {row.interrupted} | {row.damaged} | "
                f"{row.first_damage} |",
                flush=True,
            )
        baseline = _plain_retry_loop(timer, arguments.calls, arguments.seconds)
        print(
            f"| {baseline.operation} | {baseline.calls} | {baseline.interrupted} | "
            f"{baseline.damaged} escaped | (not the package: the boundary of any interpreted "
            "handler) |"
        )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return 1 if damaged else 0
