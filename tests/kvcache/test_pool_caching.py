"""The prefix-caching BlockPool: construction, allocation, vLLM's caching and eviction scenarios.

Also which free queue a pool builds (its ``queue_factory``, the check-mode switch), and
``free_blocks(..., evict_first=True)``. Misuse is in ``test_pool_misuse.py``, blocks of
other pools in ``test_pool_ownership.py``, the model comparison in ``test_pool_model.py``.
"""

from __future__ import annotations

import pytest

import verified_queue
from tests.kvcache.pool_support import (
    BLOCK_SIZE,
    admit,
    checked_queue,
    decode,
    finish,
    free_ids,
    ids,
    snapshot,
    tokens,
)
from verified_queue import CheckedFreeBlockQueue, EmptyQueueError, NegativeCountError
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue

# --- construction and allocation ---------------------------------------------------------


def test_new_pool_has_every_block_free_in_id_order_but_the_null_block() -> None:
    """A new pool's free queue holds blocks 1..n-1 in id order and block 0 is the null block."""
    pool = BlockPool(6)
    assert free_ids(pool) == [1, 2, 3, 4, 5]
    assert pool.null_block is pool.blocks[0]
    assert pool.null_block.prev_free_block is None
    assert pool.null_block.next_free_block is None
    assert pool.get_num_free_blocks() == 5
    pool.check_consistency()


@pytest.mark.parametrize("size", [-1, 0, 1])
def test_pool_too_small_to_serve_is_refused(size: int) -> None:
    """A pool without at least one block besides the null block cannot be built."""
    with pytest.raises(ValueError, match="at least 2 blocks"):
        BlockPool(size)


def test_the_smallest_pool_has_two_blocks_and_serves_one() -> None:
    """BlockPool(2) serves its one block besides the null block; BlockPool(1) says why not."""
    pool = BlockPool(2)
    assert free_ids(pool) == [1]
    assert ids(pool.get_new_blocks(1)) == [1]
    pool.check_consistency()
    with pytest.raises(ValueError, match=r"^a pool needs at least 2 blocks, not 1$"):
        BlockPool(1)


def test_get_new_blocks_takes_from_the_front_with_one_reference() -> None:
    """get_new_blocks(n) returns the n front blocks, each with ref_cnt 1, and counts them."""
    pool = BlockPool(6)
    taken = pool.get_new_blocks(3)
    assert ids(taken) == [1, 2, 3]
    assert [block.ref_cnt for block in taken] == [1, 1, 1]
    assert free_ids(pool) == [4, 5]
    assert pool.num_allocated == 3
    assert pool.get_new_blocks(0) == []
    pool.check_consistency()


def test_get_new_blocks_beyond_the_free_count_raises_and_changes_nothing() -> None:
    """Asking for more blocks than are free raises EmptyQueueError with the pool untouched."""
    pool = BlockPool(4)
    pool.get_new_blocks(1)
    with pytest.raises(EmptyQueueError, match="cannot get 3 blocks from a pool with 2 free"):
        pool.get_new_blocks(3)
    with pytest.raises(NegativeCountError):
        pool.get_new_blocks(-1)
    assert free_ids(pool) == [2, 3]
    assert pool.num_allocated == 1
    pool.check_consistency()


def test_usage_counts_the_null_block_as_used() -> None:
    """get_usage() is the fraction of blocks not in the free queue."""
    pool = BlockPool(8)
    assert pool.get_usage() == 1 / 8
    pool.get_new_blocks(3)
    assert pool.get_usage() == 4 / 8
    assert repr(pool) == "<BlockPool of 8 blocks, 4 free>"


def test_a_custom_queue_factory_builds_the_free_queue() -> None:
    """queue_factory receives every block in id order and its queue becomes the free list."""
    received: list[list[int]] = []

    def factory(blocks: list[KVCacheBlock]) -> FreeBlockQueue[KVCacheBlock]:
        received.append(ids(blocks))
        return FreeBlockQueue(blocks)

    queue_factory: QueueFactory = factory
    pool = BlockPool(4, queue_factory=queue_factory)
    assert received == [[0, 1, 2, 3]]
    assert free_ids(pool) == [1, 2, 3]


def test_the_default_free_queue_follows_the_check_mode_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a factory the pool builds whatever class the package exports as FreeBlockQueue."""
    assert type(BlockPool(3).free_block_queue) is verified_queue.FreeBlockQueue
    monkeypatch.setattr(verified_queue, "FreeBlockQueue", CheckedFreeBlockQueue)
    assert type(BlockPool(3).free_block_queue) is CheckedFreeBlockQueue


# --- the prefix-caching scenarios ------------------------------------------------------------


def test_shared_prefix_allocation_and_eviction_order() -> None:
    """After two requests share a prefix, frees and evictions follow vLLM's order exactly."""
    pool = BlockPool(11)
    common = tokens(0, 3 * BLOCK_SIZE)
    first = admit(pool, common + tokens(100, 3))
    assert ids(first.blocks) == [1, 2, 3, 4]
    # The prefix is still in use by the first request: the second shares it.
    second = admit(pool, common + tokens(200, 2))
    assert second.num_hit_blocks == 3
    assert ids(second.blocks) == [1, 2, 3, 5]
    assert [block.ref_cnt for block in first.blocks] == [2, 2, 2, 1]
    assert pool.get_num_free_blocks() == 5
    finish(pool, first)
    # The partial block 4 has no hash: it goes to the front; the shared blocks are still held.
    assert free_ids(pool) == [4, 6, 7, 8, 9, 10]
    finish(pool, second)
    # Uncached tails first (LIFO), then never-used blocks, then the cached prefix tail-first:
    # the order vLLM 0.33.0's prefix-caching test expects.
    assert free_ids(pool) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    # The prefix is hit again while its blocks are free: touch takes them from the back.
    third = admit(pool, common + tokens(300, 1))
    assert third.num_hit_blocks == 3
    assert ids(third.blocks) == [1, 2, 3, 5]
    assert free_ids(pool) == [4, 6, 7, 8, 9, 10]
    finish(pool, third)
    assert free_ids(pool) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert pool.num_freed_lifo == 3
    # A request that shares nothing takes every free block, in exactly that eviction order.
    fourth = admit(pool, [99] * (10 * BLOCK_SIZE))
    assert fourth.num_hit_blocks == 0
    assert ids(fourth.blocks) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert pool.get_num_free_blocks() == 0
    assert pool.cached_block_hash_to_block.keys() == set(fourth.hashes)
    pool.check_consistency()


def test_a_hit_is_kept_while_another_cached_block_is_evicted() -> None:
    """Touching a cached prefix protects it while the allocation behind it evicts another chain."""
    pool = BlockPool(7)
    kept = admit(pool, tokens(0, 2 * BLOCK_SIZE))  # blocks 1, 2
    other = admit(pool, tokens(500, 2 * BLOCK_SIZE))  # blocks 3, 4
    finish(pool, other)
    finish(pool, kept)
    assert free_ids(pool) == [5, 6, 4, 3, 2, 1]
    # Same two-block prefix plus nine more tokens: hit 1, 2 and allocate 3 blocks.
    again = admit(pool, tokens(0, 2 * BLOCK_SIZE) + tokens(900, 9))
    assert again.num_hit_blocks == 2
    assert ids(again.blocks) == [1, 2, 5, 6, 4]
    assert pool.num_evicted == 1  # block 4 was the tail of the other chain
    assert pool.blocks[4].block_hash is None
    assert pool.get_cached_block(kept.hashes[0]) is pool.blocks[1]
    assert pool.get_cached_block(kept.hashes[1]) is pool.blocks[2]
    assert pool.get_cached_block(other.hashes[1]) is None
    # The other chain's head survives and is still found; its evicted tail is a miss.
    assert ids(pool.find_longest_cache_hit(other.hashes)) == [3]
    pool.check_consistency()


def test_a_reused_block_loses_its_stale_hash() -> None:
    """A cached block handed out again is uncached, then cached under its new tokens' hash."""
    pool = BlockPool(3)
    old = admit(pool, tokens(0, 2 * BLOCK_SIZE))
    finish(pool, old)
    assert pool.get_cached_block(old.hashes[0]) is pool.blocks[1]
    new = admit(pool, tokens(40, BLOCK_SIZE + 1))  # a miss: evicts both old blocks
    assert ids(new.blocks) == [2, 1]
    assert pool.num_evicted == 2
    assert pool.get_cached_block(old.hashes[0]) is None
    assert pool.get_cached_block(old.hashes[1]) is None
    assert pool.blocks[2].block_hash == new.hashes[0]
    partial = pool.blocks[1]
    assert partial.block_hash is None  # not cached until it fills
    for token in tokens(60, BLOCK_SIZE - 1):
        decode(pool, new, token)
    assert new.hashes[1] == pool.blocks[1].block_hash
    assert ids(pool.find_longest_cache_hit(new.hashes)) == [2, 1]
    pool.check_consistency()


def test_touch_removes_a_free_cached_block_from_the_middle_of_the_queue() -> None:
    """touch on a ref-0 block unlinks it wherever it is; on a used block it only counts."""
    pool = BlockPool(6)
    request = admit(pool, tokens(0, 3 * BLOCK_SIZE))
    finish(pool, request)
    assert free_ids(pool) == [4, 5, 3, 2, 1]
    middle = pool.blocks[3]
    pool.touch([middle])
    assert middle.ref_cnt == 1
    assert free_ids(pool) == [4, 5, 2, 1]
    pool.touch([middle])
    assert middle.ref_cnt == 2
    assert free_ids(pool) == [4, 5, 2, 1]
    assert pool.num_touched == 2
    pool.free_blocks([middle, middle])
    assert free_ids(pool) == [4, 5, 2, 1, 3]
    pool.check_consistency()


def test_free_blocks_queues_only_blocks_no_request_still_uses() -> None:
    """free_blocks decrements every count and queues, in the order given, those reaching zero."""
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(4)
    pool.touch(blocks[1:3])
    pool.free_blocks(blocks)
    # Uncached blocks are prepended as a run, in the order given: reused first, LIFO.
    assert free_ids(pool) == [1, 4, 5]
    assert [block.ref_cnt for block in blocks] == [0, 1, 1, 0]
    assert pool.num_freed == 2
    pool.free_blocks(blocks[1:3])
    assert free_ids(pool) == [2, 3, 1, 4, 5]
    assert pool.num_freed_lifo == 4
    pool.check_consistency()


def test_free_blocks_prepends_uncached_blocks_and_appends_cached_ones() -> None:
    """One free of mixed blocks: uncached to the front in order, cached to the back in order."""
    pool = BlockPool(8)
    request = admit(pool, tokens(0, 3 * BLOCK_SIZE + 2))  # 1, 2, 3 cached; 4 partial
    extra = pool.get_new_blocks(1)  # 5, never cached
    assert free_ids(pool) == [6, 7]
    pool.free_blocks([*reversed(request.blocks), *extra])
    assert free_ids(pool) == [4, 5, 6, 7, 3, 2, 1]
    assert (pool.num_freed, pool.num_freed_lifo) == (5, 2)
    # The next allocation reuses the blocks just freed without a hash, the last one first.
    assert ids(pool.get_new_blocks(2)) == [4, 5]
    assert pool.num_evicted == 0
    pool.check_consistency()


def test_with_caching_off_every_freed_block_is_reused_first() -> None:
    """enable_caching=False caches nothing and prepends every freed block (vLLM's LIFO reuse)."""
    pool = BlockPool(6, enable_caching=False)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, hash_request_tokens(tokens(0, 12), BLOCK_SIZE), 0, 3)
    assert pool.cached_block_hash_to_block == {}
    assert all(block.block_hash is None for block in blocks)
    pool.free_blocks(reversed(blocks))
    assert free_ids(pool) == [3, 2, 1, 4, 5]
    assert ids(pool.get_new_blocks(1)) == [3]
    pool.check_consistency()


def test_duplicate_blocks_cached_under_one_hash_are_both_kept() -> None:
    """Two blocks filled with the same tokens are both cached; evicting one keeps the other."""
    pool = BlockPool(5)
    prompt = tokens(0, BLOCK_SIZE + 1)
    first = admit(pool, prompt)
    # Two requests prefilled in the same step both miss and both cache the block: play the
    # second one's part by caching a fresh block under the same key.
    duplicate = pool.get_new_blocks(1)
    pool.cache_full_blocks(duplicate, first.hashes, 0, 1)
    key = first.hashes[0]
    assert list(pool.cached_block_hash_to_block[key]) == [1, 3]
    assert pool.get_cached_block(key) is pool.blocks[1]
    finish(pool, first)
    pool.free_blocks(duplicate)
    assert free_ids(pool) == [2, 4, 1, 3]  # the partial block 2 went to the front
    pool.get_new_blocks(3)  # evicts block 1, the first of the two
    assert pool.get_cached_block(key) is pool.blocks[3]
    pool.check_consistency()


def test_cache_full_blocks_refuses_to_cache_a_block_twice_or_without_a_key() -> None:
    """Caching an already cached block, or more blocks than keys, raises and caches nothing."""
    pool = BlockPool(5)
    request = admit(pool, tokens(0, 2 * BLOCK_SIZE))
    before = dict(pool.cached_block_hash_to_block)
    with pytest.raises(BlockPoolError, match="cached already"):
        pool.cache_full_blocks(request.blocks, request.hashes, 0, 2)
    fresh = pool.get_new_blocks(2)
    with pytest.raises(BlockPoolError, match="2 blocks to cache but 1 block hashes"):
        pool.cache_full_blocks(fresh, request.hashes[:1], 0, 2)
    assert pool.cached_block_hash_to_block == before
    assert [block.block_hash for block in fresh] == [None, None]
    pool.cache_full_blocks(request.blocks, request.hashes, 2, 2)  # nothing new: a no-op
    pool.check_consistency()


def test_reset_prefix_cache_only_when_no_block_is_in_use() -> None:
    """reset_prefix_cache fails while a block is held and forgets every hash once none is."""
    pool = BlockPool(6)
    request = admit(pool, tokens(0, 2 * BLOCK_SIZE + 1))
    assert pool.reset_prefix_cache() is False
    assert len(pool.cached_block_hash_to_block) == 2
    finish(pool, request)
    assert pool.reset_prefix_cache() is True
    assert pool.cached_block_hash_to_block == {}
    assert all(block.block_hash is None for block in pool.blocks)
    assert pool.find_longest_cache_hit(request.hashes) == []
    pool.check_consistency()


def test_the_null_block_is_never_freed_nor_touched() -> None:
    """touch and free_blocks skip the null block, so it never enters the free queue."""
    pool = BlockPool(4)
    null = pool.null_block
    pool.touch([null])
    pool.free_blocks([null, null])
    assert null.ref_cnt == 0
    assert null.prev_free_block is None
    assert free_ids(pool) == [1, 2, 3]
    # Skipped, not a stop: the blocks after it are still touched and freed.
    pool.touch([null, pool.blocks[2]])
    assert (pool.blocks[2].ref_cnt, free_ids(pool)) == (1, [1, 3])
    pool.free_blocks([null, pool.blocks[2]])
    assert free_ids(pool) == [2, 1, 3]
    pool.check_consistency()


# --- evicting freed cached blocks first ------------------------------------------------------


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_evict_first_puts_freed_cached_blocks_at_the_front(queue_factory: QueueFactory) -> None:
    """free_blocks(..., evict_first=True) prepends cached blocks too, in the order given."""
    pool = BlockPool(8, queue_factory=queue_factory)
    request = admit(pool, tokens(0, 3 * BLOCK_SIZE + 1))  # 1, 2, 3 cached, 4 partial
    pool.free_blocks(reversed(request.blocks), evict_first=True)
    assert free_ids(pool) == [4, 3, 2, 1, 5, 6, 7]
    again = admit(pool, tokens(0, 3 * BLOCK_SIZE + 1))  # the prefix is still cached: a hit
    assert ids(again.blocks) == [1, 2, 3, 4]
    finish(pool, again)
    assert free_ids(pool) == [4, 5, 6, 7, 3, 2, 1]  # without it: cached blocks to the back
    pool.check_consistency()


def test_evict_first_reaches_the_pool_a_block_is_routed_to() -> None:
    """A mixed free passes evict_first on to the other pool, as vLLM does."""
    ours, theirs = BlockPool(4), BlockPool(6)
    foreign = admit(theirs, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    mine = ours.get_new_blocks(1)
    ours.free_blocks([*reversed(foreign.blocks), *mine], evict_first=True)
    assert free_ids(theirs) == [3, 2, 1, 4, 5]
    assert free_ids(ours) == [1, 2, 3]
    ours.check_consistency()
    theirs.check_consistency()


def test_evict_first_must_be_a_bool_and_a_refusal_changes_nothing() -> None:
    """evict_first of another type raises TypeError before any count or queue changes."""
    pool = BlockPool(4)
    held = pool.get_new_blocks(2)
    before = snapshot(pool)
    with pytest.raises(TypeError, match="evict_first"):
        pool.free_blocks(held, evict_first=1)  # type: ignore[arg-type]
    assert snapshot(pool) == before
