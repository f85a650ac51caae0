"""Allocator bugs of the classes vLLM and its neighbours shipped, replayed on vLLM's own BlockPool.

Each function takes a ``BlockPool`` of vLLM's (prefix caching on, a hash block of
:data:`BLOCK_SIZE` tokens, at least 4 blocks free) and does, through vLLM's own
methods and fields, what the buggy allocator did. :data:`FAULTS` says what check
mode must report for each: the pool's clause (``None``: the queue's refusal of a
double link, ``AlreadyInQueueError``), and whether at the faulty call itself or
at the next allocation (with the pool's full check at every unlink).

Used by ``test_pool_checks.py`` (vLLM's files from each pinned wheel) and by
``test_engine_pool.py`` (the installed vLLM, ``tox -e vllm-engine``, which copies
this file beside it): it imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

BLOCK_SIZE = 4


def block_hashes(prefix: int, count: int) -> list[bytes]:
    """The chained hashes of ``count`` full blocks of prompt ``prefix`` (shared by its requests)."""
    return [bytes([prefix, index]) * 16 for index in range(count)]


def request_of(prefix: int, count: int) -> SimpleNamespace:
    """What ``BlockPool.cache_full_blocks`` reads of a request (events are off)."""
    return SimpleNamespace(
        block_hashes=block_hashes(prefix, count), request_id=f"req-{prefix}", lora_request=None
    )


def free_twice(pool: Any) -> None:
    """vLLM #42571, TensorRT-LLM #14937: a block freed once more than it was held."""
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(blocks)
    pool.free_blocks(blocks[1:2])


def lower_without_linking(pool: Any) -> None:
    """A count lowered to 0, the block never appended: lost for the life of the server."""
    pool.get_new_blocks(2)[0].ref_cnt -= 1


def listed_twice(pool: Any) -> None:
    """A block listed twice in one free (a deferred free merged with a direct one)."""
    block = pool.get_new_blocks(1)[0]
    pool.free_blocks([block, block])


def reused_keeping_its_hash(pool: Any) -> None:
    """A cached block whose entry an eviction dropped, its hash kept: reused with a stale hash."""
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(request_of(0, 2), blocks, 0, 2, BLOCK_SIZE, 0)
    pool.free_blocks(list(reversed(blocks)))
    pool.cached_block_hash_to_block.pop(blocks[0].block_hash, blocks[0].block_id)


def queued_through_two_paths(pool: Any) -> None:
    """NVIDIA Dynamo #13398: a free block queued again through a second path."""
    block = pool.get_new_blocks(1)[0]
    pool.free_blocks([block])
    pool.free_block_queue.append(block)


#: Each class, and what check mode reports: the clause (``None``: the queue's double link)
#: and whether at the faulty call itself or at the next allocation.
FAULTS: dict[Callable[[Any], None], tuple[str | None, str]] = {
    free_twice: ("P2", "next allocation"),
    lower_without_linking: ("P2", "next allocation"),
    listed_twice: ("P2", "the call"),
    reused_keeping_its_hash: ("P3", "next allocation"),
    queued_through_two_paths: (None, "the call"),
}


def left_wrong(pool: Any) -> bool:
    """Whether vLLM's pool breaks one of its invariants, read from outside (a fault passed)."""
    queued = pool.free_block_queue.get_all_free_blocks()
    free = sum(block.ref_cnt == 0 for block in pool.blocks[1:])
    return (
        min(block.ref_cnt for block in pool.blocks) < 0
        or free != len(queued)
        or len({id(block) for block in queued}) != len(queued)
        or pool.free_block_queue.num_free_blocks != len(queued)
        or any(
            block.block_hash is not None
            and not pool.cached_block_hash_to_block.contain(block.block_hash, block.block_id)
            for block in queued
        )
    )
