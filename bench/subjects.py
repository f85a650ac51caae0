"""The implementations a benchmark run measures, each with the block type it is used with."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import verified_queue
from bench.baselines import (
    OrderedDictQueue,
    PostChangeBlock,
    PostChangeQueue,
    PreChangeBlock,
    PreChangeQueue,
)
from conformance import wheel as vllm_wheel
from verified_queue import queue as queue_module
from verified_queue.block import Block

__all__ = [
    "POST_CHANGE",
    "VLLM_RELEASE",
    "BenchBlock",
    "QueueLike",
    "Subject",
    "all_subjects",
    "detach_all",
    "new_blocks",
    "reference_name",
    "switch_subjects",
    "vllm_release_subject",
]


#: vLLM's own queue and block class as the release ships them, executed from its wheel.
VLLM_RELEASE = f"vLLM {vllm_wheel.DEFAULT_VERSION}"
#: The re-typed post-change design of bench/baselines.py, the reference when no wheel is at hand.
POST_CHANGE = "post-change vLLM"


@dataclass(slots=True)
class BenchBlock(Block):
    """A user's block type: vLLM 0.34.0's ``KVCacheBlock`` fields on top of :class:`Block`.

    The same fields make the same object size, so the memory row compares the
    layouts and the timed rows touch as many cache lines per block as vLLM's.
    It keeps the generated ``__eq__`` on purpose: the queue never calls it.
    """

    block_id: int
    ref_cnt: int = 0
    pool: object = None  # vLLM: a weak reference to the owning block pool
    block_hash: int | None = None
    block_hash_num_tokens: int | None = None
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


def _new_checked_queue(
    queue_class: type[Any], full_check_every: int | None
) -> Callable[[list[Any]], QueueLike]:
    def build(blocks: list[Any]) -> QueueLike:
        built: QueueLike = queue_class(blocks, full_check_every=full_check_every)
        return built

    return build


def all_subjects(*, check_mode: bool = True) -> list[Subject]:
    """Return the implementations to measure, the loaded production queue first.

    Check mode, where available, is measured twice: with no periodic full
    check (``full_check_every=0``: only the O(1) checks of every operation),
    and with its default period, ``max(1000, len(queue))``.
    """
    build_name = "compiled" if verified_queue.COMPILED else "pure Python"
    subjects = [
        Subject(
            f"verified_queue ({build_name})",
            BenchBlock,
            _new_production_queue(queue_module.FreeBlockQueue),
        )
    ]
    checked = _checked_queue_class() if check_mode else None
    if checked is not None:
        subjects.append(
            Subject(
                "check mode, no periodic full check",
                BenchBlock,
                _new_checked_queue(checked, 0),
            )
        )
        checked_module = sys.modules[checked.__module__]
        if getattr(checked_module, "DEFAULT_FULL_CHECK_EVERY", None) is None:
            # Under VERIFIED_QUEUE_CHECKS=full the default is a full check per operation.
            subjects.append(
                Subject("check mode, default period", BenchBlock, _new_checked_queue(checked, None))
            )
    release = vllm_release_subject()
    if release is not None:
        subjects.append(release)
    subjects += [
        Subject(POST_CHANGE, PostChangeBlock, PostChangeQueue),
        Subject("pre-change vLLM", PreChangeBlock, PreChangeQueue),
        Subject("OrderedDict", PostChangeBlock, OrderedDictQueue),
    ]
    return subjects


def vllm_release_subject() -> Subject | None:
    """Return vLLM's own queue with its own block class, or ``None`` without a wheel.

    The wheel is the one ``VERIFIED_QUEUE_VLLM_WHEEL`` names, else the one
    ``tox -e vllm`` cached in ``.tox/vllm-wheel``; nothing is downloaded here.
    """
    wheel = vllm_wheel.wheel_for_benchmark()
    if wheel is None:
        return None
    vllm = vllm_wheel.load_vllm(wheel)
    return Subject(
        VLLM_RELEASE, vllm.KVCacheBlock, _new_production_queue(vllm.FreeKVCacheBlockQueue)
    )


def reference_name(subjects: Iterable[Subject]) -> str:
    """Return the row ratios are taken against: vLLM's own queue if measured, else post-change."""
    names = {subject.name for subject in subjects}
    return VLLM_RELEASE if VLLM_RELEASE in names else POST_CHANGE


def switch_subjects() -> list[Subject]:
    """Return the production queue imported past the check-mode switch, and directly.

    With ``VERIFIED_QUEUE_CHECKS`` unset, ``verified_queue.FreeBlockQueue`` is
    the production class itself, so the two rows must agree within noise.
    """
    return [
        Subject(
            "verified_queue.queue.FreeBlockQueue",
            BenchBlock,
            _new_production_queue(queue_module.FreeBlockQueue),
        ),
        Subject(
            "verified_queue.FreeBlockQueue, switch off",
            BenchBlock,
            _new_production_queue(verified_queue.FreeBlockQueue),
        ),
    ]


def new_blocks(subject: Subject, count: int) -> list[Any]:
    """Return ``count`` fresh detached blocks of the subject's type, ids ``0..count-1``."""
    new_block = subject.new_block
    return [new_block(block_id) for block_id in range(count)]


def detach_all(blocks: Iterable[Any]) -> None:
    """Clear the links of every block so that a new queue may take them (not timed)."""
    for block in blocks:
        block.prev_free_block = block.next_free_block = None
