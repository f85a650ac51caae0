"""Which pool a block belongs to: blocks of other pools (P5), copies of a pool, weak references.

A pool caches and queues only its own blocks, routes another pool's blocks to that pool,
skips blocks of a pool that is gone, and holds its blocks' back references weakly; its
copies own blocks of their own.
"""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from collections.abc import Callable

import pytest

from tests.kvcache.pool_support import (
    BLOCK_SIZE,
    admit,
    checked_queue,
    finish,
    free_ids,
    snapshot,
    tokens,
)
from verified_queue import NotInQueueError
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError
from verified_queue.kvcache.keys import BlockHash, hash_request_tokens
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue

# --- blocks of other pools -------------------------------------------------------------------


def test_a_block_whose_id_is_past_this_pools_last_is_not_owned() -> None:
    """Block n of a larger pool is not a block of a pool of n blocks: owns() is False, no error."""
    pool, larger = BlockPool(3), BlockPool(4)
    outside = larger.blocks[3]
    assert [pool.owns(block) for block in (pool.blocks[2], outside, KVCacheBlock(3))] == [
        True,
        False,
        False,
    ]
    keys = hash_request_tokens(tokens(0, BLOCK_SIZE), BLOCK_SIZE)
    with pytest.raises(BlockPoolError) as caught:
        pool.cache_full_blocks([outside], keys, 0, 1)
    assert str(caught.value) == f"{outside!r} is not a block of this pool (P5)"
    assert outside.block_hash is None
    pool.check_consistency()


def test_cache_full_blocks_refuses_another_pools_block() -> None:
    """A block of another pool, or of none, is never cached here (P5)."""
    pool, other = BlockPool(5), BlockPool(5)
    (theirs,) = other.get_new_blocks(1)
    keys = hash_request_tokens(tokens(0, BLOCK_SIZE), BLOCK_SIZE)
    before = snapshot(pool)
    for stranger in (theirs, KVCacheBlock(1), KVCacheBlock(1, pool=weakref.ref(pool))):
        with pytest.raises(BlockPoolError, match="not a block of this pool"):
            pool.cache_full_blocks([stranger], keys, 0, 1)
    assert snapshot(pool) == before
    assert theirs.block_hash is None
    pool.check_consistency()
    other.check_consistency()


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_free_blocks_hands_another_pools_block_to_that_pool(queue_factory: QueueFactory) -> None:
    """A mixed free routes each block to its own pool's queue, never into ours (P5)."""
    ours = BlockPool(6, queue_factory=queue_factory)
    theirs = BlockPool(6, queue_factory=queue_factory)
    mine = admit(ours, tokens(0, BLOCK_SIZE + 1))  # 1 cached, 2 partial
    foreign = admit(theirs, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    mixed = [foreign.blocks[2], mine.blocks[1], foreign.blocks[1], mine.blocks[0]]
    ours.free_blocks([*mixed, foreign.blocks[0], ours.null_block, theirs.null_block])
    assert free_ids(ours) == [2, 3, 4, 5, 1]
    assert free_ids(theirs) == [3, 4, 5, 2, 1]
    assert (ours.num_freed, ours.num_freed_lifo) == (2, 1)
    assert (theirs.num_freed, theirs.num_freed_lifo) == (3, 1)
    ours.check_consistency()
    theirs.check_consistency()


def test_a_free_mixing_three_pools_hands_each_block_to_its_own() -> None:
    """Blocks of two other pools in one free reach each its own pool, in the order given."""
    ours, second, third = BlockPool(4), BlockPool(5), BlockPool(6)
    mine = ours.get_new_blocks(1)  # 1
    theirs = second.get_new_blocks(2)  # 1, 2
    others = third.get_new_blocks(3)  # 1, 2, 3
    ours.free_blocks([others[2], theirs[1], *mine, others[0], theirs[0], others[1]])
    assert free_ids(ours) == [1, 2, 3]
    assert free_ids(second) == [2, 1, 3, 4]
    assert free_ids(third) == [3, 1, 2, 4, 5]
    assert [pool.num_freed for pool in (ours, second, third)] == [1, 2, 3]
    for pool in (ours, second, third):
        pool.check_consistency()


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_a_failed_free_changes_no_pool(queue_factory: QueueFactory) -> None:
    """A double free anywhere in a mixed free, or a block of no pool, leaves every pool intact."""
    ours = BlockPool(6, queue_factory=queue_factory)
    theirs = BlockPool(6, queue_factory=queue_factory)
    mine = admit(ours, tokens(0, BLOCK_SIZE + 1))
    foreign = admit(theirs, tokens(0, BLOCK_SIZE + 1))
    theirs.free_blocks(foreign.blocks[1:])  # their block 2 is free already
    before = (snapshot(ours), snapshot(theirs))
    bad_batches: list[tuple[list[KVCacheBlock], type[Exception], str]] = [
        ([*mine.blocks, *foreign.blocks], DoubleFreeError, "ref_cnt would drop to -1"),
        ([*mine.blocks, foreign.blocks[0], foreign.blocks[0]], DoubleFreeError, "double free"),
        ([*mine.blocks, KVCacheBlock(3)], BlockPoolError, "belongs to no pool"),
        ([*mine.blocks, KVCacheBlock(3, pool=weakref.ref(theirs))], BlockPoolError, "not own"),
        ([*mine.blocks, KVCacheBlock(3, pool=weakref.ref(ours))], BlockPoolError, "not own"),
    ]
    for batch, error, message in bad_batches:
        with pytest.raises(error, match=message):
            ours.free_blocks(iter(batch))
        assert (snapshot(ours), snapshot(theirs)) == before
    ours.check_consistency()
    theirs.check_consistency()


def test_blocks_of_a_pool_that_is_gone_are_skipped() -> None:
    """A deferred free holding blocks of a dropped pool frees the rest, as vLLM's pool does."""
    ours, doomed = BlockPool(4), BlockPool(4)
    mine, orphans = ours.get_new_blocks(1), doomed.get_new_blocks(2)
    del doomed
    gc.collect()
    ours.free_blocks([*orphans, *mine])
    assert free_ids(ours) == [1, 2, 3]
    assert [block.ref_cnt for block in orphans] == [1, 1]
    ours.check_consistency()


def test_check_mode_rejects_touching_another_pools_free_block() -> None:
    """A foreign block reaching touch() is rejected by the checked queue, both pools intact."""
    ours = BlockPool(4, queue_factory=checked_queue)
    theirs = BlockPool(4, queue_factory=checked_queue)
    finish(ours, admit(ours, tokens(0, BLOCK_SIZE)))
    with pytest.raises(NotInQueueError, match="linked in another queue"):
        ours.touch([ours.blocks[1], theirs.blocks[2]])
    assert ours.blocks[1].ref_cnt == 1  # touched before the foreign block was met
    assert theirs.blocks[2].ref_cnt == 0
    assert free_ids(ours) == [2, 3]
    assert free_ids(theirs) == [1, 2, 3]
    ours.check_consistency()
    theirs.check_consistency()


# --- copies of a pool, and the block's shape -------------------------------------------------


@pytest.mark.parametrize(
    "duplicate",
    [copy.deepcopy, lambda pool: pickle.loads(pickle.dumps(pool))],
    ids=["deepcopy", "pickle"],
)
def test_a_copied_pool_owns_its_blocks_and_serves_requests(
    duplicate: Callable[[BlockPool], BlockPool],
) -> None:
    """A pool's deep copy or unpickled copy owns its own blocks, frees them and hits its cache."""
    pool = BlockPool(6)
    request = admit(pool, tokens(0, BLOCK_SIZE + 1))  # 1 cached, 2 partial, both held
    twin = duplicate(pool)
    twin.check_consistency()
    assert [twin.owns(block) for block in twin.blocks] == [True] * 6
    assert not any(twin.owns(block) for block in pool.blocks)
    twin.free_blocks(reversed(twin.blocks[1:3]))  # the copies of the request's blocks
    assert (free_ids(twin), free_ids(pool)) == ([2, 3, 4, 5, 1], [3, 4, 5])
    (hit,) = twin.find_longest_cache_hit(request.hashes)
    assert hit is twin.blocks[1]
    twin.touch([hit])
    twin.cache_full_blocks(twin.get_new_blocks(1), [BlockHash(b"k")], 0, 1)
    assert twin.get_cached_block(BlockHash(b"k")) is twin.blocks[2]
    twin.check_consistency()
    pool.check_consistency()


def hash_of(block: KVCacheBlock) -> BlockHash | None:
    """Read a block's key (a call, so that a type checker does not narrow it across calls)."""
    return block.block_hash


def test_the_block_has_vllms_shape() -> None:
    """block_id, ref_cnt, keyword-only weak pool reference, plain block_hash field, is_null."""
    pool = BlockPool(3)
    block = pool.blocks[1]
    assert (block.block_id, block.ref_cnt, block.is_null) == (1, 0, False)
    assert type(block.pool) is weakref.ref
    assert block.pool() is pool
    assert pool.null_block.is_null
    with pytest.raises(TypeError):
        KVCacheBlock(1, 0, weakref.ref(pool))  # type: ignore[call-arg]  # pool is keyword-only, as in vLLM
    block.set_block_hash(BlockHash(b"k"))
    with pytest.raises(BlockPoolError, match="has a hash already"):
        block.set_block_hash(BlockHash(b"other"))
    assert hash_of(block) == b"k"
    block.reset_hash()
    assert hash_of(block) is None
    # Identity only: equal fields are not equal blocks, and a block is hashable.
    assert KVCacheBlock(1) != KVCacheBlock(1)
    assert len({id(block): block, id(KVCacheBlock(1)): block}) == 2
    assert hash(block) == hash(block)
    assert not hasattr(block, "__dict__")  # slotted, like vLLM's
    # A plain field since vLLM 0.34.0 (no property over a private), and not a constructor argument.
    assert "block_hash" in KVCacheBlock.__dataclass_fields__
    assert not isinstance(vars(KVCacheBlock)["block_hash"], property)
    with pytest.raises(TypeError):
        KVCacheBlock(1, block_hash=BlockHash(b"k"))  # type: ignore[call-arg]


def test_no_block_to_pool_cycle_keeps_a_dropped_pool_alive() -> None:
    """Blocks hold their pool weakly: dropping the pool frees it at once, with no GC pass."""
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(2)
    gone = weakref.ref(pool)
    gc.disable()
    try:
        del pool
        assert gone() is None
    finally:
        gc.enable()
    assert all(block.pool is not None and block.pool() is None for block in blocks)


def test_a_refused_free_keeps_no_pool_alive() -> None:
    """A double free refused leaves no reference cycle: the pools it reached go when dropped.

    The error used to stay bound in the frame that raised it, which its traceback holds: a
    cycle that kept both pools (and the error) alive until the next collection.
    """
    ours, theirs = BlockPool(4), BlockPool(4)
    held = theirs.get_new_blocks(1)
    gc.disable()
    try:
        with pytest.raises(DoubleFreeError):
            ours.free_blocks(held * 2)
        gone = weakref.ref(theirs), weakref.ref(ours)
        del theirs, ours
        assert [reference() for reference in gone] == [None, None]
    finally:
        gc.enable()
