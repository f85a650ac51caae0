"""A check-mode walk meeting an exception that is no damage: ``iter_blocks_after`` and iteration.

Check mode turns an exception that damage raised into a ``QueueError``, after the full
check that would name the damage (``verified_queue._diagnosis.damaged``). When that check
finds the queue sound, an ``AttributeError`` or ``TypeError`` is reported as a violation
naming the operation and the error; any other exception (a signal handler's) was no damage
and comes out as it is. Here the exception arrives in a full check that the walk runs
itself: the periodic one ``iter_blocks_after`` starts with, or the one a walk that
outlasts the membership (a queue growing under it) runs; last, inside the full check's own
walk, where damage behind the exception is named in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.checks.support import parts, same
from verified_queue import Block, CheckedFreeBlockQueue, InvariantViolation


class _FromOutside(Exception):
    """What a signal handler raises in the middle of an operation: no damage at all."""


class _InterruptedFullCheck(CheckedFreeBlockQueue[Block]):
    """A checked queue whose next full check, once armed, raises ``arriving`` instead of running."""

    __slots__ = ("arriving",)

    arriving: Exception | None

    def __init__(self, blocks: list[Block], full_check_every: int) -> None:
        self.arriving = None
        super().__init__(blocks, full_check_every=full_check_every)

    def full_check(self) -> None:
        arriving, self.arriving = self.arriving, None
        if arriving is not None:
            raise arriving
        super().full_check()


#: A walk made ready: its queue, the queue's blocks front first, and the rest of the walk,
#: whose first full check meets the exception it is given.
Scene = tuple[_InterruptedFullCheck, list[Block], Callable[[Exception], None]]


def _periodic() -> Scene:
    """``iter_blocks_after`` on a queue with a full check before every operation."""
    blocks = [Block() for _ in range(3)]
    queue = _InterruptedFullCheck(blocks, full_check_every=1)

    def walk(arriving: Exception) -> None:
        queue.arriving = arriving
        queue.iter_blocks_after(blocks[0])

    return queue, blocks, walk


def _grown(start: Callable[[_InterruptedFullCheck, list[Block]], Iterator[Block]]) -> Scene:
    """A walk of two blocks that four more join after its first step."""
    blocks = [Block() for _ in range(6)]
    queue = _InterruptedFullCheck(blocks[:2], full_check_every=0)
    walking = start(queue, blocks)
    next(walking)
    queue.append_n(blocks[2:])

    def walk(arriving: Exception) -> None:
        queue.arriving = arriving  # no other full check runs before the walk outlasts two
        for _ in walking:
            pass

    return queue, blocks, walk


#: How each walk is made ready, and how a violation names the operation it was in.
WALKS: dict[str, tuple[Callable[[], Scene], str]] = {
    "iter_blocks_after's periodic check": (_periodic, "iter_blocks_after()"),
    "iteration": (lambda: _grown(lambda queue, _blocks: iter(queue)), "iteration"),
    "a walk from the head": (
        lambda: _grown(lambda queue, _blocks: queue.iter_blocks_after(None)),
        "iteration",
    ),
    "a walk after a cursor": (
        lambda: _grown(lambda queue, blocks: queue.iter_blocks_after(blocks[0])),
        "iteration after a cursor",
    ),
}


@pytest.mark.parametrize("walk", WALKS)
def test_an_exception_from_outside_in_a_walks_full_check_comes_out_as_it_is(walk: str) -> None:
    """An exception from outside, met by a walk's own full check, is raised unchanged."""
    queue, blocks, rest = WALKS[walk][0]()
    arriving = _FromOutside("a timeout's handler")
    with pytest.raises(_FromOutside) as caught:
        rest(arriving)
    assert caught.value is arriving
    queue.full_check()
    assert same(queue.get_all_free_blocks(), blocks)


@pytest.mark.parametrize("walk", WALKS)
def test_a_type_error_in_a_walks_full_check_on_a_sound_queue_names_the_walk(walk: str) -> None:
    """A TypeError a walk meets on a queue the full check finds sound is a violation naming it."""
    queue, blocks, rest = WALKS[walk][0]()
    with pytest.raises(InvariantViolation) as caught:
        rest(TypeError("a link lookup failed"))
    assert parts(caught.value) == (
        "I1",
        WALKS[walk][1],
        "the links and the count the operation read",
        "blocks, sentinels and an int",
        "TypeError: a link lookup failed",
    )
    queue.full_check()
    assert same(queue.get_all_free_blocks(), blocks)


class _InterruptedChainWalk(CheckedFreeBlockQueue[Block]):
    """A checked queue whose full check's walk, once armed, raises ``arriving`` as it starts."""

    __slots__ = ("arriving",)

    arriving: Exception | None

    def __init__(self, blocks: list[Block]) -> None:
        self.arriving = None
        super().__init__(blocks, full_check_every=0)

    def _chain_is_membership(self) -> bool:
        arriving, self.arriving = self.arriving, None
        if arriving is not None:
            raise arriving
        return super()._chain_is_membership()


def test_an_exception_from_outside_in_the_full_checks_walk_comes_out_as_it_is() -> None:
    """The full check's own walk meets an exception from outside: on a sound queue, that one."""
    blocks = [Block() for _ in range(3)]
    queue = _InterruptedChainWalk(blocks)
    arriving = _FromOutside("a timeout's handler")
    queue.arriving = arriving
    with pytest.raises(_FromOutside) as caught:
        queue.full_check()
    assert caught.value is arriving
    queue.full_check()
    assert same(queue.get_all_free_blocks(), blocks)


def test_damage_behind_an_exception_in_the_full_checks_walk_is_named() -> None:
    """The walk raised, and the queue is damaged: the full check names the damage, not the error.

    A block linked in by outside code, the count raised to match the chain, is found by
    the diagnosis the exception sends the check to: the count is not this queue's members'.
    """
    blocks = [Block() for _ in range(3)]
    queue = _InterruptedChainWalk(blocks[:2])
    stranger = blocks[2]
    last = blocks[1]
    tail = queue.fake_free_list_tail
    last.next_free_block, stranger.prev_free_block = stranger, last
    stranger.next_free_block, tail.prev_free_block = tail, stranger
    queue.num_free_blocks += 1
    queue.arriving = _FromOutside("a timeout's handler")
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    assert parts(caught.value)[:2] == ("I2", "the full check")
    assert isinstance(caught.value.__context__, _FromOutside)
