"""The exceptions the package raises; every one is a :class:`QueueError`.

Each also derives from the built-in exception a caller of a ``list`` or a
``collections.deque`` would already catch for the same mistake, so code written
against those keeps working.
"""

from __future__ import annotations

__all__ = [
    "INVARIANT_FAMILIES",
    "INVARIANT_FAMILY",
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


#: The names an :class:`InvariantViolation` may carry in ``.invariant``: the first four name
#: the checker of ``verified_queue.invariants`` that reports them (``check_<family>``);
#: ``block_pool`` is the pool's, reported by check mode inside vLLM
#: (``verified_queue.vllm.pool_checks``).
INVARIANT_FAMILIES = (
    "sentinel_linkage",
    "count_consistency",
    "no_duplicates",
    "detached_outside",
    "block_pool",
)

#: The one map between the two vocabularies: each invariant of ``verified_queue.queue``
#: (I1..I5, defined in its module docstring) that a checker can find broken, and the
#: family it is reported under. Messages cite both, as in ``I4 (detached_outside)``. I5
#: (blocks compared by identity only) is a property of code, not of a state, so no
#: checker reports it. The pool's invariants (P1..P5, defined in
#: ``verified_queue.kvcache.pool``, which vLLM's ``BlockPool`` keeps too) are one family;
#: P4, like I5, is a property of code.
INVARIANT_FAMILY = {
    "I1": "sentinel_linkage",  # the sentinels bracket a chain of blocks whose links agree
    "I2": "count_consistency",  # num_free_blocks counts the blocks between the sentinels
    "I3": "no_duplicates",  # no block twice in the chain, nor in two queues at once
    "I4": "detached_outside",  # a block in no queue is detached
    "P1": "block_pool",  # the null block is never free, never cached
    "P2": "block_pool",  # a block is free exactly when its ref_cnt is 0; none is below 0
    "P3": "block_pool",  # a block has a hash exactly when the cache maps it there
    "P5": "block_pool",  # the pool's blocks are its own, and only they are in its queue
}


class InvariantViolation(QueueError, AssertionError):
    """A queue's structure is damaged; ``.invariant`` names the broken family.

    Raised by the checkers in ``verified_queue.invariants`` and by
    ``CheckedFreeBlockQueue``. It is an ``AssertionError`` because it reports
    a broken internal assertion rather than a misused argument, and a
    ``QueueError`` so one ``except QueueError`` catches everything the package
    raises.

    A checker's violation also carries its parts: ``clause``, the invariant
    broken (``"I1"`` to ``"I4"``, or a pool's ``"P1"`` to ``"P5"``, see
    :data:`INVARIANT_FAMILY`); ``where``, the place (a position in a walk, a
    sentinel, an operation); ``what``, the value looked at; ``expected`` and
    ``found``; and ``blocks``, the blocks it is about where the check names
    them (a pool's clauses do; a broken link is found again from the queue).
    Its message is built from them, so code that inspects a violation reads
    the fields, not the wording. A violation built from a message has ``None``
    in each part it was not given, and no blocks.

    >>> error = InvariantViolation("count is 3, walk found 2", invariant="count_consistency")
    >>> error.invariant, str(error), error.where
    ('count_consistency', 'count is 3, walk found 2', None)
    """

    invariant: str
    clause: str | None
    where: str | None
    what: str | None
    expected: str | None
    found: str | None
    blocks: tuple[object, ...]

    def __init__(
        self,
        message: str,
        invariant: str,
        *,
        clause: str | None = None,
        where: str | None = None,
        what: str | None = None,
        expected: str | None = None,
        found: str | None = None,
        blocks: tuple[object, ...] = (),
    ) -> None:
        """Record ``message``, the family ``invariant`` and, if given, the parts of the message.

        Raises ``ValueError`` unless ``invariant`` is one of
        :data:`INVARIANT_FAMILIES` and ``clause``, if given, is an invariant of
        that family in :data:`INVARIANT_FAMILY`.
        """
        if invariant not in INVARIANT_FAMILIES:
            raise ValueError(
                f"unknown invariant family {invariant!r}; expected {INVARIANT_FAMILIES}"
            )
        if clause is not None and INVARIANT_FAMILY.get(clause) != invariant:
            raise ValueError(
                f"clause {clause!r} is not an invariant of the family {invariant!r}; "
                f"see INVARIANT_FAMILY: {INVARIANT_FAMILY}"
            )
        super().__init__(message)
        self.invariant = invariant
        self.clause = clause
        self.where = where
        self.what = what
        self.expected = expected
        self.found = found
        self.blocks = blocks

    def __reduce__(self) -> tuple[type[InvariantViolation], tuple[str, str], dict[str, object]]:
        """Pickle with the family, the parts and any state added since, so a worker can re-raise it.

        The state is the instance's attributes: the parts, and what was added to the
        error after it was raised (its notes, the trace level's ``history``).
        """
        return type(self), (str(self), self.invariant), dict(vars(self))
