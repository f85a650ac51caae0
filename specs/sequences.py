"""Every sequence of actions up to a depth, each run from a fresh start: small-scope exhaustion.

The engine of ``specs/exhaustive_counter.py``, ``specs/exhaustive_plugin.py`` and
``specs/exhaustive_trace.py``. A random machine (Hypothesis) samples long histories; this
runs *every* history of at most ``depth`` actions from a finite alphabet, none left out, each
from a new start (:func:`every_sequence`), so that a bug reachable in that many actions is
found for certain. Each action checks what it did against the caller's model as it runs; an
action whose precondition fails in a state is not applied there (the sequence ends before it).

Nothing here asserts: the checks raise ``AssertionError`` themselves, and ``tox -e optimized``
runs the suite under ``-O``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Action", "Report", "every_sequence"]

S = TypeVar("S")


@dataclass(frozen=True)
class Action(Generic[S]):
    """One action: its label, when it may run (``enabled``), and what it does (``apply``).

    ``apply`` does the action on the state and checks the outcome against the model the state
    carries, raising on a disagreement.
    """

    label: str
    apply: Callable[[S], object]
    enabled: Callable[[S], bool] = lambda _state: True


@dataclass(frozen=True)
class Report:
    """What a run covered: the sequences (every prefix counted once) and the actions applied.

    ``counterexample``: the first sequence that failed, and how; ``None`` if none did.
    """

    sequences: int
    steps: int
    counterexample: str | None = None


def every_sequence(
    start: Callable[[], S],
    actions: Sequence[Action[S]],
    depth: int,
    *,
    close: Callable[[S], object] = lambda _state: None,
) -> Report:
    """Run every sequence of at most ``depth`` enabled ``actions``, each from ``start()``.

    Depth first: each sequence is replayed from a new state (a state is not
    copied: the real objects behind it, modules and queues, cannot be), so its checks run on
    exactly that history. ``close`` ends a state (a machine's teardown), failed or not. The
    first failure stops the run and is the report's counterexample.
    """
    sequences = steps = 0
    pending: list[tuple[int, ...]] = [()]
    while pending:
        prefix = pending.pop()
        sequences += 1
        state: S | None = None
        done: list[str] = []
        try:
            state = start()
            for index in prefix:
                action = actions[index]
                done.append(action.label)
                action.apply(state)
                steps += 1
            enabled = (
                [index for index, action in enumerate(actions) if action.enabled(state)]
                if len(prefix) < depth
                else []
            )
        except Exception as error:  # the check's report: any failure is the counterexample
            history = " -> ".join(done) or "(the start)"
            return Report(sequences, steps, f"{history}: {type(error).__name__}: {error}")
        finally:
            if state is not None:
                close(state)
        pending.extend((*prefix, index) for index in reversed(enabled))
    return Report(sequences, steps)
