"""Copies and pickles of queues: refused when they would alias, healthy at any size otherwise."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import NumberedBlock, numbered, numbers
from verified_queue import Block, CheckedFreeBlockQueue, FreeBlockQueue
from verified_queue.invariants import check_invariants
from verified_queue.kvcache.pool import BlockPool

QUEUE_TYPES: list[type[FreeBlockQueue[Any]]] = [FreeBlockQueue, CheckedFreeBlockQueue]


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_shallow_copy_is_refused_and_changes_nothing(queue_type: type[FreeBlockQueue[Any]]) -> None:
    """copy.copy would share the chain under a second count, so it raises TypeError instead."""
    blocks = numbered(3)
    queue = queue_type(blocks)
    with pytest.raises(TypeError, match="cannot be shallow-copied"):
        copy.copy(queue)
    assert numbers(queue.get_all_free_blocks()) == [0, 1, 2]
    check_invariants(queue, pool=blocks)


def round_trips(queue: FreeBlockQueue[Any]) -> list[FreeBlockQueue[Any]]:
    """A deep copy and a pickle round trip of ``queue``."""
    return [copy.deepcopy(queue), pickle.loads(pickle.dumps(queue))]


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_deep_copy_and_pickle_give_a_healthy_independent_queue(
    queue_type: type[FreeBlockQueue[Any]],
) -> None:
    """The copy holds new blocks in the same order, links its own sentinels, shares nothing."""
    blocks = numbered(5)
    queue = queue_type(blocks[:4])
    queue.remove(blocks[1])
    for twin in round_trips(queue):
        assert type(twin) is queue_type
        copies = twin.get_all_free_blocks()
        assert numbers(copies) == [0, 2, 3]
        assert not any(c is b for c in copies for b in blocks)
        check_invariants(twin, pool=copies)
        twin.append(twin.popleft())
        twin.prepend_n([NumberedBlock(9)])
        assert numbers(twin.get_all_free_blocks()) == [9, 2, 3, 0]
    assert numbers(queue.get_all_free_blocks()) == [0, 2, 3]
    check_invariants(queue, pool=blocks)


def test_checked_queue_copy_keeps_its_options_and_its_membership_works() -> None:
    """A checked copy keeps full_check_every and rejects a foreign block, as the original does."""
    queue = CheckedFreeBlockQueue(numbered(3), full_check_every=7)
    for twin in round_trips(queue):
        assert isinstance(twin, CheckedFreeBlockQueue)
        assert twin.full_check_every == 7
        twin.full_check()
        first = twin.popleft()
        twin.append(first)
        assert first in twin
        assert queue.get_all_free_blocks()[0] not in twin


def test_a_detached_block_pickles_without_its_neighbours() -> None:
    """A linked block pickled alone comes back detached, its other state kept."""
    blocks = numbered(3)
    FreeBlockQueue(blocks)
    twin = pickle.loads(pickle.dumps(blocks[1]))
    assert twin.number == 1
    assert twin.prev_free_block is None
    assert twin.next_free_block is None


@pytest.mark.parametrize(
    ("size", "clone"),
    [
        (1_000_000, lambda queue: pickle.loads(pickle.dumps(queue))),
        # deepcopy costs several times pickle per block; 100,000 is far past the old limit.
        (100_000, copy.deepcopy),
    ],
    ids=["pickle", "deepcopy"],
)
def test_large_queue_round_trips_without_recursion(
    size: int, clone: Callable[[FreeBlockQueue[Block]], FreeBlockQueue[Block]]
) -> None:
    """A huge queue pickles and deep-copies (recursion along the chain failed at about 250)."""
    blocks = [Block() for _ in range(size)]
    queue = FreeBlockQueue(blocks)
    queue.remove(blocks[size // 2])
    twin = clone(queue)
    assert len(twin) == size - 1
    check_invariants(twin)
    assert twin.popleft() is not blocks[0]


class OwnedBlock(Block):
    """A block that names the queue it belongs to, as a pool's blocks name their pool."""

    __slots__ = ("number", "owner")

    def __init__(self, number: int, owner: object = None) -> None:
        self.number = number
        self.owner = owner


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_a_queue_whose_blocks_name_it_copies_and_pickles(
    queue_type: type[FreeBlockQueue[Any]],
) -> None:
    """Blocks referring back to their queue get the copy: one new queue, its blocks in order."""
    blocks = [OwnedBlock(number) for number in range(4)]
    queue = queue_type(blocks)
    for block in blocks:
        block.owner = queue
    for twin in round_trips(queue):
        copies = twin.get_all_free_blocks()
        assert [block.number for block in copies] == [0, 1, 2, 3]
        assert all(block.owner is twin for block in copies)
        assert not {id(block) for block in copies} & {id(block) for block in blocks}
        check_invariants(twin, pool=copies)
        assert type(twin) is queue_type


def test_a_block_pool_copies_and_pickles_with_its_queue() -> None:
    """A pool whose blocks name it (pool -> free_block_queue -> blocks -> pool) round-trips."""
    pool = BlockPool(6)
    taken = pool.get_new_blocks(2)
    pool.free_blocks(taken[::-1])
    order = [block.block_id for block in pool.free_block_queue]
    for twin in [copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))]:
        assert [block.block_id for block in twin.free_block_queue] == order
        assert all(block.pool is not None and block.pool() is twin for block in twin.blocks)
        assert twin.free_block_queue is not pool.free_block_queue
        assert set(map(id, twin.free_block_queue)) <= set(map(id, twin.blocks))
        check_invariants(twin.free_block_queue, pool=twin.blocks[1:])
        assert [block.block_id for block in twin.get_new_blocks(2)] == order[:2]


def test_a_pool_s_queue_copies_and_pickles_through_its_blocks_pool() -> None:
    """Copying a pool's queue alone reaches the pool through its blocks and fails nowhere.

    The blocks refer to their pool weakly, as vLLM's do, and nothing holds the pool's copy
    once the copy returns: their reference is dead, or names a pool whose queue is the copy.
    """
    pool = BlockPool(5)
    order = [block.block_id for block in pool.free_block_queue]
    queue = pool.free_block_queue
    for twin in [copy.deepcopy(queue), pickle.loads(pickle.dumps(queue))]:
        copies = twin.get_all_free_blocks()
        assert [block.block_id for block in copies] == order
        assert not {id(block) for block in copies} & {id(block) for block in pool.blocks}
        check_invariants(twin, pool=copies)
        for block in copies:
            reference = block.pool
            assert reference is not None
            owner = reference()
            assert owner is None or owner.free_block_queue is twin
