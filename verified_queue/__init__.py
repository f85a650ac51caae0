"""A verified free-block queue for KV-cache block pools.

An intrusive doubly linked list with a fake head and a fake tail sentinel:
``popleft``, ``append`` and ``remove`` from the middle are O(1), and no
operation compares blocks with ``==``. The names match vLLM's
``FreeKVCacheBlockQueue`` so the queue is a drop-in.

>>> from verified_queue import Block, FreeBlockQueue
>>> blocks = [Block() for _ in range(4)]
>>> queue = FreeBlockQueue(blocks)
>>> evicted = queue.popleft_n(2)
>>> queue.append_n(reversed(evicted))
>>> [blocks.index(b) for b in queue]
[2, 3, 1, 0]
"""

from __future__ import annotations

from verified_queue import queue as _queue_module
from verified_queue.block import Block
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
    QueueError,
)
from verified_queue.queue import FreeBlockQueue

__version__ = "0.1.0"

#: True when the hot module ``verified_queue.queue`` was loaded as a mypyc-compiled extension.
COMPILED: bool = not (_queue_module.__file__ or "").endswith(".py")

__all__ = [
    "COMPILED",
    "AlreadyInQueueError",
    "Block",
    "EmptyQueueError",
    "FreeBlockQueue",
    "NegativeCountError",
    "NotInQueueError",
    "QueueError",
    "__version__",
]
