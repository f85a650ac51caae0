"""Check mode reports a caller's error as production does, and only QueueError under a race."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

import pytest

from verified_queue import (
    Block,
    CheckedFreeBlockQueue,
    FreeBlockQueue,
    QueueError,
    _diagnosis,
    checked,
    invariants,
)
from verified_queue.invariants import check_invariants


class _IndexRaisesAttributeError:
    """A count whose ``__index__`` fails with AttributeError, as a broken wrapper's might."""

    def __index__(self) -> int:
        raise AttributeError("no index here")


def _raising(error: Exception) -> Iterator[Block]:
    """A batch iterator that yields one block, then raises ``error`` (the caller's own)."""
    yield Block()
    raise error


#: A caller's mistakes, each given the queue and its two blocks.
CALLER_ERRORS: dict[str, Callable[[FreeBlockQueue[Any], list[Block]], object]] = {
    "append_n(None)": lambda queue, _blocks: queue.append_n(None),  # type: ignore[arg-type]
    "prepend_n(5)": lambda queue, _blocks: queue.prepend_n(5),  # type: ignore[arg-type]
    "an iterator raising TypeError": lambda queue, _blocks: queue.append_n(
        _raising(TypeError("the caller's"))
    ),
    "an iterator raising AttributeError": lambda queue, _blocks: queue.prepend_n(
        _raising(AttributeError("the caller's"))
    ),
    "append_n([linked, None])": lambda queue, blocks: queue.append_n([blocks[0], None]),
    "append_n([None, linked])": lambda queue, blocks: queue.append_n([None, blocks[0]]),
    "a count whose __index__ raises": lambda queue, _blocks: queue.popleft_n(
        _IndexRaisesAttributeError()
    ),
}


def _outcome(queue_type: type[FreeBlockQueue[Any]], name: str) -> tuple[str, str, int]:
    blocks = [Block(), Block()]
    queue = queue_type(blocks)
    try:
        CALLER_ERRORS[name](queue, blocks)
    except Exception as error:  # the point: which one
        check_invariants(queue, pool=blocks)
        return type(error).__name__, str(error).replace(f"{id(blocks[0]):#x}", "B0"), len(queue)
    return "nothing raised", "", len(queue)


@pytest.mark.parametrize("name", sorted(CALLER_ERRORS))
def test_check_mode_raises_the_caller_s_error_as_production_does(name: str) -> None:
    """On a healthy queue, check mode raises exactly the production queue's error for misuse."""
    production = _outcome(FreeBlockQueue, name)
    assert production[0] != "InvariantViolation"
    assert _outcome(CheckedFreeBlockQueue, name) == production


@contextmanager
def racing(at: int, race: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``race`` (another thread's write) at the ``at``-th line the checkers execute."""
    files = {invariants.__file__, _diagnosis.__file__, checked.__file__}
    lines = [0]

    def local(_frame: FrameType, event: str, _arg: object) -> Any:
        if event == "line":
            lines[0] += 1
            if lines[0] == at:
                race()
        return local

    def tracer(frame: FrameType, _event: str, _arg: object) -> Any:
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield lines
    finally:
        sys.settrace(previous)


#: Another thread's writes: cut the chain, detach a block, empty the queue.
RACES: dict[str, Callable[[list[Block]], None]] = {
    "cut": lambda blocks: setattr(blocks[0], "next_free_block", None),
    "detach": lambda blocks: setattr(blocks[2], "prev_free_block", None),
    "empty": lambda blocks: setattr(blocks[1], "next_free_block", None),
}


def _check_raced(race: str, at: int) -> bool:
    """check_invariants on a queue with a cycle (named by a re-walk), raced at line ``at``.

    Returns whether the run had that many lines.
    """
    blocks = [Block() for _ in range(6)]
    queue = FreeBlockQueue(blocks)
    blocks[4].next_free_block = blocks[1]
    with racing(at, lambda: RACES[race](blocks)) as lines, suppress(QueueError):
        check_invariants(queue)
    return lines[0] >= at


def _operations_raced(race: str, at: int) -> bool:
    """Check mode's operations, with a full check each, raced at line ``at`` of their checks."""
    blocks = [Block() for _ in range(6)]
    queue = CheckedFreeBlockQueue(blocks[:5], full_check_every=1)
    operations: list[Callable[[], object]] = [
        lambda: queue.popleft_n(2),
        lambda: queue.append(blocks[5]),
        lambda: queue.remove(blocks[3]),
        queue.full_check,
    ]
    with racing(at, lambda: RACES[race](blocks)) as lines, suppress(QueueError):
        for operation in operations:
            operation()
    return lines[0] >= at


@pytest.mark.parametrize("race", sorted(RACES))
def test_every_checker_raises_only_queue_error_under_a_race(race: str) -> None:
    """A chain changed at any line of a checker's run gets a QueueError, never a raw error."""
    at = 1
    while _check_raced(race, at):
        at += 1
    assert at > 10


@pytest.mark.parametrize("race", sorted(RACES))
def test_check_mode_raises_only_queue_error_under_a_race(race: str) -> None:
    """Check mode's operations, raced at any line of their checks, raise only QueueError."""
    at = 1
    while _operations_raced(race, at):
        at += 1
    assert at > 10
