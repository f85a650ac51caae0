"""Which layer catches which planted checker bug: the matrix of ``docs/checker-bug-matrix.md``.

The bugs of :data:`specs.planted_bugs.checkers.CHECKER_CATALOGUE` (in ``invariants.py``,
``checked.py`` and ``queue.py``) are run, each installed by
:func:`~specs.planted_bugs.checkers.planted`, against every layer of
:mod:`specs.layer_matrix`, the checkers' layers and the queue's alike, each at the small size
named there (the exhaustive layers over 3 blocks, every machine derandomized with 50
examples of up to 20 steps), and against the proof, recorded in :data:`RECORDED` for the
bugs it can read. A layer that runs on a bug and misses it says why in :data:`MISSES`; a
layer that cannot reach a bug (it never runs the code the bug is in) says why in
:data:`NOT_APPLICABLE`, and one not run on it in :data:`NOT_RUN`.
``tests/verification/test_checker_matrix.py`` recomputes every other column, requires three
layers per bug, and compares the page with :func:`render`.
``python -m specs.checker_matrix --write docs/checker-bug-matrix.md`` regenerates it;
``--proof`` recomputes the proof column and prints it (z3 needed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specs.bug_matrix import PROOF_OUT_OF_REACH, PROVED_OPERATIONS, cells, prove
from specs.layer_matrix import (
    MACHINE_EXAMPLES,
    MACHINE_STEPS,
    RUNNERS,
    render_explanations,
    render_table,
)
from specs.planted_bugs.checkers import CHECKER_CATALOGUE, CheckerBug, planted

__all__ = [
    "COMPUTED_LAYERS",
    "LAYERS",
    "MISSES",
    "NOT_APPLICABLE",
    "NOT_RUN",
    "RECORDED",
    "compute",
    "main",
    "render",
]

#: The layers the default run recomputes, in the page's order: the checkers' layers, then
#: the queue's.
COMPUTED_LAYERS = (
    "damage",
    "damage machine",
    "cross-check",
    "cross-check machine",
    "exhaustive",
    "queue machine",
    "shared pool",
    "check mode",
    "contracts",
    "self-check",
)

#: Every layer, in the page's order.
LAYERS = (*COMPUTED_LAYERS, "proof", "crosshair")

#: The layers that build the production queue only, never check mode.
_PRODUCTION_ONLY = ("exhaustive", "queue machine", "shared pool", "contracts", "self-check")

_CHECKER_ONLY = (
    "it drives queue operations and compares them with a model; the checker is only its "
    "oracle on healthy states, where this bug gives the same answer"
)
_HEALTHY_ONLY = (
    "it damages nothing: on the healthy states it compares, the checkers' answers are right"
)
_NO_QUERIES = (
    "it runs check mode over the bug's class and reads the checkers' reports on damaged "
    "states; it never asks `in` of a block, copies a queue, passes a count of another type or "
    "holds a walk open, and a refusal's words are not its business"
)
_NO_BASE = (
    "it runs check mode only, which answers this itself without the base method the bug is in"
)
_NO_COPIES = "it never copies or pickles a queue, let alone a user's subclass"
_NO_MUTATING_WALK = "it drains every walk at once: nothing changes the queue while a walk stands"
_INTS_ONLY = "it passes counts of type int only"
_CHECK_MODE_REDUNDANT = (
    "the operation after the damage reports it by check mode's own O(1) checks of the links it "
    "touches, and its periodic full check walks the chain in one pass of its own, neither "
    "going through the broken function; the machine asks only that something is reported"
)
_OWN_COUNT = (
    "check mode converts the count itself (a bool refused, anything else made an int) before "
    "the base method runs, so the base method only ever sees an int"
)
_OWN_REDUCE = "check mode copies and pickles with its own `__reduce__`, not the base method's"
_OWN_REFUSAL = "check mode refuses a non-member itself, before the base `remove` runs"
_NOT_TRANSLATED = (
    "the translator does not read `{call}`, so the proof stops with Unsupported: it refuses to "
    "certify the method without finding the defect (and it models a count as an int, so a "
    "count of another type is outside it)"
)

_SOURCES = {name: bug.source for name, bug in CHECKER_CATALOGUE.items()}
_IN_CHECKERS = [name for name, source in _SOURCES.items() if source == "invariants.py"]
_IN_CHECK_MODE = [name for name, source in _SOURCES.items() if source == "checked.py"]
_IN_QUEUE = [name for name, source in _SOURCES.items() if source == "queue.py"]

#: The layers that cannot reach a bug at all (they never run or read the code it is in), and
#: why: (layer, bug) -> reason.
NOT_APPLICABLE: dict[tuple[str, str], str] = {}
for _name in _IN_CHECK_MODE:
    for _layer in _PRODUCTION_ONLY:
        NOT_APPLICABLE[_layer, _name] = (
            "it builds the production queue only, never check mode, so the method the bug "
            "replaces never runs"
        )
for _name in _IN_CHECKERS:
    NOT_APPLICABLE["self-check", _name] = (
        "it compares every link and the count with its model itself and never calls the checkers"
    )
for _name in (*_IN_CHECKERS, *_IN_CHECK_MODE):
    NOT_APPLICABLE["proof", _name] = (
        f"the proof reads the source of `queue.py` only; the bug is in `{_SOURCES[_name]}`"
    )
for _name in _IN_QUEUE:
    _operation = CHECKER_CATALOGUE[_name].operation
    if _operation not in PROVED_OPERATIONS:
        NOT_APPLICABLE["proof", _name] = PROOF_OUT_OF_REACH.format(operation=_operation)
NOT_APPLICABLE["proof", "reduce_loses_subclass"] += (
    " (that check, `specs.proof.check_copy_and_pickle`, reports this bug: a deep copy of the "
    "empty queue is a `FreeBlockQueue`; it is not counted in this column)"
)

#: The layers not run on a bug, and why: (layer, bug) -> reason.
NOT_RUN: dict[tuple[str, str], str] = {
    ("crosshair", _name): (
        "the recorded CrossHair run (`tox -e crosshair-planted`) takes its targets from the "
        "queue's catalogue, each in a process of its own, where a function this catalogue swaps "
        "in is not installed; the `contracts` column evaluates the same contracts concretely"
    )
    for _name in CHECKER_CATALOGUE
}

#: Columns measured outside the default run: layer -> (when and where, bug -> caught).
RECORDED: dict[str, tuple[str, dict[str, bool]]] = {
    "proof": (
        "measured 2026-12-05 with `python -m specs.checker_matrix --proof` (z3 5.4, 2 s per "
        "obligation), as the queue matrix's proof column, on the working tree over commit "
        "4dcd16b, on the five bugs of the methods it proves. `remove_names_wrong_operation` is "
        "proved: the proof compares the class of each exception, never its message. "
        "`walk_reads_ahead` is not proved for every size (z3 runs out of its time on the walk's "
        "loop invariant); the bounded search finds a step, after the queue changed, that yields "
        "the block read before the change instead of the one after its block now",
        {
            "popleft_n_accepts_bool": False,
            "popleft_n_refuses_indexables": False,
            "contains_stops_before_last": True,
            "walk_reads_ahead": True,
            "remove_names_wrong_operation": False,
        },
    ),
}

#: Why each layer misses each bug it runs on and misses: (layer, bug) -> reason.
MISSES: dict[tuple[str, str], str] = {
    ("proof", "popleft_n_accepts_bool"): _NOT_TRANSLATED.format(call="operator.index(n)"),
    ("proof", "popleft_n_refuses_indexables"): _NOT_TRANSLATED.format(call="type(n)"),
    ("proof", "remove_names_wrong_operation"): (
        "the proof compares the class of each exception, never its message"
    ),
}
for _name in (
    "checked_contains_by_value",
    "checked_reduce_forgets_type",
    *_IN_QUEUE,
):
    MISSES["damage", _name] = _NO_QUERIES
    MISSES["damage machine", _name] = _NO_QUERIES
for _name in (*_IN_CHECKERS, "full_check_skips_membership", "full_check_counts_by_value"):
    MISSES["cross-check", _name] = _HEALTHY_ONLY
for _name in _IN_CHECKERS:
    MISSES["check mode", _name] = _CHECK_MODE_REDUNDANT
MISSES["check mode", "full_check_skips_membership"] = (
    "its damages set one link wrong or move the count by an int, which the one-walk test of "
    "the full check still sees; it never links an outside block in with every link and the "
    "count kept, the one damage the bug lets through"
)
MISSES["check mode", "full_check_counts_by_value"] = (
    "its damages move the count by an int; it never makes the count an int subclass of the "
    "right value, the one damage the bug lets through"
)
MISSES["cross-check", "checked_iter_skips_full_check"] = _HEALTHY_ONLY
MISSES["check mode", "checked_iter_skips_full_check"] = (
    "it can meet it (a link damaged where the walk does not look, then `iter()` as the next "
    "operation of its fully checked queue) but does not in its runs with the matrix's fixed "
    "draws; Hypothesis's own draws, which take constants from the project's modules, meet it"
)
for _name in _IN_CHECKERS:
    for _layer in ("exhaustive", "queue machine", "shared pool", "contracts"):
        MISSES[_layer, _name] = _CHECKER_ONLY
for _layer in ("queue machine", "shared pool", "contracts", "self-check"):
    MISSES[_layer, "popleft_n_accepts_bool"] = _INTS_ONLY
    MISSES[_layer, "popleft_n_refuses_indexables"] = _INTS_ONLY
for _layer in ("exhaustive", "shared pool", "contracts", "self-check"):
    MISSES[_layer, "reduce_loses_subclass"] = _NO_COPIES
    MISSES[_layer, "walk_reads_ahead"] = _NO_MUTATING_WALK
MISSES["queue machine", "contains_stops_before_last"] = (
    "not met in its runs: `in` of the last block of a queue, the one case that shows it, was "
    "never drawn"
)
MISSES["self-check", "contains_stops_before_last"] = "it asks `in` of the sentinels only"
MISSES["check mode", "popleft_n_accepts_bool"] = _OWN_COUNT
MISSES["check mode", "popleft_n_refuses_indexables"] = _OWN_COUNT
MISSES["check mode", "reduce_loses_subclass"] = _OWN_REDUCE
MISSES["check mode", "contains_stops_before_last"] = _NO_BASE
MISSES["check mode", "walk_reads_ahead"] = _NO_BASE
MISSES["check mode", "remove_names_wrong_operation"] = _OWN_REFUSAL


def caught(layer: str, name: str) -> bool:
    """Whether ``layer`` reports the planted bug ``name``, installed for the run."""
    bug: CheckerBug = CHECKER_CATALOGUE[name]
    with planted(bug) as queue_type:
        return RUNNERS[layer](queue_type)


def compute(layers: Sequence[str] = COMPUTED_LAYERS) -> dict[tuple[str, str], bool]:
    """Every bug against each of ``layers`` it can reach: (layer, bug) -> caught."""
    matrix = {}
    for name in CHECKER_CATALOGUE:
        for layer in layers:
            if (layer, name) not in NOT_APPLICABLE:
                matrix[layer, name] = caught(layer, name)
    return matrix


def render(computed: dict[tuple[str, str], bool]) -> str:
    """The page ``docs/checker-bug-matrix.md``: the matrix, then each layer's misses and why."""
    matrix = cells(computed, RECORDED, NOT_APPLICABLE, CHECKER_CATALOGUE, LAYERS)
    lines = [
        "# Planted checker bugs by layer",
        "",
        "<!-- Generated by `python -m specs.checker_matrix --write docs/checker-bug-matrix.md`; "
        "`tests/verification/test_checker_matrix.py` fails when this page and the layers "
        "disagree. -->",
        "",
        f"`specs/planted_bugs/checkers.py` plants {len(CHECKER_CATALOGUE)} bugs where the "
        "[queue's matrix](bug-matrix.md) has none: in the checkers (`invariants.py`), in check "
        "mode (`checked.py`), and in the production queue's answers that check mode hides or no "
        "other layer asks for (counts of other integer types, copies of subclasses, walks held "
        "open across mutations, `in`, error messages). A checker bug is one function copied "
        "with one defect and swapped in for the run. Every layer of the queue's matrix runs on "
        "them too. Each layer runs at a small size: the exhaustive layers over 3 blocks, every "
        f"machine derandomized with {MACHINE_EXAMPLES} examples of up to {MACHINE_STEPS} "
        "steps. A bug's count is the layers that caught it of those that ran on it; `n/a` is a "
        "layer that never runs the code the bug is in.",
        "",
    ]
    rows = {
        name: [f"`{bug.source}`", bug.kind, f"`{bug.operation}`"]
        for name, bug in CHECKER_CATALOGUE.items()
    }
    lines += render_table(["Bug", "File", "Kind", "Replaces"], rows, LAYERS, matrix)
    lines += ["", "## Recorded columns", ""]
    for layer, (when, _column) in RECORDED.items():
        lines.append(f"- `{layer}`: {when}.")
    lines += ["", "## What each layer misses, and why", ""]
    reasons = {**MISSES, **NOT_APPLICABLE, **NOT_RUN}
    lines += render_explanations(list(CHECKER_CATALOGUE), LAYERS, matrix, reasons)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print or ``--write`` the page; ``--proof`` prints the proof column."""
    parser = argparse.ArgumentParser(prog="python -m specs.checker_matrix", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH")
    parser.add_argument("--proof", action="store_true", help="recompute the proof column")
    args = parser.parse_args(argv)
    if args.proof:
        readable = [
            (name, bug.operation, bug.queue_type)
            for name, bug in CHECKER_CATALOGUE.items()
            if ("proof", name) not in NOT_APPLICABLE
        ]
        for name, found in prove(readable).items():
            print(f"    {name!r}: {found},")
        return 0
    page = render(compute())
    if args.write:
        with open(args.write, "w", encoding="utf-8") as file:
            file.write(page + "\n")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
