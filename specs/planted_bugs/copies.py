"""Which production function each planted bug copies: the one place the copies are recorded.

Most planted bugs are a production function copied word for word with one realistic defect,
so that a layer that reports the bug reports the defect, not a difference in wording or in a
path the defect does not touch. :data:`COPIES` names, for each such bug, every function it
copies (the defective one, and the verbatim copies that only call it) and the function of the
package it copies; :data:`NOT_COPIES` names the bugs written from scratch, each with the
reason. Every bug of :data:`specs.planted_bugs.CATALOGUE`,
:data:`specs.planted_bugs.checkers.CHECKER_CATALOGUE` and
:data:`specs.planted_bugs.kvcache.CLIENT_CATALOGUE` is in exactly one of the two, and
``tests/verification/test_planted_copies.py`` holds each copy to the production function as
it is in the working tree: after their docstrings, their signatures' annotations and their
names (the copy's, and the helpers it calls, by :attr:`Copy.renames`) are set aside, a bug's
copies differ from the production code by one hunk of at most :data:`MAX_HUNK_LINES` lines.
So a copy cannot drift from the code it stands for; when the production function changes,
the copy is made again from it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COPIES", "MAX_HUNK_LINES", "NOT_COPIES", "Copy"]

#: The most lines the one differing hunk may replace or insert on either side: a defect,
#: not a rewrite.
MAX_HUNK_LINES = 5


class Copy(NamedTuple):
    """One planted function and the production function it copies, each as ``path:qualname``.

    ``renames`` pairs names in the copy (a helper it calls, dotted if it is called through
    its module) with the production names they stand for. ``moved``: the defect moves statements,
    so the one hunk is a deletion and an insertion of the same lines.
    """

    planted: str
    production: str
    renames: tuple[tuple[str, str], ...] = ()
    moved: bool = False


_QUEUE = "verified_queue/queue.py:FreeBlockQueue."
_UNDO = "verified_queue/_undo.py:"
_INVARIANTS = "verified_queue/invariants.py:"
_CHECKED = "verified_queue/checked.py:CheckedFreeBlockQueue."
_POOL = "verified_queue/kvcache/pool.py:BlockPool."
_KEYS = "verified_queue/kvcache/keys.py:"
_BUGS = "specs/planted_bugs/"


def _method(module: str, owner: str, method: str, production: str = _QUEUE) -> tuple[Copy]:
    """A bug that is one method of ``owner`` (in ``module``), copied with its defect."""
    return (Copy(f"{_BUGS}{module}.py:{owner}.{method}", production + method),)


def _through(module: str, owner: str, method: str, helper: str, copied: str) -> tuple[Copy, Copy]:
    """A bug in ``helper``, a copy of ``copied``, called by an otherwise verbatim method copy."""
    name = copied.rsplit(":", 1)[1]
    return (
        Copy(f"{_BUGS}{module}.py:{owner}.{method}", _QUEUE + method, ((helper, name),)),
        Copy(f"{_BUGS}{module}.py:{helper}", copied),
    )


def _function(
    module: str, name: str, copied: str, renames: tuple[tuple[str, str], ...] = ()
) -> tuple[Copy]:
    """A bug that is a module-level copy ``name`` of the production function ``copied``."""
    return (Copy(f"{_BUGS}{module}.py:{name}", copied, renames),)


#: The keys module's functions, which the key copies call through the module.
_KEYS_MODULE = tuple(
    (f"keys_module.{name}", name)
    for name in ("_length", "_encode_int", "_encode_extra", "block_extra_keys")
)

#: Every planted bug that copies production code, by its catalogue name: what it copies.
COPIES: dict[str, tuple[Copy, ...]] = {
    # specs.planted_bugs.CATALOGUE
    "popleft_n_allows_negative": _method("guards", "PopleftNAllowsNegative", "popleft_n"),
    "append_skips_double_free_check": _method("guards", "AppendSkipsDoubleFreeCheck", "append"),
    "append_guard_reads_next_only": _method("guards", "AppendGuardReadsNextOnly", "append"),
    "prepend_n_guard_reads_prev_only": _method("guards", "PrependNGuardReadsPrevOnly", "prepend_n"),
    "iter_blocks_after_guard_reads_next_only": _method(
        "guards", "IterBlocksAfterGuardReadsNextOnly", "iter_blocks_after"
    ),
    "append_n_undo_clears_next_only": _through(
        "undo",
        "AppendNUndoClearsNextOnly",
        "append_n",
        "_unstage_clears_next_only",
        _UNDO + "unstage",
    ),
    "prepend_n_undo_leaves_tail_link": _through(
        "undo",
        "PrependNUndoLeavesTailLink",
        "prepend_n",
        "_unstage_leaves_tail_link",
        _UNDO + "unstage",
    ),
    "popleft_n_shares_empty_result": _method("aliasing", "PopleftNSharesEmptyResult", "popleft_n"),
    "popleft_n_reuses_buffer": _method("aliasing", "PopleftNReusesBuffer", "popleft_n"),
    "get_all_free_blocks_reuses_list": _method(
        "aliasing", "GetAllFreeBlocksReusesList", "get_all_free_blocks"
    ),
    "constructor_not_atomic_for_iterables": _method(
        "construction", "ConstructorNotAtomicForIterables", "__init__"
    ),
    "popleft_leaves_links": _method("linking", "PopleftLeavesLinks", "popleft"),
    "remove_forgets_count": _method("counts", "RemoveForgetsCount", "remove"),
    "prepend_n_counts_before_linking": (
        Copy(
            f"{_BUGS}counts.py:PrependNCountsBeforeLinking.prepend_n",
            _QUEUE + "prepend_n",
            moved=True,
        ),
    ),
    "iter_blocks_after_yields_cursor": _method(
        "iteration", "IterBlocksAfterYieldsCursor", "iter_blocks_after"
    ),
    "iter_yields_head_sentinel": _method("iteration", "IterYieldsHeadSentinel", "__iter__"),
    "contains_compares_by_value": _method("identity", "ContainsComparesByValue", "__contains__"),
    # specs.planted_bugs.checkers.CHECKER_CATALOGUE: invariants.py and checked.py
    "outer_links_head_only": _function(
        "checkers", "outer_links_head_only", _INVARIANTS + "_check_outer_links"
    ),
    "counted_accepts_bool": _function("checkers", "counted_accepts_bool", _INVARIANTS + "_counted"),
    "first_position_one_short": _function(
        "checkers", "first_position_one_short", _INVARIANTS + "_first_position"
    ),
    "count_mismatch_one_position_early": _function(
        "checkers", "count_mismatch_one_position_early", _INVARIANTS + "_count_mismatch"
    ),
    "linked_length_trusts_tail": _function(
        "checkers",
        "linked_length_trusts_tail",
        _INVARIANTS + "_linked_length",
        (("invariants._check_outer_links", "_check_outer_links"),),
    ),
    "detached_outside_reads_prev_only": _function(
        "checkers",
        "detached_outside_reads_prev_only",
        _INVARIANTS + "check_detached_outside",
        (("invariants._linked_length", "_linked_length"),),
    ),
    "full_check_skips_membership": _function(
        "checkers", "full_check_skips_membership", _CHECKED + "_chain_is_membership"
    ),
    "full_check_counts_by_value": _function(
        "checkers", "full_check_counts_by_value", _CHECKED + "_chain_is_membership"
    ),
    "checked_contains_by_value": _function(
        "checkers", "checked_contains_by_value", _CHECKED + "__contains__"
    ),
    "checked_iter_skips_full_check": _function(
        "checkers", "checked_iter_skips_full_check", _CHECKED + "__iter__"
    ),
    "checked_reduce_forgets_type": _function(
        "checkers", "checked_reduce_forgets_type", _CHECKED + "__reduce__"
    ),
    # specs.planted_bugs.checkers.CHECKER_CATALOGUE: queue.py
    "popleft_n_accepts_bool": _method("checkers", "PopleftNAcceptsBool", "popleft_n"),
    "popleft_n_refuses_indexables": _method("checkers", "PopleftNRefusesIndexables", "popleft_n"),
    "reduce_loses_subclass": _method("checkers", "ReduceLosesSubclass", "__reduce__"),
    "contains_stops_before_last": _method("checkers", "ContainsStopsBeforeLast", "__contains__"),
    "walk_reads_ahead": _method("checkers", "WalkReadsAhead", "_walk"),
    "remove_names_wrong_operation": _method("checkers", "RemoveNamesWrongOperation", "remove"),
    # specs.planted_bugs.kvcache.CLIENT_CATALOGUE: pool.py
    "touch_sets_count_to_one": _method("pool", "TouchSetsCountToOne", "touch", _POOL),
    "get_new_blocks_leaves_cache_entry": _method(
        "pool", "GetNewBlocksLeavesCacheEntry", "get_new_blocks", _POOL
    ),
    "evict_drops_every_duplicate": _method(
        "pool", "EvictDropsEveryDuplicate", "_evict_cached_hash", _POOL
    ),
    "cache_overwrites_duplicate": _method(
        "pool", "CacheOverwritesDuplicate", "cache_full_blocks", _POOL
    ),
    "find_hit_skips_miss": _method("pool", "FindHitSkipsMiss", "find_longest_cache_hit", _POOL),
    "free_ignores_evict_first": _method("pool", "FreeIgnoresEvictFirst", "_plan_free", _POOL),
    "free_counts_each_listing_alone": _method(
        "pool", "FreeCountsEachListingAlone", "_plan_free", _POOL
    ),
    "reset_counts_null_block_free": _method(
        "pool", "ResetCountsNullBlockFree", "reset_prefix_cache", _POOL
    ),
    # specs.planted_bugs.kvcache.CLIENT_CATALOGUE: keys.py
    "encode_int_rounds_bytes_down": _function(
        "keys", "encode_int_rounds_bytes_down", _KEYS + "_encode_int", _KEYS_MODULE
    ),
    "encode_str_and_bytes_alike": _function(
        "keys", "encode_str_and_bytes_alike", _KEYS + "_encode_extra", _KEYS_MODULE
    ),
    "extra_keys_overlap_next_block": _function(
        "keys", "extra_keys_overlap_next_block", _KEYS + "block_extra_keys"
    ),
    "extra_keys_drop_lora_zero": _function(
        "keys", "extra_keys_drop_lora_zero", _KEYS + "block_extra_keys"
    ),
    "request_keys_drop_lone_salt": _function(
        "keys", "request_keys_drop_lone_salt", _KEYS + "hash_request_tokens", _KEYS_MODULE
    ),
}

#: The planted bugs written from scratch, not copied: why each is not a copy.
NOT_COPIES: dict[str, str] = {
    "popleft_n_off_by_one": (
        "the wrong guard in front of super().popleft_n: a whole copy's loop would have no "
        "loop invariant in tests/verification/test_proof.py, which pins the goal it breaks"
    ),
    "remove_accepts_sentinel": (
        "bridges only the links that are set, so that a sentinel gets through and is removed; "
        "a one-line edit of today's remove writes to None, not the goal test_proof.py pins"
    ),
    "sentinel_returned": (
        "its guard tests the wrong link and it splices out and returns the tail; a one-line "
        "edit of today's popleft would crash on the tail's missing successor instead"
    ),
    "iter_blocks_after_checks_lazily": (
        "the defect is the shape, a generator wrapped around the production method, not a line"
    ),
    "append_n_not_atomic": (
        "the naive extend written from scratch (linked onto the chain block by block, no "
        "staging, no undo); tests/cli/test_selfcheck.py and test_proof.py pin its open chain"
    ),
    "prepend_n_not_atomic": "the naive prepend written from scratch, as append_n_not_atomic",
    "constructor_skips_link_check": (
        "vLLM's own constructor transplanted whole: the design is the defect, not a line"
    ),
    "append_n_wrong_neighbour": (
        "the block-by-block extend written from scratch; its staged copy breaks the undo too, "
        "where tests/cli/test_selfcheck.py pins a wrong order, not a cut chain"
    ),
    "prepend_n_reversed": (
        "another algorithm (each block linked behind the head in turn), not a line of prepend_n"
    ),
}
