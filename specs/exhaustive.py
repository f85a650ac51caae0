"""A bounded-exhaustive proof: every operation, from every state of a queue of at most N blocks.

The universe is ``N`` blocks. A *state* is an ordered subset of the universe sitting in the
queue, the rest detached; there are ``sum(N! / (N - k)! for k in 0..N)`` of them (1957 for
N = 6). From every state the checker applies every operation with every argument:

- ``popleft()``;
- ``popleft_n(n)`` for every ``n`` from -2 to ``len + 2`` (too many and negative included);
- ``remove(b)`` and ``append(b)`` for every block of the universe, linked or detached, and for
  the queue's own sentinels and those of another queue;
- ``append_n(batch)`` and ``prepend_n(batch)`` for every sequence of universe blocks up to
  ``max_batch`` long (so linked blocks, repeats and the empty batch), each as a list and, up
  to length 2, as a one-shot iterator; batches ending in a sentinel; and iterators that raise
  part-way;
- ``iter_blocks_after(cursor)``, drained, for every cursor: ``None``, every block of the
  universe (linked or detached), the queue's own sentinels and those of another queue. A
  refusal must come from the call, not from the iteration
  (:class:`~specs.structure.LateError` otherwise); the model has no sentinels, so for it
  the queue's head means ``None`` and its tail the end;
- ``FreeBlockQueue(batch)`` for every batch up to length 2, misuse included;
- the queries ``len``, ``bool``, ``iter``, ``get_all_free_blocks``, ``repr`` and ``in`` (for
  every block and sentinel), which must not change anything.

After each call it checks that the queue's invariants hold, that the result (or the exception
type and message) and the new state equal :class:`~specs.model.ListModel`'s, and that every
block outside the queue is detached. A call after which the model holds the same sequence (a
rejected call, an iteration, an empty batch) must leave every link of every block and
sentinel, and both counts, exactly as they were: that exact comparison replaces the walk, so
most transitions cost one snapshot. States are wired directly into
the queue's links rather than reached through operations, so the check does not depend on the
operations it is checking to build its starting points; and since the queue holds no state
beyond its sentinels, count and links, covering every wiring covers every queue of at most N
blocks. Because every state is covered, this proves each operation correct for all queues of
at most N blocks from any state, not only those a random test reaches.

Blocks are :class:`~specs.model.SpecBlock` instances, whose ``__eq__`` and ``__hash__`` raise,
so a queue that compares blocks by value (I5) fails too.

Run ``python -m specs.exhaustive --blocks 7`` for a bigger universe, or ``--variant NAME``
for one of :data:`specs.planted_bugs.PLANTED_BUGS`.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import multiprocessing
import operator
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import methodcaller
from typing import Any

from specs.model import ListModel, SpecBlock
from specs.structure import iterate_after, mismatch, outcome_difference, outcome_of
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

__all__ = ["ExhaustiveReport", "check_every_state", "count_states", "main"]

# An operation applies itself to a queue or to a model; the queue is passed for its sentinels.
# Element type Any: several calls hand the queue a sentinel on purpose, to see it refused.
Target = FreeBlockQueue[Any] | ListModel[Any]
Operation = tuple[str, Callable[[Target], object]]


_PREV = operator.attrgetter("prev_free_block")
_NEXT = operator.attrgetter("next_free_block")


class BatchInterrupted(Exception):
    """Raised by a batch iterator part-way through, as a caller's generator might."""


@dataclass
class ExhaustiveReport:
    """What one exhaustive run covered, and the first counterexample if there is one."""

    blocks: int
    max_batch: int
    queue_type: str
    states: int = 0
    transitions: int = 0
    rejected: int = 0
    queries: int = 0
    seconds: float = 0.0
    counterexample: str | None = None

    def summary(self) -> str:
        """One line: what was checked, how long it took, and the verdict.

        Runtime complexity: O(1)
        """
        verdict = (
            "no counterexample"
            if self.counterexample is None
            else f"COUNTEREXAMPLE: {self.counterexample}"
        )
        return (
            f"{self.queue_type}, {self.blocks} blocks, batches up to {self.max_batch}: "
            f"{self.states} states, {self.transitions} transitions "
            f"({self.rejected} rejected), {self.queries} queries in {self.seconds:.1f} s: "
            f"{verdict}"
        )


def count_states(blocks: int) -> int:
    """Return the number of ordered subsets of ``blocks`` blocks: the states to cover.

    Runtime complexity: O(blocks)

    >>> count_states(6)
    1957
    """
    return sum(math.perm(blocks, size) for size in range(blocks + 1))


def _states(blocks: int) -> Iterator[tuple[int, ...]]:
    for size in range(blocks + 1):
        yield from itertools.permutations(range(blocks), size)


def _interrupted(blocks: Sequence[Block]) -> Iterator[Block]:
    """Yield ``blocks``, then raise as a failing generator would."""
    yield from blocks
    raise BatchInterrupted(f"after {len(blocks)} blocks")


def _batch_label(batch: Sequence[Block]) -> str:
    return "[" + ", ".join(repr(block) for block in batch) + "]"


#: The batch operations, which take the same arguments and refuse the same batches.
BATCH_OPERATIONS = ("append_n", "prepend_n")


def _fresh_iterator(name: str, batch: Sequence[Block]) -> Callable[[Target], object]:
    """``append_n`` or ``prepend_n`` of a new one-shot iterator over ``batch`` on every call."""

    def call(target: Target) -> object:
        return getattr(target, name)(iter(batch))

    return call


def _raising_iterator(name: str, batch: Sequence[Block]) -> Callable[[Target], object]:
    """``append_n`` or ``prepend_n`` of a new iterator that yields ``batch`` and then raises."""

    def call(target: Target) -> object:
        return getattr(target, name)(_interrupted(batch))

    return call


def _operations(
    universe: Sequence[SpecBlock],
    sentinels: Sequence[Block],
    max_batch: int,
) -> list[Operation]:
    """Every mutating call that does not depend on the state's length, with its label."""
    ops: list[Operation] = [("popleft()", methodcaller("popleft"))]
    for block in [*universe, *sentinels]:
        ops.append((f"remove({block!r})", methodcaller("remove", block)))
        ops.append((f"append({block!r})", methodcaller("append", block)))
    for name in BATCH_OPERATIONS:
        for size in range(max_batch + 1):
            for batch in itertools.product(universe, repeat=size):
                label = _batch_label(batch)
                ops.append((f"{name}({label})", methodcaller(name, list(batch))))
                if size <= 2:
                    ops.append((f"{name}(iter({label}))", _fresh_iterator(name, batch)))
        for sentinel in sentinels:
            for sentinel_batch in ([sentinel], [*universe[:1], sentinel]):
                label = _batch_label(sentinel_batch)
                ops.append((f"{name}({label})", methodcaller(name, sentinel_batch)))
        for size in range(min(max_batch, len(universe)) + 1):
            label = f"{name}(<iterator raising after {_batch_label(universe[:size])}>)"
            ops.append((label, _raising_iterator(name, universe[:size])))
    head, tail = sentinels[0], sentinels[1]
    for cursor in [None, *universe, *sentinels]:
        ops.append((f"iter_blocks_after({cursor!r})", iterate_after(cursor, head, tail)))
    return ops


class _Checker:
    """One universe, one queue object and a second queue, rewired for every transition."""

    def __init__(self, blocks: int, max_batch: int, queue_type: type[FreeBlockQueue[Any]]) -> None:
        self.universe = [SpecBlock(number) for number in range(blocks)]
        self.max_batch = max_batch
        self.queue_type = queue_type
        self.queue: FreeBlockQueue[SpecBlock] = queue_type()
        self.head = self.queue.fake_free_list_head
        self.tail = self.queue.fake_free_list_tail
        # Another queue's sentinels: as foreign to this queue as a block can be.
        self.other: FreeBlockQueue[SpecBlock] = FreeBlockQueue()
        self.sentinels: list[Block] = [
            self.head,
            self.tail,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
        ]
        self.nodes: list[Block] = [*self.universe, *self.sentinels]
        self.operations = _operations(self.universe, self.sentinels, max_batch)
        self.report = ExhaustiveReport(blocks, max_batch, queue_type.__qualname__)

    def wire(self, state: Sequence[SpecBlock]) -> FreeBlockQueue[SpecBlock]:
        """Put the queue into ``state`` by writing every link, as if ``state`` had been built."""
        for block in self.universe:
            block.prev_free_block = block.next_free_block = None
        queue = self.queue
        queue.fake_free_list_head = self.head
        queue.fake_free_list_tail = self.tail
        previous: Block = self.head
        self.head.prev_free_block = None
        for block in state:
            previous.next_free_block = block
            block.prev_free_block = previous
            previous = block
        previous.next_free_block = self.tail
        self.tail.prev_free_block = previous
        self.tail.next_free_block = None
        queue.num_free_blocks = len(state)
        other_head, other_tail = self.sentinels[2], self.sentinels[3]
        other_head.prev_free_block = other_tail.next_free_block = None
        other_head.next_free_block = other_tail
        other_tail.prev_free_block = other_head
        self.other.num_free_blocks = 0
        return queue

    def fingerprint(self) -> tuple[list[object], list[object], int, int, Block, Block]:
        """Everything a call can change: every link of every node, both counts, the queue's
        sentinels (links and sentinels are compared by identity, see :meth:`unchanged`)."""
        queue = self.queue
        return (
            list(map(_PREV, self.nodes)),
            list(map(_NEXT, self.nodes)),
            queue.num_free_blocks,
            self.other.num_free_blocks,
            queue.fake_free_list_head,
            queue.fake_free_list_tail,
        )

    def unchanged(
        self, pristine: tuple[list[object], list[object], int, int, Block, Block]
    ) -> bool:
        """Whether everything :meth:`fingerprint` records is still exactly as in ``pristine``.

        C-level iteration only: it runs after most calls.
        """
        prevs, nexts, count, other_count, head, tail = pristine
        queue = self.queue
        return (
            queue.num_free_blocks == count
            and self.other.num_free_blocks == other_count
            and queue.fake_free_list_head is head
            and queue.fake_free_list_tail is tail
            and all(map(operator.is_, map(_PREV, self.nodes), prevs))
            and all(map(operator.is_, map(_NEXT, self.nodes), nexts))
        )

    def verify(self, label: str, state: Sequence[SpecBlock], model: ListModel[SpecBlock]) -> None:
        """Check the queue against ``model`` after ``label`` from ``state``."""
        queue = self.queue
        problem = None
        if queue.fake_free_list_head is not self.head or queue.fake_free_list_tail is not self.tail:
            problem = "the queue's sentinels were replaced"
        elif not (
            self.other.fake_free_list_head.next_free_block is self.other.fake_free_list_tail
            and self.other.fake_free_list_tail.prev_free_block is self.other.fake_free_list_head
            and self.other.fake_free_list_head.prev_free_block is None
            and self.other.fake_free_list_tail.next_free_block is None
            and self.other.num_free_blocks == 0
        ):
            problem = "another queue's sentinels were changed"
        else:
            try:
                check_invariants(queue)
            except InvariantViolation as violation:
                problem = str(violation)
            else:
                problem = mismatch(queue, model, self.universe, queries=False)
        if problem is not None and self.report.counterexample is None:
            self.report.counterexample = f"from {list(state)!r}, {label}: {problem}"

    def check_state(self, state: Sequence[SpecBlock]) -> None:
        """Run every query and every operation from ``state``; record the first failure."""
        report = self.report
        report.states += 1
        queue = self.wire(state)
        model = ListModel(state)
        problem = mismatch(queue, model, self.universe, queries=True)
        if problem is None:
            problem = self.check_queries(queue, model)
        if problem is not None:
            report.counterexample = f"in {list(state)!r}: {problem}"
            return
        counts = range(-2, len(state) + 3)
        operations: list[Operation] = [
            *self.operations,
            *((f"popleft_n({n})", methodcaller("popleft_n", n)) for n in counts),
        ]
        start = model
        model = start.copy()
        pristine = self.fingerprint()
        wired = True
        for label, operation in operations:
            report.transitions += 1
            if not wired:
                queue = self.wire(state)
            want = outcome_of(operation, model)
            got = outcome_of(operation, queue)
            if want.error is not None:
                report.rejected += 1
            problem = outcome_difference(got, want, messages=True)
            if problem is not None:
                report.counterexample = f"from {list(state)!r}, {label}: {problem}"
                return
            if (
                _same_blocks(model.blocks, start.blocks)
                and model.membership.linked_ids == start.membership.linked_ids
            ):
                # The model did not change (and stays in use), so nothing may have changed:
                # every link, count and sentinel is compared exactly.
                wired = self.unchanged(pristine)
                if not wired:
                    self.verify(label, state, model)
                    report.counterexample = report.counterexample or (
                        f"from {list(state)!r}, {label}: changed links or counts, "
                        "though the model did not change"
                    )
                    return
                continue
            wired = False
            self.verify(label, state, model)
            if report.counterexample is not None:
                return
            model = start.copy()
        self.check_constructor(state, start)

    def check_queries(
        self, queue: FreeBlockQueue[SpecBlock], model: ListModel[SpecBlock]
    ) -> str | None:
        """Run every read-only call once; each must answer as the model does."""
        self.report.queries += 5
        expected = f"<{type(queue).__qualname__} with {len(model)} free blocks>"
        if repr(queue) != expected:
            return f"repr() is {queue!r}, expected {expected}"
        # Diagnostics name the ends: an error about a sentinel says which one it is.
        roles = [getattr(queue.fake_free_list_head, "role", None)]
        roles.append(getattr(queue.fake_free_list_tail, "role", None))
        if roles != ["head", "tail"]:
            return f"the sentinels are labelled {roles}, not ['head', 'tail']"
        for block in [*self.universe, *self.sentinels]:
            self.report.queries += 1
            got = outcome_of(operator.contains, queue, block)
            if got.error is not None or got.result is not (block in model):
                return f"{block!r} in queue gives {got.result!r} {got.error!r}"
        return mismatch(queue, model, self.universe, queries=True)

    def check_constructor(self, state: Sequence[SpecBlock], start: ListModel[SpecBlock]) -> None:
        """Build a second queue from every short batch while ``state`` holds the universe."""
        for size in range(3):
            for batch in itertools.product(self.universe, repeat=size):
                self.report.transitions += 1
                self.wire(state)
                model = start.copy()
                want = outcome_of(functools.partial(ListModel, membership=model.membership), batch)
                got = outcome_of(self.queue_type, batch)
                label = f"{self.queue_type.__qualname__}({_batch_label(batch)})"
                if want.error is not None:
                    self.report.rejected += 1
                    problem = outcome_difference(got, want, messages=True)
                elif got.error is not None:
                    problem = f"raised {got.error!r}, the model accepted the batch"
                elif isinstance(got.result, FreeBlockQueue) and isinstance(want.result, ListModel):
                    # A new queue: compared with the new model by content, not identity.
                    problem = mismatch(got.result, want.result, self.universe, queries=True)
                else:
                    problem = f"built {got.result!r}, not a queue"
                if problem is None:
                    self.verify(label, state, model)
                else:
                    self.report.counterexample = f"with {list(state)!r} queued, {label}: {problem}"
                if self.report.counterexample is not None:
                    return


def _same_blocks(left: Sequence[Block], right: Sequence[Block]) -> bool:
    """Whether two sequences hold the same blocks (by identity) in the same order."""
    return len(left) == len(right) and all(map(operator.is_, left, right))


def check_every_state(
    blocks: int = 6,
    max_batch: int = 3,
    queue_type: type[FreeBlockQueue[Any]] = FreeBlockQueue,
    *,
    jobs: int = 1,
) -> ExhaustiveReport:
    """Check every operation from every state of ``queue_type`` over ``blocks`` blocks.

    Stops at the first counterexample and reports it; otherwise reports how many states,
    transitions (rejected ones among them) and queries were checked. ``jobs > 1`` splits the
    states between that many processes.

    Runtime complexity: O(count_states(blocks) * blocks ** max_batch)

    >>> report = check_every_state(blocks=2, max_batch=2)
    >>> report.states, report.counterexample
    (5, None)
    """
    start = time.perf_counter()
    if jobs <= 1:
        report = _check_share(blocks, max_batch, queue_type, 0, 1)
    else:
        shares = [(blocks, max_batch, queue_type, share, jobs) for share in range(jobs)]
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            parts = pool.starmap(_check_share, shares)
        report = ExhaustiveReport(blocks, max_batch, queue_type.__qualname__)
        for part in parts:
            report.states += part.states
            report.transitions += part.transitions
            report.rejected += part.rejected
            report.queries += part.queries
            report.counterexample = report.counterexample or part.counterexample
    report.seconds = time.perf_counter() - start
    return report


def _check_share(
    blocks: int, max_batch: int, queue_type: type[FreeBlockQueue[Any]], share: int, shares: int
) -> ExhaustiveReport:
    """Check the states whose index is ``share`` modulo ``shares``."""
    checker = _Checker(blocks, max_batch, queue_type)
    for index, numbers in enumerate(_states(blocks)):
        if index % shares != share:
            continue
        checker.check_state([checker.universe[number] for number in numbers])
        if checker.report.counterexample is not None:
            break
    return checker.report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the exhaustive check, print what it covered, exit 1 on a counterexample."""
    from specs.planted_bugs import PLANTED_BUGS  # noqa: PLC0415 -- only the CLI needs the bugs

    parser = argparse.ArgumentParser(
        prog="python -m specs.exhaustive",
        description="Check every operation from every state of a queue of up to N blocks.",
    )
    parser.add_argument("--blocks", type=int, default=6, help="universe size N (default 6)")
    parser.add_argument(
        "--max-batch", type=int, default=3, help="longest append_n and prepend_n batch (default 3)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes to split the states over")
    parser.add_argument(
        "--variant",
        choices=sorted(PLANTED_BUGS),
        help="check a planted bug instead of the real queue (it must fail)",
    )
    args = parser.parse_args(argv)
    queue_type = PLANTED_BUGS[args.variant] if args.variant else FreeBlockQueue
    report = check_every_state(args.blocks, args.max_batch, queue_type, jobs=args.jobs)
    print(report.summary(), flush=True)
    return 0 if report.counterexample is None else 1


if __name__ == "__main__":
    sys.exit(main())
