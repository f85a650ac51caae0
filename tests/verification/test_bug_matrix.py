"""The planted-bug catalogue and the bug x layer matrix that ``docs/bug-matrix.md`` publishes.

The cheap columns, the queue's layers and the checkers', are recomputed here at the small
sizes :mod:`specs.layer_matrix` names. The proof and CrossHair columns are recorded, not
recomputed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specs import bug_matrix
from specs.planted_bugs import CATALOGUE, KINDS, PLANTED_BUGS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "bug-matrix.md"

Matrix = dict[tuple[str, str], bool]

pytestmark = pytest.mark.bug_matrix


@pytest.fixture(scope="module")
def cheap() -> Matrix:
    """The cheap columns, computed once for the tests of this module."""
    return bug_matrix.compute()


def test_catalogue_covers_every_kind_and_newer_operation() -> None:
    """At least 20 bugs, every kind planted, and a bug in each of the newer operations."""
    assert len(CATALOGUE) >= 20
    assert list(PLANTED_BUGS) == list(CATALOGUE)
    kinds = {bug.kind for bug in CATALOGUE.values()}
    assert kinds == set(KINDS)
    operations = {bug.operation for bug in CATALOGUE.values()}
    assert {"popleft_n", "prepend_n", "iter_blocks_after", "__init__"} <= operations
    for name, bug in CATALOGUE.items():
        assert bug.operation in vars(bug.queue_type), f"{name} does not override {bug.operation}"


def test_every_bug_is_caught_by_three_cheap_layers(cheap: Matrix) -> None:
    """Each planted bug is reported by at least three of the layers the default run computes."""
    for name in CATALOGUE:
        layers = [layer for layer in bug_matrix.CHEAP_LAYERS if cheap[layer, name]]
        assert len(layers) >= 3, f"{name} is caught only by {layers}"


def test_every_miss_is_explained(cheap: Matrix) -> None:
    """A cheap layer misses exactly the bugs MISSES gives it a reason for, no more, no fewer."""
    missed = {key for key, found in cheap.items() if not found}
    explained = {key for key in bug_matrix.MISSES if key[0] in bug_matrix.CHEAP_LAYERS}
    assert missed == explained, (sorted(missed - explained), sorted(explained - missed))


def test_recorded_columns_are_complete_and_explained() -> None:
    """The proof and CrossHair columns name every bug they reach, and explain each miss."""
    for layer, (when, column) in bug_matrix.RECORDED.items():
        assert when, f"{layer}: no date and commit"
        out_of_reach = {name for key, name in bug_matrix.NOT_APPLICABLE if key == layer}
        assert set(column) == set(CATALOGUE) - out_of_reach, layer
        missed = {(layer, name) for name, found in column.items() if not found}
        explained = {key for key in bug_matrix.MISSES if key[0] == layer}
        assert missed == explained, layer


def test_page_matches_the_layers(cheap: Matrix) -> None:
    """docs/bug-matrix.md is what the generator writes from the matrix computed now."""
    expected = bug_matrix.render(cheap) + "\n"
    assert PAGE.read_text(encoding="utf-8") == expected, (
        "docs/bug-matrix.md is stale: python -m specs.bug_matrix --write docs/bug-matrix.md"
    )
