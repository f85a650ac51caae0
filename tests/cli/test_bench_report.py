"""The benchmark's report: when it calls a run noisy, and the ratios its plot draws."""

from __future__ import annotations

from bench.noise import MAX_SPREAD, Load, noise_warnings, spread
from bench.workloads import WorkloadResult

REFERENCE = "vLLM 0.34.0"


def _result(samples: dict[str, dict[int, list[float]]]) -> WorkloadResult:
    result = WorkloadResult("batch", "µs per step")
    for name, by_n in samples.items():
        for n, values in by_n.items():
            for value in values:
                result.record(name, n, value)
    result.finish()
    return result


STEADY = _result({REFERENCE: {10: [1.0, 1.01, 0.99, 1.0, 1.02]}, "ours": {10: [1.1] * 5}})


def test_a_quiet_steady_run_gets_no_warning() -> None:
    """The benchmark alone on 2 cores (load 1) with tight repetitions is not called noisy."""
    assert noise_warnings(Load(1.0, 1.1, 2), [STEADY], REFERENCE) == []


def test_other_load_on_the_free_core_is_named() -> None:
    """A load that keeps the core the benchmark leaves free busy is warned about, with the load."""
    warnings = noise_warnings(Load(1.2, 2.4, 2), [STEADY], REFERENCE)
    assert len(warnings) == 1
    assert "2.40" in warnings[0]


def test_a_wide_spread_of_the_reference_names_the_workload() -> None:
    """Repetitions of the reference spread beyond the limit are warned about, per workload."""
    burst = _result({REFERENCE: {10: [1.0, 1.0, 1.0, 1.0, 1.0 + 2 * MAX_SPREAD]}})
    assert spread(burst, REFERENCE) > MAX_SPREAD
    warnings = noise_warnings(Load(1.0, 1.0, 2), [burst], REFERENCE)
    assert len(warnings) == 1
    assert warnings[0].startswith("batch:")


def test_the_spread_of_another_row_does_not_count() -> None:
    """Only the reference row's spread decides: a noisy row of ours is a result, not noise."""
    wide_ours = _result({REFERENCE: {10: [1.0] * 5}, "ours": {10: [1.0, 5.0, 1.0, 1.0, 1.0]}})
    assert noise_warnings(Load(1.0, 1.0, 2), [wide_ours], REFERENCE) == []
