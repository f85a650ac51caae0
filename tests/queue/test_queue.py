"""Unit tests of FreeBlockQueue: every operation, every error path, atomicity after each error."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from typing_extensions import assert_type

from tests.helpers import NumberedBlock, numbered, numbers, snapshot
from verified_queue import (
    AlreadyInQueueError,
    Block,
    EmptyQueueError,
    FreeBlockQueue,
    InvariantViolation,
    NegativeCountError,
    NotInQueueError,
    QueueError,
    WrongTypeError,
)
from verified_queue.block import Sentinel


def make(count: int) -> tuple[FreeBlockQueue[NumberedBlock], list[NumberedBlock]]:
    """Return a queue of ``count`` fresh blocks and the blocks, front first."""
    blocks = numbered(count)
    return FreeBlockQueue(blocks), blocks


def assert_chain(queue: FreeBlockQueue[NumberedBlock], expected: list[NumberedBlock]) -> None:
    """Assert that the queue links exactly ``expected`` between its sentinels, both ways."""
    chain = [queue.fake_free_list_head, *expected, queue.fake_free_list_tail]
    assert queue.fake_free_list_head.prev_free_block is None
    assert queue.fake_free_list_tail.next_free_block is None
    for before, after in itertools.pairwise(chain):
        assert before.next_free_block is after
        assert after.prev_free_block is before
    assert queue.num_free_blocks == len(expected) == len(queue)
    assert numbers(queue.get_all_free_blocks()) == numbers(expected)


def assert_detached(*blocks: Block) -> None:
    """Assert that every block has both links cleared."""
    for block in blocks:
        assert block.prev_free_block is None
        assert block.next_free_block is None


@pytest.mark.parametrize("count", [0, 1, 2, 7])
def test_constructor_links_blocks_front_to_back(count: int) -> None:
    """The constructor links the given blocks in order between two fresh sentinels."""
    queue, blocks = make(count)
    assert_chain(queue, blocks)
    assert bool(queue) is (count > 0)


def test_constructor_accepts_any_iterable() -> None:
    """A generator, a tuple and the default empty argument all build the same kind of queue."""
    blocks = numbered(3)
    assert_chain(FreeBlockQueue(block for block in blocks[:2]), blocks[:2])
    assert_chain(FreeBlockQueue((blocks[2],)), [blocks[2]])
    assert_chain(FreeBlockQueue(), [])


def test_each_queue_has_its_own_sentinels() -> None:
    """Two queues never share a sentinel, and sentinels are Sentinel instances."""
    first, second = FreeBlockQueue[Block](), FreeBlockQueue[Block]()
    sentinels = [
        first.fake_free_list_head,
        first.fake_free_list_tail,
        second.fake_free_list_head,
        second.fake_free_list_tail,
    ]
    assert len({id(s) for s in sentinels}) == 4
    assert all(isinstance(s, Sentinel) for s in sentinels)


def test_popleft_returns_front_block_detached() -> None:
    """popleft() returns the front block with both links cleared and shortens the queue."""
    queue, blocks = make(3)
    popped = queue.popleft()
    assert popped is blocks[0]
    assert_detached(popped)
    assert_chain(queue, blocks[1:])


def test_popleft_drains_in_fifo_order() -> None:
    """Repeated popleft() yields the blocks in the order they were linked."""
    queue, blocks = make(5)
    drained = [queue.popleft() for _ in range(5)]
    assert numbers(drained) == numbers(blocks)
    assert_chain(queue, [])


def test_popleft_on_empty_queue_raises_and_changes_nothing() -> None:
    """popleft() on empty raises EmptyQueueError (IndexError, ValueError) with vLLM's message."""
    queue, _ = make(0)
    before = snapshot(queue, [])
    with pytest.raises(EmptyQueueError, match=r"^No free blocks available$") as caught:
        queue.popleft()
    assert isinstance(caught.value, IndexError)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, QueueError)
    assert snapshot(queue, []) == before


@pytest.mark.parametrize(("count", "n"), [(0, 0), (3, 0), (3, 1), (3, 2), (3, 3), (10, 7)])
def test_popleft_n_pops_the_first_n_in_order(count: int, n: int) -> None:
    """popleft_n(n) returns the first n blocks in order, detached, and keeps the rest linked."""
    queue, blocks = make(count)
    popped = queue.popleft_n(n)
    assert numbers(popped) == numbers(blocks[:n])
    assert all(a is b for a, b in zip(popped, blocks, strict=False))
    assert_detached(*popped)
    assert_chain(queue, blocks[n:])


@pytest.mark.parametrize(("count", "n"), [(0, 1), (3, 4), (3, 100)])
def test_popleft_n_too_many_raises_and_changes_nothing(count: int, n: int) -> None:
    """popleft_n(n) with n > len raises EmptyQueueError naming both numbers; nothing changes."""
    queue, blocks = make(count)
    before = snapshot(queue, blocks)
    with pytest.raises(EmptyQueueError, match=rf"popleft_n\({n}\).* {count} free blocks"):
        queue.popleft_n(n)
    assert snapshot(queue, blocks) == before


@pytest.mark.parametrize("n", [-1, -5])
def test_popleft_n_negative_raises_and_changes_nothing(n: int) -> None:
    """popleft_n(n) with n < 0 raises NegativeCountError, a QueueError and a ValueError."""
    queue, blocks = make(3)
    before = snapshot(queue, blocks)
    with pytest.raises(NegativeCountError, match="negative") as caught:
        queue.popleft_n(n)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, QueueError)
    assert snapshot(queue, blocks) == before


@pytest.mark.parametrize("position", [0, 2, 4])
def test_remove_detaches_block_from_anywhere(position: int) -> None:
    """remove() unlinks a block at the front, middle or back and bridges its neighbours."""
    queue, blocks = make(5)
    queue.remove(blocks[position])
    assert_detached(blocks[position])
    assert_chain(queue, blocks[:position] + blocks[position + 1 :])


def test_remove_only_block() -> None:
    """remove() of the only block leaves the sentinels linked to each other."""
    queue, blocks = make(1)
    queue.remove(blocks[0])
    assert_chain(queue, [])


def test_remove_detached_block_raises_and_changes_nothing() -> None:
    """remove() of a detached block raises NotInQueueError naming the block; nothing changes."""
    queue, blocks = make(3)
    stranger = NumberedBlock(99)
    before = snapshot(queue, [*blocks, stranger])
    with pytest.raises(NotInQueueError, match=r"NumberedBlock\(99\)") as caught:
        queue.remove(stranger)
    assert isinstance(caught.value, ValueError)
    assert snapshot(queue, [*blocks, stranger]) == before


def test_remove_twice_raises_the_second_time() -> None:
    """A second remove() of the same block is rejected: it is detached by then."""
    queue, blocks = make(3)
    queue.remove(blocks[1])
    with pytest.raises(NotInQueueError):
        queue.remove(blocks[1])
    assert_chain(queue, [blocks[0], blocks[2]])


@pytest.mark.parametrize("which", ["own head", "own tail", "other head", "other tail"])
def test_remove_of_a_sentinel_raises_and_changes_nothing(which: str) -> None:
    """remove() refuses any queue's sentinel, and neither queue changes."""
    queue, blocks = make(2)
    other, other_blocks = make(2)
    sentinel = {
        "own head": queue.fake_free_list_head,
        "own tail": queue.fake_free_list_tail,
        "other head": other.fake_free_list_head,
        "other tail": other.fake_free_list_tail,
    }[which]
    before = (snapshot(queue, blocks), snapshot(other, other_blocks))
    with pytest.raises(NotInQueueError, match="sentinel"):
        queue.remove(sentinel)  # type: ignore[arg-type]  # a sentinel is deliberately the wrong type
    assert (snapshot(queue, blocks), snapshot(other, other_blocks)) == before


def test_append_links_block_at_the_back() -> None:
    """append() links a detached block after the last one."""
    queue, blocks = make(2)
    newcomer = NumberedBlock(2)
    queue.append(newcomer)
    assert_chain(queue, [*blocks, newcomer])


def test_append_to_empty_queue() -> None:
    """append() on an empty queue makes the block both first and last."""
    queue, _ = make(0)
    block = NumberedBlock(0)
    queue.append(block)
    assert_chain(queue, [block])


@pytest.mark.parametrize("position", [0, 1, 2])
def test_append_of_linked_block_is_a_double_free(position: int) -> None:
    """append() of a block already in this queue raises AlreadyInQueueError; nothing changes."""
    queue, blocks = make(3)
    before = snapshot(queue, blocks)
    with pytest.raises(AlreadyInQueueError, match=rf"NumberedBlock\({position}\).*double free"):
        queue.append(blocks[position])
    assert snapshot(queue, blocks) == before


def test_append_of_block_linked_in_another_queue_raises() -> None:
    """append() of a block linked in a different queue raises; neither queue changes."""
    queue, blocks = make(2)
    other, other_blocks = make(2)
    before = (snapshot(queue, blocks), snapshot(other, other_blocks))
    with pytest.raises(AlreadyInQueueError):
        queue.append(other_blocks[1])
    assert (snapshot(queue, blocks), snapshot(other, other_blocks)) == before


@pytest.mark.parametrize("which", ["own head", "own tail", "other head", "other tail"])
def test_append_of_a_sentinel_raises_and_changes_nothing(which: str) -> None:
    """append() refuses any queue's sentinel, naming it as a sentinel; neither queue changes."""
    queue, blocks = make(2)
    other, other_blocks = make(0)
    sentinel = {
        "own head": queue.fake_free_list_head,
        "own tail": queue.fake_free_list_tail,
        "other head": other.fake_free_list_head,
        "other tail": other.fake_free_list_tail,
    }[which]
    before = (snapshot(queue, blocks), snapshot(other, other_blocks))
    with pytest.raises(AlreadyInQueueError, match="is a queue sentinel"):
        queue.append(sentinel)  # type: ignore[arg-type]  # a sentinel is deliberately the wrong type
    assert (snapshot(queue, blocks), snapshot(other, other_blocks)) == before


def test_append_n_extends_in_order() -> None:
    """append_n() links a batch at the back in order, like list.extend."""
    queue, blocks = make(2)
    batch = [NumberedBlock(n) for n in (5, 3, 4)]
    queue.append_n(batch)
    assert_chain(queue, blocks + batch)


@pytest.mark.parametrize("kind", ["list", "tuple", "generator", "reversed"])
def test_append_n_accepts_any_iterable(kind: str) -> None:
    """append_n() takes a list, a tuple, a generator or a reversed view alike."""
    queue, _ = make(0)
    batch = numbered(4)
    sources: dict[str, Callable[[], Iterable[NumberedBlock]]] = {
        "list": lambda: list(batch),
        "tuple": lambda: tuple(batch),
        "generator": lambda: (block for block in batch),
        "reversed": lambda: reversed(batch),
    }
    source = sources[kind]()
    queue.append_n(source)
    assert_chain(queue, batch[::-1] if kind == "reversed" else batch)


def test_append_n_of_nothing_changes_nothing() -> None:
    """append_n([]) leaves the queue exactly as it was."""
    queue, blocks = make(3)
    before = snapshot(queue, blocks)
    queue.append_n([])
    assert snapshot(queue, blocks) == before


@pytest.mark.parametrize("bad_position", [0, 1, 3])
def test_append_n_with_linked_block_rejects_whole_batch(bad_position: int) -> None:
    """A linked block anywhere in a batch rejects it all: the queue and the blocks are as before."""
    queue, blocks = make(3)
    batch: list[NumberedBlock] = numbered(3)
    batch.insert(bad_position, blocks[1])
    universe = [*blocks, *batch]
    before = snapshot(queue, universe)
    with pytest.raises(AlreadyInQueueError, match=r"append_n\(NumberedBlock\(1\)\)"):
        queue.append_n(batch)
    assert snapshot(queue, universe) == before
    assert_detached(*(b for b in batch if b is not blocks[1]))


@pytest.mark.parametrize("batch_shape", [[0, 0], [0, 1, 0], [0, 1, 2, 2], [0, 1, 2, 1]])
def test_append_n_with_repeated_block_rejects_whole_batch(batch_shape: list[int]) -> None:
    """A block repeated within one batch is refused as repeated there: nothing is linked."""
    queue, blocks = make(2)
    fresh = numbered(3)
    batch = [fresh[i] for i in batch_shape]
    before = snapshot(queue, [*blocks, *fresh])
    repeated = batch_shape[-1]
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append_n(batch)
    # The message itself, str(error): pytest's match= reads the error's notes too, where the
    # trace level adds its history lines (Python 3.11+), which str(error) leaves out.
    assert str(caught.value) == f"append_n(NumberedBlock({repeated})): it is repeated in the batch"
    assert snapshot(queue, [*blocks, *fresh]) == before


@pytest.mark.parametrize("which", ["own head", "own tail", "other tail"])
def test_append_n_with_sentinel_rejects_whole_batch(which: str) -> None:
    """A sentinel in the batch rejects it all and leaves both queues as before."""
    queue, blocks = make(1)
    other, _ = make(0)
    sentinel = {
        "own head": queue.fake_free_list_head,
        "own tail": queue.fake_free_list_tail,
        "other tail": other.fake_free_list_tail,
    }[which]
    fresh = numbered(2)
    before = snapshot(queue, [*blocks, *fresh])
    with pytest.raises(AlreadyInQueueError, match="sentinel"):
        queue.append_n([fresh[0], sentinel, fresh[1]])  # type: ignore[list-item]  # deliberate
    assert snapshot(queue, [*blocks, *fresh]) == before


def test_append_n_with_non_block_undoes_and_raises() -> None:
    """A non-block fails the batch with WrongTypeError naming it, and links nothing."""
    queue, blocks = make(1)
    fresh = numbered(2)
    before = snapshot(queue, [*blocks, *fresh])
    with pytest.raises(WrongTypeError, match=r"append_n\(<object object at 0x[0-9a-f]+>\)"):
        queue.append_n([fresh[0], object(), fresh[1]])  # type: ignore[list-item]  # deliberate
    assert snapshot(queue, [*blocks, *fresh]) == before


def test_append_n_with_failing_iterator_links_nothing() -> None:
    """An iterator that raises half-way leaves the queue and the blocks it yielded as before."""
    queue, blocks = make(1)
    fresh = numbered(2)

    def yields_then_fails() -> Iterator[NumberedBlock]:
        yield from fresh
        raise RuntimeError("source failed")

    before = snapshot(queue, [*blocks, *fresh])
    with pytest.raises(RuntimeError, match="source failed"):
        queue.append_n(yields_then_fails())
    assert snapshot(queue, [*blocks, *fresh]) == before


@pytest.mark.parametrize(
    "bad_batch",
    [
        pytest.param("linked", id="linked block"),
        pytest.param("repeated", id="repeated block"),
        pytest.param("sentinel", id="sentinel"),
    ],
)
def test_constructor_rejects_bad_batch_and_leaves_blocks_alone(bad_batch: str) -> None:
    """The constructor rejects a linked, repeated or sentinel block and leaves every block as is."""
    owner, linked = make(2)
    fresh = numbered(3)
    culprit: Block = {
        "linked": linked[0],
        "repeated": fresh[0],
        "sentinel": owner.fake_free_list_tail,
    }[bad_batch]
    before = snapshot(owner, [*linked, *fresh])
    with pytest.raises(AlreadyInQueueError):
        FreeBlockQueue([*fresh, culprit])
    assert snapshot(owner, [*linked, *fresh]) == before
    assert_detached(*fresh)


def test_walk_of_popleft_remove_append_checks_every_link() -> None:
    """A popleft/remove/append walk keeps every link right at every step."""
    queue, blocks = make(5)
    assert queue.popleft() is blocks[0]
    assert_chain(queue, blocks[1:])
    queue.remove(blocks[2])
    assert_chain(queue, [blocks[1], blocks[3], blocks[4]])
    queue.append(blocks[2])
    assert_chain(queue, [blocks[1], blocks[3], blocks[4], blocks[2]])
    queue.append(blocks[0])
    assert_chain(queue, [blocks[1], blocks[3], blocks[4], blocks[2], blocks[0]])
    for expected in (1, 3, 4, 2, 0):
        assert queue.popleft() is blocks[expected]
    assert_chain(queue, [])
    with pytest.raises(EmptyQueueError):
        queue.popleft()


def test_batches_round_trip() -> None:
    """popleft_n then append_n of the result rotates the queue, as in an allocator."""
    queue, blocks = make(6)
    taken = queue.popleft_n(4)
    assert_chain(queue, blocks[4:])
    queue.append_n(taken)
    assert_chain(queue, blocks[4:] + blocks[:4])
    assert queue.popleft_n(6) == blocks[4:] + blocks[:4]
    assert_chain(queue, [])


def test_get_all_free_blocks_returns_a_new_list() -> None:
    """get_all_free_blocks() returns a fresh list each call; changing it leaves the queue alone."""
    queue, blocks = make(3)
    first = queue.get_all_free_blocks()
    first.clear()
    assert queue.get_all_free_blocks() == blocks
    assert queue.get_all_free_blocks() is not queue.get_all_free_blocks()


def test_iteration_and_membership_use_identity() -> None:
    """iter() walks front to back and ``in`` tests identity, not equality."""
    queue, blocks = make(3)
    assert [b is o for b, o in zip(queue, blocks, strict=True)] == [True] * 3
    assert blocks[1] in queue
    assert NumberedBlock(1) not in queue
    assert queue.fake_free_list_head not in queue


@pytest.mark.production_only  # names the production class
def test_repr_is_short_and_counts() -> None:
    """repr(queue) names the class and the count, never the blocks."""
    queue, _ = make(100)
    assert repr(queue) == "<FreeBlockQueue with 100 free blocks>"


def test_subscripted_class_works_at_run_time() -> None:
    """FreeBlockQueue[NumberedBlock](...) builds an ordinary queue."""
    blocks = numbered(2)
    queue = FreeBlockQueue[NumberedBlock](blocks)
    assert type(queue) is FreeBlockQueue
    assert queue.popleft() is blocks[0]


def test_num_free_blocks_tracks_len_through_every_operation() -> None:
    """num_free_blocks equals len() after every kind of operation."""
    queue, blocks = make(8)
    steps: list[Callable[[], object]] = [
        queue.popleft,
        lambda: queue.popleft_n(2),
        lambda: queue.remove(blocks[5]),
        lambda: queue.append(blocks[0]),
        lambda: queue.append_n([blocks[1], blocks[2]]),
    ]
    expected = [7, 5, 4, 5, 7]
    for step, count in zip(steps, expected, strict=True):
        step()
        assert queue.num_free_blocks == len(queue) == count == len(queue.get_all_free_blocks())


def test_static_types_follow_the_block_type() -> None:
    """Results are typed as the queue's block type (checked by mypy --strict via assert_type)."""
    queue = FreeBlockQueue[NumberedBlock](numbered(4))
    first = assert_type(queue.popleft(), NumberedBlock)
    batch = assert_type(queue.popleft_n(2), list[NumberedBlock])
    rest = assert_type(queue.get_all_free_blocks(), list[NumberedBlock])
    assert (first.number, numbers(batch), numbers(rest)) == (0, [1, 2], [3])


# ------------------------------------------------------------------ prepend_n


@pytest.mark.parametrize(("count", "batch"), [(0, 0), (0, 3), (1, 1), (3, 2), (4, 0)])
def test_prepend_n_links_batch_at_front_in_order(count: int, batch: int) -> None:
    """prepend_n([a, b]) makes the queue start a, b and then the old front."""
    queue, blocks = make(count)
    fresh = [NumberedBlock(100 + i) for i in range(batch)]
    queue.prepend_n(fresh)
    assert_chain(queue, [*fresh, *blocks])


def test_prepend_n_takes_any_iterable() -> None:
    """A generator batch is drained once and linked in order, like a list."""
    queue, blocks = make(2)
    fresh = numbered(3)
    queue.prepend_n(block for block in fresh)
    assert_chain(queue, [*fresh, *blocks])


def test_prepend_n_blocks_leave_first_by_popleft() -> None:
    """The prepended blocks are the next ones popleft hands out (vLLM's LIFO reuse)."""
    queue, blocks = make(3)
    fresh = numbered(2)
    queue.prepend_n(fresh)
    assert queue.popleft_n(2) == fresh
    assert_chain(queue, blocks)


@pytest.mark.parametrize("bad", ["linked", "repeat", "head", "tail", "front"])
def test_prepend_n_refusal_changes_nothing(bad: str) -> None:
    """A linked block, a repeat, a sentinel or the old front refuses the whole batch."""
    queue, blocks = make(3)
    other, others = make(2)
    fresh = numbered(2)
    offender: Block = {
        "linked": others[0],
        "repeat": fresh[0],
        "head": queue.fake_free_list_head,
        "tail": queue.fake_free_list_tail,
        "front": blocks[0],
    }[bad]
    universe = [*blocks, *others, *fresh, other.fake_free_list_head, other.fake_free_list_tail]
    before = snapshot(queue, universe)
    with pytest.raises(AlreadyInQueueError, match=r"^prepend_n\("):
        queue.prepend_n([fresh[0], offender, fresh[1]])  # type: ignore[list-item]  # deliberate
    assert snapshot(queue, universe) == before
    assert_detached(*fresh)


def test_prepend_n_with_failing_iterator_links_nothing() -> None:
    """An iterator that raises half-way leaves the queue and the blocks it yielded as before."""
    queue, blocks = make(1)
    fresh = numbered(2)

    def failing() -> Iterator[NumberedBlock]:
        yield fresh[0]
        raise KeyError("source failed")

    with pytest.raises(KeyError):
        queue.prepend_n(failing())
    assert_chain(queue, blocks)
    assert_detached(*fresh)


@pytest.mark.parametrize("operation", ["append", "append_n", "prepend_n", "popleft", "popleft_n"])
def test_lost_inner_sentinel_link_raises_invariant_violation(operation: str) -> None:
    """A sentinel whose inner link was cleared gives InvariantViolation, nothing changed."""
    queue, blocks = make(2)
    fresh = NumberedBlock(9)
    if operation in ("append", "append_n"):
        queue.fake_free_list_tail.prev_free_block = None
    else:
        queue.fake_free_list_head.next_free_block = None
    universe = [*blocks, fresh]
    before = snapshot(queue, universe)
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: queue.append(fresh),
        "append_n": lambda: queue.append_n([fresh]),
        "prepend_n": lambda: queue.prepend_n([fresh]),
        "popleft": queue.popleft,
        "popleft_n": lambda: queue.popleft_n(1),
    }
    with pytest.raises(InvariantViolation, match="sentinel") as caught:
        calls[operation]()
    assert isinstance(caught.value, AssertionError)
    assert caught.value.invariant == "sentinel_linkage"
    assert snapshot(queue, universe) == before


# ---------------------------------------------------------- iter_blocks_after


def test_iter_blocks_after_none_yields_every_block() -> None:
    """A None cursor walks the whole queue front first."""
    queue, blocks = make(4)
    assert list(queue.iter_blocks_after(None)) == blocks


@pytest.mark.parametrize("index", [0, 1, 3])
def test_iter_blocks_after_cursor_yields_the_rest(index: int) -> None:
    """A linked cursor yields exactly the blocks after it, in eviction order."""
    queue, blocks = make(4)
    assert list(queue.iter_blocks_after(blocks[index])) == blocks[index + 1 :]


def test_iter_blocks_after_resumes_from_a_saved_cursor() -> None:
    """Walking in steps from the last block seen covers the queue once, as vLLM's offloader does."""
    queue, blocks = make(5)
    seen: list[NumberedBlock] = []
    cursor: NumberedBlock | None = None
    for _ in range(3):
        for step, block in enumerate(queue.iter_blocks_after(cursor)):
            if step == 2:
                break
            seen.append(block)
            cursor = block
    assert seen == blocks


def test_iter_blocks_after_own_sentinels() -> None:
    """The queue's own head means from the front and its own tail means nothing after."""
    queue, blocks = make(2)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    assert list(queue.iter_blocks_after(head)) == blocks  # type: ignore[arg-type]  # deliberate
    assert list(queue.iter_blocks_after(tail)) == []  # type: ignore[arg-type]  # deliberate


@pytest.mark.parametrize("cursor", ["detached", "foreign head", "foreign tail"])
def test_iter_blocks_after_rejects_cursor_at_call_time(cursor: str) -> None:
    """A detached cursor or another queue's sentinel raises NotInQueueError before any next()."""
    queue, _ = make(2)
    other, _ = make(1)
    node: Block = {
        "detached": NumberedBlock(7),
        "foreign head": other.fake_free_list_head,
        "foreign tail": other.fake_free_list_tail,
    }[cursor]
    with pytest.raises(NotInQueueError, match=r"^iter_blocks_after\(") as caught:
        queue.iter_blocks_after(node)  # type: ignore[arg-type]  # deliberate
    assert isinstance(caught.value, RuntimeError)


@pytest.mark.production_only  # check mode's own iteration reports this in its words
def test_iteration_raises_when_its_block_is_removed() -> None:
    """Removing the block a loop stands on raises NotInQueueError; it never yields None."""
    queue, blocks = make(3)
    yielded: list[NumberedBlock] = []

    def remove_each() -> None:
        for block in queue:
            yielded.append(block)
            queue.remove(block)

    with pytest.raises(NotInQueueError, match="changed during iteration"):
        remove_each()
    assert yielded == blocks[:1]
    assert_chain(queue, blocks[1:])


@pytest.mark.production_only  # check mode's own iteration reports this in its words
def test_iteration_never_yields_a_foreign_sentinel() -> None:
    """A block moved to the end of another queue mid-loop stops the loop with an error."""
    queue, blocks = make(2)
    other, _ = make(0)
    iterator = iter(queue)
    assert next(iterator) is blocks[0]
    queue.remove(blocks[1])
    other.append(blocks[1])
    queue.remove(blocks[0])
    other.prepend_n([blocks[0]])
    # blocks[0] is now followed by blocks[1] and then the other queue's tail.
    assert next(iterator) is blocks[1]
    with pytest.raises(NotInQueueError):
        next(iterator)


# ------------------------------------------------------- arguments and errors


@pytest.mark.parametrize("value", [None, "x", 3])
@pytest.mark.parametrize("operation", ["append", "remove", "append_n", "prepend_n"])
def test_non_block_argument_raises_wrong_type_and_changes_nothing(
    operation: str, value: object
) -> None:
    """One clear WrongTypeError (a TypeError) names the expected type, with nothing changed."""
    queue, blocks = make(2)
    before = snapshot(queue, blocks)
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: queue.append(value),  # type: ignore[arg-type]
        "remove": lambda: queue.remove(value),  # type: ignore[arg-type]
        "append_n": lambda: queue.append_n([value]),  # type: ignore[list-item]
        "prepend_n": lambda: queue.prepend_n([value]),  # type: ignore[list-item]
    }
    with pytest.raises(WrongTypeError, match="expected a block") as caught:
        calls[operation]()
    assert isinstance(caught.value, TypeError)
    assert snapshot(queue, blocks) == before


@pytest.mark.parametrize("n", [2.5, "2", None, True])
def test_popleft_n_refuses_non_integer_counts(n: object) -> None:
    """A float, a string, None or a bool count raises WrongTypeError, the queue unchanged."""
    queue, blocks = make(3)
    with pytest.raises(WrongTypeError, match="must be an integer"):
        queue.popleft_n(n)  # type: ignore[arg-type]  # deliberate
    assert_chain(queue, blocks)


def test_popleft_n_accepts_index_integers_and_keeps_an_int_count() -> None:
    """An integer type with __index__ (numpy's, say) is a count; num_free_blocks stays an int."""

    class Count:
        def __index__(self) -> int:
            return 2

    queue, blocks = make(3)
    assert queue.popleft_n(Count()) == blocks[:2]
    assert type(queue.num_free_blocks) is int
    assert bool(queue)


def test_error_message_survives_a_failing_repr() -> None:
    """A block whose __repr__ raises still gets AlreadyInQueueError, naming its type."""

    class BadRepr(NumberedBlock):
        __slots__ = ()

        def __repr__(self) -> str:
            raise RuntimeError("repr is broken")

    queue = FreeBlockQueue([BadRepr(0)])
    block = queue.get_all_free_blocks()[0]
    with pytest.raises(AlreadyInQueueError, match=r"BadRepr object at 0x"):
        queue.append(block)


def test_double_free_of_first_and_last_block_of_vllm_shaped_block() -> None:
    """A repr that reads the neighbours' block_id works at both ends (sentinels have id -1)."""
    queue = FreeBlockQueue([IdBlock(0), IdBlock(1)])
    first, last = queue.get_all_free_blocks()
    assert repr(first) == "IdBlock(0, prev=-1, next=1)"
    assert repr(last) == "IdBlock(1, prev=0, next=-1)"
    for block in (first, last):
        with pytest.raises(AlreadyInQueueError, match=r"IdBlock\(\d, prev="):
            queue.append(block)


class IdBlock(Block):
    """A block whose repr reads its neighbours' block_id, as vLLM's KVCacheBlock's does."""

    __slots__ = ("block_id",)

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id

    def __repr__(self) -> str:
        before = self.prev_free_block.block_id if self.prev_free_block else None  # type: ignore[attr-defined]
        after = self.next_free_block.block_id if self.next_free_block else None  # type: ignore[attr-defined]
        return f"IdBlock({self.block_id}, prev={before}, next={after})"


def test_popleft_n_over_a_link_cleared_inside_the_run_changes_nothing() -> None:
    """A None link inside the counted run raises InvariantViolation and restores every block."""
    queue, blocks = make(4)
    blocks[1].next_free_block = None
    before = snapshot(queue, blocks)
    with pytest.raises(InvariantViolation, match="popleft_n"):
        queue.popleft_n(3)
    assert snapshot(queue, blocks) == before


# ------------------------------------------------------- messages, word for word


@pytest.mark.production_only  # check mode finds the damage first and names it its own way
@pytest.mark.parametrize(
    ("operation", "message"),
    [
        ("append", "append(): the tail sentinel's prev_free_block is not a block"),
        ("append_n", "append_n(): the tail sentinel's prev_free_block is not a block"),
        ("prepend_n", "prepend_n(): the head sentinel's next_free_block is not a block"),
        ("popleft", "popleft(): the head sentinel's next_free_block is not a block"),
        ("popleft_n", "popleft_n(): the head sentinel's next_free_block is not a block"),
    ],
)
def test_lost_inner_link_message_names_the_operation_and_the_sentinel(
    operation: str, message: str
) -> None:
    """The violation names the operation, the sentinel and its link, and says nothing changed."""
    queue, _ = make(1)
    if operation.startswith("append"):
        queue.fake_free_list_tail.prev_free_block = None
    else:
        queue.fake_free_list_head.next_free_block = None
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: queue.append(NumberedBlock(5)),
        "append_n": lambda: queue.append_n([NumberedBlock(5)]),
        "prepend_n": lambda: queue.prepend_n([NumberedBlock(5)]),
        "popleft": queue.popleft,
        "popleft_n": lambda: queue.popleft_n(1),
    }
    with pytest.raises(InvariantViolation) as caught:
        calls[operation]()
    assert str(caught.value) == (f"{message} (I1 broken by outside code); nothing was changed")


def test_wrong_type_messages_word_for_word() -> None:
    """Each WrongTypeError says what was given and what was expected, exactly."""
    queue, _ = make(2)
    with pytest.raises(WrongTypeError) as caught:
        queue.append(None)  # type: ignore[arg-type]  # deliberate
    assert str(caught.value) == (
        "append(None): expected a block (a verified_queue.Block, or an object with "
        "prev_free_block and next_free_block), got NoneType"
    )
    with pytest.raises(WrongTypeError) as caught:
        queue.popleft_n(True)
    assert str(caught.value) == "popleft_n(True): the count must be an integer, not a bool"
    with pytest.raises(WrongTypeError) as caught:
        queue.popleft_n(2.5)  # type: ignore[arg-type]  # deliberate
    assert str(caught.value) == "popleft_n(2.5): the count must be an integer, not float"


def test_a_failed_batch_blames_the_first_item_this_build_cannot_link() -> None:
    """The message of a batch with a non-block names that item, not an earlier block."""
    queue, _ = make(1)
    fresh = numbered(2)
    with pytest.raises(WrongTypeError) as caught:
        queue.prepend_n([fresh[0], "x", None, fresh[1]])  # type: ignore[list-item]  # deliberate
    assert str(caught.value).startswith("prepend_n('x'): expected a block")


@pytest.mark.production_only  # check mode's own iteration reports this in its words
def test_iteration_change_message_word_for_word() -> None:
    """A block that leaves the queue under an iteration is reported in one fixed sentence."""
    queue, blocks = make(2)
    walk = iter(queue)
    next(walk)
    queue.remove(blocks[0])
    with pytest.raises(NotInQueueError) as caught:
        next(walk)
    assert str(caught.value) == (
        "the free queue changed during iteration: the block the iteration stood on left the queue"
    )


def test_a_repr_that_fails_is_replaced_by_type_and_address() -> None:
    """The fallback names the class and its id in hex, exactly."""

    class BadRepr(NumberedBlock):
        __slots__ = ()

        def __repr__(self) -> str:
            raise RuntimeError("repr is broken")

    block = BadRepr(0)
    queue = FreeBlockQueue([block])
    with pytest.raises(AlreadyInQueueError) as caught:
        queue.append(block)
    assert str(caught.value) == (
        f"append(<{BadRepr.__qualname__} object at {id(block):#x}>): "
        "it is already linked in a queue (a double free?)"
    )


class Tripwire(Exception):
    """Raised by a link read that was told to fail, as a signal handler would raise."""


class ExplodingLinks:
    """A block (not a Block) whose ``next_free_block`` read raises once, when armed."""

    armed_reads = -1

    def __init__(self, number: int) -> None:
        self.number = number
        self.prev_free_block: ExplodingLinks | None = None
        self._next: ExplodingLinks | None = None

    @property
    def next_free_block(self) -> ExplodingLinks | None:
        if ExplodingLinks.armed_reads == 0:
            ExplodingLinks.armed_reads = -1
            raise Tripwire
        if ExplodingLinks.armed_reads > 0:
            ExplodingLinks.armed_reads -= 1
        return self._next

    @next_free_block.setter
    def next_free_block(self, value: ExplodingLinks | None) -> None:
        self._next = value


@pytest.mark.skipif(
    __import__("verified_queue").COMPILED, reason="the compiled queue takes Block subclasses only"
)
@pytest.mark.parametrize("fail_at", range(4))
def test_popleft_n_cut_short_at_any_read_puts_every_block_back(fail_at: int) -> None:
    """An exception at any of popleft_n's four link reads leaves every link as it was."""
    blocks = [ExplodingLinks(i) for i in range(5)]
    queue = FreeBlockQueue(blocks)
    nodes: list[Any] = [queue.fake_free_list_head, *blocks, queue.fake_free_list_tail]
    before = [(id(n.prev_free_block), id(n.next_free_block)) for n in nodes]
    ExplodingLinks.armed_reads = fail_at
    try:
        with pytest.raises(Tripwire):
            queue.popleft_n(4)
    finally:
        ExplodingLinks.armed_reads = -1
    assert [(id(n.prev_free_block), id(n.next_free_block)) for n in nodes] == before
    assert len(queue) == 5
    assert queue.popleft_n(5) == blocks
