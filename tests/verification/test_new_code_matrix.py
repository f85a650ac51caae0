"""The planted bugs of the newer code against every layer: ``docs/new-code-bug-matrix.md``.

Recomputes the whole matrix (:func:`specs.new_code_matrix.compute`: each bug in a process of
its own, against every layer that reaches it; about ten minutes on 2 cores), so it runs in
``tox -e new-code-matrix`` only: marked ``bug_matrix`` (which every other environment of the
suite deselects) and ``new_code_matrix`` (which ``tox -e bug-matrix`` deselects).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import verified_queue
from specs import new_code_matrix
from specs.planted_bugs.new_code import NEW_CODE_CATALOGUE, NEW_CODE_GAPS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "new-code-bug-matrix.md"

Matrix = dict[tuple[str, str], bool]

pytestmark = [pytest.mark.bug_matrix, pytest.mark.new_code_matrix]

#: The layers whose catch counts as model-based or exhaustive.
EXPLORING = (*new_code_matrix.MODEL_BASED, *new_code_matrix.EXHAUSTIVE)


@pytest.fixture(scope="module")
def computed() -> Matrix:
    """The matrix, computed once for the tests of this module."""
    if verified_queue.COMPILED:
        pytest.skip("a planted bug swaps Python code, which the compiled build lacks")
    return new_code_matrix.compute()


def test_every_layer_passes_on_the_production_code(computed: Matrix) -> None:
    """No layer fails with nothing planted: a catch is the bug's."""
    failing = [
        layer
        for (layer, name), caught in computed.items()
        if name == new_code_matrix.CONTROL and caught
    ]
    assert not failing


def test_every_bug_is_caught_by_three_layers_one_exploring(computed: Matrix) -> None:
    """Each catalogue bug: at least three layers, one of them model-based or exhaustive."""
    for name in NEW_CODE_CATALOGUE:
        caught = [layer for layer in new_code_matrix.LAYERS if computed.get((layer, name))]
        assert len(caught) >= 3, (name, caught)
        assert any(layer in EXPLORING for layer in caught), (name, caught)


def test_every_gap_is_below_the_bar_and_says_why(computed: Matrix) -> None:
    """A gap caught by three layers, one exploring, belongs in the catalogue; each says why."""
    for name in NEW_CODE_GAPS:
        caught = [layer for layer in new_code_matrix.LAYERS if computed.get((layer, name))]
        assert len(caught) < 3 or not any(layer in EXPLORING for layer in caught), (name, caught)
        assert name in new_code_matrix.GAP_REASONS, name


def test_every_cell_is_run_and_explained(computed: Matrix) -> None:
    """Every cell is caught, missed with a reason, or out of reach with one: none left unrun."""
    names = (*NEW_CODE_CATALOGUE, *NEW_CODE_GAPS)
    cells = new_code_matrix.cells(computed, names)
    assert "not run" not in cells.values() or new_code_matrix.WHEEL is None
    for (layer, name), cell in cells.items():
        if cell == "missed":
            assert "NOT EXPLAINED" not in new_code_matrix.MISSES[layer, name], (layer, name)
        elif cell == "n/a":
            assert "NOT EXPLAINED" not in new_code_matrix.NOT_APPLICABLE[layer, name]


def test_page_matches_the_layers(computed: Matrix) -> None:
    """docs/new-code-bug-matrix.md is what the layers say now."""
    expected = new_code_matrix.render(computed) + "\n"
    assert PAGE.read_text(encoding="utf-8") == expected, (
        "docs/new-code-bug-matrix.md is stale: "
        "python -m specs.new_code_matrix --write docs/new-code-bug-matrix.md"
    )
