"""A bounded-exhaustive proof: every operation, from every state of two queues sharing N blocks.

The universe is ``N`` blocks, shared by two queues: queue A, the one operated on, and queue B,
another queue whose blocks A must neither take nor disturb. A *state* says which blocks sit in
A and in which order, which sit in B and in which order, and leaves the rest detached. States
are wired directly into the queues' links, not reached through the operations under check. The
states checked are

- every ordered subset of the universe in A with B empty, ``sum(N! / (N - k)! for k in
  0..N)`` states (1957 for N = 6);
- every split of the universe between A, B and the detached rest with B non-empty, each
  queue in ascending order: ``3**N - 2**N`` more states (665 for N = 6, 2059 for N = 7);
- for the constructor, one state per pair of sizes, ``(N + 1) * (N + 2) / 2`` (28 for N = 6).

Why ascending order and one constructor state per pair of sizes cover every state (a renaming
argument), and why wiring by hand covers every pair of queues: "Why a bounded proof is a proof"
in docs/verification.md.

From every state the checker applies every operation with every argument: ``popleft()``;
``popleft_n(n)`` for ``n`` from -2 to ``len + 2``, and of every integer-like type
(:func:`integer_likes`: ``bool``, an ``int`` subclass, an ``__index__`` object); ``remove`` and
``append`` of every block and of A's and B's sentinels; ``append_n``, ``prepend_n`` and the
constructor with every batch of up to ``max_batch`` universe blocks (repeats and the empty
batch included), as a list and, up to length 2, as a one-shot iterator, plus batches ending in
a sentinel and iterators that raise part-way; ``iter_blocks_after`` from ``None``, every block
and every sentinel, drained (a refusal must come from the call:
:class:`~specs.structure.LateError` otherwise; for the model A's head means ``None`` and its
tail the end); and the queries ``len``, ``bool``, ``iter``, ``get_all_free_blocks``, ``repr``
and ``in``, which must change nothing. ``remove`` and ``iter_blocks_after`` of a block linked
in B are outside the production queue's contract (it cannot tell such a block from its own in
O(1)); they are skipped and counted as ``outside_contract``.

After each call: A's invariants hold; the result, or the exception type and message, and A's
new state equal :class:`~specs.model.ListModel`'s; every block in no queue is detached; B is
untouched (order, count, every link); and a call after which the model holds the same sequence
changes no link and no count anywhere. A crash of the check itself is reported as the
counterexample, with the state, the call and the exception. Blocks are
:class:`~specs.model.SpecBlock` instances, whose ``__eq__`` and ``__hash__`` raise, so a queue
that compares blocks by value (I5) fails too.

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
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path
from typing import Any

from specs.model import ListModel, Membership, SpecBlock
from specs.structure import (
    LateError,
    Outcome,
    iterate_after,
    mismatch,
    outcome_difference,
    outcome_of,
    same_result,
)
from specs.world import Snapshot, World
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation, QueueError
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "ExhaustiveReport",
    "Indexable",
    "IntSubclass",
    "check_every_state",
    "count_states",
    "expected_counts",
    "integer_likes",
    "main",
]

_PREV = operator.attrgetter("prev_free_block")
_NEXT = operator.attrgetter("next_free_block")

# An operation applies itself to a queue or to a model; the queue is passed for its sentinels.
# Element type Any: several calls hand the queue a sentinel on purpose, to see it refused.
Target = FreeBlockQueue[Any] | ListModel[Any]
#: A call's label, the call, and the universe index of a block the call's contract needs
#: linked in A, not in B (``remove`` and ``iter_blocks_after`` of a block), or -1.
Operation = tuple[str, Callable[[Target], object], int]
#: A constructor call's label and a maker of its argument, fresh for each call.
Construction = tuple[str, Callable[[], Iterable[Block]]]
#: The numbers of the blocks in A, front first, and in B, front first.
State = tuple[tuple[int, ...], tuple[int, ...]]


class IntSubclass(int):
    """An ``int`` subclass, as an enum or a library's count type is: a count like any int."""

    def __repr__(self) -> str:
        return f"IntSubclass({int(self)})"


class Indexable:
    """A numpy-like scalar: no ``int``, but ``__index__`` gives one, so a count."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Indexable({self.value})"


def integer_likes(length: int) -> list[object]:
    """Counts of every integer-like type for a queue of ``length``: bools, a subclass, __index__.

    A ``bool`` must be refused (``WrongTypeError``) though it is an ``int``; the others count.

    Runtime complexity: O(1)
    """
    return [True, False, IntSubclass(length), IntSubclass(1), Indexable(length), Indexable(-1)]


class BatchInterrupted(Exception):
    """Raised by a batch iterator part-way through, as a caller's generator might."""


#: What a call may raise when the model raises too: anything else is a crash.
EXPECTED_ERRORS = (QueueError, BatchInterrupted, LateError)


@dataclass
class ExhaustiveReport:
    """What one exhaustive run covered, and the first counterexample if there is one."""

    blocks: int
    max_batch: int
    queue_type: str
    states: int = 0
    two_queue_states: int = 0
    transitions: int = 0
    rejected: int = 0
    outside_contract: int = 0
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
            f"{self.states} states ({self.two_queue_states} with a second non-empty queue), "
            f"{self.transitions} transitions ({self.rejected} rejected), {self.queries} queries, "
            f"{self.outside_contract} calls outside the contract skipped, in "
            f"{self.seconds:.1f} s: {verdict}"
        )

    def add(self, part: ExhaustiveReport) -> None:
        """Add the counts of ``part`` (a share of the same run) and keep a counterexample.

        Runtime complexity: O(1)
        """
        self.states += part.states
        self.two_queue_states += part.two_queue_states
        self.transitions += part.transitions
        self.rejected += part.rejected
        self.outside_contract += part.outside_contract
        self.queries += part.queries
        self.counterexample = self.counterexample or part.counterexample


def count_states(blocks: int) -> int:
    """Return the number of states to cover: A's ordered subsets, then the two-queue splits.

    Runtime complexity: O(blocks)

    >>> count_states(6)
    2622
    """
    single = sum(math.perm(blocks, size) for size in range(blocks + 1))
    # Each block in A, in B or detached, less the splits that leave B empty.
    splits = sum(math.comb(blocks, size) << (blocks - size) for size in range(blocks + 1))
    return single + splits - (1 << blocks)


def _popleft_n_counts(length: int) -> list[object]:
    """The counts ``popleft_n`` is called with in a state where A holds ``length`` blocks."""
    return [*range(-2, length + 3), *integer_likes(length)]


def _state_sizes(blocks: int) -> Iterator[tuple[int, int, int]]:
    """``(len(A), len(B), how many states)`` for each size of A and B :func:`_states` gives."""
    for queued in range(blocks + 1):
        yield queued, 0, math.perm(blocks, queued)
        for other in range(1, blocks - queued + 1):
            yield queued, other, math.comb(blocks, queued) * math.comb(blocks - queued, other)


def expected_counts(blocks: int, max_batch: int) -> ExhaustiveReport:
    """The counts a run over ``blocks`` and ``max_batch`` reports when it finds no counterexample.

    Computed without running the check, from the very operation and batch lists the
    check builds, so the documentation can state the counts of a run far too long for
    the test suite (``tox -e exhaustive``) and a test can hold them to the code: the
    states, the transitions (every operation from every state, ``popleft_n`` with the
    counts of its state, and every constructor call from one state per pair of sizes),
    the queries and the calls outside the contract. Only ``rejected`` needs the run.
    ``tests/verification/test_exhaustive.py`` compares it with real runs.

    Runtime complexity: O(blocks ** max_batch + blocks ** 2)

    >>> counts = expected_counts(6, 3)
    >>> counts.states, counts.two_queue_states, counts.queries
    (2622, 665, 39330)
    """
    universe = [SpecBlock(number) for number in range(blocks)]
    queues: list[FreeBlockQueue[SpecBlock]] = [FreeBlockQueue(), FreeBlockQueue()]
    sentinels: list[Block] = [
        node for queue in queues for node in (queue.fake_free_list_head, queue.fake_free_list_tail)
    ]
    operations = len(_operations(universe, sentinels, max_batch))
    batches = sum(1 for _ in _batches(universe, sentinels, max_batch))
    report = ExhaustiveReport(blocks, max_batch, FreeBlockQueue.__qualname__)
    for queued, other, states in _state_sizes(blocks):
        report.states += states
        report.two_queue_states += states if other else 0
        # remove() and iter_blocks_after() of each block of B are skipped (state_operations).
        report.outside_contract += states * 2 * other
        report.transitions += states * (operations - 2 * other + len(_popleft_n_counts(queued)))
        # check_queries: five queries, then `in` of every block and of the four sentinels.
        report.queries += states * (5 + blocks + len(sentinels))
    # The constructor, from one state per pair of sizes (check_state), with every batch.
    report.transitions += (blocks + 1) * (blocks + 2) // 2 * batches
    return report


def _states(blocks: int) -> Iterator[State]:
    """Every ordered subset in A with B empty, then every split with B non-empty, ascending."""
    numbers = range(blocks)
    for size in range(blocks + 1):
        for queued in itertools.permutations(numbers, size):
            yield queued, ()
    for size in range(blocks + 1):
        for queued in itertools.combinations(numbers, size):
            rest = [number for number in numbers if number not in queued]
            for other_size in range(1, len(rest) + 1):
                for other in itertools.combinations(rest, other_size):
                    yield queued, other


def _interrupted(blocks: Sequence[Block]) -> Iterator[Block]:
    """Yield ``blocks``, then raise as a failing generator would."""
    yield from blocks
    raise BatchInterrupted(f"after {len(blocks)} blocks")


def _name(node: Block | None, sentinels: Sequence[Block] = ()) -> str:
    """A node as reports name it: a block by its repr, a sentinel by its queue and role."""
    names = ("A.head", "A.tail", "B.head", "B.tail")
    for name, sentinel in zip(names, sentinels, strict=False):
        if node is sentinel:
            return name
    return repr(node)


def _batch_label(batch: Sequence[Block], sentinels: Sequence[Block]) -> str:
    return "[" + ", ".join(_name(block, sentinels) for block in batch) + "]"


def _crash(error: BaseException) -> str:
    """Name an exception nothing expected, and where it was raised; never raises itself."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # a broken __str__ must not hide the crash being reported
        text = type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        frame = frames[-1]
        text += f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}"
    return text


#: The batch operations, which take the same arguments and refuse the same batches.
BATCH_OPERATIONS = ("append_n", "prepend_n")

#: How a batch is handed over: a list, a one-shot iterator, an iterator that raises at its end.
_MAKERS: dict[str, Callable[[Sequence[Block]], Iterable[Block]]] = {
    "list": list,
    "iter": iter,
    "raising": _interrupted,
}


def _batches(
    universe: Sequence[SpecBlock], sentinels: Sequence[Block], max_batch: int
) -> Iterator[tuple[str, str, tuple[Block, ...]]]:
    """Every batch argument: its label, how it is handed over (a key of ``_MAKERS``), its blocks.

    Every sequence of universe blocks up to ``max_batch`` long as a list and, up to length 2,
    as a one-shot iterator; each sentinel alone and after the first block; and an iterator
    that raises after the first ``size`` blocks, for every ``size`` up to ``max_batch``.
    """
    for size in range(max_batch + 1):
        for batch in itertools.product(universe, repeat=size):
            label = _batch_label(batch, sentinels)
            yield label, "list", batch
            if size <= 2:
                yield f"iter({label})", "iter", batch
    for sentinel in sentinels:
        for sentinel_batch in ((sentinel,), (*universe[:1], sentinel)):
            yield _batch_label(sentinel_batch, sentinels), "list", sentinel_batch
    for size in range(min(max_batch, len(universe)) + 1):
        prefix = tuple(universe[:size])
        yield f"<iterator raising after {_batch_label(prefix, sentinels)}>", "raising", prefix


def _batch_call(name: str, kind: str, batch: tuple[Block, ...]) -> Callable[[Target], object]:
    """``append_n`` or ``prepend_n`` of ``batch``, handed over as ``kind`` says.

    A list is made once and shared by every call (the queue and the model only read it); an
    iterator is made afresh on every call.
    """
    if kind == "list":
        return methodcaller(name, list(batch))
    make = _MAKERS[kind]

    def call(target: Target) -> object:
        return getattr(target, name)(make(batch))

    return call


def _operations(
    universe: Sequence[SpecBlock],
    sentinels: Sequence[Block],
    max_batch: int,
) -> list[Operation]:
    """Every mutating call that does not depend on the state's length, with its label."""
    ops: list[Operation] = [("popleft()", methodcaller("popleft"), -1)]
    for index, block in enumerate([*universe, *sentinels]):
        needs_own = index if index < len(universe) else -1
        name = _name(block, sentinels)
        ops.append((f"remove({name})", methodcaller("remove", block), needs_own))
        ops.append((f"append({name})", methodcaller("append", block), -1))
    for operation in BATCH_OPERATIONS:
        for label, kind, batch in _batches(universe, sentinels, max_batch):
            ops.append((f"{operation}({label})", _batch_call(operation, kind, batch), -1))
    head, tail = sentinels[0], sentinels[1]
    cursors: list[Block | None] = [None, *universe, *sentinels]
    for index, cursor in enumerate(cursors):
        needs_own = index - 1 if 0 < index <= len(universe) else -1
        label = f"iter_blocks_after({_name(cursor, sentinels)})"
        ops.append((label, iterate_after(cursor, head, tail), needs_own))
    return ops


def _constructions(
    queue_type: type[FreeBlockQueue[Any]],
    universe: Sequence[SpecBlock],
    sentinels: Sequence[Block],
    max_batch: int,
) -> list[Construction]:
    """Every constructor call: its label and a maker of a fresh argument."""
    return [
        (f"{queue_type.__qualname__}({label})", functools.partial(_MAKERS[kind], batch))
        for label, kind, batch in _batches(universe, sentinels, max_batch)
    ]


def _difference(got: Outcome, want: Outcome) -> str:
    """How the queue's outcome differs from the model's, a crash named as one."""
    error = got.error
    if error is not None and not isinstance(error, EXPECTED_ERRORS):
        expected = f"raised {want.error!r}" if want.error is not None else "returned"
        return f"the call crashed with {_crash(error)} (the model {expected})"
    return outcome_difference(got, want, messages=True) or "the outcomes differ"


@dataclass
class _Progress:
    """How far a loop of calls from one state got: the call under way and the counts."""

    label: str = "wiring the state"
    transitions: int = 0
    rejected: int = 0


class _Checker:
    """One universe, queue A (the one operated on) and queue B, rewired for every transition."""

    def __init__(self, blocks: int, max_batch: int, queue_type: type[FreeBlockQueue[Any]]) -> None:
        self.universe = [SpecBlock(number) for number in range(blocks)]
        self.max_batch = max_batch
        self.queue_type = queue_type
        self.queue: FreeBlockQueue[SpecBlock] = queue_type()
        self.head = self.queue.fake_free_list_head
        self.tail = self.queue.fake_free_list_tail
        # Queue B: its blocks and its sentinels are as foreign to A as a block can be. Only
        # its links and its count are used, never its methods.
        self.other: FreeBlockQueue[SpecBlock] = FreeBlockQueue()
        self.other_head = self.other.fake_free_list_head
        self.other_tail = self.other.fake_free_list_tail
        self.sentinels: list[Block] = [self.head, self.tail, self.other_head, self.other_tail]
        # The blocks, then A's and B's sentinels: the order the reports' indexes follow.
        self.world = World(self.universe, [self.queue, self.other])
        self.nodes = self.world.nodes
        self.operations = _operations(self.universe, self.sentinels, max_batch)
        self.constructions = _constructions(queue_type, self.universe, self.sentinels, max_batch)
        self.report = ExhaustiveReport(blocks, max_batch, queue_type.__qualname__)

    def describe(self, state: State) -> str:
        """Name a state by the blocks of each queue, front first."""
        queued, other = state
        return f"A={[self.universe[n] for n in queued]!r}, B={[self.universe[n] for n in other]!r}"

    def blocks_of(self, state: State) -> tuple[list[SpecBlock], list[SpecBlock]]:
        """The blocks of A and of B in ``state``, front first."""
        queued, other = state
        return [self.universe[number] for number in queued], [
            self.universe[number] for number in other
        ]

    def wire(self, queued: Sequence[SpecBlock], other: Sequence[SpecBlock]) -> None:
        """Put A and B into a state by writing every link, as if it had been built."""
        self.world.wire(queued, other)

    def unchanged(self, pristine: Snapshot) -> bool:
        """Whether every link, count and sentinel is still exactly as in ``pristine``.

        ``self.world.snapshot() == pristine``, but building no snapshot and unrolled for the
        two queues, in C-level iteration only: it runs after almost every transition (1.7
        million for 6 blocks), where a loop over the world's queues would cost about a
        microsecond more per call.
        """
        queue, other, nodes = self.queue, self.other, self.nodes
        counts, heads, tails = pristine.counts, pristine.heads, pristine.tails
        return (
            queue.num_free_blocks == counts[0]
            and other.num_free_blocks == counts[1]
            and queue.fake_free_list_head is heads[0]
            and queue.fake_free_list_tail is tails[0]
            and other.fake_free_list_head is heads[1]
            and other.fake_free_list_tail is tails[1]
            and all(map(operator.is_, map(_PREV, nodes), pristine.prevs))
            and all(map(operator.is_, map(_NEXT, nodes), pristine.nexts))
        )

    def foreign_problem(self, other: Sequence[int], pristine: Snapshot) -> str | None:
        """Describe how B differs from its wiring in ``pristine``: order, count or links."""
        prevs, nexts, other_count = pristine.prevs, pristine.nexts, pristine.counts[1]
        if (
            self.other.fake_free_list_head is not self.other_head
            or self.other.fake_free_list_tail is not self.other_tail
        ):
            return "queue B's sentinels were replaced"
        if self.other.num_free_blocks != other_count:
            return f"queue B's count is {self.other.num_free_blocks}, not {other_count}"
        blocks = len(self.universe)
        for index in (*other, blocks + 2, blocks + 3):
            node = self.nodes[index]
            before, after = node.prev_free_block, node.next_free_block
            if before is not prevs[index] or after is not nexts[index]:
                name = functools.partial(_name, sentinels=self.sentinels)
                return (
                    f"{name(node)} of queue B links back to {name(before)} and on to "
                    f"{name(after)}, not to {name(prevs[index])} and {name(nexts[index])}"
                )
        return None

    def verify(
        self, model: ListModel[SpecBlock], other: Sequence[int], pristine: Snapshot
    ) -> str | None:
        """Describe how A differs from ``model``, or B from its wiring, after a call."""
        queue = self.queue
        if queue.fake_free_list_head is not self.head or queue.fake_free_list_tail is not self.tail:
            return "queue A's sentinels were replaced"
        problem = self.foreign_problem(other, pristine)
        if problem is not None:
            return problem
        try:
            check_invariants(queue)
        except InvariantViolation as violation:
            return str(violation)
        return mismatch(queue, model, self.universe, queries=False)

    def check_state(self, state: State) -> None:
        """Run every query and every operation from ``state``; record the first failure.

        A crash of the queue or of the check is recorded as the counterexample too.
        """
        report = self.report
        report.states += 1
        queued_numbers, other_numbers = state
        if other_numbers:
            report.two_queue_states += 1
        queued, other = self.blocks_of(state)
        try:
            self.wire(queued, other)
            membership = Membership()
            membership.linked_ids.update(map(id, other))
            start = ListModel(queued, membership=membership)
            pristine = self.world.snapshot()
            problem = self.check_queries(self.queue, start)
            if problem is None and not self.unchanged(pristine):
                problem = "changed links or counts"
        except Exception as error:  # the check itself crashed: a counterexample, not a traceback
            problem = f"the check crashed with {_crash(error)}"
        if problem is not None:
            report.counterexample = f"in {self.describe(state)}, the queries: {problem}"
            return
        self.guarded(self.check_operations, "from", state, start)
        if report.counterexample is None and (*queued_numbers, *other_numbers) == tuple(
            range(len(queued_numbers) + len(other_numbers))
        ):
            # A the first blocks and B the next ones: one state per pair of sizes, which the
            # module docstring explains is enough for the constructor.
            self.guarded(self.check_constructor, "with", state, start)

    def guarded(
        self,
        loop: Callable[[State, ListModel[SpecBlock], _Progress], str | None],
        preposition: str,
        state: State,
        start: ListModel[SpecBlock],
    ) -> None:
        """Run a loop of calls from ``state``; record its counts and its failure or crash."""
        progress = _Progress()
        try:
            problem = loop(state, start, progress)
        except Exception as error:  # the check itself crashed: a counterexample, not a traceback
            problem = f"the check crashed with {_crash(error)}"
        report = self.report
        report.transitions += progress.transitions
        report.rejected += progress.rejected
        if problem is not None:
            where = f"{preposition} {self.describe(state)}, {progress.label}"
            report.counterexample = f"{where}: {problem}"

    def state_operations(self, state: State) -> list[Operation]:
        """The operations to apply in ``state``: those within the contract, and ``popleft_n``."""
        queued, other = state
        operations = self.operations
        if other:
            # remove() and iter_blocks_after() of a block of B: outside the contract.
            foreign = set(other)
            operations = [op for op in operations if op[2] not in foreign]
            self.report.outside_contract += len(self.operations) - len(operations)
        return [
            *operations,
            *(
                (f"popleft_n({n!r})", methodcaller("popleft_n", n), -1)
                for n in _popleft_n_counts(len(queued))
            ),
        ]

    def check_operations(
        self, state: State, start: ListModel[SpecBlock], progress: _Progress
    ) -> str | None:
        """Apply every operation to A in ``state`` and to ``start``; return the first failure."""
        queued, other = self.blocks_of(state)
        queue = self.queue
        problem: str | None
        self.wire(queued, other)
        model = start.copy()
        pristine = self.world.snapshot()
        wired = True
        start_blocks, start_ids = start.blocks, start.membership.linked_ids
        operations = self.state_operations(state)
        for progress.transitions, (progress.label, operation, _) in enumerate(operations, 1):
            if not wired:
                self.wire(queued, other)
                wired = True
            try:
                want: object = operation(model)
                want_error: Exception | None = None
            except Exception as error:  # an outcome to compare with the queue's
                want, want_error = None, error
            try:
                got: object = operation(queue)
                got_error: Exception | None = None
            except Exception as error:  # an outcome, or a crash the report names
                got, got_error = None, error
            if want_error is not None:
                progress.rejected += 1
                agree = type(got_error) is type(want_error) and str(got_error) == str(want_error)
            else:
                agree = got_error is None and same_result(got, want)
            if not agree:
                problem = _difference(Outcome(got, got_error), Outcome(want, want_error))
            elif (
                len(model.blocks) == len(start_blocks)
                and all(map(operator.is_, model.blocks, start_blocks))
                and model.membership.linked_ids == start_ids
            ):
                # The model did not change (and stays in use), so nothing may have
                # changed: every link, count and sentinel is compared exactly.
                if self.unchanged(pristine):
                    continue
                problem = self.verify(model, state[1], pristine) or (
                    "changed links or counts, though the model did not change"
                )
            else:
                wired = False
                problem = self.verify(model, state[1], pristine)
                model = start.copy()
            if problem is not None:
                return problem
        return None

    def check_queries(
        self, queue: FreeBlockQueue[SpecBlock], model: ListModel[SpecBlock]
    ) -> str | None:
        """Run every read-only call once; each must answer as the model does."""
        problem = mismatch(queue, model, self.universe, queries=True)
        if problem is not None:
            return problem
        self.report.queries += 5
        expected = f"<{type(queue).__qualname__} with {len(model)} free blocks>"
        if repr(queue) != expected:
            return f"repr() is {queue!r}, expected {expected}"
        # Diagnostics name the ends: an error about a sentinel says which one it is.
        roles = [getattr(queue.fake_free_list_head, "role", None)]
        roles.append(getattr(queue.fake_free_list_tail, "role", None))
        if roles != ["head", "tail"]:
            return f"the sentinels are labelled {roles}, not ['head', 'tail']"
        for block in self.nodes:
            self.report.queries += 1
            got = outcome_of(operator.contains, queue, block)
            if got.error is not None or got.result is not (block in model):
                return f"{_name(block, self.sentinels)} in queue gives {got.result!r} {got.error!r}"
        return mismatch(queue, model, self.universe, queries=True)

    def check_constructor(
        self, state: State, start: ListModel[SpecBlock], progress: _Progress
    ) -> str | None:
        """Build a new queue from every batch while ``state`` holds the universe.

        The queue must be the one the model builds, linking only its batch; a refusal must be
        the model's and change nothing.
        """
        queue_type = self.queue_type
        self.wire(*self.blocks_of(state))
        pristine = self.world.snapshot()
        linked = start.membership.linked_ids
        membership = Membership()
        for progress.transitions, (progress.label, make) in enumerate(self.constructions, 1):
            if membership.linked_ids != linked:  # a model was built with the last one
                membership = Membership()
                membership.linked_ids.update(linked)
            want = Outcome()
            try:
                want.result = ListModel(make(), membership=membership)
            except Exception as error:  # an outcome to compare with the queue's
                want.error = error
            got = Outcome()
            try:
                got.result = queue_type(make())
            except Exception as error:  # an outcome, or a crash the report names
                got.error = error
            problem = None
            if want.error is not None:
                progress.rejected += 1
                if type(got.error) is not type(want.error) or str(got.error) != str(want.error):
                    problem = _difference(got, want)
                elif not self.unchanged(pristine):
                    problem = "changed links or counts, though it refused its batch"
            elif got.error is not None:
                problem = _difference(got, want)
            elif not isinstance(got.result, FreeBlockQueue) or not isinstance(
                want.result, ListModel
            ):
                problem = f"built {got.result!r}, not a queue"
            else:
                # A new queue: compared with the new model by content, not identity.
                problem = mismatch(got.result, want.result, self.universe, queries=True)
                if problem is None:
                    for block in want.result.blocks:
                        block.prev_free_block = block.next_free_block = None
                    if not self.unchanged(pristine):
                        problem = "changed links or counts outside its batch"
            if problem is not None:
                return problem
        return None


def check_every_state(
    blocks: int = 6,
    max_batch: int = 3,
    queue_type: type[FreeBlockQueue[Any]] = FreeBlockQueue,
    *,
    jobs: int = 1,
) -> ExhaustiveReport:
    """Check every operation from every state of ``queue_type`` over ``blocks`` blocks.

    Stops at the first counterexample (a crash included) and reports it; otherwise reports
    how many states, transitions (rejected ones among them), queries and calls outside the
    contract were covered. ``jobs > 1`` splits the states between that many processes.

    Runtime complexity: O(count_states(blocks) * blocks ** max_batch)

    >>> report = check_every_state(blocks=2, max_batch=2)
    >>> report.states, report.two_queue_states, report.counterexample
    (10, 5, None)
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
            report.add(part)
    report.seconds = time.perf_counter() - start
    return report


def _check_share(
    blocks: int, max_batch: int, queue_type: type[FreeBlockQueue[Any]], share: int, shares: int
) -> ExhaustiveReport:
    """Check the states whose index is ``share`` modulo ``shares``."""
    try:
        checker = _Checker(blocks, max_batch, queue_type)
    except Exception as error:  # a queue that cannot even be built is a counterexample too
        report = ExhaustiveReport(blocks, max_batch, queue_type.__qualname__)
        report.counterexample = f"setting up the check crashed with {_crash(error)}"
        return report
    for index, state in enumerate(_states(blocks)):
        if index % shares != share:
            continue
        checker.check_state(state)
        if checker.report.counterexample is not None:
            break
    return checker.report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the exhaustive check, print what it covered, exit 1 on a counterexample."""
    from specs.planted_bugs import PLANTED_BUGS  # noqa: PLC0415 -- only the CLI needs the bugs

    parser = argparse.ArgumentParser(
        prog="python -m specs.exhaustive",
        description="Check every operation from every state of two queues sharing N blocks.",
    )
    parser.add_argument("--blocks", type=int, default=6, help="universe size N (default 6)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=3,
        help="longest batch for append_n, prepend_n and the constructor (default 3)",
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
