"""The symbolic heap and the ghost state: nodes, links, the invariants, lemmas and frame."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

__all__ = [
    "HEAD",
    "IS_SENTINEL",
    "LINKED_ELSEWHERE",
    "NODE",
    "NONE",
    "TAIL",
    "VALUE_EQUALS",
    "Ghost",
    "Heap",
    "invariants",
    "lemmas",
    "symbolic_state",
]


#: Every object that can sit in a link: blocks, sentinels of every queue, and ``None``.
NODE = z3.DeclareSort("Node")
NONE = z3.Const("None", NODE)
HEAD = z3.Const("head", NODE)
TAIL = z3.Const("tail", NODE)
#: ``isinstance(x, Sentinel)``: the head and tail of this queue or of any other.
IS_SENTINEL = z3.Function("is_sentinel", NODE, z3.BoolSort())
#: A block (not a sentinel) linked in some *other* queue: the model's membership knows it.
LINKED_ELSEWHERE = z3.Function("linked_elsewhere", NODE, z3.BoolSort())
#: ``a == b`` on two nodes: whatever the block class's ``__eq__`` answers, left unknown (a
#: dataclass block compares its fields), so an outcome that depends on it is not proved.
VALUE_EQUALS = z3.Function("value_equals", NODE, NODE, z3.BoolSort())

_I = z3.Int("i")
_X = z3.Const("x", NODE)


@dataclass(frozen=True)
class Ghost:
    """The model's list as the chain's nodes: ``at[0]`` head, ``at[1..n]``, ``at[n + 1]`` tail."""

    at: Any  # z3 Array Int -> Node
    pos: Any  # z3 Array Node -> Int, the index in ``at`` or -1
    n: Any  # z3 Int, ``len(model.blocks)``


@dataclass(frozen=True)
class Heap:
    """The two link fields of every node and the queue's count."""

    nxt: Any  # z3 Array Node -> Node
    prv: Any  # z3 Array Node -> Node
    num: Any  # z3 Int


def _forall(variables: list[Any], body: Any, patterns: Sequence[Any] = ()) -> Any:
    """``ForAll`` with trigger patterns where z3 accepts them (not over a lambda or a store)."""
    usable = [p for p in patterns if all(_is_plain(a) for a in _selects(p))]
    return z3.ForAll(variables, body, patterns=usable)


def _selects(term: Any) -> list[Any]:
    return [term.arg(0)] if z3.is_select(term) else []


def _is_plain(array: Any) -> bool:
    return bool(z3.is_const(array))


def _in_chain(ghost: Ghost, index: Any) -> Any:
    return z3.And(index >= 0, index <= ghost.n + 1)


def invariants(heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """I1 to I4 of ``queue.py`` (and the shape of the heap outside the queue), by name."""
    at, pos, n, i, x = ghost.at, ghost.pos, ghost.n, _I, _X
    nxt, prv = heap.nxt, heap.prv
    outside = z3.And(x != NONE, pos[x] == -1)
    return [
        ("I2: num_free_blocks counts the blocks", z3.And(n >= 0, heap.num == n)),
        (
            "I1: the sentinels end the chain",
            z3.And(at[0] == HEAD, at[n + 1] == TAIL, prv[HEAD] == NONE, nxt[TAIL] == NONE),
        ),
        (
            "I1: every node of the chain is set",
            _forall([i], z3.Implies(_in_chain(ghost, i), at[i] != NONE), patterns=[at[i]]),
        ),
        (
            "I1: forward links follow the chain",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 0, i <= n), nxt[at[i]] == at[i + 1]),
                patterns=[at[i]],
            ),
        ),
        (
            "I1: back links mirror the forward links",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 1, i <= n + 1), prv[at[i]] == at[i - 1]),
                patterns=[at[i]],
            ),
        ),
        (
            "I3: no node appears twice",
            _forall([i], z3.Implies(_in_chain(ghost, i), pos[at[i]] == i), patterns=[at[i]]),
        ),
        (
            "I3: pos is the index in the chain, or -1",
            _forall(
                [x],
                z3.Or(pos[x] == -1, z3.And(pos[x] >= 0, pos[x] <= n + 1, at[pos[x]] == x)),
                patterns=[pos[x]],
            ),
        ),
        (
            "I1: no sentinel between the sentinels",
            _forall(
                [i],
                z3.Implies(z3.And(i >= 1, i <= n), z3.Not(IS_SENTINEL(at[i]))),
                patterns=[at[i]],
            ),
        ),
        (
            "I3: a block of this queue is in no other",
            _forall([x], z3.Implies(pos[x] >= 0, z3.Not(LINKED_ELSEWHERE(x))), patterns=[pos[x]]),
        ),
        (
            "I4: a block in no queue is detached",
            _forall(
                [x],
                z3.Implies(
                    z3.And(outside, z3.Not(IS_SENTINEL(x)), z3.Not(LINKED_ELSEWHERE(x))),
                    z3.And(prv[x] == NONE, nxt[x] == NONE),
                ),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
        (
            "I1 of other queues: their blocks have both links",
            _forall(
                [x],
                z3.Implies(
                    z3.And(outside, LINKED_ELSEWHERE(x)), z3.And(prv[x] != NONE, nxt[x] != NONE)
                ),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
        (
            "I4 of other queues: their sentinels have exactly one link",
            _forall(
                [x],
                z3.Implies(z3.And(outside, IS_SENTINEL(x)), z3.Xor(prv[x] == NONE, nxt[x] == NONE)),
                patterns=[pos[x], nxt[x], prv[x]],
            ),
        ),
    ]


def lemmas(heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """Consequences of the invariants, phrased around a node so that z3 finds them quickly.

    They are proved from :func:`invariants` (obligations of their own) before being assumed.
    """
    pos, n, x = ghost.pos, ghost.n, _X
    return [
        ("None is on no chain", pos[NONE] == -1),
        (
            "the successor of a chain node is the next one",
            _forall(
                [x],
                z3.Implies(z3.And(pos[x] >= 0, pos[x] <= n), pos[heap.nxt[x]] == pos[x] + 1),
                patterns=[pos[x]],
            ),
        ),
        (
            "the predecessor of a chain node is the previous one",
            _forall(
                [x],
                z3.Implies(z3.And(pos[x] >= 1, pos[x] <= n + 1), pos[heap.prv[x]] == pos[x] - 1),
                patterns=[pos[x]],
            ),
        ),
    ]


def _world() -> list[Any]:
    """Facts about the universe that no operation changes."""
    x = _X
    return [
        z3.Distinct(NONE, HEAD, TAIL),
        IS_SENTINEL(HEAD),
        IS_SENTINEL(TAIL),
        z3.Not(IS_SENTINEL(NONE)),
        z3.Not(LINKED_ELSEWHERE(NONE)),
        _forall(
            [x], z3.Implies(LINKED_ELSEWHERE(x), z3.Not(IS_SENTINEL(x))), patterns=[IS_SENTINEL(x)]
        ),
    ]


def _frame(before: Heap, after: Heap, old: Ghost, new: Ghost) -> Any:
    """A node off the chain before and after keeps both links (other queues are untouched)."""
    x = _X
    return _forall(
        [x],
        z3.Implies(
            z3.And(old.pos[x] == -1, new.pos[x] == -1),
            z3.And(after.nxt[x] == before.nxt[x], after.prv[x] == before.prv[x]),
        ),
        patterns=[after.nxt[x], after.prv[x]],
    )


def symbolic_state() -> tuple[Heap, Ghost]:
    """A pre-state to prove from: a symbolic heap (links and count) and its ghost list."""
    ghost = Ghost(
        z3.Array("at", z3.IntSort(), NODE), z3.Array("pos", NODE, z3.IntSort()), z3.Int("n")
    )
    heap = Heap(
        z3.Array("next", NODE, NODE), z3.Array("prev", NODE, NODE), z3.Int("num_free_blocks")
    )
    return heap, ghost
