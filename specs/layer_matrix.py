"""What the two planted-bug matrices share: one definition of every queue layer, and the page.

``docs/bug-matrix.md`` (:mod:`specs.bug_matrix`) and ``docs/checker-bug-matrix.md``
(:mod:`specs.checker_matrix`) run their bugs against the same layers, defined once here, each
taking the queue class to run (a planted bug's class, or the production queue while a checker
bug is installed in ``invariants.py`` or ``checked.py``):

- ``exhaustive``: :func:`specs.exhaustive.check_every_state` over 3 blocks, batches up to 2;
- ``queue machine``, ``shared pool``, ``check mode``: the Hypothesis machines of
  ``tests/verification/test_stateful_*.py`` (``QueueAcrossChanges``, the queue against its
  model with walks held across changes and copies; ``SharedPool``; ``CheckedQueueMisuse``,
  check mode over the class, misused and damaged by its caller);
- ``contracts``: the CrossHair contracts of :mod:`specs.contracts`, evaluated concretely on
  every input of their domains;
- ``self-check``: :func:`verified_queue.cli.selfcheck.run_self_check` with 2,000 operations;
- ``damage``: :func:`specs.damage.check_every_damage` over 3 blocks, check mode over the class;
- ``damage machine``, ``cross-check machine``: ``DamageLargeQueue`` and
  ``CheckModeAgainstBase`` of ``tests/verification/test_checker_layers.py``;
- ``cross-check``: :func:`specs.crosscheck.cross_check_every_state` over 3 blocks.

Every machine runs derandomized and unshrunk, with :data:`MACHINE_EXAMPLES` examples of up to
:data:`MACHINE_STEPS` steps, under :func:`fixed_draws`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from hypothesis import HealthCheck, Phase, settings

from specs.crosscheck import checked_over, cross_check_every_state
from specs.damage import check_every_damage
from specs.exhaustive import check_every_state
from verified_queue.cli import selfcheck
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "MACHINE_EXAMPLES",
    "MACHINE_STEPS",
    "RUNNERS",
    "Cell",
    "fixed_draws",
    "machine_settings",
    "render_explanations",
    "render_table",
]

Queue = type[FreeBlockQueue[Any]]

#: A cell of a matrix: the layer ran and reported the bug, ran and did not, cannot reach the
#: bug at all, or was not run on it.
Cell = Literal["caught", "missed", "n/a", "not run"]

#: Every machine's examples and steps in a planted-bug run.
MACHINE_EXAMPLES, MACHINE_STEPS = 50, 20


@contextmanager
def fixed_draws() -> Iterator[None]:
    """Hypothesis's draws for the length of the block, independent of what was imported before.

    Hypothesis (6.131 on) draws now and then a literal constant found in the source of every
    local module imported so far (``_get_local_constants``, rebuilt whenever ``sys.modules``
    grows). A derandomized run therefore draws other examples once another module of the
    project has been imported, or when the package is installed (its modules are then not
    local): a matrix cell would depend on what ran before it in the process. The pool of
    local constants is empty here, and the cache of constants built from it is emptied on
    entry and exit, so that a run draws the same examples in any process. The names are
    Hypothesis's private ones: where they are missing, there is no such pool to fix.
    """
    providers: Any = importlib.import_module("hypothesis.internal.conjecture.providers")
    local_constants = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if local_constants is None or cache is None:
        yield
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = local_constants
        cache.cache.clear()


def machine_settings() -> settings:
    """The planted-bug run of every machine: fixed, unshrunk, no health check.

    No health check: on a loaded machine one would fail the run, which a matrix would count
    as the bug caught.
    """
    return settings(
        max_examples=MACHINE_EXAMPLES,
        stateful_step_count=MACHINE_STEPS,
        derandomize=True,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate),
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )


def machine_fails(machine: type) -> bool:
    """Whether ``machine`` fails (reports the bug) in its planted-bug run."""
    stateful = _stateful()
    try:
        with fixed_draws():
            stateful.run_machine(machine, settings=machine_settings())
    except Exception:  # any failure of the run is the machine reporting the bug
        return True
    return False


def _stateful(module: str = "stateful_support") -> Any:
    """A module of the stateful tests (imported when needed): by default what they share.

    Each queue machine lives in a module of its own, which ``module`` names.
    """
    return importlib.import_module(f"tests.verification.{module}")


def _checker_layers() -> Any:
    """The module of the checker layers' tests, where their machines live."""
    return importlib.import_module("tests.verification.test_checker_layers")


def _subclass(machine: type, attribute: str, queue_type: Queue) -> type:
    return type(f"{machine.__name__}Over{queue_type.__name__}", (machine,), {attribute: queue_type})


def _exhaustive(queue_type: Queue) -> bool:
    report = check_every_state(blocks=3, max_batch=2, queue_type=queue_type)
    return report.counterexample is not None


def _queue_machine(queue_type: Queue) -> bool:
    return machine_fails(
        _subclass(_stateful("test_stateful_queue").QueueAcrossChanges, "queue_type", queue_type)
    )


def _shared_pool(queue_type: Queue) -> bool:
    return machine_fails(
        _subclass(_stateful("test_stateful_shared_pool").SharedPool, "queue_type", queue_type)
    )


def _check_mode(queue_type: Queue) -> bool:
    return machine_fails(
        _subclass(_stateful("test_stateful_checked").CheckedQueueMisuse, "base_type", queue_type)
    )


@contextmanager
def _contracts_on(queue_type: Queue) -> Iterator[Any]:
    """The contracts module with ``queue_type`` as the queue it checks, restored afterwards."""
    contracts = importlib.import_module("specs.contracts")
    names = vars(contracts)
    saved = names["QUEUE_TYPE"]
    names["QUEUE_TYPE"] = queue_type
    try:
        yield contracts
    finally:
        names["QUEUE_TYPE"] = saved


def _contracts(queue_type: Queue) -> bool:
    tests = importlib.import_module("tests.verification.test_contracts")
    with _contracts_on(queue_type):
        # The harness last: it only combines the single operations, and its domain is largest.
        ordered = sorted(
            tests.CONTRACTS, key=lambda function: function.__name__ == "operations_contract"
        )
        return any(tests._failures(function, first=True)[1] for function in ordered)


def _self_check(queue_type: Queue) -> bool:
    # The queue class the self-check drives is the module's name FreeBlockQueue.
    names = vars(selfcheck)
    saved = names["FreeBlockQueue"]
    names["FreeBlockQueue"] = queue_type
    try:
        return selfcheck.run_self_check(operations=2000).mismatch is not None
    finally:
        names["FreeBlockQueue"] = saved


def _damage(queue_type: Queue) -> bool:
    return check_every_damage(3, checked_over(queue_type)).counterexample is not None


def _damage_machine(queue_type: Queue) -> bool:
    machine = _subclass(
        _checker_layers().DamageLargeQueue, "checked_type", checked_over(queue_type)
    )
    return machine_fails(machine)


def _cross_check(queue_type: Queue) -> bool:
    return cross_check_every_state(3, queue_type).counterexample is not None


def _cross_check_machine(queue_type: Queue) -> bool:
    return machine_fails(
        _subclass(_checker_layers().CheckModeAgainstBase, "queue_type", queue_type)
    )


#: Every layer that runs on a queue class, by name: whether it reports the class's bug.
RUNNERS: dict[str, Callable[[Queue], bool]] = {
    "exhaustive": _exhaustive,
    "queue machine": _queue_machine,
    "shared pool": _shared_pool,
    "check mode": _check_mode,
    "contracts": _contracts,
    "self-check": _self_check,
    "damage": _damage,
    "damage machine": _damage_machine,
    "cross-check": _cross_check,
    "cross-check machine": _cross_check_machine,
}

_MARKS: dict[Cell, str] = {
    "caught": "caught",
    "missed": "**missed**",
    "n/a": "n/a",
    "not run": "not run",
}


def render_table(
    headers: Sequence[str],
    rows: Mapping[str, Sequence[str]],
    layers: Sequence[str],
    cells: Mapping[tuple[str, str], Cell],
) -> list[str]:
    """A matrix as Markdown: a row per bug, a column per layer, the count, the totals.

    ``rows`` maps each bug to its leading cells (after its name), under ``headers`` (the first
    of which heads the names). A bug's count is the layers that caught it of those that ran
    on it; a layer's total, the bugs it caught of those it ran on.
    """
    lines = [
        "| " + " | ".join([*headers, *layers]) + " | Caught by |",
        "|" + " --- |" * (len(headers) + len(layers) + 1),
    ]
    for name, lead in rows.items():
        marks = [_MARKS[cells[layer, name]] for layer in layers]
        ran = [layer for layer in layers if cells[layer, name] in ("caught", "missed")]
        caught = sum(cells[layer, name] == "caught" for layer in ran)
        lines.append(
            f"| `{name}` | " + " | ".join([*lead, *marks]) + f" | {caught} of {len(ran)} |"
        )
    totals = []
    for layer in layers:
        ran = [name for name in rows if cells[layer, name] in ("caught", "missed")]
        caught = sum(cells[layer, name] == "caught" for name in ran)
        totals.append(f"{caught}/{len(ran)}" if ran else _MARKS[cells[layer, next(iter(rows))]])
    lines.append("| **caught** |" + " |" * (len(headers) - 1) + " " + " | ".join(totals) + " | |")
    return lines


def render_explanations(
    names: Sequence[str],
    layers: Sequence[str],
    cells: Mapping[tuple[str, str], Cell],
    reasons: Mapping[tuple[str, str], str],
    heading: str = "###",
) -> list[str]:
    """Each layer's misses, the bugs it cannot reach and those it was not run on, with the reason.

    A reason shared by several bugs of a layer is written once, after their names.
    """
    lines: list[str] = []
    for layer in layers:
        lines += [f"{heading} {layer}", ""]
        written = False
        for cell, says in (
            ("missed", "Misses"),
            ("n/a", "Cannot reach"),
            ("not run", "Not run on"),
        ):
            by_reason: dict[str, list[str]] = {}
            for name in names:
                if cells[layer, name] == cell:
                    reason = reasons.get((layer, name), "NOT EXPLAINED")
                    by_reason.setdefault(reason, []).append(f"`{name}`")
            for reason, bugs in by_reason.items():
                lines.append(f"- {says} {', '.join(bugs)}: {reason}.")
                written = True
        if not written:
            lines.append("Misses nothing.")
        lines.append("")
    return lines
