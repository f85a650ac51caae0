"""What --help, --version and the command line's own parsing tell and refuse, in process."""

from __future__ import annotations

import re
import sys

import pytest

from verified_queue.__main__ import COMMANDS, USAGE_ERROR, main
from verified_queue.cli import PROG


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``argv`` (ending in --help) prints, its whitespace made single spaces."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return " ".join(captured.out.split())


def test_help_describes_the_program_its_commands_and_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help shows ``[COMMAND]`` in the usage as the docstring does, the program's description,
    every command with its one-line summary, and what --version prints."""
    text = _help(["--help"], capsys)
    usage = text[: text.index(" The verified free-block queue")]
    assert usage.startswith(f"usage: {PROG} [-h] [--version]")
    assert re.search(r"(?<!\w)COMMAND \.\.\.$", usage), usage
    assert " The verified free-block queue: self-check and tools. " in text
    for name, (_, summary) in COMMANDS.items():
        assert f" {name} {summary} " in text
    assert " --version print the version, which build is loaded and which Python, then exit " in (
        text
    )


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_command_s_help_opens_with_its_summary(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``COMMAND --help`` names the command in its usage and describes it by its summary."""
    text = _help([name, "--help"], capsys)
    assert text.startswith(f"usage: {PROG} {name} [-h]")
    assert f" {COMMANDS[name][1]} " in text


@pytest.mark.parametrize("early", [["-h"], ["--help"], ["--version"], ["--seed", "5", "-h"]])
def test_help_or_version_before_a_command_is_not_refused(
    early: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--help demo`` or ``--version demo`` print the help or version and exit 0: those options
    before a command's name lose nothing, so they are not refused."""
    with pytest.raises(SystemExit) as stopped:
        main([*early, "demo"])
    assert stopped.value.code == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("usage: " if "--version" not in early else "verified_queue ")


def test_every_option_before_a_command_is_named_in_the_refusal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The refusal names every option given before the command, and shows the command line
    with them moved after its name."""
    with pytest.raises(SystemExit) as stopped:
        main(["--seed", "5", "--operations", "10", "demo"])
    assert stopped.value.code == USAGE_ERROR
    assert capsys.readouterr().err == (
        f"{PROG}: error: --seed --operations before 'demo': give the options of a command after "
        f"its name ({PROG} demo --seed 5 --operations 10 ...) (see --help)\n"
    )


def test_main_reads_the_command_line_after_the_program_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() with no argument parses sys.argv[1:], all of it: the command and every unknown
    argument are named in the one-line refusal."""
    monkeypatch.setattr(sys, "argv", ["verified_queue/__main__.py", "demo", "--bogus", "-x"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == USAGE_ERROR
    assert capsys.readouterr().err == (
        f"{PROG} demo: error: unrecognized arguments: --bogus -x (see --help)\n"
    )
