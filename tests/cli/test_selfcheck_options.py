"""The self-check's options: what ``--operations`` and ``--seed`` do, their help, their defaults."""

from __future__ import annotations

import argparse
import inspect
import re

import pytest

from specs.planted_bugs import PLANTED_BUGS
from verified_queue.__main__ import build_parser, main
from verified_queue.cli import selfcheck

#: The two ways to run the self-check: the program with no command, and its own command.
COMMANDS = pytest.mark.parametrize("command", [[], ["selfcheck"]], ids=["default", "selfcheck"])


def _verdict(output: str) -> str:
    """The self-check's verdict: the last line it printed."""
    return output.splitlines()[-1]


@COMMANDS
def test_one_operation_is_a_run_of_one(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--operations 1, the least accepted, runs exactly one operation and passes, with seed 0."""
    assert main([*command, "--operations", "1"]) == 0
    rejected = selfcheck.run_self_check(operations=1).rejected
    assert _verdict(capsys.readouterr().out) == (
        f"self-check passed: 1 operations ({rejected} misuses rejected) matched a plain list, "
        "seed 0"
    )


def test_the_function_runs_exactly_the_operations_asked_for() -> None:
    """run_self_check(operations=n) runs n operations, from the least accepted, 1, upwards."""
    for operations in (1, 2, 3, 4, 5, 9):
        report = selfcheck.run_self_check(operations=operations)
        assert report.mismatch is None
        assert report.operations == operations


@COMMANDS
def test_help_states_what_each_option_does_and_its_default(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--help gives each option with what it does and its default, as the parser applies it."""
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--help"])
    assert stopped.value.code == 0
    words = " ".join(capsys.readouterr().out.split())  # as wrapped for any terminal width
    defaults = build_parser(command).parse_args(command)
    assert re.search(
        r"--operations OPERATIONS operations to run \(at least 1; "
        rf"default: {defaults.operations}\)( |$)",
        words,
    ), words
    assert re.search(rf"--seed SEED random seed \(default: {defaults.seed}\)( |$)", words), words
    assert (defaults.operations, defaults.seed) == (20_000, 0)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_seed_chooses_the_run(seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    """--seed N runs run_self_check(seed=N): the verdict counts that run's rejected misuses."""
    report = selfcheck.run_self_check(operations=2_000, seed=seed)
    assert main(["selfcheck", "--operations", "2000", "--seed", str(seed)]) == 0
    assert _verdict(capsys.readouterr().out) == (
        f"self-check passed: 2000 operations ({report.rejected} misuses rejected) "
        f"matched a plain list, seed {seed}"
    )


def test_seeds_differ_and_each_repeats_itself() -> None:
    """Different seeds run different workloads; one seed runs the same one every time."""
    runs = {seed: selfcheck.run_self_check(operations=2_000, seed=seed) for seed in (0, 1, 2)}
    assert len({report.rejected for report in runs.values()}) == len(runs)
    for seed, report in runs.items():
        assert selfcheck.run_self_check(operations=2_000, seed=seed) == report


def test_a_seed_finds_a_bug_at_the_same_call_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing run is reproducible from its seed: the same operation, the same report."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", PLANTED_BUGS["remove_forgets_count"])
    first = selfcheck.run_self_check(operations=20_000, seed=5)
    assert first.mismatch is not None
    for _ in range(3):
        assert selfcheck.run_self_check(operations=20_000, seed=5) == first


def test_run_takes_a_parser_given_only_the_self_checks_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """run() works on the options add_arguments() defines, with no command name among them."""
    parser = argparse.ArgumentParser()
    selfcheck.add_arguments(parser)
    assert selfcheck.run(parser.parse_args(["--operations", "10", "--seed", "3"])) == 0
    assert capsys.readouterr().out.startswith("self-check passed: 10 operations (")


def test_the_functions_defaults_are_the_commands() -> None:
    """run_self_check() with no arguments runs the check the command runs with no options."""
    defaults = build_parser([]).parse_args([])
    report = selfcheck.run_self_check()
    assert report.mismatch is None
    assert report.operations == defaults.operations
    assert inspect.signature(selfcheck.run_self_check).parameters["seed"].default == defaults.seed


@pytest.mark.parametrize("universe", [1, 2, 3, 4])
def test_every_universe_it_accepts_is_checked(universe: int) -> None:
    """The smallest universes the check accepts run to the end and pass: a batch never
    draws more blocks than there are (it did for 1 to 3, and crashed)."""
    for seed in range(5):
        report = selfcheck.run_self_check(operations=400, universe=universe, seed=seed)
        assert report.mismatch is None, (universe, seed, report.mismatch)
        assert report.operations == 400
