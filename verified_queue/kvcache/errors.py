"""The errors of the block pool; each is also a :class:`~verified_queue.QueueError`."""

from __future__ import annotations

from verified_queue.errors import AlreadyInQueueError, QueueError

__all__ = ["BlockPoolError", "DoubleFreeError"]


class BlockPoolError(QueueError, ValueError):
    """The pool was asked for something its invariants forbid (caching a block twice, say)."""


class DoubleFreeError(BlockPoolError, AlreadyInQueueError):
    """``free_blocks`` was given a block more often than it is held (a double free)."""
