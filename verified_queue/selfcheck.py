"""A seeded random workload that checks the queue step by step against a plain list.

This is what ``python -m verified_queue`` runs on a user's machine: a quick,
dependency-free answer to "does the installed queue behave like a list?". The
full verification (stateful machines, contracts, the exhaustive check) lives
in the repository's ``specs/`` and ``tests/``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from verified_queue.block import Block
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
    QueueError,
)
from verified_queue.queue import FreeBlockQueue

__all__ = ["SelfCheckReport", "run_self_check"]


class _Numbered(Block):
    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"_Numbered({self.number})"


@dataclass
class SelfCheckReport:
    """What the self-check did: operations run, misuses rejected, and the first mismatch."""

    operations: int = 0
    rejected: int = 0
    mismatch: str | None = None


def _position(items: list[_Numbered], block: _Numbered) -> int:
    """Index of ``block`` in ``items`` by identity (``list.index`` would use ``==``)."""
    for index, item in enumerate(items):
        if item is block:
            return index
    return -1


def run_self_check(
    operations: int = 20_000, universe: int = 64, seed: int = 0
) -> SelfCheckReport:
    """Run ``operations`` random calls, misuse included, on a queue and on a list side by side.

    Stops at the first difference in a result, an error, the order of the
    blocks, the count or a block's links, and reports it.

    >>> run_self_check(operations=500).mismatch is None
    True
    """
    rng = random.Random(seed)
    blocks = [_Numbered(i) for i in range(universe)]
    queue: FreeBlockQueue[_Numbered] = FreeBlockQueue(blocks[: universe // 2])
    model: list[_Numbered] = blocks[: universe // 2]
    report = SelfCheckReport()

    def expect(
        label: str,
        call: Callable[[], object],
        error: type[QueueError] | None,
        result: object = None,
    ) -> None:
        try:
            got = call()
        except QueueError as exc:
            if error is None or not isinstance(exc, error):
                report.mismatch = f"{label}: raised {exc!r}, list model expected {error or 'success'}"
            report.rejected += 1
            return
        if error is not None:
            report.mismatch = f"{label}: succeeded, list model expected {error.__name__}"
        elif result is not None and got != result:  # lists of _Numbered compare by identity
            report.mismatch = f"{label}: returned {got!r}, list model expected {result!r}"

    while report.operations < operations and report.mismatch is None:
        report.operations += 1
        block = rng.choice(blocks)
        where = _position(model, block)
        roll = rng.random()
        if roll < 0.2:
            expect(
                "popleft()",
                queue.popleft,
                None if model else EmptyQueueError,
                model[0] if model else None,
            )
            if model:
                model.pop(0)
        elif roll < 0.35:
            n = rng.randint(-2, len(model) + 2)
            fails = EmptyQueueError if n > len(model) else NegativeCountError if n < 0 else None
            expect(f"popleft_n({n})", lambda n=n: queue.popleft_n(n), fails, model[:n] or None)
            if fails is None:
                del model[:n]
        elif roll < 0.55:
            expect(
                f"remove({block!r})",
                lambda b=block: queue.remove(b),
                NotInQueueError if where < 0 else None,
            )
            if where >= 0:
                del model[where]
        elif roll < 0.8:
            expect(
                f"append({block!r})",
                lambda b=block: queue.append(b),
                AlreadyInQueueError if where >= 0 else None,
            )
            if where < 0:
                model.append(block)
        else:
            batch = rng.sample(blocks, rng.randint(0, 4))
            if rng.random() < 0.1 and batch:
                batch.append(batch[0])  # a block repeated within one batch
            ids = [id(b) for b in batch]
            bad = len(set(ids)) != len(ids) or any(_position(model, b) >= 0 for b in batch)
            expect(
                f"append_n({batch!r})",
                lambda batch=batch: queue.append_n(batch),
                AlreadyInQueueError if bad else None,
            )
            if not bad:
                model.extend(batch)
        if report.mismatch is None:
            report.mismatch = _compare(queue, model, blocks)
    return report


def _compare(
    queue: FreeBlockQueue[_Numbered], model: list[_Numbered], blocks: list[_Numbered]
) -> str | None:
    """Describe the first way the queue differs from the list model, or return ``None``."""
    contents = queue.get_all_free_blocks()
    if len(queue) != len(model) or contents != model:
        return f"queue holds {contents!r} (count {len(queue)}), list model {model!r}"
    members = {id(b) for b in model}
    for block in blocks:
        if id(block) not in members and (
            block.prev_free_block is not None or block.next_free_block is not None
        ):
            return f"{block!r} is not in the queue but still has links"
    return None
