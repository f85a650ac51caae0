"""Tests of Block: detached from birth in every subclass shape, a repr that never walks links."""

from __future__ import annotations

import dataclasses

import pytest
from block_types import KVCacheBlock, NumberedBlock

import verified_queue
from verified_queue import Block, FreeBlockQueue


def test_plain_block_starts_detached() -> None:
    """Block() has both links None and takes no arguments."""
    block = Block()
    assert block.prev_free_block is None
    assert block.next_free_block is None
    with pytest.raises(TypeError):
        Block(1)  # type: ignore[call-arg]  # Block.__init__ takes no arguments


def test_block_has_only_link_slots() -> None:
    """Block is slotted with exactly the two links, so instances carry no __dict__."""
    if not verified_queue.COMPILED:
        # Compiled, Block is a native class: its links are C struct fields, not __slots__.
        assert Block.__slots__ == ("prev_free_block", "next_free_block")
    assert not hasattr(Block(), "__dict__")
    with pytest.raises(AttributeError):
        Block().extra = 1  # type: ignore[attr-defined]  # the point: no room for it


def test_subclass_that_skips_block_init_starts_detached() -> None:
    """A subclass whose __init__ never calls Block.__init__ still starts detached."""
    block = NumberedBlock(7)
    assert block.prev_free_block is None
    assert block.next_free_block is None
    assert not hasattr(block, "__dict__")


def test_slotted_dataclass_subclass_needs_no_extra_code() -> None:
    """A @dataclass(slots=True) subclass with a required field starts detached and keeps __eq__."""
    block = KVCacheBlock(3)
    assert block.prev_free_block is None
    assert block.next_free_block is None
    assert block == KVCacheBlock(3)
    assert [field.name for field in dataclasses.fields(block)] == [
        "block_id",
        "ref_cnt",
        "block_hash",
    ]
    assert repr(block) == "KVCacheBlock(block_id=3, ref_cnt=0, block_hash=None)"


def test_equal_dataclass_blocks_stay_distinct_in_the_queue() -> None:
    """Blocks that compare equal are still told apart by identity in every operation."""
    twins = [KVCacheBlock(0) for _ in range(3)]
    queue = FreeBlockQueue(twins)
    queue.remove(twins[1])
    assert [b is t for b, t in zip(queue, [twins[0], twins[2]], strict=True)] == [True, True]
    queue.append(twins[1])
    assert queue.popleft() is twins[0]
    assert queue.popleft() is twins[2]
    assert queue.popleft() is twins[1]


def test_block_repr_shows_link_state_only() -> None:
    """Block's repr says linked or detached and names no neighbour."""
    block = Block()
    assert repr(block).endswith(", detached>")
    FreeBlockQueue([block])
    assert repr(block).endswith(", linked>")
    assert "sentinel" not in repr(block)


def test_repr_of_block_in_long_chain_does_not_recurse() -> None:
    """The repr of a block in a 100,000-block chain is short and does not follow the links."""
    blocks = [Block() for _ in range(100_000)]
    queue = FreeBlockQueue(blocks)
    assert len(repr(blocks[50_000])) < 80
    assert len(repr(queue)) < 80
    assert len(repr(queue.fake_free_list_head)) < 80
