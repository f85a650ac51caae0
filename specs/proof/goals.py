"""The obligations of an operation: the translated code's own, and the model's for each case."""

from __future__ import annotations

from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.proof.cases import (
    OPERATIONS,
    Case,
    empty_ghost,
)
from specs.proof.heap import (
    HEAD,
    NODE,
    NONE,
    TAIL,
    Ghost,
    Heap,
    _forall,
    _frame,
    _world,
    invariants,
    lemmas,
    symbolic_state,
)
from specs.proof.loops import (
    LOOP_INVARIANTS,
)
from specs.proof.state import (
    ListRef,
    LoopInvariant,
    LoopSpec,
    Obligation,
    Outcome,
    State,
    Unsupported,
)
from specs.proof.translator import (
    Translator,
)
from specs.proof.walks import walk_obligations
from verified_queue.queue import FreeBlockQueue

__all__ = ["WALK", "lemma_obligations", "obligations", "prove_operation"]

#: The name the steps of the live walk are proved under (the generator ``_walk``).
WALK = "_walk"


def _case_goals(
    case: Case, outcome: Outcome, heap: Heap, ghost: Ghost, fresh: bool = False
) -> list[tuple[str, Any]]:
    """What the code's ``outcome`` must satisfy where the model's ``case`` applies.

    ``fresh``: the constructor's call, whose refusal leaves no queue behind, so only the
    links of the nodes other than its own new sentinels must be as they were.
    """
    after = outcome.state.heap
    if case.raises is not None:
        expected = case.raises.__name__
        if outcome.kind != "raise":
            return [(f"raises {expected} as the model does (the code returns)", z3.BoolVal(False))]
        raised = (
            f"raises {expected} as the model does (the code raises {outcome.value.__name__})",
            z3.BoolVal(outcome.value is case.raises),
        )
        if fresh:
            y = z3.Const("y", NODE)
            return [
                raised,
                (
                    "a refused constructor changes no link of any block",
                    _forall(
                        [y],
                        z3.Implies(
                            z3.And(y != HEAD, y != TAIL),
                            z3.And(after.nxt[y] == heap.nxt[y], after.prv[y] == heap.prv[y]),
                        ),
                        patterns=[after.nxt[y], after.prv[y]],
                    ),
                ),
            ]
        return [
            raised,
            (
                "a refused call changes no link",
                z3.And(after.nxt == heap.nxt, after.prv == heap.prv),
            ),
            ("a refused call keeps the count", after.num == heap.num),
        ]
    if outcome.kind != "return":
        raised = outcome.value.__name__
        return [(f"returns as the model does (the code raises {raised})", z3.BoolVal(False))]
    if case.ghost is None or case.result is None:
        raise Unsupported(f"the case {case.name!r} returns but names no new list or result")
    goals = case.result(outcome.value, outcome.state)
    if case.unchanged:
        goals.append(
            (
                "a query changes no link and keeps the count",
                z3.And(after.nxt == heap.nxt, after.prv == heap.prv, after.num == heap.num),
            )
        )
    goals += [
        (f"{goal_name} afterwards (on the model's new list)", goal)
        for goal_name, goal in invariants(after, case.ghost)
    ]
    goals.append(("no node outside the queue changes", _frame(heap, after, ghost, case.ghost)))
    if case.dropped is not None:
        # Implied by I4 afterwards, but stated on its own so that a failure names it.
        y = z3.Const("y", NODE)
        detached = z3.And(after.nxt[y] == NONE, after.prv[y] == NONE)
        goals.append(
            (
                "the blocks taken out are detached",
                _forall([y], z3.Implies(case.dropped(y), detached)),
            )
        )
    return goals


def _fresh_queue(heap: Heap) -> tuple[list[Any], Ghost]:
    """The constructor's pre-state: ``heap`` before it runs, and the list it starts from.

    The queue's two sentinels (HEAD and TAIL, the first two objects it allocates) are new:
    unlinked, and named by no link. Every other node is as the invariants say a node outside
    a queue is; stated as the invariants of the empty queue the constructor's first writes
    make (HEAD <-> TAIL, count 0), which say exactly that of the other nodes.
    """
    ghost = empty_ghost()
    joined = Heap(z3.Store(heap.nxt, HEAD, TAIL), z3.Store(heap.prv, TAIL, HEAD), z3.IntVal(0))
    y = z3.Const("y", NODE)
    new = [HEAD, TAIL]
    pre = _world() + [formula for _name, formula in invariants(joined, ghost)]
    pre += [formula for _name, formula in lemmas(joined, ghost)]
    pre += [z3.And(heap.nxt[s] == NONE, heap.prv[s] == NONE) for s in new]
    pre.append(
        _forall(
            [y],
            z3.And(*[z3.And(heap.nxt[y] != s, heap.prv[y] != s) for s in new]),
            patterns=[heap.nxt[y], heap.prv[y]],
        )
    )
    return pre, ghost


def lemma_obligations() -> list[Obligation]:
    """Each lemma follows from the invariants on every queue."""
    heap, ghost = symbolic_state()
    healthy = tuple(_world() + [formula for _name, formula in invariants(heap, ghost)])
    return [
        Obligation(f"lemma: {name}", "specs/proof/heap.py", healthy, formula)
        for name, formula in lemmas(heap, ghost)
    ]


def prove_operation(
    name: str,
    queue_class: type = FreeBlockQueue,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
    unroll: int | None = None,
) -> list[Obligation]:
    """Translate ``queue_class.name`` and list its obligations: the code's, and the model's.

    ``unroll`` runs loops for at most that many rounds instead of cutting them with their
    invariants (see :func:`find_counterexample`).
    """
    operation = OPERATIONS[name]
    heap, ghost = symbolic_state()
    if operation.fresh:
        pre, ghost = _fresh_queue(heap)
    else:
        pre = _world() + [formula for _name, formula in invariants(heap, ghost)]
        # The lemmas are proved once, by lemma_obligations(), and assumed here.
        pre += [formula for _name, formula in lemmas(heap, ghost)]
    args: list[Any] = []  # what the method receives
    spec_args: list[Any] = []  # what the model's cases read
    lists: dict[int, tuple[Any, Any]] = {}
    for kind in operation.arguments:
        if kind in ("block", "object"):
            block = z3.Const("block", NODE)
            if kind == "block":
                pre.append(block != NONE)  # assumed: a block, not None
            args.append(block)
            spec_args.append(block)
        elif kind == "count":
            count = z3.Int("count")  # assumed: exactly an int
            args.append(count)
            spec_args.append(count)
        else:  # a batch: assumed exactly a list, of blocks
            items, length = z3.Array("batch", z3.IntSort(), NODE), z3.Int("length")
            j = z3.Int("j")
            pre.append(length >= 0)
            pre.append(
                _forall(
                    [j],
                    z3.Implies(z3.And(j >= 0, j < length), items[j] != NONE),
                    patterns=[items[j]],
                )
            )
            if operation.fresh:
                # The caller's list existed before the call: the new sentinels are not in it.
                pre.append(
                    _forall(
                        [j],
                        z3.Implies(
                            z3.And(j >= 0, j < length), z3.And(items[j] != HEAD, items[j] != TAIL)
                        ),
                        patterns=[items[j]],
                    )
                )
            lists[0] = (items, length)
            args.append(ListRef(0))
            spec_args.append((items, length))
    if operation.precondition is not None:
        pre.append(operation.precondition(ghost, spec_args))
    translator = Translator(queue_class, loop_invariants or LOOP_INVARIANTS, ghost, unroll)
    if operation.fresh:
        translator.allocations = [HEAD, TAIL]  # Sentinel("head"), then Sentinel("tail")
    start = State(tuple(pre), {}, heap, lists)
    outcomes = translator.run(name, args, start)
    goals = list(translator.obligations)
    for case in operation.cases(ghost, spec_args):
        for outcome in outcomes:
            hypotheses = (*outcome.state.path, case.condition)
            for goal_name, goal in _case_goals(case, outcome, heap, ghost, operation.fresh):
                goals.append(
                    Obligation(f"{name}: {case.name}: {goal_name}", outcome.where, hypotheses, goal)
                )
    return goals


def obligations(
    name: str,
    queue_class: type = FreeBlockQueue,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
) -> list[Obligation]:
    """The obligations of operation ``name`` on ``queue_class``, of ``"lemmas"``, or of
    ``"_walk"`` (each step of the walk that ``__iter__`` and ``iter_blocks_after`` return)."""
    if name == "lemmas":
        return lemma_obligations()
    if name == WALK:
        return walk_obligations(queue_class, loop_invariants or LOOP_INVARIANTS)
    return prove_operation(name, queue_class, loop_invariants)
