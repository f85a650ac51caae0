"""On the real vLLM, check mode sees the pool: each allocator bug class caught; as shipped, none.

``tox -e vllm-engine`` runs this file (``conformance/engine.py`` copies it, with
``pool_faults.py``, beside an empty pytest configuration) once per mode: as shipped
(``VERIFIED_QUEUE_VLLM`` unset), ``checked`` and ``trace``, the plugin loaded by
``vllm.plugins.load_general_plugins()`` as vLLM's engine loads it. Each class of
``pool_faults.py`` is replayed on vLLM's installed ``BlockPool``: with vLLM's own
queue it raises nothing and leaves the pool wrong; in ``checked`` it is reported
under its clause at the first operation that can see it; in ``trace`` the report
also names where the block was last linked and unlinked. Elsewhere it skips.
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

from verified_queue import AlreadyInQueueError, InvariantViolation

FAULTS_FILE = Path(__file__).with_name("pool_faults.py")
#: The queue vLLM's BlockPool must build in each mode.
QUEUES = {
    "": "vllm.v1.core.kv_cache_utils.FreeKVCacheBlockQueue",
    "checked": "verified_queue.vllm.checked.VllmCheckedFreeBlockQueue",
    "trace": "verified_queue.vllm.traced.VllmTracedFreeBlockQueue",
}


def load_faults() -> ModuleType:
    """``pool_faults.py``, from its file beside this one (not a package of the checkout)."""
    spec = importlib.util.spec_from_file_location("pool_faults", FAULTS_FILE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


FAULTS = load_faults()


@pytest.fixture(scope="module")
def mode() -> str:
    """The mode of this run, vLLM's plugins loaded as its engine loads them."""
    value = os.environ.get("VERIFIED_QUEUE_VLLM", "").strip().lower()
    if value not in QUEUES:
        pytest.skip(f"VERIFIED_QUEUE_VLLM={value!r}: this file checks shipped, checked and trace")
    importlib.import_module("vllm.plugins").load_general_plugins()
    queue = importlib.import_module("vllm.v1.core.block_pool").FreeKVCacheBlockQueue
    assert f"{queue.__module__}.{queue.__qualname__}" == QUEUES[value]
    return value


def new_pool(mode: str) -> Any:
    """vLLM's installed BlockPool, caching on; check mode checks the whole pool at each unlink."""
    block_pool = importlib.import_module("vllm.v1.core.block_pool")
    pool = block_pool.BlockPool(16, True, FAULTS.BLOCK_SIZE)
    if mode:
        pool.free_block_queue.full_check_every = 1
        assert pool.free_block_queue.check_block_pool() is True
    return pool


@pytest.mark.parametrize("fault", list(FAULTS.FAULTS), ids=lambda fault: fault.__name__)
def test_each_class_is_caught_in_check_mode_and_passes_as_shipped(mode: str, fault: Any) -> None:
    """Caught at the faulty call or the next allocation in check mode; silent with vLLM's queue."""
    pool = new_pool(mode)
    if not mode:
        fault(pool)
        assert FAULTS.left_wrong(pool)
        return
    clause, where = FAULTS.FAULTS[fault]
    error_type = AlreadyInQueueError if clause is None else InvariantViolation
    if where == "next allocation":
        fault(pool)
        with pytest.raises(error_type) as caught:
            pool.get_new_blocks(1)
    else:
        with pytest.raises(error_type) as caught:
            fault(pool)
    if clause is not None:
        error = caught.value
        assert isinstance(error, InvariantViolation)
        assert (error.invariant, error.clause) == ("block_pool", clause)
        assert error.blocks
    # The message, as a user sees it (pytest -rA prints it with the test's outcome).
    print(f"{mode} {fault.__name__}: {type(caught.value).__name__}: {caught.value}")
    if mode == "trace":
        history = caught.value.history  # type: ignore[attr-defined]
        assert history.blocks[0].linked is not None
        assert history.blocks[0].linked.filename in (__file__, FAULTS.__file__)
        for line in history.lines:
            print(f"    {line}")
