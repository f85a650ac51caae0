"""The planted checker bugs against every layer: the matrix of ``docs/checker-bug-matrix.md``.

Every column but the proof's is recomputed here (the exhaustive layers over 3 blocks, the
machines derandomized and unshrunk), in the same process as the queue's matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specs import checker_matrix
from specs.bug_matrix import cells
from specs.planted_bugs.checkers import CHECKER_CATALOGUE

PAGE = Path(__file__).resolve().parents[2] / "docs" / "checker-bug-matrix.md"

Matrix = dict[tuple[str, str], bool]

pytestmark = pytest.mark.bug_matrix


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    """Every computed column, computed once for the tests of this module."""
    return checker_matrix.compute()


def test_catalogue_spans_the_three_files() -> None:
    """At least 7 bugs in the checkers and check mode, and 5 in the production queue."""
    sources = [bug.source for bug in CHECKER_CATALOGUE.values()]
    assert sources.count("invariants.py") + sources.count("checked.py") >= 7
    assert sources.count("queue.py") >= 5


def test_every_bug_is_caught_by_three_layers(matrix: Matrix) -> None:
    """Each planted checker bug is reported by at least three layers, recorded ones included."""
    page = cells(
        matrix,
        checker_matrix.RECORDED,
        checker_matrix.NOT_APPLICABLE,
        CHECKER_CATALOGUE,
        checker_matrix.LAYERS,
    )
    for name in CHECKER_CATALOGUE:
        layers = [layer for layer in checker_matrix.LAYERS if page[layer, name] == "caught"]
        assert len(layers) >= 3, f"{name} is caught only by {layers}"


def test_every_miss_is_explained(matrix: Matrix) -> None:
    """A layer misses exactly the bugs MISSES gives it a reason for, no more, no fewer."""
    missed = {key for key, found in matrix.items() if not found}
    for layer, (_when, column) in checker_matrix.RECORDED.items():
        missed |= {(layer, name) for name, found in column.items() if not found}
    assert missed == set(checker_matrix.MISSES), (
        sorted(missed - set(checker_matrix.MISSES)),
        sorted(set(checker_matrix.MISSES) - missed),
    )


def test_every_cell_is_run_recorded_or_explained(matrix: Matrix) -> None:
    """Each cell is computed or recorded, or its layer says why it cannot reach or did not run."""
    for layer in checker_matrix.LAYERS:
        column = checker_matrix.RECORDED.get(layer, ("", {}))[1]
        for name in CHECKER_CATALOGUE:
            sources = [
                (layer, name) in matrix,
                name in column,
                (layer, name) in checker_matrix.NOT_APPLICABLE,
                (layer, name) in checker_matrix.NOT_RUN,
            ]
            assert sources.count(True) == 1, (layer, name, sources)


def test_page_matches_the_layers(matrix: Matrix) -> None:
    """docs/checker-bug-matrix.md is what the generator writes from the matrix computed now."""
    expected = checker_matrix.render(matrix) + "\n"
    assert PAGE.read_text(encoding="utf-8") == expected, (
        "docs/checker-bug-matrix.md is stale: "
        "python -m specs.checker_matrix --write docs/checker-bug-matrix.md"
    )
