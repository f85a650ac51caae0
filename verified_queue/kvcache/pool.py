"""A prefix-caching KV-cache block pool on the free-block queue, with vLLM v1's semantics.

This is the job the queue exists for. An inference engine splits every
request's KV cache into fixed-size blocks; a block that fills up is *cached*
under a key of its tokens chained to its parent's key, so a later request
with the same prompt prefix finds it again instead of recomputing it. The free
queue holds every block no request is using, in eviction order:

* allocation takes blocks from the front (``popleft_n``); a block taken that
  still carries a cached hash loses it then (eviction is lazy);
* a request's blocks are freed in reverse order, so the tail of a prefix chain,
  the part least likely to be shared, is evicted first: freed blocks that carry
  a cached hash go to the back (``append_n``, least recently used evicted
  first), and blocks with no hash, which no request can hit, go to the *front*
  (``prepend_n``), to be reused first (last in, first out: vLLM does this for
  the locality of GPU memory);
* a prefix-cache hit on a free cached block takes it out of the middle of the
  queue (``remove``): that is why the queue needs O(1) removal.

Pool invariants (cited as P1..P5; :meth:`BlockPool.check_consistency` checks
them in O(number of blocks)):

P1. The null block (block 0) is the only block with ``is_null`` set; it is
    never in the free queue and never cached; the pool keeps no reference count
    for it, and ``touch``/``free_blocks`` skip it.
P2. Every other block is in the free queue exactly when its ``ref_cnt`` is 0,
    and no ``ref_cnt`` is negative.
P3. A block has a ``block_hash`` exactly when it is registered under that hash
    and its own ``block_id`` in ``cached_block_hash_to_block``.
P4. Blocks are compared by identity only (``is``, ``block_id``): the pool never
    calls a block's ``__eq__`` or ``__hash__``.
P5. Block ``i`` of the pool is ``blocks[i]``, has ``block_id == i`` and carries
    a weak reference to the pool as its ``pool`` (as vLLM 0.34.0 does: no block
    -> pool reference cycle, so a dropped pool is freed at once); only the
    pool's own blocks are ever in its free queue or its cache. ``free_blocks``
    hands another pool's block to that pool, as vLLM does (deferred frees may
    mix the pools of several KV-cache groups); ``cache_full_blocks`` refuses one.

An exception from outside (``KeyboardInterrupt`` from a signal, a timeout's
exception) may cut a method short wherever the interpreter can run a signal handler, in
the pool's code or in the queue's. Every method that changes the pool then leaves the
pool, its free queue (and those of the pools a free reaches) and every block exactly as
before the call or as after it, and raises the exception, at the depth the queue's batch
methods promise: at most three exceptions in all, the one that cuts the call short
included; a fourth, in a burst, can leave a call half done. That is the contract of
:mod:`verified_queue._undo` (for users: ``docs/usage.md``, "Faults"), kept one level up
by the same rule: three handlers deep, each running a repair that keeps its progress
(:mod:`verified_queue.kvcache._repair`).
Each method says which end it reaches; ``tests/kvcache/test_pool_nested_interrupts.py``
shows the promise at every checkpoint and pins where it stops.

The P-numbers name the pool's invariants; the free queue beneath keeps its own,
I1..I5 of ``verified_queue.queue``. vLLM's ``BlockPool`` keeps P1..P5 too: check mode
inside vLLM checks them there (:mod:`verified_queue.vllm.pool_checks`, which says what
each means on vLLM's pool, and reports a break as ``InvariantViolation`` of the family
``block_pool``). Where the two meet: a block that P2 puts
outside the free queue (one a request holds) is detached (I4), and P4 is I5
restated for the pool.

Prefix-cache keys come from :mod:`verified_queue.kvcache.keys`: by
default SHA-256 over a canonical encoding of the parent key, the block's tokens
and its extra keys (LoRA, multimodal inputs, ``cache_salt``), the whole 32-byte
digest. Two different prefixes share a key only through a SHA-256 collision;
tenants who must not share even identical prompts pass different
``cache_salt`` values. The built-in ``hash`` is available by name
(``"builtin"``), faster, and safe only for one trusted tenant: collisions of it
can be computed. What a hit itself reveals (a cached prefix makes a request
faster, a timing side channel) is out of scope: keys do not hide it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence

import verified_queue
from verified_queue.errors import EmptyQueueError, QueueError
from verified_queue.kvcache._repair import (
    ForgetHashes,
    FreeUndo,
    GetUndo,
    TouchRest,
    Uncache,
    finish,
)
from verified_queue.kvcache.block import KVCacheBlock, show_hash
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError
from verified_queue.kvcache.keys import BlockHash
from verified_queue.queue import FreeBlockQueue

__all__ = ["BlockPool", "QueueFactory"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: Builds a pool's free queue from the blocks, front to back (the class itself, or a partial).
QueueFactory = Callable[[list["KVCacheBlock"]], FreeBlockQueue["KVCacheBlock"]]


class _FreePlan:
    """One pool's share of a ``free_blocks`` call, validated; applied and undone as a unit."""

    __slots__ = ("blocks", "freed", "freed_lifo", "left", "pool", "to_back", "to_front")

    def __init__(
        self,
        pool: BlockPool,
        blocks: list[KVCacheBlock],
        to_front: list[KVCacheBlock],
        to_back: list[KVCacheBlock],
        left: dict[int, int],
    ) -> None:
        self.pool = pool
        self.blocks = blocks  # every occurrence, each dropping one reference
        self.to_front = to_front
        self.to_back = to_back
        # id(block) -> its ref_cnt once applied: what undo counts back up from.
        self.left = left
        self.freed = pool.num_freed
        self.freed_lifo = pool.num_freed_lifo

    def apply(self) -> None:
        """Drop the references and link the released blocks (cut short: see :class:`FreeUndo`)."""
        pool = self.pool
        queue = pool.free_block_queue
        for block in self.blocks:
            block.ref_cnt -= 1
        if self.to_front:
            queue.prepend_n(self.to_front)
        if self.to_back:
            queue.append_n(self.to_back)
        pool.num_freed = self.freed + len(self.to_front) + len(self.to_back)
        pool.num_freed_lifo = self.freed_lifo + len(self.to_front)


class BlockPool:
    """A fixed set of KV-cache blocks with prefix caching, its free list a :class:`FreeBlockQueue`.

    ``BlockPool(num_blocks)`` makes blocks ``0 .. num_blocks - 1``, links
    them into the free queue in id order and takes block 0 out as the null
    block. ``queue_factory`` builds the free queue: pass
    ``CheckedFreeBlockQueue`` (check mode) to have every queue call verified.
    With ``enable_caching=False`` nothing is cached and every freed block is
    reused first (LIFO).

    The pool's methods follow vLLM's ``BlockPool``; the request-level logic
    (which prefix a request hits, when it needs a new block) belongs to the
    caller, as in vLLM's ``KVCacheManager``. Keys come from
    :func:`~verified_queue.kvcache.keys.hash_request_tokens` (SHA-256 by default;
    see the module docstring for what a key guarantees).

    >>> from verified_queue.kvcache.keys import hash_request_tokens
    >>> pool = BlockPool(num_blocks=6)
    >>> keys = hash_request_tokens([7, 7, 8, 8, 9], block_size=2)
    >>> first = pool.get_new_blocks(3)  # the request's 5 tokens need 3 blocks
    >>> [block.block_id for block in first]
    [1, 2, 3]
    >>> pool.cache_full_blocks(first, keys, num_cached_blocks=0, num_full_blocks=2)
    >>> pool.free_blocks(reversed(first))  # cached blocks to the back, tail first
    >>> [block.block_id for block in pool.free_block_queue]  # block 3 has no hash: reused first
    [3, 4, 5, 2, 1]
    >>> hit = pool.find_longest_cache_hit(keys)  # a second request, same prefix
    >>> pool.touch(hit)
    >>> [block.block_id for block in hit], [block.block_id for block in pool.free_block_queue]
    ([1, 2], [3, 4, 5])
    """

    __slots__ = (
        "__weakref__",
        "_weak_self",
        "blocks",
        "cached_block_hash_to_block",
        "enable_caching",
        "free_block_queue",
        "null_block",
        "num_allocated",
        "num_blocks",
        "num_evicted",
        "num_freed",
        "num_freed_lifo",
        "num_touched",
    )

    num_blocks: int
    enable_caching: bool
    _weak_self: weakref.ref[BlockPool]
    blocks: list[KVCacheBlock]
    free_block_queue: FreeBlockQueue[KVCacheBlock]
    cached_block_hash_to_block: dict[BlockHash, dict[int, KVCacheBlock]]
    null_block: KVCacheBlock
    num_allocated: int
    num_freed: int
    num_freed_lifo: int
    num_evicted: int
    num_touched: int

    def __getstate__(self) -> dict[str, object]:
        """Save the pool's fields but its weak reference to itself, which cannot be copied."""
        return {
            name: getattr(self, name)
            for name in BlockPool.__slots__
            if name not in ("__weakref__", "_weak_self") and hasattr(self, name)
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore the saved fields and make the copy's weak reference to itself."""
        for name, value in state.items():
            setattr(self, name, value)
        self._weak_self = weakref.ref(self)

    def __init__(
        self,
        num_blocks: int,
        *,
        enable_caching: bool = True,
        queue_factory: QueueFactory | None = None,
    ) -> None:
        """Create ``num_blocks`` blocks, all free in id order, and take block 0 as the null block.

        Without a ``queue_factory`` the free queue is ``verified_queue.FreeBlockQueue``:
        the production queue, or the checked one when ``VERIFIED_QUEUE_CHECKS`` is set.

        Runtime complexity: O(num_blocks)
        """
        if num_blocks < 2:
            # Block 0 is the null block, so a smaller pool could serve nothing.
            raise ValueError(f"a pool needs at least 2 blocks, not {num_blocks}")
        if queue_factory is None:
            # Looked up now, on the package, where the check-mode switch rebinds the name.
            queue_factory = verified_queue.FreeBlockQueue
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        # One weak reference, shared by every block: what a block's pool is compared with.
        self._weak_self = weakref.ref(self)
        self.blocks = [
            KVCacheBlock(block_id, pool=self._weak_self) for block_id in range(num_blocks)
        ]  # P5
        self.free_block_queue = queue_factory(self.blocks)
        # Keyed by hash, then block id: the same tokens may be cached in several
        # blocks (two requests filled them at once), and vLLM does not merge
        # them so that a running request's block table never changes.
        self.cached_block_hash_to_block = {}
        self.null_block = self.free_block_queue.popleft()  # P1
        self.null_block.is_null = True
        # Counters for reports: blocks handed out, returned to the queue (of which to its
        # front, for LIFO reuse), stripped of a hash, hit.
        self.num_allocated = 0
        self.num_freed = 0
        self.num_freed_lifo = 0
        self.num_evicted = 0
        self.num_touched = 0

    def __repr__(self) -> str:
        """Name the pool's size and how many blocks are free.

        Runtime complexity: O(1)
        """
        free = len(self.free_block_queue)
        return f"<BlockPool of {self.num_blocks} blocks, {free} free>"

    def owns(self, block: KVCacheBlock) -> bool:
        """Return whether ``block`` is one of this pool's blocks (by identity, P4, P5).

        Runtime complexity: O(1)

        >>> pool, other = BlockPool(3), BlockPool(3)
        >>> pool.owns(pool.blocks[1]), pool.owns(other.blocks[1]), pool.owns(KVCacheBlock(1))
        (True, False, False)
        """
        block_id = block.block_id
        return (
            type(block_id) is int
            and 0 <= block_id < self.num_blocks
            and self.blocks[block_id] is block
            and block.pool is self._weak_self
        )

    def get_num_free_blocks(self) -> int:
        """Return how many blocks could be allocated now, cached ones included.

        Runtime complexity: O(1)

        >>> BlockPool(num_blocks=4).get_num_free_blocks()  # all but the null block
        3
        """
        return len(self.free_block_queue)

    def get_usage(self) -> float:
        """Return the fraction of blocks in use, the null block counted as used.

        Runtime complexity: O(1)

        >>> BlockPool(num_blocks=4).get_usage()
        0.25
        """
        return 1.0 - len(self.free_block_queue) / self.num_blocks

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """Return a block cached under ``block_hash`` (the oldest of several), or ``None``.

        Runtime complexity: O(1) for the dictionary lookup (a key's hash is cached)
        """
        cached = self.cached_block_hash_to_block.get(block_hash)
        if not cached:
            return None
        return next(iter(cached.values()))

    def find_longest_cache_hit(self, block_hashes: Iterable[BlockHash]) -> list[KVCacheBlock]:
        """Return the cached blocks of the longest prefix of ``block_hashes``, stopping at a miss.

        Touch the result before allocating anything, or the allocation may evict it.

        Runtime complexity: O(number of blocks hit)
        """
        hit: list[KVCacheBlock] = []
        cache = self.cached_block_hash_to_block
        for block_hash in block_hashes:
            cached = cache.get(block_hash)
            if not cached:
                break
            hit.append(next(iter(cached.values())))
        return hit

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` blocks from the front of the free queue, each with ``ref_cnt`` 1.

        A block that still carries a cached hash loses it here (lazy eviction).
        Raises :class:`EmptyQueueError` (a ``ValueError``), with the pool
        unchanged, if fewer blocks are free. An exception that arrives from
        outside (an interrupt) before the blocks are returned is raised with
        the pool as before the call: every block free again, in its place at
        the front, with its hash cached as it was (see the module docstring for
        the depth). A hash that no cache entry holds (P3 broken by outside
        code), which the eviction refuses, is dropped instead.

        Runtime complexity: O(num_blocks), and for each block evicted from a key
        that other blocks are cached under too, O(those blocks): see
        ``_evict_cached_hash``.

        >>> pool = BlockPool(num_blocks=3)
        >>> [(block.block_id, block.ref_cnt) for block in pool.get_new_blocks(2)]
        [(1, 1), (2, 1)]
        """
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
                            self._evict_cached_hash(block, block_hash)
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

    def _evict_cached_hash(self, block: KVCacheBlock, block_hash: BlockHash) -> None:
        """Drop ``block``'s hash, ``block_hash``, from the cache and from the block (P3).

        The entry is replaced, never changed in place, so that an undo of
        ``get_new_blocks`` can put the old one back, its order (which names the
        oldest of the blocks cached under a key) as it was. That is O(1) for a key
        one block is cached under, the usual case, and O(d) for a key ``d`` blocks
        share (requests that computed the same prefix at once): the price of an
        exact undo, measured by ``bench/pool_revision.py``'s ``cached again``.
        """
        cache = self.cached_block_hash_to_block
        cached = cache.get(block_hash)
        if cached is None or block.block_id not in cached:
            raise BlockPoolError(f"{block!r} carries a hash it is not cached under (P3 broken)")
        if len(cached) == 1:
            del cache[block_hash]
        else:
            rest = cached.copy()
            del rest[block.block_id]
            cache[block_hash] = rest
        block.block_hash = None  # reset_hash(), without the call
        self.num_evicted += 1

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Cache ``blocks[num_cached_blocks:num_full_blocks]`` under the matching ``block_hashes``.

        ``blocks`` is a request's block table and ``block_hashes`` the keys of
        its full blocks (:func:`~verified_queue.kvcache.keys.hash_request_tokens`); the first
        ``num_cached_blocks`` are cached already. Raises
        :class:`BlockPoolError`, caching nothing, if a key is missing, or a
        block to cache already has a hash, appears twice, is the null block
        (P1) or belongs to another pool (P5). With caching off it does nothing.
        An exception that arrives from outside (an interrupt) is raised with
        nothing cached (see the module docstring for the depth).

        Runtime complexity: O(num_full_blocks - num_cached_blocks)
        """
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
                        cached = cache.get(block_hash)
                        if cached is None:
                            cache[block_hash] = {block.block_id: block}
                        else:
                            cached[block.block_id] = block
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

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each of ``blocks`` (a prefix-cache hit), freeing none.

        A block with ``ref_cnt`` 0 sits in the free queue as an eviction
        candidate; it is removed from there, from the middle, in O(1). Like
        vLLM's, it does not look at a block's pool: a block of another pool
        reaches that pool's queue, which check mode reports.

        If the queue refuses a block (``ref_cnt`` 0 but in no queue, or, in
        check mode, linked in another queue), the blocks before it stay
        touched. An exception that arrives from outside (an interrupt) does not
        change that outcome: a block taken from the middle of the queue cannot
        be put back where it was through the queue's API, so touch does not
        roll back but forward. It finishes as it would have without the
        interrupt, every block touched (or up to the block the queue refuses),
        and then raises the exception (see the module docstring for the depth).

        Runtime complexity: O(len(blocks))
        """
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
                        block.ref_cnt += 1
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

    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        """Drop a reference on each block; those no request uses any more join the free queue.

        Blocks are given in eviction order, first evicted first: pass a
        request's blocks *reversed*, so that the tail of its prefix chain
        (shared by the fewest requests) goes before its head. Released blocks
        that carry a cached hash are appended to the back (``append_n``: the
        least recently used is evicted first); those without one (or all of
        them, with caching off) are prepended to the front (``prepend_n``) in
        the order given, to be reused first (LIFO). With ``evict_first`` (vLLM
        0.34.0: blocks whose contents another tier already holds) released
        cached blocks go to the front too, in the order given, evicted before
        every other cached block. The null block is skipped (P1), and a block of
        another pool is freed in that pool, through its weak reference, with the
        same ``evict_first`` (P5), as vLLM does for deferred frees that mix the
        pools of several KV-cache groups; a block whose pool no longer exists is
        skipped, as vLLM skips it (there is no queue left to link it into).

        All or nothing, across this pool and the pools blocks are routed to:
        every block is checked before anything changes. A block freed more
        often than it is held (a double free: it is in the free queue already,
        or listed more times than its count) raises :class:`DoubleFreeError`
        (an ``AlreadyInQueueError``); a block that belongs to no pool, or to a
        pool that does not own it, raises :class:`BlockPoolError`; either way
        no count and no queue has changed. An exception that arrives from
        outside (an interrupt) while the free is under way, or a refusal of a
        checked queue, is raised with every count, queue and counter as before
        the call (see the module docstring for the depth).

        Runtime complexity: O(len(ordered_blocks))

        >>> pool = BlockPool(num_blocks=5)
        >>> blocks = pool.get_new_blocks(4)
        >>> pool.free_blocks(blocks[:2])
        >>> [block.block_id for block in pool.free_block_queue]  # no hash: to the front, LIFO
        [1, 2]
        >>> pool.free_blocks(blocks[:1])
        Traceback (most recent call last):
          ...
        verified_queue.kvcache.errors.DoubleFreeError: free_blocks(...): ... to -1 (a double free?)
        """
        if type(evict_first) is not bool:
            raise TypeError(f"free_blocks(evict_first={evict_first!r}): expected True or False")
        # One pass sorts the blocks by pool and changes nothing, so the iterable is not copied.
        ours: list[KVCacheBlock] = []
        others: dict[int, tuple[BlockPool, list[KVCacheBlock]]] = {}  # by id(pool)
        mine = self._weak_self
        for block in ordered_blocks:
            if block.is_null:
                continue  # P1: never pooled, its count is not kept
            reference = block.pool
            if reference is mine:
                ours.append(block)
                continue
            owner = reference() if isinstance(reference, weakref.ref) else None
            if isinstance(owner, BlockPool):
                others.setdefault(id(owner), (owner, []))[1].append(block)
            elif isinstance(reference, weakref.ref) and owner is None:
                continue  # its pool is gone, and its queue with it: vLLM skips it too
            else:
                raise BlockPoolError(
                    f"free_blocks({block!r}): the block belongs to no pool, so it cannot be freed"
                )
        plans = [self._plan_free(ours, evict_first)]
        # A loop, not a generator: an interrupt that arrives as a generator left behind is
        # closed runs in a finalizer, where the interpreter drops it.
        for owner, routed in others.values():
            plans.append(owner._plan_free(routed, evict_first))
        undo: FreeUndo | None = None
        # Three handlers deep, by the rule of verified_queue._undo: the first undoes every
        # plan, each outer one finishes what an interrupt cut short of the one inside.
        try:
            try:
                try:
                    for plan in plans:
                        plan.apply()
                except BaseException as error:
                    undo = FreeUndo(plans)
                    last = finish(undo, error)
                    if last is error:
                        raise  # as it is, its traceback not lengthened
                    raise last  # noqa: B904 -- it arrived later: the earlier ones are its __context__
            except BaseException as arrived:
                if undo is None:
                    undo = FreeUndo(plans)
                last = finish(undo, arrived)
                if last is arrived:
                    raise
                raise last  # noqa: B904 -- as above
        except BaseException as arrived:
            if undo is None:
                undo = FreeUndo(plans)
            last = finish(undo, arrived)
            if last is arrived:
                raise
            raise last  # noqa: B904 -- as above

    def _plan_free(self, blocks: list[KVCacheBlock], evict_first: bool) -> _FreePlan:
        """Check that ``blocks`` (all claiming this pool) can be freed, changing nothing.

        Returns which blocks go to the front and which to the back.
        """
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

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, if no block is in use; return whether it did.

        An engine does this after its weights change (the cached keys and
        values are stale) or between benchmark runs. Cut short by an exception
        from outside (an interrupt) once it has begun, it finishes forgetting,
        then raises it (see the module docstring for the depth).

        Runtime complexity: O(num_blocks)

        >>> pool = BlockPool(num_blocks=3)
        >>> held = pool.get_new_blocks(1)
        >>> pool.reset_prefix_cache()
        False
        >>> pool.free_blocks(held)
        >>> pool.reset_prefix_cache()
        True
        """
        if len(self.free_block_queue) != self.num_blocks - 1:  # the null block is never free
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

    def check_consistency(self) -> None:
        """Check P1..P3, P5 and the queue's count; raise :class:`BlockPoolError` at the first break.

        For tests and audits, not the hot path: it walks every block and the
        whole free queue, and uses a set of ids (never of blocks, P4).

        Runtime complexity: O(num_blocks + cached hashes)

        >>> BlockPool(num_blocks=3).check_consistency()
        """
        free_ids: set[int] = set()
        for position, block in enumerate(self.free_block_queue):
            if id(block) in free_ids:
                raise BlockPoolError(f"{block!r} is in the free queue twice (position {position})")
            free_ids.add(id(block))
        if len(free_ids) != len(self.free_block_queue):
            raise BlockPoolError(
                f"the free queue holds {len(free_ids)} blocks but counts "
                f"{len(self.free_block_queue)}"
            )
        null_block = self.null_block
        if (
            id(null_block) in free_ids
            or null_block.block_hash is not None
            or not null_block.is_null
            or null_block is not self.blocks[0]
        ):
            raise BlockPoolError(f"the null block {null_block!r} is free, cached or unmarked (P1)")
        owned = {id(block) for block in self.blocks}
        if not free_ids <= owned:
            raise BlockPoolError("the free queue holds a block this pool does not own (P5)")
        for index, block in enumerate(self.blocks):
            if block.block_id != index or block.pool is not self._weak_self:
                raise BlockPoolError(f"{block!r} at index {index} does not name this pool (P5)")
            if block is null_block:
                continue
            if block.is_null:
                raise BlockPoolError(f"{block!r} is marked null but is not the null block (P1)")
            if block.ref_cnt < 0 or (block.ref_cnt == 0) != (id(block) in free_ids):
                where = "in" if id(block) in free_ids else "out of"
                raise BlockPoolError(f"{block!r} is {where} the free queue (P2)")
            block_hash = block.block_hash
            if block_hash is not None and (
                self.cached_block_hash_to_block.get(block_hash, {}).get(block.block_id) is not block
            ):
                raise BlockPoolError(f"{block!r} is not cached under its hash (P3)")
        for block_hash, cached in self.cached_block_hash_to_block.items():
            if not cached:
                raise BlockPoolError(f"an empty entry is cached under {show_hash(block_hash)} (P3)")
            for block_id, block in cached.items():
                if block.block_id != block_id or block.block_hash != block_hash:
                    raise BlockPoolError(f"{block!r} is cached under a hash it lacks (P3)")
                if id(block) not in owned:
                    raise BlockPoolError(f"{block!r} is cached but not a block of this pool (P5)")
