"""The pytest plugin of the mutation run: each mutant's tests fastest first, each under a CPU limit.

mutmut 3 already runs a mutant against the tests that called the mutated function in its
stats run (a clean run of the whole suite with its trampolines recording who calls what),
and stops at the first failure (``-x``). But it hands pytest those tests in no order, and
it bounds a mutant by the sum of all of them: a mutant that makes the constructor spin is
met first by whichever test pytest collects first, and runs until ``15 x 2`` times the
whole suite's CPU time has gone. This plugin, loaded into every run by ``mutation/run.py``,
changes what happens once a mutant is in place (``MUTANT_UNDER_TEST`` names one):

- **order**: the tests run fastest first, by the CPU time each took in the stats run, so
  a mutant most tests kill is killed by the cheapest of them, and the slow exhaustive and
  model-based tests run only for the mutants the fast ones miss;
- **limit**: each test runs under a CPU limit of ``LIMIT_FLOOR`` seconds plus
  ``LIMIT_FACTOR`` times its stats-run time; a test that goes past it ends the mutant's
  process with mutmut's "timeout" exit code (36), which counts as detected, as mutmut's own
  limit would have, hours later;
- **caller walk**: the trace level records the first frame outside the library, and under
  mutmut every call into the library passes through mutmut's trampoline, whose file is no
  module of the library. The plugin names that file to the trace level as library code
  (the dict its walk reads), so that the trace level's tests hold on the unmutated tree.

In the stats run and the forced-fail run nothing is reordered or limited.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Generator
from pathlib import Path
from types import FrameType

import pytest

#: Seconds of CPU every test may take beyond its scaled stats-run time (imports, fixtures).
LIMIT_FLOOR = 5.0
#: How many times its stats-run CPU time a test may take with a mutant in place.
LIMIT_FACTOR = 10.0
#: mutmut's exit code for a mutant stopped by its time limit ("timeout", counted detected).
TIMEOUT_EXIT = 36
#: Values of MUTANT_UNDER_TEST that are mutmut's own phases, not a mutant.
PHASES = frozenset({"", "stats", "fail", "list_all_tests", "mutant_generation"})


def _mutant_in_place() -> bool:
    return os.environ.get("MUTANT_UNDER_TEST", "") not in PHASES


#: Each test's CPU time, by node id, once read (one process runs one mutant's tests).
_durations: dict[str, float] = {}


def _stats_durations() -> dict[str, float]:
    """Each test's CPU time in the run that chose its mutants' tests, read once per process.

    From mutmut's state under ``mutation/run.py``; from the call map ``MUTATION_CALLS`` names
    (its ``cpu`` table) under ``mutation/swap.py``.
    """
    if not _durations:
        calls = os.environ.get("MUTATION_CALLS")
        if calls:
            _durations.update(json.loads(Path(calls).read_text(encoding="utf-8"))["cpu"])
        else:
            # mutmut is there only under mutmut: this plugin is loaded in its runs alone.
            from mutmut.state import state  # noqa: PLC0415

            _durations.update(state().duration_by_test)
    return _durations


def _mark_trampoline_as_library() -> None:
    """Have the trace level's caller walk pass over mutmut's trampoline frames."""
    # Imported here: mutmut is there only under mutmut, and the package is the copy mutated.
    try:
        from mutmut.mutation import trampoline  # noqa: PLC0415

        from verified_queue import _trace_records  # noqa: PLC0415
    except ImportError:
        return
    filename = trampoline.__file__
    if filename.endswith((".pyc", ".pyo")):
        filename = filename[:-1]
    # The walk caches, per code file, whether it is the library's: this is that cache.
    _trace_records._in_library[filename] = True


def pytest_configure() -> None:
    _mark_trampoline_as_library()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not _mutant_in_place():
        return
    durations = _stats_durations()
    # Stable: tests with the same time keep pytest's order, which keeps fixtures grouped.
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


#: Called with the node id of a test that runs out of time, before the process ends
#: (``swap.py`` hands it on to its runner, as the mutant's killing test).
on_timeout: Callable[[str], object] | None = None
#: The node id of the test under its limit now.
_timed: list[str] = []


def _stop_the_mutant(_signum: int, _frame: FrameType | None) -> None:
    if on_timeout is not None and _timed:
        on_timeout(_timed[-1])
    os._exit(TIMEOUT_EXIT)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    if not _mutant_in_place():
        return (yield)
    limit = LIMIT_FLOOR + LIMIT_FACTOR * _stats_durations().get(item.nodeid, 0.0)
    previous = signal.signal(signal.SIGPROF, _stop_the_mutant)
    _timed.append(item.nodeid)
    signal.setitimer(signal.ITIMER_PROF, limit)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        _timed.pop()
        signal.signal(signal.SIGPROF, previous)
