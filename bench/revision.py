"""``tox -e bench-revision -- REV``: this build's production queue against the one at ``REV``.

A change to the production queue that must not cost speed (a refactor, an undo
moved, a guard added) is measured side by side in one process: the queue of the
installed wheel, and the queue of git revision ``REV`` (default ``HEAD``), its
``queue.py`` (and ``_undo.py``, where the revision has one) read with ``git show``
and executed as fresh modules beside the installed package, whose other modules
they import; the installed queue's own sources are executed the same way, so that
the two differ in their code only. The workloads are the benchmark's (``single``, ``batch``,
``prepend``, ``mixed``), interleaved and with the collector off, and each row
gives its median and its ratio to ``REV`` (above 1.00x: this build is slower).

The revision's code runs interpreted, so the comparison is meaningful for the
pure-Python build only; against a compiled wheel it refuses.

``python -I bench/__main__.py revision REV`` runs it against the installed wheel too.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import verified_queue
from bench.run import FULL, QUICK, format_table
from bench.subjects import BenchBlock, Subject
from bench.workloads import Settings, WorkloadResult, run_mixed, run_stepped

__all__ = ["load_revision", "main"]

CHECKOUT = Path(__file__).resolve().parent.parent
#: The modules of the production queue a revision may hold, loaded in this order.
QUEUE_MODULES = ("_undo", "queue")


#: The pseudo-revision that names the installed package's own sources.
INSTALLED = "installed"


def _show(revision: str, path: str) -> str | None:
    """The text of ``path`` at ``revision``, or ``None`` if the revision has no such file.

    The revision :data:`INSTALLED` reads the installed package's own source files.
    """
    if revision == INSTALLED:
        source = Path(str(verified_queue.__file__)).parent.parent / path
        return source.read_text(encoding="utf-8") if source.is_file() else None
    done = subprocess.run(
        ["git", "-C", str(CHECKOUT), "show", f"{revision}:{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def load_modules(revision: str, names: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """Execute the package's modules ``names`` of ``revision`` as fresh modules; return them.

    A name is dotted below the package (``"kvcache.pool"``). Each is loaded as
    ``verified_queue.<name>_at_revision`` and, while the ones after it run, stands in
    for ``verified_queue.<name>`` (in ``sys.modules`` and as its package's attribute),
    so that the revision's modules import one another; whatever else they import is the
    installed package's, and every installed module is back in place afterwards. A
    name the revision has no file for is left out.
    """
    loaded: dict[str, types.ModuleType] = {}
    saved = {name: sys.modules.get(f"verified_queue.{name}") for name in names}
    try:
        for name in names:
            path = f"verified_queue/{name.replace('.', '/')}.py"
            source = _show(revision, path)
            if source is None:
                continue
            module_name = f"verified_queue.{name}_at_revision"
            spec = importlib.util.spec_from_loader(module_name, loader=None)
            if spec is None:
                raise SystemExit(f"no module spec for {module_name}")
            module = importlib.util.module_from_spec(spec)
            module.__file__ = f"{revision}:{path}"
            sys.modules[module_name] = module
            sys.modules[f"verified_queue.{name}"] = module
            setattr(*_parent(name), module)
            exec(compile(source, module.__file__, "exec"), module.__dict__)
            loaded[name] = module
    finally:
        for name, installed in saved.items():
            parent, attribute = _parent(name)
            if installed is None:
                sys.modules.pop(f"verified_queue.{name}", None)
                if hasattr(parent, attribute):
                    delattr(parent, attribute)
            else:
                sys.modules[f"verified_queue.{name}"] = installed
                setattr(parent, attribute, installed)
    return loaded


def _parent(name: str) -> tuple[types.ModuleType, str]:
    """The installed package holding module ``name`` (dotted), and the module's name in it."""
    package, _, attribute = f"verified_queue.{name}".rpartition(".")
    return sys.modules[package], attribute


def load_revision(revision: str) -> types.ModuleType:
    """Execute the production queue of ``revision`` (its ``queue.py`` and undo) and return it."""
    loaded = load_modules(revision, QUEUE_MODULES)
    if "queue" not in loaded:
        raise SystemExit(f"git revision {revision!r} has no verified_queue/queue.py")
    return loaded["queue"]


def _subject(name: str, queue_class: type[Any]) -> Subject:
    return Subject(name, BenchBlock, queue_class)


def measure(revision: str, settings: Settings) -> tuple[list[WorkloadResult], list[Subject]]:
    """Time the installed queue and the one at ``revision`` on every workload, side by side."""
    # Both queues are executed from source the same way: the installed class itself, imported
    # from its .pyc and subclassed by check mode, measured up to 8% slower on single-block
    # operations than the same source executed so, which would pass for a regression.
    old = load_revision(revision)
    new = load_revision(INSTALLED)
    subjects = [
        _subject(f"queue at {revision}", old.FreeBlockQueue),
        _subject("this build", new.FreeBlockQueue),
    ]
    results = [run_stepped(name, subjects, settings) for name in ("single", "batch", "prepend")]
    results.append(run_mixed(subjects, settings))
    return results, subjects


def main(argv: list[str] | None = None) -> int:
    """Print one table per workload: medians, and ratios to the revision's queue."""
    parser = argparse.ArgumentParser(
        prog="python -I bench/__main__.py revision", description=__doc__
    )
    parser.add_argument("revision", nargs="?", default="HEAD", help="a git revision (HEAD)")
    parser.add_argument("--full", action="store_true", help="the benchmark's full settings")
    arguments = parser.parse_args(argv)
    if verified_queue.COMPILED:
        raise SystemExit("bench revision: the revision runs interpreted; use the pure build")
    settings = FULL if arguments.full else QUICK
    results, subjects = measure(arguments.revision, settings)
    reference = subjects[0].name
    for result in results:
        print(format_table(result, subjects, reference), end="\n\n")
    return 0
