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

The pool gets its keys from :mod:`verified_queue.kvcache.keys` (looked up on the module at each
call, so a planted bug replaced there is the one used); the model gets the logical keys of
:mod:`specs.key_model`. A key function that gives two different prefixes one key, or one
prefix two keys, is reported when it happens, and would show as a wrong hit anyway.

Two layers use it: the Hypothesis machine of ``tests/kvcache/test_pool_machine.py`` and
:func:`enumerate_sequences`, every short sequence of a fixed menu of steps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specs.key_model import logical_request_keys
from specs.pool_model import NULL, Foreign, PoolModel, PoolView
from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import BlockHash, MultimodalInput
from verified_queue.kvcache.pool import BlockPool

__all__ = [
    "BLOCK_SIZE",
    "MENU",
    "Mismatch",
    "PoolDriver",
    "RequestSpec",
    "enumerate_sequences",
]

#: Tokens per block: small, so that short prompts fill several blocks.
BLOCK_SIZE = 2


class Mismatch(AssertionError):
    """The pool and the model disagree: the message says on what."""


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
    blocks: list[int]
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
        self.pool = pool_type(num_blocks, enable_caching=enable_caching)
        self.other = pool_type(num_blocks, enable_caching=enable_caching)
        self.model = PoolModel(num_blocks, enable_caching, show_key=self._show_key)
        self.requests: list[_Request] = []
        self.key_of_logical: dict[Hashable, BlockHash] = {}
        self.logical_of_key: dict[BlockHash, Hashable] = {}
        self.compare("a new pool")

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

    def _blocks(self, ids: Sequence[int]) -> list[KVCacheBlock]:
        return [self.pool.blocks[block_id] for block_id in ids]

    def _pool_view(self) -> PoolView:
        pool = self.pool
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
        request = _Request(spec, hit + new, len(pool_keys), pool_keys, logical)
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
        accepted = all(self.model.ref[block] >= 2 for block in request.blocks)
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
        blocks: list[int | Foreign] = [] if request is None else list(request.blocks)
        key = b"\x01" * 32
        if kind == 0:
            blocks, keys = [NULL], [key]
        elif kind == 1:
            blocks, keys = [Foreign(1)], [key]
        elif kind == 2 and blocks:
            blocks, keys = [blocks[0], blocks[0]], [key, b"\x02" * 32]
        elif kind == 3 and blocks:
            keys = [key] * (len(blocks) - 1)
        elif request is not None and request.num_cached:
            blocks, keys = blocks[:1], [key]  # cached already
        else:
            return

        def on_pool() -> None:
            pool_blocks = [
                self.other.blocks[block.block_id]
                if isinstance(block, Foreign)
                else self.pool.blocks[block]
                for block in blocks
            ]
            self.pool.cache_full_blocks(
                pool_blocks, [keys_module.BlockHash(k) for k in keys], 0, len(blocks)
            )

        self.both(
            f"cache_full_blocks({blocks})",
            on_pool,
            lambda: self.model.cache_full_blocks(
                blocks, [("misuse", k) for k in keys], 0, len(blocks)
            ),
        )
        self.compare(f"cache_full_blocks({blocks})")

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
