"""What the Hypothesis stateful machines share: one call on a queue and on its model, draws.

``_agree`` runs a call on a queue and on its list model and fails unless both give the same
outcome; ``construct_and_empty`` does so for the constructor; ``_pick``, ``_pick_distinct``
and ``_held_and_maybe_free`` draw blocks. The machines are in ``test_stateful_queue.py``
(the queue against its model), ``test_stateful_checked.py`` (check mode misused) and
``test_stateful_shared_pool.py`` (several queues over one pool).

Linked and detached blocks are drawn from the model's current state rather than from
Hypothesis bundles: ``popleft`` takes blocks out of the queue without the rule choosing them,
and a bundle cannot drop a value it did not hand out, so a bundle of linked blocks would go
stale. Every machine is also run against each planted bug and must fail.

The profile (``ci`` derandomized in CI, ``dev`` locally, ``thorough`` for long runs) comes
from ``conftest.py``; the planted-bug runs use fixed settings so they fail the same way on
every machine.

The helpers fail with ``raise AssertionError``, not ``assert``: this is no test module, so
pytest does not rewrite its asserts, and ``python -O`` (``tox -e optimized``) would drop them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import run_state_machine_as_test as _run_state_machine_as_test

from specs.model import ListModel, Membership, SpecBlock
from specs.structure import Outcome, mismatch, outcome_difference, outcome_of
from verified_queue.block import Block, Sentinel
from verified_queue.queue import FreeBlockQueue

# Typed here because older Hypothesis releases leave it unannotated: a call through this
# name type-checks the same against every release the test extra admits.
run_machine: Callable[..., None] = _run_state_machine_as_test

#: The batch operations: they take the same batches and refuse the same misuse.
BATCH = st.sampled_from(["append_n", "prepend_n"])

# Fixed settings for the planted-bug runs: the same examples everywhere, no shrinking (only
# the failure matters), enough examples that every bug is met.
BUG_HUNT = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    stateful_step_count=40,
    phases=(Phase.explicit, Phase.generate),
    print_blob=False,
)


T = TypeVar("T")


def _agree(
    label: str,
    queue_call: Callable[[], object],
    model_call: Callable[[], object],
    *,
    messages: bool = True,
) -> Outcome:
    """Run one call on the queue and on the model; fail unless both give the same outcome.

    An error must match in type and, with ``messages``, in message: a refusal that names the
    wrong call is a bug.

    Returns the queue's outcome (its ``error`` is set when both rejected the call).
    """
    want = outcome_of(model_call)
    got = outcome_of(queue_call)
    problem = outcome_difference(got, want, messages=messages)
    if problem is not None:
        raise AssertionError(f"{label}: {problem}")
    return got


def _pick(data: st.DataObject, items: Sequence[T], label: str) -> T:
    """Draw one of ``items`` by index (Hypothesis never hashes or compares the blocks)."""
    return items[data.draw(st.integers(0, len(items) - 1), label=f"{label} (index)")]


def _pick_distinct(
    data: st.DataObject, items: Sequence[T], label: str, *, min_size: int = 0, max_size: int
) -> list[T]:
    """Draw a list of distinct ``items`` (by position), in any order."""
    if not items:
        return []
    indices = data.draw(
        st.lists(st.integers(0, len(items) - 1), unique=True, min_size=min_size, max_size=max_size),
        label=f"{label} (indices)",
    )
    return [items[index] for index in indices]


def _held_and_maybe_free(
    data: st.DataObject,
    held: Sequence[Block],
    models: Sequence[ListModel[SpecBlock]],
    max_size: int,
) -> list[Block]:
    """Distinct held blocks and, maybe, the front block of one of the non-empty ``models``."""
    batch: list[Block] = list(_pick_distinct(data, held, "batch", max_size=max_size))
    holders = [model for model in models if model]
    with_free_block = data.draw(st.booleans(), label="with a free block")
    if holders and with_free_block:
        batch.append(_pick(data, holders, "holder").blocks[0])
    return batch


def construct_and_empty(
    queue_type: type[FreeBlockQueue[Any]],
    batch: list[Block],
    as_iterator: bool,
    membership: Membership,
    universe: Sequence[Block],
) -> None:
    """Build a queue from ``batch`` (a list, or an iterator) beside its model, then empty both.

    The constructor must refuse what the model refuses, leaving every block as it was, and
    otherwise hold the batch as the model does; the new queue is then emptied with
    ``popleft_n``, so every block it took is detached again.
    """
    label = f"{queue_type.__name__}({'iter(' if as_iterator else ''}{batch!r})"
    want = outcome_of(lambda: ListModel(batch, membership=membership))
    got = outcome_of(lambda: queue_type(iter(batch) if as_iterator else list(batch)))
    if want.error is not None or got.error is not None:
        problem = outcome_difference(got, want)
        if problem is not None:
            raise AssertionError(f"{label}: {problem}")
    if isinstance(got.result, FreeBlockQueue) and isinstance(want.result, ListModel):
        built, model = got.result, want.result
        problem = mismatch(built, model, universe)
        if problem is not None:
            raise AssertionError(f"{label}: {problem}")
        size = len(model)
        _agree(f"{label}.popleft_n", lambda: built.popleft_n(size), lambda: model.popleft_n(size))
    for block in batch:
        if not membership.is_linked(block) and not isinstance(block, Sentinel):
            if block.prev_free_block is not None:
                raise AssertionError(f"{label} left {block!r} linked")
            if block.next_free_block is not None:
                raise AssertionError(f"{label} left {block!r} linked")


def _machine_for(
    machine: type[RuleBasedStateMachine], queue_type: type[FreeBlockQueue[Any]]
) -> type[RuleBasedStateMachine]:
    return type(
        f"{machine.__name__}On{queue_type.__name__}", (machine,), {"queue_type": queue_type}
    )
