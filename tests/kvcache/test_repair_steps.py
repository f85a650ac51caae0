"""The pool's repair steps run on their own, as an interrupt's handler runs them.

The interrupt tests reach each step through an exception at every checkpoint of a pool
call; these call a step directly on a pool in the state a cut left, so that what the step
leaves behind is checked field by field, whichever checkpoints the cuts happen to reach.
"""

from __future__ import annotations

from verified_queue.kvcache._repair import ForgetHashes
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool


def _pool_with_cached_free_blocks() -> BlockPool:
    """A pool of 8 whose three first blocks are free and cached under a prompt's keys."""
    pool = BlockPool(8)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, hash_request_tokens(list(range(6)), 2), 0, 3)
    pool.free_blocks(reversed(blocks))
    return pool


def test_forgetting_the_hashes_leaves_an_empty_cache_the_pool_can_fill_again() -> None:
    """A reset cut before it emptied the cache: the step empties it (a dict, as the pool's
    own reset leaves it) and clears every block's hash, and the pool caches anew."""
    pool = _pool_with_cached_free_blocks()
    assert pool.cached_block_hash_to_block
    ForgetHashes(pool).run()
    assert pool.cached_block_hash_to_block == {}
    assert all(block.block_hash is None for block in pool.blocks)
    blocks = pool.get_new_blocks(2)
    keys = hash_request_tokens([7, 7, 8, 8], 2)
    pool.cache_full_blocks(blocks, keys, 0, 2)
    assert pool.find_longest_cache_hit(keys) == blocks
