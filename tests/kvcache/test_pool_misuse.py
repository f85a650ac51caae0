"""Misuse of the BlockPool: double frees, blocks it refuses, breaks it reports, faults undone.

Each misuse is refused with the pool unchanged, or reported by ``check_consistency``; a
free queue that fails part-way through a free leaves every pool as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import pytest

from tests.kvcache.pool_support import (
    BLOCK_SIZE,
    admit,
    checked_queue,
    finish,
    free_ids,
    ids,
    snapshot,
    tokens,
)
from verified_queue import AlreadyInQueueError, Block
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError
from verified_queue.kvcache.keys import BlockHash, hash_request_tokens
from verified_queue.kvcache.pool import BlockPool, QueueFactory
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import History, TracedFreeBlockQueue

# --- misuse ----------------------------------------------------------------------------------


def test_a_double_free_is_rejected_and_every_count_restored() -> None:
    """Freeing a request's blocks twice raises AlreadyInQueueError and leaves the pool as it was."""
    pool = BlockPool(8)
    shared = admit(pool, tokens(0, 2 * BLOCK_SIZE + 1))
    other = admit(pool, tokens(0, 2 * BLOCK_SIZE + 2))  # shares the first two blocks
    finish(pool, shared)
    counts = [block.ref_cnt for block in pool.blocks]
    order = free_ids(pool)
    with pytest.raises(DoubleFreeError, match=r"ref_cnt=0.*would drop to -1 \(a double free"):
        finish(pool, shared)
    assert [block.ref_cnt for block in pool.blocks] == counts
    assert free_ids(pool) == order
    assert pool.num_freed == 1
    pool.check_consistency()
    finish(pool, other)
    pool.check_consistency()


def test_a_block_repeated_in_one_free_is_a_double_free() -> None:
    """A block listed twice in one free_blocks call, with one reference, is rejected."""
    pool = BlockPool(4)
    (block,) = pool.get_new_blocks(1)
    with pytest.raises(AlreadyInQueueError, match="would drop to -1"):
        pool.free_blocks([block, block])
    assert block.ref_cnt == 1
    assert free_ids(pool) == [2, 3]
    pool.check_consistency()


def plant_foreign_cache_entry(pool: BlockPool) -> None:
    """Register a block of no pool, carrying block 1's key, under that key as block 3."""
    key = pool.blocks[1].block_hash
    assert key is not None
    stranger = KVCacheBlock(3)
    stranger.set_block_hash(key)
    pool.cached_block_hash_to_block[key][3] = stranger


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda pool: setattr(pool.blocks[3], "ref_cnt", 1), r"block_id=3.*in the free queue"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", -1), r"block_id=1.*out of the free"),
        (lambda pool: setattr(pool.blocks[1], "ref_cnt", 0), r"block_id=1.*out of the free"),
        (lambda pool: pool.blocks[1].reset_hash(), r"cached under a hash it"),
        (lambda pool: pool.cached_block_hash_to_block.clear(), r"not cached under its hash"),
        (lambda pool: pool.null_block.set_block_hash(BlockHash(b"k")), "null"),
        (lambda pool: setattr(pool.null_block, "is_null", False), "unmarked"),
        (lambda pool: setattr(pool.blocks[3], "is_null", True), "marked null"),
        (lambda pool: setattr(pool.blocks[2], "pool", None), "does not name this pool"),
        (lambda pool: setattr(pool.blocks[2], "block_id", 7), "does not name this pool"),
        (lambda pool: pool.free_block_queue.append(pool.null_block), "null block"),
        (
            lambda pool: pool.free_block_queue.append(KVCacheBlock(1)),
            r"^the free queue holds a block this pool does not own \(P5\)$",
        ),
        pytest.param(
            lambda pool: setattr(pool.free_block_queue, "num_free_blocks", 9),
            "counts 9",
            marks=pytest.mark.production_only,  # check mode flags the count first, its own way
        ),
        (
            lambda pool: pool.cached_block_hash_to_block.update({BlockHash(bytes(range(8))): {}}),
            r"^an empty entry is cached under 000102030405\.\.\. \(P3\)$",
        ),
        (
            lambda pool: pool.cached_block_hash_to_block.update(
                {BlockHash(b"k"): {3: pool.blocks[3]}}
            ),
            "cached under a hash it lacks",
        ),
        (plant_foreign_cache_entry, "cached but not a block of this pool"),
    ],
)
def test_check_consistency_catches_each_planted_break(
    plant: Callable[[BlockPool], object], message: str
) -> None:
    """Each way of breaking P1..P3, P5 or the count is reported by check_consistency."""
    pool = BlockPool(4)
    admit(pool, tokens(0, BLOCK_SIZE + 1))  # blocks 1 (cached, in use) and 2 (partial)
    pool.check_consistency()
    plant(pool)
    with pytest.raises(BlockPoolError, match=message):
        pool.check_consistency()


def test_free_blocks_refuses_a_held_block_that_is_linked() -> None:
    """A block whose count says held but which is in the free queue (P2 broken) is refused."""
    pool = BlockPool(5)
    held = pool.get_new_blocks(1)
    pool.blocks[3].ref_cnt = 1  # a count written by hand: block 3 is still in the free queue
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match=r"block_id=3.*held, yet linked .*P2 broken"):
        pool.free_blocks([*held, pool.blocks[3]])
    assert snapshot(pool) == before


@pytest.mark.parametrize("link", ["prev_free_block", "next_free_block"])
def test_free_blocks_refuses_a_held_block_linked_at_one_end(link: str) -> None:
    """A held block with a single stale link, either one, is refused and nothing changes (P2)."""
    pool = BlockPool(5)
    held = pool.get_new_blocks(2)
    setattr(held[1], link, pool.blocks[3])
    before = snapshot(pool)
    with pytest.raises(BlockPoolError) as caught:
        pool.free_blocks(held)
    assert str(caught.value) == (
        f"free_blocks({held[1]!r}): held, yet linked in a free queue (P2 broken)"
    )
    assert snapshot(pool) == before
    assert [block.ref_cnt for block in held] == [1, 1]


class BoundedWalkQueue(FreeBlockQueue[KVCacheBlock]):
    """A free queue whose iteration fails after 100 blocks, so a missed cycle fails, not hangs."""

    __slots__ = ()

    def __iter__(self) -> Iterator[KVCacheBlock]:
        """Yield the blocks front to back; raise AssertionError at the 101st."""
        for steps, block in enumerate(super().__iter__()):
            if steps == 100:
                raise AssertionError("the walk went on past 100 blocks")
            yield block


@pytest.mark.production_only  # check mode stops the second linking itself
def test_check_consistency_catches_a_block_queued_twice() -> None:
    """A block that appears twice in the free queue (a corrupted link) is reported."""
    pool = BlockPool(4, queue_factory=BoundedWalkQueue)
    first: Block = pool.blocks[1]
    second: Block = pool.blocks[2]
    second.next_free_block = first  # the walk now loops 1 -> 2 -> 1
    with pytest.raises(BlockPoolError) as caught:
        pool.check_consistency()
    assert str(caught.value) == f"{first!r} is in the free queue twice (position 2)"


def test_a_stale_hash_the_cache_lost_is_caught_at_eviction() -> None:
    """Evicting a block whose hash is not registered raises instead of corrupting the cache."""
    pool = BlockPool(3)
    finish(pool, admit(pool, tokens(0, BLOCK_SIZE)))
    pool.cached_block_hash_to_block.clear()
    before = free_ids(pool)
    with pytest.raises(BlockPoolError, match="P3"):
        pool.get_new_blocks(2)
    # Handed back to the front in order, the key no entry held dropped (P3 holds again).
    assert free_ids(pool) == before
    assert [block.block_hash for block in pool.blocks] == [None] * 3
    assert pool.num_evicted == 0
    pool.check_consistency()


def test_a_block_its_hash_entry_lost_is_caught_at_eviction() -> None:
    """Evicting a block whose key's entry lists only its duplicate raises BlockPoolError (P3)."""
    pool = BlockPool(4)
    first = admit(pool, tokens(0, BLOCK_SIZE))  # block 1
    duplicate = pool.get_new_blocks(1)  # block 2, filled with the same tokens
    pool.cache_full_blocks(duplicate, first.hashes, 0, 1)
    finish(pool, first)
    pool.free_blocks(duplicate)
    key = first.hashes[0]
    del pool.cached_block_hash_to_block[key][1]  # block 1 keeps the key; the entry drops it
    stale = pool.blocks[1]
    message = f"{stale!r} carries a hash it is not cached under (P3 broken)"
    assert free_ids(pool) == [3, 1, 2]
    with pytest.raises(BlockPoolError) as caught:
        pool.get_new_blocks(2)
    assert str(caught.value) == message
    # Handed back to the front in order; the stale key is dropped, the duplicate stays cached.
    assert free_ids(pool) == [3, 1, 2]
    assert (stale.block_hash, pool.cached_block_hash_to_block) == (None, {key: {2: duplicate[0]}})
    assert pool.num_evicted == 0
    pool.check_consistency()


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_cache_full_blocks_refuses_a_block_listed_twice(queue_factory: QueueFactory) -> None:
    """cache_full_blocks([b, b], ...) raises BlockPoolError and caches nothing (P3 holds)."""
    pool = BlockPool(5, queue_factory=queue_factory)
    (block,) = pool.get_new_blocks(1)
    keys = hash_request_tokens(tokens(0, 2 * BLOCK_SIZE), BLOCK_SIZE)
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match="appears twice"):
        pool.cache_full_blocks([block, block], keys, 0, 2)
    assert snapshot(pool) == before
    pool.check_consistency()


@pytest.mark.parametrize("queue_factory", [FreeBlockQueue, checked_queue], ids=["plain", "checked"])
def test_cache_full_blocks_refuses_the_null_block(queue_factory: QueueFactory) -> None:
    """cache_full_blocks([pool.null_block], ...) raises BlockPoolError and caches nothing (P1)."""
    pool = BlockPool(5, queue_factory=queue_factory)
    (block,) = pool.get_new_blocks(1)
    keys = hash_request_tokens(tokens(0, 2 * BLOCK_SIZE), BLOCK_SIZE)
    before = snapshot(pool)
    with pytest.raises(BlockPoolError, match=r"null block .* is never cached"):
        pool.cache_full_blocks([pool.null_block], keys, 0, 1)
    with pytest.raises(BlockPoolError, match="null block"):
        pool.cache_full_blocks([block, pool.null_block], keys, 0, 2)  # after a good block, too
    assert snapshot(pool) == before
    pool.check_consistency()


# --- faults in the free queue, and the trace of a double free --------------------------------


class FailingAppendQueue(FreeBlockQueue[KVCacheBlock]):
    """A free queue whose append_n fails once armed: a fault after prepend_n succeeded."""

    __slots__ = ("armed",)

    armed: bool

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Build the queue unarmed."""
        self.armed = False
        super().__init__(blocks)

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Raise once armed and given blocks; otherwise append them."""
        batch = list(blocks)
        if self.armed and batch:
            raise MemoryError("planted failure in append_n")
        super().append_n(batch)


def arm(pool: BlockPool) -> None:
    """Make the pool's FailingAppendQueue fail every append_n of blocks from now on."""
    queue = pool.free_block_queue
    assert isinstance(queue, FailingAppendQueue)
    queue.armed = True


def test_free_blocks_undoes_the_prepend_when_the_append_fails() -> None:
    """If append_n fails after prepend_n linked the uncached blocks, both are undone."""
    pool = BlockPool(6, queue_factory=FailingAppendQueue)
    request = admit(pool, tokens(0, BLOCK_SIZE + 1))  # 1 cached (to the back), 2 uncached
    arm(pool)
    before = snapshot(pool)
    with pytest.raises(MemoryError):
        finish(pool, request)
    assert snapshot(pool) == before
    pool.check_consistency()


def test_free_blocks_undoes_our_pool_when_a_routed_pool_fails() -> None:
    """If the pool a block is routed to fails, the blocks freed here are taken back, counts too."""
    ours = BlockPool(6)
    theirs = BlockPool(6, queue_factory=FailingAppendQueue)
    mine = admit(ours, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    sharer = admit(ours, tokens(0, BLOCK_SIZE + 1))  # hits block 1, takes block 4
    assert ids(sharer.blocks) == [1, 4]
    foreign = admit(theirs, tokens(0, BLOCK_SIZE + 1))
    arm(theirs)
    before = (snapshot(ours), snapshot(theirs))
    with pytest.raises(MemoryError):
        ours.free_blocks([*reversed(mine.blocks), *reversed(foreign.blocks)])
    assert (snapshot(ours), snapshot(theirs)) == before
    assert [block.ref_cnt for block in ours.blocks] == [0, 2, 1, 1, 1, 0]  # block 1: 2, not 1
    ours.check_consistency()
    theirs.check_consistency()


def test_a_failed_append_gives_a_shared_block_its_count_back() -> None:
    """When append_n fails, a block another request still holds gets back 2, its count, not 1."""
    pool = BlockPool(6, queue_factory=FailingAppendQueue)
    first = admit(pool, tokens(0, 2 * BLOCK_SIZE + 1))  # 1, 2 cached, 3 partial
    second = admit(pool, tokens(0, BLOCK_SIZE + 1))  # hits block 1, takes block 4
    assert ids(second.blocks) == [1, 4]
    arm(pool)
    before = snapshot(pool)
    with pytest.raises(MemoryError):
        finish(pool, first)  # 3 to the front, 2 to the back (fails), 1 still held by second
    assert snapshot(pool) == before
    assert [block.ref_cnt for block in pool.blocks] == [0, 2, 1, 1, 1, 0]
    pool.check_consistency()


def without_places(text: str) -> str:
    """Drop the ``at FILE:LINE in FUNCTION`` of each recorded call: they name the test runner."""
    return re.sub(r" at \S+:\d+ in \S+", "", text)


def test_a_traced_free_queue_says_where_a_double_freed_block_was_freed() -> None:
    """With the trace level's queue, a double free names the free before it, word for word."""
    pool = BlockPool(4, queue_factory=TracedFreeBlockQueue)
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks)
    with pytest.raises(DoubleFreeError) as caught:
        pool.free_blocks(blocks[:1])
    shown = [str(caught.value), *getattr(caught.value, "__notes__", ())]  # notes on 3.11+
    assert without_places("\n".join(shown)) == (
        "free_blocks(KVCacheBlock(block_id=1, ref_cnt=0, block_hash=None)): freed more often"
        " than it is held, its ref_cnt would drop to -1 (a double free?)\n"
        "  this call: free_blocks() (thread MainThread), after #4\n"
        "  freed before by: #4 prepend_n() (thread MainThread)\n"
        "  taken since: never, the block is still in this queue\n"
        "  taken before that by: #3 popleft_n() (thread MainThread)"
    )
    history = getattr(caught.value, "history", None)
    assert isinstance(history, History)
    assert (history.call.number, history.call.name) == (None, "free_blocks")
    (record,) = history.blocks
    assert record.block == repr(blocks[0])
    assert free_ids(pool) == [1, 2, 3]
    assert [block.ref_cnt for block in pool.blocks] == [0, 0, 0, 0]
