"""What ``demo`` prints: the line that opens the run, the report, and how each kind of run ends.

The report is a ``report`` line and then one row per counter: two spaces, the label in a
column 22 wide, a space, the value; a value of several lines continues under the value column.
"""

from __future__ import annotations

import io
import types
from collections.abc import Iterator
from dataclasses import replace

import pytest

from verified_queue.__main__ import main
from verified_queue.cli import demo
from verified_queue.cli.demo import FAULTS, DemoConfig, DemoReport, run_demo
from verified_queue.cli.simulation import INTERRUPTED, Request, Simulation
from verified_queue.kvcache.pool import BlockPool

SMALL = DemoConfig(requests=120, blocks=1024, seed=3)
VALUE_COLUMN = 25  # two spaces, the 22 of the label, one space


def run_quietly(config: DemoConfig) -> tuple[DemoReport, str]:
    """Run the demo into a string; return the report and everything it printed."""
    out = io.StringIO()
    report = run_demo(config, out)
    return report, out.getvalue()


def report_rows(output: str) -> list[tuple[str, str]]:
    """The report's rows as (label, value), read back from the layout it promises."""
    lines = output.splitlines()
    assert lines.count("report") == 1, output
    rows: list[tuple[str, str]] = []
    for line in lines[lines.index("report") + 1 :]:
        if line.startswith(" " * VALUE_COLUMN):
            label, value = rows[-1]
            rows[-1] = (label, f"{value}\n{line[VALUE_COLUMN:]}")
        else:
            assert line.startswith("  "), line
            assert line[2] != " ", line
            assert line[VALUE_COLUMN - 1] == " ", line
            assert line[VALUE_COLUMN] != " ", line
            rows.append((line[2 : VALUE_COLUMN - 1].rstrip(), line[VALUE_COLUMN:]))
    return rows


def expected_rows(report: DemoReport, rate: str) -> list[tuple[str, str]]:
    """The rows the report of ``report`` shows, in order; ``rate``: the pool calls per second."""
    config = report.config
    rows = [
        ("requests served", f"{report.requests_served:,} of {config.requests:,}"),
        (
            "prefix-cache hit rate",
            f"{report.hit_rate:.1%} of prompt tokens at first admission "
            f"({report.prompt_tokens_hit:,} of {report.prompt_tokens:,})",
        ),
        ("blocks allocated", f"{report.blocks_allocated:,}"),
        ("blocks hit", f"{report.blocks_hit:,} (cached blocks touched at admission)"),
        ("blocks freed", f"{report.blocks_freed:,} (returned to the free queue)"),
        (
            "reused LIFO",
            f"{report.blocks_freed_lifo:,} of the blocks freed had no cached hash, so went to "
            "the front (reused first)",
        ),
        ("blocks evicted", f"{report.blocks_evicted:,} (cached blocks reused for new tokens)"),
        ("preemptions", f"{report.preemptions:,}"),
        (
            "pool calls",
            f"{report.pool_calls:,} in {report.seconds:.2f} s ({rate}/s, simulation included)",
        ),
        ("invariant checks", f"{report.queue_checks}; {report.pool_audits} pool audit"),
    ]
    if report.fault_planted is not None:
        rows.append(("fault planted", f"{report.fault_planted}: {FAULTS[report.fault_planted]}"))
    rows.extend(("raised from", frame) for frame in report.stopped_at)
    rows.append(("result", report.result))
    return rows


def frozen_timer(monkeypatch: pytest.MonkeyPatch, *readings: float) -> None:
    """Make the demo's timer of the whole simulation read ``readings``, in order."""
    clock: Iterator[float] = iter(readings)
    monkeypatch.setattr(demo, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))


@pytest.mark.parametrize(
    "changes",
    [{}, {"checks": False}, {"inject": "double-free"}, {"inject": "link-corruption"}],
)
def test_the_report_shows_every_counter_under_its_label(
    changes: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a ``report`` line, one row per counter, each with its label and its value; a
    fault adds what was planted and where it was stopped, and the result (with the trace
    level's history lines under it) comes last. The rate is pool calls over the run's time."""
    frozen_timer(monkeypatch, 10.0, 12.5)
    report, output = run_quietly(replace(SMALL, **changes))  # type: ignore[arg-type]
    assert report.seconds == 2.5
    assert report_rows(output) == expected_rows(report, f"{report.pool_calls / 2.5:,.0f}")


def test_a_run_timed_at_zero_seconds_reports_no_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer too coarse to see the run (0 s) gives a rate of 0/s, not a division by zero."""
    frozen_timer(monkeypatch, 7.0, 7.0)
    report, output = run_quietly(SMALL)
    assert report.seconds == 0.0
    assert report_rows(output) == expected_rows(report, "0")


def test_the_history_of_a_traced_stop_continues_under_the_value_column() -> None:
    """A trace-level stop's history lines follow the error's own line, each on a line of its
    own that starts at the value column."""
    report, output = run_quietly(replace(SMALL, inject="double-free"))
    first, *history = report.result.split("\n")
    assert first.startswith("STOPPED at the faulty call, by DoubleFreeError: free_blocks(")
    assert first.endswith("(a double free?)")
    assert [line.split(":")[0].strip() for line in history][:2] == ["this call", "freed before by"]
    lines = output.splitlines()
    start = lines.index(f"  {'result':<22} {first}")
    assert lines[start + 1 : start + 1 + len(history)] == [
        " " * VALUE_COLUMN + line for line in history
    ]


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "check mode on"),
        (["--no-checks"], "check mode off (--no-checks)"),
        (["--trace"], "check mode on, trace level"),
        (["--no-checks", "--trace"], "check mode off (--no-checks)"),
        (["--inject", "foreign-remove"], "check mode on, trace level"),
        (["--inject", "foreign-remove", "--no-trace"], "check mode on"),
    ],
)
def test_the_run_opens_with_one_line_of_what_it_simulates(
    argv: list[str], mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the banner, one line says the sizes, seed and keys, and which checks run: the
    trace level with ``--trace``, or by default with ``--inject``, and never without checks."""
    options = ["--requests", "20", "--blocks", "600", "--block-size", "8", "--seed", "2"]
    main(["demo", *options, *argv])
    lines = capsys.readouterr().out.splitlines()
    opening = [line for line in lines if line.startswith("simulating ")]
    assert opening == [
        f"simulating 20 requests on a pool of 600 blocks x 8 tokens, seed 2, sha256 keys, {mode}"
    ]


class FlushRecorder(io.StringIO):
    """A text stream that keeps what had been written at its last flush."""

    flushed = ""

    def flush(self) -> None:
        super().flush()
        self.flushed = self.getvalue()


def test_the_opening_line_is_flushed_before_the_simulation_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log piped elsewhere shows that the run started, before the first request is served."""
    out = FlushRecorder()
    seen_at_start: list[str] = []
    original_run = Simulation.run

    def recording_run(simulation: Simulation) -> DemoReport:
        seen_at_start.append(out.flushed)
        return original_run(simulation)

    monkeypatch.setattr(Simulation, "run", recording_run)
    run_demo(replace(SMALL, requests=10), out)
    assert seen_at_start == [f"{out.getvalue().splitlines()[0]}\n"]
    assert seen_at_start[0].startswith("simulating 10 requests ")


def test_ctrl_c_prints_the_report_so_far_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C mid-run ends it with the report of the requests served so far, a result that
    says the audit did not run, and exit status 130."""
    original_finish = Simulation._finish

    def finish_then_ctrl_c(simulation: Simulation, request: Request) -> None:
        original_finish(simulation, request)
        if simulation.report.requests_served == 30:
            raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "_finish", finish_then_ctrl_c)
    argv = ["demo", "--requests", "120", "--blocks", "1024", "--seed", "3"]
    assert main(argv) == INTERRUPTED
    rows = dict(report_rows(capsys.readouterr().out))
    assert rows["requests served"] == "30 of 120"
    assert rows["result"] == (
        "INTERRUPTED (Ctrl-C) after 30 of 120 requests; the audit below did not run"
    )
    assert rows["invariant checks"].endswith("; 0 pool audit")


def test_a_crash_after_a_planted_fault_is_reported_with_where_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Damage a planted fault left can surface as any error, far from it: the run ends CRASHED,
    counting the pool calls since the fault, naming the error and where it was raised."""
    planted: list[int] = []
    original_plant = Simulation._plant
    original_get_new_blocks = BlockPool.get_new_blocks

    def recording_plant(simulation: Simulation, fault: str, request: Request) -> None:
        original_plant(simulation, fault, request)
        planted.append(simulation.report.pool_calls)

    def get_new_blocks_on_a_broken_link(pool: BlockPool, num_blocks: int) -> object:
        if planted:
            raise AttributeError("'NoneType' object has no attribute 'next_free_block'")
        return original_get_new_blocks(pool, num_blocks)

    monkeypatch.setattr(Simulation, "_plant", recording_plant)
    monkeypatch.setattr(BlockPool, "get_new_blocks", get_new_blocks_on_a_broken_link)
    report, output = run_quietly(replace(SMALL, inject="foreign-remove", checks=False))
    assert report.status == 1
    later = report.pool_calls - report.pool_calls_at_fault
    assert later > 0
    assert report.result == (
        f"CRASHED {later:,} pool calls after the foreign-remove was planted, by AttributeError: "
        "'NoneType' object has no attribute 'next_free_block'"
    )
    assert "get_new_blocks_on_a_broken_link" in report.stopped_at[-1]
    assert dict(report_rows(output))["result"] == report.result


def test_a_planted_fault_that_nothing_notices_is_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fault planted but never caught, not even by the end-of-run audit, ends UNDETECTED with
    exit status 1: the demo never reports a missed fault as a clean run."""

    def faulty_call_that_misses(simulation: Simulation, *_call: object) -> None:
        simulation.report.pool_calls += 1  # counted, but the fault does no harm

    monkeypatch.setattr(Simulation, "_faulty_call", faulty_call_that_misses)
    argv = ["demo", "--requests", "120", "--blocks", "1024", "--seed", "3"]
    assert main([*argv, "--inject", "double-free"]) == 1
    rows = dict(report_rows(capsys.readouterr().out))
    assert rows["requests served"] == "120 of 120"
    assert rows["result"] == "UNDETECTED: the double-free fault went unnoticed"
