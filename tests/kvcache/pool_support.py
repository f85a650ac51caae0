"""What the BlockPool tests share: requests served as vLLM serves them, and views of a pool.

``admit``, ``decode`` and ``finish`` drive a pool the way vLLM's KVCacheManager does;
``ids``, ``free_ids`` and ``snapshot`` read it for assertions; ``checked_queue`` builds a
check-mode free queue that runs its full check before every operation;
``InterruptedAfterTakingQueue`` stands for an interrupt between a ``popleft_n`` and the pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import SupportsIndex

from specs.interrupts import Interrupted
from verified_queue import CheckedFreeBlockQueue
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import BlockHash, hash_request_tokens
from verified_queue.kvcache.pool import BlockPool
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


def checked_queue(blocks: list[KVCacheBlock]) -> FreeBlockQueue[KVCacheBlock]:
    """Build a check-mode queue that runs its full check before every operation."""
    return CheckedFreeBlockQueue(blocks, full_check_every=1)


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


class InterruptedAfterTakingQueue(FreeBlockQueue[KVCacheBlock]):
    """A free queue whose popleft_n, once armed, unlinks the blocks and then raises Interrupted.

    It stands for an interrupt that arrives after the blocks left the queue but before the
    list reaches the pool: in a checked or traced queue's own code after the unlinking.
    """

    __slots__ = ("armed",)

    armed: bool

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Build the queue unarmed."""
        self.armed = False
        super().__init__(blocks)

    def popleft_n(self, n: SupportsIndex) -> list[KVCacheBlock]:
        """Take the first ``n`` blocks; once armed, raise Interrupted instead of returning them."""
        taken = super().popleft_n(n)
        if self.armed:
            raise Interrupted
        return taken
