"""``bench/replot.py``: a printed report read back into the medians its plot was drawn from."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.noise import Load
from bench.replot import main, read_report
from bench.run import _describe, format_table
from bench.subjects import Subject
from bench.workloads import Settings, WorkloadResult

REFERENCE = "vLLM 0.34.0"
OURS = "verified_queue (pure Python)"
NAMES = [OURS, "check mode, default period", REFERENCE, "post-change vLLM"]
LOAD = Load(0.78, 0.93, 2)
DESCRIPTION = _describe(Settings(), REFERENCE)


def _unused(*_: object) -> NoReturn:
    raise AssertionError("not measured here")


SUBJECTS = [Subject(name, _unused, _unused) for name in NAMES]


def _result(name: str, unit: str, medians: dict[str, dict[int, float]]) -> WorkloadResult:
    result = WorkloadResult(name, unit)
    result.medians = medians
    return result


def _results() -> list[WorkloadResult]:
    """Medians with more digits than a table prints; prepend without the reference row.

    (As prepend is without post-change vLLM, the reference when vLLM's wheel is not found:
    format_table then gives its ratios to its first row.)
    """
    sizes = (10, 100, 1000)
    scale = {OURS: 1.0123, NAMES[1]: 6.3456, REFERENCE: 1.0, NAMES[3]: 1.0987}
    stepped = [
        _result(
            workload,
            unit,
            {
                name: {n: 2.3187e-6 * base * factor * n / 10 for n in sizes}
                for name, factor in scale.items()
                if workload != "prepend" or name in (OURS, NAMES[1])
            },
        )
        for workload, unit, base in (
            ("single", "µs per step", 1.0),
            ("batch", "µs per step", 0.4),
            ("prepend", "µs per step", 0.37),
            ("mixed", "µs per n operations", 0.7),
        )
    ]
    build = _result(
        "build", "ms per queue", {name: {1_000_000: 0.0862 * f} for name, f in scale.items()}
    )
    return [*stepped, build]


def _page(results: Sequence[WorkloadResult], noisy: bool = True, every: bool = True) -> str:
    """A page with a run's report as ``bench/run.py`` prints it, between other sections.

    ``every``: the run measured every workload, so it printed the bytes per block and the
    switch-off check (a second ``single`` table) too, as a run with ``--workload`` does not.
    """
    tables = "\n\n".join(format_table(result, SUBJECTS, REFERENCE) for result in results)
    switch = _result(
        "single", "µs per step", {"production": {10: 2.2e-6}, "switched": {10: 2.3e-6}}
    )
    switch_subjects = [Subject(name, _unused, _unused) for name in ("production", "switched")]
    warning = "WARNING, noisy run: single: the ratio moved by 25% of its median\n" if noisy else ""
    memory = f"""| block type | bytes per block (tracemalloc) |
|---|---:|
| Block (links only) | 48 |

{format_table(switch, switch_subjects, "production")}

switch off: verified_queue.FreeBlockQueue is the production class itself: True"""
    return f"""# Performance

Prose with a ratio of 1.00x and a table of another kind:

| workload | pure Python / vLLM 0.34.0 |
| --- | ---: |
| single | 0.99x to 1.26x |

## The pure-Python build (what `pip install .` gives)

```sh
# a shell comment is no heading
tox -e bench -- --full --plot docs/bench.png
```

printed:

{DESCRIPTION}

{tables}

{memory if every else ""}

```text
{LOAD.describe()}
{warning}```

| target | measured | met |
|---|---|---|
| a target | worst 1.32x (prepend, n=10) | NO |

### Why

| single (µs per step) | n=10 |
|---|---:|
| somebody else | 9.99 (1.00x) |
"""


def test_a_report_reads_back_into_its_medians_title_and_rows() -> None:
    """Every median to the printed precision, the rows in table order, the run's title."""
    results = _results()
    report = read_report(_page(results), "The pure-Python build")
    assert report.heading == "The pure-Python build (what `pip install .` gives)"
    assert report.reference == REFERENCE
    assert report.title == f"{DESCRIPTION}\n{LOAD.describe()} (noisy run)"
    assert [subject.name for subject in report.subjects] == NAMES
    assert [(r.name, r.unit) for r in report.results] == [(r.name, r.unit) for r in results]
    for mine, theirs in zip(report.results, results, strict=True):
        assert list(mine.medians) == list(theirs.medians)
        for name, by_n in theirs.medians.items():
            assert list(mine.medians[name]) == list(by_n)
            for n, seconds in by_n.items():
                if mine.name == "build":
                    assert f"{mine.medians[name][n] * 1e3:,.1f}" == f"{seconds * 1e3:,.1f}"
                    assert mine.medians[name][n] == pytest.approx(seconds, abs=0.05e-3)
                else:
                    assert f"{mine.medians[name][n] * 1e6:,.2f}" == f"{seconds * 1e6:,.2f}"
                    assert mine.medians[name][n] == pytest.approx(seconds, abs=0.005e-6)


def test_a_quiet_run_has_no_noisy_mark_and_a_table_prints_again_the_same() -> None:
    """Medians on the printed grid give back the very tables; no warning, no "(noisy run)"."""
    grid = [
        _result(
            r.name,
            r.unit,
            {
                name: {
                    n: round(s * 1e3, 1) / 1e3 if r.name == "build" else round(s * 1e6, 2) / 1e6
                    for n, s in by_n.items()
                }
                for name, by_n in r.medians.items()
            },
        )
        for r in _results()
    ]
    report = read_report(_page(grid, noisy=False), "The pure")
    assert report.title == f"{DESCRIPTION}\n{LOAD.describe()}"
    for mine, theirs in zip(report.results, grid, strict=True):
        assert format_table(mine, report.subjects, REFERENCE) == format_table(
            theirs, SUBJECTS, REFERENCE
        )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(min_value=1e-8, max_value=5e-2, allow_nan=False, allow_infinity=False),
        min_size=len(NAMES) * 2,
        max_size=len(NAMES) * 2,
    )
)
def test_any_medians_read_back_to_the_printed_precision(seconds: list[float]) -> None:
    """Whatever the medians, the table's cells are read back as printed, ratios accepted."""
    by_name = {name: {10: seconds[2 * i], 50: seconds[2 * i + 1]} for i, name in enumerate(NAMES)}
    result = _result("batch", "µs per step", by_name)
    (read,) = read_report(_page([result], every=False), "The pure-Python build").results
    for name, by_n in by_name.items():
        for n, value in by_n.items():
            assert f"{read.medians[name][n] * 1e6:,.2f}" == f"{value * 1e6:,.2f}"


def test_the_reference_comes_from_the_description_line() -> None:
    """A row at 1.00x everywhere is not the reference unless the description names it."""
    results = [_result("single", "µs per step", {OURS: {10: 1e-6}, REFERENCE: {10: 1e-6}})]
    page = _page(results, every=False).replace(f"the {REFERENCE} row", f"the {OURS} row")
    assert read_report(page, "The pure-Python build").reference == OURS


def test_a_section_without_tables_is_refused() -> None:
    """A section with the report's lines but no workload table says so, by name."""
    page = f"# Page\n\n## Empty\n\n{DESCRIPTION}\n\n{LOAD.describe()}\n\n## Next\n"
    with pytest.raises(ValueError, match=r"section 'Empty' has no benchmark table"):
        read_report(page, "Empty")


def test_a_missing_or_ambiguous_section_lists_the_headings() -> None:
    """The section named must be exactly one heading; the error lists the page's headings."""
    page = _page(_results())
    with pytest.raises(ValueError, match=r"no heading of the page starts with 'The compiled"):
        read_report(page, "The compiled build")
    with pytest.raises(
        ValueError, match=r"the page's headings: 'Performance'; 'The pure-Python build"
    ):
        read_report(page, "Nowhere")
    with pytest.raises(ValueError, match=r"^2 headings start with 'P'"):
        read_report(page.replace("## The pure", "## Pure"), "P")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "| 2.35 (1.01x) |",
            "| 2.35 1.01x |",
            r"line \d+: 'verified_queue \(pure Python\)' at n=10 in the single table is not "
            r"'median \(ratio\)' \(e\.g\. '2\.30 \(1\.00x\)'\): '2\.35 1\.01x'",
        ),
        ("| 2.35 (1.01x) |", "|", r"line \d+: a row of the single table has 3 cells, its header 4"),
        (
            "| 2.35 (1.01x) |",
            "| 2.35 (1.21x) |",
            r"the ratio 1\.21x does not follow from the medians",
        ),
        ("| n=10 | n=100 |", "| n=10 | 100 |", r"header cell '100' is not n=N"),
        ("|---|---:|---:|---:|\n| verified", "| verified", r"the single table has no rule row"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_line(old: str, new: str, message: str) -> None:
    """A table that format_table cannot have printed is refused, with its line and cell."""
    page = _page(_results())
    assert old in page
    broken = page.replace(old, new, 1)
    with pytest.raises(ValueError, match=message) as refused:
        read_report(broken, "The pure-Python build")
    found = re.match(r"line (\d+):", str(refused.value))
    assert found is not None
    line = broken.splitlines()[int(found.group(1)) - 1]
    assert line.startswith("|")


def test_a_workload_table_after_the_run_s_tables_ended_is_refused() -> None:
    """A header broken out of the format ends the run's tables early: not silently."""
    broken = _page(_results()).replace("| batch (µs per step) |", "| batch, µs per step |")
    with pytest.raises(ValueError, match=r"line \d+: a prepend table after the table at line \d+"):
        read_report(broken, "The pure-Python build")


def test_a_reference_row_off_one_is_refused() -> None:
    """The reference row the description names must be at 1.00x in its tables."""
    page = _page(_results()).replace(f"the {REFERENCE} row", "the post-change vLLM row")
    with pytest.raises(ValueError, match=r"reference row 'post-change vLLM' is not at 1\.00x"):
        read_report(page, "The pure-Python build")


def test_a_report_without_its_description_or_load_line_is_refused() -> None:
    """Without them the plot's title, and its reference, cannot be the run's."""
    page = _page(_results())
    with pytest.raises(ValueError, match=r"has 0 lines 'verified_queue VERSION"):
        read_report(page.replace(DESCRIPTION, "a description"), "The pure-Python build")
    with pytest.raises(ValueError, match=r"has 0 lines 'machine load"):
        read_report(page.replace(LOAD.describe(), "load"), "The pure-Python build")


def test_a_workload_twice_in_a_row_is_refused() -> None:
    """Two runs' tables one after the other are not one run's plot."""
    results = _results()
    page = _page([results[0], results[0]], every=False)
    with pytest.raises(ValueError, match=r"a second single table \(the first at line \d+\)"):
        read_report(page, "The pure-Python build")


def test_the_command_line_exits_with_the_reason(tmp_path: Path) -> None:
    """The command names the page and the problem, and writes nothing."""
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## Empty\n\nNothing measured.\n", encoding="utf-8")
    out = tmp_path / "out.png"
    with pytest.raises(
        SystemExit, match=r"^replot: .*page\.md: section 'Empty' has no benchmark table"
    ):
        main([str(page), "Empty", str(out)])
    assert not out.exists()


def test_the_command_line_draws_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With matplotlib installed, the plot is written and the command says what it drew."""
    pytest.importorskip("matplotlib")
    page = tmp_path / "page.md"
    page.write_text(_page(_results()), encoding="utf-8")
    out = tmp_path / "out.png"
    assert main([str(page), "The pure-Python build", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "single, batch, prepend, mixed, build; 4 rows, ratios to vLLM 0.34.0" in printed
