"""The trace level: every error names who linked and unlinked its blocks, file, line and thread.

Each history claim is a ``claim_*`` function that raises ``AssertionError`` when a
record is wrong or missing. The claims run against ``TracedFreeBlockQueue`` (they
pass) and against recorders with a planted bug (each bug fails at least one claim).
"""

from __future__ import annotations

import contextlib
import doctest
import gc
import os
import pickle
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import pytest

import verified_queue
from specs.interrupts import Faults, Interrupted, at_checkpoints
from tests.checks.test_check_switch import run_fresh
from tests.checks.test_checked_damage import DAMAGE, _every_operation
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    EmptyQueueError,
    InvariantViolation,
    NotInQueueError,
    QueueError,
    WrongTypeError,
)
from verified_queue import traced as traced_module
from verified_queue._trace_records import (
    LIBRARY_FLAG,
    Caller,
    Recorded,
    is_library,
    short_path,
    treat_as_library,
)
from verified_queue.kvcache.errors import DoubleFreeError
from verified_queue.kvcache.pool import BlockPool
from verified_queue.queue import EMPTY_QUEUE_MESSAGE
from verified_queue.traced import (
    DEFAULT_HISTORY,
    History,
    Operation,
    TracedFreeBlockQueue,
)

THIS_FILE = os.path.abspath(__file__)

Queue = TracedFreeBlockQueue[Block]
MakeQueue = Callable[..., TracedFreeBlockQueue[Any]]


class WeakBlock(Block):
    """A block type with an instance dict, so weak references to it work (as vLLM's block)."""


def here() -> int:
    """The caller's line number: ``line = here() + 1`` names the line after it."""
    return sys._getframe(1).f_lineno


def history_of(error: BaseException) -> History:
    """The ``history`` field of a trace-level error, which every one of them carries."""
    history = getattr(error, "history", None)
    assert isinstance(history, History), f"no history on {error!r}"
    return history


def shown(error: BaseException) -> str:
    """What a traceback shows of ``error`` after its type: its message, then its notes.

    The trace level's lines are notes on Python 3.11+ and part of the message on 3.10;
    either way they follow the message, one to a line.
    """
    return "\n".join([str(error), *getattr(error, "__notes__", ())])


def assert_names(operation: Operation | None, name: str, line: int, function: str) -> None:
    """``operation`` is ``name`` called from this file's ``line`` in ``function``."""
    assert operation is not None, f"no record, expected {name}() at line {line}"
    assert operation.name == name, operation
    assert (operation.filename, operation.lineno) == (THIS_FILE, line), operation
    assert operation.function == function, operation


# ----------------------------------------------------------------------------- claims


def claim_double_free_names_the_first_free(make: MakeQueue) -> None:
    """A second free names the line of the first free and says the block was not taken since."""
    blocks = [Block() for _ in range(3)]
    queue = make(blocks[:2])
    freed_at = here() + 1
    queue.append(blocks[2])
    queue.popleft()
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(blocks[2])
    (record,) = history_of(caught.value).blocks
    assert_names(record.linked, "append", freed_at, "claim_double_free_names_the_first_free")
    assert record.linked is not None
    assert record.linked.number == 2, record.linked  # after the constructor's append_n (#1)
    message = shown(caught.value)
    freed = message.split("freed before by: ")[1].splitlines()[0]
    assert freed.startswith("#2 append() at ")
    assert f":{freed_at} in claim_double_free_names_the_first_free" in freed
    assert "taken since: never, the block is still in this queue" in message


def claim_double_free_names_where_it_was_taken_since(make: MakeQueue) -> None:
    """A block freed, taken and linked elsewhere, then freed again: all three lines named."""
    block = Block()
    queue, other = make(), make()
    freed_at = here() + 1
    queue.append(block)
    taken_at = here() + 1
    queue.popleft()
    relinked_at = here() + 1
    other.append(block)
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    function = "claim_double_free_names_where_it_was_taken_since"
    (record,) = history_of(caught.value).blocks
    assert_names(record.linked, "append", freed_at, function)
    assert_names(record.unlinked, "popleft", taken_at, function)
    message = shown(caught.value)
    assert f":{taken_at} in {function}" in message.split("taken since by: ")[1].splitlines()[0]
    elsewhere = message.split("linked in another traced queue by: ")[1].splitlines()[0]
    assert f":{relinked_at} in {function}" in elsewhere


def claim_remove_of_a_detached_block_names_where_it_left(make: MakeQueue) -> None:
    """``remove`` of a block taken earlier names the operation and line that took it."""
    blocks = [Block() for _ in range(4)]
    queue = make(blocks)
    left_at = here() + 1
    queue.popleft_n(2)
    queue.remove(blocks[3])
    for block, line, name in (
        (blocks[1], left_at, "popleft_n"),
        (blocks[3], left_at + 1, "remove"),
    ):
        with pytest.raises(NotInQueueError) as caught:
            queue.remove(block)
        (record,) = history_of(caught.value).blocks
        assert_names(
            record.unlinked, name, line, "claim_remove_of_a_detached_block_names_where_it_left"
        )
        assert f"left this queue by: #{record.unlinked.number} {name}()" in shown(caught.value)  # type: ignore[union-attr]  # asserted above


def claim_a_foreign_block_names_where_the_other_queue_linked_it(make: MakeQueue) -> None:
    """A block of another traced queue: the call's line and where the other queue linked it."""
    block = Block()
    queue = make([Block()])
    linked_at = here() + 1
    other = make([Block(), block])
    removed_at = here() + 2
    with pytest.raises(NotInQueueError) as caught:
        queue.remove(block)
    history = history_of(caught.value)
    function = "claim_a_foreign_block_names_where_the_other_queue_linked_it"
    assert (history.call.lineno, history.call.function) == (removed_at, function)
    assert history.blocks == ()  # this queue never held it
    elsewhere = shown(caught.value).split("linked in another traced queue by: ")[1].splitlines()[0]
    assert "#1 append_n() at " in elsewhere
    assert f":{linked_at} in {function}" in elsewhere
    assert len(other) == 2


def claim_a_count_written_from_outside_names_the_writer(make: MakeQueue) -> None:
    """The next operation after a write of ``num_free_blocks`` names the writer's line."""
    queue = make([Block(), Block()])
    queue.popleft()
    written_at = here() + 1
    queue.num_free_blocks += 1
    for operation in (len, lambda queue: queue.popleft()):
        with pytest.raises(InvariantViolation) as caught:
            operation(queue)
        history = history_of(caught.value)
        assert history.count_written is not None
        assert (history.count_written.filename, history.count_written.lineno) == (
            THIS_FILE,
            written_at,
        )
        assert history.count_written.number == 2  # written after operation #2
        assert "num_free_blocks written from outside at " in shown(caught.value)
        assert f":{written_at} in claim_a_count_written_from_outside_names_the_writer" in shown(
            caught.value
        )


def claim_the_queues_own_count_writes_are_not_from_outside(make: MakeQueue) -> None:
    """The queue's own operations write its count: an error after them names no outside writer."""
    blocks = [Block() for _ in range(3)]
    queue = make(blocks[:2])
    queue.popleft()
    queue.append(blocks[2])
    queue.popleft_n(2)
    queue.prepend_n(blocks[:2])
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(blocks[0])
    assert history_of(caught.value).count_written is None
    assert "from outside" not in shown(caught.value)


def claim_damage_lists_the_last_operations_and_the_damaged_blocks(make: MakeQueue) -> None:
    """Damage found by a check: the last N operations, oldest first, and the blocks' records."""
    blocks = [Block() for _ in range(5)]
    built_at = here() + 1
    queue = make(blocks, history=3)
    first = here() + 1
    queue.popleft()
    queue.append(blocks[0])
    queue.remove(blocks[2])
    queue.append(blocks[2])  # the queue is 1, 3, 4, 0, 2
    blocks[4].prev_free_block = blocks[1]  # a link written by hand: 3 <- 4 becomes 1 <- 4
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    history = history_of(caught.value)
    function = "claim_damage_lists_the_last_operations_and_the_damaged_blocks"
    assert [(op.number, op.name, op.lineno) for op in history.recent] == [
        (3, "append", first + 1),
        (4, "remove", first + 2),
        (5, "append", first + 3),
    ]
    assert all(op.function == function for op in history.recent)
    damaged = {record.block: record for record in history.blocks}
    assert set(damaged) == {repr(blocks[3]), repr(blocks[4])}
    record = damaged[repr(blocks[4])]
    assert_names(record.linked, "append_n", built_at, function)
    assert record.unlinked is None
    record = damaged[repr(blocks[3])]
    assert record.linked is not None
    assert record.linked.number == 1
    message = shown(caught.value)
    assert "last 3 operations, oldest first:" in message
    assert f"damaged {blocks[4]!r}: last linked by #1 append_n()" in message


def claim_operations_and_threads_are_recorded(make: MakeQueue) -> None:
    """Each thread's operations carry its name; numbers count the queue's operations."""
    queue = make([Block() for _ in range(40)], history=64)
    lock = threading.Lock()

    def churn() -> None:
        for _ in range(10):
            with lock:
                queue.append(queue.popleft())

    workers = [threading.Thread(target=churn, name=f"worker-{index}") for index in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    recent = queue.recent_operations()
    assert [op.number for op in recent] == list(range(1, 42))
    assert queue.operations == 41
    for name in ("worker-0", "worker-1"):
        mine = [op for op in recent[1:] if op.thread == name]
        assert len(mine) == 20, recent
        assert {op.function for op in mine} == {"churn"}
    # The double free of a thread names the other thread as the first freer.
    block = Block()
    freer = threading.Thread(target=queue.append, args=(block,), name="first-freer")
    freer.start()
    freer.join()
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    (record,) = history_of(caught.value).blocks
    assert record.linked is not None
    assert record.linked.thread == "first-freer"
    assert history_of(caught.value).call.thread == threading.current_thread().name


def claim_the_ring_keeps_the_last_n(make: MakeQueue) -> None:
    """``history=N`` keeps exactly the last N operations; the default keeps DEFAULT_HISTORY."""
    queue = make([Block()], history=4)
    for _ in range(10):
        queue.append(queue.popleft())
    assert [op.number for op in queue.recent_operations()] == [18, 19, 20, 21]
    default = make([Block()])
    for _ in range(40):
        default.append(default.popleft())
    assert len(default.recent_operations()) == DEFAULT_HISTORY


def claim_a_pool_call_is_recorded_at_its_caller(make: MakeQueue) -> None:
    """Through a block pool, the record names the pool's caller, not the pool's own code."""
    pool = BlockPool(4, queue_factory=make)
    blocks = pool.get_new_blocks(2)
    freed_at = here() + 1
    pool.free_blocks(blocks)
    with pytest.raises(DoubleFreeError) as caught:
        pool.free_blocks(blocks[:1])
    (record,) = history_of(caught.value).blocks
    assert_names(
        record.linked, "prepend_n", freed_at, "claim_a_pool_call_is_recorded_at_its_caller"
    )
    assert "freed before by: " in shown(caught.value)


CLAIMS = [
    claim_double_free_names_the_first_free,
    claim_double_free_names_where_it_was_taken_since,
    claim_remove_of_a_detached_block_names_where_it_left,
    claim_a_foreign_block_names_where_the_other_queue_linked_it,
    claim_a_count_written_from_outside_names_the_writer,
    claim_the_queues_own_count_writes_are_not_from_outside,
    claim_damage_lists_the_last_operations_and_the_damaged_blocks,
    claim_operations_and_threads_are_recorded,
    claim_the_ring_keeps_the_last_n,
    claim_a_pool_call_is_recorded_at_its_caller,
]


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda claim: claim.__name__)
def test_the_trace_level_keeps_its_claim(claim: Callable[[MakeQueue], None]) -> None:
    """Each history claim holds for TracedFreeBlockQueue."""
    claim(TracedFreeBlockQueue)


class UsersTracedQueue(TracedFreeBlockQueue[Block]):
    """A user's subclass of the trace level, defined outside the library: its caller's frames."""

    __slots__ = ()


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda claim: claim.__name__)
def test_the_claim_holds_through_a_subclass_of_the_trace_level(
    claim: Callable[[MakeQueue], None],
) -> None:
    """A subclass of TracedFreeBlockQueue, in a module outside the library, keeps every claim."""
    claim(UsersTracedQueue)


# ----------------------------------------------------------------------- planted bugs


class RecordsTheWrongLine(TracedFreeBlockQueue[Block]):
    """Planted: every record names the line after the caller's."""

    __slots__ = ()

    def _record(self, name: str, caller: Caller) -> Recorded:
        filename, line, function, request = caller
        return super()._record(name, (filename, line + 1, function, request))


class ForgetsFrees(TracedFreeBlockQueue[Block]):
    """Planted: blocks linked by append are not recorded."""

    __slots__ = ()

    def _linked(self, blocks: Iterable[Block], recorded: Recorded) -> None:
        if recorded[1] != "append":
            super()._linked(blocks, recorded)


class ForgetsTakes(TracedFreeBlockQueue[Block]):
    """Planted: blocks unlinked are not recorded."""

    __slots__ = ()

    def _unlinked(self, blocks: Iterable[Block], recorded: Recorded) -> None:
        """Record nothing."""


class ForgetsTheLinkOnTheWayOut(TracedFreeBlockQueue[Block]):
    """Planted: a block that leaves loses the record of where it was freed."""

    __slots__ = ()

    def _unlinked(self, blocks: Iterable[Block], recorded: Recorded) -> None:
        blocks = list(blocks)
        for block in blocks:
            self._records.pop(id(block), None)
        super()._unlinked(blocks, recorded)


class RecordsTheWrongThread(TracedFreeBlockQueue[Block]):
    """Planted: every operation is put down to the main thread."""

    __slots__ = ()

    def _record(self, name: str, caller: Caller) -> Recorded:
        recorded = super()._record(name, caller)
        fixed = (*recorded[:5], "MainThread", recorded[6])
        self._recent[-1] = fixed
        return fixed


class MissesCountWrites(TracedFreeBlockQueue[Block]):
    """Planted: writes of num_free_blocks from outside are not noted."""

    __slots__ = ()

    def _note_count_write(self, what: str) -> None:
        """Note nothing."""


class KeepsEveryOperation(TracedFreeBlockQueue[Block]):
    """Planted: the ring is not bounded."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = (), *, history: int = DEFAULT_HISTORY) -> None:
        super().__init__(blocks, history=history)
        self._recent = deque(self._recent)


class CountsOnlyBatches(TracedFreeBlockQueue[Block]):
    """Planted: the ring records only batch operations."""

    __slots__ = ()

    def _record(self, name: str, caller: Caller) -> Recorded:
        recorded = super()._record(name, caller)
        if not name.endswith("_n"):
            self._recent.pop()
        return recorded


PLANTED = [
    RecordsTheWrongLine,
    ForgetsFrees,
    ForgetsTakes,
    ForgetsTheLinkOnTheWayOut,
    RecordsTheWrongThread,
    MissesCountWrites,
    KeepsEveryOperation,
    CountsOnlyBatches,
]


def claims_failed_by(queue_class: type[Queue]) -> list[str]:
    """The names of the claims that fail on ``queue_class``."""
    failed = []
    for claim in CLAIMS:
        try:
            claim(queue_class)
        except Exception:
            failed.append(claim.__name__)
    return failed


@pytest.mark.parametrize("queue_class", PLANTED, ids=lambda cls: cls.__name__)
def test_each_planted_recorder_bug_fails_a_claim(queue_class: type[Queue]) -> None:
    """A recorder with a planted bug fails at least one claim: the claims can fail."""
    assert claims_failed_by(queue_class), f"no claim catches {queue_class.__name__}"


def test_a_caller_walk_that_stops_in_the_library_fails_the_pool_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: a caller walk that takes the first frame (the pool's) instead of the caller's."""

    def first_frame() -> Caller:
        frame = sys._getframe(2)
        return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None

    monkeypatch.setattr(traced_module, "find_caller", first_frame)
    with pytest.raises(AssertionError):
        claim_a_pool_call_is_recorded_at_its_caller(TracedFreeBlockQueue)


def test_every_error_of_the_trace_level_carries_the_history() -> None:
    """Misuse that names no block names this call; an empty queue its last one, in the field.

    The message of an empty queue stays vLLM's own words, which its callers match.
    """
    queue = TracedFreeBlockQueue([Block()])
    emptied_at = here() + 1
    queue.popleft()
    with pytest.raises(EmptyQueueError) as caught:
        queue.popleft()
    assert str(caught.value) == EMPTY_QUEUE_MESSAGE
    lines = history_of(caught.value).lines
    assert lines[-1].startswith("last operation: #2 popleft() at ")
    assert f":{emptied_at} in test_every_error" in lines[-1]
    with pytest.raises(WrongTypeError) as wrong:
        queue.popleft_n("2")  # type: ignore[arg-type]  # refused
    assert history_of(wrong.value).call.name == "popleft_n"


@pytest.mark.parametrize("operation", ["append_n", "prepend_n", "__init__"])
def test_a_batch_that_is_not_iterable_is_refused_as_check_mode_refuses_it(operation: str) -> None:
    """``append_n(3.5)``: check mode's WrongTypeError and words, and the history; no change."""
    blocks = [Block(), Block()]
    queue = TracedFreeBlockQueue(blocks)
    checked = CheckedFreeBlockQueue[Block]()
    refusals: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "append_n": (lambda: queue.append_n(3.5), lambda: checked.append_n(3.5)),  # type: ignore[arg-type]  # refused
        "prepend_n": (lambda: queue.prepend_n(3.5), lambda: checked.prepend_n(3.5)),  # type: ignore[arg-type]  # refused
        "__init__": (lambda: TracedFreeBlockQueue(3.5), lambda: CheckedFreeBlockQueue(3.5)),  # type: ignore[arg-type]  # refused
    }
    traced_call, checked_call = refusals[operation]
    with pytest.raises(WrongTypeError) as caught:
        traced_call()
    with pytest.raises(WrongTypeError) as plain:
        checked_call()
    assert shown(caught.value).splitlines()[0] == str(plain.value)
    # The constructor links through append_n, which the production queue's words name too.
    named = "append_n" if operation == "__init__" else operation
    assert history_of(caught.value).call.name == named
    assert queue.get_all_free_blocks() == blocks
    assert queue.operations == 1


def test_an_iteration_that_meets_a_departed_block_names_where_it_left() -> None:
    """A block removed under a live iteration: the error names the iteration and the remove."""
    blocks = [Block() for _ in range(3)]
    queue = TracedFreeBlockQueue(blocks)
    started_at = here() + 1
    walk = iter(queue)
    assert next(walk) is blocks[0]
    removed_at = here() + 1
    queue.remove(blocks[0])
    with pytest.raises(NotInQueueError) as caught:
        next(walk)
    history = history_of(caught.value)
    assert (history.call.name, history.call.lineno) == ("iter", started_at)
    (record,) = history.blocks
    assert_names(
        record.unlinked,
        "remove",
        removed_at,
        "test_an_iteration_that_meets_a_departed_block_names_where_it_left",
    )


def test_a_block_that_left_for_another_queue_is_not_called_damaged() -> None:
    """Damage in one queue lists its own broken blocks, not a block now linked in another queue."""
    blocks = [Block() for _ in range(4)]
    queue = TracedFreeBlockQueue(blocks[:3])
    other: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    other.append(queue.popleft())
    blocks[2].prev_free_block = blocks[3]  # a link written by hand
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    damaged = {record.block for record in history_of(caught.value).blocks}
    assert repr(blocks[0]) not in damaged
    assert repr(blocks[2]) in damaged


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_every_method_of_a_damaged_traced_queue_raises_only_queue_errors(damage: str) -> None:
    """The trace level explains without ever turning check mode's QueueError into a raw error."""
    blocks = [Block() for _ in range(3)]
    unexplained = []
    for index in range(len(_every_operation(TracedFreeBlockQueue(blocks), blocks))):
        blocks = [Block() for _ in range(3)]
        queue = TracedFreeBlockQueue(blocks, full_check_every=0)
        try:
            DAMAGE[damage](queue, blocks)
        except (AttributeError, TypeError):
            pytest.skip("this build's typed slots refuse the damage")
        try:
            _every_operation(queue, blocks)[index]()
        except QueueError as error:  # anything else fails the test
            explained = isinstance(getattr(error, "history", None), History)
            if not explained and "no history: the trace could not be read" not in shown(error):
                unexplained.append((index, error))
    assert unexplained == []


# ------------------------------------------------------------------------- records


def test_a_record_of_a_block_that_died_is_dropped_and_fools_no_new_block() -> None:
    """A weakly referenced block's record goes with it; a new block at its id has no history."""
    queue: TracedFreeBlockQueue[WeakBlock] = TracedFreeBlockQueue([WeakBlock()])
    block = queue.popleft()
    key = id(block)
    assert queue.history_of(block) is not None
    del block
    gc.collect()
    assert key not in queue._records
    # Allocate until a new block lands on the dead block's id (CPython reuses it soon).
    newcomers = [WeakBlock() for _ in range(1000)]
    for newcomer in newcomers:
        assert queue.history_of(newcomer) is None


def test_a_block_without_weak_references_is_held_only_while_it_is_recent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slotted blocks that left are held by their records, HELD_DEPARTED of them at most."""
    monkeypatch.setattr(traced_module, "HELD_DEPARTED", 3)
    blocks = [Block() for _ in range(5)]
    queue = TracedFreeBlockQueue(blocks)
    queue.popleft_n(5)
    assert [queue.history_of(block) is not None for block in blocks] == [False, False] + [True] * 3
    assert len(queue._held) == 3
    # The dropped records hold nothing: only the three recent blocks are held.
    held = [record[0] for record in queue._records.values()]
    assert [any(holder is block for holder in held) for block in blocks] == [False] * 2 + [True] * 3


def test_a_block_linked_again_is_not_held_by_its_old_record() -> None:
    """A block back in the queue is held by the membership only, not by the departed records."""
    blocks = [Block(), Block()]
    queue = TracedFreeBlockQueue(blocks)
    block = queue.popleft()
    assert id(block) in queue._held
    queue.append(block)
    assert id(block) not in queue._held
    history = queue.history_of(block)
    assert history is not None
    assert history.linked is not None
    assert history.unlinked is not None
    assert (history.unlinked.name, history.linked.name) == ("popleft", "append")


# ------------------------------------------------------------------- switching it on


def test_history_argument_values() -> None:
    """``history`` is the ring length, an int >= 1; anything else, True or None too, is refused."""
    assert TracedFreeBlockQueue([Block()])._recent.maxlen == DEFAULT_HISTORY
    assert TracedFreeBlockQueue([Block()], history=5)._recent.maxlen == 5
    for bad in (0, -1, 2.5, "yes", True, None):
        with pytest.raises(ValueError, match="history="):
            TracedFreeBlockQueue([Block()], history=bad)  # type: ignore[arg-type]  # refused


def test_checked_free_block_queue_is_check_mode_only() -> None:
    """CheckedFreeBlockQueue and its subclasses build themselves; no argument makes them traced."""

    class Mine(CheckedFreeBlockQueue[Block]):
        __slots__ = ()

    assert type(CheckedFreeBlockQueue([Block()])) is CheckedFreeBlockQueue
    assert type(Mine([Block()])) is Mine
    for queue_class in (CheckedFreeBlockQueue, Mine, TracedFreeBlockQueue):
        with pytest.raises(TypeError, match="trace"):
            queue_class([Block()], trace=True)  # type: ignore[call-arg]  # no such argument


def test_an_error_explained_keeps_its_type_and_pickles() -> None:
    """The trace adds lines and a field but keeps the error's class, family and pickling."""
    queue = TracedFreeBlockQueue([Block()])
    queue.num_free_blocks = 7
    with pytest.raises(InvariantViolation) as caught:
        len(queue)
    assert caught.value.invariant == "count_consistency"
    copy = pickle.loads(pickle.dumps(caught.value))
    assert str(copy) == str(caught.value)
    assert shown(copy) == shown(caught.value)
    assert copy.invariant == "count_consistency"
    assert history_of(copy) == history_of(caught.value)


# ------------------------------------------------------------------- what an error shows


def test_the_history_follows_the_message_and_str_stays_the_message() -> None:
    """The lines are notes on 3.11+ (``str`` stays check mode's message), the message's on 3.10.

    A traceback shows the same text on both: the message, then the lines, indented.
    """
    block = Block()
    queue = TracedFreeBlockQueue([block])
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    with pytest.raises(AlreadyInQueueError) as plain:
        CheckedFreeBlockQueue[Block]().append(block)  # check mode's words for the same misuse
    error = caught.value
    lines = [f"  {line}" for line in history_of(error).lines]
    assert lines[0].startswith("  this call: append() at ")
    if sys.version_info >= (3, 11):
        assert str(error) == str(plain.value)
        assert error.__notes__ == lines
    else:
        assert str(error) == "\n".join([str(plain.value), *lines])
    assert "".join(traceback.format_exception_only(type(error), error)) == "".join(
        f"{line}\n"
        for line in [f"verified_queue.errors.AlreadyInQueueError: {plain.value}", *lines]
    )


def test_an_empty_queue_keeps_vllms_words_and_shows_no_lines() -> None:
    """``popleft()`` on an empty traced queue: vLLM's message alone; the history in the field."""
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    with pytest.raises(EmptyQueueError) as caught:
        queue.popleft()
    assert shown(caught.value) == EMPTY_QUEUE_MESSAGE
    assert history_of(caught.value).call.name == "popleft"


def test_annotate_reports_a_double_free_only_for_a_call_that_frees() -> None:
    """``annotate(..., freeing=True)`` names the free before; without it, where the block left."""
    blocks = [Block(), Block()]
    queue = TracedFreeBlockQueue(blocks)
    queue.popleft()
    freed = AlreadyInQueueError("free_blocks(...): a double free")
    queue.annotate(freed, "free_blocks", (blocks[1],), freeing=True)
    assert history_of(freed).lines[1:] == (
        f"freed before by: {history_of(freed).blocks[0].linked}",
        "taken since: never, the block is still in this queue",
    )
    touched = NotInQueueError("touch(...): not free")
    queue.annotate(touched, "touch", (blocks[0],))
    left = history_of(touched).blocks[0].unlinked
    assert left is not None
    assert left.name == "popleft"
    assert history_of(touched).lines[1] == f"left this queue by: {left}"


def test_annotate_without_blocks_adds_the_call_and_no_block() -> None:
    """``annotate(error, operation)``: the blocks default to none, so only the call is named."""
    blocks = [Block()]
    queue = TracedFreeBlockQueue(blocks)
    refused = NotInQueueError("touch(...): not free")
    queue.annotate(refused, "touch")
    history = history_of(refused)
    assert history.call.name == "touch"
    assert history.blocks == ()
    assert len(history.lines) == 1
    assert history.lines[0].startswith("this call: touch() at ")


# ---------------------------------------------------------------------- the library


#: The modules whose frames are the library's: never the caller a record names.
LIBRARY = (
    "verified_queue.queue",
    "verified_queue._undo",
    "verified_queue.checked",
    "verified_queue._diagnosis",
    "verified_queue.traced",
    "verified_queue._trace_records",
    "verified_queue.kvcache.pool",
    "verified_queue.kvcache.keys",
    "verified_queue.vllm.checked",
    "verified_queue.vllm.traced",
    "verified_queue.vllm.plugin",
)


@pytest.mark.parametrize("name", LIBRARY)
def test_each_module_of_the_library_says_so(name: str) -> None:
    """Each module of the library sets the flag the caller walk reads; the CLI sets none."""
    module = sys.modules.get(name) or __import__(name, fromlist=["_"])
    assert getattr(module, LIBRARY_FLAG, None) is True, f"{name} does not set {LIBRARY_FLAG}"


def test_the_command_line_is_a_caller() -> None:
    """``verified_queue.cli``, the package's own application, is not the library."""
    from verified_queue.cli import demo, simulation  # noqa: PLC0415 -- loaded for this test

    assert not hasattr(demo, LIBRARY_FLAG)
    assert not hasattr(simulation, LIBRARY_FLAG)


def test_code_run_in_a_copy_of_a_library_modules_globals_is_a_caller() -> None:
    """A doctest of a library module runs in a copy of its globals: it is the caller recorded."""
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    example = doctest.DocTestParser().get_doctest(
        ">>> queue.append(Block())\n",
        dict(vars(traced_module), queue=queue, Block=Block),
        "copy",
        "<example>",
        0,
    )
    runner = doctest.DocTestRunner()
    runner.run(example)
    assert runner.failures == 0
    operation = queue.recent_operations()[-1]  # after the constructor's append_n
    assert (operation.name, operation.filename, operation.function) == (
        "append",
        "<doctest copy[0]>",
        "<module>",
    )


# ------------------------------------------------------------------- a host's core


#: A host's core, as vLLM's KV-cache core is to the vLLM plugin: code outside the package
#: that calls the queue for others. Each test compiles it under a file name of its own.
HOST_SOURCE = """
def free(queue, block, request_id):
    queue.append(block)


def free_for(queue, block, request):
    queue.append(block)


def free_plain(queue, block):
    queue.append(block)


def frame_here(callback):
    return callback(sys._getframe())
"""


def host_core(tag: str) -> tuple[str, dict[str, Any]]:
    """Compile :data:`HOST_SOURCE` under a new file name; return the name and its functions."""
    filename = f"<host core {tag} {len(_hosts_made)}>"
    _hosts_made.append(filename)
    namespace: dict[str, Any] = {"__name__": f"host_core_{tag}", "sys": sys}
    exec(compile(HOST_SOURCE, filename, "exec"), namespace)
    return filename, namespace


_hosts_made: list[str] = []


def test_a_host_file_is_passed_over_once_named_even_if_walked_before() -> None:
    """treat_as_library: the next record names the host's caller and the request it serves."""
    filename, host = host_core("named")
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    block = Block()
    host["free"](queue, block, "r-1")  # before: the host's frame is the caller, cached so
    before = queue.recent_operations()[-1]
    assert (before.filename, before.function, before.request) == (filename, "free", None)
    queue.popleft()
    treat_as_library(filename)
    freed_at = here() + 1
    host["free"](queue, block, "r-1")
    assert_names(
        queue.recent_operations()[-1],
        "append",
        freed_at,
        "test_a_host_file_is_passed_over_once_named_even_if_walked_before",
    )
    assert queue.recent_operations()[-1].request == "r-1"
    with pytest.raises(AlreadyInQueueError) as caught:
        host["free"](queue, block, "r-1")
    lines = history_of(caught.value).lines
    assert lines[0].startswith("this call: append() at ")
    function = "test_a_host_file_is_passed_over_once_named_even_if_walked_before"
    assert f" in {function} for request 'r-1' (thread " in lines[0]
    assert f"{freed_at} in {function}" in lines[1]
    assert "for request 'r-1' (thread " in lines[1]
    assert filename not in "\n".join(lines)


class RequestWithId:
    """vLLM's Request keeps its id in its instance dict."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


class RequestWithProperty:
    """A request whose id is a property that raises: the walk must not call it."""

    calls = 0

    @property
    def request_id(self) -> str:
        """Count the call, then fail."""
        RequestWithProperty.calls += 1
        raise RuntimeError("a property the trace must not run")


class HostileRequest:
    """A request whose class refuses every attribute lookup; its instance dict holds the id."""

    def __init__(self) -> None:
        object.__getattribute__(self, "__dict__")["request_id"] = "r-hostile"

    def __getattribute__(self, name: str) -> Any:
        """Fail."""
        raise RuntimeError(f"__getattribute__({name!r})")

    def __getattr__(self, name: str) -> Any:
        """Fail."""
        raise RuntimeError(f"__getattr__({name!r})")


class SlottedRequest:
    """A request with no instance dict: its id is not read (vLLM's Request has a dict)."""

    __slots__ = ("request_id",)

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: RequestWithId("r-2"), "r-2"),
        (RequestWithProperty, None),
        (HostileRequest, "r-hostile"),
        (lambda: SlottedRequest("r-3"), None),
        (lambda: "r-4", None),
        (lambda: None, None),
    ],
    ids=["instance dict", "raising property", "hostile class", "slotted", "a str", "None"],
)
def test_a_request_object_is_read_from_its_dict_running_none_of_its_code(
    make: Callable[[], object], expected: str | None
) -> None:
    """The request id comes from a ``request`` local's instance dict, or is None; nothing raises."""
    filename, host = host_core("request")
    treat_as_library(filename)
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    host["free_for"](queue, Block(), make())
    assert queue.recent_operations()[-1].request == expected
    assert RequestWithProperty.calls == 0


def test_the_request_is_read_from_the_caller_when_the_host_names_none() -> None:
    """A host frame naming no request: the caller's own ``request_id`` local is read."""
    filename, host = host_core("caller")
    treat_as_library(filename)
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    request_id = "r-5"
    host["free_plain"](queue, Block())
    host["free"](queue, Block(), 7)  # not a str: the caller's local is read instead
    first, second = queue.recent_operations()[-2:]
    assert (first.function, first.request) == (
        "test_the_request_is_read_from_the_caller_when_the_host_names_none",
        request_id,
    )
    assert second.request == request_id


def test_no_request_is_read_by_a_walk_that_passes_no_host() -> None:
    """Outside a host's core a record has no request, and its line is what it always was."""
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    request_id = "r-6"  # a local the walk would read, had it passed a host's core
    block = Block()
    freed_at = here() + 1
    queue.append(block)
    operation = queue.recent_operations()[-1]
    assert operation.request is None
    assert str(operation) == (
        f"#2 append() at {short_path(THIS_FILE)}:{freed_at} in "
        "test_no_request_is_read_by_a_walk_that_passes_no_host (thread MainThread)"
    )
    assert request_id not in str(operation)


def test_a_host_frame_is_not_the_library_and_is_never_cached_as_a_caller() -> None:
    """is_library says False for a host's frame, and asking it does not hide the host after."""
    filename, host = host_core("asked")
    treat_as_library(filename)
    assert host["frame_here"](is_library) is False
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    host["free"](queue, Block(), "r-7")
    operation = queue.recent_operations()[-1]
    assert (operation.filename, operation.request) == (THIS_FILE, "r-7")


SWITCH_PROBE = """
import json, sys
import verified_queue
from verified_queue import Block, FreeBlockQueue
loaded_at_import = "verified_queue.traced" in sys.modules
queue = FreeBlockQueue([Block()])
verified_queue.CheckedFreeBlockQueue([Block()])
print(json.dumps({
    "level": verified_queue.CHECK_LEVEL,
    "class": type(queue).__name__,
    "direct": type(verified_queue.CheckedFreeBlockQueue([Block()])).__name__,
    "loaded_at_import": loaded_at_import,
    "loaded": "verified_queue.traced" in sys.modules,
}))
"""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ["off", "FreeBlockQueue", "CheckedFreeBlockQueue", False, False]),
        ("1", ["on", "CheckedFreeBlockQueue", "CheckedFreeBlockQueue", False, False]),
        ("trace", ["trace", "TracedFreeBlockQueue", "CheckedFreeBlockQueue", True, True]),
        (" Trace ", ["trace", "TracedFreeBlockQueue", "CheckedFreeBlockQueue", True, True]),
    ],
)
def test_the_switch_selects_the_trace_level_and_loads_it_only_then(
    value: str | None, expected: list[object]
) -> None:
    """VERIFIED_QUEUE_CHECKS=trace binds the exported name to the traced class, and only that.

    ``CheckedFreeBlockQueue`` stays check mode under every level; no other level loads the trace.
    """
    report = run_fresh(SWITCH_PROBE, value)
    keys = ["level", "class", "direct", "loaded_at_import", "loaded"]
    assert [report[key] for key in keys] == expected


def test_an_interrupt_in_the_count_write_is_damage_the_next_check_reports() -> None:
    """The boundary of the fault contract at the trace level (docs/usage.md).

    ``popleft`` writes the count after the links, through the trace level's interpreted
    ``__setattr__``; an exception at that method's start leaves the links written and the
    count not. It is damage, and the next full check reports it as I2. On the compiled
    build the queue's own methods write the count natively: no checkpoint is reached.
    """
    queue = TracedFreeBlockQueue([Block() for _ in range(3)])
    faults = Faults(at=frozenset({1}))
    codes = {TracedFreeBlockQueue.__setattr__.__code__}
    with contextlib.suppress(Interrupted), at_checkpoints(faults, codes):
        queue.popleft()
    if verified_queue.COMPILED and not faults.fired:
        assert len(queue) == 2
        return
    assert faults.fired
    with pytest.raises(InvariantViolation, match=r"I2 \(count_consistency\).*found 3"):
        queue.full_check()
