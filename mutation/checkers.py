"""Mutation testing of check mode, the error builders and the block pool, one module at a time.

The quick loop for one module: ``mutation/run.py`` (``tox -e mutation``) mutates the whole
package with the whole suite; this mutates one module with the few test files named for it.
The modules: ``invariants.py``, ``checked.py``, ``_diagnosis.py`` (check mode's diagnosis),
``_messages.py`` (the error builders ``queue.py`` shares with check mode) and the block
pool's ``kvcache/pool.py``,
``kvcache/_repair.py`` (its repairs after an interrupt), ``kvcache/keys.py`` and
``vllm/pool_checks.py`` (vLLM's pool checked from its queue). ``tox -e
mutation-checkers`` runs this from an empty directory. For each module it copies the checkout
there (as ``mutation/run.py`` does), writes a ``setup.cfg`` whose ``[mutmut]``
section mutates that module only and runs the tests that exercise it, runs ``mutmut run``, and
then fails unless

- at least the module's bar (``BARS``, or ``--threshold`` for every module) in percent of
  its mutants are killed (a failing test, a timeout or a crash), and
- every mutant that is not killed is named in ``docs/mutation-survivors.md`` with the reason
  it survives.

The test selection is narrow on purpose (a mutant of a checker is run against the tests of
the checkers, not the whole suite, and the slowest randomized tests of ``invariants.py`` are
left out), which keeps a run of ``invariants.py`` and ``checked.py`` within about half an hour
on two cores, and of each kvcache module within minutes (docs/measurements.md). A mutant these
tests miss counts as a survivor even if another test would kill it, so the score is a lower
bound for the whole suite.

Usage: ``python mutation/checkers.py [--threshold PERCENT] [--module NAME ...]
[--max-children N]`` from any empty working directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("mutation_run", HERE / "run.py")
if _spec is None or _spec.loader is None:
    raise SystemExit(f"cannot load {HERE / 'run.py'}, which this script shares its helpers with")
queue_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(queue_run)

#: Each module, the tests whose failure kills its mutants, and tests left out of them.
MODULES: dict[str, tuple[str, list[str], list[str]]] = {
    "invariants": (
        "verified_queue/invariants.py",
        [
            "tests/checks/test_invariants.py",
            "tests/checks/test_heap_oracle_exhaustive.py",
            "tests/checks/test_heap_oracle_random.py",
            "tests/checks/test_heap_oracle_weakened.py",
            "tests/checks/test_checker_diagnostics.py",
            "tests/checks/test_messages.py",
        ],
        # The randomized workloads and the 20,000-block ring cost a minute per surviving
        # mutant under mutmut's trampolines; the exhaustive oracle comparison stays in.
        [
            "tests/checks/test_heap_oracle_random.py::test_checkers_agree_on_random_heaps",
            "tests/checks/test_heap_oracle_exhaustive.py::test_relabelling_never_changes_a_verdict",
            "tests/checks/test_invariants.py::test_no_false_positive",
            "tests/checks/test_invariants.py::test_checkers_end_on_long_ring",
        ],
    ),
    "checked": (
        "verified_queue/checked.py",
        [
            "tests/checks/test_checked_results.py",
            "tests/checks/test_checked_misuse.py",
            "tests/checks/test_checked_damage.py",
            "tests/checks/test_checked_atomicity.py",
            "tests/checks/test_checked_diagnostics.py",
            "tests/checks/test_checked_o1_diagnostics.py",
            "tests/checks/test_messages.py",
            "tests/checks/test_invariants.py",
            "tests/checks/test_fault_matrix.py",
            "tests/checks/test_heap_oracle_exhaustive.py",
            "tests/checks/test_heap_oracle_random.py",
            "tests/checks/test_heap_oracle_weakened.py",
        ],
        # As for invariants.py: the exhaustive oracle comparison, full_check's included, stays in.
        [
            "tests/checks/test_heap_oracle_random.py::test_checkers_agree_on_random_heaps",
            "tests/checks/test_heap_oracle_exhaustive.py::test_relabelling_never_changes_a_verdict",
        ],
    ),
    # check mode's diagnosis, moved out of checked.py: the same tests kill its mutants.
    "diagnosis": (
        "verified_queue/_diagnosis.py",
        [
            "tests/checks/test_checked_results.py",
            "tests/checks/test_checked_misuse.py",
            "tests/checks/test_checked_damage.py",
            "tests/checks/test_checked_atomicity.py",
            "tests/checks/test_checked_diagnostics.py",
            "tests/checks/test_checked_o1_diagnostics.py",
            "tests/checks/test_messages.py",
            "tests/checks/test_fault_matrix.py",
        ],
        [],
    ),
    # The error builders the queue and check mode share, moved out of queue.py.
    "messages": (
        "verified_queue/_messages.py",
        [
            "tests/queue/test_queue.py",
            "tests/queue/test_queue_diagnostics.py",
            "tests/queue/test_count_written.py",
            "tests/queue/test_block.py",
            "tests/checks/test_checked_misuse.py",
        ],
        [],
    ),
    # The block pool and its keys: their unit tests and their model-based layers.
    "pool": (
        "verified_queue/kvcache/pool.py",
        [
            "tests/kvcache/test_pool_caching.py",
            "tests/kvcache/test_pool_misuse.py",
            "tests/kvcache/test_pool_ownership.py",
            "tests/kvcache/test_pool_model.py",
            "tests/kvcache/test_pool_interrupts.py",
            # Not test_pool_nested_interrupts.py: every pair of checkpoints per mutant made a
            # run of pool.py take hours (stopped at 119 of 593 mutants in 25 minutes); it is
            # the repair module's selection, where its runs are reached.
            "tests/kvcache/test_pool_machine.py",
            "tests/kvcache/test_pool_contracts.py",
            # The pool's __getstate__ and __setstate__.
            "tests/queue/test_copy_pickle.py",
            # Not tests/checks/test_trace.py: the trace level records the first frame outside
            # the library, which under mutmut is its trampoline, so that its claims fail on
            # the unmutated pool. test_pool_misuse.py checks the pool's double-free note instead.
        ],
        [],
    ),
    # What finishes a pool call an interrupt cut short: reached only by injected exceptions.
    "repair": (
        "verified_queue/kvcache/_repair.py",
        [
            "tests/kvcache/test_pool_interrupts.py",
            "tests/kvcache/test_pool_nested_interrupts.py",
            # The refusals whose undo the repairs run: a P3-broken eviction, a failed append.
            "tests/kvcache/test_pool_misuse.py",
        ],
        [],
    ),
    # vLLM's pool checked from its queue: the machine and the replays run on vLLM's own
    # block_pool.py of each pinned wheel (tox -e mutation-checkers fetches them).
    "pool_checks": (
        "verified_queue/vllm/pool_checks.py",
        ["tests/vllm/test_pool_checks.py"],
        [],
    ),
    "keys": (
        "verified_queue/kvcache/keys.py",
        [
            "tests/kvcache/test_keys.py",
            "tests/kvcache/test_key_layer.py",
            "tests/kvcache/test_pool_machine.py",
        ],
        [],
    ),
}


#: The modules a run without ``--module`` mutates: those whose survivors are all explained.
DEFAULT_MODULES = ("invariants", "checked", "diagnosis", "messages", "pool", "keys")

#: The least percentage of mutants each module's tests must kill. The kvcache modules are
#: smaller, so each equivalent mutant weighs more: keys.py's five are 2.1% of its 241.
BARS = {"invariants": 98.0, "checked": 98.0, "diagnosis": 98.0, "messages": 98.0}
BARS |= {"pool": 97.0, "keys": 97.0}
#: A target not met yet: the one run of _repair.py (docs/measurements.md) left 19 survivors of
#: 294, before the tests added on its evidence; so it is not in DEFAULT_MODULES.
BARS |= {"repair": 95.0}
BARS |= {"pool_checks": 98.0}


def configure(work: Path, module: str) -> None:
    """Write the scratch copy's ``setup.cfg``: mutate ``module`` only, with its tests."""
    path, tests, left_out = MODULES[module]
    selection = "".join(f"\n    {test}" for test in tests)
    deselected = "".join(f"\n    --deselect={test}" for test in left_out)
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths = verified_queue/\n"
        f"only_mutate = {path}\n"
        "also_copy =\n    specs/\n    conformance/\n    tests/\n    README.md\n"
        f"pytest_add_cli_args_test_selection ={selection}\n"
        + (f"pytest_add_cli_args ={deselected}\n" if left_out else ""),
        encoding="utf-8",
    )


def run_module(work: Path, module: str, threshold: float, max_children: int | None) -> bool:
    """Run mutmut on ``module`` in ``work``; print the score; whether it passes the bar."""
    work.mkdir()
    queue_run.copy_checkout(work)
    configure(work, module)
    children = [] if max_children is None else ["--max-children", str(max_children)]
    subprocess.run([sys.executable, "-m", "mutmut", "run", *children], check=True, cwd=work)
    return queue_run.judge(
        queue_run.statuses(queue_run.mutmut(work, "results", "--all", "true")), threshold
    )


def main(argv: list[str] | None = None) -> int:
    """Run the mutation pass of each module; return 0 when every score and survivor list passes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threshold",
        type=float,
        help="minimum percent killed, for every module (default: each module's bar in BARS)",
    )
    parser.add_argument(
        "--module",
        choices=sorted(MODULES),
        action="append",
        help=f"default: {', '.join(DEFAULT_MODULES)}",
    )
    parser.add_argument(
        "--max-children",
        type=int,
        help="mutants tested at once (default: mutmut's, one per core)",
    )
    args = parser.parse_args(argv)
    work = Path.cwd()
    if any(work.iterdir()):
        raise SystemExit(f"run this from an empty directory, not {work}")
    results = [
        run_module(
            work / module,
            module,
            BARS[module] if args.threshold is None else args.threshold,
            args.max_children,
        )
        for module in args.module or DEFAULT_MODULES
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
