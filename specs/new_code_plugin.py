"""A pytest plugin for ``docs/new-code-bug-matrix.md``'s matrix: plant a bug, note the failures.

``python -m pytest -p specs.new_code_plugin FILES`` with ``VERIFIED_QUEUE_PLANT`` naming a bug
of :data:`specs.planted_bugs.new_code.NEW_CODE_CATALOGUE` (or of ``NEW_CODE_GAPS``) plants it as
the plugin loads, before any test module is imported
(:func:`specs.planted_bugs.new_code.plant`), and writes the test files that had a failing test
to the file ``VERIFIED_QUEUE_PLANT_REPORT`` names, as JSON, when the session ends.
:mod:`specs.new_code_matrix` runs the example files so, one process per bug.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specs.planted_bugs.new_code import NEW_CODE_CATALOGUE, NEW_CODE_GAPS, plant

__all__ = ["pytest_runtest_logreport", "pytest_sessionfinish"]

_BUG = os.environ.get("VERIFIED_QUEUE_PLANT", "")
if _BUG:
    plant({**NEW_CODE_CATALOGUE, **NEW_CODE_GAPS}[_BUG])

_failed: set[str] = set()


def pytest_runtest_logreport(report: Any) -> None:
    """Note the file of a failing test (its setup, call or teardown)."""
    if report.failed:
        _failed.add(report.nodeid.split("::", 1)[0])


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:  # noqa: ARG001 -- the hook's signature
    """Write the files with a failure, and the exit status, to the report file."""
    output = os.environ.get("VERIFIED_QUEUE_PLANT_REPORT")
    if output:
        report = {"failed": sorted(_failed), "status": int(exitstatus)}
        Path(output).write_text(json.dumps(report), encoding="utf-8")
