"""The benchmark's report: when it calls a run noisy, and how it judges the targets."""

from __future__ import annotations

from pathlib import Path

import pytest

import verified_queue
from bench.noise import MAX_SPREAD, Load, noise_warnings, spread
from bench.run import targets
from bench.workloads import BLOCK_WITH_VLLM_FIELDS, RELEASE_BLOCK, WorkloadResult

REFERENCE = "vLLM 0.34.0"
OURS = "ours"
CHECKED = "check mode, default period"


def _result(samples: dict[str, dict[int, list[float]]], workload: str = "batch") -> WorkloadResult:
    result = WorkloadResult(workload, "µs per step")
    for name, by_n in samples.items():
        for n, values in by_n.items():
            for value in values:
                result.record(name, n, value)
    result.finish()
    return result


STEADY = _result({REFERENCE: {10: [1.0, 1.01, 0.99, 1.0, 1.02]}, OURS: {10: [1.1] * 5}})


def test_a_quiet_steady_run_gets_no_warning() -> None:
    """The benchmark alone on 2 cores (load 1) with tight repetitions is not called noisy."""
    assert noise_warnings(Load(1.0, 1.1, 2), [STEADY], OURS, REFERENCE) == []


def test_other_load_on_the_free_core_is_named() -> None:
    """A load that keeps the core the benchmark leaves free busy is warned about, with the load."""
    warnings = noise_warnings(Load(1.2, 2.4, 2), [STEADY], OURS, REFERENCE)
    assert len(warnings) == 1
    assert "2.40" in warnings[0]


def test_a_ratio_that_moves_between_repetitions_names_the_workload() -> None:
    """A ratio whose middle half spreads beyond the limit is warned about, with its workload."""
    wide = 1.0 + 2 * MAX_SPREAD
    noisy = _result({REFERENCE: {10: [1.0] * 5}, OURS: {10: [1.0, 1.0, 1.0, wide, wide]}})
    assert spread(noisy, OURS, REFERENCE) > MAX_SPREAD
    warnings = noise_warnings(Load(1.0, 1.0, 2), [noisy], OURS, REFERENCE)
    assert len(warnings) == 1
    assert warnings[0].startswith("batch:")


def test_one_slow_repetition_is_not_noise() -> None:
    """One repetition slowed by a burst leaves the median and the middle half as they were."""
    burst = _result({REFERENCE: {10: [0.87, 0.87, 0.88, 0.88, 1.19]}, OURS: {10: [1.0] * 5}})
    assert spread(burst, OURS, REFERENCE) < 0.02
    assert noise_warnings(Load(1.0, 1.0, 2), [burst], OURS, REFERENCE) == []


def test_a_change_of_speed_that_moves_both_rows_is_not_noise() -> None:
    """The machine stepping 30% slower half-way moves both rows alike, and not their ratio."""
    fast, slow = [1.0, 1.0, 1.0], [1.3, 1.3, 1.3]
    step = _result({REFERENCE: {10: fast + slow}, OURS: {10: [1.2 * t for t in fast + slow]}})
    assert spread(step, OURS, REFERENCE) < 1e-9
    assert noise_warnings(Load(1.0, 1.0, 2), [step], OURS, REFERENCE) == []


def _verdicts(rows: list[tuple[str, str, bool]], word: str) -> list[tuple[str, bool]]:
    """The measured text and verdict of each target row whose goal mentions ``word``."""
    return [(measured, met) for goal, measured, met in rows if word in goal]


def test_the_production_target_is_judged_at_its_worst_n() -> None:
    """One n over 1.00x fails the production target, and the row names that workload and n."""
    single = _result(
        {REFERENCE: {10: [1.0] * 5, 100: [1.0] * 5}, OURS: {10: [0.9] * 5, 100: [1.2] * 5}},
        "single",
    )
    rows = targets([single], OURS, REFERENCE)
    assert _verdicts(rows, "at most 1.00x") == [("worst 1.20x (single, n=100)", False)]


def test_the_check_mode_budgets_are_two_for_single_and_three_for_batches() -> None:
    """Check mode at 2.5x the production queue passes the batch budget and fails the single one."""
    samples = {REFERENCE: {10: [1.0] * 5}, OURS: {10: [1.0] * 5}, CHECKED: {10: [2.5] * 5}}
    rows = targets([_result(samples, "single"), _result(samples, "batch")], OURS, REFERENCE)
    assert _verdicts(rows, "production queue, single") == [("worst 2.50x (single, n=10)", False)]
    assert _verdicts(rows, "production queue, batch") == [("worst 2.50x (batch, n=10)", True)]


def test_the_memory_target_compares_the_two_blocks() -> None:
    """A block with vLLM's fields larger than vLLM's own fails the memory target, naming both."""
    rows = targets([], OURS, REFERENCE, {BLOCK_WITH_VLLM_FIELDS: 112.0, RELEASE_BLOCK: 96.0})
    assert _verdicts(rows, "no larger") == [("112 against 96 bytes", False)]
    # Thousandths of a byte are the interpreter's own allocations, not the block's size.
    rows = targets([], OURS, REFERENCE, {BLOCK_WITH_VLLM_FIELDS: 96.002, RELEASE_BLOCK: 96.0005})
    assert _verdicts(rows, "no larger") == [("96 against 96 bytes", True)]


def test_the_compiled_speedups_are_judged_at_the_slowest_n(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled, single must be 3x faster at every n: 4x at one n and 2.5x at another fail."""
    monkeypatch.setattr(verified_queue, "COMPILED", True)
    single = _result(
        {REFERENCE: {10: [1.0] * 5, 100: [1.0] * 5}, OURS: {10: [0.25] * 5, 100: [0.4] * 5}},
        "single",
    )
    rows = targets([single], OURS, REFERENCE)
    assert _verdicts(rows, "3x faster") == [("slowest 2.50x faster (single, n=100)", False)]
    monkeypatch.setattr(verified_queue, "COMPILED", False)
    assert _verdicts(targets([single], OURS, REFERENCE), "3x faster") == []


@pytest.mark.parametrize("unit", ["µs per step", "µs per n operations", "ms per queue"])
def test_a_ratio_panel_is_not_titled_in_a_unit_of_time(unit: str) -> None:
    """The plot's panels show ratios: a title names what was timed, never µs or ms."""
    title = WorkloadResult("single", unit).ratio_title
    assert "µs" not in title
    assert "ms" not in title
    assert title == f"single (time per {unit.split(' per ')[1]}, as a ratio)"


def test_the_plot_titles_its_ratio_panels_with_ratio_title() -> None:
    """bench/plot.py titles each stepped workload's panel with ``ratio_title``, not its unit."""
    source = (Path(__file__).resolve().parents[2] / "bench" / "plot.py").read_text()
    assert "axis.set_title(result.ratio_title)" in source
    assert "result.unit" not in source
