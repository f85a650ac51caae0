"""The trace level, every short history: each sequence of traced calls, refused ones included.

``tests/checks/test_trace_machine.py``'s ``TraceMachine`` samples long random histories of
traced queues against :class:`specs.trace_model.TraceModel`; this runs *every* sequence of up to
``depth`` calls of a small alphabet (:func:`specs.sequences.every_sequence`) against the same
reference recorder, so that a bug of the trace level any such history shows is found for
certain. The world: a ``TracedFreeBlockQueue`` A (a full check at every operation, a ring of
2), an untraced ``CheckedFreeBlockQueue`` C, and three blocks, two slotted (a departed one is
held by its record, for the last ``HELD_DEPARTED`` of them: lowered to 1 for the run, so the
bound is met) and one with weak references (a departed one keeps its record while it lives).
Each run starts with the three blocks in A, or with A empty.

The alphabet: on A, ``popleft``, ``popleft_n`` of 0, 1, 2 and 4, and ``remove``, ``append``
and ``prepend_n`` of each block, whatever it is, so that every refusal is met (an empty queue,
too few blocks, a block not in A, a double free into A, a block linked in C), and ``append``
and ``prepend_n`` of an object whose attribute lookups raise ``KeyError`` (no block); on C,
``append`` of a detached block and ``remove`` of one of its own. A
:class:`specs.model.ListModel` for each queue says how each call must end; the reference
recorder, told each call that returned on A, says what A must keep. After every call A's
ring, its count of operations, every block's record, the departed blocks it holds and the
blocks it keeps records of must be the model's, and an error A raised must carry, field by
field, the history the model says (the call, the count's last outside writer, the blocks'
records, the lines) and show its lines.

``python -m specs.exhaustive_trace --depth 4`` runs it wider than the test's default.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specs.model import ListModel, Membership, SpecBlock
from specs.sequences import Action, Report, every_sequence
from specs.trace_model import (
    Explanation,
    Site,
    TraceModel,
    explain_empty,
    explain_plain,
    explain_refusal,
)
from verified_queue import traced as traced_module
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
    QueueError,
    WrongTypeError,
)
from verified_queue.traced import TracedFreeBlockQueue

__all__ = ["BLOCKS", "actions", "check_trace", "main"]

#: The ring's length, and the departed blocks without weak references held, for the run.
HISTORY, HELD = 2, 1


class Slotted(SpecBlock):
    """A slotted block: no weak references, so a departed one is held by its record."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Slotted({self.number})"


class Weak(SpecBlock):
    """A block with an instance dict, so weak references (vLLM's ``KVCacheBlock`` has them)."""

    def __repr__(self) -> str:
        return f"Weak({self.number})"


#: The blocks: slotted, slotted, weak.
BLOCKS = (Slotted, Slotted, Weak)

# Every call on A is made from one of these, whose body is the line after its ``def``: the
# site its record must name.


def _popleft(queue: Any, args: tuple[Any, ...]) -> Any:
    return queue.popleft(*args)


def _popleft_n(queue: Any, args: tuple[Any, ...]) -> Any:
    return queue.popleft_n(*args)


def _remove(queue: Any, args: tuple[Any, ...]) -> Any:
    return queue.remove(*args)


def _append(queue: Any, args: tuple[Any, ...]) -> Any:
    return queue.append(*args)


def _prepend_n(queue: Any, args: tuple[Any, ...]) -> Any:
    return queue.prepend_n(*args)


def _build(blocks: list[Any]) -> Any:
    return TracedFreeBlockQueue(blocks, full_check_every=1, history=HISTORY)


_CALLS: dict[str, Callable[[Any, tuple[Any, ...]], Any]] = {
    "popleft": _popleft,
    "popleft_n": _popleft_n,
    "remove": _remove,
    "append": _append,
    "prepend_n": _prepend_n,
}
_FREEING = ("append", "prepend_n")


def _site(function: Callable[..., Any]) -> Site:
    code = function.__code__
    return Site(
        code.co_filename, code.co_firstlineno + 1, code.co_name, threading.current_thread().name
    )


def _fail(what: str, got: object, want: object) -> None:
    if got != want:
        raise AssertionError(f"{what}:\n  real: {got!r}\n  model: {want!r}")


def _ops(operations: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [tuple(operation) for operation in operations]


def _op(operation: Any) -> tuple[Any, ...] | None:
    return None if operation is None else tuple(operation)


@dataclass
class _World:
    pool: list[SpecBlock]
    queue: Any
    other: CheckedFreeBlockQueue[Any]
    model: ListModel[SpecBlock]
    other_model: ListModel[SpecBlock]
    trace: TraceModel[int]

    def label(self, block: object) -> int:
        return next(number for number, each in enumerate(self.pool) if each is block)

    def weak(self, label: int) -> bool:
        return isinstance(self.pool[label], Weak)

    def detached(self, block: SpecBlock) -> bool:
        return block not in self.model and block not in self.other_model


def _compare(world: _World) -> None:
    """A's ring, operations, records and departed blocks are the recorder's."""
    queue, trace = world.queue, world.trace
    _fail("the ring", _ops(queue.recent_operations()), _ops(trace.recent()))
    _fail("the operations", queue.operations, trace.number)
    for label, block in enumerate(world.pool):
        history = queue.history_of(block)
        got = None if history is None else (history.block, *map(_op, history[1:]))
        kept = trace.kept(label)
        want = None if kept is None else (repr(block), *map(_op, kept))
        _fail(f"the record of {block!r}", got, want)
    _fail(
        "the departed blocks held", list(queue._held), [id(world.pool[n]) for n in trace.departed()]
    )
    _fail(
        "the blocks with a record",
        sorted(queue._records),
        sorted(id(world.pool[n]) for n in trace.recorded()),
    )
    _fail(
        "A's blocks",
        [id(b) for b in queue.get_all_free_blocks()],
        [id(b) for b in world.model.blocks],
    )


def _explained(error: QueueError, want: Explanation) -> None:
    """``error`` carries the history the recorder says, and shows its lines."""
    history = getattr(error, "history", None)
    if history is None:
        raise AssertionError(f"{error!r} carries no history")
    _fail("the call", tuple(history.call), tuple(want.call))
    _fail("the count's writer", _op(history.count_written), _op(want.count_written))
    _fail("the operations listed", _ops(history.recent), _ops(want.recent))
    blocks = [(record.block, *map(_op, record[1:])) for record in history.blocks]
    _fail("the blocks' records", blocks, [(r.block, *map(_op, r[1:])) for r in want.blocks])
    _fail("the lines", list(history.lines), list(want.lines))
    if sys.version_info >= (3, 11):
        notes = list(getattr(error, "__notes__", []))
        _fail(
            "the lines shown", notes, [f"  {line}" for line in history.lines] if want.shown else []
        )


def _expected(
    world: _World, name: str, args: tuple[Any, ...], site: Site, error: QueueError
) -> Explanation:
    trace = world.trace
    if isinstance(error, (AlreadyInQueueError, NotInQueueError)):
        block = args[0][0] if name == "prepend_n" else args[0]
        label = world.label(block)
        return explain_refusal(
            trace, name, site, (label, repr(block)), freeing=name in _FREEING, elsewhere=None
        )
    if isinstance(error, EmptyQueueError):
        return explain_empty(trace, name, site)
    if isinstance(error, (WrongTypeError, NegativeCountError)):
        return explain_plain(trace, name, site)
    raise AssertionError(f"{name}{args!r}: unexpected {error!r}")


def _outcome(call: Callable[[], Any]) -> tuple[Any, QueueError | None]:
    try:
        return call(), None
    except QueueError as error:
        return None, error


def _on_a(name: str, pick: Callable[[_World], tuple[Any, ...]]) -> Callable[[_World], None]:
    """``name`` on A with the arguments ``pick`` chooses; its model; the checks."""

    def apply(world: _World) -> None:
        args = pick(world)
        function = _CALLS[name]
        site = _site(function)
        got, error = _outcome(lambda: function(world.queue, args))
        items = list(args[0]) if name == "prepend_n" else list(args[:1])
        want: Any
        wanted: QueueError | None
        if any(isinstance(item, RaisingLookup) for item in items):  # no block: the model takes any
            want, wanted = None, WrongTypeError(f"{name}{args!r}")
        else:
            want, wanted = _outcome(lambda: getattr(world.model, name)(*args))
        if (error is None) != (wanted is None) or (
            error is not None and type(error) is not type(wanted)
        ):
            raise AssertionError(f"{name}{args!r}: the queue gave {error!r}, its model {wanted!r}")
        if error is None:
            linked: list[int] = []
            unlinked: list[int] = []
            if name in ("popleft", "popleft_n"):
                taken = [got] if name == "popleft" else list(got)
                wanted_blocks = [want] if name == "popleft" else list(want)
                _fail(f"{name} returned", [id(b) for b in taken], [id(b) for b in wanted_blocks])
                unlinked = [world.label(b) for b in taken]
            elif name == "remove":
                unlinked = [world.label(args[0])]
            else:
                batch = [args[0]] if name == "append" else list(args[0])
                linked = [world.label(b) for b in batch]
            world.trace.returned(name, site, linked=linked, unlinked=unlinked, weak=world.weak)
        else:
            _explained(error, _expected(world, name, args, site, error))
        _compare(world)

    return apply


def _on_c(name: str, number: int) -> Action[_World]:
    def apply(world: _World) -> None:
        block = world.pool[number]
        getattr(world.other, name)(block)
        getattr(world.other_model, name)(block)
        _compare(world)

    def enabled(world: _World) -> bool:
        block = world.pool[number]
        return world.detached(block) if name == "append" else block in world.other_model

    return Action(f"C.{name}(b{number})", apply, enabled)


def _nothing(_world: _World) -> tuple[Any, ...]:
    return ()


def _count(count: int) -> Callable[[_World], tuple[Any, ...]]:
    return lambda _world: (count,)


def _block(number: int, batch: bool = False) -> Callable[[_World], tuple[Any, ...]]:
    if batch:
        return lambda world: ([world.pool[number]],)
    return lambda world: (world.pool[number],)


class RaisingLookup:
    """No block: an object whose every missing attribute lookup raises ``KeyError``."""

    def __getattr__(self, name: str) -> object:
        raise KeyError(name)


def _proxy(batch: bool) -> Callable[[_World], tuple[Any, ...]]:
    return lambda _world: ([RaisingLookup()],) if batch else (RaisingLookup(),)


def actions() -> list[Action[_World]]:
    """The alphabet: every call on A, refused ones included, and C taking and giving back."""
    alphabet: list[Action[_World]] = [Action("popleft()", _on_a("popleft", _nothing))]
    alphabet += [Action(f"popleft_n({n})", _on_a("popleft_n", _count(n))) for n in (0, 1, 2, 4)]
    for number in range(len(BLOCKS)):
        alphabet += [
            Action(f"remove(b{number})", _on_a("remove", _block(number))),
            Action(f"append(b{number})", _on_a("append", _block(number))),
            Action(f"prepend_n([b{number}])", _on_a("prepend_n", _block(number, batch=True))),
            _on_c("append", number),
            _on_c("remove", number),
        ]
    alphabet += [
        Action("append(a raising proxy)", _on_a("append", _proxy(batch=False))),
        Action("prepend_n([a raising proxy])", _on_a("prepend_n", _proxy(batch=True))),
    ]
    return alphabet


def check_trace(depth: int = 3) -> Report:
    """Every sequence of up to ``depth`` calls, from A holding the three blocks and from A empty."""
    saved = traced_module.HELD_DEPARTED
    vars(traced_module)["HELD_DEPARTED"] = HELD
    sequences = steps = 0
    try:
        for full in (True, False):

            def start(full: bool = full) -> _World:
                membership = Membership()
                pool: list[SpecBlock] = [kind(n) for n, kind in enumerate(BLOCKS)]
                given = list(pool) if full else []
                world = _World(
                    pool,
                    _build(list(given)),
                    CheckedFreeBlockQueue([]),
                    ListModel(given, membership=membership),
                    ListModel([], membership=membership),
                    TraceModel(HISTORY, HELD),
                )
                labels = [world.label(b) for b in given]
                world.trace.returned("append_n", _site(_build), linked=labels, weak=world.weak)
                _compare(world)
                return world

            report = every_sequence(start, actions(), depth)
            sequences += report.sequences
            steps += report.steps
            if report.counterexample is not None:
                where = "A of three blocks" if full else "A empty"
                return Report(sequences, steps, f"{where}: {report.counterexample}")
    finally:
        vars(traced_module)["HELD_DEPARTED"] = saved
    return Report(sequences, steps)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check; exit 1 on a counterexample."""
    parser = argparse.ArgumentParser(prog="python -m specs.exhaustive_trace", description=__doc__)
    parser.add_argument("--depth", type=int, default=3)
    args = parser.parse_args(argv)
    report = check_trace(args.depth)
    print(f"{report.sequences} sequences, {report.steps} calls: {report.counterexample or 'ok'}")
    return 0 if report.counterexample is None else 1


if __name__ == "__main__":
    sys.exit(main())
