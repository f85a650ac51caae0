"""Check mode as vLLM's ``BlockPool`` uses it: :class:`VllmCheckedFreeBlockQueue`.

Kept apart from :mod:`verified_queue.vllm.plugin` so that the plugin,
which vLLM imports in every process, loads no checker unless
``VERIFIED_QUEUE_VLLM=checked`` (or ``trace``) asks for one. The trace level's
counterpart is :mod:`verified_queue.vllm.traced`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final, SupportsIndex

# _NEVER: check mode's countdown when the period is off, the pool's too (one definition).
from verified_queue.checked import _NEVER, MIN_FULL_CHECK_PERIOD, CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm.pool_checks import (
    FULL_CHECK,
    check_block_pool,
    check_moving,
    pool_link_of,
)

__all__ = ["VllmCheckedFreeBlockQueue"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: Code in these modules reads and writes the true count; anyone else sees vLLM's counter.
_OWN_MODULE_PREFIX: Final = "verified_queue."
#: The production class's own storage of the count (a slot, or a compiled attribute).
_COUNT: Any = vars(FreeBlockQueue)["num_free_blocks"]
#: The globals of the production queue's module, whose frames write the count on the pure build.
_PRODUCTION_GLOBALS: Final = vars(sys.modules[FreeBlockQueue.__module__])


#: Frames that only pass an assignment on, so the code that made it is the frame above:
#: the compiled build's ``__setattr__`` (``verified_queue._slotted``, any function) and the
#: trace level's, which notes a count write first (``verified_queue.traced``, ``__setattr__``).
_PASSING_ON: Final = {"verified_queue._slotted": None, "verified_queue.traced": "__setattr__"}


def _caller_is_own(depth: int) -> bool:
    """Whether the code ``depth`` frames up, past the setattr frames, is this package's."""
    frame = sys._getframe(depth)
    name: str = frame.f_globals.get("__name__", "")
    while name in _PASSING_ON and frame.f_back is not None:
        function = _PASSING_ON[name]
        if function is not None and frame.f_code.co_name != function:
            break
        frame = frame.f_back
        name = frame.f_globals.get("__name__", "")
    return name.startswith(_OWN_MODULE_PREFIX)


class VllmCheckedFreeBlockQueue(CheckedFreeBlockQueue[Any]):
    """:class:`CheckedFreeBlockQueue` that checks vLLM's pool and keeps its counter apart.

    **The pool.** Built from the blocks of a vLLM ``BlockPool`` (blocks whose
    ``pool`` field names it), the queue also checks the pool's invariants
    (P1, P2, P3, P5; :mod:`verified_queue.vllm.pool_checks` says what each
    means there): every block that joins or leaves, in O(1) before anything
    changes, and the whole pool at the start of an unlink every
    ``full_check_every`` unlinks (``None``: ``max(1000, blocks of the pool)``)
    and on :meth:`check_block_pool`.

    **The counter.**

    vLLM's queue keeps ``num_free_blocks`` as a plain counter beside its list,
    and vLLM 0.34.0's own tests write it (``free_block_queue.num_free_blocks
    = 0`` in ``offloading_connector/test_scheduler.py``) to fake a full pool,
    then write it back. Check mode calls a count that disagrees with the list
    damage; here a write from outside this package is taken for what vLLM
    makes of it instead: an offset on the counter vLLM reads. The checks go on
    comparing the list with its true count, so damage to the links is still
    caught; vLLM reads ``true count + offset``, which every link and unlink
    moves as it would move vLLM's counter; writing the true count back (or
    the counter reaching it) clears the offset. Code of this package always
    sees the true count.
    """

    __slots__ = ("_count_offset", "_pool_link", "_pool_size", "_until_pool_check")

    _count_offset: int
    # The ``pool`` field of the pool's blocks (None: no pool's queue, the clauses are off).
    _pool_link: object
    _pool_size: int
    # Unlinks left until the next full check of the pool, in place (as check mode's countdown).
    _until_pool_check: list[int]

    def __init__(self, blocks: Iterable[Any] = (), *, full_check_every: int | None = None) -> None:
        """Link ``blocks`` as :class:`CheckedFreeBlockQueue` does, with no offset.

        A list of blocks that name a pool (``block.pool``) makes this that
        pool's free queue, whose clauses are checked.
        """
        start_pool_checks(self, blocks)
        super().__init__(blocks, full_check_every=full_check_every)

    # The linking operations: the pool's clauses for each block that moves, checked before
    # check mode's own operation changes anything; vLLM's queue's __init__ links with append_n.

    def popleft(self) -> Any:
        """Check the front block against the pool, then :meth:`CheckedFreeBlockQueue.popleft`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue and the pool
        """
        if self._pool_link is not None:
            before_unlink(self, 1, "the start of popleft()")
        return _checked_popleft(self)

    def popleft_n(self, n: SupportsIndex) -> list[Any]:
        """Check the first ``n`` blocks against the pool, then check mode's ``popleft_n``.

        Runtime complexity: O(n), plus the amortized O(1) checks of the queue and the pool
        """
        if self._pool_link is not None:
            before_unlink(self, n, "the start of popleft_n()")
        return _checked_popleft_n(self, n)

    def remove(self, block: Any) -> None:
        """Check ``block`` against the pool, then :meth:`CheckedFreeBlockQueue.remove`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue and the pool
        """
        if self._pool_link is not None:
            before_unlink(self, block, "the start of remove()")
        _checked_remove(self, block)

    def append(self, block: Any) -> None:
        """Check ``block`` against the pool, then :meth:`CheckedFreeBlockQueue.append`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue
        """
        check_moving(self._pool_link, (block,), "the start of append()", joining=True)
        _checked_append(self, block)

    def append_n(self, blocks: Iterable[Any]) -> None:
        """Check ``blocks`` against the pool, then :meth:`CheckedFreeBlockQueue.append_n`.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) checks of the queue
        """
        if type(blocks) is list:
            check_moving(self._pool_link, blocks, "the start of append_n()", joining=True)
        _checked_append_n(self, blocks)

    def prepend_n(self, blocks: Iterable[Any]) -> None:
        """Check ``blocks`` against the pool, then :meth:`CheckedFreeBlockQueue.prepend_n`.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) checks of the queue
        """
        if type(blocks) is list:
            check_moving(self._pool_link, blocks, "the start of prepend_n()", joining=True)
        _checked_prepend_n(self, blocks)

    def check_block_pool(self) -> bool:
        """Check the pool's invariants over all its blocks; ``False`` if there is no pool to check.

        Raises :class:`~verified_queue.errors.InvariantViolation` (family
        ``block_pool``) at the first break. Call it between two of the pool's
        operations: inside one (``free_blocks`` between lowering the counts and
        linking the blocks) the pool is half changed, as vLLM leaves it.

        Runtime complexity: O(blocks of the pool + entries of its prefix cache)
        """
        return check_pool_now(self)

    # Read and written at every operation (check mode's count tests, the production queue's
    # writes, vLLM's get_num_free_blocks): the frame is looked at only where it decides.

    @property
    def num_free_blocks(self) -> int:
        """The true count for this package's code; ``true + offset`` for vLLM and the rest."""
        true_count: int = _COUNT.__get__(self, type(self))
        offset = self._count_offset
        if offset == 0 or _caller_is_own(2):  # no offset: the same count for every reader
            return true_count
        return true_count + offset

    @num_free_blocks.setter
    def num_free_blocks(self, value: int) -> None:
        # The production queue's own writes (the pure build's, from queue.py) first, in one test.
        if sys._getframe(1).f_globals is _PRODUCTION_GLOBALS or _caller_is_own(2):
            _COUNT.__set__(self, value)
            return
        if value.__class__ is not int or value < 0:
            raise TypeError(f"num_free_blocks = {value!r}: expected an int >= 0")
        self._count_offset = value - _COUNT.__get__(self, type(self))

    @property
    def count_offset(self) -> int:
        """How far vLLM's counter stands from the true count (0 unless written from outside)."""
        return self._count_offset


# Check mode's operations, resolved once (a super() call builds a proxy on 3.10 and 3.11),
# and shared with the trace level's vLLM queue, which calls these functions in their place.
_checked_popleft = CheckedFreeBlockQueue.popleft
_checked_popleft_n = CheckedFreeBlockQueue.popleft_n
_checked_remove = CheckedFreeBlockQueue.remove
_checked_append = CheckedFreeBlockQueue.append
_checked_append_n = CheckedFreeBlockQueue.append_n
_checked_prepend_n = CheckedFreeBlockQueue.prepend_n


def start_pool_checks(queue: Any, blocks: Iterable[Any]) -> None:
    """Set a new queue's pool state: no count offset, and the pool its ``blocks`` name."""
    queue._count_offset = 0
    queue._pool_link = pool_link_of(blocks)
    queue._pool_size = len(blocks) if type(blocks) is list else 0
    queue._until_pool_check = [1]  # the first unlink checks (nothing, in BlockPool.__init__)


def _pool_period(queue: Any) -> int:
    """Unlinks until the next full check of the pool, from ``full_check_every``."""
    period: int | None = queue.full_check_every
    size: int = queue._pool_size
    if period is None:
        return max(MIN_FULL_CHECK_PERIOD, size)
    return period or _NEVER


def check_pool_now(queue: Any, where: str = FULL_CHECK) -> bool:
    """Check ``queue``'s whole pool and restart the countdown; see ``check_block_pool``."""
    checked = check_block_pool(queue._pool_link, queue._members, where)
    queue._until_pool_check[0] = _pool_period(queue)
    return checked


def before_unlink(queue: Any, what: object, where: str) -> None:
    """The pool's checks before an unlink: the countdown's full check, and each block to leave.

    ``what`` is a count of blocks from the front (``popleft``, ``popleft_n``)
    or the block to remove. Only members are checked; anything else is the
    queue's to refuse or diagnose, which check mode's operation then does.
    """
    until = queue._until_pool_check
    until[0] -= 1
    if until[0] <= 0:
        # At the start of an unlink vLLM's pool is between two of its operations.
        check_pool_now(queue, f"{FULL_CHECK}, run at {where}")
    members = queue._members
    link = queue._pool_link
    if type(what) is not int:
        if id(what) in members:
            check_moving(link, (what,), where, joining=False)
        return
    try:
        node = queue.fake_free_list_head.next_free_block
        for _ in range(min(what, len(members))):
            if id(node) not in members:
                return
            # check_moving's first test, inline: this walk runs at every allocation.
            if (
                node.ref_cnt != 0
                or node.is_null
                or node.pool is not link
                or node.block_hash is not None
            ):
                check_moving(link, (node,), where, joining=False)
            node = node.next_free_block
    except AttributeError:
        return  # damaged links: check mode's operation names the damage
