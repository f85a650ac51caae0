"""Run CrossHair over the contracts of :mod:`specs.contracts` and report the paths it explored.

``crosshair check --report_all`` says whether each condition was confirmed, but not how many
paths the confirmation took, nor how many a condition that ran out of time got through. This
runner calls CrossHair's own analysis (``analyze_function``) condition by condition, with a
statistics counter in its options, and prints one line per condition::

    popleft_contract  problems(_) == []  confirmed over all paths  99 paths  2.7 CPU-s

The outcomes are CrossHair's: *confirmed over all paths* (it exhausted the paths the
preconditions admit), *no counterexample within the timeout* (it ran out of time or of
new branches first), or *counterexample* (with CrossHair's message). It exits 1 on a
counterexample or any other error CrossHair reports, 0 otherwise::

    python -m specs.crosshair_run --per-condition-timeout 20 --jobs 2
    python -m specs.crosshair_run --target remove_forgets_count --first  # exits 1

``--target`` selects a planted bug (one of ``specs.planted_bugs.PLANTED_BUGS``) as the
queue the contracts check; ``--first`` stops at the first counterexample, which is all a
planted bug needs. With ``--jobs``, contracts run in separate processes.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from specs import contracts
from specs.planted_bugs import PLANTED_BUGS

__all__ = ["Report", "analyse", "main"]

#: Every contract, cheapest first, so that ``--first`` reaches a counterexample early.
CONTRACTS = (
    "popleft_contract",
    "popleft_n_contract",
    "remove_contract",
    "append_contract",
    "queries_contract",
    "iter_blocks_after_contract",
    "append_n_contract",
    "prepend_n_contract",
    "construct_contract",
    "operations_contract",
)


@dataclass(frozen=True)
class Report:
    """What CrossHair made of one condition of one contract."""

    contract: str
    condition: str
    outcome: str
    paths: int
    cpu_seconds: float
    message: str = ""

    @property
    def failed(self) -> bool:
        """Whether CrossHair found a counterexample or another error."""
        return self.outcome not in {CONFIRMED, UNKNOWN}

    def line(self) -> str:
        """The report as one line of text."""
        text = (
            f"{self.contract:28} {self.condition:32} {self.outcome:42} "
            f"{self.paths:6} paths {self.cpu_seconds:7.1f} CPU-s"
        )
        return f"{text}\n    {self.message}" if self.message else text


CONFIRMED = "confirmed over all paths"
UNKNOWN = "no counterexample within the timeout"


def analyse(contract: str, timeout: float, target: str = "") -> list[Report]:
    """Run CrossHair on every condition of ``contract``, against ``target`` (a planted bug).

    Runtime complexity: at most ``timeout`` CPU seconds per condition
    """
    # CrossHair is imported only here: the tests import this module without it installed.
    analyze_function = importlib.import_module("crosshair.core_and_libs").analyze_function
    option_set = importlib.import_module("crosshair.options").AnalysisOptionSet
    message_type = importlib.import_module("crosshair.statespace").MessageType
    if target:
        contracts.QUEUE_TYPE = PLANTED_BUGS[target]
    function = getattr(contracts, contract)
    reports: list[Report] = []
    stats: collections.Counter[str] = collections.Counter()
    options = option_set(per_condition_timeout=timeout, stats=stats)
    for checkable in analyze_function(function, options):
        stats.clear()
        started = time.process_time()
        messages = list(checkable.analyze())
        spent = time.process_time() - started
        condition = getattr(checkable, "conditions", None)
        source = condition.post[0].expr_source if condition is not None else "?"
        states = {message.state for message in messages}
        if states == {message_type.CONFIRMED}:
            outcome, detail = CONFIRMED, ""
        elif states <= {message_type.CANNOT_CONFIRM}:
            outcome, detail = UNKNOWN, ""
        else:
            outcome = "counterexample" if message_type.POST_FAIL in states else "error"
            detail = "; ".join(
                message.message
                for message in messages
                if message.state not in {message_type.CONFIRMED, message_type.CANNOT_CONFIRM}
            )
        reports.append(Report(contract, source, outcome, stats["num_paths"], spent, detail))
    return reports


def _analyse_all(
    names: Sequence[str], timeout: float, target: str, jobs: int, first: bool
) -> Iterator[Report]:
    """Analyse each contract, ``jobs`` at a time, yielding the reports in ``names`` order."""
    if jobs <= 1:
        for name in names:
            reports = analyse(name, timeout, target)
            yield from reports
            if first and any(report.failed for report in reports):
                return
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(analyse, name, timeout, target) for name in names]
        for future in futures:
            reports = future.result()
            yield from reports
            if first and any(report.failed for report in reports):
                for waiting in futures:
                    waiting.cancel()
                return


def main(argv: Sequence[str] | None = None) -> int:
    """Run the contracts through CrossHair and print a report per condition; 1 on a failure."""
    parser = argparse.ArgumentParser(prog="python -m specs.crosshair_run", description=__doc__)
    parser.add_argument("--per-condition-timeout", type=float, default=20.0, metavar="CPU_S")
    parser.add_argument("--jobs", type=int, default=1, help="contracts analysed at once")
    parser.add_argument("--target", default="", help="a planted bug of specs.planted_bugs")
    parser.add_argument("--first", action="store_true", help="stop at the first failure")
    parser.add_argument("contracts", nargs="*", default=CONTRACTS, metavar="CONTRACT")
    arguments = parser.parse_args(argv)
    unknown = sorted(set(arguments.contracts) - set(CONTRACTS))
    if unknown:
        parser.error(f"no such contract: {', '.join(unknown)}")
    started = time.monotonic()
    failed = 0
    for report in _analyse_all(
        arguments.contracts,
        arguments.per_condition_timeout,
        arguments.target,
        arguments.jobs,
        arguments.first,
    ):
        print(report.line(), flush=True)
        failed += report.failed
    label = f" against {arguments.target}" if arguments.target else ""
    print(f"{failed} failed{label}; {time.monotonic() - started:.0f} s wall-clock")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
