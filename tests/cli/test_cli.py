"""Tests of ``python -m verified_queue``: version, self-check, power to fail, bad input."""

from __future__ import annotations

import argparse
import ast
import doctest
import platform
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

import verified_queue
import verified_queue.__main__ as cli
from verified_queue.__main__ import OUT_OF_MEMORY, USAGE_ERROR, main
from verified_queue.block import Block
from verified_queue.cli import selfcheck
from verified_queue.queue import FreeBlockQueue

try:
    import resource
except ImportError:  # pragma: no cover -- Windows
    resource = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[2]


class _ForgetsCountOnRemove(FreeBlockQueue[Block]):
    """A planted bug: remove() unlinks the block but leaves the count alone."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        super().remove(block)
        self.num_free_blocks += 1


class _AcceptsDoubleFree(FreeBlockQueue[Block]):
    """A planted bug: append() of a linked block silently does nothing."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        if block.prev_free_block is None:
            super().append(block)


def test_default_command_prints_version_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    """With no command the CLI prints the version and a passing self-check, exiting 0."""
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"verified_queue {verified_queue.__version__}" in out
    assert "self-check passed: 20000 operations" in out


def test_self_check_rejects_misuse_and_matches() -> None:
    """The self-check exercises rejected misuse as well as valid calls."""
    report = selfcheck.run_self_check(operations=5_000, seed=11)
    assert report.mismatch is None
    assert report.operations == 5_000
    assert 0 < report.rejected < 5_000


@pytest.mark.parametrize("buggy", [_ForgetsCountOnRemove, _AcceptsDoubleFree])
def test_self_check_catches_a_planted_bug(
    buggy: type[FreeBlockQueue[Block]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A queue with a planted bug makes the self-check fail and the CLI exit 1."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", buggy)
    assert main(["selfcheck", "--operations", "2000"]) == 1
    assert "self-check FAILED" in capsys.readouterr().out


def test_module_runs_as_a_program() -> None:
    """``python -m verified_queue`` runs in a fresh interpreter and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "verified_queue", "--operations", "1000"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "self-check passed: 1000 operations" in done.stdout


def test_version_flag_names_the_build_and_the_python(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the version, whether the compiled build is loaded, and the Python."""
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    compiled = "yes" if verified_queue.COMPILED else "no"
    python = f"Python ({platform.python_implementation()}) {platform.python_version()}"
    assert capsys.readouterr().out == (
        f"verified_queue {verified_queue.__version__} (compiled: {compiled})\n{python}\n"
    )


def test_main_module_docstring_examples() -> None:
    """The command line's own docstring examples (argument parsing, version) hold."""
    if not (cli.__file__ or "").endswith(".py"):  # pragma: no cover -- never compiled
        pytest.skip("verified_queue.__main__ is compiled")
    results = doctest.testmod(cli, optionflags=doctest.ELLIPSIS)
    assert results.attempted >= 1
    assert results.failed == 0


@pytest.mark.parametrize("value", ["-5", "0", "abc", "2.5"])
@pytest.mark.parametrize("command", [[], ["selfcheck"]])
def test_operations_below_one_are_refused_in_one_line(
    value: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--operations must be a whole number of at least 1: anything else exits 2 with one line."""
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--operations", value])
    assert stopped.value.code == USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f"argument --operations: expected a whole number of at least 1, not '{value}'" in (
        captured.err
    )


def test_the_self_check_refuses_to_check_nothing() -> None:
    """run_self_check with fewer than 1 operation or block raises ValueError, never 'passed'."""
    with pytest.raises(ValueError, match="operations: expected at least 1, not -5"):
        selfcheck.run_self_check(operations=-5)
    with pytest.raises(ValueError, match="operations: expected at least 1, not 0"):
        selfcheck.run_self_check(operations=0)
    with pytest.raises(ValueError, match="universe: expected at least 1 block, not 0"):
        selfcheck.run_self_check(operations=10, universe=0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--bogus"],
        ["no-such-command"],
        ["--seed", "x"],
        ["demo", "--blocks", "many"],
        ["demo", "--inject", "no-such-fault"],
        ["demo", "--bogus"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed command line exits 2 with one error line on stderr (the usage is in --help)."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("python -m verified_queue")
    assert "error: " in captured.err


def test_running_out_of_memory_exits_3_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A MemoryError in a command ends in one clear line and exit 3, not a traceback and 1."""

    def exhausted(**_: object) -> NoReturn:
        raise MemoryError

    monkeypatch.setattr(selfcheck, "run_self_check", exhausted)
    assert main(["selfcheck"]) == OUT_OF_MEMORY == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("python -m verified_queue selfcheck: out of memory")


@pytest.mark.skipif(resource is None, reason="needs resource.setrlimit (POSIX)")
def test_a_demo_pool_too_big_for_memory_ends_without_a_traceback() -> None:
    """demo --blocks 1000000000 under an 80 MiB limit exits 2 or 3 with one line, never 1."""

    def limit_memory() -> None:  # pragma: no cover -- runs in the child
        assert resource is not None
        resource.setrlimit(resource.RLIMIT_AS, (80 << 20, 80 << 20))

    done = subprocess.run(
        [sys.executable, "-m", "verified_queue", "demo", "--blocks", "1000000000"],
        cwd=Path(__file__).anchor,  # import the installed package, not the checkout
        preexec_fn=limit_memory,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in {USAGE_ERROR, OUT_OF_MEMORY}, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


HOSTILE_BENCH = {
    "__init__.py": (
        "import pathlib\n"
        "pathlib.Path(__file__).parent.parent.joinpath('HIJACKED').write_text('imported')\n"
        "print('HIJACKED: the current directory s bench package was imported')\n"
    ),
    "run.py": (
        "def add_arguments(parser):\n"
        "    parser.add_argument('--quick', action='store_true')\n"
        "def run(args):\n"
        "    print('HIJACKED: the current directory s bench ran')\n"
        "    return 0\n"
    ),
}


def _hostile_directory(tmp_path: Path) -> Path:
    """A working directory with a bench/ package of its own that announces being imported."""
    work = tmp_path / "work"
    (work / "bench").mkdir(parents=True)
    for name, text in HOSTILE_BENCH.items():
        (work / "bench" / name).write_text(text, encoding="utf-8")
    return work


def test_bench_runs_from_the_checkout_never_from_the_cwd(tmp_path: Path) -> None:
    """``python -I bench/__main__.py`` loads the checkout's bench/, never one in the cwd."""
    work = _hostile_directory(tmp_path)
    done = subprocess.run(
        [sys.executable, "-I", str(ROOT / "bench" / "__main__.py"), "--help"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "HIJACKED" not in done.stdout + done.stderr
    assert not (work / "HIJACKED").exists()
    assert done.returncode == 0, done.stderr
    assert "--workload" in done.stdout  # the project's benchmark's own options


def test_bench_is_not_a_command_of_the_package(capsys: pytest.CaptureFixture[str]) -> None:
    """The wheel ships no benchmark: ``bench`` is refused like any unknown command, in one line."""
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--quick"])
    assert stopped.value.code == USAGE_ERROR
    err = capsys.readouterr().err
    assert "invalid choice: 'bench'" in err
    assert err.count("\n") == 1


def _imported_roots(tree: ast.Module) -> set[str]:
    """The top-level names a module imports, at module level or inside functions."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_package_imports_nothing_from_the_repository() -> None:
    """No module of the package imports bench/, specs/ or tests/, or loads a file by its path."""
    package = ROOT / "verified_queue"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        roots = _imported_roots(ast.parse(source))
        reached = roots & {"bench", "specs", "tests", "mutation"}
        if reached or "spec_from_file_location" in source or "sys.path" in source:
            offenders.append(f"{path.relative_to(ROOT)}: {sorted(reached) or 'a file-path import'}")
    assert offenders == []


def test_an_unknown_option_of_a_command_names_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``demo --bogus`` is refused by the demo's parser: the error names ``... demo``."""
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--bogus"])
    assert stopped.value.code == USAGE_ERROR
    assert capsys.readouterr().err == (
        "python -m verified_queue demo: error: unrecognized arguments: --bogus (see --help)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--requests", "0"], "--requests 0: at least one request is needed"),
        (["demo", "--block-size", "0"], "--block-size 0: a block holds at least one token"),
        (["demo", "--blocks", "1"], "--blocks 1 of 16 tokens: too small for any request"),
    ],
)
def test_a_refused_value_prints_no_banner(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's own checks of its values run before the banner: one line on stderr, no stdout."""
    assert main(argv) == USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"python -m verified_queue demo: error: {message}")


@pytest.mark.parametrize("command", [None, "selfcheck", "demo"])
def test_help_states_every_default(command: str | None) -> None:
    """Every option of every command says its default in --help (all but --help, --version)."""
    argv = [command] if command else []
    parser = cli.build_parser(argv)
    if command is not None:
        subparsers = next(
            action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        )
        parser = subparsers.choices[command]
    options = [
        action
        for action in parser._actions
        if action.option_strings and action.dest not in {"help", "version"}
    ]
    assert options
    help_text = parser.format_help()
    for action in options:
        assert action.help is not None
        assert "default" in action.help, action.option_strings
    assert ("(default: 2000)" if command == "demo" else "default: 20000)") in help_text
