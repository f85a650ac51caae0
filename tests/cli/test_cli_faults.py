"""The command line ends with a status and at most a line, never a traceback, whatever happens."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from verified_queue.__main__ import (
    BROKEN_PIPE,
    INTERRUPTED,
    UNWRITABLE_OUTPUT,
    USAGE_ERROR,
    main,
)
from verified_queue._switch import LEVELS
from verified_queue.cli.demo import DemoConfig, run_demo
from verified_queue.cli.simulation import MAX_WAITING, Simulation

#: Run the installed package in a child, not the checkout's copy.
ROOT = Path(__file__).anchor


def _default_sigint() -> None:  # pragma: no cover -- runs in the child
    """Undo an inherited SIG_IGN: a job started in the background of a script ignores SIGINT,
    and Python then installs no KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child(*arguments: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -m verified_queue ARGUMENTS`` with its output piped back."""
    return subprocess.Popen(
        [sys.executable, "-m", "verified_queue", *arguments],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=None if sys.platform == "win32" else _default_sigint,  # noqa: PLW1509 -- it only resets one signal
    )


def test_a_reader_that_leaves_early_ends_the_run_with_141_and_no_traceback() -> None:
    """``demo | head -1``: the demo stops with exit status 141 (SIGPIPE's) and no traceback."""
    with _child("demo", "--requests", "3000", "--no-checks") as child:
        assert child.stdout is not None
        assert child.stderr is not None
        assert child.stdout.readline().startswith("verified_queue ")
        child.stdout.close()
        errors = child.stderr.read()
        assert child.wait(timeout=300) == BROKEN_PIPE, errors
    assert "Traceback" not in errors
    assert "Exception ignored" not in errors


def _close_stdout() -> None:  # pragma: no cover -- runs in the child
    """Start the child with its standard output closed, as a shell's ``>&-`` does."""
    os.close(1)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("where", ["/dev/full", "closed"])
@pytest.mark.parametrize("command", [[], ["demo", "--requests", "50"]], ids=["selfcheck", "demo"])
def test_an_unwritable_output_ends_the_run_with_74_and_one_line(
    where: str, command: list[str]
) -> None:
    """Output to a full file or a closed stdout: status 74 (not 1, a fault) and one line why."""
    with open("/dev/full", "w", encoding="utf-8") as full:
        done = subprocess.run(
            [sys.executable, "-m", "verified_queue", *command],
            cwd=ROOT,
            stdout=full if where == "/dev/full" else None,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_close_stdout if where == "closed" else None,
            timeout=300,
            check=False,
        )
    assert done.returncode == UNWRITABLE_OUTPUT, done.stderr
    reason = "standard output is closed" if where == "closed" else "No space left on device"
    assert done.stderr == f"python -m verified_queue: cannot write its output: {reason}\n"


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_ctrl_c_during_the_demo_prints_the_report_so_far_and_exits_130() -> None:
    """Ctrl-C in a long demo prints the partial report and exits 130, without a traceback."""
    with _child("demo", "--requests", "100000000", "--no-checks") as child:
        # Whatever goes wrong (a line never flushed, the signal ignored), the child dies.
        deadline = threading.Timer(300, child.kill)
        deadline.start()
        try:
            assert child.stdout is not None
            assert child.stdout.readline().startswith("verified_queue ")
            assert child.stdout.readline().startswith("simulating ")
            time.sleep(1)  # into the simulation proper (building the pool takes milliseconds)
            child.send_signal(signal.SIGINT)
            output, errors = child.communicate(timeout=300)
        finally:
            deadline.cancel()
            child.kill()  # a child that ignored the signal would otherwise run for hours
    assert child.returncode == INTERRUPTED, errors
    assert "Traceback" not in errors
    assert "  result                 INTERRUPTED (Ctrl-C) after " in output, output
    assert "requests served" in output


def test_options_before_a_command_are_refused_not_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--seed 5 demo`` would run the demo with seed 0: it is a usage error instead."""
    with pytest.raises(SystemExit) as stopped:
        main(["--seed", "5", "demo"])
    assert stopped.value.code == USAGE_ERROR
    errors = capsys.readouterr().err
    assert errors.count("\n") == 1
    assert errors.startswith("python -m verified_queue: error: --seed before 'demo': ")


def test_a_bad_check_switch_is_one_line_and_exit_2() -> None:
    """A mistyped VERIFIED_QUEUE_CHECKS gives one line and exit status 2, not a traceback."""
    with _child(env={**os.environ, "VERIFIED_QUEUE_CHECKS": "yes please"}) as child:
        output, errors = child.communicate(timeout=300)
    assert child.returncode == USAGE_ERROR
    assert output == ""
    accepted = ", ".join(repr(value) for value in LEVELS)
    assert errors == (
        "python -m verified_queue: error: VERIFIED_QUEUE_CHECKS='yes please': expected one of "
        f"{accepted}\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "0"], "--requests 0: at least one request is needed"),
        (["--block-size", "0"], "--block-size 0: a block holds at least one token"),
    ],
)
def test_demo_s_value_errors_read_as_argparse_s(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value the demo refuses after parsing is reported in argparse's one-line form."""
    assert main(["demo", *argv]) == USAGE_ERROR
    assert capsys.readouterr().err == (
        f"python -m verified_queue demo: error: {message} (see --help)\n"
    )


def test_without_checks_the_demo_does_not_claim_checks_passed() -> None:
    """``--no-checks`` ends in a result line that says check mode was off."""
    report = run_demo(DemoConfig(requests=30, blocks=256, checks=False), io.StringIO())
    assert report.status == 0
    assert "every check passed" not in report.result
    assert "check mode was off" in report.result


def test_the_backlog_of_a_huge_request_count_is_bounded() -> None:
    """However many requests are asked for, at most MAX_WAITING wait in memory at once."""
    config = DemoConfig(requests=10**12, checks=False, arrivals_per_step=3_000, max_running=4)
    simulation = Simulation(config, io.StringIO())
    longest = 0

    class Enough(Exception):
        """Ends the run after enough steps."""

    def step() -> None:
        nonlocal longest
        longest = max(longest, len(simulation.waiting))
        if simulation.report.steps > 12:
            raise Enough

    simulation._decode_step = step  # type: ignore[method-assign]
    with pytest.raises(Enough):
        simulation.run()
    assert 0 < longest <= MAX_WAITING
