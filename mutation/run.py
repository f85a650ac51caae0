"""Mutation testing of the production queue: run mutmut in a scratch copy and judge the score.

``tox -e mutation`` runs this from an empty directory. It copies the checkout's sources and
tests there (mutmut writes a ``mutants/`` tree next to them, which must not land in the
checkout), runs ``mutmut run`` over ``verified_queue/queue.py`` and ``_undo.py`` (``setup.cfg``)
with the whole test suite, then fails unless

- at least ``--threshold`` percent of the mutants are killed (a failing test, a timeout or a
  crash all count: the tests did not pass with the mutant in place), and
- every mutant that is not killed is named in ``docs/mutation-survivors.md`` with the reason
  it is equivalent.

Usage: ``python mutation/run.py [--threshold 98]`` from any empty working directory.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
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
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    # A test checks that the benchmark looks for vLLM's wheel where tox.ini puts it.
    "tox.ini",
]
SURVIVORS_FILE = ROOT / "docs" / "mutation-survivors.md"
DETECTED = ("killed", "timeout", "segfault")


def copy_checkout(destination: Path) -> None:
    """Copy what mutmut needs from the checkout into ``destination``, without caches."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore)
        else:
            shutil.copy2(source, destination / name)


def mutmut(*arguments: str) -> str:
    """Run a mutmut command in the current directory and return its output."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"mutmut {' '.join(arguments)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def undetected(results: str) -> dict[str, str]:
    """The mutants ``mutmut results`` lists whose tests did not fail, by name."""
    found: dict[str, str] = {}
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name and status not in DETECTED:
            found[name] = status
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the mutation pass; return 0 when the score and the survivor list are acceptable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=98.0, help="minimum percent killed")
    args = parser.parse_args(argv)
    work = Path.cwd()
    if any(work.iterdir()):
        raise SystemExit(f"run this from an empty directory, not {work}")
    copy_checkout(work)
    # mutmut prints a progress line per mutant; its summary is what matters here.
    subprocess.run([sys.executable, "-m", "mutmut", "run"], check=True)
    mutmut("export-cicd-stats")
    stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text())
    killed = sum(stats[status] for status in DETECTED)
    total = stats["total"]
    score = 100.0 * killed / total if total else 0.0
    survivors = undetected(mutmut("results", "--all", "true"))
    print(
        f"mutation score: {killed} of {total} mutants killed ({score:.1f}%): "
        f"{stats['killed']} by a failing test, {stats['timeout']} by a timeout, "
        f"{stats['segfault']} by a crash; {len(survivors)} not killed"
    )
    explained = SURVIVORS_FILE.read_text(encoding="utf-8")
    unexplained = [name for name in survivors if not re.search(re.escape(name) + r"\b", explained)]
    for name, status in survivors.items():
        print(f"  {status}: {name}{'  (NOT EXPLAINED)' if name in unexplained else ''}")
    if score < args.threshold:
        print(f"FAILED: the score is under {args.threshold}%")
        return 1
    if unexplained:
        print(f"FAILED: explain every survivor in {SURVIVORS_FILE.relative_to(ROOT)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
