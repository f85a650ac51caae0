"""Download the vLLM 0.33.0 wheel into a cache directory, unless it is there already.

``python specs/vllm/fetch.py DIRECTORY`` runs
``pip download --no-deps --only-binary=:all: vllm==0.33.0`` into DIRECTORY
when DIRECTORY holds no ``vllm-0.33.0-*.whl``, and prints the wheel's path.
Nothing is installed: the conformance tests and the benchmark read two
source files out of the wheel (see ``specs/vllm/wheel.py``). ``tox -e vllm``
keeps DIRECTORY inside ``.tox/``, so a second run does not download the
wheel (about 340 MB) again.

This file runs as a script before the package under test is importable, so
it uses the standard library only.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

VLLM_VERSION = "0.33.0"  # keep in step with specs/vllm/wheel.py


def cached_wheel(directory: Path) -> Path | None:
    """Return the vLLM wheel already in ``directory``, or ``None``."""
    found = sorted(directory.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    return found[-1] if found else None


def main(argv: Sequence[str] | None = None) -> int:
    """Make sure the wheel is in the directory given as the only argument; print its path."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 1:
        print("usage: python specs/vllm/fetch.py DIRECTORY", file=sys.stderr)
        return 2
    directory = Path(arguments[0])
    wheel = cached_wheel(directory)
    if wheel is None:
        directory.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            # The wheel is kept here; a second copy in pip's cache would only cost disk.
            "--no-cache-dir",
            "--dest",
            str(directory),
            f"vllm=={VLLM_VERSION}",
        ]
        print("downloading:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
        wheel = cached_wheel(directory)
        if wheel is None:
            print(f"pip download left no vllm-{VLLM_VERSION} wheel in {directory}", file=sys.stderr)
            return 1
    else:
        print("cached:", end=" ")
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
