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
    columns = min(panels, 2)
    rows = -(-panels // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6.4 * columns, 4.8 * rows), squeeze=False)
    axes = list(grid.flat)
    for axis in axes[panels:]:
        axis.set_visible(False)
    for axis, result in zip(axes, stepped, strict=False):
        for index, (marker, subject) in enumerate(zip(MARKERS, subjects, strict=False)):
            if subject.name not in result.medians:
                continue  # a workload may leave an implementation out (prepend)
            medians = result.medians[subject.name]
            sizes = sorted(medians)
            axis.plot(
                sizes,
                [medians[n] * 1e6 for n in sizes],
                marker=marker,
                color=f"C{index}",  # the same colour in every panel
                label=subject.name,
            )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("n")
        axis.set_ylabel(result.unit)
        axis.set_title(result.name)
        axis.grid(visible=True, which="both", linewidth=0.3)
    for axis, result in zip(axes[len(stepped) :], builds, strict=False):
        names = [subject.name for subject in subjects]
        times = [next(iter(result.medians[name].values())) * 1e3 for name in names]
        size = next(iter(result.medians[names[0]]))
        colours = [f"C{index}" for index in range(len(names))]  # the line colours
        axis.barh(names, times, color=colours)
        axis.invert_yaxis()
        axis.set_xlabel("ms")
        axis.set_title(f"build a queue of {size:,} blocks")
        axis.grid(visible=True, axis="x", linewidth=0.3)
    if stepped:
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="lower center", ncol=3, fontsize="small")
    figure.suptitle(title, fontsize="small")
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
