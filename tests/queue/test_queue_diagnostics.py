"""The production queue's diagnostics word for word, and its undo of a cut-short popleft_n.

Each error message the queue builds is pinned exactly (the operation, the value and the
reason it names), through the public operations and through the builders themselves, so the
compiled build's wording is pinned on the pure build too. The undo of ``popleft_n`` is driven
deterministically: a block type whose every link read or write is one step raises
``KeyboardInterrupt`` at a chosen step, as a signal handler would, and every step of the
loop is tried.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from tests.helpers import NumberedBlock, numbered
from verified_queue import (
    COMPILED,
    AlreadyInQueueError,
    Block,
    InvariantViolation,
    WrongTypeError,
)
from verified_queue import _messages as messages
from verified_queue import queue as queue_module
from verified_queue.block import Sentinel
from verified_queue.queue import FreeBlockQueue

pure_only = pytest.mark.skipif(COMPILED, reason="the compiled queue links subclasses of Block only")

#: Sentinels to name in messages: a sentinel is described by its role and its address.
HEAD = Sentinel("head")
TAIL = Sentinel("tail")

EXPECTED_A_BLOCK = (
    "expected a block (a verified_queue.Block, or an object with prev_free_block and "
    "next_free_block), got"
)


def every_link(queue: FreeBlockQueue[Any], universe: list[Any]) -> tuple[object, ...]:
    """The count and every link of the sentinels and ``universe``, by identity."""
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *universe]
    return queue.num_free_blocks, *((id(n.prev_free_block), id(n.next_free_block)) for n in nodes)


class Linkable:
    """An object with both links that is not a :class:`Block` (the pure build links it)."""

    __slots__ = ("next_free_block", "prev_free_block")

    def __init__(self) -> None:
        self.prev_free_block: Any = None
        self.next_free_block: Any = None

    def __repr__(self) -> str:
        return "Linkable()"


class RefusingLinks:
    """A linkable object whose back link refuses every value but ``None`` with ``TypeError``."""

    __slots__ = ("_prev", "next_free_block")

    def __init__(self) -> None:
        self._prev: Any = None
        self.next_free_block: Any = None

    @property
    def prev_free_block(self) -> Any:
        return self._prev

    @prev_free_block.setter
    def prev_free_block(self, value: Any) -> None:
        if value is not None:
            raise TypeError("this block refuses to be linked")
        self._prev = value


# ------------------------------------------------------------ the message builders


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: messages.lost_inner_link("popleft_n", "head"),
            "popleft_n(): the head sentinel's next_free_block is not a block (I1 broken by "
            "outside code); nothing was changed",
        ),
        (
            lambda: messages.lost_inner_link("append_n", "tail"),
            "append_n(): the tail sentinel's prev_free_block is not a block (I1 broken by "
            "outside code); nothing was changed",
        ),
        (
            lambda: messages.not_a_block("remove", Linkable()),
            "remove(Linkable()): the compiled verified_queue links only subclasses of "
            "verified_queue.Block, and Linkable is not one; subclass verified_queue.Block and "
            "drop the class's own prev_free_block and next_free_block fields (Block has them)",
        ),
        (
            lambda: messages.not_a_block("remove", 7),
            f"remove(7): {EXPECTED_A_BLOCK} int",
        ),
        (
            messages.changed_during_iteration,
            "the free queue changed during iteration: the block the iteration stood on left "
            "the queue",
        ),
        (
            lambda: messages.already_linked("append_n", TAIL),
            f"append_n(<tail sentinel at {id(TAIL):#x}>): it is a queue sentinel",
        ),
        (
            lambda: messages.not_linked("remove", HEAD),
            f"remove(<head sentinel at {id(HEAD):#x}>): it is a queue sentinel, which never "
            "leaves its queue",
        ),
        (
            lambda: messages.not_linked("iter_blocks_after", HEAD),
            f"iter_blocks_after(<head sentinel at {id(HEAD):#x}>): it is another queue's sentinel",
        ),
        (
            lambda: messages.not_linked("remove", NumberedBlock(3)),
            "remove(NumberedBlock(3)): it is not linked in a queue",
        ),
    ],
    # Named, not numbered by their messages: three messages hold an address, and test ids
    # must be the same in every process (pytest-xdist collects them once per worker).
    ids=[
        "lost-head-link",
        "lost-tail-link",
        "not-a-block-class",
        "not-a-block-value",
        "changed-during-iteration",
        "sentinel-appended",
        "sentinel-removed",
        "foreign-sentinel-iterated",
        "not-linked",
    ],
)
def test_each_message_builder_word_for_word(build: Callable[[], Exception], message: str) -> None:
    """Every error builder names the operation, the value and the reason in one fixed text."""
    assert str(build()) == message


def test_a_lost_inner_link_names_the_sentinel_linkage_family() -> None:
    """The violation for a destroyed sentinel link names the family its checkers report."""
    for sentinel in ("head", "tail"):
        error = messages.lost_inner_link("popleft", sentinel)
        assert isinstance(error, InvariantViolation)
        assert error.invariant == "sentinel_linkage"
        assert error.clause == "I1"


class HostileProxy:
    """A value whose ``__class__`` and every other attribute lookup raise ``KeyError``."""

    def __getattribute__(self, name: str) -> Any:
        if name == "__repr__":
            return object.__getattribute__(self, name)
        raise KeyError(name)

    def __repr__(self) -> str:
        return "HostileProxy()"


def test_builders_take_a_hostile_value_for_what_it_is() -> None:
    """A value whose lookups raise is no sentinel and has no links, and building never raises."""
    assert str(messages.already_linked("append", HostileProxy())) == (
        "append(HostileProxy()): it is already linked in a queue (a double free?)"
    )
    assert str(messages.not_a_block("remove", HostileProxy())) == (
        f"remove(HostileProxy()): {EXPECTED_A_BLOCK} HostileProxy"
    )
    # A batch's walk back that meets something without links stops there.
    block = NumberedBlock(1)
    assert str(messages.already_linked("append_n", block, 7, None)) == (
        "append_n(NumberedBlock(1)): it is already linked in a queue (a double free?)"
    )


def test_a_block_is_linkable_even_with_a_link_slot_deleted() -> None:
    """can_link asks the type first: a Block is linkable whatever outside code did to its slots."""
    block = Block()
    try:
        del block.prev_free_block
    except (AttributeError, TypeError):
        pytest.skip("this build's Block refuses to delete a link")
    assert messages.can_link(block)


class OneLinkRaises:
    """An object whose lookup of one named link raises ``ValueError``; the other is ``None``."""

    def __init__(self, raising: str) -> None:
        self.raising = raising

    def __getattr__(self, name: str) -> Any:
        if name == self.raising:
            raise ValueError(name)
        if name in ("prev_free_block", "next_free_block"):
            return None
        raise AttributeError(name)


@pytest.mark.parametrize("raising", ["prev_free_block", "next_free_block"])
def test_lookup_error_names_what_either_link_lookup_raises(raising: str) -> None:
    """The type a link lookup raises is returned, for either link; a missing link is no error."""
    assert messages.lookup_error(OneLinkRaises(raising)) is ValueError
    assert messages.lookup_error(Block()) is None
    assert messages.lookup_error(None) is None  # no links at all: AttributeError, not an error


def test_a_block_already_in_this_queue_is_a_double_free_in_a_batch_too() -> None:
    """A batch naming a block this very queue holds calls it a double free, not a repeat."""
    blocks = numbered(3)
    queue = FreeBlockQueue(blocks[:2])
    for operation in ("append_n", "prepend_n"):
        for batch in ([blocks[0]], [blocks[2], blocks[1]]):
            with pytest.raises(AlreadyInQueueError) as caught:
                getattr(queue, operation)(batch)
            assert str(caught.value) == (
                f"{operation}({batch[-1]!r}): it is already linked in a queue (a double free?)"
            )
    assert queue.get_all_free_blocks() == blocks[:2]


# ----------------------------------------------------------- through the operations


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("append", lambda q: q.append("x")),
        ("remove", lambda q: q.remove("x")),
        ("iter_blocks_after", lambda q: q.iter_blocks_after("x")),
        ("append_n", lambda q: q.append_n(["x"])),
        ("prepend_n", lambda q: q.prepend_n(["x"])),
    ],
)
def test_a_non_block_argument_is_named_in_the_message(
    operation: str, call: Callable[[FreeBlockQueue[Any]], object]
) -> None:
    """The refused argument itself, not a stand-in, is named after the operation."""
    blocks = numbered(2)
    queue = FreeBlockQueue(blocks)
    before = every_link(queue, blocks)
    with pytest.raises(WrongTypeError) as caught:
        call(queue)
    assert str(caught.value) == f"{operation}('x'): {EXPECTED_A_BLOCK} str"
    assert every_link(queue, blocks) == before


@pytest.mark.parametrize(
    ("operation", "sentinel"),
    [("append", "tail"), ("append_n", "tail"), ("prepend_n", "head"), ("popleft", "head")],
)
def test_a_lost_inner_link_raises_the_family_and_changes_nothing(
    operation: str, sentinel: str
) -> None:
    """An operation meeting a destroyed sentinel link raises sentinel_linkage and writes nothing."""
    blocks = numbered(2)
    queue = FreeBlockQueue(blocks)
    fresh = NumberedBlock(9)
    if sentinel == "tail":
        queue.fake_free_list_tail.prev_free_block = None
    else:
        queue.fake_free_list_head.next_free_block = None
    before = every_link(queue, [*blocks, fresh])
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: queue.append(fresh),
        "append_n": lambda: queue.append_n([fresh]),
        "prepend_n": lambda: queue.prepend_n([fresh]),
        "popleft": queue.popleft,
    }
    with pytest.raises(InvariantViolation) as caught:
        calls[operation]()
    assert caught.value.invariant == "sentinel_linkage"
    assert str(caught.value).startswith(f"{operation}(): the {sentinel} sentinel's ")
    assert every_link(queue, [*blocks, fresh]) == before


class DestroysWhenStaged:
    """A duck-typed block whose back link, once written, runs ``action`` (outside code)."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.next_free_block: Any = None
        self._prev: Any = None

    @property
    def prev_free_block(self) -> Any:
        """The back link."""
        return self._prev

    @prev_free_block.setter
    def prev_free_block(self, value: Any) -> None:
        self._prev = value
        if value is not None:
            self.action()


@pure_only  # the compiled queue's link writes to a Block run no code
@pytest.mark.parametrize(("operation", "sentinel"), [("append_n", "tail"), ("prepend_n", "head")])
def test_a_link_lost_while_a_batch_is_staged_is_named_and_unstaged(
    operation: str, sentinel: str
) -> None:
    """Outside code that destroys a sentinel's inner link mid-batch gets it named; nothing joins."""
    queue = FreeBlockQueue(numbered(2))

    def destroy() -> None:
        if sentinel == "tail":
            queue.fake_free_list_tail.prev_free_block = None
        else:
            queue.fake_free_list_head.next_free_block = None

    block = DestroysWhenStaged(destroy)
    with pytest.raises(InvariantViolation) as caught:
        getattr(queue, operation)([block])
    assert caught.value.invariant == "sentinel_linkage"
    assert str(caught.value).startswith(f"{operation}(): the {sentinel} sentinel's ")
    assert block.prev_free_block is None
    assert block.next_free_block is None
    assert queue.fake_free_list_tail.next_free_block is None
    assert len(queue) == 2


class Index:
    """An integer type that is not ``int``: it converts through ``__index__`` only."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_popleft_n_takes_a_count_through_index() -> None:
    """A count given as any ``__index__`` type pops that many blocks, front first."""
    blocks = numbered(3)
    queue = FreeBlockQueue(blocks)
    assert queue.popleft_n(Index(2)) == blocks[:2]
    assert len(queue) == 1


def test_popleft_n_names_a_count_that_is_not_an_integer() -> None:
    """A non-integer count is named by its repr and its type, and nothing is popped."""
    blocks = numbered(2)
    queue = FreeBlockQueue(blocks)
    with pytest.raises(WrongTypeError) as caught:
        queue.popleft_n("2")  # type: ignore[arg-type]  # deliberate
    assert str(caught.value) == "popleft_n('2'): the count must be an integer, not str"
    with pytest.raises(WrongTypeError) as caught:
        queue.popleft_n(False)
    assert str(caught.value) == "popleft_n(False): the count must be an integer, not a bool"
    assert queue.get_all_free_blocks() == blocks


# ------------------------------------------------------- which item a failed batch blames


@pure_only
@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_failed_batch_skips_a_linkable_non_block_when_blaming(operation: str) -> None:
    """A batch of a linkable non-Block then a string blames the string, the item it cannot link."""
    blocks = numbered(2)
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    linkable = Linkable()
    before = every_link(queue, [*blocks, linkable])
    with pytest.raises(WrongTypeError) as caught:
        getattr(queue, operation)([linkable, "x"])
    assert str(caught.value) == f"{operation}('x'): {EXPECTED_A_BLOCK} str"
    assert every_link(queue, [*blocks, linkable]) == before


@pure_only
@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_batch_failing_with_type_error_on_linkable_items_is_refused_whole(
    operation: str,
) -> None:
    """A TypeError from a block that has both links still raises WrongTypeError and undoes all."""
    blocks = numbered(2)
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    fresh = NumberedBlock(5)
    refusing = RefusingLinks()
    before = every_link(queue, [*blocks, fresh, refusing])
    with pytest.raises(WrongTypeError) as caught:
        getattr(queue, operation)([fresh, refusing])
    assert str(caught.value).startswith(f"{operation}(")
    assert every_link(queue, [*blocks, fresh, refusing]) == before


# ------------------------------------------------ popleft_n cut short at every step


class SteppedLinks:
    """A linkable block whose every link read and write is one step; step ``fire_at`` raises.

    With ``after`` set, a write is done before the step raises (an interrupt just after
    it); otherwise the step raises before it. A read raises instead of returning. The
    trap fires once, then disarms, so the undo runs on links that behave.
    """

    __slots__ = ("_next", "_prev", "number")

    fire_at: ClassVar[int] = -1
    after: ClassVar[bool] = False
    steps: ClassVar[int] = 0

    def __init__(self, number: int) -> None:
        self.number = number
        self._prev: SteppedLinks | None = None
        self._next: SteppedLinks | None = None

    @classmethod
    def _step(cls, write: Callable[[], None] | None = None) -> None:
        """Count a step, raising at the armed one before or after ``write``."""
        firing = cls.steps == cls.fire_at
        cls.steps += 1
        if firing and not cls.after:
            cls.fire_at = -1
            raise KeyboardInterrupt
        if write is not None:
            write()
        if firing:
            cls.fire_at = -1
            raise KeyboardInterrupt

    @property
    def prev_free_block(self) -> SteppedLinks | None:
        self._step()
        return self._prev

    @prev_free_block.setter
    def prev_free_block(self, value: SteppedLinks | None) -> None:
        self._step(lambda: setattr(self, "_prev", value))

    @property
    def next_free_block(self) -> SteppedLinks | None:
        self._step()
        return self._next

    @next_free_block.setter
    def next_free_block(self, value: SteppedLinks | None) -> None:
        self._step(lambda: setattr(self, "_next", value))


def popleft_n_interrupted(
    queue: FreeBlockQueue[Any], count: int, step: int, *, after: bool
) -> None:
    """Call ``popleft_n(count)`` with the trap at ``step``, and require the interrupt."""
    SteppedLinks.steps = 0
    SteppedLinks.fire_at = step
    SteppedLinks.after = after
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.popleft_n(count)
    finally:
        SteppedLinks.fire_at = -1


@pure_only
@pytest.mark.parametrize("after", [False, True], ids=["before-the-step", "after-the-step"])
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_popleft_n_interrupted_at_every_step_puts_every_block_back(count: int, after: bool) -> None:
    """An interrupt at any link access of popleft_n's loop restores every link and the count."""
    blocks = [SteppedLinks(i) for i in range(5)]
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    before = every_link(queue, blocks)
    # The loop reads each taken block's next link and clears both of its links: three steps
    # a block. The write after the loop (the first kept block's back link) is not undone:
    # a signal cannot interrupt a real Block's slot write, only a property's call.
    for step in range(3 * count):
        popleft_n_interrupted(queue, count, step, after=after)
        assert every_link(queue, blocks) == before, f"interrupted at step {step}"
    taken = queue.popleft_n(count)
    assert taken == blocks[:count]
    assert queue.get_all_free_blocks() == blocks[count:]
    assert all(b.prev_free_block is None and b.next_free_block is None for b in taken)


def test_a_sentinel_appended_is_refused_by_name() -> None:
    """Appending another queue's sentinel names it and says it is a sentinel."""
    tail = FreeBlockQueue[NumberedBlock]().fake_free_list_tail
    queue = FreeBlockQueue(numbered(1))
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(tail)  # type: ignore[arg-type]  # deliberate
    assert str(caught.value) == f"append(<tail sentinel at {id(tail):#x}>): it is a queue sentinel"


@pure_only
def test_popleft_n_interrupted_on_a_cut_run_leaves_the_cut_as_it_found_it() -> None:
    """An interrupt at the first read, on a run already cut by outside code, restores that cut."""
    blocks = [SteppedLinks(i) for i in range(3)]
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    blocks[0]._next = None  # outside code cut the chain after the front block
    before = every_link(queue, blocks)
    popleft_n_interrupted(queue, 2, 0, after=False)
    assert every_link(queue, blocks) == before


# ----------------------------------------------------------------- the hot path's costs


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_list_batch_is_linked_in_place_without_a_copy(operation: str) -> None:
    """A batch given as a list is not copied: linking it allocates far less than a copy would."""
    queue = FreeBlockQueue(numbered(2))
    batch = [Block() for _ in range(50_000)]
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        already = tracemalloc.get_traced_memory()[0]
        getattr(queue, operation)(batch)
        peak = tracemalloc.get_traced_memory()[1] - already
    finally:
        tracemalloc.stop()
    assert len(queue) == 50_002
    # A copy of the list would take a pointer per block: 8 bytes each, 400 kB here.
    assert peak < len(batch), f"{operation} allocated {peak} bytes for a list batch"


@pytest.mark.skipif(
    COMPILED, reason="compiled calls between module functions are bound, not looked up by name"
)
def test_popleft_n_takes_an_int_count_without_converting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exact int count skips the conversion call that other integer types go through."""

    def refuse(operation: str, n: object) -> int:
        raise AssertionError(f"{operation}({n!r}) converted its count")

    monkeypatch.setattr(queue_module, "count_argument", refuse)
    blocks = numbered(3)
    queue = FreeBlockQueue(blocks)
    assert queue.popleft_n(2) == blocks[:2]
    with pytest.raises(AssertionError, match="converted its count"):
        queue.popleft_n(Index(1))
