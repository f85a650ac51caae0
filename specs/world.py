"""Blocks and the queues that may hold them, wired into a state by hand, and snapshots of it.

A check that runs an operation from a given state must not build that state with the
operations it checks: :meth:`World.wire` writes every link and count itself. Whether a call
changed anything is told by :meth:`World.snapshot`, which records every link of every node, and
every queue's count and sentinels; two snapshots are equal when every link and sentinel is the
same object and every count the same number. Blocks are never compared by value: a dataclass
block's ``==`` would hide a change, and :class:`~specs.model.SpecBlock`'s raises.

The exhaustive check, the CrossHair contracts and the tests share this one harness.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue

__all__ = ["Snapshot", "World", "link_between"]

_PREV = operator.attrgetter("prev_free_block")
_NEXT = operator.attrgetter("next_free_block")
_COUNT = operator.attrgetter("num_free_blocks")
_HEAD = operator.attrgetter("fake_free_list_head")
_TAIL = operator.attrgetter("fake_free_list_tail")


def link_between(head: Block, blocks: Sequence[Block], tail: Block) -> None:
    """Link ``blocks`` between ``head`` and ``tail``, as a queue holding them would.

    Runtime complexity: O(len(blocks))
    """
    previous = head
    head.prev_free_block = None
    for block in blocks:
        previous.next_free_block = block
        block.prev_free_block = previous
        previous = block
    previous.next_free_block = tail
    tail.prev_free_block = previous
    tail.next_free_block = None


def _same_objects(left: Sequence[object], right: Sequence[object]) -> bool:
    return len(left) == len(right) and all(map(operator.is_, left, right))


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A world at one moment: every node's links, and each queue's count and sentinels."""

    #: ``prev_free_block`` of each node of :attr:`World.nodes`, in that order.
    prevs: tuple[Block | None, ...]
    #: ``next_free_block`` of each node of :attr:`World.nodes`, in that order.
    nexts: tuple[Block | None, ...]
    #: ``num_free_blocks`` of each queue of :attr:`World.queues`.
    counts: tuple[int, ...]
    #: ``fake_free_list_head`` of each queue.
    heads: tuple[Block, ...]
    #: ``fake_free_list_tail`` of each queue.
    tails: tuple[Block, ...]

    #: Compared, never hashed: a snapshot is a moment of mutable objects.
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        """Every link and sentinel the same object, every count the same number."""
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (
            self.counts == other.counts
            and _same_objects(self.heads, other.heads)
            and _same_objects(self.tails, other.tails)
            and _same_objects(self.prevs, other.prevs)
            and _same_objects(self.nexts, other.nexts)
        )


class World:
    """Some blocks and the queues that may hold them.

    :attr:`nodes` is every object whose links a call could write: the blocks, then each
    queue's head and tail sentinels (those the queue had when the world was made).
    """

    def __init__(self, blocks: Sequence[Block], queues: Sequence[FreeBlockQueue[Any]]) -> None:
        """Take ``blocks`` and ``queues`` as they are; nothing is linked or unlinked."""
        self.blocks = list(blocks)
        self.queues = list(queues)
        self.ends = [(queue.fake_free_list_head, queue.fake_free_list_tail) for queue in queues]
        self.nodes: list[Block] = [*self.blocks, *(end for ends in self.ends for end in ends)]

    def wire(self, *orders: Sequence[Block]) -> None:
        """Make each queue hold its order (front first), and detach every other block.

        Every link of every node and every count is written, and a queue's own sentinels
        are put back if a call replaced them, as if each queue had been built holding its
        order.

        Runtime complexity: O(len(nodes))
        """
        for block in self.blocks:
            block.prev_free_block = block.next_free_block = None
        for queue, (head, tail), order in zip(self.queues, self.ends, orders, strict=True):
            queue.fake_free_list_head = head
            queue.fake_free_list_tail = tail
            link_between(head, order, tail)
            queue.num_free_blocks = len(order)

    def snapshot(self) -> Snapshot:
        """Everything a call can change, to compare with a later snapshot.

        Runtime complexity: O(len(nodes))
        """
        nodes, queues = self.nodes, self.queues
        return Snapshot(
            tuple(map(_PREV, nodes)),
            tuple(map(_NEXT, nodes)),
            tuple(map(_COUNT, queues)),
            tuple(map(_HEAD, queues)),
            tuple(map(_TAIL, queues)),
        )
