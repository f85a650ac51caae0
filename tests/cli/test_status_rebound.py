"""``vllm_rebound`` of the status: the vLLM names holding the plugin's class, odd modules included.

The listing is read from the modules the plugin rebound and from those loaded now. A vLLM
module can lose its ``__name__`` (deleted by code that manages ``sys.modules``) and still hold
the plugin's class: the binding is listed, with ``?`` where the module's name would be. A
module-like object can lose its namespace (a lazy module's proxy, unloaded): it holds no
name any more, so nothing of it is listed. Neither makes the status fail.
"""

from __future__ import annotations

import sys
import types
from typing import Any, cast

import pytest

from verified_queue import Block, _status
from verified_queue.queue import FreeBlockQueue
from verified_queue.vllm.plugin import _Installation


class OurQueue(FreeBlockQueue[Block]):
    """The installation's queue class here: no other module of the process holds it."""

    __slots__ = ()


#: vLLM's queue class as the plugin recognises it: defined in ``kv_cache_utils``.
VLLMS_QUEUE = type("FreeKVCacheBlockQueue", (), {"__module__": "vllm.v1.core.kv_cache_utils"})

OURS = f"{OurQueue.__module__}.{OurQueue.__qualname__}"


def _binding_vllms(name: str) -> types.ModuleType:
    """A module ``name`` that binds vLLM's queue class, as the plugin finds one to rebind."""
    module = types.ModuleType(name)
    setattr(module, _status.QUEUE_NAME, VLLMS_QUEUE)
    return module


def test_a_loaded_vllm_module_without_a_name_is_listed_with_a_question_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loaded vLLM module that lost its name and imported our class is listed as ``?``."""
    installation = _Installation("production", OurQueue, None)
    named = types.ModuleType("vllm.v1.core.named")
    setattr(named, _status.QUEUE_NAME, OurQueue)
    nameless = types.ModuleType("vllm.v1.core.nameless")
    setattr(nameless, _status.QUEUE_NAME, OurQueue)
    delattr(nameless, "__name__")
    monkeypatch.setitem(sys.modules, "vllm.v1.core.named", named)
    monkeypatch.setitem(sys.modules, "vllm.v1.core.nameless", nameless)
    assert _status._rebound(installation) == (
        f"?.FreeKVCacheBlockQueue -> {OURS}",
        f"vllm.v1.core.named.FreeKVCacheBlockQueue -> {OURS}",
    )


def test_a_rebound_module_that_lost_its_name_since_is_listed_with_a_question_mark() -> None:
    """A module the plugin rebound, since nameless and out of sys.modules, is listed as ``?``."""
    installation = _Installation("production", OurQueue, None)
    module = _binding_vllms("vllm.v1.core.gone")
    assert installation.rebind(module)
    delattr(module, "__name__")
    assert "vllm.v1.core.gone" not in sys.modules
    assert _status._rebound(installation) == (f"?.FreeKVCacheBlockQueue -> {OURS}",)


class _Proxy:
    """A module-like object whose namespace can go away (a lazy module's proxy, unloaded)."""

    __slots__ = ("namespace",)

    #: Its name, as a module's (the namespace above is what the plugin rebinds in).
    __name__ = "vllm.v1.core.proxied"

    def __init__(self, namespace: dict[str, Any] | None) -> None:
        self.namespace = namespace

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        if self.namespace is None:
            raise AttributeError("__dict__")
        return self.namespace


def test_a_rebound_module_like_object_without_a_namespace_since_holds_no_name() -> None:
    """A rebound object whose namespace went away since is left out, and the status still reads."""
    installation = _Installation("production", OurQueue, None)
    proxy = _Proxy({_status.QUEUE_NAME: VLLMS_QUEUE})
    assert installation.rebind(cast(types.ModuleType, proxy))
    kept = _binding_vllms("vllm.v1.core.kept")
    assert installation.rebind(kept)
    assert _status._rebound(installation) == (
        f"vllm.v1.core.kept.FreeKVCacheBlockQueue -> {OURS}",
        f"vllm.v1.core.proxied.FreeKVCacheBlockQueue -> {OURS}",
    )
    proxy.namespace = None
    assert _status._rebound(installation) == (f"vllm.v1.core.kept.FreeKVCacheBlockQueue -> {OURS}",)
