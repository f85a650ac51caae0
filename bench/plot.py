"""Draw the benchmark's medians: log-log time against n per workload, and the build times."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only: no display on a build machine

import matplotlib.pyplot as plt  # after mpl.use: the backend is fixed at import

from bench.subjects import Subject
from bench.workloads import WorkloadResult

__all__ = ["draw"]

MARKERS = "osD^vx*"


def draw(
    results: Sequence[WorkloadResult], subjects: Sequence[Subject], path: Path, title: str
) -> None:
    """Write a PNG with one log-log panel per stepped workload and a bar chart of build times."""
    stepped = [r for r in results if r.name != "build"]
    builds = [r for r in results if r.name == "build"]
    panels = len(stepped) + len(builds)
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.6), squeeze=False)
    for axis, result in zip(axes[0], stepped, strict=False):
        for marker, subject in zip(MARKERS, subjects, strict=False):
            medians = result.medians[subject.name]
            sizes = sorted(medians)
            axis.plot(
                sizes,
                [medians[n] * 1e6 for n in sizes],
                marker=marker,
                label=subject.name,
            )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("n")
        axis.set_ylabel(result.unit)
        axis.set_title(result.name)
        axis.grid(visible=True, which="both", linewidth=0.3)
    for axis, result in zip(axes[0][len(stepped) :], builds, strict=False):
        names = [subject.name for subject in subjects]
        times = [next(iter(result.medians[name].values())) * 1e3 for name in names]
        size = next(iter(result.medians[names[0]]))
        axis.barh(names, times)
        axis.invert_yaxis()
        axis.set_xlabel("ms")
        axis.set_title(f"build a queue of {size:,} blocks")
        axis.grid(visible=True, axis="x", linewidth=0.3)
    if stepped:
        axes[0][0].legend(fontsize="small")
    figure.suptitle(title, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
