"""Mutation testing of the whole package: mutmut over every module, with per-mutant test selection.

``tox -e mutation`` runs this from an empty directory. It copies the checkout's sources and
tests there (mutmut writes a ``mutants/`` tree next to them, which must not land in the
checkout), runs ``mutmut run`` over every module of ``verified_queue/`` (``setup.cfg``) with
the whole test suite, and then fails unless, for every module,

- at least ``--threshold`` percent of its mutants are detected (a failing test, a timeout or
  a crash all count: the tests did not pass with the mutant in place), and
- every mutant that is not detected is named in ``docs/mutation-survivors.md`` with the
  reason it survives.

Each mutant runs only the tests that called its function in mutmut's stats run, fastest
first, each under a CPU limit scaled from its own time (``mutation/selection.py``, the
pytest plugin this script loads into mutmut's runs): most mutants are killed by the first
cheap test, and a mutant that makes the code spin costs seconds, not hours. What is left
out of the tests, and why, is in ``setup.cfg``.

Usage: ``python mutation/run.py [--threshold 98] [--max-children N] [--only GLOB]`` from any
empty working directory; ``--only`` mutates the modules matching a glob (``'*/queue.py'``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# bench/ too: the CLI's tests run ``verified_queue bench --checkout`` against the copy.
COPIED = [
    "verified_queue",
    "specs",
    "conformance",
    "tests",
    "bench",
    "docs",
    "mutation",
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    # A test checks that the benchmark looks for vLLM's wheel where tox.ini puts it.
    "tox.ini",
]
SURVIVORS_FILE = ROOT / "docs" / "mutation-survivors.md"
DETECTED = ("killed", "timeout", "segfault")
#: The status of a known survivor no test can tell from the original: out of the score.
EQUIVALENT = "equivalent"
#: mutmut's name of a mutant: the module, then ``x_function`` or ``xǁClassǁmethod``, then
#: ``__mutmut_N``.
MODULE_OF_MUTANT = re.compile(r"^(?P<module>[\w.]+?)\.x[_ǁ]")


def copy_checkout(destination: Path) -> None:
    """Copy what mutmut needs from the checkout into ``destination``, without caches."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore)
        else:
            shutil.copy2(source, destination / name)


def only(work: Path, pattern: str) -> None:
    """Narrow the copy's ``setup.cfg`` to the modules matching ``pattern``."""
    config = work / "setup.cfg"
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("[mutmut]\n", f"[mutmut]\nonly_mutate = {pattern}\n", 1), encoding="utf-8"
    )


def mutmut(work: Path, *arguments: str) -> str:
    """Run a mutmut command in ``work`` and return its output."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", *arguments],
        capture_output=True,
        text=True,
        check=False,
        cwd=work,
    )
    if done.returncode != 0:
        raise SystemExit(f"mutmut {' '.join(arguments)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def statuses(results: str) -> dict[str, str]:
    """Every mutant ``mutmut results --all true`` lists, with its status, by name."""
    found: dict[str, str] = {}
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            found[name] = status
    return found


def module_of(mutant: str) -> str:
    """The dotted module a mutant's name starts with."""
    match = MODULE_OF_MUTANT.match(mutant)
    return match.group("module") if match else mutant.rpartition(".")[0]


def judge(found: dict[str, str], threshold: float) -> bool:
    """Print each module's score and its survivors; whether every module passes.

    A module's score is the share of its mutants detected, out of those that are not
    equivalent (status ``equivalent``: a known survivor no test can tell from the original,
    ``mutation/known_survivors.txt``), as the usual definition of the score has it; every
    other mutant not detected counts against it.
    """
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in found.items():
        by_module[module_of(name)][status] += 1
    explained = SURVIVORS_FILE.read_text(encoding="utf-8")
    passed = True
    # score: of the mutants not equivalent; raw: of them all
    header = f"{'module':<40} {'mutants':>7} {'equiv.':>6} {'detected':>8} {'score':>6} {'raw':>6}"
    print(f"{header}  not detected")
    for module in sorted(by_module):
        counts = by_module[module]
        total = sum(counts.values())
        detected = sum(counts[status] for status in DETECTED)
        score = 100.0 * detected / max(total - counts[EQUIVALENT], 1)
        rest = ", ".join(
            f"{n} {s}" for s, n in sorted(counts.items()) if s not in (*DETECTED, EQUIVALENT)
        )
        raw = 100.0 * detected / total
        print(
            f"{module:<40} {total:>7} {counts[EQUIVALENT]:>6} {detected:>8} {score:>5.1f}% "
            f"{raw:>5.1f}%  {rest}"
        )
        if score < threshold:
            passed = False
    everything = Counter(found.values())
    total = sum(everything.values())
    detected = sum(everything[status] for status in DETECTED)
    print(
        f"all: {detected} of {total} mutants detected ({100.0 * detected / max(total, 1):.1f}%; "
        f"{100.0 * detected / max(total - everything[EQUIVALENT], 1):.1f}% of the "
        f"{total - everything[EQUIVALENT]} not equivalent): "
        + ", ".join(f"{n} {s}" for s, n in sorted(everything.items()))
    )
    unexplained = []
    for name, status in sorted(found.items()):
        if status in DETECTED:
            continue
        known = re.search(re.escape(name) + r"\b", explained) is not None
        if not known:
            unexplained.append(name)
        print(f"  {status}: {name}{'' if known else '  (NOT EXPLAINED)'}")
    if not passed:
        print(f"FAILED: a module's score is under {threshold}%")
    if unexplained:
        print(f"FAILED: explain every survivor in docs/{SURVIVORS_FILE.name}")
    return passed and not unexplained


def main(argv: list[str] | None = None) -> int:
    """Run the mutation pass; return 0 when every module's score and survivors are acceptable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=98.0, help="minimum percent detected")
    parser.add_argument("--max-children", type=int, help="mutants at once (default: one a core)")
    parser.add_argument("--only", help="mutate only the modules matching this glob")
    args = parser.parse_args(argv)
    work = Path.cwd()
    if any(work.iterdir()):
        raise SystemExit(f"run this from an empty directory, not {work}")
    start = time.monotonic()
    pattern = args.only
    # tox hands on a posarg naming an existing file relative to its change_dir: make it the
    # checkout-relative path setup.cfg's patterns are.
    if pattern and Path(pattern).resolve().is_relative_to(ROOT) and Path(pattern).exists():
        pattern = Path(pattern).resolve().relative_to(ROOT).as_posix()
    copy_checkout(work)
    if pattern:
        only(work, pattern)
    # The plugin that orders and limits each mutant's tests, loaded by setup.cfg's `-p selection`.
    env = os.environ | {"PYTHONPATH": str(work / "mutation")}
    children = [] if args.max_children is None else ["--max-children", str(args.max_children)]
    once = str(work / "mutation" / "mutmut_once.py")
    subprocess.run([sys.executable, once, "run", *children], check=True, env=env)
    found = statuses(mutmut(work, "results", "--all", "true"))
    minutes = (time.monotonic() - start) / 60
    print(f"mutation run: {minutes:.1f} min from the copy to the verdict")
    return 0 if judge(found, args.threshold) else 1


if __name__ == "__main__":
    sys.exit(main())
