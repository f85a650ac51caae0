"""A compiled build's extension modules left in a checkout are named at import, not silent."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import verified_queue


def test_extensions_in_a_checkout_are_named(tmp_path: Path) -> None:
    """Beside a pyproject.toml (a checkout), a compiled module gets a warning naming the fix."""
    package = tmp_path / "verified_queue"
    package.mkdir()
    extension = package / "queue.cpython-311-x86_64-linux-gnu.so"
    extension.touch()
    assert verified_queue._left_in_a_checkout(str(extension)) is None  # no checkout around it
    (tmp_path / "pyproject.toml").touch()
    warning = verified_queue._left_in_a_checkout(str(extension))
    assert warning is not None
    assert extension.name in warning
    assert "HATCH_BUILD_CLEAN_HOOKS_AFTER=1" in warning


def test_the_warning_lists_every_leftover_and_says_what_to_do(tmp_path: Path) -> None:
    """The whole warning: the checkout, each extension (.so then .pyd, each sorted), the fix."""
    package = tmp_path / "verified_queue"
    package.mkdir()
    (tmp_path / "pyproject.toml").touch()
    for name in ("queue.so", "block.so", "queue.pyd", "block.pyd", "queue.py"):
        (package / name).touch()
    assert verified_queue._left_in_a_checkout(str(package / "queue.so")) == (
        f"verified_queue is running compiled extension modules left in the checkout "
        f"{tmp_path} by a compiled build (block.so, queue.so, block.pyd, queue.pyd): they "
        "shadow queue.py and block.py, so edits to those do nothing; delete them (git clean "
        "-fX verified_queue), and build with HATCH_BUILD_CLEAN_HOOKS_AFTER=1 as well as "
        "HATCH_BUILD_HOOK_ENABLE_MYPYC=1"
    )


@pytest.mark.skipif(not verified_queue.COMPILED, reason="needs the compiled extension modules")
def test_a_compiled_package_copied_into_a_checkout_warns_at_import(tmp_path: Path) -> None:
    """The compiled package run from a checkout warns that its extensions shadow the sources."""
    installed = Path(verified_queue.__file__).parent
    shutil.copytree(installed, tmp_path / "verified_queue")
    (tmp_path / "pyproject.toml").touch()
    done = subprocess.run(
        [sys.executable, "-c", "import verified_queue; print(verified_queue.COMPILED)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "True\n", done.stderr
    assert "RuntimeWarning: verified_queue is running compiled extension modules" in done.stderr
