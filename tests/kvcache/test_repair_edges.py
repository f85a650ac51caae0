"""A touch cut short after several free blocks, and the repair that finishes it.

``touch`` ends *as after* when an exception cuts it short (``docs/usage.md``, "Faults"): its
repair counts the blocks the touch removed before the cut, one per block touched that was
free by its count, to know whether the block it stopped at is still in the queue. Here every
block touched is free, so that a count that misses any of them leaves a later block in the
queue, held.
"""

from __future__ import annotations

from specs.interrupts import Faults, Interrupted, at_checkpoints, code_objects
from tests.kvcache.pool_support import free_ids, snapshot
from verified_queue.kvcache import _repair as repair_module
from verified_queue.kvcache import pool as pool_module
from verified_queue.kvcache._repair import TouchRest
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool


def _four_free_cached() -> tuple[BlockPool, list[KVCacheBlock]]:
    """A pool of 7 whose blocks 1 to 4 are free and cached. Free, front first: 5, 6, 4, 3, 2, 1."""
    pool = BlockPool(7)
    blocks = pool.get_new_blocks(4)
    pool.cache_full_blocks(blocks, hash_request_tokens(list(range(8)), 2), 0, 4)
    pool.free_blocks(reversed(blocks))
    return pool, blocks


def _touched_state(pool: BlockPool) -> tuple[object, ...]:
    """Everything touch may change: the pool's snapshot and its count of touches."""
    return (*snapshot(pool), pool.num_touched)


def test_a_touch_of_free_blocks_cut_at_any_checkpoint_ends_as_after() -> None:
    """Four free blocks touched, an exception at any checkpoint: as before, or all four held."""
    # Read when the test runs, not at import: the frames are those of the code that runs.
    codes = code_objects([pool_module, repair_module])
    pool, blocks = _four_free_cached()
    before = _touched_state(pool)
    pool.touch(blocks)
    after = _touched_state(pool)
    assert free_ids(pool) == [5, 6]
    counting = Faults()
    pool, blocks = _four_free_cached()
    with at_checkpoints(counting, codes):
        pool.touch(blocks)
    assert counting.events > 0
    failures = []
    for at in range(1, counting.events + 1):
        faults = Faults(frozenset({at}))
        pool, blocks = _four_free_cached()
        raised: BaseException | None = None
        with at_checkpoints(faults, codes):
            try:
                pool.touch(blocks)
            except Interrupted as error:
                raised = error
        if raised is not (faults.fired[-1] if faults.fired else None):
            failures.append(f"fault at {at}: raised {raised!r}, fired {faults.fired}")
        elif _touched_state(pool) not in (before, after):
            # Before only if the exception came before the touch began (at its start).
            failures.append(f"fault at {at}: free {free_ids(pool)}, neither as before nor after")
    assert not failures, failures


def test_the_touch_repair_removes_the_next_free_block_after_two_removed_ones() -> None:
    """Cut after touching two free blocks: the repair removes and holds the next two."""
    pool, blocks = _four_free_cached()
    free = pool.free_block_queue.num_free_blocks
    touched = pool.num_touched
    # What touch left when cut after its second block: 1 and 2 removed and held once.
    for block in blocks[:2]:
        pool.free_block_queue.remove(block)
        block.ref_cnt += 1
        pool.num_touched += 1
    TouchRest(pool, blocks, 2, free).run()
    assert free_ids(pool) == [5, 6]
    assert [block.ref_cnt for block in blocks] == [1, 1, 1, 1]
    assert pool.num_touched == touched + 4
    pool.check_consistency()
