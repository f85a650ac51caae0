"""The examples in README.md, on the docs pages and in the modules' docstrings run as doctests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import verified_queue

ROOT = Path(__file__).resolve().parents[2]
# walk_packages, not iter_modules: the subpackages' modules (kvcache.pool, cli.demo) count too.
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(verified_queue.__path__, "verified_queue.")
    if info.name != "verified_queue.__main__"
)
# The guide pages that show examples of their own (docs/hooks.py also runs them when the site is
# built). A page that includes README.md's example through pymdownx.snippets holds only the
# "--8<--" line, so the example runs once, in test_readme_examples.
DOC_PAGES = sorted(page for page in (ROOT / "docs").glob("*.md") if ">>> " in page.read_text())


# The modules whose examples show an error's traceback that the trace level lengthens on
# purpose: it adds the queue's history of the block under the message (the pool's
# DoubleFreeError included, docs/check-mode.md), so the example's last line is no longer last.
TRACE_LENGTHENS = {"verified_queue.kvcache.pool"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.untraced_only) if name in TRACE_LENGTHENS else name
        for name in ["verified_queue", *MODULES]
    ],
)
def test_module_docstring_examples(name: str) -> None:
    """Every docstring example of the module produces the output it shows."""
    module = importlib.import_module(name)
    if not (module.__file__ or "").endswith(".py"):
        pytest.skip(f"{name} is compiled: its functions' docstrings are not discoverable")
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0


def test_the_queue_module_has_examples() -> None:
    """The hot module carries doctest examples (so the test above is not vacuous there)."""
    finder = doctest.DocTestFinder()
    source = ROOT / "verified_queue" / "queue.py"
    module = importlib.import_module("verified_queue.queue")
    if not (module.__file__ or "").endswith(".py"):
        pytest.skip("verified_queue.queue is compiled")
    examples = sum(len(test.examples) for test in finder.find(module))
    assert source.exists()
    assert examples >= 20


@pytest.mark.production_only  # the README shows the production class's repr
def test_readme_examples() -> None:
    """Every example in README.md produces the output it shows."""
    results = doctest.testfile(
        str(ROOT / "README.md"), module_relative=False, optionflags=doctest.ELLIPSIS
    )
    assert results.attempted > 0
    assert results.failed == 0


def test_the_guide_pages_have_examples() -> None:
    """The documentation pages carry examples, so the page test below is not vacuous."""
    if not (ROOT / "docs" / "index.md").exists():
        pytest.skip("no docs/ here (mutation testing runs on a copy without it)")
    assert len(DOC_PAGES) >= 2


def _example_runs(path: Path, length: int = 3) -> set[tuple[str, ...]]:
    """Every run of ``length`` consecutive example sources in the file at ``path``."""
    sources = [example.source for example in doctest.DocTestParser().get_examples(path.read_text())]
    return {tuple(sources[i : i + length]) for i in range(len(sources) - length + 1)}


def test_no_example_is_copied_between_pages() -> None:
    """README.md and the docs pages share no examples: a shared one is included, not copied."""
    if not (ROOT / "docs" / "index.md").exists():
        pytest.skip("no docs/ here (mutation testing runs on a copy without it)")
    files = [ROOT / "README.md", *DOC_PAGES]
    seen: dict[tuple[str, ...], str] = {}
    for path in files:
        runs = _example_runs(path)
        for run in runs:
            assert run not in seen, f"{path.name} repeats an example of {seen[run]}: {run[0]!r}"
        seen.update(dict.fromkeys(runs, path.name))


@pytest.mark.production_only  # the pages show the production class's repr
@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda page: page.name)
def test_docs_page_examples(page: Path) -> None:
    """Every example on the documentation page produces the output it shows."""
    results = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0
    assert results.failed == 0
