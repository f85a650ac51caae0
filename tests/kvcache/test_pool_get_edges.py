"""``get_new_blocks`` cut short by a burst of interrupts: the pool as before, from each point.

An interrupt that cuts ``get_new_blocks`` short is raised with the pool as before the call
(every block free again, in its place at the front, each hash cached as it was), at the
depth the pool's module docstring promises: three exceptions in all. Those that follow the
first at the very next checkpoints land in the handlers as they start, before or while each
sets up its undo, which the handler outside it must then set up and finish.
``tests/kvcache/test_pool_nested_interrupts.py`` tries every pair of checkpoints; this tries
each checkpoint with the one or two right after it, which is cheap.
"""

from __future__ import annotations

import pytest

from specs.interrupts import Faults, Interrupted, at_checkpoints, code_objects
from tests.kvcache.pool_support import free_ids, snapshot
from verified_queue.kvcache import _repair as repair_module
from verified_queue.kvcache import pool as pool_module
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool

#: What get_new_blocks(6) takes from the pool of _cached_front, front first.
TAKEN = [4, 5, 6, 7, 3, 2]


def _cached_front() -> BlockPool:
    """A pool whose free queue is 4, 5, 6, 7, 3, 2, 1 (out of id order), 1 to 3 cached."""
    pool = BlockPool(8)
    first = pool.get_new_blocks(4)  # 1, 2, 3 full; 4 partial
    pool.cache_full_blocks(first, hash_request_tokens(list(range(6)), 2), 0, 3)
    pool.free_blocks(reversed(first))  # 4 to the front, 3, 2, 1 to the back
    assert free_ids(pool) == [*TAKEN, 1]
    return pool


def _state(pool: BlockPool) -> tuple[object, ...]:
    """Everything get_new_blocks may change: the free order, counts, hashes, cache, counters."""
    return (*snapshot(pool), pool.num_allocated, pool.num_evicted)


@pytest.mark.parametrize("burst", [2, 3])
def test_a_burst_of_interrupts_from_each_checkpoint_leaves_the_pool_as_before(burst: int) -> None:
    """Interrupted at any checkpoint and at the next ones, get_new_blocks raises, all undone."""
    # The pool's and its repairs' frames, read when the test runs, not at import: a mutation
    # run swaps a mutant's code in after import.
    codes = code_objects([pool_module, repair_module])
    at = 1
    while True:
        pool = _cached_front()
        before = _state(pool)
        faults = Faults(frozenset(range(at, at + burst)))
        arrived: Interrupted | None = None
        try:
            with at_checkpoints(faults, codes):
                taken = pool.get_new_blocks(6)  # evicting the keys of 3 and 2
        except Interrupted as error:
            arrived = error
        if arrived is None:
            assert not faults.fired, f"from {at}: returned though interrupted"
            assert [block.block_id for block in taken] == TAKEN
            break
        assert faults.fired, "an interrupt that was never raised"
        assert arrived is faults.fired[-1], f"from {at}: not the last interrupt to arrive"
        pool.check_consistency()
        assert _state(pool) == before, f"from {at}: not as before the call"
        at += 1
    assert at > 10, "too few checkpoints: the interrupts did not reach the pool's code"
