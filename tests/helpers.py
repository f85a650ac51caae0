"""Block types the tests share: a numbered block, a vLLM-like dataclass block and a tripwire."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

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


def snapshot(queue: FreeBlockQueue[Any], universe: Iterable[Block]) -> tuple[object, ...]:
    """Capture the queue's order, count and every link of ``universe`` and the sentinels, by id.

    Two snapshots are equal exactly when nothing observable changed in between.
    """
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *universe]
    links = tuple((id(node), id(node.prev_free_block), id(node.next_free_block)) for node in nodes)
    return (tuple(id(block) for block in queue), queue.num_free_blocks, links)
