"""A batch's undo completes whatever exception arrives while it runs, and re-raises it.

The exceptions are injected deterministically by :mod:`specs.interrupts` (the pool's
tests use it too) at every point where the interpreter can run a signal handler in the frames
of the queue and its undo (a function's start, before and after a call, a loop's back edge,
and on Python 3.10 a conditional jump taken and an exception handler's start); and, during
the undo, at every link write, by blocks whose link setters fail, counted by the same
:class:`~specs.interrupts.Faults`. Each case is tried with one exception at each point
and a second one at each later point.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import Any

import pytest

import verified_queue
from specs.interrupts import (
    Faults,
    Interrupted,
    at_checkpoints,
    code_objects,
    uncovered_back_edge,
)
from verified_queue import Block, FreeBlockQueue
from verified_queue import _undo as undo_module
from verified_queue import queue as queue_module
from verified_queue.errors import AlreadyInQueueError, QueueError, WrongTypeError
from verified_queue.invariants import check_invariants

pytestmark = pytest.mark.skipif(
    verified_queue.COMPILED,
    reason="the compiled queue runs no Python code between its link writes, and links "
    "Block subclasses only (no failing setter); test_interrupts.py covers it with a timer",
)


def checkpoint_codes() -> set[CodeType]:
    """The frames a fault can land in: the queue's and its undo's (mutmut's renamed copies too).

    Read when a test runs, not at import: a mutation run swaps a mutant's code into a
    function after the suite is collected, and the faults must fire in that code.
    """
    return code_objects([queue_module, undo_module])


@contextmanager
def _checkpoints(faults: Faults) -> Iterator[None]:
    """Raise where ``faults`` says at the checkpoints of the queue's and the undo's frames."""
    with at_checkpoints(faults, checkpoint_codes()):
        yield


#: The code names of the functions that undo a batch: the setters fail only when called from
#: them, since a failing setter elsewhere is not an interrupt (and only the pure build takes
#: such blocks). Mutation testing renames each copy it makes (``x_unstage__mutmut_7``), and
#: the faults must fire in those copies as in the original, or no mutant of an undo is caught.
UNDO_CODE_NAME = re.compile(r"(?:x_)?(?:unstage|finish_unstage|relink_taken)(?:__mutmut_\w+)?")


class SetterFaults:
    """The faults of the blocks' link setters during an undo: off until armed."""

    armed: Faults | None = None

    @classmethod
    def write(cls) -> None:
        """Count a link write made by an undo (the setter's caller's caller), maybe raising."""
        if cls.armed is not None and UNDO_CODE_NAME.fullmatch(sys._getframe(2).f_code.co_name):
            cls.armed.event()


class FailingSetterBlock:
    """A block whose link setters raise instead of writing where the armed faults say."""

    __slots__ = ("_next", "_prev", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self._prev: Any = None
        self._next: Any = None

    @property
    def prev_free_block(self) -> Any:
        """The back link."""
        return self._prev

    @prev_free_block.setter
    def prev_free_block(self, value: Any) -> None:
        SetterFaults.write()
        self._prev = value

    @property
    def next_free_block(self) -> Any:
        """The forward link."""
        return self._next

    @next_free_block.setter
    def next_free_block(self, value: Any) -> None:
        SetterFaults.write()
        self._next = value

    def __repr__(self) -> str:
        return f"<block {self.number}>"


class LookupRaises:
    """A proxy whose every attribute lookup raises ``KeyError``: not a block, but not None."""

    def __getattr__(self, name: str) -> Any:
        raise KeyError(name)


#: A case: build the blocks, the queue and the call; return them with the order after success.
Case = Callable[[], tuple[list[Any], FreeBlockQueue[Any], Callable[[], object], list[Any]]]


def _blocks(kind: type, count: int) -> list[Any]:
    return (
        [kind(number) for number in range(count)]
        if kind is FailingSetterBlock
        else [Block() for _ in range(count)]
    )


def _cases(kind: type) -> dict[str, Case]:
    def append_refused() -> Any:
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        before = queue.get_all_free_blocks()
        return blocks, queue, lambda: queue.append_n([*blocks[3:7], blocks[1]]), before

    def append_refused_at_once() -> Any:
        # Nothing is staged: the undo must leave the refused block, linked in the queue, as is.
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        before = queue.get_all_free_blocks()
        return blocks, queue, lambda: queue.append_n([blocks[1], *blocks[3:7]]), before

    def append_not_a_block() -> Any:
        # The undo's walk over the staged blocks meets an item with no links at all.
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        before = queue.get_all_free_blocks()
        return blocks, queue, lambda: queue.append_n([*blocks[3:6], None]), before

    def append_a_raising_proxy() -> Any:
        # An interrupt just as the loop reaches the proxy must not pass for the proxy's error.
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        before = queue.get_all_free_blocks()
        return blocks, queue, lambda: queue.append_n([*blocks[3:6], LookupRaises()]), before

    def prepend_refused() -> Any:
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        before = queue.get_all_free_blocks()
        return blocks, queue, lambda: queue.prepend_n([*blocks[3:7], blocks[3]]), before

    def append_accepted() -> Any:
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        return blocks, queue, lambda: queue.append_n(blocks[3:7]), blocks[:7]

    def prepend_accepted() -> Any:
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:3])
        after = [*blocks[3:7], *blocks[:3]]
        return blocks, queue, lambda: queue.prepend_n(blocks[3:7]), after

    def popleft_n_taken() -> Any:
        blocks = _blocks(kind, 8)
        queue = FreeBlockQueue(blocks[:6])
        return blocks, queue, lambda: queue.popleft_n(4), blocks[4:6]

    return {
        "append_n refused": append_refused,
        "append_n refused at its first block": append_refused_at_once,
        "append_n of a non-block": append_not_a_block,
        "append_n of a proxy whose lookup raises": append_a_raising_proxy,
        "prepend_n refused": prepend_refused,
        "append_n": append_accepted,
        "prepend_n": prepend_accepted,
        "popleft_n": popleft_n_taken,
    }


def _run(case: Case, faults: Faults, inject: Callable[[Faults], Any]) -> str:
    """Run ``case`` with ``faults``; check the outcome; return a description of any failure."""
    blocks, queue, call, after = case()
    before = queue.get_all_free_blocks()
    raised: BaseException | None = None
    with inject(faults):
        try:
            call()
        except (Interrupted, AlreadyInQueueError, WrongTypeError) as error:
            raised = error
    try:
        check_invariants(queue, pool=blocks)
    except AssertionError as damage:
        return f"faults at {sorted(faults.at)}: {damage}"
    order = queue.get_all_free_blocks()
    if raised is None:
        if order != after or faults.fired:
            return f"faults at {sorted(faults.at)}: returned, but {faults.fired} fired"
        return ""
    if order != before:
        return f"faults at {sorted(faults.at)}: raised {raised!r}, not all undone"
    if faults.fired and raised is not faults.fired[-1]:
        return f"faults at {sorted(faults.at)}: raised {raised!r}, not {faults.fired[-1]!r}"
    return ""


def _every_pair(case: Case, inject: Callable[[Faults], Any], first: range | None = None) -> None:
    """One fault at each event and a second at each later event; every outcome is sound."""
    counting = Faults()
    assert _run(case, counting, inject) == ""
    events = counting.events + 2
    failures = []
    for one in first or range(1, events):
        faults = Faults(frozenset({one}))
        failures.append(_run(case, faults, inject))
        # The second fault may fall in the undo: its events come after the first fault.
        for two in range(one + 1, faults.events + 2):
            failures.append(_run(case, Faults(frozenset({one, two})), inject))
    failures = [failure for failure in failures if failure]
    assert not failures, f"{len(failures)} faulty outcomes, first: {failures[:3]}"


#: An undo's starting point: the blocks, the queue, the undo's call and the order it restores.
Undo = tuple[list[Any], FreeBlockQueue[Any], Callable[[], Any], list[Any]]


def _staged_batch(kind: type) -> Undo:
    """A queue with four blocks staged behind its tail, as a refused ``append_n`` leaves them.

    Returns the blocks, the queue, the call that finishes the undo (as the
    batch methods' outer handlers call it) and the queue's order before.
    """
    blocks = _blocks(kind, 8)
    queue = FreeBlockQueue(blocks[:3])
    tail = queue.fake_free_list_tail
    previous = tail
    for block in blocks[3:7]:  # staged as the batch loop stages them
        block.prev_free_block = previous
        previous.next_free_block = block
        previous = block
    batch = [*blocks[3:7], blocks[1]]  # refused at blocks[1], linked in the queue
    undo = lambda: undo_module.finish_unstage(batch, tail, Interrupted(0))  # noqa: E731
    return blocks, queue, undo, blocks[:3]


def _taken_run(kind: type) -> Undo:
    """A queue whose ``popleft_n(4)`` was cut short after taking three blocks.

    Returns the blocks, the queue, the call that puts them back (as
    ``popleft_n``'s handlers call it) and the queue's order before.
    """
    blocks = _blocks(kind, 8)
    queue = FreeBlockQueue(blocks[:6])
    popped: list[Any] = [None] * 4
    for index in range(3):  # taken and detached as the loop takes them
        popped[index] = blocks[index]
        blocks[index].prev_free_block = blocks[index].next_free_block = None
    head = queue.fake_free_list_head
    undo = lambda: undo_module.relink_taken(head, popped, blocks[3])  # noqa: E731
    return blocks, queue, undo, blocks[:6]


UNDOS = {"finish_unstage": _staged_batch, "relink_taken": _taken_run}


@pytest.mark.parametrize("kind", [Block, FailingSetterBlock], ids=["Block", "failing setters"])
@pytest.mark.parametrize("undo", sorted(UNDOS))
def test_an_undo_finishes_whatever_arrives_inside_it_and_returns_the_last(
    undo: str, kind: type
) -> None:
    """Two exceptions anywhere inside an undo's retry loops: it finishes, and returns the last.

    Called directly, so that the second exception can land anywhere in the
    undo, the outermost retry loop included (through the batch methods, only a
    fourth exception gets there). Only the undo's own start (its first event)
    is outside its loops. A fault that escapes at a back edge no handler covers
    (a ``while <condition>`` loop inside a try, on Python 3.13: see
    ``verified_queue._undo``, "Loops inside a try") is named as such.
    """
    counting = Faults()
    _, _, undo_call, _ = UNDOS[undo](kind)
    with _everywhere(counting):
        undo_call()
    failures = []
    for one in range(2, counting.events + 2):
        for two in [None, *range(one + 1, counting.events + 4)]:
            faults = Faults(frozenset({one} if two is None else {one, two}))
            blocks, queue, undo_call, before = UNDOS[undo](kind)
            problems = []
            try:
                with _everywhere(faults):
                    returned = undo_call()
            except Interrupted as escaped:
                # Only the undo's frames are traced (not this test's lambda): a fault that
                # gets here arrived inside the undo, and escaped it.
                hole = uncovered_back_edge(escaped, checkpoint_codes())
                at = "" if hole is None else f" at {hole}, a back edge no handler covers"
                problems.append(f"{escaped!r} escaped the undo{at}")
            else:
                if faults.fired and returned is not faults.fired[-1]:
                    problems.append(f"returned {returned!r}, not {faults.fired[-1]!r}")
            try:
                check_invariants(queue, pool=blocks)
            except AssertionError as damage:
                problems.append(str(damage))
            else:
                if queue.get_all_free_blocks() != before:
                    problems.append("the queue's order changed")
            if problems:
                failures.append(f"faults at {sorted(faults.at)}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} faulty outcomes, first: {failures[:3]}"


@pytest.mark.parametrize("name", sorted(_cases(Block)))
def test_exceptions_at_every_checkpoint_and_a_second_at_every_later_one(name: str) -> None:
    """An exception at any checkpoint, and another at any later one, leaves all undone or done."""
    _every_pair(_cases(Block)[name], _checkpoints)


@contextmanager
def _setters(faults: Faults) -> Iterator[None]:
    SetterFaults.armed = faults
    try:
        yield
    finally:
        SetterFaults.armed = None


@contextmanager
def _everywhere(faults: Faults) -> Iterator[None]:
    with _checkpoints(faults), _setters(faults):
        yield


@pytest.mark.parametrize("name", sorted(_cases(FailingSetterBlock)))
def test_exceptions_at_every_checkpoint_and_link_write_and_a_second_later(name: str) -> None:
    """An exception at any checkpoint or link write, and another at any later one, loses nothing."""
    _every_pair(_cases(FailingSetterBlock)[name], _everywhere)


#: The calls an interrupt cuts short with nothing refused: the first exception is the interrupt.
ACCEPTED = ("append_n", "prepend_n", "popleft_n")


@pytest.mark.parametrize("kind", [Block, FailingSetterBlock], ids=["Block", "failing setters"])
@pytest.mark.parametrize("name", ACCEPTED)
def test_three_exceptions_at_any_three_points_leave_all_undone_or_done(
    name: str, kind: type
) -> None:
    """The contract's depth: any three exceptions in all, the one that cuts the call included."""
    case = _cases(kind)[name]
    counting = Faults()
    assert _run(case, counting, _everywhere) == ""
    # Past the undisturbed run's events: the undo's own, which only the earlier faults start.
    events = range(1, counting.events + 8)
    failures = [
        failure
        for chosen in itertools.combinations(events, 3)
        if (failure := _run(case, Faults(frozenset(chosen)), _everywhere))
    ]
    assert not failures, f"{len(failures)} faulty outcomes, first: {failures[:3]}"


# Check mode, which tox's check-mode run puts in the production queue's place, reports the
# burst's damage itself, as InvariantViolation, in place of the fourth exception.
@pytest.mark.production_only
@pytest.mark.parametrize(
    ("name", "faults"),
    [("append_n", 4), ("prepend_n", 4), ("popleft_n", 4), ("append_n refused", 3)],
)
def test_the_boundary_one_exception_more_can_damage_and_is_then_reported(
    name: str, faults: int
) -> None:
    """Past the contract (a fourth exception, or a refusal and three) some burst damages the queue.

    The burst is the shape a raising timer faster than the interpreter takes:
    exceptions at consecutive checkpoints. This pins where the promise of
    ``verified_queue._undo`` stops, so that a change that moves it fails here
    and updates the contract; and every such damage is one ``check_invariants``
    reports (``_run`` returns its message), never a silent one.
    """
    case = _cases(Block)[name]
    counting = Faults()
    assert _run(case, counting, _checkpoints) == ""
    outcomes = [
        _run(case, Faults(frozenset(range(first, first + faults))), _checkpoints)
        for first in range(1, counting.events + 8)
    ]
    damaged = [outcome for outcome in outcomes if outcome]
    assert damaged, f"no burst of {faults} damaged {name}: the contract's depth has moved"
    assert all("broken" in outcome or "not all undone" in outcome for outcome in damaged)


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[object]:
    """Have each call of the queue module's undo ``name`` noted, then run as before."""
    calls: list[object] = []
    original = getattr(queue_module, name)

    def counted(*arguments: Any) -> Any:
        calls.append(arguments)
        return original(*arguments)

    monkeypatch.setattr(queue_module, name, counted)
    return calls


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_refused_batch_is_undone_by_the_first_handler_alone(
    operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing arriving meanwhile, the handlers outside the first one undo nothing again.

    The first handler unstages the batch and says so; the outer ones finish an undo only
    when an exception cut it short (the rule of verified_queue._undo).
    """
    finishing = _counting(monkeypatch, "finish_unstage")
    blocks = [Block() for _ in range(4)]
    queue: queue_module.FreeBlockQueue[Block] = queue_module.FreeBlockQueue(blocks[:2])
    with pytest.raises(AlreadyInQueueError):
        getattr(queue, operation)([blocks[2], blocks[0]])
    assert finishing == []
    assert queue.get_all_free_blocks() == blocks[:2]
    check_invariants(queue, pool=blocks)


def test_a_popleft_n_cut_short_is_relinked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count written from outside runs ``popleft_n`` off the chain: one relink, not three."""
    relinking = _counting(monkeypatch, "relink_taken")
    blocks = [Block() for _ in range(2)]
    queue: queue_module.FreeBlockQueue[Block] = queue_module.FreeBlockQueue(blocks)
    queue.num_free_blocks = 3
    with pytest.raises(QueueError):
        queue.popleft_n(3)
    assert len(relinking) == 1
    assert queue.get_all_free_blocks() == blocks
