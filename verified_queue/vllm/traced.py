"""The trace level as vLLM's ``BlockPool`` uses it: :class:`VllmTracedFreeBlockQueue`.

Apart from :mod:`verified_queue.vllm.checked` so that ``VERIFIED_QUEUE_VLLM=checked``
loads no recorder; ``VERIFIED_QUEUE_VLLM=trace`` loads this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verified_queue.traced import DEFAULT_HISTORY, TracedFreeBlockQueue
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue

__all__ = ["VllmTracedFreeBlockQueue"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True


class VllmTracedFreeBlockQueue(TracedFreeBlockQueue[Any]):
    """:class:`TracedFreeBlockQueue` with :class:`VllmCheckedFreeBlockQueue`'s counter.

    An outside write of ``num_free_blocks`` (vLLM's own tests fake a full pool so)
    offsets the counter vLLM reads and is noted in the trace's history; it is never
    reported as damage. Every error of the trace level still names who linked and
    unlinked the blocks it is about.
    """

    __slots__ = ("_count_offset",)

    _count_offset: int

    # The same property objects: one definition of vLLM's counter for both modes.
    num_free_blocks = vars(VllmCheckedFreeBlockQueue)["num_free_blocks"]
    count_offset = vars(VllmCheckedFreeBlockQueue)["count_offset"]

    def __init__(
        self,
        blocks: Iterable[Any] = (),
        *,
        full_check_every: int | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None:
        """Link ``blocks`` as :class:`TracedFreeBlockQueue` does, with no offset."""
        self._count_offset = 0
        super().__init__(blocks, full_check_every=full_check_every, history=history)
