"""The block pool's operations as contracts: what each call must change, and what it must not.

A layer apart from the model of :mod:`specs.pool_model`: no second pool is kept. Each call is
checked by a relation between the pool's observable state just before and just after it
(:class:`Snapshot`): the free queue's order, every block's count and key, the cache. A
seeded random engine (:func:`check_pool_contracts`) admits requests, finishes them with and
without ``evict_first``, shares them, frees them twice, asks for too many blocks, looks up
keys with a miss in the middle and resets the cache, checking every call's contract and the
pool's own ``check_consistency`` after it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from verified_queue.errors import EmptyQueueError
from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import DoubleFreeError
from verified_queue.kvcache.keys import BlockHash
from verified_queue.kvcache.pool import BlockPool

__all__ = ["ContractBroken", "Snapshot", "check_pool_contracts"]

BLOCK_SIZE = 2
PROMPTS = [(1, 2, 3, 4, 5), (1, 2, 3, 4), (1, 2, 9, 9), (5, 6, 7), (1, 2)]
SALTS: list[str | bytes | None] = [None, None, "t"]


class ContractBroken(AssertionError):
    """A call broke its contract: the message names the call and the clause."""


@dataclass(frozen=True)
class Snapshot:
    """The observable state of a pool: free order, counts, keys, cache (ids throughout)."""

    free: list[int]
    ref: list[int]
    key: list[BlockHash | None]
    cache: dict[BlockHash, list[int]]

    @classmethod
    def of(cls, pool: BlockPool) -> Snapshot:
        """Take the snapshot of ``pool`` now."""
        return cls(
            [block.block_id for block in pool.free_block_queue],
            [block.ref_cnt for block in pool.blocks],
            [block.block_hash for block in pool.blocks],
            {
                key: [block.block_id for block in cached.values()]
                for key, cached in pool.cached_block_hash_to_block.items()
            },
        )


def _require(condition: bool, call: str, clause: str) -> None:
    if not condition:
        raise ContractBroken(f"{call}: {clause}")


def _ids(blocks: Sequence[KVCacheBlock]) -> list[int]:
    return [block.block_id for block in blocks]


class _Checked:
    """A pool whose calls are checked against their contracts."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool

    def get_new_blocks(self, count: int) -> list[KVCacheBlock] | None:
        before = Snapshot.of(self.pool)
        call = f"get_new_blocks({count})"
        try:
            taken = self.pool.get_new_blocks(count)
        except EmptyQueueError:
            _require(count > len(before.free), call, "refused with blocks enough")
            _require(Snapshot.of(self.pool) == before, call, "a refusal changed the pool")
            return None
        after = Snapshot.of(self.pool)
        ids = _ids(taken)
        _require(ids == before.free[:count], call, "did not take the front of the queue")
        _require(after.free == before.free[count:], call, "the rest of the queue moved")
        for block in ids:
            _require(after.ref[block] == 1 and after.key[block] is None, call, "block not fresh")
        cache = {
            key: [block for block in cached if block not in ids]
            for key, cached in before.cache.items()
        }
        _require(after.cache == {k: v for k, v in cache.items() if v}, call, "cache not evicted")
        return taken

    def touch(self, blocks: list[KVCacheBlock]) -> None:
        before = Snapshot.of(self.pool)
        self.pool.touch(blocks)
        after = Snapshot.of(self.pool)
        ids = _ids(blocks)
        call = f"touch({ids})"
        for block in set(ids) - {0}:
            _require(after.ref[block] == before.ref[block] + ids.count(block), call, "count")
        _require(after.free == [b for b in before.free if b not in ids], call, "queue")
        _require(after.cache == before.cache, call, "the cache changed")

    def free_blocks(self, blocks: list[KVCacheBlock], evict_first: bool) -> None:
        before = Snapshot.of(self.pool)
        ids = [block for block in _ids(blocks) if block != 0]
        call = f"free_blocks({ids}, evict_first={evict_first})"
        over = any(ids.count(block) > before.ref[block] for block in ids)
        try:
            self.pool.free_blocks(blocks, evict_first)
        except DoubleFreeError:
            _require(over, call, "refused a free of held blocks")
            _require(Snapshot.of(self.pool) == before, call, "a refusal changed the pool")
            return
        _require(not over, call, "let a double free through")
        after = Snapshot.of(self.pool)
        released: list[int] = []
        for block in ids:
            if ids.count(block) == before.ref[block] and block not in released:
                released.append(block)
        for block in set(ids):
            _require(after.ref[block] == before.ref[block] - ids.count(block), call, "count")
        to_back = self.pool.enable_caching and not evict_first
        back = [block for block in released if to_back and before.key[block] is not None]
        front = [block for block in released if block not in back]
        # The released blocks keep the order given: the last listing drops the last count.
        order = sorted(released, key=lambda block: len(ids) - ids[::-1].index(block))
        front = [block for block in order if block in front]
        back = [block for block in order if block in back]
        _require(after.free == front + before.free + back, call, "queue order")
        _require(after.cache == before.cache, call, "the cache changed")

    def cache_full_blocks(
        self, blocks: list[KVCacheBlock], hashes: list[BlockHash], cached: int, full: int
    ) -> None:
        before = Snapshot.of(self.pool)
        self.pool.cache_full_blocks(blocks, hashes, cached, full)
        after = Snapshot.of(self.pool)
        call = f"cache_full_blocks({_ids(blocks)}, {cached}, {full})"
        _require(after.free == before.free and after.ref == before.ref, call, "counts or queue")
        for key, old in before.cache.items():
            _require(after.cache.get(key, [])[: len(old)] == old, call, "an older entry changed")
        for block, key in zip(_ids(blocks)[cached:full], hashes[cached:full], strict=True):
            _require(after.key[block] == key, call, "a block lacks its key")
            _require(block in after.cache.get(key, []), call, "a block is not cached")

    def find_longest_cache_hit(self, hashes: list[BlockHash]) -> list[KVCacheBlock]:
        before = Snapshot.of(self.pool)
        hit = self.pool.find_longest_cache_hit(hashes)
        call = f"find_longest_cache_hit({len(hashes)} keys)"
        _require(Snapshot.of(self.pool) == before, call, "a lookup changed the pool")
        _require(len(hit) <= len(hashes), call, "more blocks than keys")
        for block, key in zip(_ids(hit), hashes, strict=False):
            _require(before.cache.get(key, [None])[0] == block, call, "not the oldest cached")
        if len(hit) < len(hashes):
            _require(hashes[len(hit)] not in before.cache, call, "stopped at a hit")
        return hit

    def reset_prefix_cache(self) -> None:
        before = Snapshot.of(self.pool)
        done = self.pool.reset_prefix_cache()
        after = Snapshot.of(self.pool)
        idle = len(before.free) == self.pool.num_blocks - 1
        _require(done == idle, "reset_prefix_cache()", f"returned {done} with idle={idle}")
        if done:
            _require(not after.cache and not any(after.key), "reset_prefix_cache()", "keys kept")
        else:
            _require(after == before, "reset_prefix_cache()", "changed a busy pool")


def _engine_step(pool: _Checked, rng: random.Random, requests: list[list[KVCacheBlock]]) -> None:
    """One random engine step on the checked pool."""
    choice = rng.randrange(8)
    if choice <= 1 or not requests:
        tokens = rng.choice(PROMPTS)
        hashes = keys_module.hash_request_tokens(tokens, BLOCK_SIZE, cache_salt=rng.choice(SALTS))
        hit = pool.find_longest_cache_hit(hashes[: (len(tokens) - 1) // BLOCK_SIZE])
        needed = -(-len(tokens) // BLOCK_SIZE) - len(hit)
        free_hits = sum(1 for block in hit if block.ref_cnt == 0)
        if needed + free_hits > pool.pool.get_num_free_blocks():
            return
        pool.touch(hit)
        new = pool.get_new_blocks(needed)
        if new is None:
            raise ContractBroken("get_new_blocks refused blocks the engine counted free")
        blocks = hit + new
        pool.cache_full_blocks(blocks, hashes, len(hit), len(hashes))
        requests.append(blocks)
        return
    request = rng.choice(requests)
    if choice == 2:
        requests.remove(request)
        pool.free_blocks(request[::-1], evict_first=rng.random() < 0.5)
    elif choice == 3:
        pool.touch(request)
        requests.append(list(request))
    elif choice == 4:
        requests.remove(request)
        pool.free_blocks(request[::-1] * 2, evict_first=False)
    elif choice == 5:
        got = pool.get_new_blocks(rng.randrange(4))
        if got is not None:
            requests.append(got)
    elif choice == 6:
        hashes = keys_module.hash_request_tokens(rng.choice(PROMPTS), BLOCK_SIZE)
        hashes.insert(rng.randrange(len(hashes) + 1), BlockHash(b"\x00" * 32))
        pool.find_longest_cache_hit(hashes)
    else:
        pool.reset_prefix_cache()


def check_pool_contracts(
    pool_type: type[BlockPool] = BlockPool,
    *,
    runs: int = 200,
    steps: int = 30,
    seed: int = 0,
) -> str | None:
    """Run ``runs`` random engines of ``steps`` steps on 6-block pools; the first broken contract.

    Returns ``None`` when every call kept its contract and the pool stayed consistent.
    """
    rng = random.Random(seed)
    for run in range(runs):
        pool = _Checked(pool_type(6))
        requests: list[list[KVCacheBlock]] = []
        for step in range(steps):
            try:
                _engine_step(pool, rng, requests)
                pool.pool.check_consistency()
            except Exception as error:  # a broken contract, or a crash of the pool under test
                return f"run {run}, step {step}: {type(error).__name__}: {error}"
    return None
