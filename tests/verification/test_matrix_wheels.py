"""The new-code matrix runs vLLM's files only with a wheel of every pinned release at hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.wheel import PINNED_VERSIONS
from specs import new_code_matrix


def test_the_fetched_wheels_count_only_with_every_pinned_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tox -e bench-vllm`` fetches the newest release alone: not enough for the layer."""
    monkeypatch.setattr(new_code_matrix, "TOX_WHEEL_DIR", tmp_path)
    assert new_code_matrix._fetched_wheels() is None
    for count, version in enumerate(PINNED_VERSIONS, start=1):
        (tmp_path / f"vllm-{version}-cp38-abi3-manylinux_2_31_x86_64.whl").touch()
        expected = str(tmp_path) if count == len(PINNED_VERSIONS) else None
        assert new_code_matrix._fetched_wheels() == expected
