"""``tox -e bench``: time the queue against the designs a user would copy.

Prints one Markdown table per workload: the median time of each
implementation for each n and, in brackets, its ratio to vLLM's own queue
and block class (the release of ``bench.subjects.VLLM_RELEASE``), executed
from the vllm wheel (below 1.00x is faster;
the post-change design of bench/baselines.py is the reference when no wheel
is found), then the memory per block, the cost of
the check-mode switch when it is off, the machine load (with a warning when
the run was noisy), and the project's targets with the ratios this run
measured, each judged at its worst n. ``--plot FILE.png`` draws the ratios
to the reference (needs the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import verified_queue
from bench.noise import Load, noise_warnings, read_load
from bench.subjects import (
    POST_CHANGE,
    VLLM_RELEASE,
    Subject,
    all_subjects,
    reference_name,
    switch_subjects,
)
from bench.workloads import (
    BLOCK_WITH_VLLM_FIELDS,
    RELEASE_BLOCK,
    Settings,
    WorkloadResult,
    block_memory,
    run_build,
    run_mixed,
    run_stepped,
)

__all__ = ["add_arguments", "format_table", "main", "run", "targets"]

WORKLOADS = ("single", "batch", "prepend", "mixed", "build")

QUICK = Settings(repetitions=5, ops_per_sample=4_000)
FULL = Settings(repetitions=11, ops_per_sample=20_000)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``parser``."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="full",
        action="store_false",
        help="5 repetitions of short samples, about a minute (the default)",
    )
    mode.add_argument(
        "--full", action="store_true", help="11 repetitions of 5x longer samples, for publishing"
    )
    parser.set_defaults(full=False)
    parser.add_argument(
        "--workload",
        action="append",
        choices=WORKLOADS,
        help="run only this workload (repeatable; default: all, then memory and the switch)",
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(part) for part in text.split(",")),
        help="comma-separated values of n (default: 10,50,100,500,1000)",
    )
    parser.add_argument("--repetitions", type=int, help="repetitions per measurement (min 5)")
    parser.add_argument("--queue-size", type=int, help="blocks in the queue (default: 100000)")
    parser.add_argument("--build-size", type=int, help="blocks in the build workload (1000000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mixed stream")
    parser.add_argument(
        "--no-check-mode", action="store_true", help="leave CheckedFreeBlockQueue out"
    )
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the medians here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save every sample here")


def _settings(args: argparse.Namespace) -> Settings:
    base = FULL if args.full else QUICK
    repetitions = base.repetitions if args.repetitions is None else args.repetitions
    if repetitions < 5:
        raise SystemExit("bench: a median needs at least 5 repetitions")
    return Settings(
        sizes=args.sizes or base.sizes,
        queue_size=args.queue_size or base.queue_size,
        build_size=args.build_size or base.build_size,
        repetitions=repetitions,
        ops_per_sample=base.ops_per_sample,
        seed=args.seed,
    )


def format_table(result: WorkloadResult, subjects: Sequence[Subject], reference: str) -> str:
    """Return ``result`` as a Markdown table of medians and ratios to the ``reference`` row.

    Rows the workload did not measure (no ``prepend_n``) are left out; without
    the reference row, the first measured row is the reference.
    """
    subjects = [subject for subject in subjects if subject.name in result.medians]
    if reference not in result.medians:
        reference = subjects[0].name
    base = result.medians[reference]
    sizes = list(base)
    if result.name == "build":
        header = f"| {result.name} ({sizes[0]:,} blocks) | ms | ratio |"
        rule = "|---|---:|---:|"
    else:
        header = f"| {result.name} ({result.unit}) | " + " | ".join(f"n={n}" for n in sizes) + " |"
        rule = "|---|" + "---:|" * len(sizes)
    lines = [header, rule]
    for subject in subjects:
        medians = result.medians[subject.name]
        cells = []
        for n in sizes:
            ratio = medians[n] / base[n]
            if result.name == "build":
                cells += [f"{medians[n] * 1e3:,.1f}", f"{ratio:.2f}x"]
            else:
                cells.append(f"{medians[n] * 1e6:,.2f} ({ratio:.2f}x)")
        lines.append(f"| {subject.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(result: WorkloadResult, name: str, reference: str, n: int) -> float | None:
    if name not in result.medians or reference not in result.medians:
        return None
    mine = result.medians[name].get(n)
    theirs = result.medians[reference].get(n)
    return None if mine is None or theirs is None else mine / theirs


def _worst(
    results: Sequence[WorkloadResult], name: str, reference: str
) -> tuple[float, str] | None:
    """The largest ratio of ``name`` to ``reference`` over the workloads and n, and where."""
    worst: tuple[float, str] | None = None
    for result in results:
        for n in result.medians.get(name, {}):
            ratio = _ratio(result, name, reference, n)
            if ratio is not None and (worst is None or ratio > worst[0]):
                worst = (ratio, f"{result.name}, n={n}")
    return worst


#: Issue 22's budgets for check mode with its default settings, over the production queue of
#: the same build: single operations 2x, batches 3x. (Remove + append, the third budget, is
#: judged by bench/check_mode_cost.py, whose steady state is that workload.)
CHECK_MODE_BUDGETS = {"single": 2.0, "batch": 3.0, "prepend": 3.0}

#: The compiled build's floors: how many times faster than the reference, at every n.
COMPILED_SPEEDUPS = {"single": 3.0, "batch": 2.0, "prepend": 2.0}


def targets(
    results: Sequence[WorkloadResult],
    production: str,
    reference: str = POST_CHANGE,
    memory: Mapping[str, float] | None = None,
) -> list[tuple[str, str, bool]]:
    """Return ``(target, measured, met)`` for each project target this run can judge.

    Ratios are to ``reference``: vLLM's own queue when its wheel was found. A
    target is judged at its worst n, never at a chosen one.
    """
    by_name = {result.name: result for result in results}
    rows: list[tuple[str, str, bool]] = []
    compiled = verified_queue.COMPILED
    worst = _worst(results, production, reference)
    if worst is not None:
        rows.append(
            (
                f"{production} at most 1.00x {reference} on every workload and n",
                f"worst {worst[0]:.2f}x ({worst[1]})",
                worst[0] <= 1.0,
            )
        )
    batch = by_name.get("batch")
    if batch is not None:
        ratio = _ratio(batch, "pre-change vLLM", production, 1000)
        if ratio is not None:
            rows.append(
                (
                    "at least 10x faster than the pre-change design, batch, n=1000",
                    f"{ratio:.1f}x faster",
                    ratio >= 10,
                )
            )
    if compiled:
        for name, floor in COMPILED_SPEEDUPS.items():
            result = by_name.get(name)
            slowest = None if result is None else _worst([result], production, reference)
            if slowest is not None:
                rows.append(
                    (
                        f"compiled at least {floor:g}x faster than {reference}, {name}, every n",
                        f"slowest {1 / slowest[0]:.2f}x faster ({slowest[1]})",
                        1 / slowest[0] >= floor,
                    )
                )
    if memory is not None and BLOCK_WITH_VLLM_FIELDS in memory and RELEASE_BLOCK in memory:
        # Whole bytes: the traced average carries a few thousandths of a byte per block of
        # allocations that are not the blocks (the interpreter's own caches).
        ours, theirs = round(memory[BLOCK_WITH_VLLM_FIELDS]), round(memory[RELEASE_BLOCK])
        rows.append(
            (
                f"a block with {VLLM_RELEASE}'s fields no larger than its KVCacheBlock "
                "(tracemalloc)",
                f"{ours} against {theirs} bytes",
                ours <= theirs,
            )
        )
    checked = "check mode, default period"
    for name, budget in CHECK_MODE_BUDGETS.items():
        result = by_name.get(name)
        over = None if result is None else _worst([result], checked, production)
        if over is not None:
            rows.append(
                (
                    f"{checked}: at most {budget:g}x the production queue, {name}, every n",
                    f"worst {over[0]:.2f}x ({over[1]})",
                    over[0] <= budget,
                )
            )
    return rows


def _describe(settings: Settings, reference: str) -> str:
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    return (
        f"verified_queue {verified_queue.__version__} ({build}), "
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"queue of {settings.queue_size:,} blocks, median of {settings.repetitions} "
        f"interleaved repetitions, GC off while timing; ratios are to the {reference} row"
    )


def _switch_check(settings: Settings) -> WorkloadResult | None:
    """Time the production queue through the switch (off) and directly, or None if it is on."""
    if verified_queue.CHECK_LEVEL != "off":
        print("\nVERIFIED_QUEUE_CHECKS is on: the switch-off comparison is skipped.")
        return None
    subjects = switch_subjects()
    result = run_stepped("single", subjects, replace(settings, sizes=(10, 1000)))
    print()
    print(format_table(result, subjects, reference=subjects[0].name))
    same = verified_queue.FreeBlockQueue is verified_queue.queue.FreeBlockQueue
    print(f"\nswitch off: verified_queue.FreeBlockQueue is the production class itself: {same}")
    return result


def run(args: argparse.Namespace) -> int:
    """Run the selected workloads, print their tables, and save the plot or samples if asked."""
    settings = _settings(args)
    subjects = all_subjects(check_mode=not args.no_check_mode)
    production = subjects[0].name
    reference = reference_name(subjects)
    chosen = args.workload or list(WORKLOADS)
    load_at_start = read_load()
    print(_describe(settings, reference))
    if reference != VLLM_RELEASE:
        print(
            f"({VLLM_RELEASE} is not measured: no vllm wheel found; `tox -e vllm` caches one "
            "in .tox/vllm-wheel, or set VERIFIED_QUEUE_VLLM_WHEEL)"
        )
    results: list[WorkloadResult] = []
    for name in WORKLOADS:
        if name not in chosen:
            continue
        if name == "mixed":
            result = run_mixed(subjects, settings)
        elif name == "build":
            result = run_build(subjects, settings)
        else:
            result = run_stepped(name, subjects, settings)
        results.append(result)
        print()
        print(format_table(result, subjects, reference), flush=True)
    memory: dict[str, float] = {}
    switch: WorkloadResult | None = None
    if args.workload is None:
        memory = block_memory()
        print()
        print("| block type | bytes per block (tracemalloc) |")
        print("|---|---:|")
        for label, size in memory.items():
            print(f"| {label} | {size:.0f} |")
        switch = _switch_check(settings)
    load = Load(load_at_start, read_load(), os.cpu_count() or 1)
    warnings = noise_warnings(load, results, production, reference)
    print(f"\n{load.describe()}")
    for warning in warnings:
        print(f"WARNING, noisy run: {warning}")
    print("\n| target | measured | met |")
    print("|---|---|---|")
    for goal, measured, met in targets(results, production, reference, memory):
        print(f"| {goal} | {measured} | {'yes' if met else 'NO'} |")
    if args.json is not None:
        payload = {
            "description": _describe(settings, reference),
            "compiled": verified_queue.COMPILED,
            "workloads": {r.name: {"unit": r.unit, "samples": r.samples} for r in results},
            "bytes_per_block": memory,
            "switch_off": None if switch is None else switch.samples,
            "load": {"start": load.start, "end": load.end, "cores": load.cores},
            "noise_warnings": warnings,
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    if args.plot is not None:
        from bench.plot import draw  # noqa: PLC0415 -- matplotlib is an optional extra

        title = f"{_describe(settings, reference)}\n{load.describe()}"
        if warnings:
            title += " (noisy run)"
        draw(results, subjects, args.plot, title=title, reference=reference)
        print(f"\nplot written to {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with the options in ``argv`` (the command line when ``None``)."""
    parser = argparse.ArgumentParser(prog="python -I bench/__main__.py", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
