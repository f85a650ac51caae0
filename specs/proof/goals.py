"""The obligations of an operation: the translated code's own, and the model's for each case."""

from __future__ import annotations

from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.proof.cases import (
    OPERATIONS,
    Case,
)
from specs.proof.heap import (
    NODE,
    NONE,
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
from verified_queue.queue import FreeBlockQueue

__all__ = ["lemma_obligations", "obligations", "prove_operation"]


def _case_goals(case: Case, outcome: Outcome, heap: Heap, ghost: Ghost) -> list[tuple[str, Any]]:
    """What the code's ``outcome`` must satisfy where the model's ``case`` applies."""
    after = outcome.state.heap
    if case.raises is not None:
        expected = case.raises.__name__
        if outcome.kind != "raise":
            return [(f"raises {expected} as the model does (the code returns)", z3.BoolVal(False))]
        return [
            (
                f"raises {expected} as the model does (the code raises {outcome.value.__name__})",
                z3.BoolVal(outcome.value is case.raises),
            ),
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
    pre = _world() + [formula for _name, formula in invariants(heap, ghost)]
    # The lemmas are proved once, by lemma_obligations(), and assumed here.
    pre += [formula for _name, formula in lemmas(heap, ghost)]
    args: list[Any] = []  # what the method receives
    spec_args: list[Any] = []  # what the model's cases read
    lists: dict[int, tuple[Any, Any]] = {}
    for kind in operation.arguments:
        if kind == "block":
            block = z3.Const("block", NODE)
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
            lists[0] = (items, length)
            args.append(ListRef(0))
            spec_args.append((items, length))
    if operation.precondition is not None:
        pre.append(operation.precondition(ghost, spec_args))
    translator = Translator(queue_class, loop_invariants or LOOP_INVARIANTS, ghost, unroll)
    start = State(tuple(pre), {}, heap, lists)
    outcomes = translator.run(name, args, start)
    goals = list(translator.obligations)
    for case in operation.cases(ghost, spec_args):
        for outcome in outcomes:
            hypotheses = (*outcome.state.path, case.condition)
            for goal_name, goal in _case_goals(case, outcome, heap, ghost):
                goals.append(
                    Obligation(f"{name}: {case.name}: {goal_name}", outcome.where, hypotheses, goal)
                )
    return goals


def obligations(
    name: str,
    queue_class: type = FreeBlockQueue,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
) -> list[Obligation]:
    """The obligations of operation ``name`` on ``queue_class``, or of ``"lemmas"``."""
    if name == "lemmas":
        return lemma_obligations()
    return prove_operation(name, queue_class, loop_invariants)
