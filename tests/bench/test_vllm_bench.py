"""``bench/vllm_bench.py``'s own parts, without vLLM: options, ratios, tables, the class swap."""

from __future__ import annotations

import dataclasses
import json
import types
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import verified_queue
from bench import vllm_bench, vllm_scheduler
from bench.noise import spread
from bench.subjects import BenchBlock
from bench.vllm_bench import (
    FULL,
    QUICK,
    RatioSummary,
    Settings,
    Subject,
    build_with,
    check_queue,
    format_summary,
    format_table,
    parse_arguments,
    ratio_summary,
    rotated,
    run_pool,
    same_free_lists,
    swapped,
    vllm_subjects,
)
from bench.workloads import WorkloadResult
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue

REFERENCE = "vLLM 0.34.0's own queue"
OURS = "production (pure Python)"


def _result(samples: dict[str, dict[int, list[float]]], workload: str = "pool") -> WorkloadResult:
    result = WorkloadResult(workload, vllm_bench.UNITS.get(workload, "µs per step"))
    for name, by_n in samples.items():
        for n, values in by_n.items():
            for value in values:
                result.record(name, n, value)
    result.finish()
    return result


# ---------------------------------------------------------------------------
# Options.


def test_no_options_is_the_quick_run_of_both_workloads() -> None:
    """Without options the run is the quick one, both workloads, vLLM's sizes, no plot."""
    options = parse_arguments([])
    assert options.settings == QUICK
    assert options.settings.workloads == ("pool", "scheduler")
    assert options.settings.sizes == (10, 100, 1000)
    assert (options.full, options.plot, options.json) == (False, None, None)


def test_full_takes_the_publishing_settings_and_a_plot_path() -> None:
    """``--full --plot F.png`` selects the full settings and keeps the plot's path."""
    options = parse_arguments(["--full", "--plot", "out.png"])
    assert options.settings == FULL
    assert options.full
    assert options.plot == Path("out.png")


def test_options_override_the_chosen_settings() -> None:
    """One workload, other sizes, repetitions and requests replace the defaults, in run order."""
    options = parse_arguments(
        [
            "--workload",
            "scheduler",
            "--workload",
            "pool",
            "--sizes",
            "1,7",
            "--repetitions",
            "9",
            "--requests",
            "40",
            "--cache",
            "somewhere",
        ]
    )
    settings = options.settings
    assert settings.workloads == ("pool", "scheduler")
    assert (settings.sizes, settings.repetitions, settings.requests) == ((1, 7), 9, 40)
    assert options.cache == Path("somewhere")
    assert parse_arguments(["--workload", "pool"]).settings.workloads == ("pool",)


@pytest.mark.parametrize(
    "argv",
    [
        ["--repetitions", "4"],
        ["--sizes", "10,x"],
        ["--sizes", "0,10"],
        ["--requests", "0"],
        ["--quick", "--full"],
        ["--workload", "engine"],
    ],
)
def test_bad_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Too few repetitions, a bad size, no requests, both modes or an unknown workload exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        parse_arguments(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_sample_never_has_fewer_than_one_step() -> None:
    """A pool sample repeats blocks_per_sample // n steps, and at least one."""
    settings = Settings(blocks_per_sample=1000)
    assert (settings.loops(10), settings.loops(1000), settings.loops(5000)) == (100, 1, 1)


# ---------------------------------------------------------------------------
# Ratios and tables.


def test_ratios_pair_the_samples_of_one_repetition() -> None:
    """Each ratio is of samples of the same repetition: a shared slowdown cancels out."""
    summary = ratio_summary([2.0, 4.0, 6.0, 8.0, 20.0], [1.0, 2.0, 3.0, 4.0, 10.0])
    assert summary == RatioSummary(2.0, 2.0, 2.0)
    assert summary.spread == 0.0
    # The same samples, unpaired, would give another median ratio: 6/4 over the 5 medians.
    crossed = ratio_summary([2.0, 4.0, 6.0, 8.0, 20.0], [10.0, 4.0, 3.0, 2.0, 1.0])
    assert crossed.median == 2.0
    assert crossed.low == 1.0
    assert crossed.high == 4.0


def test_the_spread_is_the_one_the_noise_verdict_judges() -> None:
    """The ratio's interquartile range over its median is bench.noise's spread, for one n."""
    mine, theirs = [1.0, 1.3, 1.1, 1.6, 1.2], [1.0, 1.0, 1.1, 1.2, 0.9]
    result = _result({REFERENCE: {10: theirs}, OURS: {10: mine}})
    assert ratio_summary(mine, theirs).spread == pytest.approx(spread(result, OURS, REFERENCE))


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [([1.0, 2.0], [1.0]), ([1.0], [1.0]), ([1.0, 2.0], [1.0, 0.0])],
)
def test_ratios_need_paired_positive_samples(mine: list[float], theirs: list[float]) -> None:
    """Unpaired samples, a single one, or a reference sample of zero raise ValueError."""
    with pytest.raises(ValueError, match="sample"):
        ratio_summary(mine, theirs)


POOL = _result(
    {
        REFERENCE: {10: [2e-6] * 5, 1000: [100e-6] * 5},
        OURS: {10: [2.2e-6, 2.0e-6, 2.4e-6, 2.2e-6, 2.2e-6], 1000: [90e-6] * 5},
        "trace (pure Python)": {10: [30e-6] * 5, 1000: [1500e-6] * 5},
    }
)


def test_the_table_gives_median_times_ratios_and_quartiles() -> None:
    """A row per subject: the reference's times at 1.00x, the others' with ratio and quartiles."""
    table = format_table(POOL, [REFERENCE, OURS, "trace (pure Python)"], REFERENCE)
    assert table.splitlines() == [
        "| BlockPool: get_new_blocks(n), free_blocks (µs per step) | n=10 | n=1,000 |",
        "|---|---:|---:|",
        "| vLLM 0.34.0's own queue | 2.00 (1.00x) | 100.00 (1.00x) |",
        "| production (pure Python) | 2.20 (1.10x; 1.10x to 1.10x) "
        "| 90.00 (0.90x; 0.90x to 0.90x) |",
        "| trace (pure Python) | 30.00 (15.00x; 15.00x to 15.00x) "
        "| 1,500.00 (15.00x; 15.00x to 15.00x) |",
    ]


def test_the_scheduler_table_is_labelled_by_its_requests() -> None:
    """The scheduler's one column is named by the requests a run serves, per scheduler step."""
    result = _result({REFERENCE: {300: [500e-6] * 5}, OURS: {300: [550e-6] * 5}}, "scheduler")
    header, _, reference, ours = format_table(result, [REFERENCE, OURS], REFERENCE).splitlines()
    assert header.endswith("(µs per scheduler step) | 300 requests |")
    assert reference == "| vLLM 0.34.0's own queue | 500.00 (1.00x) |"
    assert ours == "| production (pure Python) | 550.00 (1.10x; 1.10x to 1.10x) |"


def test_a_subject_not_measured_is_refused() -> None:
    """A row asked for that the run did not measure raises KeyError, not a blank cell."""
    with pytest.raises(KeyError):
        format_table(POOL, [REFERENCE, "checked (pure Python)"], REFERENCE)


def test_the_summary_has_a_column_per_workload_and_n_and_no_reference_row() -> None:
    """The summary gives each of ours its median ratio in every column, the reference no row."""
    scheduler = _result({REFERENCE: {300: [1.0] * 5}, OURS: {300: [1.05] * 5}}, "scheduler")
    pool = _result({REFERENCE: {10: [1.0] * 5}, OURS: {10: [1.2] * 5}})
    assert format_summary([pool, scheduler], [REFERENCE, OURS], REFERENCE).splitlines() == [
        "| over vLLM's own queue | pool, n=10 | scheduler, 300 requests |",
        "|---|---:|---:|",
        "| production (pure Python) | 1.20x | 1.05x |",
    ]


def test_the_description_names_the_build_and_vllm() -> None:
    """The report's first line names the build, the vLLM release and the repetitions."""
    line = vllm_bench.describe(Settings(repetitions=9), "0.34.0", compiled=True)
    assert "(compiled (mypyc)), vLLM 0.34.0 (CPU torch)" in line
    assert "median of 9 interleaved repetitions" in line


@pytest.mark.parametrize(("turn", "expected"), [(0, "abc"), (1, "bca"), (5, "cab")])
def test_each_repetition_starts_with_another_subject(turn: int, expected: str) -> None:
    """The order rotates with the repetition, modulo the number of subjects."""
    assert "".join(rotated(list("abc"), turn)) == expected
    assert rotated([], turn) == []


# ---------------------------------------------------------------------------
# The class swap, on stand-in modules.


class _Original:
    """The class a stand-in module binds before the swap."""


class _Replacement:
    """The class swapped in."""


def _module() -> types.ModuleType:
    module = types.ModuleType("stand_in_block_pool")
    module.FreeKVCacheBlockQueue = _Original  # type: ignore[attr-defined]
    return module


def _bound(module: types.ModuleType, name: str) -> object:
    """What ``module`` binds to ``name`` now (read afresh: the swap changes it under mypy)."""
    return vars(module)[name]


def test_the_swap_binds_for_the_block_and_restores_after() -> None:
    """Inside the block the module binds the replacement; after it, its own class again."""
    module = _module()
    with swapped(module, {"FreeKVCacheBlockQueue": _Replacement}):
        assert _bound(module, "FreeKVCacheBlockQueue") is _Replacement
    assert _bound(module, "FreeKVCacheBlockQueue") is _Original


def test_the_swap_restores_when_the_block_raises() -> None:
    """An exception inside the block leaves the module with its own names, and propagates."""
    module = _module()
    with (
        pytest.raises(RuntimeError, match="build failed"),
        swapped(module, {"FreeKVCacheBlockQueue": _Replacement, "KVCacheBlock": _Replacement}),
    ):
        raise RuntimeError("build failed")
    assert module.FreeKVCacheBlockQueue is _Original
    assert not hasattr(module, "KVCacheBlock")


class _RefusingModule(types.ModuleType):
    """A module that refuses one name, so that a swap fails half-way."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "KVCacheBlock" and value is _Replacement:
            raise AttributeError("KVCacheBlock is read-only here")
        super().__setattr__(name, value)


def test_a_swap_that_fails_half_way_puts_back_what_it_did_bind() -> None:
    """A binding that raises leaves the bindings made before it undone too."""
    module = _RefusingModule("refusing")
    module.FreeKVCacheBlockQueue = _Original
    module.KVCacheBlock = _Original
    bindings = {"FreeKVCacheBlockQueue": _Replacement, "KVCacheBlock": _Replacement}
    with pytest.raises(AttributeError, match="read-only"), swapped(module, bindings):
        pytest.fail("the block ran although a binding failed")
    assert module.FreeKVCacheBlockQueue is _Original
    assert module.KVCacheBlock is _Original


def test_build_with_restores_vllms_names_when_the_build_raises() -> None:
    """A pool whose construction raises leaves the module binding its own class."""
    module = _module()
    subject = Subject("ours", {"FreeKVCacheBlockQueue": _Replacement}, _Replacement)

    def build() -> object:
        assert module.FreeKVCacheBlockQueue is _Replacement
        raise MemoryError("no room for the blocks")

    with pytest.raises(MemoryError):
        build_with(module, subject, build)
    assert module.FreeKVCacheBlockQueue is _Original


# ---------------------------------------------------------------------------
# The pool workload on a stand-in of vLLM's block_pool module.

_STAND_IN_POOL = '''
class BlockPool:
    """Builds its queue and blocks from this module's names, when it is built, as vLLM's does."""

    def __init__(self, num_gpu_blocks, enable_caching, hash_block_size):
        self.blocks = [KVCacheBlock(block_id=i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)

    def get_new_blocks(self, n):
        return self.free_block_queue.popleft_n(n)

    def free_blocks(self, blocks):
        self.free_block_queue.prepend_n(list(blocks))
'''


def _stand_in_block_pool(queue: type) -> types.ModuleType:
    module = types.ModuleType("stand_in_block_pool")
    module.FreeKVCacheBlockQueue = queue  # type: ignore[attr-defined]
    module.KVCacheBlock = BenchBlock  # type: ignore[attr-defined]
    exec(compile(_STAND_IN_POOL, "<stand-in block_pool>", "exec"), vars(module))
    return module


def test_the_pool_workload_builds_each_pool_with_its_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pool links its subject's queue, the module gets its own back, the lists agree."""
    monkeypatch.setattr(vllm_bench, "NUM_GPU_BLOCKS", 50)
    module = _stand_in_block_pool(FreeBlockQueue)
    subjects = [
        Subject("reference", {}, FreeBlockQueue),
        Subject("checked", {"FreeKVCacheBlockQueue": CheckedFreeBlockQueue}, CheckedFreeBlockQueue),
    ]
    settings = Settings(sizes=(1, 10), repetitions=5, blocks_per_sample=20)
    result = run_pool(module, subjects, settings)
    assert module.FreeKVCacheBlockQueue is FreeBlockQueue
    assert set(result.samples) == {"reference", "checked"}
    assert all(len(result.samples[name][n]) == 5 for name in result.samples for n in (1, 10))


def test_a_pool_built_with_the_wrong_queue_is_refused() -> None:
    """A pool whose queue is not the subject's (a rebinding that missed) stops the run."""
    pool = types.SimpleNamespace(free_block_queue=FreeBlockQueue())
    with pytest.raises(RuntimeError, match="built FreeBlockQueue"):
        check_queue(pool, Subject("checked", {}, CheckedFreeBlockQueue))
    check_queue(pool, Subject("production", {}, FreeBlockQueue))


def test_different_free_lists_stop_the_run() -> None:
    """Two queues that end a workload with different free lists raise, naming both."""
    same_free_lists("pool", {"a": [1, 2], "b": [1, 2]})
    with pytest.raises(RuntimeError, match="b and a ended with different free lists"):
        same_free_lists("pool", {"a": [1, 2], "b": [2, 1]})


# ---------------------------------------------------------------------------
# The subjects, with stand-ins for vLLM's modules.


@dataclasses.dataclass(slots=True)
class _KVCacheBlock:
    """A stand-in of vLLM 0.34.0's block: a slotted dataclass with its fields."""

    block_id: int
    ref_cnt: int = 0
    pool: Any = None
    block_hash: Any = None
    prev_free_block: Any = None
    next_free_block: Any = None
    is_null: bool = False


def test_the_subjects_are_vllms_queue_then_each_mode() -> None:
    """vLLM's queue binds nothing; each mode binds its queue, and the derived block if compiled."""
    block_pool = _module()
    kv_cache_utils = types.ModuleType("stand_in_kv_cache_utils")
    kv_cache_utils.KVCacheBlock = _KVCacheBlock  # type: ignore[attr-defined]
    subjects = vllm_subjects(block_pool, kv_cache_utils, "0.34.0")
    build = "compiled" if verified_queue.COMPILED else "pure Python"
    assert [s.name for s in subjects] == [
        REFERENCE,
        f"production ({build})",
        f"checked ({build})",
        f"trace ({build})",
    ]
    assert subjects[0].bindings == {}
    assert subjects[0].queue is _Original
    assert subjects[1].bindings["FreeKVCacheBlockQueue"] is FreeBlockQueue
    for subject in subjects[1:]:
        assert subject.bindings["FreeKVCacheBlockQueue"] is subject.queue
        block = subject.bindings.get("KVCacheBlock")
        assert (block is not None) == verified_queue.COMPILED
        if block is not None:
            assert block.__vllm_block__ is _KVCacheBlock  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# What the scheduler workload needs of the environment.


def test_no_vllm_installed_is_a_clear_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without vLLM, the run stops naming the tox environment that installs it."""

    def version(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(SystemExit, match="vLLM is not installed"):
        vllm_scheduler.prepare(Path("unused"))


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({"vllm": "0.33.0", "torch": "2.13.0+cpu"}, "vLLM 0.33.0 is installed"),
        ({"vllm": "0.34.0", "torch": "2.13.0"}, "not a CPU build"),
    ],
)
def test_another_vllm_or_a_gpu_torch_is_refused(
    monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], message: str
) -> None:
    """Another vLLM release, or a torch that is not the CPU build, stops the run before loading."""
    monkeypatch.setattr(metadata, "version", versions.__getitem__)
    with pytest.raises(SystemExit, match=message):
        vllm_scheduler.prepare(Path("unused"))


def test_the_plot_is_written(tmp_path: Path) -> None:
    """With matplotlib installed, both workloads' panels are drawn into the file."""
    pytest.importorskip("matplotlib")
    from bench.vllm_plot import Run, draw  # noqa: PLC0415 -- needs matplotlib

    scheduler = _result({REFERENCE: {300: [1.0] * 5}, OURS: {300: [1.05] * 5}}, "scheduler")
    target = tmp_path / "vllm.png"
    draw([Run([POOL, scheduler], [REFERENCE, OURS], REFERENCE, "title")], target)
    assert target.read_bytes().startswith(b"\x89PNG")


def test_a_saved_run_reads_back_with_its_samples(tmp_path: Path) -> None:
    """A run saved as JSON (its n become strings there) reads back with integer n, same samples."""
    pytest.importorskip("matplotlib")
    from bench.vllm_plot import load_run  # noqa: PLC0415 -- needs matplotlib

    saved = {
        "title": "a run",
        "subjects": [REFERENCE, OURS],
        "reference": REFERENCE,
        "workloads": {"pool": {"unit": "µs per step", "samples": POOL.samples}},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(saved), encoding="utf-8")
    run = load_run(path)
    assert (run.title, run.names, run.reference) == ("a run", [REFERENCE, OURS], REFERENCE)
    assert run.results[0].samples == POOL.samples
    assert run.results[0].medians[OURS][10] == POOL.medians[OURS][10]


def test_a_file_that_is_no_saved_run_is_refused(tmp_path: Path) -> None:
    """JSON without the run's fields raises ValueError naming the file."""
    pytest.importorskip("matplotlib")
    from bench.vllm_plot import load_run  # noqa: PLC0415 -- needs matplotlib

    path = tmp_path / "other.json"
    path.write_text(json.dumps({"workloads": {"pool": {}}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"other\.json: not a run"):
        load_run(path)
