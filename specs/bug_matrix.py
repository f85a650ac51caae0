"""Which verification layer catches which planted bug: the matrix of ``docs/bug-matrix.md``.

Every planted bug of :data:`specs.planted_bugs.CATALOGUE` is run against every layer, each at
a small size so the whole matrix costs about a minute of CPU:

- ``exhaustive``: :func:`specs.exhaustive.check_every_state` over 3 blocks, batches up to 2
  (the default run's own test uses 6 blocks, batches up to 3);
- ``queue machine``, ``shared pool``, ``check mode``: the Hypothesis machines of
  ``tests/verification/test_stateful.py``, derandomized, with :data:`MACHINE_EXAMPLES`
  examples of up to :data:`MACHINE_STEPS` steps (their planted-bug tests use 300 examples
  of up to 40 steps);
- ``contracts``: the CrossHair contracts of :mod:`specs.contracts`, evaluated concretely on
  every input of their domains, as ``tests/verification/test_contracts.py`` does;
- ``self-check``: :func:`verified_queue.cli.selfcheck.run_self_check` with 2,000 operations;

and two layers too slow for the default run, whose columns are recorded in
:data:`RECORDED` with the date and commit they were measured at:

- ``proof``: :mod:`specs.proof` (z3) on the bug's method, for the six operations it covers:
  caught when z3 refutes an obligation or the bounded search finds a counterexample;
- ``crosshair``: ``tox -e crosshair-planted``, CrossHair over the contracts.

A layer that misses a bug must say why in :data:`MISSES`; ``tests/verification/test_bug_matrix.py``
recomputes the cheap columns, requires each bug to be caught by at least three layers and
every miss to be explained, and compares ``docs/bug-matrix.md`` with :func:`render`.

``python -m specs.bug_matrix --write docs/bug-matrix.md`` regenerates the page;
``--proof`` recomputes the proof column and prints it (z3 needed).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import settings

from specs.exhaustive import check_every_state
from specs.planted_bugs import CATALOGUE, KINDS
from specs.planted_bugs.keys import planted
from specs.planted_bugs.kvcache import CLIENT_CATALOGUE, CLIENT_KINDS, ClientBug
from verified_queue.cli import selfcheck
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "CHEAP_LAYERS",
    "CLIENT_LAYERS",
    "LAYERS",
    "MACHINE_EXAMPLES",
    "MACHINE_STEPS",
    "MISSES",
    "RECORDED",
    "caught",
    "client_caught",
    "compute",
    "compute_client",
    "main",
    "render",
]

Queue = type[FreeBlockQueue[Any]]

#: The layers whose column the default run recomputes, in the page's order.
CHEAP_LAYERS = (
    "exhaustive",
    "queue machine",
    "shared pool",
    "check mode",
    "contracts",
    "self-check",
)

#: Every layer, in the page's order.
LAYERS = (*CHEAP_LAYERS, "proof", "crosshair")

#: The machine columns' examples and steps: ``BUG_HUNT`` of the stateful tests, shorter.
MACHINE_EXAMPLES, MACHINE_STEPS = 100, 30

#: The operations :mod:`specs.proof` covers.
PROVED_OPERATIONS = ("popleft", "remove", "append", "popleft_n", "append_n", "prepend_n")

_CHECK_MODE_OWN = (
    "check mode answers this itself, from its membership or its own walk, without calling the "
    "base method the bug is in"
)
_PROOF_SCOPE = "the proof covers the six linking operations only, not {operation}"
_UNTRANSLATED = (
    "written with a list display (`[]`) the translator does not read, so the proof stops with "
    "Unsupported: it refuses to certify the method, but finds no counterexample"
)

#: Why each layer misses each bug it misses: (layer, bug) -> reason.
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
    ("proof", "popleft_n_reuses_buffer"): (
        "the translator does not read `popped.clear()`, so the proof stops with Unsupported "
        "without finding the defect; and a list shared between two calls is outside a proof "
        "that follows one call"
    ),
    ("proof", "append_n_wrong_neighbour"): _UNTRANSLATED,
    ("proof", "prepend_n_reversed"): _UNTRANSLATED,
}
for _layer, _name in list(MISSES):
    if _layer == "contracts":
        MISSES["crosshair", _name] = (
            "CrossHair explores the same contracts, which hold of this bug on every input ("
            + MISSES[_layer, _name]
            + "); run against its contract it found no counterexample"
        )
for _name, _bug in CATALOGUE.items():
    if _bug.operation not in PROVED_OPERATIONS:
        MISSES["proof", _name] = _PROOF_SCOPE.format(operation=f"`{_bug.operation}`")

#: Columns measured outside the default run: layer -> (when and where, bug -> caught).
RECORDED: dict[str, tuple[str, dict[str, bool]]] = {
    "proof": (
        "measured 2026-12-03 with `python -m specs.bug_matrix --proof` (z3 5.4, 2 s per "
        "obligation; a planted loop that is the production loop gets its invariant) on the "
        "catalogue of commit 9fe302d. `popleft_n_shares_empty_result` is refuted on the goal "
        "'returns a list': the translator does not take the module-level list it returns for "
        "a new list",
        {
            "popleft_n_off_by_one": True,
            "popleft_n_allows_negative": True,
            "sentinel_returned": True,
            "append_skips_double_free_check": True,
            "append_guard_reads_next_only": True,
            "prepend_n_guard_reads_prev_only": True,
            "remove_accepts_sentinel": True,
            "iter_blocks_after_checks_lazily": False,
            "iter_blocks_after_guard_reads_next_only": False,
            "append_n_not_atomic": True,
            "prepend_n_not_atomic": True,
            "append_n_undo_clears_next_only": True,
            "prepend_n_undo_skips_rejoin": True,
            "popleft_n_shares_empty_result": True,
            "popleft_n_reuses_buffer": False,
            "get_all_free_blocks_reuses_list": False,
            "constructor_not_atomic_for_iterables": False,
            "constructor_skips_link_check": False,
            "popleft_leaves_links": True,
            "append_n_wrong_neighbour": False,
            "prepend_n_reversed": False,
            "remove_forgets_count": True,
            "prepend_n_counts_before_linking": True,
            "iter_blocks_after_yields_cursor": False,
            "iter_yields_head_sentinel": False,
            "contains_compares_by_value": False,
        },
    ),
    "crosshair": (
        "measured 2026-12-03 with `tox -e crosshair-planted`'s test (specs/crosshair_run.py "
        "--first, 6 CPU-s per condition, the contract of the overridden method first, then the "
        "others in turn) on commit a6d5658: all 26 bugs in 103 s on 2 shared cores. Every one "
        "gave a counterexample; `append_n_wrong_neighbour` and `prepend_n_reversed` only in "
        "operations_contract (their own contracts found none in 6 s)",
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
            "prepend_n_undo_skips_rejoin": True,
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


def _stateful() -> Any:
    """The module of the stateful tests, where the machines live (imported only when needed)."""
    return importlib.import_module("tests.verification.test_stateful")


def _run_machine(machine: type) -> bool:
    """Whether the machine fails (reports the bug) in its shorter planted-bug run."""
    stateful = _stateful()
    shorter = settings(
        stateful.BUG_HUNT, max_examples=MACHINE_EXAMPLES, stateful_step_count=MACHINE_STEPS
    )
    try:
        stateful.run_machine(machine, settings=shorter)
    except Exception:  # any failure of the run is the machine reporting the bug
        return True
    return False


def _queue_machine(queue_type: Queue) -> bool:
    stateful = _stateful()
    machine = stateful._machine_for(stateful.QueueAgainstModel, queue_type)
    return _run_machine(machine)


def _shared_pool(queue_type: Queue) -> bool:
    stateful = _stateful()
    machine = stateful._machine_for(stateful.SharedPool, queue_type)
    return _run_machine(machine)


def _check_mode(queue_type: Queue) -> bool:
    stateful = _stateful()
    machine = type(
        f"CheckedQueueMisuseOver{queue_type.__name__}",
        (stateful.CheckedQueueMisuse,),
        {"base_type": queue_type},
    )
    return _run_machine(machine)


def _exhaustive(queue_type: Queue) -> bool:
    return (
        check_every_state(blocks=3, max_batch=2, queue_type=queue_type).counterexample is not None
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


_RUNNERS: dict[str, Callable[[Queue], bool]] = {
    "exhaustive": _exhaustive,
    "queue machine": _queue_machine,
    "shared pool": _shared_pool,
    "check mode": _check_mode,
    "contracts": _contracts,
    "self-check": _self_check,
}


def caught(layer: str, bug: str) -> bool:
    """Whether the cheap ``layer`` reports the planted bug ``bug``.

    Runtime complexity: one run of the layer at the small size of this module's docstring
    """
    return _RUNNERS[layer](CATALOGUE[bug].queue_type)


def compute(layers: Sequence[str] = CHEAP_LAYERS) -> dict[tuple[str, str], bool]:
    """Run every planted bug against each of ``layers``: (layer, bug) -> caught.

    Runtime complexity: len(layers) * len(CATALOGUE) layer runs
    """
    return {(layer, bug): caught(layer, bug) for layer in layers for bug in CATALOGUE}


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

_KEY_LAYERS_ONLY_KEYS = "the key layers compute keys and never call the pool"
_CONTRACTS_OPAQUE_KEYS = (
    "the contracts take keys as opaque values: a key function that merges or splits prefixes "
    "leaves every pool call within its contract"
)
for _name, _client_bug in CLIENT_CATALOGUE.items():
    if _client_bug.kind == "pool":
        MISSES["key property", _name] = _KEY_LAYERS_ONLY_KEYS
        MISSES["key enumeration", _name] = _KEY_LAYERS_ONLY_KEYS
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
        max_examples=MACHINE_EXAMPLES,
        stateful_step_count=MACHINE_STEPS,
        derandomize=True,
        database=None,
        phases=_stateful().BUG_HUNT.phases,
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
        tests.PROPERTY_RUN, derandomize=True, database=None, phases=_stateful().BUG_HUNT.phases
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

    A layer a bug cannot reach (a key layer for a pool bug) is not run: it misses, as
    :data:`MISSES` says. A key bug is planted in the keys module for the run.

    Runtime complexity: one run of the layer
    """
    if (layer, bug) in MISSES:
        return False
    planted_bug = CLIENT_CATALOGUE[bug]
    with planted(planted_bug.keys_bug):
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


def prove_column() -> dict[str, bool]:
    """The proof column: for each bug of a proved operation, whether z3 refutes it.

    Caught when an obligation gets a counterexample, or, where z3 runs out of time or a loop
    invariant fails to hold, when the bounded search (queues of up to 3 blocks, loops run
    rather than cut) finds a concrete counterexample. A planted loop that is the production
    loop gets the production loop's invariant, as ``tests/verification/test_proof.py`` does.
    A method the translator cannot read (:class:`specs.proof.Unsupported`) is missed: the
    proof refuses to certify it without finding the defect.
    """
    proof = importlib.import_module("specs.proof")
    column: dict[str, bool] = {}
    for name, bug in CATALOGUE.items():
        operation = bug.operation
        if operation not in PROVED_OPERATIONS:
            column[name] = False
            continue
        invariants = dict(proof.LOOP_INVARIANTS)
        production = invariants.get((f"FreeBlockQueue.{operation}", 0))
        if production is not None:
            invariants[f"{bug.queue_type.__name__}.{operation}", 0] = production
        for helper in ("_unlink_run_next_only", "_unlink_run_without_rejoin"):
            invariants[helper, 0] = proof.walk_back("before_run")
        try:
            results = proof.prove(
                [operation],
                bug.queue_type,
                stop_at_first_failure=True,
                timeout_ms=2_000,
                loop_invariants=invariants,
            )
            found = results[-1].verdict == "counterexample" or (
                results[-1].verdict != "proved"
                and proof.find_counterexample(operation, bug.queue_type) is not None
            )
            print(f"{name}: {results[-1].verdict}: {results[-1].name}", file=sys.stderr)
        except proof.Unsupported as error:
            print(f"{name}: not translated: {error}", file=sys.stderr)
            found = False
        column[name] = found
    return column


def _mark(value: bool) -> str:
    return "caught" if value else "**missed**"


def render(
    cheap: dict[tuple[str, str], bool], client: dict[tuple[str, str], bool] | None = None
) -> str:
    """The page ``docs/bug-matrix.md``: the matrices, then every layer's misses with the reason.

    ``client`` is the pool and key matrix (:func:`compute_client`, run when not given).

    Runtime complexity: O(len(LAYERS) * len(CATALOGUE)), and the client matrix if not given
    """
    if client is None:
        client = compute_client()
    matrix = dict(cheap)
    for layer, (_when, column) in RECORDED.items():
        for name in CATALOGUE:
            matrix[layer, name] = column.get(name, False)
    lines = [
        "# Planted bugs by layer",
        "",
        "<!-- Generated by `python -m specs.bug_matrix --write docs/bug-matrix.md`; "
        "`tests/verification/test_bug_matrix.py` fails when this page and the layers disagree. -->",
        "",
        f"`specs/planted_bugs/` plants {len(CATALOGUE)} realistic single-point bugs, each a "
        "subclass of `FreeBlockQueue` whose one overridden method copies the production method "
        "with one defect (`tests/verification/test_planted_bugs.py` pins each bug's symptom, "
        "and that it "
        "shows no other bug's). This page runs every bug against every verification layer of "
        "[Verification](verification.md). The cheap columns are recomputed by the default test "
        "run at small sizes: the exhaustive check over 3 blocks with batches up to 2; the "
        "three Hypothesis machines with 100 examples of up to 30 steps, derandomized; the "
        "contracts evaluated on their whole domains; the self-check with 2,000 operations.",
        "",
        "| Kind | Bugs | What goes wrong |",
        "| --- | --- | --- |",
    ]
    for kind, meaning in KINDS.items():
        count = sum(1 for bug in CATALOGUE.values() if bug.kind == kind)
        lines.append(f"| {kind} | {count} | {meaning} |")
    lines += ["", "## The matrix", ""]
    lines.append("| Bug | Kind | Method | " + " | ".join(LAYERS) + " | Caught by |")
    lines.append("| --- | --- | --- |" + " --- |" * len(LAYERS) + " --- |")
    for name, bug in CATALOGUE.items():
        row = [_mark(matrix[layer, name]) for layer in LAYERS]
        total = sum(matrix[layer, name] for layer in LAYERS)
        lines.append(
            f"| `{name}` | {bug.kind} | `{bug.operation}` | "
            + " | ".join(row)
            + f" | {total} of {len(LAYERS)} |"
        )
    totals = [sum(matrix[layer, name] for name in CATALOGUE) for layer in LAYERS]
    lines.append(
        "| **caught** | | | " + " | ".join(f"{total}/{len(CATALOGUE)}" for total in totals) + " | |"
    )
    lines += ["", "## Recorded columns", ""]
    for layer, (when, _column) in RECORDED.items():
        lines.append(f"- `{layer}`: {when}.")
    lines += ["", "## What each layer misses, and why", ""]
    for layer in LAYERS:
        missed = [name for name in CATALOGUE if not matrix[layer, name]]
        lines.append(f"### {layer}")
        lines.append("")
        if not missed:
            lines.append("Misses nothing.")
        for name in missed:
            lines.append(f"- `{name}`: {MISSES.get((layer, name), 'NOT EXPLAINED')}.")
        lines.append("")
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
        "(`tests/kvcache/test_pool_machine.py`: the Hypothesis machine with 100 examples of "
        "up to 30 steps, caching on and off, and every sequence of up to 3 steps from two "
        "starting states), the pool's calls against their contracts "
        "(`specs/pool_contracts.py`, 200 random engines of 30 steps) and the keys against "
        "their meanings (`tests/kvcache/test_key_layer.py`: the properties and the "
        "enumeration).",
        "",
        "| Kind | Bugs | What goes wrong |",
        "| --- | --- | --- |",
    ]
    for kind, meaning in CLIENT_KINDS.items():
        count = sum(1 for bug in CLIENT_CATALOGUE.values() if bug.kind == kind)
        lines.append(f"| {kind} | {count} | {meaning} |")
    lines += ["", "| Bug | Kind | Function | " + " | ".join(CLIENT_LAYERS) + " | Caught by |"]
    lines.append("| --- | --- | --- |" + " --- |" * len(CLIENT_LAYERS) + " --- |")
    for name, bug in CLIENT_CATALOGUE.items():
        row = [_mark(client[layer, name]) for layer in CLIENT_LAYERS]
        total = sum(client[layer, name] for layer in CLIENT_LAYERS)
        lines.append(
            f"| `{name}` | {bug.kind} | `{bug.operation}` | "
            + " | ".join(row)
            + f" | {total} of {len(CLIENT_LAYERS)} |"
        )
    totals = [sum(client[layer, name] for name in CLIENT_CATALOGUE) for layer in CLIENT_LAYERS]
    lines.append(
        "| **caught** | | | "
        + " | ".join(f"{total}/{len(CLIENT_CATALOGUE)}" for total in totals)
        + " | |"
    )
    lines += ["", "### What the pool and key layers miss, and why", ""]
    for layer in CLIENT_LAYERS:
        missed = [name for name in CLIENT_CATALOGUE if not client[layer, name]]
        if missed:
            lines.append(
                f"- {layer}: "
                + ", ".join(f"`{name}`" for name in missed)
                + ": "
                + "; ".join(sorted({MISSES.get((layer, name), "NOT EXPLAINED") for name in missed}))
                + "."
            )
        else:
            lines.append(f"- {layer}: misses nothing.")
    lines.append("")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print or ``--write`` the page; ``--proof`` prints the proof column."""
    parser = argparse.ArgumentParser(prog="python -m specs.bug_matrix", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH")
    parser.add_argument("--proof", action="store_true", help="recompute the proof column")
    args = parser.parse_args(argv)
    if args.proof:
        for name, found in prove_column().items():
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
