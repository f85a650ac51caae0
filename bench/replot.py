"""``python -I bench/replot.py PAGE SECTION OUT.png``: redraw a published plot from its tables.

The plot that ``--plot FILE.png`` draws (:func:`bench.plot.draw`) is made from the
medians that the same run prints as Markdown tables, so a page that shows a run's
report holds everything its plot needs. This reads the report printed in one
section of ``PAGE`` and draws its plot again into ``OUT.png``, with no new timing:
after a change to how the plot is drawn, the published plot can be redrawn from the
published tables without publishing new timings.

``SECTION`` is the text of a heading of ``PAGE``, or its start (``"The compiled
build"``); the section runs from that heading to the next heading of any level. In
it, the report's tables are those :func:`bench.run.format_table` prints, the workload
tables (``| single (µs per step) | n=10 | ...`` and ``| build (1,000,000 blocks) | ms
| ratio |``), one after another from the first one up to the first other table (the
bytes per block): the switch-off check printed after that, a second ``single`` table,
is not in the run's plot either, and a later table of another workload (one whose
header broke out of the format cut the run's tables short) is refused. Each row
becomes an implementation (in the order of the rows, which gives each its colour)
and each cell a median in seconds, to the precision printed. The plot's ratios are
computed again from those medians, so they differ from the ratios in brackets by the
medians' rounding (0.01 µs is 2% of a 0.23 µs median). The title is the run's: its
line ``verified_queue VERSION (BUILD), Python ...; ratios are to the REFERENCE row``
(which names the reference row too), its load line ``machine load (1-minute
average): ...``, and `` (noisy run)`` if the report warned that the run was noisy.

A section with no such table, a table that breaks the format (a cell that is not a
median and its ratio, a row short of cells, a ratio that its medians do not give, a
reference row not at 1.00x), or a report without its one description line or load
line is refused, with a message that names the line or the section.

Usage, from a checkout, with matplotlib installed (the ``plot`` dependency group)::

    python -I bench/replot.py docs/performance.md "The pure-Python build" docs/bench.png
    python -I bench/replot.py docs/performance.md "The compiled build" docs/bench-compiled.png
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench/, beside the wheel

from bench.run import WORKLOADS
from bench.subjects import Subject
from bench.workloads import WorkloadResult

__all__ = ["Report", "main", "read_report", "section_lines"]

#: The unit of the build workload, as :func:`bench.workloads.run_build` names it (its table
#: prints "ms" in a column header instead).
BUILD_UNIT = "ms per queue"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
DESCRIPTION = re.compile(
    r"^verified_queue \S+ \(.+\), Python \S+ on .+; ratios are to the (?P<reference>.+) row$"
)
LOAD = re.compile(r"^machine load \(1-minute average\): .+$")
NOISY = "WARNING, noisy run: "
#: The first cell of a workload table's header: the workload and its unit, or the build size.
WORKLOAD_HEADER = re.compile(r"^(?P<name>[a-z]+) \((?P<unit>[^()]+)\)$")
BUILD_SIZE = re.compile(r"^(?P<size>\d{1,3}(,\d{3})*) blocks$")
SIZE_CELL = re.compile(r"^n=(?P<n>\d+)$")
STEPPED_CELL = re.compile(r"^(?P<median>\d{1,3}(,\d{3})*\.\d{2}) \((?P<ratio>\d+\.\d{2})x\)$")
BUILD_MEDIAN = re.compile(r"^\d{1,3}(,\d{3})*\.\d$")
BUILD_RATIO = re.compile(r"^(?P<ratio>\d+\.\d{2})x$")


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`bench.plot.draw` needs, read back from a printed report."""

    heading: str
    title: str
    reference: str
    results: list[WorkloadResult]
    subjects: list[Subject]


@dataclass(frozen=True, slots=True)
class _Table:
    line: int  # the header's line number in the page, from 1
    rows: list[tuple[int, list[str]]]  # (line number, cells), the header and rule included


def _not_measured(*_: object) -> NoReturn:
    raise RuntimeError("an implementation read back from a printed table cannot be measured")


def _cells(row: str) -> list[str]:
    """The cells of a table row as ``format_table`` prints it (no ``|`` inside a cell)."""
    text = row.strip()
    if not (text.startswith("|") and text.endswith("|")):
        return []
    return [cell.strip() for cell in text[1:-1].split("|")]


def section_lines(page: str, section: str) -> tuple[str, list[tuple[int, str, bool]]]:
    """Return the heading that ``section`` names and its lines: ``(number, text, in a fence)``.

    ``section`` is a heading's text or its start; it must name exactly one heading
    (headings inside fenced code are not headings). The section ends at the next heading.
    """
    lines = page.splitlines()
    in_fence = False
    headings: list[tuple[int, str]] = []
    fenced: list[bool] = []
    for index, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            fenced.append(True)
            continue
        fenced.append(in_fence)
        found = None if in_fence else HEADING.match(line)
        if found is not None:
            headings.append((index, found.group(2)))
    chosen = [(index, text) for index, text in headings if text.startswith(section)]
    exact = [(index, text) for index, text in chosen if text == section]
    if len(exact) == 1:
        chosen = exact
    if len(chosen) != 1:
        known = "; ".join(repr(text) for _, text in headings) or "none"
        what = "no heading of the page starts" if not chosen else f"{len(chosen)} headings start"
        raise ValueError(f"{what} with {section!r} (the page's headings: {known})")
    start, heading = chosen[0]
    end = next((index for index, _ in headings if index > start), len(lines))
    return heading, [(index + 1, lines[index], fenced[index]) for index in range(start + 1, end)]


def _tables(lines: list[tuple[int, str, bool]]) -> list[_Table]:
    """The Markdown tables of ``lines`` outside fenced code: runs of lines starting with ``|``."""
    tables: list[_Table] = []
    current: list[tuple[int, list[str]]] = []
    for number, text, fenced in [*lines, (0, "", False)]:
        if not fenced and text.lstrip().startswith("|"):
            current.append((number, _cells(text)))
        elif current:
            tables.append(_Table(current[0][0], current))
            current = []
    return tables


def _workload(table: _Table) -> str | None:
    """The workload a table is of, by its header, or ``None`` if it is not a workload table."""
    header = table.rows[0][1]
    found = WORKLOAD_HEADER.match(header[0]) if header else None
    if found is None or found.group("name") not in WORKLOADS:
        return None
    return found.group("name")


def _seconds(text: str, scale: float) -> float:
    return float(text.replace(",", "")) / scale


def _check_ratio(where: str, median: str, base: str, ratio: str, half_unit: float) -> None:
    """Refuse a printed ratio that no medians within their rounding give (all as printed)."""
    mine, theirs, printed = (float(text.replace(",", "")) for text in (median, base, ratio))
    if theirs - half_unit <= 0:
        return  # a reference printed as 0.00 bounds no ratio
    low = max(mine - half_unit, 0.0) / (theirs + half_unit)
    high = (mine + half_unit) / (theirs - half_unit)
    if not low - 0.005 <= printed <= high + 0.005:
        raise ValueError(
            f"{where}: the ratio {ratio}x does not follow from the medians {median} and {base} "
            f"({low:.3f}x to {high:.3f}x within their rounding): not a table format_table printed"
        )


def _columns(line: int, name: str, header: list[str]) -> tuple[str, list[int]]:
    """The unit and the values of n of a workload table, from its header."""
    unit = WORKLOAD_HEADER.fullmatch(header[0])
    assert unit is not None  # _workload matched it
    if name == "build":
        size = BUILD_SIZE.fullmatch(unit.group("unit"))
        if size is None or header[1:] != ["ms", "ratio"]:
            raise ValueError(
                f"line {line}: a build table's header is '| build (N blocks) | ms | ratio |'"
            )
        return BUILD_UNIT, [int(size.group("size").replace(",", ""))]
    if not unit.group("unit").startswith("µs per "):
        raise ValueError(
            f"line {line}: the {name} table is in {unit.group('unit')!r}; format_table prints µs"
        )
    sizes: list[int] = []
    for cell in header[1:]:
        found = SIZE_CELL.fullmatch(cell)
        if found is None:
            raise ValueError(f"line {line}: the {name} table's header cell {cell!r} is not n=N")
        sizes.append(int(found.group("n")))
    if not sizes:
        raise ValueError(f"line {line}: the {name} table has no column of n")
    return unit.group("unit"), sizes


def _row(number: int, name: str, sizes: list[int], row: list[str]) -> list[tuple[str, str]]:
    """A row's medians and ratios by n, as printed; refuse a cell not in the format."""
    subject, *cells = row
    if name == "build":
        ratio = BUILD_RATIO.fullmatch(cells[1])
        if BUILD_MEDIAN.fullmatch(cells[0]) is None or ratio is None:
            raise ValueError(
                f"line {number}: {subject!r} in the build table is not 'ms | ratio' "
                f"(e.g. '| 32.5 | 0.38x |'): {cells[0]!r}, {cells[1]!r}"
            )
        return [(cells[0], ratio.group("ratio"))]
    pairs: list[tuple[str, str]] = []
    for n, cell in zip(sizes, cells, strict=True):
        found = STEPPED_CELL.fullmatch(cell)
        if found is None:
            raise ValueError(
                f"line {number}: {subject!r} at n={n} in the {name} table is not "
                f"'median (ratio)' (e.g. '2.30 (1.00x)'): {cell!r}"
            )
        pairs.append((found.group("median"), found.group("ratio")))
    return pairs


def _read_table(table: _Table, name: str, reference: str) -> WorkloadResult:
    """Rebuild the workload's medians (seconds) from its table; refuse any break of format."""
    (line, header), *rest = table.rows
    if not rest or not all(re.fullmatch(r"-+:?", cell) for cell in rest[0][1]):
        raise ValueError(f"line {line}: the {name} table has no rule row under its header")
    if len(rest[0][1]) != len(header):
        raise ValueError(
            f"line {rest[0][0]}: the {name} table's rule row has {len(rest[0][1])} cells, "
            f"its header {len(header)}"
        )
    unit, sizes = _columns(line, name, header)
    printed: dict[str, list[tuple[str, str]]] = {}  # row -> (median, ratio) by n, as printed
    numbers: dict[str, int] = {}
    for number, row in rest[1:]:
        if len(row) != len(header):
            raise ValueError(
                f"line {number}: a row of the {name} table has {len(row)} cells, "
                f"its header {len(header)}"
            )
        if not row[0]:
            raise ValueError(f"line {number}: a row of the {name} table has no name")
        if row[0] in printed:
            raise ValueError(f"line {number}: the {name} table has two rows {row[0]!r}")
        printed[row[0]] = _row(number, name, sizes, row)
        numbers[row[0]] = number
    if not printed:
        raise ValueError(f"line {line}: the {name} table has no rows")
    # format_table's reference: the run's, or the first row where the workload did not measure it.
    base = reference if reference in printed else next(iter(printed))
    if any(ratio != "1.00" for _, ratio in printed[base]):
        raise ValueError(
            f"line {numbers[base]}: the {name} table's reference row {base!r} is not at 1.00x "
            "everywhere"
        )
    scale, half_unit = (1e3, 0.05) if name == "build" else (1e6, 0.005)
    result = WorkloadResult(name, unit)
    for subject, pairs in printed.items():
        for n, (median, ratio), (base_median, _) in zip(sizes, pairs, printed[base], strict=True):
            where = f"line {numbers[subject]}: {subject!r} at n={n} in the {name} table"
            _check_ratio(where, median, base_median, ratio, half_unit)
            result.medians.setdefault(subject, {})[n] = _seconds(median, scale)
    return result


def _subjects(results: Sequence[WorkloadResult], where: dict[str, int]) -> list[Subject]:
    """The implementations in the tables' row order (one order that every table follows)."""
    order: list[str] = []
    for result in results:
        previous: str | None = None
        for name in result.medians:
            if name not in order:
                order.insert(0 if previous is None else order.index(previous) + 1, name)
            previous = name
    for result in results:
        positions = [order.index(name) for name in result.medians]
        if positions != sorted(positions):
            raise ValueError(
                f"line {where[result.name]}: the {result.name} table lists its rows in another "
                "order than the tables before it"
            )
    return [Subject(name, _not_measured, _not_measured) for name in order]


def read_report(page: str, section: str) -> Report:
    """Read the report printed in ``section`` of ``page`` back into what the plot was drawn from.

    Raises ``ValueError``, with a message that names the section or the line, when
    ``section`` names no heading or several, when the section has no workload table,
    or when a table or the report breaks the format ``bench/run.py`` prints.
    """
    heading, lines = section_lines(page, section)
    tables = _tables(lines)
    first = next((index for index, table in enumerate(tables) if _workload(table)), None)
    if first is None:
        raise ValueError(
            f"section {heading!r} has no benchmark table (a header such as "
            "'| single (µs per step) | n=10 | ...' or '| build (1,000,000 blocks) | ms | ratio |')"
        )
    texts = [text.strip() for _, text, _ in lines]
    descriptions = [found for text in texts if (found := DESCRIPTION.match(text)) is not None]
    if len(descriptions) != 1:
        raise ValueError(
            f"section {heading!r} has {len(descriptions)} lines 'verified_queue VERSION (BUILD), "
            "Python ...; ratios are to the REFERENCE row', where one run's report has one: "
            "the plot's title and reference come from it"
        )
    loads = [text for text in texts if LOAD.match(text)]
    if len(loads) != 1:
        raise ValueError(
            f"section {heading!r} has {len(loads)} lines 'machine load (1-minute average): ...', "
            "where one run's report has one: the plot's title ends with it"
        )
    reference = descriptions[0].group("reference")
    title = f"{descriptions[0].group(0)}\n{loads[0]}"
    if any(text.startswith(NOISY) for text in texts):
        title += " (noisy run)"
    results: list[WorkloadResult] = []
    where: dict[str, int] = {}
    end: _Table | None = None
    for table in tables[first:]:
        name = _workload(table)
        if end is not None:
            if name is not None and name not in where:
                raise ValueError(
                    f"line {table.line}: a {name} table after the table at line {end.line}, "
                    "which ended the run's workload tables (a broken header there?)"
                )
            continue  # the switch-off check repeats single: no workload of the plot
        if name is None:
            end = table  # the bytes per block
            continue
        if name in where:
            raise ValueError(
                f"line {table.line}: a second {name} table (the first at line {where[name]}) "
                "before any other table: one run prints each workload once"
            )
        where[name] = table.line
        results.append(_read_table(table, name, reference))
    return Report(heading, title, reference, results, _subjects(results, where))


def main(argv: Sequence[str] | None = None) -> int:
    """Redraw the plot of the report in ``argv``'s section; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -I bench/replot.py",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("page", type=Path, help="the Markdown page, e.g. docs/performance.md")
    parser.add_argument("section", help="a heading's text or its start, e.g. 'The compiled build'")
    parser.add_argument("output", type=Path, metavar="OUT.png", help="the PNG to write")
    args = parser.parse_args(argv)
    try:
        report = read_report(args.page.read_text(encoding="utf-8"), args.section)
    except (OSError, ValueError) as error:
        raise SystemExit(f"replot: {args.page}: {error}") from None
    from bench.plot import draw  # noqa: PLC0415 -- matplotlib is an optional extra

    draw(
        report.results, report.subjects, args.output, title=report.title, reference=report.reference
    )
    print(
        f"plot written to {args.output}, from section {report.heading!r} of {args.page}: "
        f"{', '.join(result.name for result in report.results)}; "
        f"{len(report.subjects)} rows, ratios to {report.reference}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
