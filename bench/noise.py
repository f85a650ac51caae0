"""How busy the machine was while the benchmark ran, and whether that makes the run noisy.

Ratios are measured side by side in one process, so a machine shared with other
work shifts every implementation alike only on average: a burst of other work
during one sample moves that sample alone. A run is called noisy when the load
average says other processes wanted the cores (more runnable processes than the
cores left to them, besides the benchmark itself), or when the repetitions of
the reference row spread widely: their interquartile range over their median.
Not their full range: one repetition that a page fault or a timer tick slowed
is in every run, on a quiet machine too, and the median already ignores it;
the middle half of the repetitions moves only when the machine's speed did.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from bench.workloads import WorkloadResult

__all__ = ["MAX_OTHER_LOAD", "MAX_SPREAD", "Load", "noise_warnings", "read_load", "spread"]

#: Runnable processes besides the benchmark, per free core, above which a run is noisy.
MAX_OTHER_LOAD = 0.5
#: Interquartile range of the reference row's repetitions over their median above which a
#: run is noisy.
MAX_SPREAD = 0.10


@dataclass(frozen=True, slots=True)
class Load:
    """The 1-minute load average when the run started and when it ended, and the core count."""

    start: float
    end: float
    cores: int

    def describe(self) -> str:
        """Return the load as a sentence for the report."""
        return (
            f"machine load (1-minute average): {self.start:.2f} at the start, "
            f"{self.end:.2f} at the end, on {self.cores} cores"
        )


def read_load() -> float:
    """Return the 1-minute load average, or 0.0 where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def spread(result: WorkloadResult, name: str) -> float:
    """Return the widest interquartile range over median of ``name``'s repetitions, across n."""
    widest = 0.0
    for samples in result.samples.get(name, {}).values():
        if len(samples) < 2:
            continue
        # Inclusive quartiles: with 5 repetitions, the second and the fourth fastest.
        low, middle, high = statistics.quantiles(samples, n=4, method="inclusive")
        if middle > 0:
            widest = max(widest, (high - low) / middle)
    return widest


def noise_warnings(load: Load, results: list[WorkloadResult], reference: str) -> list[str]:
    """Return why the run was noisy, one sentence each; empty when it was quiet."""
    warnings = []
    others = max(load.start, load.end) - 1.0  # the benchmark itself keeps one core busy
    free_cores = max(load.cores - 1, 1)
    if others / free_cores > MAX_OTHER_LOAD:
        warnings.append(
            f"other processes kept about {others:.1f} of the {free_cores} other cores busy "
            f"(load {max(load.start, load.end):.2f}): the ratios may be off by several percent"
        )
    for result in results:
        widest = spread(result, reference)
        if widest > MAX_SPREAD:
            warnings.append(
                f"{result.name}: the middle half of the repetitions of {reference} spread by "
                f"{widest:.0%} of their median; rerun on a quiet machine before quoting the ratios"
            )
    return warnings
