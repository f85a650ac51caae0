"""A KV connector's scheduler side, outside vLLM, that frees a request's blocks twice (planted).

``tests/vllm/test_engine_trace.py`` runs it on the real vLLM, under the plugin's
trace mode, and checks that the trace names this module's lines, not vLLM's
``block_pool.py``. It calls vLLM only through its public objects, typed ``Any``:
no line of vLLM is copied here.

The planted bug: a finished request's blocks are freed through vLLM's
``KVCacheManager`` (:meth:`PlantedConnector.request_finished`) and, once their KV
is "saved", freed again through ``BlockPool.free_blocks``
(:meth:`PlantedConnector.save_done`). In between the connector pins them by hand,
``ref_cnt += 1`` (vLLM's ``BlockPool.touch`` would also take a free block out of
the free queue): without that pin vLLM's reference count would take the second
free to ``ref_cnt == -1`` silently, and no queue could see it; with it, vLLM hands
blocks that are already free to the queue again, a double free the queue refuses.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlantedConnector"]


class PlantedConnector:
    """Frees a request's blocks on finish, pins them by hand, and frees them again when saved."""

    def __init__(self, manager: Any) -> None:
        """Work on ``manager``, vLLM's ``KVCacheManager``, and its ``BlockPool``."""
        self.manager = manager
        self.saving: dict[str, list[Any]] = {}

    def request_finished(self, request: Any) -> None:
        """Keep the request's blocks for the save, free them through the manager, pin them."""
        request_id: str = request.request_id
        (blocks,) = self.manager.get_blocks(request_id).blocks  # one KV-cache group
        self.saving[request_id] = list(blocks)
        self.manager.free(request)  # FIRST FREE, through vLLM's KVCacheManager
        for block in self.saving[request_id]:
            block.ref_cnt += 1  # the planted bug: a pin by hand, after the free

    def save_done(self, request_id: str) -> None:
        """Give the saved blocks back to vLLM's block pool: the second free."""
        blocks = self.saving.pop(request_id)
        self.manager.block_pool.free_blocks(reversed(blocks))  # SECOND FREE, the pool's own
