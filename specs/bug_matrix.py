"""Which verification layer catches which planted bug: the matrix of ``docs/bug-matrix.md``.

Every planted bug of :data:`specs.planted_bugs.CATALOGUE` is run against every layer of
:mod:`specs.layer_matrix`, the queue's layers and the checkers' alike, each at the small size
named there (the exhaustive layers over 3 blocks, every machine derandomized with 50
examples of up to 20 steps, the contracts on their whole domains, the self-check with 2,000
operations), and against two layers too slow for the default run, whose columns are recorded
in :data:`RECORDED` with the date and commit they were measured at:

- ``proof``: :mod:`specs.proof` (z3) on the bug's method, for the methods it proves for
  every size (:data:`PROVED_OPERATIONS`): caught when z3 refutes an obligation or the bounded
  search finds a counterexample;
- ``crosshair``: ``tox -e crosshair-planted``, CrossHair over the contracts.

A layer that runs on a bug and misses it says why in :data:`MISSES`; a layer that cannot
reach a bug at all says why in :data:`NOT_APPLICABLE`, and is not counted for that bug.
``tests/verification/test_bug_matrix.py`` recomputes the cheap columns, requires each bug to
be caught by at least three layers and every miss to be explained, and compares
``docs/bug-matrix.md`` with :func:`render`.

``python -m specs.bug_matrix --write docs/bug-matrix.md`` regenerates the page;
``--proof`` recomputes the proof column and prints it (z3 needed).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hypothesis import settings

from specs.layer_matrix import (
    MACHINE_EXAMPLES,
    MACHINE_STEPS,
    RUNNERS,
    Cell,
    fixed_draws,
    machine_settings,
    render_explanations,
    render_table,
)
from specs.planted_bugs import CATALOGUE, KINDS
from specs.planted_bugs.copies import COPIES
from specs.planted_bugs.keys import planted
from specs.planted_bugs.kvcache import CLIENT_CATALOGUE, CLIENT_KINDS, ClientBug
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "CHEAP_LAYERS",
    "CLIENT_LAYERS",
    "CLIENT_NOT_APPLICABLE",
    "LAYERS",
    "MISSED_BY_BUDGET",
    "MISSES",
    "NOT_APPLICABLE",
    "PROOF_OUT_OF_REACH",
    "PROVED_OPERATIONS",
    "RECORDED",
    "caught",
    "cells",
    "client_caught",
    "compute",
    "compute_client",
    "main",
    "prove",
    "render",
]

#: The layers whose column the default run recomputes, in the page's order: the queue's
#: layers, then the checkers'.
CHEAP_LAYERS = (
    "exhaustive",
    "queue machine",
    "shared pool",
    "check mode",
    "contracts",
    "self-check",
    "damage",
    "damage machine",
    "cross-check",
    "cross-check machine",
)

#: Every layer, in the page's order.
LAYERS = (*CHEAP_LAYERS, "proof", "crosshair")

#: The methods :mod:`specs.proof` proves for every size (``specs.proof.PROVED`` but its
#: lemmas; ``_walk`` is the walk ``__iter__`` and ``iter_blocks_after`` return). Copying,
#: pickling and the fault model are only checked exhaustively on small queues
#: (:mod:`specs.proof.bounded`), which is not the proof column: a bug in ``__reduce__`` is out
#: of its reach.
PROVED_OPERATIONS = (
    "popleft",
    "remove",
    "append",
    "popleft_n",
    "append_n",
    "prepend_n",
    "__init__",
    "__len__",
    "__bool__",
    "__contains__",
    "get_all_free_blocks",
    "__iter__",
    "iter_blocks_after",
    "_walk",
)

#: Why the proof cannot reach a bug in a method it does not prove (``{operation}``).
PROOF_OUT_OF_REACH = (
    "the proof covers the queue's public methods and the walk but not `{operation}`: copying "
    "and pickling are checked only exhaustively on small queues (`specs/proof/bounded.py`), "
    "which is not a proof for every size"
)

_CHECK_MODE_OWN = (
    "check mode answers this itself, from its membership or its own walk, without calling the "
    "base method the bug is in"
)
_UNTRANSLATED = (
    "the translator does not read {what}, so the proof stops with Unsupported, for every size "
    "and with its loops run: it refuses to certify the method, but finds no counterexample"
)

#: Why each layer misses each bug it runs on and misses: (layer, bug) -> reason.
MISSES: dict[tuple[str, str], str] = {
    ("check mode", "contains_compares_by_value"): _CHECK_MODE_OWN.replace(
        "from its membership or its own walk", "from its membership set"
    ),
    ("check mode", "remove_accepts_sentinel"): (
        "check mode refuses a non-member, a sentinel included, before the base remove runs"
    ),
    ("check mode", "iter_blocks_after_yields_cursor"): _CHECK_MODE_OWN,
    ("check mode", "iter_blocks_after_checks_lazily"): _CHECK_MODE_OWN,
    ("check mode", "iter_blocks_after_guard_reads_next_only"): _CHECK_MODE_OWN,
    ("check mode", "iter_yields_head_sentinel"): _CHECK_MODE_OWN,
    ("self-check", "contains_compares_by_value"): (
        "its blocks compare by identity, so `==` and `is` agree on them"
    ),
    ("proof", "popleft_n_reuses_buffer"): _UNTRANSLATED.format(what="`popped.clear()`")
    + "; and a list shared between two calls is outside a proof that follows one call",
    ("proof", "get_all_free_blocks_reuses_list"): _UNTRANSLATED.format(what="`found.clear()`")
    + "; and a list shared between two calls is outside a proof that follows one call",
    ("proof", "prepend_n_reversed"): (
        "the translator reads neither the call inside its loop's body (`_linked(...)`), which "
        "stops the proof for every size, nor, with its loops run, the `for` over "
        "`reversed(linked)` of its undo, which stops the bounded search: Unsupported both "
        "times, so the proof refuses to certify the method, but finds no counterexample"
    ),
    ("proof", "constructor_not_atomic_for_iterables"): (
        "it changes only what the constructor does with an iterable that is not a list; the "
        "proof takes the constructor's argument to be an exact `list` (arguments of other "
        "types are outside it), for which the bug calls `append_n` as the production code "
        "does, so every obligation is proved"
    ),
}
for _layer, _name in list(MISSES):
    if _layer == "contracts":
        MISSES["crosshair", _name] = (
            "CrossHair explores the same contracts, which hold of this bug on every input ("
            + MISSES[_layer, _name]
            + "); run against its contract it found no counterexample"
        )

#: The misses of a machine that can meet the bug but did not in the matrix's short runs
#: (its own planted-bug test, with more examples, catches it): (layer, bug) -> reason.
MISSED_BY_BUDGET: dict[tuple[str, str], str] = dict.fromkeys(
    (("check mode", "constructor_not_atomic_for_iterables"),),
    f"it can meet it, but did not in its {MACHINE_EXAMPLES} runs of up to {MACHINE_STEPS} steps "
    "(runs of 100 examples of up to 30 steps catch it)",
)
MISSES.update(MISSED_BY_BUDGET)

# The checkers' layers run check mode over the bug's class: what they call, and so miss.
_DAMAGE_ONLY = (
    "it reaches the bug's class through check mode on damaged states, where check mode's own "
    "checks refuse every operation before the base method runs; the only calls that reach "
    "the base class are the constructor, from a list of detached blocks, and the `append` of "
    "a damaged block outside the queue"
)
_CORRECT_CALLER = (
    "between damages its caller is correct (no negative count, no `popleft` of an empty "
    "queue, no sentinel, no half-linked block or cursor), and check mode refuses each "
    "damaged call itself: a guard that lets misuse through is never tried"
)
_NOTHING_REFUSED = "it frees detached blocks only: no batch is refused, so no undo runs"
_LISTS_NOT_KEPT = "it never keeps a returned list across another call"
_BUILT_FROM_LISTS = "it builds every queue from a list, never from an iterator"
_HALF_LINKED = "it frees members and detached blocks only, never a block with one link set"
_ONE_BLOCK = "its batches hold one block: nothing to undo when refused, no order to reverse"
_NO_CROSS_CHECK_BATCH = (
    "it makes no batch call that is refused: `prepend_n` of one detached block while a walk "
    "stands, `append_n` never"
)
for _name in CATALOGUE:
    if _name not in (
        "append_skips_double_free_check",
        "append_guard_reads_next_only",
        "constructor_skips_link_check",
    ):
        MISSES["damage", _name] = _DAMAGE_ONLY
for _name in (
    "popleft_n_allows_negative",
    "sentinel_returned",
    "prepend_n_guard_reads_prev_only",
    "remove_accepts_sentinel",
    "iter_blocks_after_checks_lazily",
    "iter_blocks_after_guard_reads_next_only",
):
    MISSES["damage machine", _name] = _CORRECT_CALLER
for _name in (
    "append_n_not_atomic",
    "prepend_n_not_atomic",
    "append_n_undo_clears_next_only",
    "prepend_n_undo_leaves_tail_link",
    "prepend_n_counts_before_linking",
):
    MISSES["damage machine", _name] = _NOTHING_REFUSED
    MISSES["cross-check", _name] = _NO_CROSS_CHECK_BATCH
for _name in (
    "append_n_not_atomic",
    "prepend_n_not_atomic",
    "append_n_undo_clears_next_only",
    "prepend_n_undo_leaves_tail_link",
    "prepend_n_reversed",
):
    MISSES["cross-check machine", _name] = _ONE_BLOCK
for _name in (
    "popleft_n_shares_empty_result",
    "popleft_n_reuses_buffer",
    "get_all_free_blocks_reuses_list",
):
    for _layer in ("damage machine", "cross-check", "cross-check machine"):
        MISSES[_layer, _name] = _LISTS_NOT_KEPT
for _layer in ("damage machine", "cross-check", "cross-check machine"):
    MISSES[_layer, "constructor_not_atomic_for_iterables"] = _BUILT_FROM_LISTS
MISSES["damage machine", "popleft_leaves_links"] = (
    "it calls `popleft` only on a damaged queue, which check mode refuses before the base "
    "method runs"
)
for _name in ("iter_blocks_after_yields_cursor", "iter_yields_head_sentinel"):
    MISSES["damage machine", _name] = _CHECK_MODE_OWN
MISSES["damage machine", "contains_compares_by_value"] = MISSES[
    "check mode", "contains_compares_by_value"
]
MISSES["cross-check", "sentinel_returned"] = (
    "it calls `popleft` only while a walk stands on a member, never on an empty queue"
)
MISSES["cross-check", "append_guard_reads_next_only"] = _HALF_LINKED
MISSES["cross-check", "prepend_n_guard_reads_prev_only"] = _HALF_LINKED
MISSES["cross-check machine", "prepend_n_guard_reads_prev_only"] = _HALF_LINKED
MISSES["cross-check", "prepend_n_reversed"] = _ONE_BLOCK
for _layer in ("cross-check", "cross-check machine"):
    MISSES[_layer, "iter_blocks_after_checks_lazily"] = (
        "it drains every walk from a refused cursor at once, so a refusal at the first step "
        "looks the same as one at the call"
    )
    MISSES[_layer, "iter_blocks_after_guard_reads_next_only"] = (
        "it never hands `iter_blocks_after` a cursor with one link set"
    )
MISSES["cross-check machine", "remove_accepts_sentinel"] = (
    "it removes blocks of the universe only, never a sentinel"
)

#: The layers that cannot reach a bug at all, and why: (layer, bug) -> reason.
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("proof", _name): PROOF_OUT_OF_REACH.format(operation=_bug.operation)
    for _name, _bug in CATALOGUE.items()
    if _bug.operation not in PROVED_OPERATIONS
}

#: Columns measured outside the default run: layer -> (when and where, bug -> caught).
RECORDED: dict[str, tuple[str, dict[str, bool]]] = {
    "proof": (
        "measured 2026-12-05 with `python -m specs.bug_matrix --proof` (z3 5.4, 2 s per "
        "obligation; a planted loop that is the production loop gets its invariant, the planted "
        "copies of `unstage` included) on the working tree over commit 4dcd16b, whose proof "
        "covers every public method and the walk `_walk`. `popleft_n_shares_empty_result` is "
        "refuted on the goal 'returns a list': the translator does not take the module-level "
        "list it returns for a new list. `constructor_skips_link_check` and "
        "`append_n_wrong_neighbour` have a loop with no invariant, so they are not proved for "
        "every size, and the bounded search finds their counterexample",
        {
            "popleft_n_off_by_one": True,
            "popleft_n_allows_negative": True,
            "sentinel_returned": True,
            "append_skips_double_free_check": True,
            "append_guard_reads_next_only": True,
            "prepend_n_guard_reads_prev_only": True,
            "remove_accepts_sentinel": True,
            "iter_blocks_after_checks_lazily": True,
            "iter_blocks_after_guard_reads_next_only": True,
            "append_n_not_atomic": True,
            "prepend_n_not_atomic": True,
            "append_n_undo_clears_next_only": True,
            "prepend_n_undo_leaves_tail_link": True,
            "popleft_n_shares_empty_result": True,
            "popleft_n_reuses_buffer": False,
            "get_all_free_blocks_reuses_list": False,
            "constructor_not_atomic_for_iterables": False,
            "constructor_skips_link_check": True,
            "popleft_leaves_links": True,
            "append_n_wrong_neighbour": True,
            "prepend_n_reversed": False,
            "remove_forgets_count": True,
            "prepend_n_counts_before_linking": True,
            "iter_blocks_after_yields_cursor": True,
            "iter_yields_head_sentinel": True,
            "contains_compares_by_value": True,
        },
    ),
    "crosshair": (
        "measured 2026-12-04 with `tox -e crosshair-planted`'s test (specs/crosshair_run.py "
        "--first, 6 CPU-s per condition, the contract of the overridden method first, then the "
        "others in turn) on the catalogue whose copies were remade from the code of commit "
        "ddde092: all 26 bugs in 33 s on 2 shared cores. Every one gave a counterexample to the "
        "contract of the method it overrides",
        {
            "popleft_n_off_by_one": True,
            "popleft_n_allows_negative": True,
            "sentinel_returned": True,
            "append_skips_double_free_check": True,
            "append_guard_reads_next_only": True,
            "prepend_n_guard_reads_prev_only": True,
            "remove_accepts_sentinel": True,
            "iter_blocks_after_checks_lazily": True,
            "iter_blocks_after_guard_reads_next_only": True,
            "append_n_not_atomic": True,
            "prepend_n_not_atomic": True,
            "append_n_undo_clears_next_only": True,
            "prepend_n_undo_leaves_tail_link": True,
            "popleft_n_shares_empty_result": True,
            "popleft_n_reuses_buffer": True,
            "get_all_free_blocks_reuses_list": True,
            "constructor_not_atomic_for_iterables": True,
            "constructor_skips_link_check": True,
            "popleft_leaves_links": True,
            "append_n_wrong_neighbour": True,
            "prepend_n_reversed": True,
            "remove_forgets_count": True,
            "prepend_n_counts_before_linking": True,
            "iter_blocks_after_yields_cursor": True,
            "iter_yields_head_sentinel": True,
            "contains_compares_by_value": True,
        },
    ),
}


def caught(layer: str, bug: str) -> bool:
    """Whether the cheap ``layer`` reports the planted bug ``bug``.

    Runtime complexity: one run of the layer at the small size of :mod:`specs.layer_matrix`
    """
    return RUNNERS[layer](CATALOGUE[bug].queue_type)


def compute(layers: Sequence[str] = CHEAP_LAYERS) -> dict[tuple[str, str], bool]:
    """Run every planted bug against each of ``layers``: (layer, bug) -> caught.

    Runtime complexity: len(layers) * len(CATALOGUE) layer runs
    """
    return {(layer, bug): caught(layer, bug) for layer in layers for bug in CATALOGUE}


def cells(
    computed: dict[tuple[str, str], bool],
    recorded: dict[str, tuple[str, dict[str, bool]]],
    not_applicable: Iterable[tuple[str, str]],
    names: Iterable[str],
    layers: Sequence[str],
) -> dict[tuple[str, str], Cell]:
    """Every cell of a page: computed or recorded, or a layer that cannot reach the bug.

    A cell neither computed, recorded nor out of reach is one the layer was not run on.
    """
    out_of_reach = set(not_applicable)
    matrix: dict[tuple[str, str], Cell] = {}
    for layer in layers:
        column = recorded.get(layer, ("", {}))[1]
        for name in names:
            found = computed.get((layer, name), column.get(name))
            if (layer, name) in out_of_reach:
                matrix[layer, name] = "n/a"
            elif found is None:
                matrix[layer, name] = "not run"
            else:
                matrix[layer, name] = "caught" if found else "missed"
    return matrix


#: The layers of the pool and the keys, run against the bugs of ``CLIENT_CATALOGUE``: the pool
#: against its model (Hypothesis machine, every short sequence), the pool's calls against
#: their contracts, the keys against their meanings (property, enumeration).
CLIENT_LAYERS = (
    "pool machine",
    "pool sequences",
    "pool contracts",
    "key property",
    "key enumeration",
)

#: The pool machine's examples and steps: cheap (a pool bug shows in a few steps), so more
#: than the queue's machines get.
POOL_MACHINE_EXAMPLES, POOL_MACHINE_STEPS = 100, 30

_KEY_LAYERS_ONLY_KEYS = "the key layers compute keys and never call the pool"
_CONTRACTS_OPAQUE_KEYS = (
    "the contracts take keys as opaque values: a key function that merges or splits prefixes "
    "leaves every pool call within its contract"
)
#: The client layers that cannot reach a pool or key bug, and why: (layer, bug) -> reason.
CLIENT_NOT_APPLICABLE: dict[tuple[str, str], str] = {}
for _name, _client_bug in CLIENT_CATALOGUE.items():
    if _client_bug.kind == "pool":
        CLIENT_NOT_APPLICABLE["key property", _name] = _KEY_LAYERS_ONLY_KEYS
        CLIENT_NOT_APPLICABLE["key enumeration", _name] = _KEY_LAYERS_ONLY_KEYS
    else:
        MISSES["pool contracts", _name] = _CONTRACTS_OPAQUE_KEYS
MISSES["pool contracts", "encode_int_rounds_bytes_down"] = (
    "its prompts carry no LoRA id and no token past 63 bits, so the integer encoding that "
    "overflows is never reached; and a key that could be computed is opaque to the contracts"
)


def _fails(test: Callable[[], object]) -> bool:
    """Whether ``test`` raises: the layer reports the bug."""
    try:
        test()
    except Exception:  # any failure of the layer is it reporting the bug
        return True
    return False


def _pool_machine(bug: ClientBug) -> bool:
    tests = importlib.import_module("tests.kvcache.test_pool_machine")
    shorter = settings(
        tests.RUN,
        max_examples=POOL_MACHINE_EXAMPLES,
        stateful_step_count=POOL_MACHINE_STEPS,
        derandomize=True,
        database=None,
        phases=machine_settings().phases,
    )
    return _fails(lambda: tests.run_pool_machine(bug.pool_type, shorter))


def _pool_sequences(bug: ClientBug) -> bool:
    driver = importlib.import_module("specs.pool_driver")
    return driver.enumerate_sequences(3, pool_type=bug.pool_type)[1] is not None


def _pool_contracts(bug: ClientBug) -> bool:
    contracts = importlib.import_module("specs.pool_contracts")
    return contracts.check_pool_contracts(bug.pool_type) is not None


def _key_property(_bug: ClientBug) -> bool:
    tests = importlib.import_module("tests.kvcache.test_key_layer")
    run = settings(
        tests.PROPERTY_RUN, derandomize=True, database=None, phases=machine_settings().phases
    )
    return _fails(tests.block_property(run)) or _fails(tests.request_property(run))


def _key_enumeration(_bug: ClientBug) -> bool:
    tests = importlib.import_module("tests.kvcache.test_key_layer")
    return _fails(tests.test_every_small_block_input_has_its_own_key) or _fails(
        tests.test_every_small_request_has_its_own_keys
    )


_CLIENT_RUNNERS: dict[str, Callable[[ClientBug], bool]] = {
    "pool machine": _pool_machine,
    "pool sequences": _pool_sequences,
    "pool contracts": _pool_contracts,
    "key property": _key_property,
    "key enumeration": _key_enumeration,
}


def client_caught(layer: str, bug: str) -> bool:
    """Whether the client ``layer`` reports the planted pool or key bug ``bug``.

    A layer a bug cannot reach (a key layer for a pool bug) is not run: it reports nothing,
    and :data:`CLIENT_NOT_APPLICABLE` says why. A key bug is planted in the keys module for the run.

    Runtime complexity: one run of the layer
    """
    if (layer, bug) in CLIENT_NOT_APPLICABLE:
        return False
    planted_bug = CLIENT_CATALOGUE[bug]
    with planted(planted_bug.keys_bug), fixed_draws():
        return _CLIENT_RUNNERS[layer](planted_bug)


@functools.cache
def _client_matrix() -> tuple[tuple[tuple[str, str], bool], ...]:
    return tuple(
        ((layer, bug), client_caught(layer, bug))
        for layer in CLIENT_LAYERS
        for bug in CLIENT_CATALOGUE
    )


def compute_client() -> dict[tuple[str, str], bool]:
    """Run every planted pool and key bug against every client layer (once per process).

    Runtime complexity: len(CLIENT_LAYERS) * len(CLIENT_CATALOGUE) layer runs
    """
    return dict(_client_matrix())


#: The planted copies of ``verified_queue._undo.unstage``, by function name.
_UNSTAGE_COPIES = tuple(
    copy.planted.rsplit(":", 1)[1]
    for copies in COPIES.values()
    for copy in copies
    if copy.production == "verified_queue/_undo.py:unstage"
)


def prove(bugs: Iterable[tuple[str, str, type[FreeBlockQueue[Any]]]]) -> dict[str, bool]:
    """The proof column for ``bugs`` (name, method, class), each of a proved operation.

    Caught when an obligation gets a counterexample, or, where z3 runs out of time, a loop
    invariant fails to hold or a planted loop has none (the method cannot be proved for every
    size), when the bounded search (queues of up to 3 blocks, loops run rather than cut)
    finds a concrete counterexample: what ``python -m specs.proof --bug NAME`` does. A
    planted loop that is the production loop gets the production loop's invariant, as
    ``tests/verification/test_proof.py`` does. A method the translator cannot read even with
    its loops run (:class:`specs.proof.Unsupported`) is missed: the proof refuses to certify
    it without finding the defect.
    """
    proof = importlib.import_module("specs.proof")
    column: dict[str, bool] = {}
    for name, operation, queue_type in bugs:
        invariants = dict(proof.LOOP_INVARIANTS)
        production = invariants.get((f"FreeBlockQueue.{operation}", 0))
        if production is not None:
            invariants[f"{queue_type.__name__}.{operation}", 0] = production
        # A planted copy of the undo's walk back is the production loop: the same invariant.
        for helper in _UNSTAGE_COPIES:
            invariants[helper, 0] = proof.LOOP_INVARIANTS["unstage", 0]
        try:
            results = proof.prove(
                [operation],
                queue_type,
                stop_at_first_failure=True,
                timeout_ms=2_000,
                loop_invariants=invariants,
            )
        except proof.Unsupported as error:
            print(f"{name}: not translated for every size: {error}", file=sys.stderr)
            verdict = "unknown"
        else:
            verdict = results[-1].verdict
            print(f"{name}: {verdict}: {results[-1].name}", file=sys.stderr)
        found = verdict == "counterexample"
        if verdict == "unknown":
            try:
                bounded = proof.find_counterexample(operation, queue_type)
            except proof.Unsupported as error:
                print(f"{name}: not translated with its loops run: {error}", file=sys.stderr)
            else:
                found = bounded is not None
                print(f"{name}: bounded search: {bounded and bounded.name}", file=sys.stderr)
        column[name] = found
    return column


def render(
    cheap: dict[tuple[str, str], bool], client: dict[tuple[str, str], bool] | None = None
) -> str:
    """The page ``docs/bug-matrix.md``: the matrices, then every layer's misses with the reason.

    ``client`` is the pool and key matrix (:func:`compute_client`, run when not given).

    Runtime complexity: O(len(LAYERS) * len(CATALOGUE)), and the client matrix if not given
    """
    if client is None:
        client = compute_client()
    matrix = cells(cheap, RECORDED, NOT_APPLICABLE, CATALOGUE, LAYERS)
    lines = [
        "# Planted bugs by layer",
        "",
        "<!-- Generated by `python -m specs.bug_matrix --write docs/bug-matrix.md`; "
        "`tests/verification/test_bug_matrix.py` fails when this page and the layers disagree. -->",
        "",
        f"`specs/planted_bugs/` plants {len(CATALOGUE)} realistic single-point bugs, each a "
        "subclass of `FreeBlockQueue` that overrides one method, most of them with the "
        "production method copied with one defect "
        "(`tests/verification/test_planted_copies.py` holds each copy to the production code "
        "but for one hunk, and names the few written from scratch, with the reason; "
        "`tests/verification/test_planted_bugs.py` pins each bug's symptom, "
        "and that it shows no other bug's). This page runs every bug against every "
        "verification layer of [Verification](verification.md): the queue's layers, and the "
        "checkers' layers of [the checker matrix](checker-bug-matrix.md) (damage, "
        "cross-check), which run check mode over the bug's class. The cheap columns are "
        "recomputed by the default test run at small sizes: the exhaustive check, the damage "
        "layer and the cross-check over 3 blocks (the exhaustive check with batches up to 2); "
        f"the five Hypothesis machines with {MACHINE_EXAMPLES} examples of up to "
        f"{MACHINE_STEPS} steps, derandomized; the contracts evaluated on their whole domains; "
        "the self-check with 2,000 operations. A bug's count is the layers that caught it of "
        "those that ran on it; `n/a` is a layer that cannot reach the bug at all.",
        "",
        "| Kind | Bugs | What goes wrong |",
        "| --- | --- | --- |",
    ]
    for kind, meaning in KINDS.items():
        count = sum(1 for bug in CATALOGUE.values() if bug.kind == kind)
        lines.append(f"| {kind} | {count} | {meaning} |")
    lines += ["", "## The matrix", ""]
    rows = {name: [bug.kind, f"`{bug.operation}`"] for name, bug in CATALOGUE.items()}
    lines += render_table(["Bug", "Kind", "Method"], rows, LAYERS, matrix)
    lines += ["", "## Recorded columns", ""]
    for layer, (when, _column) in RECORDED.items():
        lines.append(f"- `{layer}`: {when}.")
    lines += ["", "## What each layer misses, and why", ""]
    lines += render_explanations(list(CATALOGUE), LAYERS, matrix, {**MISSES, **NOT_APPLICABLE})
    lines += _render_client(client)
    return "\n".join(lines)


def _render_client(client: dict[tuple[str, str], bool]) -> list[str]:
    """The page's section on the pool and the keys: their bugs by their layers, and misses."""
    lines = [
        "## The pool and the keys",
        "",
        f"`specs/planted_bugs/pool.py` and `keys.py` plant {len(CLIENT_CATALOGUE)} bugs in "
        "the block pool and its keys (`specs/planted_bugs/kvcache.py` lists them): a "
        "`BlockPool` subclass with one method copied with one defect, or one function of the "
        "keys module so copied and put in the module for the run. The queue's layers above "
        "never call the pool or the keys; these columns are the layers that do, all "
        "recomputed by the default test run: the pool against its model "
        "(`tests/kvcache/test_pool_machine.py`: the Hypothesis machine with "
        f"{POOL_MACHINE_EXAMPLES} examples of up to {POOL_MACHINE_STEPS} steps, caching on and "
        "off, and "
        "every sequence of up to 3 steps from two starting states), the pool's calls against "
        "their contracts (`specs/pool_contracts.py`, 200 random engines of 30 steps) and the "
        "keys against their meanings (`tests/kvcache/test_key_layer.py`: the properties and "
        "the enumeration). A key layer never calls the pool, so it cannot reach a pool bug.",
        "",
        "| Kind | Bugs | What goes wrong |",
        "| --- | --- | --- |",
    ]
    for kind, meaning in CLIENT_KINDS.items():
        count = sum(1 for bug in CLIENT_CATALOGUE.values() if bug.kind == kind)
        lines.append(f"| {kind} | {count} | {meaning} |")
    lines.append("")
    matrix = cells(client, {}, CLIENT_NOT_APPLICABLE, CLIENT_CATALOGUE, CLIENT_LAYERS)
    rows = {name: [bug.kind, f"`{bug.operation}`"] for name, bug in CLIENT_CATALOGUE.items()}
    lines += render_table(["Bug", "Kind", "Function"], rows, CLIENT_LAYERS, matrix)
    lines += ["", "### What the pool and key layers miss, and why", ""]
    reasons = {**MISSES, **CLIENT_NOT_APPLICABLE}
    lines += render_explanations(list(CLIENT_CATALOGUE), CLIENT_LAYERS, matrix, reasons, "####")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print or ``--write`` the page; ``--proof`` prints the proof column."""
    parser = argparse.ArgumentParser(prog="python -m specs.bug_matrix", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH")
    parser.add_argument("--proof", action="store_true", help="recompute the proof column")
    args = parser.parse_args(argv)
    if args.proof:
        proved = [(name, bug.operation, bug.queue_type) for name, bug in CATALOGUE.items()]
        column = prove(item for item in proved if item[1] in PROVED_OPERATIONS)
        for name, found in column.items():
            print(f"    {name!r}: {found},")
        return 0
    page = render(compute(), compute_client())
    if args.write:
        with open(args.write, "w", encoding="utf-8") as file:
            file.write(page + "\n")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
