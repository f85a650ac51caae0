"""The bounded-exhaustive proof: every state of two queues over six blocks, and no vacuity."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from specs.exhaustive import check_every_state, count_states, expected_counts, main
from specs.model import SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from verified_queue._messages import already_linked
from verified_queue.block import Block, Sentinel
from verified_queue.errors import EmptyQueueError
from verified_queue.queue import FreeBlockQueue

ROOT = Path(__file__).resolve().parents[2]


def test_every_operation_from_every_state_of_six_blocks() -> None:
    """Every operation from each of the 2622 states of a six-block universe matches the model."""
    report = check_every_state(blocks=6, max_batch=3, jobs=2)
    print(report.summary())
    assert report.counterexample is None, report.counterexample
    expected = expected_counts(6, 3)
    assert (report.transitions, report.queries, report.outside_contract) == (
        expected.transitions,
        expected.queries,
        expected.outside_contract,
    )
    page = ROOT / "docs" / "verification.md"
    if page.exists():  # the refusals the verification page states for this very run
        refused = re.search(r"([\d,]+) transitions \(([\d,]+) refused\)", page.read_text())
        assert refused is not None
        assert int(refused[1].replace(",", "")) == report.transitions
        assert int(refused[2].replace(",", "")) == report.rejected
    assert report.states == count_states(6) == 2622
    assert report.two_queue_states == 3**6 - 2**6 == 665
    # At least one call of every kind per state (both batch operations with every batch of
    # three, iteration from every cursor), and misuse among them.
    assert report.transitions > report.states * (1 + 6 * 2 + 2 * 6**3 + 6 + 4)
    assert 0 < report.rejected < report.transitions
    assert report.queries >= report.states * 6
    # remove() and iter_blocks_after() of each block of B: out of the production contract.
    assert report.outside_contract == 2 * sum(
        math.comb(6, queued) * math.comb(6 - queued, other) * other
        for queued in range(7)
        for other in range(1, 7 - queued)
    )


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_exhaustive_check_catches_planted_bug(bug: str) -> None:
    """The exhaustive check reports a counterexample for every planted bug."""
    report = check_every_state(blocks=6, max_batch=3, queue_type=PLANTED_BUGS[bug])
    assert report.counterexample is not None, f"{bug} passed: {report.summary()}"


def _enumerated_states(blocks: int) -> int:
    """Count the states by assigning each block to A, B or neither, then ordering A."""
    count = 0
    for places in itertools.product("AB-", repeat=blocks):
        queued = places.count("A")
        if "B" in places:
            count += 1  # a two-queue state: each queue in ascending order
        else:
            count += math.factorial(queued)  # B empty: every order of A
    return count


@pytest.mark.parametrize(("blocks", "max_batch"), [(0, 0), (1, 3), (2, 2), (3, 2), (3, 3), (4, 1)])
def test_expected_counts_are_a_runs(blocks: int, max_batch: int) -> None:
    """expected_counts, computed without a run, gives what a run reports (all but refusals)."""
    report = check_every_state(blocks=blocks, max_batch=max_batch)
    expected = expected_counts(blocks, max_batch)
    assert report.counterexample is None
    for name in ("states", "two_queue_states", "transitions", "queries", "outside_contract"):
        assert getattr(expected, name) == getattr(report, name), name


@pytest.mark.parametrize("blocks", range(5))
def test_state_count_matches_enumeration(blocks: int) -> None:
    """count_states(N) equals the states counted directly, and the check covers them all."""
    assert count_states(blocks) == _enumerated_states(blocks)
    report = check_every_state(blocks=blocks, max_batch=1)
    assert report.states == count_states(blocks)
    assert report.two_queue_states == 3**blocks - 2**blocks


def test_split_run_covers_the_same_states() -> None:
    """Splitting the states over processes checks exactly what one process checks."""
    alone = check_every_state(blocks=4, max_batch=2)
    split = check_every_state(blocks=4, max_batch=2, jobs=2)
    assert (
        split.states,
        split.two_queue_states,
        split.transitions,
        split.rejected,
        split.outside_contract,
        split.queries,
    ) == (
        alone.states,
        alone.two_queue_states,
        alone.transitions,
        alone.rejected,
        alone.outside_contract,
        alone.queries,
    )
    assert split.counterexample is None


def test_command_line_reports_and_fails_on_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m specs.exhaustive`` prints what it checked and exits 1 on a counterexample."""
    assert main(["--blocks", "3", "--max-batch", "2"]) == 0
    assert "35 states (19 with a second non-empty queue)" in capsys.readouterr().out
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


# --------------------------------------------------------------- a second, non-empty queue


class _AppendRefusesOnlyOwnBlocks(FreeBlockQueue[Block]):
    """``append`` takes a block's membership of this queue for the double-free test.

    A block of this queue and a sentinel are refused; a block linked in another queue is
    accepted and relinked, which corrupts that queue.
    """

    __slots__ = ()

    def append(self, block: Block) -> None:
        if isinstance(block, Sentinel) or block in self:
            raise already_linked("append", block)
        block.prev_free_block = block.next_free_block = None
        super().append(block)


class _RefusalDetachesForeignBlock(FreeBlockQueue[Block]):
    """``append`` refuses a linked block, but first clears its links if it is not in this queue.

    The outcome is the model's; only the other queue, whose block lost its links, shows it.
    """

    __slots__ = ()

    def append(self, block: Block) -> None:
        if block.prev_free_block is not None and not isinstance(block, Sentinel):
            if block not in self:
                block.prev_free_block = block.next_free_block = None
            raise already_linked("append", block)
        super().append(block)


class _ConstructorDropsThirdBlock(FreeBlockQueue[SpecBlock]):
    """The constructor links only the first two blocks of its batch."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[SpecBlock] = ()) -> None:
        super().__init__(list(blocks)[:2])


class _ConstructorAcceptsSentinel(FreeBlockQueue[Block]):
    """The constructor drops any sentinel from its batch instead of refusing the batch."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        super().__init__(block for block in blocks if not isinstance(block, Sentinel))


@pytest.mark.parametrize(
    ("variant", "counterexample"),
    [
        (
            _AppendRefusesOnlyOwnBlocks,
            "from A=[], B=[SpecBlock(0)], append(SpecBlock(0)): returned None, "
            "the model raised AlreadyInQueueError",
        ),
        (
            _RefusalDetachesForeignBlock,
            "from A=[], B=[SpecBlock(0)], append(SpecBlock(0)): SpecBlock(0) of queue B "
            "links back to None and on to None, not to B.head and B.tail",
        ),
        (
            _ConstructorDropsThirdBlock,
            "with A=[], B=[], _ConstructorDropsThirdBlock([SpecBlock(0), SpecBlock(1), "
            "SpecBlock(0)]): returned <_ConstructorDropsThirdBlock with 2 free blocks>, "
            "the model raised AlreadyInQueueError",
        ),
        (
            _ConstructorAcceptsSentinel,
            "with A=[], B=[], _ConstructorAcceptsSentinel([A.head]): returned "
            "<_ConstructorAcceptsSentinel with 0 free blocks>, the model raised "
            "AlreadyInQueueError",
        ),
    ],
)
def test_bugs_only_the_wider_coverage_shows(
    variant: type[FreeBlockQueue[Any]], counterexample: str
) -> None:
    """A block of a non-empty second queue, a constructor batch of max_batch blocks and a
    sentinel in a constructor batch each expose a bug that no other call of the check shows."""
    report = check_every_state(blocks=3, max_batch=3, queue_type=variant)
    assert report.counterexample == counterexample


# --------------------------------------------------------------- crashes are counterexamples


class _RemoveDividesByZero(FreeBlockQueue[SpecBlock]):
    """``remove`` crashes with an exception no queue operation may raise."""

    __slots__ = ()

    def remove(self, block: SpecBlock) -> None:
        raise ZeroDivisionError(f"remove({block!r}) divided by zero")


class _Unprintable:
    """A value whose repr raises, so describing it crashes the comparison."""

    def __repr__(self) -> str:
        raise RuntimeError("this value cannot be printed")


class _PopleftReturnsUnprintable(FreeBlockQueue[SpecBlock]):
    """``popleft`` of an empty queue returns a value that the report cannot print."""

    __slots__ = ()

    def popleft(self) -> SpecBlock:
        if not self.num_free_blocks:
            return _Unprintable()  # type: ignore[return-value]  # the planted crash
        return super().popleft()


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        (
            _RemoveDividesByZero,
            "from A=[], B=[], remove(SpecBlock(0)): the call crashed with ZeroDivisionError: "
            "remove(SpecBlock(0)) divided by zero at test_exhaustive.py:",
        ),
        (
            _PopleftReturnsUnprintable,
            "from A=[], B=[], popleft(): the check crashed with RuntimeError: this value "
            "cannot be printed at test_exhaustive.py:",
        ),
    ],
)
def test_a_crash_is_reported_as_a_counterexample(
    variant: type[FreeBlockQueue[SpecBlock]], expected: str
) -> None:
    """An exception in the operation or in the comparison ends the run with a counterexample."""
    report = check_every_state(blocks=2, max_batch=1, queue_type=variant)
    assert report.counterexample is not None
    assert report.counterexample.startswith(expected), report.counterexample
    assert "COUNTEREXAMPLE: from A=[], B=[]" in report.summary()


class _CannotBeBuilt(FreeBlockQueue[Block]):
    """A queue whose constructor always crashes, so the check cannot even set up."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        raise KeyError(f"no queue of {type(blocks).__name__}")


def test_a_queue_that_cannot_be_built_is_a_counterexample() -> None:
    """A crash while setting up the check is reported, not raised."""
    report = check_every_state(blocks=1, max_batch=1, queue_type=_CannotBeBuilt)
    assert report.counterexample is not None
    assert report.counterexample.startswith("setting up the check crashed with KeyError")


def test_the_tox_command_runs_over_worker_processes() -> None:
    """``python -I specs/__main__.py exhaustive --jobs 2``, as tox runs it, ends with a verdict."""
    script = Path(__file__).resolve().parents[2] / "specs" / "__main__.py"
    done = subprocess.run(
        [sys.executable, "-I", str(script), "exhaustive", "--blocks", "3", "--jobs", "2"],
        cwd=Path(__file__).anchor,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("no counterexample")
