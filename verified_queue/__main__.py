"""Command line: ``python -m verified_queue [COMMAND]``.

With no command it prints the version and runs the self-check
(``verified_queue.cli.selfcheck``). Every command lives in its own module of
``verified_queue.cli``, imported only when that command runs, which exposes
``add_arguments(parser)`` and ``run(args) -> int``. The benchmark is not a
command: it lives in the repository's ``bench/``, which the wheel does not ship
(``tox -e bench``).

Exit status: 0 when everything passed, 1 when a check found a fault,
:data:`USAGE_ERROR` (2) for bad arguments (one line on stderr, no traceback),
:data:`OUT_OF_MEMORY` (3) when the machine could not hold what the arguments
asked for, :data:`UNWRITABLE_OUTPUT` (74, sysexits' ``EX_IOERR``) when its output cannot be
written (standard output closed, or a file that is full, such as ``/dev/full``),
:data:`INTERRUPTED` (130) when Ctrl-C stopped it (the demo prints its
report of the run so far first), and :data:`BROKEN_PIPE` (141) when the reader of
its output went away (``... | head -1``): the statuses a shell reports for a
command that SIGINT or SIGPIPE ended. None of them is 1, which says a check
found a fault.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import platform
import sys
from collections.abc import Sequence
from typing import NoReturn

import verified_queue
from verified_queue.cli import PROG, USAGE_ERROR, selfcheck, usage_error

__all__ = [
    "BROKEN_PIPE",
    "COMMANDS",
    "INTERRUPTED",
    "OUT_OF_MEMORY",
    "UNWRITABLE_OUTPUT",
    "USAGE_ERROR",
    "build_parser",
    "main",
    "version_text",
]

#: Exit status when the run ran out of memory: too big for this machine, not a fault found.
OUT_OF_MEMORY = 3
#: Exit status when the output could not be written (sysexits.h's EX_IOERR): not a fault found.
UNWRITABLE_OUTPUT = 74
#: The errors of a write to standard output that mean it cannot take the output at all.
_OUTPUT_ERRNOS = frozenset({errno.EBADF, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})
#: Exit status when Ctrl-C stopped the run (128 + SIGINT).
INTERRUPTED = 130
#: Exit status when the output's reader closed it, as ``head`` does (128 + SIGPIPE).
BROKEN_PIPE = 141

#: command -> (module that implements it, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "selfcheck": (
        "verified_queue.cli.selfcheck",
        "compare the queue with a plain list (the default)",
    ),
    "demo": ("verified_queue.cli.demo", "simulate a prefix-caching block pool serving requests"),
    "status": (
        "verified_queue.cli.status",
        "say what is in force: the build, the check mode level, the vLLM plugin",
    ),
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage first; one line is easier to read in a log,
        # and --help is still there for the usage.
        sys.exit(usage_error(self.prog, message))


def version_text() -> str:
    """Describe this installation: the package version, which build is loaded, and the Python.

    Runtime complexity: O(1)

    >>> version_text().startswith(f"verified_queue {verified_queue.__version__} (compiled: ")
    True
    """
    compiled = "yes" if verified_queue.COMPILED else "no"
    python = f"Python ({platform.python_implementation()}) {platform.python_version()}"
    return f"verified_queue {verified_queue.__version__} (compiled: {compiled})\n{python}"


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the module of the command named in ``argv``.

    Runtime complexity: O(len(argv))
    """
    parser = _Parser(
        prog=PROG,
        description="The verified free-block queue: self-check and tools.",
        # Keeps the line break of --version's two lines (it leaves option help alone).
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=version_text(),
        help="print the version, which build is loaded and which Python, then exit",
    )
    # With no command, the self-check runs with the options given to the program itself.
    selfcheck.add_arguments(parser)
    parser.set_defaults(handler=selfcheck.run)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        # Every option's help states its default itself ("default: ..."), as --help shows.
        sub = commands.add_parser(name, help=summary, description=summary)
        if name in argv:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            # The command's own parser, so that its errors name the command, and the check of
            # its values, which main() runs before anything is printed.
            sub.set_defaults(
                handler=module.run, command_parser=sub, validate=getattr(module, "validate", None)
            )
    return parser


def _refuse_options_before_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Refuse options given before a command's name: the command would silently drop them.

    The options of the program itself are the self-check's, for a run with no command;
    a command's parser then sets its own defaults over them (``--seed 5 demo`` would run
    the demo with seed 0).
    """
    named = next((index for index, word in enumerate(argv) if word in COMMANDS), None)
    if named is None:
        return
    early = [word for word in argv[:named] if word.startswith("-")]
    if early and not {"-h", "--help", "--version"} & set(early):
        command = argv[named]
        parser.error(
            f"{' '.join(early)} before {command!r}: give the options of a command after its "
            f"name ({PROG} {command} {' '.join(argv[:named])} ...)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command named in ``argv`` and return the process exit status.

    Runtime complexity: that of the command
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments)
    _refuse_options_before_command(parser, arguments)
    try:
        args, unknown = parser.parse_known_args(arguments)
        # Refused by the command's parser, so that the error names the command.
        command_parser: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        if unknown:
            command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as done:
        # --help and --version print and exit here: flush now, where a failure is caught.
        if done.code == 0 and sys.stdout is not None:
            try:
                sys.stdout.flush()
            except OSError as error:
                return _unwritable(error)
        raise
    validate = getattr(args, "validate", None)
    problem = validate(args) if validate is not None else None
    if problem is not None:
        # Before the banner: a value the command refuses prints one line on stderr, nothing else.
        return usage_error(command_parser.prog, problem)
    if sys.stdout is None:  # started with its standard output closed (``>&-``)
        return _unwritable(None)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; turn how it ended into the documented exit status."""
    try:
        build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
        print(f"verified_queue {verified_queue.__version__} ({build})", flush=True)
        status: int = args.handler(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
    except MemoryError:
        pass  # reported below, once the handler's frames (and all they allocated) are freed
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader left: write the rest of the output nowhere (also what the
        # interpreter flushes at exit), and report it as a shell would.
        _discard_output()
        return BROKEN_PIPE
    except OSError as error:
        # The commands write no file but their output, so these errors are the output's.
        if error.errno not in _OUTPUT_ERRNOS:
            raise
        return _unwritable(error)
    else:
        return status
    command = f"{PROG} {args.command}" if args.command else PROG
    print(
        f"{command}: out of memory: this machine cannot hold what the arguments ask for; "
        "try smaller sizes",
        file=sys.stderr,
    )
    return OUT_OF_MEMORY


def _discard_output() -> None:
    """Send what is left of the output nowhere, so that the flush at exit cannot fail again."""
    # ValueError: no descriptor behind it, so nothing will be flushed there.
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)


def _unwritable(error: OSError | None) -> int:
    """Say on stderr, if it can, why the output could not be written; return the status.

    ``error`` is what a write raised, ``None`` if standard output was closed from the start.
    """
    if error is None:
        reason = "standard output is closed"
    else:
        _discard_output()
        reason = error.strerror or str(error)
    # With stderr closed too (None) the status says it alone: print(file=None) would write
    # to stdout, the very output that failed.
    if sys.stderr is not None:
        with contextlib.suppress(OSError):
            print(f"{PROG}: cannot write its output: {reason}", file=sys.stderr)
    return UNWRITABLE_OUTPUT


if __name__ == "__main__":
    sys.exit(main())
