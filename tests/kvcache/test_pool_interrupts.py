"""A block-pool call cut short by an interrupt, wherever a signal handler can run, leaks nothing."""

from __future__ import annotations

import dis
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

import pytest

from specs.interrupts import Interrupted
from tests.kvcache.pool_support import InterruptedAfterTakingQueue
from verified_queue.kvcache import pool as pool_module
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool

#: The instructions before which CPython may run a signal handler (the eval breaker).
CHECKPOINTS = frozenset(
    {"RESUME", "CALL", "CALL_FUNCTION_EX", "CALL_KW", "JUMP_BACKWARD"}
    | {f"POP_JUMP_BACKWARD_IF_{test}" for test in ("FALSE", "TRUE", "NONE", "NOT_NONE")}
    # Python 3.10's names for calls and backward jumps.
    | {"CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD", "JUMP_ABSOLUTE"}
)
#: Python 3.13 sends a trace function no opcode events here: each line start stands in for
#: the checkpoints (more points than CPython has, none fewer).
LINES_ARE_CHECKPOINTS = sys.version_info >= (3, 13)


@contextmanager
def interrupting(at: int) -> Iterator[list[int]]:
    """Raise Interrupted at the ``at``-th point of the pool's code where a handler may run."""
    checkpoints = [0]

    def passed() -> None:
        checkpoints[0] += 1
        if checkpoints[0] == at:
            raise Interrupted  # the interpreter then drops the trace function: one interrupt

    def local(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "opcode":
            # Traced, 3.12+ may run a checkpoint's instrumented twin (INSTRUMENTED_CALL, ...).
            name = dis.opname[frame.f_code.co_code[frame.f_lasti]].removeprefix("INSTRUMENTED_")
            if name in CHECKPOINTS:
                passed()
        elif event == "line" and LINES_ARE_CHECKPOINTS:
            passed()
        return local

    def tracer(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "call" and frame.f_code.co_filename == pool_module.__file__:
            frame.f_trace_opcodes = True
            passed()
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield checkpoints
    finally:
        sys.settrace(previous)


def _get_interrupted_at(at: int, duplicated: bool) -> bool:
    """get_new_blocks on a pool with cached free blocks, interrupted at point ``at``; checked.

    ``duplicated``: each key is cached in two blocks, so an eviction leaves its entry non-empty.
    """
    pool = BlockPool(8)
    keys = hash_request_tokens(list(range(6)), 2)
    first = pool.get_new_blocks(3)
    pool.cache_full_blocks(first, keys, 0, 3)
    if duplicated:
        # Two requests with the same prompt filled their blocks in the same step.
        second = pool.get_new_blocks(3)
        pool.cache_full_blocks(second, keys, 0, 3)
        pool.free_blocks(reversed(second))
    pool.free_blocks(reversed(first))
    free = pool.get_num_free_blocks()
    taken: list[Any] = []
    with interrupting(at) as lines, suppress(Interrupted):
        taken = pool.get_new_blocks(5)
    pool.check_consistency()
    # As before (nothing taken, all free) or as after (five taken, each held once).
    assert pool.get_num_free_blocks() + len(taken) == free
    assert all(block.ref_cnt == 1 for block in taken)
    return lines[0] >= at


@pytest.mark.parametrize("duplicated", [False, True], ids=["unique", "duplicated"])
def test_get_new_blocks_interrupted_at_any_line_leaks_nothing(duplicated: bool) -> None:
    """Every block is free or handed out, wherever in get_new_blocks an interrupt arrives."""
    at = 1
    while _get_interrupted_at(at, duplicated):
        at += 1
    assert at > 5


def test_blocks_taken_by_an_interrupted_popleft_n_go_back_to_the_front() -> None:
    """Blocks the queue gave up but the pool never received go back free, hashes kept."""
    pool = BlockPool(8, queue_factory=InterruptedAfterTakingQueue)
    held = pool.get_new_blocks(2)  # 1, 2: held, detached like the blocks about to be taken
    cached = pool.get_new_blocks(2)  # 3, 4
    keys = hash_request_tokens(list(range(4)), 2)
    pool.cache_full_blocks(cached, keys, 0, 2)
    pool.free_blocks(cached, evict_first=True)  # to the front, in this order
    queue = pool.free_block_queue
    assert isinstance(queue, InterruptedAfterTakingQueue)
    assert [block.block_id for block in queue] == [3, 4, 5, 6, 7]
    queue.armed = True
    with pytest.raises(Interrupted):
        pool.get_new_blocks(3)  # 3, 4 and 5 leave the queue; the pool never gets them
    assert [block.block_id for block in queue] == [3, 4, 5, 6, 7]
    assert [block.ref_cnt for block in pool.blocks] == [0, 1, 1, 0, 0, 0, 0, 0]
    assert [block.block_hash for block in cached] == keys
    assert (pool.num_allocated, pool.num_evicted) == (4, 0)
    assert [block.ref_cnt for block in held] == [1, 1]
    pool.check_consistency()
