"""Command line: ``python -m verified_queue [COMMAND]``.

With no command it prints the version and runs the self-check. Every other
command lives in its own module, imported only when that command runs, which
exposes ``add_arguments(parser)`` and ``run(args) -> int``.

Exit status: 0 when everything passed, 1 when a check found a fault,
:data:`USAGE_ERROR` (2) for bad arguments or a command this installation cannot
run (one line on stderr, no traceback), and :data:`OUT_OF_MEMORY` (3) when the
machine could not hold what the arguments asked for.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import verified_queue
from verified_queue.selfcheck import run_self_check

__all__ = ["COMMANDS", "OUT_OF_MEMORY", "USAGE_ERROR", "build_parser", "main", "version_text"]

PROG = "python -m verified_queue"

#: Exit status for arguments the command refuses, or a command this installation cannot run.
USAGE_ERROR = 2
#: Exit status when the run ran out of memory: too big for this machine, not a fault found.
OUT_OF_MEMORY = 3

# command -> (module that implements it, one-line help). The bench lives in the
# repository's bench/ (it is not shipped), so it runs from a checkout only.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("verified_queue.demo", "simulate a prefix-caching block pool serving requests"),
    "bench": ("bench.run", "benchmark against vLLM-style baselines (from a repository checkout)"),
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage first; one line is easier to read in a log,
        # and --help is still there for the usage.
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


class _BenchUnavailable(Exception):
    """The benchmark cannot be loaded: the message says why and what to run instead."""


def positive_int(text: str) -> int:
    """Parse a count of at least 1 for argparse, refusing anything else in one clear line.

    Runtime complexity: O(len(text))

    >>> positive_int("20000")
    20000
    >>> positive_int("-5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a whole number of at least 1, not '-5'
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def version_text() -> str:
    """Describe this installation: the package version, which build is loaded, and the Python.

    Runtime complexity: O(1)

    >>> version_text().startswith(f"verified_queue {verified_queue.__version__} (compiled: ")
    True
    """
    compiled = "yes" if verified_queue.COMPILED else "no"
    python = f"Python ({platform.python_implementation()}) {platform.python_version()}"
    return f"verified_queue {verified_queue.__version__} (compiled: {compiled})\n{python}"


def _self_check(args: argparse.Namespace) -> int:
    report = run_self_check(operations=args.operations, seed=args.seed)
    if report.mismatch is not None:
        print(f"self-check FAILED after {report.operations} operations: {report.mismatch}")
        return 1
    print(
        f"self-check passed: {report.operations} operations "
        f"({report.rejected} misuses rejected) matched a plain list, seed {args.seed}"
    )
    return 0


def _add_self_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--operations",
        type=positive_int,
        default=20_000,
        help="operations to run (at least 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.set_defaults(handler=_self_check)


def _package_checkout() -> Path:
    """The directory holding the imported ``verified_queue``: a checkout, or site-packages."""
    return Path(verified_queue.__file__).resolve().parent.parent


def _is_checkout(root: Path) -> bool:
    """Whether ``root`` is a clone of this project: its pyproject names it and it has bench/."""
    try:
        metadata = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "verified-queue"' in metadata and (root / "bench" / "run.py").is_file()


def _load_bench(checkout: Path | None) -> ModuleType:
    """Import ``bench.run`` from the project's checkout, never from the current directory.

    Without ``checkout`` the checkout is the one the imported package lives in. A
    directory named ``bench`` elsewhere on ``sys.path`` (the current directory comes
    first under ``python -m``) is never imported.
    """
    if checkout is None:
        root = _package_checkout()
        if not _is_checkout(root):
            raise _BenchUnavailable(
                f"bench: needs a checkout of the repository: the benchmark lives in its bench/ "
                f"directory, which the installed package ({root / 'verified_queue'}) does not "
                f"ship; in a clone run `tox -e bench`, or pass --checkout PATH_TO_THE_CLONE"
            )
    else:
        root = checkout.resolve()
        if not _is_checkout(root):
            raise _BenchUnavailable(
                f"bench: --checkout {checkout}: not a checkout of verified-queue "
                f"(no pyproject.toml naming it beside a bench/run.py)"
            )
    package_dir = root / "bench"
    loaded = sys.modules.get("bench")
    if loaded is None:
        spec = importlib.util.spec_from_file_location(
            "bench", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
        )
        if spec is None or spec.loader is None:  # pragma: no cover -- the file was just found
            raise _BenchUnavailable(f"bench: cannot load {package_dir}")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules["bench"] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules["bench"]
            raise
    where = Path(loaded.__file__ or "").resolve().parent
    if where != package_dir:
        raise _BenchUnavailable(
            f"bench: a different module named bench is already imported, from {where}, "
            f"not the checkout's {package_dir}"
        )
    return importlib.import_module("bench.run")


def _add_bench(sub: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Give the bench subcommand its options, or a handler that says why it cannot run here."""
    checkout_help = "the repository clone whose bench/ to run (default: the one this package is in)"
    sub.add_argument("--checkout", type=Path, metavar="PATH", help=checkout_help)
    # --checkout must be known before bench's own options can be added: read it first.
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--checkout", type=Path)
    tail = list(argv[list(argv).index("bench") + 1 :])
    checkout = early.parse_known_args(tail)[0].checkout
    try:
        module = _load_bench(checkout)
    except _BenchUnavailable as unavailable:
        # main() reports this before any complaint about bench's options, which are unknown here.
        sub.set_defaults(unavailable=str(unavailable))
    else:
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)


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
    _add_self_check_arguments(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_self_check_arguments(
        commands.add_parser("selfcheck", help="compare the queue with a plain list (the default)")
    )
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary)
        if name not in argv:
            continue
        if name == "bench":
            _add_bench(sub, argv)
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command named in ``argv`` and return the process exit status.

    Runtime complexity: that of the command
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments)
    args, unknown = parser.parse_known_args(arguments)
    unavailable: str | None = getattr(args, "unavailable", None)
    if unavailable is not None:
        print(unavailable, file=sys.stderr)
        return USAGE_ERROR
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    print(f"verified_queue {verified_queue.__version__} ({build})", flush=True)
    out_of_memory = False
    try:
        status: int = args.handler(args)
    except MemoryError:
        out_of_memory = True
    if out_of_memory:
        # Reported here, once the handler's frames (and all they allocated) are freed.
        command = f"{PROG} {args.command}" if args.command else PROG
        print(
            f"{command}: out of memory: this machine cannot hold what the arguments ask for; "
            "try smaller sizes",
            file=sys.stderr,
        )
        return OUT_OF_MEMORY
    return status


if __name__ == "__main__":
    sys.exit(main())
