"""Pool bugs: planted bugs in the block pool (``verified_queue/kvcache/pool.py``).

Each class overrides one method of :class:`~verified_queue.kvcache.pool.BlockPool` with the
production method copied and one realistic defect; messages and everything else are the
production code's. They are the bugs of kind ``"pool"`` in
:data:`specs.planted_bugs.kvcache.CLIENT_CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from verified_queue.errors import EmptyQueueError, QueueError
from verified_queue.kvcache._repair import ForgetHashes, GetUndo, TouchRest, Uncache, finish
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
        if blocks.__class__ is not list:
            blocks = list(blocks)  # walked again if it is cut short
        queue = self.free_block_queue
        queue_remove = queue.remove
        # The count of touches is the loop's progress: it counts each block touched, with no
        # checkpoint between the block's own count and it. The queue's count before tells
        # what the touch removed.
        touched = self.num_touched
        free = queue.num_free_blocks
        rest: TouchRest | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first finishes the
        # touch, each outer one what an interrupt cut short of the one inside.
        try:
            try:
                try:
                    for block in blocks:
                        if block.is_null:
                            continue  # P1
                        if block.ref_cnt == 0:
                            queue_remove(block)  # P2: a ref-0 block is in the queue
                        block.ref_cnt = 1  # should be += 1
                        self.num_touched += 1
                except QueueError:
                    # The queue refused this block: touch stops there (see the docstring).
                    rest = TouchRest(self, blocks, -1, free)
                    raise
                except BaseException as error:
                    rest = TouchRest(self, blocks, self.num_touched - touched, free)
                    last = finish(rest, error)
                    if last is error:
                        raise  # as it is, its traceback not lengthened
                    raise last  # noqa: B904 -- it arrived later: the earlier ones are its __context__
            except BaseException as arrived:
                if rest is None:
                    rest = TouchRest(self, blocks, self.num_touched - touched, free)
                last = finish(rest, arrived)
                if last is arrived:
                    raise
                raise last  # noqa: B904 -- as above
        except BaseException as arrived:
            if rest is None:
                rest = TouchRest(self, blocks, self.num_touched - touched, free)
            last = finish(rest, arrived)
            if last is arrived:
                raise
            raise last  # noqa: B904 -- as above


class GetNewBlocksLeavesCacheEntry(BlockPool):
    """Allocation clears a reused block's hash but leaves it in the cache (P3 broken).

    A later prefix lookup then hits a block another request is writing over.
    """

    __slots__ = ()

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take blocks from the front, forgetting their hashes on the block only."""
        queue = self.free_block_queue
        free = len(queue)
        if num_blocks > free:
            raise EmptyQueueError(f"cannot get {num_blocks} blocks from a pool with {free} free")
        allocated = self.num_allocated
        num_evicted = self.num_evicted
        blocks: list[KVCacheBlock] | None = None
        # Each eviction, recorded before it is made: the block, its hash, and the cache entry
        # it leaves (which the eviction replaces, never changes: see _evict_cached_hash).
        evicted: list[tuple[KVCacheBlock, BlockHash, dict[int, KVCacheBlock] | None]] | None = None
        undo: GetUndo | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes, each
        # outer one finishes what an interrupt cut short of the one inside.
        try:
            try:
                try:
                    if num_blocks == 1:
                        # An interrupt as the call returns, before the store, leaves one block
                        # taken: the undo finds it (the only detached block free by its count).
                        blocks = queue.popleft_n(num_blocks)
                    else:
                        # Unpacked from map: the list reaches ``blocks`` in C, with no
                        # checkpoint between popleft_n's return and the store, where an
                        # interrupt would lose the blocks' order.
                        (blocks,) = map(queue.popleft_n, (num_blocks,))
                    cache = self.cached_block_hash_to_block
                    for block in blocks:
                        block_hash = block.block_hash
                        if block_hash is not None:
                            if evicted is None:
                                evicted = []
                            evicted.append((block, block_hash, cache.get(block_hash)))
                            block.reset_hash()  # should be self._evict_cached_hash(...)
                            self.num_evicted += 1
                        block.ref_cnt = 1  # P2: it was 0 while the block was free
                    # Inside the try, up to the return (no checkpoint after the count's store).
                    self.num_allocated = allocated + num_blocks
                    return blocks
                except BaseException as error:
                    # The caller never gets the blocks: all of it is undone (P2, P3).
                    undo = GetUndo(self, blocks, evicted, free=free, num_evicted=num_evicted)
                    last = finish(undo, error)
                    if last is error:
                        raise  # as it is, its traceback not lengthened
                    raise last  # noqa: B904 -- it arrived later: the earlier ones are its __context__
            except BaseException as arrived:
                if undo is None:
                    undo = GetUndo(self, blocks, evicted, free=free, num_evicted=num_evicted)
                last = finish(undo, arrived)
                if last is arrived:
                    raise
                raise last  # noqa: B904 -- as above
        except BaseException as arrived:
            if undo is None:
                undo = GetUndo(self, blocks, evicted, free=free, num_evicted=num_evicted)
            last = finish(undo, arrived)
            if last is arrived:
                raise
            raise last  # noqa: B904 -- as above


class EvictDropsEveryDuplicate(BlockPool):
    """Evicting one block deletes its hash's whole entry, other blocks with that hash included.

    Those keep their hash but are no longer cached under it (P3 broken): never hit again.
    """

    __slots__ = ()

    def _evict_cached_hash(self, block: KVCacheBlock, block_hash: BlockHash) -> None:
        """Drop the hash's entry, not just this block's place in it."""
        cache = self.cached_block_hash_to_block
        cached = cache.get(block_hash)
        if cached is None or block.block_id not in cached:
            raise BlockPoolError(f"{block!r} carries a hash it is not cached under (P3 broken)")
        if len(cached) >= 1:  # should be == 1: the entry's other blocks stay cached
            del cache[block_hash]
        else:
            rest = cached.copy()
            del rest[block.block_id]
            cache[block_hash] = rest
        block.block_hash = None  # reset_hash(), without the call
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
        undo: Uncache | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes, each
        # outer one finishes what an interrupt cut short of the one inside.
        try:
            try:
                try:
                    for block, block_hash in zip(new_blocks, new_hashes, strict=True):
                        block.set_block_hash(block_hash)  # P3: set and registered together
                        cache[block_hash] = {
                            block.block_id: block
                        }  # should add to an existing entry
                except BaseException as error:
                    undo = Uncache(self, new_blocks)
                    last = finish(undo, error)
                    if last is error:
                        raise  # as it is, its traceback not lengthened
                    raise last  # noqa: B904 -- it arrived later: the earlier ones are its __context__
            except BaseException as arrived:
                if undo is None:
                    undo = Uncache(self, new_blocks)
                last = finish(undo, arrived)
                if last is arrived:
                    raise
                raise last  # noqa: B904 -- as above
        except BaseException as arrived:
            if undo is None:
                undo = Uncache(self, new_blocks)
            last = finish(undo, arrived)
            if last is arrived:
                raise
            raise last  # noqa: B904 -- as above


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
                try:
                    raise error
                finally:
                    # No cycle from this frame through the error's traceback back to it: it
                    # would keep the pools of the free alive until a collection (P5).
                    del error
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
        return _FreePlan(self, blocks, to_front, to_back, left)


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
                try:
                    raise error
                finally:
                    # No cycle from this frame through the error's traceback back to it: it
                    # would keep the pools of the free alive until a collection (P5).
                    del error
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
        return _FreePlan(self, blocks, to_front, to_back, left)


class ResetCountsNullBlockFree(BlockPool):
    """``reset_prefix_cache`` expects every block free, the null block included: it never resets."""

    __slots__ = ()

    def reset_prefix_cache(self) -> bool:
        """Forget every hash if all ``num_blocks`` blocks are free, which never happens."""
        if len(self.free_block_queue) != self.num_blocks:  # should be num_blocks - 1
            return False
        rest: ForgetHashes | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first finishes the
        # reset, each outer one what an interrupt cut short of the one inside.
        try:
            try:
                try:
                    self.cached_block_hash_to_block = {}
                    for block in self.blocks:
                        block.reset_hash()
                    return True
                except BaseException as error:
                    rest = ForgetHashes(self)
                    last = finish(rest, error)
                    if last is error:
                        raise  # as it is, its traceback not lengthened
                    raise last  # noqa: B904 -- it arrived later: the earlier ones are its __context__
            except BaseException as arrived:
                if rest is None:
                    rest = ForgetHashes(self)
                last = finish(rest, arrived)
                if last is arrived:
                    raise
                raise last  # noqa: B904 -- as above
        except BaseException as arrived:
            if rest is None:
                rest = ForgetHashes(self)
            last = finish(rest, arrived)
            if last is arrived:
                raise
            raise last  # noqa: B904 -- as above
