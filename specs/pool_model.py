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
- Ownership: which pool a block belongs to is recorded when its caller makes the block (a
  :class:`Foreign` names the pool its ``pool`` reference names, and whether that pool owns
  it), never asked of the pool. ``free_blocks`` hands a block of another live pool to that
  pool (modelled by a peer :class:`PoolModel` in :attr:`PoolModel.peers`), skips one whose
  pool is gone, and refuses one that names no pool, or a pool that does not own it; all of
  that is decided for the whole call before anything changes. ``cache_full_blocks`` and
  ``owns`` accept this pool's own blocks only. ``touch`` does not look at pools: it takes a
  reference on any block that is held, and refuses, as the queue does, a detached one that
  is not held, the blocks before it staying touched.

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

from verified_queue.errors import EmptyQueueError, NegativeCountError, NotInQueueError
from verified_queue.kvcache.errors import BlockPoolError, DoubleFreeError

__all__ = [
    "NONE",
    "NULL",
    "SELF",
    "SELF_AGAIN",
    "BlockName",
    "Foreign",
    "PoolModel",
    "PoolView",
    "Unmodelled",
]

#: The id of the null block.
NULL = 0

#: What a :class:`Foreign` block's ``pool`` names, besides a peer's or a gone pool's name:
#: nothing a pool is reached through (``None``, the pool itself rather than a weak reference
#: to it, a weak reference to an object that is no pool) ...
NONE = "none"
#: ... this pool, through the weak reference its own blocks carry ...
SELF = "self"
#: ... or this pool, through another weak reference to it (one made with a callback).
SELF_AGAIN = "self, another reference"


@dataclass(frozen=True)
class Foreign:
    """A block that is not one of this pool's own, as its maker recorded it.

    ``pool`` is what the block's ``pool`` reference names: a peer's name (a live pool, in
    :attr:`PoolModel.peers`), a gone pool's (in :attr:`PoolModel.gone`), :data:`NONE`,
    :data:`SELF` or :data:`SELF_AGAIN`. ``owned`` says whether that pool owns the block (it
    is that pool's block ``block_id``); a block that is not owned (made by hand, a copy, a
    block whose reference was rewritten) is a *stray*, its count kept in
    :attr:`PoolModel.stray_ref`. ``serial`` tells strays with the same fields apart.
    """

    block_id: int
    pool: str
    owned: bool = True
    serial: int = 0


#: A block as the model's callers name it: an id of this pool, or a block that is not its own.
BlockName = int | Foreign


class Unmodelled(Exception):
    """A step the model does not say the outcome of: its caller must not take it."""


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
    #: The other pools that are alive, by name: a free routes their blocks to them.
    peers: dict[str, PoolModel] = field(default_factory=dict)
    #: The pools that are gone, by name (their model, or ``None`` for one never modelled):
    #: their blocks are skipped by a free.
    gone: dict[str, PoolModel | None] = field(default_factory=dict)
    #: Each stray's count and how its key is shown (``"None"`` when it has none).
    stray_ref: dict[Foreign, int] = field(default_factory=dict)
    stray_key: dict[Foreign, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every block but the null block free, in id order."""
        self.free = list(range(1, self.num_blocks))
        self.ref = [0] * self.num_blocks
        self.key_of = {}
        self.cache = {}

    # --- blocks that are not this pool's own ------------------------------------------------

    def stray(self, name: Foreign, ref_cnt: int = 0, shown_key: str = "None") -> Foreign:
        """Record a block that is not owned, with its count and the key it shows; return it."""
        if name.owned:
            raise ValueError(f"{name} is owned: its pool's model keeps it")
        self.stray_ref[name] = ref_cnt
        self.stray_key[name] = shown_key
        return name

    def owner_model(self, name: Foreign) -> PoolModel | None:
        """The model of the pool that owns ``name`` (alive or gone), or ``None`` for a stray."""
        if not name.owned:
            return None
        owner = self.peers.get(name.pool) or self.gone.get(name.pool)
        if owner is None:
            raise Unmodelled(f"{name}: no model of the pool that owns it")
        return owner

    def ref_of(self, name: BlockName) -> int:
        """The block's count now."""
        if isinstance(name, int):
            return self.ref[name]
        owner = self.owner_model(name)
        return self.stray_ref[name] if owner is None else owner.ref[name.block_id]

    def is_null(self, name: BlockName) -> bool:
        """Whether the block is a pool's null block: this pool's, or another's own."""
        return name == NULL or (isinstance(name, Foreign) and name.owned and name.block_id == 0)

    def owns(self, name: BlockName) -> bool:
        """Whether ``name`` is one of this pool's blocks: exactly the ids, the null block's too."""
        return isinstance(name, int)

    def drop_peer(self, name: str) -> None:
        """The peer ``name`` is dropped: from now on its blocks name a pool that is gone."""
        self.gone[name] = self.peers.pop(name)

    # --- how the pool shows a block -------------------------------------------------------

    def show(self, name: BlockName) -> str:
        """The repr the pool gives the block ``name`` now."""
        if isinstance(name, Foreign):
            owner = self.owner_model(name)
            if owner is not None:
                return owner.show(name.block_id)
            return (
                f"KVCacheBlock(block_id={name.block_id}, ref_cnt={self.stray_ref[name]}, "
                f"block_hash={self.stray_key[name]})"
            )
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
            if self.is_null(block):
                raise BlockPoolError(f"the null block {self.show(block)} is never cached (P1)")
            if not self.owns(block):
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

    def touch(self, blocks: Sequence[BlockName]) -> None:
        """Take a reference on each block; a free one leaves the free queue.

        The pool's pool is not looked at: a held block of any pool, or of none, is counted
        (and so is the touch). A block that is not held and not linked (a stray) is refused
        as the queue refuses it, the blocks before it staying touched. A block linked in
        another pool's queue is :class:`Unmodelled`: the production queue cannot tell it
        from its own, and both queues break.
        """
        for block in blocks:
            if self.is_null(block):
                continue
            if isinstance(block, int):
                if self.ref[block] == 0:
                    self.free.remove(block)
                self.ref[block] += 1
            else:
                owner = self.owner_model(block)
                if owner is None:
                    if self.stray_ref[block] == 0:
                        raise NotInQueueError(
                            f"remove({self.show(block)}): it is not linked in a queue"
                        )
                    self.stray_ref[block] += 1
                else:
                    if owner.ref[block.block_id] == 0:
                        raise Unmodelled(f"touch({block}): a block linked in another queue")
                    owner.ref[block.block_id] += 1
            self.touched += 1

    def free_blocks(self, blocks: Sequence[BlockName], evict_first: bool = False) -> None:
        """Drop a reference on each block, all or nothing; released blocks rejoin their queue.

        One pass sorts the blocks by the pool they name: this pool (its own blocks, and
        blocks that name it through its own blocks' reference), another live pool (through
        any reference to it, this pool's other references included), a pool that is gone
        (skipped), or none (refused at once). Then this pool's share is checked, then each
        other pool's in the order first met: a block its pool does not own is refused, and
        so is a double free. Only then does anything change.
        """
        ours: list[BlockName] = []
        routed: dict[str, list[BlockName]] = {}  # in the order first met
        for block in blocks:
            if self.is_null(block):
                continue
            if isinstance(block, int) or block.pool == SELF:
                ours.append(block)
            elif block.pool == SELF_AGAIN:
                routed.setdefault(SELF, []).append(block)
            elif block.pool in self.peers:
                routed.setdefault(block.pool, []).append(block)
            elif block.pool in self.gone:
                continue  # its pool is gone, and its queue with it
            else:
                raise BlockPoolError(
                    f"free_blocks({self.show(block)}): the block belongs to no pool, "
                    "so it cannot be freed"
                )
        plans = [(self, self._plan_free(ours, self))]
        for pool_name, share in routed.items():
            owner = self if pool_name == SELF else self.peers[pool_name]
            plans.append((owner, owner._plan_free(share, self)))
        for owner, released in plans:
            owner._apply_free(released, evict_first)
        for block in blocks:
            if isinstance(block, int):
                if block != NULL:
                    self.ref[block] -= 1
            elif not self.is_null(block) and block.pool in self.peers:
                self.peers[block.pool].ref[block.block_id] -= 1

    def _plan_free(self, blocks: Sequence[BlockName], caller: PoolModel) -> list[int]:
        """Check that this pool may free ``blocks``; return the ids its count drops to 0 for.

        ``caller`` is the pool the call was made on: it shows the blocks (strays too).
        """
        left: dict[int, int] = {}
        released: list[int] = []
        for block in blocks:
            block_id = block if isinstance(block, int) else block.block_id
            if isinstance(block, Foreign) and not block.owned:
                raise BlockPoolError(
                    f"free_blocks({caller.show(block)}): the block names a pool that does not "
                    "own it (P5)"
                )
            count = left.get(block_id, self.ref[block_id]) - 1
            if count < 0:
                raise DoubleFreeError(
                    f"free_blocks({self.show(block_id)}): freed more often than it is held, "
                    f"its ref_cnt would drop to {count} (a double free?)"
                )
            left[block_id] = count
            if count == 0:
                released.append(block_id)
        return released

    def _apply_free(self, released: list[int], evict_first: bool) -> None:
        """Link the released blocks: to the back if cached (not ``evict_first``), else the front."""
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
