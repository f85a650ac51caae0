"""Tests of ``python -m verified_queue``: the version, the self-check, and its power to fail."""

from __future__ import annotations

import subprocess
import sys

import pytest

import verified_queue
from verified_queue import selfcheck
from verified_queue.__main__ import main
from verified_queue.block import Block
from verified_queue.queue import FreeBlockQueue


class _ForgetsCountOnRemove(FreeBlockQueue[Block]):
    """A planted bug: remove() unlinks the block but leaves the count alone."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        super().remove(block)
        self.num_free_blocks += 1


class _AcceptsDoubleFree(FreeBlockQueue[Block]):
    """A planted bug: append() of a linked block silently does nothing."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        if block.prev_free_block is None:
            super().append(block)


def test_default_command_prints_version_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    """With no command the CLI prints the version and a passing self-check, exiting 0."""
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"verified_queue {verified_queue.__version__}" in out
    assert "self-check passed: 20000 operations" in out


def test_self_check_rejects_misuse_and_matches() -> None:
    """The self-check exercises rejected misuse as well as valid calls."""
    report = selfcheck.run_self_check(operations=5_000, seed=11)
    assert report.mismatch is None
    assert report.operations == 5_000
    assert 0 < report.rejected < 5_000


@pytest.mark.parametrize("buggy", [_ForgetsCountOnRemove, _AcceptsDoubleFree])
def test_self_check_catches_a_planted_bug(
    buggy: type[FreeBlockQueue[Block]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A queue with a planted bug makes the self-check fail and the CLI exit 1."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", buggy)
    assert main(["selfcheck", "--operations", "2000"]) == 1
    assert "self-check FAILED" in capsys.readouterr().out


def test_module_runs_as_a_program() -> None:
    """``python -m verified_queue`` runs in a fresh interpreter and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "verified_queue", "--operations", "1000"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "self-check passed: 1000 operations" in done.stdout


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == verified_queue.__version__
