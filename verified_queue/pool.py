"""A prefix-caching KV-cache block pool on the free-block queue, with vLLM v1's semantics.

This is the job the queue exists for. An inference engine splits every
request's KV cache into fixed-size blocks; a block that fills up is *cached*
under a hash of its tokens chained to its parent's hash, so a later request
with the same prompt prefix finds it again instead of recomputing it. The free
queue holds every block no request is using, in eviction order:

* allocation takes blocks from the front (``popleft_n``); a block taken that
  still carries a cached hash loses it then (eviction is lazy);
* a request's blocks are freed to the back in reverse order (``append_n``), so
  the tail of a prefix chain, the part least likely to be shared, goes first;
* a prefix-cache hit on a free cached block takes it out of the middle of the
  queue (``remove``): that is why the queue needs O(1) removal.

Pool invariants (cited as P1..P4; :meth:`BlockPool.check_consistency` checks
them in O(number of blocks)):

P1. The null block (block 0) is never in the free queue and never cached; the
    pool keeps no reference count for it, and ``touch``/``free_blocks`` skip it.
P2. Every other block is in the free queue exactly when its ``ref_cnt`` is 0,
    and no ``ref_cnt`` is negative.
P3. A block has a ``block_hash`` exactly when it is registered under that hash
    and its own ``block_id`` in ``cached_block_hash_to_block``.
P4. Blocks are compared by identity only (``is``, ``block_id``): the pool never
    calls a block's ``__eq__`` or ``__hash__``.

Block hashes: a full block's key is :class:`BlockHash` ``(hash_value,
token_ids)`` where ``hash_value = hash_function((parent_hash_value,
token_ids))`` and the first block's parent is :data:`ROOT_HASH`. The default
``hash_function`` is Python's built-in ``hash``: fast, and the same in every
process because ints and tuples of ints are not salted by ``PYTHONHASHSEED``.
The dictionary key keeps the block's own tokens, so two blocks are confused
only if their parents' 64-bit hash values collide. That hash is not collision
resistant: an engine serving mutually untrusted tenants should pass
:func:`sha256_block_hash`, as vLLM's ``--prefix-caching-hash-algo sha256`` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import verified_queue
from verified_queue.block import Block
from verified_queue.errors import EmptyQueueError, QueueError
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "ROOT_HASH",
    "BlockHash",
    "BlockPool",
    "BlockPoolError",
    "HashFunction",
    "KVCacheBlock",
    "QueueFactory",
    "hash_block_tokens",
    "hash_request_tokens",
    "sha256_block_hash",
]

#: The parent hash value of a request's first block. Fixed, so that runs are reproducible.
ROOT_HASH = 0

#: A function from ``(parent_hash_value, token_ids)`` to a block's hash value.
HashFunction = Callable[[tuple[int, tuple[int, ...]]], int]

#: Builds a pool's free queue from the blocks, front to back (the class itself, or a partial).
QueueFactory = Callable[[list["KVCacheBlock"]], FreeBlockQueue["KVCacheBlock"]]


class BlockPoolError(QueueError, ValueError):
    """The pool was asked for something its invariants forbid (caching a block twice, say)."""


class BlockHash(NamedTuple):
    """The prefix-cache key of a full block: its chained hash value and its own tokens."""

    hash_value: int
    token_ids: tuple[int, ...]

    def __repr__(self) -> str:
        """Show the hash value and the number of tokens, not the tokens (diagnostics stay short).

        Runtime complexity: O(1)

        >>> BlockHash(255, (1, 2))
        BlockHash(0xff, 2 tokens)
        """
        return f"BlockHash({self.hash_value:#x}, {len(self.token_ids)} tokens)"


# eq=False: a block's identity is its only equality. The generated field-wise
# __eq__ vLLM's KVCacheBlock keeps would call block 3 of two pools equal, and
# would make blocks unhashable.
@dataclass(slots=True, eq=False)
class KVCacheBlock(Block):
    """One KV-cache block: its id, how many requests use it, and its cache key once full.

    >>> block = KVCacheBlock(3)
    >>> block
    KVCacheBlock(block_id=3, ref_cnt=0, block_hash=None)
    >>> block.prev_free_block is None  # detached until a queue links it
    True
    """

    block_id: int
    ref_cnt: int = 0
    block_hash: BlockHash | None = None


def sha256_block_hash(key: tuple[int, tuple[int, ...]]) -> int:
    """Hash ``(parent_hash_value, token_ids)`` with SHA-256, keeping 64 bits.

    Collision resistant, for engines shared by untrusted tenants; roughly ten
    times slower than the built-in ``hash`` on a 16-token block.

    Runtime complexity: O(len(token_ids))

    >>> sha256_block_hash((ROOT_HASH, (1, 2))) == sha256_block_hash((ROOT_HASH, (1, 2)))
    True
    """
    parent, token_ids = key
    digest = hashlib.sha256(repr((parent, token_ids)).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def hash_block_tokens(
    parent: BlockHash | None, token_ids: Iterable[int], hash_function: HashFunction = hash
) -> BlockHash:
    """Return the cache key of a full block of ``token_ids`` that follows ``parent``.

    ``parent`` is ``None`` for a request's first block.

    Runtime complexity: O(len(token_ids))

    >>> first = hash_block_tokens(None, [1, 2])
    >>> first.token_ids
    (1, 2)
    >>> hash_block_tokens(first, [3, 4]) == hash_block_tokens(None, [3, 4])
    False
    """
    tokens = tuple(token_ids)
    parent_value = ROOT_HASH if parent is None else parent.hash_value
    return BlockHash(hash_function((parent_value, tokens)), tokens)


def hash_request_tokens(
    token_ids: Sequence[int],
    block_size: int,
    hash_function: HashFunction = hash,
    known: Sequence[BlockHash] = (),
) -> list[BlockHash]:
    """Return the chained cache keys of every full block of ``token_ids``.

    The keys in ``known`` (those of the first ``len(known)`` blocks, computed
    earlier) are reused, so a decoding request hashes each block only once.
    A trailing partial block has no key.

    Runtime complexity: O(len(token_ids) - len(known) * block_size)

    >>> [key.token_ids for key in hash_request_tokens([1, 2, 3, 4, 5], block_size=2)]
    [(1, 2), (3, 4)]
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, not {block_size}")
    hashes = list(known)
    parent = hashes[-1] if hashes else None
    for start in range(len(hashes) * block_size, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start : start + block_size], hash_function)
        hashes.append(parent)
    return hashes


class BlockPool:
    """A fixed set of KV-cache blocks with prefix caching, its free list a :class:`FreeBlockQueue`.

    ``BlockPool(num_blocks)`` makes blocks ``0 .. num_blocks - 1``, links
    them into the free queue in id order and takes block 0 out as the null
    block. ``queue_factory`` builds the free queue: pass
    ``CheckedFreeBlockQueue`` (check mode) to have every queue call verified.

    The pool's methods follow vLLM's ``BlockPool``; the request-level logic
    (which prefix a request hits, when it needs a new block) belongs to the
    caller, as in vLLM's ``KVCacheManager``.

    >>> pool = BlockPool(num_blocks=5)
    >>> keys = hash_request_tokens([7, 7, 8, 8, 9], block_size=2)
    >>> first = pool.get_new_blocks(3)  # the request's 5 tokens need 3 blocks
    >>> [block.block_id for block in first]
    [1, 2, 3]
    >>> pool.cache_full_blocks(first, keys, num_cached_blocks=0, num_full_blocks=2)
    >>> pool.free_blocks(reversed(first))  # the tail of the chain is evicted first
    >>> [block.block_id for block in pool.free_block_queue]
    [4, 3, 2, 1]
    >>> hit = pool.find_longest_cache_hit(keys)  # a second request, same prefix
    >>> pool.touch(hit)
    >>> [block.block_id for block in hit], [block.block_id for block in pool.free_block_queue]
    ([1, 2], [4, 3])
    """

    __slots__ = (
        "blocks",
        "cached_block_hash_to_block",
        "free_block_queue",
        "null_block",
        "num_allocated",
        "num_blocks",
        "num_evicted",
        "num_freed",
        "num_touched",
    )

    num_blocks: int
    blocks: list[KVCacheBlock]
    free_block_queue: FreeBlockQueue[KVCacheBlock]
    cached_block_hash_to_block: dict[BlockHash, dict[int, KVCacheBlock]]
    null_block: KVCacheBlock
    num_allocated: int
    num_freed: int
    num_evicted: int
    num_touched: int

    def __init__(self, num_blocks: int, *, queue_factory: QueueFactory | None = None) -> None:
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
        self.blocks = [KVCacheBlock(block_id) for block_id in range(num_blocks)]
        self.free_block_queue = queue_factory(self.blocks)
        # Keyed by hash, then block id: the same tokens may be cached in several
        # blocks (two requests filled them at once), and vLLM does not merge
        # them so that a running request's block table never changes.
        self.cached_block_hash_to_block = {}
        self.null_block = self.free_block_queue.popleft()  # P1
        # Counters for reports: blocks handed out, returned to the queue, stripped of a hash, hit.
        self.num_allocated = 0
        self.num_freed = 0
        self.num_evicted = 0
        self.num_touched = 0

    def __repr__(self) -> str:
        """Name the pool's size and how many blocks are free.

        Runtime complexity: O(1)
        """
        free = len(self.free_block_queue)
        return f"<BlockPool of {self.num_blocks} blocks, {free} free>"

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

        Runtime complexity: O(len(block_hash.token_ids)), for the dictionary lookup
        """
        cached = self.cached_block_hash_to_block.get(block_hash)
        if not cached:
            return None
        return next(iter(cached.values()))

    def find_longest_cache_hit(self, block_hashes: Iterable[BlockHash]) -> list[KVCacheBlock]:
        """Return the cached blocks of the longest prefix of ``block_hashes``, stopping at a miss.

        Touch the result before allocating anything, or the allocation may evict it.

        Runtime complexity: O(total tokens of the blocks hit)
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
        unchanged, if fewer blocks are free.

        Runtime complexity: O(num_blocks)

        >>> pool = BlockPool(num_blocks=3)
        >>> [(block.block_id, block.ref_cnt) for block in pool.get_new_blocks(2)]
        [(1, 1), (2, 1)]
        """
        free = len(self.free_block_queue)
        if num_blocks > free:
            raise EmptyQueueError(f"cannot get {num_blocks} blocks from a pool with {free} free")
        blocks = self.free_block_queue.popleft_n(num_blocks)
        for block in blocks:
            if block.block_hash is not None:
                self._evict_cached_hash(block, block.block_hash)
            block.ref_cnt = 1  # P2: it was 0 while the block was free
        self.num_allocated += num_blocks
        return blocks

    def _evict_cached_hash(self, block: KVCacheBlock, block_hash: BlockHash) -> None:
        """Drop ``block``'s hash, ``block_hash``, from the cache and from the block (P3)."""
        cached = self.cached_block_hash_to_block.get(block_hash)
        if cached is None or cached.pop(block.block_id, None) is None:
            raise BlockPoolError(f"{block!r} carries a hash it is not cached under (P3 broken)")
        if not cached:
            del self.cached_block_hash_to_block[block_hash]
        block.block_hash = None
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
        its full blocks (:func:`hash_request_tokens`); the first
        ``num_cached_blocks`` are cached already. Raises
        :class:`BlockPoolError`, caching nothing, if a key is missing or a
        block to cache already has a hash.

        Runtime complexity: O(total tokens of the newly full blocks)
        """
        new_blocks = blocks[num_cached_blocks:num_full_blocks]
        new_hashes = block_hashes[num_cached_blocks:num_full_blocks]
        if len(new_hashes) != len(new_blocks):
            raise BlockPoolError(
                f"{len(new_blocks)} blocks to cache but {len(new_hashes)} block hashes"
            )
        for block in new_blocks:
            if block.block_hash is not None:
                raise BlockPoolError(f"{block!r} is cached already")
        cache = self.cached_block_hash_to_block
        for block, block_hash in zip(new_blocks, new_hashes, strict=True):
            block.block_hash = block_hash  # P3: set and registered together
            cached = cache.get(block_hash)
            if cached is None:
                cache[block_hash] = {block.block_id: block}
            else:
                cached[block.block_id] = block

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each of ``blocks`` (a prefix-cache hit), freeing none.

        A block with ``ref_cnt`` 0 sits in the free queue as an eviction
        candidate; it is removed from there, from the middle, in O(1). If the
        queue rejects a block, the blocks before it stay touched.

        Runtime complexity: O(len(blocks))
        """
        queue_remove = self.free_block_queue.remove
        null_block = self.null_block
        for block in blocks:
            if block is null_block:
                continue  # P1
            if block.ref_cnt == 0:
                queue_remove(block)  # P2: a ref-0 block is in the queue
            block.ref_cnt += 1
            self.num_touched += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop a reference on each block; those no request uses any more join the free queue.

        Pass a request's blocks *reversed*: blocks join the back in the order
        given, and the front is evicted first, so the tail of a prefix chain
        (shared by the fewest requests) should be evicted before its head.

        A block freed more often than it was taken is a double free. Its count
        would drop below zero while it is still in the free queue (P2), so it is
        handed to the queue again and the queue rejects it with
        :class:`AlreadyInQueueError`; every count is then restored and nothing
        is freed.

        Runtime complexity: O(len(ordered_blocks))
        """
        blocks = ordered_blocks if isinstance(ordered_blocks, list) else list(ordered_blocks)
        null_block = self.null_block
        released: list[KVCacheBlock] = []
        for block in blocks:
            if block is null_block:
                continue  # P1
            block.ref_cnt -= 1
            if block.ref_cnt <= 0:
                released.append(block)
        try:
            self.free_block_queue.append_n(released)
        except BaseException:
            for block in blocks:
                if block is not null_block:
                    block.ref_cnt += 1
            raise
        self.num_freed += len(released)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, if no block is in use; return whether it did.

        An engine does this after its weights change (the cached keys and
        values are stale) or between benchmark runs.

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
        self.cached_block_hash_to_block = {}
        for block in self.blocks:
            block.block_hash = None
        return True

    def check_consistency(self) -> None:
        """Check P1..P3 and the queue's count; raise :class:`BlockPoolError` naming the first break.

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
        if id(null_block) in free_ids or null_block.block_hash is not None:
            raise BlockPoolError(f"the null block {null_block!r} is free or cached (P1)")
        owned = {id(block) for block in self.blocks}
        if not free_ids <= owned:
            raise BlockPoolError("the free queue holds a block this pool does not own")
        for block in self.blocks:
            if block is null_block:
                continue
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
                raise BlockPoolError(f"an empty entry is cached under {block_hash!r} (P3)")
            for block_id, block in cached.items():
                if block.block_id != block_id or block.block_hash != block_hash:
                    raise BlockPoolError(f"{block!r} is cached under a hash it lacks (P3)")
