"""The block a :class:`~verified_queue.kvcache.pool.BlockPool` hands out: ``KVCacheBlock``.

A :class:`~verified_queue.Block` with vLLM 0.34.0's ``KVCacheBlock`` fields: its id,
its reference count, a weak reference to its pool, and its prefix-cache key once it
is full. The pool's invariants (P1..P5) say how the pool keeps these fields; see
:mod:`verified_queue.kvcache.pool`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verified_queue.block import Block
from verified_queue.kvcache.errors import BlockPoolError
from verified_queue.kvcache.keys import BlockHash

if TYPE_CHECKING:
    from verified_queue.kvcache.pool import BlockPool

__all__ = ["KVCacheBlock", "show_hash"]


def show_hash(block_hash: object) -> str:
    """Show a key by its first bytes: enough to tell keys apart, short enough for diagnostics."""
    if isinstance(block_hash, bytes):
        return f"{block_hash[:6].hex()}..."
    return repr(block_hash)


# eq=False: a block's identity is its only equality. The generated field-wise
# __eq__ vLLM's KVCacheBlock keeps would call block 3 of two pools equal, and
# would make blocks unhashable.
@dataclass(slots=True, eq=False, repr=False)
class KVCacheBlock(Block):
    """One KV-cache block: its id, how many requests use it, its pool, and its cache key once full.

    The fields follow vLLM 0.34.0's ``KVCacheBlock``: ``pool`` is keyword-only
    and a weak reference to the pool, and ``block_hash`` is a plain field, set
    with :meth:`set_block_hash` (which refuses a second key) and cleared with
    :meth:`reset_hash`; the pool relies on nothing else writing it (P3).

    >>> block = KVCacheBlock(3)
    >>> block
    KVCacheBlock(block_id=3, ref_cnt=0, block_hash=None)
    >>> block.prev_free_block is None  # detached until a queue links it
    True
    >>> block.set_block_hash(BlockHash(bytes(range(32))))
    >>> block
    KVCacheBlock(block_id=3, ref_cnt=0, block_hash=000102030405...)
    """

    block_id: int
    ref_cnt: int = 0
    #: A weak reference to the pool the block belongs to; ``free_blocks`` hands the block
    #: back to that pool while it lives.
    pool: weakref.ref[BlockPool] | None = field(default=None, kw_only=True)
    #: The block's prefix-cache key, or ``None`` when it is not cached.
    block_hash: BlockHash | None = field(default=None, init=False)
    #: Set on the pool's null block only (P1).
    is_null: bool = field(default=False, kw_only=True)

    def __getstate__(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Save the block as :class:`Block` does, with its pool itself in place of the reference.

        A weak reference can be neither pickled nor copied; the pool it names can, and
        copy and pickle then give the copy a reference to the pool's copy.
        """
        # Block's own, named: super() fails in a class that dataclass(slots=True) rebuilt.
        attributes, slots = Block.__getstate__(self)
        reference = slots.get("pool")
        if isinstance(reference, weakref.ref):
            slots["pool"] = reference()
        return attributes, slots

    def __setstate__(self, state: tuple[dict[str, Any] | None, dict[str, Any]]) -> None:
        """Restore what :meth:`__getstate__` saved, referring to the pool weakly again."""
        Block.__setstate__(self, state)
        owner: object = self.pool
        if owner is not None and not isinstance(owner, weakref.ref):
            self.pool = weakref.ref(owner)  # type: ignore[arg-type]  # the pool saved above

    def set_block_hash(self, block_hash: BlockHash) -> None:
        """Record ``block_hash`` as the block's key; raise :class:`BlockPoolError` if it has one.

        Runtime complexity: O(1)
        """
        if self.block_hash is not None:
            raise BlockPoolError(f"{self!r} has a hash already")
        self.block_hash = block_hash

    def reset_hash(self) -> None:
        """Forget the block's key (it was evicted from the cache).

        Runtime complexity: O(1)
        """
        self.block_hash = None

    def __repr__(self) -> str:
        """Show id, count and the key's first bytes, never the neighbours or the pool.

        Runtime complexity: O(1)
        """
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"block_hash={show_hash(self.block_hash)})"
        )
