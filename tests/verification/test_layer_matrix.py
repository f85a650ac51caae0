"""The layers both planted-bug matrices share: their runs do not depend on what ran before.

Hypothesis draws now and then a literal constant from the source of the local modules imported
so far; :func:`specs.layer_matrix.fixed_draws` empties that pool for a planted-bug run, so that
a matrix cell is the same whichever matrix, layer or test ran first in the process.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from specs import layer_matrix

ROOT = Path(__file__).resolve().parents[2]


class DrawsIntegers(RuleBasedStateMachine):
    """Records every integer it draws, for comparing two runs."""

    drawn: ClassVar[list[int]] = []

    @rule(number=st.integers())
    def draw(self, number: int) -> None:
        self.drawn.append(number)


def _draws() -> list[int]:
    """The integers a planted-bug run of :class:`DrawsIntegers` draws."""
    DrawsIntegers.drawn.clear()
    assert not layer_matrix.machine_fails(DrawsIntegers)
    return list(DrawsIntegers.drawn)


def _import_new_constants(folder: Path, name: str, constants: tuple[int, ...]) -> None:
    """Import a local module that holds ``constants``, which no other module may hold."""
    (folder / f"{name}.py").write_text(f"WEIGHTS = {constants!r}\n", encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


def test_planted_bug_runs_draw_the_same_after_more_modules_are_imported(
    tmp_path: Path,
) -> None:
    """A machine's planted-bug run draws the same integers before and after a new import."""
    before = _draws()
    _import_new_constants(tmp_path, "matrix_constants_one", (918273645, -564738291, 12345678912))
    assert _draws() == before


def test_draws_outside_fixed_draws_follow_the_imports(tmp_path: Path) -> None:
    """Without the fixed pool, a new module's constants change a derandomized run's draws."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis draws no constants from local modules")
    run = layer_matrix.machine_settings()

    def draws() -> list[int]:
        DrawsIntegers.drawn.clear()
        importlib.import_module("tests.verification.stateful_support").run_machine(
            DrawsIntegers, settings=run
        )
        return list(DrawsIntegers.drawn)

    before = draws()
    _import_new_constants(tmp_path, "matrix_constants_two", (7364528191, -19283746, 55443322110))
    after = draws()
    assert after != before


#: In a fresh process: the cell that once changed, computed first, then again after the queue
#: matrix's pool and key layers have run (they import the pool's driver, whose constants
#: Hypothesis used to draw).
_BOTH_ORDERS = """
import json, sys
sys.path.append(sys.argv[1])  # the checkout, after the installed build under test
from specs import bug_matrix, checker_matrix
first = checker_matrix.caught("check mode", "checked_iter_skips_full_check")
bug_matrix.compute_client()
print(json.dumps([first, checker_matrix.caught("check mode", "checked_iter_skips_full_check")]))
"""


@pytest.mark.bug_matrix
def test_a_cell_is_the_same_before_and_after_the_other_matrix_is_loaded() -> None:
    """The cell that once changed after the queue matrix ran is the same either way."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _BOTH_ORDERS, str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    first, second = json.loads(done.stdout.splitlines()[-1])
    assert first == second
