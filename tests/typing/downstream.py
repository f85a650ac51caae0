# pyright: strict
"""A downstream module using the public API, type-checked by mypy --strict and pyright --strict.

It is never imported by the test run: ``tox -e typing`` hands it to both type checkers,
which must accept it with no error. Each ``assert_type`` pins the type a user sees; a
change that widens a result to ``Any`` or breaks the drop-in block shape fails that env.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from typing_extensions import assert_type

from verified_queue import (
    Block,
    CheckedFreeBlockQueue,
    FreeBlockQueue,
    InvariantViolation,
    Linkable,
    QueueError,
)
from verified_queue.invariants import check_invariants


@dataclass(slots=True)
class EngineBlock:
    """vLLM's block shape: not a Block, its own link fields, a generated __eq__."""

    block_id: int
    ref_cnt: int = 0
    pool: object | None = field(default=None, repr=False, compare=False, kw_only=True)
    prev_free_block: EngineBlock | None = None
    next_free_block: EngineBlock | None = None


@dataclass(slots=True, eq=False)
class PoolBlock(Block):
    """The Block-subclass form, which both builds take."""

    block_id: int
    ref_cnt: int = 0


def engine_queue(blocks: list[EngineBlock]) -> FreeBlockQueue[EngineBlock]:
    """Every method of the queue, over vLLM's own block shape."""
    queue: FreeBlockQueue[EngineBlock] = FreeBlockQueue(blocks)
    assert_type(queue.popleft(), EngineBlock)
    assert_type(queue.popleft_n(2), list[EngineBlock])
    queue.append(blocks[0])
    queue.append_n(blocks[1:2])
    queue.prepend_n(iter(blocks[2:3]))
    queue.remove(blocks[0])
    assert_type(queue.get_all_free_blocks(), list[EngineBlock])
    assert_type(queue.iter_blocks_after(None), Iterator[EngineBlock])
    assert_type(queue.iter_blocks_after(blocks[1]), Iterator[EngineBlock])
    assert_type(len(queue), int)
    assert_type(bool(queue), bool)
    assert_type(queue.num_free_blocks, int)
    assert_type(list(queue), list[EngineBlock])
    assert_type(blocks[0] in queue, bool)
    return queue


def pool_queue(blocks: list[PoolBlock]) -> CheckedFreeBlockQueue[PoolBlock]:
    """The checked queue is a FreeBlockQueue with the same element type."""
    checked = CheckedFreeBlockQueue(blocks, full_check_every=0)
    assert_type(checked, CheckedFreeBlockQueue[PoolBlock])
    production: FreeBlockQueue[PoolBlock] = checked
    assert_type(production.popleft(), PoolBlock)
    checked.full_check()
    check_invariants(checked)
    return checked


def follower(block: Linkable) -> Linkable | None:
    """What any block shape's next link is, statically."""
    return block.next_free_block


def shapes() -> None:
    """Both block shapes are Linkable; the exceptions are one family."""
    for linkable in (EngineBlock(0), PoolBlock(1)):
        assert_type(follower(linkable), Linkable | None)
    try:
        engine_queue([EngineBlock(i) for i in range(4)])
    except InvariantViolation as error:
        assert_type(error.invariant, str)
    except QueueError:
        pass
