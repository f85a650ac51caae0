"""The BlockPool against a plain model on seeded random serving workloads, by identity only.

``ModelPool`` states the pool's semantics with ids in lists and dicts; the same random
requests drive both, which must agree after every step, also with ``KVCacheBlock``'s
``__eq__`` and ``__hash__`` rigged to fail.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import NoReturn

import pytest

from tests.kvcache.pool_support import (
    BLOCK_SIZE,
    Request,
    admit,
    checked_queue,
    decode,
    finish,
    free_ids,
    ids,
    tokens,
)
from verified_queue import EmptyQueueError
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import BlockHash, hash_request_tokens
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue

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
