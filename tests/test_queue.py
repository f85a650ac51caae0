"""Unit tests of FreeBlockQueue: every operation, every error path, atomicity after each error."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import assert_type

import pytest
from block_types import NumberedBlock, numbered, numbers, snapshot

from verified_queue import (
    AlreadyInQueueError,
    Block,
    EmptyQueueError,
    FreeBlockQueue,
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
    """A block repeated within one batch is a double free: nothing is linked."""
    queue, blocks = make(2)
    fresh = numbered(3)
    batch = [fresh[i] for i in batch_shape]
    before = snapshot(queue, [*blocks, *fresh])
    with pytest.raises(AlreadyInQueueError, match="double free"):
        queue.append_n(batch)
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
