"""The prefix-caching BlockPool: vLLM's caching and eviction scenarios, misuse, and a model."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
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
from verified_queue.pool import (
    ROOT_HASH,
    BlockHash,
    BlockPool,
    BlockPoolError,
    KVCacheBlock,
    QueueFactory,
    hash_block_tokens,
    hash_request_tokens,
    sha256_block_hash,
)
from verified_queue.queue import FreeBlockQueue

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


# --- hashing ---------------------------------------------------------------------------------


def test_block_hashes_chain_through_the_parent() -> None:
    """A block's key depends on every token before it, not only on its own tokens."""
    first = hash_block_tokens(None, [1, 2])
    assert first == BlockHash(hash((ROOT_HASH, (1, 2))), (1, 2))
    after_first = hash_block_tokens(first, [3, 4])
    after_other = hash_block_tokens(hash_block_tokens(None, [9, 9]), [3, 4])
    assert after_first.token_ids == after_other.token_ids == (3, 4)
    assert after_first != after_other
    keys = hash_request_tokens([1, 2, 3, 4, 5], block_size=2)
    assert keys == [first, after_first]


def test_hash_request_tokens_reuses_known_keys_and_skips_the_partial_block() -> None:
    """Known keys are kept as given and only the blocks after them are hashed."""
    calls: list[tuple[int, tuple[int, ...]]] = []

    def counting_hash(key: tuple[int, tuple[int, ...]]) -> int:
        calls.append(key)
        return hash(key)

    known = hash_request_tokens([1, 2, 3, 4], 2, counting_hash)
    assert len(calls) == 2
    extended = hash_request_tokens([1, 2, 3, 4, 5, 6, 7], 2, counting_hash, known=known)
    assert len(calls) == 3
    assert extended[:2] == known
    assert extended == hash_request_tokens([1, 2, 3, 4, 5, 6, 7], 2)
    with pytest.raises(ValueError, match="block_size"):
        hash_request_tokens([1], 0)


def test_sha256_block_hash_is_stable_and_tells_parents_apart() -> None:
    """The SHA-256 hash is deterministic, fits 64 signed bits and depends on parent and tokens."""
    key = sha256_block_hash((ROOT_HASH, (1, 2, 3)))
    assert key == sha256_block_hash((ROOT_HASH, (1, 2, 3)))
    assert -(2**63) <= key < 2**63
    assert key != sha256_block_hash((1, (1, 2, 3)))
    assert key != sha256_block_hash((ROOT_HASH, (1, 2, 4)))
    chained = hash_request_tokens(tokens(0, 8), BLOCK_SIZE, sha256_block_hash)
    assert chained[1].hash_value == sha256_block_hash((chained[0].hash_value, (4, 5, 6, 7)))


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
    assert free_ids(pool) == [6, 7, 8, 9, 10, 4]  # the shared blocks are still held
    finish(pool, second)
    # Never-used blocks first, then each request's unique tail, then the prefix tail-first.
    assert free_ids(pool) == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    # The prefix is hit again while its blocks are free: touch takes them from the back.
    third = admit(pool, common + tokens(300, 1))
    assert third.num_hit_blocks == 3
    assert ids(third.blocks) == [1, 2, 3, 6]
    assert free_ids(pool) == [7, 8, 9, 10, 4, 5]
    finish(pool, third)
    assert free_ids(pool) == [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]
    # A request that shares nothing takes every free block, in exactly that eviction order.
    fourth = admit(pool, [99] * (10 * BLOCK_SIZE))
    assert fourth.num_hit_blocks == 0
    assert ids(fourth.blocks) == [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]
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
    """free_blocks decrements every count and appends, in the order given, those reaching zero."""
    pool = BlockPool(5)
    blocks = pool.get_new_blocks(4)
    pool.touch(blocks[1:3])
    pool.free_blocks(blocks)
    assert free_ids(pool) == [1, 4]
    assert [block.ref_cnt for block in blocks] == [0, 1, 1, 0]
    assert pool.num_freed == 2
    pool.free_blocks(blocks[1:3])
    assert free_ids(pool) == [1, 4, 2, 3]
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
    assert free_ids(pool) == [4, 2, 1, 3]
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
    with pytest.raises(AlreadyInQueueError, match=r"ref_cnt=-1.*already linked"):
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
    with pytest.raises(AlreadyInQueueError):
        pool.free_blocks([block, block])
    assert block.ref_cnt == 1
    assert free_ids(pool) == [2, 3]
    pool.check_consistency()


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda pool: setattr(pool.blocks[3], "ref_cnt", 1), r"block_id=3.*in the free queue"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", -1), r"block_id=1.*out of the free"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", 0), r"block_id=1.*out of the free"),
        (lambda pool: setattr(pool.blocks[1], "block_hash", None), r"cached under a hash it"),
        (lambda pool: pool.cached_block_hash_to_block.clear(), r"not cached under its hash"),
        (lambda pool: setattr(pool.null_block, "block_hash", pool.blocks[1].block_hash), "null"),
        (lambda pool: pool.free_block_queue.append(pool.null_block), "null block"),
        (lambda pool: pool.free_block_queue.append(KVCacheBlock(1)), "does not own"),
        pytest.param(
            lambda pool: setattr(pool.free_block_queue, "num_free_blocks", 9),
            "counts 9",
            marks=pytest.mark.production_only,  # check mode flags the count first, its own way
        ),
        (
            lambda pool: pool.cached_block_hash_to_block.update({BlockHash(0, ()): {}}),
            "an empty entry",
        ),
    ],
)
def test_check_consistency_catches_each_planted_break(
    plant: Callable[[BlockPool], object], message: str
) -> None:
    """Each way of breaking P1..P3 or the count is reported by check_consistency."""
    pool = BlockPool(4)
    admit(pool, tokens(0, BLOCK_SIZE + 1))  # blocks 1 (cached, in use) and 2 (partial)
    pool.check_consistency()
    plant(pool)
    with pytest.raises(BlockPoolError, match=message):
        pool.check_consistency()


@pytest.mark.production_only  # check mode stops the second linking itself
def test_check_consistency_catches_a_block_queued_twice() -> None:
    """A block that appears twice in the free queue (a corrupted link) is reported."""
    pool = BlockPool(4)
    first: Block = pool.blocks[1]
    second: Block = pool.blocks[2]
    second.next_free_block = first  # the walk now loops 1 -> 2 -> 1
    with pytest.raises(BlockPoolError, match="twice"):
        pool.check_consistency()


def test_a_stale_hash_the_cache_lost_is_caught_at_eviction() -> None:
    """Evicting a block whose hash is not registered raises instead of corrupting the cache."""
    pool = BlockPool(3)
    finish(pool, admit(pool, tokens(0, BLOCK_SIZE)))
    pool.cached_block_hash_to_block.clear()
    with pytest.raises(BlockPoolError, match="P3"):
        pool.get_new_blocks(2)


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
        for block_id in block_ids:
            self.ref_cnt[block_id] -= 1
            if self.ref_cnt[block_id] == 0:
                self.free.append(block_id)

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


def checked_queue(blocks: list[KVCacheBlock]) -> FreeBlockQueue[KVCacheBlock]:
    """Build a check-mode queue that runs its full check before every operation."""
    return CheckedFreeBlockQueue(blocks, full_check_every=1)


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
