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
