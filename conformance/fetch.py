"""Fetch vLLM's wheel or sdist of a given release into a cache directory; ask for the newest.

``python conformance/fetch.py DIRECTORY [--version V | --pinned | --latest] [--sdist]``
makes sure DIRECTORY holds ``vllm-V-*.whl`` (or, with ``--sdist``,
``vllm-V.tar.gz``) and prints its path; ``--pinned`` does so for every release in
:data:`PINNED_VERSIONS` (what ``tox -e vllm`` tests); ``--latest`` first asks the package
index pip is configured with for the newest vLLM release (no pre-release);
``--print-latest`` only prints that version. Nothing is installed.

The wheel comes through ``pip download --no-deps --only-binary=:all:``. The
sdist cannot (pip would build its metadata, and vLLM's ``setup.py`` imports
torch), so it is found with pip's own link finder and downloaded through
pip's own session, with pip's configuration (index, extra indexes, find-links,
certificates), and its hash checked against the one the index gives.

This file runs before the package under test is importable: the standard
library only, and pip's internals reached at run time through
``importlib`` (typed ``Any``: they are not a public API, which is why only
:func:`_pip_finder` touches them).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_VERSION",
    "PINNED_VERSIONS",
    "FetchError",
    "cached",
    "fetch_sdist",
    "fetch_wheel",
    "main",
    "newest_release",
]

#: The releases the conformance tests run on, newest first (``tox -e vllm``).
PINNED_VERSIONS = ("0.34.0", "0.33.0")
#: The release loaded when none is named: the newest pinned one.
DEFAULT_VERSION = PINNED_VERSIONS[0]
_VERSION = re.compile(r"^\d+(\.\d+)*$")


class FetchError(RuntimeError):
    """The index has no such file, or what was downloaded is not what the index promised."""


def _checked_version(version: str) -> str:
    """Return ``version`` if it is a plain release number, else raise ``ValueError``."""
    if not _VERSION.match(version):
        raise ValueError(f"vLLM version {version!r}: expected a release number such as 0.34.0")
    return version


def cached(directory: Path, version: str, *, sdist: bool = False) -> Path | None:
    """Return the wheel (or sdist) of ``version`` already in ``directory``, or ``None``."""
    pattern = f"vllm-{_checked_version(version)}" + (".tar.gz" if sdist else "-*.whl")
    found = sorted(directory.glob(pattern))
    return found[-1] if found else None


def fetch_wheel(directory: Path, version: str) -> Path:
    """Download vLLM's wheel of ``version`` into ``directory`` unless it is there; return it."""
    wheel = cached(directory, version)
    if wheel is not None:
        return wheel
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        # The file is kept here; a second copy in pip's cache would only cost disk.
        "--no-cache-dir",
        "--dest",
        str(directory),
        f"vllm=={version}",
    ]
    print("downloading:", " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)
    wheel = cached(directory, version)
    if wheel is None:
        raise FetchError(f"pip download left no vllm-{version} wheel in {directory}")
    return wheel


def _pip_finder() -> tuple[Any, Any]:
    """pip's package finder and session, configured as ``pip download`` would be."""
    # pip warns of every configured find-links or index location that does not exist.
    logging.getLogger("pip._internal.index.sources").setLevel(logging.ERROR)
    download = importlib.import_module("pip._internal.commands.download")
    command = download.DownloadCommand("download", "find vLLM's files")
    options, _ = command.parse_args(["--no-deps", "vllm"])
    session = command._build_session(options)
    finder = command._build_package_finder(options=options, session=session)
    return finder, session


def _candidates() -> tuple[list[Any], Any]:
    """Every file of vLLM the index lists, and pip's session."""
    finder, session = _pip_finder()
    return list(finder.find_all_candidates("vllm")), session


def newest_release() -> str:
    """Return the newest vLLM release the index lists (pre- and dev releases left out)."""
    candidates, _ = _candidates()
    releases = [
        candidate.version
        for candidate in candidates
        if not candidate.version.is_prerelease and not candidate.version.is_devrelease
    ]
    if not releases:
        raise FetchError("the package index lists no vLLM release")
    return str(max(releases))


def fetch_sdist(directory: Path, version: str) -> Path:
    """Download ``vllm-<version>.tar.gz`` into ``directory`` unless it is there; return it.

    The hash the index gives is checked before the file takes its name.
    """
    found = cached(directory, version, sdist=True)
    if found is not None:
        return found
    candidates, session = _candidates()
    name = f"vllm-{version}.tar.gz"
    links = [candidate.link for candidate in candidates if candidate.link.filename == name]
    if not links:
        raise FetchError(f"the package index lists no {name}")
    link = links[0]
    if not link.hash_name or not link.hash:
        raise FetchError(f"the package index gives no hash for {name}")
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f"{name}.part"
    digest = hashlib.new(link.hash_name)
    print(f"downloading: {name}", file=sys.stderr, flush=True)
    response = session.get(link.url_without_fragment, stream=True)
    response.raise_for_status()
    with partial.open("wb") as out:
        for chunk in response.iter_content(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != link.hash:
        partial.unlink()
        seen = digest.hexdigest()
        raise FetchError(f"{name}: {link.hash_name} {seen}, the index says {link.hash}")
    target = directory / name
    partial.replace(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch what the arguments ask for and print its path (or the newest version)."""
    parser = argparse.ArgumentParser(prog="python -m conformance.fetch", description=__doc__)
    parser.add_argument("directory", type=Path, nargs="?", help="the cache directory")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--version", default=DEFAULT_VERSION, help="a vLLM release")
    which.add_argument("--pinned", action="store_true", help="every release in PINNED_VERSIONS")
    which.add_argument("--latest", action="store_true", help="the newest release on the index")
    which.add_argument("--print-latest", action="store_true", help="print the newest release")
    parser.add_argument("--sdist", action="store_true", help="the sdist, not the wheel")
    arguments = parser.parse_args(argv)
    try:
        if arguments.print_latest:
            print(newest_release())
            return 0
        if arguments.directory is None:
            parser.error("a cache directory is needed")
        if arguments.pinned:
            versions = list(PINNED_VERSIONS)
        elif arguments.latest:
            versions = [newest_release()]
        else:
            versions = [_checked_version(arguments.version)]
        fetch = fetch_sdist if arguments.sdist else fetch_wheel
        for version in versions:
            print(fetch(arguments.directory, version))
    except (FetchError, ValueError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
