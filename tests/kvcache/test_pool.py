"""The prefix-caching BlockPool: vLLM's caching and eviction scenarios, misuse, and a model."""

from __future__ import annotations

import copy
import gc
import pickle
import random
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

import pytest

import verified_queue
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
)
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError
from verified_queue.kvcache.keys import BlockHash, hash_request_tokens
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import History, TracedFreeBlockQueue

BLOCK_SIZE = 4


def ids(blocks: Iterable[KVCacheBlock]) -> list[int]:
    """Return the block ids of ``blocks``, for readable assertions."""
    return [block.block_id for block in blocks]


def free_ids(pool: BlockPool) -> list[int]:
    """Return the ids in the pool's free queue, front (next evicted) first."""
    return ids(pool.free_block_queue.get_all_free_blocks())


@dataclass
class Request:
    """A request's tokens, block table and block hashes, as a caller of the pool keeps them."""

    token_ids: list[int]
    blocks: list[KVCacheBlock] = field(default_factory=list)
    hashes: list[BlockHash] = field(default_factory=list)
    num_cached_blocks: int = 0
    num_hit_blocks: int = 0


def admit(pool: BlockPool, token_ids: list[int]) -> Request:
    """Allocate a request the way vLLM's KVCacheManager does: hit, touch, allocate, cache.

    At most ``len(token_ids) - 1`` tokens may come from the cache: the last
    prompt token is always recomputed to produce the first output's logits.
    """
    request = Request(list(token_ids))
    request.hashes = hash_request_tokens(request.token_ids, BLOCK_SIZE)
    hit = pool.find_longest_cache_hit(request.hashes[: (len(token_ids) - 1) // BLOCK_SIZE])
    pool.touch(hit)
    needed = -(-len(token_ids) // BLOCK_SIZE) - len(hit)
    request.blocks = hit + pool.get_new_blocks(needed)
    request.num_hit_blocks = len(hit)
    full = len(token_ids) // BLOCK_SIZE
    pool.cache_full_blocks(request.blocks, request.hashes, len(hit), full)
    request.num_cached_blocks = full
    return request


def decode(pool: BlockPool, request: Request, token: int) -> None:
    """Append one generated token: a new block when the last is full, caching blocks that fill."""
    request.token_ids.append(token)
    if len(request.token_ids) > len(request.blocks) * BLOCK_SIZE:
        request.blocks += pool.get_new_blocks(1)
    request.hashes = hash_request_tokens(request.token_ids, BLOCK_SIZE, known=request.hashes)
    full = len(request.token_ids) // BLOCK_SIZE
    pool.cache_full_blocks(request.blocks, request.hashes, request.num_cached_blocks, full)
    request.num_cached_blocks = full


def finish(pool: BlockPool, request: Request) -> None:
    """Free a finished request's blocks in reverse, so its chain's tail is evicted first."""
    pool.free_blocks(reversed(request.blocks))


def tokens(start: int, count: int) -> list[int]:
    """Return ``count`` consecutive token ids from ``start``."""
    return list(range(start, start + count))


def checked_queue(blocks: list[KVCacheBlock]) -> FreeBlockQueue[KVCacheBlock]:
    """Build a check-mode queue that runs its full check before every operation."""
    return CheckedFreeBlockQueue(blocks, full_check_every=1)


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


# --- misuse ----------------------------------------------------------------------------------


def test_a_double_free_is_rejected_and_every_count_restored() -> None:
    """Freeing a request's blocks twice raises AlreadyInQueueError and leaves the pool as it was."""
    pool = BlockPool(8)
    shared = admit(pool, tokens(0, 2 * BLOCK_SIZE + 1))
    other = admit(pool, tokens(0, 2 * BLOCK_SIZE + 2))  # shares the first two blocks
    finish(pool, shared)
    counts = [block.ref_cnt for block in pool.blocks]
    order = free_ids(pool)
    with pytest.raises(DoubleFreeError, match=r"ref_cnt=0.*would drop to -1 \(a double free"):
        finish(pool, shared)
    assert [block.ref_cnt for block in pool.blocks] == counts
    assert free_ids(pool) == order
    assert pool.num_freed == 1
    pool.check_consistency()
    finish(pool, other)
    pool.check_consistency()


def test_a_block_repeated_in_one_free_is_a_double_free() -> None:
    """A block listed twice in one free_blocks call, with one reference, is rejected."""
    pool = BlockPool(4)
    (block,) = pool.get_new_blocks(1)
    with pytest.raises(AlreadyInQueueError, match="would drop to -1"):
        pool.free_blocks([block, block])
    assert block.ref_cnt == 1
    assert free_ids(pool) == [2, 3]
    pool.check_consistency()


def plant_foreign_cache_entry(pool: BlockPool) -> None:
    """Register a block of no pool, carrying block 1's key, under that key as block 3."""
    key = pool.blocks[1].block_hash
    assert key is not None
    stranger = KVCacheBlock(3)
    stranger.set_block_hash(key)
    pool.cached_block_hash_to_block[key][3] = stranger


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda pool: setattr(pool.blocks[3], "ref_cnt", 1), r"block_id=3.*in the free queue"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", -1), r"block_id=1.*out of the free"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", 0), r"block_id=1.*out of the free"),
        (lambda pool: pool.blocks[1].reset_hash(), r"cached under a hash it"),
        (lambda pool: pool.cached_block_hash_to_block.clear(), r"not cached under its hash"),
        (lambda pool: pool.null_block.set_block_hash(BlockHash(b"k")), "null"),
        (lambda pool: setattr(pool.null_block, "is_null", False), "unmarked"),
        (lambda pool: setattr(pool.blocks[3], "is_null", True), "marked null"),
        (lambda pool: setattr(pool.blocks[2], "pool", None), "does not name this pool"),
        (lambda pool: setattr(pool.blocks[2], "block_id", 7), "does not name this pool"),
        (lambda pool: pool.free_block_queue.append(pool.null_block), "null block"),
        (
            lambda pool: pool.free_block_queue.append(KVCacheBlock(1)),
            r"^the free queue holds a block this pool does not own \(P5\)$",
        ),
        pytest.param(
            lambda pool: setattr(pool.free_block_queue, "num_free_blocks", 9),
            "counts 9",
            marks=pytest.mark.production_only,  # check mode flags the count first, its own way
        ),
        (
            lambda pool: pool.cached_block_hash_to_block.update({BlockHash(bytes(range(8))): {}}),
            r"^an empty entry is cached under 000102030405\.\.\. \(P3\)$",
        ),
        (
            lambda pool: pool.cached_block_hash_to_block.update(
                {BlockHash(b"k"): {3: pool.blocks[3]}}
            ),
            "cached under a hash it lacks",
        ),
        (plant_foreign_cache_entry, "cached but not a block of this pool"),
    ],
)
def test_check_consistency_catches_each_planted_break(
    plant: Callable[[BlockPool], object], message: str
) -> None:
    """Each way of breaking P1..P3, P5 or the count is reported by check_consistency."""
    pool = BlockPool(4)
    admit(pool, tokens(0, BLOCK_SIZE + 1))  # blocks 1 (cached, in use) and 2 (partial)
    pool.check_consistency()
    plant(pool)
    with pytest.raises(BlockPoolError, match=message):
        pool.check_consistency()


def test_free_blocks_refuses_a_held_block_that_is_linked() -> None:
    """A block whose count says held but which is in the free queue (P2 broken) is refused."""
    pool = BlockPool(5)
    held = pool.get_new_blocks(1)
    pool.blocks[3].ref_cnt = 1  # a count written by hand: block 3 is still in the free queue
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match=r"block_id=3.*held, yet linked .*P2 broken"):
        pool.free_blocks([*held, pool.blocks[3]])
    assert snapshot(pool) == before


@pytest.mark.parametrize("link", ["prev_free_block", "next_free_block"])
def test_free_blocks_refuses_a_held_block_linked_at_one_end(link: str) -> None:
    """A held block with a single stale link, either one, is refused and nothing changes (P2)."""
    pool = BlockPool(5)
    held = pool.get_new_blocks(2)
    setattr(held[1], link, pool.blocks[3])
    before = snapshot(pool)
    with pytest.raises(BlockPoolError) as caught:
        pool.free_blocks(held)
    assert str(caught.value) == (
        f"free_blocks({held[1]!r}): held, yet linked in a free queue (P2 broken)"
    )
    assert snapshot(pool) == before
    assert [block.ref_cnt for block in held] == [1, 1]


class BoundedWalkQueue(FreeBlockQueue[KVCacheBlock]):
    """A free queue whose iteration fails after 100 blocks, so a missed cycle fails, not hangs."""

    __slots__ = ()

    def __iter__(self) -> Iterator[KVCacheBlock]:
        """Yield the blocks front to back; raise AssertionError at the 101st."""
        for steps, block in enumerate(super().__iter__()):
            if steps == 100:
                raise AssertionError("the walk went on past 100 blocks")
            yield block


@pytest.mark.production_only  # check mode stops the second linking itself
def test_check_consistency_catches_a_block_queued_twice() -> None:
    """A block that appears twice in the free queue (a corrupted link) is reported."""
    pool = BlockPool(4, queue_factory=BoundedWalkQueue)
    first: Block = pool.blocks[1]
    second: Block = pool.blocks[2]
    second.next_free_block = first  # the walk now loops 1 -> 2 -> 1
    with pytest.raises(BlockPoolError) as caught:
        pool.check_consistency()
    assert str(caught.value) == f"{first!r} is in the free queue twice (position 2)"


def test_a_stale_hash_the_cache_lost_is_caught_at_eviction() -> None:
    """Evicting a block whose hash is not registered raises instead of corrupting the cache."""
    pool = BlockPool(3)
    finish(pool, admit(pool, tokens(0, BLOCK_SIZE)))
    pool.cached_block_hash_to_block.clear()
    with pytest.raises(BlockPoolError, match="P3"):
        pool.get_new_blocks(2)


def test_a_block_its_hash_entry_lost_is_caught_at_eviction() -> None:
    """Evicting a block whose key's entry lists only its duplicate raises BlockPoolError (P3)."""
    pool = BlockPool(4)
    first = admit(pool, tokens(0, BLOCK_SIZE))  # block 1
    duplicate = pool.get_new_blocks(1)  # block 2, filled with the same tokens
    pool.cache_full_blocks(duplicate, first.hashes, 0, 1)
    finish(pool, first)
    pool.free_blocks(duplicate)
    key = first.hashes[0]
    del pool.cached_block_hash_to_block[key][1]  # block 1 keeps the key; the entry drops it
    stale = pool.blocks[1]
    message = f"{stale!r} carries a hash it is not cached under (P3 broken)"
    assert free_ids(pool) == [3, 1, 2]
    with pytest.raises(BlockPoolError) as caught:
        pool.get_new_blocks(2)
    assert str(caught.value) == message
    # Handed back to the front in order; the stale key is dropped, the duplicate stays cached.
    assert free_ids(pool) == [3, 1, 2]
    assert (stale.block_hash, pool.cached_block_hash_to_block) == (None, {key: {2: duplicate[0]}})
    assert pool.num_evicted == 0
    pool.check_consistency()


# --- the pool's own invariants, and blocks of other pools ------------------------------------


def snapshot(pool: BlockPool) -> tuple[object, ...]:
    """Return everything free_blocks or cache_full_blocks could change, for before/after checks."""
    cache = {key: list(cached) for key, cached in pool.cached_block_hash_to_block.items()}
    return (
        free_ids(pool),
        [block.ref_cnt for block in pool.blocks],
        [block.block_hash for block in pool.blocks],
        cache,
        (pool.num_freed, pool.num_freed_lifo),
    )


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_cache_full_blocks_refuses_a_block_listed_twice(queue_factory: QueueFactory) -> None:
    """cache_full_blocks([b, b], ...) raises BlockPoolError and caches nothing (P3 holds)."""
    pool = BlockPool(5, queue_factory=queue_factory)
    (block,) = pool.get_new_blocks(1)
    keys = hash_request_tokens(tokens(0, 2 * BLOCK_SIZE), BLOCK_SIZE)
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match="appears twice"):
        pool.cache_full_blocks([block, block], keys, 0, 2)
    assert snapshot(pool) == before
    pool.check_consistency()


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_cache_full_blocks_refuses_the_null_block(queue_factory: QueueFactory) -> None:
    """cache_full_blocks([pool.null_block], ...) raises BlockPoolError and caches nothing (P1)."""
    pool = BlockPool(5, queue_factory=queue_factory)
    (block,) = pool.get_new_blocks(1)
    keys = hash_request_tokens(tokens(0, 2 * BLOCK_SIZE), BLOCK_SIZE)
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match=r"null block .* is never cached"):
        pool.cache_full_blocks([pool.null_block], keys, 0, 1)
    with pytest.raises(BlockPoolError, match="null block"):
        pool.cache_full_blocks([block, pool.null_block], keys, 0, 2)  # after a good block, too
    assert snapshot(pool) == before
    pool.check_consistency()


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


class FailingAppendQueue(FreeBlockQueue[KVCacheBlock]):
    """A free queue whose append_n fails once armed: a fault after prepend_n succeeded."""

    __slots__ = ("armed",)

    armed: bool

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Build the queue unarmed."""
        self.armed = False
        super().__init__(blocks)

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Raise once armed and given blocks; otherwise append them."""
        batch = list(blocks)
        if self.armed and batch:
            raise MemoryError("planted failure in append_n")
        super().append_n(batch)


def arm(pool: BlockPool) -> None:
    """Make the pool's FailingAppendQueue fail every append_n of blocks from now on."""
    queue = pool.free_block_queue
    assert isinstance(queue, FailingAppendQueue)
    queue.armed = True


def test_free_blocks_undoes_the_prepend_when_the_append_fails() -> None:
    """If append_n fails after prepend_n linked the uncached blocks, both are undone."""
    pool = BlockPool(6, queue_factory=FailingAppendQueue)
    request = admit(pool, tokens(0, BLOCK_SIZE + 1))  # 1 cached (to the back), 2 uncached
    arm(pool)
    before = snapshot(pool)
    with pytest.raises(MemoryError):
        finish(pool, request)
    assert snapshot(pool) == before
    pool.check_consistency()


def test_free_blocks_undoes_our_pool_when_a_routed_pool_fails() -> None:
    """If the pool a block is routed to fails, the blocks freed here are taken back, counts too."""
    ours = BlockPool(6)
    theirs = BlockPool(6, queue_factory=FailingAppendQueue)
    mine = admit(ours, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    sharer = admit(ours, tokens(0, BLOCK_SIZE + 1))  # hits block 1, takes block 4
    assert ids(sharer.blocks) == [1, 4]
    foreign = admit(theirs, tokens(0, BLOCK_SIZE + 1))
    arm(theirs)
    before = (snapshot(ours), snapshot(theirs))
    with pytest.raises(MemoryError):
        ours.free_blocks([*reversed(mine.blocks), *reversed(foreign.blocks)])
    assert (snapshot(ours), snapshot(theirs)) == before
    assert [block.ref_cnt for block in ours.blocks] == [0, 2, 1, 1, 1, 0]  # block 1: 2, not 1
    ours.check_consistency()
    theirs.check_consistency()


def test_a_failed_append_gives_a_shared_block_its_count_back() -> None:
    """When append_n fails, a block another request still holds gets back 2, its count, not 1."""
    pool = BlockPool(6, queue_factory=FailingAppendQueue)
    first = admit(pool, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    second = admit(pool, tokens(0, BLOCK_SIZE + 1))  # hits block 1, takes block 4
    assert ids(second.blocks) == [1, 4]
    arm(pool)
    before = snapshot(pool)
    with pytest.raises(MemoryError):
        finish(pool, first)  # 3 to the front, 2 to the back (fails), 1 still held by second
    assert snapshot(pool) == before
    assert [block.ref_cnt for block in pool.blocks] == [0, 2, 1, 1, 1, 0]
    pool.check_consistency()


def without_places(text: str) -> str:
    """Drop the ``at FILE:LINE in FUNCTION`` of each recorded call: they name the test runner."""
    return re.sub(r" at \S+:\d+ in \S+", "", text)


def test_a_traced_free_queue_says_where_a_double_freed_block_was_freed() -> None:
    """With the trace level's queue, a double free names the free before it, word for word."""
    pool = BlockPool(4, queue_factory=TracedFreeBlockQueue)
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks)
    with pytest.raises(DoubleFreeError) as caught:
        pool.free_blocks(blocks[:1])
    assert without_places(str(caught.value)) == (
        "free_blocks(KVCacheBlock(block_id=1, ref_cnt=0, block_hash=None)): freed more often"
        " than it is held, its ref_cnt would drop to -1 (a double free?)\n"
        "  this call: free_blocks() (thread MainThread), after #4\n"
        "  freed before by: #4 prepend_n() (thread MainThread)\n"
        "  taken since: never, the block is still in this queue\n"
        "  taken before that by: #3 popleft_n() (thread MainThread)"
    )
    history = getattr(caught.value, "history", None)
    assert isinstance(history, History)
    assert (history.call.number, history.call.name) == (None, "free_blocks")
    (record,) = history.blocks
    assert record.block == repr(blocks[0])
    assert free_ids(pool) == [1, 2, 3]
    assert [block.ref_cnt for block in pool.blocks] == [0, 0, 0, 0]


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


# --- identity only ----------------------------------------------------------------------------


def test_the_pool_never_compares_blocks_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole workload runs with KVCacheBlock's __eq__ and __hash__ rigged to fail (P4)."""

    def tripwire(*_args: object) -> NoReturn:
        raise AssertionError("a block was compared by value")

    monkeypatch.setattr(KVCacheBlock, "__eq__", tripwire)
    monkeypatch.setattr(KVCacheBlock, "__hash__", tripwire)
    with pytest.raises(AssertionError):
        _ = KVCacheBlock(0) == KVCacheBlock(0)  # the tripwire is armed
    pool = BlockPool(24)
    model = ModelPool(24)
    run_random_workload(pool, model, random.Random(7), steps=300)


# --- a seeded random workload against a plain model ------------------------------------------


class ModelPool:
    """The pool's semantics written as plainly as possible: ids in lists and dicts, no links."""

    def __init__(self, num_blocks: int) -> None:
        self.free = list(range(1, num_blocks))
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        self.cache: dict[BlockHash, list[int]] = {}

    def find_longest_cache_hit(self, hashes: list[BlockHash]) -> list[int]:
        hit = []
        for key in hashes:
            if not self.cache.get(key):
                break
            hit.append(self.cache[key][0])
        return hit

    def touch(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            if self.ref_cnt[block_id] == 0:
                self.free.remove(block_id)
            self.ref_cnt[block_id] += 1

    def get_new_blocks(self, count: int) -> list[int]:
        taken, self.free = self.free[:count], self.free[count:]
        for block_id in taken:
            key = self.block_hash[block_id]
            if key is not None:
                self.cache[key].remove(block_id)
                if not self.cache[key]:
                    del self.cache[key]
                self.block_hash[block_id] = None
            self.ref_cnt[block_id] = 1
        return taken

    def cache_blocks(self, block_ids: list[int], hashes: list[BlockHash]) -> None:
        for block_id, key in zip(block_ids, hashes, strict=True):
            self.block_hash[block_id] = key
            self.cache.setdefault(key, []).append(block_id)

    def free_blocks(self, block_ids: list[int]) -> None:
        front: list[int] = []
        back: list[int] = []
        for block_id in block_ids:
            self.ref_cnt[block_id] -= 1
            if self.ref_cnt[block_id] == 0:
                (front if self.block_hash[block_id] is None else back).append(block_id)
        self.free = front + self.free + back

    def reset_prefix_cache(self) -> bool:
        if len(self.free) != len(self.ref_cnt) - 1:
            return False
        self.cache = {}
        self.block_hash = [None] * len(self.block_hash)
        return True


def assert_same_state(pool: BlockPool, model: ModelPool) -> None:
    """Assert the pool and the model agree on free order, counts, hashes and the cache."""
    assert free_ids(pool) == model.free
    assert len(pool.free_block_queue) == len(model.free)
    assert [block.ref_cnt for block in pool.blocks] == model.ref_cnt
    assert [block.block_hash for block in pool.blocks] == model.block_hash
    cache = {key: list(cached) for key, cached in pool.cached_block_hash_to_block.items()}
    assert cache == model.cache
    pool.check_consistency()


def run_random_workload(pool: BlockPool, model: ModelPool, rng: random.Random, steps: int) -> int:
    """Drive pool and model through the same random requests; return the prefix blocks hit.

    Prompts draw from a few shared prefixes so that hits, shared blocks and
    evictions of cached blocks all happen often in a small pool.
    """
    prefixes = [tokens(1000 * p, rng.randint(1, 3) * BLOCK_SIZE) for p in range(4)]
    running: list[Request] = []
    next_token = 10**6
    blocks_hit = 0
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.35:
            prompt = rng.choice(prefixes)[: rng.randint(1, 12)] + tokens(
                next_token, rng.randint(0, 6)
            )
            next_token += 10
            hashes = hash_request_tokens(prompt, BLOCK_SIZE)
            usable = hashes[: (len(prompt) - 1) // BLOCK_SIZE]
            hit = pool.find_longest_cache_hit(usable)
            assert ids(hit) == model.find_longest_cache_hit(usable)
            needed = -(-len(prompt) // BLOCK_SIZE) - len(hit)
            evictable = sum(1 for block in hit if block.ref_cnt == 0)
            if needed + evictable > pool.get_num_free_blocks():
                with pytest.raises(EmptyQueueError):
                    pool.get_new_blocks(pool.get_num_free_blocks() + 1)
            else:
                request = admit(pool, prompt)
                model.touch(ids(hit))
                new_ids = model.get_new_blocks(needed)
                assert ids(request.blocks) == ids(hit) + new_ids
                full = len(prompt) // BLOCK_SIZE
                model.cache_blocks(ids(request.blocks)[len(hit) : full], request.hashes[len(hit) :])
                running.append(request)
                blocks_hit += len(hit)
        elif roll < 0.75 and running:
            request = rng.choice(running)
            if len(request.token_ids) == len(request.blocks) * BLOCK_SIZE and not model.free:
                continue
            before = request.num_cached_blocks
            grows = len(request.token_ids) == len(request.blocks) * BLOCK_SIZE
            decode(pool, request, next_token)
            next_token += 1
            if grows:
                assert request.blocks[-1].block_id == model.get_new_blocks(1)[0]
            model.cache_blocks(
                ids(request.blocks)[before : request.num_cached_blocks],
                request.hashes[before : request.num_cached_blocks],
            )
        elif roll < 0.97 and running:
            request = running.pop(rng.randrange(len(running)))
            finish(pool, request)
            model.free_blocks(ids(reversed(request.blocks)))
        else:
            assert pool.reset_prefix_cache() == model.reset_prefix_cache()
        assert_same_state(pool, model)
    return blocks_hit


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_random_workload_matches_the_model(seed: int, queue_factory: QueueFactory) -> None:
    """A seeded random serving workload leaves pool and model in the same state at every step."""
    pool = BlockPool(20, queue_factory=queue_factory)
    model = ModelPool(20)
    blocks_hit = run_random_workload(pool, model, random.Random(seed), steps=1000)
    assert blocks_hit > 0  # the workload really exercised prefix hits
    assert pool.num_evicted > 0  # and evictions of cached blocks


def test_the_model_comparison_catches_a_planted_pool_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool that frees blocks in the order given reversed is caught by the model comparison."""
    original = BlockPool.free_blocks

    def forward_free(pool: BlockPool, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        original(pool, list(ordered_blocks)[::-1])

    monkeypatch.setattr(BlockPool, "free_blocks", forward_free)
    with pytest.raises(AssertionError):
        run_random_workload(BlockPool(20), ModelPool(20), random.Random(0), steps=400)


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
