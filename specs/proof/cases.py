"""The list model's semantics on the ghost: each operation's cases, and what each one does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.proof.heap import (
    HEAD,
    IS_SENTINEL,
    LINKED_ELSEWHERE,
    NODE,
    NONE,
    TAIL,
    Ghost,
    _forall,
)
from specs.proof.state import (
    SELF,
    GeneratorRef,
    ListRef,
    State,
)
from verified_queue import errors

__all__ = ["OPERATIONS", "Case", "Operation", "empty_ghost"]


@dataclass
class Case:
    """One case of the model: when it applies, and what the model does then."""

    name: str
    condition: Any
    raises: type[BaseException] | None = None
    ghost: Ghost | None = None  # the model's new list, when it returns
    result: Callable[[Any, State], list[tuple[str, Any]]] | None = None
    #: The blocks the model's call takes out, as a predicate on nodes (they must be detached).
    dropped: Callable[[Any], Any] | None = None
    #: A query: the call must leave every link and the count exactly as they were.
    unchanged: bool = False


def _popleft_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.popleft: ``blocks.pop(0)``, or EmptyQueueError on an empty list.
    after = Ghost(
        z3.Lambda([i], z3.If(i == 0, HEAD, at[i + 1])),
        z3.Lambda([x], z3.If(pos[x] == 1, -1, z3.If(pos[x] > 1, pos[x] - 1, pos[x]))),
        n - 1,
    )
    return [
        Case("empty", n == 0, raises=errors.EmptyQueueError),
        Case(
            "not empty",
            n > 0,
            ghost=after,
            result=lambda value, _state: [("returns the front block", value == at[1])],
            dropped=lambda node: node == at[1],
        ),
    ]


def _remove_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (block,) = args
    k = pos[block]
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.remove: ``del blocks[index]`` for the block itself, else NotInQueueError.
    after = Ghost(
        z3.Lambda([i], z3.If(i < k, at[i], at[i + 1])),
        z3.Lambda([x], z3.If(x == block, -1, z3.If(pos[x] > k, pos[x] - 1, pos[x]))),
        n - 1,
    )
    member = z3.And(k >= 1, k <= n)
    return [
        Case("block not in the queue", z3.Not(member), raises=errors.NotInQueueError),
        Case(
            "block in the queue",
            member,
            ghost=after,
            result=lambda value, _state: [("returns None", value == NONE)],
            dropped=lambda node: node == block,
        ),
    ]


def _append_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (block,) = args
    # ListModel.append: refused for a sentinel or a block linked in any queue (a double free).
    refused = z3.Or(
        IS_SENTINEL(block), LINKED_ELSEWHERE(block), z3.And(pos[block] >= 1, pos[block] <= n)
    )
    after = Ghost(
        z3.Store(z3.Store(at, n + 1, block), n + 2, TAIL),
        z3.Store(z3.Store(pos, block, n + 1), TAIL, n + 2),
        n + 1,
    )
    return [
        Case("sentinel or linked block", refused, raises=errors.AlreadyInQueueError),
        Case(
            "detached block",
            z3.Not(refused),
            ghost=after,
            result=lambda value, _state: [("returns None", value == NONE)],
        ),
    ]


def _popleft_n_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (count,) = args
    i, x = z3.Int("j"), z3.Const("y", NODE)
    # ListModel.popleft_n: EmptyQueueError if count > n, else NegativeCountError if count < 0,
    # else ``blocks[:count]`` returned and ``blocks[count:]`` kept.
    after = Ghost(
        z3.Lambda([i], z3.If(i == 0, HEAD, at[i + count])),
        z3.Lambda(
            [x],
            z3.If(
                z3.And(pos[x] >= 1, pos[x] <= count),
                -1,
                z3.If(pos[x] > count, pos[x] - count, pos[x]),
            ),
        ),
        n - count,
    )

    def result(value: Any, state: State) -> list[tuple[str, Any]]:
        if not isinstance(value, ListRef):
            return [("returns a list", z3.BoolVal(False))]
        items, length = state.lists[value.ident]
        j = z3.Int("j")
        return [
            ("returns a list of count blocks", length == count),
            (
                "returns the first count blocks, front first",
                _forall([j], z3.Implies(z3.And(j >= 0, j < count), items[j] == at[j + 1])),
            ),
        ]

    return [
        Case("count > len", count > n, raises=errors.EmptyQueueError),
        Case("count < 0", z3.And(count <= n, count < 0), raises=errors.NegativeCountError),
        Case(
            "0 <= count <= len",
            z3.And(count >= 0, count <= n),
            ghost=after,
            result=result,
            dropped=lambda node: z3.And(pos[node] >= 1, pos[node] <= count),
        ),
    ]


def _admissible(ghost: Ghost, node: Any) -> Any:
    """What ListModel's batches accept, besides not repeating: no sentinel, linked nowhere."""
    return z3.And(ghost.pos[node] == -1, z3.Not(IS_SENTINEL(node)), z3.Not(LINKED_ELSEWHERE(node)))


def _batch_cases(front: bool) -> Callable[[Ghost, Sequence[Any]], list[Case]]:
    """ListModel.append_n (``front=False``) or prepend_n: all or nothing."""

    def cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
        at, pos, n = ghost.at, ghost.pos, ghost.n
        ((items, length),) = args
        i, j, y = z3.Int("i"), z3.Int("j"), z3.Const("y", NODE)
        in_batch = z3.And(j >= 0, j < length)
        every_admissible = _forall(
            [j], z3.Implies(in_batch, _admissible(ghost, items[j])), patterns=[items[j]]
        )
        distinct = z3.ForAll(
            [i, j],
            z3.Implies(z3.And(in_batch, i >= 0, i < length, items[i] == items[j]), i == j),
        )
        # The position of each block in the batch: it exists exactly when no block repeats,
        # so assuming it where the model accepts the batch loses no case.
        index = z3.Array("batch_index", NODE, z3.IntSort())
        inverse = z3.And(
            _forall([j], z3.Implies(in_batch, index[items[j]] == j), patterns=[items[j]]),
            _forall(
                [y],
                z3.Or(
                    index[y] == -1,
                    z3.And(index[y] >= 0, index[y] < length, items[index[y]] == y),
                ),
                patterns=[index[y]],
            ),
        )
        if front:
            after = Ghost(
                z3.Lambda(
                    [i], z3.If(i == 0, HEAD, z3.If(i <= length, items[i - 1], at[i - length]))
                ),
                z3.Lambda(
                    [y],
                    z3.If(index[y] >= 0, index[y] + 1, z3.If(pos[y] >= 1, pos[y] + length, pos[y])),
                ),
                n + length,
            )
        else:
            after = Ghost(
                z3.Lambda(
                    [i], z3.If(i <= n, at[i], z3.If(i <= n + length, items[i - n - 1], TAIL))
                ),
                z3.Lambda(
                    [y],
                    z3.If(
                        y == TAIL, n + length + 1, z3.If(index[y] >= 0, n + 1 + index[y], pos[y])
                    ),
                ),
                n + length,
            )
        return [
            Case(
                "a block is a sentinel, linked or repeated",
                z3.Not(z3.And(every_admissible, distinct)),
                raises=errors.AlreadyInQueueError,
            ),
            Case(
                "every block may join",
                z3.And(every_admissible, distinct, inverse),
                ghost=after,
                result=lambda value, _state: [("returns None", value == NONE)],
            ),
        ]

    return cases


def _truth(value: Any) -> Any:
    """A returned truth value as a z3 formula (``None`` for a value that is not one)."""
    if isinstance(value, bool):
        return z3.BoolVal(value)
    if isinstance(value, z3.BoolRef):
        return value
    return None


def _len_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    # ListModel.__len__: ``len(blocks)``.
    def result(value: Any, _state: State) -> list[tuple[str, Any]]:
        if not (isinstance(value, z3.ArithRef) and value.is_int()):
            return [("returns an int", z3.BoolVal(False))]
        return [("returns the model's length", value == ghost.n)]

    return [Case("any queue", z3.BoolVal(True), ghost=ghost, result=result, unchanged=True)]


def _bool_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    # ListModel.__bool__: ``bool(blocks)``.
    def result(value: Any, _state: State) -> list[tuple[str, Any]]:
        truth = _truth(value)
        if truth is None:
            return [("returns a bool", z3.BoolVal(False))]
        return [("returns whether the model's list is non-empty", truth == (ghost.n != 0))]

    return [Case("any queue", z3.BoolVal(True), ghost=ghost, result=result, unchanged=True)]


def _contains_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    # ListModel.__contains__: ``position(blocks, block) >= 0``, by identity. The argument is any
    # node: a block here, detached or in another queue, a sentinel of any queue, or None.
    (block,) = args
    member = z3.And(ghost.pos[block] >= 1, ghost.pos[block] <= ghost.n)

    def result(value: Any, _state: State) -> list[tuple[str, Any]]:
        truth = _truth(value)
        if truth is None:
            return [("returns a bool", z3.BoolVal(False))]
        return [("returns whether the block itself is in the model's list", truth == member)]

    return [Case("any object", z3.BoolVal(True), ghost=ghost, result=result, unchanged=True)]


def _get_all_free_blocks_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    # ListModel.get_all_free_blocks: ``list(blocks)``, a new list.
    at, n = ghost.at, ghost.n

    def result(value: Any, state: State) -> list[tuple[str, Any]]:
        # The call starts with no list: any list it returns is one it made.
        if not isinstance(value, ListRef):
            return [("returns a list made by the call", z3.BoolVal(False))]
        items, length = state.lists[value.ident]
        j = z3.Int("j")
        return [
            ("returns a list of len(queue) blocks", length == n),
            (
                "returns the model's blocks, front first",
                _forall([j], z3.Implies(z3.And(j >= 0, j < n), items[j] == at[j + 1])),
            ),
        ]

    return [Case("any queue", z3.BoolVal(True), ghost=ghost, result=result, unchanged=True)]


def _walk_from(start: Any) -> Callable[[Any, State], list[tuple[str, Any]]]:
    """The result of a call that returns a live walk of this queue from ``start``.

    The walk itself (what each step yields, and when it raises) is proved apart, for any
    start that is on the chain or detached when the first step runs (:mod:`specs.proof.walks`).
    """

    def result(value: Any, _state: State) -> list[tuple[str, Any]]:
        if not (
            isinstance(value, GeneratorRef)
            and value.function == "_walk"
            and len(value.args) == 2
            and value.args[0] is SELF
        ):
            return [("returns a live walk of this queue, not yet started", z3.BoolVal(False))]
        return [("the walk starts where the model's does", value.args[1] == start)]

    return result


def _iter_cases(ghost: Ghost, _args: Sequence[Any]) -> list[Case]:
    # ListModel.__iter__: the blocks front first; the walk starts at the front block (the
    # tail for an empty queue, where it yields nothing).
    return [
        Case(
            "any queue",
            z3.BoolVal(True),
            ghost=ghost,
            result=_walk_from(ghost.at[1]),
            unchanged=True,
        )
    ]


def _iter_blocks_after_cases(ghost: Ghost, args: Sequence[Any]) -> list[Case]:
    at, pos, n = ghost.at, ghost.pos, ghost.n
    (cursor,) = args
    # ListModel.iter_blocks_after: every block for None, the blocks after the cursor for a
    # member, NotInQueueError (when called) for a cursor that is not here; the queue's own
    # head means "from the front" and its own tail "nothing after".
    member = z3.And(pos[cursor] >= 1, pos[cursor] <= n)
    front = z3.Or(cursor == NONE, cursor == HEAD)
    return [
        Case("None or the head", front, ghost=ghost, result=_walk_from(at[1]), unchanged=True),
        Case(
            "a block of the queue",
            member,
            ghost=ghost,
            result=_walk_from(at[pos[cursor] + 1]),
            unchanged=True,
        ),
        Case("the tail", cursor == TAIL, ghost=ghost, result=_walk_from(TAIL), unchanged=True),
        Case(
            "detached, or another queue's sentinel",
            z3.Not(z3.Or(front, member, cursor == TAIL)),
            raises=errors.NotInQueueError,
        ),
    ]


def empty_ghost() -> Ghost:
    """The list of a queue just built empty: the two sentinels and nothing between them."""
    return Ghost(
        z3.Store(z3.Store(z3.K(z3.IntSort(), TAIL), 0, HEAD), 1, TAIL),
        z3.Store(z3.Store(z3.K(NODE, z3.IntVal(-1)), HEAD, 0), TAIL, 1),
        z3.IntVal(0),
    )


@dataclass(frozen=True)
class Operation:
    """An operation to prove: its arguments' kinds and the model's cases."""

    name: str
    #: "block" (a block, not None), "object" (any node, None included), "count" or "batch".
    arguments: tuple[str, ...]
    cases: Callable[[Ghost, Sequence[Any]], list[Case]]
    #: Arguments the precondition excludes, beyond their types.
    precondition: Callable[[Ghost, Sequence[Any]], Any] | None = None
    #: The constructor: the queue is new, its sentinels fresh objects (see goals.py).
    fresh: bool = False


def _remove_precondition(_ghost: Ghost, args: Sequence[Any]) -> Any:
    # The documented precondition: not a block linked in *another* queue, which the
    # production queue cannot tell in O(1) (check mode refuses it).
    return z3.Not(LINKED_ELSEWHERE(args[0]))


#: iter_blocks_after's precondition is remove's: a cursor linked in another queue is not told
#: apart in O(1) (the production queue walks that queue; check mode refuses it).
_cursor_precondition = _remove_precondition


OPERATIONS: dict[str, Operation] = {
    "popleft": Operation("popleft", (), _popleft_cases),
    "remove": Operation("remove", ("block",), _remove_cases, _remove_precondition),
    "append": Operation("append", ("block",), _append_cases),
    "popleft_n": Operation("popleft_n", ("count",), _popleft_n_cases),
    "append_n": Operation("append_n", ("batch",), _batch_cases(front=False)),
    "prepend_n": Operation("prepend_n", ("batch",), _batch_cases(front=True)),
    "__init__": Operation("__init__", ("batch",), _batch_cases(front=False), fresh=True),
    "__len__": Operation("__len__", (), _len_cases),
    "__bool__": Operation("__bool__", (), _bool_cases),
    "__contains__": Operation("__contains__", ("object",), _contains_cases),
    "get_all_free_blocks": Operation("get_all_free_blocks", (), _get_all_free_blocks_cases),
    "__iter__": Operation("__iter__", (), _iter_cases),
    "iter_blocks_after": Operation(
        "iter_blocks_after", ("object",), _iter_blocks_after_cases, _cursor_precondition
    ),
}
