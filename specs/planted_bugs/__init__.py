"""Deliberately wrong free-block queues, for showing that no checker is vacuous.

Each class overrides one method of :class:`~verified_queue.FreeBlockQueue` with a small,
realistic mistake: the kind a refactor or a "harmless" speed-up introduces. Everything else,
error messages included, is the production code's, so a checker that reports a planted bug
reports the bug, not a difference in wording. Most bugs are the production method (or a
helper it calls) copied with the one defect: :data:`specs.planted_bugs.copies.COPIES` records
what each copies, and ``tests/verification/test_planted_copies.py`` holds every copy to the
code it copies but for one hunk; :data:`~specs.planted_bugs.copies.NOT_COPIES` names the few
written from scratch, each with the reason.

:data:`CATALOGUE` records each bug's kind (:data:`KINDS`: guards, undo paths, aliasing,
constructors, linking, counts, iteration, identity) and the method it overrides; each kind's
classes live in a module of their own (:mod:`~specs.planted_bugs.guards`, ``undo``,
``aliasing``, ``construction``, ``linking``, ``counts``, ``iteration``, ``identity``), and
all of them can be imported from this package;
:data:`PLANTED_BUGS` maps the same short names to the classes alone, and
``VERIFIED_QUEUE_SPEC_TARGET`` in :mod:`specs.contracts` takes them too. Every verification
layer is run against every bug (:mod:`specs.bug_matrix`, published in
``docs/bug-matrix.md``); a layer that misses a bug says why in
:data:`specs.bug_matrix.MISSES`, one that cannot reach it in
:data:`specs.bug_matrix.NOT_APPLICABLE`, and every bug is caught by at least three layers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from specs.planted_bugs.aliasing import (
    GetAllFreeBlocksReusesList,
    PopleftNReusesBuffer,
    PopleftNSharesEmptyResult,
)
from specs.planted_bugs.construction import (
    ConstructorNotAtomicForIterables,
    ConstructorSkipsLinkCheck,
)
from specs.planted_bugs.counts import (
    PrependNCountsBeforeLinking,
    RemoveForgetsCount,
)
from specs.planted_bugs.guards import (
    AppendGuardReadsNextOnly,
    AppendSkipsDoubleFreeCheck,
    IterBlocksAfterChecksLazily,
    IterBlocksAfterGuardReadsNextOnly,
    PopleftNAllowsNegative,
    PopleftNOffByOne,
    PrependNGuardReadsPrevOnly,
    RemoveAcceptsSentinel,
    SentinelReturned,
)
from specs.planted_bugs.identity import (
    ContainsComparesByValue,
)
from specs.planted_bugs.iteration import (
    IterBlocksAfterYieldsCursor,
    IterYieldsHeadSentinel,
)
from specs.planted_bugs.linking import (
    AppendNWrongNeighbour,
    PopleftLeavesLinks,
    PrependNReversed,
)
from specs.planted_bugs.undo import (
    AppendNNotAtomic,
    AppendNUndoClearsNextOnly,
    PrependNNotAtomic,
    PrependNUndoLeavesTailLink,
)
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "CATALOGUE",
    "KINDS",
    "PLANTED_BUGS",
    "AppendGuardReadsNextOnly",
    "AppendNNotAtomic",
    "AppendNUndoClearsNextOnly",
    "AppendNWrongNeighbour",
    "AppendSkipsDoubleFreeCheck",
    "ConstructorNotAtomicForIterables",
    "ConstructorSkipsLinkCheck",
    "ContainsComparesByValue",
    "GetAllFreeBlocksReusesList",
    "IterBlocksAfterChecksLazily",
    "IterBlocksAfterGuardReadsNextOnly",
    "IterBlocksAfterYieldsCursor",
    "IterYieldsHeadSentinel",
    "PlantedBug",
    "PopleftLeavesLinks",
    "PopleftNAllowsNegative",
    "PopleftNOffByOne",
    "PopleftNReusesBuffer",
    "PopleftNSharesEmptyResult",
    "PrependNCountsBeforeLinking",
    "PrependNGuardReadsPrevOnly",
    "PrependNNotAtomic",
    "PrependNReversed",
    "PrependNUndoLeavesTailLink",
    "RemoveAcceptsSentinel",
    "RemoveForgetsCount",
    "SentinelReturned",
]


class PlantedBug(NamedTuple):
    """A planted bug: its queue class, the kind of defect, and the method it overrides."""

    queue_type: type[FreeBlockQueue[Any]]
    kind: str
    operation: str


#: The kinds of defect, with what each gets wrong.
KINDS: dict[str, str] = {
    "guard": "a check that must refuse misuse lets it through, or refuses correct use",
    "undo": "the rollback of a refused or interrupted batch leaves something changed",
    "aliasing": "a returned list is shared with the queue or with other callers",
    "constructor": "building a queue links differently from append_n",
    "linking": "a successful call leaves wrong links or a wrong order",
    "count": "num_free_blocks drifts from the number of linked blocks",
    "iteration": "a walk yields the wrong blocks",
    "identity": "blocks are compared by value instead of by identity",
}


#: Every planted bug by name, with its kind and the method it overrides, grouped by kind.
CATALOGUE: dict[str, PlantedBug] = {
    # guards
    "popleft_n_off_by_one": PlantedBug(PopleftNOffByOne, "guard", "popleft_n"),
    "popleft_n_allows_negative": PlantedBug(PopleftNAllowsNegative, "guard", "popleft_n"),
    "sentinel_returned": PlantedBug(SentinelReturned, "guard", "popleft"),
    "append_skips_double_free_check": PlantedBug(AppendSkipsDoubleFreeCheck, "guard", "append"),
    "append_guard_reads_next_only": PlantedBug(AppendGuardReadsNextOnly, "guard", "append"),
    "prepend_n_guard_reads_prev_only": PlantedBug(PrependNGuardReadsPrevOnly, "guard", "prepend_n"),
    "remove_accepts_sentinel": PlantedBug(RemoveAcceptsSentinel, "guard", "remove"),
    "iter_blocks_after_checks_lazily": PlantedBug(
        IterBlocksAfterChecksLazily, "guard", "iter_blocks_after"
    ),
    "iter_blocks_after_guard_reads_next_only": PlantedBug(
        IterBlocksAfterGuardReadsNextOnly, "guard", "iter_blocks_after"
    ),
    # undo paths
    "append_n_not_atomic": PlantedBug(AppendNNotAtomic, "undo", "append_n"),
    "prepend_n_not_atomic": PlantedBug(PrependNNotAtomic, "undo", "prepend_n"),
    "append_n_undo_clears_next_only": PlantedBug(AppendNUndoClearsNextOnly, "undo", "append_n"),
    "prepend_n_undo_leaves_tail_link": PlantedBug(PrependNUndoLeavesTailLink, "undo", "prepend_n"),
    # aliasing
    "popleft_n_shares_empty_result": PlantedBug(PopleftNSharesEmptyResult, "aliasing", "popleft_n"),
    "popleft_n_reuses_buffer": PlantedBug(PopleftNReusesBuffer, "aliasing", "popleft_n"),
    "get_all_free_blocks_reuses_list": PlantedBug(
        GetAllFreeBlocksReusesList, "aliasing", "get_all_free_blocks"
    ),
    # constructor
    "constructor_not_atomic_for_iterables": PlantedBug(
        ConstructorNotAtomicForIterables, "constructor", "__init__"
    ),
    "constructor_skips_link_check": PlantedBug(
        ConstructorSkipsLinkCheck, "constructor", "__init__"
    ),
    # linking
    "popleft_leaves_links": PlantedBug(PopleftLeavesLinks, "linking", "popleft"),
    "append_n_wrong_neighbour": PlantedBug(AppendNWrongNeighbour, "linking", "append_n"),
    "prepend_n_reversed": PlantedBug(PrependNReversed, "linking", "prepend_n"),
    # count
    "remove_forgets_count": PlantedBug(RemoveForgetsCount, "count", "remove"),
    "prepend_n_counts_before_linking": PlantedBug(
        PrependNCountsBeforeLinking, "count", "prepend_n"
    ),
    # iteration
    "iter_blocks_after_yields_cursor": PlantedBug(
        IterBlocksAfterYieldsCursor, "iteration", "iter_blocks_after"
    ),
    "iter_yields_head_sentinel": PlantedBug(IterYieldsHeadSentinel, "iteration", "__iter__"),
    # identity
    "contains_compares_by_value": PlantedBug(ContainsComparesByValue, "identity", "__contains__"),
}


#: Every planted bug by a short name (the queue class alone), in catalogue order.
PLANTED_BUGS: dict[str, type[FreeBlockQueue[Any]]] = {
    name: bug.queue_type for name, bug in CATALOGUE.items()
}
