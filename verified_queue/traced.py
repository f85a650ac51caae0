"""The trace level of check mode: a checked queue whose errors also say who did it.

``TracedFreeBlockQueue`` is a :class:`~verified_queue.checked.CheckedFreeBlockQueue`
that records, for every block it links or unlinks, the last operation that did
it (operation, caller's file, line and function, thread, the queue's operation
number), plus a ring of the queue's last operations. Every ``QueueError`` it
raises carries that history, as lines its traceback shows under the message
(notes, PEP 678, on Python 3.11+; on 3.10, lines of the message itself) and as
the field ``error.history`` (a :class:`History`):

* a double free names where the block was freed into this queue, and where it
  was taken since, if it was;
* a ``remove`` of a detached block names where it left this queue;
* a block linked in another traced queue names where that queue linked it;
* damage found by a check names the damaged blocks' last records, the last
  write of ``num_free_blocks`` from outside the queue (the writer's file and
  line), and the queue's last operations.

The caller recorded is the first frame outside the library: the modules that
set ``__trace_library__ = True`` (the queue and its undo, check mode, the trace
level, the block pool and its keys, the vLLM adapters; ``verified_queue.cli``,
the package's own application, counts as a caller), and, under the vLLM plugin's
trace mode, vLLM's KV-cache core, whose frames and caller also give the id of
the request the call served (``verified_queue._trace_records.treat_as_library``).

Memory is bounded: one record per block, overwritten by each link and unlink,
plus the ring. A record is keyed by ``id(block)`` and proves it is its
block's own: while the block is in the queue, check mode's membership holds it;
after, a weak reference to it, if its type has them, or else the block itself,
for the last :data:`HELD_DEPARTED` blocks that left. The docs' check-mode page
gives the argument. The module is loaded only when the level is used:
``VERIFIED_QUEUE_CHECKS=trace``, or ``TracedFreeBlockQueue`` by name.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from gc import disable as _gc_disable
from gc import enable as _gc_enable
from gc import isenabled as _gc_isenabled
from typing import Final, SupportsIndex, TypeVar

from verified_queue import queue as _production
from verified_queue._messages import batch_argument
from verified_queue._trace_records import (
    BlockHistory,
    Caller,
    History,
    Holder,
    Operation,
    Recorded,
    Records,
    add_lines,
    count_write_line,
    drop_oldest_held,
    find_caller,
    forget_when_dead,
    is_library,
    operation_of,
    or_none,
    thread_name,
)
from verified_queue.block import Linkable
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    InvariantViolation,
    NotInQueueError,
    QueueError,
)
from verified_queue.invariants import describe

__all__ = [
    "DEFAULT_HISTORY",
    "HELD_DEPARTED",
    "BlockHistory",
    "History",
    "Operation",
    "TracedFreeBlockQueue",
]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

B = TypeVar("B", bound=Linkable)

#: How many recent operations a traced queue keeps when ``history`` is not given.
DEFAULT_HISTORY: Final = 16

#: How many blocks without weak-reference support that left the queue keep their record
#: (and are kept alive by it): older records of such blocks are dropped.
HELD_DEPARTED: Final = 4096

#: What a deleted sentinel reads as when the damaged blocks are looked for.
_MISSING: Final = object()

#: Damaged blocks named in one report, at most: the first few are where to look.
_DAMAGED_SHOWN: Final = 4

#: The production queue's source: its own writes of ``num_free_blocks`` are not outside writes.
_PRODUCTION_FILE: Final = _production.__file__

# The records of every traced queue alive, so that a block linked in another traced queue
# can be traced to it. Weak references go to the records, not to the queues: the compiled
# FreeBlockQueue's weak reference slot cannot be trusted in an interpreted subclass.
_all_records: weakref.WeakValueDictionary[int, Records] = weakref.WeakValueDictionary()
_registrations: Iterator[int] = itertools.count()

#: Whether a garbage collection runs inside the allocation that sets it off, rather than at
#: the interpreter's next checkpoint (Python 3.12+): see ``TracedFreeBlockQueue.__setattr__``.
_COLLECTS_IN_ALLOCATIONS: Final = sys.version_info < (3, 12)


def _history_length(history: int) -> int:
    """The ring's length ``history``, checked: ``ValueError`` unless it is an int >= 1."""
    if type(history) is not int or history < 1:
        raise ValueError(
            f"history={history!r}: expected the number of recent operations to keep, an int >= 1"
        )
    return history


class TracedFreeBlockQueue(CheckedFreeBlockQueue[B]):
    """A :class:`CheckedFreeBlockQueue` whose errors say who did it (the trace level).

    ``history=N`` keeps the last ``N`` operations (:data:`DEFAULT_HISTORY` when
    not given). Every ``QueueError`` it raises has the field ``history`` (a
    :class:`History`), and its traceback shows the history's lines under the
    message (see the module docstring); ``str(error)`` is the message alone on
    Python 3.11+.

    >>> from verified_queue import AlreadyInQueueError, Block
    >>> block = Block()
    >>> queue = TracedFreeBlockQueue([block])
    >>> try:
    ...     queue.append(block)
    ... except AlreadyInQueueError as error:
    ...     for line in error.history.lines:
    ...         print(line)
    this call: append() at <doctest ...>:2 in <module> (thread MainThread), after #1
    freed before by: #1 append_n() at <doctest ...>:1 in <module> (thread MainThread)
    taken since: never, the block is still in this queue
    """

    __slots__ = (
        "_count_written",
        "_held",
        "_numbers",
        "_recent",
        "_records",
    )

    # id(block) -> (holder, linked, unlinked): the holder proves the record is the block's.
    _records: Records
    # ids of the records that hold their block strongly, oldest first (HELD_DEPARTED at most):
    # an OrderedDict, whose oldest entry goes in O(1) (a dict's first key is found by
    # scanning past the entries deleted before it).
    _held: OrderedDict[int, None]
    # The queue's last operations, oldest first.
    _recent: deque[Recorded]
    # The numbers of the queue's operations.
    _numbers: Iterator[int]
    # The last write of num_free_blocks from outside the production queue.
    _count_written: list[Recorded]

    # Check mode's operations, resolved once: a super() call per operation costs a proxy
    # object on Python 3.10 and 3.11 (not on 3.12+: see check mode's _super_*, which go
    # with these). The trace level wraps check mode itself.
    _checked_popleft = CheckedFreeBlockQueue.popleft
    _checked_popleft_n = CheckedFreeBlockQueue.popleft_n
    _checked_remove = CheckedFreeBlockQueue.remove
    _checked_append = CheckedFreeBlockQueue.append
    _checked_append_n = CheckedFreeBlockQueue.append_n
    _checked_prepend_n = CheckedFreeBlockQueue.prepend_n
    _set_attribute = CheckedFreeBlockQueue.__setattr__

    def __init__(
        self,
        blocks: Iterable[B] = (),
        *,
        full_check_every: int | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None:
        """Link ``blocks`` front to back, checked and traced; ``history`` is the ring's length.

        Raises ``ValueError`` unless ``history`` is an int >= 1, and as
        ``CheckedFreeBlockQueue`` does.

        Runtime complexity: O(n)
        """
        # Set before the base __init__, whose append_n is traced.
        self._recent = deque(maxlen=_history_length(history))
        self._records = Records()
        self._held = OrderedDict()
        self._numbers = itertools.count(1)
        self._count_written = []
        caller = find_caller()
        try:
            super().__init__(blocks, full_check_every=full_check_every)
        except QueueError as error:
            self._explain(error, "__init__", caller, ())
            raise
        self._records.members = self._members
        _all_records[next(_registrations)] = self._records

    def __setattr__(self, name: str, value: object) -> None:
        """Set, then note a write of ``num_free_blocks`` from outside the production queue."""
        # The production queue writes the count last, after the links, with nothing between
        # that calls or allocates, so that a collection's finalizer never sees the queue half
        # changed (re-entry, in the fault contract of docs/usage.md). On the pure build this
        # method runs in between (compiled, the queue writes the count as a C field), so it
        # writes first and allocates (the writer's frame object, a note) only after. The
        # write can allocate too: calling check mode's setter packs its arguments in a tuple,
        # a new one whenever CPython's free list of them is empty. Python 3.12+ runs a
        # collection set off there after the call; 3.10 and 3.11 run it inside the
        # allocation, before the write, so there the collector is off for the write.
        if name == "num_free_blocks":
            if _COLLECTS_IN_ALLOCATIONS and _gc_isenabled():
                try:
                    # Inside the try: an interrupt as the call returns must not leave it off.
                    _gc_disable()
                    self._set_attribute(name, value)
                finally:
                    _gc_enable()
            else:
                self._set_attribute(name, value)
            if sys._getframe(1).f_code.co_filename != _PRODUCTION_FILE:
                self._note_count_write("written")
        else:
            self._set_attribute(name, value)

    def __delattr__(self, name: str) -> None:
        """Delete, then note a deletion of ``num_free_blocks`` (a refused one deleted nothing)."""
        super().__delattr__(name)
        if name == "num_free_blocks":
            self._note_count_write("deleted")

    def _note_count_write(self, what: str) -> None:
        """Record the frame that writes the count from outside: the culprit, wherever it is."""
        frame = sys._getframe(2)
        code = frame.f_code
        last = self._recent[-1][0] if self._recent else 0
        # The count's writer is the culprit itself, library or not: the frame is not skipped.
        written = (last, what, code.co_filename, frame.f_lineno, code.co_name, thread_name(), None)
        self._count_written[:] = [written]

    # ------------------------------------------------------------------ records

    def _record(self, name: str, caller: Caller) -> Recorded:
        """Number the operation that just succeeded and put it in the ring."""
        filename, lineno, function, request = caller
        recorded = (
            next(self._numbers),
            name,
            filename,
            lineno,
            function,
            threading.current_thread().name,
            request,
        )
        self._recent.append(recorded)
        return recorded

    def _linked(self, blocks: Iterable[B], recorded: Recorded) -> None:
        """Record that ``recorded`` linked ``blocks``, keeping when each was last unlinked."""
        records = self._records
        held = self._held
        for block in blocks:
            key = id(block)
            prior = records.get(key)
            unlinked = None
            if prior is not None:
                holder = prior[0]
                # A record with no holder was a member's: it cannot be this detached block's.
                if holder is block:
                    unlinked = prior[2]
                    held.pop(key, None)
                elif type(holder) is weakref.ref and holder() is block:
                    unlinked = prior[2]
            records[key] = (None, recorded, unlinked)

    def _unlinked(self, blocks: Iterable[B], recorded: Recorded) -> None:
        """Record that ``recorded`` unlinked ``blocks``, each with a holder proving it its own."""
        records = self._records
        held = self._held
        for block in blocks:
            key = id(block)
            prior = records.get(key)
            # A member's record (no holder) is the block's own; anything else is stale.
            linked = prior[1] if prior is not None and prior[0] is None else None
            holder: Holder
            if type(block).__weakrefoffset__:
                holder = weakref.ref(block, forget_when_dead(records, key))
            else:
                holder = block
                held[key] = None
                if len(held) > HELD_DEPARTED:
                    drop_oldest_held(records, held)
            records[key] = (holder, linked, recorded)

    def history_of(self, block: object) -> BlockHistory | None:
        """The operations that last linked and unlinked ``block`` here, or ``None`` if none is kept.

        Runtime complexity: O(1)
        """
        records = self._records
        records.members = self._members  # made by check mode's __init__, after the records
        return records.history_of(block)

    def recent_operations(self) -> tuple[Operation, ...]:
        """The queue's last operations, oldest first (as many as ``history`` asked for).

        Runtime complexity: O(length of the ring)
        """
        return tuple(Operation._make(recorded) for recorded in self._recent)

    @property
    def operations(self) -> int:
        """How many linking operations this queue has done (the last operation's number).

        Runtime complexity: O(1)
        """
        return self._recent[-1][0] if self._recent else 0

    # ------------------------------------------------------------------ operations

    def popleft(self) -> B:
        """Detach and return the front block, checked; record where it left.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            block = self._checked_popleft()
        except QueueError as error:
            self._explain(error, "popleft", caller, ())
            raise
        self._unlinked((block,), self._record("popleft", caller))
        return block

    def popleft_n(self, n: SupportsIndex) -> list[B]:
        """Detach and return the first ``n`` blocks, checked; record where each left.

        Runtime complexity: O(n), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            popped = self._checked_popleft_n(n)
        except QueueError as error:
            self._explain(error, "popleft_n", caller, ())
            raise
        self._unlinked(popped, self._record("popleft_n", caller))
        return popped

    def remove(self, block: B) -> None:
        """Detach ``block``, checked; record where it left.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            self._checked_remove(block)
        except QueueError as error:
            self._explain(error, "remove", caller, (block,))
            raise
        self._unlinked((block,), self._record("remove", caller))

    def append(self, block: B) -> None:
        """Link a detached ``block`` at the back, checked; record where it was freed.

        Runtime complexity: O(1), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            self._checked_append(block)
        except QueueError as error:
            self._explain(error, "append", caller, (block,), freeing=True)
            raise
        self._linked((block,), self._record("append", caller))

    def append_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the back, checked; record where each was freed.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            # A batch that is not iterable is refused as check mode and the production queue
            # refuse it (WrongTypeError); a list is passed on as it is, as check mode does.
            batch: list[B] = (
                blocks if type(blocks) is list else batch_argument("append_n", blocks)  # type: ignore[assignment]
            )
        except QueueError as error:
            self._explain(error, "append_n", caller, ())
            raise
        try:
            self._checked_append_n(batch)
        except QueueError as error:
            self._explain(error, "append_n", caller, batch, freeing=True)
            raise
        self._linked(batch, self._record("append_n", caller))

    def prepend_n(self, blocks: Iterable[B]) -> None:
        """Link ``blocks`` at the front, checked; record where each was freed.

        Runtime complexity: O(len(blocks)), plus the amortized O(1) full check
        """
        caller = find_caller()
        try:
            # A batch that is not iterable is refused as check mode and the production queue
            # refuse it (WrongTypeError); a list is passed on as it is, as check mode does.
            batch: list[B] = (
                blocks if type(blocks) is list else batch_argument("prepend_n", blocks)  # type: ignore[assignment]
            )
        except QueueError as error:
            self._explain(error, "prepend_n", caller, ())
            raise
        try:
            self._checked_prepend_n(batch)
        except QueueError as error:
            self._explain(error, "prepend_n", caller, batch, freeing=True)
            raise
        self._linked(batch, self._record("prepend_n", caller))

    # Reading operations record nothing (they change nothing) but explain what they raise.

    def __len__(self) -> int:
        """Return the number of free blocks, checked; an error names the count's last writer.

        Runtime complexity: O(1)
        """
        try:
            return super().__len__()
        except QueueError as error:
            self._explain(error, "len", find_caller(), ())
            raise

    def __bool__(self) -> bool:
        """Return whether any block is free, checked, as ``len`` does.

        Runtime complexity: O(1)
        """
        try:
            return super().__bool__()
        except QueueError as error:
            self._explain(error, "bool", find_caller(), ())
            raise

    def __iter__(self) -> Iterator[B]:
        """Run the full check, then iterate, as check mode does; an error carries the history.

        Runtime complexity: O(n)
        """
        caller = find_caller()
        try:
            return self._explaining(super().__iter__(), "iter", caller)
        except QueueError as error:
            self._explain(error, "iter", caller, ())
            raise

    def iter_blocks_after(self, cursor: B | None) -> Iterator[B]:
        """Iterate after ``cursor``, as check mode does; a cursor refused names where it left.

        Runtime complexity: O(1) to start, O(1) per block yielded, plus the
        amortized O(1) full check
        """
        caller = find_caller()
        try:
            walk = super().iter_blocks_after(cursor)
        except QueueError as error:
            self._explain(error, "iter_blocks_after", caller, () if cursor is None else (cursor,))
            raise
        return self._explaining(walk, "iter_blocks_after", caller)

    def _explaining(self, walk: Iterator[B], name: str, caller: Caller) -> Iterator[B]:
        """Yield what ``walk`` yields; an error on the way carries the history of the last block."""
        last: B | None = None
        try:
            for block in walk:
                last = block
                yield block
        except QueueError as error:
            # The block the walk stood on left the queue: the error names where.
            self._explain(error, name, caller, () if last is None else (last,))
            raise

    def get_all_free_blocks(self) -> list[B]:
        """Run the full check, then list the free blocks, as check mode does.

        Runtime complexity: O(n)
        """
        try:
            return super().get_all_free_blocks()
        except QueueError as error:
            self._explain(error, "get_all_free_blocks", find_caller(), ())
            raise

    def full_check(self) -> None:
        """Run check mode's full check; damage it finds carries the history.

        Runtime complexity: O(n)
        """
        try:
            super().full_check()
        except QueueError as error:
            # Called by an operation of check mode, the operation explains it.
            if not is_library(sys._getframe(1)):
                self._explain(error, "full_check", find_caller(), ())
            raise

    # ------------------------------------------------------------------ reports

    def annotate(
        self,
        error: QueueError,
        operation: str,
        blocks: Iterable[object] = (),
        *,
        freeing: bool = False,
    ) -> None:
        """Add this queue's history of ``blocks`` to ``error``, raised by code built on the queue.

        A block pool calls it for the errors it raises itself, naming its own
        ``operation`` and the blocks the error is about (none by default: an
        ``InvariantViolation`` names its own). ``freeing=True`` says the
        operation frees ``blocks``: a block refused is then a double free,
        reported with where it was freed before and taken since (as ``append``
        reports one); otherwise with where it left this queue. The caller
        recorded is the first frame outside the library.

        Runtime complexity: O(1), or O(blocks recorded) for an ``InvariantViolation``
        """
        self._explain(error, operation, find_caller(), blocks, freeing=freeing)

    def _explain(
        self,
        error: QueueError,
        name: str,
        caller: Caller,
        blocks: Iterable[object],
        *,
        freeing: bool = False,
    ) -> None:
        """Add the history that matters to ``error``: lines it shows, and ``error.history``.

        ``freeing`` says the call ``name`` frees ``blocks``. Never raises: on a
        queue damaged beyond what the trace can read, the error keeps its own
        message and says why the history is missing.
        """
        if getattr(error, "history", None) is not None:
            return  # explained already, by the traced call this one ran inside
        try:
            self._add_history(error, name, caller, blocks, freeing)
        except Exception as failure:
            add_lines(error, [f"no history: the trace could not be read ({failure!r})"])

    def _add_history(
        self,
        error: QueueError,
        name: str,
        caller: Caller,
        blocks: Iterable[object],
        freeing: bool,
    ) -> None:
        """The body of :meth:`_explain`, which may meet damage it cannot read."""
        self._records.members = self._members
        filename, lineno, function, request = caller
        call = Operation(None, name, filename, lineno, function, thread_name(), request)
        last = self.operations
        lines = [f"this call: {call}" + (f", after #{last}" if last else "")]
        histories: list[BlockHistory] = []
        recent: tuple[Operation, ...] = ()
        count_written = operation_of(self._count_written[0]) if self._count_written else None
        if isinstance(error, InvariantViolation):
            # The blocks a check named (a pool's clauses do), else those whose links disagree.
            for block in error.blocks[:_DAMAGED_SHOWN] or self._damaged_blocks():
                history = self.history_of(block) or BlockHistory(describe(block), None, None)
                histories.append(history)
                lines.append(
                    f"damaged {history.block}: last linked by {or_none(history.linked)}; "
                    f"last unlinked by {or_none(history.unlinked)}"
                )
            if count_written is not None:
                lines.append(count_write_line(count_written))
            recent = self.recent_operations()
            lines.append(f"last {len(recent)} operations, oldest first:")
            lines.extend(f"  {operation}" for operation in recent)
        elif isinstance(error, (AlreadyInQueueError, NotInQueueError)):
            block = self._refused(list(blocks))
            if block is not None:
                kept = self.history_of(block)
                if kept is not None:
                    histories.append(kept)
                lines.extend(self._block_lines(block, kept, freeing))
        elif isinstance(error, EmptyQueueError) and self._recent:
            lines.append(f"last operation: {Operation._make(self._recent[-1])}")
        if not isinstance(error, EmptyQueueError):
            # An empty queue is no misuse, and its words are vLLM's, which vLLM's callers and
            # tests match exactly: its history goes in the field only (a note would leave
            # str(error) alone, but 3.10 has no notes, and the traceback would differ).
            add_lines(error, lines)
        error.history = History(  # type: ignore[attr-defined]  # the trace level's own field
            call, tuple(histories), count_written, recent, tuple(lines)
        )

    def _refused(self, blocks: list[object]) -> object | None:
        """The block of ``blocks`` the error is about: the one linked, repeated or not held."""
        if len(blocks) == 1:
            return blocks[0]
        seen: set[int] = set()
        for block in blocks:
            if id(block) in seen or getattr(block, "prev_free_block", None) is not None:
                return block
            if getattr(block, "next_free_block", None) is not None:
                return block
            seen.add(id(block))
        return None

    def _block_lines(self, block: object, history: BlockHistory | None, freeing: bool) -> list[str]:
        """The history lines of a double free (``freeing``) or of a block not in this queue."""
        lines: list[str] = []
        if freeing:
            if history is None or history.linked is None:
                lines.append("freed before by: not recorded by this queue")
            else:
                lines.append(f"freed before by: {history.linked}")
            taken = history.unlinked if history is not None else None
            freed = history.linked if history is not None else None
            if self._is_member(block):
                lines.append("taken since: never, the block is still in this queue")
            elif taken is not None and (freed is None or taken.number > freed.number):  # type: ignore[operator]  # recorded ones are numbered
                lines.append(f"taken since by: {taken}")
            else:
                lines.append("taken since: not recorded")
            if taken is not None and freed is not None and taken.number < freed.number:  # type: ignore[operator]  # recorded ones are numbered
                lines.append(f"taken before that by: {taken}")
        elif history is not None and history.unlinked is not None:
            lines.append(f"left this queue by: {history.unlinked}")
            if history.linked is not None:
                lines.append(f"freed into it before by: {history.linked}")
        elif history is None:
            lines.append("this queue never recorded the block (or its record was dropped)")
        for records in list(_all_records.values()):
            if records is not self._records and id(block) in records.members:
                elsewhere = records.history_of(block)
                if elsewhere is not None and elsewhere.linked is not None:
                    lines.append(f"linked in another traced queue by: {elsewhere.linked}")
        return lines

    def _damaged_blocks(self) -> list[object]:
        """Blocks whose links disagree with what the trace knows of them, a few at most.

        A member must sit between two nodes that link back to it; a block that
        left must be detached. Runs only when an error is explained: O(blocks
        recorded).
        """
        found: list[object] = []
        # Damage may have deleted a sentinel: a missing one matches nothing.
        head = getattr(self, "fake_free_list_head", _MISSING)
        tail = getattr(self, "fake_free_list_tail", _MISSING)
        for member in list(self._members.values()):
            before = getattr(member, "prev_free_block", None)
            after = getattr(member, "next_free_block", None)
            if (
                not (before is head or self._is_member(before))
                or not (after is tail or self._is_member(after))
                or getattr(before, "next_free_block", None) is not member
                or getattr(after, "prev_free_block", None) is not member
            ):
                found.append(member)
                if len(found) == _DAMAGED_SHOWN:
                    return found
        for holder, _linked, _unlinked in list(self._records.values()):
            block = holder() if type(holder) is weakref.ref else holder
            if block is None or self._is_member(block):
                continue
            # Linked again into this queue's chain by outside code (another queue may hold it).
            before = getattr(block, "prev_free_block", None)
            after = getattr(block, "next_free_block", None)
            if before is head or after is tail or self._is_member(before) or self._is_member(after):
                found.append(block)
                if len(found) == _DAMAGED_SHOWN:
                    break
        return found
