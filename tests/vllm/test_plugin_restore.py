"""``uninstall`` of the plugin when a module it rebound has lost its ``__name__``.

Code that manages ``sys.modules`` may delete a module's ``__name__``; the status lists such a
module with ``?`` (``tests/cli/test_status_rebound.py``). Putting vLLM's classes back must not
fail on it either: every name the plugin replaced gets vLLM's class back, and the module
without a name is simply not ``kv_cache_utils``.
"""

from __future__ import annotations

import types

from tests.cli.test_status_rebound import VLLMS_QUEUE, OurQueue
from verified_queue._status import QUEUE_NAME
from verified_queue.vllm.plugin import _Installation


def test_restore_puts_vllms_class_back_in_a_module_that_lost_its_name() -> None:
    """A rebound module that lost ``__name__`` gets vLLM's class back, and restore finishes."""
    installation = _Installation("production", OurQueue, None)
    named = types.ModuleType("vllm.v1.core.named")
    nameless = types.ModuleType("vllm.v1.core.nameless")
    for module in (nameless, named):
        setattr(module, QUEUE_NAME, VLLMS_QUEUE)
        assert installation.rebind(module)
        assert getattr(module, QUEUE_NAME) is OurQueue
    delattr(nameless, "__name__")
    installation.restore()
    assert getattr(nameless, QUEUE_NAME) is VLLMS_QUEUE
    assert getattr(named, QUEUE_NAME) is VLLMS_QUEUE
