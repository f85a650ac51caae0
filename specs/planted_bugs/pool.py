"""Pool bugs: planted bugs in the block pool (``verified_queue/kvcache/pool.py``).

Each class overrides one method of :class:`~verified_queue.kvcache.pool.BlockPool` with the
production method copied and one realistic defect; messages and everything else are the
production code's. They are the bugs of kind ``"pool"`` in
:data:`specs.planted_bugs.kvcache.CLIENT_CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from verified_queue.errors import EmptyQueueError
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError
from verified_queue.kvcache.keys import BlockHash
from verified_queue.kvcache.pool import BlockPool, _FreePlan

__all__ = [
    "CacheOverwritesDuplicate",
    "EvictDropsEveryDuplicate",
    "FindHitSkipsMiss",
    "FreeCountsEachListingAlone",
    "FreeIgnoresEvictFirst",
    "GetNewBlocksLeavesCacheEntry",
    "ResetCountsNullBlockFree",
    "TouchSetsCountToOne",
]


class TouchSetsCountToOne(BlockPool):
    """``touch`` sets a hit block's count to 1, as allocation does, instead of adding one.

    A block shared by two requests then counts one holder: the first to finish frees it
    while the other still reads it.
    """

    __slots__ = ()

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each block, but as ``ref_cnt = 1``."""
        queue_remove = self.free_block_queue.remove
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                queue_remove(block)
            block.ref_cnt = 1  # should be += 1
            self.num_touched += 1


class GetNewBlocksLeavesCacheEntry(BlockPool):
    """Allocation clears a reused block's hash but leaves it in the cache (P3 broken).

    A later prefix lookup then hits a block another request is writing over.
    """

    __slots__ = ()

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take blocks from the front, forgetting their hashes on the block only."""
        free = len(self.free_block_queue)
        if num_blocks > free:
            raise EmptyQueueError(f"cannot get {num_blocks} blocks from a pool with {free} free")
        blocks: list[KVCacheBlock] = []
        allocated = self.num_allocated
        try:
            blocks = self.free_block_queue.popleft_n(num_blocks)
            for block in blocks:
                block_hash = block.block_hash
                if block_hash is not None:
                    block.reset_hash()  # should be self._evict_cached_hash(block, block_hash)
                    self.num_evicted += 1
                block.ref_cnt = 1  # P2: it was 0 while the block was free
            # Inside the try, up to the return: a trace function may raise at any line start.
            self.num_allocated = allocated + num_blocks
            return blocks
        except BaseException:
            # Cut short (an interrupt): the caller never gets the blocks, so they go back
            # to the front, in order, free (P2). A hash already dropped stays dropped, as
            # lazy eviction may drop any free block's.
            if not blocks and len(self.free_block_queue) < free:
                # Taken, but interrupted as the call returned, before its list was stored:
                # they are the pool's detached blocks that are free by their count (P2).
                blocks = [
                    block
                    for block in self.blocks
                    if block.ref_cnt == 0 and not block.is_null and block.prev_free_block is None
                ]
            for block in blocks:
                block.ref_cnt = 0
                self._finish_eviction(block)
            self.free_block_queue.prepend_n(blocks)
            self.num_allocated = allocated
            raise


class EvictDropsEveryDuplicate(BlockPool):
    """Evicting one block deletes its hash's whole entry, other blocks with that hash included.

    Those keep their hash but are no longer cached under it (P3 broken): never hit again.
    """

    __slots__ = ()

    def _evict_cached_hash(self, block: KVCacheBlock, block_hash: BlockHash) -> None:
        """Drop the hash's entry, not just this block's place in it."""
        cached = self.cached_block_hash_to_block.get(block_hash)
        if cached is None or cached.pop(block.block_id, None) is None:
            raise BlockPoolError(f"{block!r} carries a hash it is not cached under (P3 broken)")
        del self.cached_block_hash_to_block[block_hash]  # should only if the entry is now empty
        block.reset_hash()
        self.num_evicted += 1


class CacheOverwritesDuplicate(BlockPool):
    """Caching a block under a hash already cached replaces the entry instead of adding to it.

    The block cached first keeps its hash but leaves the cache (P3 broken).
    """

    __slots__ = ()

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Cache the new full blocks, each as the only block of its hash."""
        if not self.enable_caching:
            return
        new_blocks = blocks[num_cached_blocks:num_full_blocks]
        new_hashes = block_hashes[num_cached_blocks:num_full_blocks]
        if len(new_hashes) != len(new_blocks):
            raise BlockPoolError(
                f"{len(new_blocks)} blocks to cache but {len(new_hashes)} block hashes"
            )
        seen: set[int] = set()  # ids, never blocks (P4)
        for block in new_blocks:
            if block.is_null:
                raise BlockPoolError(f"the null block {block!r} is never cached (P1)")
            if not self.owns(block):
                raise BlockPoolError(f"{block!r} is not a block of this pool (P5)")
            if block.block_hash is not None:
                raise BlockPoolError(f"{block!r} is cached already")
            if id(block) in seen:
                raise BlockPoolError(f"{block!r} appears twice among the blocks to cache")
            seen.add(id(block))
        cache = self.cached_block_hash_to_block
        for block, block_hash in zip(new_blocks, new_hashes, strict=True):
            block.set_block_hash(block_hash)  # P3: set and registered together
            cache[block_hash] = {block.block_id: block}  # should add to an existing entry


class FindHitSkipsMiss(BlockPool):
    """The prefix lookup skips a missing key and goes on, instead of stopping at it.

    A hit is then no longer a prefix: a request reuses a block whose parent it recomputes.
    """

    __slots__ = ()

    def find_longest_cache_hit(self, block_hashes: Iterable[BlockHash]) -> list[KVCacheBlock]:
        """Return the cached blocks of ``block_hashes``, passing over misses."""
        hit: list[KVCacheBlock] = []
        cache = self.cached_block_hash_to_block
        for block_hash in block_hashes:
            cached = cache.get(block_hash)
            if not cached:
                continue  # should be break
            hit.append(next(iter(cached.values())))
        return hit


class FreeIgnoresEvictFirst(BlockPool):
    """``free_blocks`` sends released cached blocks to the back even with ``evict_first``.

    Blocks another tier already holds are then kept longest instead of evicted first.
    """

    __slots__ = ()

    def _plan_free(self, blocks: list[KVCacheBlock], evict_first: bool) -> _FreePlan:  # noqa: ARG002 -- the bug
        """Plan the free as if ``evict_first`` were never given."""
        to_front: list[KVCacheBlock] = []
        to_back: list[KVCacheBlock] = []
        # A block listed several times drops several references: count them by id (P4).
        left: dict[int, int] = {}
        to_back_if_cached = self.enable_caching  # should be: and not evict_first
        for block in blocks:
            if not self.owns(block):
                raise BlockPoolError(
                    f"free_blocks({block!r}): the block names a pool that does not own it (P5)"
                )
            count = left.get(id(block), block.ref_cnt) - 1
            if count < 0:
                error = DoubleFreeError(
                    f"free_blocks({block!r}): freed more often than it is held, "
                    f"its ref_cnt would drop to {count} (a double free?)"
                )
                # A traced free queue (the trace level) adds where the block was freed before.
                annotate = getattr(self.free_block_queue, "annotate", None)
                if annotate is not None:
                    annotate(error, "free_blocks", (block,), freeing=True)
                raise error
            left[id(block)] = count
            if count == 0:
                if block.prev_free_block is not None or block.next_free_block is not None:
                    raise BlockPoolError(
                        f"free_blocks({block!r}): held, yet linked in a free queue (P2 broken)"
                    )
                if to_back_if_cached and block.block_hash is not None:
                    to_back.append(block)
                else:
                    to_front.append(block)
        return _FreePlan(self, blocks, to_front, to_back)


class FreeCountsEachListingAlone(BlockPool):
    """``free_blocks`` checks each listing of a block against its count alone, not the running one.

    A block listed twice in one call drops two references but is checked as if it dropped
    one: a double free within one call goes through.
    """

    __slots__ = ()

    def _plan_free(self, blocks: list[KVCacheBlock], evict_first: bool) -> _FreePlan:
        """Plan the free, counting down from ``ref_cnt`` afresh for every listing."""
        to_front: list[KVCacheBlock] = []
        to_back: list[KVCacheBlock] = []
        # A block listed several times drops several references: count them by id (P4).
        left: dict[int, int] = {}
        to_back_if_cached = self.enable_caching and not evict_first
        for block in blocks:
            if not self.owns(block):
                raise BlockPoolError(
                    f"free_blocks({block!r}): the block names a pool that does not own it (P5)"
                )
            count = block.ref_cnt - 1  # should continue from the block's earlier listings
            if count < 0:
                error = DoubleFreeError(
                    f"free_blocks({block!r}): freed more often than it is held, "
                    f"its ref_cnt would drop to {count} (a double free?)"
                )
                # A traced free queue (the trace level) adds where the block was freed before.
                annotate = getattr(self.free_block_queue, "annotate", None)
                if annotate is not None:
                    annotate(error, "free_blocks", (block,), freeing=True)
                raise error
            left[id(block)] = count
            if count == 0:
                if block.prev_free_block is not None or block.next_free_block is not None:
                    raise BlockPoolError(
                        f"free_blocks({block!r}): held, yet linked in a free queue (P2 broken)"
                    )
                if to_back_if_cached and block.block_hash is not None:
                    to_back.append(block)
                else:
                    to_front.append(block)
        return _FreePlan(self, blocks, to_front, to_back)


class ResetCountsNullBlockFree(BlockPool):
    """``reset_prefix_cache`` expects every block free, the null block included: it never resets."""

    __slots__ = ()

    def reset_prefix_cache(self) -> bool:
        """Forget every hash if all ``num_blocks`` blocks are free, which never happens."""
        if len(self.free_block_queue) != self.num_blocks:  # should be num_blocks - 1
            return False
        self.cached_block_hash_to_block = {}
        for block in self.blocks:
            block.reset_hash()
        return True
