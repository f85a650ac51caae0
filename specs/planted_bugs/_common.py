"""What the planted bugs of every kind share: the block type and a link read that must be set."""

from __future__ import annotations

from typing import TypeVar

from verified_queue.block import Block

B = TypeVar("B", bound=Block)


def _linked(node: Block | None) -> Block:
    """Return ``node``, which the queue's invariants say is set; raise if they were broken."""
    if node is None:
        raise RuntimeError("a link the queue's invariants promise is None")
    return node
