"""What the planted bugs of every kind share: the block type and a link read that must be set."""

from __future__ import annotations

from typing import TypeVar

from verified_queue._messages import first_unlinkable, not_a_block
from verified_queue._undo import finish_unstage, means_not_a_block, unstage
from verified_queue.block import Block

B = TypeVar("B", bound=Block)


def _linked(node: Block | None) -> Block:
    """Return ``node``, which the queue's invariants say is set; raise if they were broken."""
    if node is None:
        raise RuntimeError("a link the queue's invariants promise is None")
    return node


def _undo_staged(
    operation: str, batch: list[B], staging: Block, last: Block, *, error: BaseException
) -> BaseException:
    """Undo a staged batch, whatever arrives meanwhile, and return the error to raise.

    The steps of the handlers of ``append_n`` and ``prepend_n`` as one call, for the
    planted copies of those methods, whose bugs lie elsewhere.
    """
    try:
        unstage(staging, last)
    except BaseException as again:
        return finish_unstage(batch, staging, again)
    if means_not_a_block(error, batch, last, staging):
        return not_a_block(operation, first_unlinkable(batch))
    return error
