"""A reference model of the prefix-caching block pool, written apart from ``kvcache/pool.py``.

The model keeps what a pool's user can observe, in the plainest structures that say it: a
list for the free queue (front first), a dict of reference counts, a dict from each block to
its key, and a dict from each key to the blocks cached under it, oldest first. It never
imports the pool: its rules come from vLLM v1's ``BlockPool`` as the pool's docstring states
them, so that the two are compared, not one copied from the other.

- Allocation takes blocks from the front; a block taken that still has a key loses it
  (lazy eviction), and the key's entry loses the block.
- Freed blocks are given in eviction order; a block whose count drops to 0 goes to the back
  if it has a key (least recently used evicted first), to the front otherwise (last in,
  first out), and to the front with ``evict_first`` or with caching off.
- A hit (``touch``) takes a free block out of the middle of the free queue.
- Block 0 is the null block: never free, never cached, skipped by ``touch`` and ``free``.

Keys are opaque to the model: any hashable value. The pool's own tests give it *logical*
keys (the whole prefix a block stands for) while the pool gets the bytes of
:mod:`verified_queue.kvcache.keys`, so that a key function that merges two prefixes, or
splits one, shows up as a hit the model does not have, or a miss it does not expect.

Every refusal is modelled with the exception type and message the pool promises, so a
comparison checks both.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from verified_queue.errors import EmptyQueueError, NegativeCountError
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError

__all__ = ["NULL", "Foreign", "PoolModel", "PoolView"]

#: The id of the null block.
NULL = 0


@dataclass(frozen=True)
class Foreign:
    """A block of another pool, never allocated or cached there: named by its id."""

    block_id: int


#: A block as the model's callers name it: an id of this pool, or a block of another pool.
BlockName = int | Foreign


@dataclass
class PoolView:
    """Everything a pool's user can observe, in plain values, for comparing pool and model."""

    free_order: list[int]
    ref_counts: list[int]
    cached: list[bool]
    cache: dict[Hashable, list[int]]
    counters: tuple[int, int, int, int, int]
    num_free: int
    usage: float
    text: str


@dataclass
class PoolModel:
    """The reference model: ``num_blocks`` blocks, block 0 the null block, all others free."""

    num_blocks: int
    enable_caching: bool = True
    #: How a key is shown in a block's repr (the pool shows its first six bytes).
    show_key: Callable[[Hashable], str] = repr
    free: list[int] = field(init=False)
    ref: list[int] = field(init=False)
    key_of: dict[int, Hashable] = field(init=False)
    cache: dict[Hashable, list[int]] = field(init=False)
    allocated: int = 0
    freed: int = 0
    freed_lifo: int = 0
    evicted: int = 0
    touched: int = 0

    def __post_init__(self) -> None:
        """Every block but the null block free, in id order."""
        self.free = list(range(1, self.num_blocks))
        self.ref = [0] * self.num_blocks
        self.key_of = {}
        self.cache = {}

    # --- how the pool shows a block -------------------------------------------------------

    def show(self, name: BlockName) -> str:
        """The repr the pool gives the block ``name`` now."""
        if isinstance(name, Foreign):
            return f"KVCacheBlock(block_id={name.block_id}, ref_cnt=0, block_hash=None)"
        key = self.key_of.get(name)
        shown = "None" if name not in self.key_of else self.show_key(key)
        return f"KVCacheBlock(block_id={name}, ref_cnt={self.ref[name]}, block_hash={shown})"

    # --- the operations --------------------------------------------------------------------

    def get_new_blocks(self, count: int) -> list[int]:
        """Take ``count`` blocks from the front; each loses its key and is held once."""
        if count > len(self.free):
            raise EmptyQueueError(
                f"cannot get {count} blocks from a pool with {len(self.free)} free"
            )
        if count < 0:
            raise NegativeCountError(f"popleft_n({count}): the count must not be negative")
        taken, self.free = self.free[:count], self.free[count:]
        for block in taken:
            self._evict(block)
            self.ref[block] = 1
        self.allocated += count
        return taken

    def _evict(self, block: int) -> None:
        if block not in self.key_of:
            return
        key = self.key_of.pop(block)
        self.cache[key].remove(block)
        if not self.cache[key]:
            del self.cache[key]
        self.evicted += 1

    def cache_full_blocks(
        self,
        blocks: Sequence[BlockName],
        keys: Sequence[Hashable],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Cache ``blocks[num_cached_blocks:num_full_blocks]`` under the matching keys."""
        if not self.enable_caching:
            return
        new_blocks = list(blocks[num_cached_blocks:num_full_blocks])
        new_keys = list(keys[num_cached_blocks:num_full_blocks])
        if len(new_blocks) != len(new_keys):
            raise BlockPoolError(
                f"{len(new_blocks)} blocks to cache but {len(new_keys)} block hashes"
            )
        seen: list[BlockName] = []
        for block in new_blocks:
            if block == NULL:
                raise BlockPoolError(f"the null block {self.show(block)} is never cached (P1)")
            if isinstance(block, Foreign):
                raise BlockPoolError(f"{self.show(block)} is not a block of this pool (P5)")
            if block in self.key_of:
                raise BlockPoolError(f"{self.show(block)} is cached already")
            if block in seen:
                raise BlockPoolError(f"{self.show(block)} appears twice among the blocks to cache")
            seen.append(block)
        for block, key in zip(new_blocks, new_keys, strict=True):
            if not isinstance(block, int):  # refused above; narrows the type
                raise TypeError(block)
            self.key_of[block] = key
            self.cache.setdefault(key, []).append(block)

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on each block; a free one leaves the free queue."""
        for block in blocks:
            if block == NULL:
                continue
            if self.ref[block] == 0:
                self.free.remove(block)
            self.ref[block] += 1
            self.touched += 1

    def free_blocks(self, blocks: Sequence[int], evict_first: bool = False) -> None:
        """Drop a reference on each block, all or nothing; released blocks rejoin the queue."""
        left: dict[int, int] = {}
        released: list[int] = []
        for block in blocks:
            if block == NULL:
                continue
            count = left.get(block, self.ref[block]) - 1
            if count < 0:
                raise DoubleFreeError(
                    f"free_blocks({self.show(block)}): freed more often than it is held, "
                    f"its ref_cnt would drop to {count} (a double free?)"
                )
            left[block] = count
            if count == 0:
                released.append(block)
        for block in blocks:
            if block != NULL:
                self.ref[block] -= 1
        to_back = self.enable_caching and not evict_first
        front = [block for block in released if not (to_back and block in self.key_of)]
        back = [block for block in released if to_back and block in self.key_of]
        self.free = front + self.free + back
        self.freed += len(released)
        self.freed_lifo += len(front)

    def find_longest_cache_hit(self, keys: Sequence[Hashable]) -> list[int]:
        """The oldest block cached under each key of the longest cached prefix of ``keys``."""
        hit: list[int] = []
        for key in keys:
            if key not in self.cache:
                break
            hit.append(self.cache[key][0])
        return hit

    def get_cached_block(self, key: Hashable) -> int | None:
        """The oldest block cached under ``key``, or ``None``."""
        blocks = self.cache.get(key)
        return blocks[0] if blocks else None

    def reset_prefix_cache(self) -> bool:
        """Forget every key if no block is held; return whether it did."""
        if len(self.free) != self.num_blocks - 1:
            return False
        self.key_of = {}
        self.cache = {}
        return True

    # --- what is observed -----------------------------------------------------------------

    def view(self, key_image: Callable[[Hashable], Hashable] = lambda key: key) -> PoolView:
        """The observables, with each key shown through ``key_image`` (the pool's key for it)."""
        free = len(self.free)
        return PoolView(
            free_order=list(self.free),
            ref_counts=list(self.ref),
            cached=[block in self.key_of for block in range(self.num_blocks)],
            cache={key_image(key): list(blocks) for key, blocks in self.cache.items()},
            counters=(self.allocated, self.freed, self.freed_lifo, self.evicted, self.touched),
            num_free=free,
            usage=1.0 - free / self.num_blocks,
            text=f"<BlockPool of {self.num_blocks} blocks, {free} free>",
        )
