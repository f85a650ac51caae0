"""The live walk, for every size: what each step of ``_walk`` yields, and when it raises.

``iter(queue)`` and ``queue.iter_blocks_after(cursor)`` return the generator
``FreeBlockQueue._walk(start)``; their own proof (:data:`specs.proof.cases.OPERATIONS`) shows
which ``start`` they give it, and that a refused cursor is refused by the call itself. This
module proves the generator, one step at a time: a *step* runs from the generator's first
``next()``, or from a ``yield``, up to the next ``yield``, its end, or a raise. Between two
steps the caller may change the queue in any way that keeps I1 to I4, so every step starts
from a fresh symbolic heap and list (:func:`fresh_world`), with one assumption, the
documented limit of the walk: the node the walk stands on (``start`` before the first step,
the block it yielded last after it) is on this queue's chain or detached, not moved into
another queue (the production queue cannot tell that in O(1) and walks that queue; check
mode's walk refuses it).

The model each step is held to is the live walk of ``docs/verification.md`` (and of
:func:`specs.crosscheck.expected_walk`): standing on a block of the queue, the step yields the
block after it in the queue as it is now, or ends if it was the last; standing on a block that
left the queue (detached), it raises ``NotInQueueError``. The first step stands on ``start``
itself: it yields ``start`` if it is a block of the queue, ends if it is the tail, and raises
if it left. No step writes a link or the count, and none yields ``None`` or a sentinel.

The translator runs ``_walk``'s source; a ``yield`` ends a step (its obligations are stated
there) and the generator resumes in a fresh world; its loop is cut by the invariant
:func:`walk_invariant`, checked like every other. Not covered: a walk whose block is moved into
another queue between two steps (above), threads, and the compiled build.
"""

from __future__ import annotations

import itertools
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
    Heap,
    _world,
    invariants,
    lemmas,
    symbolic_state,
)
from specs.proof.state import LoopView, Obligation, Outcome, State
from specs.proof.translator import Translator
from verified_queue import errors

__all__ = [
    "find_walk_counterexample",
    "fresh_world",
    "held",
    "small_worlds",
    "walk_invariant",
    "walk_obligations",
]

#: The walk's ghost state, kept as locals of the generator's frame (``$``: no code names them):
#: the list and the heap of the current step, whether a step has yielded, the block yielded
#: last, and the links and count the current step started with.
_GHOST_LOCALS = ("$at", "$pos", "$n", "$started", "$standing", "$next0", "$prev0", "$num0")


def held(node: Any, ghost: Ghost) -> Any:
    """Where the caller may leave the node a walk stands on: on the chain (after the head) or
    detached, not a sentinel of another queue, not linked in another queue."""
    pos, n = ghost.pos, ghost.n
    return z3.And(
        node != NONE,
        z3.Or(
            z3.And(pos[node] >= 1, pos[node] <= n + 1),
            z3.And(pos[node] == -1, z3.Not(IS_SENTINEL(node)), z3.Not(LINKED_ELSEWHERE(node))),
        ),
    )


def fresh_world(label: str) -> tuple[Heap, Ghost, list[Any]]:
    """A new symbolic heap and list, and that they satisfy I1 to I4 (and the lemmas)."""
    ghost = Ghost(
        z3.FreshConst(z3.ArraySort(z3.IntSort(), NODE), f"at_{label}"),
        z3.FreshConst(z3.ArraySort(NODE, z3.IntSort()), f"pos_{label}"),
        z3.FreshInt(f"n_{label}"),
    )
    heap = Heap(
        z3.FreshConst(z3.ArraySort(NODE, NODE), f"next_{label}"),
        z3.FreshConst(z3.ArraySort(NODE, NODE), f"prev_{label}"),
        z3.FreshInt(f"num_{label}"),
    )
    return heap, ghost, _healthy(heap, ghost)


def _healthy(heap: Heap, ghost: Ghost) -> list[Any]:
    return [f for _n, f in invariants(heap, ghost)] + [f for _n, f in lemmas(heap, ghost)]


def _ghost(env: dict[str, Any]) -> Ghost:
    return Ghost(env["$at"], env["$pos"], env["$n"])


def _model(env: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The live walk's next step, in the list of the current step: (yields, ends, value)."""
    ghost = _ghost(env)
    at, pos, n = ghost.at, ghost.pos, ghost.n
    started, standing, start = env["$started"], env["$standing"], env["$start"]
    p = pos[standing]
    yields = z3.If(started, z3.And(p >= 1, p < n), z3.And(pos[start] >= 1, pos[start] <= n))
    ends = z3.If(started, z3.And(p >= 1, p == n), start == TAIL)
    return yields, ends, z3.If(started, at[p + 1], start)


def _unwritten(state: State) -> Any:
    heap, env = state.heap, state.env
    return z3.And(heap.nxt == env["$next0"], heap.prv == env["$prev0"], heap.num == env["$num0"])


def walk_invariant(view: LoopView) -> Any:
    """``_walk``'s loop at the top of a round, in the list of the current step.

    Before the first yield, ``block`` is ``start``, where the caller left it; after one,
    the block yielded last is in the queue and ``block`` is the one after it (the tail if it
    was the last). The heap and the list satisfy I1 to I4, and the step has written nothing.
    """
    env = view.now.env
    ghost = _ghost(env)
    at, pos = ghost.at, ghost.pos
    p = pos[env["$standing"]]
    block = view.local("block")
    return z3.And(
        *_healthy(view.now.heap, ghost),
        _unwritten(view.now),
        view.local("tail") == TAIL,
        z3.If(
            env["$started"],
            z3.And(p >= 1, p <= ghost.n, block == at[p + 1]),
            z3.And(block == env["$start"], held(env["$start"], ghost)),
        ),
    )


def small_worlds(heap: Heap, ghost: Ghost, blocks: int) -> Any:
    """``heap`` and ``ghost`` are one of the queues over ``blocks`` blocks ``w1``, ``w2``, ...:
    any order of any subset of them, the others detached, between HEAD and TAIL.

    For the bounded search only (:func:`find_walk_counterexample`): each world of a walk pinned
    to a finite choice, z3 decides an obligation where over all sizes it may run out of time.
    """
    universe = [z3.Const(f"w{i}", NODE) for i in range(1, blocks + 1)]
    shapes = [
        list(order)
        for size in range(blocks + 1)
        for order in itertools.permutations(universe, size)
    ]
    choices = []
    for shape in shapes:
        chain = [HEAD, *shape, TAIL]
        at, pos = z3.K(z3.IntSort(), TAIL), z3.K(NODE, z3.IntVal(-1))
        following, preceding = z3.K(NODE, NONE), z3.K(NODE, NONE)
        for index, member in enumerate(chain):
            at, pos = z3.Store(at, index, member), z3.Store(pos, member, index)
            if index + 1 < len(chain):
                following = z3.Store(following, member, chain[index + 1])
                preceding = z3.Store(preceding, chain[index + 1], member)
        choices.append(
            z3.And(
                ghost.at == at,
                ghost.pos == pos,
                ghost.n == len(shape),
                heap.nxt == following,
                heap.prv == preceding,
                heap.num == len(shape),
            )
        )
    return z3.Or(choices)


def _small_universe(blocks: int) -> list[Any]:
    x = z3.Const("x", NODE)
    universe = [NONE, HEAD, TAIL, *(z3.Const(f"w{i}", NODE) for i in range(1, blocks + 1))]
    return [
        z3.Distinct(*universe),
        z3.ForAll([x], z3.Or([x == member for member in universe])),
        z3.ForAll([x], IS_SENTINEL(x) == z3.Or(x == HEAD, x == TAIL)),
        z3.ForAll([x], z3.Not(LINKED_ELSEWHERE(x))),
    ]


def walk_obligations(
    queue_class: type,
    loop_invariants: dict[Any, Any],
    blocks: int | None = None,
    rounds: int | None = None,
) -> list[Obligation]:
    """The obligations of every step of ``queue_class._walk``, for every size.

    With ``blocks`` and ``rounds``, a bounded search instead (:func:`find_walk_counterexample`):
    every world (the first, and each one a step resumes in) is a queue over ``blocks`` blocks
    (:func:`small_worlds`), and the loop runs ``rounds`` rounds instead of being cut.
    """
    heap, ghost = symbolic_state()
    start = z3.Const("start", NODE)
    # A pinned world is healthy by construction: the invariants are stated for every size only.
    if blocks is None:
        pre = [*_world(), *_healthy(heap, ghost), held(start, ghost)]
    else:
        pre = [*_world(), *_small_universe(blocks), small_worlds(heap, ghost, blocks)]
        pre.append(held(start, ghost))
    translator = Translator(queue_class, loop_invariants, ghost, rounds)
    translator.yield_havocs = _GHOST_LOCALS
    obligations = translator.obligations

    def on_yield(state: State, value: Any, where: str) -> State:
        yields, _ends, expected = _model(state.env)
        obligations.append(
            Obligation(
                "a step yields what the live walk yields",
                where,
                state.path,
                z3.And(yields, value == expected),
            )
        )
        obligations.append(
            Obligation(
                "a step writes no link and keeps the count", where, state.path, _unwritten(state)
            )
        )
        after, now, healthy = fresh_world("resumed")
        env = dict(state.env)
        env.update(
            {
                "$at": now.at,
                "$pos": now.pos,
                "$n": now.n,
                "$started": z3.BoolVal(True),
                "$standing": value,
                "$next0": after.nxt,
                "$prev0": after.prv,
                "$num0": after.num,
            }
        )
        # The caller's turn: any healthy queue, the yielded block left on it or detached.
        world = healthy if blocks is None else [small_worlds(after, now, blocks)]
        path = (*state.path, *world, held(value, now))
        return State(path, env, after, dict(state.lists))

    translator.on_yield = on_yield
    extra = {
        "$at": ghost.at,
        "$pos": ghost.pos,
        "$n": ghost.n,
        "$started": z3.BoolVal(False),
        "$standing": z3.Const("standing", NODE),
        "$start": start,
        "$next0": heap.nxt,
        "$prev0": heap.prv,
        "$num0": heap.num,
    }
    outcomes = translator.run_body("_walk", [start], State(tuple(pre), {}, heap, {}), extra)
    goals = list(obligations)
    for outcome in outcomes:
        goals += _end_goals(outcome)
    return goals


def find_walk_counterexample(
    queue_class: type, loop_invariants: dict[Any, Any], blocks: int = 3, rounds: int = 3
) -> Obligation | None:
    """A step of ``queue_class._walk`` that breaks the live walk, on queues of ``blocks`` blocks.

    The bounded search behind a walk that is not proved: every world pinned to a queue over
    ``blocks`` blocks, the loop run ``rounds`` rounds. Returns the first obligation z3 refutes.
    """
    from specs.proof.driver import check  # noqa: PLC0415 -- the driver imports this module

    for obligation in walk_obligations(queue_class, loop_invariants, blocks, rounds):
        if check(obligation, 5_000)[0] == "counterexample":
            return obligation
    return None


def _end_goals(outcome: Outcome) -> list[Obligation]:
    """A step that ends the walk: by its end (StopIteration), or by raising."""
    state, where = outcome.state, outcome.where
    yields, ends, _value = _model(state.env)
    goals = [
        Obligation(
            "a step writes no link and keeps the count", where, state.path, _unwritten(state)
        )
    ]
    if outcome.kind in ("fall", "return"):
        goals.append(Obligation("the walk ends where the live walk ends", where, state.path, ends))
    else:
        cls = outcome.value
        goals.append(
            Obligation(
                "the walk raises NotInQueueError where the live walk does "
                f"(it raises {cls.__name__})",
                where,
                state.path,
                z3.And(z3.Not(yields), z3.Not(ends), z3.BoolVal(cls is errors.NotInQueueError)),
            )
        )
    return goals
