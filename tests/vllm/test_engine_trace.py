"""On the real vLLM, the trace level names the caller of vLLM's KV-cache core and the request.

``tox -e vllm-engine`` runs this file (``conformance/engine.py`` copies it, with
``engine_connector.py``, beside an empty pytest configuration) in an environment
holding vLLM 0.34.0 and the CPU build of torch; the plugin is loaded by
``vllm.plugins.load_general_plugins()``, as vLLM's engine loads it, with
``VERIFIED_QUEUE_VLLM=trace``. Elsewhere (no vLLM installed, as in the test suite)
it skips.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the real vLLM and torch: tox -e vllm-engine", allow_module_level=True)

from verified_queue import AlreadyInQueueError
from verified_queue.traced import History, Operation

CONNECTOR_FILE = Path(__file__).with_name("engine_connector.py")
REQUEST_ID = "req-double-free-7"
BLOCK_SIZE = 16


def load_connector() -> ModuleType:
    """The connector-like module, from its file beside this one (not a package of the checkout)."""
    spec = importlib.util.spec_from_file_location("engine_connector", CONNECTOR_FILE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def line_of(marker: str) -> int:
    """The line of the connector module that holds ``marker``, exactly one."""
    lines = CONNECTOR_FILE.read_text(encoding="utf-8").splitlines()
    found = [number for number, text in enumerate(lines, start=1) if marker in text]
    assert len(found) == 1, (marker, found)
    return found[0]


def vllm(name: str) -> Any:
    """A module of vLLM, typed Any (vLLM has no type information for mypy here)."""
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def trace_mode() -> None:
    """vLLM's plugins loaded as vLLM's engine loads them, with VERIFIED_QUEUE_VLLM=trace."""
    if os.environ.get("VERIFIED_QUEUE_VLLM", "").strip().lower() != "trace":
        pytest.skip("run with VERIFIED_QUEUE_VLLM=trace (tox -e vllm-engine does)")
    vllm("vllm.plugins").load_general_plugins()
    queue = vllm("vllm.v1.core.block_pool").FreeKVCacheBlockQueue
    assert f"{queue.__module__}.{queue.__qualname__}" == (
        "verified_queue.vllm.traced.VllmTracedFreeBlockQueue"
    )


def kv_cache_manager(num_blocks: int) -> Any:
    """vLLM's own KVCacheManager over one full-attention group of ``num_blocks`` blocks."""
    torch = vllm("torch")
    interface = vllm("vllm.v1.kv_cache_interface")
    spec = interface.FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    config = interface.KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[interface.KVCacheGroupSpec(["layer"], spec)],
    )
    return vllm("vllm.v1.core.kv_cache_manager").KVCacheManager(
        config,
        max_model_len=BLOCK_SIZE * num_blocks,
        scheduler_block_size=BLOCK_SIZE,
        hash_block_size=BLOCK_SIZE,
        enable_caching=False,
    )


def new_request(request_id: str, tokens: int) -> Any:
    """vLLM's own Request for a prompt of ``tokens`` tokens."""
    sampling = vllm("vllm.sampling_params").SamplingParams(max_tokens=1)
    return vllm("vllm.v1.request").Request(
        request_id=request_id,
        prompt_token_ids=list(range(tokens)),
        sampling_params=sampling,
        pooling_params=None,
    )


def assert_at_connector(
    operation: Operation | None, name: str, marker: str, function: str, request: str
) -> None:
    """``operation`` is ``name`` called from the connector's line holding ``marker``."""
    assert operation is not None
    assert (operation.name, operation.filename) == (name, str(CONNECTOR_FILE)), operation
    assert (operation.lineno, operation.function) == (line_of(marker), function), operation
    assert operation.request == request, operation


def test_a_connectors_double_free_names_the_connector_and_the_request(trace_mode: None) -> None:
    """Both frees of a planted double free are named at the connector's lines, with the request.

    The first free goes through KVCacheManager, its coordinator, the single-type
    manager and BlockPool.free_blocks; the second through BlockPool.free_blocks
    alone; the allocation before them through KVCacheManager.allocate_slots. No
    record names vLLM's block_pool.py or kv_cache_manager.py.
    """
    del trace_mode
    connector = load_connector().PlantedConnector(kv_cache_manager(num_blocks=11))
    request = new_request(REQUEST_ID, tokens=3 * BLOCK_SIZE)
    allocated_at = sys._getframe().f_lineno + 1
    allocated = connector.manager.allocate_slots(request, 3 * BLOCK_SIZE)
    assert allocated is not None
    assert len(allocated.blocks[0]) == 3
    connector.request_finished(request)
    with pytest.raises(AlreadyInQueueError) as caught:
        connector.save_done(REQUEST_ID)
    history = getattr(caught.value, "history", None)
    assert isinstance(history, History)
    # vLLM frees blocks without a hash (caching is off) at the front of the free queue.
    assert_at_connector(history.call, "prepend_n", "# SECOND FREE", "save_done", REQUEST_ID)
    (block,) = history.blocks
    assert_at_connector(block.linked, "prepend_n", "# FIRST FREE", "request_finished", REQUEST_ID)
    # Taken by this test's allocation, through KVCacheManager.allocate_slots.
    taken = block.unlinked
    assert taken is not None
    assert (taken.name, taken.filename, taken.lineno) == ("popleft_n", __file__, allocated_at)
    assert taken.request == REQUEST_ID
    shown = "\n".join(history.lines)
    assert f"in save_done for request {REQUEST_ID!r} (thread " in history.lines[0]
    assert "freed before by: #" in shown
    assert f"in request_finished for request {REQUEST_ID!r} (thread " in shown
    assert "block_pool.py" not in shown
    assert "kv_cache_manager.py" not in shown
