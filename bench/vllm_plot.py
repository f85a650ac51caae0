"""Draw ``bench/vllm_bench.py``'s ratios to vLLM's own queue: a panel per workload and run.

A run draws its own plot (``--plot F.png``). Runs saved with ``--json`` (one per build,
say) are drawn together, a row of panels per run, with no new timing::

    python -I bench/vllm_plot.py OUT.png PURE.json COMPILED.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")  # files only: no display on a build machine

import matplotlib.pyplot as plt  # after mpl.use: the backend is fixed at import
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, NullFormatter

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench/, beside the wheel

from bench.vllm_bench import TITLES, ratio_summary
from bench.workloads import WorkloadResult

__all__ = ["Run", "draw", "load_run", "main"]

MARKERS = "osD^v"
TICKS = [0.25, 0.5, 0.75, 1.0, 1.5, 2, 3, 5, 7, 10, 15, 20, 30]


@dataclass(frozen=True, slots=True)
class Run:
    """One run's results, the order of its rows, its reference row and its title."""

    results: list[WorkloadResult]
    names: list[str]
    reference: str
    title: str


def load_run(path: Path) -> Run:
    """Read a run saved by ``bench/vllm_bench.py --json``.

    Raises ``ValueError`` for a file that is not such a run.
    """
    payload: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    try:
        results = []
        for name, workload in payload["workloads"].items():
            result = WorkloadResult(name, workload["unit"])
            for subject, by_key in workload["samples"].items():
                for key, values in by_key.items():
                    for value in values:
                        result.record(subject, int(key), float(value))
            result.finish()
            results.append(result)
        return Run(results, list(payload["subjects"]), payload["reference"], payload["title"])
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: not a run of bench/vllm_bench.py --json ({error!r})") from None


def _ticks(limits: tuple[float, float]) -> list[float]:
    """The labelled ticks inside ``limits`` (matplotlib would widen the axis to show the rest)."""
    low, high = limits
    return [tick for tick in TICKS if low <= tick <= high]


def _panel(axis: Axes, result: WorkloadResult, run: Run) -> None:
    """Draw one workload of one run: a line per subject against n, or a bar per subject."""
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    reference = run.reference
    others = [name for name in run.names if name != reference]
    keys = list(result.medians[reference])
    summaries = {
        name: [
            ratio_summary(result.samples[name][key], result.samples[reference][key]) for key in keys
        ]
        for name in others
    }
    if len(keys) > 1:
        for index, name in enumerate(others):
            medians = [s.median for s in summaries[name]]
            below = [s.median - s.low for s in summaries[name]]
            above = [s.high - s.median for s in summaries[name]]
            axis.errorbar(
                keys,
                medians,
                yerr=[below, above],
                marker=MARKERS[index % len(MARKERS)],
                color=f"C{index + 1}",  # C0 is left for the reference, as in bench/plot.py
                capsize=3,
                label=name,
            )
        axis.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label=f"{reference} (1.0)")
        axis.set_xscale("log")
        axis.set_xticks(keys)
        axis.xaxis.set_major_formatter(plain)
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("n (blocks per get_new_blocks)")
        axis.set_yscale("log")
        low, high = axis.get_ylim()
        axis.set_ylim(min(low, 0.8), max(high, 1.25))
        axis.yaxis.set_major_formatter(plain)
        axis.yaxis.set_minor_formatter(NullFormatter())
        axis.set_yticks(_ticks(axis.get_ylim()))
        axis.set_ylabel("time / vLLM's queue's")
        axis.legend(fontsize="small")
    else:
        medians = [summaries[name][0].median for name in others]
        lows = [summaries[name][0].low for name in others]
        highs = [summaries[name][0].high for name in others]
        colours = [f"C{index + 1}" for index in range(len(others))]
        # Bars grow from 1.0: right of it slower than vLLM's queue, left of it faster.
        axis.barh(others, [m - 1.0 for m in medians], left=1.0, color=colours)
        axis.errorbar(
            medians,
            range(len(others)),
            xerr=[
                [m - lo for m, lo in zip(medians, lows, strict=True)],
                [hi - m for m, hi in zip(medians, highs, strict=True)],
            ],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        axis.axvline(1.0, color="black", linestyle="--", linewidth=1.2)
        axis.invert_yaxis()
        # A linear axis: these ratios stay near 1.0, where a log axis has no labelled ticks.
        axis.set_xlim(min(0.8, min(lows) - 0.1), max(1.25, max(highs) + 0.1))
        axis.set_xlabel("time per step / vLLM's queue's (dashed: 1.0)")
    axis.set_title(f"{TITLES.get(result.name, result.name)}\n(time per step, as a ratio)")
    axis.grid(visible=True, which="both", linewidth=0.3)


def draw(runs: Sequence[Run], path: Path) -> None:
    """Write a PNG with a row of panels per run: each subject's ratio to vLLM's queue.

    Each point is the median of the per-repetition ratios, its whiskers their
    quartiles; vLLM's own queue is the dashed line at 1.0 (below or left of it is
    faster). The ratio axes are logarithmic, so 0.5x and 2x lie equally far from it.
    """
    columns = max(len(run.results) for run in runs)
    figure = plt.figure(figsize=(6.4 * columns, 5.2 * len(runs)), layout="constrained")
    rows = figure.subfigures(len(runs), 1, squeeze=False)[:, 0]
    for row, run in zip(rows, runs, strict=True):
        axes = row.subplots(1, columns, squeeze=False)[0]
        for axis in axes[len(run.results) :]:
            axis.set_visible(False)
        for axis, result in zip(axes, run.results, strict=False):
            _panel(axis, result, run)
        row.suptitle(run.title, fontsize="small")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    """Draw the runs saved in the JSON files named in ``argv`` into one PNG."""
    parser = argparse.ArgumentParser(prog="python -I bench/vllm_plot.py", description=__doc__)
    parser.add_argument("out", type=Path, metavar="OUT.png")
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN.json")
    arguments = parser.parse_args(argv)
    try:
        runs = [load_run(path) for path in arguments.runs]
    except (OSError, ValueError) as error:
        parser.error(str(error))
    draw(runs, arguments.out)
    print(f"plot written to {arguments.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
