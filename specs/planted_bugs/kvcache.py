"""The planted bugs of the block pool and its keys, and the catalogue that lists them.

:mod:`~specs.planted_bugs.pool` holds subclasses of
:class:`~verified_queue.kvcache.pool.BlockPool`, each with one defective method;
:mod:`~specs.planted_bugs.keys` holds defective copies of functions of the keys module,
planted with :func:`~specs.planted_bugs.keys.planted`. The layers that run them are columns
of the second table of ``docs/bug-matrix.md`` (:data:`specs.bug_matrix.CLIENT_LAYERS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from specs.planted_bugs.keys import (
    KeysBug,
    encode_int_rounds_bytes_down,
    encode_str_and_bytes_alike,
    extra_keys_drop_lora_zero,
    extra_keys_overlap_next_block,
    request_keys_drop_lone_salt,
)
from specs.planted_bugs.pool import (
    CacheOverwritesDuplicate,
    EvictDropsEveryDuplicate,
    FindHitSkipsMiss,
    FreeCountsEachListingAlone,
    FreeIgnoresEvictFirst,
    GetNewBlocksLeavesCacheEntry,
    ResetCountsNullBlockFree,
    TouchSetsCountToOne,
)
from verified_queue.kvcache.pool import BlockPool

__all__ = ["CLIENT_CATALOGUE", "CLIENT_KINDS", "ClientBug"]


class ClientBug(NamedTuple):
    """A planted bug of the pool (its pool class) or of the keys (the function it replaces)."""

    kind: str
    operation: str
    pool_type: type[BlockPool] = BlockPool
    keys_bug: KeysBug | None = None


#: The kinds of client defect, with what each gets wrong.
CLIENT_KINDS: dict[str, str] = {
    "pool": "the block pool miscounts, misorders, miscaches or lets misuse through",
    "keys": "the prefix-cache keys merge two prefixes, split one, or cannot key a value",
}


def _keys(function: str, replacement: Callable[..., Any]) -> ClientBug:
    return ClientBug("keys", function, keys_bug=KeysBug(function, replacement))


#: Every planted pool and key bug by name.
CLIENT_CATALOGUE: dict[str, ClientBug] = {
    "touch_sets_count_to_one": ClientBug("pool", "touch", TouchSetsCountToOne),
    "get_new_blocks_leaves_cache_entry": ClientBug(
        "pool", "get_new_blocks", GetNewBlocksLeavesCacheEntry
    ),
    "evict_drops_every_duplicate": ClientBug(
        "pool", "_evict_cached_hash", EvictDropsEveryDuplicate
    ),
    "cache_overwrites_duplicate": ClientBug("pool", "cache_full_blocks", CacheOverwritesDuplicate),
    "find_hit_skips_miss": ClientBug("pool", "find_longest_cache_hit", FindHitSkipsMiss),
    "free_ignores_evict_first": ClientBug("pool", "_plan_free", FreeIgnoresEvictFirst),
    "free_counts_each_listing_alone": ClientBug("pool", "_plan_free", FreeCountsEachListingAlone),
    "reset_counts_null_block_free": ClientBug(
        "pool", "reset_prefix_cache", ResetCountsNullBlockFree
    ),
    "encode_int_rounds_bytes_down": _keys("_encode_int", encode_int_rounds_bytes_down),
    "encode_str_and_bytes_alike": _keys("_encode_extra", encode_str_and_bytes_alike),
    "extra_keys_overlap_next_block": _keys("block_extra_keys", extra_keys_overlap_next_block),
    "extra_keys_drop_lora_zero": _keys("block_extra_keys", extra_keys_drop_lora_zero),
    "request_keys_drop_lone_salt": _keys("hash_request_tokens", request_keys_drop_lone_salt),
}
