"""The invariants that cut the loops of the operations, the queries and the undo."""

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
from specs.proof.walks import walk_invariant

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


def _contains_walk(view: LoopView) -> Any:
    """``__contains__``'s walk after k rounds: ``node`` is the (k + 1)-th node of the chain,
    and none of the first k blocks is the one sought. No link is written."""
    at, n, k = view.ghost.at, view.ghost.n, view.k
    j = z3.Int("j")
    return z3.And(
        k <= n,
        view.local("node") == at[k + 1],
        _forall(
            [j],
            z3.Implies(z3.And(j >= 1, j <= k), at[j] != view.local("block")),
            patterns=[at[j]],
        ),
    )


def _collect(view: LoopView) -> Any:
    """``get_all_free_blocks``' walk after k rounds: ``found`` holds the first k blocks, front
    first, and ``block`` is the next node of the chain. No link is written."""
    at, n, k = view.ghost.at, view.ghost.n, view.k
    items, length = view.items("found")
    j = z3.Int("j")
    return z3.And(
        k <= n,
        view.local("block") == at[k + 1],
        length == k,
        _forall([j], z3.Implies(z3.And(j >= 0, j < k), items[j] == at[j + 1])),
    )


def _batch_link(view: LoopView) -> Any:
    """append_n's and prepend_n's loop after k rounds: ``batch[:k]`` is staged off ``staging``.

    ``staging`` is ``last`` at the loop's entry, the queue's tail (see "Batches" in
    ``verified_queue/queue.py``): the batch hangs off its outer link. Each block staged was
    admissible and is new (``index`` numbers them: no repeat), and is linked behind the
    previous one, the first behind ``staging``, whose outer link names it; ``last`` is the last
    staged, and its forward link is still None; ``staging``'s back link is as it was, and
    nothing else changed: the queue itself is not written until the join after the loop.
    """
    items, _length = view.items("batch")
    k, pos = view.k, view.ghost.pos
    staging = view.entry.env["last"]
    index = view.extra["index"]
    now, entry = view.now.heap, view.entry.heap
    j, y = z3.Int("j"), z3.Const("y", NODE)
    linked = z3.And(
        _admissible(view.ghost, items[j]),
        index[items[j]] == j,
        now.prv[items[j]] == z3.If(j == 0, staging, items[j - 1]),
        now.nxt[items[j]] == z3.If(j + 1 < k, items[j + 1], NONE),
    )
    return z3.And(
        pos[staging] >= 0,
        view.local("last") == z3.If(k == 0, staging, items[k - 1]),
        now.nxt[staging] == z3.If(k == 0, entry.nxt[staging], items[0]),
        now.prv[staging] == entry.prv[staging],
        _forall([j], z3.Implies(z3.And(j >= 0, j < k), linked), patterns=[items[j]]),
        _forall(
            [y],
            z3.Or(index[y] == -1, z3.And(index[y] >= 0, index[y] < k, items[index[y]] == y)),
            patterns=[index[y]],
        ),
        _forall(
            [y],
            z3.Implies(
                z3.And(index[y] == -1, y != staging),
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

    ``unstage`` (:mod:`verified_queue._undo`) and its planted copies walk back to
    ``staging``, the tail the batch was staged off.
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
        staging = view.local(start)
        now, raised = view.now.heap, view.entry.heap
        j, y = z3.Int("j"), z3.Const("y", NODE)
        return z3.And(
            t <= k,
            view.local("block") == z3.If(t == k, staging, items[k - 1 - t]),
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
    ("unstage", 0): walk_back("staging"),
    ("FreeBlockQueue.__contains__", 0): _contains_walk,
    ("FreeBlockQueue.get_all_free_blocks", 0): _collect,
    ("FreeBlockQueue._walk", 0): walk_invariant,
}
