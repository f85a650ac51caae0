"""``python -m mutmut`` without its clean run, which repeats the stats run.

mutmut's stats run already runs every selected test on the unmutated code (its trampolines
in place, calling the originals) and stops everything unless all of them pass ("failed to
collect stats"). Its clean run then runs the same tests in the same way once more: on the
whole package, a serial pass of the mutation suite, minutes of the hour. ``mutation/run.py``
starts mutmut through this module, which answers the clean run with the stats run's verdict.
A stats run loaded from an earlier one (mutmut's incremental mode) is never trusted here:
``mutation/run.py`` works in a fresh copy every time, so mutmut always collects them anew.
"""

from __future__ import annotations

from typing import Any

import mutmut.__main__ as mutmut_main

_make_runner = mutmut_main.get_mutant_runner


def _passed(tests: Any) -> int:
    """The clean run's answer: the stats run passed already (mutmut calls it by keyword)."""
    del tests
    return 0


def _runner_without_clean_run(max_workers: int = 1) -> Any:
    runner = _make_runner(max_workers)
    runner.run_clean_tests = _passed
    return runner


mutmut_main.get_mutant_runner = _runner_without_clean_run

if __name__ == "__main__":
    mutmut_main.cli()
