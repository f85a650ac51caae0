"""What finishes a block-pool call an exception from outside cut short: the pool's repairs.

:class:`~verified_queue.kvcache.pool.BlockPool` keeps the fault contract of
``docs/usage.md`` ("Faults") one level above the queue by the rule of
:mod:`verified_queue._undo`: each method that changes the pool runs its body inside three
nested handlers, and the first handler an exception reaches makes the method's
:class:`Repair` and runs it with :func:`finish`; an exception that cuts that handler short
reaches the next one out, which runs the same repair on from where it stopped. A repair
either undoes the call (``free_blocks``, ``get_new_blocks``, ``cache_full_blocks``: the pool
as before it) or finishes it (``touch``, ``reset_prefix_cache``: the pool as after it).

Nothing here runs on the happy path: a repair is made only once an exception arrived, and
this module holds no state of its own. The representation each repair works on is the
pool's (P1..P5, in :mod:`verified_queue.kvcache.pool`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from verified_queue.errors import QueueError

if TYPE_CHECKING:
    from verified_queue.kvcache.block import KVCacheBlock
    from verified_queue.kvcache.keys import BlockHash
    from verified_queue.kvcache.pool import BlockPool, _FreePlan

__all__ = ["ForgetHashes", "FreeUndo", "GetUndo", "Repair", "TouchRest", "Uncache", "finish"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True


class Repair:
    """The rest of a pool call an exception cut short: what :func:`finish` runs to its end.

    Made on the error path only, with no side effect, and kept by the method that
    made it, so that a repair cut short goes on where it stopped, whichever of
    the method's handlers runs it next. :meth:`run` works one block at a time;
    each block's work may be taken again from its start (so a block cut short
    is simply redone), and the progress past it is recorded after its last
    write, with no checkpoint between.
    """

    __slots__ = ("index", "phase")

    def __init__(self) -> None:
        self.phase = 0
        self.index = 0

    def run(self) -> None:
        """Do what is left; called again after any exception, until it returns."""
        raise NotImplementedError

    def stop(self) -> None:
        """End the repair where it stands: the queue refused a step, and would refuse it again."""
        self.phase = -1


def finish(repair: Repair, arrived: BaseException) -> BaseException:
    """Run ``repair`` to its end whatever arrives meanwhile; return what arrived last.

    The retry loops of :func:`verified_queue._undo.finish_unstage`: an exception
    that cuts the repair short is kept, and the repair goes on (only exceptions at
    consecutive back edges of the two loops, a burst, escape). What arrived last
    is returned for the caller to raise, the earlier ones its ``__context__``:
    an interrupt is never swallowed. A refusal of the queue (a
    :class:`QueueError`, in check mode: damage it found) ends the repair where it
    stands, since the same step would be refused again.
    """
    finished = False
    while not finished:
        try:
            # ``while True`` and a break, not ``while not finished``: a loop inside a try keeps
            # its back edge covered by the try (verified_queue._undo, "Loops inside a try").
            while True:
                try:
                    repair.run()
                    finished = True
                    break
                except QueueError as refused:
                    arrived = refused
                    repair.stop()
                except BaseException as later:
                    arrived = later
        except BaseException as later:
            arrived = later
    return arrived


class FreeUndo(Repair):
    """Undo the plans of a ``free_blocks`` call, from any point of their application."""

    __slots__ = ("plan", "plans")

    def __init__(self, plans: list[_FreePlan]) -> None:
        super().__init__()
        self.plans = plans
        self.plan = 0

    def run(self) -> None:
        """Undo every plan in turn (one never applied changes nothing)."""
        plans = self.plans
        count = len(plans)
        while self.plan < count and self.phase >= 0:
            plan = plans[self.plan]
            blocks = plan.blocks
            if self.phase == 0:
                # Unlink the released blocks, each linked by prepend_n or append_n, or not yet.
                front = plan.to_front
                back = plan.to_back
                split = len(front)
                end = split + len(back)
                remove = plan.pool.free_block_queue.remove
                while self.index < end:
                    index = self.index
                    block = front[index] if index < split else back[index - split]
                    if block.prev_free_block is not None:
                        remove(block)
                    self.index = index + 1
                self.phase, self.index = 1, 0
            elif self.phase == 1:
                # Every count as it is once applied, wherever the decrements stopped ...
                left = plan.left
                end = len(blocks)
                while self.index < end:
                    index = self.index
                    block = blocks[index]
                    block.ref_cnt = left[id(block)]
                    self.index = index + 1
                self.phase, self.index = 2, 0
            else:
                # ... and one reference back per listing: the counts before the call.
                end = len(blocks)
                while self.index < end:
                    index = self.index
                    blocks[index].ref_cnt += 1
                    self.index = index + 1
                pool = plan.pool
                pool.num_freed = plan.freed
                pool.num_freed_lifo = plan.freed_lifo
                self.phase, self.index = 0, 0
                self.plan += 1


class GetUndo(Repair):
    """Undo a ``get_new_blocks`` call: hashes back in the cache, blocks back at the front."""

    __slots__ = ("blocks", "evicted", "free", "num_evicted", "pool")

    def __init__(
        self,
        pool: BlockPool,
        blocks: list[KVCacheBlock] | None,
        evicted: list[tuple[KVCacheBlock, BlockHash, dict[int, KVCacheBlock] | None]] | None,
        *,
        free: int,
        num_evicted: int,
    ) -> None:
        # ``num_allocated`` needs no undo: get_new_blocks counts its blocks just before
        # it returns them, with no checkpoint between.
        super().__init__()
        self.pool = pool
        self.blocks = blocks
        self.evicted = evicted
        self.free = free
        self.num_evicted = num_evicted

    def run(self) -> None:
        """Undo the evictions, then free the blocks and link them back."""
        pool = self.pool
        if self.phase == 0:
            # Each eviction undone, the last first: the block's hash, and the cache entry it
            # left, unchanged (a shared entry's order names its oldest block). A hash no entry
            # held (P3 broken, which the eviction refused) is dropped instead, as lazy
            # eviction may drop any free block's.
            evicted = self.evicted or []
            cache = pool.cached_block_hash_to_block
            end = len(evicted)
            while self.index < end:
                index = self.index
                block, block_hash, entry = evicted[end - 1 - index]
                if entry is not None and block.block_id in entry:
                    block.block_hash = block_hash
                    cache[block_hash] = entry
                else:
                    block.block_hash = None
                self.index = index + 1
            if self.blocks is None:
                # Taken, but the queue raised before the list reached the pool (a queue whose
                # popleft_n runs code of its own after taking, as check mode's does): the
                # pool's detached blocks that are free by their count are those (P2), found
                # in id order. (Read before the writes that end the phase.)
                search = len(pool.free_block_queue) < self.free
                self.blocks = []
                self.phase, self.index = (3 if search else 1), 0
            else:
                self.phase, self.index = 1, 0
        if self.phase == 3:
            found: list[KVCacheBlock] = self.blocks  # type: ignore[assignment]  # set above
            end = len(pool.blocks)
            while self.index < end:
                index = self.index
                block = pool.blocks[index]
                if (
                    block.ref_cnt == 0
                    and not block.is_null
                    and block.prev_free_block is None
                    # Appended already if an interrupt came as append returned, before the
                    # index moved on: the pass retakes this block, and must not list it twice.
                    and not (found and found[-1] is block)
                ):
                    found.append(block)
                self.index = index + 1
            self.phase, self.index = 1, 0
        blocks: list[KVCacheBlock] = self.blocks  # type: ignore[assignment]  # phase 0 set it
        if self.phase == 1:
            end = len(blocks)
            while self.index < end:
                index = self.index
                blocks[index].ref_cnt = 0  # P2: free again
                self.index = index + 1
            self.phase, self.index = 2, end
        if self.phase == 2:
            # Back to the front in their order, one block a call, the last first: each call
            # is O(1), so an interrupt that keeps coming cannot starve a long batch.
            prepend_n = pool.free_block_queue.prepend_n
            while self.index > 0:
                index = self.index
                block = blocks[index - 1]
                if block.prev_free_block is None:
                    prepend_n([block])
                self.index = index - 1
            pool.num_evicted = self.num_evicted


class TouchRest(Repair):
    """Finish a ``touch`` cut short: the blocks from the first one not yet touched, as it would.

    The queue's count tells whether the block the cut stopped at, free by its count
    yet out of the queue, was just removed by the touch (an interrupt as ``remove``
    returned) or was never in the queue (which touch refuses, cut short or not):
    the touch removed one block more than the blocks before it needed.
    """

    __slots__ = ("at", "blocks", "free", "listed", "pool", "removed", "skip")

    def __init__(
        self, pool: BlockPool, blocks: list[KVCacheBlock], touched: int, free: int
    ) -> None:
        """``touched``: blocks it touched (null aside), -1 to stop; ``free``: the count before."""
        super().__init__()
        self.pool = pool
        self.blocks = blocks
        self.skip = touched
        self.free = free
        # id(block) -> the block and its listings among those touched.
        self.listed: dict[int, list[Any]] = {}
        self.at = 0
        self.removed = 0  # blocks the touch removed, of those it finished
        if touched < 0:
            self.stop()

    def run(self) -> None:
        """Count what the touched blocks removed, then touch the others as ``touch`` does."""
        pool = self.pool
        blocks = self.blocks
        end = len(blocks)
        if self.phase == 0:
            # Pass the blocks touched, counting each one's listings among them.
            listed = self.listed
            while self.index < end:
                index = self.index
                block = blocks[index]
                if not block.is_null:
                    if self.skip == 0:
                        break
                    entry = listed.get(id(block))
                    if entry is None:
                        listed[id(block)] = [block, 1]
                    else:
                        entry[1] += 1
                    self.skip -= 1
                self.index = index + 1
            self.phase = 1
        if self.phase == 1:
            # Each was removed if it was free by its count before: if it counts its listings.
            entries = list(self.listed.values())
            while self.at < len(entries):
                at = self.at
                block, listings = entries[at]
                if block.ref_cnt == listings:
                    self.removed += 1
                self.at = at + 1
            self.phase = 2
        queue = pool.free_block_queue
        remove = queue.remove
        while self.index < end and self.phase == 2:
            index = self.index
            block = blocks[index]
            if not block.is_null:
                if block.ref_cnt == 0:
                    if self.free - queue.num_free_blocks == self.removed:
                        remove(block)  # not removed yet (refused if it is in no queue)
                    self.removed += 1
                block.ref_cnt += 1
                pool.num_touched += 1
            self.index = index + 1


class Uncache(Repair):
    """Undo a ``cache_full_blocks`` call: each block it cached leaves the cache again (P3)."""

    __slots__ = ("blocks", "pool")

    def __init__(self, pool: BlockPool, blocks: Sequence[KVCacheBlock]) -> None:
        super().__init__()
        self.pool = pool
        self.blocks = blocks

    def run(self) -> None:
        """Uncache each block this call cached (none had a hash before it)."""
        cache = self.pool.cached_block_hash_to_block
        blocks = self.blocks
        end = len(blocks)
        while self.index < end:
            index = self.index
            block = blocks[index]
            block_hash = block.block_hash
            if block_hash is not None:
                cached = cache.get(block_hash)
                if cached is not None and cached.get(block.block_id) is block:
                    # Added last to its entry, or its entry's first: deleting keeps the order.
                    del cached[block.block_id]
                    if not cached:
                        del cache[block_hash]
                block.block_hash = None
            self.index = index + 1


class ForgetHashes(Repair):
    """Finish a ``reset_prefix_cache`` cut short: the cache empty, every block's hash gone."""

    __slots__ = ("pool",)

    def __init__(self, pool: BlockPool) -> None:
        super().__init__()
        self.pool = pool

    def run(self) -> None:
        """Empty the cache, then forget every block's hash."""
        pool = self.pool
        if pool.cached_block_hash_to_block:
            pool.cached_block_hash_to_block = {}
        blocks = pool.blocks
        end = len(blocks)
        while self.index < end:
            index = self.index
            blocks[index].block_hash = None
            self.index = index + 1
