"""What the planted bugs of every kind share: the block types and a link read that must be set."""

from __future__ import annotations

from typing import TypeVar

from verified_queue.block import Block, Linkable

#: The queue's own type parameter (``verified_queue.queue.B``): the planted copies of its
#: methods are the production code word for word, so they type-check as it does.
B = TypeVar("B", bound=Linkable)

#: The type parameter of the bugs written from scratch, which write the links of the items
#: they are given directly, as blocks.
BlockT = TypeVar("BlockT", bound=Block)


def _linked(node: Block | None) -> Block:
    """Return ``node``, which the queue's invariants say is set; raise if they were broken."""
    if node is None:
        raise RuntimeError("a link the queue's invariants promise is None")
    return node
