"""The exceptions the package raises; every one is a :class:`QueueError`.

Each also derives from the built-in exception a caller of a ``list`` or a
``collections.deque`` would already catch for the same mistake, so code written
against those keeps working.
"""

from __future__ import annotations

__all__ = [
    "INVARIANT_FAMILIES",
    "AlreadyInQueueError",
    "EmptyQueueError",
    "InvariantViolation",
    "NegativeCountError",
    "NotInQueueError",
    "QueueError",
    "WrongTypeError",
]


class QueueError(Exception):
    """Base class of every error raised by ``verified_queue``."""


class EmptyQueueError(QueueError, ValueError, IndexError):
    """Too few free blocks: ``popleft()`` when empty, or ``popleft_n(n)`` with ``n > len``."""


class NegativeCountError(QueueError, ValueError):
    """``popleft_n(n)`` was given a negative ``n``."""


class NotInQueueError(QueueError, ValueError, RuntimeError):
    """A block the operation needs in the queue is not linked there (or is a sentinel).

    Raised by ``remove(block)``, by ``iter_blocks_after(cursor)``, and by an
    iteration whose current block left the queue. It is a ``RuntimeError``
    too, because vLLM's queue raises that for the same mistake.
    """


class AlreadyInQueueError(QueueError, ValueError):
    """A block handed to the queue is already linked (a double free), repeated, or a sentinel."""


class WrongTypeError(QueueError, TypeError):
    """An argument is not of a type the operation takes: not a block, or a count that is no int."""


#: The names an :class:`InvariantViolation` may carry in ``.invariant``, in the
#: order of the numbered definitions in ``verified_queue.invariants``.
INVARIANT_FAMILIES = ("sentinel_linkage", "count_consistency", "no_duplicates")


class InvariantViolation(QueueError, AssertionError):
    """A queue's structure is damaged; ``.invariant`` names the broken family.

    Raised by the checkers in ``verified_queue.invariants`` and by
    ``CheckedFreeBlockQueue``. It is an ``AssertionError`` because it reports
    a broken internal assertion rather than a misused argument, and a
    ``QueueError`` so one ``except QueueError`` catches everything the package
    raises.

    >>> error = InvariantViolation("count is 3, walk found 2", invariant="count_consistency")
    >>> error.invariant, str(error)
    ('count_consistency', 'count is 3, walk found 2')
    """

    invariant: str

    def __init__(self, message: str, invariant: str) -> None:
        """Record ``message`` and the family name ``invariant`` (one of ``INVARIANT_FAMILIES``)."""
        if invariant not in INVARIANT_FAMILIES:
            raise ValueError(
                f"unknown invariant family {invariant!r}; expected {INVARIANT_FAMILIES}"
            )
        super().__init__(message)
        self.invariant = invariant

    def __reduce__(self) -> tuple[type[InvariantViolation], tuple[str, str]]:
        """Pickle with the family too, so a worker process can re-raise it in its parent."""
        return type(self), (str(self), self.invariant)
