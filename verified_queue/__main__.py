"""Command line: ``python -m verified_queue [COMMAND]``.

With no command it prints the version and runs the self-check. Every other
command lives in its own module, imported only when that command runs, which
exposes ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import verified_queue
from verified_queue.selfcheck import run_self_check

# command -> (module that implements it, one-line help). The bench lives in the
# repository's bench/ (it is not shipped), so it runs from a checkout.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("verified_queue.demo", "simulate a prefix-caching block pool serving requests"),
    "bench": ("bench.run", "benchmark against vLLM-style baselines (from a repository checkout)"),
}


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
    parser.add_argument("--operations", type=int, default=20_000, help="operations to run")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.set_defaults(handler=_self_check)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the module of the command named in ``argv``."""
    parser = argparse.ArgumentParser(
        prog="python -m verified_queue",
        description="The verified free-block queue: self-check and tools.",
    )
    parser.add_argument("--version", action="version", version=verified_queue.__version__)
    _add_self_check_arguments(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_self_check_arguments(
        commands.add_parser("selfcheck", help="compare the queue with a plain list (the default)")
    )
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary)
        if name in argv:
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                sub.set_defaults(handler=lambda _args, exc=exc: _unavailable(exc))
            else:
                module.add_arguments(sub)
                sub.set_defaults(handler=module.run)
    return parser


def _unavailable(exc: ImportError) -> int:
    print(f"this command is not available here: {exc}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command named in ``argv`` and return the process exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(arguments).parse_args(arguments)
    build = "compiled (mypyc)" if verified_queue.COMPILED else "pure Python"
    print(f"verified_queue {verified_queue.__version__} ({build})")
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
