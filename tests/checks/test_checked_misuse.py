"""Check mode catches each class of misuse where it happens, with both queues unchanged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

import verified_queue
from tests.checks.support import (
    adaptive_default_only,
    checked,
    error_of,
    same,
)
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
    QueueError,
    WrongTypeError,
)
from verified_queue._messages import has_links
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    NO_DUPLICATES,
    SENTINEL_LINKAGE,
    check_invariants,
    is_block,
)
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue


def test_foreign_remove_rejected_unchanged() -> None:
    """remove() of a block linked in another queue raises NotInQueueError and changes nothing."""
    queue, blocks = checked(3)
    other, other_blocks = checked(3)
    with pytest.raises(NotInQueueError, match="linked in another queue"):
        queue.remove(other_blocks[1])
    assert same(queue.get_all_free_blocks(), blocks)
    assert same(other.get_all_free_blocks(), other_blocks)
    assert (len(queue), len(other)) == (3, 3)


def test_foreign_remove_corrupts_production() -> None:
    """The same call on production queues succeeds and leaves both counts wrong."""
    blocks = [Block() for _ in range(3)]
    other_blocks = [Block() for _ in range(3)]
    queue, other = FreeBlockQueue(blocks), FreeBlockQueue(other_blocks)
    queue.remove(other_blocks[1])
    for damaged in (queue, other):
        with pytest.raises(InvariantViolation) as caught:
            check_invariants(damaged)
        assert caught.value.invariant == COUNT_CONSISTENCY


def test_double_free_rejected_unchanged() -> None:
    """Appending a block that is already linked, alone or in a batch, raises AlreadyInQueueError."""
    queue, blocks = checked(3)
    fresh = Block()
    misuses: list[Callable[[], None]] = [
        lambda: queue.append(blocks[1]),
        lambda: queue.append_n([fresh, blocks[2]]),
        lambda: queue.append_n([fresh, fresh]),
    ]
    for misuse in misuses:
        with pytest.raises(AlreadyInQueueError):
            misuse()
        assert same(queue.get_all_free_blocks(), blocks)
        assert fresh.prev_free_block is None
        assert fresh.next_free_block is None


@adaptive_default_only
def test_double_free_of_cleared_block_caught() -> None:
    """A member whose links outside code cleared is refused by append, not linked a second time."""
    appends: list[Callable[[CheckedFreeBlockQueue[Block], Block], None]] = [
        lambda q, b: q.append(b),
        lambda q, b: q.append_n([b]),
    ]
    for append in appends:
        queue, blocks = checked(3)
        blocks[1].prev_free_block = blocks[1].next_free_block = None
        with pytest.raises(InvariantViolation, match="cleared by outside code") as caught:
            append(queue, blocks[1])
        assert caught.value.invariant == SENTINEL_LINKAGE
    # Production accepts it and ends up with the block twice in the walk's reach.
    blocks = [Block() for _ in range(3)]
    production = FreeBlockQueue(blocks)
    blocks[1].prev_free_block = blocks[1].next_free_block = None
    production.append(blocks[1])
    with pytest.raises(InvariantViolation):
        check_invariants(production)


@dataclass(frozen=True)
class _Corruption:
    """A hand-written link, and an operation that touches it next."""

    label: str
    write: Callable[[CheckedFreeBlockQueue[Block], list[Block]], None]
    operation: Callable[[CheckedFreeBlockQueue[Block], list[Block]], object]


CORRUPTIONS = [
    _Corruption(
        "front block's prev cleared",
        lambda _q, b: setattr(b[0], "prev_free_block", None),
        lambda q, _b: q.popleft(),
    ),
    _Corruption(
        "second block's prev skewed",
        lambda _q, b: setattr(b[1], "prev_free_block", b[3]),
        lambda q, _b: q.popleft(),
    ),
    _Corruption(
        "last block's next into another queue",
        lambda _q, b: setattr(
            b[4], "next_free_block", FreeBlockQueue([Block()]).fake_free_list_tail
        ),
        lambda q, _b: q.append(Block()),
    ),
    _Corruption(
        "tail's prev skipping a block",
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", b[3]),
        lambda q, _b: q.append_n([Block()]),
    ),
    _Corruption(
        "neighbour's next cleared",
        lambda _q, b: setattr(b[1], "next_free_block", None),
        lambda q, b: q.remove(b[2]),
    ),
    _Corruption(
        "run crosses a skewed link",
        lambda _q, b: setattr(b[3], "prev_free_block", b[0]),
        lambda q, _b: q.popleft_n(4),
    ),
    _Corruption(
        "front block's prev skewed before a prepend",
        lambda _q, b: setattr(b[0], "prev_free_block", b[2]),
        lambda q, _b: q.prepend_n([Block()]),
    ),
    _Corruption(
        "head's next into another queue before a prepend",
        lambda q, _b: setattr(
            q.fake_free_list_head, "next_free_block", FreeBlockQueue([Block()]).popleft()
        ),
        lambda q, _b: q.prepend_n([Block()]),
    ),
    _Corruption(
        "walk after a cursor crosses a skewed link",
        lambda _q, b: setattr(b[3], "prev_free_block", b[0]),
        lambda q, b: list(q.iter_blocks_after(b[1])),
    ),
    _Corruption(
        "ring closed from the back",
        lambda _q, b: setattr(b[4], "next_free_block", b[2]),
        lambda q, _b: q.append(Block()),
    ),
]


@adaptive_default_only
@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.label)
def test_link_corruption_caught_when_touched(
    corruption: _Corruption,
) -> None:
    """A hand-written link raises a violation at the next operation near it, writing nothing."""
    queue, blocks = checked(5)
    corruption.write(queue, blocks)
    links = [(b.prev_free_block, b.next_free_block) for b in blocks]
    with pytest.raises(InvariantViolation) as caught:
        corruption.operation(queue, blocks)
    assert caught.value.invariant == SENTINEL_LINKAGE
    assert all(
        (b.prev_free_block, b.next_free_block) == link
        for b, link in zip(blocks, links, strict=True)
    )


def test_far_corruption_caught_by_full_check() -> None:
    """Damage beyond the O(1) checks' reach is caught within full_check_every operations."""
    queue, blocks = checked(10, full_check_every=50)
    queue.full_check()  # start a fresh period
    blocks[5].prev_free_block = blocks[2]
    family = None
    operations = 0
    while operations < 100 and family is None:
        try:
            queue.append(Block())  # the back is healthy: only the full check sees the damage
        except InvariantViolation as violation:
            family = violation.invariant
        else:
            operations += 1
    assert family == SENTINEL_LINKAGE
    assert operations == 49  # the 50th operation since the last full check runs it first


def test_period_one_catches_far_corruption() -> None:
    """With full_check_every=1 the next operation of any kind raises, before it acts."""
    queue, blocks = checked(10, full_check_every=1)
    blocks[5].prev_free_block = blocks[2]
    with pytest.raises(InvariantViolation):
        queue.append(Block())
    assert len(queue) == 10


@pytest.mark.parametrize("drift", [-1, 1, 5])
def test_count_drift_caught_next_operation(drift: int) -> None:
    """An overwritten count raises count_consistency at the next operation, even len()."""
    operations: list[Callable[[CheckedFreeBlockQueue[Block], list[Block]], object]] = [
        lambda q, _b: len(q),
        lambda q, _b: bool(q),
        lambda q, _b: q.popleft(),
        lambda q, _b: q.popleft_n(1),
        lambda q, b: q.remove(b[2]),
        lambda q, _b: q.append(Block()),
        lambda q, _b: q.append_n([]),
        lambda q, _b: list(q),
    ]
    for operation in operations:
        queue, blocks = checked(4)
        queue.num_free_blocks += drift
        with pytest.raises(InvariantViolation, match="num_free_blocks") as caught:
            operation(queue, blocks)
        assert caught.value.invariant == COUNT_CONSISTENCY


@adaptive_default_only
def test_spliced_block_named_by_remove_and_check() -> None:
    """A block linked in by hand, count adjusted, is no member: remove and full_check say so."""
    queue, blocks = checked(3)
    intruder = Block()
    intruder.prev_free_block, intruder.next_free_block = blocks[0], blocks[1]
    blocks[0].next_free_block = blocks[1].prev_free_block = intruder
    with pytest.raises(InvariantViolation, match="linked in by outside code") as caught:
        queue.remove(intruder)
    assert caught.value.invariant == NO_DUPLICATES
    queue.num_free_blocks += 1
    placeholder = Block()
    queue._members[id(placeholder)] = placeholder  # keeps the O(1) count check quiet
    with pytest.raises(InvariantViolation, match="linked in by outside code") as caught:
        queue.full_check()
    assert caught.value.invariant == NO_DUPLICATES


def test_foreign_cursor_rejected() -> None:
    """iter_blocks_after refuses another queue's block in O(1); production walks into it."""
    queue, _ = checked(3)
    other, foreign = checked(2)
    with pytest.raises(NotInQueueError, match="linked in another queue"):
        queue.iter_blocks_after(foreign[0])
    # Production cannot tell in O(1): it walks the other queue and stops at its tail.
    walk = FreeBlockQueue.iter_blocks_after(queue, foreign[0])
    assert next(walk) is foreign[1]
    with pytest.raises(NotInQueueError, match="changed during iteration"):
        next(walk)
    other.full_check()


def test_prepend_n_double_free_rejected() -> None:
    """A batch holding a block of another queue is refused whole, as in production."""
    queue, blocks = checked(2)
    other, foreign = checked(1)
    fresh = Block()
    with pytest.raises(AlreadyInQueueError, match=r"^prepend_n\("):
        queue.prepend_n([fresh, foreign[0]])
    assert fresh.prev_free_block is None
    assert fresh.next_free_block is None
    assert queue.get_all_free_blocks() == blocks
    assert other.get_all_free_blocks() == foreign


def test_check_mode_takes_own_links_block() -> None:
    """Check mode and the checkers accept vLLM's block shape (not a Block) in the pure build."""

    @dataclass(slots=True)
    class OwnLinks:
        block_id: int
        prev_free_block: OwnLinks | None = None
        next_free_block: OwnLinks | None = None

    if verified_queue.COMPILED:
        pytest.skip("the compiled queue takes Block subclasses only")
    blocks = [OwnLinks(i) for i in range(4)]
    queue = CheckedFreeBlockQueue(blocks[:3], full_check_every=1)
    queue.prepend_n([blocks[3]])
    queue.remove(blocks[1])
    assert list(queue.iter_blocks_after(blocks[0])) == [blocks[2]]
    check_invariants(queue, pool=[b for b in blocks if b is not blocks[1]])
    blocks[2].prev_free_block = blocks[3]
    with pytest.raises(InvariantViolation):
        queue.full_check()


@pytest.mark.parametrize(
    "argument", [None, 5, "block", object()], ids=["None", "5", "str", "object"]
)
def test_non_block_gets_production_error(argument: object) -> None:
    """remove, iter_blocks_after, append and the batches refuse a non-block as production does."""
    calls: list[Callable[[FreeBlockQueue[Any]], object]] = [
        lambda q: q.remove(argument),
        lambda q: q.iter_blocks_after(argument),
        lambda q: q.append(argument),
        lambda q: q.append_n([Block(), argument]),
        lambda q: q.prepend_n([argument]),
        lambda q: q.popleft_n(argument),  # type: ignore[arg-type]  # the misuse under test
    ]
    for call in calls:
        if argument is None and call is calls[1]:
            continue  # None is the front cursor
        errors = []
        for queue_class in (FreeBlockQueue, CheckedFreeBlockQueue):
            blocks = [Block(), Block()]
            queue: FreeBlockQueue[Any] = queue_class(blocks)
            errors.append(error_of(partial(call, queue)))
            assert same(queue.get_all_free_blocks(), blocks)
        production, check_mode = errors
        assert type(check_mode) is type(production)
        assert str(check_mode) == str(production)


@pytest.mark.parametrize("method", ["append_n", "prepend_n"])
def test_a_batch_that_is_not_iterable_gets_the_production_refusal(method: str) -> None:
    """A batch that is not iterable is refused word for word as the production queue refuses it."""
    blocks = [Block()]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    with pytest.raises(WrongTypeError) as caught:
        getattr(queue, method)(7)
    assert str(caught.value) == f"{method}(7): expected an iterable of blocks, got int"
    with pytest.raises(WrongTypeError) as production:
        getattr(FreeBlockQueue([Block()]), method)(7)
    assert str(production.value) == str(caught.value)
    assert queue.get_all_free_blocks() == blocks


class _OneLink:
    """An object with a ``next_free_block`` and no ``prev_free_block``: not a block."""

    next_free_block = None


@pytest.mark.parametrize("name", ["append_n", "prepend_n"])
@pytest.mark.parametrize(
    "order", ["not a block, then linked", "linked, then not a block", "one link, then detached"]
)
def test_a_mixed_batch_is_refused_for_its_first_bad_item_as_production_does(
    name: str, order: str
) -> None:
    """A non-block and a linked block in one batch: the error of whichever comes first."""
    errors = []
    for cls in (FreeBlockQueue, CheckedFreeBlockQueue):
        blocks = [Block() for _ in range(3)]
        queue = cls(blocks[:2])
        batch: list[Any] = {
            "not a block, then linked": [5, blocks[0]],
            "linked, then not a block": [blocks[0], 5],
            "one link, then detached": [_OneLink(), blocks[2]],
        }[order]
        with pytest.raises(QueueError) as caught:
            getattr(queue, name)(batch)
        errors.append((type(caught.value), str(caught.value).split(" at 0x")[0]))
        assert queue.get_all_free_blocks() == blocks[:2]
    assert errors[0] == errors[1]
    assert errors[0][0] is (AlreadyInQueueError if order.startswith("linked") else WrongTypeError)


def test_a_block_has_both_links_or_none_that_count() -> None:
    """The one definition of "has the two links": one link is not enough, a raising lookup none."""

    class RaisingLookup:
        def __getattr__(self, name: str) -> object:
            raise KeyError(name)

    assert has_links(Block())
    assert not has_links(_OneLink())
    assert not has_links(object())
    assert not has_links(RaisingLookup())


class _PrevOnly:
    """An object with a ``prev_free_block`` and no ``next_free_block``: not a block either."""

    prev_free_block = None


_ONE_LINK = pytest.mark.parametrize("kind", [_PrevOnly, _OneLink], ids=["prev only", "next only"])
_EVERY_QUEUE = pytest.mark.parametrize(
    "queue_type",
    [FreeBlockQueue, CheckedFreeBlockQueue, TracedFreeBlockQueue],
    ids=["production", "checked", "traced"],
)


@_ONE_LINK
def test_one_link_either_way_is_not_a_block(kind: type) -> None:
    """``has_links`` and ``is_block`` need both links, whichever one is missing."""
    assert not has_links(kind())
    assert not is_block(kind())


@_ONE_LINK
@_EVERY_QUEUE
@pytest.mark.parametrize(
    "call",
    [
        "append",
        "remove",
        "append_n",
        "prepend_n",
        "append_n after a detached block",
        "constructor",
    ],
)
def test_an_object_with_one_link_is_refused_by_every_entry_point(
    kind: type, queue_type: type[Any], call: str
) -> None:
    """Every entry point that asks ``has_links`` refuses an object with one link as no block.

    With either link missing, on every queue: a ``WrongTypeError`` that says a block was
    expected (not the compiled build's "subclass Block"), the queue and the object as they were.
    """
    blocks = [Block() for _ in range(3)]
    value = kind()
    queue = queue_type(blocks[:2])
    operations: dict[str, Callable[[], object]] = {
        "append": lambda: queue.append(value),
        "remove": lambda: queue.remove(value),
        "append_n": lambda: queue.append_n([value]),
        "prepend_n": lambda: queue.prepend_n([value]),
        "append_n after a detached block": lambda: queue.append_n([blocks[2], value]),
        "constructor": lambda: queue_type([blocks[2], value]),
    }
    with pytest.raises(WrongTypeError, match="expected a block") as caught:
        operations[call]()
    assert "subclass verified_queue.Block" not in str(caught.value)
    assert queue.get_all_free_blocks() == blocks[:2]
    assert blocks[2].prev_free_block is None
    assert blocks[2].next_free_block is None
    assert vars(value) == {}
    check_invariants(queue)


class _RaisingEverywhere:
    """A value whose every attribute lookup raises KeyError, written where the queue reads."""

    def __getattribute__(self, name: str) -> object:
        raise KeyError(name)


_CHANGED_UNDER_THE_CHECK = (
    "I1 (sentinel_linkage) broken at the walk: the links the check read: expected the same "
    "links when read again, found KeyError: '__class__' (the queue changed while it was being "
    "checked: another thread, or a finalizer?)"
)


_TYPED_FIELDS = pytest.mark.skipif(
    verified_queue.COMPILED, reason="the compiled queue's fields refuse such a value when written"
)


@_TYPED_FIELDS
def test_a_sentinel_whose_lookups_raise_is_damage_to_the_full_check() -> None:
    """Not a raw KeyError: the full check's own walk is the diagnosis, naming what was raised."""
    queue, _ = checked(3)
    head = queue.fake_free_list_head
    queue.fake_free_list_head = _RaisingEverywhere()  # type: ignore[assignment]  # damage
    with pytest.raises(InvariantViolation) as caught:
        queue.full_check()
    assert str(caught.value) == _CHANGED_UNDER_THE_CHECK
    queue.fake_free_list_head = head
    queue.full_check()


@_TYPED_FIELDS
def test_a_count_whose_lookups_raise_is_damage_to_iter_blocks_after() -> None:
    """The same for the count iter_blocks_after tests first."""
    queue, _ = checked(3)
    queue.num_free_blocks = _RaisingEverywhere()  # type: ignore[assignment]  # damage
    with pytest.raises(InvariantViolation) as caught:
        queue.iter_blocks_after(None)
    assert str(caught.value) == _CHANGED_UNDER_THE_CHECK
