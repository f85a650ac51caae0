"""Before upgrading vLLM: the conformance on its newest release, and what changed in its shapes.

``python -m conformance.latest CACHE`` (``tox -e vllm-latest``, not in the
default run) asks the package index pip is configured with for the newest vLLM
release, downloads its wheel into CACHE (with the newest pinned release's, to
compare with), runs the conformance and plugin tests on it, and prints on one
screen what changed in the shapes the queue, the plugin and our pool rely on:
``FreeKVCacheBlockQueue``, ``KVCacheBlock``, ``BlockHashToBlockMap`` and ``BlockPool`` (bases,
decorators, fields with their annotations and defaults, methods with their
parameters), read from the two files of each wheel without executing them.
``--against VERSION`` compares another release; ``--shapes-only`` skips the
tests. The exit status is the tests'.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance import fetch
from conformance.wheel import BLOCK_POOL, KV_CACHE_UTILS, read_member

__all__ = ["CLASSES", "SCREEN", "main", "shape", "shape_diff"]

#: The classes compared, and the file of the wheel that defines each.
CLASSES = {
    "FreeKVCacheBlockQueue": KV_CACHE_UTILS,
    "KVCacheBlock": KV_CACHE_UTILS,
    "BlockHashToBlockMap": BLOCK_POOL,
    "BlockPool": BLOCK_POOL,
}
#: At most this many changed lines are printed (one screen), then how many more there are.
SCREEN = 20
_REPO_ROOT = Path(__file__).resolve().parents[1]


def _arguments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A method's parameters as written, annotations left out."""
    parameters = function.args
    positional = [*parameters.posonlyargs, *parameters.args]
    defaults = [None] * (len(positional) - len(parameters.defaults)) + list(parameters.defaults)
    shown = [
        argument.arg if default is None else f"{argument.arg}={ast.unparse(default)}"
        for argument, default in zip(positional, defaults, strict=True)
    ]
    if parameters.vararg is not None:
        shown.append(f"*{parameters.vararg.arg}")
    elif parameters.kwonlyargs:
        shown.append("*")
    for argument, kw_default in zip(parameters.kwonlyargs, parameters.kw_defaults, strict=True):
        shown.append(
            argument.arg if kw_default is None else f"{argument.arg}={ast.unparse(kw_default)}"
        )
    if parameters.kwarg is not None:
        shown.append(f"**{parameters.kwarg.arg}")
    return ", ".join(shown)


def _class_shape(node: ast.ClassDef) -> list[str]:
    """One line per base, decorator, field and method of a class, sorted."""
    name = node.name
    lines = [f"{name} base {ast.unparse(base)}" for base in node.bases]
    lines += [f"{name} @{ast.unparse(decorator)}" for decorator in node.decorator_list]
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            value = "" if statement.value is None else f" = {ast.unparse(statement.value)}"
            annotation = ast.unparse(statement.annotation)
            lines.append(f"{name} field {statement.target.id}: {annotation}{value}")
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = "".join(f"@{ast.unparse(d)} " for d in statement.decorator_list)
            lines.append(f"{name} method {decorators}{statement.name}({_arguments(statement)})")
    return sorted(lines)


def shape(wheel: Path) -> list[str]:
    """The shape lines of :data:`CLASSES` in ``wheel``; a class not found is one line too."""
    lines: list[str] = []
    for class_name, member in CLASSES.items():
        tree = ast.parse(read_member(wheel, member))
        found = [
            node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
        ]
        lines += _class_shape(found[0]) if found else [f"{class_name} missing from {member}"]
    return lines


def shape_diff(old: Path, new: Path, old_name: str, new_name: str) -> list[str]:
    """The changed shape lines, ``-`` for ``old`` only and ``+`` for ``new`` only, one screen."""
    changed = [
        line
        for line in difflib.unified_diff(shape(old), shape(new), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    header = f"vLLM {new_name} against {old_name}: queue, block and pool shapes"
    if not changed:
        return [f"{header}: no change"]
    shown = changed[:SCREEN]
    more = len(changed) - len(shown)
    return [
        f"{header} ({len(changed)} lines changed)",
        *shown,
        *([f"... and {more} more lines"] if more else []),
    ]


def _run_tests(cache: Path, version: str) -> int:
    """Run the conformance and plugin tests on ``version``; return pytest's exit status."""
    environment = dict(os.environ)
    environment["VERIFIED_QUEUE_VLLM_WHEEL"] = str(cache)
    environment["VERIFIED_QUEUE_VLLM_VERSIONS"] = version
    command = [
        sys.executable,
        "-I",  # the checkout off the front of sys.path: the installed package is tested
        "-m",
        "pytest",
        "-q",
        "--no-header",
        "-p",
        "no:cacheprovider",
        "tests/vllm/test_conformance.py",
        "tests/vllm/test_plugin.py",
    ]
    done = subprocess.run(
        command, cwd=_REPO_ROOT, env=environment, check=False, capture_output=True, text=True
    )
    lines = done.stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    for line in failures[:SCREEN]:
        print(line)
    print(f"conformance on vLLM {version}: {lines[-1] if lines else done.stderr.strip()}")
    return done.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch the newest release, test it, print its shape changes."""
    parser = argparse.ArgumentParser(prog="python -m conformance.latest", description=__doc__)
    parser.add_argument("cache", type=Path, help="where the wheels are kept")
    parser.add_argument("--against", default=fetch.DEFAULT_VERSION, help="the release to compare")
    parser.add_argument("--version", help="a release instead of the newest")
    parser.add_argument("--shapes-only", action="store_true", help="do not run the tests")
    arguments = parser.parse_args(argv)
    newest = arguments.version or fetch.newest_release()
    pinned = "pinned" if newest in fetch.PINNED_VERSIONS else "not pinned yet"
    print(f"newest vLLM release on the index: {newest} ({pinned})")
    new_wheel = fetch.fetch_wheel(arguments.cache, newest)
    old_wheel = fetch.fetch_wheel(arguments.cache, arguments.against)
    status = 0 if arguments.shapes_only else _run_tests(arguments.cache, newest)
    print("\n".join(shape_diff(old_wheel, new_wheel, arguments.against, newest)))
    return status


if __name__ == "__main__":
    sys.exit(main())
