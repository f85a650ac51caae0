"""The pages say what the code does: tables that render, and counts recomputed, not typed.

A Markdown table ends at its first blank line: the rows after one render as lines of raw
``|`` text, and ``mkdocs build --strict`` does not flag it, so the tables are checked here.
A count the code can compute (the exhaustive check's states and transitions, the plugin
tests' numbers) is recomputed and compared with the page, cheaply: a run of ``tox -e
exhaustive`` takes minutes, the formula a millisecond.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Every Markdown file the site shows: the pages, and the root files they include.
MARKDOWN = sorted(
    [
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / name for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md")),
    ]
)
FENCE = re.compile(r"^\s*(```|~~~)")
SEPARATOR = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")


def _needs_docs() -> None:
    if not (ROOT / "docs" / "index.md").exists():
        pytest.skip("no docs/ here (mutation testing runs on a copy without it)")


def cells(row: str) -> list[str]:
    """The cells of a table row: split at each ``|`` outside a code span and not escaped."""
    found: list[str] = []
    current: list[str] = []
    in_code = False
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") and not text.endswith("\\|") else text
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            current.append(text[index : index + 2])
            index += 2
            continue
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            found.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        index += 1
    found.append("".join(current).strip())
    return found


def table_problems(text: str) -> list[str]:
    """What keeps a table of ``text`` from rendering as written: one line per problem.

    A run of ``|`` lines must start with a header row and a separator row, and every row
    must have the header's number of cells. Fenced code blocks are skipped.

    >>> table_problems("| a | b |\\n| --- | --- |\\n| 1 | 2 |\\n\\n| 3 | 4 |\\n")
    ['line 5: 1 table row after a blank line that ends the table above it: it renders as text']
    """
    problems: list[str] = []
    lines = text.splitlines()
    in_fence = False
    blocks: list[tuple[int, list[str]]] = []
    previous_blank_after_table = False
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.lstrip().startswith("|"):
            continue
        if blocks and blocks[-1][0] + len(blocks[-1][1]) == number:
            blocks[-1][1].append(line)
        else:
            blocks.append((number, [line]))
    for index, (start, rows) in enumerate(blocks):
        if len(rows) < 2 or not SEPARATOR.match(rows[1].strip()):
            before = blocks[index - 1] if index else None
            previous_blank_after_table = before is not None and all(
                not line.strip() for line in lines[before[0] - 1 + len(before[1]) : start - 1]
            )
            if previous_blank_after_table:
                problems.append(
                    f"line {start}: {len(rows)} table row{'s' if len(rows) > 1 else ''} after a "
                    "blank line that ends the table above it: it renders as text"
                )
            else:
                problems.append(f"line {start}: a table without a header and separator row")
            continue
        width = len(cells(rows[0]))
        for offset, row in enumerate(rows[1:], 1):
            found = len(cells(row))
            if found != width:
                problems.append(
                    f"line {start + offset}: {found} cells in a table of {width} columns"
                )
    return problems


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda path: path.name)
def test_every_table_renders_as_a_table(path: Path) -> None:
    """No table is broken by a blank line, and every row has its header's number of cells."""
    if not path.exists():
        pytest.skip(f"no {path.name} here")
    assert table_problems(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n| 5 | 6 |\n", "2 table rows after"),
        ("| a | b |\n| --- | --- |\n| 1 | 2 | 3 |\n", "3 cells in a table of 2 columns"),
        ("text\n| 1 | 2 |\n", "a table without a header"),
    ],
)
def test_the_table_check_finds_each_kind_of_break(text: str, expected: str) -> None:
    """The check can fail: a blank line inside a table, a row too wide, a table with no header."""
    problems = table_problems(text)
    assert len(problems) == 1
    assert expected in problems[0]


def test_the_table_check_passes_code_spans_and_fences() -> None:
    """A ``|`` inside a code span or an escaped one splits no cell; fenced blocks are not tables."""
    text = "| a | b |\n| --- | :-: |\n| `x | y` | a \\| b |\n\n```text\n| not a table\n```\n"
    assert table_problems(text) == []


# --- the exhaustive check's counts -----------------------------------------------------------

EXHAUSTIVE_ROW = re.compile(
    r"every state of (?P<blocks>\d+) blocks.*?\| (?P<states>[\d,]+) states "
    r"\((?P<two>[\d,]+) with B non-empty\), (?P<transitions>[\d,]+) transitions"
    r"(?: \([\d,]+ refused\))?, (?P<queries>[\d,]+) queries, (?P<skipped>[\d,]+) calls skipped"
    r".*?\| `(?P<command>[^`]+)`"
)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _exhaustive_rows() -> list[dict[str, str]]:
    """The rows of the verification page's table that state an exhaustive run's counts."""
    text = (ROOT / "docs" / "verification.md").read_text(encoding="utf-8")
    return [match.groupdict() for match in EXHAUSTIVE_ROW.finditer(text)]


def _run_arguments(command: str) -> tuple[int, int]:
    """``(blocks, max_batch)`` of a documented command, tox's environment read from tox.ini."""
    words = command.split()
    if words[:3] == ["tox", "-e", "exhaustive"]:
        tox = configparser.ConfigParser(interpolation=None)
        tox.read(ROOT / "tox.ini", encoding="utf-8")
        words = tox["testenv:exhaustive"]["commands"].split() + words[3:]

    def option(name: str, default: int) -> int:
        # The last one given wins, as argparse has it (tox's posargs come after its own).
        values = [words[index + 1] for index, word in enumerate(words[:-1]) if word == name]
        return int(values[-1]) if values else default

    return option("--blocks", 6), option("--max-batch", 3)


def test_the_exhaustive_counts_on_the_page_are_the_codes() -> None:
    """Each exhaustive run on the verification page states the counts its run reports.

    ``specs.exhaustive.expected_counts`` computes them from the check's own lists of
    operations and batches (a real run agrees: tests/verification/test_exhaustive.py), so
    a changed check or a changed `tox -e exhaustive` makes the page wrong here, at once.
    """
    _needs_docs()
    from specs.exhaustive import expected_counts  # noqa: PLC0415 -- the repository's specs/

    rows = _exhaustive_rows()
    assert [row["command"].split(" (")[0] for row in rows] == [
        "python -m specs.exhaustive --blocks 6",
        "tox -e exhaustive",
        "tox -e exhaustive -- --blocks 8 --max-batch 2",
    ]
    for row in rows:
        blocks, max_batch = _run_arguments(row["command"])
        assert int(row["blocks"]) == blocks, row["command"]
        counts = expected_counts(blocks, max_batch)
        stated = [_number(row[key]) for key in ("states", "two", "transitions", "queries")]
        computed = [counts.states, counts.two_queue_states, counts.transitions, counts.queries]
        assert stated == computed, row["command"]
        assert _number(row["skipped"]) == counts.outside_contract, row["command"]


def test_the_count_check_fails_on_a_stale_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: one transition more in the code than on the page is caught."""
    _needs_docs()
    from specs import exhaustive  # noqa: PLC0415 -- the repository's specs/

    real = exhaustive.expected_counts

    def one_more(blocks: int, max_batch: int) -> exhaustive.ExhaustiveReport:
        counts = real(blocks, max_batch)
        counts.transitions += 1
        return counts

    monkeypatch.setattr(exhaustive, "expected_counts", one_more)
    with pytest.raises(AssertionError):
        test_the_exhaustive_counts_on_the_page_are_the_codes()


# --- the plugin tests' counts ----------------------------------------------------------------

PLUGIN_TESTS = re.compile(
    r"`tests/vllm/test_plugin.py` holds (?P<total>\d+) tests: (?P<stand_in>\d+) on a stand-in "
    r"vLLM package.*?and (?P<per_release>\d+) for each pinned release"
)


def collected_plugin_tests() -> list[str]:
    """The ids pytest collects in tests/vllm/test_plugin.py, with no wheel configured."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/vllm/test_plugin.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={
            key: value
            for key, value in os.environ.items()
            # No wheel, no extra options; and not python -O (tox -e optimized), under which
            # pytest warns that asserts are off, which this project's settings make an error.
            if not key.startswith(("VERIFIED_QUEUE_VLLM", "PYTEST_ADDOPTS", "PYTHONOPTIMIZE"))
        },
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_plugin_test_counts_on_the_vllm_page_are_collected() -> None:
    """docs/vllm.md gives tests/vllm/test_plugin.py's counts as pytest collects them."""
    _needs_docs()
    from conformance.wheel import PINNED_VERSIONS  # noqa: PLC0415 -- the repository's tooling

    text = " ".join((ROOT / "docs" / "vllm.md").read_text(encoding="utf-8").split())
    match = PLUGIN_TESTS.search(text)
    assert match is not None, "the page no longer states the plugin tests' counts"
    ids = collected_plugin_tests()
    # A test on vLLM's own files takes a pinned release among its parameters.
    per_release = {
        version: [test for test in ids if re.search(rf"[\[-]{re.escape(version)}[\]-]", test)]
        for version in PINNED_VERSIONS
    }
    on_wheels = {test for tests in per_release.values() for test in tests}
    assert int(match["total"]) == len(ids)
    assert int(match["stand_in"]) == len(ids) - len(on_wheels)
    assert {len(tests) for tests in per_release.values()} == {int(match["per_release"])}


# --- what the usage page says Block refuses, and when ------------------------------------------


def test_the_usage_page_says_when_a_frozen_block_class_is_refused() -> None:
    """A slotted frozen dataclass is refused when defined, an unslotted one at its first block.

    That is what ``Block`` can do (the decorator gives an unslotted class ``__setattr__``
    after the class exists), and what docs/usage.md's API table says.
    """
    import dataclasses  # noqa: PLC0415 -- this test's own

    from verified_queue.block import Block  # noqa: PLC0415 -- this test's own

    with pytest.raises(TypeError, match="do not freeze it"):

        @dataclasses.dataclass(frozen=True, slots=True)
        class SlottedFrozen(Block):
            block_id: int

    @dataclasses.dataclass(frozen=True)
    class Frozen(Block):
        block_id: int

    with pytest.raises(TypeError, match="do not freeze it"):
        Frozen(1)
    _needs_docs()
    text = " ".join((ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split())
    assert (
        "is refused with `TypeError`: when it is defined, or, for a frozen dataclass without "
        "`slots=True`, when its first block is built"
    ) in text


# --- the API reference's lists -----------------------------------------------------------------


def _markdown_docstring() -> Any:
    """docs/griffe_docstrings.py's ``markdown_docstring``, loaded with a stand-in for griffe."""
    import importlib.util  # noqa: PLC0415 -- this test's own
    import types  # noqa: PLC0415 -- this test's own

    stand_in = types.ModuleType("griffe")
    stand_in.Extension = object  # type: ignore[attr-defined]
    stand_in.Object = object  # type: ignore[attr-defined]
    saved = sys.modules.get("griffe")
    sys.modules["griffe"] = stand_in
    try:
        spec = importlib.util.spec_from_file_location(
            "griffe_docstrings", ROOT / "docs" / "griffe_docstrings.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["griffe"]
        else:
            sys.modules["griffe"] = saved
    return module.markdown_docstring


#: The nodes whose docstrings the API reference shows, besides the module's.
DOCUMENTED = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstrings(path: Path) -> list[str]:
    """The docstrings of the module at ``path``, its classes and functions, as Griffe reads them.

    From the source, as the site is built (mkdocstrings reads the checkout), so the compiled
    build's extension modules, which keep no module docstring, change nothing.
    """
    import inspect  # noqa: PLC0415 -- this test's own

    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(node for node in ast.walk(tree) if isinstance(node, DOCUMENTED))]
    return [inspect.cleandoc(text) for node in nodes if (text := ast.get_docstring(node))]


def test_the_reference_renders_the_invariants_as_a_list() -> None:
    """The queue's I1..I5 and the pool's P1..P5 become Markdown list items, a blank line before.

    Written as ``help()`` shows them, a labelled list under a sentence ran into one
    paragraph on the site.
    """
    _needs_docs()
    markdown_docstring = _markdown_docstring()
    package = ROOT / "verified_queue"
    for path, labels in ((package / "queue.py", "I"), (package / "kvcache" / "pool.py", "P")):
        lines = markdown_docstring(_docstrings(path)[0]).splitlines()
        items = [index for index, line in enumerate(lines) if line.startswith(f"- **{labels}")]
        assert [lines[index][4:6] for index in items] == [f"{labels}{n}" for n in range(1, 6)]
        assert lines[items[0] - 1] == ""  # the list starts a block of its own


def test_no_list_in_a_docstring_runs_into_the_paragraph_above() -> None:
    """In every docstring of the package, a list item follows a blank line or another item."""
    _needs_docs()
    markdown_docstring = _markdown_docstring()
    item = re.compile(r"^(?:[*+-] |\d+\. )")
    offenders = []
    for path in sorted((ROOT / "verified_queue").rglob("*.py")):
        for docstring in _docstrings(path):
            lines = markdown_docstring(docstring).splitlines()
            in_fence = False
            for before, line in zip(["", *lines], lines, strict=False):
                in_fence ^= line.lstrip().startswith("```")
                if in_fence or not item.match(line):
                    continue
                if before.strip() and not before.startswith(" ") and not item.match(before):
                    offenders.append(f"{path.name}: {line[:40]}")
    assert offenders == []
