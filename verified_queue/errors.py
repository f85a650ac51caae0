"""The exceptions the package raises; every one is a :class:`QueueError`.

Each also derives from the built-in exception a caller of a ``list`` or a
``collections.deque`` would already catch for the same mistake, so code written
against those keeps working.
"""

from __future__ import annotations

__all__ = [
    "AlreadyInQueueError",
    "EmptyQueueError",
    "NegativeCountError",
    "NotInQueueError",
    "QueueError",
]


class QueueError(Exception):
    """Base class of every error raised by ``verified_queue``."""


class EmptyQueueError(QueueError, ValueError, IndexError):
    """Too few free blocks: ``popleft()`` on an empty queue, or ``popleft_n(n)`` with ``n > len``."""


class NegativeCountError(QueueError, ValueError):
    """``popleft_n(n)`` was given a negative ``n``."""


class NotInQueueError(QueueError, ValueError):
    """``remove(block)`` was given a block that is not linked in the queue (or a sentinel)."""


class AlreadyInQueueError(QueueError, ValueError):
    """A block handed to the queue is already linked (a double free), repeated, or a sentinel."""
