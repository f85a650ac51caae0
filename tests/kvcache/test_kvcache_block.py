"""Tests of the pool's block (``verified_queue/kvcache/block.py``), field by field.

How a key is shown, the refusal of a second key, the cleared key, and what copy and pickle
do with the weak reference to the pool: each pinned to the value, so that a change to any
of them fails here and not only somewhere deep in the pool's tests.
"""

from __future__ import annotations

import copy
import pickle
import weakref

import pytest

from verified_queue.kvcache.block import KVCacheBlock, show_hash
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.kvcache.keys import BlockHash
from verified_queue.kvcache.pool import BlockPool

KEY = BlockHash(bytes(range(32)))


def test_show_hash_shows_six_bytes_of_a_key_in_hex() -> None:
    """A bytes key is its first six bytes in hex and an ellipsis: twelve digits, no more."""
    assert show_hash(KEY) == "000102030405..."
    assert show_hash(b"\xff\xfe") == "fffe..."


def test_show_hash_shows_any_other_key_by_its_repr() -> None:
    """A key that is not bytes (vLLM's keys may be ints or tuples) is shown by its own repr."""
    assert show_hash(None) == "None"
    assert show_hash(12345) == "12345"
    assert show_hash(("a", 1)) == "('a', 1)"


def test_the_repr_shows_the_blocks_key() -> None:
    """The repr names id, count and the key it holds, shown as show_hash shows it."""
    block = KVCacheBlock(7, 2)
    assert repr(block) == "KVCacheBlock(block_id=7, ref_cnt=2, block_hash=None)"
    block.set_block_hash(KEY)
    assert repr(block) == "KVCacheBlock(block_id=7, ref_cnt=2, block_hash=000102030405...)"


def test_set_block_hash_records_the_key_and_refuses_a_second_word_for_word() -> None:
    """The first key is recorded as given; a second is a BlockPoolError naming the block."""
    block = KVCacheBlock(4)
    block.set_block_hash(KEY)
    assert block.block_hash is KEY
    with pytest.raises(BlockPoolError) as caught:
        block.set_block_hash(BlockHash(b"other"))
    assert str(caught.value) == (
        "KVCacheBlock(block_id=4, ref_cnt=0, block_hash=000102030405...) has a hash already"
    )
    assert block.block_hash is KEY


def test_reset_hash_leaves_no_key_and_a_new_one_can_be_set() -> None:
    """After reset_hash the key is None itself (not a false stand-in), and a new key is taken."""
    block = KVCacheBlock(4)
    block.set_block_hash(KEY)
    block.reset_hash()
    assert block.block_hash is None
    block.set_block_hash(BlockHash(b"next"))
    assert block.block_hash == b"next"


def test_a_copy_of_a_pooled_block_refers_weakly_to_the_same_pool() -> None:
    """copy.copy keeps the fields and the pool, referred to by a weak reference again."""
    pool = BlockPool(3)
    block = pool.blocks[2]
    block.set_block_hash(KEY)
    block.ref_cnt = 1
    twin = copy.copy(block)
    assert type(twin.pool) is weakref.ref
    assert twin.pool() is pool
    assert (twin.block_id, twin.ref_cnt, twin.block_hash, twin.is_null) == (2, 1, KEY, False)
    assert twin.prev_free_block is None
    assert twin.next_free_block is None
    # The original is untouched by the copy.
    assert type(block.pool) is weakref.ref
    assert block.pool() is pool


def test_a_block_with_no_pool_copies_and_pickles_with_no_pool() -> None:
    """A block that belongs to no pool keeps ``pool`` None through copy, deepcopy and pickle."""
    block = KVCacheBlock(5, 3, is_null=True)
    block.set_block_hash(KEY)
    for twin in (
        copy.copy(block),
        copy.deepcopy(block),
        pickle.loads(pickle.dumps(block)),
    ):
        assert twin is not block
        assert twin.pool is None
        assert (twin.block_id, twin.ref_cnt, twin.block_hash, twin.is_null) == (5, 3, KEY, True)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_pools_blocks_refer_weakly_to_the_copy(how: str) -> None:
    """Each block of a deep-copied or unpickled pool names the new pool, weakly, fields kept."""
    pool = BlockPool(4)
    pool.blocks[3].set_block_hash(KEY)
    twin = copy.deepcopy(pool) if how == "deepcopy" else pickle.loads(pickle.dumps(pool))
    assert twin is not pool
    for number, block in enumerate(twin.blocks):
        assert type(block.pool) is weakref.ref
        assert block.pool() is twin
        assert block.block_id == number
        assert block is not pool.blocks[number]
    assert twin.blocks[3].block_hash == KEY
    assert twin.blocks[0].is_null
    # The original pool's blocks still name it.
    assert all(block.pool is not None and block.pool() is pool for block in pool.blocks)


def test_the_saved_state_holds_the_pool_itself_in_place_of_the_reference() -> None:
    """__getstate__ saves the pool object under "pool" (a weak reference cannot be pickled)."""
    pool = BlockPool(3)
    block = pool.blocks[1]
    attributes, slots = block.__getstate__()
    assert attributes is None
    assert slots["pool"] is pool
    assert slots["block_id"] == 1
    assert set(slots) == {"block_id", "ref_cnt", "pool", "block_hash", "is_null"}
    # Reading the state leaves the block's own reference weak.
    assert type(block.pool) is weakref.ref


def test_setstate_wraps_a_saved_pool_and_keeps_a_saved_reference() -> None:
    """__setstate__ refers weakly to a pool saved as an object, and keeps a saved reference."""
    pool = BlockPool(3)
    fresh = KVCacheBlock(0)
    fresh.__setstate__((None, {"block_id": 9, "pool": pool}))
    assert type(fresh.pool) is weakref.ref
    assert fresh.pool() is pool
    assert fresh.block_id == 9
    reference = weakref.ref(pool)
    kept = KVCacheBlock(0)
    kept.__setstate__((None, {"pool": reference}))
    assert kept.pool is reference
