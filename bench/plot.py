"""Draw the benchmark's ratios to the reference (vLLM's own queue) against n, per workload."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only: no display on a build machine

import matplotlib.pyplot as plt  # after mpl.use: the backend is fixed at import
from matplotlib.artist import Artist
from matplotlib.ticker import FuncFormatter, NullFormatter

from bench.subjects import Subject
from bench.workloads import WorkloadResult

__all__ = ["draw", "ratios"]

MARKERS = "osD^vx*P"


def ratios(result: WorkloadResult, name: str, reference: str) -> dict[int, float]:
    """Return the median of ``name`` over the reference's, by n (empty if either is missing)."""
    mine = result.medians.get(name, {})
    theirs = result.medians.get(reference, {})
    return {n: mine[n] / theirs[n] for n in sorted(mine) if n in theirs}


def _reference_of(result: WorkloadResult, reference: str, subjects: Sequence[Subject]) -> str:
    """The reference if the workload measured it, else its first measured row (as the tables do)."""
    if reference in result.medians:
        return reference
    return next(s.name for s in subjects if s.name in result.medians)


def draw(
    results: Sequence[WorkloadResult],
    subjects: Sequence[Subject],
    path: Path,
    title: str,
    reference: str,
) -> None:
    """Write a PNG: one panel per stepped workload (ratio against n) and one of build ratios.

    Every implementation is one line, in the same colour in every panel; the
    reference is the dashed line at 1.0 (below it is faster). Both axes are
    logarithmic, so 0.5x and 2x lie equally far from it.
    """
    stepped = [r for r in results if r.name != "build"]
    builds = [r for r in results if r.name == "build"]
    panels = len(stepped) + len(builds)
    columns = min(panels, 2)
    rows = -(-panels // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6.4 * columns, 4.8 * rows), squeeze=False)
    axes = list(grid.flat)
    for axis in axes[panels:]:
        axis.set_visible(False)
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis, result in zip(axes, stepped, strict=False):
        base = _reference_of(result, reference, subjects)
        for index, (marker, subject) in enumerate(zip(MARKERS, subjects, strict=False)):
            if subject.name == base or subject.name not in result.medians:
                continue  # the reference is the 1.0 line; prepend leaves designs out
            by_n = ratios(result, subject.name, base)
            axis.plot(
                list(by_n),
                list(by_n.values()),
                marker=marker,
                color=f"C{index}",  # the same colour in every panel
                label=subject.name,
            )
        axis.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label=f"{reference} (1.0)")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(plain)
        axis.yaxis.set_minor_formatter(NullFormatter())
        axis.set_yticks([0.1, 0.15, 0.25, 0.5, 1.0, 1.5, 2, 3, 5, 10, 20])
        # Unlabelled grid lines every 0.1 around 1.0, where the targets are judged.
        axis.set_yticks([0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.4], minor=True)
        axis.set_xlabel("n")
        axis.set_ylabel(f"time / {base}'s")
        axis.set_title(result.ratio_title)  # a ratio axis: no µs in its title
        axis.grid(visible=True, which="both", linewidth=0.3)
    for axis, result in zip(axes[len(stepped) :], builds, strict=False):
        base = _reference_of(result, reference, subjects)
        names = [s.name for s in subjects if s.name in result.medians]
        values = [next(iter(ratios(result, name, base).values())) for name in names]
        size = next(iter(result.medians[names[0]]))
        colours = [f"C{index}" for index, s in enumerate(subjects) if s.name in result.medians]
        axis.barh(names, values, color=colours)
        axis.axvline(1.0, color="black", linestyle="--", linewidth=1.2)
        axis.invert_yaxis()
        axis.set_xlabel(f"time / {base}'s")
        axis.set_title(f"build a queue of {size:,} blocks")
        axis.grid(visible=True, axis="x", linewidth=0.3)
    if stepped:
        seen: dict[str, Artist] = {}
        for axis in axes[: len(stepped)]:
            for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
        figure.legend(list(seen.values()), list(seen), loc="lower center", ncol=3, fontsize="small")
    figure.suptitle(title, fontsize="small")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
