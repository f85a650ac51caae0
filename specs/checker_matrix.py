"""Which layer catches which planted checker bug: the matrix of ``docs/checker-bug-matrix.md``.

The bugs of :data:`specs.planted_bugs.checkers.CHECKER_CATALOGUE` (in ``invariants.py``,
``checked.py`` and ``queue.py``) are run, each installed by
:func:`~specs.planted_bugs.checkers.planted`, against

- ``damage``: :func:`specs.damage.check_every_damage` over 3 blocks;
- ``damage machine``: ``DamageLargeQueue`` of ``tests/verification/test_checker_layers.py``;
- ``cross-check``: :func:`specs.crosscheck.cross_check_every_state` over 3 blocks;
- ``cross-check machine``: ``CheckModeAgainstBase`` of the same test module;
- ``exhaustive``: :func:`specs.exhaustive.check_every_state` over 3 blocks, batches up to 2;
- ``queue machine`` and ``check mode``: the machines of ``tests/verification/test_stateful.py``
  (``QueueAcrossChanges``: the queue machine with walks held across changes and copies),

every machine derandomized and unshrunk, with 50 examples of up to 20 steps.
A layer that misses a bug says why in :data:`MISSES`; ``tests/verification/test_checker_matrix.py``
recomputes every column, requires three layers per bug, and compares the page with
:func:`render`. ``python -m specs.checker_matrix --write docs/checker-bug-matrix.md`` regenerates
it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from specs.crosscheck import cross_check_every_state
from specs.damage import check_every_damage
from specs.exhaustive import check_every_state
from specs.planted_bugs.checkers import CHECKER_CATALOGUE, CheckerBug, planted

__all__ = ["LAYERS", "MISSES", "compute", "main", "render"]

#: The layers, in the page's order.
LAYERS = (
    "damage",
    "damage machine",
    "cross-check",
    "cross-check machine",
    "exhaustive",
    "queue machine",
    "check mode",
)

_CHECKER_ONLY = (
    "it drives queue operations and compares them with a model; the checker is only its "
    "oracle on healthy states, where this bug gives the same answer"
)
_HEALTHY_ONLY = (
    "it damages nothing: on the healthy states it compares, the checkers' answers are right"
)
_NO_QUERIES = (
    "it damages states and reads the checkers' reports; it never asks `in`, copies a queue or "
    "passes a count of another type"
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
_PRODUCTION_ONLY = "it runs the production queue only, never check mode"
_OWN_COUNT = (
    "check mode converts the count itself (a bool refused, anything else made an int) before "
    "the base method runs, so the base method only ever sees an int"
)
_OWN_REDUCE = "check mode copies and pickles with its own `__reduce__`, not the base method's"
_OWN_REFUSAL = "check mode refuses a non-member itself, before the base `remove` runs"

#: Why each layer misses each bug it misses: (layer, bug) -> reason.
MISSES: dict[tuple[str, str], str] = {}
_CHECKER_BUGS = [
    name
    for name, bug in CHECKER_CATALOGUE.items()
    if bug.source != "queue.py"
    and name not in ("checked_contains_by_value", "checked_reduce_forgets_type")
]
for _name in CHECKER_CATALOGUE:
    if _name not in _CHECKER_BUGS:
        MISSES["damage", _name] = _NO_QUERIES
        MISSES["damage machine", _name] = _NO_QUERIES
for _name in _CHECKER_BUGS:
    MISSES["cross-check", _name] = _HEALTHY_ONLY
    MISSES["exhaustive", _name] = _CHECKER_ONLY
    MISSES["queue machine", _name] = _CHECKER_ONLY
    MISSES["check mode", _name] = _CHECK_MODE_REDUNDANT
for _layer in ("exhaustive", "queue machine"):
    MISSES[_layer, "checked_contains_by_value"] = _PRODUCTION_ONLY
    MISSES[_layer, "checked_reduce_forgets_type"] = _PRODUCTION_ONLY
MISSES["exhaustive", "reduce_loses_subclass"] = _NO_COPIES
MISSES["exhaustive", "walk_reads_ahead"] = _NO_MUTATING_WALK
MISSES["queue machine", "contains_stops_before_last"] = (
    "not met in its 50 runs of up to 20 steps: `in` of the last block of a queue, the one case "
    "that shows it, was never drawn"
)
MISSES["queue machine", "popleft_n_accepts_bool"] = _INTS_ONLY
MISSES["queue machine", "popleft_n_refuses_indexables"] = _INTS_ONLY
MISSES["check mode", "popleft_n_accepts_bool"] = _OWN_COUNT
MISSES["check mode", "popleft_n_refuses_indexables"] = _OWN_COUNT
MISSES["check mode", "reduce_loses_subclass"] = _OWN_REDUCE
MISSES["check mode", "contains_stops_before_last"] = _NO_BASE
MISSES["check mode", "walk_reads_ahead"] = _NO_BASE
MISSES["check mode", "remove_names_wrong_operation"] = _OWN_REFUSAL


def _stateful() -> Any:
    return importlib.import_module("tests.verification.test_stateful")


def _layers() -> Any:
    return importlib.import_module("tests.verification.test_checker_layers")


def _queue_machine(queue_type: type[Any]) -> bool:
    stateful = _stateful()
    machine = stateful._machine_for(stateful.QueueAcrossChanges, queue_type)
    return _run(machine)


def _check_mode(queue_type: type[Any]) -> bool:
    stateful = _stateful()
    machine = type(
        f"CheckedQueueMisuseOver{queue_type.__name__}",
        (stateful.CheckedQueueMisuse,),
        {"base_type": queue_type},
    )
    return _run(machine)


def _run(machine: type) -> bool:
    try:
        _layers().run_machine(machine, _layers().BUG_HUNT)  # 50 examples of up to 20 steps
    except Exception:  # any failure of the run is the machine reporting the bug
        return True
    return False


def _damage_machine(_queue_type: type[Any]) -> bool:
    return _run(_layers().DamageLargeQueue)


def _cross_check_machine(queue_type: type[Any]) -> bool:
    machine = type(
        f"CheckModeAgainst{queue_type.__name__}",
        (_layers().CheckModeAgainstBase,),
        {"queue_type": queue_type},
    )
    return _run(machine)


_RUNNERS: dict[str, Callable[[type[Any]], bool]] = {
    "damage": lambda _queue_type: check_every_damage(3).counterexample is not None,
    "damage machine": _damage_machine,
    "cross-check": lambda queue_type: (
        cross_check_every_state(3, queue_type).counterexample is not None
    ),
    "cross-check machine": _cross_check_machine,
    "exhaustive": lambda queue_type: (
        check_every_state(blocks=3, max_batch=2, queue_type=queue_type).counterexample is not None
    ),
    "queue machine": _queue_machine,
    "check mode": _check_mode,
}


def caught(layer: str, name: str) -> bool:
    """Whether ``layer`` reports the planted bug ``name``, installed for the run."""
    bug: CheckerBug = CHECKER_CATALOGUE[name]
    with planted(bug) as queue_type:
        return _RUNNERS[layer](queue_type)


def compute(layers: Sequence[str] = LAYERS) -> dict[tuple[str, str], bool]:
    """Every bug against each of ``layers``: (layer, bug) -> caught."""
    matrix = {}
    for name in CHECKER_CATALOGUE:
        for layer in layers:
            matrix[layer, name] = caught(layer, name)
            print(f"{name}: {layer}: {matrix[layer, name]}", file=sys.stderr, flush=True)
    return matrix


def _mark(value: bool) -> str:
    return "caught" if value else "**missed**"


def render(matrix: dict[tuple[str, str], bool]) -> str:
    """The page ``docs/checker-bug-matrix.md``: the matrix, then each layer's misses and why."""
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
        "with one defect and swapped in for the run. Each layer runs at a small size: the "
        "exhaustive layers over 3 blocks, every machine derandomized with 50 examples of up to "
        "20 steps.",
        "",
        "| Bug | File | Kind | Replaces | " + " | ".join(LAYERS) + " | Caught by |",
        "| --- | --- | --- | --- |" + " --- |" * len(LAYERS) + " --- |",
    ]
    for name, bug in CHECKER_CATALOGUE.items():
        row = [_mark(matrix[layer, name]) for layer in LAYERS]
        total = sum(matrix[layer, name] for layer in LAYERS)
        lines.append(
            f"| `{name}` | `{bug.source}` | {bug.kind} | `{bug.operation}` | "
            + " | ".join(row)
            + f" | {total} of {len(LAYERS)} |"
        )
    totals = [sum(matrix[layer, name] for name in CHECKER_CATALOGUE) for layer in LAYERS]
    lines.append(
        "| **caught** | | | | "
        + " | ".join(f"{total}/{len(CHECKER_CATALOGUE)}" for total in totals)
        + " | |"
    )
    lines += ["", "## What each layer misses, and why", ""]
    for layer in LAYERS:
        missed = [name for name in CHECKER_CATALOGUE if not matrix[layer, name]]
        lines += [f"### {layer}", ""]
        if not missed:
            lines.append("Misses nothing.")
        for name in missed:
            lines.append(f"- `{name}`: {MISSES.get((layer, name), 'NOT EXPLAINED')}.")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print or ``--write`` the page."""
    parser = argparse.ArgumentParser(prog="python -m specs.checker_matrix", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH")
    args = parser.parse_args(argv)
    page = render(compute())
    if args.write:
        with open(args.write, "w", encoding="utf-8") as file:
            file.write(page + "\n")
    else:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
