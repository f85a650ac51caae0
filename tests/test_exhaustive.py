"""The bounded-exhaustive proof: every state of six blocks in the default run, and no vacuity."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest

from specs.exhaustive import check_every_state, count_states, main
from specs.model import SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from verified_queue.errors import EmptyQueueError
from verified_queue.queue import FreeBlockQueue


def test_every_operation_from_every_state_of_six_blocks() -> None:
    """Every operation from each of the 1957 states of a six-block universe matches the model."""
    report = check_every_state(blocks=6, max_batch=3, jobs=2)
    print(report.summary())
    assert report.counterexample is None, report.counterexample
    assert report.states == count_states(6) == 1957
    # At least one call of every kind per state (both batch operations with every batch of
    # three, iteration from every cursor), and misuse among them.
    assert report.transitions > report.states * (1 + 6 * 2 + 2 * 6**3 + 6 + 4)
    assert 0 < report.rejected < report.transitions
    assert report.queries >= report.states * 6


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_exhaustive_check_catches_planted_bug(bug: str) -> None:
    """The exhaustive check reports a counterexample for every planted bug."""
    report = check_every_state(blocks=6, max_batch=3, queue_type=PLANTED_BUGS[bug])
    assert report.counterexample is not None, f"{bug} passed: {report.summary()}"


@pytest.mark.parametrize("blocks", range(5))
def test_state_count_matches_enumeration(blocks: int) -> None:
    """count_states(N) equals the number of ordered subsets of N blocks, enumerated directly."""
    enumerated = sum(
        1 for size in range(blocks + 1) for _ in itertools.permutations(range(blocks), size)
    )
    assert count_states(blocks) == enumerated
    assert check_every_state(blocks=blocks, max_batch=1).states == enumerated


def test_split_run_covers_the_same_states() -> None:
    """Splitting the states over processes checks exactly what one process checks."""
    alone = check_every_state(blocks=4, max_batch=2)
    split = check_every_state(blocks=4, max_batch=2, jobs=2)
    assert (split.states, split.transitions, split.rejected, split.queries) == (
        alone.states,
        alone.transitions,
        alone.rejected,
        alone.queries,
    )
    assert split.counterexample is None


def test_command_line_reports_and_fails_on_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m specs.exhaustive`` prints what it checked and exits 1 on a counterexample."""
    assert main(["--blocks", "3", "--max-batch", "2"]) == 0
    assert "16 states" in capsys.readouterr().out
    assert main(["--blocks", "3", "--variant", "remove_forgets_count"]) == 1
    assert "COUNTEREXAMPLE" in capsys.readouterr().out


class _TersePopleft(FreeBlockQueue[SpecBlock]):
    """Raises the right error for an empty popleft, but with a message that names nothing."""

    __slots__ = ()

    def popleft(self) -> SpecBlock:
        if not self.num_free_blocks:
            raise EmptyQueueError("empty")
        return super().popleft()


class _UnlabelledSentinels(FreeBlockQueue[SpecBlock]):
    """Labels both sentinels alike, so diagnostics cannot tell the ends apart."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[SpecBlock] = ()) -> None:
        super().__init__(blocks)
        self.fake_free_list_head.role = self.fake_free_list_tail.role = "end"  # type: ignore[attr-defined]  # both are Sentinels


@pytest.mark.parametrize("variant", [_TersePopleft, _UnlabelledSentinels])
def test_exhaustive_check_compares_diagnostics(variant: type[FreeBlockQueue[SpecBlock]]) -> None:
    """Error messages and sentinel labels are part of what the exhaustive check compares."""
    report = check_every_state(blocks=2, max_batch=1, queue_type=variant)
    assert report.counterexample is not None
    assert "model raised" in report.counterexample or "labelled" in report.counterexample
