"""``python -m verified_queue demo``: clean runs, the planted faults, and where each is stopped."""

from __future__ import annotations

import inspect
import io
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from verified_queue.__main__ import main
from verified_queue.cli import simulation
from verified_queue.cli.demo import FAULTS, DemoConfig, DemoReport, run_demo
from verified_queue.kvcache.pool import BlockPool

# Small enough to keep each run well under a second, large enough for hits, evictions and
# preemptions, and for the faults (planted once half the requests are served) to find a chance.
SMALL = DemoConfig(requests=120, blocks=1024, seed=3)


def run_quietly(config: DemoConfig) -> tuple[DemoReport, str]:
    """Run the demo into a string; return the report and everything it printed."""
    out = io.StringIO()
    report = run_demo(config, out)
    return report, out.getvalue()


def result_line(output: str) -> str:
    """Return the report's result line."""
    (line,) = [line for line in output.splitlines() if line.strip().startswith("result ")]
    return line


# --- clean runs ------------------------------------------------------------------------------


@pytest.mark.parametrize("checks", [True, False])
def test_a_clean_run_serves_every_request_and_reports(checks: bool) -> None:
    """A run without a fault serves every request, exercises the cache and exits 0."""
    report, output = run_quietly(replace(SMALL, checks=checks))
    assert report.status == 0
    assert report.requests_served == SMALL.requests
    assert report.result.startswith("OK")
    assert 0.0 < report.hit_rate < 1.0
    assert report.blocks_hit > 0
    assert report.blocks_evicted > 0
    assert report.preemptions > 0
    assert report.blocks_allocated > 0
    # Every block is back in the free queue at the end (all but the null block).
    assert report.blocks_freed >= report.blocks_allocated
    assert f"{SMALL.blocks - 1:,} blocks free" in output.split("[100%]")[1].splitlines()[0]
    assert report.pool_audits == 1
    # Partial blocks have no hash when freed: they go to the front, to be reused first.
    assert 0 < report.blocks_freed_lifo < report.blocks_freed
    for label in (
        "requests served",
        "prefix-cache hit rate",
        "blocks allocated",
        "blocks freed",
        "reused LIFO",
        "blocks evicted",
        "pool calls",
        "invariant checks",
    ):
        assert f"  {label} " in output
    if checks:
        assert "OK: every request served, every check passed" in result_line(output)
    else:
        assert "every check passed" not in result_line(output)
    assert "[100%]" in output


def test_check_mode_counts_the_checks_it_runs() -> None:
    """In check mode the report counts checked queue operations and full checks; off, none."""
    checked, _ = run_quietly(replace(SMALL, blocks=300))
    unchecked, _ = run_quietly(replace(SMALL, blocks=300, checks=False))
    assert "queue operations checked in O(1)" in checked.queue_checks
    full_checks = int(checked.queue_checks.split(", ")[1].split()[0].replace(",", ""))
    assert full_checks > 0  # 300 blocks: the full check comes due every 1000 operations
    assert unchecked.queue_checks == "off"


def test_the_run_is_reproducible_from_its_seed() -> None:
    """The same seed gives the same run; another seed gives another."""

    def counters(report: DemoReport) -> tuple[int, ...]:
        return (
            report.prompt_tokens,
            report.prompt_tokens_hit,
            report.blocks_allocated,
            report.blocks_evicted,
            report.preemptions,
            report.pool_calls,
        )

    first, _ = run_quietly(SMALL)
    again, _ = run_quietly(replace(SMALL, checks=False))
    other, _ = run_quietly(replace(SMALL, seed=4))
    assert counters(first) == counters(again)
    assert counters(first) != counters(other)


def test_the_hit_rate_counts_each_prompt_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt tokens are counted at first admission only, not again after a preemption."""
    prompt_lengths: list[int] = []
    original = simulation.Simulation._new_request

    def recording_new_request(simulation: simulation.Simulation) -> simulation.Request:
        request = original(simulation)
        prompt_lengths.append(request.num_prompt_tokens)
        return request

    monkeypatch.setattr(simulation.Simulation, "_new_request", recording_new_request)
    report, _ = run_quietly(SMALL)
    assert report.preemptions > 0  # so some requests were admitted twice
    assert report.prompt_tokens == sum(prompt_lengths)
    assert len(prompt_lengths) == SMALL.requests


def test_the_builtin_key_function_serves_the_same_run() -> None:
    """With --key-function builtin the run makes the same hits (no collision occurs by chance)."""
    default, output = run_quietly(replace(SMALL, checks=False))
    builtin, builtin_output = run_quietly(replace(SMALL, checks=False, key_function="builtin"))
    assert builtin.status == default.status == 0
    assert (builtin.prompt_tokens_hit, builtin.blocks_hit, builtin.blocks_freed_lifo) == (
        default.prompt_tokens_hit,
        default.blocks_hit,
        default.blocks_freed_lifo,
    )
    assert "seed 3, sha256 keys," in output
    assert "seed 3, builtin keys," in builtin_output


def test_progress_is_shown_at_every_tenth_of_the_requests() -> None:
    """The run prints ten progress lines, from 10% to 100% of the requests served."""
    _, output = run_quietly(SMALL)
    marks = [line.split("]")[0].strip(" [") for line in output.splitlines() if "%]" in line]
    assert marks == [f"{percent}%" for percent in range(10, 101, 10)]


def test_the_smallest_pool_still_serves_every_request() -> None:
    """A pool of two one-token blocks serves requests of two tokens, one at a time."""
    report, _ = run_quietly(DemoConfig(requests=5, blocks=3, block_size=1, seed=1))
    assert report.status == 0
    assert report.requests_served == 5


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"requests": 0}, "at least one request"),
        ({"block_size": 0}, "at least one token"),
        ({"blocks": 1}, "too small"),
        ({"blocks": 2, "block_size": 1}, "too small"),
        ({"blocks": 1_000_000_000}, "at most 10,000,000 blocks"),
        ({"inject": "use-after-free"}, "unknown fault"),
        ({"key_function": "md5"}, "unknown key function"),
    ],
)
def test_an_impossible_configuration_is_refused(changes: dict[str, object], message: str) -> None:
    """run_demo raises ValueError for a configuration no request could be served with."""
    with pytest.raises(ValueError, match=message):
        run_demo(replace(SMALL, **changes), io.StringIO())  # type: ignore[arg-type]  # keyword overrides


# --- the planted faults ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [("double-free", "DoubleFreeError"), ("foreign-remove", "NotInQueueError")],
)
def test_check_mode_stops_a_planted_fault_at_the_faulty_call(fault: str, error: str) -> None:
    """Check mode raises at the planted call itself, names it, and the run exits 1."""
    report, output = run_quietly(replace(SMALL, inject=fault))
    assert report.status == 1
    assert report.fault_planted == fault
    assert output.count("[fault] planting") == 1
    assert f"STOPPED at the faulty call, by {error}" in result_line(output)
    assert any("_faulty_call" in frame for frame in report.stopped_at)
    assert report.requests_served < SMALL.requests


def test_check_mode_names_the_block_and_the_reason() -> None:
    """The diagnostics say what was wrong: the count that would go negative, the other queue."""
    _, double = run_quietly(replace(SMALL, inject="double-free"))
    assert "ref_cnt=0" in result_line(double)
    assert "its ref_cnt would drop to -1" in result_line(double)
    assert "a double free?" in result_line(double)
    _, foreign = run_quietly(replace(SMALL, inject="foreign-remove"))
    assert "it is linked in another queue" in result_line(foreign)


def test_check_mode_stops_link_corruption_at_the_first_operation_to_meet_it() -> None:
    """A link written by hand is reported as a sentinel_linkage violation before any harm."""
    report, output = run_quietly(replace(SMALL, inject="link-corruption"))
    assert report.status == 1
    assert "by InvariantViolation: I1 (sentinel_linkage)" in result_line(output)
    assert "within the pool call that planted the link-corruption" in result_line(output)


def test_without_checks_a_foreign_remove_is_found_only_at_the_end() -> None:
    """On the production queue the foreign remove passes silently; only the final audit sees it."""
    report, output = run_quietly(replace(SMALL, inject="foreign-remove", checks=False))
    assert report.fault_planted == "foreign-remove"
    assert report.requests_served == SMALL.requests  # the run went on, damaged
    assert report.status == 1
    assert "DAMAGED: the end-of-run audit found" in result_line(output)


def test_without_checks_link_corruption_surfaces_far_from_its_cause() -> None:
    """On the production queue a hand-written link fails later, somewhere else, or not at all."""
    report, output = run_quietly(replace(SMALL, inject="link-corruption", checks=False))
    assert report.status == 1
    line = result_line(output)
    assert "within the pool call that planted" not in line
    assert "at the faulty call" not in line
    assert "DAMAGED" in line or "pool calls after" in line


def test_without_checks_a_double_free_still_meets_the_pools_own_guard() -> None:
    """The pool's O(1)-per-block count check rejects a double free even with check mode off."""
    report, output = run_quietly(replace(SMALL, inject="double-free", checks=False))
    assert report.status == 1
    assert "STOPPED at the faulty call, by DoubleFreeError" in result_line(output)


def test_a_fault_with_no_chance_to_be_planted_is_not_reported_clean() -> None:
    """A run that ends before its fault could be planted says so and exits 1."""
    report, output = run_quietly(replace(SMALL, requests=1, inject="foreign-remove"))
    assert report.fault_planted is None
    assert report.status == 1
    assert "NOT PLANTED" in result_line(output)


def test_the_end_of_run_audit_catches_a_leaking_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool bug that leaks the last block of every free is reported DAMAGED, exit 1."""
    original = BlockPool.free_blocks

    def leaky_free(pool: BlockPool, ordered_blocks: object) -> None:
        blocks = list(ordered_blocks)  # type: ignore[call-overload]  # any iterable of blocks
        original(pool, blocks[:-1])

    monkeypatch.setattr(BlockPool, "free_blocks", leaky_free)
    report, output = run_quietly(replace(SMALL, checks=False))
    assert report.status == 1
    assert "blocks are still held after every request finished" in result_line(output)


def test_an_error_without_a_planted_fault_is_a_real_bug_and_propagates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A non-queue error in a run with no fault planted is raised, not summarised."""

    def broken_touch(*_args: object) -> None:
        raise RuntimeError("a real bug")

    monkeypatch.setattr(BlockPool, "touch", broken_touch)
    with pytest.raises(RuntimeError, match="a real bug"):
        run_quietly(SMALL)


# --- the command line ------------------------------------------------------------------------


def test_cli_runs_a_clean_demo(capsys: pytest.CaptureFixture[str]) -> None:
    """``demo`` with small options prints the report and exits 0."""
    assert main(["demo", "--requests", "40", "--blocks", "600", "--seed", "2"]) == 0
    output = capsys.readouterr().out
    assert "simulating 40 requests on a pool of 600 blocks x 16 tokens, seed 2" in output
    assert "check mode on" in output
    assert "OK: every request served" in output


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_cli_exits_1_when_check_mode_stops_a_fault(
    fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``demo --inject FAULT`` prints the stop and its diagnostic and exits 1."""
    argv = ["demo", "--requests", "120", "--blocks", "1024", "--seed", "3", "--inject", fault]
    assert main(argv) == 1
    output = capsys.readouterr().out
    assert "STOPPED" in result_line(output)
    assert f"fault planted          {fault}: " in output


def test_cli_no_checks_and_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-checks`` runs on the production queue and ``--block-size`` sets the block size."""
    argv = ["demo", "--requests", "30", "--blocks", "2000", "--block-size", "8", "--no-checks"]
    assert main(argv) == 0
    output = capsys.readouterr().out
    assert "x 8 tokens" in output
    assert "check mode off (--no-checks)" in output
    assert "invariant checks       off" in output


@pytest.mark.parametrize("argv", [["--requests", "0"], ["--blocks", "1"], ["--block-size", "0"]])
def test_cli_refuses_impossible_sizes_with_status_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Sizes no request fits in are a usage error: a message and exit status 2."""
    assert main(["demo", *argv]) == 2
    assert "demo: " in capsys.readouterr().err


def test_cli_rejects_an_unknown_fault() -> None:
    """``--inject`` accepts only the faults the demo knows how to plant."""
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--inject", "use-after-free"])
    assert exit_info.value.code == 2


def test_cli_key_function(capsys: pytest.CaptureFixture[str]) -> None:
    """``--key-function builtin`` is passed to the run; an unknown name is a usage error."""
    argv = ["demo", "--requests", "20", "--blocks", "600", "--no-checks"]
    assert main([*argv, "--key-function", "builtin"]) == 0
    assert "builtin keys" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--key-function", "md5"])
    assert exit_info.value.code == 2


def test_the_demo_runs_as_a_module_in_a_fresh_process(tmp_path: Path) -> None:
    """``python -m verified_queue demo --inject foreign-remove`` exits 1 and names the error."""
    env = {key: value for key, value in os.environ.items() if key != "VERIFIED_QUEUE_CHECKS"}
    # Run outside the checkout, so that -m imports the installed package under test.
    argv = ["--requests", "120", "--blocks", "1024", "--seed", "3", "--inject", "foreign-remove"]
    completed = subprocess.run(
        [sys.executable, "-m", "verified_queue", "demo", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert completed.returncode == 1, completed.stderr
    assert "[fault] planting foreign-remove" in completed.stdout
    assert "STOPPED at the faulty call, by NotInQueueError" in completed.stdout


def test_an_injected_double_free_names_the_line_of_the_first_free() -> None:
    """Under --inject the demo runs traced: a double free names _finish's first free's line."""
    source, start = inspect.getsourcelines(simulation.Simulation._finish)
    first_free = next(
        start + offset
        for offset, line in enumerate(source)
        if "self.pool.free_blocks(reversed(request.blocks))" in line
    )
    report, output = run_quietly(replace(SMALL, inject="double-free"))
    assert report.status == 1
    assert "trace level" in output
    freed = report.result.split("freed before by: ")[1].splitlines()[0]
    assert f"simulation.py:{first_free} in _finish" in freed


def test_no_trace_leaves_an_injected_fault_to_plain_check_mode() -> None:
    """``trace=False`` under --inject runs plain check mode: the same stop, no history lines."""
    report, output = run_quietly(replace(SMALL, inject="double-free", trace=False))
    assert report.status == 1
    assert "trace level" not in output
    assert "freed before by" not in report.result


@pytest.mark.parametrize("fault", ["double-free", "foreign-remove"])
def test_the_fault_line_counts_the_requests_served_as_the_report_does(fault: str) -> None:
    """The ``[fault]`` line gives the served count the report then shows, beside the request id.

    The request is numbered by arrival, which is not the count served: "at request 30"
    next to "151 of 300 served" read as a contradiction.
    """
    report, output = run_quietly(replace(SMALL, inject=fault))
    (line,) = [line for line in output.splitlines() if "[fault] planting" in line]
    planted = re.search(r"at request (\d+) \(([\d,]+) served so far\)", line)
    assert planted is not None, line
    assert int(planted[2].replace(",", "")) == report.requests_served
    served = f"requests served        {report.requests_served:,} of {SMALL.requests:,}"
    assert served in output
