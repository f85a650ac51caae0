"""How busy the machine was while the benchmark ran, and whether that makes the run noisy.

Ratios are measured side by side in one process, so a change of the machine's
speed that lasts (a neighbour's job, the clock, where memory landed) moves every
implementation alike and leaves their ratio alone; a burst of other work during
one sample moves that sample alone. A run is called noisy when the load average
says other processes wanted the cores (more runnable processes than the cores
left to them, besides the benchmark itself), or when the ratio the report quotes
moved between repetitions: the production row over the reference, taken
repetition by repetition, spreads widely (its interquartile range over its
median). Not the times themselves: on an idle machine the reference's own times
were seen to step by 30% half-way through a run, with the production row's in
step and their ratio unmoved. Not the full range either: one repetition slowed
by a page fault or a timer tick is in nearly every run, and the median already
ignores it.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from bench.workloads import WorkloadResult

__all__ = ["MAX_OTHER_LOAD", "MAX_SPREAD", "Load", "noise_warnings", "read_load", "spread"]

#: Runnable processes besides the benchmark, per free core, above which a run is noisy.
MAX_OTHER_LOAD = 0.5
#: Interquartile range of the production row's per-repetition ratio to the reference, over
#: its median, above which a run is noisy.
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


def spread(result: WorkloadResult, name: str, reference: str) -> float:
    """Return the widest interquartile range over median of ``name``'s ratio to ``reference``.

    The ratio is taken repetition by repetition (each repetition times every
    implementation once, so its i-th samples pair up); the widest over n counts.
    """
    widest = 0.0
    theirs_by_n = result.samples.get(reference, {})
    for n, mine in result.samples.get(name, {}).items():
        theirs = theirs_by_n.get(n, [])
        paired = [a / b for a, b in zip(mine, theirs, strict=False) if b > 0]
        if len(paired) < 2:
            continue
        # Inclusive quartiles: with 5 repetitions, the second and the fourth smallest.
        low, middle, high = statistics.quantiles(paired, n=4, method="inclusive")
        widest = max(widest, (high - low) / middle)
    return widest


def noise_warnings(
    load: Load, results: list[WorkloadResult], production: str, reference: str
) -> list[str]:
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
        widest = spread(result, production, reference)
        if widest > MAX_SPREAD:
            warnings.append(
                f"{result.name}: the ratio of {production} to {reference} moved by {widest:.0%} "
                "of its median over the middle half of the repetitions; rerun on a quiet "
                "machine before quoting the ratios"
            )
    return warnings
