"""Check mode: a :class:`FreeBlockQueue` that catches corruption at the operation that meets it.

``CheckedFreeBlockQueue`` has the production queue's API and results. On top
of them it

* keeps its own membership, ``id(block) -> block``, so ``remove`` of a block
  linked in another queue is rejected in O(1) with ``NotInQueueError`` and
  both queues are left as they were;
* before and after every operation, checks in O(1) the links it is about to
  touch or has just written, and that ``num_free_blocks`` equals the size of
  its membership, raising :class:`InvariantViolation` on damage done by
  outside code (a hand-written link, an overwritten count);
* every ``full_check_every`` operations runs the full O(n) check: what
  :func:`~verified_queue.invariants.check_invariants` checks, and that the
  chain is exactly its membership (one walk on a healthy queue; the checkers
  run, to name the fault, only when that walk finds one).
  The default period, ``max(1000, len(queue))``, keeps the amortized cost per
  operation O(1), so check mode can stay on for a whole serving run;
  ``full_check_every=0`` turns the periodic check off.

On a queue damaged by outside code every method raises a ``QueueError``
subclass (``InvariantViolation``, or the error the production queue would
raise) and nothing else. "Damage" here means any value written into a
block's two links or ``num_free_blocks`` (a proxy whose lookups raise too).

Membership is a dict ``id(block) -> block``, not a set of ids, so that every
recorded member stays alive and ``id(node) in members`` is exact. The mutating
operations test the healthy case inline and call :mod:`verified_queue._diagnosis`
only when a test fails; they link through the production queue's methods,
resolved once per class (``_super_popleft`` and so on). Why each of these holds,
and what it costs: "What check mode does" and "What it costs" in docs/check-mode.md.
This class is check mode at every ``VERIFIED_QUEUE_CHECKS`` level: the trace level
is its subclass ``TracedFreeBlockQueue``, which this module does not import.

The class keeps to the production queue's public attributes, so it also
subclasses a mypyc-compiled ``FreeBlockQueue`` (built with
``allow_interpreted_subclasses``); its own state lives in ``__slots__``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final, SupportsIndex, TypeVar

from verified_queue import _diagnosis, _switch
from verified_queue._messages import batch_argument, count_argument, has_unlinkable
from verified_queue.block import Block, Linkable
from verified_queue.errors import NotInQueueError, QueueError
from verified_queue.invariants import describe, violation
from verified_queue.queue import FreeBlockQueue

__all__ = ["DEFAULT_FULL_CHECK_EVERY", "MIN_FULL_CHECK_PERIOD", "CheckedFreeBlockQueue"]

#: This module's frames are the library's: the trace level records the first frame outside
#: the library as an operation's caller (see ``verified_queue._trace_records``).
__trace_library__ = True

#: The adaptive period's floor: with ``full_check_every=None`` the full check runs
#: every ``max(MIN_FULL_CHECK_PERIOD, len(queue))`` operations.
MIN_FULL_CHECK_PERIOD: Final = 1000

#: ``full_check_every`` when none is given: ``1`` under ``VERIFIED_QUEUE_CHECKS=full``,
#: otherwise ``None`` (the adaptive period).
DEFAULT_FULL_CHECK_EVERY: Final[int | None] = 1 if _switch.CHECK_LEVEL == "full" else None

B = TypeVar("B", bound=Linkable)

#: The countdown of a queue whose periodic full check is off (``full_check_every=0``); when
#: it runs out, it is rewound instead of acted on.
_NEVER: Final = 1 << 29

#: The production methods each checked operation links with; see ``__init_subclass__``.
_LINKING_METHODS: Final = ("popleft", "popleft_n", "remove", "append", "append_n", "prepend_n")


class CheckedFreeBlockQueue(FreeBlockQueue[B]):
    """A :class:`FreeBlockQueue` that checks itself at every operation (check mode).

    ``full_check_every=k`` runs the full O(n) check every ``k`` operations
    (``1``: before every operation); ``None`` (the default) uses
    ``max(1000, len(queue))``, which keeps the amortized cost per operation
    O(1); ``0`` never runs it by itself, leaving the O(1) checks of every
    operation and :meth:`full_check` on demand. The attribute may be changed
    later; the new period starts after the next full check (from ``0``, call
    :meth:`full_check` to start it).

    >>> blocks = [Block() for _ in range(3)]
    >>> first, second = CheckedFreeBlockQueue(blocks[:2]), CheckedFreeBlockQueue(blocks[2:])
    >>> first.remove(blocks[2])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verified_queue.errors.NotInQueueError: remove(<Block at ...>): it is linked in another queue
    >>> len(first), len(second)
    (2, 1)
    """

    __slots__ = ("_full_check_every", "_members", "_until_full_check")

    # id(block) -> block for every block this queue linked and holds; holding the block
    # keeps its id unique, so ``id(node) in _members`` alone proves ``node`` is a member
    # (see "Membership" in the module docstring).
    _members: dict[int, B]
    # Operations left until the next periodic full check, in a one-element list that every
    # operation updates in place: on the compiled build an attribute assignment from check
    # mode goes through the queue's interpreted __setattr__ (verified_queue/_slotted.py),
    # which took a quarter to two fifths of each checked operation there.
    _until_full_check: list[int]
    _full_check_every: int | None

    # The linking methods super() reaches from here, re-resolved by __init_subclass__ for
    # each subclass (its MRO may put another class next); once, because a super() call
    # builds a proxy each time on 3.10 and 3.11. 3.12's LOAD_SUPER_ATTR builds none: when
    # 3.11 goes, plain super() calls replace these (and the trace level's _checked_*).
    _super_popleft = FreeBlockQueue.popleft
    _super_popleft_n = FreeBlockQueue.popleft_n
    _super_remove = FreeBlockQueue.remove
    _super_append = FreeBlockQueue.append
    _super_append_n = FreeBlockQueue.append_n
    _super_prepend_n = FreeBlockQueue.prepend_n

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Bind the subclass's ``_super_*`` methods to what ``super()`` reaches from here."""
        super().__init_subclass__(**kwargs)
        after_check_mode = super()  # the MRO of cls, from the class after this one
        for name in _LINKING_METHODS:
            setattr(cls, f"_super_{name}", getattr(after_check_mode, name))

    def __init__(self, blocks: Iterable[B] = (), *, full_check_every: int | None = None) -> None:
        """Link ``blocks`` front to back, as :class:`FreeBlockQueue` does, with checks on.

        Raises ``ValueError`` unless ``full_check_every`` is ``None`` or an
        int >= 0.

        Runtime complexity: O(n)
        """
        # Set before the base __init__, which calls the checked append_n.
        self._members = {}
        self.full_check_every = (
            DEFAULT_FULL_CHECK_EVERY if full_check_every is None else full_check_every
        )
        self._until_full_check = [self._next_period()]
        super().__init__(blocks)

    @property
    def full_check_every(self) -> int | None:
        """The period of the full check in operations; ``None`` adaptive, ``0`` never.

        Setting it validates the value at once (``ValueError`` unless it is
        ``None`` or an int >= 0), so a bad period cannot make every later
        operation fail; the new period starts after the next full check.
        """
        return self._full_check_every

    @full_check_every.setter
    def full_check_every(self, period: int | None) -> None:
        if period is not None and (type(period) is not int or period < 0):
            raise ValueError(f"full_check_every={period!r}: expected None or an int >= 0")
        self._full_check_every = period

    def __reduce__(
        self,
    ) -> tuple[Callable[..., CheckedFreeBlockQueue[B]], tuple[object, ...], list[B]]:
        """Pickle and deep-copy with ``full_check_every``; the copy's membership is its own blocks.

        Built empty, then given the blocks, as ``FreeBlockQueue.__reduce__`` explains.

        Runtime complexity: O(n) (it lists the blocks through the full check)
        """
        return _rebuild, (type(self), [], self.full_check_every), self.get_all_free_blocks()

    # ----------------------------------------------------------- full check

    def _next_period(self) -> int:
        """The countdown to the next periodic full check, from ``full_check_every``."""
        period = self.full_check_every
        if period is None:
            return max(MIN_FULL_CHECK_PERIOD, len(self._members))
        return period or _NEVER

    def _period_over(self) -> None:
        """The countdown ran out: run the full check, or rewind if the periodic check is off."""
        if self.full_check_every == 0:
            self._until_full_check[0] = _NEVER
        else:
            self.full_check()

    # Every operation starts with _begin (the count test, a tick of the full-check countdown)
    # and every mutation ends with _check_count (each reads the count once: a subclass may make
    # it a property, as vLLM's counter is); both raise only QueueError, or the damage
    # errors the operation's handler converts. popleft, append and remove keep inline copies:
    # as calls they cost 13-22% of such an operation on 3.11 (about 23 ns each of ~300 ns,
    # bench/check_mode_revision.py); a batch pays 3-4% at 10 blocks, noise from 50.

    def _begin(self, where: str) -> dict[int, B]:
        """Test the count against the membership, tick the countdown; return the membership.

        ``where`` names the start of the operation in a diagnostic.
        """
        members = self._members
        count = self.num_free_blocks
        if count.__class__ is not int or count != len(members):
            _diagnosis.expect_count(self, members, where)
        until = self._until_full_check
        countdown = until[0] - 1
        until[0] = countdown
        if countdown <= 0:
            self._period_over()
        return members

    def _check_count(self, members: dict[int, B], where: str) -> None:
        """Test ``num_free_blocks`` against the size of ``members``, this queue's membership."""
        count = self.num_free_blocks
        if count.__class__ is not int or count != len(members):
            _diagnosis.expect_count(self, members, where)

    def full_check(self) -> None:
        """Check what ``check_invariants`` checks, and the walk against this queue's membership.

        Raises :class:`InvariantViolation` on any damage. Runs by itself every
        ``full_check_every`` operations; call it by hand after suspect code.

        Runtime complexity: O(n)

        >>> blocks = [Block(), Block()]
        >>> queue = CheckedFreeBlockQueue(blocks)
        >>> queue.full_check()
        >>> blocks[0].prev_free_block = None
        >>> queue.full_check()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        verified_queue.errors.InvariantViolation: I1 (sentinel_linkage) broken at position 1...
        """
        try:
            sound = self._chain_is_membership()
        except Exception as error:  # a link whose lookup raises, or an exception from outside
            _diagnosis.check_full(self, self._members, error)
        if not sound:
            _diagnosis.check_full(self, self._members)
        self._until_full_check[0] = self._next_period()

    def _chain_is_membership(self) -> bool:
        """Whether the queue is sound and its chain is exactly its membership: one walk.

        The healthy case of :meth:`full_check`, in one pass that reads two links
        and one membership entry per block (``check_invariants`` and the
        membership walk read far more). It proves what they prove: the count is
        the membership's size; the head's outer link and the tail's are unset;
        the ``len(members)`` nodes after the head are members (so blocks, no
        sentinel among them), each naming the node before it, and the tail
        follows them, naming the last. Back links that agree along the walk
        leave no room for a repeat (the first repeated block would name two
        different predecessors), so the chain is ``len(members)`` distinct
        members: the whole membership.
        """
        members = self._members
        try:
            head = self.fake_free_list_head
            tail = self.fake_free_list_tail
            count = self.num_free_blocks
            if (
                count.__class__ is not int
                or count != len(members)
                or head.prev_free_block is not None
                or tail.next_free_block is not None
            ):
                return False
            previous: Block = head
            node = head.next_free_block
            for _ in range(count):
                if id(node) not in members or node.prev_free_block is not previous:  # type: ignore[union-attr]  # a member
                    return False
                previous = node  # type: ignore[assignment]  # a member, so a Block
                node = node.next_free_block  # type: ignore[union-attr]  # a member
            return node is tail and tail.prev_free_block is previous
        except (AttributeError, TypeError):  # a deleted slot or sentinel, a count that is no int
            return False

    def _is_member(self, node: object) -> bool:
        """Whether ``node`` is a member; exact, see "Membership" in the module docstring."""
        return id(node) in self._members

    # ------------------------------------------------------------ operations

    def __len__(self) -> int:
        """Return the number of free blocks, after checking it against the membership.

        Runtime complexity: O(1)
        """
        return self._checked_count("len()")

    def __bool__(self) -> bool:
        """Return whether any block is free, after checking the count.

        Runtime complexity: O(1)
        """
        return self._checked_count("bool()") != 0

    def _checked_count(self, where: str) -> int:
        """``num_free_blocks``, once tested against the membership (a deleted one refused)."""
        count: int = getattr(self, "num_free_blocks", None)  # type: ignore[assignment]
        if count.__class__ is not int or count != len(self._members):
            _diagnosis.expect_count(self, self._members, where)
        return count

    def __contains__(self, block: object) -> bool:
        """Return whether ``block`` itself is in this queue, from the membership.

        Runtime complexity: O(1) (the production queue walks, O(n))

        >>> block = Block()
        >>> block in CheckedFreeBlockQueue([block]), Block() in CheckedFreeBlockQueue()
        (True, False)
        """
        return id(block) in self._members

    def __iter__(self) -> Iterator[B]:
        """Run the full check, then yield the free blocks from the front to the back.

        Iteration is live, as in the production queue; a block that leaves the
        queue while the iteration stands on it raises ``NotInQueueError``
        (the production queue would go on from a cleared link).

        Runtime complexity: O(n)
        """
        self.full_check()
        return self._iterate(self.fake_free_list_head, "iteration")

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Yield the free blocks after ``cursor``; a cursor that is not a member is rejected.

        Unlike the production queue, this also rejects, with
        :class:`NotInQueueError`, a cursor linked in another queue. Each step
        checks the link it crosses, as iteration does, and the call counts as
        an operation toward the periodic full check (it does not run one by
        itself: a walk that stops early stays cheap).

        Runtime complexity: O(1) to start, O(1) per block yielded, plus the
        amortized O(1) full check
        """
        try:
            members = self._begin("the start of iter_blocks_after()")
            if cursor is None or cursor is self.fake_free_list_head:
                return self._iterate(self.fake_free_list_head, "iteration")
            if cursor is self.fake_free_list_tail:
                return iter(())
            if id(cursor) not in members:
                raise _diagnosis.not_a_member(self, members, cursor, "iter_blocks_after")
            # The walk checks the links after the cursor; its link back is checked here.
            before = cursor.prev_free_block
            if (
                id(before) not in members and before is not self.fake_free_list_head
            ) or before.next_free_block is not cursor:  # type: ignore[union-attr]  # member or head
                _diagnosis.check_around(self, members, cursor, "the start of iter_blocks_after()")  # type: ignore[arg-type]  # a member, so a Block
            return self._iterate(cursor, "iteration after a cursor")  # type: ignore[arg-type]  # a member, so a Block
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "iter_blocks_after()", error) from error

    def _iterate(self, start: Block, where: str) -> Iterator[B]:
        """Yield the members after ``start`` (the head or a member), checking each link.

        ``where`` names the walk in diagnostics; positions count from ``start``.
        """
        try:
            members = self._members
            tail = self.fake_free_list_tail
            block: Block = start
            position = 0
            # Every link is checked locally, but members linked into a ring with consistent
            # links would be walked for ever: once a walk outlasts the membership, the full
            # check (which sees a ring) runs, and again after as many steps more. A queue that
            # grows under the iteration passes it, so a live walk is never cut short.
            until_full_check = len(members) + 1
            while True:
                following = block.next_free_block
                position += 1
                if following is tail:
                    return
                until_full_check -= 1
                if until_full_check < 0:
                    self.full_check()
                    until_full_check = len(members) + 1
                _diagnosis.expect_linked_member(self, members, following, block, position, where)
                block = following  # type: ignore[assignment]  # a member, so a Block
                yield block  # type: ignore[misc]  # a member, so a B
                if id(block) not in members:
                    raise NotInQueueError(
                        f"{describe(block)} left the queue while an iteration stood on it"
                    )
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, where, error) from error

    def get_all_free_blocks(self) -> list[B]:
        """Run the full check, then return a new list of the free blocks, front first.

        Runtime complexity: O(n)
        """
        self.full_check()
        return super().get_all_free_blocks()

    # Every mutation starts with _begin and ends with _check_count, or with their inline
    # forms (see _begin). The links of a node are read only once membership (or being a
    # sentinel) shows it is a Block; until then it may be anything outside code wrote.

    def popleft(self) -> B:
        """Detach and return the front block, checking the front before and after.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        try:
            # The inline form of _begin(): 13-22% of this operation as a call (see _begin).
            members = self._members
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the start of popleft()")
            until = self._until_full_check
            countdown = until[0] - 1
            until[0] = countdown
            if countdown <= 0:
                self._period_over()
            # The inline form of _front_is_sound(1), or of _front_is_sound(0) when empty: the
            # front block and the node after it, whose back link popleft() rewrites; an empty
            # queue has only the tail to check, and the production queue refuses it.
            head = self.fake_free_list_head
            tail = self.fake_free_list_tail
            first = head.next_free_block
            if id(first) in members:
                second = first.next_free_block  # type: ignore[union-attr]  # a member
                sound = (
                    first.prev_free_block is head  # type: ignore[union-attr]  # a member
                    and head.prev_free_block is None
                    and (
                        second.prev_free_block is first  # type: ignore[union-attr]  # a member
                        if id(second) in members
                        else second is tail and tail.next_free_block is None and len(members) == 1
                    )
                )
            else:
                sound = (
                    first is tail
                    and not members
                    and head.prev_free_block is None
                    and tail.next_free_block is None
                )
            if not sound:
                _diagnosis.check_front(self, members, "the start of popleft()")
            block = self._super_popleft()
            if members.pop(id(block), None) is None:
                raise _diagnosis.not_taken_from_here(self, block, "the end of popleft()")
            if head.next_free_block.prev_free_block is not head:  # type: ignore[union-attr]  # I1
                _diagnosis.check_front(self, members, "the end of popleft()")
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the end of popleft()")
            return block
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "popleft()", error) from error

    def _front_is_sound(self, steps: int) -> bool:
        """I1, I2: the first ``steps`` blocks and the node after them are sound, in O(steps).

        The inline test of the walk of :func:`verified_queue._diagnosis.check_front`,
        stopped after ``steps + 1`` nodes.
        """
        members = self._members
        head = self.fake_free_list_head
        if head.prev_free_block is not None:
            return False
        previous: Block = head
        for _ in range(steps):
            node = previous.next_free_block
            if id(node) not in members or node.prev_free_block is not previous:  # type: ignore[union-attr]  # a member
                return False
            previous = node  # type: ignore[assignment]  # a member, so a Block
        node = previous.next_free_block
        if id(node) in members:
            return node.prev_free_block is previous  # type: ignore[union-attr]  # a member
        tail = self.fake_free_list_tail
        return node is tail and tail.next_free_block is None and steps == len(members)

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Detach and return the first ``n`` blocks, checking each link the run crosses.

        Runtime complexity: O(n), plus the amortized O(1) full check
        """
        # The caller's own error (a count that is no integer, an __index__ that raises)
        # is raised as the production queue raises it, not taken for damage.
        count = count_argument("popleft_n", n)
        try:
            members = self._begin("the start of popleft_n()")
            # Out of range, the production queue refuses the count itself.
            if 0 <= count <= len(members) and not self._front_is_sound(count):
                _diagnosis.check_front(self, members, "the start of popleft_n()")
            popped = self._super_popleft_n(count)
            for block in popped:
                if members.pop(id(block), None) is None:
                    raise _diagnosis.not_taken_from_here(self, block, "the end of popleft_n()")
            if not self._front_is_sound(0):
                _diagnosis.check_front(self, members, "the end of popleft_n()")
            self._check_count(members, "the end of popleft_n()")
            return popped
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "popleft_n()", error) from error

    def remove(self, block: B) -> None:
        """Detach ``block``; one linked in another queue is rejected in O(1), both unchanged.

        Raises :class:`NotInQueueError` if ``block`` is not in this queue
        (detached, a sentinel, or linked in another queue), and
        :class:`InvariantViolation` if outside code linked it in or its
        neighbours' links disagree.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        try:
            # The inline form of _begin(): 13-22% of this operation as a call (see _begin).
            members = self._members
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the start of remove()")
            until = self._until_full_check
            countdown = until[0] - 1
            until[0] = countdown
            if countdown <= 0:
                self._period_over()
            block_id = id(block)
            if block_id not in members:
                raise _diagnosis.not_a_member(self, members, block)
            before = block.prev_free_block
            after = block.next_free_block
            if not (
                (id(before) in members or before is self.fake_free_list_head)
                and (id(after) in members or after is self.fake_free_list_tail)
                and before.next_free_block is block  # type: ignore[union-attr]  # member or sentinel
                and after.prev_free_block is block  # type: ignore[union-attr]  # member or sentinel
            ):
                _diagnosis.check_around(self, members, block, "the start of remove()")  # type: ignore[arg-type]  # a member, so a Block
            self._super_remove(block)
            del members[block_id]
            if before.next_free_block is not after or after.prev_free_block is not before:  # type: ignore[union-attr]  # checked
                raise violation(
                    "I1",
                    "the end of remove()",
                    f"the links between {describe(before)} and {describe(after)}",
                    "each naming the other",
                    f"{describe(before.next_free_block)} and {describe(after.prev_free_block)}",  # type: ignore[union-attr]  # checked
                )
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the end of remove()")
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "remove()", error) from error

    def _back_is_sound(self) -> bool:
        """I1, I2: the tail ends the chain after a member, or after the head when empty."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        if id(last) in self._members:
            return last.next_free_block is tail and tail.next_free_block is None  # type: ignore[union-attr]  # a member
        return (
            last is self.fake_free_list_head and not self._members and tail.next_free_block is None
        )

    def append(self, block: B) -> None:
        """Link a detached ``block`` at the back, checking the tail before and after.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        try:
            # The inline form of _begin(): 13-22% of this operation as a call (see _begin).
            members = self._members
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the start of append()")
            until = self._until_full_check
            countdown = until[0] - 1
            until[0] = countdown
            if countdown <= 0:
                self._period_over()
            block_id = id(block)
            if block_id in members:
                # Still linked, the production guard refuses it; cleared, this refuses it.
                _diagnosis.reject_cleared_member(members, block, "the start of append()")
            # The inline form of _back_is_sound().
            tail = self.fake_free_list_tail
            last = tail.prev_free_block
            if id(last) in members:
                if last.next_free_block is not tail or tail.next_free_block is not None:  # type: ignore[union-attr]  # a member
                    _diagnosis.check_back(self, members, "the start of append()")
            elif (
                last is not self.fake_free_list_head or members or tail.next_free_block is not None
            ):
                _diagnosis.check_back(self, members, "the start of append()")
            self._super_append(block)
            members[block_id] = block
            if tail.prev_free_block is not block:
                raise violation(
                    "I1",
                    "the end of append(), the tail sentinel",
                    f"prev_free_block of {describe(tail, tail=tail)}",
                    f"the appended {describe(block)}",
                    describe(tail.prev_free_block, self.fake_free_list_head, tail),
                )
            count = self.num_free_blocks
            if count.__class__ is not int or count != len(members):
                _diagnosis.expect_count(self, members, "the end of append()")
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "append()", error) from error

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back, all or none, checking the tail before and after.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) full check
        """
        # One list for the checks, the link and the membership. A batch that is not
        # iterable, an iterator that raises, an item that is not a block: the caller's
        # errors, raised exactly as the production queue raises them (it refuses such
        # a batch whole, with the error of its first bad item), never taken for damage.
        batch: list[B] = (
            blocks if type(blocks) is list else batch_argument("append_n", blocks)  # type: ignore[assignment]
        )
        if has_unlinkable(batch):
            self._super_append_n(batch)
            raise _diagnosis.unexplained("append_n()")  # it refuses it; never reached
        try:
            members = self._begin("the start of append_n()")
            if not members.keys().isdisjoint(map(id, batch)):
                for block in batch:
                    _diagnosis.reject_cleared_member(members, block, "the start of append_n()")
            if not self._back_is_sound():
                _diagnosis.check_back(self, members, "the start of append_n()")
            if not batch:
                return  # nothing linked (vLLM's free_blocks often frees none to this end)
            before = self.fake_free_list_tail.prev_free_block
            self._super_append_n(batch)
            members.update(zip(map(id, batch), batch, strict=True))
            if not self._back_is_sound():
                _diagnosis.check_back(self, members, "the end of append_n()")
            _diagnosis.expect_joined(self, before, batch[0], "the end of append_n()")
            self._check_count(members, "the end of append_n()")
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "append_n()", error) from error

    # prepend_n is append_n's twin at the other end, kept apart as queue.py keeps its two:
    # one method for both would cost each batch a call more (see _begin for what one costs).

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front, all or none, checking the front before and after.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) full check
        """
        # One list for the checks, the link and the membership. A batch that is not
        # iterable, an iterator that raises, an item that is not a block: the caller's
        # errors, raised exactly as the production queue raises them (it refuses such
        # a batch whole, with the error of its first bad item), never taken for damage.
        batch: list[B] = (
            blocks if type(blocks) is list else batch_argument("prepend_n", blocks)  # type: ignore[assignment]
        )
        if has_unlinkable(batch):
            self._super_prepend_n(batch)
            raise _diagnosis.unexplained("prepend_n()")  # it refuses it; never reached
        try:
            members = self._begin("the start of prepend_n()")
            if not members.keys().isdisjoint(map(id, batch)):
                for block in batch:
                    _diagnosis.reject_cleared_member(members, block, "the start of prepend_n()")
            if not self._front_is_sound(0):
                _diagnosis.check_front(self, members, "the start of prepend_n()")
            if not batch:
                return  # nothing linked (vLLM's free_blocks often frees none to this end)
            after = self.fake_free_list_head.next_free_block
            self._super_prepend_n(batch)
            members.update(zip(map(id, batch), batch, strict=True))
            if not self._front_is_sound(0):
                _diagnosis.check_front(self, members, "the end of prepend_n()")
            _diagnosis.expect_joined(self, batch[-1], after, "the end of prepend_n()")
            self._check_count(members, "the end of prepend_n()")
        except QueueError:
            raise
        except Exception as error:
            # Damage outside code did (see the module docstring): never a raw error.
            raise _diagnosis.damaged(self, "prepend_n()", error) from error


def _rebuild(
    cls: type[CheckedFreeBlockQueue[B]], blocks: list[B], full_check_every: int | None
) -> CheckedFreeBlockQueue[B]:
    """Build a loaded or deep-copied checked queue: its blocks, with its period."""
    return cls(blocks, full_check_every=full_check_every)
