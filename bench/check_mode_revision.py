"""``python -I bench/check_mode_revision.py [REV]``: this build's check mode against ``REV``'s.

A change to check mode that must not cost speed (the operations' shared start and
end folded into helpers, say) is measured side by side in one process: the
installed ``CheckedFreeBlockQueue`` (``--trace``: ``TracedFreeBlockQueue``), and the
one of git revision ``REV`` (default ``HEAD``), its ``checked.py``, ``_diagnosis.py``,
``traced.py`` and ``_trace_records.py`` read with ``git show`` and executed as fresh
modules beside the installed package, whose other modules they import. Both run on
the installed production queue. The workloads are the
benchmark's ``single``, ``batch`` and ``prepend`` (``bench/workloads.py``) and the
steady state of ``bench/check_mode_cost.py`` (evict and free, hit and free: a
popleft, a remove and two appends per step), interleaved in rotating order with the
collector off; each row gives the median and the ratio to ``REV`` (above 1.00x:
this build is slower).

Check mode is built with ``--full-check-every`` (default ``0``, the O(1) checks of
every operation alone, where a change to them shows most; ``-1`` for the default
period). Check mode always runs interpreted, so the comparison holds on either build.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench/, beside the wheel

import verified_queue
from bench.check_mode_cost import OPERATIONS_PER_STEP, steady_state
from bench.revision import load_modules
from bench.run import FULL, QUICK, format_table
from bench.subjects import BenchBlock, Subject
from bench.workloads import Settings, WorkloadResult, run_stepped
from verified_queue import checked as installed_checked
from verified_queue import traced as installed_traced

__all__ = ["load_check_mode", "main", "measure"]

#: Check mode's modules a revision holds, loaded in this order (each imports those before it).
CHECK_MODE_MODULES = ("_diagnosis", "checked", "_trace_records", "traced")
#: The installed modules that hold the two classes timed.
INSTALLED = {"checked": installed_checked, "traced": installed_traced}


def load_check_mode(revision: str) -> dict[str, types.ModuleType]:
    """Execute check mode of ``revision`` as fresh modules (:func:`bench.revision.load_modules`)."""
    loaded = load_modules(revision, CHECK_MODE_MODULES)
    missing = [name for name in CHECK_MODE_MODULES if name not in loaded]
    if missing:
        raise SystemExit(f"git revision {revision!r} has no {', '.join(missing)}")
    return loaded


def _builder(queue_class: type[Any], period: int | None) -> Callable[[list[Any]], Any]:
    def build(blocks: list[Any]) -> Any:
        return queue_class(blocks, full_check_every=period)

    return build


def run_steady_state(subjects: list[Subject], settings: Settings) -> WorkloadResult:
    """Time check_mode_cost's steady state (remove + append) on a queue of each size per subject.

    The unit is one operation; every subject runs the very same blocks.
    """
    result = WorkloadResult("remove + append", "µs per operation")
    for n in settings.sizes:
        steps = max(n, settings.ops_per_sample // OPERATIONS_PER_STEP)
        positions = random.Random(settings.seed).sample(range(n), n)
        prepared = []
        for subject in subjects:
            blocks = [subject.new_block(index) for index in range(n)]
            hits = [blocks[positions[step % n]] for step in range(steps)]
            queue: Any = subject.new_queue(blocks)  # a checked queue: what steady_state takes
            prepared.append((subject.name, queue, hits))
        for repetition in range(settings.repetitions):
            shift = repetition % len(prepared)
            for name, queue, hits in prepared[shift:] + prepared[:shift]:
                steady_state(queue, hits[:n])  # warm the blocks this sample touches
                gc.collect()
                gc.disable()
                try:
                    seconds = steady_state(queue, hits)
                finally:
                    gc.enable()
                result.record(name, n, seconds / (steps * OPERATIONS_PER_STEP))
    result.finish()
    return result


def measure(
    revision: str, settings: Settings, period: int | None, trace: bool = False
) -> tuple[list[WorkloadResult], list[Subject]]:
    """Time the installed check mode (or trace level) and the one at ``revision``."""
    module, name = (
        ("traced", "TracedFreeBlockQueue") if trace else ("checked", "CheckedFreeBlockQueue")
    )
    old = getattr(load_check_mode(revision)[module], name)
    new = getattr(INSTALLED[module], name)
    level = "trace level" if trace else "check mode"
    subjects = [
        Subject(f"{level} at {revision}", BenchBlock, _builder(old, period)),
        Subject(f"{level}, this build", BenchBlock, _builder(new, period)),
    ]
    results = [
        run_stepped(workload, subjects, settings) for workload in ("single", "batch", "prepend")
    ]
    results.append(run_steady_state(subjects, settings))
    return results, subjects


def main(argv: list[str] | None = None) -> int:
    """Print one table per workload: medians, and ratios to the revision's check mode."""
    parser = argparse.ArgumentParser(
        prog="python -I bench/check_mode_revision.py", description=__doc__
    )
    parser.add_argument("revision", nargs="?", default="HEAD", help="a git revision (HEAD)")
    parser.add_argument("--full", action="store_true", help="the benchmark's full settings")
    parser.add_argument(
        "--full-check-every", type=int, default=0, help="the period (0: none; -1: the default)"
    )
    parser.add_argument("--trace", action="store_true", help="time the trace level instead")
    parser.add_argument("--repetitions", type=int, help="samples per subject (a noisy machine)")
    arguments = parser.parse_args(argv)
    settings = FULL if arguments.full else QUICK
    if arguments.repetitions is not None:
        settings = dataclasses.replace(settings, repetitions=arguments.repetitions)
    period = None if arguments.full_check_every < 0 else arguments.full_check_every
    print(
        f"verified_queue {verified_queue.__version__}, queue compiled: {verified_queue.COMPILED}, "
        f"Python {sys.version.split()[0]}, full_check_every={period}, "
        f"{settings.repetitions} repetitions, interleaved, GC off, median"
    )
    results, subjects = measure(arguments.revision, settings, period, arguments.trace)
    for result in results:
        print(format_table(result, subjects, subjects[0].name), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
