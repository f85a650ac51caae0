"""Check mode must not hide the base class: both answer every query of every state, and agree.

Check mode answers ``in`` from its membership and walks for ``iter()`` and
``iter_blocks_after`` by itself, so a layer that drives only check mode never runs the
production queue's own ``__contains__``, ``__iter__`` and ``iter_blocks_after``. For every
state of :mod:`specs.exhaustive`'s universe with queue B empty (A holds an ordered subset of
``N`` blocks, the rest are detached), :func:`cross_check_every_state` builds the production
queue (a user's subclass of ``queue_type``) and check mode over the same class, and requires

- ``in`` of every block, both sentinels, another queue's sentinel and a non-block: check
  mode's own answer, the production queue's, and the base class's ``__contains__`` called on
  the checked queue, all equal to the model's membership by identity;
- ``iter()`` and ``iter_blocks_after`` from ``None``, every member and both sentinels: the same
  three ways, equal to the model's order; a refusal of a detached cursor with the model's error
  (type and message for the production queue, type for check mode, which words its own);
- iteration interleaved with mutation: after each step of ``iter()`` and of
  ``iter_blocks_after(member)``, a ``remove`` of the block the walk stands on or of another
  member, a ``popleft``, an ``append`` or ``prepend_n`` of a detached block; the rest of the
  walk is what the queue documents (it is live: it goes on from the block it stands on, as
  linked now, and raises ``NotInQueueError`` if that block left the queue);
- ``remove`` of a detached block or a sentinel and ``append`` of a member: the model's error,
  with its message from the production queue;
- ``popleft_n`` with a count of every integer-like type (:func:`specs.exhaustive.integer_likes`),
  result and error (type and message) equal to the model's, from both queues;
- ``copy.deepcopy`` of the user's subclass of the production queue and of check mode (and
  ``pickle`` where the class is importable): the same class, ``full_check_every`` kept, the same
  order of new blocks.
"""

from __future__ import annotations

import copy
import functools
import operator
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specs.exhaustive import _states, integer_likes
from specs.model import ListModel, Membership, SpecBlock
from specs.structure import Outcome, outcome_difference, outcome_of
from specs.world import World
from verified_queue._messages import changed_during_iteration
from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "CrossCheckReport",
    "UserCheckedQueue",
    "UserQueue",
    "checked_over",
    "cross_check_every_state",
    "expected_walk",
    "user_subclass",
]

Queue = FreeBlockQueue[Any]


class UserQueue(FreeBlockQueue[SpecBlock]):
    """A user's own subclass of the production queue, importable so that it pickles."""

    __slots__ = ()


class UserCheckedQueue(CheckedFreeBlockQueue[SpecBlock]):
    """A user's own subclass of check mode, importable so that it pickles."""

    __slots__ = ()


def user_subclass(queue_type: type[Queue]) -> type[Queue]:
    """A user's subclass of ``queue_type`` (:class:`UserQueue` for the production queue)."""
    if queue_type is FreeBlockQueue:
        return UserQueue
    return type(f"User{queue_type.__name__}", (queue_type,), {"__slots__": ()})


def checked_over(queue_type: type[Queue]) -> type[CheckedFreeBlockQueue[Any]]:
    """A user's subclass of check mode over ``queue_type`` (its ``super()`` reaches it)."""
    if queue_type is FreeBlockQueue:
        return UserCheckedQueue
    if issubclass(queue_type, CheckedFreeBlockQueue):
        return queue_type
    over = type(f"CheckedOver{queue_type.__name__}", (CheckedFreeBlockQueue, queue_type), {})
    return type(f"User{over.__name__}", (over,), {"__slots__": ()})


def expected_walk(walked: Sequence[Block], after: Sequence[Block]) -> list[Block] | None:
    """The rest of a live walk that has yielded ``walked``, once the queue holds ``after``.

    ``None`` when the block it stands on (the last yielded) left the queue: the walk raises.
    """
    if not walked:
        return list(after)
    standing = walked[-1]
    for index, block in enumerate(after):
        if block is standing:
            return list(after[index + 1 :])
    return None


@dataclass
class CrossCheckReport:
    """What one run covered, and the first disagreement."""

    blocks: int
    states: int = 0
    comparisons: int = 0
    seconds: float = 0.0
    counterexample: str | None = None

    def summary(self) -> str:
        """One line: what was compared, and the verdict."""
        verdict = self.counterexample or "check mode and the base class agree with the model"
        return (
            f"{self.blocks} blocks: {self.states} states, {self.comparisons} comparisons in "
            f"{self.seconds:.1f} s: {verdict}"
        )


def _drain(start: Callable[..., Iterator[Any]], *args: object) -> Callable[[], list[Any]]:
    return lambda: list(start(*args))


def _walk_after(queue: Any, cursor: Block) -> list[Any]:
    return list(queue.iter_blocks_after(cursor))


def _start_after(queue: Any, cursor: Block) -> Iterator[Any]:
    return queue.iter_blocks_after(cursor)  # type: ignore[no-any-return]


def _remove_standing(queue: Any, standing: Block) -> None:
    queue.remove(standing)


def _popleft(queue: Any, _standing: Block) -> None:
    queue.popleft()


def _remove_other(queue: Any, standing: Block, other: Block) -> None:
    if other is not standing:
        queue.remove(other)


def _append(queue: Any, _standing: Block, block: Block) -> None:
    queue.append(block)


def _prepend(queue: Any, _standing: Block, block: Block) -> None:
    queue.prepend_n([block])


def _pickled(queue: Any) -> Any:
    return pickle.loads(pickle.dumps(queue))  # our own bytes, made one line above


def _same(got: Outcome, want: Outcome, messages: bool) -> str | None:
    return outcome_difference(got, want, messages=messages)


class _Run:
    """One state's comparisons; each method returns the first disagreement or ``None``."""

    def __init__(self, queue_type: type[Queue], universe: list[SpecBlock], order: list[SpecBlock]):
        self.queue_type = queue_type
        self.base_type = user_subclass(queue_type)
        self.checked_type = checked_over(queue_type)
        self.universe = universe
        self.order = order
        self.detached = [block for block in universe if not any(block is b for b in order)]
        self.comparisons = 0

    def rewire_base(self) -> Queue:
        """A production queue holding the state, every other block detached."""
        for block in self.universe:
            block.prev_free_block = block.next_free_block = None
        base = self.base_type()
        World(self.universe, [base]).wire(self.order)
        return base

    def checked(self) -> CheckedFreeBlockQueue[Any]:
        """Check mode holding the state, every other block detached."""
        for block in self.universe:
            block.prev_free_block = block.next_free_block = None
        return self.checked_type([*self.order], full_check_every=1)

    def model(self) -> ListModel[SpecBlock]:
        return ListModel(self.order, membership=Membership())

    def compare(
        self, label: str, call: Callable[[Any], object], checked_messages: bool
    ) -> str | None:
        """``call`` on the production queue, check mode and the model; one outcome for all."""
        want = outcome_of(call, self.model())
        for name, make, messages in (
            ("production", self.rewire_base, True),
            ("check mode", self.checked, checked_messages),
        ):
            problem = _same(outcome_of(call, make()), want, messages)
            self.comparisons += 1
            if problem is not None:
                return f"{label} on {name}: {problem}"
        return None

    def queries(self) -> str | None:
        """``in``, ``iter()`` and ``iter_blocks_after``, also through the base class's methods."""
        base_type = self.queue_type
        other = FreeBlockQueue[SpecBlock]()
        checked_queue = self.checked()
        head, tail = checked_queue.fake_free_list_head, checked_queue.fake_free_list_tail
        probes: list[object] = [*self.universe, head, tail, other.fake_free_list_head, object()]
        members = {id(block) for block in self.order}
        for probe in probes:
            want = Outcome(result=id(probe) in members)
            answers: list[tuple[str, Callable[[], object]]] = [
                ("check mode's in", functools.partial(operator.contains, checked_queue, probe)),
                (
                    "the base class's __contains__",
                    functools.partial(base_type.__contains__, checked_queue, probe),
                ),
            ]
            for label, call in answers:
                problem = _same(outcome_of(call), want, True)
                self.comparisons += 1
                if problem is not None:
                    return f"{probe!r}: {label}: {problem}"
        walks: list[tuple[str, Callable[[], object]]] = [
            ("check mode's iter()", lambda: list(checked_queue)),
            ("the base class's __iter__", lambda: list(base_type.__iter__(checked_queue))),
        ]
        for label, walk in walks:
            problem = _same(outcome_of(walk), Outcome(result=list(self.order)), True)
            self.comparisons += 1
            if problem is not None:
                return f"{label}: {problem}"
        for index, cursor in enumerate([None, *self.order, head, tail]):
            rest = self.order[index:] if cursor is not tail else []
            want = Outcome(result=list(rest) if cursor is not head else list(self.order))
            after: list[tuple[str, Callable[[], object]]] = [
                ("check mode's", _drain(checked_queue.iter_blocks_after, cursor)),
                ("the base class's", _drain(base_type.iter_blocks_after, checked_queue, cursor)),
            ]
            for label, walk in after:
                problem = _same(outcome_of(walk), want, True)
                self.comparisons += 1
                if problem is not None:
                    return f"{label} iter_blocks_after({cursor!r}): {problem}"
        if base_type is FreeBlockQueue or not issubclass(base_type, CheckedFreeBlockQueue):
            for block in self.detached:
                problem = self.compare(
                    f"iter_blocks_after({block!r})",
                    functools.partial(_walk_after, cursor=block),
                    checked_messages=False,
                )
                if problem:
                    return problem
        return None

    def mutations(self) -> list[tuple[str, Callable[[Any, Block], object]]]:
        """What a caller does between two steps of a walk, given the block the walk stands on."""
        spare = self.detached[0] if self.detached else None
        found: list[tuple[str, Callable[[Any, Block], object]]] = [
            ("remove(the block it stands on)", _remove_standing),
            ("popleft()", _popleft),
        ]
        for other in self.order:
            label = f"remove({other!r}) unless it stands there"
            found.append((label, functools.partial(_remove_other, other=other)))
        if spare is not None:
            found.append((f"append({spare!r})", functools.partial(_append, block=spare)))
            found.append((f"prepend_n([{spare!r}])", functools.partial(_prepend, block=spare)))
        return found

    def interleaved(self) -> str | None:
        """Every walk, paused after every step, mutated, then drained; see the module docstring."""
        starts: list[tuple[str, Callable[[Any], Iterator[Any]], list[SpecBlock]]] = [
            ("iter()", iter, list(self.order))
        ]
        for index, cursor in enumerate(self.order):
            starts.append(
                (
                    f"iter_blocks_after({cursor!r})",
                    functools.partial(_start_after, cursor=cursor),
                    list(self.order[index + 1 :]),
                )
            )
        for label, start, first in starts:
            for steps in range(1, len(first) + 1):
                for change, mutate in self.mutations():
                    walked = first[:steps]
                    model = self.model()
                    outcome = outcome_of(mutate, model, walked[-1])
                    if outcome.error is not None:
                        continue  # the change itself is refused; nothing to interleave
                    rest = expected_walk(walked, model.blocks)
                    want = (
                        Outcome(result=rest)
                        if rest is not None
                        else Outcome(error=changed_during_iteration())
                    )
                    makers: tuple[tuple[str, Callable[[], Any], bool], ...] = (
                        ("production", self.rewire_base, True),
                        ("check mode", self.checked, False),
                    )
                    for name, make, messages in makers:
                        queue = make()
                        walk = start(queue)
                        seen = [next(walk) for _ in range(steps)]
                        if not all(map(lambda a, b: a is b, seen, walked)):
                            return f"{label} on {name}: yielded {seen!r}, expected {walked!r}"
                        mutate(queue, walked[-1])
                        problem = _same(outcome_of(list, walk), want, messages)
                        self.comparisons += 1
                        if problem is not None:
                            return (
                                f"{label} on {name}, {change} after {steps} steps, then the "
                                f"rest: {problem}"
                            )
        return None

    def counts(self) -> str | None:
        """``popleft_n`` of every integer-like count, from both queues, against the model."""
        for n in [*integer_likes(len(self.order)), len(self.order) + 1]:
            problem = self.compare(
                f"popleft_n({n!r})", operator.methodcaller("popleft_n", n), checked_messages=True
            )
            if problem:
                return problem
        return None

    def refusals(self) -> str | None:
        """A detached block or a sentinel removed, a member appended: the model's error, worded."""
        probe = self.checked()
        calls: list[tuple[str, Callable[[Any], object]]] = [
            (f"remove({block!r})", operator.methodcaller("remove", block))
            for block in self.detached
        ]
        calls += [
            (f"append({block!r})", operator.methodcaller("append", block)) for block in self.order
        ]
        calls.append(
            ("remove(a sentinel)", operator.methodcaller("remove", probe.fake_free_list_head))
        )
        for label, call in calls:
            problem = self.compare(label, call, checked_messages=False)
            if problem:
                return problem
        return None

    def copies(self) -> str | None:
        """Deep copies (and pickles, where importable) keep the class, the period and the order."""
        numbers = [block.number for block in self.order]
        makers: tuple[Callable[[], Any], ...] = (self.rewire_base, self.checked)
        for make in makers:
            original = make()
            if isinstance(original, CheckedFreeBlockQueue):
                original.full_check_every = 7
            ways: list[tuple[str, Callable[[Any], Any]]] = [("deepcopy", copy.deepcopy)]
            if type(original) in (UserQueue, UserCheckedQueue):
                ways.append(("pickle", _pickled))
            for way, duplicate in ways:
                twin = duplicate(original)
                self.comparisons += 1
                if type(twin) is not type(original):
                    return f"{way} of a {type(original).__name__} gave a {type(twin).__name__}"
                got = [block.number for block in FreeBlockQueue.get_all_free_blocks(twin)]
                if got != numbers:
                    return f"{way} of a {type(original).__name__} holds {got}, not {numbers}"
                if getattr(twin, "full_check_every", 7) != 7:
                    return f"{way} of check mode lost full_check_every: {twin.full_check_every!r}"
        return None


def cross_check_every_state(
    blocks: int = 4, queue_type: type[Queue] = FreeBlockQueue
) -> CrossCheckReport:
    """Compare check mode, the production queue and the model in every state; see the docstring.

    Runtime complexity: O(states * blocks**3)
    """
    report = CrossCheckReport(blocks)
    started = time.perf_counter()
    universe = [SpecBlock(number) for number in range(blocks)]
    for queued, other in _states(blocks):
        if other:
            continue
        run = _Run(queue_type, universe, [universe[number] for number in queued])
        report.states += 1
        for part in (run.queries, run.counts, run.refusals, run.interleaved, run.copies):
            try:
                problem = part()
            except Exception as error:  # a crash of a queue under check is a finding
                problem = f"{part.__name__} crashed: {type(error).__name__}: {error}"
            if problem is not None:
                report.counterexample = f"A={list(queued)}: {problem}"
                break
        report.comparisons += run.comparisons
        if report.counterexample:
            break
    report.seconds = time.perf_counter() - started
    return report


if __name__ == "__main__":
    result = cross_check_every_state(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
    print(result.summary())
    sys.exit(0 if result.counterexample is None else 1)
