"""The trace level's operations at their edges: the history of a call that raises from odd places.

``test_trace.py`` pins what each error of a traced queue says in the common cases. These
pin the history of the calls that raise where those tests never look: a user's subclass
that refuses (or writes the count) while the queue is being built, before any operation
is numbered; a queue error raised by the caller's own code that a call runs (a batch's
iterator, a count's ``__index__``), or into a call from outside (a signal handler's, at
check mode's first checkpoint); a walk after a cursor that meets a block that left; a
pool's clause naming a block this queue never recorded; a batch given as an iterator; a
batch given to ``annotate`` that holds objects which are not blocks; and a full check
that a subclass wraps. Each asserts what every ``QueueError`` of the trace level carries
(``error.history``, and its lines under the message), never a "no history" line.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from specs.interrupts import Faults, at_checkpoints
from tests.checks.support import error_of
from tests.checks.test_trace import here, history_of, shown
from tests.helpers import NumberedBlock, numbered
from tests.vllm.test_checked_adapter_edges import Pool, pool_queue
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    QueueError,
)
from verified_queue._trace_records import count_write_line, short_path
from verified_queue.invariants import describe
from verified_queue.traced import BlockHistory, History, Operation, TracedFreeBlockQueue
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

THIS_FILE = os.path.abspath(__file__)

Queue = TracedFreeBlockQueue[Block]


def thread() -> str:
    """The name of the thread the test runs in, as a record names it."""
    return threading.current_thread().name


def line_of(function: Callable[..., Any], text: str) -> int:
    """The line of ``function``'s source holding ``text`` (once): where it calls the queue."""
    lines, start = inspect.getsourcelines(function)
    (offset,) = [index for index, line in enumerate(lines) if text in line]
    return start + offset


def assert_only_this_call(error: QueueError, call: Operation, after: int) -> None:
    """``error`` carries the history of ``call`` alone: no block, no count, no ring, one line."""
    line = f"this call: {call}" + (f", after #{after}" if after else "")
    assert history_of(error) == History(call, (), None, (), (line,))
    assert "no history" not in shown(error)
    assert shown(error).endswith(f"\n  {line}")


# ---------------------------------------------------------- a subclass, while it builds


class RefusesTheNullBlock(TracedFreeBlockQueue[NumberedBlock]):
    """A user's subclass with a check of its own: block 0, a pool's null block, is never free."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[NumberedBlock]) -> None:
        """Refuse a batch holding block 0, before the trace level sees it; else link it."""
        batch = list(blocks)
        for block in batch:
            if block.number == 0:
                raise AlreadyInQueueError(f"append_n({block!r}): the null block is never free")
        super().append_n(batch)


def test_a_subclass_refusing_while_the_queue_is_built_is_explained_as_the_construction() -> None:
    """A refusal of the subclass's own, raised as the queue is built, names the construction.

    No traced operation saw it: the constructor explains it, as ``__init__`` called at
    the line that built the queue, after no numbered operation; its message is unchanged.
    """
    line = here() + 2
    with pytest.raises(AlreadyInQueueError) as caught:
        RefusesTheNullBlock(numbered(3))
    function = "test_a_subclass_refusing_while_the_queue_is_built_is_explained_as_the_construction"
    call = Operation(None, "__init__", THIS_FILE, line, function, thread())
    assert_only_this_call(caught.value, call, after=0)
    assert str(caught.value).startswith("append_n(NumberedBlock(0)): the null block is never free")
    built = RefusesTheNullBlock(numbered(3)[1:])  # without block 0 it builds, traced
    assert built.operations == 1


class CountsBeforeLinking(TracedFreeBlockQueue[Block]):
    """A user's subclass with a bug: its ``append_n`` writes the count itself, then links."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        """Write ``num_free_blocks`` from outside the queue, then link ``blocks``."""
        batch = list(blocks)
        self.num_free_blocks = len(batch)  # the bug: the queue keeps its own count
        super().append_n(batch)


def test_a_count_written_before_any_operation_is_reported_after_none() -> None:
    """A count written from outside while the queue is built: operation 0, no "after #" in its line.

    The write comes before the first operation is numbered, so the report names the
    writer's line and no operation it followed, and lists no recent operation.
    """
    with pytest.raises(InvariantViolation) as caught:
        CountsBeforeLinking([Block(), Block()])
    assert caught.value.clause == "I2"
    history = history_of(caught.value)
    written_at = line_of(CountsBeforeLinking.append_n, "self.num_free_blocks = ")
    assert history.count_written == Operation(
        0, "written", THIS_FILE, written_at, "append_n", thread()
    )
    line = (
        f"num_free_blocks written from outside at {short_path(THIS_FILE)}:{written_at} "
        f"in append_n (thread {thread()})"
    )
    assert count_write_line(history.count_written) == line
    assert count_write_line(history.count_written) in history.lines
    assert history.recent == ()
    assert "last 0 operations, oldest first:" in history.lines


# ------------------------------------------------- queue errors from the caller's code


def remove_a_stranger(source: CheckedFreeBlockQueue[Block]) -> None:
    """Misuse another, untraced queue: ``remove`` a block it never held (NotInQueueError)."""
    source.remove(Block())


def free_a_member_again(source: CheckedFreeBlockQueue[Block]) -> None:
    """Misuse another, untraced queue: ``append`` a block it holds (AlreadyInQueueError)."""
    source.append(source.get_all_free_blocks()[0])


MISUSES: dict[str, tuple[Callable[[CheckedFreeBlockQueue[Block]], None], type[QueueError]]] = {
    "remove a stranger": (remove_a_stranger, NotInQueueError),
    "free a member again": (free_a_member_again, AlreadyInQueueError),
}


class CallersCode:
    """The caller's code a traced call runs: a batch's iterator, or a count's ``__index__``.

    Either misuses ``source``, a check-mode queue that is not traced, whose error (with
    no history of its own) then leaves the traced call.
    """

    def __init__(self, misuse: Callable[[CheckedFreeBlockQueue[Block]], None]) -> None:
        self.misuse = misuse
        self.source = CheckedFreeBlockQueue([Block()])

    def __iter__(self) -> Iterator[Block]:
        """Yield a block, then misuse the other queue."""
        yield Block()
        self.misuse(self.source)
        yield Block()

    def __index__(self) -> int:
        """Misuse the other queue, then count one block."""
        self.misuse(self.source)
        return 1


#: The traced calls that run the caller's code, called as functions, from the test's own line.
RUNNING_CALLERS_CODE: dict[str, Callable[[Queue, CallersCode], object]] = {
    "append_n": TracedFreeBlockQueue.append_n,
    "prepend_n": TracedFreeBlockQueue.prepend_n,
    "popleft_n": TracedFreeBlockQueue.popleft_n,
}


@pytest.mark.parametrize("misuse", list(MISUSES))
@pytest.mark.parametrize("operation", list(RUNNING_CALLERS_CODE))
def test_a_queue_error_of_the_callers_own_code_carries_the_history_of_the_call(
    operation: str, misuse: str
) -> None:
    """A queue error the caller's iterator or ``__index__`` raises leaves with this call's history.

    The call changed nothing and names no block; its one line is the call, after the
    constructor's operation. The error is the one the other queue raised.
    """
    misusing, expected = MISUSES[misuse]
    blocks = [Block(), Block()]
    queue = TracedFreeBlockQueue(blocks)
    run = RUNNING_CALLERS_CODE[operation]
    line = here() + 2
    with pytest.raises(expected) as caught:
        run(queue, CallersCode(misusing))
    assert str(caught.value).startswith("remove(" if expected is NotInQueueError else "append(")
    function = "test_a_queue_error_of_the_callers_own_code_carries_the_history_of_the_call"
    call = Operation(None, operation, THIS_FILE, line, function, thread())
    assert_only_this_call(caught.value, call, after=1)
    assert queue.get_all_free_blocks() == blocks
    assert queue.operations == 1


@dataclass
class RaisesInto(Faults):
    """A signal handler's exception at the chosen checkpoints: ``error``, a queue error."""

    error: QueueError = field(default_factory=lambda: QueueError("unset"))

    def event(self) -> None:
        """Count one checkpoint; raise ``error`` at the chosen ones."""
        self.events += 1
        if self.events in self.at:
            raise self.error


#: Each traced call (called as a function, from the test's own line), by the name its history
#: gives it, and the check-mode method it runs first, where the exception arrives (its code
#: read when the test runs: a mutation run swaps a mutant's code in after import).
RAISED_INTO: dict[str, tuple[Callable[[Queue], object], Callable[..., object]]] = {
    "popleft": (TracedFreeBlockQueue.popleft, CheckedFreeBlockQueue.popleft),
    "len": (TracedFreeBlockQueue.__len__, CheckedFreeBlockQueue.__len__),
    "bool": (TracedFreeBlockQueue.__bool__, CheckedFreeBlockQueue.__bool__),
    "iter": (TracedFreeBlockQueue.__iter__, CheckedFreeBlockQueue.__iter__),
    "get_all_free_blocks": (
        TracedFreeBlockQueue.get_all_free_blocks,
        CheckedFreeBlockQueue.get_all_free_blocks,
    ),
    "full_check": (TracedFreeBlockQueue.full_check, CheckedFreeBlockQueue.full_check),
}


@pytest.mark.parametrize("operation", list(RAISED_INTO))
def test_a_queue_error_raised_into_a_call_from_outside_carries_the_history_of_the_call(
    operation: str,
) -> None:
    """A signal handler's queue error, at check mode's first checkpoint: this call's history.

    The handler misused another, untraced queue; its error arrives in the traced call
    before check mode changed anything, and leaves with the call's history, no block named.
    """
    blocks = [Block(), Block()]
    queue = TracedFreeBlockQueue(blocks)
    arrived = error_of(lambda: remove_a_stranger(CheckedFreeBlockQueue([Block()])))
    assert isinstance(arrived, NotInQueueError)
    assert getattr(arrived, "history", None) is None
    run, first = RAISED_INTO[operation]
    faults = RaisesInto(at=frozenset({1}), error=arrived)
    line = here() + 2
    with pytest.raises(NotInQueueError) as caught, at_checkpoints(faults, {first.__code__}):
        run(queue)
    assert caught.value is arrived
    function = "test_a_queue_error_raised_into_a_call_from_outside_carries_the_history_of_the_call"
    call = Operation(None, operation, THIS_FILE, line, function, thread())
    assert_only_this_call(arrived, call, after=1)
    assert queue.get_all_free_blocks() == blocks
    assert queue.operations == 1


# ------------------------------------------------------------------ walks and pools


@pytest.mark.parametrize("cursor", [None, 0], ids=["from the front", "after a block"])
def test_a_walk_after_a_cursor_that_meets_a_block_that_left_names_the_walk_and_the_remove(
    cursor: int | None,
) -> None:
    """``iter_blocks_after``: the block the walk stands on is removed; the next step names both.

    The call is the walk's start (``iter_blocks_after`` at its line); the block's record
    says which ``remove`` took it, and where it was freed before.
    """
    blocks = [Block() for _ in range(4)]
    built_at = here() + 1
    queue = TracedFreeBlockQueue(blocks)
    started_at = here() + 1
    walk = queue.iter_blocks_after(None if cursor is None else blocks[cursor])
    standing = next(walk)
    assert standing is blocks[0 if cursor is None else cursor + 1]
    removed_at = here() + 1
    queue.remove(standing)
    with pytest.raises(NotInQueueError) as caught:
        next(walk)
    function = (
        "test_a_walk_after_a_cursor_that_meets_a_block_that_left_names_the_walk_and_the_remove"
    )
    call = Operation(None, "iter_blocks_after", THIS_FILE, started_at, function, thread())
    linked = Operation(1, "append_n", THIS_FILE, built_at, function, thread())
    unlinked = Operation(2, "remove", THIS_FILE, removed_at, function, thread())
    assert history_of(caught.value) == History(
        call,
        (BlockHistory(describe(standing), linked, unlinked),),
        None,
        (),
        (
            f"this call: {call}, after #2",
            f"left this queue by: {unlinked}",
            f"freed into it before by: {linked}",
        ),
    )


def test_a_pool_clause_naming_a_block_this_queue_never_recorded_reports_no_record() -> None:
    """A block of another pool joining: P5 names it, and its history says no record of either kind.

    The block is named as the check names it (its ``describe``), with neither link nor
    unlink recorded by this queue.
    """
    _, queue = pool_queue(VllmTracedFreeBlockQueue)
    other = Pool(3)
    stranger = other.blocks[1]
    with pytest.raises(InvariantViolation) as caught:
        queue.append(stranger)
    assert (caught.value.clause, caught.value.blocks) == ("P5", (stranger,))
    history = history_of(caught.value)
    assert history.blocks == (BlockHistory(describe(stranger), None, None),)
    assert (
        f"damaged {describe(stranger)}: last linked by no record; last unlinked by no record"
        in history.lines
    )
    assert "no history" not in shown(caught.value)


# ----------------------------------------------------------------- batches and annotate


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_batch_given_as_an_iterator_is_recorded_block_by_block(operation: str) -> None:
    """A generator batch: each block's record names the call; freed again, that free is named."""
    queue = TracedFreeBlockQueue([Block()])
    batch = [Block(), Block()]
    link = getattr(queue, operation)
    freed_at = here() + 1
    link(block for block in batch)
    function = "test_a_batch_given_as_an_iterator_is_recorded_block_by_block"
    freed = Operation(2, operation, THIS_FILE, freed_at, function, thread())
    for block in batch:
        assert queue.history_of(block) == BlockHistory(describe(block), freed, None)
    with pytest.raises(AlreadyInQueueError) as caught:
        link(iter([batch[1], Block()]))
    history = history_of(caught.value)
    assert history.blocks == (BlockHistory(describe(batch[1]), freed, None),)
    assert history.lines[1:] == (
        f"freed before by: {freed}",
        "taken since: never, the block is still in this queue",
    )


def test_annotate_names_the_refused_block_of_a_batch_past_objects_that_are_not_blocks() -> None:
    """``annotate`` with a batch that holds ``None`` before the linked block: that block is named.

    Code built on the queue may pass on a batch as it was given, objects that are not
    blocks included (``None`` for an empty slot, say): the block the error is about is
    still found past them, and its free named.
    """
    blocks = [Block(), Block()]
    freed_at = here() + 1
    queue = TracedFreeBlockQueue(blocks)
    error = AlreadyInQueueError("free_blocks(...): a double free")
    queue.annotate(error, "free_blocks", [None, Block(), blocks[1]], freeing=True)
    function = "test_annotate_names_the_refused_block_of_a_batch_past_objects_that_are_not_blocks"
    freed = Operation(1, "append_n", THIS_FILE, freed_at, function, thread())
    history = history_of(error)
    assert history.blocks == (BlockHistory(describe(blocks[1]), freed, None),)
    assert history.lines[1:] == (
        f"freed before by: {freed}",
        "taken since: never, the block is still in this queue",
    )


# ------------------------------------------------------------- a wrapped full check


class CountsItsFullChecks(TracedFreeBlockQueue[Block]):
    """A user's subclass counting its full checks, as the demo's traced queue does: a wrapper."""

    __slots__ = ("full_checks",)

    full_checks: int

    def __init__(self, blocks: Iterable[Block], *, full_check_every: int | None = None) -> None:
        """Build the traced queue with the counter at zero."""
        self.full_checks = 0
        super().__init__(blocks, full_check_every=full_check_every)

    def full_check(self) -> None:
        """Count the full check, then run the trace level's."""
        self.full_checks += 1
        super().full_check()


def test_a_full_check_a_subclass_wraps_is_explained_at_the_wrapper() -> None:
    """Damage a wrapped full check finds names the wrapper's call, even when check mode ran it.

    The wrapper is outside the library, so it is the caller the trace records (as the
    demo's traced queue says of wrappers): the full check it called is the call that
    raised, whether the test called it or ``popleft``'s periodic check did.
    """
    blocks = [Block() for _ in range(3)]
    queue = CountsItsFullChecks(blocks, full_check_every=1)
    blocks[2].prev_free_block = blocks[0]  # a link written by hand
    wrapper_line = line_of(CountsItsFullChecks.full_check, "super().full_check()")
    call = Operation(None, "full_check", THIS_FILE, wrapper_line, "full_check", thread())
    for operation in (queue.popleft, queue.full_check):
        checks = queue.full_checks
        with pytest.raises(InvariantViolation) as caught:
            operation()
        assert queue.full_checks == checks + 1
        history = history_of(caught.value)
        assert history.call == call
        assert history.lines[0] == f"this call: {call}, after #1"
