"""The mutation run's pytest plugin (mutation/selection.py): order and CPU limit, mutant or not.

Each test runs a small suite in a fresh pytest process with the plugin loaded as
``mutation/run.py`` loads it, the stats-run times it would read from mutmut given by a
conftest, and ``MUTANT_UNDER_TEST`` set as mutmut sets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MUTATION = Path(__file__).resolve().parents[2] / "mutation"

SUITE = """
def test_slow():
    pass

def test_middle():
    pass

def test_fast():
    pass

def test_spins():
    while SPIN:
        pass
"""

CONFTEST = """
import selection

selection._durations.update({
    "test_suite.py::test_slow": 3.0,
    "test_suite.py::test_middle": 1.0,
    "test_suite.py::test_fast": 0.01,
    "test_suite.py::test_spins": 0.0,
})
selection.LIMIT_FLOOR = 0.5
"""


def run_suite(
    tmp_path: Path, mutant: str, *, spin: bool, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the small suite under the plugin with ``MUTANT_UNDER_TEST=mutant``."""
    (tmp_path / "test_suite.py").write_text(f"SPIN = {spin}\n" + SUITE, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    env = os.environ | {"MUTANT_UNDER_TEST": mutant, "PYTHONPATH": str(MUTATION)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "selection",
            "-v",
            "-p",
            "no:cacheprovider",
            "test_suite.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def order_run(output: str) -> list[str]:
    """The tests' names in the order pytest's verbose report ran them."""
    return [line.split("::")[1].split()[0] for line in output.splitlines() if "::test_" in line]


def test_a_mutants_tests_run_fastest_first(tmp_path: Path) -> None:
    """With a mutant in place, the tests run by their stats-run time, the cheapest first."""
    done = run_suite(tmp_path, "verified_queue.queue.x_f__mutmut_1", spin=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert order_run(done.stdout) == ["test_spins", "test_fast", "test_middle", "test_slow"]


@pytest.mark.parametrize("phase", ["stats", "fail", ""])
def test_mutmuts_own_runs_keep_pytests_order(tmp_path: Path, phase: str) -> None:
    """The stats, forced-fail and clean runs are not reordered."""
    done = run_suite(tmp_path, phase, spin=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert order_run(done.stdout) == ["test_slow", "test_middle", "test_fast", "test_spins"]


def test_a_test_past_its_cpu_limit_ends_the_mutant_as_a_timeout(tmp_path: Path) -> None:
    """A mutant that makes a test spin ends its process with mutmut's timeout code (36)."""
    done = run_suite(tmp_path, "verified_queue.queue.x_f__mutmut_1", spin=True)
    assert done.returncode == 36, done.stdout + done.stderr


def test_no_limit_outside_a_mutant(tmp_path: Path) -> None:
    """mutmut's own runs are not limited per test: there the spinning test runs on until killed."""
    with pytest.raises(subprocess.TimeoutExpired):
        run_suite(tmp_path, "stats", spin=True, timeout=5)
