"""Block types the tests share: a numbered block, a vLLM-like dataclass block and a tripwire."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from specs.world import Snapshot, World
from verified_queue import Block, FreeBlockQueue


class NumberedBlock(Block):
    """A subclass with its own ``__slots__`` whose ``__init__`` skips ``Block.__init__``."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"NumberedBlock({self.number})"


@dataclass(slots=True)
class KVCacheBlock(Block):
    """Shaped like vLLM's block: a slotted dataclass that keeps its generated ``__eq__``."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None


class TripwireBlock(NumberedBlock):
    """A block whose ``__eq__`` and ``__hash__`` raise, so any comparison by value fails loudly."""

    __slots__ = ()

    def __eq__(self, other: object) -> NoReturn:
        raise AssertionError(f"__eq__ called on TripwireBlock({self.number})")

    def __hash__(self) -> NoReturn:
        raise AssertionError(f"__hash__ called on TripwireBlock({self.number})")

    def __repr__(self) -> str:
        return f"TripwireBlock({self.number})"


def numbered(count: int) -> list[NumberedBlock]:
    """Return ``count`` fresh detached blocks numbered from 0."""
    return [NumberedBlock(i) for i in range(count)]


def numbers(blocks: Iterable[NumberedBlock]) -> list[int]:
    """Return the numbers of numbered blocks, for readable assertions."""
    return [block.number for block in blocks]


def snapshot(queue: FreeBlockQueue[Any], universe: Iterable[Block]) -> Snapshot:
    """Capture the queue's count and sentinels, and every link of ``universe`` and the sentinels.

    ``universe`` holds every block of the queue, and any other a call could touch: two
    snapshots are then equal exactly when nothing observable changed in between. Nothing is
    walked, so a queue whose chain is broken can be captured too.
    """
    return World(list(universe), [queue]).snapshot()
