"""A count written from outside is blamed on the count (I2), not on a link (I1).

vLLM's own tests write ``free_block_queue.num_free_blocks``; a count written higher than
the chain is long lets ``popleft_n`` walk to the tail sentinel. The links are sound then,
so the error must name I2, and the queue must be left as it was. The builders are in
``verified_queue._messages``; ``queue.py``'s ``popleft_n`` calls ``ran_off_the_chain``.
"""

from __future__ import annotations

import pytest

from verified_queue._messages import count_past_chain, lost_inner_link, ran_off_the_chain
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.queue import FreeBlockQueue


def _links(queue: FreeBlockQueue[Block], blocks: list[Block]) -> list[tuple[object, object]]:
    """Every link of the sentinels and the blocks, to compare before and after."""
    nodes = [queue.fake_free_list_head, *blocks, queue.fake_free_list_tail]
    return [(node.prev_free_block, node.next_free_block) for node in nodes]


def test_a_count_past_the_chain_is_built_as_i2() -> None:
    """The builder names the operation, both counts and I2 (count_consistency)."""
    error = count_past_chain("popleft_n", 4, 4, 3)
    assert isinstance(error, InvariantViolation)
    assert (error.clause, error.invariant) == ("I2", "count_consistency")
    assert (error.expected, error.found) == ("3", "4")
    assert str(error) == (
        "popleft_n(4): num_free_blocks is 4, but 3 blocks are linked (I2 broken by outside "
        "code: the count was written); nothing was changed"
    )


def test_a_walk_off_the_chain_blames_the_count_only_if_it_took_the_tail() -> None:
    """Having taken the tail, the walk met a sound chain (I2); short of it, a lost link (I1)."""
    queue: FreeBlockQueue[Block] = FreeBlockQueue()
    tail = queue.fake_free_list_tail
    blocks = [Block(), Block()]
    counted = ran_off_the_chain("popleft_n", tail, [*blocks, tail, None], 4, 4)
    assert (counted.clause, counted.expected) == ("I2", "2")
    lost = ran_off_the_chain("popleft_n", tail, [blocks[0], None], 2, 2)
    assert lost.clause == "I1"
    assert str(lost) == str(lost_inner_link("popleft_n", "head"))


@pytest.mark.parametrize(("written", "asked"), [(4, 4), (5, 5), (6, 5)])
def test_popleft_n_past_a_written_count_blames_the_count(written: int, asked: int) -> None:
    """With 3 blocks linked and a higher count written, popleft_n raises I2, changing nothing."""
    blocks = [Block() for _ in range(3)]
    queue = FreeBlockQueue(blocks)
    before = _links(queue, blocks)
    queue.num_free_blocks = written
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(asked)
    assert caught.value.clause == "I2"
    assert str(caught.value).startswith(f"popleft_n({asked}): num_free_blocks is {written}, but 3")
    assert _links(queue, blocks) == before
    assert queue.num_free_blocks == written


def test_popleft_n_over_a_cleared_link_blames_the_link_and_changes_nothing() -> None:
    """A block whose forward link outside code cleared is I1, and the queue stays as it was."""
    blocks = [Block() for _ in range(3)]
    queue = FreeBlockQueue(blocks)
    blocks[0].next_free_block = None
    before = _links(queue, blocks)
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(1)
    assert caught.value.clause == "I1"
    assert _links(queue, blocks) == before
