"""The implementations a benchmark run measures, each with the block type it is used with."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import verified_queue
from bench.baselines import (
    OrderedDictQueue,
    PostChangeBlock,
    PostChangeQueue,
    PreChangeBlock,
    PreChangeQueue,
)
from verified_queue import queue as queue_module
from verified_queue.block import Block

__all__ = [
    "REFERENCE",
    "BenchBlock",
    "QueueLike",
    "Subject",
    "all_subjects",
    "load_pure_python_queue",
]

#: The row every ratio is taken against: vLLM's current design.
REFERENCE = "post-change vLLM"


@dataclass(slots=True)
class BenchBlock(Block):
    """A user's block type: vLLM's ``KVCacheBlock`` fields on top of :class:`Block`.

    It keeps the generated ``__eq__`` on purpose: the queue never calls it.
    """

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    is_null: bool = False


class QueueLike(Protocol):
    """The operations every measured implementation provides."""

    def __len__(self) -> int:
        """Return the number of free blocks."""
        ...

    def popleft(self) -> Any:
        """Detach and return the front block."""
        ...

    def popleft_n(self, n: int) -> list[Any]:
        """Detach and return the first ``n`` blocks."""
        ...

    def remove(self, block: Any) -> None:
        """Detach ``block`` from anywhere in the queue."""
        ...

    def append(self, block: Any) -> None:
        """Link ``block`` at the back."""
        ...

    def append_n(self, blocks: list[Any]) -> None:
        """Link ``blocks`` at the back, in order."""
        ...

    def get_all_free_blocks(self) -> list[Any]:
        """Return the free blocks front first."""
        ...


@dataclass(frozen=True, slots=True)
class Subject:
    """One measured implementation: how to make its blocks and its queue."""

    name: str
    new_block: Callable[[int], Any]
    new_queue: Callable[[list[Any]], QueueLike]
    #: Whether its blocks carry links that must be cleared before a rebuild.
    links_in_blocks: bool = True


def load_pure_python_queue() -> type[Any]:
    """Return the pure-Python ``FreeBlockQueue``, even when the compiled module is the one loaded.

    The compiled wheel ships ``queue.py`` beside the extension, so one run can
    time both builds side by side.
    """
    if not verified_queue.COMPILED:
        return queue_module.FreeBlockQueue
    source = Path(queue_module.__file__ or "").with_name("queue.py")
    name = "verified_queue._pure_python_queue"
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"no pure-Python source beside the compiled queue: {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    pure: type[Any] = module.FreeBlockQueue
    return pure


def _checked_queue_class() -> type[Any] | None:
    """Return ``CheckedFreeBlockQueue`` where check mode is available, else ``None``."""
    try:
        checked = importlib.import_module("verified_queue.checked")
    except ImportError:
        return None
    found: type[Any] | None = getattr(checked, "CheckedFreeBlockQueue", None)
    return found


def _new_production_queue(queue_class: type[Any]) -> Callable[[list[Any]], QueueLike]:
    def build(blocks: list[Any]) -> QueueLike:
        built: QueueLike = queue_class(blocks)
        return built

    return build


def _new_checked_queue(queue_class: type[Any]) -> Callable[[list[Any]], QueueLike]:
    def build(blocks: list[Any]) -> QueueLike:
        # Check mode with the periodic full O(n) check off: only its O(1) checks run.
        built: QueueLike = queue_class(blocks, full_check_every=0)
        return built

    return build


def all_subjects(*, check_mode: bool = True) -> list[Subject]:
    """Return the implementations to measure, the loaded production queue first."""
    build_name = "compiled" if verified_queue.COMPILED else "pure Python"
    subjects = [
        Subject(
            f"verified_queue ({build_name})",
            BenchBlock,
            _new_production_queue(queue_module.FreeBlockQueue),
        )
    ]
    if verified_queue.COMPILED:
        subjects.append(
            Subject(
                "verified_queue (pure Python)",
                BenchBlock,
                _new_production_queue(load_pure_python_queue()),
            )
        )
    checked = _checked_queue_class() if check_mode else None
    if checked is not None:
        subjects.append(Subject("check mode", BenchBlock, _new_checked_queue(checked)))
    subjects += [
        Subject(REFERENCE, PostChangeBlock, PostChangeQueue),
        Subject("pre-change vLLM", PreChangeBlock, PreChangeQueue),
        Subject("OrderedDict", PostChangeBlock, OrderedDictQueue, links_in_blocks=False),
    ]
    return subjects


def new_blocks(subject: Subject, count: int) -> list[Any]:
    """Return ``count`` fresh detached blocks of the subject's type, ids ``0..count-1``."""
    new_block = subject.new_block
    return [new_block(block_id) for block_id in range(count)]


def detach_all(blocks: Iterable[Any]) -> None:
    """Clear the links of every block so that a new queue may take them (not timed)."""
    for block in blocks:
        block.prev_free_block = block.next_free_block = None
