"""The demo runs the documentation shows are the runs the demo makes: a seed names one run.

``docs/main-job.md`` says of its sample run that "the output is the same for the same
seed, apart from the timings", and ``docs/check-mode.md`` shows the end of a planted
double free. Both are checked here against a run made now, so that the workload (prompt
lengths, documents and their popularity, arrivals, output lengths, the cut of a request
to a quarter of the pool) stays the one the pages describe.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from verified_queue.cli.demo import DemoConfig, run_demo
from verified_queue.cli.simulation import Simulation

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: A progress line without its timing: percent, served, running, waiting, free, hit rate.
PROGRESS = re.compile(r"\s*\[\s*\d+%\].*hit rate\s+[\d.]+%")


class _FirstProgressLine(Exception):
    """Raised by the output once the run has printed its first progress line."""


class _StopAtFirstProgressLine(io.StringIO):
    """An output that ends the run as soon as the first progress line is written."""

    def write(self, text: str, /) -> int:
        """Keep ``text``; stop the run if it is a progress line."""
        written = super().write(text)
        if "%]" in text:
            raise _FirstProgressLine
        return written


def _documented_lines(page: str, pattern: str) -> list[str]:
    """Return the lines of ``docs/PAGE`` that match ``pattern``, stripped."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if re.search(pattern, line)]


def test_the_main_job_pages_sample_run_is_what_seed_0_gives() -> None:
    """The default workload at seed 0 reaches its first tenth as the main-job page shows.

    The page's 10% line (served, running, waiting, free blocks, hit rate) is a digest of
    everything drawn so far: any change in how requests are drawn or admitted shows in it.
    The run is stopped at that line, a tenth of the default run.
    """
    documented = _documented_lines("main-job.md", r"^\s+\[ 10%\]")[0]
    expected = PROGRESS.match(documented)
    assert expected is not None, documented
    out = _StopAtFirstProgressLine()
    simulation = Simulation(DemoConfig(checks=False), out)
    with contextlib.suppress(_FirstProgressLine):
        simulation.run()
    printed = PROGRESS.match(out.getvalue().strip())
    assert printed is not None, out.getvalue()
    assert printed[0].strip() == expected[0].strip()


def _without_line_numbers(lines: list[str]) -> list[str]:
    """Return ``lines`` stripped, without the report's label, the source line numbers, and
    where the package is installed (the page shows a checkout's paths)."""
    return [
        re.sub(r"\S*/verified_queue/", "verified_queue/", re.sub(r"\.py:\d+", ".py:N", line))
        .strip()
        .removeprefix("result")
        .strip()
        for line in lines
    ]


def test_the_check_mode_pages_double_free_is_what_the_command_gives() -> None:
    """``demo --requests 300 --blocks 1024 --inject double-free`` ends as check-mode.md shows.

    The block, its count, and the numbers of the queue operations that freed and took it
    are compared; the source line numbers the page quotes move with every edit of the
    simulation, so they are left out.
    """
    page = (DOCS / "check-mode.md").read_text(encoding="utf-8").splitlines()
    (start,) = [
        index
        for index, line in enumerate(page)
        if "STOPPED at the faulty call, by DoubleFreeError" in line
    ]
    # The result line and its four lines of history, up to the end of the console block.
    documented = page[start : page.index("```", start)]
    assert len(documented) == 5, documented
    out = io.StringIO()
    report = run_demo(DemoConfig(requests=300, blocks=1024, inject="double-free"), out)
    assert report.status == 1
    printed = out.getvalue().splitlines()[-len(documented) :]
    assert _without_line_numbers(printed) == _without_line_numbers(documented)
