"""A pytest plugin that runs vLLM's own tests, as shipped, on this machine's CPU.

``python -m conformance.engine`` copies it next to vLLM's extracted tests and
loads it with ``-p``; no file of vLLM's is edited. It

* gives vLLM's ``UnspecifiedPlatform`` the device type ``cpu`` and hybrid
  KV-cache support (as the CUDA platform reports), so vLLM's configs build
  with the CPU build of torch and no accelerator;
* marks every test with vLLM's own ``skip_global_cleanup`` marker: the GPU
  cleanup ``tests/conftest.py`` runs after each test raises without one;
* with ``VERIFIED_QUEUE_VLLM`` set, loads vLLM's general plugins the way
  vLLM's engine does (``vllm.plugins.load_general_plugins()``), before any
  test module is imported, and records which queue class vLLM's
  ``BlockPool`` then builds;
* reports a test that fails because the Hugging Face config of a model other
  than ``facebook/opt-125m`` is not on disk as *excluded*, with that reason
  (only opt-125m's public ``config.json`` is provided, the hub is offline);
* writes every test's outcome, and the excluded tests' reasons, as JSON to
  the file ``VERIFIED_QUEUE_ENGINE_REPORT`` names.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

#: Where the outcomes go (set by conformance.engine).
REPORT_ENV = "VERIFIED_QUEUE_ENGINE_REPORT"
#: The one model whose config is provided.
PROVIDED_MODEL = "facebook/opt-125m"
_MISSING_MODEL = re.compile(r"Invalid repository ID or local directory specified: '([^']+)'")

_outcomes: dict[str, str] = {}
_reasons: dict[str, str] = {}
_queue_class: list[str] = []


def _cpu_platform() -> None:
    """Let vLLM's configs build on a machine with no accelerator."""
    platform: Any = importlib.import_module("vllm.platforms.interface").UnspecifiedPlatform
    platform.device_type = "cpu"
    platform.support_hybrid_kv_cache = classmethod(lambda _cls: True)


_cpu_platform()


def pytest_configure(config: pytest.Config) -> None:
    """Load vLLM's general plugins when a mode is asked for; record the queue vLLM builds."""
    del config
    if os.environ.get("VERIFIED_QUEUE_VLLM", ""):
        importlib.import_module("vllm.plugins").load_general_plugins()
    queue = importlib.import_module("vllm.v1.core.block_pool").FreeKVCacheBlockQueue
    _queue_class.append(f"{queue.__module__}.{queue.__qualname__}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip vLLM's GPU cleanup after every test: there is no GPU to clean."""
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Turn a failure for a model config that is not on disk into an exclusion."""
    report = yield
    if report.failed and call.excinfo is not None:
        found = _MISSING_MODEL.search(str(call.excinfo.value))
        if found and found.group(1) != PROVIDED_MODEL:
            reason = f"needs the Hugging Face config of {found.group(1)}, not on disk"
            _reasons[item.nodeid] = reason
            report.outcome = "skipped"
            report.longrepr = (str(item.path), 0, f"excluded: {reason}")
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record each test's outcome: passed, failed, skipped or excluded."""
    nodeid = report.nodeid
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome: str = report.outcome
        if nodeid in _reasons:
            outcome = "excluded"
        _outcomes[nodeid] = outcome
    elif report.when == "teardown" and report.failed:
        _outcomes[nodeid] = "failed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the outcomes where ``VERIFIED_QUEUE_ENGINE_REPORT`` says."""
    del session
    target = os.environ.get(REPORT_ENV, "")
    if target:
        payload = {
            "queue": _queue_class[0] if _queue_class else "",
            "outcomes": _outcomes,
            "excluded": _reasons,
        }
        Path(target).write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8")
