"""The trace level as vLLM's ``BlockPool`` uses it: :class:`VllmTracedFreeBlockQueue`.

Apart from :mod:`verified_queue.vllm.checked` so that ``VERIFIED_QUEUE_VLLM=checked``
loads no recorder; ``VERIFIED_QUEUE_VLLM=trace`` loads this module.

Every link and unlink inside vLLM goes through ``block_pool.py``, called by vLLM's
KV-cache managers and coordinator: a record naming the first frame outside this
package would name vLLM, not who freed. :func:`pass_over_kv_cache_core`, which the
plugin's trace mode calls, has the trace level pass over those modules' frames
(:data:`KV_CACHE_CORE`) to the scheduler, connector or test that called them,
and read the id of the request the call served on the way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final

from verified_queue._trace_records import treat_as_library
from verified_queue.errors import QueueError
from verified_queue.traced import DEFAULT_HISTORY, TracedFreeBlockQueue
from verified_queue.vllm.checked import (
    VllmCheckedFreeBlockQueue,
    check_pool_now,
    read_membership_from_pool,
    start_pool_checks,
)

__all__ = ["KV_CACHE_CORE", "VllmTracedFreeBlockQueue", "pass_over_kv_cache_core"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: vLLM's KV-cache core, the modules of ``vllm.v1.core`` (0.33.0 and 0.34.0 alike) that call
#: the queue for others: the block pool, the KV-cache manager, its coordinator, the managers
#: of each attention type, and the module of the queue and the block.
KV_CACHE_CORE: Final = (
    "block_pool",
    "kv_cache_manager",
    "kv_cache_coordinator",
    "single_type_kv_cache_manager",
    "kv_cache_utils",
)


def pass_over_kv_cache_core(block_pool: Any) -> list[str]:
    """Have the trace level pass over vLLM's KV-cache core; return the files it now passes over.

    ``block_pool`` is vLLM's ``vllm.v1.core.block_pool`` module. The modules of
    :data:`KV_CACHE_CORE` are found through its package's path, so each one's
    code is compiled under the ``.py`` file beside ``block_pool.__file__``, loaded
    already or not: those are the names marked. A ``block_pool`` without a
    ``__file__`` marks nothing.
    """
    source = getattr(block_pool, "__file__", None)
    if not isinstance(source, str):
        return []
    directory = os.path.dirname(source)
    files = [os.path.join(directory, f"{name}.py") for name in KV_CACHE_CORE]
    for filename in files:
        treat_as_library(filename)
    return files


class VllmTracedFreeBlockQueue(TracedFreeBlockQueue[Any]):
    """:class:`TracedFreeBlockQueue` with :class:`VllmCheckedFreeBlockQueue`'s pool and counter.

    The pool's invariants are checked as :class:`VllmCheckedFreeBlockQueue` checks
    them, and a violation also names where its block was last linked and unlinked.
    An outside write of ``num_free_blocks`` (vLLM's own tests fake a full pool so)
    offsets the counter vLLM reads and is noted in the trace's history; it is never
    reported as damage. Every error of the trace level still names who linked and
    unlinked the blocks it is about.
    """

    __slots__ = ("_count_offset", "_pool_link", "_pool_size", "_until_pool_check")

    _count_offset: int
    _pool_link: object
    _pool_size: int
    _until_pool_check: list[int]

    # The same property objects: one definition of vLLM's counter for both modes.
    num_free_blocks = vars(VllmCheckedFreeBlockQueue)["num_free_blocks"]
    count_offset = vars(VllmCheckedFreeBlockQueue)["count_offset"]
    _true_free_blocks = vars(VllmCheckedFreeBlockQueue)["_true_free_blocks"]
    # The trace level wraps check mode's operations (its _checked_*): here, the ones that
    # check the pool first, so that a pool's violation is explained as any other error.
    _checked_popleft = vars(VllmCheckedFreeBlockQueue)["popleft"]
    _checked_popleft_n = vars(VllmCheckedFreeBlockQueue)["popleft_n"]
    _checked_remove = vars(VllmCheckedFreeBlockQueue)["remove"]
    _checked_append = vars(VllmCheckedFreeBlockQueue)["append"]
    _checked_append_n = vars(VllmCheckedFreeBlockQueue)["append_n"]
    _checked_prepend_n = vars(VllmCheckedFreeBlockQueue)["prepend_n"]
    _chain_is_membership = vars(VllmCheckedFreeBlockQueue)["_chain_is_membership"]
    _next_period = vars(VllmCheckedFreeBlockQueue)["_next_period"]

    def __init__(
        self,
        blocks: Iterable[Any] = (),
        *,
        full_check_every: int | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None:
        """Link ``blocks`` as :class:`TracedFreeBlockQueue` does, with no offset.

        A list of blocks that name a pool makes this that pool's free queue, as
        for :class:`VllmCheckedFreeBlockQueue`.
        """
        start_pool_checks(self, blocks)
        super().__init__(blocks, full_check_every=full_check_every, history=history)
        read_membership_from_pool(self, blocks)
        self._records.members = self._members

    def check_block_pool(self) -> bool:
        """:meth:`VllmCheckedFreeBlockQueue.check_block_pool`; a violation carries the history.

        Runtime complexity: O(blocks of the pool + entries of its prefix cache)
        """
        try:
            return check_pool_now(self)
        except QueueError as error:
            self.annotate(error, "check_block_pool")
            raise
