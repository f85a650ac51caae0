"""``tox -e bench-vllm``: what each ``VERIFIED_QUEUE_VLLM`` mode costs inside vLLM's own code.

The other benchmarks time the queue alone; this one times it where vLLM uses it, in the
real vLLM 0.34.0 (its wheel installed beside the CPU build of torch, as ``tox -e
vllm-engine`` installs it), with vLLM's own ``FreeKVCacheBlockQueue`` as the reference
and each queue the plugin (:mod:`verified_queue.vllm.plugin`) can install beside it:

* ``production``: :class:`verified_queue.queue.FreeBlockQueue`;
* ``checked``: :class:`~verified_queue.vllm.checked.VllmCheckedFreeBlockQueue`, with its
  default period, as the plugin builds it;
* ``trace``: :class:`~verified_queue.vllm.traced.VllmTracedFreeBlockQueue`, with vLLM's
  KV-cache core passed over as the plugin's trace mode does.

The compiled build links :class:`verified_queue.Block` subclasses only, so there every
one of ours links the block class the plugin derives from vLLM's
(:func:`~verified_queue.vllm.plugin.derive_block_class`), as it does in a vLLM process.

Two workloads:

* ``pool``: the workload of vLLM's own block-pool benchmark
  (``benchmarks/benchmark_block_pool.py`` in its sdist), restated: one
  ``BlockPool(num_gpu_blocks=100000, enable_caching=True, hash_block_size=16)`` per queue,
  and as one step ``get_new_blocks(n)``, then ``free_blocks`` of the blocks it returned,
  for n = 10, 100 and 1000. vLLM's script times the two calls apart; here the pair is timed
  whole over a sample of many steps, so that no timer call sits inside a step.
* ``scheduler``: vLLM's ``Scheduler`` and ``KVCacheManager`` serving a few hundred
  requests with shared prefixes to completion (:mod:`bench.vllm_scheduler`).

Each pool (or scheduler) is built while ``vllm.v1.core.block_pool`` binds the class under
test to ``FreeKVCacheBlockQueue`` (and, compiled, the derived block to ``KVCacheBlock``);
vLLM's own names are put back as soon as it is built (:func:`swapped`). Method as in
``bench/workloads.py``: every queue in one process, interleaved (each repetition times each
once, in rotated order), the garbage collector off while timing. Reported for each queue
and n: the median time per step and the median of the ratio of its time to vLLM's queue's
in the same repetition, with that ratio's quartiles; then the machine load and
:mod:`bench.noise`'s verdict, which judges the production row. After each workload the
free lists of all queues are compared block by block, so a run also shows that vLLM did
the same with each of them.

Usage, on an environment with vLLM 0.34.0 and torch's CPU build installed::

    python -I bench/vllm_bench.py --cache .tox/vllm-engine-cache [--full] [--plot F.png]

``--cache`` is where vLLM's sdist is kept (the one ``tox -e vllm-engine`` fetches, for
``tests/v1/core/utils.py``); ``--quick`` (the default) takes under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench/, beside the wheel

import verified_queue
from bench.noise import Load, noise_warnings, read_load
from bench.workloads import WorkloadResult, collector_off

__all__ = [
    "FULL",
    "MODES",
    "QUICK",
    "WORKLOADS",
    "Options",
    "RatioSummary",
    "Settings",
    "Subject",
    "format_summary",
    "format_table",
    "main",
    "parse_arguments",
    "ratio_summary",
    "rotated",
    "swapped",
]

#: The workloads, in the order a run measures them.
WORKLOADS = ("pool", "scheduler")
#: The plugin's modes measured beside vLLM's own queue, in the order of the rows.
MODES = ("production", "checked", "trace")
#: The names vLLM's ``BlockPool`` builds its queue and its blocks from.
QUEUE_NAME = "FreeKVCacheBlockQueue"
BLOCK_NAME = "KVCacheBlock"
#: vLLM's block-pool benchmark's pool: its size, and the block size of its hashes.
NUM_GPU_BLOCKS = 100_000
HASH_BLOCK_SIZE = 16
#: Where ``tox -e vllm-engine`` keeps vLLM's sdist and its extracted tests.
DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".tox" / "vllm-engine-cache"
#: The header of each workload's columns, by its key (n, or the number of requests).
COLUMN_LABELS = {"pool": "n={:,}", "scheduler": "{:,} requests"}
#: What one sample of each workload is, for the tables' first cell.
UNITS = {"pool": "µs per step", "scheduler": "µs per scheduler step"}
TITLES = {
    "pool": "BlockPool: get_new_blocks(n), free_blocks",
    "scheduler": "Scheduler: schedule(), update_from_output()",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure."""

    workloads: tuple[str, ...] = WORKLOADS
    sizes: tuple[int, ...] = (10, 100, 1000)
    repetitions: int = 7
    #: Blocks taken and freed per pool sample: ``loops = max(1, blocks_per_sample // n)``.
    blocks_per_sample: int = 50_000
    #: Requests the scheduler serves in one sample.
    requests: int = 200
    seed: int = 0

    def loops(self, n: int) -> int:
        """Return how many pool steps of size ``n`` one sample times."""
        return max(1, self.blocks_per_sample // n)


#: Under a minute on 2 cores, vLLM's import included.
QUICK = Settings()
#: For publishing: three times the repetitions, longer samples, more requests.
FULL = Settings(repetitions=21, blocks_per_sample=200_000, requests=300)


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asked for."""

    settings: Settings
    cache: Path
    plot: Path | None = None
    json: Path | None = None
    full: bool = False


def _sizes(text: str) -> tuple[int, ...]:
    """Parse ``--sizes``: comma-separated positive integers."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers like 10,100,1000") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every n must be at least 1")
    return sizes


def parse_arguments(argv: Sequence[str] | None = None) -> Options:
    """Return the options in ``argv`` (the command line when ``None``).

    Raises ``SystemExit`` (argparse's usage error) for fewer than 5 repetitions: a
    median and its quartiles need them.
    """
    parser = argparse.ArgumentParser(prog="python -I bench/vllm_bench.py", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="full",
        action="store_false",
        help="7 repetitions, 200 requests: under a minute (the default)",
    )
    mode.add_argument(
        "--full", action="store_true", help="21 repetitions of longer samples, for publishing"
    )
    parser.set_defaults(full=False)
    parser.add_argument(
        "--workload",
        action="append",
        choices=WORKLOADS,
        help="run only this workload (repeatable; default: both)",
    )
    parser.add_argument("--sizes", type=_sizes, help="the pool's n, comma-separated (10,100,1000)")
    parser.add_argument("--repetitions", type=int, help="repetitions of each sample (min 5)")
    parser.add_argument("--requests", type=int, help="requests the scheduler serves per sample")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scheduler's requests")
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="where vLLM's sdist is kept (default: the checkout's .tox/vllm-engine-cache)",
    )
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the ratios here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save every sample here")
    arguments = parser.parse_args(argv)
    base = FULL if arguments.full else QUICK
    repetitions = base.repetitions if arguments.repetitions is None else arguments.repetitions
    if repetitions < 5:
        parser.error("--repetitions: a median and its quartiles need at least 5")
    requests = base.requests if arguments.requests is None else arguments.requests
    if requests < 1:
        parser.error("--requests: at least 1")
    settings = replace(
        base,
        workloads=tuple(w for w in WORKLOADS if w in (arguments.workload or WORKLOADS)),
        sizes=arguments.sizes or base.sizes,
        repetitions=repetitions,
        requests=requests,
        seed=arguments.seed,
    )
    return Options(settings, arguments.cache, arguments.plot, arguments.json, arguments.full)


# ---------------------------------------------------------------------------
# The pure parts: the class swap, the rotation, the ratios and the tables.

_ABSENT = object()


@contextmanager
def swapped(module: types.ModuleType, bindings: Mapping[str, object]) -> Iterator[None]:
    """Bind each of ``bindings`` in ``module`` for the ``with`` block, then put back what was.

    What ``module`` bound before comes back even when the block (or a binding) raises;
    a name it did not bind is removed again.
    """
    saved = {name: vars(module).get(name, _ABSENT) for name in bindings}
    try:
        for name, value in bindings.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is _ABSENT:
                vars(module).pop(name, None)
            else:
                setattr(module, name, value)


def rotated(items: Sequence[Any], turn: int) -> list[Any]:
    """Return ``items`` starting at index ``turn`` (modulo), so no subject always goes first."""
    if not items:
        return []
    shift = turn % len(items)
    return [*items[shift:], *items[:shift]]


@dataclass(frozen=True, slots=True)
class RatioSummary:
    """The per-repetition ratios of one subject's time to the reference's: median, quartiles."""

    median: float
    low: float
    high: float

    @property
    def spread(self) -> float:
        """The interquartile range over the median, the measure :mod:`bench.noise` judges."""
        return (self.high - self.low) / self.median


def ratio_summary(mine: Sequence[float], theirs: Sequence[float]) -> RatioSummary:
    """Return the median and quartiles of ``mine[i] / theirs[i]`` over the repetitions ``i``.

    The i-th samples were timed in the same repetition, so each ratio is taken under
    the same machine conditions. Raises ``ValueError`` unless both hold the same
    number of samples, at least two, every one of ``theirs`` positive.
    """
    if len(mine) != len(theirs) or len(mine) < 2:
        raise ValueError(
            f"{len(mine)} and {len(theirs)} samples: expected two equal counts of at least 2"
        )
    if min(theirs) <= 0:
        raise ValueError("a reference sample is not positive")
    paired = [a / b for a, b in zip(mine, theirs, strict=True)]
    # Inclusive quartiles, as bench/noise.py takes them: the middle cut is the median.
    low, middle, high = statistics.quantiles(paired, n=4, method="inclusive")
    return RatioSummary(middle, low, high)


def _summary(result: WorkloadResult, name: str, reference: str, key: int) -> RatioSummary:
    return ratio_summary(result.samples[name][key], result.samples[reference][key])


def format_table(result: WorkloadResult, names: Sequence[str], reference: str) -> str:
    """Return ``result`` as a Markdown table: a row per subject, a column per n.

    The reference's cells hold its median time; every other cell its median time,
    then the median of its per-repetition ratio to the reference and that ratio's
    quartiles: ``2.41 (1.06x; 1.04x to 1.09x)``. Raises ``KeyError`` if the
    reference or a named subject was not measured.
    """
    label = COLUMN_LABELS.get(result.name, "n={:,}")
    keys = list(result.medians[reference])
    title = TITLES.get(result.name, result.name)
    header = f"| {title} ({result.unit}) | " + " | ".join(label.format(k) for k in keys) + " |"
    lines = [header, "|---|" + "---:|" * len(keys)]
    for name in names:
        cells = []
        for key in keys:
            median = f"{result.medians[name][key] * 1e6:,.2f}"
            if name == reference:
                cells.append(f"{median} (1.00x)")
                continue
            ratio = _summary(result, name, reference, key)
            cells.append(f"{median} ({ratio.median:.2f}x; {ratio.low:.2f}x to {ratio.high:.2f}x)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_summary(results: Sequence[WorkloadResult], names: Sequence[str], reference: str) -> str:
    """Return one Markdown table of every workload's median ratios to the reference.

    A row per subject but the reference, a column per workload and n: the median
    per-repetition ratio, as ``1.06x``. Raises ``KeyError`` if a named subject was
    not measured.
    """
    columns: list[tuple[WorkloadResult, int]] = [
        (result, key) for result in results for key in result.medians[reference]
    ]
    header = "| over vLLM's own queue | " + " | ".join(
        f"{result.name}, {COLUMN_LABELS.get(result.name, 'n={:,}').format(key)}"
        for result, key in columns
    )
    lines = [header + " |", "|---|" + "---:|" * len(columns)]
    for name in names:
        if name == reference:
            continue
        cells = [f"{_summary(result, name, reference, key).median:.2f}x" for result, key in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(settings: Settings, vllm_version: str, compiled: bool) -> str:
    """Return the run's description line: the build, Python, vLLM and the method."""
    build = "compiled (mypyc)" if compiled else "pure Python"
    return (
        f"verified_queue {verified_queue.__version__} ({build}), vLLM {vllm_version} "
        f"(CPU torch), Python {platform.python_version()} on {platform.machine()}; "
        f"median of {settings.repetitions} interleaved repetitions, GC off while timing; "
        "ratios are per repetition, to vLLM's own queue"
    )


# ---------------------------------------------------------------------------
# The subjects, on the real vLLM.


@dataclass(frozen=True, slots=True)
class Subject:
    """A queue to measure: its row's name and what ``block_pool`` binds while it is built."""

    name: str
    bindings: Mapping[str, type] = field(default_factory=dict)
    #: The queue class vLLM's ``BlockPool`` must have built (checked after each build).
    queue: type | None = None


def reference_name(vllm_version: str) -> str:
    """The reference row's name."""
    return f"vLLM {vllm_version}'s own queue"


def vllm_subjects(
    block_pool: Any, kv_cache_utils: Any, vllm_version: str, modes: Sequence[str] = MODES
) -> list[Subject]:
    """Return vLLM's own queue, then one subject per plugin mode in ``modes``.

    On the compiled build each of ours binds the block class the plugin derives
    from vLLM's too. For the trace mode, vLLM's KV-cache core is passed over as
    the plugin does (for the rest of the process: only the trace level reads it).
    """
    from verified_queue.queue import FreeBlockQueue  # noqa: PLC0415 -- after the path is set
    from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue  # noqa: PLC0415
    from verified_queue.vllm.plugin import derive_block_class  # noqa: PLC0415
    from verified_queue.vllm.traced import (  # noqa: PLC0415
        VllmTracedFreeBlockQueue,
        pass_over_kv_cache_core,
    )

    queues: dict[str, type] = {
        "production": FreeBlockQueue,
        "checked": VllmCheckedFreeBlockQueue,
        "trace": VllmTracedFreeBlockQueue,
    }
    build = "compiled" if verified_queue.COMPILED else "pure Python"
    block: type | None = None
    if verified_queue.COMPILED:
        block = derive_block_class(getattr(kv_cache_utils, BLOCK_NAME))
    subjects = [Subject(reference_name(vllm_version), {}, getattr(block_pool, QUEUE_NAME))]
    for mode in modes:
        bindings: dict[str, type] = {QUEUE_NAME: queues[mode]}
        if block is not None:
            bindings[BLOCK_NAME] = block
        if mode == "trace":
            pass_over_kv_cache_core(block_pool)
        subjects.append(Subject(f"{mode} ({build})", bindings, queues[mode]))
    return subjects


def build_with(block_pool: Any, subject: Subject, build: Callable[[], Any]) -> Any:
    """Call ``build`` while ``block_pool`` binds ``subject``'s classes; return what it built."""
    with swapped(block_pool, subject.bindings):
        return build()


def check_queue(pool: Any, subject: Subject) -> None:
    """Raise ``RuntimeError`` unless ``pool`` (a vLLM ``BlockPool``) built ``subject``'s queue."""
    built = type(pool.free_block_queue)
    if subject.queue is not None and built is not subject.queue:
        raise RuntimeError(f"{subject.name}: BlockPool built {built.__qualname__}")


def same_free_lists(workload: str, free_lists: Mapping[str, list[int]]) -> None:
    """Raise ``RuntimeError`` unless every subject ended ``workload`` with the same free list."""
    expected_name, expected = next(iter(free_lists.items()))
    for name, ids in free_lists.items():
        if ids != expected:
            raise RuntimeError(
                f"{workload}: {name} and {expected_name} ended with different free lists"
            )


def free_ids(pool: Any) -> list[int]:
    """The block ids of ``pool``'s free list, front to back."""
    return [block.block_id for block in pool.free_block_queue.get_all_free_blocks()]


def time_pool(pool: Any, n: int, loops: int) -> float:
    """Time ``loops`` steps of ``get_new_blocks(n)`` then ``free_blocks``; return s per step."""
    get_new_blocks = pool.get_new_blocks
    free_blocks = pool.free_blocks
    start = time.perf_counter()
    for _ in range(loops):
        free_blocks(get_new_blocks(n))
    return (time.perf_counter() - start) / loops


def run_pool(block_pool: Any, subjects: Sequence[Subject], settings: Settings) -> WorkloadResult:
    """Time vLLM's block-pool benchmark's step on one ``BlockPool`` per subject, interleaved.

    Each step gives back what it took, so one pool serves every repetition and n.
    """
    pools: dict[str, Any] = {}
    for subject in subjects:
        pools[subject.name] = build_with(
            block_pool,
            subject,
            lambda: block_pool.BlockPool(
                num_gpu_blocks=NUM_GPU_BLOCKS, enable_caching=True, hash_block_size=HASH_BLOCK_SIZE
            ),
        )
        check_queue(pools[subject.name], subject)
    result = WorkloadResult("pool", UNITS["pool"])
    with collector_off():
        for repetition in range(settings.repetitions):
            for n in settings.sizes:
                loops = settings.loops(n)
                for subject in rotated(subjects, repetition):
                    result.record(subject.name, n, time_pool(pools[subject.name], n, loops))
    result.finish()
    same_free_lists("pool", {name: free_ids(pool) for name, pool in pools.items()})
    return result


# ---------------------------------------------------------------------------
# The run.


def run(options: Options) -> int:
    """Run the workloads asked for; print their tables, the summary and the noise verdict."""
    from bench import vllm_scheduler  # noqa: PLC0415 -- imports vLLM

    settings = options.settings
    environment = vllm_scheduler.prepare(options.cache)
    block_pool: Any = environment.block_pool
    subjects = vllm_subjects(block_pool, environment.kv_cache_utils, environment.version)
    names = [subject.name for subject in subjects]
    reference, production = names[0], names[1]
    load_at_start = read_load()
    description = describe(settings, environment.version, verified_queue.COMPILED)
    print(description, flush=True)
    results: list[WorkloadResult] = []
    if "pool" in settings.workloads:
        print(
            f"\npool: BlockPool(num_gpu_blocks={NUM_GPU_BLOCKS}, enable_caching=True, "
            f"hash_block_size={HASH_BLOCK_SIZE}), one per queue; a sample is "
            f"max(1, {settings.blocks_per_sample:,} // n) steps",
            flush=True,
        )
        results.append(run_pool(block_pool, subjects, settings))
        print(format_table(results[-1], names, reference), flush=True)
    if "scheduler" in settings.workloads:
        scenario = vllm_scheduler.Scenario(requests=settings.requests, seed=settings.seed)
        print(f"\nscheduler: {scenario.describe()}", flush=True)
        result, facts = vllm_scheduler.run_scheduler(environment, subjects, settings, scenario)
        results.append(result)
        print(facts)
        print(format_table(result, names, reference), flush=True)
    load = Load(load_at_start, read_load(), os.cpu_count() or 1)
    warnings = noise_warnings(load, results, production, reference)
    print(
        "\nratios: the median over the repetitions of the time over vLLM's own queue's "
        "in the same repetition; after the semicolon, that ratio's quartiles"
    )
    print()
    print(format_summary(results, names, reference))
    print(f"\n{load.describe()}")
    for warning in warnings:
        print(f"WARNING, noisy run: {warning}")
    title = f"{description}\n{load.describe()}" + (" (noisy run)" if warnings else "")
    if options.json is not None:
        payload = {
            "title": title,
            "compiled": verified_queue.COMPILED,
            "subjects": names,
            "reference": reference,
            "workloads": {r.name: {"unit": r.unit, "samples": r.samples} for r in results},
            "load": {"start": load.start, "end": load.end, "cores": load.cores},
            "noise_warnings": warnings,
        }
        options.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    if options.plot is not None:
        from bench.vllm_plot import Run, draw  # noqa: PLC0415 -- matplotlib is an optional extra

        draw([Run(results, names, reference, title)], options.plot)
        print(f"\nplot written to {options.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with the options in ``argv`` (the command line when ``None``)."""
    return run(parse_arguments(argv))


if __name__ == "__main__":
    # As bench.vllm_bench, the module bench/vllm_scheduler.py imports, not as a second copy
    # named __main__ whose classes would be other classes than the ones it sees.
    from bench.vllm_bench import main as bench_main

    sys.exit(bench_main())
