"""Drive a block pool and the reference model side by side, comparing every observable.

:class:`PoolDriver` runs the steps an engine takes (admit a request: look up its prefix,
touch the hit, allocate the rest, cache its full blocks; free a finished request in reverse
order, with or without ``evict_first``; preempt one and admit it again; share a request's
blocks; reset the prefix cache) and the misuse it must refuse (a double free, caching the
null block, another pool's block, a block twice or a cached block again, too few keys, too
many or a negative number of blocks), on a :class:`~verified_queue.kvcache.pool.BlockPool`
and on :class:`specs.pool_model.PoolModel` at once. After every step it compares results,
exception types and messages, the free queue's order, every block's count and key, the cache,
the counters, ``get_usage`` and the repr, and runs the pool's own ``check_consistency``.

Ownership as a user meets it: beside the pool under test the driver keeps two other live
pools, one of the same class and one of another (:data:`PEER_SLOTS`), whose blocks requests
come to hold (a deferred free then mixes pools), and it drops them at will (their blocks then
name a pool that is gone). It makes blocks that are not the pool's own: by hand, naming no
pool, this pool, another reference to it, another pool, a pool that is gone, the pool itself
rather than a weak reference, or an object that is no pool; copies, deep copies and pickles
of held blocks; another pool's free block; and the pool's own blocks with their ``pool``
rewritten (:data:`STRAYS`). Each goes, inside a request's blocks, to ``free_blocks``,
``cache_full_blocks`` and ``touch`` (:data:`ENTRIES`), and to ``owns``. The model is told
what each block is when the driver makes it (:class:`specs.pool_model.Foreign`): it never
asks the pool which pool owns a block. Every other pool's state, and the count of every
block of another pool a request holds, are compared too.

The pool gets its keys from :mod:`verified_queue.kvcache.keys` (looked up on the module at each
call, so a planted bug replaced there is the one used); the model gets the logical keys of
:mod:`specs.key_model`. A key function that gives two different prefixes one key, or one
prefix two keys, is reported when it happens, and would show as a wrong hit anyway.

Two layers use it: the Hypothesis machine of ``tests/kvcache/test_pool_machine.py`` and
:func:`enumerate_sequences`, every short sequence of a fixed menu of steps.
"""

from __future__ import annotations

import copy
import gc
import itertools
import pickle
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specs.key_model import logical_request_keys
from specs.pool_model import (
    NONE,
    NULL,
    SELF,
    SELF_AGAIN,
    BlockName,
    Foreign,
    PoolModel,
    PoolView,
)
from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import BlockHash, MultimodalInput
from verified_queue.kvcache.pool import BlockPool

__all__ = [
    "BLOCK_SIZE",
    "ENTRIES",
    "MENU",
    "PEER_SLOTS",
    "STRAYS",
    "Mismatch",
    "PoolDriver",
    "RequestSpec",
    "enumerate_sequences",
    "enumerate_strays",
]

#: Tokens per block: small, so that short prompts fill several blocks.
BLOCK_SIZE = 2


#: The other live pools a driver keeps: one of the pool's class, one of another class (with
#: caching the other way).
PEER_SLOTS = ("other", "sibling")

#: The pool entry points a stray block is passed to (``owns`` is asked of every block too).
ENTRIES = ("free_blocks", "cache_full_blocks", "touch")

#: The blocks that are not the pool's own which :meth:`PoolDriver.misuse_foreign` makes.
STRAYS = (
    "new, no pool",
    "new, naming this pool",
    "new, another reference to this pool",
    "new, naming another pool",
    "new, naming a pool that is gone",
    "new, the pool itself, not a weak reference",
    "new, a weak reference to no pool",
    "a copy of a held block",
    "a deep copy of a held block",
    "a pickled held block",
    "a copy of another pool's held block",
    "another pool's free block",
    "a held block of a pool that is gone",
    "own block, pool set to None",
    "own block, pool set to the pool itself",
    "own block, pool set to another pool's reference",
    "own block, pool set to another reference to this pool",
    "own block, pool set to a reference that is dead",
)

#: The model's name of the pool the driver dropped before its first step, and of a deep
#: copy's pool (dropped as the copy is made).
DROPPED = "dropped"


class Mismatch(AssertionError):
    """The pool and the model disagree: the message says on what."""


class OtherBlockPool(BlockPool):
    """A pool of another class than :class:`BlockPool` (the sibling of a plain pool)."""

    __slots__ = ()


class NotAPool:
    """An object that is no pool, which a block's ``pool`` may name weakly all the same."""

    __slots__ = ("__weakref__",)


def _ignore(_reference: object) -> None:
    """A weak reference's callback: makes the reference another object than the plain one."""


class _Rewrite:
    """A block's ``pool`` rewritten (:meth:`apply`, done at once); calling it puts it back."""

    def __init__(self, block: KVCacheBlock, reference: object) -> None:
        self.block = block
        self.saved = block.pool
        self.reference = reference
        self.apply()

    def apply(self) -> None:
        """Write the rewritten reference."""
        self.block.pool = self.reference  # type: ignore[assignment]

    def __call__(self) -> None:
        """Put the block's own reference back."""
        self.block.pool = self.saved


def _show_key(key: Hashable) -> str:
    return "None" if key is None else f"{key[:6].hex()}..."  # type: ignore[index]


@dataclass(frozen=True)
class RequestSpec:
    """A request's prompt and what else shapes its keys."""

    tokens: tuple[int, ...]
    lora: str | int | None = None
    cache_salt: str | bytes | None = None
    mm_inputs: tuple[tuple[str, int, int], ...] = ()


@dataclass
class _Request:
    spec: RequestSpec | None
    blocks: list[BlockName]
    num_cached: int = 0
    keys: list[BlockHash] = field(default_factory=list)
    logical: list[Hashable] = field(default_factory=list)


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as error:  # compared by type and message, whatever it is
        return "raised", (type(error).__name__, str(error))


class PoolDriver:
    """A pool of ``num_blocks`` blocks (of class ``pool_type``) and the model, in lockstep."""

    def __init__(
        self,
        num_blocks: int = 6,
        *,
        enable_caching: bool = True,
        pool_type: type[BlockPool] = BlockPool,
    ) -> None:
        """Build both with every block but the null block free, and compare them."""
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.pool = pool_type(num_blocks, enable_caching=enable_caching)
        self.model = PoolModel(num_blocks, enable_caching, show_key=self._show_key)
        self.requests: list[_Request] = []
        self.key_of_logical: dict[Hashable, BlockHash] = {}
        self.logical_of_key: dict[BlockHash, Hashable] = {}
        # Other pools: the live ones by their model's name, and the name in each slot now.
        self.peer_types = {
            "other": pool_type,
            "sibling": OtherBlockPool if pool_type is BlockPool else BlockPool,
        }
        self.live: dict[str, BlockPool] = {}
        self.peer_names: dict[str, str] = {}
        self.generation = 0  # made when first needed: the steps of an engine alone need none
        # Blocks not the pool's own that requests hold or the driver made, by model name.
        self.objects: dict[Foreign, KVCacheBlock] = {}
        self.serial = 0
        self.not_a_pool = NotAPool()
        dropped = BlockPool(2)
        self.dead_reference = dropped.blocks[1].pool
        del dropped
        self.model.gone[DROPPED] = None
        self.compare("a new pool")

    def _peer_name(self, slot: str) -> str:
        """The model's name of the live pool in ``slot``, made if there is none yet."""
        if slot not in self.peer_names:
            self._new_peer(slot)
        return self.peer_names[slot]

    def _new_peer(self, slot: str) -> None:
        self.generation += 1
        name = f"{slot} {self.generation}"
        # The sibling caches where the pool does not, and the other way round: a block
        # routed to it is freed by its rules, not the caller's.
        caching = self.enable_caching if slot == "other" else not self.enable_caching
        self.live[name] = self.peer_types[slot](self.num_blocks, enable_caching=caching)
        self.model.peers[name] = PoolModel(self.num_blocks, caching, show_key=_show_key)
        self.peer_names[slot] = name

    def _stray(self, pool: str, block_id: int, ref_cnt: int = 0, shown: str = "None") -> Foreign:
        """Name a block that is not owned (a stray) for the model, with its count and key."""
        self.serial += 1
        name = Foreign(block_id, pool, owned=False, serial=self.serial)
        return self.model.stray(name, ref_cnt, shown)

    # --- keys -------------------------------------------------------------------------------

    def _show_key(self, logical: Hashable) -> str:
        key = self.key_of_logical.get(logical)
        return "<no key>" if key is None else f"{key[:6].hex()}..."

    def _keys(self, spec: RequestSpec) -> tuple[list[BlockHash], list[Hashable]]:
        pool_keys = keys_module.hash_request_tokens(
            list(spec.tokens),
            BLOCK_SIZE,
            lora=spec.lora,
            mm_inputs=[MultimodalInput(*item) for item in spec.mm_inputs],
            cache_salt=spec.cache_salt,
        )
        logical = logical_request_keys(
            spec.tokens,
            BLOCK_SIZE,
            lora=spec.lora,
            mm_inputs=spec.mm_inputs,
            cache_salt=spec.cache_salt,
        )
        if len(pool_keys) != len(logical):
            raise Mismatch(f"{spec}: {len(pool_keys)} keys for {len(logical)} full blocks")
        for key, meaning in zip(pool_keys, logical, strict=True):
            known_key = self.key_of_logical.setdefault(meaning, key)
            if known_key != key:
                raise Mismatch(
                    f"{spec}: one prefix got two keys, {known_key.hex()} and {key.hex()}"
                )
            known_meaning = self.logical_of_key.setdefault(key, meaning)
            if known_meaning != meaning:
                raise Mismatch(f"{spec}: two prefixes share the key {key.hex()}")
        return pool_keys, logical

    # --- comparing ----------------------------------------------------------------------------

    def _object(self, name: BlockName) -> KVCacheBlock:
        if isinstance(name, int):
            return self.pool.blocks[name]
        found = self.objects.get(name)
        return self.live[name.pool].blocks[name.block_id] if found is None else found

    def _blocks(self, names: Sequence[BlockName]) -> list[KVCacheBlock]:
        return [self._object(name) for name in names]

    def _pool_view(self, pool: BlockPool | None = None) -> PoolView:
        pool = self.pool if pool is None else pool
        return PoolView(
            free_order=[block.block_id for block in pool.free_block_queue],
            ref_counts=[block.ref_cnt for block in pool.blocks],
            cached=[block.block_hash is not None for block in pool.blocks],
            cache={
                key: [block.block_id for block in cached.values()]
                for key, cached in pool.cached_block_hash_to_block.items()
            },
            counters=(
                pool.num_allocated,
                pool.num_freed,
                pool.num_freed_lifo,
                pool.num_evicted,
                pool.num_touched,
            ),
            num_free=pool.get_num_free_blocks(),
            usage=pool.get_usage(),
            text=repr(pool),
        )

    def compare(self, step: str) -> None:
        """Raise :class:`Mismatch` unless the pool is consistent and shows what the model does."""
        outcome = _outcome(self.pool.check_consistency)
        if outcome[0] != "ok":
            raise Mismatch(f"after {step}: check_consistency: {outcome[1]}")
        seen = self._pool_view()
        expected = self.model.view(lambda logical: self.key_of_logical[logical])
        for name in vars(expected):
            if getattr(seen, name) != getattr(expected, name):
                raise Mismatch(
                    f"after {step}: {name} is {getattr(seen, name)!r}, "
                    f"the model has {getattr(expected, name)!r}"
                )
        for logical, key in self.key_of_logical.items():
            found = self.pool.get_cached_block(key)
            wanted = self.model.get_cached_block(logical)
            if (None if found is None else found.block_id) != wanted:
                raise Mismatch(f"after {step}: get_cached_block gives {found!r}, not {wanted}")
        for name, peer in self.live.items():
            outcome = _outcome(peer.check_consistency)
            if outcome[0] != "ok":
                raise Mismatch(f"after {step}: {name}: check_consistency: {outcome[1]}")
            seen = self._pool_view(peer)
            expected = self.model.peers[name].view()
            for field_name in vars(expected):
                if getattr(seen, field_name) != getattr(expected, field_name):
                    raise Mismatch(
                        f"after {step}: {name}'s {field_name} is {getattr(seen, field_name)!r}, "
                        f"the model has {getattr(expected, field_name)!r}"
                    )
        for foreign, block in self.objects.items():
            if block.ref_cnt != self.model.ref_of(foreign):
                raise Mismatch(
                    f"after {step}: {foreign} has ref_cnt {block.ref_cnt}, "
                    f"the model {self.model.ref_of(foreign)}"
                )

    def both(
        self, step: str, on_pool: Callable[[], Any], on_model: Callable[[], Any]
    ) -> tuple[bool, Any]:
        """Run one call on each; compare outcome, exception type and message.

        Returns whether both succeeded, and the pool's result.
        """
        seen, expected = _outcome(on_pool), _outcome(on_model)
        if seen[0] == "ok" and expected[0] == "ok":
            return True, seen[1]
        if seen != expected:
            raise Mismatch(f"{step}: the pool gave {seen!r}, the model {expected!r}")
        return False, None

    # --- the steps ----------------------------------------------------------------------------

    def admit(self, spec: RequestSpec) -> None:
        """Look up the request's prefix, touch the hit, allocate the rest, cache the full blocks."""
        pool_keys, logical = self._keys(spec)
        # The last prompt token is always computed again, for the first output's logits.
        usable = (len(spec.tokens) - 1) // BLOCK_SIZE
        hit = [block.block_id for block in self.pool.find_longest_cache_hit(pool_keys[:usable])]
        wanted = self.model.find_longest_cache_hit(logical[:usable])
        if hit != wanted:
            raise Mismatch(f"admit {spec}: the pool hits {hit}, the model {wanted}")
        needed = -(-len(spec.tokens) // BLOCK_SIZE) - len(hit)
        free_hits = sum(1 for block in hit if self.model.ref[block] == 0)
        if needed > len(self.model.free) - free_hits:
            self.compare(f"admit {spec} (no room)")
            return
        self.pool.touch(self._blocks(hit))
        self.model.touch(hit)
        new = [block.block_id for block in self.pool.get_new_blocks(needed)]
        if new != self.model.get_new_blocks(needed):
            raise Mismatch(f"admit {spec}: the pool allocated {new}")
        request = _Request(spec, [*hit, *new], len(pool_keys), pool_keys, logical)
        self.pool.cache_full_blocks(
            self._blocks(request.blocks), pool_keys, len(hit), len(pool_keys)
        )
        self.model.cache_full_blocks(request.blocks, logical, len(hit), len(logical))
        self.requests.append(request)
        self.compare(f"admit {spec}")

    def allocate(self, count: int) -> None:
        """Ask for ``count`` blocks outright: may be refused (too many, negative)."""
        done, got = self.both(
            f"get_new_blocks({count})",
            lambda: [block.block_id for block in self.pool.get_new_blocks(count)],
            lambda: self.model.get_new_blocks(count),
        )
        if done:
            self.requests.append(_Request(None, list(got)))
        self.compare(f"get_new_blocks({count})")

    def _pick(self, index: int) -> _Request | None:
        return self.requests[index % len(self.requests)] if self.requests else None

    def free(self, index: int, evict_first: bool = False) -> None:
        """Finish a request: free its blocks in reverse, the tail of its chain first."""
        request = self._pick(index)
        if request is None:
            return
        self.requests.remove(request)
        order = request.blocks[::-1]
        self.both(
            f"free_blocks({order}, evict_first={evict_first})",
            lambda: self.pool.free_blocks(reversed(self._blocks(request.blocks)), evict_first),
            lambda: self.model.free_blocks(order, evict_first),
        )
        self.compare(f"free_blocks({order}, evict_first={evict_first})")

    def preempt(self, index: int) -> None:
        """Preempt a request (free its blocks) and admit it again, recomputing what missed."""
        request = self._pick(index)
        if request is None or request.spec is None:
            return
        self.free(index)
        self.admit(request.spec)

    def share(self, index: int) -> None:
        """A second request takes a reference on every block of a running one (a fork)."""
        request = self._pick(index)
        if request is None:
            return
        self.pool.touch(self._blocks(request.blocks))
        self.model.touch(request.blocks)
        self.requests.append(_Request(request.spec, list(request.blocks)))
        self.compare(f"touch({request.blocks})")

    def double_free(self, index: int) -> None:
        """Free a request's blocks twice in one call: refused unless every block is shared.

        Accepted, the call drops a second reference on each block, which some other
        request holds. The driver takes it as that request's free too, so it runs
        the step only where one request holds exactly the same blocks (a fork made
        by :meth:`share`) and drops both; otherwise it would go on believing another
        request holds blocks that are free again, and may since be reused.
        """
        request = self._pick(index)
        if request is None:
            return
        accepted = all(self.model.ref_of(block) >= 2 for block in request.blocks)
        twin = next(
            (
                other
                for other in self.requests
                if other is not request and other.blocks == request.blocks
            ),
            None,
        )
        if accepted and twin is None:
            return  # no one request's hold to drop with it: nothing the driver can follow
        order = request.blocks[::-1] * 2
        done, _ = self.both(
            f"free_blocks({order})",
            lambda: self.pool.free_blocks(self._blocks(order)),
            lambda: self.model.free_blocks(order),
        )
        if done:
            self.requests.remove(request)
            if twin is not None:
                self.requests.remove(twin)
        self.compare(f"free_blocks({order})")

    def cache_misuse(self, index: int, kind: int) -> None:
        """Cache what must be refused: the null block, another pool's, a block twice, ..."""
        request = self._pick(index)
        blocks: list[BlockName] = [] if request is None else list(request.blocks)
        key = b"\x01" * 32
        if kind == 0:
            blocks, keys = [NULL], [key]
        elif kind == 1:
            blocks, keys = [Foreign(1, self._peer_name("other"))], [key]
        elif kind == 2 and blocks:
            blocks, keys = [blocks[0], blocks[0]], [key, b"\x02" * 32]
        elif kind == 3 and blocks:
            keys = [key] * (len(blocks) - 1)
        elif request is not None and request.num_cached:
            blocks, keys = blocks[:1], [key]  # cached already
        else:
            return

        def on_pool() -> None:
            self.pool.cache_full_blocks(
                self._blocks(blocks), [keys_module.BlockHash(k) for k in keys], 0, len(blocks)
            )

        self.both(
            f"cache_full_blocks({blocks})",
            on_pool,
            lambda: self.model.cache_full_blocks(
                blocks, [("misuse", k) for k in keys], 0, len(blocks)
            ),
        )
        self.compare(f"cache_full_blocks({blocks})")

    # --- ownership: other pools, pools that are gone, blocks that are no pool's own -----------

    def hold_foreign(self, index: int, slot: str, count: int, cache: bool = False) -> None:
        """A request also holds ``count`` blocks of another pool (another KV-cache group's).

        They are allocated there (and, with ``cache``, cached there under keys of their
        own), so that freeing the request mixes the pools.
        """
        name = self._peer_name(slot)
        peer, peer_model = self.live[name], self.model.peers[name]
        done, got = self.both(
            f"{name}: get_new_blocks({count})",
            lambda: [block.block_id for block in peer.get_new_blocks(count)],
            lambda: peer_model.get_new_blocks(count),
        )
        if done and got:
            if cache:
                self.serial += 1
                hashes = [BlockHash(b"%d %d" % (self.serial, i)) for i in range(len(got))]
                peer.cache_full_blocks([peer.blocks[i] for i in got], hashes, 0, len(got))
                peer_model.cache_full_blocks(got, hashes, 0, len(got))
            held = [Foreign(block_id, name) for block_id in got]
            for foreign in held:
                self.objects[foreign] = peer.blocks[foreign.block_id]
            request = self._pick(index)
            if request is None:
                self.requests.append(_Request(None, list(held)))
            else:
                request.blocks += held
        self.compare(f"{name}: get_new_blocks({count}), held")

    def drop_peer(self, slot: str) -> None:
        """Drop another pool: its blocks now name a pool that is gone. A new one takes its slot."""
        name = self._peer_name(slot)
        alive = weakref.ref(self.live.pop(name))
        self.model.drop_peer(name)
        if alive() is not None:  # P5: no cycle through its blocks, nor through an error
            gc.collect()
            kept = "something" if alive() is not None else "a reference cycle"
            raise Mismatch(f"{name} is dropped, but {kept} keeps it alive")
        self._new_peer(slot)
        self.compare(f"drop {name}")

    def _held(self, want: Callable[[Foreign], bool]) -> Foreign | None:
        """A block of another pool some request holds, for which ``want`` is true."""
        for request in self.requests:
            for name in request.blocks:
                if isinstance(name, Foreign) and want(name) and self.model.ref_of(name) > 0:
                    return name
        return None

    def _gone_own(self, name: Foreign) -> bool:
        return name.owned and name.pool in self.model.gone

    def _live_own(self, name: Foreign) -> bool:
        return name.owned and name.pool in self.model.peers

    def _make_stray(  # noqa: PLR0911 -- one return per way a stray is made
        self, kind: str, own: int | None, which: int
    ) -> tuple[KVCacheBlock, Foreign, _Rewrite | None] | None:
        """Make a block of ``kind`` (one of :data:`STRAYS`); ``None`` where none can be made.

        Returns the block, its model name, and for an own block whose ``pool`` was rewritten
        what puts it back. ``own`` is a held block of this pool to copy or rewrite.
        """
        block_id = (1, self.num_blocks - 1, self.num_blocks, -1)[which % 4]
        other_name = self._peer_name(PEER_SLOTS[which % 2])
        other = self.live[other_name]
        model = self.model
        if kind.startswith("new, "):
            made: dict[str, tuple[object, str]] = {
                "new, no pool": (None, NONE),
                "new, naming this pool": (self.pool.blocks[1].pool, SELF),
                "new, another reference to this pool": (
                    weakref.ref(self.pool, _ignore),
                    SELF_AGAIN,
                ),
                "new, naming another pool": (other.blocks[1].pool, other_name),
                "new, naming a pool that is gone": (self.dead_reference, DROPPED),
                "new, the pool itself, not a weak reference": (self.pool, NONE),
                "new, a weak reference to no pool": (weakref.ref(self.not_a_pool), NONE),
            }
            reference, pool_name = made[kind]
            block = KVCacheBlock(block_id, pool=reference)  # type: ignore[arg-type]
            return block, self._stray(pool_name, block_id), None
        if kind == "another pool's free block":
            peer_model = model.peers[other_name]
            if not peer_model.free:
                return None
            free_id = peer_model.free[which % len(peer_model.free)]
            return other.blocks[free_id], Foreign(free_id, other_name), None
        if kind == "a held block of a pool that is gone":
            gone = self._held(self._gone_own)
            return None if gone is None else (self.objects[gone], gone, None)
        if kind == "a copy of another pool's held block":
            held = self._held(self._live_own)
            if held is None:
                return None
            stray = self._stray(held.pool, held.block_id, model.ref_of(held), self._key_shown(held))
            return copy.copy(self._object(held)), stray, None
        if own is None:
            return None
        original = self.pool.blocks[own]
        shown = self._key_shown(own)
        if kind == "a copy of a held block":
            return copy.copy(original), self._stray(SELF, own, model.ref[own], shown), None
        if kind in ("a deep copy of a held block", "a pickled held block"):
            if kind == "a pickled held block":
                duplicate: KVCacheBlock = pickle.loads(pickle.dumps(original))
            else:
                duplicate = copy.deepcopy(original)
            reference = duplicate.pool
            if reference is None or reference() is not None:  # copied with it, and dropped
                raise Mismatch(f"{kind}: the copy's pool is not gone: {reference!r}")
            return duplicate, self._stray(DROPPED, own, model.ref[own], shown), None
        rewritten: dict[str, tuple[object, str]] = {
            "own block, pool set to None": (None, NONE),
            "own block, pool set to the pool itself": (self.pool, NONE),
            "own block, pool set to another pool's reference": (other.blocks[1].pool, other_name),
            "own block, pool set to another reference to this pool": (
                weakref.ref(self.pool, _ignore),
                SELF_AGAIN,
            ),
            "own block, pool set to a reference that is dead": (self.dead_reference, DROPPED),
        }
        reference, pool_name = rewritten[kind]
        stray = self._stray(pool_name, own, model.ref[own], shown)
        return original, stray, _Rewrite(original, reference)

    def _key_shown(self, name: BlockName) -> str:
        """How the block's key shows in its repr now: the tail of the model's repr of it."""
        return self.model.show(name).rsplit("block_hash=", 1)[1][:-1]

    def _sweep_owns(self, own: int, which: int) -> None:
        """Ask ``owns`` of a block of every kind (a copy of the pool's block ``own``, ``own``
        rewritten, ...) but the deep copies, whose pools are gone: all but ``own`` are strays."""
        for kind in STRAYS:
            if kind in ("a deep copy of a held block", "a pickled held block"):
                continue
            made = self._make_stray(kind, own, which)
            if made is None:
                continue
            block, name, put_back = made
            try:
                seen = self.pool.owns(block)
            finally:
                if put_back is not None:
                    put_back()
            if seen != self.model.owns(name):
                raise Mismatch(f"owns({kind}: {name}) is {seen}")
        if not self.pool.owns(self.pool.blocks[own]):
            raise Mismatch(f"owns({own}) is False")

    def misuse_foreign(
        self, kind: str, entry: str, index: int, position: int, which: int = 0
    ) -> None:
        """Pass a block that is not this pool's own, among a request's blocks, to ``entry``.

        ``kind`` is one of :data:`STRAYS`, ``entry`` one of :data:`ENTRIES`; the block goes
        in at ``position`` (an own block rewritten is the request's block there). ``owns`` is
        asked first of a block of every kind, and of every block passed. Whatever the pool
        accepts, the driver follows: a free drops the request (a rewritten block the free
        skipped stays held by a request of its own), a touch adds a request holding the
        blocks it took a reference on.
        """
        request = self._pick(index)
        if request is None or not any(isinstance(n, int) and n != NULL for n in request.blocks):
            # A request with blocks of this pool to put the stray among: allocated now.
            if len(self.model.free) < 2:
                return
            self.allocate(2)
            request = self.requests[-1]
        slot = PEER_SLOTS[position % 2]
        if which == 3:  # and of another pool: a free then mixes three pools
            self.hold_foreign(self.requests.index(request), slot, 1)
        if kind == "a held block of a pool that is gone" and self._held(self._gone_own) is None:
            self.hold_foreign(self.requests.index(request), slot, 1)
            self.drop_peer(slot)
        if kind == "a copy of another pool's held block" and self._held(self._live_own) is None:
            self.hold_foreign(self.requests.index(request), slot, 1)
        names: list[BlockName] = list(request.blocks)
        ours = [i for i, name in enumerate(names) if isinstance(name, int) and name != NULL]
        own = None if not ours else names[ours[position % len(ours)]]
        assert own is None or isinstance(own, int)
        rewrite = kind.startswith("own block")
        if entry == "touch" and (rewrite or kind == "another pool's free block"):
            return  # touch does not look at pools: the outcome is the queue's (Unmodelled)
        if own is not None:
            self._sweep_owns(own, which)
        made = self._make_stray(kind, own, which)
        if made is None:
            return
        block, stray, put_back = made
        # A refused cache or free changes nothing: a stray drawn for either goes to both, in
        # turn, and at every place in the blocks from ``position``, until one is accepted. A
        # touch keeps what it did: it is tried once.
        entries = [entry] if entry == "touch" else ["cache_full_blocks", "free_blocks"]
        try:
            for each_entry in entries:
                batch = names[::-1] if each_entry == "free_blocks" else list(names)
                if rewrite and own is not None:
                    batch[batch.index(own)] = stray
                    batches = [batch]
                else:
                    places = range(1 if each_entry == "touch" else len(batch) + 1)
                    starts = [(position + shift) % (len(batch) + 1) for shift in places]
                    batches = [[*batch[:at], stray, *batch[at:]] for at in starts]
                for one in batches:
                    if self._pass_stray(
                        entry=each_entry,
                        kind=kind,
                        request=request,
                        names=one,
                        made=(block, stray, put_back),
                        own=own,
                    ):
                        return
                    if put_back is not None:
                        put_back.apply()  # rewritten again for the next entry
        finally:
            if put_back is not None:
                put_back()
        # Refused everywhere: each refusal matched the model's, and nothing changed.
        self.compare(f"{kind} ({stray}) refused by {entries} at every place")

    def _pass_stray(
        self,
        *,
        entry: str,
        kind: str,
        request: _Request,
        names: list[BlockName],
        made: tuple[KVCacheBlock, Foreign, _Rewrite | None],
        own: int | None,
    ) -> bool:
        """Pass ``names`` to ``entry``, the stray ``made`` among them; return whether accepted.

        A rewritten block (one ``made`` can put back) is put back at once. An accepted call
        is compared here; a refused one changes nothing, which the caller compares once all
        are refused (a change would still be there, or make a later call differ).
        """
        block, stray, put_back = made
        step = f"{entry} with {kind} ({stray}) in {names}"
        blocks = [block if name == stray else self._object(name) for name in names]
        for name, each in zip(names, blocks, strict=True):
            if self.pool.owns(each) != self.model.owns(name):
                raise Mismatch(f"{step}: owns({name}) is {self.pool.owns(each)}")
        done = True
        if entry == "free_blocks":
            done, _ = self.both(
                step,
                lambda: self.pool.free_blocks(iter(blocks)),
                lambda: self.model.free_blocks(names),
            )
            if done:
                self.requests.remove(request)
                if put_back is not None and own is not None and self.model.ref[own] > 0:
                    self.requests.append(_Request(None, [own]))  # skipped: still held
        elif entry == "cache_full_blocks":
            hashes = [BlockHash(b"\x03%d" % i) for i in range(len(names))]
            done, _ = self.both(
                step,
                lambda: self.pool.cache_full_blocks(blocks, hashes, 0, len(blocks)),
                lambda: self.model.cache_full_blocks(
                    names, [("misuse", h) for h in hashes], 0, len(names)
                ),
            )
        else:
            before = {name: self.model.ref_of(name) for name in names if name != stray}
            self.both(step, lambda: self.pool.touch(blocks), lambda: self.model.touch(names))
            taken = [
                name
                for name in names
                if name != stray
                and not self.model.is_null(name)
                and self.model.ref_of(name) > before[name]
            ]
            if taken:
                self.requests.append(_Request(None, taken))
        if put_back is not None:
            put_back()
        if done:
            self.compare(step)
        return done

    def look_up(self, specs: Sequence[RequestSpec], skip: int) -> None:
        """Look up the keys of several requests run together, one left out: stop at a miss."""
        pool_keys: list[BlockHash] = []
        logical: list[Hashable] = []
        for spec in specs:
            more_keys, more_logical = self._keys(spec)
            pool_keys += more_keys
            logical += more_logical
        if pool_keys:
            del pool_keys[skip % len(pool_keys)], logical[skip % len(logical)]
        hit = [block.block_id for block in self.pool.find_longest_cache_hit(pool_keys)]
        if hit != self.model.find_longest_cache_hit(logical):
            raise Mismatch(f"find_longest_cache_hit of {specs} but key {skip}: the pool hits {hit}")
        self.compare("find_longest_cache_hit(...)")

    def reset(self) -> None:
        """Reset the prefix cache: done only when no block is held."""
        done = self.pool.reset_prefix_cache()
        if done != self.model.reset_prefix_cache():
            raise Mismatch(f"reset_prefix_cache() returned {done}")
        self.compare("reset_prefix_cache()")


#: The steps :func:`enumerate_sequences` combines: a name and what it does to a driver.
MENU: tuple[tuple[str, Callable[[PoolDriver], None]], ...] = (
    ("admit A", lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5)))),
    ("admit A'", lambda d: d.admit(RequestSpec((1, 2, 3, 4)))),
    ("admit A salted", lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5), cache_salt="t"))),
    ("admit A bytes salt", lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5), cache_salt=b"t"))),
    ("admit A image", lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5), mm_inputs=(("i", 2, 1),)))),
    ("admit B lora", lambda d: d.admit(RequestSpec((2**63, 1, 3), lora=128))),
    ("admit A lora 0", lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5), lora=0))),
    (
        "look up A after a miss",
        lambda d: d.look_up([RequestSpec((7, 7)), RequestSpec((1, 2, 3, 4))], 2),
    ),
    ("free first", lambda d: d.free(0)),
    ("free last, evict first", lambda d: d.free(-1, evict_first=True)),
    ("share first", lambda d: d.share(0)),
    ("double free last", lambda d: d.double_free(-1)),
    ("allocate 2", lambda d: d.allocate(2)),
    ("reset", lambda d: d.reset()),
)


#: Where the sequences start: a new pool, and one where two requests share a block and a
#: key is cached twice (the second request's prompt fills its last block, which is computed
#: again).
PROLOGUES: tuple[tuple[str, ...], ...] = ((), ("admit A", "admit A'"))


def enumerate_sequences(
    depth: int = 3, *, num_blocks: int = 5, pool_type: type[BlockPool] = BlockPool
) -> tuple[int, list[str] | None]:
    """Run every sequence of up to ``depth`` steps of :data:`MENU` after each of :data:`PROLOGUES`.

    Returns the number of sequences run and the first failure: the steps' names followed by
    the mismatch. Shorter sequences run first, so a failure found is a shortest one.
    """
    steps = dict(MENU)
    runs = 0
    for prologue in PROLOGUES:
        for length in range(1, depth + 1):
            for sequence in itertools.product(MENU, repeat=length):
                runs += 1
                names = [*prologue, *(name for name, _step in sequence)]
                try:
                    driver = PoolDriver(num_blocks, pool_type=pool_type)
                    for name in names:
                        steps[name](driver)
                except Exception as error:  # a mismatch, or a crash of the pool under test
                    return runs, [*names, f"{type(error).__name__}: {error}"]
    return runs, None


def enumerate_strays(
    *, num_blocks: int = 6, pool_type: type[BlockPool] = BlockPool
) -> tuple[int, list[str] | None]:
    """Pass every stray block to every entry, at each position and beside each other pool.

    Every kind of :data:`STRAYS` goes to every entry of :data:`ENTRIES`
    (:meth:`PoolDriver.misuse_foreign`), put at the first or the second of a request's
    blocks, with each of the four choices ``which`` makes (the block id a made block
    names, which other pool, a third pool held beside); each from a fresh pool holding
    one request (admitted, its full blocks cached; or three blocks allocated, none
    cached), which is freed after, so that damage the misuse left shows.
    Complete at this scope, where the ownership machine draws at random. Returns the
    number of runs and the first failure: the steps followed by the mismatch.
    """
    runs = 0
    starts: dict[str, Callable[[PoolDriver], None]] = {
        "admit A": lambda d: d.admit(RequestSpec((1, 2, 3, 4, 5))),  # its full blocks cached
        "allocate 3": lambda d: d.allocate(3),  # none cached: a cache call gets to each
    }
    for (start, prepare), kind, entry, position, which in itertools.product(
        starts.items(), STRAYS, ENTRIES, (0, 1), range(4)
    ):
        runs += 1
        steps = [start, f"{entry}: {kind} (position {position}, which {which})"]
        try:
            driver = PoolDriver(num_blocks, pool_type=pool_type)
            prepare(driver)
            driver.misuse_foreign(kind, entry, 0, position, which)
            while driver.requests:
                driver.free(0)
        except Exception as error:  # a mismatch, or a crash of the pool under test
            return runs, [*steps, f"{type(error).__name__}: {error}"]
    return runs, None
