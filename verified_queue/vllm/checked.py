"""Check mode as vLLM's ``BlockPool`` uses it: :class:`VllmCheckedFreeBlockQueue`.

Kept apart from :mod:`verified_queue.vllm.plugin` so that the plugin,
which vLLM imports in every process, loads no checker unless
``VERIFIED_QUEUE_VLLM=checked`` (or ``trace``) asks for one. The trace level's
counterpart is :mod:`verified_queue.vllm.traced`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue

__all__ = ["VllmCheckedFreeBlockQueue"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: Code in these modules reads and writes the true count; anyone else sees vLLM's counter.
_OWN_MODULE_PREFIX: Final = "verified_queue."
#: The production class's own storage of the count (a slot, or a compiled attribute).
_COUNT: Any = vars(FreeBlockQueue)["num_free_blocks"]


#: Frames that only pass an assignment on, so the code that made it is the frame above:
#: the compiled build's ``__setattr__`` (``verified_queue._slotted``, any function) and the
#: trace level's, which notes a count write first (``verified_queue.traced``, ``__setattr__``).
_PASSING_ON: Final = {"verified_queue._slotted": None, "verified_queue.traced": "__setattr__"}


def _caller_is_own(depth: int) -> bool:
    """Whether the code ``depth`` frames up, past the setattr frames, is this package's."""
    frame = sys._getframe(depth)
    name: str = frame.f_globals.get("__name__", "")
    while name in _PASSING_ON and frame.f_back is not None:
        function = _PASSING_ON[name]
        if function is not None and frame.f_code.co_name != function:
            break
        frame = frame.f_back
        name = frame.f_globals.get("__name__", "")
    return name.startswith(_OWN_MODULE_PREFIX)


class VllmCheckedFreeBlockQueue(CheckedFreeBlockQueue[Any]):
    """:class:`CheckedFreeBlockQueue` that keeps vLLM's ``num_free_blocks`` counter apart.

    vLLM's queue keeps ``num_free_blocks`` as a plain counter beside its list,
    and vLLM 0.34.0's own tests write it (``free_block_queue.num_free_blocks
    = 0`` in ``offloading_connector/test_scheduler.py``) to fake a full pool,
    then write it back. Check mode calls a count that disagrees with the list
    damage; here a write from outside this package is taken for what vLLM
    makes of it instead: an offset on the counter vLLM reads. The checks go on
    comparing the list with its true count, so damage to the links is still
    caught; vLLM reads ``true count + offset``, which every link and unlink
    moves as it would move vLLM's counter; writing the true count back (or
    the counter reaching it) clears the offset. Code of this package always
    sees the true count.
    """

    __slots__ = ("_count_offset",)

    _count_offset: int

    def __init__(self, blocks: Iterable[Any] = (), *, full_check_every: int | None = None) -> None:
        """Link ``blocks`` as :class:`CheckedFreeBlockQueue` does, with no offset."""
        self._count_offset = 0
        super().__init__(blocks, full_check_every=full_check_every)

    @property
    def num_free_blocks(self) -> int:
        """The true count for this package's code; ``true + offset`` for vLLM and the rest."""
        true_count: int = _COUNT.__get__(self, type(self))
        if _caller_is_own(2):
            return true_count
        return true_count + self._count_offset

    @num_free_blocks.setter
    def num_free_blocks(self, value: int) -> None:
        if _caller_is_own(2):
            _COUNT.__set__(self, value)
            return
        if value.__class__ is not int or value < 0:
            raise TypeError(f"num_free_blocks = {value!r}: expected an int >= 0")
        self._count_offset = value - _COUNT.__get__(self, type(self))

    @property
    def count_offset(self) -> int:
        """How far vLLM's counter stands from the true count (0 unless written from outside)."""
        return self._count_offset
