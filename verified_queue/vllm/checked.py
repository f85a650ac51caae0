"""Check mode as vLLM's ``BlockPool`` uses it: :class:`VllmCheckedFreeBlockQueue`.

Kept apart from :mod:`verified_queue.vllm.plugin` so that the plugin,
which vLLM imports in every process, loads no checker unless
``VERIFIED_QUEUE_VLLM=checked`` (or ``trace``) asks for one. The trace level's
counterpart is :mod:`verified_queue.vllm.traced`.
"""

from __future__ import annotations

import operator
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any, Final, SupportsIndex

from verified_queue import _diagnosis
from verified_queue._messages import batch_argument
from verified_queue.block import COMPILED

# _NEVER: check mode's countdown when the period is off, the pool's too (one definition).
from verified_queue.checked import (
    _LINKING_METHODS,
    _NEVER,
    MIN_FULL_CHECK_PERIOD,
    CheckedFreeBlockQueue,
)
from verified_queue.errors import QueueError
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm.pool_checks import (
    FULL_CHECK,
    _pool_of,
    check_block_pool,
    check_moving,
    pool_is_built,
    pool_link_of,
)
from verified_queue.vllm.pool_membership import PoolMembership

__all__ = ["VllmCheckedFreeBlockQueue"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: Code in these modules reads and writes the true count; anyone else sees vLLM's counter.
_OWN_MODULE_PREFIX: Final = "verified_queue."
#: The production class's own storage of the count (a slot, or a compiled attribute).
_COUNT: Any = vars(FreeBlockQueue)["num_free_blocks"]
#: The globals of the production queue's module, whose frames write the count through the
#: property on the pure build where the operations are not the renamed ones (the trace level's).
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
    and on :meth:`check_block_pool`. Check mode's own full check of the queue
    runs there too, first, and not on a countdown of its own: one pass over
    the chain and one over the pool, every period of unlinks.

    **The membership.** On a pool's free queue check mode's membership is the
    pool's blocks whose links are set
    (:class:`~verified_queue.vllm.pool_membership.PoolMembership`), not a dict
    every link and unlink updates. Each of the six linking
    operations first tests, in one pass over the blocks it moves and their
    neighbours, everything check mode and the pool's clauses would test of a
    healthy queue; when every test passes it links, and when one fails it runs
    check mode's operation, which names the fault or does what the caller's
    error calls for, exactly as before. (A join leaves its blocks' links and
    type to the production operation, which tests them anyway and refuses the
    batch whole; refused, it is check mode's operation that answers.) What
    this view cannot see at once, and when it is caught,
    :mod:`verified_queue.vllm.pool_membership` says; ``len`` and iteration
    read it in O(blocks of the pool).

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
    sees the true count: the production operations, which read and write it at
    each call, do so past the property (compiled, as a C field; pure, as
    ``_true_free_blocks``, see :func:`_on_the_true_count`).
    """

    __slots__ = ("_count_offset", "_pool_link", "_pool_size", "_until_pool_check")

    _count_offset: int
    #: The true count: the production class's storage, under a name vLLM's counter leaves alone.
    _true_free_blocks: Any = _COUNT
    # The ``pool`` field of the pool's blocks (None: no pool's queue, the clauses are off).
    _pool_link: object
    _pool_size: int
    # Unlinks left until the next full check of the pool, in place (as check mode's countdown).
    _until_pool_check: list[int]

    # Each linking operation below: on a pool's queue, the one-pass test of the healthy case
    # (see "The membership"), then the production operation; anything else, check mode's.

    def __init__(self, blocks: Iterable[Any] = (), *, full_check_every: int | None = None) -> None:
        """Link ``blocks`` as :class:`CheckedFreeBlockQueue` does, with no offset.

        A list of blocks that name a pool (``block.pool``) makes this that
        pool's free queue, whose clauses are checked.
        """
        start_pool_checks(self, blocks)
        super().__init__(blocks, full_check_every=full_check_every)
        read_membership_from_pool(self, blocks)

    # The linking operations: the pool's clauses for each block that moves, checked before
    # check mode's own operation changes anything; vLLM's queue's __init__ links with append_n.

    def popleft(self) -> Any:
        """Check the front block against the pool, then :meth:`CheckedFreeBlockQueue.popleft`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue and the pool
        """
        left = _front_leave_count(self)
        if left is not None:
            try:
                block = self._super_popleft()
                _front_after(self, left, "the end of popleft()")
            except QueueError:
                raise
            except Exception as error:
                # Damage outside code did (see verified_queue.checked): never a raw error.
                raise _diagnosis.damaged(self, "popleft()", error) from error
            return block
        if self._pool_link is not None:
            before_unlink(self, 1, "the start of popleft()")
        return _checked_popleft(self)

    def popleft_n(self, n: SupportsIndex) -> list[Any]:
        """Check the first ``n`` blocks against the pool, then check mode's ``popleft_n``.

        Runtime complexity: O(n), plus the amortized O(1) checks of the queue and the pool
        """
        # popleft's test (_front_leave_count) for a run of n blocks, inline (vLLM's get_new_blocks).
        link = self._pool_link
        until_pool = self._until_pool_check
        count: int = self._true_free_blocks
        head: Any = self.fake_free_list_head
        may_leave = (
            type(self._members) is PoolMembership
            and until_pool[0] > 1
            and type(n) is int
            and 0 <= n <= count
            and head.prev_free_block is None
        )
        if may_leave:
            try:
                cache = None  # the prefix cache, read at the first block with a hash
                previous = head
                node = head.next_free_block
                for _ in range(n):
                    if (
                        node.prev_free_block is not previous
                        or node.ref_cnt != 0
                        or node.is_null
                        or node.pool is not link
                    ):
                        may_leave = False
                        break
                    # Most blocks have no hash: tested as it is read, and stored nowhere.
                    if node.block_hash is not None:
                        cache = _cache_of(link) if cache is None else cache
                        if not cache.contain(node.block_hash, node.block_id):
                            may_leave = False
                            break
                    previous = node
                    node = node.next_free_block
                else:
                    # The node after the run, whose back link the operation rewrites.
                    if node is self.fake_free_list_tail:
                        may_leave = n == count and node.next_free_block is None
                    else:
                        may_leave = node.prev_free_block is previous and node.pool is link
            except Exception:  # a link that is no block: damage, which check mode's operation names
                may_leave = False
        if not may_leave:
            return _popleft_n_by_check_mode(self, n)
        until_pool[0] -= 1
        try:
            popped: list[Any] = self._super_popleft_n(n)
            # _front_after, inline.
            if head.next_free_block.prev_free_block is not head:
                _diagnosis.check_front(self, self._members, "the end of popleft_n()")
            if self._true_free_blocks != count - n:  # type: ignore[operator]  # an int: tested
                _diagnosis.expect_count(self, self._members, "the end of popleft_n()")
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see verified_queue.checked): never a raw error.
            raise _diagnosis.damaged(self, "popleft_n()", error) from error
        return popped

    def remove(self, block: Any) -> None:
        """Check ``block`` against the pool, then :meth:`CheckedFreeBlockQueue.remove`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue and the pool
        """
        count = _removal_count(self, block)
        if count is not None:
            before = block.prev_free_block
            after = block.next_free_block
            try:
                self._super_remove(block)
                _diagnosis.expect_joined(self, before, after, "the end of remove()")
                _count_after(self, count - 1, "the end of remove()")
            except QueueError:
                raise
            except Exception as error:
                # Damage outside code did (see verified_queue.checked): never a raw error.
                raise _diagnosis.damaged(self, "remove()", error) from error
            return
        if self._pool_link is not None:
            before_unlink(self, block, "the start of remove()")
        _checked_remove(self, block)

    def append(self, block: Any) -> None:
        """Check ``block`` against the pool, then :meth:`CheckedFreeBlockQueue.append`.

        Runtime complexity: O(1), plus the amortized O(1) checks of the queue
        """
        batch = [block]
        count = _back_join_count(self)
        if count is not None and _may_join(self._pool_link, batch):
            try:
                before = self.fake_free_list_tail.prev_free_block
                if _joined_by_production(self._super_append, block):
                    _back_after(self, before, batch, count + 1, "the end of append()")
                    return
            except QueueError:
                raise
            except Exception as error:
                # Damage outside code did (see verified_queue.checked): never a raw error.
                raise _diagnosis.damaged(self, "append()", error) from error
        check_moving(self._pool_link, (block,), "the start of append()", joining=True)
        _checked_append(self, block)

    def append_n(self, blocks: Iterable[Any]) -> None:
        """Check ``blocks`` against the pool, then :meth:`CheckedFreeBlockQueue.append_n`.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) checks of the queue
        """
        # A batch that is no list is listed first, as check mode lists it, and checked whole.
        batch: list[Any] = blocks if type(blocks) is list else batch_argument("append_n", blocks)
        if not batch and type(self._members) is PoolMembership:
            # Nothing to link (vLLM's free_blocks, most steps): _back_join_count's test, inline.
            head: Any = self.fake_free_list_head
            tail: Any = self.fake_free_list_tail
            try:
                before = tail.prev_free_block
                if (
                    head.prev_free_block is None
                    and tail.next_free_block is None
                    and before.next_free_block is tail
                    and (
                        self._true_free_blocks == 0
                        if before is head
                        else before.pool is self._pool_link
                    )
                ):
                    return
            except Exception:  # a link that is no block: damage, which check mode's operation names
                pass
        count = _back_join_count(self)
        if count is not None and batch and _may_join(self._pool_link, batch):
            try:
                before = self.fake_free_list_tail.prev_free_block
                if _joined_by_production(self._super_append_n, batch):
                    _back_after(self, before, batch, count + len(batch), "the end of append_n()")
                    return
            except QueueError:
                raise
            except Exception as error:
                # Damage outside code did (see verified_queue.checked): never a raw error.
                raise _diagnosis.damaged(self, "append_n()", error) from error
        check_moving(self._pool_link, batch, "the start of append_n()", joining=True)
        _checked_append_n(self, batch)

    def prepend_n(self, blocks: Iterable[Any]) -> None:
        """Check ``blocks`` against the pool, then :meth:`CheckedFreeBlockQueue.prepend_n`.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) checks of the queue
        """
        # A batch that is no list is listed first, as check mode lists it, and checked whole.
        batch: list[Any] = blocks if type(blocks) is list else batch_argument("prepend_n", blocks)
        link = self._pool_link
        if type(self._members) is PoolMembership:
            count: int = self._true_free_blocks
            head: Any = self.fake_free_list_head
            tail: Any = self.fake_free_list_tail
            try:
                # The front a batch joins (_back_join_count's test, at the other end, inline:
                # vLLM's free_blocks): the head's links, then the block after it, linked back.
                after = head.next_free_block
                joinable = (
                    head.prev_free_block is None
                    and tail.next_free_block is None
                    and after.prev_free_block is head
                    and (count == 0 if after is tail else after.pool is link)
                )
                if joinable:
                    # _may_join, inline.
                    cache: Any = None
                    for block in batch:
                        if block.ref_cnt != 0 or block.is_null or block.pool is not link:
                            joinable = False
                            break
                        if block.block_hash is not None:  # read again below, as in popleft_n
                            cache = _cache_of(link) if cache is None else cache
                            if not cache.contain(block.block_hash, block.block_id):
                                joinable = False
                                break
            except Exception:  # a link or an item that is no block: check mode's names it
                joinable = False
            if joinable and not batch:
                return  # nothing to link (vLLM's free_blocks, some steps): the front was tested
            if joinable:
                try:
                    # _joined_by_production, then _front_after for a join, inline.
                    try:
                        self._super_prepend_n(batch)
                    except QueueError:
                        joinable = False  # refused whole: check mode's operation answers
                    if joinable:
                        where = "the end of prepend_n()"
                        last = batch[-1]
                        if head.next_free_block is not batch[0] or head.prev_free_block is not None:
                            _diagnosis.check_front(self, self._members, where)
                        if last.next_free_block is not after or after.prev_free_block is not last:
                            _diagnosis.expect_joined(self, last, after, where)
                        if self._true_free_blocks != count + len(batch):
                            _diagnosis.expect_count(self, self._members, where)
                        return
                except QueueError:
                    raise
                except Exception as error:
                    # Damage outside code did (see verified_queue.checked): never a raw error.
                    raise _diagnosis.damaged(self, "prepend_n()", error) from error
        check_moving(link, batch, "the start of prepend_n()", joining=True)
        _checked_prepend_n(self, batch)

    def _chain_is_membership(self) -> bool:
        """Check mode's walk of the full check, over a snapshot of the pool's membership.

        The walk reads every member: the view would make each read a Python call.
        Nothing links or unlinks while it runs (it calls no outside code), so the
        snapshot is the membership throughout.
        """
        members = self._members
        if type(members) is not PoolMembership:
            return _checked_chain_is_membership(self)
        self._members = members.snapshot()
        try:
            return _checked_chain_is_membership(self)
        finally:
            self._members = members

    def _next_period(self) -> int:
        """Check mode's countdown to the next full check: never on a pool's whole queue.

        There the queue's full check runs with the pool's; see :func:`pool_queue_period`.
        """
        return pool_queue_period(self)

    def check_block_pool(self) -> bool:
        """Check the queue, then the pool's invariants over all its blocks; ``False`` if no pool.

        Runs :meth:`full_check` first, then the pool's clauses; raises
        :class:`~verified_queue.errors.InvariantViolation` (family
        ``block_pool`` for a clause of the pool) at the first break. With no
        pool to check yet, neither runs. Call it between two of the pool's
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
        true_count: int = self._true_free_blocks
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
        self._count_offset = value - self._true_free_blocks

    @property
    def count_offset(self) -> int:
        """How far vLLM's counter stands from the true count (0 unless written from outside)."""
        return self._count_offset


#: The name the renamed production operations count under: the class's alias of the slot.
_TRUE_COUNT: Final = "_true_free_blocks"


def _on_the_true_count(operation: Any) -> Any:
    """``operation``, a production method of the pure build, made to count past vLLM's counter.

    The same code, run as itself (its file, lines and globals), whose reads
    and writes of ``self.num_free_blocks`` are of ``self._true_free_blocks``:
    the production class's own storage, which the subclass's property of
    vLLM's counter does not shadow. So the production operation counts as the
    compiled build's does, at slot speed, and never through the property,
    which looks at the caller's frame at each write. ``num_free_blocks`` is
    only ever an attribute of ``self`` there
    (``tests/vllm/test_pool_fast_path.py`` reads the bytecode).
    """
    code: types.CodeType = operation.__code__
    names = tuple(_TRUE_COUNT if name == "num_free_blocks" else name for name in code.co_names)
    renamed = types.FunctionType(
        code.replace(co_names=names),
        operation.__globals__,
        operation.__name__,
        operation.__defaults__,
        operation.__closure__,
    )
    renamed.__kwdefaults__ = operation.__kwdefaults__
    renamed.__qualname__ = operation.__qualname__
    renamed.__doc__ = operation.__doc__
    return renamed


if not COMPILED:  # compiled, the operations are C code that writes a C field
    for _linking in _LINKING_METHODS:
        _production = vars(VllmCheckedFreeBlockQueue)[f"_super_{_linking}"]
        setattr(VllmCheckedFreeBlockQueue, f"_super_{_linking}", _on_the_true_count(_production))


def _joined_by_production(operation: Any, batch: Any) -> bool:
    """Have the production queue join ``batch`` (``operation``, bound); ``False`` if it refused.

    The one-pass test of a join leaves the batch's links and its type to the
    production operation, which refuses a block linked already (I4) or one this
    build cannot link before it changes anything. Refused, the queue and every
    block are as they were, and check mode's operation then answers the batch:
    with that same error, or with the damage a block linked by hand shows it
    (a member its count does not hold).
    """
    try:
        operation(batch)
    except QueueError:
        return False
    return True


def _popleft_n_by_check_mode(queue: Any, n: Any) -> list[Any]:
    """``popleft_n`` off the one-pass path: the pool's checks first, then check mode's operation."""
    if queue._pool_link is not None:
        before_unlink(queue, n, "the start of popleft_n()")
    return _checked_popleft_n(queue, n)


# Check mode's operations, resolved once (a super() call builds a proxy on 3.10 and 3.11),
# and shared with the trace level's vLLM queue, which calls these functions in their place.
_checked_popleft = CheckedFreeBlockQueue.popleft
_checked_popleft_n = CheckedFreeBlockQueue.popleft_n
_checked_remove = CheckedFreeBlockQueue.remove
_checked_append = CheckedFreeBlockQueue.append
_checked_append_n = CheckedFreeBlockQueue.append_n
_checked_prepend_n = CheckedFreeBlockQueue.prepend_n
_checked_chain_is_membership = CheckedFreeBlockQueue._chain_is_membership
_checked_next_period = CheckedFreeBlockQueue._next_period


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
    """Check ``queue``'s whole pool and restart the countdown; see ``check_block_pool``.

    The queue's own full check runs here first (its countdown never runs out
    on a pool's queue: :func:`pool_queue_period`), over the same snapshot of a
    pool's membership (one lookup a block at C speed): the queue's chain and
    the pool's counts are read together, at the one place vLLM's pool is
    between two of its operations.
    """
    link = queue._pool_link
    if link is None or not pool_is_built(link):
        checked = False  # no pool, or vLLM's BlockPool.__init__: nothing to check yet
    else:
        members = queue._members
        snapshot = members.snapshot() if type(members) is PoolMembership else members
        queue._members = snapshot
        try:
            queue.full_check()
            checked = check_block_pool(link, snapshot, where)
        finally:
            queue._members = members
    queue._until_pool_check[0] = _pool_period(queue)
    return checked


def pool_queue_period(queue: Any) -> int:
    """Check mode's countdown to the queue's full check: never on a pool's queue.

    There the queue's full check runs with the pool's (:func:`check_pool_now`),
    whose countdown ticks at each unlink: they are at most a period of unlinks
    plus the pool's size of operations apart, since every join links a block
    that an unlink took (or one the queue was built without).
    """
    if queue._pool_link is not None:
        return _NEVER
    return _checked_next_period(queue)


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
            # check_moving's first test, inline; a field that cannot be read is check_moving's
            # to name (P5), never a raw error from here.
            try:
                suspect = (
                    node.ref_cnt != 0
                    or node.is_null
                    or node.pool is not link
                    or node.block_hash is not None
                )
            except Exception:  # whatever a field raises, check_moving reports it
                suspect = True
            if suspect:
                check_moving(link, (node,), where, joining=False)
            node = node.next_free_block
    except AttributeError:
        return  # damaged links: check mode's operation names the damage


def read_membership_from_pool(queue: Any, blocks: Iterable[Any]) -> None:
    """On the free queue of a pool built from all its blocks, read membership from the pool.

    The pool's membership holds for the queue built from the pool's whole block list, in
    its order, as vLLM's ``BlockPool`` builds its one free queue: a queue built from part of
    them keeps check mode's membership dict, and every operation takes check mode's path.
    """
    own: object = getattr(_pool_of(queue._pool_link), "blocks", None)
    if (
        type(own) is list
        and type(blocks) is list
        and len(own) == len(blocks)
        and all(map(operator.is_, own, blocks))
    ):
        queue._members = PoolMembership(blocks)


# The one-pass tests of the healthy case of each linking operation on a pool's queue (see
# "The membership" in VllmCheckedFreeBlockQueue). Each count returns a true count (the one
# the operation must leave, or the one before a join or a removal), or ``None`` to have
# check mode's operation run instead: no pool's membership, the pool's countdown about to
# run out at an unlink (its full check runs first, with the queue's), or anything check
# mode or the pool's clauses would look into; _may_join returns ``False`` for the last.
# They read and write nothing else; a passing unlink ticks the pool's countdown, as
# before_unlink would have. Check mode's own countdown plays no part on a pool's queue
# (pool_queue_period): its operations tick it, never to run out. The operations of vLLM's
# step (popleft_n, prepend_n, and append_n's empty batch) run these tests inline, where a
# call costs more than a test; the other operations call them.


def _cache_of(link: object) -> Any:
    """The prefix cache of the pool ``link`` names; ``AttributeError`` once the pool is gone.

    Each caller stands aside for any exception, that one included.
    """
    # pool_checks._pool_of, inline: this runs at every linking operation.
    pool: Any = link() if type(link) is weakref.ref else link
    return pool.cached_block_hash_to_block


def _front_leave_count(queue: Any) -> int | None:  # noqa: PLR0911 -- a return a test
    """The count once the front block has left, if it may: sound links, P1-P3, P5.

    ``popleft``'s test: ``popleft_n``'s walk, which it runs inline, for a run of one.
    """
    link = queue._pool_link
    until_pool = queue._until_pool_check
    if type(queue._members) is not PoolMembership or until_pool[0] <= 1:
        return None
    count: int = queue._true_free_blocks
    if count < 1:
        return None  # check mode's operation raises the production queue's error
    try:
        head = queue.fake_free_list_head
        block = head.next_free_block
        key = block.block_hash
        # I1 and I5 (check mode's walk), then P2, P1, P5 and P3 (before_unlink's).
        if (
            head.prev_free_block is not None
            or block.prev_free_block is not head
            or block.ref_cnt != 0
            or block.is_null
            or block.pool is not link
            or (key is not None and not _cache_of(link).contain(key, block.block_id))
        ):
            return None
        # The node after it, whose back link the operation rewrites.
        after = block.next_free_block
        if after is queue.fake_free_list_tail:
            if count != 1 or after.next_free_block is not None:
                return None
        elif after.prev_free_block is not block or after.pool is not link:
            return None
    except Exception:  # a link that is no block: damage, which check mode's operation names
        return None
    until_pool[0] -= 1
    return count - 1


def _removal_count(queue: Any, block: Any) -> int | None:
    """The count before ``block`` leaves, if it may: a linked block of the pool, P1-P3, P5."""
    link = queue._pool_link
    until_pool = queue._until_pool_check
    if type(queue._members) is not PoolMembership or until_pool[0] <= 1:
        return None
    try:
        key = block.block_hash
        if (
            block.pool is not link
            or block.ref_cnt != 0
            or block.is_null
            or (key is not None and not _cache_of(link).contain(key, block.block_id))
        ):
            return None
        before = block.prev_free_block
        after = block.next_free_block
        if (
            before.next_free_block is not block
            or after.prev_free_block is not block
            or (before is not queue.fake_free_list_head and before.pool is not link)
            or (after is not queue.fake_free_list_tail and after.pool is not link)
        ):
            return None
    except Exception:  # no links (a detached block has None), or not a block at all
        return None
    until_pool[0] -= 1
    count: int = queue._true_free_blocks
    return count


def _back_join_count(queue: Any) -> int | None:
    """The count before blocks join at the back, if they may: sound sentinels and a sound end.

    The end is a block of the pool linked on to the tail, or the head of an
    empty queue. ``prepend_n`` tests the front so, inline, and ``append_n``
    the back for an empty batch.
    """
    if type(queue._members) is not PoolMembership:
        return None
    count: int = queue._true_free_blocks
    head = queue.fake_free_list_head
    tail = queue.fake_free_list_tail
    try:
        before = tail.prev_free_block
        if (
            head.prev_free_block is None
            and tail.next_free_block is None
            and before.next_free_block is tail
            and (count == 0 if before is head else before.pool is queue._pool_link)
        ):
            return count
    except Exception:  # a link that is no block: damage, which check mode's operation names
        pass
    return None


def _may_join(link: object, blocks: list[Any]) -> bool:
    """Whether every block of ``blocks`` may join the free queue of the pool ``link`` names.

    P2, P1, P5 and P3 (check_moving's). A block this build cannot link, or one
    linked already (I4; on a pool's queue, so a member), the production
    operation refuses whole before it changes anything, and check mode's
    operation then answers the batch (:func:`_joined_by_production`).
    """
    try:
        cache: Any = None  # the prefix cache, read at the first block with a hash
        for block in blocks:
            if block.ref_cnt != 0 or block.is_null or block.pool is not link:
                return False
            if block.block_hash is not None:  # read again below, as in popleft_n
                cache = _cache_of(link) if cache is None else cache
                if not cache.contain(block.block_hash, block.block_id):
                    return False
    except Exception:  # an item with no such fields: check mode's operation says which
        return False
    return True


# After a linking operation on the healthy path: the links it wrote and the count, each
# failure handed to check mode's diagnosis, which names it (a fault of the production
# queue, or damage done while it ran). The tests of _count_after and of
# _diagnosis.expect_joined are inline where an operation of vLLM's step runs them: a call
# each costs more than the test.


def _count_after(queue: Any, expected: int, where: str) -> None:
    """I2: the true count moved by the blocks the operation moved."""
    if queue._true_free_blocks != expected:
        _diagnosis.expect_count(queue, queue._members, where)


def _front_after(queue: Any, expected: int, where: str) -> None:
    """I1, I2 after an unlink from the front: the new front links back to the head."""
    head = queue.fake_free_list_head
    if head.next_free_block.prev_free_block is not head:
        _diagnosis.check_front(queue, queue._members, where)
    if queue._true_free_blocks != expected:
        _diagnosis.expect_count(queue, queue._members, where)


def _back_after(queue: Any, before: Any, batch: list[Any], expected: int, where: str) -> None:
    """I1, I2 after a join at the back: ``batch`` (not empty) between ``before`` and the tail."""
    tail = queue.fake_free_list_tail
    if tail.prev_free_block is not batch[-1] or tail.next_free_block is not None:
        _diagnosis.check_back(queue, queue._members, where)
    first = batch[0]
    if before.next_free_block is not first or first.prev_free_block is not before:
        _diagnosis.expect_joined(queue, before, first, where)
    if queue._true_free_blocks != expected:
        _diagnosis.expect_count(queue, queue._members, where)
