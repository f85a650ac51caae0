"""The pytest plugin that records which tests run which code of the package, and their cost.

Loaded by ``python mutation/swap.py collect`` (as ``-p calls``, with ``SWAP_CALLS_DIR`` set),
in every xdist worker. While each test runs,

- coverage.py, with the test as its context, notes every line of the package that runs; a
  test runs a function when it runs a line of its body (``swap.py`` reads the functions off
  the lines);
- a wrapper of ``sys.settrace`` notes the tests that set a trace function of their own (the
  interrupt tests do, to raise at every checkpoint): while theirs is in place coverage.py
  sees nothing, so from then on a profile function notes every function of the package
  that is entered (by its module and qualified name), in every thread. Their lines are not
  known, only their functions. (A profile function in every test cost more than coverage.py
  itself: it is called at every call and return of any code, pytest's and Hypothesis's
  included.)

At the end each worker writes what it saw, each test's CPU time and the tests that failed to
``SWAP_CALLS_DIR/<worker>.json``, which ``swap.py`` merges.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import types
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

#: The functions each test entered, each test's CPU time, and what the running test has
#: entered so far.
_calls: dict[str, set[str]] = {}
_cpu: dict[str, float] = {}
_seen: set[str] = set()
#: Tests that failed in this run: their calls are not kept (the run fails or they are left out).
_failed: set[str] = set()
#: co_filename -> whether it is a file of the package, filled on first sight of each file.
_in_package: dict[str, bool] = {}
_ROOT = Path(__file__).resolve().parent.parent
_PACKAGE = str(_ROOT / "verified_queue") + os.sep
#: Tests that set a trace function of their own, hiding their lines from coverage.py.
_own_tracer: set[str] = set()
_running: list[str] = []
#: coverage.py's collector, started in pytest_configure (it is in the mutation group only).
_coverage: Any = None
_settrace = sys.settrace


def _noting_settrace(function: Any) -> None:
    if function is not None and _running and _running[-1] not in _own_tracer:
        _own_tracer.add(_running[-1])
        threading.setprofile(_profile)
        sys.setprofile(_profile)
    _settrace(function)


def key_of(module: str, code: types.CodeType) -> str:
    """A function's key, as ``swap.py`` names a mutant's: ``module:Class.function``."""
    return f"{module}:{code.co_qualname}"


def _profile(frame: types.FrameType, event: str, _arg: Any) -> None:
    # Keyed by where the code was defined, read from the frame: any copy of a function's
    # code (a reloaded module, a planted bug compiled from the module's file) and any alias
    # of it (check mode keeps the queue's popleft as _super_popleft) counts as the function.
    if event == "call":
        code = frame.f_code
        filename = code.co_filename
        inside = _in_package.get(filename)
        if inside is None:
            inside = _in_package[filename] = os.path.realpath(filename).startswith(_PACKAGE)
        if inside and "<" not in code.co_qualname:  # not a nested function, lambda, module
            _seen.add(key_of(frame.f_globals.get("__name__", "?"), code))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _seen.clear()
    _running.append(item.nodeid)
    if _coverage is not None:
        _coverage.switch_context(item.nodeid)
    start = time.process_time()
    try:
        return (yield)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        if _coverage is not None:
            _coverage.switch_context("")
        _running.pop()
        _cpu[item.nodeid] = time.process_time() - start
        for key in _seen:
            _calls.setdefault(key, set()).add(item.nodeid)


def pytest_configure() -> None:
    global _coverage  # noqa: PLW0603 - one collector for the worker's whole session
    if os.environ.get("SWAP_CALLS_DIR"):
        import coverage  # noqa: PLC0415

        _coverage = coverage.Coverage(data_file=None, include=[_PACKAGE + "*"], config_file=False)
        sys.settrace = _noting_settrace
        _coverage.start()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failed.add(report.nodeid)


def pytest_sessionfinish() -> None:
    directory = os.environ.get("SWAP_CALLS_DIR")
    if not directory:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    calls = {key: sorted(tests - _failed) for key, tests in _calls.items()}
    _coverage.stop()
    sys.settrace = _settrace
    with warnings.catch_warnings():
        # xdist's controller runs no test: no data is what it should collect.
        warnings.simplefilter("ignore")
        measured = _coverage.get_data()
    # file -> line -> the tests that ran it (by the test's place in cpu's order, to keep it small)
    place = {test: index for index, test in enumerate(_cpu)}
    lines: dict[str, dict[int, list[int]]] = {}
    for filename in measured.measured_files():
        by_line = measured.contexts_by_lineno(filename)
        relative = Path(os.path.realpath(filename)).relative_to(_ROOT).as_posix()
        lines[relative] = {
            line: sorted(place[test] for test in tests if test in place and test not in _failed)
            for line, tests in by_line.items()
        }
    data = {
        "calls": calls,
        "cpu": _cpu,
        "order": list(_cpu),
        "lines": lines,
        "own_tracer": sorted(_own_tracer - _failed),
        "failed": sorted(_failed),
    }
    (Path(directory) / f"{worker}.json").write_text(json.dumps(data), encoding="utf-8")
