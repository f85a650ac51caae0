"""Running the proof: z3 on each obligation, a bounded search for a counterexample, a report."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.planted_bugs import PLANTED_BUGS
from specs.proof.bounded import (
    COPY_BLOCKS,
    FAULT_BATCH,
    FAULT_BLOCKS,
    BoundedReport,
    check_copy_and_pickle,
    check_faults,
)
from specs.proof.cases import (
    OPERATIONS,
)
from specs.proof.goals import (
    WALK,
    obligations,
    prove_operation,
)
from specs.proof.heap import (
    _X,
    HEAD,
    IS_SENTINEL,
    LINKED_ELSEWHERE,
    NODE,
    NONE,
    TAIL,
    Ghost,
    Heap,
    symbolic_state,
)
from specs.proof.loops import LOOP_INVARIANTS
from specs.proof.state import (
    LoopInvariant,
    LoopSpec,
    Obligation,
    Unsupported,
)
from specs.proof.walks import find_walk_counterexample
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "PROVED",
    "Result",
    "check",
    "concrete_queue",
    "find_counterexample",
    "main",
    "prove",
]

#: What is proved for every size, one line each: the lemmas, every operation, the walk's steps.
PROVED = ("lemmas", *OPERATIONS, WALK)


@dataclass
class Result:
    """The verdict on one obligation."""

    operation: str
    name: str
    where: str
    verdict: str  # "proved", "counterexample" or "unknown"
    seconds: float
    counterexample: str = ""


def _describe_model(model: Any) -> str:
    """The sizes and the argument of a counterexample, in one line."""
    heap, ghost = symbolic_state()
    names = {declaration.name() for declaration in model.decls()}
    shown = [f"len(queue)={model.eval(ghost.n, model_completion=True)}"]
    shown.append(f"num_free_blocks={model.eval(heap.num, model_completion=True)}")
    if "block" in names:
        where = model.eval(ghost.pos[z3.Const("block", NODE)], model_completion=True)
        shown.append(f"block at position {where} (0 head, -1 outside the queue)")
    for argument in ("count", "length"):
        if argument in names:
            shown.append(f"{argument}={model.eval(z3.Int(argument))}")
    return ", ".join(shown)


def concrete_queue(size: int, heap: Heap, ghost: Ghost) -> list[Any]:
    """Facts that pin the symbolic state to one queue of ``size`` blocks ``b1``, ``b2``, ...

    The universe is the chain, two detached blocks ``d1`` and ``d2``, and None; the only
    sentinels are this queue's, no block is in another queue. Under these facts z3 decides the
    obligations at once, where it may time out searching a model over all sizes.
    """
    blocks = [z3.Const(f"b{i}", NODE) for i in range(1, size + 1)]
    detached = [z3.Const(f"d{i}", NODE) for i in (1, 2)]
    chain = [HEAD, *blocks, TAIL]
    at, pos = z3.K(z3.IntSort(), TAIL), z3.K(NODE, z3.IntVal(-1))
    following, preceding = z3.K(NODE, NONE), z3.K(NODE, NONE)
    for index, member in enumerate(chain):
        at, pos = z3.Store(at, index, member), z3.Store(pos, member, index)
        if index + 1 < len(chain):
            following = z3.Store(following, member, chain[index + 1])
            preceding = z3.Store(preceding, chain[index + 1], member)
    x = _X
    universe = [NONE, *chain, *detached]
    return [
        z3.Distinct(*universe),
        z3.ForAll([x], z3.Or([x == member for member in universe])),
        z3.ForAll([x], IS_SENTINEL(x) == z3.Or(x == HEAD, x == TAIL)),
        z3.ForAll([x], z3.Not(LINKED_ELSEWHERE(x))),
        ghost.at == at,
        ghost.pos == pos,
        ghost.n == size,
        heap.nxt == following,
        heap.prv == preceding,
        heap.num == size,
    ]


def find_counterexample(
    name: str,
    queue_class: type = FreeBlockQueue,
    sizes: Iterable[int] = range(4),
    rounds: int = 3,
    timeout_ms: int = 5_000,
) -> Result | None:
    """Search a concrete counterexample: queues of each of ``sizes``, loops of up to ``rounds``.

    Where the proof over all sizes reports an obligation unproved because z3 ran out of time
    building a model, this bounded search usually finds one at once. Loops run instead of
    being cut, so the loop invariants play no part: a counterexample found here is an
    execution of the code (up to the assumptions) that the model disagrees with.
    """
    if name == WALK:
        found_step = find_walk_counterexample(queue_class, LOOP_INVARIANTS, rounds=rounds)
        if found_step is None:
            return None
        return Result(name, found_step.name, found_step.where, "counterexample", 0.0, "")
    heap, ghost = symbolic_state()
    fresh = OPERATIONS[name].fresh
    for size in [0] if fresh else sizes:
        # The constructor starts from no queue: only the universe is pinned, every block in it
        # detached (its new sentinels HEAD and TAIL among them, unlinked).
        facts = (
            concrete_queue(size, heap, ghost)[:4] if fresh else concrete_queue(size, heap, ghost)
        )
        if fresh:
            facts += [heap.nxt == z3.K(NODE, NONE), heap.prv == z3.K(NODE, NONE)]
        if "batch" in OPERATIONS[name].arguments:
            # A batch short enough for the unrolled loop, its blocks any of the universe.
            items = z3.K(z3.IntSort(), NONE)
            for index in range(rounds - 1):
                items = z3.Store(items, index, z3.Const(f"item{index}", NODE))
            facts.append(z3.Array("batch", z3.IntSort(), NODE) == items)
            facts.append(z3.Int("length") < rounds)
        for obligation in prove_operation(name, queue_class, unroll=rounds):
            pinned = Obligation(
                obligation.name,
                obligation.where,
                (*obligation.hypotheses, *facts),
                obligation.goal,
            )
            verdict, seconds, detail = check(pinned, timeout_ms)
            if verdict == "counterexample":
                return Result(name, obligation.name, obligation.where, verdict, seconds, detail)
    return None


#: z3's resource units a millisecond of ``timeout_ms`` buys: what z3 spends in a millisecond
#: on this proof's obligations on an idle core (1,600 measured at the slowest, rounded up).
RLIMIT_PER_MS = 2_000
#: How far past ``timeout_ms`` the wall clock may run before z3 stops anyway: a safety net.
WALL_CLOCK_FACTOR = 20


def check(obligation: Obligation, timeout_ms: int = 20_000) -> tuple[str, float, str]:
    """Ask z3 whether ``obligation`` is valid: proved, a counterexample, or unknown.

    ``timeout_ms`` is a budget of z3's resource units (:data:`RLIMIT_PER_MS` a
    millisecond), not of wall-clock time, so that a verdict does not depend on how
    loaded the machine is: the same obligation gets the same answer on a busy core.
    The wall clock stops z3 only far beyond it (:data:`WALL_CLOCK_FACTOR` times).
    """
    solver = z3.Solver()
    solver.set("rlimit", timeout_ms * RLIMIT_PER_MS)
    solver.set("timeout", timeout_ms * WALL_CLOCK_FACTOR)
    solver.add(*obligation.hypotheses)
    solver.add(z3.Not(obligation.goal))
    started = time.perf_counter()
    answer = solver.check()
    seconds = time.perf_counter() - started
    if answer == z3.unsat:
        return "proved", seconds, ""
    if answer == z3.sat:
        return "counterexample", seconds, _describe_model(solver.model())
    return "unknown", seconds, solver.reason_unknown()


def prove(
    names: Iterable[str] = PROVED,
    queue_class: type = FreeBlockQueue,
    stop_at_first_failure: bool = False,
    timeout_ms: int = 20_000,
    loop_invariants: dict[tuple[str, int], LoopInvariant | LoopSpec] | None = None,
) -> list[Result]:
    """Check every obligation of ``names`` (operations, ``"lemmas"``, ``"_walk"``); one each.

    ``loop_invariants`` replaces :data:`LOOP_INVARIANTS` (a planted bug's loops have names of
    their own).
    """
    results: list[Result] = []
    for name in names:
        for obligation in obligations(name, queue_class, loop_invariants):
            verdict, seconds, detail = check(obligation, timeout_ms)
            results.append(
                Result(name, obligation.name, obligation.where, verdict, seconds, detail)
            )
            if stop_at_first_failure and verdict != "proved":
                return results
    return results


def _bounded_line(label: str, bound: str, report: BoundedReport, runs: str) -> str:
    """One line for an exhaustive check: said to be one, with its bound, never "proved"."""
    verdict = (
        f"COUNTEREXAMPLE: {report.counterexample}" if report.counterexample else "no counterexample"
    )
    return (
        f"{label}: exhaustive check up to {bound}, NOT an all-sizes proof: {report.cases} "
        f"cases, {report.runs:,} {runs}: {verdict} in {report.seconds:.2f} s"
    )


def bounded_lines(queue_class: type = FreeBlockQueue) -> tuple[list[str], bool]:
    """Run the two exhaustive checks of :mod:`specs.proof.bounded`: their lines, and success."""
    copies = check_copy_and_pickle(queue_class)
    faults = check_faults(queue_class)
    lines = [
        _bounded_line(
            "copy and pickle (__reduce__, __setstate__, __copy__)",
            f"{COPY_BLOCKS} blocks (every order of every subset, the rest in a second queue)",
            copies,
            "deepcopy, pickle and copy.copy calls",
        ),
        _bounded_line(
            "fault model (an exception at every checkpoint, up to the promised depth)",
            f"queues of {FAULT_BLOCKS} blocks and batches of {FAULT_BATCH}",
            faults,
            "calls with 1 to 3 exceptions (1 to 2 if refused) at every combination of "
            "checkpoints, each as before or as after",
        ),
    ]
    return lines, not (copies.counterexample or faults.counterexample)


#: How each line names what it proves (the method, or the part of the code).
_LABELS = {
    "__init__": "__init__ (the constructor)",
    WALK: "_walk (every step of the walks of __iter__ and iter_blocks_after)",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Prove the lemmas, every method and the walk, one line each; then the exhaustive checks.

    Exit 1 unless all is proved and the exhaustive checks find no counterexample.
    ``--verbose`` lists every obligation with its time; ``--bug NAME`` proves the planted bug
    ``NAME`` of :mod:`specs.planted_bugs` instead of the production queue (and must fail).
    Where the proof fails without a counterexample (z3 ran out of time, or a planted method
    has a loop without an invariant), a bounded search for one follows. ``--no-bounded``
    skips the exhaustive checks (copy and pickle, the fault model).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    queue_class: type = FreeBlockQueue
    if "--bug" in argv:
        queue_class = PLANTED_BUGS[argv[argv.index("--bug") + 1]]
    print(f"proving {queue_class.__module__}.{queue_class.__qualname__} for queues of every size")
    status = 0
    total = 0.0
    for name in PROVED:
        started = time.perf_counter()
        label = _LABELS.get(name, name)
        try:
            results = prove([name], queue_class)
        except Unsupported as error:
            print(f"{label}: not proved: {error}")
            results, failed = [], [Result(name, str(error), "", "unknown", 0.0)]
        else:
            failed = [r for r in results if r.verdict != "proved"]
        elapsed = time.perf_counter() - started
        total += elapsed
        if results:
            slowest = max(results, key=lambda r: r.seconds)
            verdict = "proved" if not failed else "NOT proved"
            print(
                f"{label}: {verdict}, {len(results) - len(failed)}/{len(results)} obligations "
                f"in {elapsed:.2f} s (slowest {slowest.seconds:.2f} s: {slowest.name})"
            )
            for result in results if verbose else failed:
                print(
                    f"  {result.verdict}: {result.name} [{result.where}] {result.seconds:.3f} s"
                    f"{' ' + result.counterexample if result.counterexample else ''}"
                )
        if name != "lemmas" and failed and all(r.verdict == "unknown" for r in failed):
            found = find_counterexample(name, queue_class)
            if found is not None:
                print(
                    f"  counterexample on a queue of at most 3 blocks: {found.name} "
                    f"[{found.where}] {found.counterexample}"
                )
        status |= bool(failed)
    proved = not status
    print(f"total {total:.2f} s: {'every obligation proved' if proved else 'NOT PROVED'}")
    if "--no-bounded" not in argv:
        lines, sound = bounded_lines(queue_class)
        for line in lines:
            print(line)
        status |= not sound
    return status
