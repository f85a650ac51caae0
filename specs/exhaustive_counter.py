"""vLLM's counter in check mode, every short history: outside writes offset it, nothing else does.

``tests/vllm/test_counter_machine.py`` samples long random histories of vLLM's queues in check
mode (``VllmCheckedFreeBlockQueue``, ``VllmTracedFreeBlockQueue``); this runs *every* sequence of
up to ``depth`` actions (:func:`specs.sequences.every_sequence`) on a queue over a pool of
``blocks`` blocks (up to 3), from the full queue and from the empty one, against a list model
with the offset vLLM's reads must show:

* an outside write of ``num_free_blocks`` (this module is outside the package) of any count
  from 0 to ``blocks + 1`` is an offset on what vLLM reads (the count written minus the true
  one), never damage; writing the true count back clears it;
* a write of what is no count (-1, ``True``, ``2.0``, ``None``) is refused with ``TypeError``,
  the queue and the offset as they were;
* every operation (``popleft``, ``popleft_n`` of 0 to ``blocks + 1``, ``remove``, ``append``,
  ``append_n`` and ``prepend_n`` of each block) goes as the list model says, a refused one
  (an empty queue, too many, a block not in it, a block linked already) raising
  ``QueueError`` and changing nothing, the offset included: the true count decides;
* ``append`` and ``append_n`` of an object whose attribute lookups raise ``KeyError`` (a
  hostile proxy) are refused as no block, with ``QueueError``, nothing changed.

After every action an outside read must give the true count plus the offset, ``count_offset``
the offset, ``len`` the true count, ``full_check`` nothing, and the queue the model's blocks.

``python -m specs.exhaustive_counter --depth 4`` runs it wider than the test's default.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specs.sequences import Action, Report, every_sequence
from verified_queue import Block, QueueError
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

__all__ = ["QUEUES", "actions", "check_counter", "main"]

#: The queues whose counter vLLM's tests write: check mode's and the trace level's.
QUEUES: tuple[type[Any], ...] = (VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue)

#: What is no count: refused with ``TypeError``.
NO_COUNTS: tuple[object, ...] = (-1, True, 2.0, None)


@dataclass
class _State:
    pool: list[Block]
    queue: Any
    model: list[Block]
    offset: int = 0
    log: list[str] = field(default_factory=list)


def _fail(what: str) -> None:
    raise AssertionError(what)


def _check(state: _State) -> None:
    """What must hold after every action."""
    read = state.queue.num_free_blocks  # an outside read
    if read != len(state.model) + state.offset:
        _fail(f"an outside read gives {read}, not {len(state.model)} + {state.offset}")
    if state.queue.count_offset != state.offset:
        _fail(f"count_offset is {state.queue.count_offset}, not {state.offset}")
    if len(state.queue) != len(state.model):
        _fail(f"len is {len(state.queue)}, not {len(state.model)}")
    state.queue.full_check()
    blocks = state.queue.get_all_free_blocks()
    if len(blocks) != len(state.model) or any(
        a is not b for a, b in zip(blocks, state.model, strict=True)
    ):
        _fail(f"the queue holds {blocks}, the model {state.model}")


def _refused(state: _State, call: Callable[[], object], error: type[Exception]) -> None:
    """``call`` must raise ``error`` and change nothing, the offset included."""
    before = state.queue.get_all_free_blocks()
    try:
        call()
    except error:
        pass
    else:
        _fail(f"not refused with {error.__name__}")
    after = state.queue.get_all_free_blocks()
    if len(after) != len(before) or any(a is not b for a, b in zip(after, before, strict=True)):
        _fail("a refused call changed the queue")
    if state.queue.count_offset != state.offset:
        _fail("a refused call moved the offset")


def _step(change: Callable[[_State], None]) -> Callable[[_State], None]:
    def apply(state: _State) -> None:
        change(state)
        _check(state)

    return apply


def _write(value: int) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        state.queue.num_free_blocks = value
        state.offset = value - len(state.model)

    return _step(change)


def _write_back(state: _State) -> None:
    state.queue.num_free_blocks = len(state.model)
    state.offset = 0


def _write_no_count(value: object) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        def write() -> None:
            state.queue.num_free_blocks = value

        _refused(state, write, TypeError)

    return _step(change)


def _popleft(state: _State) -> None:
    if not state.model:
        _refused(state, state.queue.popleft, QueueError)
        return
    got = state.queue.popleft()
    if got is not state.model[0]:
        _fail(f"popleft gave {got}, not {state.model[0]}")
    del state.model[0]


def _popleft_n(count: int) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        if count > len(state.model):  # the true count decides, whatever vLLM reads
            _refused(state, lambda: state.queue.popleft_n(count), QueueError)
            return
        got = state.queue.popleft_n(count)
        want = state.model[:count]
        if len(got) != len(want) or any(a is not b for a, b in zip(got, want, strict=True)):
            _fail(f"popleft_n({count}) gave {got}, not {want}")
        del state.model[:count]

    return _step(change)


def _linked(state: _State, block: Block) -> bool:
    return any(block is member for member in state.model)


def _remove(number: int) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        block = state.pool[number]
        if not _linked(state, block):
            _refused(state, lambda: state.queue.remove(block), QueueError)
            return
        state.queue.remove(block)
        state.model[:] = [member for member in state.model if member is not block]

    return _step(change)


def _link(method: str, number: int) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        block = state.pool[number]
        call = getattr(state.queue, method)
        argument: object = block if method == "append" else [block]
        if _linked(state, block):
            _refused(state, lambda: call(argument), QueueError)
            return
        call(argument)
        if method == "prepend_n":
            state.model.insert(0, block)
        else:
            state.model.append(block)

    return _step(change)


class RaisingLookup:
    """No block: an object whose every missing attribute lookup raises ``KeyError``."""

    def __getattr__(self, name: str) -> object:
        raise KeyError(name)


def _not_a_block(method: str) -> Callable[[_State], None]:
    def change(state: _State) -> None:
        value = RaisingLookup()
        argument: object = value if method == "append" else [value]
        _refused(state, lambda: getattr(state.queue, method)(argument), QueueError)

    return _step(change)


def actions(blocks: int) -> list[Action[_State]]:
    """The alphabet: every write, every operation with every argument, over ``blocks`` blocks."""
    alphabet: list[Action[_State]] = [
        Action(f"write {value} from outside", _write(value)) for value in range(blocks + 2)
    ]
    alphabet.append(Action("write the true count back", _step(_write_back)))
    alphabet += [Action(f"write {value!r}", _write_no_count(value)) for value in NO_COUNTS]
    alphabet.append(Action("popleft", _step(_popleft)))
    alphabet += [Action(f"popleft_n({n})", _popleft_n(n)) for n in range(blocks + 2)]
    for number in range(blocks):
        alphabet.append(Action(f"remove(b{number})", _remove(number)))
        for method in ("append", "append_n", "prepend_n"):
            alphabet.append(Action(f"{method}(b{number})", _link(method, number)))
    alphabet += [
        Action(f"{method}(an object whose lookups raise)", _not_a_block(method))
        for method in ("append", "append_n")
    ]
    return alphabet


def check_counter(depth: int = 3, blocks: int = 3, queues: Sequence[type[Any]] = QUEUES) -> Report:
    """Every sequence of up to ``depth`` actions, on each queue, from the full and the empty one.

    The report adds up the runs; its counterexample names the queue, the start and the actions.
    """
    alphabet = actions(blocks)
    sequences = steps = 0
    for queue_class in queues:
        for full in (True, False):

            def start(queue_class: type[Any] = queue_class, full: bool = full) -> _State:
                pool = [Block() for _ in range(blocks)]
                model = list(pool) if full else []
                state = _State(pool, queue_class(list(model)), model)
                _check(state)
                return state

            report = every_sequence(start, alphabet, depth)
            sequences += report.sequences
            steps += report.steps
            if report.counterexample is not None:
                where = f"{queue_class.__name__} of {blocks if full else 0} blocks"
                return Report(sequences, steps, f"{where}: {report.counterexample}")
    return Report(sequences, steps)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check; exit 1 on a counterexample."""
    parser = argparse.ArgumentParser(prog="python -m specs.exhaustive_counter", description=__doc__)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args(argv)
    report = check_counter(args.depth, args.blocks)
    print(f"{report.sequences} sequences, {report.steps} actions: {report.counterexample or 'ok'}")
    return 0 if report.counterexample is None else 1


if __name__ == "__main__":
    sys.exit(main())
