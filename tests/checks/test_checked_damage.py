"""Check mode raises only QueueError, whatever damage outside code or a faulty base class did."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.checks.support import (
    AppendForgetsCount,
    IntLike,
    PopleftNKeepsHead,
    PopleftReturnsTail,
    PrependNLeavesOldFront,
    RemoveLeavesBackLink,
    checked,
)
from verified_queue import (
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    QueueError,
)
from verified_queue.checked import DEFAULT_FULL_CHECK_EVERY
from verified_queue.queue import FreeBlockQueue


def _every_operation(
    queue: CheckedFreeBlockQueue[Block], blocks: list[Block]
) -> list[Callable[[], object]]:
    """One call of each method, on blocks the damage may have touched."""
    return [
        lambda: len(queue),
        lambda: bool(queue),
        queue.popleft,
        lambda: queue.popleft_n(1),
        lambda: queue.remove(blocks[1]),
        lambda: queue.append(Block()),
        lambda: queue.append_n([Block()]),
        lambda: queue.prepend_n([Block()]),
        lambda: list(queue.iter_blocks_after(blocks[0])),
        lambda: list(queue),
        queue.get_all_free_blocks,
        queue.full_check,
    ]


DAMAGE: dict[str, Callable[[CheckedFreeBlockQueue[Block], list[Block]], None]] = {
    "float count": lambda q, _b: setattr(q, "num_free_blocks", 3.0),
    "int-like count": lambda q, _b: setattr(q, "num_free_blocks", IntLike(3)),
    "bool count": lambda q, _b: setattr(q, "num_free_blocks", True),
    "head replaced by None": lambda q, _b: setattr(q, "fake_free_list_head", None),
    "tail replaced by None": lambda q, _b: setattr(q, "fake_free_list_tail", None),
    "deleted link slot": lambda _q, b: delattr(b[1], "prev_free_block"),
    "deleted tail link slot": lambda q, _b: delattr(q.fake_free_list_tail, "prev_free_block"),
    "deleted head link slot": lambda q, _b: delattr(q.fake_free_list_head, "next_free_block"),
    "deleted count": lambda q, _b: delattr(q, "num_free_blocks"),
    "deleted head": lambda q, _b: delattr(q, "fake_free_list_head"),
    "string count": lambda q, _b: setattr(q, "num_free_blocks", "3"),
    "non-block member": lambda _q, b: setattr(b[0], "next_free_block", object()),
    "non-block before the tail": lambda q, _b: setattr(q.fake_free_list_tail, "prev_free_block", 7),
    "head replaced by a block": lambda q, _b: setattr(q, "fake_free_list_head", Block()),
    "tail replaced by the head": lambda q, _b: setattr(
        q, "fake_free_list_tail", q.fake_free_list_head
    ),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_damaged_queue_raises_only_queue_errors(damage: str) -> None:
    """Each method of a damaged checked queue returns or raises a QueueError, never a raw error."""
    raised = 0
    for index in range(len(_every_operation(*checked(3)))):
        queue, blocks = checked(3, full_check_every=0)
        try:
            DAMAGE[damage](queue, blocks)
        except (AttributeError, TypeError):
            pytest.skip("this build's typed slots refuse the damage")
        if damage == "int-like count" and type(queue.num_free_blocks) is int:
            pytest.skip("this build's typed count stores a plain int, so the damage cannot happen")
        try:
            _every_operation(queue, blocks)[index]()
        except QueueError:  # anything else fails the test
            raised += 1
    assert raised >= 1
    queue, blocks = checked(3)
    with contextlib.suppress(AttributeError, TypeError):  # skipped above if refused
        DAMAGE[damage](queue, blocks)
    with pytest.raises(InvariantViolation):
        queue.full_check()


def test_remove_own_sentinel_names_it_own() -> None:
    """remove() of this queue's own sentinel says it is a sentinel, not another queue's."""
    queue, _ = checked(2)
    with pytest.raises(NotInQueueError, match="it is a queue sentinel, which never leaves"):
        queue.remove(queue.fake_free_list_tail)


@pytest.mark.parametrize("period", ["10", -5, 2.0, True])
def test_period_setter_refuses_bad_period(period: object) -> None:
    """Setting a bad period raises ValueError then, and later operations still work."""
    queue, blocks = checked(3)
    with pytest.raises(ValueError, match="expected None or an int >= 0"):
        queue.full_check_every = period  # type: ignore[assignment]  # deliberate
    assert queue.popleft() is blocks[0]
    assert queue.full_check_every is DEFAULT_FULL_CHECK_EVERY


#: Faults written for these tests, apart from specs/planted_bugs/: each breaks what only
#: the check at the end of its operation reads, so the start-of-operation checks pass.
END_OF_OPERATION_FAULTS: dict[
    str, tuple[type[FreeBlockQueue[Block]], int, str, Callable[[Any, list[Block]], object]]
] = {
    "append forgets count": (
        AppendForgetsCount,
        3,
        "the end of append()",
        lambda q, _b: q.append(Block()),
    ),
    "remove leaves back link": (
        RemoveLeavesBackLink,
        3,
        "the end of remove()",
        lambda q, b: q.remove(b[1]),
    ),
    "prepend_n leaves old front": (
        PrependNLeavesOldFront,
        3,
        "the end of prepend_n()",
        lambda q, _b: q.prepend_n([Block()]),
    ),
    "popleft_n keeps head": (
        PopleftNKeepsHead,
        3,
        "the end of popleft_n()",
        lambda q, _b: q.popleft_n(2),
    ),
    "popleft returns tail": (
        PopleftReturnsTail,
        0,
        "the end of popleft()",
        lambda q, _b: q.popleft(),
    ),
}


@pytest.mark.parametrize("fault", END_OF_OPERATION_FAULTS)
def test_end_checks_catch_faulty_base_class(fault: str) -> None:
    """Check mode over a faulty production class reports the fault as its operation ends."""
    base, size, where, operation = END_OF_OPERATION_FAULTS[fault]
    faulty: type[CheckedFreeBlockQueue[Block]] = type(
        "CheckedFaulty", (CheckedFreeBlockQueue, base), {"__slots__": ()}
    )
    blocks = [Block() for _ in range(size)]
    queue = faulty(blocks, full_check_every=0)
    with pytest.raises(InvariantViolation, match=re.escape(where)):
        operation(queue, blocks)


class _FromOutside(Exception):
    """What a signal handler raises in the middle of an operation: no damage at all."""


#: The one exception the base class below raises, from the operation named in ``failing``.
_ARRIVED = _FromOutside("a timeout's handler")


class _InterruptedBase(FreeBlockQueue[Block]):
    """A production queue whose named operation is cut short before it changes anything."""

    __slots__ = ()
    failing = ""

    def popleft(self) -> Block:
        if self.failing == "popleft":
            raise _ARRIVED
        return super().popleft()

    def popleft_n(self, n: Any) -> list[Block]:
        if self.failing == "popleft_n":
            raise _ARRIVED
        return super().popleft_n(n)

    def append(self, block: Block) -> None:
        if self.failing == "append":
            raise _ARRIVED
        super().append(block)

    def append_n(self, blocks: Any) -> None:
        if self.failing == "append_n":
            raise _ARRIVED
        super().append_n(blocks)

    def remove(self, block: Block) -> None:
        if self.failing == "remove":
            raise _ARRIVED
        super().remove(block)


class _InterruptedChecked(CheckedFreeBlockQueue[Block], _InterruptedBase):
    """Check mode over that base: its _super_* methods are the base's."""

    __slots__ = ()


@pytest.mark.parametrize("operation", ["popleft", "popleft_n", "append", "append_n", "remove"])
def test_an_exception_from_outside_is_raised_as_it_is_not_reported_as_damage(
    operation: str,
) -> None:
    """An exception that is no damage, arriving inside a checked call, comes out unchanged.

    Check mode turns the errors of damaged links into ``InvariantViolation``; one
    the full check then finds no damage behind (here raised by the production
    method, as a signal handler's would be) is raised again as it is.
    """
    blocks = [Block() for _ in range(4)]
    queue = _InterruptedChecked(blocks[:3], full_check_every=0)
    _InterruptedBase.failing = operation
    calls: dict[str, Callable[[], object]] = {
        "popleft": queue.popleft,
        "popleft_n": lambda: queue.popleft_n(2),
        "append": lambda: queue.append(blocks[3]),
        "append_n": lambda: queue.append_n([blocks[3]]),
        "remove": lambda: queue.remove(blocks[1]),
    }
    try:
        with pytest.raises(_FromOutside) as caught:
            calls[operation]()
    finally:
        _InterruptedBase.failing = ""
    assert caught.value is _ARRIVED
    queue.full_check()
    assert queue.get_all_free_blocks() == blocks[:3]
