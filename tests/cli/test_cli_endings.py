"""How a run of the command line ends, in process: its status, its one line, its output kept."""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import verified_queue
from verified_queue.__main__ import (
    BROKEN_PIPE,
    INTERRUPTED,
    OUT_OF_MEMORY,
    UNWRITABLE_OUTPUT,
    USAGE_ERROR,
    _discard_output,
    _unwritable,
    main,
)
from verified_queue.cli import PROG, selfcheck

#: The errors of a write that mean the output cannot take it (closed, full, failing, too big).
OUTPUT_ERRNOS = [errno.EBADF, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG]


@dataclass
class Console:
    """The process's standard output (a file, buffered as a pipe or a file is) and stderr."""

    path: Path
    stdout: io.TextIOWrapper
    stderr: io.StringIO
    monkeypatch: pytest.MonkeyPatch

    def take_over(self) -> None:
        """Make these the process's streams (in the test itself: pytest's capture resets them)."""
        self.monkeypatch.setattr(sys, "stdout", self.stdout)
        self.monkeypatch.setattr(sys, "stderr", self.stderr)

    def output(self) -> str:
        """Everything written to standard output so far, buffered text included."""
        self.stdout.flush()
        return self.path.read_text(encoding="utf-8")


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """A standard output of its own (a file), and stderr (a string), for the test to take over."""
    path = tmp_path / "stdout.txt"
    with open(path, "w", encoding="utf-8") as stdout:
        yield Console(path, stdout, io.StringIO(), monkeypatch)


class _DeviceFull(io.StringIO):
    """A stream that fails every write and flush for want of space, as ``/dev/full`` does."""

    def write(self, _text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullOnFlush(_DeviceFull):
    """A buffered stream on a full device: text is taken, and writing it out fails."""

    def write(self, text: str) -> int:
        return io.StringIO.write(self, text)


def _banner() -> str:
    """The first line of every run: the version and which build is loaded."""
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    return f"verified_queue {verified_queue.__version__} ({build})\n"


def _unwritable_line(code: int) -> str:
    """The one line on stderr when a write to the output failed with ``code``."""
    return f"{PROG}: cannot write its output: {os.strerror(code)}\n"


@dataclass(frozen=True)
class Ending:
    """How a command ends, and what the command line must make of it."""

    #: What the command does at its end: return this status, or raise this.
    end: int | BaseException
    #: The status main() returns.
    status: int
    #: All of stderr; ``{prog}`` is how the run was invoked (the program, then the command).
    errors: str
    #: Whether the output is still written to after it (not once its reader left or it failed).
    kept: bool


ENDINGS = {
    "passed": Ending(0, 0, "", kept=True),
    "fault-found": Ending(1, 1, "", kept=True),
    "out-of-memory": Ending(
        MemoryError(),
        OUT_OF_MEMORY,
        "{prog}: out of memory: this machine cannot hold what the arguments ask for; "
        "try smaller sizes\n",
        kept=True,
    ),
    "ctrl-c": Ending(KeyboardInterrupt(), INTERRUPTED, f"{PROG}: interrupted\n", kept=True),
    "reader-left": Ending(
        BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)), BROKEN_PIPE, "", kept=False
    ),
    **{
        f"output-{errno.errorcode[code]}": Ending(
            OSError(code, os.strerror(code)), UNWRITABLE_OUTPUT, _unwritable_line(code), kept=False
        )
        for code in OUTPUT_ERRNOS
    },
}


@pytest.mark.parametrize("name", list(ENDINGS))
@pytest.mark.parametrize("command", [[], ["selfcheck"]], ids=["no-command", "selfcheck"])
def test_every_ending_has_its_status_its_line_and_its_output_once(
    name: str, command: list[str], console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each way a command ends gives its documented status and at most its one stderr line;
    the banner and the command's output are written once, and nothing more once the output
    is gone (reader left, output unwritable)."""
    ending = ENDINGS[name]
    console.take_over()

    def command_run(_args: argparse.Namespace) -> int:
        print("the report so far")
        if isinstance(ending.end, BaseException):
            raise ending.end
        return ending.end

    monkeypatch.setattr(selfcheck, "run", command_run)
    assert main(command) == ending.status
    assert console.stderr.getvalue() == ending.errors.format(prog=" ".join([PROG, *command]))
    print("written after the run")
    if ending.kept:
        assert console.output() == _banner() + "the report so far\nwritten after the run\n"
    else:
        assert console.output() == _banner()


def test_an_os_error_that_is_not_the_output_s_is_a_fault_not_74(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError other than the output's (a missing file) is not reported as an unwritable
    output: it propagates, with no line claiming the output failed."""
    console.take_over()

    def command_run(_args: argparse.Namespace) -> int:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "somewhere")

    monkeypatch.setattr(selfcheck, "run", command_run)
    with pytest.raises(FileNotFoundError):
        main(["selfcheck"])
    assert console.stderr.getvalue() == ""
    assert console.output() == _banner()


def test_the_banner_reaches_the_output_before_the_command_runs(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The banner is written out before the command starts, so it comes first even before
    what goes straight to the descriptor (a child process, C code, a crash's last words)."""
    console.take_over()

    def command_run(_args: argparse.Namespace) -> int:
        os.write(sys.stdout.fileno(), b"straight to the descriptor\n")
        return 0

    monkeypatch.setattr(selfcheck, "run", command_run)
    assert main([]) == 0
    assert console.output() == _banner() + "straight to the descriptor\n"


@pytest.mark.parametrize("compiled", [True, False])
def test_the_banner_and_version_name_the_build_that_is_loaded(
    compiled: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The banner says compiled (mypyc) or pure Python, and --version says compiled: yes or
    no, as the loaded build is."""
    monkeypatch.setattr(verified_queue, "COMPILED", compiled)
    monkeypatch.setattr(selfcheck, "run", lambda _args: 0)
    assert main([]) == 0
    build = "compiled (mypyc)" if compiled else "pure Python"
    assert capsys.readouterr().out == f"verified_queue {verified_queue.__version__} ({build})\n"
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    yes_no = "yes" if compiled else "no"
    assert first_line == f"verified_queue {verified_queue.__version__} (compiled: {yes_no})"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["demo", "--help"]])
def test_help_and_version_into_a_full_output_exit_74_with_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--help and --version that cannot be written out return 74 and say why on stderr."""
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _FullOnFlush())
    monkeypatch.setattr(sys, "stderr", errors)
    assert main(argv) == UNWRITABLE_OUTPUT
    assert errors.getvalue() == _unwritable_line(errno.ENOSPC)


def test_a_usage_error_is_status_2_even_with_a_full_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bad arguments exit 2 with their one line whatever standard output is: it is not touched."""
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _FullOnFlush())
    monkeypatch.setattr(sys, "stderr", errors)
    with pytest.raises(SystemExit) as stopped:
        main(["--bogus"])
    assert stopped.value.code == USAGE_ERROR
    assert errors.getvalue() == f"{PROG}: error: unrecognized arguments: --bogus (see --help)\n"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (None, "standard output is closed"),
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), os.strerror(errno.ENOSPC)),
        (OSError("the terminal went away"), "the terminal went away"),
    ],
    ids=["closed", "strerror", "no-strerror"],
)
def test_an_unwritable_output_is_74_with_the_reason_on_stderr(
    error: OSError | None, reason: str, console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line says why: stdout closed from the start, else the error's strerror, else its
    text; after a failed write (not for a stdout closed from the start), what is written to
    the output goes nowhere."""
    console.take_over()
    if error is None:
        monkeypatch.setattr(sys, "stdout", None)
    assert _unwritable(error) == UNWRITABLE_OUTPUT
    assert console.stderr.getvalue() == f"{PROG}: cannot write its output: {reason}\n"
    print("written afterwards", file=console.stdout)
    assert console.output() == ("written afterwards\n" if error is None else "")


@pytest.mark.parametrize("stderr", [_DeviceFull(), None], ids=["full", "closed"])
def test_an_unwritable_stderr_too_still_ends_with_74(
    stderr: io.StringIO | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stderr full or closed as well, the status alone says it: 74, no exception, and
    the message never goes to the output that failed (``print(file=None)`` would write it
    there)."""
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdout", None)
    assert _unwritable(None) == UNWRITABLE_OUTPUT
    output = io.StringIO()
    monkeypatch.setattr(sys, "stdout", output)
    assert _unwritable(OSError(errno.EIO, os.strerror(errno.EIO))) == UNWRITABLE_OUTPUT
    assert output.getvalue() == ""


def test_discarding_the_output_sends_the_rest_to_the_null_device(console: Console) -> None:
    """After _discard_output, what was written stays, and what is written next goes nowhere,
    without an error at the flush (the one at exit included)."""
    console.take_over()
    print("written before", file=console.stdout)
    console.stdout.flush()
    _discard_output()
    print("written after", file=console.stdout)
    assert console.output() == "written before\n"
    assert os.path.samestat(os.fstat(console.stdout.fileno()), os.stat(os.devnull))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd (Linux)")
def test_discarding_the_output_leaves_no_descriptor_open(console: Console) -> None:
    """_discard_output opens the null device only to point the output at it: called again
    and again (a long-lived caller), it leaves the process's open descriptors as they were."""
    console.take_over()
    _discard_output()  # the first call may replace a descriptor: count from after it
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        _discard_output()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("stdout", ["closed file", "no descriptor", "no descriptor left"])
def test_discarding_an_output_it_cannot_redirect_leaves_it_as_it_was(
    stdout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stdout that is closed (ValueError), has no descriptor (a StringIO), or a process out
    of descriptors (EMFILE opening the null device): _discard_output passes quietly and the
    output stays as it was."""
    path = tmp_path / "stdout.txt"
    with open(path, "w", encoding="utf-8") as stream:
        if stdout == "closed file":
            stream.close()
            monkeypatch.setattr(sys, "stdout", stream)
            _discard_output()
            assert sys.stdout.closed
        elif stdout == "no descriptor":
            text = io.StringIO("kept")
            monkeypatch.setattr(sys, "stdout", text)
            _discard_output()
            assert text.getvalue() == "kept"
        else:
            monkeypatch.setattr(sys, "stdout", stream)

            def out_of_descriptors(*_args: object, **_kwargs: object) -> int:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

            with monkeypatch.context() as patch:
                patch.setattr(os, "open", out_of_descriptors)
                _discard_output()
            print("still written", file=stream)
            stream.flush()
            assert path.read_text(encoding="utf-8") == "still written\n"
