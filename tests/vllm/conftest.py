"""Fixtures of the vLLM tests: vLLM's wheels, where ``tox -e vllm`` configured them."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.wheel import WheelNotFoundError, configured_versions, configured_wheel


@pytest.fixture(params=configured_versions())
def wheel(request: pytest.FixtureRequest) -> Path:
    """A configured vLLM wheel of each release, or a skip."""
    try:
        found = configured_wheel(request.param)
    except WheelNotFoundError as error:
        pytest.fail(str(error))
    if found is None:
        pytest.skip("no vLLM wheel configured: run `tox -e vllm`")
    return found
