"""Check mode's walks: when a walk that outlasts the membership runs the full check."""

from __future__ import annotations

from typing import Any

import pytest

from verified_queue import Block, CheckedFreeBlockQueue, InvariantViolation


def test_a_ring_of_members_is_reported_one_step_past_the_membership() -> None:
    """A walk in a ring of members with agreeing links yields n + 1 blocks, then raises."""
    blocks = [Block() for _ in range(3)]
    queue = CheckedFreeBlockQueue(blocks, full_check_every=0)
    blocks[2].next_free_block = blocks[0]  # b0 -> b1 -> b2 -> b0, every back link agreeing
    blocks[0].prev_free_block = blocks[2]
    walked: list[Block] = []
    with pytest.raises(InvariantViolation) as caught:
        walked.extend(queue.iter_blocks_after(blocks[0]))
    assert [id(block) for block in walked] == [id(blocks[i]) for i in (1, 2, 0, 1)]
    assert caught.value.invariant == "sentinel_linkage"


def test_a_growing_walk_runs_the_full_check_past_the_membership_and_again_after_as_many_steps(
    monkeypatch: Any,
) -> None:
    """A walk that outlasts the membership checks it all, then again after that many steps."""
    queue = CheckedFreeBlockQueue([Block()], full_check_every=0)
    walked: list[Block] = []
    checked_at: list[int] = []
    full_check = CheckedFreeBlockQueue.full_check

    def counting(self: CheckedFreeBlockQueue[Block]) -> None:
        checked_at.append(len(walked) + 1)
        full_check(self)

    monkeypatch.setattr(CheckedFreeBlockQueue, "full_check", counting)
    for block in queue.iter_blocks_after(None):
        walked.append(block)
        if len(walked) <= 7:
            queue.append(Block())  # one block more per step, 8 blocks in all
    assert len(walked) == 8
    # The walk started with 1 block, so step 3 is past that membership and runs the check;
    # the membership is 3 by then, so the walk may take 3 + 1 steps more (4 to 7) before
    # the next check, at step 8.
    assert checked_at == [3, 8]
