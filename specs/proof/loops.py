"""The invariants that cut the loops of popleft_n, the two batch operations and their undo."""

from __future__ import annotations

from typing import Any

import z3  # type: ignore[import-untyped, import-not-found, unused-ignore]

from specs.proof.cases import (
    _admissible,
)
from specs.proof.heap import (
    NODE,
    NONE,
    _forall,
)
from specs.proof.state import (
    ListRef,
    LoopInvariant,
    LoopSpec,
    LoopView,
    Unsupported,
)

__all__ = ["LOOP_INVARIANTS", "walk_back"]


def _popleft_n_detach(view: LoopView) -> Any:
    """popleft_n's loop after k rounds: ``popped[:k]`` holds the first k blocks, now detached.

    ``block`` is the next block of the chain; every other link is as it was at the loop's entry.
    """
    at, pos = view.ghost.at, view.ghost.pos
    items, _length = view.items("popped")
    now, entry = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    done = z3.And(pos[y] >= 1, pos[y] <= view.k)
    return z3.And(
        view.local("block") == at[view.k + 1],
        _forall([j], z3.Implies(z3.And(j >= 0, j < view.k), items[j] == at[j + 1])),
        _forall(
            [y],
            z3.If(
                done,
                z3.And(now.nxt[y] == NONE, now.prv[y] == NONE),
                z3.And(now.nxt[y] == entry.nxt[y], now.prv[y] == entry.prv[y]),
            ),
            patterns=[now.nxt[y], now.prv[y]],
        ),
    )


def _batch_link(view: LoopView) -> Any:
    """append_n's and prepend_n's loop after k rounds: ``batch[:k]`` is linked after ``before``.

    Each of them was admissible and is new (``index`` numbers them: no repeat), and is linked
    behind the previous one; ``last`` is the last linked; the last one's forward link is still
    None and the block after the run still names ``before``: nothing else changed.
    """
    items, _length = view.items("batch")
    k, pos = view.k, view.ghost.pos
    before = view.entry.env["last"]
    index = view.extra["index"]
    now, entry = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    linked = z3.And(
        _admissible(view.ghost, items[j]),
        index[items[j]] == j,
        now.prv[items[j]] == z3.If(j == 0, before, items[j - 1]),
        now.nxt[items[j]] == z3.If(j + 1 < k, items[j + 1], NONE),
    )
    return z3.And(
        pos[before] >= 0,
        view.local("last") == z3.If(k == 0, before, items[k - 1]),
        now.nxt[before] == z3.If(k == 0, entry.nxt[before], items[0]),
        now.prv[before] == entry.prv[before],
        _forall([j], z3.Implies(z3.And(j >= 0, j < k), linked), patterns=[items[j]]),
        _forall(
            [y],
            z3.Or(index[y] == -1, z3.And(index[y] >= 0, index[y] < k, items[index[y]] == y)),
            patterns=[index[y]],
        ),
        _forall(
            [y],
            z3.Implies(
                z3.And(index[y] == -1, y != before),
                z3.And(now.nxt[y] == entry.nxt[y], now.prv[y] == entry.prv[y]),
            ),
            patterns=[now.nxt[y], now.prv[y]],
        ),
    )


_BATCH_LOOP = LoopSpec(
    _batch_link,
    initial=lambda _view: {"index": z3.K(NODE, z3.IntVal(-1))},
    step=lambda view: {"index": z3.Store(view.extra["index"], view.target, view.k)},
)


def walk_back(start: str) -> LoopInvariant:
    """The invariant of an undo's walk back from a failed batch's ``last`` to its local ``start``.

    ``_unstage`` walks back to ``staging``; the planted copies of the design that linked a
    batch straight onto the chain walk back to ``before_run``.
    """

    def walked(view: LoopView) -> Any:
        """The walk after t rounds: the last t blocks the failed batch linked are detached.

        The batch loop's round count ``$k`` and numbering ``$index`` at the raise say
        which blocks those are.
        """
        ref = view.outer("batch")
        if not isinstance(ref, ListRef):
            raise Unsupported("the undo's caller has no batch list")
        items, _length = view.now.lists[ref.ident]
        k, index, t = view.outer("$k"), view.outer("$index"), view.k
        before = view.local(start)
        now, raised = view.now.heap, view.entry.heap
        j, y = z3.Int("j"), z3.Const("y", NODE)
        return z3.And(
            t <= k,
            view.local("block") == z3.If(t == k, before, items[k - 1 - t]),
            _forall(
                [j],
                z3.Implies(
                    z3.And(k - t <= j, j < k),
                    z3.And(now.nxt[items[j]] == NONE, now.prv[items[j]] == NONE),
                ),
                patterns=[items[j]],
            ),
            _forall(
                [y],
                z3.Implies(
                    z3.Not(z3.And(index[y] >= 0, index[y] >= k - t)),
                    z3.And(now.nxt[y] == raised.nxt[y], now.prv[y] == raised.prv[y]),
                ),
                patterns=[now.nxt[y], now.prv[y]],
            ),
        )

    return walked


#: The loop invariants, by (function, loop's ordinal in it); each is checked, not trusted.
LOOP_INVARIANTS: dict[tuple[str, int], LoopInvariant | LoopSpec] = {
    ("FreeBlockQueue.popleft_n", 0): _popleft_n_detach,
    ("FreeBlockQueue.append_n", 0): _BATCH_LOOP,
    ("FreeBlockQueue.prepend_n", 0): _BATCH_LOOP,
    ("_unstage", 0): walk_back("staging"),
}
